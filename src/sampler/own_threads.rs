//! The addon's own threads (the sampler loop and its helpers), which are
//! never sampled: what they do is the profiler's work, not the program's,
//! and in wall mode they would only add idle threads to every profile.
//! The sampler thread's own CPU time is reported in `stats.samplerCpuNs`.
//!
//! A fixed table of atomics: lookups are lock-free and allocation-free.

use std::sync::atomic::{AtomicU64, Ordering};

/// The sampler thread's name. Every loaded copy of the addon names its
/// sampler so; the Mach backend never suspends a thread of that name (two
/// samplers suspending each other would both stay suspended).
pub const SAMPLER_THREAD_NAME: &str = "machsampler";

/// More than the addon ever runs at once (sampler loop, V8 helper, stall
/// reporter, exit watcher, and a loop ending while the next starts).
const CAPACITY: usize = 16;

static TIDS: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];

/// Marks the calling thread as the addon's while the guard lives.
#[must_use = "the thread is the addon's only while the guard lives"]
pub struct OwnThread(Option<usize>);

impl OwnThread {
    /// Marks the calling thread. If the table is full the thread stays
    /// an ordinary one (sampled like any other).
    pub fn mark() -> OwnThread {
        let tid = super::thread_id::current();
        let index = TIDS.iter().position(|t| t.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok());
        OwnThread(index)
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            TIDS[i].store(0, Ordering::Release);
        }
    }
}

/// Whether thread `tid` is one of the addon's own.
pub fn contains(tid: u64) -> bool {
    tid != 0 && TIDS.iter().any(|t| t.load(Ordering::Acquire) == tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_thread_is_the_addons_while_marked() {
        let (tid, still) = std::thread::spawn(|| {
            let tid = crate::sampler::thread_id::current();
            let guard = OwnThread::mark();
            assert!(contains(tid));
            drop(guard);
            (tid, contains(tid))
        })
        .join()
        .unwrap();
        assert!(!still);
        assert!(!contains(tid));
        assert!(!contains(crate::sampler::thread_id::current()));
        assert!(!contains(0));
    }
}
