//! The JavaScript API (napi bindings). Argument checking and conversion to
//! JS values live here; the sampler itself knows nothing of JavaScript.
//!
//! Typed arrays are created with `*Slice::copy_from`, which copies into a
//! V8-owned ArrayBuffer: Electron's V8 memory cage refuses external buffers.

use napi::bindgen_prelude::*;
use napi::{Env, JsValue, KeyCollectionMode, KeyConversion, KeyFilter, ValueType};
use napi_derive::napi;
use std::sync::atomic::{AtomicBool, Ordering};

mod formats;
mod profile;
mod stalls;
mod symbols;
#[cfg(feature = "testing")]
mod testing;
mod uv;

use crate::control;
use crate::profile::StatsSnapshot;
use crate::sampler::error::SamplerError;
use crate::sampler::options::SamplerOptions;
use profile::JsProfile;

/// What every binding returns: a value, or a JS error with a `code`.
// Exported functions spell it `Result<T, &'static str>`: napi-derive
// recognises a fallible return by that spelling.
pub(crate) type JsResult<T> = napi::Result<T, &'static str>;

pub(crate) fn js_error(e: SamplerError) -> napi::Error<&'static str> {
    napi::Error::new(e.code.as_str(), e.message)
}

pub(crate) fn einval(msg: impl Into<String>) -> napi::Error<&'static str> {
    js_error(SamplerError::inval(msg))
}

/// Converts napi's own failures (which should not happen for well-formed
/// values) into EINVAL rather than a generic error.
pub(crate) fn napi_fail(e: napi::Error) -> napi::Error<&'static str> {
    einval(e.reason.clone())
}

const OPTION_KEYS: &str = "intervalMs, mode, maxStackDepth, nativeUnwinding, bufferSamples, jsNames, durationMs";

/// A number option `key`, checked by `check`. For a value of another type,
/// the message names the valid range as `check` words it (asked about NaN).
pub(crate) fn number_option<T>(
    key: &str,
    val: &Unknown,
    check: impl Fn(f64) -> std::result::Result<T, SamplerError>,
) -> JsResult<T> {
    let ty = val.get_type().map_err(napi_fail)?;
    if ty != ValueType::Number {
        let valid = check(f64::NAN).err().and_then(|e| {
            let (_, valid) = e.message.split_once(" must be ")?;
            Some(format!(", {}", valid.strip_suffix(", got NaN").unwrap_or(valid)))
        });
        let valid = valid.unwrap_or_default();
        return Err(einval(format!("options.{key} must be a number{valid}, got {}", type_name(ty))));
    }
    // SAFETY: the value's type was just checked to be Number.
    let v = unsafe { val.cast::<f64>() }.map_err(napi_fail)?;
    check(v).map_err(js_error)
}

fn type_name(ty: ValueType) -> &'static str {
    match ty {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "boolean",
        ValueType::Number => "number",
        ValueType::String => "string",
        ValueType::Symbol => "symbol",
        ValueType::Object => "object",
        ValueType::Function => "function",
        ValueType::External => "external",
        ValueType::BigInt => "bigint",
        _ => "unknown",
    }
}

fn parse_options(options: Unknown) -> JsResult<SamplerOptions> {
    let mut out = SamplerOptions::default();
    match options.get_type().map_err(napi_fail)? {
        ValueType::Undefined => return Ok(out),
        ValueType::Object => {}
        other => return Err(einval(format!("options must be an object, got {}", type_name(other)))),
    }
    // SAFETY: the value's type was just checked to be Object.
    let obj: Object = unsafe { options.cast() }.map_err(napi_fail)?;
    if obj.is_array().unwrap_or(false) {
        return Err(einval("options must be a plain object, got an array"));
    }
    let keys = obj
        .get_all_property_names(KeyCollectionMode::OwnOnly, KeyFilter::Enumerable, KeyConversion::NumbersToStrings)
        .map_err(napi_fail)?;
    for i in 0..keys.get_array_length().map_err(napi_fail)? {
        let key: Unknown = keys.get_element(i).map_err(napi_fail)?;
        if key.get_type().ok() != Some(ValueType::String) {
            return Err(einval(format!("options has a symbol key; valid options are {OPTION_KEYS}")));
        }
        // SAFETY: the key's type was just checked to be String.
        let key: String = unsafe { key.cast::<String>() }.map_err(napi_fail)?;
        let val: Unknown = obj.get_named_property(&key).map_err(napi_fail)?;
        let ty = val.get_type().map_err(napi_fail)?;
        if ty == ValueType::Undefined && key != "__proto__" && OPTION_KEYS.contains(key.as_str()) {
            continue; // an explicit undefined means "use the default"
        }
        out = match key.as_str() {
            "intervalMs" => number_option(&key, &val, |v| out.with_interval_ms(v))?,
            "maxStackDepth" => number_option(&key, &val, |v| out.with_max_stack_depth(v))?,
            "bufferSamples" => number_option(&key, &val, |v| out.with_buffer_samples(v))?,
            "durationMs" => number_option(&key, &val, |v| out.with_duration_ms(v))?,
            "mode" => {
                if ty != ValueType::String {
                    return Err(einval(format!("options.mode must be 'cpu' or 'wall', got {}", type_name(ty))));
                }
                // SAFETY: the value's type was just checked to be String.
                let mode: String = unsafe { val.cast::<String>() }.map_err(napi_fail)?;
                out.with_mode(&mode).map_err(js_error)?
            }
            "nativeUnwinding" => {
                out.native_unwinding = boolean(&val, ty, "options.nativeUnwinding")?;
                out
            }
            "jsNames" => {
                out.js_names = boolean(&val, ty, "options.jsNames")?;
                out
            }
            other => return Err(einval(format!("unknown option '{other}'; valid options are {OPTION_KEYS}"))),
        };
    }
    Ok(out)
}

fn boolean(val: &Unknown, ty: ValueType, what: &str) -> JsResult<bool> {
    if ty != ValueType::Boolean {
        return Err(einval(format!("{what} must be a boolean (true or false), got {}", type_name(ty))));
    }
    // SAFETY: the value's type was just checked to be Boolean.
    unsafe { val.cast::<bool>() }.map_err(napi_fail)
}

/// Why JavaScript frames cannot be named from V8 here, if they cannot.
static V8_UNAVAILABLE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Runs once per JS environment that loads the addon (the main thread and
/// each worker): registers the environment's V8 isolate, so samples of this
/// thread get JavaScript frames, and unregisters it in the environment's
/// cleanup hook, which Node runs on this thread before it disposes of the
/// isolate (for a worker too, also when it is terminated).
#[napi(module_exports)]
pub fn init(_exports: Object, env: Env) -> napi::Result<()> {
    match crate::v8::register_current_thread() {
        Ok(reg) => {
            crate::v8::frames::remember_ranges(reg.tid, reg.ranges);
            env.add_env_cleanup_hook(reg.tid, |tid| {
                crate::v8::unregister_current_thread();
                crate::v8::frames::forget_ranges(tid);
            })?;
        }
        Err(e) => {
            *V8_UNAVAILABLE.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
    }
    Ok(())
}

/// Why JavaScript frames cannot be named from V8 in this process, if they
/// cannot.
pub(crate) fn js_names_unavailable() -> Option<String> {
    if crate::control::js_frames_available() {
        return None;
    }
    V8_UNAVAILABLE.lock().unwrap_or_else(|p| p.into_inner()).clone().or_else(|| Some("no JS thread registered".into()))
}

/// `process.emitWarning(message, { code })`. A warning that cannot be
/// shown must not fail the call that gives it, so errors are dropped.
fn emit_warning(env: &Env, message: String, code: &str) {
    let emit = || -> napi::Result<()> {
        let process: Object = env.get_global()?.get_named_property("process")?;
        let emit_warning: Function<'_, FnArgs<(String, Object)>, Unknown> =
            process.get_named_property("emitWarning")?;
        let mut options = Object::new(env)?;
        options.set_named_property("code", code)?;
        emit_warning.apply(process, FnArgs::from((message, options)))?;
        Ok(())
    };
    let _ = emit();
}

/// Warns once per process when JavaScript frames cannot be named from V8
/// here.
fn warn_once_if_no_js_names(env: &Env) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(why) = js_names_unavailable() else { return };
    if WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    let message = format!(
        "machsampler: JavaScript frames will not be named from V8 ({why}); they are named from V8's perf map \
         when node runs with --perf-basic-prof, otherwise shown as addresses."
    );
    emit_warning(env, message, "MACHSAMPLER_NO_JS_NAMES");
}

/// Warns about what a finished session lost, and what to do about it.
fn warn_about_losses(env: &Env, s: &crate::profile::StatsSnapshot, buffer_rows: usize) {
    if s.signal_taken_over != 0 {
        emit_warning(
            env,
            "machsampler: another library replaced the handler of the sampling signal while sampling; samples \
             stopped arriving from then on (stats.signalTakenOver)"
                .into(),
            "MACHSAMPLER_SIGNAL_TAKEN",
        );
    }
    if s.samples_dropped > 0 {
        emit_warning(
            env,
            format!(
                "machsampler: {} samples were dropped because the sample buffer ({buffer_rows} rows) was full; \
                 start with a larger bufferSamples (the CLI: --buffer), a longer intervalMs, or a shorter session",
                s.samples_dropped
            ),
            "MACHSAMPLER_BUFFER_FULL",
        );
    }
    if s.samples_lost > 0 {
        emit_warning(
            env,
            format!(
                "machsampler: {} samples were lost because every capture buffer was in use (stats.samplesLost); \
                 a longer intervalMs lowers the rate",
                s.samples_lost
            ),
            "MACHSAMPLER_SAMPLES_LOST",
        );
    }
}

/// Starts sampling every thread of the process.
///
/// The sampler is process-wide: it samples the main thread, worker_threads,
/// libuv's pool, V8's helper threads and threads of other addons, whichever
/// JS environment started it.
///
/// @throws `EINVAL` if an option is unknown, of the wrong type or out of range
///   (the message names the valid range; nothing is clamped).
/// @throws `EAGAIN` if the sampler is already running.
/// @throws `ENOTSUP` where sampling is impossible (macOS under Rosetta).
#[napi(ts_args_type = "options?: StartOptions")]
pub fn start(env: &Env, options: Unknown) -> Result<(), &'static str> {
    let options = parse_options(options)?;
    control::start(options).map_err(js_error)?;
    if options.js_names {
        warn_once_if_no_js_names(env);
    }
    Ok(())
}

/// Learns how V8 lays out interpreted frames from the calling thread's own
/// stack, so that sampling reads their positions from the frames rather
/// than asking V8 in every handler. For `start()`'s JavaScript side, which
/// calls it from the bottom of a recursion of interpreted frames; returns
/// whether the layout is known. Never throws.
#[napi(js_name = "learnJsFrameLayout")]
pub fn learn_js_frame_layout() -> bool {
    crate::v8::frames::learn_layout_from_own_stack().is_some()
}

/// Options for {@link start}. Every field is optional.
// Only its type is used (for index.d.ts): `start` validates by hand.
#[allow(dead_code)]
#[napi(object, js_name = "StartOptions")]
pub struct JsStartOptions {
    /// Sampling interval in milliseconds: an integer from 1 to 1000. Default 10.
    pub interval_ms: Option<u32>,
    /// What a sample stands for. `'cpu'` (the default): threads are sampled
    /// for the CPU time they use, one sample per interval of it (on Linux
    /// each thread's own CPU-time timer interrupts it, so waiting threads
    /// are never disturbed). `'wall'`: every thread at every interval,
    /// waiting ones included (marked idle), to see where threads block.
    #[napi(ts_type = "'cpu' | 'wall'")]
    pub mode: Option<String>,
    /// Stop sampling after this many milliseconds (an integer from 1 to 10^12),
    /// however busy JavaScript is; `stop()` still ends the session and
    /// returns the profile.
    pub duration_ms: Option<f64>,
    /// Frames recorded per stack, leaf first: an integer from 1 to 1024.
    /// Default 512. Deeper stacks are truncated and counted in
    /// `stats.truncatedStacks`.
    pub max_stack_depth: Option<u32>,
    /// Walk native frames (true, the default) or record only the leaf pc.
    pub native_unwinding: Option<bool>,
    /// Capacity of the sample buffer, in rows: an integer from 1 to
    /// 100000000. Default 1000000. A row is one sample, or a run of samples
    /// of an idle thread with the same stack. Samples beyond it are dropped,
    /// counted in `stats.samplesDropped`, and `stop()` warns.
    pub buffer_samples: Option<u32>,
    /// Name JavaScript frames from V8 while sampling (default true), on
    /// every thread that runs JavaScript, however its worker was made. No
    /// command-line flags needed.
    pub js_names: Option<bool>,
}

macro_rules! define_js_stats {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Sampler statistics. Counters cover the current (or last) session.
        #[napi(object, js_name = "Stats")]
        #[derive(Clone)]
        pub struct JsStats {
            $($(#[$doc])* pub $name: f64,)*
        }

        impl From<&StatsSnapshot> for JsStats {
            fn from(s: &StatsSnapshot) -> Self {
                JsStats { $($name: s.$name as f64,)* }
            }
        }
    };
}
crate::with_stats_fields!(define_js_stats);

const STOP_KEYS: &str = "symbolicate, output, format, includeIdle, threadPrefix, compress";

/// Stops sampling and returns the profile. Every thread the sampler stopped
/// has been resumed when this returns.
///
/// `options.symbolicate` names the frames before returning (as
/// {@link symbolicate}, into `profile.symbols`); `options.output` also
/// saves the profile there, atomically (as {@link saveProfile}, which the
/// other options are for). Everything happens in this one call, without
/// reading the profile back from JavaScript. Options are checked before the
/// sampler stops, `output` included (its directory must exist and take a
/// new file): then the sampler is still running. If the file cannot be
/// written after all, the error carries the profile as `error.profile`.
///
/// @throws `ESRCH` if the sampler is not running; `EINVAL` for a bad
///   option; `ENOENT`, `EACCES`, … if the file cannot be written.
#[napi(ts_args_type = "options?: StopOptions", ts_return_type = "Profile")]
pub fn stop<'env>(env: &'env Env, options: Unknown<'env>) -> Result<Unknown<'env>, &'static str> {
    let mut symbolicate = false;
    let mut output = None;
    let mut save_options = Object::new(env).map_err(napi_fail)?;
    let mut has_save_options = false;
    for (key, val) in formats::entries(options, "options")? {
        match key.as_str() {
            "symbolicate" => symbolicate = formats::boolean(&val, "options.symbolicate")?,
            "output" => output = Some(val),
            "format" | "includeIdle" | "threadPrefix" | "compress" => {
                save_options.set_named_property(&key, val).map_err(napi_fail)?;
                has_save_options = true;
            }
            _ => return Err(einval(format!("unknown option '{key}'; valid options are {STOP_KEYS}"))),
        }
    }
    let save = match output {
        Some(o) => Some(formats::SaveRequest::parse(&o, "options.output", Some(save_options.to_unknown()))?),
        None if has_save_options => {
            return Err(einval("options.format, includeIdle, threadPrefix and compress need options.output"))
        }
        None => None,
    };
    if let Some(save) = &save {
        if control::is_running() {
            save.check()?;
        }
    }
    let buffer_rows = control::current_options().map_or(0, |o| o.buffer_samples);
    let mut data = control::stop_profile().map_err(js_error)?;
    warn_about_losses(env, &data.stats, buffer_rows);
    if symbolicate {
        // The symbol path from MACHSAMPLER_SYMBOL_PATH; files only, never
        // a download. The session is over: a bad variable must not lose
        // the profile, so it is then ignored.
        let options = symbols::default_symbol_options().unwrap_or_default();
        let (s, warnings) = crate::symbols::symbolicate_with_warnings(&data, &options);
        symbols::emit_warnings(env, &warnings);
        data.symbols = Some(s);
        profile::assign_roles_if_missing(&mut data);
    }
    let profile = JsProfile::from_data(env, &data).map_err(napi_fail)?;
    let profile = profile.into_unknown(env).map_err(napi_fail)?;
    if let Some(save) = save {
        if let Err(e) = save.write(&data) {
            // The session is over: hand the profile back with the error.
            // With the exception pending, the value returned is ignored.
            let reason = format!("{}; the profile is in error.profile", e.reason);
            let mut err = env.create_error(napi::Error::from_reason(reason)).map_err(napi_fail)?;
            err.set_named_property("code", e.status).map_err(napi_fail)?;
            err.set_named_property("profile", profile).map_err(napi_fail)?;
            env.throw(err).map_err(napi_fail)?;
        }
    }
    Ok(profile)
}

/// Options for {@link stop}. Every field is optional.
// Only its type is used (for the .d.ts): `stop` validates by hand.
#[allow(dead_code)]
#[napi(object, js_name = "StopOptions")]
pub struct JsStopOptions {
    /// Name the frames before returning (into `profile.symbols`).
    pub symbolicate: Option<bool>,
    /// Also save the profile to this file (format by extension).
    pub output: Option<String>,
    /// The format for `output`, whatever its extension.
    pub format: Option<String>,
    /// As in {@link ExportOptions}.
    pub include_idle: Option<bool>,
    /// As in {@link ExportOptions}.
    pub thread_prefix: Option<bool>,
    /// As in {@link ExportOptions}.
    pub compress: Option<bool>,
}

/// Statistics of the running (or last) session. Safe to call at any time
/// from any JS thread.
#[napi]
pub fn stats() -> JsStats {
    JsStats::from(&control::stats())
}

/// True while the sampler is running.
#[napi]
pub fn is_running() -> bool {
    control::is_running()
}

/// For the addon's JavaScript: the warning a profile gets when another
/// copy of machsampler names its JavaScript (`stats.jsNamesLeftToAnotherCopy`).
#[napi]
pub fn another_copy_warning() -> &'static str {
    crate::formats::warnings::ANOTHER_COPY
}

/// For the addon's JavaScript: a thread was just created (a Worker), so
/// the running sampler, if any, looks for threads now. Never waits.
#[napi]
pub fn threads_created() {
    control::look_for_threads()
}

/// The signals the exit save can be armed for, by name.
fn exit_signal(name: &str) -> Option<i32> {
    match name {
        "SIGINT" => Some(libc::SIGINT),
        "SIGTERM" => Some(libc::SIGTERM),
        "SIGHUP" => Some(libc::SIGHUP),
        _ => None,
    }
}

/// For the preload that records a whole program: when one of `signals`
/// ends the process and JavaScript has not claimed the save within
/// `graceMs` (a busy main thread never runs its signal listeners), the
/// sampler is stopped and the profile written to `output` from a native
/// thread, as `stop({ output, ... })` would, and the signal then ends the
/// process; with `sourceMaps` (a path), the maps of scripts compiled in
/// memory are written there too, as JSON `[[script, map], ...]`, if there
/// are any. With `checkpoint` (a path), each such signal first writes the
/// profile so far there (raw, as `format` says), and the maps beside
/// `sourceMaps` (`.partial.json`), whoever then saves: a process killed
/// before it can save leaves those; with `checkpointEveryMs` as well, that
/// often (less often if one takes more than 1 % of that). Once per
/// process. See `claimExitSave`.
#[napi]
pub fn arm_exit_signals(env: &Env, options: Unknown) -> Result<(), &'static str> {
    const KEYS: &str =
        "signals, graceMs, output, format, compress, symbolicate, announce, sourceMaps, checkpoint, checkpointEveryMs";
    let mut signals = Vec::new();
    let mut grace_ms = 300.0;
    let mut output = None;
    let mut symbolicate = false;
    let mut announce = false;
    let mut source_maps = None;
    let mut checkpoint = None;
    let mut checkpoint_every_ms = None;
    let mut save_options = Vec::new();
    for (key, val) in formats::entries(options, "options")? {
        match key.as_str() {
            "signals" => {
                if !val.is_array().map_err(napi_fail)? {
                    return Err(einval("options.signals must be an array of signal names"));
                }
                // SAFETY: the value was just checked to be an array.
                let list: Vec<String> = unsafe { val.cast() }.map_err(napi_fail)?;
                for name in list {
                    let sig = exit_signal(&name)
                        .ok_or_else(|| einval(format!("options.signals: '{name}' is not SIGINT, SIGTERM or SIGHUP")))?;
                    signals.push(sig);
                }
            }
            "graceMs" => {
                grace_ms = formats::number(&val, "options.graceMs")?;
                if !(0.0..=60_000.0).contains(&grace_ms) {
                    return Err(einval(format!(
                        "options.graceMs must be from 0 to 60000, got {}",
                        crate::sampler::options::js_number(grace_ms)
                    )));
                }
            }
            "output" => output = Some(val),
            "symbolicate" => symbolicate = formats::boolean(&val, "options.symbolicate")?,
            "announce" => announce = formats::boolean(&val, "options.announce")?,
            "sourceMaps" => source_maps = Some(formats::string(&val, "options.sourceMaps")?),
            "checkpoint" => checkpoint = Some(val),
            "checkpointEveryMs" => {
                let ms = formats::number(&val, "options.checkpointEveryMs")?;
                if !(100.0..=86_400_000.0).contains(&ms) {
                    return Err(einval(format!(
                        "options.checkpointEveryMs must be from 100 to 86400000, got {}",
                        crate::sampler::options::js_number(ms)
                    )));
                }
                checkpoint_every_ms = Some(ms);
            }
            "format" | "compress" => save_options.push((key, val)),
            _ => return Err(einval(format!("unknown option '{key}'; valid options are {KEYS}"))),
        }
    }
    let Some(output) = output else { return Err(einval("options.output is required")) };
    let mut options = Object::new(env).map_err(napi_fail)?;
    for (key, val) in save_options {
        options.set_named_property(&key, val).map_err(napi_fail)?;
    }
    let save = formats::SaveRequest::parse(&output, "options.output", Some(options.to_unknown()))?;
    let checkpoint = match checkpoint {
        Some(path) => Some(formats::SaveRequest::parse(&path, "options.checkpoint", Some(options.to_unknown()))?),
        None if checkpoint_every_ms.is_some() => {
            return Err(einval("options.checkpointEveryMs needs options.checkpoint (where to keep them)"))
        }
        None => None,
    };
    let write_maps = move |path: &Option<String>| {
        let maps = crate::v8::script_maps::all();
        if let (Some(path), false) = (path, maps.is_empty()) {
            // Those functions are otherwise shown at their compiled positions.
            let json = serde_json::to_vec(&maps).unwrap_or_default();
            if let Err(e) = crate::formats::write_atomic(std::path::Path::new(path), &json) {
                eprintln!("machsampler: cannot write {path}: {e}");
            }
        }
    };
    // Apart from the final save's maps, which a checkpoint running late
    // must not replace with fewer.
    let checkpoint_maps = source_maps.as_ref().map(|p| match p.strip_suffix(".json") {
        Some(stem) => format!("{stem}.partial.json"),
        None => format!("{p}.partial"),
    });
    let checkpoint_job = checkpoint.map(|to| {
        Box::new(move || {
            // The sampler is stopped (the session is over) or slow: no copy.
            let Ok(data) = control::profile_so_far(std::time::Duration::from_millis(200)) else { return };
            if to.write(&data).is_ok() {
                write_maps(&checkpoint_maps);
            }
        }) as control::exit_signals::CheckpointJob
    });
    let job = Box::new(move || {
        let mut data = match control::stop_profile() {
            Ok(d) => d,
            Err(e) => return eprintln!("machsampler: {}", e.message),
        };
        if symbolicate {
            let options = symbols::default_symbol_options().unwrap_or_default();
            let (names, warnings) = crate::symbols::symbolicate_with_warnings(&data, &options);
            for w in warnings {
                eprintln!("machsampler: {w}");
            }
            data.symbols = Some(names);
            profile::assign_roles_if_missing(&mut data);
        }
        match save.write(&data) {
            Ok(()) if announce => eprintln!("machsampler: wrote {}", save.path),
            Ok(()) => {}
            Err(e) => eprintln!("machsampler: {}", e.reason),
        }
        write_maps(&source_maps);
    });
    let grace = std::time::Duration::from_secs_f64(grace_ms / 1000.0);
    let every = checkpoint_every_ms.map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0));
    control::exit_signals::arm(&signals, grace, job, checkpoint_job, every).map_err(js_error)
}

/// For the preload: JavaScript is about to save the profile at exit.
/// False when the native save of `armExitSignals` has it: the caller then
/// calls `waitForExitSave` and writes nothing.
#[napi]
pub fn claim_exit_save() -> bool {
    control::exit_signals::claim()
}

/// For the preload: waits (at most 60 s) for the native save at exit to
/// finish; the signal then ends the process.
#[napi]
pub fn wait_for_exit_save() {
    control::exit_signals::wait_for_native_save(std::time::Duration::from_secs(60))
}

/// For the preload: whether the program itself listens for `signal`
/// (then the signal is left to it).
#[napi]
pub fn set_program_listens(signal: String, listens: bool) {
    if let Some(sig) = exit_signal(&signal) {
        control::exit_signals::set_program_listens(sig, listens)
    }
}

/// Number of threads in the process that the sampler knows of.
#[napi]
pub fn thread_count() -> Result<u32, &'static str> {
    control::thread_count().map(|n| n as u32).map_err(js_error)
}

/// Turns native frame capture on or off; allowed while running. When off,
/// each sample records only the interrupted pc.
///
/// @throws `EINVAL` if `enabled` is not a boolean.
#[napi(ts_args_type = "enabled: boolean")]
pub fn set_native_unwinding(enabled: Unknown) -> Result<(), &'static str> {
    let ty = enabled.get_type().map_err(napi_fail)?;
    control::set_native_unwinding(boolean(&enabled, ty, "enabled")?);
    Ok(())
}

/// Whether native frame capture is on.
#[napi]
pub fn get_native_unwinding() -> bool {
    control::native_unwinding()
}
