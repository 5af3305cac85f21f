//! The set of threads the sampler knows about.
//!
//! Writers are the platform's thread discovery: the sampler thread's
//! `/proc/self/task` rescans on Linux, and the pthread introspection hook on
//! macOS, which runs inside libpthread on the thread being created or
//! destroyed. The hook must not allocate without bound, so `try_add` never
//! grows the vector: the sampler thread keeps spare capacity with
//! `ensure_headroom`, outside the hook. Readers take a `snapshot`, a memcpy
//! under the lock, so writers are never blocked for long.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustc_hash::FxHashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::walker::StackBounds;

/// Longest thread name kept (macOS allows 64 bytes; Linux 16).
pub const THREAD_NAME_MAX: usize = 64;

/// A thread name stored inline, so entries can be copied without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ThreadName {
    bytes: [u8; THREAD_NAME_MAX],
    len: u8,
}

impl ThreadName {
    pub const EMPTY: ThreadName = ThreadName { bytes: [0; THREAD_NAME_MAX], len: 0 };

    /// Copies up to `THREAD_NAME_MAX` bytes, cutting at a NUL or a newline.
    pub fn from_bytes(src: &[u8]) -> Self {
        let mut name = ThreadName::EMPTY;
        let mut len = 0;
        for (dst, &b) in name.bytes.iter_mut().zip(src) {
            if b == 0 || b == b'\n' {
                break;
            }
            *dst = b;
            len += 1;
        }
        // A process title cut to the OS's length may end in spaces
        // (`npm exec mocha `): they are no part of the name.
        while len > 0 && name.bytes[len - 1] == b' ' {
            len -= 1;
        }
        name.len = len as u8;
        name
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl std::fmt::Debug for ThreadName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

/// One thread. `tid` is the OS thread id users see (Linux tid, macOS
/// `pthread_threadid_np`); `handle` is what the backend needs to reach it
/// (the tid again on Linux, the Mach thread port on macOS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadEntry {
    pub tid: u64,
    pub handle: u64,
    pub name: ThreadName,
    pub stack: StackBounds,
    pub valid: bool,
    /// The process's main thread (Node's JS thread, or Electron's browser
    /// main thread).
    pub is_main: bool,
}

impl ThreadEntry {
    pub fn new(tid: u64, handle: u64, name: ThreadName, stack: StackBounds) -> Self {
        ThreadEntry { tid, handle, name, stack, valid: true, is_main: false }
    }
}

/// `try_add` found no spare capacity; the entry was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryFull;

#[derive(Default)]
struct Inner {
    entries: Vec<ThreadEntry>,
    live: usize,
}

#[derive(Default)]
pub struct ThreadRegistry {
    inner: Mutex<Inner>,
    /// Set when `try_add` had to refuse an entry, so the owner knows to
    /// rediscover threads once it has grown the registry.
    overflowed: AtomicBool,
    /// Changes whenever an entry is added, removed or renamed, so a reader
    /// can skip a snapshot that would be the same as its last.
    generation: AtomicU64,
}

impl ThreadRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        let reg = Self::default();
        reg.lock().entries.reserve_exact(capacity);
        reg
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave `Inner` inconsistent
        // (every update is a single push or field store), so keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a thread, or revives it if the tid is already known. Never
    /// allocates: fails with `RegistryFull` when there is no spare capacity.
    pub fn try_add(&self, entry: ThreadEntry) -> Result<(), RegistryFull> {
        let mut inner = self.lock();
        self.generation.fetch_add(1, Ordering::Relaxed);
        if let Some(existing) = inner.entries.iter_mut().find(|e| e.tid == entry.tid) {
            let was_valid = existing.valid;
            *existing = entry;
            existing.valid = true;
            if !was_valid {
                inner.live += 1;
            }
            return Ok(());
        }
        if inner.entries.len() == inner.entries.capacity() {
            self.overflowed.store(true, Ordering::Relaxed);
            return Err(RegistryFull);
        }
        inner.entries.push(entry);
        inner.live += 1;
        Ok(())
    }

    /// Adds a thread, growing the registry if needed. Not for use in hooks.
    pub fn add(&self, entry: ThreadEntry) {
        self.ensure_headroom(1);
        // Cannot fail: we just made room, and only this call site grows.
        let _ = self.try_add(entry);
    }

    /// Marks the thread removed. Its slot is reclaimed by `compact`.
    pub fn mark_removed(&self, tid: u64) -> bool {
        let mut inner = self.lock();
        self.generation.fetch_add(1, Ordering::Relaxed);
        let mut removed = false;
        if let Some(e) = inner.entries.iter_mut().find(|e| e.tid == tid && e.valid) {
            e.valid = false;
            removed = true;
        }
        if removed {
            inner.live -= 1;
        }
        removed
    }

    /// Marks removed every live thread for which `keep` is false.
    pub fn remove_missing(&self, keep: impl Fn(u64) -> bool) {
        let mut inner = self.lock();
        let mut removed = 0;
        for e in inner.entries.iter_mut().filter(|e| e.valid && !keep(e.tid)) {
            e.valid = false;
            removed += 1;
        }
        inner.live -= removed;
        if removed > 0 {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Updates the name and stack bounds of a known thread.
    pub fn update(&self, tid: u64, name: Option<ThreadName>, stack: Option<StackBounds>) {
        let mut inner = self.lock();
        self.generation.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = inner.entries.iter_mut().find(|e| e.tid == tid) {
            if let Some(n) = name {
                e.name = n;
            }
            if let Some(s) = stack {
                e.stack = s;
            }
        }
    }

    /// Adds or revives many threads at once, growing the registry as
    /// needed: linear in their number, not quadratic. Not for use in hooks.
    pub fn add_all(&self, entries: &[ThreadEntry]) {
        if entries.is_empty() {
            return;
        }
        let mut inner = self.lock();
        self.generation.fetch_add(1, Ordering::Relaxed);
        let mut index: FxHashMap<u64, usize> = inner.entries.iter().enumerate().map(|(i, e)| (e.tid, i)).collect();
        inner.entries.reserve(entries.len());
        for &entry in entries {
            match index.get(&entry.tid) {
                Some(&i) => {
                    let was_valid = inner.entries[i].valid;
                    inner.entries[i] = ThreadEntry { valid: true, ..entry };
                    if !was_valid {
                        inner.live += 1;
                    }
                }
                None => {
                    index.insert(entry.tid, inner.entries.len());
                    inner.entries.push(ThreadEntry { valid: true, ..entry });
                    inner.live += 1;
                }
            }
        }
    }

    /// Renames many threads at once (linear in their number).
    pub fn rename_all(&self, names: &[(u64, ThreadName)]) {
        if names.is_empty() {
            return;
        }
        let by_tid: FxHashMap<u64, ThreadName> = names.iter().copied().collect();
        let mut inner = self.lock();
        let mut changed = false;
        for e in inner.entries.iter_mut() {
            if let Some(n) = by_tid.get(&e.tid) {
                if e.name != *n {
                    e.name = *n;
                    changed = true;
                }
            }
        }
        if changed {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A number that changes whenever the entries do.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Copies the live entries into `out` (which keeps its allocation
    /// between calls, so steady-state snapshots do not allocate).
    pub fn snapshot(&self, out: &mut Vec<ThreadEntry>) {
        out.clear();
        let inner = self.lock();
        out.extend(inner.entries.iter().filter(|e| e.valid).copied());
    }

    /// Drops removed entries. Returns how many were dropped.
    pub fn compact(&self) -> usize {
        let mut inner = self.lock();
        let before = inner.entries.len();
        inner.entries.retain(|e| e.valid);
        before - inner.entries.len()
    }

    /// Makes sure at least `spare` more entries fit without allocating.
    /// Returns true if a refused `try_add` happened since the last call,
    /// meaning threads may be missing and should be rediscovered.
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

    /// Number of live threads.
    pub fn len(&self) -> usize {
        self.lock().live
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, tid: u64) -> bool {
        self.lock().entries.iter().any(|e| e.tid == tid && e.valid)
    }

    /// Total slots, live or removed; for tests and diagnostics.
    pub fn slots(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn capacity(&self) -> usize {
        self.lock().entries.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tid: u64) -> ThreadEntry {
        ThreadEntry::new(tid, tid, ThreadName::from_bytes(b"t"), StackBounds::new(0x1000, 0x2000))
    }

    #[test]
    fn add_remove_compact() {
        let reg = ThreadRegistry::new();
        reg.add(entry(1));
        reg.add(entry(2));
        reg.add(entry(3));
        assert_eq!(reg.len(), 3);
        assert!(reg.mark_removed(2));
        assert!(!reg.mark_removed(2), "second removal is a no-op");
        assert!(!reg.mark_removed(99));
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.slots(), 3, "removal only marks");
        let mut snap = Vec::new();
        reg.snapshot(&mut snap);
        assert_eq!(snap.iter().map(|e| e.tid).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(reg.compact(), 1);
        assert_eq!(reg.slots(), 2);
        assert_eq!(reg.len(), 2);
    }

    #[test]
    fn remove_missing_keeps_only_listed() {
        let reg = ThreadRegistry::new();
        for t in 1..=5 {
            reg.add(entry(t));
        }
        reg.remove_missing(|t| t % 2 == 1);
        assert_eq!(reg.len(), 3);
        assert!(reg.contains(1) && !reg.contains(2));
    }

    #[test]
    fn re_adding_a_tid_revives_it_once() {
        let reg = ThreadRegistry::new();
        reg.add(entry(7));
        reg.add(entry(7));
        assert_eq!(reg.len(), 1);
        reg.mark_removed(7);
        reg.add(entry(7));
        assert_eq!(reg.len(), 1);
        assert_eq!(reg.slots(), 1);
    }

    #[test]
    fn batches_add_revive_and_rename() {
        let reg = ThreadRegistry::new();
        reg.add(entry(1));
        reg.mark_removed(1);
        let g = reg.generation();
        reg.add_all(&(1..=5).map(entry).collect::<Vec<_>>());
        assert!(reg.generation() > g);
        assert_eq!((reg.len(), reg.slots()), (5, 5), "1 revived, not added twice");
        reg.add_all(&[entry(3)]);
        assert_eq!(reg.len(), 5);
        let g = reg.generation();
        reg.rename_all(&[(2, ThreadName::from_bytes(b"two")), (99, ThreadName::from_bytes(b"none"))]);
        assert!(reg.generation() > g);
        let mut snap = Vec::new();
        reg.snapshot(&mut snap);
        assert_eq!(snap.iter().find(|e| e.tid == 2).unwrap().name.as_bytes(), b"two");
        let g = reg.generation();
        reg.rename_all(&[(2, ThreadName::from_bytes(b"two"))]);
        assert_eq!(reg.generation(), g, "no change, no new generation");
    }

    #[test]
    fn try_add_never_grows_and_reports_overflow() {
        let reg = ThreadRegistry::with_capacity(2);
        let cap = reg.capacity();
        for tid in 0..cap as u64 {
            reg.try_add(entry(tid)).unwrap();
        }
        assert_eq!(reg.try_add(entry(1000)), Err(RegistryFull));
        assert_eq!(reg.capacity(), cap, "try_add must not allocate");
        assert!(reg.ensure_headroom(8), "overflow is reported once");
        assert!(!reg.ensure_headroom(8));
        assert!(reg.capacity() >= cap + 8);
        reg.try_add(entry(1000)).unwrap();
    }

    #[test]
    fn snapshot_does_not_allocate_in_steady_state() {
        let reg = ThreadRegistry::new();
        for t in 0..10 {
            reg.add(entry(t));
        }
        let mut snap = Vec::with_capacity(16);
        let ptr = snap.as_ptr();
        for _ in 0..100 {
            reg.snapshot(&mut snap);
        }
        assert_eq!(snap.len(), 10);
        assert_eq!(ptr, snap.as_ptr());
    }

    #[test]
    fn update_changes_name_and_bounds() {
        let reg = ThreadRegistry::new();
        reg.add(entry(4));
        reg.update(4, Some(ThreadName::from_bytes(b"worker\n")), Some(StackBounds::new(1, 2)));
        let mut snap = Vec::new();
        reg.snapshot(&mut snap);
        assert_eq!(snap[0].name.as_bytes(), b"worker");
        assert_eq!(snap[0].stack, StackBounds::new(1, 2));
    }

    #[test]
    fn names_are_truncated_not_overflowed() {
        let long = [b'x'; 200];
        assert_eq!(ThreadName::from_bytes(&long).as_bytes().len(), THREAD_NAME_MAX);
        assert_eq!(ThreadName::from_bytes(b"npm exec mocha \n").as_bytes(), b"npm exec mocha");
        assert_eq!(ThreadName::from_bytes(b"   ").as_bytes(), b"");
    }

    #[test]
    fn concurrent_writers_and_readers() {
        use std::sync::Arc;
        let reg = Arc::new(ThreadRegistry::with_capacity(4096));
        let writers: Vec<_> = (0..4u64)
            .map(|w| {
                let reg = reg.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let tid = w * 10_000 + i;
                        reg.try_add(entry(tid)).unwrap();
                        if i % 2 == 0 {
                            reg.mark_removed(tid);
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let reg = reg.clone();
            std::thread::spawn(move || {
                let mut snap = Vec::new();
                for _ in 0..200 {
                    reg.snapshot(&mut snap);
                    assert!(snap.iter().all(|e| e.valid));
                }
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        reader.join().unwrap();
        assert_eq!(reg.len(), 4 * 250);
        reg.compact();
        assert_eq!(reg.slots(), 1000);
    }
}
