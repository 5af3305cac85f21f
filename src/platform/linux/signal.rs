//! The sampling signal: its handler, and the per-thread slots the handler
//! writes into.
//!
//! The sampler sends a real-time signal to a thread with
//! `rt_tgsigqueueinfo`, carrying a slot index and a generation in
//! `si_value`. The handler, running on the sampled thread, walks its own
//! stack with the shared `walk_stack` into that slot and marks it done. The
//! sampler harvests the slot on its next tick.
//!
//! A slot moves through these phases; each arrow is one atomic store or CAS:
//!
//! ```text
//!  FREE --sampler arms(gen+1)--> ARMED --handler CAS--> WRITING --handler--> DONE
//!   ^                              |                                          |
//!   |                   sampler gives up at stop                    sampler harvests
//!   |                              v                                          |
//!   +---- late handler CAS ---- ABANDONED                                     |
//!   +-------------------------------------------------------------------------+
//! ```
//!
//! The handler only writes after winning the ARMED(gen) -> WRITING(gen) CAS
//! for the generation its signal carries, so a signal that arrives late, or
//! twice, or from someone else, writes nothing. Slots are allocated in chunks
//! that are never freed, so even a handler that runs after `stop()` touches
//! valid memory.
//!
//! Everything the handler calls is async-signal-safe: atomics, volatile
//! stack reads within validated bounds, `clock_gettime` (vDSO), and
//! `pthread_self`. The library is linked with `-z now`, so no call here goes
//! through the lazy binder.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::sampler::backend::FRAME_WORDS;
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::stopped_window::StoppedWindow;
use crate::sampler::walker::{walk_stack, walk_stack_visit, Registers, StackBounds, WalkEnd};

/// The deepest stack a slot can hold; the `maxStackDepth` option's maximum.
pub const SLOT_FRAMES: usize = crate::sampler::options::MAX_STACK_DEPTH_MAX;
const CHUNK_SLOTS: usize = 32;
const MAX_CHUNKS: usize = 256;
/// Threads that can be sampled at once.
pub const MAX_SLOTS: usize = CHUNK_SLOTS * MAX_CHUNKS;
/// JavaScript frames kept per sample (from V8's `GetStackSample`).
pub const SLOT_JS_FRAMES: usize = 256;

const FREE: u64 = 0;
const ARMED: u64 = 1;
const WRITING: u64 = 2;
const DONE: u64 = 3;
const ABANDONED: u64 = 4;
const PHASE_BITS: u64 = 3;
const PHASE_MASK: u64 = (1 << PHASE_BITS) - 1;

fn state(gen: u32, phase: u64) -> u64 {
    ((gen as u64) << PHASE_BITS) | phase
}

/// What the handler leaves in a slot.
pub const FLAG_BOUNDS_MISS: u8 = 1;

/// One thread's mailbox. Cache-line aligned so handlers on different CPUs
/// do not share lines.
#[repr(C, align(64))]
pub struct Slot {
    state: AtomicU64,
    /// The tid that owns this slot, 0 when unowned.
    owner: AtomicU64,
    // Written by the sampler before arming; read by the handler.
    bounds_lo: AtomicU64,
    bounds_hi: AtomicU64,
    max_depth: AtomicU32,
    sent_ns: AtomicU64,
    // Written by the handler before DONE; read by the sampler after.
    depth: AtomicU32,
    end: AtomicU8,
    flags: AtomicU8,
    sp: AtomicU64,
    enter_ns: AtomicU64,
    exit_ns: AtomicU64,
    js_count: AtomicU32,
    words_count: AtomicU32,
    tos: AtomicU64,
    frames: UnsafeCell<[u64; SLOT_FRAMES]>,
    js_frames: UnsafeCell<[u64; SLOT_JS_FRAMES]>,
    words: UnsafeCell<[[u64; FRAME_WORDS]; SLOT_JS_FRAMES]>,
}

// SAFETY: `frames`, `js_frames` and `words` are written only by the handler that won the
// ARMED -> WRITING CAS and read only by the sampler after it observed DONE
// with Acquire ordering, so accesses never overlap; all other fields are
// atomics.
unsafe impl Sync for Slot {}

struct Chunk {
    slots: [Slot; CHUNK_SLOTS],
}

static CHUNKS: [AtomicPtr<Chunk>; MAX_CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS];

fn new_chunk() -> Box<Chunk> {
    // SAFETY: every field of Slot is an atomic or an array of u64, for which
    // all-zero bytes is a valid value (FREE, unowned, empty).
    unsafe { Box::<Chunk>::new_zeroed().assume_init() }
}

/// The slot with this index, if its chunk exists. Async-signal-safe.
#[inline]
pub fn slot(index: u32) -> Option<&'static Slot> {
    let index = index as usize;
    let chunk = CHUNKS.get(index / CHUNK_SLOTS)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: non-null chunk pointers come from `Box::leak` in `acquire` and
    // are never freed or replaced, so the reference is valid for 'static.
    let chunk: &'static Chunk = unsafe { &*chunk };
    chunk.slots.get(index % CHUNK_SLOTS)
}

/// Gives a free slot to `tid`, allocating a new chunk if all are taken.
/// Sampler thread only.
pub fn acquire(tid: u64) -> Option<u32> {
    for (c, cell) in CHUNKS.iter().enumerate() {
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            let fresh = Box::into_raw(new_chunk());
            match cell.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => chunk = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` was never published; we still own it.
                    drop(unsafe { Box::from_raw(fresh) });
                    chunk = existing;
                }
            }
        }
        // SAFETY: as in `slot`: published chunks live forever.
        let chunk: &'static Chunk = unsafe { &*chunk };
        for (i, s) in chunk.slots.iter().enumerate() {
            if s.owner.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Some((c * CHUNK_SLOTS + i) as u32);
            }
        }
    }
    None
}

/// Outcome of harvesting a slot.
pub enum Harvest<'a> {
    /// Nothing was requested, or the request is still in flight.
    NotReady,
    Done(SlotData<'a>),
}

/// What a handler recorded.
pub struct SlotData<'a> {
    pub frames: &'a [u64],
    /// V8's JavaScript frames for the same stop, leaf first.
    pub js: &'a [u64],
    /// The word at the stack pointer, or 0.
    pub tos: u64,
    /// Words below the first frames' frame pointers.
    pub words: &'a [[u64; FRAME_WORDS]],
    pub end: WalkEnd,
    pub flags: u8,
    pub sp: u64,
    pub enter_ns: u64,
    pub exit_ns: u64,
    pub sent_ns: u64,
}

impl Slot {
    fn gen(&self) -> u32 {
        (self.state.load(Ordering::Relaxed) >> PHASE_BITS) as u32
    }

    fn phase(&self) -> u64 {
        self.state.load(Ordering::Acquire) & PHASE_MASK
    }

    /// True if a request is outstanding (armed, or being written).
    pub fn in_flight(&self) -> bool {
        matches!(self.phase(), ARMED | WRITING)
    }

    /// Prepares a request and returns the `si_value` to send, or None if the
    /// previous request is still outstanding.
    pub fn arm(&self, index: u32, bounds: StackBounds, max_depth: usize, sent_ns: u64) -> Option<u64> {
        let current = self.state.load(Ordering::Acquire);
        if !matches!(current & PHASE_MASK, FREE | DONE) {
            return None;
        }
        let gen = self.gen().wrapping_add(1);
        self.bounds_lo.store(bounds.lo, Ordering::Relaxed);
        self.bounds_hi.store(bounds.hi, Ordering::Relaxed);
        self.max_depth.store(max_depth.min(SLOT_FRAMES) as u32, Ordering::Relaxed);
        self.sent_ns.store(sent_ns, Ordering::Relaxed);
        // Release: the handler's Acquire CAS sees the fields above.
        self.state.compare_exchange(current, state(gen, ARMED), Ordering::Release, Ordering::Relaxed).ok()?;
        Some(((index as u64) << 32) | gen as u64)
    }

    /// Withdraws a request whose signal could not be sent.
    pub fn disarm(&self) {
        let gen = self.gen();
        let _ = self.state.compare_exchange(state(gen, ARMED), state(gen, FREE), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Takes a finished capture. The returned frames stay valid until the
    /// slot is armed again, which only the caller (the sampler) does.
    pub fn harvest(&self) -> Harvest<'_> {
        let s = self.state.load(Ordering::Acquire);
        if s & PHASE_MASK != DONE {
            return Harvest::NotReady;
        }
        let depth = (self.depth.load(Ordering::Relaxed) as usize).min(SLOT_FRAMES);
        // SAFETY: phase DONE (observed with Acquire, pairing with the
        // handler's Release store) means the handler finished writing and no
        // handler can write again until the sampler re-arms the slot.
        let all: &[u64; SLOT_FRAMES] = unsafe { &*self.frames.get() };
        let frames = &all[..depth];
        let js_depth = (self.js_count.load(Ordering::Relaxed) as usize).min(SLOT_JS_FRAMES);
        // SAFETY: as for `frames`.
        let js_all: &[u64; SLOT_JS_FRAMES] = unsafe { &*self.js_frames.get() };
        let js = &js_all[..js_depth];
        let words_depth = (self.words_count.load(Ordering::Relaxed) as usize).min(SLOT_JS_FRAMES);
        // SAFETY: as for `frames`.
        let words_all: &[[u64; FRAME_WORDS]; SLOT_JS_FRAMES] = unsafe { &*self.words.get() };
        let words = &words_all[..words_depth];
        let end = match self.end.load(Ordering::Relaxed) {
            0 => WalkEnd::Complete,
            1 => WalkEnd::Truncated,
            2 => WalkEnd::BadFramePointer,
            _ => WalkEnd::NoPc,
        };
        // Leave it DONE (the data stays readable); `arm` accepts DONE.
        Harvest::Done(SlotData {
            frames,
            js,
            tos: self.tos.load(Ordering::Relaxed),
            words,
            end,
            flags: self.flags.load(Ordering::Relaxed),
            sp: self.sp.load(Ordering::Relaxed),
            enter_ns: self.enter_ns.load(Ordering::Relaxed),
            exit_ns: self.exit_ns.load(Ordering::Relaxed),
            sent_ns: self.sent_ns.load(Ordering::Relaxed),
        })
    }

    /// Marks a harvested capture consumed, so it is not reported twice.
    pub fn consume(&self) {
        let gen = self.gen();
        let _ = self.state.compare_exchange(state(gen, DONE), state(gen, FREE), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// At stop: if the request was never served, give it up so a late
    /// signal writes nothing. Returns false if a handler is mid-write.
    pub fn abandon(&self) -> bool {
        let gen = self.gen();
        match self.state.compare_exchange(state(gen, ARMED), state(gen, ABANDONED), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(s) => s & PHASE_MASK != WRITING,
        }
    }

    /// Releases the slot for reuse by another thread. `thread_gone` says no
    /// handler can run for the owner any more (it is not in
    /// `/proc/self/task`), so an unserved request can be dropped too.
    /// Returns false if the slot must stay owned (a late signal may still
    /// arrive and be discarded by the handler).
    pub fn release(&self, thread_gone: bool) -> bool {
        let s = self.state.load(Ordering::Acquire);
        let gen = (s >> PHASE_BITS) as u32;
        let reusable = match s & PHASE_MASK {
            FREE | DONE => true,
            ARMED | ABANDONED => thread_gone,
            _ => false, // WRITING: a handler is running right now
        };
        if !reusable {
            return false;
        }
        // Bump the generation so nothing sent earlier can match again.
        if self
            .state
            .compare_exchange(s, state(gen.wrapping_add(1), FREE), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.owner.store(0, Ordering::Release);
        true
    }

    pub fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }
}

/// Every slot that has an owner, for reclaiming after a previous session.
pub fn owned_slots() -> Vec<(u32, &'static Slot)> {
    let mut out = Vec::new();
    for i in 0..MAX_SLOTS as u32 {
        // Chunks are filled in order, so the first missing one ends the scan.
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
/// Our pid, cached for the handler's sender check.
static PID: AtomicI32 = AtomicI32::new(0);
/// Whether the TCB clamp applies (glibc-style layout, checked at install).
static TCB_ABOVE_STACK: AtomicBool = AtomicBool::new(false);
/// Whether handlers also ask V8 for the thread's JavaScript frames.
static JS_FRAMES: AtomicBool = AtomicBool::new(false);

/// Turns V8 JavaScript frame capture in the handler on or off.
pub fn set_js_frames(on: bool) {
    JS_FRAMES.store(on, Ordering::Release);
}
static INSTALL: Mutex<()> = Mutex::new(());

#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is
    // async-signal-safe and served by the vDSO for CLOCK_MONOTONIC.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads pc, sp and fp out of the interrupted context.
///
/// # Safety
/// `uc` must point to the `ucontext_t` the kernel passed to an SA_SIGINFO
/// handler.
#[inline]
unsafe fn registers(uc: *const libc::ucontext_t) -> Registers {
    // SAFETY: per the function contract `uc` is valid for reads.
    let mc = unsafe { &(*uc).uc_mcontext };
    #[cfg(target_arch = "x86_64")]
    {
        Registers {
            pc: mc.gregs[libc::REG_RIP as usize] as u64,
            sp: mc.gregs[libc::REG_RSP as usize] as u64,
            fp: mc.gregs[libc::REG_RBP as usize] as u64,
            lr: 0,
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        Registers { pc: mc.pc, sp: mc.sp, fp: mc.regs[29], lr: mc.regs[30] }
    }
}

extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's lifetime; restoring it keeps the interrupted
    // code's view of errno intact.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    // SAFETY: the kernel passes valid `info` and `uc` to SA_SIGINFO handlers.
    unsafe { handle(info, uc) };
    // SAFETY: as above.
    unsafe { *errno = saved };
}

/// # Safety
/// Called only from `on_signal` with the kernel's arguments.
#[inline(always)]
unsafe fn handle(info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let enter_ns = monotonic_ns();
    if info.is_null() || uc.is_null() {
        return;
    }
    // SAFETY: `info` is valid (checked non-null; provided by the kernel).
    let (code, pid, value) = unsafe { ((*info).si_code, (*info).si_pid(), (*info).si_value().sival_ptr as u64) };
    if code != libc::SI_QUEUE || pid != PID.load(Ordering::Relaxed) {
        return; // not ours
    }
    let (index, gen) = ((value >> 32) as u32, value as u32);
    let Some(slot) = slot(index) else { return };
    if slot
        .state
        .compare_exchange(state(gen, ARMED), state(gen, WRITING), Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Abandoned at stop: acknowledge so the slot can be reused.
        let _ =
            slot.state.compare_exchange(state(gen, ABANDONED), state(gen, FREE), Ordering::AcqRel, Ordering::Relaxed);
        return;
    }

    let window = StoppedWindow::enter();
    window.fault_injection_point();
    // SAFETY: `uc` is the kernel's ucontext for this signal.
    let regs = unsafe { registers(uc as *const libc::ucontext_t) };
    let mut bounds = StackBounds::new(slot.bounds_lo.load(Ordering::Relaxed), slot.bounds_hi.load(Ordering::Relaxed));
    if TCB_ABOVE_STACK.load(Ordering::Relaxed) {
        // With glibc, a thread's control block sits at the top of its stack
        // block, above every frame. Capping the bounds there keeps a garbage
        // frame pointer from reaching into a neighbouring mapping that
        // /proc/self/maps happened to show joined to this one.
        // SAFETY: pthread_self only reads the thread pointer.
        let tcb = unsafe { libc::pthread_self() } as u64;
        if tcb > regs.sp && tcb < bounds.hi {
            bounds.hi = tcb;
        }
    }
    // SAFETY: this handler won the CAS for this generation, so it is the
    // only writer of `frames` until it publishes DONE.
    let frames = unsafe { &mut *slot.frames.get() };
    let max_depth = slot.max_depth.load(Ordering::Relaxed) as usize;
    // JavaScript threads (when naming is on) also keep, for each frame, the
    // words just below its frame pointer: V8 keeps an interpreted frame's
    // bytecode position there (see `crate::v8::slots`).
    // A thread running V8 code that is not registered yet has its isolate
    // registered from here (see `crate::v8::discover`).
    let js_thread = JS_FRAMES.load(Ordering::Acquire) && max_depth > 1 && crate::v8::registered_or_discover(regs.pc);
    // SAFETY: as for `frames`: this handler owns the slot until DONE.
    let words = unsafe { &mut *slot.words.get() };
    let mut words_count = 0u32;
    let (walk, flags) = if bounds.contains(regs.sp) {
        let walk = if js_thread {
            walk_stack_visit(&regs, bounds, max_depth, frames, &mut |i, fp| {
                if let Some(w) = words.get_mut(i) {
                    crate::v8::slots::read(fp, bounds, w);
                    words_count = i as u32 + 1;
                }
            })
        } else {
            walk_stack(&regs, bounds, max_depth, frames)
        };
        (walk, 0)
    } else {
        // Bounds unknown or stale (new thread, or the stack moved): record
        // the pc and sp so the sampler can look the stack up.
        (walk_stack(&regs, StackBounds::EMPTY, max_depth.min(1), frames), FLAG_BOUNDS_MISS)
    };
    let mut js_count = 0;
    let mut tos = 0;
    if js_thread && flags == 0 {
        if regs.sp.checked_add(8).is_some_and(|end| end <= bounds.hi) {
            // SAFETY: `bounds` contains sp (checked above, flags == 0) and
            // the 8 bytes at sp end within it; the memory is this thread's
            // own stack.
            tos = unsafe { core::ptr::read_volatile(regs.sp as *const u64) };
        }
        // V8's own sampler on the same registers, until the frame layout
        // has been learned from it (then the words above say the same, for
        // a fraction of the time). It is async-signal-safe by design (V8's
        // profiler calls it from its SIGPROF handler); see
        // `crate::v8::sample`.
        if crate::v8::slots::learned().is_none() {
            // SAFETY: as for `frames`.
            let js = unsafe { &mut *slot.js_frames.get() };
            let limit = max_depth.min(SLOT_JS_FRAMES);
            js_count = crate::v8::sample_js(&regs, &mut js[..limit]).count as u32;
        }
    } else {
        words_count = 0;
    }
    drop(window);
    slot.js_count.store(js_count, Ordering::Relaxed);
    slot.words_count.store(words_count, Ordering::Relaxed);
    slot.tos.store(tos, Ordering::Relaxed);
    slot.depth.store(walk.depth as u32, Ordering::Relaxed);
    slot.end.store(
        match walk.end {
            WalkEnd::Complete => 0,
            WalkEnd::Truncated => 1,
            WalkEnd::BadFramePointer => 2,
            WalkEnd::NoPc => 3,
        },
        Ordering::Relaxed,
    );
    slot.flags.store(flags, Ordering::Relaxed);
    slot.sp.store(regs.sp, Ordering::Relaxed);
    slot.enter_ns.store(enter_ns, Ordering::Relaxed);
    slot.exit_ns.store(monotonic_ns(), Ordering::Relaxed);
    slot.state.store(state(gen, DONE), Ordering::Release);
}

/// Keeps this library mapped for the life of the process: the handler stays
/// installed after `stop()` (a late signal must find it), so the code must
/// never be unmapped, even if a worker that loaded the addon exits.
fn pin_library() {
    let mut info: libc::Dl_info = unsafe {
        // SAFETY: Dl_info is plain data; zero is a valid value.
        std::mem::zeroed()
    };
    // SAFETY: dladdr only inspects the loader's tables for this address.
    if unsafe { libc::dladdr(on_signal as *const libc::c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
        // RTLD_NOLOAD only bumps the existing object; the handle is leaked
        // on purpose.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    }
}

/// Installs the handler on a free real-time signal (never SIGPROF, which
/// V8's CPU profiler owns) and returns the signal number. Idempotent. A
/// signal is free if its disposition is SIG_DFL; a second copy of this addon
/// loaded from another path therefore picks a different one.
pub fn install() -> Result<i32, SamplerError> {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let installed = SIGNAL.load(Ordering::Acquire);
    if installed != 0 {
        return Ok(installed);
    }
    pin_library();
    // SAFETY: getpid cannot fail.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    TCB_ABOVE_STACK.store(tcb_is_above_stack(), Ordering::Relaxed);
    // Warm up everything the handler calls, so nothing is resolved or
    // initialised for the first time inside it.
    let _ = monotonic_ns();
    // SAFETY: pthread_self has no preconditions.
    let _ = unsafe { libc::pthread_self() };

    let (lo, hi) = (libc::SIGRTMIN() + 4, libc::SIGRTMAX() - 1);
    for sig in (lo..=hi).rev() {
        // SAFETY: sigaction with a null new action only reads the current
        // disposition into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, ptr::null(), &mut old) } != 0 || old.sa_sigaction != libc::SIG_DFL {
            continue;
        }
        // SAFETY: as above; the new action is fully initialised.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_signal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // SAFETY: initialises the mask in place.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: installs a handler that is async-signal-safe (see above)
        // and lives forever (the library is pinned).
        if unsafe { libc::sigaction(sig, &act, ptr::null_mut()) } == 0 {
            SIGNAL.store(sig, Ordering::Release);
            return Ok(sig);
        }
    }
    Err(SamplerError::new(ErrorCode::Busy, format!("no free real-time signal between {lo} and {hi}")))
}

/// The installed signal, or 0.
pub fn installed_signal() -> i32 {
    SIGNAL.load(Ordering::Acquire)
}

/// Checks on this thread that the thread pointer lies above the stack, as
/// with glibc's layout, before trusting it as an upper bound.
fn tcb_is_above_stack() -> bool {
    let local = 0u8;
    let sp = &local as *const u8 as u64;
    // SAFETY: pthread_self has no preconditions.
    let tcb = unsafe { libc::pthread_self() } as u64;
    // The main thread's TCB is not on its stack; check from a fresh thread.
    let on_main = crate::sampler::thread_id::current() == std::process::id() as u64;
    if on_main {
        return std::thread::spawn(tcb_is_above_stack).join().unwrap_or(false);
    }
    tcb > sp && tcb - sp < 64 << 20
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

/// The kernel's share of one sample, for the benchmark: sends the sampling
/// signal to the calling thread with a value no slot matches, so the
/// handler returns at once, and times each round trip (send, delivery,
/// handler entry and exit, sigreturn). Returns the durations in ns.
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
    fn round_trip_is_measured() {
        let t = round_trip_ns(100).unwrap();
        assert_eq!(t.len(), 100);
        assert!(t.iter().all(|&ns| ns > 0 && ns < 1_000_000_000));
    }

    #[test]
    fn signal_is_real_time_and_not_sigprof() {
        let sig = install().unwrap();
        assert!(sig >= libc::SIGRTMIN() && sig <= libc::SIGRTMAX());
        assert_ne!(sig, libc::SIGPROF);
        assert_eq!(install().unwrap(), sig, "idempotent");
    }

    #[test]
    fn handler_walks_own_stack_via_slot() {
        install().unwrap();
        let tid = crate::sampler::thread_id::current();
        let index = acquire(tid).unwrap();
        let s = slot(index).unwrap();
        let maps = super::super::procfs::MemoryMap::read().unwrap();
        let local = 0u64;
        let bounds = maps.find(&local as *const u64 as u64).unwrap();
        let value = s.arm(index, bounds, 64, monotonic_ns()).unwrap();
        assert!(s.arm(index, bounds, 64, 0).is_none(), "one request at a time");
        send(tid, value).unwrap();
        // The signal is delivered to this thread before the syscall returns.
        let Harvest::Done(d) = s.harvest() else { panic!("not delivered") };
        assert!(d.frames.len() >= 3, "{} frames", d.frames.len());
        assert_eq!(d.flags, 0);
        assert!(d.exit_ns >= d.enter_ns && d.enter_ns >= d.sent_ns);
        s.consume();
        // A replayed (stale) signal writes nothing.
        send(tid, value).unwrap();
        assert!(matches!(s.harvest(), Harvest::NotReady));
        // Unknown bounds: pc only, and the miss is flagged.
        let value = s.arm(index, StackBounds::EMPTY, 64, 0).unwrap();
        send(tid, value).unwrap();
        let Harvest::Done(d) = s.harvest() else { panic!() };
        assert_eq!(d.frames.len(), 1);
        assert_eq!(d.flags, FLAG_BOUNDS_MISS);
        assert!(s.release(false));
    }

    #[test]
    fn abandoned_request_is_acknowledged_by_a_late_handler() {
        install().unwrap();
        let tid = crate::sampler::thread_id::current();
        let index = acquire(tid).unwrap();
        let s = slot(index).unwrap();
        let value = s.arm(index, StackBounds::EMPTY, 8, 0).unwrap();
        assert!(s.abandon());
        assert!(!s.release(false), "a late signal may still come");
        send(tid, value).unwrap();
        assert!(matches!(s.harvest(), Harvest::NotReady), "late handler wrote nothing");
        assert!(s.release(false), "and freed the slot");
    }

    #[test]
    fn foreign_signals_are_ignored() {
        let sig = install().unwrap();
        // A plain kill-style signal (SI_TKILL) from ourselves must be a no-op.
        // SAFETY: sending our own installed signal to ourselves.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::syscall(libc::SYS_gettid), sig) };
        // Garbage si_value with a valid sender: no slot matches.
        send(crate::sampler::thread_id::current(), u64::MAX).unwrap();
        send(crate::sampler::thread_id::current(), 0).unwrap();
    }
}
