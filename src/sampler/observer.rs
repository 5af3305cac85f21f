//! A second consumer of the sampler thread.
//!
//! There is one sampler thread per process (two would sample, and on macOS
//! suspend, each other). Besides the session it records, the loop serves
//! an [`Observer`]: the stall watcher. The observer sees every sample the
//! loop takes, session or not, and may ask for wake-ups and for captures of
//! its own (a stalled thread sampled faster). Captures it asked for are
//! its alone: they never enter the session's recording or statistics, so
//! a `start()`/`stop()` profile is the same with or without an observer.
//!
//! Observer methods run on the sampler thread, outside any stopped window.

use super::registry::ThreadEntry;

/// What a sample stands for, as the loop took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleKind {
    /// A CPU-mode sample: `ns` of the thread's CPU time.
    Cpu { ns: u64 },
    /// A wall-mode sample: `ns` of wall-clock time.
    Wall { ns: u64 },
    /// A capture the observer asked for: a moment, standing for nothing
    /// yet (the observer weighs it).
    Requested,
}

/// One sample, for an observer.
#[derive(Clone, Copy, Debug)]
pub struct ObservedSample<'a> {
    pub tid: u64,
    pub thread_name: &'a str,
    pub is_main: bool,
    /// When the thread was stopped (backend clock).
    pub time_ns: u64,
    /// Leaf first, as the session would record it (JavaScript frames merged).
    pub frames: &'a [u64],
    pub kind: SampleKind,
    /// The thread was not running: waiting in a system call, or carried
    /// forward as idle without being stopped.
    pub idle: bool,
}

pub trait Observer: Send + Sync {
    /// Called when the loop wakes for the observer (at the deadline it last
    /// returned) and on every tick, after captures were collected. Pushes
    /// onto `capture` the threads of `live` to capture now. Returns when it
    /// wants to run next, in the backend's clock (`u64::MAX`: only on ticks).
    fn on_wake(&self, now_ns: u64, live: &[ThreadEntry], capture: &mut Vec<ThreadEntry>) -> u64;

    /// Every sample the loop takes.
    fn on_sample(&self, sample: &ObservedSample<'_>);

    /// A wall-mode tick found thread `tid` idle: it is where its previous
    /// sample was, for `ns` more of wall-clock time.
    fn on_idle(&self, _tid: u64, _time_ns: u64, _ns: u64) {}
}

/// An observer set once, possibly after the loop started: loops are given
/// the slot, so an observer set while a session runs is served at once.
/// Empty, it costs a load per call.
#[derive(Default)]
pub struct ObserverSlot(std::sync::OnceLock<std::sync::Arc<dyn Observer>>);

impl ObserverSlot {
    /// Sets the observer; false if one was set already.
    pub fn set(&self, observer: std::sync::Arc<dyn Observer>) -> bool {
        self.0.set(observer).is_ok()
    }

    pub fn is_set(&self) -> bool {
        self.0.get().is_some()
    }
}

impl Observer for ObserverSlot {
    fn on_wake(&self, now_ns: u64, live: &[ThreadEntry], capture: &mut Vec<ThreadEntry>) -> u64 {
        self.0.get().map_or(u64::MAX, |o| o.on_wake(now_ns, live, capture))
    }

    fn on_sample(&self, sample: &ObservedSample<'_>) {
        if let Some(o) = self.0.get() {
            o.on_sample(sample)
        }
    }

    fn on_idle(&self, tid: u64, time_ns: u64, ns: u64) {
        if let Some(o) = self.0.get() {
            o.on_idle(tid, time_ns, ns)
        }
    }
}
