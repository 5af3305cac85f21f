//! Finding JavaScript threads without their help: every isolate that runs
//! JavaScript while sampling is registered, whoever made its thread
//! (a `Worker` taken before the addon loaded, a library's pool, `eval`
//! workers, ESM, workers created before `start()`).
//!
//! The signal handler of a thread that is not registered notes V8's
//! current isolate there ([`note_current_thread`]) when the interrupted pc
//! is in V8's generated code. While that holds, the isolate is alive and
//! stays alive: generated code runs only on an entered isolate, which
//! cannot be disposed of until the code returns. So the handler hands the
//! isolate to the discovery thread and waits (a futex, bounded) while that
//! thread calls `Isolate::RequestInterrupt`, which V8 documents as callable
//! from any thread. The wait is what makes the call safe: the isolate
//! cannot die during it. It is also deadlock-free: `RequestInterrupt` takes
//! the isolate's interrupt lock and allocates, and a thread whose pc is in
//! generated code holds neither the interrupt lock (V8 never runs
//! JavaScript under it) nor a malloc lock (it is not inside malloc). If the
//! discovery thread has not taken the request within [`WAIT_NS`], the
//! handler withdraws it and returns; once taken, the handler waits for the
//! call to finish.
//!
//! The interrupt then runs on the thread itself, in JavaScript, where
//! registering is ordinary work ([`super::register_current_thread`], code
//! events); a Node environment cleanup hook unregisters it before the
//! isolate is disposed of (also on `worker.terminate()`), as for threads
//! that load the addon. An isolate without a Node environment is not
//! registered (nothing would tell us when it dies); it is asked again a
//! few times (a new worker's first scripts run before its environment).
//!
//! Cost to a new thread: one stop of up to the discovery thread's wake-up
//! time, once. Why and how it was measured: `docs/design/isolate-discovery.md`.
//!
//! Linux only for now: the Mach backend does not call it (its waiting
//! would be on a suspended thread instead of a signal handler).
#![cfg_attr(not(target_os = "linux"), allow(dead_code, unused_imports))]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

use super::api::{api, api_if_resolved, Api, Isolate};
use super::{events, registry};

/// How long a handler waits for the discovery thread to take its request.
/// On 2 busy cores the discovery thread's wake-up took up to ~5 ms.
pub const WAIT_NS: u64 = 20_000_000;

/// Requests in flight at once (one per thread being discovered).
const CELLS: usize = 16;
/// Isolates remembered as asked about (so a thread is stopped for this
/// once, not at every sample until its interrupt runs).
const ASKED: usize = 256;
/// An isolate asked about this long ago (whose interrupt never ran) may be
/// asked again.
const ASK_AGAIN_NS: u64 = 1_000_000_000;
/// Times one isolate is asked before giving up on it.
const MAX_ASKS: u32 = 8;
/// How soon an isolate found without a Node environment is asked again.
const NO_ENVIRONMENT_RETRY_NS: u64 = 5_000_000;

const EMPTY: u32 = 0;
const FILLING: u32 = 1;
const POSTED: u32 = 2;
const CLAIMED: u32 = 3;
const DONE: u32 = 4;
const WITHDRAWN: u32 = 5;

struct Cell {
    state: AtomicU32,
    isolate: AtomicUsize,
    tid: AtomicU64,
}

static REQUESTS: [Cell; CELLS] =
    [const { Cell { state: AtomicU32::new(EMPTY), isolate: AtomicUsize::new(0), tid: AtomicU64::new(0) } }; CELLS];

struct Asked {
    isolate: AtomicUsize,
    at_ns: AtomicU64,
    times: AtomicU32,
}

static ASKED_TABLE: [Asked; ASKED] =
    [const { Asked { isolate: AtomicUsize::new(0), at_ns: AtomicU64::new(0), times: AtomicU32::new(0) } }; ASKED];

/// Bumped and woken for every posted request: the discovery thread waits
/// on it.
static BELL: AtomicU32 = AtomicU32::new(0);
/// Whether the discovery thread runs (requests are only posted then).
static RUNNING: AtomicBool = AtomicBool::new(false);
static SPAWN: Once = Once::new();

static NOTED: AtomicU64 = AtomicU64::new(0);
static POSTED_COUNT: AtomicU64 = AtomicU64::new(0);
static WITHDRAWN_COUNT: AtomicU64 = AtomicU64::new(0);
static REQUESTED: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicU64 = AtomicU64::new(0);
static NO_ENVIRONMENT: AtomicU64 = AtomicU64::new(0);
static WAITED_NS_MAX: AtomicU64 = AtomicU64::new(0);
static REGISTER_CPU_NS: AtomicU64 = AtomicU64::new(0);

#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_os = "linux")]
fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: Option<u64>) {
    let ts = timeout_ns
        .map(|ns| libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as _ });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 with a valid (or null)
    // relative timeout; a plain system call, async-signal-safe.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, ts_ptr)
    };
}

#[cfg(target_os = "linux")]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; async-signal-safe.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}

/// The modules loaded when discovery started (their whole images), which
/// hold no code V8 generated except its embedded builtins: a pc there is
/// answered without reading the isolate. That matters while a thread
/// disposes of its isolate: V8 keeps it as the thread's current isolate
/// until after freeing its memory, so reading it then could fault; that
/// code (V8's teardown, `free`, `munmap`) is all in these modules.
const NATIVE_IMAGES: usize = 64;
static NATIVE_IMAGE_COUNT: AtomicUsize = AtomicUsize::new(0);
static NATIVE_IMAGE_RANGES: [(AtomicU64, AtomicU64); NATIVE_IMAGES] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; NATIVE_IMAGES];

/// Fills [`NATIVE_IMAGE_RANGES`] (before discovery runs, so before any
/// handler reads them).
#[cfg(target_os = "linux")]
fn note_native_images() {
    let mut n = 0;
    for m in crate::platform::linux::modules::loaded_modules().iter().filter(|m| m.start < m.end).take(NATIVE_IMAGES) {
        NATIVE_IMAGE_RANGES[n].0.store(m.start, Ordering::Relaxed);
        NATIVE_IMAGE_RANGES[n].1.store(m.end, Ordering::Relaxed);
        n += 1;
    }
    NATIVE_IMAGE_COUNT.store(n, Ordering::Release);
}

fn in_native_image(pc: u64) -> bool {
    let n = NATIVE_IMAGE_COUNT.load(Ordering::Acquire);
    NATIVE_IMAGE_RANGES[..n.min(NATIVE_IMAGES)]
        .iter()
        .any(|(start, end)| pc >= start.load(Ordering::Relaxed) && pc < end.load(Ordering::Relaxed))
}

/// True if `pc` is in V8's generated code for `isolate`: the embedded
/// builtins, or the isolate's code range (which holds JIT code and, from
/// Node 20 on, the remapped builtins). Async-signal-safe: reads only.
fn in_generated_code(api: &Api, isolate: *mut Isolate, pc: u64) -> bool {
    if events::embedded_range().is_some_and(|r| r.contains(pc)) {
        return true;
    }
    if in_native_image(pc) {
        return false;
    }
    // SAFETY: the isolate is the calling thread's current one (checked by
    // the caller); GetCodeRange reads two fields fixed at its creation.
    let code = unsafe { api.code_range(isolate) };
    code.contains(pc)
}

/// Whether to ask about `isolate` now, recording that we do.
fn should_ask(isolate: usize, now: u64) -> bool {
    let mut free = None;
    for a in &ASKED_TABLE {
        let i = a.isolate.load(Ordering::Acquire);
        if i == isolate {
            let at = a.at_ns.load(Ordering::Relaxed);
            if now.saturating_sub(at) < ASK_AGAIN_NS || a.times.load(Ordering::Relaxed) >= MAX_ASKS {
                return false;
            }
            a.at_ns.store(now, Ordering::Relaxed);
            a.times.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if i == 0 && free.is_none() {
            free = Some(a);
        }
    }
    // A new isolate: remember it if there is room (else ask anyway; the
    // cost is one more short stop).
    if let Some(a) = free {
        if a.isolate.compare_exchange(0, isolate, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            a.at_ns.store(now, Ordering::Relaxed);
            a.times.store(1, Ordering::Relaxed);
        }
    }
    true
}

/// Forgets that an isolate was asked about (it registered, or was
/// disposed of: its address may be another isolate's next).
fn forget_asked(isolate: usize) {
    for a in &ASKED_TABLE {
        if a.isolate.load(Ordering::Acquire) == isolate {
            a.times.store(0, Ordering::Relaxed);
            a.at_ns.store(0, Ordering::Relaxed);
            a.isolate.store(0, Ordering::Release);
        }
    }
}

/// A request that was withdrawn may be made again at the next sample.
fn ask_again_soon(isolate: usize) {
    for a in &ASKED_TABLE {
        if a.isolate.load(Ordering::Acquire) == isolate {
            a.at_ns.store(0, Ordering::Relaxed);
        }
    }
}

/// An isolate that had no Node environment yet (a worker found in the
/// scripts V8 runs for a new context, before node made its environment):
/// asked again after [`NO_ENVIRONMENT_RETRY_NS`], doubled at each ask (5,
/// 10, 20 ms, ...: the eight asks span about 0.6 s, for a loaded machine),
/// within the limit of [`MAX_ASKS`], so an isolate that never gets one
/// costs little.
fn ask_again_later(isolate: usize, now: u64) {
    for a in &ASKED_TABLE {
        if a.isolate.load(Ordering::Acquire) == isolate {
            let asked = a.times.load(Ordering::Relaxed).clamp(1, MAX_ASKS);
            let delay = NO_ENVIRONMENT_RETRY_NS << (asked - 1);
            a.at_ns.store((now + delay).saturating_sub(ASK_AGAIN_NS), Ordering::Relaxed);
        }
    }
}

/// For the signal handler of a thread that is not registered: if V8 has a
/// current isolate here and `pc` is in its generated code, has the
/// discovery thread ask V8 to register it on this thread, waiting (at most
/// [`WAIT_NS`] for the request to be taken) so that the isolate stays alive
/// meanwhile. Once per isolate: again at the next sample if the request was
/// withdrawn, after a second if its interrupt never ran, soon if it had no
/// Node environment yet, eight times at most. Async-signal-safe: atomics,
/// `clock_gettime`, futex, and V8's `TryGetCurrent`/`GetCodeRange` (reads
/// only); allocates nothing and takes no lock.
#[cfg(target_os = "linux")]
pub fn note_current_thread(pc: u64) {
    if !RUNNING.load(Ordering::Acquire) {
        return;
    }
    let Some(api) = api_if_resolved() else { return };
    // SAFETY: TryGetCurrent reads a thread-local of the node binary.
    let isolate = unsafe { (api.try_get_current)() };
    if isolate.is_null() || !in_generated_code(api, isolate, pc) {
        return;
    }
    NOTED.fetch_add(1, Ordering::Relaxed);
    let tid = crate::sampler::thread_id::current();
    let t0 = monotonic_ns();
    if !should_ask(isolate as usize, t0) {
        return;
    }
    let Some(cell) = REQUESTS
        .iter()
        .find(|c| c.state.compare_exchange(EMPTY, FILLING, Ordering::Acquire, Ordering::Relaxed).is_ok())
    else {
        return;
    };
    cell.isolate.store(isolate as usize, Ordering::Relaxed);
    cell.tid.store(tid, Ordering::Relaxed);
    cell.state.store(POSTED, Ordering::Release);
    POSTED_COUNT.fetch_add(1, Ordering::Relaxed);
    BELL.fetch_add(1, Ordering::Release);
    futex_wake(&BELL);
    loop {
        let s = cell.state.load(Ordering::Acquire);
        match s {
            DONE => break,
            POSTED => {
                let waited = monotonic_ns().saturating_sub(t0);
                if waited >= WAIT_NS {
                    if cell.state.compare_exchange(POSTED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        WITHDRAWN_COUNT.fetch_add(1, Ordering::Relaxed);
                        ask_again_soon(isolate as usize);
                        break;
                    }
                    continue; // taken meanwhile: wait for the call to end
                }
                futex_wait(&cell.state, POSTED, Some(WAIT_NS - waited));
            }
            // Taken: `RequestInterrupt` is running; it cannot block on
            // anything this thread holds (see the module docs).
            _ => futex_wait(&cell.state, s, Some(1_000_000)),
        }
    }
    WAITED_NS_MAX.fetch_max(monotonic_ns().saturating_sub(t0), Ordering::Relaxed);
    cell.isolate.store(0, Ordering::Relaxed);
    cell.state.store(EMPTY, Ordering::Release);
}

#[cfg(not(target_os = "linux"))]
pub fn note_current_thread(_pc: u64) {}

/// The discovery thread: takes posted requests and calls
/// `RequestInterrupt` for each while its thread waits.
#[cfg(target_os = "linux")]
fn serve(api: &'static Api) {
    loop {
        let bell = BELL.load(Ordering::Acquire);
        for cell in &REQUESTS {
            if cell.state.compare_exchange(POSTED, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            let isolate = cell.isolate.load(Ordering::Relaxed) as *mut Isolate;
            let tid = cell.tid.load(Ordering::Relaxed);
            REQUESTED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the isolate's own thread is stopped in its signal
            // handler with its pc in generated code until we publish DONE,
            // so the isolate is alive for the whole call (module docs);
            // RequestInterrupt is documented as callable from any thread.
            // The data is a plain integer, nothing to free if the
            // interrupt never runs.
            unsafe { (api.request_interrupt)(isolate, on_interrupt, tid as usize as *mut c_void) };
            cell.state.store(DONE, Ordering::Release);
            futex_wake(&cell.state);
        }
        futex_wait(&BELL, bell, None);
    }
}

/// Starts the discovery thread (once, on first use). Call outside any
/// signal handler, e.g. when sampling with JavaScript names starts.
pub fn start() {
    #[cfg(target_os = "linux")]
    SPAWN.call_once(|| {
        let Ok(api) = api() else { return };
        if api.node_get_current_event_loop.is_none() || api.node_add_env_cleanup_hook.is_none() {
            return;
        }
        note_native_images();
        // Every signal blocked, like the sampler thread: this thread never
        // runs a sampling handler, so it can never wait for itself.
        let spawned = crate::sampler::session::with_signals_blocked(|| {
            std::thread::Builder::new().name("machsampler-v8".into()).spawn(move || {
                let _own = crate::sampler::own_threads::OwnThread::mark();
                // A handler waits on this thread: it must get a core at
                // once even when busy threads fill them all.
                crate::platform::linux::sched::run_promptly();
                serve(api)
            })
        });
        if spawned.is_ok() {
            RUNNING.store(true, Ordering::Release);
        }
    });
}

/// Runs on the discovered thread, at V8's next interrupt check, in
/// JavaScript: registers the isolate with a Node environment cleanup hook.
extern "C" fn on_interrupt(isolate: *mut Isolate, data: *mut c_void) {
    let cpu0 = events::thread_cpu_ns();
    register_here(isolate, data);
    REGISTER_CPU_NS.fetch_add(events::thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
}

fn register_here(isolate: *mut Isolate, data: *mut c_void) {
    let Ok(api) = api() else { return };
    let tid = data as usize as u64;
    // SAFETY: TryGetCurrent reads a thread-local.
    let current = unsafe { (api.try_get_current)() };
    if current != isolate || crate::sampler::thread_id::current() != tid {
        return;
    }
    if registry::isolate_for_tid(tid) == Some(isolate) {
        forget_asked(isolate as usize);
        return; // registered meanwhile (the addon loaded here)
    }
    let (Some(event_loop), Some(add_hook)) = (api.node_get_current_event_loop, api.node_add_env_cleanup_hook) else {
        return;
    };
    // A Node environment must own the current context: its cleanup hooks
    // are what tells us, before the isolate is disposed of, that it goes.
    // SAFETY: on the isolate's own thread, inside V8 (an interrupt runs in
    // JavaScript, in a context); the function opens its own handle scope
    // and returns null without an environment.
    if unsafe { event_loop(isolate) }.is_null() {
        NO_ENVIRONMENT.fetch_add(1, Ordering::Relaxed);
        ask_again_later(isolate as usize, monotonic_ns());
        return;
    }
    let Ok(reg) = super::register_current_thread() else { return };
    super::frames::remember_ranges(reg.tid, reg.ranges);
    // SAFETY: as above; the environment exists (checked just now, same
    // context), so node's CHECK holds. The hook is a plain function of this
    // library, which is never unloaded; its argument is the tid.
    unsafe { add_hook(isolate, on_environment_cleanup, reg.tid as usize as *mut c_void) };
    forget_asked(isolate as usize);
    REGISTERED.fetch_add(1, Ordering::Relaxed);
}

/// Node runs this on the thread, before it disposes of the isolate.
extern "C" fn on_environment_cleanup(data: *mut c_void) {
    let tid = data as usize as u64;
    if let Some(isolate) = registry::isolate_for_tid(tid) {
        forget_asked(isolate as usize);
    }
    super::unregister_current_thread();
    super::frames::forget_ranges(tid);
}

/// Counters, for tests and the bench.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscoveryStats {
    /// Handler calls that found an unregistered isolate in generated code.
    pub noted: u64,
    pub posted: u64,
    /// Requests withdrawn because the discovery thread was late.
    pub withdrawn: u64,
    /// `RequestInterrupt` calls made.
    pub requested: u64,
    /// Isolates registered from their interrupt.
    pub registered: u64,
    /// Interrupts that found no Node environment (asked again later).
    pub no_environment: u64,
    /// The longest a handler waited, ns.
    pub waited_ns_max: u64,
    /// CPU time of the registering interrupts (code-event installs
    /// included), ns.
    pub register_cpu_ns: u64,
}

pub fn stats() -> DiscoveryStats {
    DiscoveryStats {
        noted: NOTED.load(Ordering::Relaxed),
        posted: POSTED_COUNT.load(Ordering::Relaxed),
        withdrawn: WITHDRAWN_COUNT.load(Ordering::Relaxed),
        requested: REQUESTED.load(Ordering::Relaxed),
        registered: REGISTERED.load(Ordering::Relaxed),
        no_environment: NO_ENVIRONMENT.load(Ordering::Relaxed),
        waited_ns_max: WAITED_NS_MAX.load(Ordering::Relaxed),
        register_cpu_ns: REGISTER_CPU_NS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The asked table is shared: its tests take turns.
    static TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[cfg(target_os = "linux")]
    #[test]
    fn code_of_loaded_modules_is_answered_without_the_isolate() {
        note_native_images();
        // This function's code, and libc's.
        assert!(in_native_image(code_of_loaded_modules_is_answered_without_the_isolate as *const () as usize as u64));
        assert!(in_native_image(libc::free as *const () as usize as u64));
        // Heap memory is in no image (JIT code lives in anonymous memory too).
        let heap = Box::new(0u64);
        assert!(!in_native_image(&*heap as *const u64 as u64));
    }

    #[test]
    fn an_isolate_is_asked_once_a_second_eight_times_at_most() {
        let _turn = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let iso = 0x7fee_0000_1000usize;
        assert!(should_ask(iso, 10));
        assert!(!should_ask(iso, 10 + ASK_AGAIN_NS - 1));
        assert!(should_ask(iso, 10 + ASK_AGAIN_NS));
        ask_again_soon(iso);
        assert!(should_ask(iso, 10 + ASK_AGAIN_NS + 1), "withdrawn: asked at the next sample");
        for i in 3..MAX_ASKS as u64 {
            assert!(should_ask(iso, 10 + i * ASK_AGAIN_NS));
        }
        assert!(!should_ask(iso, 10 + 99 * ASK_AGAIN_NS), "given up after {MAX_ASKS}");
        forget_asked(iso);
        assert!(should_ask(iso, 10 + 99 * ASK_AGAIN_NS), "a new isolate at the same address");
        forget_asked(iso);
    }

    #[test]
    fn an_isolate_without_environment_is_asked_again_soon_within_the_limit() {
        let _turn = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let iso = 0x7fee_0000_2000usize;
        let t0 = 5 * ASK_AGAIN_NS;
        assert!(should_ask(iso, t0));
        ask_again_later(iso, t0);
        assert!(!should_ask(iso, t0 + NO_ENVIRONMENT_RETRY_NS - 1));
        let mut t = t0 + NO_ENVIRONMENT_RETRY_NS;
        for asked in 1..MAX_ASKS {
            assert!(should_ask(iso, t), "ask {}", asked + 1);
            ask_again_later(iso, t);
            let delay = NO_ENVIRONMENT_RETRY_NS << asked;
            assert!(!should_ask(iso, t + delay - 1), "backs off: {delay} ns after ask {}", asked + 1);
            t += delay;
        }
        assert!(!should_ask(iso, t + 99 * ASK_AGAIN_NS), "given up after {MAX_ASKS}");
        forget_asked(iso);
    }

    #[test]
    fn nothing_is_noted_without_v8() {
        note_current_thread(0x1234);
        assert_eq!(stats().noted, 0);
    }
}
