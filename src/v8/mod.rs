//! JavaScript frames for native stacks, from V8's own exported API
//! ("route B" of issue 9), with no command-line flags.
//!
//! - [`register_current_thread`] / [`unregister_current_thread`]: each JS
//!   thread (main, workers) records its isolate when the addon is loaded in
//!   its environment, and removes it in the environment's cleanup hook.
//! - [`sample_js`] (Linux signal handler, on the sampled thread) and
//!   [`sample_js_stopped_thread`] (macOS, sampler thread, target suspended):
//!   `v8::Isolate::GetStackSample` on the interrupted registers.
//!
//! `abi` has the struct mirrors, `api` the `dlsym` resolution, `registry`
//! the lock-free thread → isolate table, `sample` the signal-safe call.

pub mod abi;
pub mod api;
pub mod registry;
pub mod sample;

pub use api::{CodeRange, Unavailable};
pub use sample::{sample_js, sample_js_stopped_thread, JsSample, SampleStatus, VmState};

use crate::core::critical::current_thread_id;

/// What registering the calling JS thread gave.
#[derive(Clone, Copy, Debug)]
pub struct ThreadRegistration {
    pub tid: u64,
    /// The `v8::Isolate*`.
    pub isolate: usize,
    /// Process-unique number of this registration.
    pub serial: u32,
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
/// addon is loaded in its environment; registering again counts a
/// reference. Resolves the V8 API on first use (a few `dlsym` calls).
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
    Ok(ThreadRegistration { tid, isolate: reg.isolate, serial: reg.serial })
}

/// Drops the calling thread's registration (its last one removes it): call
/// from the environment's cleanup hook, which Node runs before it disposes
/// of the isolate.
pub fn unregister_current_thread() {
    registry::unregister(current_thread_id());
}
