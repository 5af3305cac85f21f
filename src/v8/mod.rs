//! JavaScript frames for native stacks, named by V8 itself, with no
//! command-line flags.
//!
//! - [`register_current_thread`] / [`unregister_current_thread`]: each JS
//!   thread records its isolate when the addon loads in its environment,
//!   or when the signal handler finds it running V8 code (`discover`), and
//!   removes it in the environment's cleanup hook, which Node runs on that
//!   thread before it disposes of the isolate.
//! - [`sample_js`] (in the Linux signal handler) and
//!   [`sample_js_stopped_thread`] (macOS, target suspended):
//!   `v8::Isolate::GetStackSample` on the stopped registers. Allocates
//!   nothing and takes no lock (see `sample`).
//! - [`enable_code_events`] / [`disable_code_events`]: V8's JIT code events
//!   feed a time-versioned address → name map ([`code_map`]).
//! - `frames::V8JsFrames`: places the JS frames in the native stack on
//!   the sampler thread, after the thread resumed, by address ranges;
//!   `resolve` names them when the session ends.
//!
//! Every entry point reports "unavailable" without calling into V8 on a V8
//! whose struct layouts were not verified (`abi`). The design and its
//! measurements: `docs/design/js-names-from-v8.md`.

pub mod abi;
pub mod api;
pub mod codemap;
pub mod discover;
pub mod events;
pub mod frames;
pub mod inline_log;
pub mod merge;
pub mod other_copies;
pub mod registry;
pub mod remap;
pub mod resolve;
pub mod sample;
pub mod script_maps;
pub mod slots;
pub mod unnamed_scripts;

pub use api::{CodeRange, Unavailable};
pub use codemap::{parse_js_name, CodeKind, CodeMap, Hit, JsName};
pub use events::{code_map, now_ns, set_enabled_by_user, set_policy, Policy, V8Ranges};
pub use merge::{classifier, merge_stacks, AddrClass, Merged};
pub use sample::{sample_js, sample_js_stopped_thread, JsSample, SampleStatus, VmState};

use crate::sampler::thread_id;

/// What registering the calling JS thread gave.
#[derive(Clone, Copy, Debug)]
pub struct ThreadRegistration {
    pub tid: u64,
    /// The `v8::Isolate*`.
    pub isolate: usize,
    /// Process-unique number of this registration (code-map entries carry it).
    pub serial: u32,
    /// Ranges of V8 code, for merging JS frames into native stacks.
    pub ranges: V8Ranges,
}

/// Why registration failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// No usable V8 API (not node, or an unsupported V8 version): fall back
    /// to native/perf-map names and warn once.
    Unavailable(Unavailable),
    /// The calling thread has no current isolate (not a JS thread).
    NoIsolate,
    /// Too many JS threads at once ([`registry::MAX_THREADS`]).
    Full,
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::Unavailable(u) => u.fmt(f),
            RegisterError::NoIsolate => write!(f, "the calling thread has no V8 isolate"),
            RegisterError::Full => write!(f, "more than {} JS threads", registry::MAX_THREADS),
        }
    }
}

/// The V8 version this process runs, if its API is usable.
pub fn v8_version() -> Result<String, Unavailable> {
    api::api().map(|a| a.version_string.clone())
}

/// Records the calling thread's isolate. Call on each JS thread when the
/// addon is loaded in its environment (napi module init runs there), before
/// sampling can need it; registering again counts a reference. Resolves the
/// V8 API on first use (a few `dlsym` calls). If sampling is running,
/// starts code events for this isolate.
pub fn register_current_thread() -> Result<ThreadRegistration, RegisterError> {
    let api = api::api().map_err(RegisterError::Unavailable)?;
    // SAFETY: TryGetCurrent only reads V8's thread-local current isolate.
    let isolate = unsafe { (api.try_get_current)() };
    if isolate.is_null() {
        return Err(RegisterError::NoIsolate);
    }
    let tid = thread_id::current();
    let reg = registry::register(tid, registry::pthread_key(), isolate).map_err(|e| match e {
        registry::SlotError::Full => RegisterError::Full,
        registry::SlotError::NoIsolate => RegisterError::NoIsolate,
    })?;
    events::on_registered(api, reg);
    let ranges = events::ranges_for(reg.isolate).unwrap_or_default();
    Ok(ThreadRegistration { tid, isolate: reg.isolate, serial: reg.serial, ranges })
}

/// Drops the calling thread's registration (its last one removes it):
/// call from the environment's cleanup hook, which Node runs before it
/// disposes of the isolate (for a worker, on its exit, before the thread
/// ends). Clears the JIT handler and retires the isolate's code entries
/// (kept for naming samples already taken).
pub fn unregister_current_thread() {
    let Ok(api) = api::api() else { return };
    let _guard = events::lifecycle_guard();
    if let Some(reg) = registry::unregister(thread_id::current()) {
        events::on_unregistered(api, reg);
        inline_log::set_aside(reg.isolate);
        unnamed_scripts::forget_isolate(reg.isolate);
    }
}

/// Starts V8 code events on every registered isolate (call from `start()`
/// on a JS thread): the caller's isolate now, the others at their next
/// interrupt check. False if unavailable or turned off by the user.
pub fn enable_code_events() -> bool {
    let on = events::enable_deferring_enumeration();
    if on {
        discover::start();
    }
    on
}

/// Stops V8 code events (call from `stop()`); the map is kept.
pub fn disable_code_events() {
    events::disable()
}

/// True if the calling thread registered its isolate. Async-signal-safe.
#[inline]
pub fn current_thread_registered() -> bool {
    registry::isolate_for_pthread(registry::pthread_key()).is_some()
}

/// For the Linux signal handler, instead of [`current_thread_registered`]
/// when JavaScript frames are wanted: true if the calling thread registered
/// its isolate; otherwise, if it runs V8's generated code at `pc`, asks for
/// the isolate's registration ([`discover::note_current_thread`]: may wait
/// up to [`discover::WAIT_NS`], once per isolate) and answers false for
/// this sample. Async-signal-safe.
#[inline]
pub fn registered_or_discover(pc: u64) -> bool {
    if current_thread_registered() {
        return true;
    }
    discover::note_current_thread(pc);
    false
}

/// True if thread `tid` registered its isolate. Async-signal-safe.
#[inline]
pub fn thread_registered(tid: u64) -> bool {
    registry::isolate_for_tid(tid).is_some()
}

/// Names a frame address from [`sample_js`] as it was at time `t_ns`
/// (`CLOCK_MONOTONIC`, the sample's timestamp). Convenience for one address;
/// for many, lock [`code_map`] once.
pub fn name_of(addr: u64, t_ns: u64) -> Option<(JsName, CodeKind, bool)> {
    let map = code_map();
    let hit = map.lookup(addr, t_ns)?;
    Some((parse_js_name(hit.raw), hit.kind, hit.exact))
}
