//! Preallocated capture records: what a signal handler writes while its
//! thread is stopped (registers, a copy of the live stack, frame records
//! above the copy, V8's frames), for the sampler thread to unwind later.
//!
//! Records move between two lock-free lists. A handler pops one from the
//! free list, fills it, and pushes it on the done list; the sampler takes
//! the whole done list at once, processes it and pushes each record back
//! on the free list. Both heads pack a 32-bit index and a 32-bit tag that
//! every successful update changes, so a handler delayed between reading
//! the head and its compare-and-swap cannot pop a record that was reused
//! meanwhile. A record is owned by whoever popped it until they push it:
//! one writer at a time, never allocation or locks. Pools are never freed
//! (a late signal after `stop()` may still use one).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::sampler::unwind::large_frames::MAX_HOLES;
use crate::sampler::unwind::{Hole, TailRecord};

/// Bytes of stack copied per sample, at most.
pub const COPY_BYTES: usize = 48 * 1024;
/// Bytes of each record's stack copy mapped in before use: enough for most
/// stacks (a busy Node thread's live stack is a few KiB).
pub const POPULATED_COPY_BYTES: usize = 16 * 1024;
/// Frame records kept above a copy that was cut: as many as the deepest
/// stack asked for (`maxStackDepth` up to 1024), so a deep stack ends at
/// the depth limit, which says so, not silently at the copy's end.
pub const TAIL_RECORDS: usize = 1024;
/// Bytes of the tail mapped in before use (the rest only for deep stacks).
const POPULATED_TAIL_BYTES: usize = 4096;
/// Frames V8's `GetStackSample` may report.
pub const RUNTIME_FRAMES: usize = 128;

/// The copy was cut at [`COPY_BYTES`]; the stack goes on.
pub const FLAG_TRUNCATED: u32 = 1;
/// The stack was outside the thread's known bounds and was read with
/// `process_vm_readv`.
pub const FLAG_FOREIGN_STACK: u32 = 2;
/// Nothing could be copied.
pub const FLAG_NO_COPY: u32 = 4;
/// The copy ended at the thread's learned stack root (see
/// `signal::ThreadSlot::root`), below the top of its stack.
pub const FLAG_TO_ROOT: u32 = 16;

const NONE: u32 = u32::MAX;

/// One sample's raw material. Fields are written only by the handler that
/// popped the record, and read only by the sampler after it took the record
/// from the done list.
#[repr(C, align(64))]
pub struct Record {
    next: AtomicU32,
    data: UnsafeCell<RecordData>,
}

#[repr(C)]
pub struct RecordData {
    /// Index of the thread's slot, and the generation the signal carried.
    pub slot: u32,
    pub gen: u32,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// Wall mode: when the sampler sent the signal (0 for timer signals).
    pub sent_ns: u64,
    /// Timer expirations this signal stands for, beyond the first.
    pub overrun: u32,
    pub flags: u32,
    pub pc: u64,
    pub sp: u64,
    pub fp: u64,
    pub lr: u64,
    /// The system call return register (rax, x0).
    pub ret: u64,
    /// The thread pointer (`pthread_self`) of the stopped thread.
    pub tcb: u64,
    /// Where `stack[0]` was copied from, and how many words were.
    pub copy_start: u64,
    pub copy_words: u32,
    pub tail_len: u32,
    pub runtime_len: u32,
    pub hole_len: u32,
    /// Ranges of the stack inside the copy that were not copied.
    pub holes: [Hole; MAX_HOLES],
    pub stack: [u64; COPY_BYTES / 8],
    pub tail: [TailRecord; TAIL_RECORDS],
    pub runtime: [u64; RUNTIME_FRAMES],
}

// SAFETY: `data` is accessed only by the record's current owner (see the
// module docs); `next` is atomic.
unsafe impl Sync for Record {}

impl Record {
    /// The record's fields.
    ///
    /// # Safety
    /// The caller must own the record: it popped it from the free list (a
    /// handler) or took it from the done list (the sampler), and has not
    /// pushed it since.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data(&self) -> &mut RecordData {
        // SAFETY: per the contract, the caller is the only one accessing it.
        unsafe { &mut *self.data.get() }
    }
}

/// The records' memory: an anonymous mapping, zero-filled by the kernel
/// and backed lazily, so making a pool writes nothing (a zeroed allocation
/// of this alignment is a memset of the whole pool, 1.8 MB or more, which
/// start() would pay for).
struct Records {
    ptr: std::ptr::NonNull<Record>,
    len: usize,
    layout: std::alloc::Layout,
    mapped: bool,
}

// SAFETY: Records owns its memory like a Box<[Record]>; Record is Sync.
unsafe impl Send for Records {}
// SAFETY: as above; shared access only hands out &[Record].
unsafe impl Sync for Records {}

impl Records {
    /// `n` records; fewer (one) if `n` of them would not fit the address
    /// space, which the pool sizes in use are far from.
    fn new(n: usize) -> Records {
        let (n, layout) = match std::alloc::Layout::array::<Record>(n) {
            Ok(l) => (n, l),
            Err(_) => (1, std::alloc::Layout::new::<Record>()),
        };
        // SAFETY: a fresh private anonymous mapping of the layout's size;
        // the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let (p, mapped) = if p == libc::MAP_FAILED {
            // SAFETY: the layout has a non-zero size (n >= 1).
            (unsafe { std::alloc::alloc_zeroed(layout) } as *mut Record, false)
        } else {
            (p as *mut Record, true)
        };
        let Some(ptr) = std::ptr::NonNull::new(p) else { std::alloc::handle_alloc_error(layout) };
        Records { ptr, len: n, layout, mapped }
    }
}

impl std::ops::Deref for Records {
    type Target = [Record];
    fn deref(&self) -> &[Record] {
        // SAFETY: `len` records, all-zero bytes (valid for Record: atomics
        // and plain integers), owned by self for its lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Records {
    fn drop(&mut self) {
        // SAFETY: the memory was obtained in `new` with this layout, by
        // mmap or by the allocator as `mapped` says, and is not used after.
        unsafe {
            if self.mapped {
                libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.layout.size());
            } else {
                std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout);
            }
        }
    }
}

/// A fixed set of records and the two lists.
pub struct Pool {
    records: Records,
    free: AtomicU64,
    done: AtomicU64,
    /// Records on the done list, for the sampler's wake-up rule.
    pending: AtomicI32,
}

fn pack(tag: u32, index: u32) -> u64 {
    ((tag as u64) << 32) | index as u64
}

fn unpack(head: u64) -> (u32, u32) {
    ((head >> 32) as u32, head as u32)
}

impl Pool {
    /// A pool of `n` records, all free.
    pub fn new(n: usize) -> Box<Pool> {
        let n = n.clamp(1, NONE as usize - 1);
        let records = Records::new(n);
        let n = records.len();
        for (i, r) in records.iter().enumerate() {
            r.next.store(if i + 1 < n { (i + 1) as u32 } else { NONE }, Ordering::Relaxed);
        }
        Box::new(Pool {
            records,
            free: AtomicU64::new(pack(0, 0)),
            done: AtomicU64::new(pack(0, NONE)),
            pending: AtomicI32::new(0),
        })
    }

    /// Maps the pages handlers write on every sample in now (off the
    /// caller's path: the sampler thread calls this), so that they take no
    /// page faults on first use: each record but the parts of its stack
    /// copy and frame-record tail beyond [`POPULATED_COPY_BYTES`] and
    /// [`POPULATED_TAIL_BYTES`], which only deeper stacks reach (and fault
    /// in once). The contents are not touched: records in use
    /// meanwhile are unaffected, so the records a first signal needs can be
    /// mapped in before it and the rest after. Best effort
    /// (MADV_POPULATE_WRITE is Linux 5.14+).
    pub fn populate(&self, records: std::ops::Range<usize>) {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let page = 4096;
        let populate = |lo: usize, hi: usize| {
            let lo = lo & !(page - 1);
            // SAFETY: the range lies inside this pool's own allocation
            // (rounded out to the pages that contain it); the call only
            // faults pages in, without changing their contents.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, MADV_POPULATE_WRITE) };
        };
        let stack_at = std::mem::offset_of!(RecordData, stack);
        let tail_at = std::mem::offset_of!(RecordData, tail);
        let runtime_at = std::mem::offset_of!(RecordData, runtime);
        let records = records.start.min(self.records.len())..records.end.min(self.records.len());
        for r in &self.records[records] {
            let data = r.data.get() as usize;
            populate(r as *const Record as usize, data + stack_at + POPULATED_COPY_BYTES);
            populate(data + tail_at, data + tail_at + POPULATED_TAIL_BYTES);
            populate(data + runtime_at, r as *const Record as usize + std::mem::size_of::<Record>());
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Bytes the records take (reserved; mostly never touched).
    pub fn bytes(&self) -> usize {
        self.records.len.saturating_mul(std::mem::size_of::<Record>())
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn record(&self, index: u32) -> Option<&Record> {
        self.records.get(index as usize)
    }

    fn push(&self, head: &AtomicU64, index: u32) {
        let Some(rec) = self.record(index) else { return };
        let mut cur = head.load(Ordering::Acquire);
        loop {
            let (tag, top) = unpack(cur);
            rec.next.store(top, Ordering::Relaxed);
            match head.compare_exchange_weak(cur, pack(tag.wrapping_add(1), index), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes a free record. Async-signal-safe, lock-free.
    pub fn pop_free(&self) -> Option<u32> {
        let mut cur = self.free.load(Ordering::Acquire);
        loop {
            let (tag, top) = unpack(cur);
            let rec = self.record(top)?;
            let next = rec.next.load(Ordering::Relaxed);
            match self.free.compare_exchange_weak(
                cur,
                pack(tag.wrapping_add(1), next),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(top),
                Err(now) => cur = now,
            }
        }
    }

    /// Publishes a filled record; returns how many are now waiting.
    /// Async-signal-safe, lock-free.
    pub fn push_done(&self, index: u32) -> u32 {
        self.push(&self.done, index);
        (self.pending.fetch_add(1, Ordering::AcqRel) + 1).max(0) as u32
    }

    /// Takes every published record, oldest first, into `out`.
    pub fn take_done(&self, out: &mut Vec<u32>) {
        out.clear();
        let (_, mut top) = unpack(self.done.swap(pack(0, NONE), Ordering::AcqRel));
        while let Some(rec) = self.record(top) {
            out.push(top);
            top = rec.next.load(Ordering::Relaxed);
        }
        // A handler counts its record after pushing it, so the count may
        // dip below zero for a moment.
        self.pending.fetch_sub(out.len() as i32, Ordering::AcqRel);
        out.reverse();
    }

    /// Gives a processed record back.
    pub fn free(&self, index: u32) {
        self.push(&self.free, index);
    }

    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire).max(0) as u32
    }
}

/// The pool handlers use. Replaced only by a larger one between sessions;
/// the old one is leaked on purpose (a late signal may still hold it).
static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// The current pool, if any. Async-signal-safe.
#[inline]
pub fn pool() -> Option<&'static Pool> {
    let p = POOL.load(Ordering::Acquire);
    // SAFETY: a published pool is leaked and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Makes sure a pool of at least `n` records is installed. Outside any
/// session only: the sampler that drains it must not be running.
pub fn ensure_pool(n: usize) -> &'static Pool {
    if let Some(p) = pool() {
        if p.len() >= n {
            return p;
        }
    }
    let fresh: &'static Pool = Box::leak(Pool::new(n));
    POOL.store(fresh as *const Pool as *mut Pool, Ordering::Release);
    fresh
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_cycle_through_the_lists_in_order() {
        let p = Pool::new(3);
        let a = p.pop_free().unwrap();
        let b = p.pop_free().unwrap();
        let c = p.pop_free().unwrap();
        assert!(p.pop_free().is_none(), "all taken");
        assert_eq!(p.push_done(b), 1);
        assert_eq!(p.push_done(a), 2);
        let mut out = Vec::new();
        p.take_done(&mut out);
        assert_eq!(out, vec![b, a], "oldest first");
        assert_eq!(p.pending(), 0);
        p.take_done(&mut out);
        assert!(out.is_empty());
        for i in [a, b, c] {
            p.free(i);
        }
        let mut seen: Vec<u32> = std::iter::from_fn(|| p.pop_free()).collect();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn populating_a_range_maps_in_those_records_only() {
        let resident = |addr: usize| {
            let page = addr & !4095;
            let mut v = 0u8;
            // SAFETY: `page` lies inside the pool's mapping; `v` receives
            // one byte for the one page asked about.
            let rc = unsafe { libc::mincore(page as *mut libc::c_void, 4096, &mut v) };
            assert_eq!(rc, 0);
            v & 1 == 1
        };
        let p = Pool::new(6);
        let stack_page = |i: u32| {
            // SAFETY: only the address is taken; nothing is read.
            let d = unsafe { p.record(i).unwrap().data() };
            d.stack.as_ptr() as usize + 8192
        };
        p.populate(1..3);
        assert!(!resident(stack_page(0)));
        assert!(resident(stack_page(1)) && resident(stack_page(2)));
        assert!(!resident(stack_page(3)));
        p.populate(3..100);
        assert!((3..6).all(|i| resident(stack_page(i))));
        assert!(!resident(stack_page(0)));
    }

    #[test]
    fn concurrent_pops_and_pushes_lose_nothing() {
        let p: &'static Pool = Box::leak(Pool::new(64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut n = 0;
                    for _ in 0..20_000 {
                        if let Some(i) = p.pop_free() {
                            // SAFETY: popped, so owned.
                            unsafe { p.record(i).unwrap().data().pc = i as u64 };
                            p.push_done(i);
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        let mut taken = 0;
        let mut out = Vec::new();
        while threads.iter().any(|t| !t.is_finished()) || p.pending() > 0 {
            p.take_done(&mut out);
            for &i in &out {
                // SAFETY: taken from the done list, so owned.
                assert_eq!(unsafe { p.record(i).unwrap().data().pc }, i as u64);
                p.free(i);
            }
            taken += out.len();
        }
        let pushed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        p.take_done(&mut out);
        taken += out.len();
        assert_eq!(taken, pushed);
        let free: Vec<u32> = std::iter::from_fn(|| p.pop_free()).collect();
        assert_eq!(free.len() + out.len(), 64, "every record is back");
    }
}
