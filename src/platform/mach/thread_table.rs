//! The process-wide thread table the pthread introspection hook writes.
//!
//! The hook runs inside libpthread on a thread that is starting or exiting,
//! and THREAD_TERMINATE comes after the thread's TSD destructors: a lock
//! that touches thread-local state (a poisoning check, a parking queue)
//! could fail there. So the table is guarded by a spin lock on one atomic,
//! and [`ThreadTable::try_add`] never allocates: the sampler keeps spare
//! capacity with [`ThreadTable::ensure_headroom`], outside the hook.
//! Holders keep the lock for a bounded, allocation-free update or a copy;
//! only `ensure_headroom`, `add` and `compact`, which the sampler calls,
//! may allocate under it.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sampler::registry::{RegistryFull, ThreadEntry};

struct Inner {
    entries: Vec<ThreadEntry>,
    live: usize,
}

/// What [`ThreadTable::try_add`] did with an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// The table took the entry, and the right in its `handle`.
    New,
    /// The tid was already tracked: the table is unchanged and the caller
    /// still owns the entry's right.
    AlreadyTracked,
}

pub struct ThreadTable {
    locked: AtomicBool,
    inner: UnsafeCell<Inner>,
    /// Set when `try_add` refused an entry, so the sampler rescans.
    overflowed: AtomicBool,
}

// SAFETY: `inner` is only reached through `Guard`, which exists only while
// `locked` is held by its creator (acquire on lock, release on unlock).
unsafe impl Sync for ThreadTable {}

struct Guard<'a> {
    table: &'a ThreadTable,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        // SAFETY: the guard holds the lock, so no other reference exists.
        unsafe { &*self.table.inner.get() }
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        // SAFETY: as above, and `&mut self` makes this the only one.
        unsafe { &mut *self.table.inner.get() }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.table.locked.store(false, Ordering::Release);
    }
}

impl Default for ThreadTable {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl ThreadTable {
    pub fn with_capacity(capacity: usize) -> Self {
        ThreadTable {
            locked: AtomicBool::new(false),
            inner: UnsafeCell::new(Inner { entries: Vec::with_capacity(capacity), live: 0 }),
            overflowed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> Guard<'_> {
        let mut spins = 0u32;
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled (or suspended by the
                // sampler between two of its ticks): let it run.
                std::thread::yield_now();
            }
        }
        Guard { table: self }
    }

    /// Adds a thread, or revives it if its tid was removed. Never
    /// allocates: fails when there is no spare capacity, and sets the
    /// overflow flag. The check and the insertion are one step under the
    /// lock, so of two racing adders (the hook and a rescan) exactly one
    /// gets [`Added::New`]; the other still owns its entry's right.
    pub fn try_add(&self, entry: ThreadEntry) -> Result<Added, RegistryFull> {
        let mut inner = self.lock();
        if let Some(i) = inner.entries.iter().position(|e| e.tid == entry.tid) {
            if inner.entries[i].valid {
                return Ok(Added::AlreadyTracked);
            }
            inner.entries[i] = ThreadEntry { valid: true, ..entry };
            inner.live += 1;
            return Ok(Added::New);
        }
        if inner.entries.len() == inner.entries.capacity() {
            self.overflowed.store(true, Ordering::Relaxed);
            return Err(RegistryFull);
        }
        inner.entries.push(ThreadEntry { valid: true, ..entry });
        inner.live += 1;
        Ok(Added::New)
    }

    /// As [`Self::try_add`], growing the table if needed. Not for the hook.
    pub fn add(&self, entry: ThreadEntry) -> Added {
        loop {
            let mut inner = self.lock();
            if inner.entries.len() == inner.entries.capacity() {
                inner.entries.reserve(1);
            }
            drop(inner);
            // The hook may fill the new slot between the two locks.
            if let Ok(added) = self.try_add(entry) {
                return added;
            }
        }
    }

    /// Marks the thread removed if its live entry holds `handle`; false
    /// otherwise. The handle check keeps a late removal (an exit noticed
    /// after the fact) from removing a newer thread that got the same tid,
    /// whose right would then never be released.
    pub fn mark_removed(&self, tid: u64, handle: u64) -> bool {
        let mut inner = self.lock();
        let Some(e) = inner.entries.iter_mut().find(|e| e.tid == tid && e.handle == handle && e.valid) else {
            return false;
        };
        e.valid = false;
        inner.live -= 1;
        true
    }

    pub fn contains(&self, tid: u64) -> bool {
        self.lock().entries.iter().any(|e| e.tid == tid && e.valid)
    }

    /// Copies the live entries into `out` (which keeps its allocation).
    pub fn snapshot(&self, out: &mut Vec<ThreadEntry>) {
        out.clear();
        let inner = self.lock();
        let live = inner.live;
        if out.capacity() < live {
            // Grow outside the lock, then copy.
            drop(inner);
            out.reserve(live + 16);
            return self.snapshot(out);
        }
        out.extend(inner.entries.iter().filter(|e| e.valid).copied());
    }

    /// Drops removed entries; returns how many.
    pub fn compact(&self) -> usize {
        let mut inner = self.lock();
        let before = inner.entries.len();
        inner.entries.retain(|e| e.valid);
        before - inner.entries.len()
    }

    /// Makes room for `spare` more entries; true if an entry was refused
    /// since the last call (threads may be missing: rescan).
    pub fn ensure_headroom(&self, spare: usize) -> bool {
        let mut inner = self.lock();
        let free = inner.entries.capacity() - inner.entries.len();
        if free < spare {
            let grow = spare.max(inner.entries.capacity());
            inner.entries.reserve(grow);
        }
        drop(inner);
        self.overflowed.swap(false, Ordering::Relaxed)
    }

    /// Live threads.
    pub fn len(&self) -> usize {
        self.lock().live
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.lock().entries.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::registry::ThreadName;
    use crate::sampler::walker::StackBounds;
    use std::sync::Arc;

    fn entry(tid: u64) -> ThreadEntry {
        ThreadEntry::new(tid, tid + 100, ThreadName::EMPTY, StackBounds::new(0x1000, 0x2000))
    }

    #[test]
    fn add_remove_revive_compact() {
        let t = ThreadTable::with_capacity(2);
        assert_eq!(t.try_add(entry(1)), Ok(Added::New));
        assert_eq!(t.try_add(entry(2)), Ok(Added::New));
        assert_eq!(t.try_add(entry(2)), Ok(Added::AlreadyTracked), "a live entry is never overwritten");
        assert_eq!(t.try_add(entry(3)), Err(RegistryFull), "never grows in try_add");
        assert!(t.ensure_headroom(4), "the refusal is reported once");
        assert!(!t.ensure_headroom(4));
        assert!(!t.mark_removed(1, 999), "another thread's handle under a reused tid");
        assert!(t.mark_removed(1, 101));
        assert!(!t.mark_removed(1, 101));
        assert!(!t.contains(1) && t.contains(2));
        assert_eq!(t.try_add(entry(1)), Ok(Added::New));
        assert_eq!(t.len(), 2, "revived in place");
        t.mark_removed(2, 102);
        assert_eq!(t.compact(), 1);
        assert_eq!(t.add(entry(9)), Added::New);
        assert_eq!(t.add(entry(9)), Added::AlreadyTracked);
        let mut snap = Vec::new();
        t.snapshot(&mut snap);
        assert_eq!(snap.iter().map(|e| e.tid).collect::<Vec<_>>(), vec![1, 9]);
        assert!(snap.iter().all(|e| e.valid));
        assert!(!t.is_empty());
    }

    #[test]
    fn the_lock_holds_under_contention() {
        let t = Arc::new(ThreadTable::with_capacity(4096));
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let tid = w * 10_000 + i + 1;
                        t.try_add(entry(tid)).unwrap();
                        if i % 2 == 0 {
                            assert!(t.mark_removed(tid, tid + 100));
                        }
                    }
                })
            })
            .collect();
        let mut snap = Vec::new();
        for _ in 0..200 {
            t.snapshot(&mut snap);
            assert!(snap.iter().all(|e| e.valid));
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(t.len(), 1000);
        t.snapshot(&mut snap);
        assert_eq!(snap.len(), 1000);
    }
}
