//! The stall watcher's side of the sampler thread (an [`Observer`]): it
//! keeps every sample in the bounded history, runs each watched loop's
//! [`Detector`], samples a stalled thread faster, and when a stall ends
//! (or lasts long enough to be a hang) cuts its window out of the history
//! and hands it to the reporter thread.
//!
//! While a thread is sampled faster, only the captures asked for are kept
//! for it, each weighing the time since the one before: its samples then
//! cover the stall's wall-clock time once, whichever loop (a session's in
//! any mode, or the background one) is running.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_channel::Sender;
use rustc_hash::FxHashMap;

use super::detector::Detector;
use super::{Job, JobKind, Task, Watch};
use crate::sampler::history::{History, HistorySample, HistoryStats, HistoryWindow, FLAG_CPU, FLAG_FAST, FLAG_IDLE};
use crate::sampler::observer::{ObservedSample, Observer, SampleKind};
use crate::sampler::registry::ThreadEntry;

/// The history never holds more than this, whatever the sample rate.
pub const HISTORY_MAX_BYTES: usize = 64 << 20;

struct Watched {
    watch: Arc<Watch>,
    detector: Detector,
}

/// A thread being sampled faster: when its last capture was, and at what
/// period it is sampled now.
#[derive(Clone, Copy, Debug)]
struct Fast {
    last_ns: u64,
    period_ns: u64,
}

struct Inner {
    watched: Vec<Watched>,
    history: History,
    /// The longest history any watch wants kept.
    keep_ns: u64,
    fast: FxHashMap<u64, Fast>,
    jobs: Sender<Task>,
}

pub struct StallObserver {
    inner: Mutex<Inner>,
}

impl StallObserver {
    pub fn new(jobs: Sender<Task>) -> Self {
        StallObserver {
            inner: Mutex::new(Inner {
                watched: Vec::new(),
                history: History::new(History::span_for(0), HISTORY_MAX_BYTES),
                keep_ns: 0,
                fast: FxHashMap::default(),
                jobs,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a watch. Returns the interval the sampler should run at for
    /// all of them.
    pub fn add(&self, watch: Arc<Watch>) -> u64 {
        let mut inner = self.lock();
        let detector = Detector::new(watch.options.clone());
        inner.watched.push(Watched { watch, detector });
        inner.retune()
    }

    /// Removes a watch; returns the interval the others want, if any.
    pub fn remove(&self, watch: &Arc<Watch>) -> Option<u64> {
        let mut inner = self.lock();
        if let Some(i) = inner.watched.iter().position(|w| Arc::ptr_eq(&w.watch, watch)) {
            let w = inner.watched.swap_remove(i);
            let tid = w.watch.heartbeat.tid;
            if !inner.watched.iter().any(|o| o.watch.heartbeat.tid == tid && o.detector.is_suspect()) {
                inner.fast.remove(&tid);
            }
        }
        if inner.watched.is_empty() {
            // Nothing to keep a history for: give its memory back.
            inner.history = History::new(History::span_for(0), HISTORY_MAX_BYTES);
            inner.fast.clear();
            return None;
        }
        Some(inner.retune())
    }

    /// The history's samples in `[from_ns, to_ns]`.
    pub fn window(&self, from_ns: u64, to_ns: u64) -> HistoryWindow {
        self.lock().history.window(from_ns, to_ns)
    }

    pub fn history_stats(&self) -> HistoryStats {
        self.lock().history.stats()
    }

    /// The stall `watch`'s loop is in now, if it has lasted its threshold:
    /// its job, cut to `now_ns` (for a report at exit, when the loop will
    /// never turn again). The detector then forgets it.
    pub fn cut_ongoing(&self, watch: &Arc<Watch>, now_ns: u64) -> Option<Job> {
        let mut inner = self.lock();
        let Inner { watched, history, fast, .. } = &mut *inner;
        let w = watched.iter_mut().find(|w| Arc::ptr_eq(&w.watch, watch))?;
        let start = w.detector.stalled_since()?;
        if now_ns.saturating_sub(start) < w.watch.options.threshold_ns {
            return None;
        }
        w.detector = Detector::new(w.watch.options.clone());
        fast.remove(&w.watch.heartbeat.tid);
        Some(Job::cut(history, &w.watch, start, now_ns, JobKind::AtExit))
    }
}

impl Inner {
    /// The history's window and the sampling interval follow the watches.
    fn retune(&mut self) -> u64 {
        let keep = self.watched.iter().map(|w| w.watch.options.keep_ns).max().unwrap_or(0);
        if keep != self.keep_ns {
            self.keep_ns = keep;
            // Chunks of the new span from now on; the old ones age out.
            self.history.set_span(History::span_for(keep));
        }
        self.watched.iter().map(|w| w.watch.options.interval_ns).min().unwrap_or(10_000_000)
    }
}

impl Observer for StallObserver {
    fn on_wake(&self, now_ns: u64, live: &[ThreadEntry], capture: &mut Vec<ThreadEntry>) -> u64 {
        let mut inner = self.lock();
        let Inner { watched, history, keep_ns, fast, jobs } = &mut *inner;
        let mut next = u64::MAX;
        let mut oldest_needed = now_ns;
        for w in watched.iter_mut() {
            let tid = w.watch.heartbeat.tid;
            let d = w.detector.wake(now_ns, &w.watch.heartbeat);
            if d.fast_started {
                fast.insert(tid, Fast { last_ns: now_ns, period_ns: d.period_ns });
            } else if let Some(f) = fast.get_mut(&tid) {
                f.period_ns = d.period_ns;
            }
            if d.capture {
                if let Some(e) = live.iter().find(|e| e.tid == tid) {
                    capture.push(*e);
                }
            }
            if let Some((start, end)) = d.stall {
                let _ = jobs.send(Task::Report(Box::new(Job::cut(history, &w.watch, start, end, JobKind::Stall))));
            }
            if let Some(start) = d.hang {
                let _ = jobs.send(Task::Report(Box::new(Job::cut(history, &w.watch, start, now_ns, JobKind::Hang))));
            }
            if let Some(since) = w.detector.stalled_since() {
                oldest_needed = oldest_needed.min(since);
            }
            next = next.min(d.next_ns);
        }
        // Another watch of the same thread may still be sampling it faster.
        fast.retain(|tid, _| watched.iter().any(|w| w.watch.heartbeat.tid == *tid && w.detector.is_suspect()));
        history.trim(oldest_needed.saturating_sub(*keep_ns));
        next
    }

    fn on_sample(&self, s: &ObservedSample<'_>) {
        let mut inner = self.lock();
        if inner.watched.is_empty() {
            return;
        }
        let Inner { history, fast, .. } = &mut *inner;
        history.name_thread(s.tid, s.thread_name, s.is_main);
        let idle = if s.idle { FLAG_IDLE } else { 0 };
        let (weight_ns, flags) = match (fast.get_mut(&s.tid), s.kind) {
            (Some(f), SampleKind::Requested) => {
                // The time since the previous capture, at most two periods
                // (the sampler fell behind; what it missed is unknown).
                let w = s.time_ns.saturating_sub(f.last_ns).min(2 * f.period_ns);
                f.last_ns = s.time_ns.max(f.last_ns);
                (w, FLAG_FAST | idle)
            }
            // The thread's time is covered by the captures asked for.
            (Some(_), _) => return,
            (None, SampleKind::Cpu { ns }) => (ns, FLAG_CPU | idle),
            (None, SampleKind::Wall { ns }) => (ns, idle),
            // Asked for, but the stall ended meanwhile: one period's worth.
            (None, SampleKind::Requested) => (1_000_000, FLAG_FAST | idle),
        };
        history.push(HistorySample { tid: s.tid, time_ns: s.time_ns, frames: s.frames, weight_ns, flags });
    }

    fn on_idle(&self, tid: u64, _time_ns: u64, ns: u64) {
        let mut inner = self.lock();
        if !inner.fast.contains_key(&tid) {
            inner.history.extend_idle(tid, ns);
        }
    }
}
