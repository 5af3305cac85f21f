//! The Linux backend. Threads come from `/proc/self/task`; each sample is
//! a signal whose handler, on the stopped thread, copies its registers and
//! live stack into a preallocated record and returns (`signal`,
//! `capture`); the sampler thread unwinds the copy afterwards with the
//! modules' CFI (`crate::sampler::unwind`, fed by `code`). A thread is
//! stopped only for the time of its own handler and never waits for
//! another thread (`docs/design/linux-self-walk.md`).
//!
//! - CPU mode: every thread gets a timer on its own CPU-time clock
//!   (`timers`), so only threads that run are interrupted, in proportion
//!   to the CPU time they use.
//! - Wall mode: the sampler signals, each tick, the threads that ran since
//!   their last sample (the idle rule).
//! - Threads that block the signal, or wait for signals in `sigtimedwait`
//!   (where their mask cannot be read), are never signalled, and are
//!   rechecked once a second.
//! - Stack bounds are validated on the sampler thread from the stack
//!   pointer and thread pointer a handler reported and `/proc/self/maps`
//!   (see `signal` for why that makes the handler's reads safe).

pub mod capture;
mod check_queue;
pub mod code;
pub mod modules;
mod pkeys;
pub mod procfs;
pub mod sched;
pub mod signal;
mod syscall_stop;
pub mod timers;

use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Mutex, PoisonError};

use crate::sampler::backend::{
    Backend, BackendCounters, Capture, CaptureConfig, CapturedStack, SkipReason, ThreadGone, FRAME_WORDS,
};
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::own_threads;
use crate::sampler::registry::{ThreadEntry, ThreadName, ThreadRegistry};
use crate::sampler::unwind::{lesson, record_fingerprint, StackCopy, StackEnd, Unwinder, Unwound};
use crate::sampler::walker::{Registers, StackBounds};

use capture::{Pool, FLAG_FOREIGN_STACK, FLAG_NO_COPY, FLAG_TO_ROOT, FLAG_TRUNCATED};
use check_queue::CheckQueue;
use procfs::Maps;
use signal::Bounds;
use timers::CpuTimer;

/// Listing `/proc/self/task` costs 0.5-2 µs per thread (the kernel looks
/// up a dentry for each). Between listings, a refresh only compares the
/// thread count, which is one `fstat`, so a thread that starts or exits is
/// seen within a refresh. One thread exiting while another starts leaves
/// the count as it was: every so often ([`tail_check_period_ns`]) the last
/// [`TAIL_THREADS`] of the kernel's list (the newest, see
/// `procfs::TaskList::list_from`) are compared with the known ones, and an
/// unknown one means a listing now. A full listing, which also forgets
/// threads that exited that way, happens every second in a process of up
/// to 25 threads, less often in larger ones (40 ms per thread, at least
/// every 10 s).
fn list_period_ns(threads: usize) -> u64 {
    (threads as u64 * 40_000_000).clamp(1_000_000_000, 10_000_000_000)
}

/// How often the newest threads are checked between listings: every
/// 100 ms in a process of up to 25 threads, less often in larger ones
/// (4 ms per thread, at least once a second). The kernel walks its list up
/// to them, about 0.1 µs per thread, and looks up a dentry for each of the
/// last few, so that checking stays near 0.01 % of a core.
fn tail_check_period_ns(threads: usize) -> u64 {
    (threads as u64 * 4_000_000).clamp(100_000_000, 1_000_000_000)
}

/// How many of the newest threads that check reads.
const TAIL_THREADS: usize = 8;

/// How often the signal mask of a thread that takes the signal is checked
/// again.
const MASK_RECHECK_NS: u64 = 1_000_000_000;
/// How soon a thread seen blocking the signal is checked again, at first:
/// threads block every signal for a moment while they create a thread
/// (glibc's pthread_create, and the sampler's own start), so a thread seen
/// blocking is usually not blocking any more a tick later. The delay
/// doubles while it keeps blocking, up to `MASK_RECHECK_NS`.
const BLOCKED_RECHECK_NS: u64 = 10_000_000;
/// Threads set up per refresh, at most (about 40 µs each: a name, a signal
/// mask check, a timer). A first look at a process of thousands of threads
/// is spread over several refreshes, and sampling starts after the first.
const SETUPS_PER_REFRESH: usize = 128;
/// Mask checks of known threads per refresh, at most.
const MASK_CHECKS_PER_REFRESH: usize = 2;
/// Due threads per refresh whose mask check may be skipped because they
/// have not run since the last one (a CPU clock read each), at most.
const CPU_READS_PER_REFRESH: usize = 64;
/// Thread names read again per full refresh, at most (a file each, 5-10 µs).
const NAME_READS_PER_REFRESH: usize = 64;

/// Serving a sampling signal costs an idle thread 5-25 µs of CPU time on the
/// VMs we measured (wake-up, handler, sigreturn, back to sleep). Below this a
/// thread is treated as idle, so one signal does not make it look busy.
const IDLE_CPU_THRESHOLD_NS: u64 = 50_000;

/// CPU mode: how far a thread may run past its timer's expiry before the
/// sampler fires the timer itself (see `timers::CpuTimer::fire_if_starved`).
/// The kernel fires an expired timer at the next scheduler tick that finds
/// its thread running: within one tick (4-10 ms) of the thread's CPU time,
/// unless the thread keeps running between ticks.
const STARVED_LIMIT_NS: u64 = 20_000_000;
/// A thread sampled (or whose timer the sampler fired) this recently is
/// checked for a starved timer at every refresh; others a few per refresh,
/// in turn.
const WARM_NS: u64 = 1_000_000_000;
/// Starved-timer checks per refresh, at most: of warm threads, of others.
const WARM_CHECKS_PER_REFRESH: usize = 64;
const COLD_CHECKS_PER_REFRESH: usize = 8;

/// `/proc/self/maps` is read again for JIT code at most this often.
const MAPS_PERIOD_NS: u64 = 20_000_000;

/// How long `finish` waits for handlers that were already running.
const FINISH_GRACE_NS: u64 = 1_000_000;

/// How long `finish` waits at most for signals already sent to be taken.
const FINISH_PENDING_LIMIT_NS: u64 = 100_000_000;

/// Capture records mapped in per CPU before the first signals of a
/// session; the rest are mapped in right after (see `populate_pool`).
const FIRST_RECORDS_PER_CPU: usize = 4;

/// Threads seen asleep in a signal wait, never signalled again. Kept
/// across sessions; a thread is forgotten when a listing shows it gone (a
/// thread that reuses the id of one that exited between sessions is not
/// sampled).
static SIGNAL_WAITERS: Mutex<Option<FxHashSet<u64>>> = Mutex::new(None);

/// Whether `tid` has been seen waiting for signals.
fn is_signal_waiter(tid: u64) -> bool {
    SIGNAL_WAITERS.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|set| set.contains(&tid))
}

/// Notes that `tid` was seen waiting for signals.
fn note_signal_waiter(tid: u64) {
    let mut set = SIGNAL_WAITERS.lock().unwrap_or_else(PoisonError::into_inner);
    let set = set.get_or_insert_with(FxHashSet::default);
    if set.len() >= 4096 {
        set.clear();
    }
    set.insert(tid);
}

/// Forgets a thread that has exited.
fn forget_signal_waiter(tid: u64) {
    if let Some(set) = SIGNAL_WAITERS.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        set.remove(&tid);
    }
}

struct LinuxThread {
    slot: Option<u32>,
    timer: Option<CpuTimer>,
    blocks_signal: bool,
    /// When to check its signal mask again.
    mask_due_ns: u64,
    /// The current wait before the next check of a blocking thread.
    blocked_backoff_ns: u64,
    /// The thread's CPU time just before its last mask check. Only the
    /// thread itself changes its mask or starts waiting for signals, so
    /// while this has not moved, that check still holds.
    checked_cpu_ns: Option<u64>,
    /// The thread has run since its name was last read (a mask check saw
    /// its CPU clock move). Threads name themselves, so one that has not
    /// run keeps its name; one that another thread renames is caught by
    /// the final read at `finish`.
    name_stale: bool,
    /// CPU mode: until when the thread counts as warm (sampled or its
    /// timer fired by the sampler recently), and whether it is in the
    /// backend's list of warm threads.
    warm_until_ns: u64,
    listed_warm: bool,
}

impl LinuxThread {
    /// Notes the result of a mask check at `now`.
    fn checked(&mut self, blocks: bool, now: u64) {
        self.blocks_signal = blocks;
        if blocks {
            self.mask_due_ns = now + self.blocked_backoff_ns;
            self.blocked_backoff_ns = (self.blocked_backoff_ns * 2).min(MASK_RECHECK_NS);
        } else {
            self.mask_due_ns = now + MASK_RECHECK_NS;
            self.blocked_backoff_ns = BLOCKED_RECHECK_NS;
        }
    }
}

pub struct LinuxBackend {
    signal: i32,
    pid: u64,
    threads: FxHashMap<u64, LinuxThread>,
    /// When each thread's signal mask is checked next.
    checks: CheckQueue,
    /// Scratch: the threads a refresh checks in full.
    to_check: Vec<u64>,
    tasks: procfs::TaskList,
    tids: Vec<u64>,
    /// Listed threads not yet set up, the next one last.
    pending: Vec<u64>,
    listed_ns: u64,
    /// When the newest threads were last checked (see [`tail_check_period_ns`]),
    /// and the buffer for them.
    tail_checked_ns: u64,
    tail: Vec<u64>,
    buf: Vec<u8>,
    pool: &'static Pool,
    /// How many of the pool's records this session has mapped in (see
    /// `Pool::populate`): the first few before the first signal, the rest
    /// right after, once the mode has chosen the pool.
    populated: usize,
    /// `signal::WAKE` as of the last return from `sleep_until`: a wake-up
    /// after that (a handler's, or `stop()`'s) ends the next sleep at once.
    wake_seen: std::cell::Cell<u32>,
    /// CPU mode: the timers' interval.
    timer_interval_ns: Option<u64>,
    cfg: CaptureConfig,
    unwinder: Option<Unwinder>,
    unwound: Unwound,
    /// Which pcs are system call sites (for samples taken while waiting).
    syscall_sites: syscall_stop::SyscallSites,
    /// The capture's stack copy, moved here before unwinding: the handler
    /// wrote it on another CPU, and one sequential copy brings it over
    /// faster than the unwinder's chain of dependent reads would.
    stack: Vec<u64>,
    words: Vec<[u64; FRAME_WORDS]>,
    done: Vec<u32>,
    maps_read_ns: Option<u64>,
    /// Stacks whose bounds the next refresh should validate: (slot, sp,
    /// thread pointer, is main).
    need_bounds: Vec<(u32, u64, u64, bool)>,
    /// The handlers' count of samples lost for want of a record, when this
    /// session began.
    lost_at_start: u64,
    foreign: u64,
    /// How many copies ended at their thread's learned root.
    copied_to_root: u64,
    taken_over: bool,
    /// Names are read round robin: the last tid read.
    names_read_up_to: u64,
    /// `finish` ran: the final refresh reads every name.
    finishing: bool,
    frame_pointer_code: Vec<std::ops::Range<u64>>,
    /// CPU mode: threads sampled, or whose timer the sampler fired, within
    /// `WARM_NS`.
    warm: Vec<u64>,
    /// Where the next round of cold starved-timer checks starts in `tids`.
    cold_checked_up_to: usize,
    /// Timers fired by the sampler because the kernel had not.
    starved_timers: u64,
    /// The highest tid of the first listing: threads above it were created
    /// while sampling (tids grow until they wrap at pid_max).
    newest_at_start: Option<u64>,
    /// Second looks at new threads seen blocking signals that this refresh
    /// may still take (each waits 200 µs).
    second_looks_left: u32,
}

/// Second looks per refresh, at most: a burst of new threads that block
/// signals for good must not hold up the sampler.
const SECOND_LOOKS_PER_REFRESH: u32 = 4;

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// Capture records for a machine with `cpus` CPUs, `per_cpu` each: enough
/// for every CPU to be sampled several times (wall mode: 16) or for two
/// drain periods (CPU mode) between two drains of the pool.
fn pool_size(cpus: usize, per_cpu: usize) -> usize {
    cpus.saturating_mul(per_cpu).clamp(32, 512)
}

/// Records per CPU in CPU mode: two drain periods' worth of samples.
fn timer_records_per_cpu(interval_ns: u64, drain_ns: u64) -> usize {
    (2 * drain_ns / interval_ns.max(1)).max(16) as usize
}

/// For tests: a thread that waits until the returned sender sends or is
/// dropped; its tid, that sender, and its handle.
#[cfg(test)]
fn parked_thread() -> (u64, std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        tid_tx.send(crate::sampler::thread_id::current()).unwrap();
        let _ = rx.recv();
    });
    (tid_rx.recv().unwrap(), tx, t)
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

impl LinuxBackend {
    pub fn new() -> Result<Self, SamplerError> {
        let signal = signal::install()?;
        let pool = capture::ensure_pool(pool_size(cpu_count(), 16));
        signal::set_wake_threshold((pool.len() / 4) as u32);
        let tasks = procfs::TaskList::open().map_err(|e| {
            SamplerError::new(ErrorCode::NotSup, format!("cannot list threads in /proc/self/task: {e}"))
        })?;
        Ok(LinuxBackend {
            signal,
            pid: std::process::id() as u64,
            threads: FxHashMap::default(),
            checks: CheckQueue::default(),
            to_check: Vec::with_capacity(MASK_CHECKS_PER_REFRESH),
            tasks,
            tids: Vec::new(),
            pending: Vec::new(),
            listed_ns: 0,
            tail_checked_ns: 0,
            tail: Vec::with_capacity(2 * TAIL_THREADS),
            buf: Vec::with_capacity(4096),
            pool,
            populated: 0,
            wake_seen: std::cell::Cell::new(signal::WAKE.load(std::sync::atomic::Ordering::Acquire)),
            timer_interval_ns: None,
            cfg: CaptureConfig { max_depth: crate::sampler::options::MAX_STACK_DEPTH_DEFAULT, native_unwinding: true },
            unwinder: None,
            unwound: Unwound::default(),
            syscall_sites: syscall_stop::SyscallSites::new(signal::can_read_foreign_stacks()),
            stack: Vec::with_capacity(capture::COPY_BYTES / 8),
            words: Vec::with_capacity(256),
            done: Vec::with_capacity(pool.len()),
            maps_read_ns: None,
            need_bounds: Vec::new(),
            lost_at_start: signal::LOST.load(std::sync::atomic::Ordering::Relaxed),
            foreign: 0,
            copied_to_root: 0,
            taken_over: false,
            names_read_up_to: 0,
            finishing: false,
            frame_pointer_code: Vec::new(),
            warm: Vec::new(),
            cold_checked_up_to: 0,
            starved_timers: 0,
            newest_at_start: None,
            second_looks_left: 0,
        })
    }

    /// Maps the pool's pages in, once per session, on the sampler thread.
    /// Maps in the pool's records up to `n` (all with `usize::MAX`). The
    /// free list hands out the lowest first.
    fn populate_pool(&mut self, n: usize) {
        let n = n.min(self.pool.len());
        if self.populated < n {
            self.pool.populate(self.populated..n);
            self.populated = n;
        }
    }

    /// The unwinder, built on first use (on the sampler thread).
    fn unwinder(&mut self) -> &mut Unwinder {
        if self.unwinder.is_none() {
            let mut u = Unwinder::default();
            for m in code::loaded_code(|_| false) {
                u.add_module(m);
            }
            u.set_frame_pointer_code(self.frame_pointer_code.clone());
            self.unwinder = Some(u);
            self.refresh_code(true);
        }
        self.unwinder.get_or_insert_with(Unwinder::default)
    }

    /// Reads `/proc/self/maps` again for JIT code, and takes in objects
    /// loaded since; at most every `MAPS_PERIOD_NS` unless `force`. Returns
    /// the maps read, for bounds.
    fn refresh_code(&mut self, force: bool) -> Option<Maps> {
        let now = monotonic_ns();
        if !force && self.maps_read_ns.is_some_and(|t| now.saturating_sub(t) < MAPS_PERIOD_NS) {
            return None;
        }
        self.maps_read_ns = Some(now);
        let maps = Maps::read().ok()?;
        // Libraries may have come and gone.
        self.syscall_sites.forget();
        if let Some(u) = self.unwinder.as_mut() {
            for m in code::loaded_code(|start| u.has_module_at(start)) {
                u.add_module(m);
            }
            let jit = code::jit_regions(&maps.text, |r| u.has_module_in(r));
            u.set_jit_regions(jit);
        }
        crate::v8::frames::note_maps(&maps.text);
        Some(maps)
    }

    /// Whether a signal sent to a live thread has not been taken yet.
    fn signals_on_their_way(&self) -> bool {
        self.threads.iter().any(|(&tid, t)| {
            t.slot.and_then(signal::slot).is_some_and(|s| s.is_pending()) && signal::thread_alive(self.pid, tid)
        })
    }

    fn start_timer(&mut self, tid: u64) {
        let Some(interval) = self.timer_interval_ns else { return };
        let signal = self.signal;
        let Some(t) = self.threads.get_mut(&tid) else { return };
        if t.blocks_signal || t.timer.is_some() {
            return;
        }
        let Some((value, intervals)) = t.slot.and_then(|i| signal::slot(i).map(|s| (s.value(i), s.timer_intervals())))
        else {
            return;
        };
        t.timer = CpuTimer::start(tid, signal, value, interval, intervals).ok();
    }

    /// Starts following a thread the listing found: its name, whether it
    /// may be signalled, a slot and (CPU mode) a timer.
    fn set_up(&mut self, tid: u64, now: u64) -> ThreadEntry {
        // After `finish` no thread is signalled, so its mask needs no
        // reading, and the same refresh reads every name.
        let name = if self.finishing {
            ThreadName::EMPTY
        } else {
            procfs::thread_name(tid, &mut self.buf).unwrap_or(ThreadName::EMPTY)
        };
        let cpu_before = clock_ns(timers::thread_cpu_clock(tid));
        // After `finish`, threads are only named, not sampled; the addon's
        // own threads are never sampled (no slot, so no signal or timer).
        let sampled = !self.finishing && !own_threads::contains(tid);
        let mut blocks = !sampled || self.must_not_signal(tid);
        if blocks
            && sampled
            && self.second_looks_left > 0
            && self.timer_interval_ns.is_some()
            && self.newest_at_start.is_some_and(|n| tid > n)
            && !is_signal_waiter(tid)
        {
            self.second_looks_left -= 1;
            // A thread created while sampling, most likely caught inside
            // pthread_create, which blocks every signal for a moment: looked
            // at again now, its timer starts now rather than at the next
            // check, 10-40 ms on (a worker's start-up, where its isolate is
            // found from its samples).
            std::thread::sleep(std::time::Duration::from_micros(200));
            blocks = self.must_not_signal(tid);
        }
        let slot = if sampled { signal::acquire(tid) } else { None };
        if let Some(s) = slot.and_then(signal::slot) {
            s.set_active(true);
        }
        let mut t = LinuxThread {
            slot,
            timer: None,
            blocks_signal: false,
            mask_due_ns: 0,
            blocked_backoff_ns: BLOCKED_RECHECK_NS,
            checked_cpu_ns: cpu_before,
            name_stale: false,
            warm_until_ns: 0,
            listed_warm: false,
        };
        t.checked(blocks, now);
        self.checks.push(t.mask_due_ns, tid);
        self.threads.insert(tid, t);
        self.start_timer(tid);
        let mut entry = ThreadEntry::new(tid, tid, name, StackBounds::EMPTY);
        entry.is_main = tid == self.pid;
        entry
    }

    fn forget(&mut self, tid: u64) {
        if let Some(mut t) = self.threads.remove(&tid) {
            // The timer goes first, so nothing signals the slot after.
            t.timer = None;
            if let Some(s) = t.slot.and_then(signal::slot) {
                s.release();
            }
        }
    }

    /// Whether a thread must not be signalled: it blocks the signal, or
    /// waits for signals where its mask cannot be read.
    fn must_not_signal(&mut self, tid: u64) -> bool {
        // While a thread is inside sigtimedwait its mask reads as if the
        // signals it waits for were not blocked, until it has left: also
        // while it is runnable again but has not run yet, which on a loaded
        // machine lasts milliseconds, and where `/proc/<tid>/syscall` only
        // says "running". Reads of procfs cannot tell that moment from a
        // busy thread, so a thread once seen waiting for signals is never
        // signalled again (in any session). For others, the mask is read
        // before and after what the thread is doing: clear only if neither
        // read blocks the signal and the thread did not go to sleep in
        // between (its count of voluntary sleeps did not move).
        if is_signal_waiter(tid) {
            return true;
        }
        let Some(before) = procfs::signal_state(tid, self.signal, &mut self.buf) else { return true };
        if before.blocks {
            return true;
        }
        match procfs::syscall_state(tid, &mut self.buf) {
            Some(procfs::SyscallState::WaitsForSignals) => {
                note_signal_waiter(tid);
                return true;
            }
            None => return true,
            Some(_) => {}
        }
        match procfs::signal_state(tid, self.signal, &mut self.buf) {
            Some(after) => after.blocks || after.voluntary_switches != before.voluntary_switches,
            None => true,
        }
    }

    /// CPU mode: notes that `tid` was sampled or had its timer fired at `now`.
    fn note_warm(&mut self, tid: u64, now: u64) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.warm_until_ns = now + WARM_NS;
            if !t.listed_warm {
                t.listed_warm = true;
                self.warm.push(tid);
            }
        }
    }

    /// CPU mode: fires the timers of threads that ran well past their
    /// expiry without the kernel firing them. Warm threads are checked
    /// each time, the others a few at a time, in turn: a clock read each.
    fn fire_starved_timers(&mut self, now: u64) {
        let fire = |t: &LinuxThread| -> bool {
            let (Some(timer), Some(slot)) = (t.timer.as_ref(), t.slot.and_then(signal::slot)) else { return false };
            timer.fire_if_starved(slot.timer_intervals(), STARVED_LIMIT_NS)
        };
        let mut warm = std::mem::take(&mut self.warm);
        warm.retain(|tid| match self.threads.get_mut(tid) {
            Some(t) if t.warm_until_ns > now => true,
            Some(t) => {
                t.listed_warm = false;
                false
            }
            None => false,
        });
        let mut fired = Vec::new();
        for &tid in warm.iter().take(WARM_CHECKS_PER_REFRESH) {
            if self.threads.get(&tid).is_some_and(fire) {
                fired.push(tid);
            }
        }
        self.warm = warm;
        let n = self.tids.len();
        let (mut cold, mut k) = (0, 0);
        while cold < COLD_CHECKS_PER_REFRESH && k < n {
            let tid = self.tids[(self.cold_checked_up_to + k) % n];
            k += 1;
            let Some(t) = self.threads.get(&tid) else { continue };
            if t.listed_warm || t.timer.is_none() {
                continue;
            }
            cold += 1;
            if fire(t) {
                fired.push(tid);
            }
        }
        if n > 0 {
            self.cold_checked_up_to = (self.cold_checked_up_to + k) % n;
        }
        self.starved_timers += fired.len() as u64;
        for tid in fired {
            self.note_warm(tid, now);
        }
    }

    /// Validates the bounds handlers asked for.
    fn resolve_bounds(&mut self) {
        if self.need_bounds.is_empty() {
            return;
        }
        let maps = match self.refresh_code(true) {
            Some(m) => m,
            None => match Maps::read() {
                Ok(m) => m,
                Err(_) => return,
            },
        };
        for (index, sp, tcb, is_main) in self.need_bounds.drain(..) {
            let Some(slot) = signal::slot(index) else { continue };
            let found = maps.thread_stack(sp, tcb, is_main);
            if let Some(b) = found {
                slot.set_bounds(Bounds { lo: b.lo, hi: b.hi, tcb });
            }
        }
    }

    /// Keeps what the handler knows of the thread's stack right, by the
    /// rules of `sampler::unwind::lesson`. See `signal::ThreadSlot::learn_root`.
    fn learn_stack(&self, slot: &signal::ThreadSlot, d: &capture::RecordData, copy: &StackCopy<'_>, end: StackEnd) {
        if d.flags & (FLAG_FOREIGN_STACK | FLAG_NO_COPY) != 0 {
            // Not the thread's own stack: nothing to learn about it.
            return;
        }
        let cut_at_root = d.flags & FLAG_TO_ROOT != 0;
        let l = lesson(copy, d.fp, cut_at_root, slot.knows_root(), end, &self.unwound);
        if l.copy_whole {
            slot.copy_densely();
        }
        if l.forget_root {
            slot.forget_root();
        }
        if let Some((record, extent)) = l.learn_root {
            if let (Some(saved_fp), Some(ret)) = (copy.read(record), copy.read(record + 8)) {
                slot.learn_root(record, extent, record_fingerprint(saved_fp, ret));
            }
        }
    }

    /// Unwinds one record and reports it.
    fn report(&mut self, index: u32, sink: &mut dyn FnMut(Capture<'_>)) {
        let Some(record) = self.pool.record(index) else { return };
        let d = signal::record_data(record);
        let Some(slot) = signal::slot(d.slot).filter(|s| s.gen() == d.gen && s.owner() != 0) else {
            // Its thread left, or the slot was reused: a stale capture.
            return;
        };
        let tid = slot.owner();
        let is_main = tid == self.pid;
        if self.timer_interval_ns.is_some() {
            self.note_warm(tid, d.enter_ns);
        }
        if d.flags & FLAG_FOREIGN_STACK != 0 {
            self.foreign += 1;
            let b = slot.bounds();
            if b.tcb != d.tcb || !(b.lo <= d.sp && d.sp < b.hi) {
                self.need_bounds.push((d.slot, d.sp, d.tcb, is_main));
            }
        }
        let regs = Registers { pc: d.pc, sp: d.sp, fp: d.fp, lr: d.lr };
        let copy_words = (d.copy_words as usize).min(d.stack.len());
        self.copied_to_root += (d.flags & FLAG_TO_ROOT != 0) as u64;
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend_from_slice(&d.stack[..copy_words]);
        let copy = StackCopy {
            start: d.copy_start,
            words: &stack,
            truncated: d.flags & (FLAG_TRUNCATED | FLAG_TO_ROOT) != 0,
            tail: &d.tail[..(d.tail_len as usize).min(d.tail.len())],
            holes: &d.holes[..(d.hole_len as usize).min(d.holes.len())],
        };
        let max_depth = if self.cfg.native_unwinding { self.cfg.max_depth } else { 1 };
        let mut end = if d.flags & FLAG_NO_COPY != 0 || max_depth <= 1 {
            self.unwound.frames.clear();
            self.unwound.fps.clear();
            self.unwound.frames.push(d.pc);
            self.unwound.fps.push(d.fp);
            if d.flags & FLAG_NO_COPY != 0 {
                StackEnd::CopyFailed
            } else {
                StackEnd::DepthLimit
            }
        } else {
            let mut unwound = std::mem::take(&mut self.unwound);
            let mut end = self.unwinder().unwind(regs, &copy, max_depth, &mut unwound);
            if end == StackEnd::NotExecutable && self.refresh_code(false).is_some() {
                // New JIT code or a new library: look again once.
                end = self.unwinder().unwind(regs, &copy, max_depth, &mut unwound);
            }
            self.unwound = unwound;
            end
        };
        if d.pc == 0 {
            end = StackEnd::NoPc;
        }
        self.learn_stack(slot, d, &copy, end);
        // Words below each frame pointer, and the word at sp, for V8.
        self.words.clear();
        // A thread in V8's code before its isolate is registered (or after
        // it unregistered) gets its interpreted frames read all the same.
        let js = crate::v8::thread_registered(tid)
            || (signal::js_frames()
                && self.unwinder.as_ref().is_some_and(|u| self.unwound.frames.iter().any(|&a| u.in_jit(a))));
        if js && copy_words > 0 {
            // Every frame, those above a cut copy too (their records keep
            // these words): deep recursion is named to its first frame.
            crate::v8::slots::words_below(&self.unwound.fps, |a| copy.read(a), &mut self.words);
        }
        let tos = if js { copy.read(d.sp).unwrap_or(0) } else { 0 };
        let runtime = &d.runtime[..(d.runtime_len as usize).min(d.runtime.len())];
        sink(Capture::Stack(CapturedStack {
            tid,
            time_ns: d.enter_ns,
            frames: &self.unwound.frames,
            end,
            stopped_ns: d.exit_ns.saturating_sub(d.enter_ns),
            copied_bytes: 8 * copy_words as u32,
            delivery_ns: (d.sent_ns != 0).then(|| d.enter_ns.saturating_sub(d.sent_ns)),
            weight: d.overrun.saturating_add(1),
            // V8 emits no system call instructions: JIT code is running.
            off_cpu: !self.unwinder.as_ref().is_some_and(|u| u.in_jit(d.pc))
                && self.syscall_sites.stopped_in_syscall(d.pc, d.ret),
            lr: d.lr,
            runtime_frames: runtime,
            tos,
            frame_words: &self.words,
        }));
        self.stack = stack;
    }
}

impl Backend for LinuxBackend {
    fn prepare_sampler_thread(&mut self) {
        // The default 50 µs timer slack would smear 1 kHz deadlines.
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }

    fn sampling_started(&mut self) {
        // With more runnable threads than cores, a normal-priority sampler
        // waits for a time slice after each wake-up and misses ticks.
        sched::run_promptly();
    }

    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }

    fn sleep_until(&self, deadline_ns: u64) {
        signal::sleep_until(deadline_ns, self.wake_seen.get());
        self.wake_seen.set(signal::WAKE.load(std::sync::atomic::Ordering::Acquire));
    }

    fn stop_waker(&self) -> Option<fn()> {
        Some(signal::wake_sampler)
    }

    fn thread_created(&mut self) {
        // The newest threads are checked at the next refresh: that finds a
        // thread that started as another exited (a worker pool replacing
        // one), which the thread count does not show.
        self.tail_checked_ns = 0;
    }

    fn threads_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
        let now = monotonic_ns();
        self.second_looks_left = SECOND_LOOKS_PER_REFRESH;
        let unchanged = self.tasks.count() == Some(self.tids.len() as u64);
        let listed_recently = now.saturating_sub(self.listed_ns) < list_period_ns(self.tids.len());
        // The periodic full refresh (names) needs no listing of its own;
        // the last one, at `finish`, lists so that every thread is named.
        let mut list = (full && self.finishing) || !unchanged || !listed_recently || self.threads.is_empty();
        if !list && now.saturating_sub(self.tail_checked_ns) >= tail_check_period_ns(self.tids.len()) {
            self.tail_checked_ns = now;
            let skip = self.tids.len().saturating_sub(TAIL_THREADS);
            if self.tasks.list_from(skip, &mut self.tail).is_ok() {
                list = self.tail.iter().any(|t| self.tids.binary_search(t).is_err());
            }
        }
        if list {
            if self.tasks.list(&mut self.tids).is_err() {
                // The next refresh lists again; none is left pending, so
                // the loop does not spin on a listing that keeps failing.
                self.pending.clear();
                return;
            }
            self.listed_ns = now;
            if self.newest_at_start.is_none() {
                self.newest_at_start = Some(self.tids.last().copied().unwrap_or(0));
            }
            let gone: Vec<u64> = self.threads.keys().filter(|t| self.tids.binary_search(t).is_err()).copied().collect();
            for tid in gone {
                self.forget(tid);
                forget_signal_waiter(tid);
            }
            let tids = &self.tids;
            registry.remove_missing(|tid| tids.binary_search(&tid).is_ok());
            self.pending.clear();
            self.pending.extend(self.tids.iter().copied().filter(|tid| !self.threads.contains_key(tid)));
            if self.pending.len() > SETUPS_PER_REFRESH {
                // More new threads than one refresh sets up (a first look at
                // a process of thousands): those that have used the most CPU
                // first, so that busy threads are sampled within the first
                // refreshes and idle ones follow. Popped from the back.
                let mut by_cpu: Vec<(u64, u64)> = self
                    .pending
                    .iter()
                    .map(|&tid| (clock_ns(timers::thread_cpu_clock(tid)).unwrap_or(0), tid))
                    .collect();
                by_cpu.sort_unstable();
                self.pending.clear();
                self.pending.extend(by_cpu.into_iter().map(|(_, tid)| tid));
            } else {
                self.pending.reverse();
            }
        }
        // After `finish`, every thread is named at once.
        let budget = if self.finishing { usize::MAX } else { SETUPS_PER_REFRESH };
        let mut added = Vec::new();
        while added.len() < budget {
            let Some(tid) = self.pending.pop() else { break };
            if self.threads.contains_key(&tid) {
                continue;
            }
            added.push(self.set_up(tid, now));
        }
        if !added.is_empty() {
            registry.add_all(&added);
            self.checks.compact(self.threads.len(), self.threads.iter().map(|(&tid, t)| (t.mask_due_ns, tid)));
        }
        if self.timer_interval_ns.is_some() {
            self.populate_pool(usize::MAX);
        }
        if full {
            // Another library may have installed its own handler for our
            // signal: samples then stop arriving, which must not go unsaid.
            self.taken_over |= !signal::still_installed();
            // Threads rename themselves after they start. Names are read
            // again a few dozen a refresh, round robin (each read is a
            // file), only for threads that have run since their last read,
            // and all of them at the end of a session.
            let budget = if self.finishing { usize::MAX } else { NAME_READS_PER_REFRESH };
            let mut tids: Vec<u64> =
                self.threads.iter().filter(|(_, t)| t.name_stale || self.finishing).map(|(&tid, _)| tid).collect();
            tids.sort_unstable();
            let from = tids.partition_point(|&t| t <= self.names_read_up_to);
            let picked: Vec<u64> = tids[from..].iter().chain(&tids[..from]).take(budget).copied().collect();
            self.names_read_up_to = picked.last().copied().unwrap_or(0);
            let mut names = Vec::with_capacity(picked.len());
            for tid in picked {
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.name_stale = false;
                }
                if let Some(n) = procfs::thread_name(tid, &mut self.buf) {
                    names.push((tid, n));
                }
            }
            registry.rename_all(&names);
            registry.compact();
        }
        // Masks change: a thread may start or stop blocking the signal, or
        // start waiting for signals, at any time.
        // A check reads files (a few µs each), so a refresh checks a few
        // threads, the most overdue first: every thread about once a second
        // in a process of a few dozen, less often in one of thousands. A
        // thread that takes the signal is only asked whether it now waits
        // for signals (one read): one that starts blocking it merely leaves
        // a signal pending, which is harmless. A thread seen blocking is
        // checked in full.
        // Threads that have not run since their last check keep its result
        // (idle threads, most of a large process) without a file read.
        let mut to_check = std::mem::take(&mut self.to_check);
        to_check.clear();
        let mut reads = 0;
        while reads < CPU_READS_PER_REFRESH && to_check.len() < MASK_CHECKS_PER_REFRESH {
            let Some((due, tid)) = self.checks.pop_due(now) else { break };
            if self.threads.get(&tid).is_none_or(|t| t.mask_due_ns != due) {
                continue; // Gone, or due at another time now.
            }
            reads += 1;
            let cpu = clock_ns(timers::thread_cpu_clock(tid));
            let Some(t) = self.threads.get_mut(&tid) else { continue };
            if cpu.is_some() && cpu == t.checked_cpu_ns {
                t.checked(t.blocks_signal, now);
                self.checks.push(t.mask_due_ns, tid);
                continue;
            }
            t.checked_cpu_ns = cpu;
            t.name_stale = true;
            to_check.push(tid);
        }
        for &tid in &to_check {
            let was_blocking = self.threads.get(&tid).is_some_and(|t| t.blocks_signal);
            let blocks = if was_blocking {
                // Two clear checks in a row before a blocking thread is
                // signalled again: a thread that loops on sigtimedwait
                // reads as clear only if all three reads of one check fell
                // between two of its waits.
                self.must_not_signal(tid) || self.must_not_signal(tid)
            } else {
                let waits = procfs::waits_for_signals(tid, &mut self.buf).unwrap_or(false);
                if waits {
                    note_signal_waiter(tid);
                }
                waits
            };
            if let Some(t) = self.threads.get_mut(&tid) {
                t.checked(blocks, now);
                self.checks.push(t.mask_due_ns, tid);
                if blocks {
                    t.timer = None;
                }
            }
            if !blocks {
                self.start_timer(tid);
            }
        }
        self.to_check = to_check;
        if self.timer_interval_ns.is_some() && !self.finishing {
            self.fire_starved_timers(now);
        }
        self.resolve_bounds();
    }

    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
        clock_ns(timers::thread_cpu_clock(thread.handle)).map(Some).ok_or(ThreadGone)
    }

    fn idle_cpu_threshold_ns(&self) -> u64 {
        IDLE_CPU_THRESHOLD_NS
    }

    fn own_cpu_ns(&self) -> u64 {
        clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
    }

    fn current_tid(&self) -> u64 {
        crate::sampler::thread_id::current()
    }

    fn collect(&mut self, sink: &mut dyn FnMut(Capture<'_>)) {
        let mut done = std::mem::take(&mut self.done);
        self.pool.take_done(&mut done);
        for &i in &done {
            self.report(i, sink);
            self.pool.free(i);
        }
        self.done = done;
        // Bounds for the threads whose stacks were seen without: their
        // next samples can then be copied directly.
        self.resolve_bounds();
    }

    fn request(&mut self, threads: &[ThreadEntry], cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>)) {
        self.cfg = cfg;
        // A record for each signal first, the others after them.
        self.populate_pool(threads.len() + FIRST_RECORDS_PER_CPU * cpu_count());
        for entry in threads {
            let tid = entry.handle;
            let Some(t) = self.threads.get(&tid) else {
                sink(Capture::Skipped { tid, reason: SkipReason::Gone });
                continue;
            };
            if t.blocks_signal {
                sink(Capture::Skipped { tid, reason: SkipReason::Pending });
                continue;
            }
            let Some((index, slot)) = t.slot.and_then(|i| Some((i, signal::slot(i)?))) else {
                sink(Capture::Skipped { tid, reason: SkipReason::NoCapacity });
                continue;
            };
            if !slot.begin_send(monotonic_ns()) {
                // The previous signal has not been served yet.
                sink(Capture::Skipped { tid, reason: SkipReason::Pending });
                continue;
            }
            if let Err(errno) = signal::send(tid, slot.value(index)) {
                slot.cancel_send();
                let reason = if errno == libc::ESRCH { SkipReason::Gone } else { SkipReason::Pending };
                sink(Capture::Skipped { tid, reason });
            }
        }
        self.populate_pool(usize::MAX);
    }

    fn finish(&mut self, _timeout_ns: u64, sink: &mut dyn FnMut(Capture<'_>)) {
        self.taken_over |= !signal::still_installed();
        self.finishing = true;
        // No new signals: timers go (and threads found from now on get
        // none), slots stop accepting captures.
        self.timer_interval_ns = None;
        for t in self.threads.values_mut() {
            t.timer = None;
            if let Some(s) = t.slot.and_then(signal::slot) {
                s.set_active(false);
            }
        }
        // Handlers already past the check finish within microseconds. A
        // signal queued to a thread that has not run since is delivered
        // when it next runs: wait for it, so that none arrives after
        // stop() returns (unless the thread is starved past the limit).
        let start = monotonic_ns();
        loop {
            let now = monotonic_ns();
            let waited = now.saturating_sub(start);
            if waited >= FINISH_PENDING_LIMIT_NS || (waited >= FINISH_GRACE_NS && !self.signals_on_their_way()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(250));
        }
        self.collect(sink);
        // Slots are released (a signal still on its way finds them with
        // another generation); the threads stay known for their names.
        for t in self.threads.values_mut() {
            if let Some(s) = t.slot.take().and_then(signal::slot) {
                s.release();
            }
        }
    }

    fn has_cpu_timers(&self) -> bool {
        true
    }

    fn set_capture_config(&mut self, cfg: CaptureConfig) {
        self.cfg = cfg;
    }

    fn start_cpu_timers(&mut self, interval_ns: u64, drain_ns: u64) {
        self.timer_interval_ns = Some(interval_ns);
        // Room for two drain periods. No timer exists yet, so no handler
        // is filling the old pool.
        let want = pool_size(cpu_count(), timer_records_per_cpu(interval_ns, drain_ns));
        if self.pool.len() < want {
            self.pool = capture::ensure_pool(want);
            self.populated = 0;
            self.done.reserve(self.pool.len());
        }
        // The records the first signals take, then the timers; the rest
        // after the threads found by the next refresh have theirs: mapping
        // all of them in takes about a millisecond.
        self.populate_pool(FIRST_RECORDS_PER_CPU * cpu_count());
        signal::set_wake_threshold((self.pool.len() / 2) as u32);
        let tids: Vec<u64> = self.threads.keys().copied().collect();
        for tid in tids {
            self.start_timer(tid);
        }
    }

    fn set_frame_pointer_code(&mut self, ranges: Vec<std::ops::Range<u64>>) {
        if let Some(u) = self.unwinder.as_mut() {
            u.set_frame_pointer_code(ranges.clone());
        }
        self.frame_pointer_code = ranges;
    }

    fn backend_counters(&self) -> BackendCounters {
        let lost = signal::LOST.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(self.lost_at_start);
        BackendCounters {
            lost,
            foreign_stacks: self.foreign,
            starved_timers: self.starved_timers,
            signal_taken_over: self.taken_over,
            capture_buffer_bytes: self.pool.bytes() as u64,
        }
    }
}

impl Drop for LinuxBackend {
    fn drop(&mut self) {
        let tids: Vec<u64> = self.threads.keys().copied().collect();
        for tid in tids {
            self.forget(tid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_clock_reads_this_thread() {
        let tid = crate::sampler::thread_id::current();
        let a = clock_ns(timers::thread_cpu_clock(tid)).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = clock_ns(timers::thread_cpu_clock(tid)).unwrap();
        assert!(b > a);
        // Thread ids are below pid_max, so pid_max itself names no thread.
        let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
        assert!(clock_ns(timers::thread_cpu_clock(pid_max)).is_none(), "no such thread");
    }

    #[test]
    fn cpu_mode_pool_holds_two_drain_periods() {
        use crate::sampler::session::timer_drain_period as drain;
        assert_eq!(timer_records_per_cpu(1_000_000, drain(1_000_000)), 40, "1 kHz: 20 ms drains");
        assert_eq!(timer_records_per_cpu(250_000, drain(250_000)), 80, "4 kHz: 10 ms drains");
        assert_eq!(timer_records_per_cpu(10_000_000, drain(10_000_000)), 16, "100 Hz: 20 ms drains");
        assert_eq!(timer_records_per_cpu(1_000_000_000, drain(1_000_000_000)), 16, "never fewer than wall mode");
        assert_eq!(pool_size(2, timer_records_per_cpu(50_000, drain(50_000))), 512, "capped");
        assert_eq!(pool_size(1, 16), 32, "at least 32");
    }

    /// A wake-up given before the sampler sleeps (`stop()` racing the loop)
    /// ends that sleep at once: the loop may sleep until its next deadline.
    #[test]
    fn a_wake_before_the_sleep_is_not_lost() {
        let b = LinuxBackend::new().unwrap();
        b.sleep_until(monotonic_ns()); // sync `wake_seen` with the word
        b.stop_waker().unwrap()();
        let t0 = monotonic_ns();
        b.sleep_until(t0 + 30_000_000_000);
        assert!(monotonic_ns() - t0 < 10_000_000_000, "slept through the wake-up");
    }

    /// A thread that blocks every signal and loops on sigtimedwait with a
    /// short timeout is seen waiting, and from then on never found clear,
    /// even on a loaded machine (spinning threads keep it waiting for a CPU
    /// after each timeout, with its mask still open, which procfs cannot
    /// tell from a busy thread); a busy thread is found clear.
    #[test]
    fn a_thread_looping_on_sigtimedwait_is_never_found_clear() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let mut b = LinuxBackend::new().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let spin = |stop: Arc<AtomicBool>, tx: Option<std::sync::mpsc::Sender<u64>>| {
            std::thread::spawn(move || {
                if let Some(tx) = tx {
                    tx.send(crate::sampler::thread_id::current()).unwrap();
                }
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        };
        let mut threads: Vec<_> = (0..3).map(|_| spin(stop.clone(), None)).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        threads.push(spin(stop.clone(), Some(tx)));
        let busy = rx.recv().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            // SAFETY: plain data; the set is filled before use.
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
                tx.send(crate::sampler::thread_id::current()).unwrap();
                while !s.load(Ordering::Relaxed) {
                    let ts = libc::timespec { tv_sec: 0, tv_nsec: 200_000 };
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    libc::sigtimedwait(&all, &mut info, &ts);
                }
            }
        }));
        let waiter = rx.recv().unwrap();
        let mut checks_after_seen = 0;
        let mut clear_after_seen = 0;
        for _ in 0..3000 {
            let seen = is_signal_waiter(waiter);
            let blocked = b.must_not_signal(waiter);
            if seen {
                checks_after_seen += 1;
                clear_after_seen += usize::from(!blocked);
            }
        }
        let busy_clear = (0..200).filter(|_| !b.must_not_signal(busy)).count();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert!(checks_after_seen > 2000, "seen waiting late: {checks_after_seen} checks after");
        assert_eq!(clear_after_seen, 0, "found clear in {clear_after_seen} of {checks_after_seen} checks");
        assert!(busy_clear > 0, "a busy thread was never found clear");
    }
}

#[cfg(test)]
mod capture_tests {
    use super::*;
    use crate::sampler::registry::ThreadRegistry;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    fn own_cpu_ns() -> u64 {
        clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
    }

    /// The handler's pool and slots are the process's: one session at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// One thread exiting while another starts leaves the thread count as it
    /// was: the new one is found among the newest threads before the next
    /// full listing is due.
    #[test]
    fn a_thread_created_as_another_exits_is_found_between_listings() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let mut b = LinuxBackend::new().unwrap();
        let registry = ThreadRegistry::default();
        let (old, old_tx, old_thread) = parked_thread();
        b.refresh_threads(&registry, false);
        assert!(registry.contains(old));
        drop(old_tx);
        old_thread.join().unwrap();
        let (new, new_tx, new_thread) = parked_thread();
        // The last listing and check of the newest threads are recent, and
        // (unless other tests' threads came or went meanwhile) the count is
        // unchanged: only a check of the newest threads can find it, which
        // a thread created asks for (a worker, told by JavaScript).
        b.listed_ns = monotonic_ns();
        b.tail_checked_ns = monotonic_ns();
        b.thread_created();
        b.refresh_threads(&registry, false);
        let found = registry.contains(new);
        drop(new_tx);
        new_thread.join().unwrap();
        b.finish(0, &mut |_| {});
        assert!(found, "{new} not found; the newest threads: {:?}", b.tail);
    }

    /// More new threads than a refresh sets up: the busy one first, the
    /// rest over the following refreshes, every one in the end.
    #[test]
    fn a_first_look_at_many_threads_sets_up_the_busy_ones_first() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let parked: Vec<_> = (0..2 * SETUPS_PER_REFRESH).map(|_| parked_thread()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let busy_tid = Arc::new(AtomicU64::new(0));
        let busy = {
            let (stop, busy_tid) = (stop.clone(), busy_tid.clone());
            std::thread::spawn(move || {
                busy_tid.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        };
        // It has run for far longer than any parked thread.
        let until = monotonic_ns() + 50_000_000;
        while busy_tid.load(Ordering::SeqCst) == 0 || monotonic_ns() < until {
            std::thread::yield_now();
        }
        let busy_tid = busy_tid.load(Ordering::SeqCst);
        let mut b = LinuxBackend::new().unwrap();
        let registry = ThreadRegistry::default();
        b.refresh_threads(&registry, false);
        let first_busy = registry.contains(busy_tid);
        let first_parked = parked.iter().filter(|(tid, _, _)| registry.contains(*tid)).count();
        let pending_after_first = b.threads_pending();
        let mut refreshes = 1;
        while b.threads_pending() && refreshes < 100 {
            b.refresh_threads(&registry, false);
            refreshes += 1;
        }
        let all = parked.iter().all(|(tid, _, _)| registry.contains(*tid));
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        for (_, tx, t) in parked {
            drop(tx);
            t.join().unwrap();
        }
        b.finish(0, &mut |_| {});
        assert!(first_busy, "the busy thread is set up by the first refresh");
        assert!(first_parked < SETUPS_PER_REFRESH, "{first_parked} parked threads in the first refresh");
        assert!(pending_after_first, "some are left for later");
        assert!(all, "every thread is set up in the end");
        assert!(refreshes >= 3, "{refreshes} refreshes");
    }

    /// Threads still waiting to be set up when a session ends are named
    /// by the last refresh, and get no slot.
    #[test]
    fn threads_left_for_later_at_the_end_are_named_and_not_signalled() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let parked: Vec<_> = (0..2 * SETUPS_PER_REFRESH)
            .map(|_| {
                let (tid_tx, tid_rx) = std::sync::mpsc::channel();
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                let t = std::thread::Builder::new()
                    .name("left-for-later".into())
                    .spawn(move || {
                        tid_tx.send(crate::sampler::thread_id::current()).unwrap();
                        let _ = rx.recv();
                    })
                    .unwrap();
                (tid_rx.recv().unwrap(), tx, t)
            })
            .collect();
        let mut b = LinuxBackend::new().unwrap();
        let registry = ThreadRegistry::default();
        b.refresh_threads(&registry, false);
        let pending_before = b.threads_pending();
        b.finish(0, &mut |_| {});
        b.refresh_threads(&registry, true);
        let pending_after = b.threads_pending();
        let mut entries = Vec::new();
        registry.snapshot(&mut entries);
        let named = parked
            .iter()
            .filter(|(tid, _, _)| entries.iter().any(|e| e.tid == *tid && e.name.to_string_lossy() == "left-for-later"))
            .count();
        let with_slot =
            parked.iter().filter(|(tid, _, _)| b.threads.get(tid).is_some_and(|t| t.slot.is_some())).count();
        for (_, tx, t) in parked {
            drop(tx);
            t.join().unwrap();
        }
        assert!(pending_before, "some were left for later");
        assert!(!pending_after, "none is left after the last refresh");
        assert_eq!(named, 2 * SETUPS_PER_REFRESH, "every one is named");
        assert_eq!(with_slot, 0, "no slot after the end (slots are released at finish)");
    }

    /// A chain of calls the optimizer keeps, so the stack has known depth.
    #[inline(never)]
    fn deep(n: u32, until: u64) -> u64 {
        if n == 0 {
            let mut x = 0u64;
            while own_cpu_ns() < until {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            return x;
        }
        std::hint::black_box(deep(n - 1, until)).wrapping_add(n as u64)
    }

    struct Seen {
        tid: u64,
        frames: Vec<u64>,
        end: StackEnd,
        weight: u32,
        copied_bytes: u32,
    }

    /// Wall mode: a thread waiting in a system call is seen waiting (the
    /// signal finds it back on the instruction, to restart the call), and
    /// a running one is not, whatever its registers hold.
    #[test]
    fn a_thread_waiting_in_a_system_call_is_seen_off_cpu() {
        /// Ends both threads however the test ends.
        struct Release {
            stop: Arc<AtomicBool>,
            fds: [i32; 2],
        }
        impl Drop for Release {
            fn drop(&mut self) {
                self.stop.store(true, Ordering::Relaxed);
                // SAFETY: writes one byte from a static to the pipe, then
                // closes the descriptors pipe(2) gave.
                unsafe {
                    libc::write(self.fds[1], b"q".as_ptr().cast(), 1);
                    libc::close(self.fds[1]);
                }
            }
        }
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let mut b = LinuxBackend::new().unwrap();
        let registry = ThreadRegistry::default();
        let mut fds = [0i32; 2];
        // SAFETY: a two-element array for pipe(2).
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let stop = Arc::new(AtomicBool::new(false));
        let release = Release { stop: stop.clone(), fds };
        let (reader, spinner) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r, read_end) = (reader.clone(), fds[0]);
        let waiting = std::thread::spawn(move || {
            r.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
            let mut byte = 0u8;
            // SAFETY: reads one byte into a local; blocks until written.
            unsafe {
                libc::read(read_end, (&mut byte as *mut u8).cast(), 1);
                libc::close(read_end);
            }
        });
        let (sp, st) = (spinner.clone(), stop.clone());
        let running = std::thread::spawn(move || {
            sp.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
            let mut x = 0u64;
            while !st.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        });
        while reader.load(Ordering::SeqCst) == 0 || spinner.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let ids = [reader.load(Ordering::SeqCst), spinner.load(Ordering::SeqCst)];
        // The reader is asleep in read() before the first signal.
        let asleep = || {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", ids[0])).unwrap_or_default();
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S'))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !asleep() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(asleep(), "the reader never blocked");
        b.refresh_threads(&registry, true);
        let mut entries = Vec::new();
        registry.snapshot(&mut entries);
        let wanted: Vec<ThreadEntry> = entries.iter().filter(|e| ids.contains(&e.tid)).copied().collect();
        assert_eq!(wanted.len(), 2);
        let cfg = CaptureConfig { max_depth: 64, native_unwinding: true };
        let off_cpu: std::cell::RefCell<[Vec<bool>; 2]> = Default::default();
        let mut sink = |c: Capture<'_>| {
            if let Capture::Stack(s) = c {
                if let Some(i) = ids.iter().position(|&t| t == s.tid) {
                    off_cpu.borrow_mut()[i].push(s.off_cpu);
                }
            }
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for _ in 0..200 {
            b.request(&wanted, cfg, &mut sink);
            std::thread::sleep(std::time::Duration::from_millis(3));
            b.collect(&mut sink);
            if off_cpu.borrow().iter().all(|o| o.len() >= 20) || std::time::Instant::now() > deadline {
                break;
            }
        }
        b.finish(0, &mut sink);
        drop(release);
        waiting.join().unwrap();
        running.join().unwrap();
        let [waiting, running] = off_cpu.into_inner();
        assert!(waiting.len() >= 20 && running.len() >= 20, "{} and {} captures", waiting.len(), running.len());
        assert!(waiting.iter().all(|&o| o), "waiting thread seen running: {waiting:?}");
        assert!(running.iter().all(|&o| !o), "running thread seen waiting: {running:?}");
    }

    /// A frame with 16 KiB of locals between two frame records, as libuv's
    /// poll loop has, above `deep(depth)`.
    #[inline(never)]
    fn under_a_large_frame(depth: u32, until: u64) -> u64 {
        let mut events = [0u8; 16384];
        std::hint::black_box(&mut events);
        let x = deep(depth, until);
        std::hint::black_box(&events);
        x
    }

    /// Samples, in CPU mode at 1 ms, a thread that runs `deep(depth)` for
    /// 300 ms of its CPU time, under a large frame if asked.
    fn sample_deep_thread(depth: u32, large_frame: bool) -> (u64, Vec<Seen>, BackendCounters, u64) {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let mut b = LinuxBackend::new().unwrap();
        b.prepare_sampler_thread();
        let registry = ThreadRegistry::default();
        let go = Arc::new(AtomicBool::new(false));
        let target = Arc::new(AtomicU64::new(0));
        let (g, t) = (go.clone(), target.clone());
        let worker = std::thread::spawn(move || {
            t.store(crate::sampler::thread_id::current(), Ordering::SeqCst);
            while !g.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let until = own_cpu_ns() + 300_000_000;
            if large_frame {
                under_a_large_frame(depth, until)
            } else {
                deep(depth, until)
            }
        });
        while target.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        b.refresh_threads(&registry, true);
        b.start_cpu_timers(1_000_000, 20_000_000);
        go.store(true, Ordering::SeqCst);
        let mut seen = Vec::new();
        let mut sink = |c: Capture<'_>| {
            if let Capture::Stack(s) = c {
                seen.push(Seen {
                    tid: s.tid,
                    frames: s.frames.to_vec(),
                    end: s.end,
                    weight: s.weight,
                    copied_bytes: s.copied_bytes,
                });
            }
        };
        while !worker.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(5));
            b.refresh_threads(&registry, false);
            b.collect(&mut sink);
        }
        b.finish(0, &mut sink);
        worker.join().unwrap();
        (target.load(Ordering::SeqCst), seen, b.backend_counters(), b.copied_to_root)
    }

    #[test]
    fn cpu_mode_copies_and_unwinds_a_thread_to_its_root() {
        let (tid, seen, counters, to_root) = sample_deep_thread(12, false);
        let mine: Vec<&Seen> = seen.iter().filter(|s| s.tid == tid).collect();
        let weight: u64 = mine.iter().map(|s| s.weight as u64).sum();
        // 300 ms of CPU at 1 ms: the weights count the intervals.
        assert!((240..=310).contains(&weight), "{weight} intervals in {} captures", mine.len());
        let rooted = mine.iter().filter(|s| s.end == StackEnd::Root).count();
        assert!(rooted * 10 >= mine.len() * 9, "{rooted} of {} reached the root: {:?}", mine.len(), {
            let mut ends: Vec<_> = mine.iter().map(|s| s.end).collect();
            ends.dedup();
            ends
        });
        // deep(12) is at least 13 frames, plus the thread's start.
        let deep_enough = mine.iter().filter(|s| s.frames.len() >= 15).count();
        assert!(deep_enough * 10 >= mine.len() * 9, "{deep_enough} of {}", mine.len());
        assert_eq!(counters.lost, 0);
        // After the first complete unwind, copies end at the thread's first
        // frames instead of at its control block, and still reach the root.
        assert!(to_root * 10 >= mine.len() as u64 * 8, "{to_root} of {} copies ended at the root", mine.len());
        assert!(mine.iter().all(|s| s.copied_bytes >= 64), "every capture copied the stack");
    }

    #[test]
    fn a_large_frame_of_code_without_frame_pointers_is_copied_whole() {
        // This test binary keeps no frame pointers: the large frame is not a
        // known call site, so no copy may skip any of it.
        let (tid, seen, _, _) = sample_deep_thread(12, true);
        let mine: Vec<&Seen> = seen.iter().filter(|s| s.tid == tid).collect();
        let weight: u64 = mine.iter().map(|s| s.weight as u64).sum();
        assert!((240..=310).contains(&weight), "{weight} intervals in {} captures", mine.len());
        let rooted = mine.iter().filter(|s| s.end == StackEnd::Root && s.frames.len() >= 16).count();
        assert!(rooted * 10 >= mine.len() * 9, "{rooted} of {} reached the root through the large frame", mine.len());
        let whole = mine.iter().filter(|s| s.copied_bytes >= 16 * 1024).count();
        assert!(whole * 10 >= mine.len() * 9, "{whole} of {} copies hold the large frame", mine.len());
    }
}
