//! The sampling signal and its handler.
//!
//! A signal reaches a thread either from its CPU-time timer (CPU mode) or
//! from the sampler thread (wall mode). Its value names the thread's
//! [`ThreadSlot`] and the slot's generation; a signal whose slot was
//! released or reused meanwhile, or that was not sent by us, does nothing.
//!
//! The handler, on the stopped thread, takes a free [`capture::Record`],
//! writes the registers and a copy of the live stack into it, and
//! publishes it; the sampler unwinds it later. Stack reads cannot fault:
//! - when the stack pointer lies inside the thread's own stack as last
//!   validated (bounds whose top is the thread's control block, and the
//!   thread pointer is still that control block), `[sp, top)` is the live
//!   part of the stack the thread runs on, and is copied with `memcpy`;
//! - otherwise (a fiber, a WebAssembly stack, an alternate signal stack, a
//!   stack not validated yet) it is read with `process_vm_readv` on our own
//!   process, which stops at the first unreadable page instead of faulting,
//!   and the sampler validates bounds for the next sample.
//!
//! The handler reads no code: code pages may deny it reads (protection
//! keys, execute-only mappings). V8's `GetStackSample` does read code
//! objects, and runs with read access to every protection key
//! (`super::pkeys`).
//!
//! Everything here is async-signal-safe: atomics, `clock_gettime` (vDSO),
//! `pthread_self`, `memcpy`, `process_vm_readv`, `futex`, and V8's
//! `GetStackSample` (see `crate::v8::sample`). The library is linked with
//! `-z now`, so no call goes through the lazy binder, and a
//! [`StoppedWindow`] lets the allocation check see any allocation.
//!
//! The signal is `SIGURG` when nobody else handles it: its default action
//! is to ignore, so a signal still queued when the process `execve`s, or
//! delivered after our handler is gone, cannot kill anything. Otherwise a
//! free real-time signal. Never `SIGPROF`, which V8's profiler uses.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use super::capture::{self, Record, RecordData, COPY_BYTES, FLAG_FOREIGN_STACK, FLAG_NO_COPY};
use super::capture::{FLAG_TO_ROOT, FLAG_TRUNCATED, RUNTIME_FRAMES};
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::stopped_window::StoppedWindow;
use crate::sampler::unwind::{copy_end_at_root, frame_records_above, large_frames};
use crate::sampler::walker::Registers;

const CHUNK_SLOTS: usize = 64;
const MAX_CHUNKS: usize = 512;
/// Threads that can be sampled at once.
pub const MAX_SLOTS: usize = CHUNK_SLOTS * MAX_CHUNKS;

/// Bytes below the stack pointer that leaf code may use without moving it
/// (the x86_64 red zone); copied too.
#[cfg(target_arch = "x86_64")]
const RED_ZONE: u64 = 128;
#[cfg(not(target_arch = "x86_64"))]
const RED_ZONE: u64 = 0;

/// One thread's registration with the handler. Cache-line aligned so
/// handlers on different CPUs do not share lines.
#[repr(C, align(64))]
pub struct ThreadSlot {
    /// The tid this slot belongs to, 0 when free.
    owner: AtomicU64,
    /// Bumped when the slot is released; signals carry the value they were
    /// sent with, and a mismatch means "not for this registration".
    gen: AtomicU32,
    /// Captures are wanted (cleared at stop).
    active: AtomicBool,
    /// A signal sent by hand (a wall-mode or requested sample) is on its
    /// way.
    pending: AtomicBool,
    /// Copies of this thread skip no holes: one that did failed to unwind.
    dense: AtomicBool,
    /// Validated stack bounds: `[lo, hi)` is the thread's own stack, `hi`
    /// its control block (`tcb`). Zero while unknown.
    lo: AtomicU64,
    hi: AtomicU64,
    tcb: AtomicU64,
    /// When the pending signal was sent.
    sent_ns: AtomicU64,
    /// Where the thread's first frames end, learned from a complete unwind:
    /// its outermost frame record `r` (see [`outermost_record`]) and how
    /// many bytes above `r` unwinding to the root reads, packed as
    /// `r << 16 | extent`; 0 while unknown. What lies between that and the
    /// top of the stack (the thread's control block; for the main thread,
    /// its environment and auxiliary vector) holds no frames, so a sample
    /// whose chain reaches `r` copies only up to `r + extent`.
    root: AtomicU64,
    /// The root record's words when it was learned (see
    /// [`record_fingerprint`](crate::sampler::unwind::record_fingerprint)).
    root_fingerprint: AtomicU32,
    /// Intervals the CPU timer's signals for this slot have carried (one
    /// plus the overrun each), wrapping: with the timer's first expiry it
    /// gives the next one (see `timers::CpuTimer::fire_if_starved`).
    timer_intervals: AtomicU32,
}
// One cache line: the handler touches a slot's fields together.
const _: () = assert!(std::mem::size_of::<ThreadSlot>() == 64);

/// What the sampler knows about a slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    pub lo: u64,
    pub hi: u64,
    pub tcb: u64,
}

impl ThreadSlot {
    pub fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }

    pub fn gen(&self) -> u32 {
        self.gen.load(Ordering::Acquire)
    }

    /// The value a signal for this slot carries.
    pub fn value(&self, index: u32) -> u64 {
        ((index as u64) << 32) | self.gen() as u64
    }

    pub fn set_active(&self, on: bool) {
        self.active.store(on, Ordering::Release);
    }

    pub fn set_bounds(&self, b: Bounds) {
        // The handler reads the three separately; a torn read can only make
        // the bounds check fail (then the slow, safe path is taken), never
        // pass wrongly: lo and hi are both written before tcb is.
        self.tcb.store(0, Ordering::Release);
        self.root.store(0, Ordering::Release);
        self.dense.store(false, Ordering::Release);
        self.lo.store(b.lo, Ordering::Release);
        self.hi.store(b.hi, Ordering::Release);
        self.tcb.store(b.tcb, Ordering::Release);
    }

    pub fn bounds(&self) -> Bounds {
        Bounds {
            lo: self.lo.load(Ordering::Acquire),
            hi: self.hi.load(Ordering::Acquire),
            tcb: self.tcb.load(Ordering::Acquire),
        }
    }

    /// Records where this thread's stack root is: its outermost frame
    /// record, and the bytes above it that unwinding to the root reads.
    /// Ignored when they cannot be packed.
    /// `fingerprint` is of the record's words (see [`record_fingerprint`](crate::sampler::unwind::record_fingerprint)).
    pub fn learn_root(&self, record: u64, extent: u64, fingerprint: u32) {
        if record != 0 && record >> 48 == 0 && (1..=0xffff).contains(&extent) {
            // Fingerprint first: a handler that sees the new root with the
            // old fingerprint only takes the slower way.
            self.root_fingerprint.store(fingerprint, Ordering::Release);
            self.root.store(record << 16 | extent, Ordering::Release);
        }
    }

    /// Whether a root has been learned since the bounds were last set.
    pub fn knows_root(&self) -> bool {
        self.root.load(Ordering::Acquire) != 0
    }

    /// Copies of this thread skip nothing from now on (until its bounds
    /// are set again).
    pub fn copy_densely(&self) {
        self.dense.store(true, Ordering::Release);
    }

    /// Forgets the learned root: the next sample copies the whole stack.
    pub fn forget_root(&self) {
        self.root.store(0, Ordering::Release);
    }

    /// Intervals carried by this slot's timer signals so far (wrapping).
    pub fn timer_intervals(&self) -> u32 {
        self.timer_intervals.load(Ordering::Acquire)
    }

    /// Marks a signal as sent; false if one is still pending.
    pub fn begin_send(&self, now_ns: u64) -> bool {
        if self.pending.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.sent_ns.store(now_ns, Ordering::Release);
        true
    }

    /// Withdraws a send that failed.
    pub fn cancel_send(&self) {
        self.pending.store(false, Ordering::Release);
    }

    /// A signal sent with [`begin_send`](Self::begin_send) has not been
    /// taken yet.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Gives the slot up. Any signal still on its way carries the old
    /// generation and will be ignored.
    pub fn release(&self) {
        self.active.store(false, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
        self.pending.store(false, Ordering::Release);
        self.set_bounds(Bounds::default());
        self.owner.store(0, Ordering::Release);
    }
}

struct Chunk {
    slots: [ThreadSlot; CHUNK_SLOTS],
}

static CHUNKS: [AtomicPtr<Chunk>; MAX_CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS];

/// The slot with this index, if its chunk exists. Async-signal-safe.
#[inline]
pub fn slot(index: u32) -> Option<&'static ThreadSlot> {
    let index = index as usize;
    let chunk = CHUNKS.get(index / CHUNK_SLOTS)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: published chunks come from `Box::leak` and are never freed.
    let chunk: &'static Chunk = unsafe { &*chunk };
    chunk.slots.get(index % CHUNK_SLOTS)
}

/// Where the last free slot was found: the search for the next starts
/// there, so giving slots to many threads is linear, not quadratic.
static HINT: AtomicU32 = AtomicU32::new(0);

/// Gives a free slot to `tid`, allocating a chunk if all are taken.
/// Sampler thread only.
pub fn acquire(tid: u64) -> Option<u32> {
    let hint = HINT.load(Ordering::Relaxed) as usize / CHUNK_SLOTS;
    let order = (hint..MAX_CHUNKS).chain(0..hint);
    for c in order {
        let cell = &CHUNKS[c];
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            // SAFETY: every ThreadSlot field is an atomic, valid when zero.
            let fresh = Box::into_raw(unsafe { Box::<Chunk>::new_zeroed().assume_init() });
            match cell.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => chunk = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` was never published; we still own it.
                    drop(unsafe { Box::from_raw(fresh) });
                    chunk = existing;
                }
            }
        }
        // SAFETY: as in `slot`.
        let chunk: &'static Chunk = unsafe { &*chunk };
        for (i, s) in chunk.slots.iter().enumerate() {
            if s.owner.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let index = (c * CHUNK_SLOTS + i) as u32;
                HINT.store(index, Ordering::Relaxed);
                return Some(index);
            }
        }
    }
    None
}

/// Every owned slot, for reclaiming after a session.
pub fn owned_slots() -> Vec<(u32, &'static ThreadSlot)> {
    let mut out = Vec::new();
    for i in 0..MAX_SLOTS as u32 {
        let Some(s) = slot(i) else { break };
        if s.owner() != 0 {
            out.push((i, s));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The handler.

/// The signal we own, 0 until installed.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Our pid, for the sender check and `process_vm_readv`.
static PID: AtomicI32 = AtomicI32::new(0);
/// Whether handlers ask V8 for the thread's JavaScript frames.
static JS_FRAMES: AtomicBool = AtomicBool::new(false);
/// Whether `process_vm_readv` works here (a seccomp filter may forbid it).
static VM_READV: AtomicBool = AtomicBool::new(false);
/// Wake the sampler (futex) once this many records wait.
static WAKE_AT: AtomicU32 = AtomicU32::new(u32::MAX);
/// The futex word the sampler sleeps on.
pub static WAKE: AtomicU32 = AtomicU32::new(0);
/// Handler invocations that found no free record.
pub static LOST: AtomicU64 = AtomicU64::new(0);

static INSTALL: Mutex<()> = Mutex::new(());

/// Turns V8 JavaScript frame capture in the handler on or off.
pub fn set_js_frames(on: bool) {
    JS_FRAMES.store(on, Ordering::Release);
}

/// Whether JavaScript frames are wanted (see [`set_js_frames`]).
pub fn js_frames() -> bool {
    JS_FRAMES.load(Ordering::Acquire)
}

/// Sets how many waiting records wake the sampler early.
pub fn set_wake_threshold(n: u32) {
    WAKE_AT.store(n.max(1), Ordering::Release);
}

#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is
    // async-signal-safe and served by the vDSO for CLOCK_MONOTONIC.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The registers a capture needs, and the system call return register
/// (rax, x0: whether the thread was stopped in a system call is decided
/// later from it, see `syscall_stop`), from the kernel's `ucontext_t`. No
/// memory but the context is read: code pages may be unreadable here.
///
/// # Safety
/// `uc` must point to the `ucontext_t` the kernel passed to an SA_SIGINFO
/// handler.
#[inline]
unsafe fn registers(uc: *const libc::ucontext_t) -> (Registers, u64) {
    // SAFETY: per the function contract `uc` is valid for reads.
    let mc = unsafe { &(*uc).uc_mcontext };
    #[cfg(target_arch = "x86_64")]
    {
        let regs = Registers {
            pc: mc.gregs[libc::REG_RIP as usize] as u64,
            sp: mc.gregs[libc::REG_RSP as usize] as u64,
            fp: mc.gregs[libc::REG_RBP as usize] as u64,
            lr: 0,
        };
        (regs, mc.gregs[libc::REG_RAX as usize] as u64)
    }
    #[cfg(target_arch = "aarch64")]
    {
        (Registers { pc: mc.pc, sp: mc.sp, fp: mc.regs[29], lr: mc.regs[30] }, mc.regs[0])
    }
}

/// The `si_value` of a queued or timer signal (offset 24 in both layouts),
/// and a timer's overrun count (offset 20).
///
/// # Safety
/// `info` must be the kernel's siginfo for this signal.
#[inline]
unsafe fn siginfo_fields(info: *const libc::siginfo_t) -> (i32, i32, u64, u32) {
    let base = info as *const u8;
    // SAFETY: siginfo_t is 128 bytes; these are its si_code, si_pid (or
    // timer id), overrun and value fields, at fixed offsets on Linux LP64.
    unsafe {
        let code = (*info).si_code;
        let pid = (base.add(16) as *const i32).read();
        let overrun = (base.add(20) as *const i32).read();
        let value = (base.add(24) as *const u64).read();
        (code, pid, value, overrun.max(0) as u32)
    }
}

extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns the calling thread's errno slot;
    // restoring it keeps the interrupted code's view of errno intact.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    if !info.is_null() && !uc.is_null() {
        // SAFETY: the kernel passes valid `info` and `uc` to SA_SIGINFO handlers.
        unsafe { handle(info, uc as *const libc::ucontext_t) };
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// # Safety
/// Called only from `on_signal` with the kernel's arguments.
#[inline(always)]
unsafe fn handle(info: *const libc::siginfo_t, uc: *const libc::ucontext_t) {
    let enter_ns = monotonic_ns();
    // SAFETY: the kernel's siginfo.
    let (code, pid, value, overrun) = unsafe { siginfo_fields(info) };
    let ours = code == libc::SI_TIMER || (code == libc::SI_QUEUE && pid == PID.load(Ordering::Relaxed));
    if !ours {
        return;
    }
    let (index, gen) = ((value >> 32) as u32, value as u32);
    let Some(slot) = slot(index) else { return };
    if slot.gen.load(Ordering::Acquire) != gen {
        return;
    }
    if code == libc::SI_TIMER {
        // The kernel re-armed the timer as it delivered this signal,
        // whether or not a capture is wanted.
        slot.timer_intervals.fetch_add(overrun.saturating_add(1), Ordering::Release);
    }
    let sent_ns = slot.sent_ns.load(Ordering::Relaxed);
    // Only signals sent by hand set `pending`. A store regardless would
    // take the slot's cache line from the CPU that last read it on every
    // timer signal.
    if slot.pending.load(Ordering::Relaxed) {
        slot.pending.store(false, Ordering::Release);
    }
    if !slot.active.load(Ordering::Acquire) {
        return;
    }
    let Some(pool) = capture::pool() else { return };
    let Some(at) = pool.pop_free() else {
        LOST.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some(record) = pool.record(at) else { return };
    let window = StoppedWindow::enter();
    window.fault_injection_point();
    // SAFETY: this handler popped the record from the free list: it is the
    // record's only user until it pushes it on the done list.
    let d = unsafe { record.data() };
    // SAFETY: the kernel's ucontext for this signal.
    let (regs, ret) = unsafe { registers(uc) };
    // SAFETY: pthread_self only reads the thread pointer.
    let tcb = unsafe { libc::pthread_self() } as u64;
    d.slot = index;
    d.gen = gen;
    d.enter_ns = enter_ns;
    d.overrun = if code == libc::SI_TIMER { overrun } else { 0 };
    d.pc = regs.pc;
    d.sp = regs.sp;
    d.fp = regs.fp;
    d.lr = regs.lr;
    d.tcb = tcb;
    d.ret = ret;
    d.flags = 0;
    d.tail_len = 0;
    d.runtime_len = 0;
    let own_stack = copy_stack(slot, &regs, tcb, d);
    // V8's code below reads V8's objects, which may carry a protection key.
    let keys = super::pkeys::ReadAllKeys::enter();
    // A thread running V8 code that is not registered yet has its isolate
    // registered from here (see `crate::v8::discover`).
    let js_thread = JS_FRAMES.load(Ordering::Acquire) && crate::v8::registered_or_discover(regs.pc);
    if own_stack && js_thread {
        // V8's own sampler on the same registers, until the frame layout
        // has been learned from it (see `crate::v8::slots`). Only on the
        // thread's own stack, which V8 knows the bounds of.
        if crate::v8::slots::learned().is_none() {
            d.runtime_len = crate::v8::sample_js(&regs, &mut d.runtime[..RUNTIME_FRAMES]).count as u32;
        }
    }
    drop(keys);
    drop(window);
    d.sent_ns = if code == libc::SI_QUEUE { sent_ns } else { 0 };
    d.exit_ns = monotonic_ns();
    let waiting = pool.push_done(at);
    if waiting == WAKE_AT.load(Ordering::Relaxed) {
        wake_sampler();
    }
}

/// Copies the live stack into `d`. Returns true when it was the thread's
/// own, validated stack (copied directly), false otherwise.
///
/// On the thread's own stack, a short stack below the thread's learned
/// root whose root record is unchanged is copied whole up to it
/// ([`copy_end_at_root`]). Otherwise the frame-pointer chain is followed
/// first (a few dozen loads): it shows where the copy can end (at the thread's
/// learned root, see [`ThreadSlot::learn_root`]) and which large frames it
/// can skip the middle of: those whose call site a complete unwind showed
/// to hold only the caller's locals ([`large_frames`]; libuv's poll loop
/// keeps a 12 KiB event array there). A hole the unwinder turns out to
/// need ends that stack as a truncated copy, and the thread's copies skip
/// nothing afterwards.
#[inline(always)]
fn copy_stack(slot: &ThreadSlot, regs: &Registers, tcb: u64, d: &mut RecordData) -> bool {
    let (lo, hi, known_tcb) =
        (slot.lo.load(Ordering::Acquire), slot.hi.load(Ordering::Acquire), slot.tcb.load(Ordering::Acquire));
    let start = regs.sp.saturating_sub(RED_ZONE) & !7;
    let own = known_tcb != 0 && known_tcb == tcb && lo <= start && regs.sp < hi;
    d.hole_len = 0;
    if own {
        let mut end = hi.min(start.saturating_add(COPY_BYTES as u64));
        let root = slot.root.load(Ordering::Acquire);
        // See `ThreadSlot::root`; a zero record is none.
        let (record, extent) = (root >> 16, root & 0xffff);
        let read = |a: u64| {
            // SAFETY: `copy_end_at_root`, `plan_copy` and
            // `frame_records_above` read only aligned words inside
            // [start, hi), this thread's own stack (see below).
            unsafe { (a as *const u64).read_volatile() }
        };
        d.copy_start = start;
        if let Some(root_end) =
            copy_end_at_root(start, end, (record, extent), slot.root_fingerprint.load(Ordering::Acquire), read)
        {
            // SAFETY: [start, root_end) lies inside [start, end), part of
            // this thread's own stack [lo, hi) (mapped and readable, as for
            // the copy below); no holes; the record this handler owns holds
            // `COPY_BYTES`, at least `end - start`.
            let words = unsafe { large_frames::copy_around(start, root_end, &[], d.stack.as_mut_ptr()) };
            d.copy_words = words as u32;
            d.flags |= FLAG_TO_ROOT;
            return true;
        }
        let dense = slot.dense.load(Ordering::Acquire);
        let (outermost, holes) = large_frames::plan_copy(regs.fp, start, end, dense, read, &mut d.holes);
        if record != 0 && outermost == Some(record) && record + extent < end {
            end = record + extent;
            d.flags |= FLAG_TO_ROOT;
        }
        // SAFETY: [start, end) lies inside [lo, hi), the stack this very
        // thread is running on (its control block is still `tcb`, at the
        // top of that stack block), so every byte is mapped and readable;
        // the holes lie below the outermost record, inside [start, end);
        // the destination is the record this handler owns, whose buffer
        // holds `COPY_BYTES`, at least `end - start`.
        let words = unsafe { large_frames::copy_around(start, end, &d.holes[..holes], d.stack.as_mut_ptr()) };
        d.hole_len = holes as u32;
        d.copy_words = words as u32;
        if end < hi && d.flags & FLAG_TO_ROOT == 0 {
            d.flags |= FLAG_TRUNCATED;
            d.tail_len = frame_records_above(regs.fp, start, end, hi, read, &mut d.tail) as u32;
        }
        return true;
    }
    d.flags |= FLAG_FOREIGN_STACK;
    d.copy_start = start;
    d.copy_words = 0;
    if !VM_READV.load(Ordering::Relaxed) {
        d.flags |= FLAG_NO_COPY;
        return false;
    }
    let local = libc::iovec { iov_base: d.stack.as_mut_ptr().cast(), iov_len: COPY_BYTES };
    let remote = libc::iovec { iov_base: start as *mut libc::c_void, iov_len: COPY_BYTES };
    // SAFETY: the kernel copies from our own address space into the
    // record, checking every page: an unreadable one ends the copy (a
    // short count, or -1 if the first page is), it never faults.
    let n = unsafe { libc::process_vm_readv(PID.load(Ordering::Relaxed), &local, 1, &remote, 1, 0) };
    if n <= 0 {
        d.flags |= FLAG_NO_COPY;
    } else {
        d.copy_words = (n as usize / 8) as u32;
        if n as usize == COPY_BYTES {
            d.flags |= FLAG_TRUNCATED;
        }
    }
    false
}

/// Ends the sampler's current or next `sleep_until` (async-signal-safe).
pub fn wake_sampler() {
    WAKE.fetch_add(1, Ordering::Release);
    // SAFETY: a FUTEX_WAKE on a static word; async-signal-safe.
    unsafe {
        libc::syscall(libc::SYS_futex, WAKE.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

/// Sleeps until `deadline_ns` (CLOCK_MONOTONIC) or until a handler wakes
/// the sampler, whichever comes first.
pub fn sleep_until(deadline_ns: u64, seen: u32) {
    let now = monotonic_ns();
    if deadline_ns <= now || WAKE.load(Ordering::Acquire) != seen {
        return;
    }
    let wait = deadline_ns - now;
    let ts = libc::timespec { tv_sec: (wait / 1_000_000_000) as libc::time_t, tv_nsec: (wait % 1_000_000_000) as _ };
    // SAFETY: FUTEX_WAIT on a static word with a relative timeout; it
    // returns at once if the word is no longer `seen`.
    unsafe {
        libc::syscall(libc::SYS_futex, WAKE.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, &ts);
    }
}

/// Keeps this library mapped for the life of the process: the handler stays
/// installed after `stop()`, so its code must never be unmapped.
fn pin_library() {
    // SAFETY: Dl_info is plain data; zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only inspects the loader's tables for this address.
    if unsafe { libc::dladdr(on_signal as *const libc::c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
        // RTLD_NOLOAD only bumps the existing object; the handle is leaked
        // on purpose.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    }
}

/// Whether `process_vm_readv` can read our own memory here.
fn vm_readv_works(pid: i32) -> bool {
    let src = 0x5eed_u64;
    let mut dst = 0u64;
    let local = libc::iovec { iov_base: (&mut dst as *mut u64).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: (&src as *const u64).cast_mut().cast(), iov_len: 8 };
    // SAFETY: reads 8 bytes of a local into another local.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    n == 8 && dst == src
}

fn is_free(sig: i32) -> bool {
    // SAFETY: a null new action only reads the current disposition.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::sigaction(sig, ptr::null(), &mut old) }) == 0 && old.sa_sigaction == libc::SIG_DFL
}

/// Installs the handler and returns the signal number. Idempotent.
pub fn install() -> Result<i32, SamplerError> {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let installed = SIGNAL.load(Ordering::Acquire);
    if installed != 0 {
        return Ok(installed);
    }
    pin_library();
    super::pkeys::detect();
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    PID.store(pid, Ordering::Relaxed);
    VM_READV.store(vm_readv_works(pid), Ordering::Relaxed);
    // Warm up what the handler calls, so nothing is resolved for the first
    // time inside it.
    let _ = monotonic_ns();
    // SAFETY: pthread_self has no preconditions.
    let _ = unsafe { libc::pthread_self() };

    let (lo, hi) = (libc::SIGRTMIN() + 4, libc::SIGRTMAX() - 1);
    let candidates = std::iter::once(libc::SIGURG).chain((lo..=hi).rev());
    for sig in candidates {
        if !is_free(sig) {
            continue;
        }
        // SAFETY: zeroed sigaction is valid; fields set below.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_signal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // SAFETY: initialises the mask in place.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: installs a handler that is async-signal-safe (see the
        // module docs) and lives forever (the library is pinned).
        if unsafe { libc::sigaction(sig, &act, ptr::null_mut()) } == 0 {
            SIGNAL.store(sig, Ordering::Release);
            return Ok(sig);
        }
    }
    Err(SamplerError::new(ErrorCode::Busy, format!("no free signal: SIGURG and {lo}..{hi} all have handlers")))
}

/// The installed signal, or 0.
pub fn installed_signal() -> i32 {
    SIGNAL.load(Ordering::Acquire)
}

/// Whether our handler is still the one installed for our signal (another
/// library may have taken it over).
pub fn still_installed() -> bool {
    let sig = installed_signal();
    if sig == 0 {
        return false;
    }
    // SAFETY: a null new action only reads the current disposition.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::sigaction(sig, ptr::null(), &mut old) }) == 0 && old.sa_sigaction == on_signal as *const () as usize
}

/// Takes any sampling signal still pending for the calling thread. A
/// real-time signal's default action is to terminate, and pending signals
/// survive `execve`, so the thread that stops sampling leaves none behind.
/// (`SIGURG`'s default is to ignore: nothing to do then.)
pub fn discard_pending_on_this_thread() {
    let sig = installed_signal();
    if sig == 0 || sig == libc::SIGURG {
        return;
    }
    // SAFETY: sigset_t is plain data, initialised by sigemptyset; the mask
    // changes only for this thread and is restored; sigtimedwait with a
    // zero timeout only takes an already pending signal.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        while libc::sigtimedwait(&set, ptr::null_mut(), &zero) == sig {}
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
    }
}

/// Whether `process_vm_readv` is usable for stacks outside known bounds.
pub fn can_read_foreign_stacks() -> bool {
    VM_READV.load(Ordering::Relaxed)
}

/// `siginfo_t` as `rt_tgsigqueueinfo` reads it for `SI_QUEUE`.
#[repr(C)]
struct QueueInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: u64,
    _rest: [u64; 12],
}
const _: () = assert!(std::mem::size_of::<QueueInfo>() == 128);

/// Whether thread `tid` of process `pid` still exists.
pub fn thread_alive(pid: u64, tid: u64) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::pid_t, tid as libc::pid_t, 0) == 0 }
}

/// Sends the sampling signal to thread `tid` with `value`. Returns the
/// errno on failure (ESRCH: the thread is gone; EAGAIN: queue limit).
pub fn send(tid: u64, value: u64) -> Result<(), i32> {
    let sig = installed_signal();
    let pid = PID.load(Ordering::Relaxed);
    let info = QueueInfo {
        signo: sig,
        errno: 0,
        code: libc::SI_QUEUE,
        _pad: 0,
        pid,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        value,
        _rest: [0; 12],
    };
    // SAFETY: the kernel reads 128 bytes of siginfo from `info`, which is
    // exactly its size; tid and pid are plain integers.
    let rc =
        unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid as libc::pid_t, sig, &info as *const QueueInfo) };
    if rc == 0 {
        Ok(())
    } else {
        // SAFETY: reading errno right after a failed call.
        Err(unsafe { *libc::__errno_location() })
    }
}

/// The records of a capture, for the sampler: `data()` of a record taken
/// from the done list.
pub fn record_data(record: &Record) -> &RecordData {
    // SAFETY: the sampler calls this only for records it took from the
    // done list and has not freed.
    unsafe { record.data() }
}

/// The kernel's share of one sample, for the benchmark: sends the sampling
/// signal to the calling thread with a value no slot matches, so the
/// handler returns at once, and times each round trip. Returns ns.
#[cfg(any(test, feature = "testing"))]
pub fn round_trip_ns(iterations: usize) -> Result<Vec<u64>, SamplerError> {
    install()?;
    let tid = crate::sampler::thread_id::current();
    let mut out = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = monotonic_ns();
        // A signal sent to the calling thread is delivered before the
        // system call returns to user space.
        let _ = send(tid, u64::MAX);
        out.push(monotonic_ns() - t0);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_is_not_sigprof_and_install_is_idempotent() {
        let sig = install().unwrap();
        assert_ne!(sig, libc::SIGPROF);
        assert!(sig == libc::SIGURG || (sig >= libc::SIGRTMIN() && sig <= libc::SIGRTMAX()));
        assert_eq!(install().unwrap(), sig);
        assert!(still_installed());
    }

    #[test]
    fn round_trip_is_measured() {
        let t = round_trip_ns(100).unwrap();
        assert_eq!(t.len(), 100);
        assert!(t.iter().all(|&ns| ns > 0 && ns < 1_000_000_000));
    }

    #[test]
    fn process_vm_readv_stops_at_an_unreadable_page() {
        install().unwrap();
        assert!(can_read_foreign_stacks(), "process_vm_readv is available on the test machines");
        let page = 4096usize;
        // SAFETY: a private anonymous mapping of three pages, the last made
        // unreadable; unmapped at the end.
        unsafe {
            let base = libc::mmap(
                ptr::null_mut(),
                3 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            libc::mprotect(base.cast::<u8>().add(2 * page).cast(), page, libc::PROT_NONE);
            let mut buf = vec![0u8; 3 * page];
            let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: 3 * page };
            let remote = libc::iovec { iov_base: base.cast::<u8>().add(100).cast(), iov_len: 3 * page };
            let n = libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0);
            assert_eq!(n as usize, 2 * page - 100, "a short count up to the unreadable page");
            libc::munmap(base, 3 * page);
        }
    }
}
