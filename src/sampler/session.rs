//! The sampler thread: one per process, shared by every caller.
//!
//! In CPU mode where the kernel has per-thread CPU timers (Linux), threads
//! are interrupted by their own timers and the loop only wakes to find new
//! threads and drain the captures. Otherwise it ticks at the sampling
//! interval on absolute deadlines; when it falls behind it skips the missed
//! ticks (`ticksMissed`) instead of bursting, so a stall never produces a
//! clump of samples. Each tick reads the CPU clock of the threads and:
//! - in wall mode, captures the threads that ran since their last sample
//!   and records the others' previous stack again, marked idle (the idle
//!   rule: blocked threads are not interrupted at all);
//! - in CPU mode, captures a thread once it has used an interval of CPU
//!   time, weighted by the intervals it used.
//!
//! Consecutive idle samples of a thread with the same stack are one row
//! with a weight, so idle threads cannot crowd busy ones out of the buffer.
//!
//! The loop also serves an [`Observer`] (the stall watcher): every sample
//! goes to it too, it wakes the loop at its own deadlines, and captures it
//! asks for are its alone (see `super::observer`).

use std::collections::hash_map::Entry;
use std::sync::atomic::{
    AtomicBool,
    Ordering::{AcqRel, Relaxed, Release},
};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use rustc_hash::FxHashMap;

use super::backend::{Backend, Capture, CaptureConfig, CapturedStack, Mode, StackRewrite};
use super::buffer::{SampleBuffer, SampleRecord};
use super::error::{ErrorCode, SamplerError};
use super::observer::{ObservedSample, Observer, SampleKind};
use super::options::SamplerOptions;
use super::own_threads::{self, OwnThread, SAMPLER_THREAD_NAME};
use super::registry::{ThreadEntry, ThreadRegistry};
use super::stacks::{PathCache, StackTable};
use super::stats::{Stats, StatsSnapshot};

/// How often the thread list is refreshed at most.
pub const REFRESH_PERIOD_NS: u64 = 20_000_000;
/// How often names are re-read (threads rename themselves after start).
pub const FULL_REFRESH_PERIOD_NS: u64 = 1_000_000_000;
/// Longest single sleep, so `stop()` is served promptly at long intervals,
/// where the backend has no [`Backend::stop_waker`].
pub const MAX_SLEEP_NS: u64 = 20_000_000;
/// Idle for this long makes a thread long-idle (see `ThreadState::is_long_idle`).
pub const LONG_IDLE_NS: u64 = 100_000_000;
/// How often a long-idle thread's CPU clock is read.
pub const LONG_IDLE_CHECK_NS: u64 = 50_000_000;
/// How long `stop()` waits for captures still in flight.
pub const FINISH_TIMEOUT_NS: u64 = 50_000_000;

/// How much the capture pool holds in CPU mode with timers, for an
/// interval: the backend holds two of these periods' worth of captures
/// (20 intervals, 10 to 20 ms), and handlers wake the loop early when one
/// period's worth is waiting.
pub fn timer_drain_period(interval_ns: u64) -> u64 {
    interval_ns.saturating_mul(20).clamp(10_000_000, 20_000_000)
}

/// How often the loop wakes in CPU mode with timers, for an interval. Each
/// wake costs the sampler tens of µs of CPU (mostly the context switch,
/// even with nothing to do), so it wakes every 40 intervals, but at least
/// every 40 ms. New threads are found at these wakes, and a new worker's
/// JavaScript is named only from its first sample on (see
/// `crate::v8::discover`); a thread that loaded the addon asks for a look
/// as soon as it creates a worker ([`Shared::look_for_threads`]), so only
/// other threads wait for the period. Busy threads fill the pool faster
/// than this on a kernel whose tick is fast enough to serve the interval;
/// their handlers then wake the loop (see [`timer_drain_period`]).
pub fn timer_wake_period(interval_ns: u64) -> u64 {
    interval_ns.saturating_mul(40).clamp(10_000_000, 40_000_000)
}

/// State shared between the sampler thread and the rest of the process.
#[derive(Default)]
pub struct Shared {
    pub stats: Stats,
    pub registry: ThreadRegistry,
    pub native_unwinding: AtomicBool,
    /// Set with a wake of the loop when a thread was just created (a
    /// worker): the loop looks for threads at once instead of at its next
    /// refresh.
    pub look_for_threads: AtomicBool,
    /// Where the loop sends a copy of what it recorded so far, once, when
    /// asked (see [`RunningSampler::snapshot`]).
    snapshot: Mutex<Option<Sender<Recording>>>,
    snapshot_wanted: AtomicBool,
}

/// Absolute-deadline tick schedule with skip-ahead catch-up.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub next_ns: u64,
    pub interval_ns: u64,
}

impl Schedule {
    pub fn new(now_ns: u64, interval_ns: u64) -> Self {
        Schedule { next_ns: now_ns + interval_ns, interval_ns }
    }

    /// Advances past a tick that ran at `now_ns`. Returns how many ticks
    /// were skipped because the loop fell behind.
    pub fn advance(&mut self, now_ns: u64) -> u64 {
        self.next_ns += self.interval_ns;
        if self.next_ns > now_ns {
            return 0;
        }
        let behind = now_ns - self.next_ns;
        let skipped = behind / self.interval_ns + 1;
        self.next_ns += skipped * self.interval_ns;
        skipped
    }
}

/// A thread as it appears in the profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadRecord {
    pub tid: u64,
    pub name: String,
    pub is_main: bool,
}

/// Everything one start/stop session recorded.
#[derive(Clone, Debug)]
pub struct Recording {
    pub threads: Vec<ThreadRecord>,
    pub samples: SampleBuffer,
    pub stacks: StackTable,
    pub start_ns: u64,
    pub end_ns: u64,
    pub interval_ns: u64,
    /// Frames kept per stack at most.
    pub max_stack_depth: usize,
    /// What a sample's time is.
    pub mode: super::backend::Mode,
    /// Wall-clock time at `start_ns`, milliseconds since the Unix epoch.
    pub start_wall_ms: f64,
    pub stats: StatsSnapshot,
}

/// What a session calls besides its backend. Both run on the sampler
/// thread, outside any stopped window.
#[derive(Default)]
pub struct Hooks {
    /// Rewrites captured stacks into the frames to record.
    pub rewrite: Option<Box<dyn StackRewrite>>,
    /// Called once at the start and once per tick, after every thread the
    /// tick stopped has been resumed, with the backend's time.
    pub on_tick: Option<Box<dyn FnMut(u64) + Send>>,
    /// The loop's second consumer (see `super::observer`).
    pub observer: Option<Arc<dyn Observer>>,
}

struct ThreadState {
    index: u32,
    last_cpu_ns: Option<u64>,
    last_stack: Option<u32>,
    /// The buffer row of its last sample, for merging idle runs.
    last_row: Option<usize>,
    /// CPU mode on the tick loop: CPU time used since the last capture.
    cpu_acc_ns: u64,
    /// CPU time used since the last recorded sample.
    cpu_delta_ns: u64,
    /// When the thread last gained CPU time (or was first seen).
    active_ns: u64,
    /// For a long-idle thread: when to read its CPU clock next.
    next_check_ns: u64,
    /// The session asked for a capture of this thread that has not come
    /// yet; a requested capture is the session's only then (otherwise the
    /// observer asked for it).
    session_wants: bool,
    /// Its last stack, for interning the next one.
    path: PathCache,
}

/// What the idle rule decided for one thread on one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TickAction {
    /// Record its previous stack again, marked idle.
    CarryForward(u32),
    /// Stop it and capture its stack.
    Capture,
}

impl ThreadState {
    fn new(index: u32, now_ns: u64) -> Self {
        ThreadState {
            index,
            last_cpu_ns: None,
            last_stack: None,
            last_row: None,
            cpu_acc_ns: 0,
            cpu_delta_ns: 0,
            active_ns: now_ns,
            next_check_ns: 0,
            session_wants: false,
            path: PathCache::default(),
        }
    }

    /// A thread idle this long is long-idle: its CPU clock is read only every
    /// `LONG_IDLE_CHECK_NS`, not every tick. Reading a thread's CPU clock is a
    /// system call (0.2-0.7 µs on our VMs), and threads blocked for good
    /// (V8's platform workers, idle worker_threads, Node's inspector and
    /// signal threads) would otherwise make every tick cost one per thread.
    /// The price: a thread waking from a long sleep is carried forward as
    /// idle for at most `LONG_IDLE_CHECK_NS` before it is captured again.
    fn is_long_idle(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.active_ns) >= LONG_IDLE_NS
    }

    /// Whether this tick needs the thread's CPU clock at all.
    fn needs_cpu_check(&self, now_ns: u64, idle_skip: bool) -> bool {
        !(idle_skip && self.last_stack.is_some() && self.is_long_idle(now_ns) && now_ns < self.next_check_ns)
    }

    /// Applies the idle rule given the thread's CPU clock (`None` when the
    /// backend cannot read it, or when `needs_cpu_check` said no), and
    /// whether the backend saw the thread on a CPU as it read the clock.
    fn decide(&mut self, cpu: Reading, now_ns: u64, threshold: u64, idle_skip: bool) -> TickAction {
        let Reading { cpu, checked, running } = cpu;
        let advanced = if !checked {
            false
        } else {
            match (cpu, self.last_cpu_ns) {
                (Some(now_cpu), Some(before)) => {
                    let delta = now_cpu.saturating_sub(before);
                    self.cpu_delta_ns += delta;
                    delta > threshold || now_cpu < before || running
                }
                _ => true,
            }
        };
        if checked {
            if cpu.is_some() {
                self.last_cpu_ns = cpu;
            }
            if advanced {
                self.active_ns = now_ns;
            } else if self.is_long_idle(now_ns) {
                self.next_check_ns = now_ns + LONG_IDLE_CHECK_NS;
            }
        }
        match self.last_stack {
            Some(stack) if idle_skip && !advanced => TickAction::CarryForward(stack),
            _ => TickAction::Capture,
        }
    }
}

/// One look at a thread's CPU clock, for the idle rule.
#[derive(Clone, Copy)]
struct Reading {
    /// The clock, if it was read and could be.
    cpu: Option<u64>,
    /// Whether it was looked at this tick.
    checked: bool,
    /// Whether the backend saw the thread on a CPU as it read the clock.
    running: bool,
}

/// The sampler thread's working state.
struct Session<'a> {
    shared: &'a Shared,
    samples: SampleBuffer,
    stacks: StackTable,
    threads: Vec<ThreadRecord>,
    state: FxHashMap<u64, ThreadState>,
    /// Scratch for a leaf-only stack when native unwinding is off.
    leaf: [u64; 1],
    /// Rewrites captured stacks (see [`Hooks::rewrite`]).
    rewrite: Option<Box<dyn StackRewrite>>,
    /// Scratch for a merged stack.
    merged: Vec<u64>,
    max_depth: usize,
    interval_ns: u64,
    mode: Mode,
    /// CPU mode driven by the backend's timers.
    mode_timers: bool,
    /// Samples are stored and counted (see `SamplerOptions::record`); off
    /// too once a duration is over.
    recording: bool,
    observer: Option<Arc<dyn Observer>>,
}

impl<'a> Session<'a> {
    /// What was recorded, from `start_ns` to `end_ns`: taken out of the
    /// session at its end, or a copy while it goes on.
    fn recording(&mut self, options: &SamplerOptions, span: (u64, u64), start_wall_ms: f64, take: bool) -> Recording {
        let (threads, samples, stacks) = if take {
            (std::mem::take(&mut self.threads), std::mem::take(&mut self.samples), std::mem::take(&mut self.stacks))
        } else {
            (self.threads.clone(), self.samples.clone(), self.stacks.clone())
        };
        Recording {
            threads,
            samples,
            stacks,
            start_ns: span.0,
            end_ns: span.1,
            interval_ns: options.interval_ns,
            max_stack_depth: options.max_stack_depth,
            mode: options.mode,
            start_wall_ms,
            stats: self.shared.stats.snapshot(self.shared.registry.len() as u64),
        }
    }

    fn new(
        shared: &'a Shared,
        options: &SamplerOptions,
        rewrite: Option<Box<dyn StackRewrite>>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Self {
        let rows = if options.record { options.buffer_samples } else { 0 };
        Session {
            shared,
            samples: SampleBuffer::with_capacity(rows),
            // A node per sample frame at worst; more than that cannot be
            // referenced anyway.
            stacks: StackTable::new(rows.saturating_mul(options.max_stack_depth.min(64))),
            threads: Vec::new(),
            state: FxHashMap::default(),
            leaf: [0],
            rewrite,
            merged: Vec::with_capacity(256),
            max_depth: options.max_stack_depth,
            interval_ns: options.interval_ns,
            mode: options.mode,
            mode_timers: false,
            recording: options.record,
            observer,
        }
    }

    /// Adds threads that appeared, forgets ones that left, refreshes names.
    fn sync_threads(&mut self, live: &[ThreadEntry], now_ns: u64) {
        for e in live {
            match self.state.entry(e.tid) {
                Entry::Occupied(o) => {
                    let rec = &mut self.threads[o.get().index as usize];
                    let name = e.name.as_bytes();
                    if rec.name.as_bytes() != name && !name.is_empty() {
                        rec.name = e.name.to_string_lossy();
                    }
                }
                Entry::Vacant(v) => {
                    v.insert(ThreadState::new(self.threads.len() as u32, now_ns));
                    self.threads.push(ThreadRecord { tid: e.tid, name: e.name.to_string_lossy(), is_main: e.is_main });
                }
            }
        }
        if self.state.len() > live.len() {
            let alive: rustc_hash::FxHashSet<u64> = live.iter().map(|e| e.tid).collect();
            self.state.retain(|tid, _| alive.contains(tid));
        }
        // A loop that records nothing runs for as long as the process may
        // (the stall watcher's): it forgets threads that left, so its
        // memory does not grow with thread churn.
        if !self.recording && self.threads.len() > 2 * self.state.len() + 256 {
            let mut threads = Vec::with_capacity(self.state.len());
            for st in self.state.values_mut() {
                let t = std::mem::take(&mut self.threads[st.index as usize]);
                st.index = threads.len() as u32;
                threads.push(t);
            }
            self.threads = threads;
        }
    }

    /// Records a sample of thread `tid`: a new row, or one more on its last
    /// row when both are idle with the same stack. Once the buffer is full,
    /// idle samples are dropped as busy ones are: idle runs growing on
    /// while busy samples were dropped made the kept profile mostly idle.
    fn push(&mut self, tid: u64, rec: SampleRecord) {
        let stats = &self.shared.stats;
        let Some(st) = self.state.get_mut(&tid) else { return };
        if rec.idle && !self.samples.is_full() {
            if let Some(row) = st.last_row {
                if self.samples.extend_idle_run(row, rec.stack, rec.weight, rec.cpu_delta_ns) {
                    stats.samples_captured.add(rec.weight as u64);
                    return;
                }
            }
        }
        match self.samples.push(rec) {
            Ok(row) => {
                st.last_row = Some(row);
                stats.samples_captured.add(rec.weight as u64);
            }
            Err(_) => stats.samples_dropped.add(rec.weight as u64),
        };
    }

    /// A capture from `request` (`requested`) or `collect`.
    fn on_capture(&mut self, capture: Capture<'_>, requested: bool) {
        let stats = &self.shared.stats;
        match capture {
            Capture::Skipped { .. } => {
                if self.recording {
                    stats.threads_skipped.add(1);
                }
            }
            Capture::Stack(c) => self.on_stack(c, requested),
        }
    }

    fn on_stack(&mut self, c: CapturedStack<'_>, requested: bool) {
        let stats = &self.shared.stats;
        let Some(st) = self.state.get_mut(&c.tid) else {
            // The thread left the list between request and capture; its
            // stack is still a true sample of it, but we no longer have a
            // slot, so count it as skipped.
            if self.recording {
                stats.threads_skipped.add(1);
            }
            return;
        };
        // A capture that was asked for (a signal sent, or a synchronous
        // request) is the session's if the session asked; a timer's always.
        let requested = requested || c.delivery_ns.is_some();
        let for_session = if requested { std::mem::take(&mut st.session_wants) } else { true };
        let recorded = for_session && self.recording;
        if recorded {
            stats.record_suspend(c.stopped_ns);
            stats.stack_bytes_copied.add(c.copied_bytes as u64);
            if let Some(d) = c.delivery_ns {
                stats.delivery_hist.record(d);
            }
            if c.walk_error() {
                stats.walk_errors.add(1);
            }
            stats.record_end(c.end);
        } else if self.observer.is_none() {
            return;
        }
        let native_unwinding = self.shared.native_unwinding.load(Relaxed);
        let frames = match self.rewrite.as_mut() {
            Some(rw) if (!c.runtime_frames.is_empty() || !c.frame_words.is_empty()) && native_unwinding => {
                if recorded {
                    stats.js_samples.add(1);
                }
                self.merged.clear();
                rw.rewrite(&c, &mut self.merged);
                // Runtime frames found beyond a cut native walk can add up
                // to more than the depth asked for; keep the leaf side.
                self.merged.truncate(self.max_depth);
                &self.merged[..]
            }
            _ if native_unwinding => c.frames,
            _ => {
                self.leaf[0] = c.frames.first().copied().unwrap_or(0);
                &self.leaf[..]
            }
        };
        let index = st.index;
        if !for_session {
            if let Some(o) = self.observer.as_ref() {
                let t = &self.threads[index as usize];
                let sample = ObservedSample {
                    tid: c.tid,
                    thread_name: &t.name,
                    is_main: t.is_main,
                    time_ns: c.time_ns,
                    frames,
                    kind: SampleKind::Requested,
                    idle: c.off_cpu,
                };
                o.on_sample(&sample);
            }
            return;
        }
        let (weight, cpu_delta_ns) = match (self.mode, self.mode_timers) {
            (Mode::Cpu, true) => (c.weight, c.weight as u64 * self.interval_ns),
            (Mode::Cpu, false) => {
                // Stands for the whole intervals of CPU time used since the
                // last capture; the remainder carries over.
                let n = (st.cpu_acc_ns / self.interval_ns.max(1)).clamp(1, u32::MAX as u64);
                st.cpu_acc_ns = st.cpu_acc_ns.saturating_sub(n * self.interval_ns);
                (n as u32, std::mem::take(&mut st.cpu_delta_ns))
            }
            (Mode::Wall, _) => (c.weight, std::mem::take(&mut st.cpu_delta_ns)),
        };
        if let Some(o) = self.observer.as_ref() {
            let t = &self.threads[index as usize];
            let ns = weight as u64 * self.interval_ns;
            let kind = if self.mode == Mode::Cpu { SampleKind::Cpu { ns } } else { SampleKind::Wall { ns } };
            let sample = ObservedSample {
                tid: c.tid,
                thread_name: &t.name,
                is_main: t.is_main,
                time_ns: c.time_ns,
                frames,
                kind,
                idle: c.off_cpu,
            };
            o.on_sample(&sample);
        }
        if !self.recording {
            // Captured once: the idle rule and CPU mode's first capture
            // look at this, not at the stack.
            st.last_stack.get_or_insert(u32::MAX);
            return;
        }
        match self.stacks.intern_cached(frames, &mut st.path) {
            Ok(stack) => {
                st.last_stack = Some(stack);
                let idle = c.off_cpu && self.mode == Mode::Wall;
                let rec = SampleRecord { thread: index, time_ns: c.time_ns, stack, idle, cpu_delta_ns, weight };
                if idle {
                    stats.idle_samples.add(weight as u64);
                }
                self.push(c.tid, rec);
            }
            Err(_) => {
                stats.samples_dropped.add(weight as u64);
            }
        }
    }
}

/// Runs the sampling loop until a message arrives on `stop` (or the sender
/// is dropped). Returns what was recorded.
pub fn run<B: Backend>(
    mut backend: B,
    options: SamplerOptions,
    shared: &Shared,
    stop: Receiver<()>,
    hooks: Hooks,
) -> Recording {
    let stats = &shared.stats;
    backend.prepare_sampler_thread();
    let _own = OwnThread::mark();
    let own_tid = backend.current_tid();
    // The addon's own threads are not the program's (see `own_threads`).
    // The loop's own id is the backend's, which a simulated backend may
    // number differently from the OS.
    let profiled = |e: &ThreadEntry| e.tid != own_tid && !own_threads::contains(e.tid);
    let idle_threshold = backend.idle_cpu_threshold_ns();
    let Hooks { rewrite, mut on_tick, observer } = hooks;
    let mut session = Session::new(shared, &options, rewrite, observer.clone());
    let mut live: Vec<ThreadEntry> = Vec::with_capacity(64);
    let mut batch: Vec<ThreadEntry> = Vec::with_capacity(64);
    let mut extra: Vec<ThreadEntry> = Vec::new();

    let start_ns = backend.now_ns();
    let start_wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);
    let timers = options.mode == Mode::Cpu && backend.has_cpu_timers();
    session.mode_timers = timers;
    backend.set_capture_config(CaptureConfig {
        max_depth: options.max_stack_depth,
        native_unwinding: shared.native_unwinding.load(Relaxed),
    });
    // With timers, each thread gets its timer as it is found, and samples
    // start coming then, rather than after every thread has been found.
    if timers {
        backend.start_cpu_timers(options.interval_ns, timer_drain_period(options.interval_ns));
    }
    backend.refresh_threads(&shared.registry, true);
    shared.registry.snapshot(&mut live);
    live.retain(profiled);
    session.sync_threads(&live, backend.now_ns());
    let mut last_refresh = backend.now_ns();
    let mut seen_generation = shared.registry.generation();
    let mut last_full_refresh = start_ns;
    let period = if timers { timer_wake_period(options.interval_ns) } else { options.interval_ns };
    backend.sampling_started();
    let can_wake = backend.stop_waker().is_some();
    let mut schedule = Schedule::new(start_ns, period);
    let sampling_ends = options.duration_ns.map(|d| start_ns.saturating_add(d));
    // The duration is over but an observer is served until stop().
    let mut sampling_over = false;
    let mut observer_due = if observer.is_some() { start_ns } else { u64::MAX };
    if let Some(f) = on_tick.as_mut() {
        f(start_ns);
    }

    // Whether stop() ended the loop (rather than the duration).
    let mut stopped = false;
    loop {
        match stop.try_recv() {
            Ok(()) | Err(TryRecvError::Disconnected) => {
                stopped = true;
                break;
            }
            Err(TryRecvError::Empty) => {}
        }
        if shared.snapshot_wanted.swap(false, AcqRel) {
            let to = shared.snapshot.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(to) = to {
                backend.collect(&mut |c| session.on_capture(c, false));
                let end_ns = recording_end(sampling_ends, backend.now_ns());
                let _ = to.send(session.recording(&options, (start_ns, end_ns), start_wall_ms, false));
            }
        }
        let now = backend.now_ns();
        if !sampling_over && sampling_ends.is_some_and(|end| now >= end) {
            // The duration is over: keep what was recorded and wait for
            // stop(), serving the observer meanwhile if there is one.
            if observer.is_none() {
                break;
            }
            sampling_over = true;
            session.recording = false;
        }
        let due = match sampling_ends {
            Some(end) if !sampling_over => schedule.next_ns.min(end),
            _ => schedule.next_ns,
        };
        let due = due.min(observer_due);
        let look = shared.look_for_threads.swap(false, AcqRel);
        let more = backend.threads_pending();
        if now < due && !look && !more {
            backend.sleep_until(if can_wake { due } else { due.min(now + MAX_SLEEP_NS) });
            // Woken early by captures piling up (timers): drain them now.
            if timers && backend.now_ns() < due {
                backend.collect(&mut |c| session.on_capture(c, false));
            }
            continue;
        }

        let tick = now >= schedule.next_ns;
        let cfg = CaptureConfig {
            max_depth: options.max_stack_depth,
            native_unwinding: shared.native_unwinding.load(Relaxed),
        };
        if tick || look || more {
            if tick && session.recording {
                stats.ticks.add(1);
            }
            if look {
                backend.thread_created();
            }
            if look || more || now.saturating_sub(last_refresh) >= REFRESH_PERIOD_NS {
                let full = now - last_full_refresh >= FULL_REFRESH_PERIOD_NS;
                if full {
                    last_full_refresh = now;
                }
                backend.refresh_threads(&shared.registry, full);
                // Unchanged (the common case, however many threads): no copy.
                let generation = shared.registry.generation();
                if generation != seen_generation {
                    seen_generation = generation;
                    shared.registry.snapshot(&mut live);
                    live.retain(profiled);
                    session.sync_threads(&live, backend.now_ns());
                }
                last_refresh = now;
            }
        }
        backend.set_capture_config(cfg);
        backend.collect(&mut |c| session.on_capture(c, false));

        batch.clear();
        if tick && !timers && !sampling_over {
            for entry in &live {
                let Some(st) = session.state.get_mut(&entry.tid) else { continue };
                let checked = st.needs_cpu_check(now, options.idle_skip);
                let cpu = if checked {
                    match backend.thread_cpu_ns(entry) {
                        Ok(cpu) => cpu,
                        Err(_) => {
                            if session.recording {
                                stats.threads_skipped.add(1);
                            }
                            continue;
                        }
                    }
                } else {
                    None
                };
                let running = checked && cpu.is_some() && backend.running_at_last_cpu_read();
                let before = st.cpu_delta_ns;
                let action = st.decide(Reading { cpu, checked, running }, now, idle_threshold, options.idle_skip);
                if options.mode == Mode::Cpu {
                    // Sampled for the CPU time used: capture once an interval
                    // of it has accumulated; nothing for the time waited.
                    st.cpu_acc_ns += st.cpu_delta_ns - before;
                    let first = st.last_stack.is_none() && cpu.is_some();
                    if st.cpu_acc_ns >= options.interval_ns || first {
                        st.session_wants = true;
                        batch.push(*entry);
                    }
                    continue;
                }
                match action {
                    TickAction::CarryForward(stack) => {
                        let cpu_delta_ns = std::mem::take(&mut st.cpu_delta_ns);
                        if let Some(o) = observer.as_ref() {
                            o.on_idle(entry.tid, now, options.interval_ns);
                        }
                        if session.recording {
                            let rec = SampleRecord {
                                thread: st.index,
                                time_ns: now,
                                stack,
                                idle: true,
                                cpu_delta_ns,
                                weight: 1,
                            };
                            stats.idle_samples.add(1);
                            session.push(entry.tid, rec);
                        }
                    }
                    TickAction::Capture => {
                        st.session_wants = true;
                        batch.push(*entry);
                    }
                }
            }
        }
        // The observer's captures go with the session's, in one request.
        if let Some(o) = observer.as_ref() {
            if tick || now >= observer_due {
                extra.clear();
                observer_due = o.on_wake(now, &live, &mut extra);
                for e in &extra {
                    if !batch.iter().any(|b| b.tid == e.tid) {
                        batch.push(*e);
                    }
                }
            }
        }
        if !batch.is_empty() {
            backend.request(&batch, cfg, &mut |c| session.on_capture(c, true));
        }
        if !tick {
            continue;
        }
        // After the request: every thread stopped by it has been resumed.
        if let Some(f) = on_tick.as_mut() {
            f(backend.now_ns());
        }
        if stats.ticks.get().is_multiple_of(16) && session.recording {
            stats.sampler_cpu_ns.set(backend.own_cpu_ns());
        }

        let skipped = schedule.advance(backend.now_ns());
        if skipped > 0 && !timers && session.recording {
            stats.ticks_missed.add(skipped);
        }
    }

    backend.finish(FINISH_TIMEOUT_NS, &mut |c| session.on_capture(c, false));
    if options.record {
        let counters = backend.backend_counters();
        stats.samples_lost.add(counters.lost);
        stats.foreign_stacks.add(counters.foreign_stacks);
        stats.starved_timers.add(counters.starved_timers);
        stats.signal_taken_over.set(counters.signal_taken_over as u64);
        stats.capture_buffer_bytes.set(counters.capture_buffer_bytes);
    }
    if !stopped {
        // Sampling ended early; the session lasts until stop() all the same.
        let _ = stop.recv();
    }
    if let Some(rw) = session.rewrite.as_mut() {
        rw.finish();
    }
    // Names may have been set after the threads were first seen.
    backend.refresh_threads(&shared.registry, true);
    shared.registry.snapshot(&mut live);
    live.retain(profiled);
    session.sync_threads(&live, backend.now_ns());
    if options.record {
        stats.sampler_cpu_ns.set(backend.own_cpu_ns());
    }

    let end_ns = recording_end(sampling_ends, backend.now_ns());
    session.recording(&options, (start_ns, end_ns), start_wall_ms, true)
}

/// Where a recording made at `now` ends: with a duration, where sampling
/// ended (for stop() and for a copy alike).
fn recording_end(sampling_ends: Option<u64>, now: u64) -> u64 {
    sampling_ends.map_or(now, |end| end.min(now))
}

/// A running sampler thread.
pub struct RunningSampler {
    stop: Sender<()>,
    shared: Arc<Shared>,
    /// Ends the sampler's sleep early (see [`Backend::stop_waker`]).
    wake: Option<fn()>,
    handle: JoinHandle<Recording>,
    pub options: SamplerOptions,
}

impl RunningSampler {
    /// Starts the sampler thread. All signals are blocked in it, so
    /// process-directed signals (SIGINT, SIGTERM, ...) go to the app's
    /// threads and never interrupt sampling.
    pub fn spawn<B: Backend + 'static>(
        backend: B,
        options: SamplerOptions,
        shared: Arc<Shared>,
        hooks: Hooks,
    ) -> Result<RunningSampler, SamplerError> {
        shared.stats.reset();
        shared.native_unwinding.store(options.native_unwinding, Relaxed);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(1);
        let wake = backend.stop_waker();
        // The sampler waits until this thread has its signal mask back (it
        // blocks every signal while it creates the thread), so the first
        // look at the threads' masks does not see this one blocking.
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
        let loop_shared = shared.clone();
        let spawn = || {
            let shared = loop_shared;
            std::thread::Builder::new().name(SAMPLER_THREAD_NAME.into()).spawn(move || {
                let _ = go_rx.recv_timeout(std::time::Duration::from_millis(100));
                run(backend, options, &shared, stop_rx, hooks)
            })
        };
        let handle = with_signals_blocked(spawn)
            .map_err(|e| SamplerError::new(ErrorCode::NoMem, format!("cannot create the sampler thread: {e}")))?;
        let _ = go_tx.send(());
        Ok(RunningSampler { stop: stop_tx, shared, wake, handle, options })
    }

    /// A copy of what the session recorded so far, sampling going on; None
    /// if the loop did not answer within `timeout` (it has ended, or is
    /// stuck in a backend call).
    pub fn snapshot(&self, timeout: std::time::Duration) -> Option<Recording> {
        let (to, from) = crossbeam_channel::bounded(1);
        *self.shared.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = Some(to);
        self.shared.snapshot_wanted.store(true, Release);
        self.wake();
        let copy = from.recv_timeout(timeout).ok();
        // Unanswered: the loop must not keep the request for later.
        self.shared.snapshot.lock().unwrap_or_else(PoisonError::into_inner).take();
        copy
    }

    /// Ends the loop's sleep, where the backend can (see
    /// [`Backend::stop_waker`]); otherwise the loop sees what changed at its
    /// next wake.
    pub fn wake(&self) {
        if let Some(wake) = self.wake {
            wake();
        }
    }

    /// Stops the thread and returns the recording. Every thread the backend
    /// stopped has been resumed when this returns.
    pub fn stop(self) -> Recording {
        let _ = self.stop.send(());
        self.wake();
        match self.handle.join() {
            Ok(rec) => rec,
            // The loop does not panic; if it ever did, resume the panic here
            // rather than invent an empty profile.
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

/// Runs `f` with every blockable signal blocked in the calling thread, so a
/// thread it creates starts with them blocked.
pub fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data; sigfillset initialises it, and
    // pthread_sigmask only changes the calling thread's mask, which is
    // restored before returning.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::backend::{SkipReason, ThreadGone};
    use crate::sampler::registry::ThreadName;
    use crate::sampler::unwind::StackEnd;
    use crate::sampler::walker::StackBounds;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Mutex;

    #[test]
    fn idle_rule_and_long_idle_backoff() {
        const MS: u64 = 1_000_000;
        let read = |cpu: Option<u64>, checked: bool| Reading { cpu, checked, running: false };
        let mut st = ThreadState::new(0, 0);
        // Never captured: always capture.
        assert_eq!(st.decide(read(Some(100), true), MS, 10, true), TickAction::Capture);
        st.last_stack = Some(7);
        // CPU advanced beyond the threshold: capture.
        assert_eq!(st.decide(read(Some(200), true), 2 * MS, 10, true), TickAction::Capture);
        // Advanced by no more than the threshold (our own signal's cost): idle.
        assert_eq!(st.decide(read(Some(205), true), 3 * MS, 10, true), TickAction::CarryForward(7));
        assert!(st.needs_cpu_check(50 * MS, true), "not long idle yet");
        // Idle past LONG_IDLE_NS: the next check is scheduled, and until
        // then the clock is not read.
        let t = 2 * MS + LONG_IDLE_NS;
        assert_eq!(st.decide(read(Some(205), true), t, 10, true), TickAction::CarryForward(7));
        assert!(!st.needs_cpu_check(t + MS, true));
        assert_eq!(st.decide(read(None, false), t + MS, 10, true), TickAction::CarryForward(7));
        assert!(st.needs_cpu_check(t + LONG_IDLE_CHECK_NS, true));
        // It woke up: captured, and checked every tick again.
        assert_eq!(st.decide(read(Some(9_000), true), t + LONG_IDLE_CHECK_NS, 10, true), TickAction::Capture);
        assert!(st.needs_cpu_check(t + LONG_IDLE_CHECK_NS + MS, true));
        // With the idle rule off, every tick captures and reads the clock.
        let mut st = ThreadState::new(0, 0);
        st.last_stack = Some(1);
        assert!(st.needs_cpu_check(10 * LONG_IDLE_NS, false));
        assert_eq!(st.decide(read(Some(0), true), 10 * LONG_IDLE_NS, 10, false), TickAction::Capture);
        // A clock that lags a running thread: seen on a CPU, it is captured.
        let mut st = ThreadState::new(0, 0);
        assert_eq!(st.decide(read(Some(100), true), MS, 10, true), TickAction::Capture);
        st.last_stack = Some(3);
        assert_eq!(st.decide(read(Some(100), true), 2 * MS, 10, true), TickAction::CarryForward(3));
        let running = Reading { cpu: Some(100), checked: true, running: true };
        assert_eq!(st.decide(running, 3 * MS, 10, true), TickAction::Capture);
    }

    #[test]
    fn schedule_keeps_absolute_deadlines() {
        let mut s = Schedule::new(0, 10);
        assert_eq!(s.next_ns, 10);
        // Late by less than an interval: no skip, no drift.
        assert_eq!(s.advance(13), 0);
        assert_eq!(s.next_ns, 20);
        assert_eq!(s.advance(20), 0);
        assert_eq!(s.next_ns, 30);
    }

    #[test]
    fn schedule_skips_instead_of_bursting() {
        let mut s = Schedule::new(0, 10);
        // The tick due at 10 ran at 55: ticks 20..50 are gone.
        assert_eq!(s.advance(55), 4);
        assert_eq!(s.next_ns, 60);
        assert_eq!(s.advance(60), 0);
        assert_eq!(s.next_ns, 70);
        // Exactly on a boundary counts that boundary as missed.
        assert_eq!(s.advance(80), 1);
        assert_eq!(s.next_ns, 90);
    }

    /// A scripted backend with a fake clock: threads have fixed stacks and
    /// a CPU clock the test controls.
    struct FakeBackend {
        clock: Arc<AtomicU64>,
        threads: Arc<Mutex<Vec<(u64, bool)>>>, // (tid, alive)
        cpu: Arc<Mutex<FxHashMap<u64, u64>>>,
        requests: Arc<AtomicU64>,
        stack: [u64; 3],
        cpu_step: u64,
        ticks_left: Arc<AtomicU64>,
        stop_tx: Sender<()>,
    }

    impl Backend for FakeBackend {
        fn now_ns(&self) -> u64 {
            self.clock.load(SeqCst)
        }
        fn sleep_until(&self, deadline_ns: u64) {
            self.clock.fetch_max(deadline_ns, SeqCst);
        }
        fn refresh_threads(&mut self, registry: &ThreadRegistry, _full: bool) {
            for &(tid, alive) in self.threads.lock().unwrap().iter() {
                if alive && !registry.contains(tid) {
                    registry.add(ThreadEntry::new(tid, tid, ThreadName::from_bytes(b"t"), StackBounds::EMPTY));
                } else if !alive {
                    registry.mark_removed(tid);
                }
            }
        }
        fn thread_cpu_ns(&mut self, t: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
            let alive = self.threads.lock().unwrap().iter().any(|&(tid, a)| tid == t.tid && a);
            if !alive {
                return Err(ThreadGone);
            }
            Ok(self.cpu.lock().unwrap().get(&t.tid).copied())
        }
        fn own_cpu_ns(&self) -> u64 {
            0
        }
        fn current_tid(&self) -> u64 {
            999
        }
        fn collect(&mut self, _sink: &mut dyn FnMut(Capture<'_>)) {}
        fn request(&mut self, threads: &[ThreadEntry], _cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>)) {
            for t in threads {
                self.requests.fetch_add(1, SeqCst);
                if t.tid == 3 {
                    sink(Capture::Skipped { tid: 3, reason: SkipReason::Gone });
                    continue;
                }
                sink(Capture::Stack(CapturedStack {
                    tid: t.tid,
                    time_ns: self.now_ns(),
                    frames: &self.stack,
                    end: StackEnd::Root,
                    stopped_ns: 1000,
                    copied_bytes: 0,
                    delivery_ns: None,
                    weight: 1,
                    off_cpu: false,
                    lr: 0,
                    runtime_frames: &[],
                    tos: 0,
                    frame_words: &[],
                }));
            }
            // Each tick the test advances every thread's CPU clock except
            // thread 2, which is idle.
            for (tid, v) in self.cpu.lock().unwrap().iter_mut() {
                if *tid != 2 {
                    *v += self.cpu_step;
                }
            }
            if self.ticks_left.fetch_sub(1, SeqCst) == 1 {
                let _ = self.stop_tx.try_send(());
            }
        }
        fn finish(&mut self, _timeout_ns: u64, _sink: &mut dyn FnMut(Capture<'_>)) {}
    }

    /// The `Backend` methods a test backend wrapping a `FakeBackend` in
    /// `inner` leaves as they are.
    macro_rules! forward_to_inner {
        () => {
            fn thread_cpu_ns(&mut self, t: &ThreadEntry) -> Result<Option<u64>, ThreadGone> {
                self.inner.thread_cpu_ns(t)
            }
            fn own_cpu_ns(&self) -> u64 {
                0
            }
            fn current_tid(&self) -> u64 {
                999
            }
            fn collect(&mut self, sink: &mut dyn FnMut(Capture<'_>)) {
                self.inner.collect(sink)
            }
            fn request(&mut self, threads: &[ThreadEntry], cfg: CaptureConfig, sink: &mut dyn FnMut(Capture<'_>)) {
                self.inner.request(threads, cfg, sink)
            }
            fn finish(&mut self, timeout_ns: u64, sink: &mut dyn FnMut(Capture<'_>)) {
                self.inner.finish(timeout_ns, sink)
            }
        };
    }

    fn fake(ticks: u64, threads: &[u64]) -> (FakeBackend, Receiver<()>, Arc<AtomicU64>) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let requests = Arc::new(AtomicU64::new(0));
        let cpu: FxHashMap<u64, u64> = threads.iter().map(|&t| (t, 0)).collect();
        let b = FakeBackend {
            clock: Arc::new(AtomicU64::new(1_000)),
            threads: Arc::new(Mutex::new(threads.iter().map(|&t| (t, true)).chain([(999, true)]).collect())),
            cpu: Arc::new(Mutex::new(cpu)),
            requests: requests.clone(),
            stack: [0x30, 0x20, 0x10],
            cpu_step: 100,
            ticks_left: Arc::new(AtomicU64::new(ticks)),
            stop_tx: tx,
        };
        (b, rx, requests)
    }

    #[test]
    fn loop_samples_all_threads_and_never_itself() {
        let (b, rx, _) = fake(10, &[1, 2]);
        let shared = Shared::default();
        shared.native_unwinding.store(true, SeqCst);
        let rec = run(
            b,
            SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, ..Default::default() },
            &shared,
            rx,
            Hooks::default(),
        );
        assert_eq!(rec.threads.len(), 2, "{:?}", rec.threads);
        assert!(rec.threads.iter().all(|t| t.tid != 999), "sampler thread is not sampled");
        // 20 samples: thread 1's ten, thread 2's first and its nine idle
        // ones, which share a row.
        assert_eq!(rec.samples.len(), 12);
        assert_eq!(rec.samples.weight.iter().map(|&w| w as u64).sum::<u64>(), 20);
        assert_eq!(rec.stats.samples_captured, 20);
        assert_eq!(rec.stats.threads_sampled, rec.stats.samples_captured + rec.stats.samples_dropped);
        assert_eq!(rec.stacks.addresses(rec.samples.stack[0]), vec![0x30, 0x20, 0x10]);
    }

    #[test]
    fn a_snapshot_is_a_copy_and_the_session_goes_on() {
        let (b, rx, _) = fake(10, &[1, 2]);
        let shared = Shared::default();
        shared.native_unwinding.store(true, SeqCst);
        let (to, from) = crossbeam_channel::bounded(1);
        *shared.snapshot.lock().unwrap() = Some(to);
        shared.snapshot_wanted.store(true, SeqCst);
        let options = SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, options, &shared, rx, Hooks::default());
        // Asked before the first tick: the threads found, no sample yet.
        let copy = from.try_recv().expect("the loop answered");
        assert_eq!((copy.threads.len(), copy.samples.len()), (2, 0));
        assert!(copy.end_ns >= copy.start_ns && copy.start_ns == rec.start_ns);
        assert_eq!(rec.samples.len(), 12);
        assert!(shared.snapshot.lock().unwrap().is_none() && !shared.snapshot_wanted.load(SeqCst));
    }

    #[test]
    fn idle_thread_is_not_stopped_again() {
        let (b, rx, requests) = fake(10, &[1, 2]);
        let shared = Shared::default();
        let rec = run(
            b,
            SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, ..Default::default() },
            &shared,
            rx,
            Hooks::default(),
        );
        // Thread 1: 10 requests. Thread 2: the first request (no stack yet),
        // then 9 idle samples carrying that stack forward.
        assert_eq!(requests.load(SeqCst), 11);
        assert_eq!(rec.stats.idle_samples, 9);
        let t2 = rec.threads.iter().position(|t| t.tid == 2).unwrap() as u32;
        let idle_for_t2: Vec<usize> =
            (0..rec.samples.len()).filter(|&i| rec.samples.thread[i] == t2 && rec.samples.idle[i] == 1).collect();
        // One row for the run, weighing 9 samples.
        assert_eq!(idle_for_t2.len(), 1);
        assert_eq!(rec.samples.weight[idle_for_t2[0]], 9);
        assert_eq!(rec.stats.samples_captured, 20, "samples, not rows");
        // CPU deltas: thread 1 used 100 ns per tick after the first.
        let t1 = rec.threads.iter().position(|t| t.tid == 1).unwrap() as u32;
        let cpu: u64 =
            (0..rec.samples.len()).filter(|&i| rec.samples.thread[i] == t1).map(|i| rec.samples.cpu_delta_ns[i]).sum();
        assert_eq!(cpu, 900);
    }

    #[test]
    fn a_full_buffer_drops_idle_samples_as_it_drops_busy_ones() {
        // Thread 1 busy (a row per tick), thread 2 idle (one growing row).
        let (b, rx, _) = fake(10, &[1, 2]);
        let shared = Shared::default();
        let opts = SamplerOptions { interval_ns: 1_000_000, buffer_samples: 4, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, opts, &shared, rx, Hooks::default());
        let t2 = rec.threads.iter().position(|t| t.tid == 2).unwrap() as u32;
        let kept = |t: u32| -> u64 {
            (0..rec.samples.len()).filter(|&i| rec.samples.thread[i] == t).map(|i| rec.samples.weight[i] as u64).sum()
        };
        let t1 = 1 - t2;
        assert_eq!(rec.samples.len(), 4);
        // Two ticks fill it (thread 2's first sample is a capture, then an
        // idle row); without the rule, that idle row grew to weight 9.
        assert_eq!((kept(t1), kept(t2)), (2, 2));
        assert_eq!(rec.stats.samples_captured + rec.stats.samples_dropped, 20);
    }

    #[test]
    fn cpu_mode_samples_threads_for_the_cpu_time_they_use() {
        // Thread 1 uses 2.5 ms of CPU per 1 ms tick; thread 2 none.
        let (mut b, rx, requests) = fake(40, &[1, 2]);
        b.cpu_step = 2_500_000;
        let shared = Shared::default();
        let opts = SamplerOptions { interval_ns: 1_000_000, mode: Mode::Cpu, ..Default::default() };
        let rec = run(b, opts, &shared, rx, Hooks::default());
        let weight_of = |tid: u64| {
            let t = rec.threads.iter().position(|t| t.tid == tid).unwrap() as u32;
            (0..rec.samples.len())
                .filter(|&i| rec.samples.thread[i] == t)
                .map(|i| rec.samples.weight[i] as u64)
                .sum::<u64>()
        };
        // Thread 2 is captured once (its first stack) and never again; no
        // idle samples in CPU mode.
        assert_eq!(weight_of(2), 1);
        assert_eq!(rec.stats.idle_samples, 0);
        // Thread 1's weights add up to its CPU time in intervals (2.5 per
        // tick), within the interval that is still accumulating.
        let cpu_ms = 2.5 * (rec.stats.ticks as f64 - 1.0);
        let w = weight_of(1) as f64;
        assert!((w - cpu_ms).abs() <= 3.0, "{w} samples for {cpu_ms} ms of CPU");
        assert!(requests.load(SeqCst) >= 30);
    }

    #[test]
    fn skips_and_drops_are_counted_exactly() {
        let (b, rx, _) = fake(20, &[1, 3]);
        let shared = Shared::default();
        let opts = SamplerOptions { interval_ns: 1_000_000, buffer_samples: 5, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, opts, &shared, rx, Hooks::default());
        assert_eq!(rec.samples.len(), 5);
        assert_eq!(rec.stats.samples_captured, 5);
        assert_eq!(rec.stats.samples_dropped, 15);
        assert_eq!(rec.stats.threads_skipped, 20, "thread 3 is gone at every capture");
        assert_eq!(rec.stats.threads_sampled, 20);
    }

    #[test]
    fn native_unwinding_off_records_leaf_only() {
        let (b, rx, _) = fake(3, &[1]);
        let shared = Shared::default();
        shared.native_unwinding.store(false, SeqCst);
        let opts =
            SamplerOptions { interval_ns: 1_000_000, native_unwinding: false, mode: Mode::Wall, ..Default::default() };
        let arc = Arc::new(shared);
        let rec = run(b, opts, &arc, rx, Hooks::default());
        assert_eq!(rec.stacks.addresses(rec.samples.stack[0]), vec![0x30]);
    }

    /// Asks for a capture of `tid` every `every_ns`, and keeps what it sees.
    struct TestObserver {
        tid: u64,
        every_ns: u64,
        seen: Mutex<Vec<(u64, SampleKind)>>,
        idle: Mutex<Vec<u64>>,
        wakes: AtomicU64,
    }

    impl TestObserver {
        fn new(tid: u64, every_ns: u64) -> Arc<Self> {
            Arc::new(TestObserver {
                tid,
                every_ns,
                seen: Mutex::new(Vec::new()),
                idle: Mutex::new(Vec::new()),
                wakes: AtomicU64::new(0),
            })
        }

        fn count(&self, tid: u64, pred: impl Fn(SampleKind) -> bool) -> usize {
            self.seen.lock().unwrap().iter().filter(|&&(t, k)| t == tid && pred(k)).count()
        }
    }

    impl Observer for TestObserver {
        fn on_wake(&self, now_ns: u64, live: &[ThreadEntry], capture: &mut Vec<ThreadEntry>) -> u64 {
            self.wakes.fetch_add(1, SeqCst);
            capture.extend(live.iter().filter(|e| e.tid == self.tid));
            now_ns + self.every_ns
        }
        fn on_sample(&self, s: &ObservedSample<'_>) {
            assert_eq!(s.frames, &[0x30, 0x20, 0x10]);
            self.seen.lock().unwrap().push((s.tid, s.kind));
        }
        fn on_idle(&self, tid: u64, _time_ns: u64, ns: u64) {
            assert_eq!(ns, 1_000_000);
            self.idle.lock().unwrap().push(tid);
        }
    }

    #[test]
    fn observer_captures_stay_out_of_the_recording() {
        // The session ticks every 1 ms; the observer wakes every 250 µs and
        // asks for thread 1 each time.
        let (b, rx, requests) = fake(40, &[1, 2]);
        let shared = Shared::default();
        shared.native_unwinding.store(true, SeqCst);
        let obs = TestObserver::new(1, 250_000);
        let hooks = Hooks { observer: Some(obs.clone()), ..Default::default() };
        let opts = SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, opts, &shared, rx, hooks);
        let ticks = rec.stats.ticks;
        assert!(ticks >= 8, "{ticks} ticks");
        // The recording is what the session alone would have: a sample of
        // each thread per tick.
        assert_eq!(rec.stats.samples_captured, 2 * ticks);
        assert_eq!(rec.samples.weight.iter().map(|&w| w as u64).sum::<u64>(), 2 * ticks);
        // The observer saw the session's samples of thread 1 (as wall
        // time), its own captures between ticks, and thread 2 idle.
        assert_eq!(obs.count(1, |k| k == SampleKind::Wall { ns: 1_000_000 }) as u64, ticks);
        let own = obs.count(1, |k| k == SampleKind::Requested) as u64;
        assert!((2 * ticks..=3 * ticks + 4).contains(&own), "{own} captures of its own in {ticks} ticks");
        assert_eq!(obs.count(2, |k| k == SampleKind::Requested), 0);
        assert_eq!(obs.idle.lock().unwrap().len() as u64, ticks - 1, "thread 2 idle after its first tick");
        // 40 requests, each of thread 1 once (the session's and the
        // observer's are one capture on a tick), and thread 2's first.
        assert_eq!(requests.load(SeqCst), 41);
    }

    #[test]
    fn a_loop_that_records_nothing_serves_its_observer() {
        let (mut b, rx, _) = fake(20, &[1, 2]);
        b.cpu_step = 2_000_000;
        let shared = Shared::default();
        shared.native_unwinding.store(true, SeqCst);
        let obs = TestObserver::new(0, u64::MAX / 4);
        let hooks = Hooks { observer: Some(obs.clone()), ..Default::default() };
        let opts = SamplerOptions { interval_ns: 1_000_000, mode: Mode::Cpu, record: false, ..Default::default() };
        let rec = run(b, opts, &shared, rx, hooks);
        assert!(rec.samples.is_empty());
        assert_eq!(rec.samples.capacity(), 0, "nothing reserved");
        assert_eq!(rec.stats, StatsSnapshot { thread_count: rec.stats.thread_count, ..Default::default() });
        // Thread 1 ran 2 ms per tick: CPU samples of 2 intervals each.
        let cpu = obs.count(1, |k| matches!(k, SampleKind::Cpu { .. }));
        assert!(cpu >= 15, "{cpu}");
        assert_eq!(obs.count(2, |_| true), 1, "idle thread 2: its first capture only");
    }

    /// Replaces a thread on every wake: thread churn.
    struct Churn {
        threads: Arc<Mutex<Vec<(u64, bool)>>>,
        next: AtomicU64,
    }

    impl Observer for Churn {
        fn on_wake(&self, now_ns: u64, _live: &[ThreadEntry], _capture: &mut Vec<ThreadEntry>) -> u64 {
            let mut t = self.threads.lock().unwrap();
            for e in t.iter_mut().filter(|e| e.0 >= 100) {
                e.1 = false;
            }
            // Long enough dead for a refresh to have seen it go.
            let next = self.next.load(SeqCst);
            t.retain(|e| e.0 < 100 || e.0 + 50 > next);
            t.push((self.next.fetch_add(1, SeqCst), true));
            now_ns + 1_000_000
        }
        fn on_sample(&self, _s: &ObservedSample<'_>) {}
    }

    #[test]
    fn a_loop_that_records_nothing_forgets_threads_that_left() {
        let (b, rx, _) = fake(8_000, &[1, 2]);
        let churn = Arc::new(Churn { threads: b.threads.clone(), next: AtomicU64::new(100) });
        let shared = Shared::default();
        let hooks = Hooks { observer: Some(churn.clone()), ..Default::default() };
        let opts = SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, record: false, ..Default::default() };
        let rec = run(b, opts, &shared, rx, hooks);
        let seen = churn.next.load(SeqCst) - 100;
        assert!(seen > 4_000, "{seen} threads came and went");
        assert!(rec.threads.len() <= 2 * 4 + 256, "{} threads kept", rec.threads.len());
        assert!(rec.threads.iter().any(|t| t.tid == 1) && rec.threads.iter().any(|t| t.tid == 2));
    }

    #[test]
    fn a_snapshot_after_the_duration_ends_where_sampling_did() {
        let (b, rx, _) = fake(30, &[1]);
        let shared = Arc::new(Shared::default());
        shared.native_unwinding.store(true, SeqCst);
        let obs = TestObserver::new(1, 1_000_000);
        let (to, from) = crossbeam_channel::bounded(1);
        // Asked at the first tick after the duration (the fake clock starts at 1 µs).
        let (s, mut asked) = (shared.clone(), false);
        let ask = move |now: u64| {
            if now >= 11_000_000 && !asked {
                asked = true;
                *s.snapshot.lock().unwrap() = Some(to.clone());
                s.snapshot_wanted.store(true, SeqCst);
            }
        };
        let hooks = Hooks { observer: Some(obs), on_tick: Some(Box::new(ask)), ..Default::default() };
        let opts = SamplerOptions {
            interval_ns: 1_000_000,
            mode: Mode::Wall,
            duration_ns: Some(5_000_000),
            ..Default::default()
        };
        let rec = run(b, opts, &shared, rx, hooks);
        let copy = from.try_recv().expect("the loop answered");
        assert_eq!(copy.end_ns - copy.start_ns, 5_000_000);
        assert_eq!(copy.samples.weight, rec.samples.weight);
    }

    #[test]
    fn stop_before_the_duration_ends_returns() {
        let (b, rx, _) = fake(5, &[1]);
        let shared = Arc::new(Shared::default());
        let opts = SamplerOptions {
            interval_ns: 1_000_000,
            mode: Mode::Wall,
            duration_ns: Some(3_600_000_000_000),
            ..Default::default()
        };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let s = shared.clone();
        std::thread::spawn(move || {
            let rec = run(b, opts, &s, rx, Hooks::default());
            let _ = done_tx.send(rec.stats.ticks);
        });
        let ticks = done_rx.recv_timeout(std::time::Duration::from_secs(10)).expect("stop() returned");
        assert_eq!(ticks, 5);
    }

    #[test]
    fn an_observer_is_served_after_the_duration() {
        let (b, rx, _) = fake(30, &[1]);
        let shared = Shared::default();
        shared.native_unwinding.store(true, SeqCst);
        let obs = TestObserver::new(1, 1_000_000);
        let hooks = Hooks { observer: Some(obs.clone()), ..Default::default() };
        let opts = SamplerOptions {
            interval_ns: 1_000_000,
            mode: Mode::Wall,
            duration_ns: Some(5_000_000),
            ..Default::default()
        };
        let rec = run(b, opts, &shared, rx, hooks);
        // About 5 ticks recorded; the observer kept sampling until stop.
        assert!((4..=6).contains(&rec.stats.ticks), "{}", rec.stats.ticks);
        assert_eq!(rec.end_ns - rec.start_ns, 5_000_000);
        assert!(obs.count(1, |k| k == SampleKind::Requested) >= 20);
    }

    #[test]
    fn thread_leaving_is_skipped_not_an_error() {
        let (b, rx, _) = fake(6, &[1, 2]);
        let threads = b.threads.clone();
        let shared = Shared::default();
        // Remove thread 1 after discovery: thread_cpu_ns reports it gone.
        let handle = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(1));
            threads.lock().unwrap()[0].1 = false;
        });
        let rec = run(
            b,
            SamplerOptions { interval_ns: 1_000_000, mode: Mode::Wall, ..Default::default() },
            &shared,
            rx,
            Hooks::default(),
        );
        handle.join().unwrap();
        assert_eq!(rec.stats.walk_errors, 0);
        let samples: u64 = rec.samples.weight.iter().map(|&w| w as u64).sum();
        assert_eq!(rec.stats.threads_sampled + rec.stats.threads_skipped, samples + rec.stats.threads_skipped);
    }

    /// A thread created while the loop sleeps: with `look_for_threads`
    /// set (and the sleep ended, as the wake does), it is found at once;
    /// otherwise at the next tick. Returns when it was found, from the
    /// start, and the tick period.
    fn found_at(look: bool) -> (u64, u64) {
        struct Creating<'a> {
            inner: FakeBackend,
            look: Option<&'a AtomicBool>,
            created: std::cell::Cell<bool>,
            found_ns: &'a AtomicU64,
        }
        impl Backend for Creating<'_> {
            fn now_ns(&self) -> u64 {
                self.inner.now_ns()
            }
            fn sleep_until(&self, deadline_ns: u64) {
                if self.created.replace(true) {
                    return self.inner.sleep_until(deadline_ns);
                }
                self.inner.threads.lock().unwrap().push((7, true));
                match self.look {
                    Some(flag) => flag.store(true, SeqCst),
                    None => self.inner.sleep_until(deadline_ns),
                }
            }
            fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
                self.inner.refresh_threads(registry, full);
                if self.found_ns.load(SeqCst) == 0 && registry.contains(7) {
                    self.found_ns.store(self.now_ns(), SeqCst);
                }
            }
            forward_to_inner!();
        }
        let (inner, rx, _) = fake(3, &[1]);
        let start = inner.now_ns();
        let shared = Shared::default();
        let found_ns = AtomicU64::new(0);
        let b = Creating {
            inner,
            look: look.then_some(&shared.look_for_threads),
            created: Default::default(),
            found_ns: &found_ns,
        };
        let opts = SamplerOptions { interval_ns: 50_000_000, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, opts, &shared, rx, Hooks::default());
        assert!(rec.threads.iter().any(|t| t.tid == 7), "{:?}", rec.threads);
        (found_ns.load(SeqCst) - start, opts.interval_ns)
    }

    /// Threads a refresh found but left for later (a bounded number are
    /// set up per refresh): with `threads_pending`, the loop refreshes again
    /// without sleeping; otherwise one more is set up per tick. Returns when
    /// the last was set up, from the start, and the tick period.
    fn all_set_up_at(honour_pending: bool) -> (u64, u64) {
        struct Staged<'a> {
            inner: FakeBackend,
            left: Vec<u64>,
            honour_pending: bool,
            done_ns: &'a AtomicU64,
        }
        impl Backend for Staged<'_> {
            fn threads_pending(&self) -> bool {
                self.honour_pending && !self.left.is_empty()
            }
            fn now_ns(&self) -> u64 {
                self.inner.now_ns()
            }
            fn sleep_until(&self, deadline_ns: u64) {
                self.inner.sleep_until(deadline_ns)
            }
            fn refresh_threads(&mut self, registry: &ThreadRegistry, full: bool) {
                if let Some(tid) = self.left.pop() {
                    self.inner.threads.lock().unwrap().push((tid, true));
                    self.inner.cpu.lock().unwrap().insert(tid, 0);
                }
                self.inner.refresh_threads(registry, full);
                if self.left.is_empty() && self.done_ns.load(SeqCst) == 0 {
                    self.done_ns.store(self.now_ns(), SeqCst);
                }
            }
            forward_to_inner!();
        }
        let (inner, rx, _) = fake(8, &[1]);
        let start = inner.now_ns();
        let shared = Shared::default();
        let done_ns = AtomicU64::new(0);
        let b = Staged { inner, left: vec![5, 4, 3], honour_pending, done_ns: &done_ns };
        let opts = SamplerOptions { interval_ns: 50_000_000, mode: Mode::Wall, ..Default::default() };
        let rec = run(b, opts, &shared, rx, Hooks::default());
        for tid in [3, 4, 5] {
            assert!(rec.threads.iter().any(|t| t.tid == tid), "{tid} missing: {:?}", rec.threads);
        }
        (done_ns.load(SeqCst) - start, opts.interval_ns)
    }

    #[test]
    fn threads_left_for_later_are_set_up_without_waiting_for_ticks() {
        let (pending, period) = all_set_up_at(true);
        assert_eq!(pending, 0, "all set up before the first tick");
        let (ticked, _) = all_set_up_at(false);
        assert_eq!(ticked, 2 * period, "one more per tick");
    }

    #[test]
    fn a_thread_created_is_looked_for_at_once_when_asked() {
        let (asked, period) = found_at(true);
        assert_eq!(asked, 0, "found when the loop was woken, before its next tick");
        let (waited, _) = found_at(false);
        assert_eq!(waited, period, "found at the next tick");
    }
}
