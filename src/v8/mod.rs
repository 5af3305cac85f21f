//! JavaScript frames for native stacks, from V8's own exported API
//! ("route B" of issue 9), with no command-line flags.
//!
//! # Use
//!
//! - [`register_current_thread`] / [`unregister_current_thread`]: each JS
//!   thread (main, workers) records its isolate when the addon is loaded in
//!   its environment (napi module init), and removes it in the
//!   environment's cleanup hook, which Node runs on that thread before it
//!   disposes of the isolate (also for `worker.terminate()`).
//! - [`sample_js`] (Linux signal handler, on the sampled thread) and
//!   [`sample_js_stopped_thread`] (macOS, sampler thread, target suspended):
//!   `v8::Isolate::GetStackSample` on the interrupted registers, giving the
//!   JS frames (pcs of compiled code, bytecode addresses of interpreted
//!   frames) and the VM state (GC: no frames). Async-signal-safe.
//! - [`enable_code_events`] / [`disable_code_events`] (from `start()` /
//!   `stop()`, or from load with [`Policy::FromLoad`]): V8's JIT code event
//!   handler keeps a time-versioned address → name map, moves included,
//!   consulted with [`code_map`] when the profile is symbolized.
//! - [`merge_stacks`] with [`classifier`]: puts the JS frames into the
//!   native frame-pointer stack (interpreted frames replace their
//!   `InterpreterEntryTrampoline` return addresses; compiled frames are named
//!   by their pcs, the leaf included, which `GetStackSample` leaves out).
//!
//! The submodules explain the choices: `sample` (why `GetStackSample` is
//! safe in a signal handler, with V8's, workerd's and DataDog's use of it),
//! `events` (JIT handler rather than `CodeEventHandler`, the single slot,
//! installing on other threads with `RequestInterrupt`), `codemap` (the map
//! and its bounds), `merge` (how the two stacks line up), `remap` (builtins
//! remapped into the code range), `abi` (struct mirrors and their test).
//!
//! # Why route B
//!
//! Route A (reading V8's frames and heap objects with the `v8dbg_*`
//! postmortem offsets) needs crash-proof reads (`process_vm_readv`, a
//! syscall per object), a GC guard, and loses inferred names in Node 24+.
//! Route B runs the code V8's own CPU profiler runs in its SIGPROF handler,
//! resolved with `dlsym` from the node binary, so frames are walked exactly
//! as V8 walks them (interpreted, Sparkplug, Maglev, TurboFan, builtins,
//! exit frames) and names come from V8 itself (`JS:*fib /app/fib.js:3:13`,
//! the text of its perf map). Measured with `__test__/v8.test.js` on Node
//! 18, 20, 22, 24 and 26 (x64 Linux, a 2-vCPU VM):
//!
//! - a hot `fib` is the leaf-most JS frame of > 97 % of the samples of its
//!   thread, main thread and worker, optimized (`*`) and interpreted (named
//!   from its bytecode address, which lies inside the `BYTE_CODE` range V8
//!   reported, in 100 % of > 10 000 interpreted frames a run); no JS frame
//!   of those runs is left unnamed;
//! - `GetStackSample` inside the signal handler, ~20-frame stacks: p50
//!   1.2-4.3 µs, p99 4.7-15 µs depending on major and run (the native walk
//!   alone is ~0.1 µs). Called twice in a row (warm caches) it takes ~0.9 µs for
//!   8 frames plus ~50 ns a frame, so most of the first call is cache
//!   misses; capping `out.len()` (max stack depth) bounds it;
//! - installing the handler enumerates existing code: 10-65 ms on the
//!   isolate's thread (once per `start()` with the default policy); while
//!   installed, each compilation costs a few µs more (a compile-heavy
//!   micro-benchmark: +18 % on Node 20), and GC moves of code are reported.
//!
//! - a GC-heavy stress (eval churn, forced GCs, workers coming and going,
//!   code events switched on and off, the test sampler at 4 kHz a thread),
//!   2 minutes on each major: no crash, 99.3-99.9 % of the samples with V8
//!   frames carry a JS name, no GC sample has frames.
//!
//! Limits, all measured: Node 18 (V8 10.2) names carry no column
//! (`fib (/app/fib.js:3)`); a function inlined by TurboFan/Maglev counts as
//! the function it was inlined into (as with `--perf-basic-prof`); optimized
//! code made by on-stack replacement before the handler was installed is
//! never reported by V8 (see `events::Policy`); when a sample lands in a
//! frame's setup or teardown in JIT code, V8 returns no frames (2-15 % of
//! the samples of a tiny hot function like `fib`), and the merge still
//! names the compiled frames from the native walk.
//!
//! Unsupported V8 versions (anything not verified in `abi::VERIFIED`) make
//! every entry point report "unsupported" without calling into V8.

pub mod abi;
pub mod api;
pub mod codemap;
pub mod events;
pub mod frames;
pub mod merge;
pub mod registry;
pub mod remap;
pub mod sample;
pub mod slots;

#[cfg(not(test))]
mod js_testing;

pub use api::{CodeRange, Unavailable};
pub use codemap::{parse_js_name, CodeKind, CodeMap, Hit, JsName};
pub use events::{code_map, now_ns, set_enabled_by_user, set_policy, Policy, V8Ranges};
pub use merge::{classifier, merge_stacks, AddrClass, Merged};
pub use sample::{sample_js, sample_js_stopped_thread, JsSample, SampleStatus, VmState};

use crate::core::critical::current_thread_id;

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
    let tid = current_thread_id();
    let reg = registry::register(tid, registry::pthread_key(), isolate).map_err(|e| match e {
        registry::RegisterError::Full => RegisterError::Full,
        registry::RegisterError::NoIsolate => RegisterError::NoIsolate,
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
    if let Some(reg) = registry::unregister(current_thread_id()) {
        events::on_unregistered(api, reg);
    }
}

/// Starts V8 code events on every registered isolate (call from `start()`
/// on a JS thread): the caller's isolate now, the others at their next
/// interrupt check. False if unavailable or turned off by the user.
pub fn enable_code_events() -> bool {
    events::enable()
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
