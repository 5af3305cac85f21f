//! Taking a thread's JS frames with `v8::Isolate::GetStackSample`, while
//! the thread is stopped: in its own signal handler (Linux) or suspended
//! (macOS).
//!
//! The call allocates nothing and takes no lock; V8's own profiler makes it
//! from its SIGPROF handler. What this module guarantees: the isolate is
//! the stopped thread's own and alive (the registry, cross-checked with
//! `TryGetCurrent()` on the current thread), the API was resolved before
//! (no `dlsym` here), and the version's `SampleInfo` layout is known. The
//! evidence, for both ways of stopping a thread:
//! `docs/design/getstacksample-when-stopped.md`.

use std::ffi::c_void;

use super::abi::{state_tag, Layout, RegisterState, SampleInfoBuf, STATE_UNSET};
use super::api::{api_if_resolved, Api, Isolate};
use super::registry;
use crate::sampler::walker::{strip_pointer_tag, Registers};

const _: () = assert!(std::mem::size_of::<u64>() == std::mem::size_of::<*mut c_void>());

/// What V8 was doing when the thread was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmState {
    Js,
    Gc,
    Parser,
    BytecodeCompiler,
    Compiler,
    Other,
    External,
    AtomicsWait,
    Idle,
    Logging,
    IdleExternal,
    Unknown(u16),
}

impl VmState {
    pub fn from_tag(tag: u16) -> VmState {
        match tag {
            state_tag::JS => VmState::Js,
            state_tag::GC => VmState::Gc,
            state_tag::PARSER => VmState::Parser,
            state_tag::BYTECODE_COMPILER => VmState::BytecodeCompiler,
            state_tag::COMPILER => VmState::Compiler,
            state_tag::OTHER => VmState::Other,
            state_tag::EXTERNAL => VmState::External,
            state_tag::ATOMICS_WAIT => VmState::AtomicsWait,
            state_tag::IDLE => VmState::Idle,
            state_tag::LOGGING => VmState::Logging,
            state_tag::IDLE_EXTERNAL => VmState::IdleExternal,
            other => VmState::Unknown(other),
        }
    }

    /// V8's own name for the state (as in `--prof` logs).
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Js => "JS",
            VmState::Gc => "GC",
            VmState::Parser => "PARSER",
            VmState::BytecodeCompiler => "BYTECODE_COMPILER",
            VmState::Compiler => "COMPILER",
            VmState::Other => "OTHER",
            VmState::External => "EXTERNAL",
            VmState::AtomicsWait => "ATOMICS_WAIT",
            VmState::Idle => "IDLE",
            VmState::Logging => "LOGGING",
            VmState::IdleExternal => "IDLE_EXTERNAL",
            VmState::Unknown(_) => "UNKNOWN",
        }
    }
}

/// Why no JS frames were taken, or that they were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleStatus {
    /// `GetStackSample` ran; `count` frames (maybe 0) are in `out`.
    Sampled,
    /// The thread has no registered isolate (not a JS thread, or the addon
    /// was not loaded in its environment).
    NoIsolate,
    /// The registered isolate is not the thread's current one (a stale
    /// entry): nothing was called.
    Mismatch,
    /// No supported V8 API in this process (not resolved, or unknown
    /// version), or the interpreted-frame layout could not be learned
    /// (`slots::failed`): `GetStackSample` is not called.
    Unsupported,
}

/// The result of [`sample_js`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsSample {
    pub status: SampleStatus,
    /// Frames written to `out[..count]`, leaf first: for compiled code the
    /// frame's pc, for interpreted frames the address of the current
    /// bytecode (inside the frame's BytecodeArray).
    pub count: usize,
    pub vm_state: VmState,
    /// The external (native) callback V8 was in, if any (its entry address).
    pub external_callback: u64,
    /// The isolate sampled (0 if none).
    pub isolate: u64,
}

impl JsSample {
    const fn empty(status: SampleStatus) -> Self {
        JsSample { status, count: 0, vm_state: VmState::Other, external_callback: 0, isolate: 0 }
    }
}

/// Calls `GetStackSample` for `isolate` with `regs`.
///
/// # Safety
/// `isolate` must be the live isolate of the thread whose registers these
/// are, and that thread must be the caller (signal handler) or stopped.
#[inline]
unsafe fn call(api: &Api, isolate: *mut Isolate, regs: &Registers, out: &mut [u64]) -> JsSample {
    let state = RegisterState {
        pc: strip_pointer_tag(regs.pc) as *mut c_void,
        sp: strip_pointer_tag(regs.sp) as *mut c_void,
        fp: strip_pointer_tag(regs.fp) as *mut c_void,
        lr: strip_pointer_tag(regs.lr) as *mut c_void,
        callee_saved: std::ptr::null_mut(),
    };
    let mut info = SampleInfoBuf::new();
    // SAFETY: per the contract the isolate is live and belongs to the
    // stopped/current thread; `state` and `info` are valid for the call;
    // `out` has room for `out.len()` pointer-sized frames (u64 is pointer
    // sized, asserted above) and V8 writes at most `frames_limit` of them.
    unsafe {
        (api.get_stack_sample)(isolate, &state, out.as_mut_ptr().cast::<*mut c_void>(), out.len(), info.as_mut_ptr())
    };
    let Some(f) = info.read(api.layout) else { return JsSample::empty(SampleStatus::Unsupported) };
    let count = f.frames_count.min(out.len());
    let vm_state =
        if f.vm_state == STATE_UNSET { VmState::Unknown(STATE_UNSET) } else { VmState::from_tag(f.vm_state) };
    // In GC V8 returns before walking; report no frames whatever is in out.
    let count = if vm_state == VmState::Gc { 0 } else { count };
    JsSample {
        status: SampleStatus::Sampled,
        count,
        vm_state,
        external_callback: f.external_callback_entry,
        isolate: isolate as u64,
    }
}

/// Takes the JS frames of the **calling** thread from its interrupted
/// registers: for the Linux signal handler, which runs on the sampled
/// thread. Async-signal-safe: no allocation, no lock, no panic; a few atomic
/// loads to find the isolate, then V8's own sampler.
///
/// The isolate comes from the registry (by `pthread_self()`) and must also
/// be V8's current isolate for this thread (`Isolate::TryGetCurrent`), so a
/// stale entry is never used.
#[inline]
pub fn sample_js(regs: &Registers, out: &mut [u64]) -> JsSample {
    let Some(api) = api_if_resolved() else { return JsSample::empty(SampleStatus::Unsupported) };
    if api.layout == Layout::Unsupported || super::slots::failed() {
        return JsSample::empty(SampleStatus::Unsupported);
    }
    let Some(isolate) = registry::isolate_for_pthread(registry::pthread_key()) else {
        return JsSample::empty(SampleStatus::NoIsolate);
    };
    // SAFETY: TryGetCurrent only reads a thread-local of the node binary.
    let current = unsafe { (api.try_get_current)() };
    if current != isolate {
        return JsSample::empty(SampleStatus::Mismatch);
    }
    // SAFETY: the isolate is registered for, and current on, this thread,
    // which is running this code (so it is neither exiting nor disposing of
    // the isolate: that happens only after its cleanup hook unregistered).
    unsafe { call(api, isolate, regs, out) }
}

/// Takes the JS frames of **another** thread `tid`, which the caller has
/// stopped (macOS: between `thread_suspend` and `thread_resume`), from its
/// registers. Must be called only while the thread is stopped; the isolate
/// lookup must happen inside that window too (this function does it).
/// Async-signal-safe, like [`sample_js`], but without the `TryGetCurrent`
/// check (that only answers for the calling thread).
#[inline]
pub fn sample_js_stopped_thread(tid: u64, regs: &Registers, out: &mut [u64]) -> JsSample {
    let Some(api) = api_if_resolved() else { return JsSample::empty(SampleStatus::Unsupported) };
    if api.layout == Layout::Unsupported || super::slots::failed() {
        return JsSample::empty(SampleStatus::Unsupported);
    }
    let Some(isolate) = registry::isolate_for_tid(tid) else { return JsSample::empty(SampleStatus::NoIsolate) };
    // SAFETY: the thread is stopped (caller's contract) with its isolate
    // still registered, so it has not reached its cleanup hook, and the
    // isolate outlives the stop.
    unsafe { call(api, isolate, regs, out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_and_name() {
        assert_eq!(VmState::from_tag(0), VmState::Js);
        assert_eq!(VmState::from_tag(1), VmState::Gc);
        assert_eq!(VmState::from_tag(6), VmState::External);
        assert_eq!(VmState::from_tag(10), VmState::IdleExternal);
        assert_eq!(VmState::from_tag(77), VmState::Unknown(77));
        assert_eq!(VmState::Gc.as_str(), "GC");
        assert_eq!(VmState::Unknown(3).as_str(), "UNKNOWN");
    }

    #[test]
    fn without_v8_nothing_is_called() {
        let regs = Registers { pc: 1, sp: 2, fp: 3, lr: 0 };
        let mut out = [0u64; 8];
        let s = sample_js(&regs, &mut out);
        assert_eq!((s.status, s.count), (SampleStatus::Unsupported, 0));
        let s = sample_js_stopped_thread(1, &regs, &mut out);
        assert_eq!((s.status, s.count), (SampleStatus::Unsupported, 0));
        assert_eq!(out, [0; 8]);
    }
}
