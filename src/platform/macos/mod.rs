//! The macOS backend: Mach thread suspension on x86_64 and arm64.
//!
//! Each tick the sampler thread, for every thread that ran since its last
//! sample, calls `thread_suspend`, `thread_get_state`, the shared
//! `walk_stack` into a buffer preallocated here, and `thread_resume`; the
//! capture is reported only after the resume. This module only makes system
//! calls; every decision is in [`crate::platform::mach_logic`], which is
//! unit-tested on Linux.
//!
//! # Thread tracking
//!
//! A pthread introspection hook ([`hook`]) tracks threads in a process-wide
//! registry, which `refresh_threads` copies into the session's registry.
//! How, and why:
//!
//! - **Existing threads.** The hook only reports threads that start after it
//!   is installed, but Node's main thread, the libuv pool and V8's workers
//!   exist when the addon loads. So the registry is seeded with
//!   `task_threads` right after installation, and rescanned every full
//!   refresh (1 s) and whenever the hook had to refuse a thread for lack of
//!   preallocated room. Rescans also catch threads that never produce hook
//!   events (raw Mach threads) and retire those that vanished without one.
//!   Every right `task_threads` returns that we do not keep is released, and
//!   so is the array itself.
//! - **Port names.** The registry keeps its own send right for each thread.
//!   libpthread's name for a thread is released when the thread exits, after
//!   which the kernel may give the same name to a new thread; the sampler
//!   would then suspend the wrong thread and walk it with the old thread's
//!   stack bounds. Our own right keeps the name a dead name instead, so
//!   calls on it fail with `MACH_SEND_INVALID_DEST`. While a sampler runs,
//!   rights are released only by the sampler thread itself, between ticks,
//!   once no snapshot can refer to them (`mach_logic::PortQueue`).
//! - **Exiting threads.** The kernel unmaps a thread's stack in
//!   `__bsdthread_terminate`, after the THREAD_TERMINATE hook, and a thread
//!   can be suspended in between. Walking its stack then would fault. The
//!   hook therefore logs every exit (`mach_logic::ExitLog`), and after a
//!   successful `thread_suspend` the sampler checks the log: a thread that
//!   had not logged its exit when it stopped still has its stack, and stays
//!   stopped while it is walked.
//! - **No uninstall.** The hook is never removed (see [`hook`]).
//!
//! # The stopped window
//!
//! From a successful `thread_suspend` to `thread_resume` the target may hold
//! any lock (malloc's, dyld's, libpthread's list lock), so the sampler does
//! nothing there that allocates, locks, logs, or goes through a lazily bound
//! symbol: it reads the exit log (atomics), calls `thread_get_state` and
//! `mach_absolute_time`, strips pointer tags and walks within the thread's
//! stack bounds. No function the window, the hook or the tick calls is
//! bound lazily: dyld binds them all when it loads the addon (Apple's ld
//! links with `-bind_at_load`, see build.rs; the zig-linked builds call
//! libSystem through GOT entries, see scripts/build-darwin.sh), which
//! tests/macho.rs checks in the built files. Each is also called once when
//! the hook is installed ([`hook`]'s `warm_up`), which binds it early in a
//! build linked some other way. A `StoppedWindow` guard spans the window
//! so that `MACHSAMPLER_ALLOC_CHECK=1` catches any allocation in it.
//!
//! Errors: `KERN_TERMINATED`, `KERN_INVALID_ARGUMENT` and
//! `MACH_SEND_INVALID_DEST` from any call mean the thread is gone and are
//! reported as skipped. Once `thread_suspend` has succeeded the thread is
//! resumed on every path. If `thread_get_state` fails for another reason
//! (not expected natively), the thread is resumed and an empty stack with
//! `walk_error` is reported, so the failure shows in `walkErrors` rather
//! than disappearing among the normal skips. A stack pointer outside the
//! thread's known bounds (a thread that is not a pthread, or on an
//! alternate signal stack) gives a pc-only stack, also with `walk_error`.
//!
//! # Architectures
//!
//! x86_64 reads `x86_THREAD_STATE64` (rip, rsp, rbp); arm64 reads
//! `ARM_THREAD_STATE64` (pc, sp, fp, lr). The SDK's
//! `arm_thread_state64_get_*` accessors are C macros; our build is plain
//! arm64, for which the kernel returns the registers unsigned, but return
//! addresses (in lr and in frame records) pushed by the arm64e system
//! libraries carry pointer-authentication bits. These are stripped from the
//! registers and from every recorded return address, masking to the
//! virtual-address size from `machdep.virtual_address_size` as samply does:
//! the shared walker keeps 48 bits, but with 47-bit addresses bit 47 is
//! already part of the PAC field.
//!
//! `lr` is not reported as a frame. It is the caller of a leaf function only
//! until that function saves it in its frame record, and without unwind
//! information we cannot tell whether it has; adding it would duplicate the
//! caller in most samples to fix the few taken in leaf functions.
//!
//! # Idle threads, timing, Rosetta
//!
//! A thread's CPU time (`thread_info(THREAD_BASIC_INFO)`, 1 µs resolution)
//! drives the shared idle rule: a thread that has not run since its last
//! sample is not suspended again. Suspension costs the target no CPU time,
//! so the idle threshold is zero. Ticks sleep with `mach_wait_until` on
//! absolute deadlines (`mach_logic::deadline_ticks`).
//!
//! The sampler thread runs at the `USER_INTERACTIVE` QoS class, not under
//! `THREAD_TIME_CONSTRAINT_POLICY`. The class gives it the highest non-real-
//! time priority and the smallest timer leeway, which is what tick accuracy
//! needs: deadlines are absolute, so wake-up jitter does not accumulate. A
//! real-time policy needs a per-period computation budget, which a tick does
//! not have (it grows with the number of running threads), and it would
//! compete with the host's own real-time threads: Electron apps play audio,
//! and CoreAudio's I/O thread must not wait for a profiler.
//!
//! Under Rosetta `thread_get_state` is unreliable (it can fail or hang on
//! the translator's threads), so `new()` refuses with `ENOTSUP`. So it does
//! in a child forked without exec from a process where the hook was
//! installed: the child inherits the registry but not the threads or port
//! names in it (Node and Electron never do this; they spawn).

pub mod hook;
pub mod modules;
pub mod threads;

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, PoisonError};

use mach2::kern_return::{kern_return_t, KERN_SUCCESS};
use mach2::mach_time::{mach_absolute_time, mach_timebase_info, mach_wait_until};
use mach2::mach_types::thread_act_t;
use mach2::message::mach_msg_type_number_t;
use mach2::port::MACH_PORT_NULL;
use mach2::thread_act::{thread_get_state, thread_resume, thread_suspend};
use mach2::thread_status::thread_state_t;

use crate::sampler::backend::{Backend, Capture, CaptureConfig, CapturedStack, SkipReason, ThreadGone, FRAME_WORDS};
use crate::sampler::error::SamplerError;
use crate::sampler::options::MAX_STACK_DEPTH_MAX;
use crate::sampler::stopped_window::StoppedWindow;
/// JavaScript frames kept per sample (from V8's `GetStackSample`).
const JS_FRAMES_MAX: usize = 256;
use crate::platform::mach_logic::{self as logic, FoundThread, KernOutcome};
use crate::sampler::registry::{ThreadEntry, ThreadRegistry, THREAD_NAME_MAX};
use crate::sampler::timebase::Timebase;
use crate::sampler::unwind::StackEnd;
use crate::sampler::walker::{strip_pointer_tag, walk_stack, walk_stack_visit, Registers, StackBounds, Walk};

use hook::{EXITS, RELEASES, SAMPLER_ACTIVE};

// The shared logic hard-codes these so it builds on Linux; hold it to the
// real values.
const _: () = {
    assert!(logic::KERN_SUCCESS == KERN_SUCCESS);
    assert!(logic::KERN_INVALID_ARGUMENT == mach2::kern_return::KERN_INVALID_ARGUMENT);
    assert!(logic::KERN_TERMINATED == mach2::kern_return::KERN_TERMINATED);
    assert!(logic::MACH_SEND_INVALID_DEST == mach2::message::MACH_SEND_INVALID_DEST);
    assert!(libc::PTHREAD_INTROSPECTION_THREAD_START == 2);
    assert!(libc::PTHREAD_INTROSPECTION_THREAD_TERMINATE == 3);
    assert!(libc::MAXTHREADNAMESIZE == THREAD_NAME_MAX);
    assert!(libc::THREAD_BASIC_INFO_COUNT == 10);
};

#[cfg(target_arch = "aarch64")]
mod arch {
    pub use mach2::structs::arm_thread_state64_t as ThreadState;
    pub use mach2::thread_status::ARM_THREAD_STATE64 as FLAVOR;
    /// 68 words: 29 x-registers, fp, lr, sp, pc (u64), cpsr and a pad (u32).
    pub const STATE_COUNT: u32 = (std::mem::size_of::<ThreadState>() / 4) as u32;
    const _: () = assert!(STATE_COUNT == 68);

    pub fn registers(s: &ThreadState) -> crate::sampler::walker::Registers {
        crate::sampler::walker::Registers { pc: s.__pc, sp: s.__sp, fp: s.__fp, lr: s.__lr }
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    pub use mach2::structs::x86_thread_state64_t as ThreadState;
    pub use mach2::thread_status::x86_THREAD_STATE64 as FLAVOR;
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
    /// Applied to registers and recorded frames; see the module docs.
    address_mask: u64,
}

fn consts() -> &'static Consts {
    static CONSTS: OnceLock<Consts> = OnceLock::new();
    CONSTS.get_or_init(|| {
        let mut info = mach_timebase_info { numer: 0, denom: 0 };
        // SAFETY: `info` is a valid out-pointer.
        let kr = unsafe { mach_timebase_info(&mut info) };
        let timebase = if kr == KERN_SUCCESS { Timebase::new(info.numer, info.denom) } else { Timebase::IDENTITY };
        let address_mask = if cfg!(target_arch = "aarch64") {
            let (rc, bits) = sysctl_int(c"machdep.virtual_address_size");
            logic::va_mask(logic::interpret_va_bits(rc, bits))
        } else {
            // No pointer authentication on x86_64; the walker's 48-bit mask
            // already covers every user address.
            u64::MAX
        };
        Consts { timebase, address_mask }
    })
}

/// Reads an integer sysctl: (return code, value).
fn sysctl_int(name: &std::ffi::CStr) -> (c_int, c_int) {
    let mut value: c_int = 0;
    let mut size = std::mem::size_of::<c_int>();
    // SAFETY: `name` is NUL-terminated; `value` and `size` describe a
    // writable c_int; no new value is set.
    let rc = unsafe {
        libc::sysctlbyname(
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
    logic::is_translated(rc, value)
}

fn now_ticks() -> u64 {
    // SAFETY: reads the commpage clock; no arguments, no failure.
    unsafe { mach_absolute_time() }
}

/// The calling thread's own port name. For the calling thread libpthread
/// reads its own struct: no lock, no reference added.
fn own_port() -> thread_act_t {
    // SAFETY: pthread_self has no preconditions; see above.
    unsafe { libc::pthread_mach_thread_np(libc::pthread_self()) }
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
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// What happened to a thread between suspend and resume.
enum Stopped {
    Walked {
        walk: Walk,
        walk_error: bool,
        /// JavaScript frames V8 reported (in the backend's `js_frames`).
        js_count: usize,
        /// The word at the stack pointer (see `CapturedStack::tos`).
        tos: u64,
        /// Frames with words in the backend's `words`.
        words_count: usize,
    },
    /// It had logged its exit, or `thread_get_state` says it is gone.
    Gone,
    /// `thread_get_state` failed otherwise.
    StateError,
}

/// Reads the registers of a suspended thread.
#[inline(always)]
fn read_registers(port: thread_act_t) -> Result<Registers, kern_return_t> {
    let mut state = arch::ThreadState::default();
    let mut count: mach_msg_type_number_t = arch::STATE_COUNT;
    // SAFETY: `state` is a thread-state struct of exactly `count` words for
    // this flavor; the kernel writes at most `count` words and updates it.
    let kr = unsafe { thread_get_state(port, arch::FLAVOR, &mut state as *mut _ as thread_state_t, &mut count) };
    if kr != KERN_SUCCESS {
        return Err(kr);
    }
    if count != arch::STATE_COUNT {
        // A short state would leave registers unset; not expected natively.
        return Err(mach2::kern_return::KERN_FAILURE);
    }
    Ok(arch::registers(&state))
}

/// Whether to ask V8 for the JavaScript frames of stopped threads.
static JS_FRAMES: AtomicBool = AtomicBool::new(false);

/// Turns V8 JavaScript frame capture on or off.
pub fn set_js_frames(on: bool) {
    JS_FRAMES.store(on, Ordering::Release);
}

/// The work inside the stopped window. No allocation, no lock, no lazily
/// bound call: atomics, `thread_get_state`, the walk, and V8's own stack
/// sampler (async-signal-safe by design; see `crate::v8::sample`).
#[inline(always)]
fn capture_stopped(
    port: thread_act_t,
    entry: &ThreadEntry,
    depth: usize,
    mask: u64,
    frames: &mut [u64],
    js: &mut [u64],
    words: &mut [[u64; FRAME_WORDS]],
) -> Stopped {
    if EXITS.contains(entry.tid) {
        // It stopped after its exit hook: its stack may already be unmapped.
        return Stopped::Gone;
    }
    let regs = match read_registers(port) {
        Ok(r) => logic::strip_registers(r, mask),
        Err(kr) => {
            return match logic::classify(kr) {
                KernOutcome::Gone => Stopped::Gone,
                _ => Stopped::StateError,
            }
        }
    };
    let bounds = entry.stack;
    if bounds.contains(regs.sp) {
        // JavaScript threads also keep the words below each frame pointer
        // (see `crate::v8::slots`); GetStackSample runs only until the
        // frame layout is learned.
        let js_thread = JS_FRAMES.load(Ordering::Acquire) && depth > 1 && crate::v8::thread_registered(entry.tid);
        let mut words_count = 0;
        let walk = if js_thread {
            walk_stack_visit(&regs, bounds, depth, frames, &mut |i, fp| {
                if let Some(w) = words.get_mut(i) {
                    crate::v8::slots::read(fp, bounds, w);
                    words_count = i + 1;
                }
            })
        } else {
            walk_stack(&regs, bounds, depth, frames)
        };
        let (js_count, tos) = if js_thread {
            let count = if crate::v8::slots::learned().is_none() {
                let limit = depth.min(js.len());
                crate::v8::sample_js_stopped_thread(entry.tid, &regs, &mut js[..limit]).count
            } else {
                0
            };
            let tos = if regs.sp.checked_add(8).is_some_and(|end| end <= bounds.hi) {
                // SAFETY: the 8 bytes at sp lie within the thread's stack
                // bounds, which contain sp; the thread is suspended.
                strip_pointer_tag(unsafe { core::ptr::read_volatile(regs.sp as *const u64) }) & mask
            } else {
                0
            };
            (count, tos)
        } else {
            (0, 0)
        };
        Stopped::Walked { walk, walk_error: false, js_count, tos, words_count }
    } else {
        // Unknown stack: record the pc, read no memory.
        Stopped::Walked {
            walk: walk_stack(&regs, StackBounds::EMPTY, depth.min(1), frames),
            walk_error: true,
            js_count: 0,
            tos: 0,
            words_count: 0,
        }
    }
}

pub struct MachBackend {
    timebase: Timebase,
    address_mask: u64,
    /// Walk output, preallocated: the window cannot allocate.
    frames: Box<[u64]>,
    /// V8's JavaScript frames, preallocated likewise.
    js_frames: Box<[u64]>,
    /// Words below each frame pointer, preallocated likewise.
    words: Box<[[u64; FRAME_WORDS]]>,
    /// Scratch: the hook registry's live entries, sorted by tid.
    tracked: Vec<ThreadEntry>,
    /// Scratch for `sync_session` and rescans.
    scratch: Vec<ThreadEntry>,
    found: Vec<FoundThread>,
    /// Threads the sampler found gone, with their port, to retire at the
    /// next refresh.
    gone: Vec<(u64, u32)>,
    /// Set on the sampler thread's backend by `prepare_sampler_thread`.
    is_sampler: bool,
}

impl MachBackend {
    pub fn new() -> Result<Self, SamplerError> {
        if is_translated() {
            return Err(logic::rosetta_error());
        }
        hook::ensure_installed();
        if hook::in_forked_child() {
            return Err(logic::forked_child_error());
        }
        let c = consts();
        let mut backend = MachBackend {
            timebase: c.timebase,
            address_mask: c.address_mask,
            frames: vec![0u64; MAX_STACK_DEPTH_MAX].into_boxed_slice(),
            js_frames: vec![0u64; JS_FRAMES_MAX].into_boxed_slice(),
            words: vec![[0u64; FRAME_WORDS]; JS_FRAMES_MAX].into_boxed_slice(),
            tracked: Vec::with_capacity(64),
            scratch: Vec::with_capacity(64),
            found: Vec::with_capacity(64),
            gone: Vec::with_capacity(16),
            is_sampler: false,
        };
        // The first call seeds the registry with the threads that existed
        // before the hook; later ones keep it exact for `threadCount()`.
        backend.rescan();
        Ok(backend)
    }

    /// Merges `task_threads` into the hook's registry.
    fn rescan(&mut self) {
        static MAIN_TID: OnceLock<u64> = OnceLock::new();
        let _guard = hook::RESCAN.lock().unwrap_or_else(PoisonError::into_inner);
        let reg = hook::registry();
        reg.snapshot(&mut self.scratch);
        self.scratch.sort_unstable_by_key(|e| e.tid);
        if threads::list(&mut self.found).is_err() {
            return;
        }
        let main_tid = *MAIN_TID.get_or_init(|| {
            // SAFETY: pthread_main_np has no preconditions.
            let caller_is_main = unsafe { libc::pthread_main_np() } == 1;
            let caller = caller_is_main.then(crate::sampler::thread_id::current);
            logic::pick_main_tid(caller, &self.found)
        });
        logic::merge_rescan(
            reg,
            &self.scratch,
            &self.found,
            |f| threads::describe(f, main_tid),
            // A fresh reference on a name the registry (or the live thread)
            // already holds: dropping it frees nothing anyone uses.
            threads::deallocate,
            |_, port| hook::release(port),
        );
    }

    fn note_gone(&mut self, tid: u64, port: u32) {
        // Outside the window: pushing may allocate.
        self.gone.push((tid, port));
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
        // See the module docs for why this QoS class and not real-time.
        // SAFETY: changes only the calling thread's QoS class.
        unsafe { libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_USER_INTERACTIVE, 0) };
    }

    fn now_ns(&self) -> u64 {
        self.timebase.ticks_to_ns(now_ticks())
    }

    fn sleep_until(&self, deadline_ns: u64) {
        // SAFETY: a plain wait; KERN_ABORTED (interrupted) just returns
        // early and the caller loops.
        unsafe { mach_wait_until(logic::deadline_ticks(&self.timebase, deadline_ns)) };
    }

    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
        let reg = hook::registry();
        // 1. Rights queued since the last refresh. Each was removed from the
        //    hook registry before it was queued, so the sync below removes
        //    it from the session too, and no request runs before then.
        if self.is_sampler {
            RELEASES.drain(threads::deallocate);
        }
        // 2. Threads the last ticks found gone without an exit event.
        for &(tid, port) in &self.gone {
            if reg.mark_removed(tid) {
                hook::release(port);
            }
        }
        self.gone.clear();
        // 3. Room for the hook, and a rescan if it ran out or periodically.
        let overflowed = reg.ensure_headroom(hook::HOOK_HEADROOM);
        if overflowed || full {
            self.rescan();
        }
        // 4. The session's view.
        reg.snapshot(&mut self.tracked);
        self.tracked.sort_unstable_by_key(|e| e.tid);
        logic::sync_session(registry, &self.tracked, &mut self.scratch, |e| {
            if let Some(n) = threads::name(e.handle as u32) {
                e.name = n;
            }
        });
        if full {
            // Threads name themselves after they start.
            for e in &self.tracked {
                if let Some(n) = threads::name(e.handle as u32) {
                    registry.update(e.tid, Some(n), None);
                }
            }
            registry.compact();
            reg.compact();
        }
    }

    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
        match threads::cpu_ns(thread.handle as u32) {
            Ok(ns) => Ok(Some(ns)),
            Err(kr) => match logic::classify(kr) {
                KernOutcome::Gone => {
                    self.note_gone(thread.tid, thread.handle as u32);
                    Err(ThreadGone)
                }
                // Unknown: let the idle rule treat it as running.
                _ => Ok(None),
            },
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
        let depth = if cfg.native_unwinding { cfg.max_depth } else { 1 }.min(self.frames.len());
        let own = own_port();
        let tb = self.timebase;
        let mask = self.address_mask;
        for entry in threads {
            let (tid, port) = (entry.tid, entry.handle as thread_act_t);
            if port == MACH_PORT_NULL || port == own {
                // Never suspend ourselves: nothing would resume us. (The
                // sampler already leaves its own thread out.)
                continue;
            }
            if EXITS.contains(tid) {
                self.note_gone(tid, port);
                sink(Capture::Skipped { tid, reason: SkipReason::Gone });
                continue;
            }
            let t0 = now_ticks();
            // SAFETY: `port` is a thread port this process holds a right to;
            // it is not the calling thread (checked above).
            let kr = unsafe { thread_suspend(port) };
            if kr != KERN_SUCCESS {
                let reason = logic::suspend_skip_reason(kr);
                if reason == SkipReason::Gone {
                    self.note_gone(tid, port);
                }
                sink(Capture::Skipped { tid, reason });
                continue;
            }
            let window = StoppedWindow::enter();
            window.fault_injection_point();
            let stopped_at = now_ticks();
            let outcome =
                capture_stopped(port, entry, depth, mask, &mut self.frames, &mut self.js_frames, &mut self.words);
            // SAFETY: undoes the suspend above, on every path. A failure
            // means the thread died while stopped, which leaves nothing to
            // resume.
            unsafe { thread_resume(port) };
            drop(window);
            let t1 = now_ticks();

            match outcome {
                Stopped::Walked { walk, walk_error, js_count, tos, words_count } => {
                    let frames = &mut self.frames[..walk.depth];
                    logic::mask_frames(frames, mask);
                    let js = &self.js_frames[..js_count.min(self.js_frames.len())];
                    sink(Capture::Stack(CapturedStack {
                        tid,
                        time_ns: tb.ticks_to_ns(stopped_at),
                        frames,
                        end: if walk_error { StackEnd::CopyFailed } else { walk.end.into() },
                        stopped_ns: logic::elapsed_ns(&tb, t0, t1),
                        delivery_ns: None,
                        weight: 1,
                        off_cpu: false,
                        lr: 0,
                        runtime_frames: js,
                        tos,
                        frame_words: &self.words[..words_count.min(self.words.len())],
                    }));
                }
                Stopped::Gone => {
                    self.note_gone(tid, port);
                    sink(Capture::Skipped { tid, reason: SkipReason::Gone });
                }
                Stopped::StateError => sink(Capture::Stack(CapturedStack {
                    tid,
                    time_ns: tb.ticks_to_ns(stopped_at),
                    frames: &[],
                    end: StackEnd::NoPc,
                    stopped_ns: logic::elapsed_ns(&tb, t0, t1),
                    delivery_ns: None,
                    weight: 1,
                    off_cpu: false,
                    lr: 0,
                    runtime_frames: &[],
                    tos: 0,
                    frame_words: &[],
                })),
            }
        }
    }

    fn finish(&mut self, _timeout_ns: u64, _sink: &mut dyn FnMut(Capture<'_>)) {
        // Synchronous: nothing is ever in flight, and every suspended
        // thread was resumed before `request` returned.
    }
}
