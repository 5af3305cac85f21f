//! Real suspension: a real-time signal whose handler parks the thread on a
//! futex until its suspend count is back to zero, with its `ucontext_t`
//! published for `thread_get_state`.
//!
//! The signal is `SIGRTMIN + 1`, chosen outside both ranges the addon's
//! other handlers search (the Linux sampler takes the highest free signal
//! from `SIGRTMAX - 1` down to `SIGRTMIN + 4`, the V8 test harness the
//! lowest from `SIGRTMIN + 2` up), and installed only over `SIG_DFL`:
//! anything else already there stops the simulation with a message.
//!
//! A thread's `park` word moves RUNNING -> REQUESTED (the suspender sent
//! the signal) -> PARKED (the handler published its context) -> LEAVING
//! (the count reached zero) -> RUNNING (the handler returned). The handler
//! re-parks if a new suspend raced its leaving, so the context stays valid
//! for as long as the count is above zero.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use super::kernel::{Phase, Thread};

pub const RUNNING: u32 = 0;
pub const REQUESTED: u32 = 1;
pub const PARKED: u32 = 2;
pub const LEAVING: u32 = 3;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// CPU time one park costs the thread outside its handler (delivery,
/// `sigreturn`, restarting an interrupted system call). Measured when the
/// signal is installed ([`calibrate`]; 5-7 µs on a 2-vCPU VM) and counted
/// four times over (at least 20 µs): a blocked thread charged for being
/// parked would never look idle, while a running thread's few µs more or
/// less do not matter.
static PARK_OVERHEAD_NS: AtomicU64 = AtomicU64::new(0);

fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The park signal (installs the handler on first use).
pub fn signal() -> i32 {
    let s = SIGNAL.load(Ordering::Acquire);
    if s != 0 {
        s
    } else {
        install()
    }
}

fn install() -> i32 {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let sig = libc::SIGRTMIN() + 1;
        // SAFETY: reads and sets a disposition with initialised structs; the
        // handler only uses atomics and futex system calls.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old);
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != on_park as *const () as usize {
                super::fatal("machsim: the park signal SIGRTMIN+1 already has a handler");
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_park as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
                super::fatal("machsim: cannot install the park signal");
            }
        }
        SIGNAL.store(sig, Ordering::Release);
        calibrate();
    });
    SIGNAL.load(Ordering::Acquire)
}

/// A blocked thread for [`calibrate`]: waits on its word until it is 1.
extern "C" fn blocked(word: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `word` is the calibration's AtomicU32, alive until we exit.
    let word = unsafe { &*(word as *const AtomicU32) };
    super::pthread::internal_started();
    let tid = super::gettid() as u32;
    word.store(tid + 2, Ordering::SeqCst);
    wake_all(word);
    while word.load(Ordering::SeqCst) != 1 {
        wait(word, tid + 2, 0);
    }
    std::ptr::null_mut()
}

/// Measures [`PARK_OVERHEAD_NS`]: parks a thread blocked in a futex wait
/// 100 times and compares its CPU clock with its handler's own time.
fn calibrate() {
    let word = AtomicU32::new(0);
    let mut pt: libc::pthread_t = 0;
    // SAFETY: libc's pthread_create (past the interposer) with a routine
    // that only waits on `word`, which outlives the thread (joined below).
    super::pthread::STARTING.fetch_add(1, Ordering::SeqCst);
    let rc = unsafe {
        let create = super::pthread::real_create();
        create(&mut pt, std::ptr::null(), blocked, &word as *const AtomicU32 as *mut libc::c_void)
    };
    if rc != 0 {
        super::pthread::STARTING.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    while word.load(Ordering::SeqCst) == 0 {
        wait(&word, 0, 1_000_000);
    }
    let tid = (word.load(Ordering::SeqCst) - 2) as u64;
    let t: &'static Thread = {
        let _k = super::kernel::KernelMode::enter();
        let mut k = super::kernel::lock();
        k.thread_for_tid(tid)
    };
    std::thread::sleep(std::time::Duration::from_millis(2));
    let cpu = || super::cpu_times(tid).map_or(0, |c| c.0);
    const N: u64 = 100;
    let (c0, h0) = (cpu(), t.park_cpu_ns.load(Ordering::SeqCst));
    for _ in 0..N {
        t.stop_count.store(1, Ordering::SeqCst);
        stop(t);
        t.stop_count.store(0, Ordering::SeqCst);
        release(t);
        while t.park.load(Ordering::SeqCst) != RUNNING {
            std::hint::spin_loop();
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(2));
    let (c1, h1) = (cpu(), t.park_cpu_ns.load(Ordering::SeqCst));
    let per_park = c1.saturating_sub(c0).saturating_sub(h1 - h0) / N;
    PARK_OVERHEAD_NS.store((4 * per_park).max(20_000), Ordering::SeqCst);
    word.store(1, Ordering::SeqCst);
    wake_all(&word);
    // SAFETY: joins the thread created above.
    unsafe { libc::pthread_join(pt, std::ptr::null_mut()) };
    let _k = super::kernel::KernelMode::enter();
    let mut k = super::kernel::lock();
    k.drop_libpthread_ref(t);
    k.destroy_port(t);
}

/// What one park is charged beyond its handler's time.
pub fn park_overhead_ns() -> u64 {
    PARK_OVERHEAD_NS.load(Ordering::Relaxed)
}

/// `rt_sigprocmask` itself, past the `pthread_sigmask` interposer.
///
/// # Safety
/// `set` and `old` are null or valid.
pub unsafe fn real_sigmask(how: i32, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> i32 {
    // SAFETY: the kernel reads/writes 8 bytes of each non-null set.
    unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, set, old, 8) as i32 }
}

fn futex(word: &AtomicU32, op: i32, val: u32, timeout_ns: u64) {
    let ts =
        libc::timespec { tv_sec: (timeout_ns / 1_000_000_000) as i64, tv_nsec: (timeout_ns % 1_000_000_000) as i64 };
    let tsp = if timeout_ns == 0 { std::ptr::null() } else { &ts as *const libc::timespec };
    // SAFETY: a futex operation on a live, aligned u32.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op | libc::FUTEX_PRIVATE_FLAG, val, tsp) };
}

pub fn wait(word: &AtomicU32, while_equal: u32, timeout_ns: u64) {
    futex(word, libc::FUTEX_WAIT, while_equal, timeout_ns);
}

pub fn wake_all(word: &AtomicU32) {
    futex(word, libc::FUTEX_WAKE, i32::MAX as u32, 0);
}

/// `siginfo_t` for `rt_tgsigqueueinfo` with `SI_QUEUE`.
#[repr(C)]
struct QueueInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: u64,
    _rest: [u64; 12],
}

/// Sends the park signal to `t`, carrying its address. False if the
/// thread no longer exists.
fn send(t: &'static Thread) -> bool {
    // SAFETY: getpid and getuid cannot fail.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    let info = QueueInfo {
        signo: signal(),
        errno: 0,
        code: libc::SI_QUEUE,
        _pad: 0,
        pid,
        uid,
        value: t as *const Thread as u64,
        _rest: [0; 12],
    };
    // SAFETY: 128 bytes of siginfo to a thread of this process.
    let rc = unsafe {
        libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, t.tid as libc::pid_t, info.signo, &info as *const QueueInfo)
    };
    rc == 0
}

/// How a wait for a park ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Parked: its context is valid until its count returns to zero.
    Parked,
    /// It left the active phases (or vanished) first: nothing to read.
    Ended,
}

/// Makes `t`, whose count just went from 0 to 1, park, and waits for it,
/// as `thread_suspend` waits (`thread_wait`) for the thread to stop.
pub fn stop(t: &'static Thread) -> Stop {
    let start = super::monotonic_ns();
    loop {
        if t.phase() >= Phase::Terminated {
            return Stop::Ended;
        }
        match t.park.load(Ordering::Acquire) {
            PARKED => return Stop::Parked,
            RUNNING => {
                if t.park.compare_exchange(RUNNING, REQUESTED, Ordering::AcqRel, Ordering::Acquire).is_ok() && !send(t)
                {
                    t.park.store(RUNNING, Ordering::Release);
                    return Stop::Ended;
                }
            }
            LEAVING => std::hint::spin_loop(),
            state => wait(&t.park, state, 1_000_000),
        }
        if super::monotonic_ns() - start > 5_000_000_000 {
            super::fatal(
                "machsim: FATAL: a thread did not stop within 5 s of thread_suspend (does it block the park signal?)",
            );
        }
    }
}

/// Lets `t` go once its count reached zero.
pub fn release(t: &'static Thread) {
    wake_all(&t.stop_count);
}

extern "C" fn on_park(_sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo; SI_QUEUE from this process
    // carries a `&'static Thread` (threads are never freed).
    let t: &'static Thread = unsafe {
        let info = &*info;
        if info.si_code != libc::SI_QUEUE || info.si_pid() != libc::getpid() {
            return;
        }
        &*(info.si_value().sival_ptr as *const Thread)
    };
    // SAFETY: errno is this thread's; saved and restored around futex calls.
    let errno = unsafe { *libc::__errno_location() };
    let cpu_in = own_cpu_ns();
    if t.phase() < Phase::Terminated {
        t.ctx.store(ctx.cast(), Ordering::Release);
        let mut parks = 0;
        loop {
            parks += 1;
            t.park.store(PARKED, Ordering::SeqCst);
            wake_all(&t.park);
            loop {
                let n = t.stop_count.load(Ordering::SeqCst);
                if n == 0 {
                    break;
                }
                wait(&t.stop_count, n, 0);
            }
            t.park.store(LEAVING, Ordering::SeqCst);
            if t.stop_count.load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        t.ctx.store(std::ptr::null_mut(), Ordering::Release);
        let cost = own_cpu_ns() - cpu_in + parks * PARK_OVERHEAD_NS.load(Ordering::Relaxed);
        t.park_cpu_ns.fetch_add(cost, Ordering::Relaxed);
    }
    t.park.store(RUNNING, Ordering::SeqCst);
    wake_all(&t.park);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
