//! A watched event loop's heartbeat: written by the loop's own thread on
//! every turn, read by the sampler thread. No JavaScript is involved: the
//! loop thread's side runs in libuv handle callbacks (see
//! `crate::bindings::stalls`), and everything here is atomics.
//!
//! The loop beats before it polls (prepare), after it polled (check), and
//! on a timer that bounds how long an idle poll may last. A loop that does
//! not beat for longer than that timer's period is busy, not idle: that is
//! what the sampler thread looks for.
//!
//! The loop thread also notes each long gap between two beats itself, when
//! the gap ends, with its exact start and end: a stall inside an I/O
//! callback begins after the poll's idle wait, which libuv's idle-time
//! metric tells (`uv_metrics_idle_time`, updated before each I/O callback),
//! so the gap starts when the loop stopped waiting, not when it began to.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A long gap between two beats, as the loop thread saw it end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gap {
    /// The beat before the gap.
    pub last_beat_ns: u64,
    /// When the loop stopped turning: the last beat, or, for a gap that
    /// began in a poll, when the poll stopped waiting.
    pub start_ns: u64,
    /// The first beat after it.
    pub end_ns: u64,
}

#[derive(Debug)]
pub struct Heartbeat {
    /// The loop's thread.
    pub tid: u64,
    /// Gaps at least this long are noted.
    gap_ns: u64,
    beat_ns: AtomicU64,
    /// The last beat was a prepare: the loop is polling (idle, or running
    /// I/O callbacks).
    in_poll: AtomicBool,
    /// The loop's idle time at the last prepare (loop thread only).
    idle_at_prepare_ns: AtomicU64,
    /// The last gap, under a sequence lock (odd while being written).
    gap_seq: AtomicU32,
    gap_last_beat_ns: AtomicU64,
    gap_start_ns: AtomicU64,
    gap_end_ns: AtomicU64,
}

impl Heartbeat {
    /// A heartbeat for the loop of thread `tid`, beating now (`now_ns`);
    /// gaps of `gap_ns` or more are noted.
    pub fn new(tid: u64, now_ns: u64, gap_ns: u64) -> Self {
        Heartbeat {
            tid,
            gap_ns,
            beat_ns: AtomicU64::new(now_ns),
            in_poll: AtomicBool::new(false),
            idle_at_prepare_ns: AtomicU64::new(0),
            gap_seq: AtomicU32::new(0),
            gap_last_beat_ns: AtomicU64::new(0),
            gap_start_ns: AtomicU64::new(0),
            gap_end_ns: AtomicU64::new(0),
        }
    }

    /// The last beat: when, and whether the loop was about to poll.
    pub fn last(&self) -> (u64, bool) {
        (self.beat_ns.load(Ordering::Acquire), self.in_poll.load(Ordering::Acquire))
    }

    /// Loop thread: a beat at `now_ns`. `busy_from_ns` is when a gap that
    /// began in a poll really began, if known.
    fn beat(&self, now_ns: u64, in_poll: bool, busy_from_ns: Option<u64>) {
        let last = self.beat_ns.load(Ordering::Relaxed);
        if now_ns >= last.saturating_add(self.gap_ns) {
            let start = match (self.in_poll.load(Ordering::Relaxed), busy_from_ns) {
                (true, Some(b)) => b.clamp(last, now_ns),
                _ => last,
            };
            // Only this thread writes; readers retry while the count is odd.
            let seq = self.gap_seq.load(Ordering::Relaxed);
            self.gap_seq.store(seq.wrapping_add(1), Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Release);
            self.gap_last_beat_ns.store(last, Ordering::Relaxed);
            self.gap_start_ns.store(start, Ordering::Relaxed);
            self.gap_end_ns.store(now_ns, Ordering::Relaxed);
            self.gap_seq.store(seq.wrapping_add(2), Ordering::Release);
        }
        self.in_poll.store(in_poll, Ordering::Release);
        self.beat_ns.store(now_ns, Ordering::Release);
    }

    /// Loop thread, before it polls. `idle_ns` is the loop's idle time so
    /// far (`uv_metrics_idle_time`), if known.
    pub fn on_prepare(&self, now_ns: u64, idle_ns: Option<u64>) {
        self.idle_at_prepare_ns.store(idle_ns.unwrap_or(0), Ordering::Relaxed);
        self.beat(now_ns, true, None);
    }

    /// Loop thread, after it polled.
    pub fn on_check(&self, now_ns: u64, idle_ns: Option<u64>) {
        // Idle time is counted up to each I/O callback: what this poll
        // waited before the callback that took long.
        let busy_from = idle_ns.map(|idle| {
            let waited = idle.saturating_sub(self.idle_at_prepare_ns.load(Ordering::Relaxed));
            self.beat_ns.load(Ordering::Relaxed).saturating_add(waited)
        });
        self.beat(now_ns, false, busy_from);
    }

    /// Loop thread, on its timer (or any other turn of the loop).
    pub fn on_turn(&self, now_ns: u64) {
        self.beat(now_ns, false, None);
    }

    /// The last gap the loop thread noted.
    pub fn last_gap(&self) -> Option<Gap> {
        for _ in 0..100 {
            let before = self.gap_seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let gap = Gap {
                last_beat_ns: self.gap_last_beat_ns.load(Ordering::Relaxed),
                start_ns: self.gap_start_ns.load(Ordering::Relaxed),
                end_ns: self.gap_end_ns.load(Ordering::Relaxed),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if self.gap_seq.load(Ordering::Relaxed) == before {
                return Some(gap);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn short_turns_note_no_gap() {
        let h = Heartbeat::new(1, 0, 50 * MS);
        for t in 1..100 {
            h.on_prepare(t * 10 * MS, Some(0));
            h.on_check(t * 10 * MS + MS, Some(0));
        }
        assert_eq!(h.last_gap(), None);
        assert_eq!(h.last(), (99 * 10 * MS + MS, false));
    }

    #[test]
    fn a_gap_in_a_timer_callback_starts_at_the_last_beat() {
        let h = Heartbeat::new(1, 0, 50 * MS);
        h.on_check(10 * MS, Some(5 * MS));
        h.on_turn(11 * MS);
        // The loop blocks for 300 ms in the timers phase.
        h.on_prepare(311 * MS, Some(5 * MS));
        assert_eq!(h.last_gap(), Some(Gap { last_beat_ns: 11 * MS, start_ns: 11 * MS, end_ns: 311 * MS }));
        assert!(h.last().1, "in poll");
    }

    #[test]
    fn a_gap_in_an_io_callback_starts_when_the_poll_stopped_waiting() {
        let h = Heartbeat::new(1, 0, 50 * MS);
        // Prepare at 100 ms; the poll waits 40 ms (idle 1000 -> 1040 ms),
        // then an I/O callback blocks for 300 ms; check at 440 ms.
        h.on_prepare(100 * MS, Some(1000 * MS));
        h.on_check(440 * MS, Some(1040 * MS));
        assert_eq!(h.last_gap(), Some(Gap { last_beat_ns: 100 * MS, start_ns: 140 * MS, end_ns: 440 * MS }));
        // Without the idle metric, the gap starts at the prepare.
        let h = Heartbeat::new(1, 0, 50 * MS);
        h.on_prepare(100 * MS, None);
        h.on_check(440 * MS, None);
        assert_eq!(h.last_gap().map(|g| g.start_ns), Some(100 * MS));
    }
}
