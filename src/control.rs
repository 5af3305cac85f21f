//! The process-wide sampler behind `start()` and `stop()`.
//!
//! There is one sampler per process however many JS environments (main
//! thread, worker_threads) load the addon: it samples every thread, so two
//! would only sample each other. Any environment may start it and any may
//! stop it. Statistics live outside the control lock so that `stats()` never
//! waits for a `stop()` in progress.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::core::backend::Backend;
use crate::core::error::{ErrorCode, SamplerError};
use crate::core::options::SamplerOptions;
use crate::core::sampler::{Recording, RunningSampler, Shared};
use crate::core::stats::StatsSnapshot;
use crate::platform;
use crate::profile::ProfileData;

static RUNNING: Mutex<Option<RunningSampler>> = Mutex::new(None);
static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();

fn shared() -> &'static Arc<Shared> {
    SHARED.get_or_init(|| {
        let s = Shared::default();
        s.native_unwinding.store(true, Relaxed);
        Arc::new(s)
    })
}

fn running() -> MutexGuard<'static, Option<RunningSampler>> {
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn start(options: SamplerOptions) -> Result<(), SamplerError> {
    let mut slot = running();
    if slot.is_some() {
        return Err(SamplerError::new(ErrorCode::Again, "the sampler is already running; call stop() first"));
    }
    crate::core::critical::enable_from_env();
    let mut backend = platform::new_backend()?;
    // So that threadCount() is right as soon as start() returns.
    backend.refresh_threads(&shared().registry, false);
    let js = js_frames(&options);
    let sampler = RunningSampler::spawn(backend, options, shared().clone(), js);
    if sampler.is_err() {
        stop_js_frames();
    }
    *slot = Some(sampler?);
    Ok(())
}

pub fn stop() -> Result<Recording, SamplerError> {
    // The lock is held until the sampler thread has finished: a start()
    // from another JS thread meanwhile would otherwise begin a session that
    // resets the statistics and reclaims the slots this one is still
    // harvesting (stress/repro/concurrent-start-stop.js).
    let mut slot = running();
    let sampler = slot
        .take()
        .ok_or_else(|| SamplerError::new(ErrorCode::Srch, "the sampler is not running; call start() first"))?;
    let rec = sampler.stop();
    platform::set_js_frames(false);
    drop(slot);
    Ok(rec)
}

/// Stops the sampler and builds the profile: the recording, the modules
/// loaded now, and JIT frames pinned to the perf-map line each sample saw
/// (see `symbols::jit_history`; that needs this process's perf map, so it
/// happens here rather than at symbolization).
pub fn stop_profile() -> Result<ProfileData, SamplerError> {
    let mut rec = stop()?;
    let perf_map = std::mem::take(&mut rec.perf_map);
    let mut data = ProfileData::from_recording(rec, platform::loaded_modules());
    crate::symbols::jit_history::pin_reused_jit_frames(&mut data, &perf_map);
    Ok(data)
}

/// Stops V8's code events if no session is running. Installing them costs
/// a walk over all existing code on every isolate (tens of ms), so `stop()`
/// leaves them on and the JS side calls this a little later: a quick
/// stop/start pair keeps them, and an app that stops profiling for good
/// does not pay for them for the rest of its life.
pub fn release_js_names_if_idle() {
    let slot = running();
    if slot.is_none() && js_frames_available() {
        crate::v8::disable_code_events();
    }
}

/// Whether JavaScript frames can be named from V8 in this process: at least
/// one JS thread registered its isolate (see `crate::v8`).
pub fn js_frames_available() -> bool {
    !crate::v8::registry::all().is_empty()
}

/// Starts V8 code events and JS frame capture, if V8 is usable here.
fn js_frames(options: &SamplerOptions) -> Option<Box<dyn crate::core::backend::JsFrames>> {
    if !options.js_names || !options.native_unwinding || !js_frames_available() {
        return None;
    }
    crate::v8::enable_code_events();
    platform::set_js_frames(true);
    Some(Box::new(crate::v8::frames::V8JsFrames::new()))
}

fn stop_js_frames() {
    platform::set_js_frames(false);
    release_js_names_if_idle_locked();
}

/// As `release_js_names_if_idle`, for a caller that holds the lock and
/// has no running session.
fn release_js_names_if_idle_locked() {
    if js_frames_available() {
        crate::v8::disable_code_events();
    }
}

pub fn is_running() -> bool {
    running().is_some()
}

/// The options of the running session.
pub fn current_options() -> Option<SamplerOptions> {
    running().as_ref().map(|r| r.options)
}

pub fn stats() -> StatsSnapshot {
    let s = shared();
    s.stats.snapshot(s.registry.len() as u64)
}

/// Threads currently known. While sampling this is the sampler's registry;
/// otherwise the platform is asked directly.
pub fn thread_count() -> Result<usize, SamplerError> {
    if is_running() {
        return Ok(shared().registry.len());
    }
    let mut backend = platform::new_backend()?;
    backend.refresh_threads(&shared().registry, false);
    Ok(shared().registry.len())
}

pub fn set_native_unwinding(on: bool) {
    shared().native_unwinding.store(on, Relaxed);
}

pub fn native_unwinding() -> bool {
    shared().native_unwinding.load(Relaxed)
}
