//! `symbolicate(profile)`.

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use super::napi_fail;
use super::profile::{profile_from_js, JsSymbolTable};

/// Resolves every frame of a profile to a function: its name (demangled),
/// module, source file and line where debug information exists. JIT frames
/// are named from V8's perf map when the process ran with
/// `--perf-basic-prof`. Addresses nothing resolves stay as `0x…`.
///
/// Works on a profile from `stop()` or one read back from a file, as long as
/// the module files are still on disk. Results are cached per module, so a
/// second call is nearly free.
///
/// @throws `EINVAL` if `profile` is not a valid profile object.
#[napi(ts_args_type = "profile: Profile", ts_return_type = "SymbolTable")]
pub fn symbolicate<'env>(env: &'env Env, profile: Unknown<'_>) -> Result<JsSymbolTable<'env>, &'static str> {
    let data = profile_from_js(profile)?;
    let symbols = crate::symbols::symbolicate(&data, &Default::default());
    JsSymbolTable::from_symbols(env, &symbols).map_err(napi_fail)
}
