//! The process-wide sampler behind `start()` and `stop()`.
//!
//! There is one sampler per process however many JS environments (main
//! thread, worker_threads) load the addon: it samples every thread, so two
//! would only sample each other. Any environment may start it and any may
//! stop it. Statistics live outside the control lock so that `stats()` never
//! waits for a `stop()` in progress.
//!
//! The sampler thread also serves the stall watcher (`crate::stalls`), its
//! second consumer (see `crate::sampler::observer`): every loop is given
//! the observer slot. While a session runs, its loop serves the watcher
//! too; otherwise, while the watcher wants it, a background loop runs that
//! records nothing: CPU mode at the watcher's interval, with statistics
//! and a thread list of its own, so `stats()` and `threadCount()` still
//! describe the last session. `start()` replaces the background loop with
//! the session's, and `stop()` brings it back.

pub mod exit_signals;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::platform;
use crate::profile::ProfileData;
use crate::sampler::backend::{Backend, Mode};
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::observer::{Observer, ObserverSlot};
use crate::sampler::options::SamplerOptions;
use crate::sampler::session::{Hooks, Recording, RunningSampler, Shared};
use crate::sampler::stats::StatsSnapshot;
use crate::symbols::perf_map_watch::{PerfMapTimeline, PerfMapWatch};
use crate::v8::frames::V8JsFrames;

/// A running session: the sampler thread, and what its hooks collect.
struct Running {
    sampler: RunningSampler,
    /// A session's: the growth of V8's perf map. None for the background
    /// loop, which only serves the observer.
    perf_map: Option<Arc<Mutex<PerfMapWatch>>>,
    /// The loop only serves the observer (no session).
    background: bool,
}

/// What one session recorded, with what its hooks collected.
pub struct Session {
    pub recording: Recording,
    /// The growth of V8's perf map during the session, if it has one.
    pub perf_map: PerfMapTimeline,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);
static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
/// The background loop's own statistics and thread list.
static BACKGROUND_SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
static OBSERVER: OnceLock<Arc<ObserverSlot>> = OnceLock::new();
/// The interval the observer wants a loop at, in ns; 0 when it wants none.
static OBSERVER_INTERVAL_NS: AtomicU64 = AtomicU64::new(0);

fn observer_slot() -> &'static Arc<ObserverSlot> {
    OBSERVER.get_or_init(Default::default)
}

fn background_shared() -> &'static Arc<Shared> {
    BACKGROUND_SHARED.get_or_init(Default::default)
}

fn shared() -> &'static Arc<Shared> {
    SHARED.get_or_init(|| {
        let s = Shared::default();
        s.native_unwinding.store(true, Relaxed);
        Arc::new(s)
    })
}

fn running() -> MutexGuard<'static, Option<Running>> {
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn start(options: SamplerOptions) -> Result<(), SamplerError> {
    let mut slot = running();
    if slot.as_ref().is_some_and(|r| !r.background) {
        return Err(SamplerError::new(ErrorCode::Again, "the sampler is already running; call stop() first"));
    }
    crate::sampler::stopped_window::enable_from_env();
    // Thread discovery happens on the sampler thread, so start() returns in
    // the same time however many threads there are.
    let mut backend = platform::new_backend()?;
    backend.set_frame_pointer_code(crate::v8::frames::builtin_ranges());
    // The session's loop serves the observer from now on.
    if let Some(background) = slot.take() {
        end_loop(background);
    }
    CODE_EVENTS_CPU_AT_START.store(crate::v8::events::install_cpu_ns(), Relaxed);
    let rewrite = js_frames(&options);
    let perf_map = Arc::new(Mutex::new(PerfMapWatch::open_for_current_process()));
    let watch = perf_map.clone();
    let on_tick = Box::new(move |now_ns| watch.lock().unwrap_or_else(PoisonError::into_inner).observe(now_ns));
    let observer: Arc<dyn Observer> = observer_slot().clone();
    let hooks = Hooks { rewrite, on_tick: Some(on_tick), observer: Some(observer) };
    let sampler = RunningSampler::spawn(backend, options, shared().clone(), hooks);
    match sampler {
        Ok(sampler) => {
            *slot = Some(Running { sampler, perf_map: Some(perf_map), background: false });
            SESSION_LIVE.store(true, Relaxed);
            Ok(())
        }
        Err(e) => {
            stop_js_frames();
            restart_background(&mut slot);
            Err(e)
        }
    }
}

/// Stops a loop, and what it turned on for JavaScript frames.
fn end_loop(running: Running) -> Recording {
    let recording = running.sampler.stop();
    platform::set_js_frames(false);
    platform::discard_pending_on_this_thread();
    if js_frames_available() {
        crate::v8::disable_code_events();
    }
    recording
}

/// Sets the observer every loop serves (once per process).
pub fn set_observer(observer: Arc<dyn Observer>) {
    observer_slot().set(observer);
}

/// Asks for a loop that serves the observer at `interval_ns` (or for none
/// with `None`). A running session's loop serves it as it is; otherwise a
/// background loop is started, restarted at a new interval, or stopped.
pub fn serve_observer(interval_ns: Option<u64>) -> Result<(), SamplerError> {
    let mut slot = running();
    OBSERVER_INTERVAL_NS.store(interval_ns.unwrap_or(0), Relaxed);
    match (slot.as_ref(), interval_ns) {
        (Some(r), _) if !r.background => Ok(()),
        (Some(r), Some(ns)) if r.sampler.options.interval_ns == ns => Ok(()),
        (None, None) => Ok(()),
        _ => {
            if let Some(background) = slot.take() {
                end_loop(background);
            }
            match interval_ns {
                Some(ns) => {
                    *slot = Some(spawn_background(ns)?);
                    Ok(())
                }
                None => Ok(()),
            }
        }
    }
}

/// After a session: the background loop again, if the observer wants one.
/// A failure leaves the watcher unserved until the next change, which is
/// all that can be done from stop().
fn restart_background(slot: &mut Option<Running>) {
    let ns = OBSERVER_INTERVAL_NS.load(Relaxed);
    if ns != 0 && slot.is_none() {
        *slot = spawn_background(ns).ok();
    }
}

fn spawn_background(interval_ns: u64) -> Result<Running, SamplerError> {
    crate::sampler::stopped_window::enable_from_env();
    let mut backend = platform::new_backend()?;
    backend.set_frame_pointer_code(crate::v8::frames::builtin_ranges());
    let options = SamplerOptions { interval_ns, mode: Mode::Cpu, record: false, ..Default::default() };
    let rewrite = js_frames(&options);
    let observer: Arc<dyn Observer> = observer_slot().clone();
    let hooks = Hooks { rewrite, on_tick: None, observer: Some(observer) };
    let shared = background_shared().clone();
    shared.native_unwinding.store(true, Relaxed);
    match RunningSampler::spawn(backend, options, shared, hooks) {
        Ok(sampler) => Ok(Running { sampler, perf_map: None, background: true }),
        Err(e) => {
            stop_js_frames();
            Err(e)
        }
    }
}

pub fn stop() -> Result<Session, SamplerError> {
    // The lock is held until the sampler thread has finished: a start()
    // from another JS thread meanwhile would otherwise begin a session that
    // resets the statistics and reclaims the slots this one is still
    // harvesting (stress/repro/concurrent-start-stop.js).
    let mut slot = running();
    if slot.as_ref().is_none_or(|r| r.background) {
        return Err(SamplerError::new(ErrorCode::Srch, "the sampler is not running; call start() first"));
    }
    let running = slot.take().expect("a session");
    let perf_map = running.perf_map.clone().expect("a session watches the perf map");
    // Code events stay on for the isolates that have them (see
    // `crate::v8::events::Policy::FromFirstStart`): this only ends the
    // session's want of them.
    let mut recording = end_loop(running);
    SESSION_LIVE.store(false, Relaxed);
    recording.stats.code_events_cpu_ns = code_events_cpu_ns();
    shared().stats.code_events_cpu_ns.set(recording.stats.code_events_cpu_ns);
    recording.stats.js_names_left_to_another_copy = u64::from(crate::v8::other_copies::left_to_another());
    shared().stats.js_names_left_to_another_copy.set(recording.stats.js_names_left_to_another_copy);
    restart_background(&mut slot);
    drop(slot);
    let perf_map = perf_map.lock().unwrap_or_else(PoisonError::into_inner).finish();
    Ok(Session { recording, perf_map })
}

/// Stops the sampler and builds the profile: the recording, the modules
/// loaded now, and JIT frames pinned to the perf-map line each sample saw
/// (see `symbols::jit_history`; that needs this process's perf map, so it
/// happens here rather than at symbolization).
pub fn stop_profile() -> Result<ProfileData, SamplerError> {
    let session = stop()?;
    let max_depth = session.recording.max_stack_depth;
    let mut data = ProfileData::from_recording(session.recording, Vec::new(), platform::loaded_modules());
    name_js_frames(&mut data, max_depth);
    crate::symbols::jit_history::pin_reused_jit_frames(&mut data, &session.perf_map);
    Ok(data)
}

/// The profile recorded so far, as [`stop_profile`] would build it, while
/// the session goes on (for a copy kept in case the process is killed
/// before it can stop). ESRCH without a session; EAGAIN if the sampler
/// thread did not answer within `timeout`.
pub fn profile_so_far(timeout: std::time::Duration) -> Result<ProfileData, SamplerError> {
    let (recording, perf_map) = {
        let slot = running();
        let Some(running) = slot.as_ref().filter(|r| !r.background) else {
            return Err(SamplerError::new(ErrorCode::Srch, "the sampler is not running; call start() first"));
        };
        let perf_map = running.perf_map.as_ref().map(|m| m.lock().unwrap_or_else(PoisonError::into_inner).so_far());
        let recording = running.sampler.snapshot(timeout).ok_or_else(|| {
            SamplerError::new(ErrorCode::Again, "the sampler thread did not hand over its recording in time")
        })?;
        (recording, perf_map.unwrap_or_default())
    };
    let max_depth = recording.max_stack_depth;
    let mut data = ProfileData::from_recording(recording, Vec::new(), platform::loaded_modules());
    // Quick rather than complete: V8's log, which can be large, is not
    // read, so inlined functions stay in the functions they were inlined in.
    if data.stats.js_samples > 0 {
        name_js_frames_of(&mut data, &Default::default(), max_depth);
    }
    crate::symbols::jit_history::pin_reused_jit_frames(&mut data, &perf_map);
    Ok(data)
}

/// Names the JavaScript frames the session recorded (by address: see
/// `crate::v8::frames`), from V8's code events, at each sample's time.
fn name_js_frames(data: &mut ProfileData, max_depth: usize) {
    if data.stats.js_samples == 0 {
        return;
    }
    // Read before the code map is locked: V8's code events wait for it.
    let inlines = v8_log();
    name_js_frames_of(data, &inlines, max_depth);
}

/// Names the JavaScript frames of a profile taken by this process's
/// sampler, however few, splitting out the inlined functions `inlines`
/// knows of as far as its stacks stay within `max_depth` frames.
pub fn name_js_frames_of(data: &mut ProfileData, inlines: &crate::v8::inline_log::InlineLog, max_depth: usize) {
    let map = crate::v8::code_map();
    let cols = crate::v8::resolve::StackColumns {
        frame_address: &mut data.frame_address,
        stack_frame: &mut data.stack_frame,
        stack_parent: &mut data.stack_parent,
    };
    crate::v8::resolve::resolve_js_frames(
        &map,
        cols,
        &mut data.sample_stack,
        &data.sample_time_ns,
        &mut data.js_names,
        inlines,
        max_depth,
    );
}

/// What this process's V8 log says about inlined functions, if it has one:
/// the file `MACHSAMPLER_V8_LOG` names, or else the one this process's own
/// `--log-code` (`--logfile`, by default `v8.log`) makes V8 write.
fn v8_log() -> crate::v8::inline_log::InlineLog {
    let path = match std::env::var_os(crate::v8::inline_log::V8_LOG_ENV) {
        Some(path) if !path.is_empty() => Some(std::path::PathBuf::from(path)),
        _ => v8_logfile(std::env::args_os().map(|a| a.to_string_lossy().into_owned())),
    };
    match path {
        Some(path) => crate::v8::inline_log::InlineLog::read(&path, std::process::id()),
        None => Default::default(),
    }
}

/// The `--logfile` of a V8 run with `--log-code` (or `--log-all`), from a
/// command line: node's options before the first argument that is not one,
/// and the V8 flags of a Chromium `--js-flags=` switch (Electron), which
/// may come anywhere before `--`.
fn v8_logfile(args: impl Iterator<Item = String>) -> Option<std::path::PathBuf> {
    let args: Vec<String> = args.skip(1).collect();
    let mut options: Vec<&str> = args.iter().take_while(|a| a.starts_with('-')).map(String::as_str).collect();
    for a in args.iter().take_while(|a| *a != "--") {
        if let Some(flags) = a.strip_prefix("--js-flags=") {
            options.extend(flags.split_whitespace());
        }
    }
    // V8 takes `_` and `-` alike in a flag's name (not in its value).
    let name = |a: &str| a.split('=').next().unwrap_or(a).replace('_', "-");
    if !options.iter().any(|a| name(a) == "--log-code" || name(a) == "--log-all") {
        return None;
    }
    let file = options
        .iter()
        .rev()
        .find(|a| name(a) == "--logfile")
        .and_then(|a| a.split_once('='))
        .map_or("v8.log", |(_, f)| f);
    // `-` is the console, `+` a temporary file: nothing to read.
    (file != "-" && file != "+").then(|| std::path::PathBuf::from(file))
}

/// Whether JavaScript frames can be named from V8 in this process: at least
/// one JS thread registered its isolate (see `crate::v8`).
pub fn js_frames_available() -> bool {
    !crate::v8::registry::all().is_empty()
}

/// Starts V8 code events and JS frame capture, if V8 is usable here.
fn js_frames(options: &SamplerOptions) -> Option<Box<dyn crate::sampler::backend::StackRewrite>> {
    if !options.js_names || !options.native_unwinding || !js_frames_available() {
        return None;
    }
    crate::v8::enable_code_events();
    platform::set_js_frames(true);
    Some(Box::new(V8JsFrames::new()))
}

fn stop_js_frames() {
    platform::set_js_frames(false);
    release_js_names_if_idle_locked();
}

/// Ends the want of code events, for a caller that holds the lock and
/// has no running session.
fn release_js_names_if_idle_locked() {
    if js_frames_available() {
        crate::v8::disable_code_events();
    }
}

/// A thread was just created (a worker): the running loop, if any, looks
/// for threads now rather than at its next refresh, so the new thread is
/// sampled (and its isolate found) from its first moments. Never waits: a
/// `start()` or `stop()` in progress makes it do nothing.
pub fn look_for_threads() {
    let Ok(slot) = RUNNING.try_lock() else { return };
    let Some(r) = slot.as_ref() else { return };
    let shared = if r.background { background_shared() } else { shared() };
    shared.look_for_threads.store(true, std::sync::atomic::Ordering::Release);
    r.sampler.wake();
}

pub fn is_running() -> bool {
    running().as_ref().is_some_and(|r| !r.background)
}

/// The options of the running session.
pub fn current_options() -> Option<SamplerOptions> {
    running().as_ref().filter(|r| !r.background).map(|r| r.sampler.options)
}

pub fn stats() -> StatsSnapshot {
    let s = shared();
    let mut out = s.stats.snapshot(s.registry.len() as u64);
    if SESSION_LIVE.load(Relaxed) {
        out.code_events_cpu_ns = code_events_cpu_ns();
        out.js_names_left_to_another_copy = u64::from(crate::v8::other_copies::left_to_another());
    }
    out
}

/// [`crate::v8::events::install_cpu_ns`] when the session began.
static CODE_EVENTS_CPU_AT_START: AtomicU64 = AtomicU64::new(0);
/// A session runs (read without the control lock, which `stop()` holds
/// while the sampler thread finishes).
static SESSION_LIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The CPU time JavaScript threads spent on code-event installs since the
/// session began (enumerations V8 runs later, at interrupts, included).
fn code_events_cpu_ns() -> u64 {
    crate::v8::events::install_cpu_ns().saturating_sub(CODE_EVENTS_CPU_AT_START.load(Relaxed))
}

/// Threads currently known. While sampling this is the sampler's registry;
/// otherwise the platform is asked directly.
pub fn thread_count() -> Result<usize, SamplerError> {
    if is_running() {
        let known = shared().registry.len();
        if known > 0 {
            return Ok(known);
        }
        // The sampler thread has not listed the threads yet.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v8_logfile_comes_from_node_s_own_options() {
        let f = |args: &[&str]| v8_logfile(args.iter().map(|a| a.to_string()));
        let path = |p: &str| Some(std::path::PathBuf::from(p));
        assert_eq!(f(&["node", "--log-code", "--logfile=/tmp/x.log", "app.js"]), path("/tmp/x.log"));
        assert_eq!(f(&["node", "--log_code", "app.js"]), path("v8.log"));
        assert_eq!(f(&["node", "--log-all", "--logfile=-", "app.js"]), None);
        assert_eq!(f(&["node", "app.js", "--log-code"]), None, "the program's own argument");
        assert_eq!(f(&["node", "--logfile=/tmp/x.log", "app.js"]), None, "no code log");
        assert_eq!(f(&["node", "--log_code", "--logfile=/tmp/my_log.txt", "app.js"]), path("/tmp/my_log.txt"));
        // Electron: V8's flags in Chromium's switch, before or after the app.
        let electron = ["electron", ".", "--js-flags=--log-code --logfile-per-isolate --logfile=/tmp/e_1.log"];
        assert_eq!(f(&electron), path("/tmp/e_1.log"));
        assert_eq!(f(&["electron", "--js-flags=--log_code", "."]), path("v8.log"));
        assert_eq!(f(&["electron", ".", "--", "--js-flags=--log-code"]), None, "the app's own argument");
        assert_eq!(f(&["electron", "--js-flags=--max-old-space-size=100", "."]), None, "no code log");
    }
}
