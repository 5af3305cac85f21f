//! The Linux backend: threads from `/proc/self/task`, stacks captured by a
//! real-time signal whose handler records the thread's own stack into a
//! preallocated slot and returns (`signal`). A thread is stopped only for
//! the time of its own handler; it never waits for another thread. Why not
//! park the thread instead: `docs/design/linux-self-walk.md`.
//!
//! - The signal is a free real-time signal, never SIGPROF (V8's).
//! - Stack bounds come from `/proc/self/maps`, looked up on the sampler
//!   thread for the sp a handler reported; a new thread gets one probe
//!   signal that only reports its sp, so its bounds are known by its first
//!   real sample.
//! - Idle threads (per-thread CPU clock not advancing) are not signalled;
//!   neither are threads that block the signal (counted as skipped).

pub mod modules;
pub mod procfs;
pub mod signal;

use rustc_hash::FxHashMap;

use crate::sampler::backend::{Backend, Capture, CaptureConfig, CapturedStack, SkipReason, ThreadGone};
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::registry::{ThreadEntry, ThreadName, ThreadRegistry};
use crate::sampler::walker::StackBounds;

use procfs::MemoryMap;
use signal::{Harvest, FLAG_BOUNDS_MISS};

/// Listing `/proc/self/task` costs about 0.4 µs per thread (the kernel looks
/// up a dentry for each). Between listings, a refresh only compares the
/// thread count, which is one `fstat`; a full listing still happens at least
/// this often, to catch one thread exiting while another starts.
const LIST_PERIOD_NS: u64 = 100_000_000;

/// How long a thread that blocks the signal is left alone before its mask is
/// checked again.
const MASK_RECHECK_NS: u64 = 1_000_000_000;

/// Serving a sampling signal costs an idle thread 5-25 µs of CPU time on the
/// VMs we measured (wake-up, handler, sigreturn, back to sleep). Below this a
/// thread is treated as idle, so one signal does not make it look busy.
const IDLE_CPU_THRESHOLD_NS: u64 = 50_000;

struct LinuxThread {
    slot: Option<u32>,
    bounds: StackBounds,
    /// The stack pointer seen at the last capture, to re-resolve bounds.
    last_sp: u64,
    blocks_signal: bool,
    mask_checked_ns: u64,
    /// A probe for the stack pointer is in flight; its result is not a sample.
    probing: bool,
}

pub struct LinuxBackend {
    signal: i32,
    pid: u64,
    threads: FxHashMap<u64, LinuxThread>,
    /// Threads with a request or probe in flight: the only ones `collect`
    /// has to look at.
    in_flight: Vec<u64>,
    tasks: procfs::TaskList,
    tids: Vec<u64>,
    listed_ns: u64,
    buf: Vec<u8>,
    /// Threads whose bounds must be looked up before their next request.
    need_bounds: Vec<(u64, u64)>,
}

/// The CPU-time clock id of another thread of this process, as the kernel's
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` builds it.
fn thread_cpu_clock(tid: u64) -> libc::clockid_t {
    const CPUCLOCK_PERTHREAD: libc::clockid_t = 4;
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    (!(tid as libc::clockid_t) << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

impl LinuxThread {
    /// Asks the thread for its stack pointer only, so its bounds can be
    /// looked up before it is first sampled.
    fn probe(&mut self, tid: u64) -> bool {
        if self.slot.is_none() {
            self.slot = signal::acquire(tid);
        }
        let Some((index, slot)) = self.slot.and_then(|i| Some((i, signal::slot(i)?))) else { return false };
        if let Some(value) = slot.arm(index, StackBounds::EMPTY, 1, monotonic_ns()) {
            if signal::send(tid, value).is_ok() {
                self.probing = true;
            } else {
                slot.disarm();
            }
        }
        self.probing
    }
}

impl LinuxBackend {
    pub fn new() -> Result<Self, SamplerError> {
        let signal = signal::install()?;
        let mut backend = LinuxBackend {
            signal,
            pid: std::process::id() as u64,
            threads: FxHashMap::default(),
            in_flight: Vec::new(),
            tasks: procfs::TaskList::open().map_err(|e| {
                SamplerError::new(ErrorCode::NotSup, format!("cannot list threads in /proc/self/task: {e}"))
            })?,
            tids: Vec::new(),
            listed_ns: 0,
            buf: Vec::with_capacity(4096),
            need_bounds: Vec::new(),
        };
        backend.reclaim_slots();
        Ok(backend)
    }

    /// Frees slots a previous session left owned, where that is now safe.
    fn reclaim_slots(&mut self) {
        let _ = self.tasks.list(&mut self.tids);
        for (_, slot) in signal::owned_slots() {
            let gone = self.tids.binary_search(&slot.owner()).is_err();
            slot.release(gone);
        }
    }

    fn forget(&mut self, tid: u64) {
        if let Some(t) = self.threads.remove(&tid) {
            if let Some(slot) = t.slot.and_then(signal::slot) {
                // The thread is gone, so no handler can run for it; if one
                // is mid-write the slot simply stays owned until reclaimed.
                slot.release(true);
            }
        }
    }

    /// Looks up stack bounds for threads whose handler reported an sp
    /// outside the bounds it was given.
    fn resolve_bounds(&mut self, registry: Option<&ThreadRegistry>) {
        if self.need_bounds.is_empty() {
            return;
        }
        let Ok(maps) = MemoryMap::read() else { return };
        for (tid, sp) in self.need_bounds.drain(..) {
            if let (Some(t), Some(b)) = (self.threads.get_mut(&tid), maps.find(sp)) {
                t.bounds = b;
                if let Some(r) = registry {
                    r.update(tid, None, Some(b));
                }
            }
        }
    }
}

impl Backend for LinuxBackend {
    fn prepare_sampler_thread(&mut self) {
        // The default 50 µs timer slack would smear 1 kHz deadlines.
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        // With more runnable threads than cores, a normal-priority sampler
        // waits for a time slice after each wake-up and misses ticks (a
        // third of them at 1 kHz with two busy threads on two cores). The
        // lowest real-time priority lets it run on time; it sleeps between
        // ticks and uses a few percent of a core at most, and the kernel's
        // real-time throttling bounds it regardless. Without the privilege
        // (CAP_SYS_NICE or RLIMIT_RTPRIO) this fails and it stays normal.
        if std::env::var_os("MACHSAMPLER_NO_REALTIME").is_none() {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: changes only the calling thread's policy; `param` is valid.
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
        }
    }

    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }

    fn sleep_until(&self, deadline_ns: u64) {
        let ts = libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `ts` is valid; the remaining-time pointer may be null with
        // TIMER_ABSTIME. EINTR just returns early; the caller loops.
        unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
    }

    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
        let now = monotonic_ns();
        let unchanged = self.tasks.count() == Some(self.tids.len() as u64);
        if !full && unchanged && now.saturating_sub(self.listed_ns) < LIST_PERIOD_NS && !self.threads.is_empty() {
            return;
        }
        if self.tasks.list(&mut self.tids).is_err() {
            return;
        }
        self.listed_ns = now;
        // Threads that left.
        let gone: Vec<u64> = self.threads.keys().filter(|t| self.tids.binary_search(t).is_err()).copied().collect();
        for tid in gone {
            self.forget(tid);
        }
        let tids = &self.tids;
        registry.remove_missing(|tid| tids.binary_search(&tid).is_ok());
        // Threads that arrived.
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if self.threads.contains_key(&tid) {
                continue;
            }
            let name = procfs::thread_name(tid, &mut self.buf).unwrap_or(ThreadName::EMPTY);
            let blocks = procfs::blocks_signal(tid, self.signal, &mut self.buf).unwrap_or(false);
            let mut t = LinuxThread {
                slot: None,
                bounds: StackBounds::EMPTY,
                last_sp: 0,
                blocks_signal: blocks,
                mask_checked_ns: now,
                probing: false,
            };
            // The sampler thread blocks all signals, so it is never probed.
            if !blocks && t.probe(tid) {
                self.in_flight.push(tid);
            }
            self.threads.insert(tid, t);
            let mut entry = ThreadEntry::new(tid, tid, name, StackBounds::EMPTY);
            entry.is_main = tid == self.pid;
            registry.add(entry);
        }
        if full {
            for (&tid, t) in self.threads.iter() {
                let name = procfs::thread_name(tid, &mut self.buf);
                registry.update(tid, name, Some(t.bounds));
            }
            registry.compact();
        }
        for (&tid, t) in self.threads.iter_mut() {
            if t.blocks_signal && now - t.mask_checked_ns >= MASK_RECHECK_NS {
                t.blocks_signal = procfs::blocks_signal(tid, self.signal, &mut self.buf).unwrap_or(true);
                t.mask_checked_ns = now;
            }
        }
    }

    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
        clock_ns(thread_cpu_clock(thread.handle)).map(Some).ok_or(ThreadGone)
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
        let mut i = 0;
        while i < self.in_flight.len() {
            let tid = self.in_flight[i];
            let Some(t) = self.threads.get_mut(&tid) else {
                self.in_flight.swap_remove(i);
                continue;
            };
            let Some(slot) = t.slot.and_then(signal::slot) else {
                self.in_flight.swap_remove(i);
                continue;
            };
            let Harvest::Done(d) = slot.harvest() else {
                i += 1;
                continue;
            };
            self.in_flight.swap_remove(i);
            t.last_sp = d.sp;
            let probe = std::mem::take(&mut t.probing);
            if d.flags & FLAG_BOUNDS_MISS != 0 {
                self.need_bounds.push((tid, d.sp));
                if !probe {
                    sink(Capture::Skipped { tid, reason: SkipReason::BoundsUnknown });
                }
            } else {
                sink(Capture::Stack(CapturedStack {
                    tid,
                    time_ns: d.enter_ns,
                    frames: d.frames,
                    end: d.end,
                    stopped_ns: d.exit_ns.saturating_sub(d.enter_ns),
                    delivery_ns: Some(d.enter_ns.saturating_sub(d.sent_ns)),
                    walk_error: false,
                    runtime_frames: d.js,
                    tos: d.tos,
                    frame_words: d.words,
                }));
            }
            slot.consume();
        }
        self.resolve_bounds(None);
    }

    fn request(&mut self, threads: &[ThreadEntry], cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>)) {
        let depth = if cfg.native_unwinding { cfg.max_depth } else { 1 };
        for entry in threads {
            let tid = entry.handle;
            let Some(t) = self.threads.get_mut(&tid) else {
                sink(Capture::Skipped { tid, reason: SkipReason::Gone });
                continue;
            };
            if t.blocks_signal {
                sink(Capture::Skipped { tid, reason: SkipReason::Pending });
                continue;
            }
            if t.slot.is_none() {
                t.slot = signal::acquire(tid);
            }
            let Some((index, slot)) = t.slot.and_then(|i| Some((i, signal::slot(i)?))) else {
                sink(Capture::Skipped { tid, reason: SkipReason::NoCapacity });
                continue;
            };
            let Some(value) = slot.arm(index, t.bounds, depth, monotonic_ns()) else {
                // The previous signal has not been served yet.
                sink(Capture::Skipped { tid, reason: SkipReason::Pending });
                continue;
            };
            match signal::send(tid, value) {
                Ok(()) => self.in_flight.push(tid),
                Err(errno) => {
                    slot.disarm();
                    let reason = if errno == libc::ESRCH { SkipReason::Gone } else { SkipReason::Pending };
                    sink(Capture::Skipped { tid, reason });
                }
            }
        }
    }

    fn finish(&mut self, timeout_ns: u64, sink: &mut dyn FnMut(Capture<'_>)) {
        let deadline = monotonic_ns() + timeout_ns;
        loop {
            self.collect(sink);
            if self.in_flight.is_empty() || monotonic_ns() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        for t in self.threads.values_mut() {
            if let Some(slot) = t.slot.take().and_then(signal::slot) {
                if slot.in_flight() {
                    // Never served (the thread is blocked or descheduled):
                    // a late handler will find it abandoned and write nothing.
                    slot.abandon();
                    if !t.probing {
                        sink(Capture::Skipped { tid: slot.owner(), reason: SkipReason::Pending });
                    }
                }
                slot.release(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_clock_reads_this_thread() {
        let tid = crate::sampler::thread_id::current();
        let a = clock_ns(thread_cpu_clock(tid)).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = clock_ns(thread_cpu_clock(tid)).unwrap();
        assert!(b > a);
        // Thread ids are below pid_max, so pid_max itself names no thread.
        let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
        assert!(clock_ns(thread_cpu_clock(pid_max)).is_none(), "no such thread");
    }
}
