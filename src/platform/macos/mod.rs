//! The Mach backend (macOS, x86_64 and arm64): threads found by a pthread
//! introspection hook and `task_threads`, each sampled by `thread_suspend`,
//! `thread_get_state`, a copy of the live stack into memory preallocated
//! here, and `thread_resume`; the copy is then unwound on the sampler
//! thread with the images' `__unwind_info` and `__eh_frame` (see
//! `sampler::unwind`), frame pointers where there is none.
//!
//! Guarantees: every successful suspend is undone by a [`Suspended`] guard
//! on every path; between suspend and resume nothing allocates, locks or
//! goes through a lazily bound symbol (a `StoppedWindow` spans it, so
//! `MACHSAMPLER_ALLOC_CHECK=1` catches an allocation); a thread that has
//! logged its exit is never walked; every port right is the registry's own,
//! so a port name never comes to mean another thread while the sampler can
//! use it. A thread gone mid-sample is a skip, never an error. Why it is
//! built this way: `docs/design/mach-suspend-window.md`,
//! `docs/design/mach-thread-tracking.md`. All calls go through [`sys`].

pub mod code;
pub mod hook;
pub mod modules;
pub mod regions;
pub mod sys;
pub mod threads;

#[cfg(all(test, feature = "machsim"))]
mod sim_tests;

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, PoisonError};

use sys::{
    mach_absolute_time, mach_msg_type_number_t, mach_timebase_info, mach_wait_until, thread_act_t, thread_get_state,
    thread_resume, thread_state_t, thread_suspend, MACH_PORT_NULL,
};

use crate::platform::mach::first_frame::{insert_caller, leaf_caller, top_of_stack_word, Arch};
use crate::platform::mach::kern::{self, suspend_skip_reason, IntoResult, KernelError};
use crate::platform::mach::rescan::{merge_rescan, pick_main_tid, sync_session, FoundThread};
use crate::platform::mach::{pac, refusal, time};
use crate::sampler::backend::{
    Backend, BackendCounters, Capture, CaptureConfig, CapturedStack, SkipReason, ThreadGone, FRAME_WORDS,
};
use crate::sampler::error::SamplerError;
use crate::sampler::options::MAX_STACK_DEPTH_MAX;
use crate::sampler::own_threads::SAMPLER_THREAD_NAME;
use crate::sampler::registry::{ThreadEntry, ThreadRegistry, THREAD_NAME_MAX};
use crate::sampler::stopped_window::StoppedWindow;
use crate::sampler::timebase::Timebase;
use crate::sampler::unwind::large_frames::{self, MAX_HOLES};
use crate::sampler::unwind::{frame_records_above, lesson, Hole, StackCopy, StackEnd, TailRecord, Unwinder, Unwound};
use crate::sampler::walker::{strip_pointer_tag, Registers};
use rustc_hash::FxHashMap;

use hook::{EXITS, RELEASES, SAMPLER_ACTIVE};

/// JavaScript frames kept per sample (from V8's `GetStackSample`).
const JS_FRAMES_MAX: usize = 256;
/// Bytes of stack copied per sample, from just below the stack pointer
/// up. A deeper stack goes on through the frame records above the copy.
const COPY_BYTES: usize = 48 * 1024;
/// Frame records kept from above a copy cut at `COPY_BYTES`: as many as
/// the deepest stack asked for (`maxStackDepth` up to 1024), so a deep
/// stack ends at the depth limit, which says so.
const TAIL_RECORDS: usize = 1024;
/// Both macOS ABIs let a function use 128 bytes below its stack pointer
/// without moving it: the copy starts there.
const RED_ZONE: u64 = 128;
/// How often, at most, the unwinder looks again for new images and JIT
/// code when a return address lies in no code it knows.
const CODE_REFRESH_NS: u64 = 200_000_000;

// The shared decisions hard-code these so they build anywhere; hold them to
// the values the calls use.
const _: () = {
    assert!(kern::KERN_SUCCESS == sys::KERN_SUCCESS);
    assert!(kern::KERN_INVALID_ARGUMENT == sys::KERN_INVALID_ARGUMENT);
    assert!(kern::KERN_FAILURE == sys::KERN_FAILURE);
    assert!(kern::KERN_TERMINATED == sys::KERN_TERMINATED);
    assert!(kern::MACH_SEND_INVALID_DEST == sys::MACH_SEND_INVALID_DEST);
    assert!(sys::PTHREAD_INTROSPECTION_THREAD_START == 2);
    assert!(sys::PTHREAD_INTROSPECTION_THREAD_TERMINATE == 3);
    assert!(sys::MAXTHREADNAMESIZE == THREAD_NAME_MAX);
    assert!(sys::THREAD_BASIC_INFO_COUNT == 10);
};

#[cfg(target_arch = "aarch64")]
mod arch {
    pub use super::sys::arm_thread_state64_t as ThreadState;
    pub use super::sys::ARM_THREAD_STATE64 as FLAVOR;
    /// 68 words: 29 x-registers, fp, lr, sp, pc (u64), cpsr and a pad (u32).
    pub const STATE_COUNT: u32 = (std::mem::size_of::<ThreadState>() / 4) as u32;
    const _: () = assert!(STATE_COUNT == 68);

    pub fn registers(s: &ThreadState) -> crate::sampler::walker::Registers {
        crate::sampler::walker::Registers { pc: s.__pc, sp: s.__sp, fp: s.__fp, lr: s.__lr }
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    pub use super::sys::x86_THREAD_STATE64 as FLAVOR;
    pub use super::sys::x86_thread_state64_t as ThreadState;
    /// 42 words: 21 u64 registers.
    pub const STATE_COUNT: u32 = (std::mem::size_of::<ThreadState>() / 4) as u32;
    const _: () = assert!(STATE_COUNT == 42);

    pub fn registers(s: &ThreadState) -> crate::sampler::walker::Registers {
        crate::sampler::walker::Registers { pc: s.__rip, sp: s.__rsp, fp: s.__rbp, lr: 0 }
    }
}

#[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
compile_error!("the Mach backend supports x86_64 and aarch64 only");

/// Per-process values computed once.
struct Consts {
    timebase: Timebase,
    /// Applied to registers and recorded frames: the virtual-address bits,
    /// above which arm64e return addresses carry authentication codes.
    address_mask: u64,
}

fn consts() -> &'static Consts {
    static CONSTS: OnceLock<Consts> = OnceLock::new();
    CONSTS.get_or_init(|| {
        let mut info = mach_timebase_info { numer: 0, denom: 0 };
        // SAFETY: `info` is a valid out-pointer.
        let kr = unsafe { mach_timebase_info(&mut info) };
        let timebase = match kr.into_result() {
            Ok(()) => Timebase::new(info.numer, info.denom),
            Err(_) => Timebase::IDENTITY,
        };
        // Read on x86_64 too, where the OID may be missing: the default (47
        // bits) is the user address space there as well.
        let (rc, bits) = sysctl_int(c"machdep.virtual_address_size");
        Consts { timebase, address_mask: pac::va_mask(pac::interpret_va_bits(rc, bits)) }
    })
}

/// Reads an integer sysctl: (return code, value).
fn sysctl_int(name: &std::ffi::CStr) -> (c_int, c_int) {
    let mut value: c_int = 0;
    let mut size = std::mem::size_of::<c_int>();
    // SAFETY: `name` is NUL-terminated; `value` and `size` describe a
    // writable c_int; no new value is set.
    let rc = unsafe {
        sys::sysctlbyname(
            name.as_ptr() as *const c_char,
            &mut value as *mut c_int as *mut c_void,
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc, value)
}

/// True when this process runs under Rosetta translation.
pub fn is_translated() -> bool {
    let (rc, value) = sysctl_int(c"sysctl.proc_translated");
    refusal::is_translated(rc, value)
}

fn now_ticks() -> u64 {
    // SAFETY: reads the commpage clock; no arguments, no failure.
    unsafe { mach_absolute_time() }
}

/// The calling thread's own port name. For the calling thread libpthread
/// reads its own struct: no lock, no reference added.
fn own_port() -> thread_act_t {
    // SAFETY: pthread_self has no preconditions; see above.
    unsafe { sys::pthread_mach_thread_np(sys::pthread_self()) }
}

/// Calls, once, the functions the stopped window and the tick use (see
/// `hook::warm_up`). The null port makes each Mach call fail at once.
pub(crate) fn warm_up_sampling() {
    let mut state = arch::ThreadState::default();
    let mut count: mach_msg_type_number_t = arch::STATE_COUNT;
    // SAFETY: calls on MACH_PORT_NULL fail with MACH_SEND_INVALID_DEST
    // without touching any thread; `state` has room for `count` words.
    unsafe {
        let _ = thread_suspend(MACH_PORT_NULL);
        let _ = thread_get_state(MACH_PORT_NULL, arch::FLAVOR, &mut state as *mut _ as thread_state_t, &mut count);
        let _ = thread_resume(MACH_PORT_NULL);
        let _ = mach_wait_until(0);
    }
    let _ = now_ticks();
    let _ = thread_cpu_time_self();
    let _ = crate::sampler::thread_id::current();
}

fn thread_cpu_time_self() -> u64 {
    let mut ts = sys::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { sys::clock_gettime(sys::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// A thread held by `thread_suspend`, resumed when dropped, on every path
/// (Chromium's `ScopedSuspendThread`). It also holds the `StoppedWindow`,
/// which ends after the resume.
struct Suspended {
    port: thread_act_t,
    _window: StoppedWindow,
}

impl Suspended {
    #[inline(always)]
    fn new(port: thread_act_t) -> Result<Self, KernelError> {
        // SAFETY: `port` is a thread port this process holds a right to;
        // the caller never passes its own thread.
        unsafe { thread_suspend(port) }.into_result()?;
        Ok(Suspended { port, _window: StoppedWindow::enter() })
    }
}

impl Drop for Suspended {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: undoes the suspend in `new`. A failure means the thread
        // died while stopped, which leaves nothing to resume.
        let _ = unsafe { thread_resume(self.port) };
    }
}

/// What happened to a thread between suspend and resume.
enum Stopped {
    /// Its stack was copied into the backend's `stack` (and `tail`).
    Copied {
        regs: Registers,
        copy: Extent,
        /// JavaScript frames V8 reported (in the backend's `js_frames`).
        js_count: usize,
    },
    /// Only its registers were read: native unwinding is off, or its stack
    /// is not known (`unknown_stack`), so no memory was read.
    RegistersOnly { regs: Registers, unknown_stack: bool },
    /// It had logged its exit, or `thread_get_state` says it is gone.
    Gone,
    /// `thread_get_state` failed otherwise.
    StateError,
}

/// What a copy in the backend's `stack` and `tail` holds.
#[derive(Clone, Copy, Debug, Default)]
struct Extent {
    /// The address the copy starts at, and its length in words.
    start: u64,
    words: usize,
    /// The stack goes on above the copy.
    truncated: bool,
    /// Frame records above the copy, in `tail`.
    tail_len: usize,
    /// The copy ends just above the thread's learned root (see
    /// `sampler::unwind::root_extent`).
    to_root: bool,
    /// Middles of large frames left out (see `sampler::unwind::large_frames`).
    holes: [Hole; MAX_HOLES],
    hole_len: usize,
}

/// What complete unwinds taught about a thread's stack, for its next copies.
#[derive(Clone, Copy, Debug, Default)]
struct KnownStack {
    /// Its outermost frame record and the bytes above it that an unwind
    /// needs (see `sampler::unwind::root_extent`).
    root: Option<(u64, u64)>,
    /// A left-out large frame turned out to be needed: copy everything.
    whole: bool,
}

impl Extent {
    fn of<'a>(&'a self, stack: &'a [u64], tail: &'a [TailRecord]) -> StackCopy<'a> {
        StackCopy {
            start: self.start,
            words: &stack[..self.words.min(stack.len())],
            truncated: self.truncated,
            tail: &tail[..self.tail_len.min(tail.len())],
            holes: &self.holes[..self.hole_len.min(MAX_HOLES)],
        }
    }
}

/// Reads the registers of a suspended thread.
#[inline(always)]
fn read_registers(port: thread_act_t) -> Result<Registers, KernelError> {
    let mut state = arch::ThreadState::default();
    let mut count: mach_msg_type_number_t = arch::STATE_COUNT;
    // SAFETY: `state` is a thread-state struct of exactly `count` words for
    // this flavor; the kernel writes at most `count` words and updates it.
    unsafe { thread_get_state(port, arch::FLAVOR, &mut state as *mut _ as thread_state_t, &mut count) }
        .into_result()?;
    if count != arch::STATE_COUNT {
        // A short state would leave registers unset.
        return Err(KernelError::Other(kern::KERN_FAILURE));
    }
    Ok(arch::registers(&state))
}

/// Whether to ask V8 for the JavaScript frames of stopped threads.
static JS_FRAMES: AtomicBool = AtomicBool::new(false);

/// Turns V8 JavaScript frame capture on or off.
pub fn set_js_frames(on: bool) {
    JS_FRAMES.store(on, Ordering::Release);
}

/// Where the stopped window writes.
struct Buffers<'a> {
    stack: &'a mut [u64],
    tail: &'a mut [TailRecord],
    js: &'a mut [u64],
}

/// The work inside the stopped window. No allocation, no lock, no lazily
/// bound call: atomics, `thread_get_state`, a copy of the stack, the frame
/// records above a cut copy, and V8's own stack sampler until V8's frame
/// layout is learned (see `docs/design/getstacksample-when-stopped.md`).
/// `mask` keeps a pointer's address bits (pointer authentication).
#[inline(always)]
fn capture_stopped(
    port: thread_act_t,
    entry: &ThreadEntry,
    depth: usize,
    exits_epoch: usize,
    known: KnownStack,
    mask: u64,
    out: Buffers<'_>,
) -> Stopped {
    if EXITS.may_have_exited(entry.tid, exits_epoch) {
        // It stopped after its exit hook: its stack may already be unmapped.
        return Stopped::Gone;
    }
    let regs = match read_registers(port) {
        Ok(r) => pac::strip_registers(r, mask),
        Err(e) if e.thread_gone() => return Stopped::Gone,
        Err(_) => return Stopped::StateError,
    };
    let bounds = entry.stack;
    // The stack's aligned words: [lo, top).
    let (lo, top) = (bounds.lo.checked_next_multiple_of(8), bounds.hi & !7);
    let Some(lo) = lo.filter(|&lo| depth > 1 && lo <= regs.sp && regs.sp < top) else {
        return Stopped::RegistersOnly { regs, unknown_stack: depth > 1 };
    };
    // [start, end): 8-aligned, inside [lo, top) (which contains sp), at
    // most the buffer's length.
    let start = (regs.sp.saturating_sub(RED_ZONE) & !7).max(lo);
    let room = (out.stack.len() as u64).saturating_mul(8);
    let mut end = top.min(start.saturating_add(room));
    let read = |a: u64| {
        // SAFETY: `plan_copy` and `frame_records_above` read only aligned
        // words inside [start, top), the suspended thread's stack.
        unsafe { core::ptr::read_volatile(a as *const u64) }
    };
    let mut holes = [[0u64; 2]; MAX_HOLES];
    let (outermost, hole_len) = large_frames::plan_copy(regs.fp, start, end, known.whole, read, &mut holes);
    // Where the frame-pointer chain ends at the thread's learned first
    // record, the copy ends just above it: what lies higher is the thread's
    // entry, the same at every sample.
    let mut to_root = false;
    if let Some((record, extent)) = known.root {
        if outermost == Some(record) && record.checked_add(extent).is_some_and(|e| e < end) {
            end = (record + extent) & !7;
            to_root = true;
        }
    }
    // SAFETY: [start, end) lies inside the stack bounds of a thread that is
    // suspended, so its stack stays mapped and unchanged; the holes lie
    // below the outermost record, inside [start, end); `out.stack` has room
    // for `(end - start) / 8` words (see above) and is the backend's own
    // memory.
    let words = unsafe { large_frames::copy_around(start, end, &holes[..hole_len], out.stack.as_mut_ptr()) };
    let truncated = end < top;
    let tail_len =
        if truncated && !to_root { frame_records_above(regs.fp, start, end, top, read, out.tail) } else { 0 };
    let js_thread = JS_FRAMES.load(Ordering::Acquire) && crate::v8::thread_registered(entry.tid);
    let js_count = if js_thread && crate::v8::slots::learned().is_none() {
        let limit = depth.min(out.js.len());
        crate::v8::sample_js_stopped_thread(entry.tid, &regs, &mut out.js[..limit]).count
    } else {
        0
    };
    Stopped::Copied { regs, copy: Extent { start, words, truncated, tail_len, to_root, holes, hole_len }, js_count }
}

pub struct MachBackend {
    timebase: Timebase,
    address_mask: u64,
    /// The stack copy, preallocated: the window cannot allocate.
    stack: Box<[u64]>,
    /// Frame records above a cut copy, preallocated likewise.
    tail: Box<[TailRecord]>,
    /// V8's JavaScript frames, preallocated likewise.
    js_frames: Box<[u64]>,
    /// Built on the sampler thread at its first unwind.
    unwinder: Option<Unwinder>,
    unwound: Unwound,
    /// When the unwinder last looked for new images and JIT code.
    code_read_ns: u64,
    /// Code that keeps frame pointers without unwind information (V8's
    /// builtins), for the unwinder.
    frame_pointer_code: Vec<std::ops::Range<u64>>,
    /// Words below each frame pointer of a JavaScript thread's stack.
    words: Vec<[u64; FRAME_WORDS]>,
    /// What complete unwinds taught about each thread's stack.
    stacks: FxHashMap<u64, KnownStack>,
    /// Scratch: the hook table's live entries, sorted by tid.
    tracked: Vec<ThreadEntry>,
    /// Scratch for `sync_session` and rescans.
    scratch: Vec<ThreadEntry>,
    found: Vec<FoundThread>,
    /// Threads the sampler found gone, with their port, to retire at the
    /// next refresh.
    gone: Vec<(u64, u32)>,
    /// The exit log's epoch when the session's thread list was last taken.
    exits_epoch: usize,
    /// Set on the sampler thread's backend by `prepare_sampler_thread`.
    is_sampler: bool,
    /// Whether the thread of the last `thread_cpu_ns` was on a CPU.
    last_read_running: bool,
}

impl MachBackend {
    pub fn new() -> Result<Self, SamplerError> {
        if is_translated() {
            return Err(refusal::rosetta_error());
        }
        hook::ensure_installed();
        if hook::in_forked_child() {
            return Err(refusal::forked_child_error());
        }
        let c = consts();
        let mut backend = MachBackend {
            timebase: c.timebase,
            address_mask: c.address_mask,
            stack: vec![0u64; COPY_BYTES / 8].into_boxed_slice(),
            tail: vec![[0u64; std::mem::size_of::<TailRecord>() / 8]; TAIL_RECORDS].into_boxed_slice(),
            js_frames: vec![0u64; JS_FRAMES_MAX].into_boxed_slice(),
            unwinder: None,
            unwound: Unwound::default(),
            code_read_ns: 0,
            frame_pointer_code: Vec::new(),
            words: Vec::with_capacity(JS_FRAMES_MAX),
            stacks: FxHashMap::default(),
            tracked: Vec::with_capacity(64),
            scratch: Vec::with_capacity(64),
            found: Vec::with_capacity(64),
            gone: Vec::with_capacity(16),
            exits_epoch: EXITS.epoch(),
            last_read_running: false,
            is_sampler: false,
        };
        // The first call seeds the table with the threads that existed
        // before the hook; later ones keep it exact for `threadCount()`.
        backend.rescan();
        Ok(backend)
    }

    /// Merges `task_threads` into the hook's table.
    fn rescan(&mut self) {
        static MAIN_TID: OnceLock<u64> = OnceLock::new();
        let _guard = hook::RESCAN.lock().unwrap_or_else(PoisonError::into_inner);
        let table = hook::registry();
        table.snapshot(&mut self.scratch);
        self.scratch.sort_unstable_by_key(|e| e.tid);
        if threads::list(&mut self.found).is_err() {
            return;
        }
        let main_tid = *MAIN_TID.get_or_init(|| {
            // SAFETY: pthread_main_np has no preconditions.
            let caller_is_main = unsafe { sys::pthread_main_np() } == 1;
            let caller = caller_is_main.then(crate::sampler::thread_id::current);
            pick_main_tid(caller, &self.found)
        });
        merge_rescan(
            table,
            &self.scratch,
            &self.found,
            |f| threads::describe(f, main_tid),
            // A fresh reference on a name the table (or the live thread)
            // already holds: dropping it frees nothing anyone uses.
            threads::deallocate,
            |_, port| hook::release(port),
        );
    }

    /// For a thread the exit log says may have exited: retired if its exit
    /// is logged; if the log only overflowed since the thread list was
    /// taken, skipped this time and kept (the next listing tells).
    fn exited_or_unsure(&mut self, tid: u64, port: u32) -> SkipReason {
        if EXITS.contains(tid) {
            self.note_gone(tid, port);
            SkipReason::Gone
        } else {
            SkipReason::Pending
        }
    }

    fn note_gone(&mut self, tid: u64, port: u32) {
        // Outside the window: pushing may allocate.
        self.gone.push((tid, port));
        self.stacks.remove(&tid);
    }

    /// Takes in images loaded and JIT code mapped since the last look, at
    /// most every `CODE_REFRESH_NS` unless `force`. Returns whether it looked.
    fn refresh_code(&mut self, force: bool) -> bool {
        let now = self.now_ns();
        if !force && now.saturating_sub(self.code_read_ns) < CODE_REFRESH_NS {
            return false;
        }
        self.code_read_ns = now;
        let Some(u) = self.unwinder.as_mut() else { return false };
        for m in code::loaded_code(|start| u.has_module_at(start)) {
            u.add_module(m);
        }
        let jit = code::jit_regions(|r| u.has_module_in(r));
        u.set_jit_regions(jit);
        true
    }

    /// Unwinds the copy that `capture_stopped` left in `stack` and `tail`
    /// into `unwound`, on the sampler thread after the thread resumed.
    fn unwind(&mut self, regs: Registers, copy: Extent, depth: usize) -> StackEnd {
        if self.unwinder.is_none() {
            let mut u = Unwinder::new(self.address_mask);
            u.set_frame_pointer_code(self.frame_pointer_code.clone());
            self.unwinder = Some(u);
            self.refresh_code(true);
        }
        let mut end = self.unwind_once(regs, copy, depth);
        if end == StackEnd::NotExecutable && self.refresh_code(false) {
            // New JIT code or a new image: look again once.
            end = self.unwind_once(regs, copy, depth);
        }
        if end != StackEnd::NoPc {
            self.insert_leaf_caller(regs, depth);
        }
        end
    }

    fn unwind_once(&mut self, regs: Registers, copy: Extent, depth: usize) -> StackEnd {
        let copy = copy.of(&self.stack, &self.tail);
        match self.unwinder.as_mut() {
            Some(u) => u.unwind(regs, &copy, depth, &mut self.unwound),
            None => StackEnd::CopyFailed,
        }
    }

    /// Keeps what is known of the thread's stack right, by the rules of
    /// `sampler::unwind::lesson`.
    fn learn_stack(&mut self, tid: u64, regs: Registers, copy: &Extent, end: StackEnd) {
        let c = copy.of(&self.stack, &self.tail);
        let known = self.stacks.entry(tid).or_default();
        let l = lesson(&c, regs.fp, copy.to_root, known.root.is_some(), end, &self.unwound);
        known.whole |= l.copy_whole;
        if l.forget_root {
            known.root = None;
        }
        if l.learn_root.is_some() {
            known.root = l.learn_root;
        }
    }

    /// arm64: a pc in code without unwind information (JIT code) that
    /// built no frame record has its caller only in `lr`, which the
    /// frame-pointer fallback skips; it goes in as frame 1 (see
    /// `mach::first_frame`). Code with unwind information needs none of
    /// this: its table says where the return address is.
    fn insert_leaf_caller(&mut self, regs: Registers, depth: usize) {
        let covered = self.unwinder.as_ref().is_some_and(|u| u.code().has_cfi(regs.pc));
        let frames = &mut self.unwound.frames;
        if covered || frames.is_empty() {
            return;
        }
        let first_return = frames.get(1).copied().unwrap_or(0);
        let Some(caller) = leaf_caller(Arch::HOST, regs.pc, regs.lr, first_return) else { return };
        let n = frames.len();
        frames.push(0);
        let (n, _) = insert_caller(frames, n, depth, caller);
        frames.truncate(n);
        // The caller's frame pointer is the one the leaf left untouched.
        self.unwound.fps.insert(1.min(self.unwound.fps.len()), regs.fp);
        self.unwound.fps.truncate(n);
    }
}

impl Drop for MachBackend {
    fn drop(&mut self) {
        if self.is_sampler {
            SAMPLER_ACTIVE.store(false, Ordering::SeqCst);
            // The sampler is done with its snapshots; rights queued after
            // this wait for the next session's first refresh.
            RELEASES.drain(threads::deallocate);
        }
    }
}

impl Backend for MachBackend {
    fn prepare_sampler_thread(&mut self) {
        self.is_sampler = true;
        SAMPLER_ACTIVE.store(true, Ordering::SeqCst);
        // The highest non-real-time class: see docs/design/mach-suspend-window.md.
        // SAFETY: changes only the calling thread's QoS class.
        unsafe { sys::pthread_set_qos_class_self_np(sys::qos_class_t::QOS_CLASS_USER_INTERACTIVE, 0) };
    }

    fn now_ns(&self) -> u64 {
        self.timebase.ticks_to_ns(now_ticks())
    }

    fn sleep_until(&self, deadline_ns: u64) {
        // SAFETY: a plain wait; KERN_ABORTED (interrupted) just returns
        // early and the caller loops.
        let _ = unsafe { mach_wait_until(time::deadline_ticks(&self.timebase, deadline_ns)) };
    }

    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
        let table = hook::registry();
        // 1. Rights queued since the last refresh. Each was removed from the
        //    table before it was queued, so the sync below removes it from
        //    the session too, and no request runs before then.
        if self.is_sampler {
            RELEASES.drain(threads::deallocate);
        }
        // 2. Threads the last ticks found gone without an exit event.
        for &(tid, port) in &self.gone {
            if table.mark_removed(tid, port as u64) {
                hook::release(port);
            }
        }
        self.gone.clear();
        // 3. Room for the hook, and a rescan if it ran out or periodically.
        let overflowed = table.ensure_headroom(hook::HOOK_HEADROOM);
        if overflowed || full {
            self.rescan();
        }
        // 4. The session's view. The epoch is taken first: exits logged
        //    from here on are checked against this list.
        self.exits_epoch = EXITS.epoch();
        table.snapshot(&mut self.tracked);
        self.tracked.sort_unstable_by_key(|e| e.tid);
        sync_session(registry, &self.tracked, &mut self.scratch, |e| {
            if let Some(n) = threads::name(e.handle as u32) {
                e.name = n;
            }
        });
        if full {
            // What was learned of threads that have gone.
            let tracked = &self.tracked;
            self.stacks.retain(|tid, _| tracked.binary_search_by_key(tid, |e| e.tid).is_ok());
            // Threads name themselves after they start.
            for e in &self.tracked {
                if let Some(n) = threads::name(e.handle as u32) {
                    registry.update(e.tid, Some(n), None);
                }
            }
            registry.compact();
            table.compact();
        }
    }

    fn running_at_last_cpu_read(&self) -> bool {
        self.last_read_running
    }

    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
        self.last_read_running = false;
        match threads::cpu_and_state(thread.handle as u32) {
            Ok((ns, running)) => {
                self.last_read_running = running;
                Ok(Some(ns))
            }
            Err(e) if e.thread_gone() => {
                self.note_gone(thread.tid, thread.handle as u32);
                Err(ThreadGone)
            }
            // Unknown: let the idle rule treat it as running.
            Err(_) => Ok(None),
        }
    }

    fn own_cpu_ns(&self) -> u64 {
        thread_cpu_time_self()
    }

    fn current_tid(&self) -> u64 {
        crate::sampler::thread_id::current()
    }

    fn collect(&mut self, _sink: &mut dyn FnMut(Capture<'_>)) {
        // Captures are reported synchronously by `request`.
    }

    fn request(&mut self, threads: &[ThreadEntry], cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>)) {
        let depth = if cfg.native_unwinding { cfg.max_depth.min(MAX_STACK_DEPTH_MAX) } else { 1 };
        let own = own_port();
        let tb = self.timebase;
        for entry in threads {
            let (tid, port) = (entry.tid, entry.handle as thread_act_t);
            if port == MACH_PORT_NULL || port == own {
                // Never suspend ourselves: nothing would resume us. (The
                // sampler already leaves its own thread out.)
                continue;
            }
            // Another copy's sampler: were it suspending us meanwhile, each
            // would wait for the other's resume forever. A thread found
            // before it named itself is asked its name again.
            let sampler = |name: &[u8]| name == SAMPLER_THREAD_NAME.as_bytes();
            if sampler(entry.name.as_bytes())
                || (entry.name.as_bytes().is_empty() && threads::name(port).is_some_and(|n| sampler(n.as_bytes())))
            {
                continue;
            }
            if EXITS.may_have_exited(tid, self.exits_epoch) {
                let reason = self.exited_or_unsure(tid, port);
                sink(Capture::Skipped { tid, reason });
                continue;
            }
            let known = self.stacks.get(&tid).copied().unwrap_or_default();
            let t0 = now_ticks();
            let stopped = match Suspended::new(port) {
                Ok(s) => s,
                Err(e) => {
                    let reason = suspend_skip_reason(e);
                    if reason == SkipReason::Gone {
                        self.note_gone(tid, port);
                    }
                    sink(Capture::Skipped { tid, reason });
                    continue;
                }
            };
            stopped._window.fault_injection_point();
            let stopped_at = now_ticks();
            let out = Buffers { stack: &mut self.stack, tail: &mut self.tail, js: &mut self.js_frames };
            let outcome = capture_stopped(port, entry, depth, self.exits_epoch, known, self.address_mask, out);
            drop(stopped);
            let t1 = now_ticks();
            let (time_ns, stopped_ns) = (tb.ticks_to_ns(stopped_at), time::elapsed_ns(&tb, t0, t1));

            let (regs, end, copy, js_count) = match outcome {
                Stopped::Copied { regs, copy, js_count } => {
                    let end = self.unwind(regs, copy, depth);
                    self.learn_stack(tid, regs, &copy, end);
                    (regs, end, copy, js_count)
                }
                Stopped::RegistersOnly { regs, unknown_stack } => {
                    self.unwound.frames.clear();
                    self.unwound.fps.clear();
                    self.unwound.frames.push(regs.pc);
                    self.unwound.fps.push(regs.fp);
                    let end = if unknown_stack { StackEnd::CopyFailed } else { StackEnd::DepthLimit };
                    (regs, end, Extent::default(), 0)
                }
                Stopped::Gone => {
                    let reason = self.exited_or_unsure(tid, port);
                    sink(Capture::Skipped { tid, reason });
                    continue;
                }
                Stopped::StateError => {
                    sink(Capture::Stack(CapturedStack {
                        tid,
                        time_ns,
                        frames: &[],
                        end: StackEnd::NoPc,
                        stopped_ns,
                        copied_bytes: 0,
                        delivery_ns: None,
                        weight: 1,
                        off_cpu: false,
                        lr: 0,
                        runtime_frames: &[],
                        tos: 0,
                        frame_words: &[],
                    }));
                    continue;
                }
            };
            let end = if regs.pc == 0 { StackEnd::NoPc } else { end };
            // For V8: the words below each frame pointer, and the top of
            // the stack (see `mach::first_frame`), from the copy.
            let copied_words = copy.words;
            let copy = copy.of(&self.stack, &self.tail);
            self.words.clear();
            let js = JS_FRAMES.load(Ordering::Acquire) && crate::v8::thread_registered(tid);
            let mut tos = 0;
            if js && copied_words > 0 {
                // Every frame, those above a cut copy too.
                crate::v8::slots::words_below(&self.unwound.fps, |a| copy.read(a), &mut self.words);
                tos = top_of_stack_word(Arch::HOST, regs.lr, || {
                    copy.read(regs.sp).map(|w| strip_pointer_tag(w) & self.address_mask).unwrap_or(0)
                });
            }
            sink(Capture::Stack(CapturedStack {
                tid,
                time_ns,
                frames: &self.unwound.frames,
                end,
                stopped_ns,
                copied_bytes: 8 * copied_words as u32,
                delivery_ns: None,
                weight: 1,
                off_cpu: false,
                lr: regs.lr,
                runtime_frames: &self.js_frames[..js_count.min(self.js_frames.len())],
                tos,
                frame_words: &self.words,
            }));
        }
    }

    fn backend_counters(&self) -> BackendCounters {
        let bytes = std::mem::size_of_val(&*self.stack) + std::mem::size_of_val(&*self.tail);
        BackendCounters { capture_buffer_bytes: bytes as u64, ..BackendCounters::default() }
    }

    fn set_frame_pointer_code(&mut self, ranges: Vec<std::ops::Range<u64>>) {
        if let Some(u) = self.unwinder.as_mut() {
            u.set_frame_pointer_code(ranges.clone());
        }
        self.frame_pointer_code = ranges;
    }

    fn finish(&mut self, _timeout_ns: u64, _sink: &mut dyn FnMut(Capture<'_>)) {
        // Synchronous: nothing is ever in flight, and every suspended
        // thread was resumed before `request` returned.
    }
}
