//! Saving the profile when a signal ends the process while its JavaScript
//! cannot run.
//!
//! A preload that records a whole program writes the profile from
//! JavaScript when SIGINT, SIGTERM or SIGHUP arrives, and then lets the
//! signal end the process. Node runs JavaScript signal listeners from the
//! event loop, which a busy main thread never reaches: without more, the
//! program would neither stop nor write anything. So, once armed:
//!
//! - a native handler is chained in front of the one installed for each
//!   signal (Node's, for the preload's listener): it only notes the signal
//!   and wakes a watcher thread, then calls the previous handler;
//! - the watcher gives JavaScript a grace period to claim the save
//!   ([`claim`]); if nothing claimed it and the program itself does not
//!   listen for that signal, the watcher stops the sampler, writes the
//!   profile, and ends the process with the signal, as its default action
//!   would have.
//!
//! Whoever claims first writes; a JavaScript save that comes second waits
//! for the native one ([`wait_for_native_save`]), so the process cannot end
//! halfway through writing a file.
//!
//! Before any of that, and also for a signal the program listens for, the
//! watcher can keep a copy of the profile so far (a checkpoint, elsewhere
//! than the profile): a process that handles the signal while busy only
//! later, or never, is often killed outright soon after (a wrapper that
//! relays Ctrl-C, then sends SIGKILL when the child does not answer).
//! Optionally the watcher also keeps one every so often, for a process
//! killed with no signal before (SIGKILL from a user or a supervisor, the
//! out-of-memory killer); it then spends at most 1 % of its time on them.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::sampler::error::{ErrorCode, SamplerError};

/// Signals 1 to 64.
const SIGNALS: usize = 65;

/// Nobody has saved the profile yet.
const UNCLAIMED: u8 = 0;
/// JavaScript saves it.
const JS: u8 = 1;
/// The watcher saves it.
const NATIVE: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNCLAIMED);
/// Write end of the pipe the handler wakes the watcher through; -1 until armed.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The previous action of each armed signal: its handler's address, and
/// whether it takes siginfo (and is reset on delivery).
static PREVIOUS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
static PREVIOUS_FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];
/// The program listens for this signal itself: it decides what it means.
static PROGRAM_LISTENS: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// Set once the native save has finished (written or failed).
static NATIVE_DONE: Mutex<bool> = Mutex::new(false);
static NATIVE_DONE_CV: Condvar = Condvar::new();

/// What the watcher runs to save the profile.
pub type SaveJob = Box<dyn FnOnce() + Send>;
/// What the watcher runs to keep a checkpoint.
pub type CheckpointJob = Box<dyn FnMut() + Send>;

/// Checkpoints come at most this often, however many signals arrive.
const CHECKPOINT_PERIOD: Duration = Duration::from_secs(1);
/// Periodic checkpoints are spaced at least this many times what the last
/// one took.
const CHECKPOINT_COST_FACTOR: u32 = 100;

/// When the watcher keeps its next checkpoint.
#[derive(Clone, Copy, Debug)]
struct CheckpointSchedule {
    /// The period of periodic checkpoints; None for checkpoints at signals only.
    every: Option<Duration>,
    last: Option<Instant>,
    last_cost: Duration,
}

impl CheckpointSchedule {
    fn new(every: Option<Duration>, armed: Instant) -> Self {
        // The first periodic one comes a period after arming.
        CheckpointSchedule { every, last: every.map(|_| armed), last_cost: Duration::ZERO }
    }

    /// Whether a signal arriving at `now` gets a checkpoint.
    fn at_signal(&self, now: Instant, first: bool) -> bool {
        first || self.last.is_none_or(|t| now.saturating_duration_since(t) >= CHECKPOINT_PERIOD)
    }

    /// How long from `now` until the next periodic checkpoint (zero if it
    /// is due); None without periodic checkpoints.
    fn wait(&self, now: Instant) -> Option<Duration> {
        let every = self.every?.max(self.last_cost * CHECKPOINT_COST_FACTOR);
        let last = self.last.unwrap_or(now);
        Some((last + every).saturating_duration_since(now))
    }

    /// No more periodic checkpoints.
    fn stop(&mut self) {
        self.every = None;
    }

    /// A checkpoint ran from `started` to `ended`.
    fn ran(&mut self, started: Instant, ended: Instant) {
        self.last = Some(ended);
        self.last_cost = ended.saturating_duration_since(started);
    }
}

/// Arms the native path for `signals`, once per process: JavaScript has
/// `grace` after a signal to claim the save, after which `save` runs on the
/// watcher thread and the signal ends the process. `checkpoint`, if given,
/// runs as each signal arrives while nobody has claimed the save, and with
/// `checkpoint_every` also that often (or less often: see
/// [`CHECKPOINT_COST_FACTOR`]).
pub fn arm(
    signals: &[i32],
    grace: Duration,
    save: SaveJob,
    checkpoint: Option<CheckpointJob>,
    checkpoint_every: Option<Duration>,
) -> Result<(), SamplerError> {
    if signals.iter().any(|&s| s <= 0 || s as usize >= SIGNALS) {
        return Err(SamplerError::new(ErrorCode::Inval, "signals must be numbers from 1 to 64"));
    }
    if WAKE_FD.load(Ordering::Acquire) >= 0 {
        return Err(SamplerError::new(ErrorCode::Again, "the exit signals are already armed in this process"));
    }
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() returns.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(os_error("pipe"));
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    for fd in fds {
        // SAFETY: `fd` was just opened by pipe(); FD_CLOEXEC keeps it from
        // programs this process executes.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let spawned = std::thread::Builder::new().name("machsampler-exit".into()).spawn(move || {
        let _own = crate::sampler::own_threads::OwnThread::mark();
        let schedule = CheckpointSchedule::new(checkpoint_every.filter(|_| checkpoint.is_some()), Instant::now());
        watch(read_fd, grace, save, checkpoint, schedule)
    });
    if let Err(e) = spawned {
        // SAFETY: both descriptors are ours and not used elsewhere.
        unsafe {
            libc::close(read_fd);
            libc::close(write_fd);
        }
        return Err(SamplerError::new(ErrorCode::Again, format!("cannot start the exit watcher: {e}")));
    }
    WAKE_FD.store(write_fd, Ordering::Release);
    for &sig in signals {
        install(sig)?;
    }
    Ok(())
}

fn os_error(call: &str) -> SamplerError {
    SamplerError::new(ErrorCode::Busy, format!("{call} failed: {}", std::io::Error::last_os_error()))
}

/// Whether the program itself listens for `signal` (then it is left to it).
pub fn set_program_listens(signal: i32, listens: bool) {
    if let Some(flag) = usize::try_from(signal).ok().and_then(|s| PROGRAM_LISTENS.get(s)) {
        flag.store(listens, Ordering::Release);
    }
}

/// Claims the save for JavaScript. False if the watcher is saving (or
/// saved) the profile: the caller then waits for it.
pub fn claim() -> bool {
    match STATE.compare_exchange(UNCLAIMED, JS, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(state) => state == JS,
    }
}

/// Blocks until the watcher's save has finished, at most `limit`.
pub fn wait_for_native_save(limit: Duration) {
    if STATE.load(Ordering::Acquire) != NATIVE {
        return;
    }
    let done = NATIVE_DONE.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = NATIVE_DONE_CV.wait_timeout_while(done, limit, |d| !*d);
}

fn install(sig: i32) -> Result<(), SamplerError> {
    // SAFETY: a zeroed sigaction is a valid "default" value to fill in.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_signal as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    // SAFETY: `act.sa_mask` is a valid sigset to initialize.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: a zeroed sigaction receives the previous action.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // The previous action is read before ours can run: published first,
    // then installed (a signal in between finds the old handler, which is
    // what it would have found anyway).
    // SAFETY: `old` is a valid out-pointer; a null action only reads.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return Err(os_error("sigaction"));
    }
    PREVIOUS[sig as usize].store(old.sa_sigaction, Ordering::Release);
    PREVIOUS_FLAGS[sig as usize].store(old.sa_flags, Ordering::Release);
    // SAFETY: `act` is fully initialized; the handler is async-signal-safe.
    if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        return Err(os_error("sigaction"));
    }
    Ok(())
}

/// The chained handler: wakes the watcher, then does what the previous
/// handler did. Async-signal-safe: atomics, write(2), sigaction(2).
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let errno = errno_location();
    // SAFETY: the calling thread's errno slot, restored before returning.
    let saved = unsafe { *errno };
    let fd = WAKE_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: one byte from a local to the pipe's write end; a full
        // pipe (signals piling up) drops it, which loses nothing.
        unsafe { libc::write(fd, &byte as *const u8 as *const libc::c_void, 1) };
    }
    let Some(index) = usize::try_from(sig).ok().filter(|&s| s < SIGNALS) else { return };
    let previous = PREVIOUS[index].load(Ordering::Acquire);
    let flags = PREVIOUS_FLAGS[index].load(Ordering::Acquire);
    // The default action would end the process before the profile is
    // written: the watcher ends it after. Ignored stays ignored.
    if previous != libc::SIG_DFL && previous != libc::SIG_IGN {
        if flags & libc::SA_RESETHAND != 0 {
            // SAFETY: a zeroed sigaction is SIG_DFL; restores what the
            // kernel would have done before calling a one-shot handler.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: `dfl` is a valid action.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
        if flags & libc::SA_SIGINFO != 0 {
            // SAFETY: `previous` is the address of a handler installed with
            // SA_SIGINFO, called as the kernel would call it.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(previous) };
            f(sig, info, uc);
        } else {
            // SAFETY: `previous` is the address of a plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous) };
            f(sig);
        }
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// The calling thread's errno.
fn errno_location() -> *mut libc::c_int {
    // SAFETY: both return the calling thread's errno slot; no preconditions.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::__errno_location()
    }
    // SAFETY: as above.
    #[cfg(not(target_os = "linux"))]
    unsafe {
        libc::__error()
    }
}

/// The watcher thread: waits for signals; on one that nobody handles in
/// time, saves and ends the process with it. Keeps checkpoints meanwhile.
fn watch(
    read_fd: i32,
    grace: Duration,
    save: SaveJob,
    mut checkpoint: Option<CheckpointJob>,
    mut schedule: CheckpointSchedule,
) {
    let mut save = Some(save);
    let mut keep = |schedule: &mut CheckpointSchedule| {
        if STATE.load(Ordering::Acquire) != UNCLAIMED {
            // Someone is saving the whole profile: no checkpoint is needed
            // any more (and a due one must not be retried at once, forever).
            schedule.stop();
            return;
        }
        if let Some(job) = checkpoint.as_mut() {
            let started = Instant::now();
            job();
            schedule.ran(started, Instant::now());
        }
    };
    let mut signalled = false;
    loop {
        if let Some(wait) = schedule.wait(Instant::now()) {
            let mut pfd = libc::pollfd { fd: read_fd, events: libc::POLLIN, revents: 0 };
            // Rounded up: a poll that ends early would find nothing due.
            let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: polls one valid pollfd, a local.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n == 0 {
                if schedule.wait(Instant::now()).is_some_and(|w| w.is_zero()) {
                    keep(&mut schedule);
                }
                continue;
            }
        }
        let mut byte = 0u8;
        // SAFETY: reads one byte into a local from our pipe's read end.
        let n = unsafe { libc::read(read_fd, &mut byte as *mut u8 as *mut libc::c_void, 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n != 1 {
            return;
        }
        let sig = byte as i32;
        // The grace counts from the signal, the checkpoint's time included.
        let deadline = Instant::now() + grace;
        if schedule.at_signal(Instant::now(), !signalled) {
            keep(&mut schedule);
        }
        signalled = true;
        if PROGRAM_LISTENS.get(sig as usize).is_some_and(|l| l.load(Ordering::Acquire)) {
            continue;
        }
        while STATE.load(Ordering::Acquire) == UNCLAIMED && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if STATE.compare_exchange(UNCLAIMED, NATIVE, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // JavaScript is saving: it ends the process itself.
            continue;
        }
        if let Some(job) = save.take() {
            job();
        }
        *NATIVE_DONE.lock().unwrap_or_else(PoisonError::into_inner) = true;
        NATIVE_DONE_CV.notify_all();
        end_with(sig);
    }
}

/// Ends the process with `sig`'s default action.
fn end_with(sig: i32) {
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: resets the disposition, unblocks the signal on this thread
    // and sends it to the process; its default action ends the process.
    unsafe {
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    // A signal whose default action is not to end the process.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: ends the process at once, as the signal's action would have.
    unsafe { libc::_exit(128 + sig) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn checkpoints_at_signals_come_at_most_once_a_second() {
        let t0 = Instant::now();
        let mut s = CheckpointSchedule::new(None, t0);
        assert!(s.wait(t0).is_none());
        assert!(s.at_signal(t0, true));
        s.ran(t0, t0);
        assert!(!s.at_signal(t0 + S / 2, false));
        assert!(s.at_signal(t0 + S, false));
    }

    #[test]
    fn periodic_checkpoints_start_a_period_after_arming_and_keep_their_cost_under_one_percent() {
        let t0 = Instant::now();
        let mut s = CheckpointSchedule::new(Some(10 * S), t0);
        assert_eq!(s.wait(t0), Some(10 * S));
        assert_eq!(s.wait(t0 + 4 * S), Some(6 * S));
        assert_eq!(s.wait(t0 + 11 * S), Some(Duration::ZERO));
        // One that took 0.2 s: the next comes 20 s after it, not 10.
        let (start, end) = (t0 + 11 * S, t0 + 11 * S + S / 5);
        s.ran(start, end);
        assert_eq!(s.wait(end), Some(20 * S));
        // A first signal always gets one, even just after a periodic one.
        assert!(s.at_signal(end, true));
        assert!(!s.at_signal(end, false));
        // Once the whole profile is being saved, none is due, ever.
        s.stop();
        assert_eq!(s.wait(end + 60 * S), None);
    }
}
