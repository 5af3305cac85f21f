//! CPU-time timers: one POSIX timer per thread on that thread's CPU-time
//! clock, delivering the sampling signal to that thread
//! (`SIGEV_THREAD_ID`). The kernel interrupts a thread after each interval
//! of its own CPU time, so idle threads cost nothing, no sampler wake-up or
//! `tgkill` is needed per sample, and samples are proportional to CPU time.
//! This is how Go's runtime profiler and async-profiler's `ctimer` mode
//! sample.
//!
//! A timer's first expiry is drawn uniformly from (0, interval], as Go's
//! profiler does: the count of samples over C of CPU time is then C ÷
//! interval on average (a first expiry of a whole interval would count
//! half an interval short, on every thread, at every start), and a thread
//! busy from `start()` on is sampled after half an interval on average.
//!
//! Timers belong to the process and outlive their thread; the backend
//! deletes each when its thread leaves, and all of them at `stop()`, before
//! the slots they signal are released. A forked child inherits none.

use libc::{c_int, clockid_t, timer_t};

/// `struct sigevent` as the kernel reads it for `SIGEV_THREAD_ID` (libc's
/// Rust type hides the thread-id field in a union).
#[repr(C)]
struct SigEvent {
    value: u64,
    signo: c_int,
    notify: c_int,
    tid: c_int,
    _pad: [c_int; 11],
}
const _: () = assert!(std::mem::size_of::<SigEvent>() == 64);

const SIGEV_THREAD_ID: c_int = 4;

/// The CPU-time clock of another thread of this process, as the kernel's
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` builds it.
pub fn thread_cpu_clock(tid: u64) -> clockid_t {
    const CPUCLOCK_PERTHREAD: clockid_t = 4;
    const CPUCLOCK_SCHED: clockid_t = 2;
    (!(tid as clockid_t) << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
}

/// A timer on a thread's CPU clock.
#[derive(Debug)]
pub struct CpuTimer {
    id: timer_t,
    clock: clockid_t,
    interval_ns: u64,
    /// Its first expiry, as a reading of the thread's CPU clock.
    first_ns: u64,
    /// The slot's count of intervals carried (see
    /// [`ThreadSlot::timer_intervals`](super::signal::ThreadSlot::timer_intervals))
    /// when this timer started.
    intervals_before: u32,
}

// SAFETY: a timer id is a process-wide kernel handle, usable from any thread.
unsafe impl Send for CpuTimer {}

impl CpuTimer {
    /// Creates a timer for thread `tid` that sends `signal` with `value`
    /// every `interval_ns` of the thread's CPU time. `intervals_before` is
    /// the slot's count of intervals carried so far. Returns the errno.
    pub fn start(tid: u64, signal: i32, value: u64, interval_ns: u64, intervals_before: u32) -> Result<CpuTimer, i32> {
        let clock = thread_cpu_clock(tid);
        let mut ev = SigEvent { value, signo: signal, notify: SIGEV_THREAD_ID, tid: tid as c_int, _pad: [0; 11] };
        let mut id: timer_t = std::ptr::null_mut();
        // SAFETY: `ev` is a complete sigevent as the kernel reads it, and
        // `id` a valid out-pointer.
        let rc = unsafe { libc::timer_create(clock, &mut ev as *mut SigEvent as *mut libc::sigevent, &mut id) };
        if rc != 0 {
            return Err(errno());
        }
        // Owned from here: deleted if what follows fails.
        let mut timer = CpuTimer { id, clock, interval_ns, first_ns: 0, intervals_before };
        let now = read_clock(clock).ok_or_else(errno)?;
        // The first expiry is absolute, so that every later one is known:
        // the kernel keeps them on the first's grid.
        timer.first_ns = now + first_expiry_ns(interval_ns, random_u64(tid));
        timer.set_absolute(timer.first_ns)?;
        Ok(timer)
    }

    /// Arms the timer to expire at `at_ns` of its thread's CPU time, then
    /// every interval. A time already passed fires it now.
    fn set_absolute(&self, at_ns: u64) -> Result<(), i32> {
        let spec = libc::itimerspec { it_interval: timespec(self.interval_ns), it_value: timespec(at_ns.max(1)) };
        // SAFETY: `self.id` is a live timer; `spec` is valid.
        if unsafe { libc::timer_settime(self.id, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut()) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    /// Makes the timer fire now if its thread has run `limit_ns` of CPU
    /// time past the timer's next expiry without the kernel firing it;
    /// true if it did. `intervals` is the slot's current count of
    /// intervals carried. A thread gone, or a timer that cannot be read or
    /// set, is left alone.
    ///
    /// The kernel checks CPU timers only at its scheduler tick, and only
    /// for the thread the tick interrupts. A thread that runs between
    /// ticks (on a machine with more busy threads than cores, alternating
    /// in time slices paced by another thread's periodic wake-ups) can
    /// miss every tick for seconds: its timer stays expired and its CPU
    /// time unsampled. Set again to the expiry it missed, the timer fires
    /// at once, and the signal's overrun counts every interval since.
    ///
    /// The next expiry is the first one plus the intervals carried since.
    /// A signal delivered after `intervals` was read re-arms the timer into
    /// the future, which the expired check below sees; only one delivered
    /// between that check and the re-arm (microseconds apart) would be
    /// counted twice.
    pub fn fire_if_starved(&self, intervals: u32, limit_ns: u64) -> bool {
        let carried = intervals.wrapping_sub(self.intervals_before) as u64;
        let next_ns = self.first_ns.saturating_add(carried.saturating_mul(self.interval_ns));
        let Some(now) = read_clock(self.clock) else { return false };
        if now < next_ns.saturating_add(limit_ns) {
            return false;
        }
        // SAFETY: itimerspec is plain integers, valid when zeroed.
        let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: `self.id` is a live timer; `cur` a valid out-pointer.
        if unsafe { libc::timer_gettime(self.id, &mut cur) } != 0 {
            return false;
        }
        // An expired timer the kernel has not fired reads as 1 ns to go.
        if cur.it_value.tv_sec != 0 || cur.it_value.tv_nsec > 1 {
            return false;
        }
        self.set_absolute(next_ns).is_ok()
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as _ }
}

fn read_clock(clock: clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

impl Drop for CpuTimer {
    fn drop(&mut self) {
        // SAFETY: deletes the timer this value owns; no signal is generated
        // by it afterwards (one already queued may still arrive, and the
        // handler ignores it once its slot is released).
        unsafe { libc::timer_delete(self.id) };
    }
}

/// A point in (0, interval] picked by `random`: where a timer first expires.
fn first_expiry_ns(interval_ns: u64, random: u64) -> u64 {
    1 + random % interval_ns.max(1)
}

/// A random number for `key`, from the standard library's per-process
/// random hash keys.
fn random_u64(key: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(key);
    h.finish()
}

fn errno() -> i32 {
    // SAFETY: reading errno right after a failed call.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Per signal number: signals taken, and intervals they carried (1 +
    /// overrun each).
    static COUNTS: [(AtomicU32, AtomicU32); 65] = [const { (AtomicU32::new(0), AtomicU32::new(0)) }; 65];

    extern "C" fn count(sig: c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel's siginfo; a timer's overrun count is at
        // offset 20.
        let overrun = unsafe { (info as *const u8).add(20).cast::<i32>().read() };
        if let Some((signals, intervals)) = COUNTS.get(sig as usize) {
            signals.fetch_add(1, Ordering::Relaxed);
            intervals.fetch_add(1 + overrun.max(0) as u32, Ordering::Relaxed);
        }
    }

    /// Counts real-time signal `sig` (this test's own) until dropped, then
    /// puts the previous handler back.
    struct Counting {
        sig: c_int,
        old: libc::sigaction,
    }

    impl Counting {
        fn install(sig: c_int) -> Counting {
            // SAFETY: sigaction is plain data, valid when zeroed; installs a
            // handler that only counts, for a signal the test owns.
            let old = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = count as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigaction(sig, &act, &mut old);
                old
            };
            Counting { sig, old }
        }

        fn signals(&self) -> u32 {
            COUNTS[self.sig as usize].0.load(Ordering::Relaxed)
        }

        fn intervals(&self) -> u32 {
            COUNTS[self.sig as usize].1.load(Ordering::Relaxed)
        }
    }

    impl Drop for Counting {
        fn drop(&mut self) {
            // SAFETY: restores the disposition `install` replaced.
            unsafe { libc::sigaction(self.sig, &self.old, std::ptr::null_mut()) };
        }
    }

    #[test]
    fn first_expiries_are_spread_over_one_interval() {
        let interval = 1_000_000;
        let firsts: Vec<u64> = (0..4000).map(|k| first_expiry_ns(interval, random_u64(k))).collect();
        assert!(firsts.iter().all(|&f| (1..=interval).contains(&f)));
        // Uniform: each quarter of the interval gets about a quarter.
        for q in 0..4 {
            let n = firsts.iter().filter(|&&f| (f - 1) * 4 / interval == q).count();
            assert!((800..1200).contains(&n), "quarter {q}: {n} of 4000");
        }
        assert_eq!(first_expiry_ns(0, 12345), 1);
        assert_eq!(first_expiry_ns(1, u64::MAX), 1);
    }

    #[test]
    fn a_timer_first_expires_within_one_interval() {
        let tid = crate::sampler::thread_id::current();
        let sig = libc::SIGRTMIN() + 2;
        // Ten seconds of CPU: never reached before the timer goes.
        let interval = 10_000_000_000;
        let mut values = Vec::new();
        for _ in 0..20 {
            let timer = CpuTimer::start(tid, sig, 0, interval, 0).unwrap();
            // SAFETY: itimerspec is plain integers, valid when zeroed.
            let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
            // SAFETY: `timer.id` is a live timer; `cur` a valid out-pointer.
            assert_eq!(unsafe { libc::timer_gettime(timer.id, &mut cur) }, 0);
            values.push(cur.it_value.tv_sec as u64 * 1_000_000_000 + cur.it_value.tv_nsec as u64);
            assert_eq!(cur.it_interval.tv_sec as u64 * 1_000_000_000 + cur.it_interval.tv_nsec as u64, interval);
        }
        assert!(values.iter().all(|&v| v > 0 && v <= interval), "{values:?}");
        assert!(values.iter().any(|&v| v < interval * 9 / 10), "{values:?}");
    }

    #[test]
    fn a_thread_cpu_timer_fires_only_while_the_thread_runs() {
        let sig = libc::SIGRTMIN() + 1;
        let counting = Counting::install(sig);
        let own_cpu = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid out-pointer.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tid_tx.send(crate::sampler::thread_id::current()).unwrap();
            go_rx.recv().unwrap(); // idle until told
                                   // 100 ms of this thread's CPU time, however long that takes.
            let end = own_cpu() + 100_000_000;
            let mut x = 0u64;
            while own_cpu() < end {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        });
        let tid = tid_rx.recv().unwrap();
        let timer = CpuTimer::start(tid, sig, 7, 1_000_000, 0).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(counting.signals(), 0, "an idle thread is never interrupted");
        go_tx.send(()).unwrap();
        t.join().unwrap();
        drop(timer);
        // The kernel checks CPU timers at its scheduler tick, so one signal
        // may stand for several 1 ms intervals; with the overruns they add
        // up to the CPU time used.
        let (signals, intervals) = (counting.signals(), counting.intervals());
        assert!((90..=101).contains(&intervals), "{intervals} intervals in {signals} signals");
        assert!(signals > 0 && signals <= intervals);
        drop(counting);
        assert!(CpuTimer::start(u32::MAX as u64, sig, 0, 1_000_000, 0).is_err(), "no such thread");
    }

    #[test]
    fn a_timer_set_back_to_a_missed_expiry_fires_at_once_for_every_interval_since() {
        let sig = libc::SIGRTMIN() + 3;
        let counting = Counting::install(sig);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tid_tx.send(crate::sampler::thread_id::current()).unwrap();
            let mut x = 0u64;
            while stop_rx.try_recv().is_err() {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        });
        let tid = tid_rx.recv().unwrap();
        let interval = 1_000_000;
        let mut timer = CpuTimer::start(tid, sig, 0, interval, 0).unwrap();
        // Pushed an hour of CPU time ahead: the kernel will not fire it.
        timer.set_absolute(timer.first_ns + 3_600_000_000_000).unwrap();
        let cpu = || read_clock(timer.clock).unwrap();
        let start = cpu();
        while cpu() < start + 50_000_000 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(counting.signals(), 0);
        // Not expired as the kernel sees it: left alone, whatever the count says.
        timer.first_ns = start;
        assert!(!timer.fire_if_starved(0, 0));
        // Set back to an expiry 50 ms of CPU ago, it fires now, and its
        // signal carries the 50 intervals since.
        timer.set_absolute(start).unwrap();
        let waited = std::time::Instant::now();
        while counting.signals() == 0 && waited.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let carried = counting.intervals();
        drop(timer);
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        drop(counting);
        assert!((50..=80).contains(&carried), "{carried} intervals");
    }
}
