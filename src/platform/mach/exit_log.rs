//! The exit log the introspection hook writes and the stopped window reads.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub const EXIT_LOG_LEN: usize = 256;

/// The most recent thread ids that reached THREAD_TERMINATE.
///
/// A thread's stack is unmapped by the kernel after its TERMINATE hook ran
/// (in `__bsdthread_terminate`), but the thread can still be suspended in
/// between. The sampler checks this log after `thread_suspend` succeeds: if
/// the tid is not here, the thread had not reached its TERMINATE hook when it
/// stopped, so its stack is still mapped and safe to walk. Writers and the
/// reader use only atomics, so the check is allowed inside the stopped
/// window, and a thread suspended in the middle of `record` cannot block it.
///
/// The log is a ring: under heavy churn an exit can be overwritten before
/// the sampler looks. [`ExitLog::may_have_exited`] fails safe: once the ring
/// has turned half over since the sampler's snapshot of the thread list
/// ([`ExitLog::epoch`]), every thread of that snapshot counts as possibly
/// exited and is skipped until the next refresh.
pub struct ExitLog {
    slots: [AtomicU64; EXIT_LOG_LEN],
    next: AtomicUsize,
}

impl Default for ExitLog {
    fn default() -> Self {
        Self::new()
    }
}

impl ExitLog {
    pub const fn new() -> Self {
        ExitLog { slots: [const { AtomicU64::new(0) }; EXIT_LOG_LEN], next: AtomicUsize::new(0) }
    }

    /// Records that `tid` is exiting. Thread ids are never reused on macOS,
    /// so an old entry can never make a live thread look dead.
    pub fn record(&self, tid: u64) {
        if tid == 0 {
            return;
        }
        let i = self.next.fetch_add(1, Ordering::AcqRel) % EXIT_LOG_LEN;
        if let Some(slot) = self.slots.get(i) {
            slot.store(tid, Ordering::Release);
        }
    }

    /// True if `tid` was recorded among the last `EXIT_LOG_LEN` exits.
    #[inline]
    pub fn contains(&self, tid: u64) -> bool {
        tid != 0 && self.slots.iter().any(|s| s.load(Ordering::Acquire) == tid)
    }

    /// How many exits were ever recorded: take it before snapshotting the
    /// thread list, and pass it to [`ExitLog::may_have_exited`].
    #[inline]
    pub fn epoch(&self) -> usize {
        self.next.load(Ordering::Acquire)
    }

    /// True if `tid` is logged, or if so many exits came since `epoch` that
    /// its entry may have been overwritten. Half the ring is kept as slack
    /// for exits already logged but not yet removed from the table when the
    /// snapshot was taken (one per thread inside the hook at that moment).
    #[inline]
    pub fn may_have_exited(&self, tid: u64, epoch: usize) -> bool {
        self.epoch().wrapping_sub(epoch) >= EXIT_LOG_LEN / 2 || self.contains(tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_log_remembers_recent_exits() {
        let log = ExitLog::new();
        assert!(!log.contains(5));
        log.record(5);
        log.record(0); // ignored
        assert!(log.contains(5));
        assert!(!log.contains(0));
        for tid in 100..100 + EXIT_LOG_LEN as u64 - 1 {
            log.record(tid);
        }
        assert!(log.contains(5), "still within the window");
        log.record(9999);
        assert!(!log.contains(5), "oldest entry overwritten");
        assert!(log.contains(9999) && log.contains(100));
    }

    #[test]
    fn an_overflowing_log_fails_safe() {
        let log = ExitLog::new();
        let epoch = log.epoch();
        log.record(7);
        assert!(log.may_have_exited(7, epoch));
        assert!(!log.may_have_exited(8, epoch), "a live thread is sampled");
        // Heavy churn: 7's entry is overwritten within one refresh period.
        for tid in 1000..1000 + EXIT_LOG_LEN as u64 {
            log.record(tid);
        }
        assert!(!log.contains(7), "the ring forgot 7");
        assert!(log.may_have_exited(7, epoch), "but the sampler still treats it as exiting");
        assert!(log.may_have_exited(8, epoch), "and so every thread of that snapshot");
        // After a refresh (a new epoch) only logged threads count.
        let fresh = log.epoch();
        assert!(!log.may_have_exited(8, fresh));
        assert!(log.may_have_exited(1000 + EXIT_LOG_LEN as u64 - 1, fresh));
        // Just below half a ring of exits: still exact.
        for tid in 5000..5000 + (EXIT_LOG_LEN / 2 - 1) as u64 {
            log.record(tid);
        }
        assert!(!log.may_have_exited(8, fresh));
        log.record(9);
        assert!(log.may_have_exited(8, fresh));
    }
}
