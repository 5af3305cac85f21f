//! The interface between the shared sampler loop and a platform.
//!
//! A backend knows how to find the process's threads, how to stop one and
//! read its registers, and how to tell time. Everything else (which threads
//! to sample on a tick, the idle rule, deduplication, statistics) is shared
//! code in `sampler.rs`, tested on Linux and used unchanged on macOS.
//!
//! Captures may be synchronous (Mach: suspend, read state, walk, resume,
//! report, all inside `request`) or asynchronous (Linux: `request` sends
//! signals; the handlers walk; `collect` reports on the next tick). The
//! trait covers both by separating `request` from `collect`.

use super::registry::{ThreadEntry, ThreadRegistry};
use super::walker::WalkEnd;

/// How to capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureConfig {
    pub max_depth: usize,
    /// When false, only the leaf pc is recorded.
    pub native_unwinding: bool,
}

/// Why a thread produced no sample on a tick. All of these are normal
/// events, counted in `threadsSkipped`, not errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The thread exited between discovery and capture.
    Gone,
    /// The previous request to this thread has not been served yet (it is
    /// descheduled, or it blocks the sampling signal).
    Pending,
    /// The thread's stack bounds were not known yet; they are now.
    BoundsUnknown,
    /// The backend has no capacity for more threads.
    NoCapacity,
}

/// A stack captured from one thread.
#[derive(Clone, Copy, Debug)]
pub struct CapturedStack<'a> {
    pub tid: u64,
    /// When the thread was stopped, in the backend's clock.
    pub time_ns: u64,
    /// Leaf first.
    pub frames: &'a [u64],
    pub end: WalkEnd,
    /// How long the thread was stopped.
    pub stopped_ns: u64,
    /// From request to the start of the stop, when the backend knows it.
    pub delivery_ns: Option<u64>,
    /// The registers could not be read, or the stack pointer was outside
    /// the known bounds; `frames` then holds at most the pc.
    pub walk_error: bool,
    /// Frames the language runtime's own stack sampler reported for the
    /// same stop (V8's `GetStackSample`), leaf first; empty when the thread
    /// runs no runtime or naming is off. A [`StackRewrite`] merges them
    /// into `frames` before interning.
    pub runtime_frames: &'a [u64],
    /// The word at the stack pointer (0 if unknown): the return address
    /// when the thread stopped in a function that builds no frame, such as
    /// V8's baseline builtins, whose caller a frame-pointer walk skips.
    pub tos: u64,
    /// For the first frames of `frames`, the words just below each frame's
    /// frame pointer, where a runtime keeps per-frame data (V8: an
    /// interpreted frame's bytecode position); empty unless asked for.
    pub frame_words: &'a [[u64; FRAME_WORDS]],
}

/// Words kept below each frame pointer for [`CapturedStack::frame_words`].
pub const FRAME_WORDS: usize = 4;

/// A recorded frame with this bit set is not an address but an index the
/// [`StackRewrite`] that produced it gives meaning to (a JavaScript
/// function's name). User-space addresses never have the top bit set.
pub const TAGGED_FRAME: u64 = 1 << 63;

/// Turns a captured stack (native frames plus what the runtime reported)
/// into the frames to record. Runs on the sampler thread after the sampled
/// thread has resumed.
pub trait StackRewrite: Send {
    fn rewrite(&mut self, c: &CapturedStack<'_>, out: &mut Vec<u64>);

    /// Called once when the session ends.
    fn finish(&mut self) {}
}

#[derive(Clone, Copy, Debug)]
pub enum Capture<'a> {
    Stack(CapturedStack<'a>),
    Skipped { tid: u64, reason: SkipReason },
}

/// The thread is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadGone;

pub trait Backend: Send {
    /// Called once on the sampler thread before the first tick: the place to
    /// raise timer precision or scheduling priority.
    fn prepare_sampler_thread(&mut self) {}

    /// Monotonic time in nanoseconds. Sample timestamps use this clock.
    fn now_ns(&self) -> u64;

    /// Sleeps until `now_ns() >= deadline_ns`, or a little earlier if
    /// interrupted; the caller loops.
    fn sleep_until(&self, deadline_ns: u64);

    /// Brings `registry` up to date. `full` asks for a complete refresh
    /// (thread names included); otherwise a cheap one may do.
    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool);

    /// CPU time the thread has used so far, for the idle rule; `Ok(None)` if
    /// the backend cannot tell.
    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone>;

    /// CPU time a thread may gain between samples and still count as idle.
    /// Zero where stopping a thread costs it no CPU time (Mach suspend); on
    /// Linux the sampling signal itself makes the thread run briefly.
    fn idle_cpu_threshold_ns(&self) -> u64 {
        0
    }

    /// CPU time of the calling (sampler) thread.
    fn own_cpu_ns(&self) -> u64;

    /// The calling thread's `tid`, so the sampler can skip itself.
    fn current_tid(&self) -> u64;

    /// Reports captures that completed since the last call.
    fn collect(&mut self, sink: &mut dyn FnMut(Capture<'_>));

    /// Requests a capture of each thread; a synchronous backend reports them
    /// before returning.
    fn request(&mut self, threads: &[ThreadEntry], cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>));

    /// At stop: waits up to `timeout_ns` for outstanding captures, reports
    /// them, and abandons the rest safely.
    fn finish(&mut self, timeout_ns: u64, sink: &mut dyn FnMut(Capture<'_>));
}
