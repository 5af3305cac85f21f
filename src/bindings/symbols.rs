//! `symbolicate(profile, options)`, and the list of symbol files the
//! download step (`fetchSymbols`, the CLI) asks servers for.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use napi::bindgen_prelude::*;
use napi::{Env, ValueType};
use napi_derive::napi;

use super::formats::{entries, read_machprof, string};
use super::profile::{profile_from_js, JsSymbolTable};
use super::{einval, napi_fail, JsResult};
use crate::symbols::symbol_path::{default_cache_root, SymbolPath};
use crate::symbols::SymbolicateOptions;

const SYMBOL_KEYS: &str = "symbolPath, cacheDir";

/// Where symbol files are looked for (see {@link symbolicate}).
// Only its type is used (for the .d.ts): the functions validate by hand.
#[allow(dead_code)]
#[napi(object, js_name = "SymbolOptions")]
pub struct JsSymbolOptions {
    /// Symbol directories and symbol servers: an array, or one string with
    /// entries separated by `;`. A directory may hold dSYM bundles,
    /// Breakpad `.sym` files (also in the server layout) and ELF debug
    /// files; an `https://` (or `http://`) entry is a symbol server in the
    /// Breakpad layout `<debug file>/<DEBUG ID>/<debug file>.sym`, read
    /// from its download cache (see {@link fetchSymbols}). Default: the
    /// `MACHSAMPLER_SYMBOL_PATH` environment variable.
    #[napi(ts_type = "string | string[]")]
    pub symbol_path: Option<Vec<String>>,
    /// The download cache. Default: `$XDG_CACHE_HOME/machsampler/symbols`,
    /// else `~/Library/Caches/machsampler/symbols` (macOS) or
    /// `~/.cache/machsampler/symbols`.
    pub cache_dir: Option<String>,
}

fn strings(v: &Unknown, what: &str) -> JsResult<Vec<String>> {
    match v.get_type().map_err(napi_fail)? {
        // SAFETY: the type was just checked to be String.
        ValueType::String => Ok(vec![unsafe { v.cast::<String>() }.map_err(napi_fail)?]),
        ValueType::Object if v.is_array().unwrap_or(false) => {
            // SAFETY: checked to be an array just above.
            Vec::<String>::from_unknown(unsafe { v.cast::<Unknown>() }.map_err(napi_fail)?)
                .map_err(|_| einval(format!("{what} must be a string or an array of strings")))
        }
        _ => Err(einval(format!("{what} must be a string or an array of strings"))),
    }
}

/// Reads `{ symbolPath, cacheDir }` (each optional; `undefined` options
/// mean the defaults), the symbol path defaulting to
/// `MACHSAMPLER_SYMBOL_PATH`.
pub(crate) fn symbol_options(options: Unknown, what: &str) -> JsResult<SymbolicateOptions> {
    let mut entries_given: Option<Vec<String>> = None;
    let mut cache_dir: Option<PathBuf> = None;
    for (key, val) in entries(options, what)? {
        match key.as_str() {
            "symbolPath" => entries_given = Some(strings(&val, &format!("{what}.symbolPath"))?),
            "cacheDir" => {
                let dir = string(&val, &format!("{what}.cacheDir"))?;
                if dir.is_empty() {
                    return Err(einval(format!("{what}.cacheDir must be a non-empty string")));
                }
                cache_dir = Some(PathBuf::from(dir));
            }
            _ => return Err(einval(format!("unknown option '{key}'; valid options are {SYMBOL_KEYS}"))),
        }
    }
    build(entries_given, cache_dir)
}

/// The options when none are given: `MACHSAMPLER_SYMBOL_PATH`, the
/// default cache.
pub(crate) fn default_symbol_options() -> JsResult<SymbolicateOptions> {
    build(None, None)
}

fn build(entries: Option<Vec<String>>, cache_dir: Option<PathBuf>) -> JsResult<SymbolicateOptions> {
    let entries = entries.unwrap_or_else(|| std::env::var("MACHSAMPLER_SYMBOL_PATH").into_iter().collect());
    let root = cache_dir.unwrap_or_else(default_cache_root);
    let symbol_path = SymbolPath::parse(&entries, &root).map_err(einval)?;
    Ok(SymbolicateOptions { symbol_path, ..Default::default() })
}

/// Shows each symbolization warning once per process, through
/// `process.emitWarning` (code `MACHSAMPLER_SYMBOLS`).
pub(crate) fn emit_warnings(env: &Env, warnings: &[String]) {
    static SHOWN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    for w in warnings {
        let fresh = SHOWN.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashSet::new).insert(w.clone());
        if !fresh {
            continue;
        }
        let emit = || -> napi::Result<()> {
            let process: Object = env.get_global()?.get_named_property("process")?;
            let emit_warning: Function<'_, FnArgs<(String, Object)>, Unknown> =
                process.get_named_property("emitWarning")?;
            let mut options = Object::new(env)?;
            options.set_named_property("code", "MACHSAMPLER_SYMBOLS")?;
            emit_warning.apply(process, FnArgs::from((format!("machsampler: {w}"), options)))?;
            Ok(())
        };
        // A warning that cannot be shown must not fail symbolization.
        let _ = emit();
    }
}

/// Resolves every frame of a profile to a function: its name (demangled),
/// module, source file and line where debug information exists. JIT frames
/// are named from V8's perf map when the process ran with
/// `--perf-basic-prof`; JavaScript frames whose script has a source map
/// are shown at their original position. A native frame nothing names is
/// `0x<file address> in <module>`; an address outside every module stays
/// `0x…`.
///
/// Names also come from the symbol path (`options.symbolPath`, default
/// `MACHSAMPLER_SYMBOL_PATH`): dSYM bundles, Breakpad `.sym` files and
/// debug files in directories, and symbol servers' files already in the
/// download cache. This never downloads: call {@link fetchSymbols} first.
/// A symbol file that cannot be used is reported once, through
/// `process.emitWarning`, and its names stay unknown.
///
/// Works on a profile from `stop()` or one read back from a file, as long
/// as the module files are still on disk. Results are cached per module, so
/// a second call is nearly free.
///
/// @throws `EINVAL` if `profile` is not a valid profile object, or for a bad
///   option.
#[napi(ts_args_type = "profile: Profile, options?: SymbolOptions", ts_return_type = "SymbolTable")]
pub fn symbolicate<'env>(
    env: &'env Env,
    profile: Unknown<'_>,
    options: Unknown<'_>,
) -> Result<JsSymbolTable<'env>, &'static str> {
    let options = symbol_options(options, "options")?;
    let data = profile_from_js(profile)?;
    let (symbols, warnings) = crate::symbols::symbolicate_with_warnings(&data, &options);
    emit_warnings(env, &warnings);
    JsSymbolTable::from_symbols(env, &symbols).map_err(napi_fail)
}

/// For the module loader hook (lib/compiled-maps.js): the inline source
/// map (`data:` URL) of a script compiled from text that is not its file's
/// (TypeScript transpiled in memory), used by this process's
/// symbolizations.
#[napi(js_name = "noteSourceMap")]
pub fn note_source_map(script: String, map: String) -> Result<(), &'static str> {
    crate::v8::script_maps::note(&script, &map).map_err(einval)
}

/// The maps {@link noteSourceMap} was given in this process, on every
/// thread, and those V8 reported inline in scripts compiled from text that
/// is not their file's: `[script, map]` pairs, for `machsampler record` to symbolize in
/// its own process.
#[napi(js_name = "notedSourceMaps", ts_return_type = "Array<[string, string]>")]
pub fn noted_source_maps() -> Vec<Vec<String>> {
    crate::v8::script_maps::all().into_iter().map(|(s, m)| vec![s, m]).collect()
}

/// A symbol file to download (see `symbolDownloads`).
#[napi(object, js_name = "SymbolDownload")]
pub struct JsSymbolDownload {
    pub url: String,
    /// Where it goes in the download cache.
    pub file: String,
    /// The module it names.
    pub module: String,
}

/// For the download step: the symbol files the servers on the symbol path
/// may have for the modules a profile's frames are in, and that the cache
/// does not hold yet. `profile` is a Profile or the path of a `.machprof`
/// file.
#[napi(ts_args_type = "profile: Profile | string, options?: SymbolOptions", ts_return_type = "SymbolDownload[]")]
pub fn symbol_downloads(profile: Unknown, options: Unknown) -> Result<Vec<JsSymbolDownload>, &'static str> {
    let options = symbol_options(options, "options")?;
    let data = if profile.get_type().map_err(napi_fail)? == ValueType::String {
        // SAFETY: the type was just checked to be String.
        read_machprof(&unsafe { profile.cast::<String>() }.map_err(napi_fail)?)?
    } else {
        profile_from_js(profile)?
    };
    Ok(crate::symbols::symbol_path::downloads(&data, &options.symbol_path)
        .into_iter()
        .map(|d| JsSymbolDownload { url: d.url, file: d.file.to_string_lossy().into_owned(), module: d.module })
        .collect())
}
