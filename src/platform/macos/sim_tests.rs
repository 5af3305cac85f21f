//! The Mach backend, run for real against the simulated Mach
//! (`crate::platform::machsim`): sessions with busy, blocked, churning and
//! exiting threads, each injected error, and the simulated kernel's audit
//! of every port right and suspension after each session.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::*;
use crate::platform::machsim::{self, audit, faults, faults::Call};
use crate::sampler::backend::Mode;
use crate::sampler::options::SamplerOptions;
use crate::sampler::session::{Hooks, Recording, RunningSampler, Shared};

/// Events the hook installed before ours received (see `serial`).
static PREVIOUS_HOOK_EVENTS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn previous_hook(_: std::ffi::c_uint, _: libc::pthread_t, _: *mut std::ffi::c_void, _: usize) {
    PREVIOUS_HOOK_EVENTS.fetch_add(1, Ordering::SeqCst);
}

/// The simulated kernel and its faults are process-wide: one test at a time.
/// The first call installs a hook before ours, as a sanitizer or
/// Instruments would, which ours must keep receiving events.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    static PREVIOUS: std::sync::Once = std::sync::Once::new();
    // SAFETY: a hook with the right signature that only counts.
    PREVIOUS.call_once(|| unsafe {
        assert!(sys::pthread_introspection_hook_install(previous_hook).is_none(), "ours must come second");
    });
    let g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    faults::clear();
    machsim::pthread::EXIT_DELAY_NS.store(0, Ordering::SeqCst);
    machsim::CPU_CLOCK_LAGS.store(false, Ordering::SeqCst);
    crate::sampler::stopped_window::set_enabled(true);
    machsim::audit::set_owner(hook::owned_rights);
    g
}

fn run_session(interval_ms: f64, for_ms: u64) -> (Recording, Arc<Shared>) {
    run_session_in(Mode::default(), interval_ms, for_ms)
}

fn run_session_in(mode: Mode, interval_ms: f64, for_ms: u64) -> (Recording, Arc<Shared>) {
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions { mode, ..SamplerOptions::default().with_interval_ms(interval_ms).unwrap() };
    let backend = MachBackend::new().expect("backend");
    let running = RunningSampler::spawn(backend, options, shared.clone(), Hooks::default()).unwrap();
    std::thread::sleep(Duration::from_millis(for_ms));
    (running.stop(), shared)
}

fn assert_audit_clean() {
    let report = audit::audit();
    assert!(report.is_clean(), "{report:?}");
}

/// A thread that spins in a recognisable, frame-pointer-walkable function
/// until told to stop; returns its tid.
#[inline(never)]
fn spin_deep(depth: u32, stop: &AtomicBool) -> u64 {
    if depth == 0 {
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        return x;
    }
    black_box(spin_deep(depth - 1, stop)) + 1
}

/// A frame with 16 KiB of locals between two frame records (libuv's poll
/// loop keeps 32 KiB of `kevent`s there on macOS), above `spin_deep`.
#[inline(never)]
fn spin_under_a_large_frame(depth: u32, stop: &AtomicBool) -> u64 {
    let mut events = [0u8; 16384];
    black_box(&mut events);
    let x = spin_deep(depth, stop);
    black_box(&events);
    x
}

struct Busy {
    stop: Arc<AtomicBool>,
    tid: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

fn busy() -> Busy {
    busy_in(spin_deep)
}

/// A thread spinning in `spin(12, stop)`.
fn busy_in(spin: fn(u32, &AtomicBool) -> u64) -> Busy {
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU64::new(0));
    let (s, t) = (stop.clone(), tid.clone());
    let handle = std::thread::spawn(move || {
        t.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
        black_box(spin(12, &s));
    });
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    Busy { stop, tid, handle }
}

impl Busy {
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap();
        self.tid.load(Ordering::SeqCst)
    }
}

/// Samples of `tid` that were captured (not idle), and their deepest stack.
fn captured(rec: &Recording, tid: u64) -> (usize, usize) {
    let Some(index) = rec.threads.iter().position(|t| t.tid == tid) else { return (0, 0) };
    let mut n = 0;
    let mut deepest = 0;
    for i in 0..rec.samples.len() {
        let s = rec.samples.get(i).unwrap();
        if s.thread as usize == index && !s.idle {
            n += 1;
            deepest = deepest.max(rec.stacks.addresses(s.stack).len());
        }
    }
    (n, deepest)
}

/// Other threads allocating all the time, so that an allocation in the
/// window would meet a malloc lock held by a stopped thread.
fn malloc_contention() -> (Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let v: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 + i * 8]).collect();
                    black_box(v);
                }
            })
        })
        .collect();
    (stop, handles)
}

#[test]
fn threads_from_task_threads_and_from_the_hook_are_sampled_and_every_right_is_accounted_for() {
    let _g = serial();
    let (alloc_stop, allocators) = malloc_contention();
    let before = busy(); // exists before the backend: found by task_threads
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions::default().with_interval_ms(2.0).unwrap();
    let backend = MachBackend::new().unwrap();
    let running = RunningSampler::spawn(backend, options, shared, Hooks::default()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let after = busy(); // created while sampling: found by the hook
    std::thread::sleep(Duration::from_millis(600));
    let rec = running.stop();
    let (before_tid, after_tid) = (before.finish(), after.finish());
    alloc_stop.store(true, Ordering::SeqCst);
    allocators.into_iter().for_each(|h| h.join().unwrap());

    for tid in [before_tid, after_tid] {
        let (n, deepest) = captured(&rec, tid);
        // Fewer than the 150 ticks: on 2 cores shared with 4 busy threads a
        // park waits for the scheduler (docs/design/mach-simulation.md).
        assert!(n > 5, "thread {tid}: {n} captured samples");
        assert!(deepest >= 12, "thread {tid}: deepest stack {deepest}, the walk must pass spin_deep's frames");
    }
    assert_eq!(rec.stats.walk_errors, 0);
    assert_eq!(rec.stats.threads_sampled, rec.stats.samples_captured + rec.stats.samples_dropped);
    assert!(rec.stats.max_suspend_ns > 0);
    // The sampler asked for the highest non-real-time QoS class.
    assert!(!machsim::threads_with_qos(machsim::qos_class_t::QOS_CLASS_USER_INTERACTIVE).is_empty());
    assert_audit_clean();
}

#[test]
fn wall_mode_rate_is_within_ten_percent_and_idle_threads_are_not_suspended() {
    let _g = serial();
    let (rec, _) = run_session_in(Mode::Wall, 10.0, 1000);
    let elapsed_ms = (rec.end_ns - rec.start_ns) as f64 / 1e6;
    let expected = elapsed_ms / 10.0;
    let ticks = rec.stats.ticks as f64;
    assert!((ticks / expected - 1.0).abs() < 0.1, "ticks {ticks} for {expected:.0} expected");
    // The test harness's main thread waits the whole time: after its first
    // capture it is carried forward, never suspended again.
    assert!(rec.stats.idle_samples > 0, "{:?} {:?}", rec.stats, rec.threads);
    assert_audit_clean();
}

/// A thread's CPU time from its Linux CPU clock: the kernel's own account,
/// not the simulated `thread_info` the sampler reads.
fn linux_cpu_clock_ns(thread: libc::pthread_t) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `thread` is a live thread of this process (its JoinHandle is
    // held); both out-pointers are valid.
    unsafe {
        assert_eq!(libc::pthread_getcpuclockid(thread, &mut clock), 0);
        assert_eq!(libc::clock_gettime(clock, &mut ts), 0);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Total weight and rows of `tid`'s samples.
fn weight_and_rows(rec: &Recording, tid: u64) -> (u64, usize) {
    let Some(index) = rec.threads.iter().position(|t| t.tid == tid) else { return (0, 0) };
    let rows: Vec<usize> = (0..rec.samples.len()).filter(|&i| rec.samples.thread[i] as usize == index).collect();
    (rows.iter().map(|&i| rec.samples.weight[i] as u64).sum(), rows.len())
}

#[test]
fn cpu_mode_weights_follow_thread_info_cpu_time_and_blocked_threads_are_left_alone() {
    use std::os::unix::thread::JoinHandleExt;
    let _g = serial();
    let b = busy();
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let blocked = std::thread::spawn(move || {
        tid_tx.send(crate::sampler::thread_id::current()).unwrap();
        let _ = wait.recv();
    });
    let blocked_tid = tid_rx.recv().unwrap();
    let cpu = || linux_cpu_clock_ns(b.handle.as_pthread_t());
    // The CPU time the session may have counted lies between that of the
    // whole run and that of a window inside it (the session's first look at
    // the thread may come late on a loaded machine).
    let outer0 = cpu();
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions { mode: Mode::Cpu, ..SamplerOptions::default().with_interval_ms(2.0).unwrap() };
    let running = RunningSampler::spawn(MachBackend::new().unwrap(), options, shared, Hooks::default()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let inner0 = cpu();
    std::thread::sleep(Duration::from_millis(500));
    let inner = cpu() - inner0;
    let rec = running.stop();
    let outer = cpu() - outer0;
    let busy_tid = b.finish();
    release.send(()).unwrap();
    blocked.join().unwrap();

    // On the tick loop, the backend's thread_info CPU time decides: the busy
    // thread's weights add up to the CPU time it got (2 ms each), whatever
    // share of the 2 shared cores that was.
    let (weight, rows) = weight_and_rows(&rec, busy_tid);
    let (low, high) = (inner as f64 / 2e6, outer as f64 / 2e6);
    assert!(low > 20.0, "{low}");
    assert!(
        weight as f64 >= low * 0.9 - 3.0 && weight as f64 <= high * 1.1 + 3.0,
        "weight {weight} for {low:.1}..{high:.1} intervals of CPU"
    );
    assert!(rows > 5 && rows as u64 <= weight, "{rows} rows");
    // The blocked thread: its first stack, then never suspended again, and
    // no idle samples in CPU mode.
    assert_eq!(weight_and_rows(&rec, blocked_tid), (1, 1));
    assert_eq!(rec.stats.idle_samples, 0);
    assert!(rec.samples.idle.iter().all(|&i| i == 0));
    assert_eq!(rec.stats.walk_errors, 0);
    assert_audit_clean();
}

#[test]
fn thread_churn_with_exits_mid_sample_is_skipped_never_a_walk_error() {
    let _g = serial();
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions::default().with_interval_ms(1.0).unwrap();
    let running = RunningSampler::spawn(MachBackend::new().unwrap(), options, shared, Hooks::default()).unwrap();
    let deadline = Instant::now() + Duration::from_millis(700);
    let mut spawned = 0;
    while Instant::now() < deadline {
        let batch: Vec<_> = (0..6)
            .map(|i| {
                std::thread::spawn(move || {
                    let until = Instant::now() + Duration::from_micros(300 + i * 400);
                    let mut x = 0u64;
                    while Instant::now() < until {
                        x = black_box(x + 1);
                    }
                })
            })
            .collect();
        spawned += batch.len();
        batch.into_iter().for_each(|h| h.join().unwrap());
    }
    let rec = running.stop();
    assert!(spawned > 100, "{spawned}");
    // Threads shorter than a refresh period (20 ms) may never enter the
    // session; those that do are found by the hook, not a rescan.
    assert!(rec.threads.len() > 10, "{}", rec.threads.len());
    assert_eq!(rec.stats.walk_errors, 0, "{:?}", rec.stats);
    assert_audit_clean();
}

#[test]
fn a_thread_caught_after_its_exit_hook_is_skipped_not_walked() {
    let _g = serial();
    // Exiting threads stay 30 ms with their stack unmapped: a walk there
    // would fault. The exit log must keep the sampler out. Wall mode: the
    // tick after an exit asks for every thread that ran since the last one
    // (CPU mode asks only once a whole interval of CPU time has been used).
    machsim::pthread::EXIT_DELAY_NS.store(30_000_000, Ordering::SeqCst);
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions { mode: Mode::Wall, ..SamplerOptions::default().with_interval_ms(1.0).unwrap() };
    let running = RunningSampler::spawn(MachBackend::new().unwrap(), options, shared, Hooks::default()).unwrap();
    for _ in 0..8 {
        let h = std::thread::spawn(|| {
            let until = Instant::now() + Duration::from_millis(15);
            while Instant::now() < until {
                black_box(0);
            }
        });
        h.join().unwrap();
    }
    let rec = running.stop();
    machsim::pthread::EXIT_DELAY_NS.store(0, Ordering::SeqCst);
    assert!(rec.stats.threads_skipped > 0);
    assert_eq!(rec.stats.walk_errors, 0);
    assert_audit_clean();
}

#[test]
fn start_stop_cycles_leave_nothing_behind() {
    let _g = serial();
    for _ in 0..10 {
        let b = busy();
        let (rec, _) = run_session(1.0, 30);
        let tid = b.finish();
        assert!(captured(&rec, tid).0 > 0, "{tid} {:?} {:?}", rec.threads, rec.stats);
    }
    assert_audit_clean();
}

/// Runs a session against one busy thread with a fault armed, until the
/// fault has answered `times` calls (or for 150 ms if it never runs out).
fn with_fault(call: Call, code: i32, times: u32) -> (Recording, u64) {
    let b = busy();
    let hits = faults::hits(call);
    faults::inject(call, code, times);
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions::default().with_interval_ms(1.0).unwrap();
    let running = RunningSampler::spawn(MachBackend::new().unwrap(), options, shared, Hooks::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    std::thread::sleep(Duration::from_millis(150));
    while times != u32::MAX && faults::hits(call) - hits < times && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // A little more, so the session also runs after the fault.
    faults::clear();
    std::thread::sleep(Duration::from_millis(30));
    let rec = running.stop();
    if times != u32::MAX {
        assert_eq!(faults::hits(call) - hits, times, "{call:?} was not called often enough");
    }
    (rec, b.finish())
}

#[test]
fn each_injected_error_is_handled() {
    let _g = serial();
    use crate::platform::mach::kern::*;
    // thread_suspend: gone (skipped, thread retired and re-found by the
    // next rescan) or any other error (skipped, retried next tick).
    for code in [KERN_TERMINATED, KERN_INVALID_ARGUMENT, MACH_SEND_INVALID_DEST, KERN_FAILURE] {
        let (rec, _) = with_fault(Call::ThreadSuspend, code, 20);
        assert!(rec.stats.threads_skipped >= 15, "{code:#x}: {:?}", rec.stats);
        assert_eq!(rec.stats.walk_errors, 0);
        assert_audit_clean();
    }
    // thread_get_state: gone is a skip; another error an empty stack
    // counted in walkErrors; a short state is an error too.
    let (rec, _) = with_fault(Call::ThreadGetState, KERN_TERMINATED, 10);
    assert!(rec.stats.threads_skipped >= 10);
    let hits = faults::hits(Call::ThreadGetState);
    let (rec, _) = with_fault(Call::ThreadGetState, KERN_FAILURE, 10);
    assert_eq!(faults::hits(Call::ThreadGetState) - hits, 10);
    assert_eq!(rec.stats.walk_errors, 10, "{:?}", rec.stats);
    let (rec, _) = with_fault(Call::ThreadGetStateShort, 0, 10);
    assert_eq!(rec.stats.walk_errors, 10, "{:?}", rec.stats);
    assert_audit_clean();
    // thread_resume failing (as for a thread that died while stopped) is
    // ignored; the sim's own resume count stays right because the fault
    // does not resume: the audit would see the thread still suspended, so
    // this only runs with the failure answered for a dead name.
    // thread_info(BASIC): gone retires the thread; other errors count as
    // running.
    let (rec, tid) = with_fault(Call::ThreadInfoBasic, MACH_SEND_INVALID_DEST, 5);
    assert!(rec.stats.threads_skipped >= 5 && captured(&rec, tid).0 > 0);
    let (rec, tid) = with_fault(Call::ThreadInfoBasic, KERN_FAILURE, 50);
    assert!(captured(&rec, tid).0 > 0);
    assert_audit_clean();
    // task_threads failing: the rescan gives up, the hook's threads remain.
    let (rec, _) = with_fault(Call::TaskThreads, KERN_FAILURE, 1);
    assert!(rec.stats.samples_captured > 0, "{:?}", rec.stats);
    // thread_info(IDENTIFIER) failing: the found thread has tid 0 and its
    // right is released.
    let (rec, _) = with_fault(Call::ThreadInfoIdentifier, KERN_FAILURE, 4);
    assert!(rec.stats.samples_captured > 0, "{:?}", rec.stats);
    // thread_info(EXTENDED) failing: no name, nothing else.
    let (rec, _) = with_fault(Call::ThreadInfoExtended, KERN_FAILURE, u32::MAX);
    assert!(rec.stats.samples_captured > 0);
    // mach_wait_until interrupted: the loop waits again.
    let (rec, _) = with_fault(Call::WaitUntil, KERN_ABORTED, 200);
    assert!(rec.stats.ticks > 50, "{:?}", rec.stats);
    assert_audit_clean();
}

#[test]
fn hook_faults_leave_threads_to_the_rescan() {
    let _g = serial();
    hook::ensure_installed();
    for call in [Call::ThreadSelf, Call::ThreadIdZero, Call::StackAddr] {
        faults::inject(call, 0, u32::MAX);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tid_tx.send(crate::sampler::thread_id::current()).unwrap();
            let _ = rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        faults::clear();
        let mut entries = Vec::new();
        hook::registry().snapshot(&mut entries);
        let entry = entries.iter().find(|e| e.tid == tid);
        match call {
            // Tracked, with unknown stack bounds: sampled pc-only.
            Call::StackAddr => assert!(entry.is_some_and(|e| e.stack.is_empty()), "{entry:?}"),
            // Not tracked: the next rescan finds it.
            _ => assert!(entry.is_none(), "{call:?}"),
        }
        tx.send(()).unwrap();
        h.join().unwrap();
        assert_audit_clean();
    }
}

#[test]
fn rosetta_and_the_address_size_sysctl() {
    let _g = serial();
    faults::inject(Call::Rosetta, 1, 1);
    let err = MachBackend::new().err().expect("refused under Rosetta");
    assert_eq!(err.code.as_str(), "ENOTSUP");
    assert!(!is_translated());
    assert_eq!(consts().address_mask, (1 << 47) - 1);
}

#[test]
fn fake_pac_bits_never_reach_the_profile() {
    let _g = serial();
    let b = busy();
    let (rec, _) = run_session(1.0, 100);
    let tid = b.finish();
    assert!(captured(&rec, tid).0 > 0);
    let mut seen = 0;
    for i in 0..rec.samples.len() {
        for a in rec.stacks.addresses(rec.samples.get(i).unwrap().stack) {
            assert!(a < 1 << 47, "{a:#x} kept authentication bits");
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn the_clock_is_mach_absolute_time_at_24_mhz() {
    let _g = serial();
    let b = MachBackend::new().unwrap();
    assert_eq!(b.timebase, Timebase::new(125, 3));
    let t0 = b.now_ns();
    b.sleep_until(t0 + 5_000_000);
    let t1 = b.now_ns();
    assert!(t1 >= t0 + 5_000_000 && t1 < t0 + 50_000_000, "{}", t1 - t0);
}

#[test]
fn suspending_a_blocked_thread_costs_it_no_cpu_time() {
    let _g = serial();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    std::thread::sleep(Duration::from_millis(20));
    let mut found = Vec::new();
    threads::list(&mut found).unwrap();
    let mut ours = None;
    for f in &found {
        if f.tid == crate::sampler::thread_id::current() {
            threads::deallocate(f.port);
            continue;
        }
        // The newest thread is the blocked one.
        if ours.is_none_or(|o: FoundThread| f.tid > o.tid) {
            if let Some(o) = ours {
                threads::deallocate(o.port);
            }
            ours = Some(*f);
        } else {
            threads::deallocate(f.port);
        }
    }
    let t = ours.unwrap();
    let before = threads::cpu_ns(t.port).unwrap();
    for _ in 0..200 {
        // SAFETY: a port we hold, not our own thread.
        unsafe {
            assert_eq!(thread_suspend(t.port), 0);
            assert_eq!(thread_resume(t.port), 0);
        }
    }
    std::thread::sleep(Duration::from_millis(5));
    let after = threads::cpu_ns(t.port).unwrap();
    threads::deallocate(t.port);
    tx.send(()).unwrap();
    h.join().unwrap();
    // The simulation subtracts each park's cost from a calibrated estimate
    // (5-7 µs a park); on a shared VM a few parks overrun it. Charging the
    // parks would cost 1 ms or more; a few µs of estimation error is not that.
    let charged = after.saturating_sub(before);
    assert!(charged <= 100_000, "200 suspensions charged {charged} ns");
}

#[test]
fn the_hook_forwards_every_event_to_the_hook_installed_before_it() {
    let _g = serial();
    hook::ensure_installed();
    let before = PREVIOUS_HOOK_EVENTS.load(Ordering::SeqCst);
    std::thread::spawn(|| black_box(1)).join().unwrap();
    // START and TERMINATE.
    assert!(PREVIOUS_HOOK_EVENTS.load(Ordering::SeqCst) >= before + 2);
}

extern "C" fn compare_u64(a: *const std::ffi::c_void, b: *const std::ffi::c_void) -> std::ffi::c_int {
    // SAFETY: qsort passes pointers to two elements of the u64 array.
    let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    black_box(a.cmp(&b) as std::ffi::c_int)
}

/// Sorts with glibc's `qsort` until told to stop: glibc keeps no frame
/// pointers, so only its unwind information leads from the comparison
/// (our code) and from qsort's own frames back to this thread's first.
fn sort_in_libc(stop: &AtomicBool) -> u64 {
    let mut v: Vec<u64> = (0..2048u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
    let mut rounds = 0u64;
    while !stop.load(Ordering::Relaxed) {
        v.iter_mut().for_each(|x| *x = x.rotate_left(7) ^ rounds);
        // SAFETY: `v` is an array of `v.len()` u64s; the comparison reads two of them.
        unsafe { libc::qsort(v.as_mut_ptr().cast(), v.len(), 8, Some(compare_u64)) };
        rounds += 1;
    }
    rounds
}

#[test]
fn stacks_through_code_without_frame_pointers_reach_the_thread_s_first_frame() {
    let _g = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU64::new(0));
    let (s, t) = (stop.clone(), tid.clone());
    let handle = std::thread::spawn(move || {
        t.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
        black_box(sort_in_libc(&s));
    });
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let (rec, _) = run_session(2.0, 500);
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
    let tid = tid.load(Ordering::SeqCst);

    let index = rec.threads.iter().position(|t| t.tid == tid).expect("the sorting thread");
    let mut outermost: Vec<u64> = (0..rec.samples.len())
        .filter_map(|i| rec.samples.get(i))
        .filter(|s| s.thread as usize == index && !s.idle)
        .filter_map(|s| rec.stacks.addresses(s.stack).last().copied())
        .collect();
    let n = outermost.len();
    assert!(n >= 20, "{n} samples");
    outermost.sort_unstable();
    let mut best = (0usize, 0u64);
    for run in outermost.chunk_by(|a, b| a == b) {
        best = best.max((run.len(), run[0]));
    }
    // The thread's first frame is glibc's (clone3, or start_thread).
    // SAFETY: plain data; all-zero is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; `info` is an out-pointer.
    assert!(unsafe { libc::dladdr(best.1 as *const std::ffi::c_void, &mut info) } != 0);
    // SAFETY: a NUL-terminated path owned by the loader.
    let file = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    assert!(file.contains("libc.so"), "outermost frame {:#x} in {file}", best.1);
    assert!(best.0 * 100 >= n * 95, "{} of {n} stacks end at the thread's first frame {:#x}", best.0, best.1);
    assert_eq!(rec.stats.walk_errors, 0);
    assert_eq!(
        rec.stats.capture_buffer_bytes,
        (COPY_BYTES + TAIL_RECORDS * std::mem::size_of::<TailRecord>()) as u64,
        "one copy buffer"
    );
    assert!(rec.stats.stack_bytes_copied > 0);
    assert_audit_clean();
}

/// A backend outside a session that has listed the threads, and the entry
/// of the thread `b` runs.
fn backend_with(b: &Busy) -> (MachBackend, crate::sampler::registry::ThreadRegistry, ThreadEntry) {
    let tid = b.tid.load(Ordering::SeqCst);
    let mut backend = MachBackend::new().unwrap();
    let registry = crate::sampler::registry::ThreadRegistry::new();
    backend.refresh_threads(&registry, true);
    let mut entries = Vec::new();
    registry.snapshot(&mut entries);
    let entry = entries.iter().find(|e| e.tid == tid).copied().expect("the busy thread");
    (backend, registry, entry)
}

/// Requests `n` captures of the thread `b` runs, 2 ms apart; returns each
/// one's bytes copied, end and depth.
fn capture_repeatedly(b: &Busy, n: usize) -> Vec<(u32, StackEnd, usize)> {
    let (mut backend, _registry, entry) = backend_with(b);
    let cfg = CaptureConfig { max_depth: 128, native_unwinding: true };
    let mut seen = Vec::new();
    for _ in 0..n {
        backend.request(&[entry], cfg, &mut |c| {
            if let Capture::Stack(s) = c {
                seen.push((s.copied_bytes, s.end, s.frames.len()));
            }
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    seen
}

#[test]
fn copies_end_at_a_thread_s_first_frames_once_a_complete_unwind_found_them() {
    let _g = serial();
    let b = busy();
    let seen = capture_repeatedly(&b, 20);
    b.finish();
    assert_eq!(seen.len(), 20);
    // spin_deep(12): at least 13 frames, and the thread's start.
    assert!(seen.iter().all(|s| s.1 == StackEnd::Root && s.2 >= 15), "{seen:?}");
    // The first copy runs to the top of the stack; once it is unwound to
    // the root, copies end a little above the thread's first frame record.
    let whole = seen[0].0;
    let cut = seen[1..].iter().filter(|s| s.0 < whole).count();
    assert!(cut >= 17, "{cut} of 19 copies cut: {seen:?}");
    assert_audit_clean();
}

#[test]
fn copies_leave_out_the_middle_of_a_large_frame_once_an_unwind_showed_it_unread() {
    let _g = serial();
    let b = busy_in(spin_under_a_large_frame);
    let seen = capture_repeatedly(&b, 20);
    b.finish();
    assert_eq!(seen.len(), 20);
    // Through the large frame to the thread's start, every time.
    assert!(seen.iter().all(|s| s.1 == StackEnd::Root && s.2 >= 16), "{seen:?}");
    // The first copy holds the 16 KiB of locals; once an unwind showed the
    // frame's records chained around them, copies leave them out.
    assert!(seen[0].0 >= 16 * 1024, "{seen:?}");
    let small = seen[1..].iter().filter(|s| s.0 < 8 * 1024).count();
    assert!(small >= 17, "{small} of 19 copies left the large frame out: {seen:?}");
    assert_audit_clean();
}

#[test]
fn a_thread_with_unknown_stack_bounds_is_sampled_pc_only() {
    let _g = serial();
    hook::ensure_installed();
    // The hook cannot learn the new thread's stack.
    faults::inject(Call::StackAddr, 0, u32::MAX);
    let b = busy();
    faults::clear();
    let (rec, _) = run_session(1.0, 150);
    let tid = b.finish();
    let (n, deepest) = captured(&rec, tid);
    assert!(n > 0 && deepest == 1, "{n} samples, deepest {deepest}");
    assert!(rec.stats.walk_errors >= n as u64);

    // A rescan that finds no pthread for a thread gives it no bounds either.
    let b = busy();
    let tid = b.tid.load(Ordering::SeqCst);
    let mut entries = Vec::new();
    hook::registry().snapshot(&mut entries);
    let entry = entries.iter().find(|e| e.tid == tid).copied().unwrap();
    assert!(hook::registry().mark_removed(tid, entry.handle));
    hook::release(entry.handle as u32);
    faults::inject(Call::PthreadFromPort, 0, u32::MAX);
    let backend = MachBackend::new().unwrap();
    faults::clear();
    hook::registry().snapshot(&mut entries);
    let found = entries.iter().find(|e| e.tid == tid).copied().unwrap();
    assert!(found.stack.is_empty());
    drop(backend);
    b.finish();
    assert_audit_clean();
}

#[test]
fn the_module_list_comes_from_dyld() {
    let _g = serial();
    machsim::dyld::UUID_FROM_BUILD_ID.store(true, Ordering::SeqCst);
    let modules = crate::platform::loaded_modules();
    machsim::dyld::UUID_FROM_BUILD_ID.store(false, Ordering::SeqCst);
    let here = the_module_list_comes_from_dyld as *const () as u64;
    let own = modules.iter().find(|m| m.start <= here && here < m.end).expect("the test binary is listed");
    assert_eq!(own.build_id.len(), 32, "LC_UUID as 16 bytes of hex: {own:?}");
    let linux = crate::platform::linux::modules::loaded_modules();
    let same = linux.iter().find(|m| m.start <= here && here < m.end).unwrap();
    assert_eq!(own.bias, same.bias);
    assert!(same.build_id.starts_with(&own.build_id));
    // Without the test switch, 20-byte build ids give no LC_UUID.
    assert!(crate::platform::loaded_modules().iter().all(|m| m.build_id.is_empty()));
}

#[test]
fn an_exit_log_that_overflowed_skips_live_threads_without_forgetting_them() {
    let _g = serial();
    let b = busy();
    let (mut backend, registry, entry) = backend_with(&b);
    let cfg = CaptureConfig { max_depth: 128, native_unwinding: true };
    let request = |backend: &mut MachBackend| {
        let mut got = None;
        backend.request(&[entry], cfg, &mut |c| {
            got = Some(match c {
                Capture::Stack(_) => None,
                Capture::Skipped { reason, .. } => Some(reason),
            })
        });
        got.expect("an answer")
    };
    // More exits of other threads than the log holds since the list was
    // taken: whether this one exited cannot be told from the log.
    for i in 0..crate::platform::mach::exit_log::EXIT_LOG_LEN as u64 {
        hook::EXITS.record(u64::MAX - i);
    }
    assert_eq!(request(&mut backend), Some(SkipReason::Pending));
    // A refresh that is not a full listing keeps it, and it is sampled.
    backend.refresh_threads(&registry, false);
    let mut entries = Vec::new();
    registry.snapshot(&mut entries);
    assert!(entries.iter().any(|e| e.tid == entry.tid), "the thread was forgotten");
    assert_eq!(request(&mut backend), None);
    b.finish();
    assert_audit_clean();
}

#[test]
fn dyld_itself_is_listed_at_its_slide() {
    let _g = serial();
    assert!(crate::platform::loaded_modules().iter().all(|m| m.path != "/usr/lib/dyld"), "no loader described");
    // A real Mach-O image where dyld's would be.
    let bytes = std::fs::read(crate::symbols::test_fixtures::fixture("macho/zig-x86_64/full/libfx.dylib")).unwrap();
    let image: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    *machsim::DYLD_ITSELF.lock().unwrap() = Some(image);
    let modules = crate::platform::loaded_modules();
    *machsim::DYLD_ITSELF.lock().unwrap() = None;
    let dyld = modules.iter().find(|m| m.path == "/usr/lib/dyld").expect("dyld is listed");
    let text = crate::platform::mach::macho::parse_macho(image).unwrap();
    assert_eq!((dyld.start, dyld.bias), (image.as_ptr() as u64, (image.as_ptr() as u64).wrapping_sub(text.start)));
    assert_eq!(dyld.end - dyld.start, text.end - text.start);
    assert_eq!(dyld.build_id.len(), 32, "its LC_UUID");
    assert_eq!(modules.iter().filter(|m| m.path == "/usr/lib/dyld").count(), 1);
}

#[test]
fn another_copy_s_sampler_thread_is_never_suspended() {
    use crate::sampler::own_threads::SAMPLER_THREAD_NAME;
    let _g = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let foreign = Arc::new(AtomicU64::new(0));
    let suspensions = Arc::new(AtomicU64::new(0));
    let (s, t, n) = (stop.clone(), foreign.clone(), suspensions.clone());
    // A second copy's sampler: it suspends and resumes every other thread
    // of the same name, as this copy's sampler would suspend it.
    let h = std::thread::Builder::new()
        .name(SAMPLER_THREAD_NAME.into())
        .spawn(move || {
            let me = crate::sampler::thread_id::current();
            t.store(me, Ordering::SeqCst);
            let mut found = Vec::new();
            while !s.load(Ordering::SeqCst) {
                if threads::list(&mut found).is_err() {
                    continue;
                }
                for f in &found {
                    let sampler =
                        threads::name(f.port).is_some_and(|name| name.as_bytes() == SAMPLER_THREAD_NAME.as_bytes());
                    if f.tid != me && sampler {
                        for _ in 0..100 {
                            // SAFETY: a port we hold, not our own thread.
                            unsafe {
                                if thread_suspend(f.port) == 0 {
                                    n.fetch_add(1, Ordering::SeqCst);
                                    black_box(thread_resume(f.port));
                                }
                            }
                        }
                    }
                    threads::deallocate(f.port);
                }
            }
        })
        .unwrap();
    while foreign.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    // Wall mode suspends every thread that runs, as the other one does:
    // without the name check the two soon suspend each other, and the
    // simulation's watchdog ends the test. The other one stops (and gives
    // back its rights) before this sampler does.
    let shared = Arc::new(Shared::default());
    let options = SamplerOptions { mode: Mode::Wall, ..SamplerOptions::default().with_interval_ms(1.0).unwrap() };
    let running = RunningSampler::spawn(MachBackend::new().unwrap(), options, shared, Hooks::default()).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::SeqCst);
    h.join().unwrap();
    let rec = running.stop();
    assert!(suspensions.load(Ordering::SeqCst) > 0, "the other sampler never suspended this one");
    assert!(rec.stats.samples_captured > 0, "{:?}", rec.stats);
    assert_eq!(captured(&rec, foreign.load(Ordering::SeqCst)).0, 0);
    assert_audit_clean();
}

#[test]
fn an_image_unloaded_while_being_listed_is_left_out_not_read() {
    let _g = serial();
    let before = modules::loaded_modules();
    // A page that held an image's header and name, unmapped since, while
    // dyld's list still gives its addresses.
    // SAFETY: a fresh private mapping, written, then unmapped whole.
    let page = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let header = empty_macho_header();
        std::ptr::copy_nonoverlapping(header.as_ptr(), p.cast::<u8>(), header.len());
        std::ptr::copy_nonoverlapping(c"/gone.dylib".as_ptr(), p.cast::<c_char>().add(64), 12);
        libc::munmap(p, 4096);
        p as usize
    };
    crate::platform::machsim::dyld::UNLOADED_AT.store(page, Ordering::SeqCst);
    let after = modules::loaded_modules();
    crate::platform::machsim::dyld::UNLOADED_AT.store(0, Ordering::SeqCst);
    assert_eq!(after.len(), before.len(), "{after:?}");
    assert!(after.iter().all(|m| m.path != "/gone.dylib"));
}

/// A 64-bit Mach-O header with no load commands.
fn empty_macho_header() -> [u8; 32] {
    let mut h = [0u8; 32];
    h[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
    h
}

#[test]
fn wall_mode_captures_a_running_thread_whose_cpu_clock_lags() {
    let _g = serial();
    let b = busy();
    machsim::CPU_CLOCK_LAGS.store(true, Ordering::SeqCst);
    let (rec, _) = run_session_in(Mode::Wall, 2.0, 600);
    machsim::CPU_CLOCK_LAGS.store(false, Ordering::SeqCst);
    let tid = b.finish();
    let (n, deepest) = captured(&rec, tid);
    // About 300 ticks: without the run state, the first would be captured
    // and every later one carried forward as idle.
    assert!(n as u64 * 2 > rec.stats.ticks, "{n} of {} ticks captured", rec.stats.ticks);
    assert!(deepest >= 12, "{deepest}");
    assert_audit_clean();
}
