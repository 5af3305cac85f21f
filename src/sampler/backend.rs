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
use super::unwind::StackEnd;

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
    /// Why `frames` ends where it does.
    pub end: StackEnd,
    /// How long the thread was stopped.
    pub stopped_ns: u64,
    /// Bytes of stack copied while it was (0 where the backend walks the
    /// stack in place).
    pub copied_bytes: u32,
    /// From request to the start of the stop, when the backend knows it.
    pub delivery_ns: Option<u64>,
    /// Sampling intervals this capture stands for: more than 1 when a CPU
    /// timer expired again before its signal was handled.
    pub weight: u32,
    /// The thread was waiting in a system call when stopped, not running.
    pub off_cpu: bool,
    /// The link register when stopped (arm64), else 0: the return address
    /// of a frameless leaf function.
    pub lr: u64,
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

impl CapturedStack<'_> {
    /// The registers or the stack could not be read.
    pub fn walk_error(&self) -> bool {
        matches!(self.end, StackEnd::CopyFailed | StackEnd::NoPc)
    }
}

/// What a sample stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// CPU time: threads are sampled for the CPU time they use, and a
    /// sample stands for one interval of it. Waiting threads give none.
    #[default]
    Cpu,
    /// Wall-clock time: every thread on every tick, waiting ones included
    /// (marked idle), so blocked and idle threads show.
    Wall,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Wall => "wall",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "cpu" => Some(Mode::Cpu),
            "wall" => Some(Mode::Wall),
            _ => None,
        }
    }
}

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

/// What a backend counted over a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendCounters {
    /// Samples lost for lack of a free capture buffer.
    pub lost: u64,
    /// Stacks read from outside their thread's known stack.
    pub foreign_stacks: u64,
    /// CPU-time timers the kernel left unfired while their thread ran,
    /// fired by the sampler.
    pub starved_timers: u64,
    /// Another library replaced the sampling signal's handler.
    pub signal_taken_over: bool,
    /// Bytes reserved for capture records.
    pub capture_buffer_bytes: u64,
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
    /// Called once on the sampler thread before it looks for threads: the
    /// place to raise timer precision.
    fn prepare_sampler_thread(&mut self) {}

    /// Called once on the sampler thread after the first look for threads,
    /// before the first tick: the place to raise scheduling priority. The
    /// first look can be long (thousands of threads), and at a raised
    /// priority it would keep the thread that called `start()` off a busy
    /// machine's CPUs.
    fn sampling_started(&mut self) {}

    /// A thread was just created (see `Shared::look_for_threads`): the
    /// next `refresh_threads` must find it, even where an exit since the
    /// last refresh left the thread count unchanged.
    fn thread_created(&mut self) {}

    /// Threads were found that a refresh has not yet set up (it sets up a
    /// bounded number at a time): the loop refreshes again without sleeping.
    fn threads_pending(&self) -> bool {
        false
    }

    /// Monotonic time in nanoseconds. Sample timestamps use this clock.
    fn now_ns(&self) -> u64;

    /// Sleeps until `now_ns() >= deadline_ns`, or a little earlier if
    /// interrupted; the caller loops.
    fn sleep_until(&self, deadline_ns: u64);

    /// A function any thread may call to end the sampler thread's current
    /// or next `sleep_until` early (a wake-up that comes between two sleeps
    /// is not lost). With one, the loop sleeps until its next deadline,
    /// however far, and `stop()` calls it; without, sleeps are capped so
    /// that `stop()` is noticed.
    fn stop_waker(&self) -> Option<fn()> {
        None
    }

    /// Brings `registry` up to date. `full` asks for a complete refresh
    /// (thread names included); otherwise a cheap one may do.
    fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool);

    /// CPU time the thread has used so far, for the idle rule; `Ok(None)` if
    /// the backend cannot tell.
    fn thread_cpu_ns(&mut self, thread: &ThreadEntry) -> Result<Option<u64>, ThreadGone>;

    /// Whether the thread of the last [`Self::thread_cpu_ns`] was on a CPU
    /// then. Where the CPU clock lags a running thread (Mach adds its time
    /// at context switches), this keeps a busy thread from counting as idle.
    fn running_at_last_cpu_read(&self) -> bool {
        false
    }

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

    /// Whether the kernel can sample threads for their CPU time here
    /// (per-thread CPU-time timers). Without, CPU mode runs on the tick
    /// loop.
    fn has_cpu_timers(&self) -> bool {
        false
    }

    /// CPU mode with timers: from now on, give every thread (those known
    /// and those `refresh_threads` finds) a timer of `interval_ns` of its
    /// CPU time; captures then arrive through `collect`, which the loop
    /// calls every `drain_ns` (or sooner, when the backend wakes it).
    fn start_cpu_timers(&mut self, _interval_ns: u64, _drain_ns: u64) {}

    /// How captures that arrive through `collect` without a `request` (CPU
    /// timers) are to be taken; set before each collection.
    fn set_capture_config(&mut self, _cfg: CaptureConfig) {}

    /// Sets code ranges that keep frame pointers without unwind information
    /// (V8's builtins), for the unwinder.
    fn set_frame_pointer_code(&mut self, _ranges: Vec<std::ops::Range<u64>>) {}

    /// Counters the backend keeps itself, added to the session's at the end.
    fn backend_counters(&self) -> BackendCounters {
        BackendCounters::default()
    }
}
