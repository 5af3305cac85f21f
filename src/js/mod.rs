//! The JavaScript API (napi bindings). Argument checking and conversion to
//! JS values live here; the sampler itself knows nothing of JavaScript.
//!
//! Typed arrays are created with `*Slice::copy_from`, which copies into a
//! V8-owned ArrayBuffer: Electron's V8 memory cage refuses external buffers.

use napi::bindgen_prelude::*;
use napi::{Env, JsValue, KeyCollectionMode, KeyConversion, KeyFilter, ValueType};
use napi_derive::napi;

mod formats;
mod profile;
mod symbols;

use crate::control;
use crate::core::error::SamplerError;
use crate::core::options::SamplerOptions;
use crate::core::stats::StatsSnapshot;
use profile::Profile;

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

const OPTION_KEYS: &str = "intervalMs, maxStackDepth, nativeUnwinding, bufferSamples, jsNames";

fn number_option(key: &str, val: &Unknown, ty: ValueType) -> Result<f64, &'static str> {
    if ty != ValueType::Number {
        return Err(einval(format!("options.{key} must be a number, got {}", type_name(ty))));
    }
    // SAFETY: the value's type was just checked to be Number.
    unsafe { val.cast::<f64>() }.map_err(napi_fail)
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

fn parse_options(options: Unknown) -> Result<SamplerOptions, &'static str> {
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
            "intervalMs" => out.with_interval_ms(number_option(&key, &val, ty)?).map_err(js_error)?,
            "maxStackDepth" => out.with_max_stack_depth(number_option(&key, &val, ty)?).map_err(js_error)?,
            "bufferSamples" => out.with_buffer_samples(number_option(&key, &val, ty)?).map_err(js_error)?,
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

fn boolean(val: &Unknown, ty: ValueType, what: &str) -> Result<bool, &'static str> {
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

/// @internal Why JavaScript frames cannot be named from V8 in this thread's
/// environment (null if they can); `index.js` turns this into one warning.
#[napi(js_name = "_jsNamesUnavailable")]
pub fn js_names_unavailable() -> Option<String> {
    if crate::control::js_frames_available() {
        return None;
    }
    V8_UNAVAILABLE.lock().unwrap_or_else(|p| p.into_inner()).clone().or_else(|| Some("no JS thread registered".into()))
}

/// @internal How interpreted frames are found: "learned" once the frame
/// layout has been learned from V8 (then the handler reads it from the
/// frames), "learning" before (V8's GetStackSample in the handler).
#[napi(js_name = "_jsFramesMode")]
pub fn js_frames_mode() -> String {
    match crate::v8::slots::learned() {
        Some(l) => format!("learned {}:{}:{}", l.array, l.offset, l.smi_shift),
        None => "learning".into(),
    }
}

/// @internal Stops V8's code events if no session runs (see
/// `control::release_js_names_if_idle`); index.js calls it after stop().
#[napi(js_name = "_releaseJsNames")]
pub fn release_js_names() {
    control::release_js_names_if_idle();
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
pub fn start(options: Unknown) -> Result<(), &'static str> {
    let options = parse_options(options)?;
    control::start(options).map_err(js_error)
}

/// Options for {@link start}. Every field is optional.
// Only its type is used (for index.d.ts): `start` validates by hand.
#[allow(dead_code)]
#[napi(object)]
pub struct StartOptions {
    /// Sampling interval in milliseconds: an integer from 1 to 1000. Default 10.
    pub interval_ms: Option<u32>,
    /// Frames recorded per stack, leaf first: an integer from 1 to 1024.
    /// Default 128. Deeper stacks are truncated and counted in
    /// `stats.truncatedStacks`.
    pub max_stack_depth: Option<u32>,
    /// Walk native frames (true, the default) or record only the leaf pc.
    pub native_unwinding: Option<bool>,
    /// Capacity of the sample buffer, in samples: an integer from 1 to
    /// 100000000. Default 1000000. Samples beyond it are dropped and counted
    /// in `stats.samplesDropped`.
    pub buffer_samples: Option<u32>,
    /// Name JavaScript frames from V8 while sampling (default true), on
    /// every thread whose environment loaded the addon (workers created
    /// after it loads get it preloaded). No command-line flags needed.
    pub js_names: Option<bool>,
}

/// Sampler statistics. Counters cover the current (or last) session.
#[napi(object)]
#[derive(Clone)]
pub struct Stats {
    /// Samples stored in the profile.
    pub samples_captured: f64,
    /// Samples lost because the buffer or stack table was full.
    pub samples_dropped: f64,
    /// Thread samples taken: always `samplesCaptured + samplesDropped`.
    pub threads_sampled: f64,
    /// Thread samples not taken: the thread exited, had not yet been
    /// reached, or blocks the sampling signal. Normal, not an error.
    pub threads_skipped: f64,
    /// Total time sampled threads spent stopped, in nanoseconds.
    pub total_suspend_ns: f64,
    /// Longest single stop, in nanoseconds.
    pub max_suspend_ns: f64,
    /// Median stop, in nanoseconds (from a histogram; within 12.5 %).
    pub suspend_p50_ns: f64,
    /// 99th-percentile stop, in nanoseconds.
    pub suspend_p99_ns: f64,
    /// Linux: median time from sending the signal to the handler running.
    pub delivery_p50_ns: f64,
    /// Linux: 99th percentile of the delivery time.
    pub delivery_p99_ns: f64,
    /// Linux: longest delivery time seen.
    pub delivery_max_ns: f64,
    /// Samples whose registers or stack bounds could not be read.
    pub walk_errors: f64,
    /// Samples of idle threads, recorded without stopping them.
    pub idle_samples: f64,
    /// Stacks cut at `maxStackDepth`.
    pub truncated_stacks: f64,
    /// Stacks whose frame chain ended cleanly at the thread's root.
    pub stacks_reaching_root: f64,
    /// Samples with JavaScript frames from V8 merged in.
    pub js_samples: f64,
    /// Sampler ticks run.
    pub ticks: f64,
    /// Ticks skipped because the sampler fell behind.
    pub ticks_missed: f64,
    /// CPU time used by the sampler thread, in nanoseconds.
    pub sampler_cpu_ns: f64,
    /// Threads currently known to the sampler.
    pub thread_count: f64,
}

impl From<&StatsSnapshot> for Stats {
    fn from(s: &StatsSnapshot) -> Self {
        Stats {
            samples_captured: s.samples_captured as f64,
            samples_dropped: s.samples_dropped as f64,
            threads_sampled: s.threads_sampled as f64,
            threads_skipped: s.threads_skipped as f64,
            total_suspend_ns: s.total_suspend_ns as f64,
            max_suspend_ns: s.max_suspend_ns as f64,
            suspend_p50_ns: s.suspend_p50_ns as f64,
            suspend_p99_ns: s.suspend_p99_ns as f64,
            delivery_p50_ns: s.delivery_p50_ns as f64,
            delivery_p99_ns: s.delivery_p99_ns as f64,
            delivery_max_ns: s.delivery_max_ns as f64,
            walk_errors: s.walk_errors as f64,
            idle_samples: s.idle_samples as f64,
            truncated_stacks: s.truncated_stacks as f64,
            stacks_reaching_root: s.stack_reaches_root as f64,
            js_samples: s.js_samples as f64,
            ticks: s.ticks as f64,
            ticks_missed: s.ticks_missed as f64,
            sampler_cpu_ns: s.sampler_cpu_ns as f64,
            thread_count: s.thread_count as f64,
        }
    }
}

/// Stops sampling and returns the profile. Every thread the sampler stopped
/// has been resumed when this returns.
///
/// @throws `ESRCH` if the sampler is not running.
#[napi(ts_return_type = "Profile")]
pub fn stop(env: &Env) -> Result<Profile<'_>, &'static str> {
    let data = control::stop_profile().map_err(js_error)?;
    Profile::from_data(env, &data).map_err(napi_fail)
}

/// Statistics of the running (or last) session. Safe to call at any time
/// from any JS thread.
#[napi]
pub fn stats() -> Stats {
    Stats::from(&control::stats())
}

/// True while the sampler is running.
#[napi]
pub fn is_running() -> bool {
    control::is_running()
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

/// @internal For `npm run bench`: the kernel's share of a sample, the time
/// of an empty round trip of the sampling signal to the calling thread, in
/// nanoseconds, one entry per iteration. Empty where the backend does not
/// use signals (macOS).
#[napi(js_name = "_benchSignalRoundTrip")]
pub fn bench_signal_round_trip(iterations: u32) -> Result<Vec<f64>, &'static str> {
    #[cfg(target_os = "linux")]
    {
        let ns = crate::platform::linux::signal::round_trip_ns(iterations.min(1_000_000) as usize).map_err(js_error)?;
        Ok(ns.into_iter().map(|v| v as f64).collect())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = iterations;
        Ok(Vec::new())
    }
}
