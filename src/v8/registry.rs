//! Which isolate runs on which thread.
//!
//! Each JS thread (the main thread and every worker) has its own
//! `v8::Isolate`. `Isolate::GetCurrent()` only answers on the thread itself,
//! and the stack sampler needs the answer for the thread it interrupted
//! (Linux: inside that thread's signal handler; macOS: from the sampler
//! thread while the target is suspended). So each JS thread records its
//! isolate here when the addon is loaded in its environment, and removes it
//! in that environment's cleanup hook, which Node runs before it disposes of
//! the isolate.
//!
//! The table is a fixed array of atomics: lookups are lock-free,
//! allocation-free and async-signal-safe, a scan of at most the high-water
//! mark of slots ever used (one per concurrently live JS thread).
//!
//! Publication order: `register` claims a slot by CAS on `tid` (0 → tid),
//! then stores `pthread` and finally `isolate` with Release; `unregister`
//! clears `isolate` first. A reader that finds its key and then a non-null
//! isolate (Acquire) sees a fully registered entry. On Linux the reader is
//! the owning thread itself, so the isolate cannot die during the read; on
//! macOS the owner is suspended while the sampler reads, for the same
//! guarantee.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::api::Isolate;

/// JS threads (isolates) that can be registered at once.
pub const MAX_THREADS: usize = 512;

struct Entry {
    /// OS thread id (Linux tid, macOS `pthread_threadid_np`), 0 when free.
    tid: AtomicU64,
    /// `pthread_self()` of the owner, for the cheap current-thread lookup.
    pthread: AtomicU64,
    isolate: AtomicUsize,
    /// Registrations of this thread (the addon may be loaded more than once
    /// in one environment's lifetime, e.g. from two paths).
    refs: AtomicU32,
    /// A process-unique number for this registration, so code-map entries
    /// can be tied to the isolate that created them even after its address
    /// is reused.
    serial: AtomicU32,
}

static TABLE: [Entry; MAX_THREADS] = [const {
    Entry {
        tid: AtomicU64::new(0),
        pthread: AtomicU64::new(0),
        isolate: AtomicUsize::new(0),
        refs: AtomicU32::new(0),
        serial: AtomicU32::new(0),
    }
}; MAX_THREADS];
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(1);

/// One registered JS thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    pub tid: u64,
    pub isolate: usize,
    pub serial: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// Every slot is taken.
    Full,
    /// A null isolate was given.
    NoIsolate,
}

/// `pthread_self()` as an integer. Async-signal-safe (reads the thread
/// pointer).
#[inline]
pub fn pthread_key() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize as u64 }
}

/// Records `isolate` for the calling thread. Registering the same thread
/// again counts a reference (and updates the isolate).
pub fn register(tid: u64, pthread: u64, isolate: *mut Isolate) -> Result<Registered, SlotError> {
    if isolate.is_null() {
        return Err(SlotError::NoIsolate);
    }
    let isolate = isolate as usize;
    let high = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(high) {
        if e.tid.load(Ordering::Acquire) == tid {
            e.refs.fetch_add(1, Ordering::AcqRel);
            e.isolate.store(isolate, Ordering::Release);
            return Ok(Registered { tid, isolate, serial: e.serial.load(Ordering::Acquire) });
        }
    }
    for (i, e) in TABLE.iter().enumerate() {
        if e.tid.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            let serial = NEXT_SERIAL.fetch_add(1, Ordering::AcqRel);
            e.serial.store(serial, Ordering::Release);
            e.refs.store(1, Ordering::Release);
            e.pthread.store(pthread, Ordering::Release);
            e.isolate.store(isolate, Ordering::Release);
            HIGH_WATER.fetch_max(i + 1, Ordering::AcqRel);
            return Ok(Registered { tid, isolate, serial });
        }
    }
    Err(SlotError::Full)
}

/// Drops one registration of thread `tid`; returns the entry when that was
/// the last one (the thread is no longer a known JS thread).
pub fn unregister(tid: u64) -> Option<Registered> {
    let high = HIGH_WATER.load(Ordering::Acquire);
    let e = TABLE.iter().take(high).find(|e| tid != 0 && e.tid.load(Ordering::Acquire) == tid)?;
    if e.refs.fetch_sub(1, Ordering::AcqRel) > 1 {
        return None;
    }
    let out = Registered { tid, isolate: e.isolate.load(Ordering::Acquire), serial: e.serial.load(Ordering::Acquire) };
    e.isolate.store(0, Ordering::Release);
    e.pthread.store(0, Ordering::Release);
    e.serial.store(0, Ordering::Release);
    e.tid.store(0, Ordering::Release);
    Some(out)
}

/// The isolate registered for the calling thread, by `pthread_self()`.
/// Async-signal-safe.
#[inline]
pub fn isolate_for_pthread(pthread: u64) -> Option<*mut Isolate> {
    let high = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(high) {
        if e.pthread.load(Ordering::Acquire) == pthread {
            let iso = e.isolate.load(Ordering::Acquire);
            return (iso != 0).then_some(iso as *mut Isolate);
        }
    }
    None
}

/// The isolate registered for thread `tid`. Async-signal-safe.
#[inline]
pub fn isolate_for_tid(tid: u64) -> Option<*mut Isolate> {
    if tid == 0 {
        return None;
    }
    let high = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(high) {
        if e.tid.load(Ordering::Acquire) == tid {
            let iso = e.isolate.load(Ordering::Acquire);
            return (iso != 0).then_some(iso as *mut Isolate);
        }
    }
    None
}

/// The registration of thread `tid`, if any.
pub fn lookup_tid(tid: u64) -> Option<Registered> {
    let high = HIGH_WATER.load(Ordering::Acquire);
    let e = TABLE.iter().take(high).find(|e| tid != 0 && e.tid.load(Ordering::Acquire) == tid)?;
    let isolate = e.isolate.load(Ordering::Acquire);
    (isolate != 0).then(|| Registered { tid, isolate, serial: e.serial.load(Ordering::Acquire) })
}

/// Every registered thread (a snapshot).
pub fn all() -> Vec<Registered> {
    let high = HIGH_WATER.load(Ordering::Acquire);
    TABLE
        .iter()
        .take(high)
        .filter_map(|e| {
            let tid = e.tid.load(Ordering::Acquire);
            let isolate = e.isolate.load(Ordering::Acquire);
            (tid != 0 && isolate != 0).then(|| Registered { tid, isolate, serial: e.serial.load(Ordering::Acquire) })
        })
        .collect()
}

/// The serial of the registration that owns `isolate`, if registered.
pub fn serial_of(isolate: *mut Isolate) -> Option<u32> {
    let high = HIGH_WATER.load(Ordering::Acquire);
    TABLE
        .iter()
        .take(high)
        .find(|e| e.isolate.load(Ordering::Acquire) == isolate as usize && !isolate.is_null())
        .map(|e| e.serial.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table is process-wide; tests use tids no real thread has.
    const BASE: u64 = 0x7fff_0000_0000;

    #[test]
    fn register_lookup_unregister() {
        let (tid, pt, iso) = (BASE + 1, BASE + 101, 0x1000usize as *mut Isolate);
        let r = register(tid, pt, iso).unwrap();
        assert_eq!(r.tid, tid);
        assert_eq!(isolate_for_tid(tid), Some(iso));
        assert_eq!(isolate_for_pthread(pt), Some(iso));
        assert_eq!(serial_of(iso), Some(r.serial));
        assert!(all().contains(&r));
        // A second registration of the same thread is counted...
        let again = register(tid, pt, iso).unwrap();
        assert_eq!(again.serial, r.serial);
        assert_eq!(unregister(tid), None, "one reference left");
        assert_eq!(isolate_for_tid(tid), Some(iso));
        // ...and the last one removes the thread.
        assert_eq!(unregister(tid).map(|r| r.isolate), Some(iso as usize));
        assert_eq!(isolate_for_tid(tid), None);
        assert_eq!(isolate_for_pthread(pt), None);
        assert_eq!(unregister(tid), None);
        assert_eq!(isolate_for_tid(0), None);
        assert_eq!(register(tid, pt, std::ptr::null_mut()), Err(SlotError::NoIsolate));
    }

    #[test]
    fn threads_register_concurrently_and_serials_are_unique() {
        let handles: Vec<_> = (0..16u64)
            .map(|i| {
                std::thread::spawn(move || {
                    let tid = BASE + 1000 + i;
                    let iso = (0x10_0000 + i as usize * 0x1000) as *mut Isolate;
                    let r = register(tid, BASE + 2000 + i, iso).unwrap();
                    assert_eq!(isolate_for_tid(tid), Some(iso));
                    r
                })
            })
            .collect();
        let regs: Vec<Registered> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut serials: Vec<u32> = regs.iter().map(|r| r.serial).collect();
        serials.sort_unstable();
        serials.dedup();
        assert_eq!(serials.len(), 16);
        for r in &regs {
            assert!(unregister(r.tid).is_some());
        }
        for r in &regs {
            assert_eq!(isolate_for_tid(r.tid), None);
        }
    }
}
