//! The process-wide stall watcher behind `watchStalls()`.
//!
//! Each watched event loop beats a [`Heartbeat`] on every turn (libuv
//! handles on that loop, `crate::bindings::stalls`), and the sampler
//! thread, through the [`observer::StallObserver`], notices when it stops:
//! the loop's thread is then sampled faster, and when the loop turns again
//! the stall's window (the history kept before it, and the stall itself,
//! every thread) is cut out of the bounded history. A reporter thread makes
//! it a symbolicated profile with a summary and queues it for the watch;
//! the watched thread takes it when its loop runs again. A stall that lasts
//! long enough is written to a directory as a hang, from the reporter
//! thread, without JavaScript: a deadlocked loop never turns again.
//!
//! Why a second consumer of the one sampler thread, and not a session of
//! its own: `docs/design/stalls.md`.

pub mod detector;
pub mod heartbeat;
pub mod observer;
pub mod options;
pub mod report;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crossbeam_channel::Receiver;

use crate::control;
use crate::profile::ProfileData;
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::history::{History, HistoryStats, HistoryWindow};
use crate::symbols::SymbolicateOptions;
pub use heartbeat::Heartbeat;
use observer::StallObserver;
pub use options::StallOptions;

/// How a stall's report came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// The loop turned again.
    Stall,
    /// The stall has lasted `hang_after`: written to the hang directory.
    Hang,
    /// The process is exiting during the stall.
    AtExit,
}

/// What the reporter thread does.
pub enum Task {
    Report(Box<Job>),
    /// Load the symbol tables of what runs, a moment after a watch starts.
    WarmSymbols(SymbolicateOptions),
}

/// A stall cut out of the history, for the reporter.
pub struct Job {
    watch: Arc<Watch>,
    kind: JobKind,
    start_ns: u64,
    end_ns: u64,
    window: HistoryWindow,
}

impl Job {
    /// The history from `keep` before `start_ns` to `end_ns`.
    fn cut(history: &History, watch: &Arc<Watch>, start_ns: u64, end_ns: u64, kind: JobKind) -> Job {
        let from = start_ns.saturating_sub(watch.options.keep_ns);
        watch.in_flight.fetch_add(1, Ordering::AcqRel);
        Job { watch: watch.clone(), kind, start_ns, end_ns, window: history.window(from, end_ns) }
    }
}

/// A stall, ready for JavaScript.
#[derive(Debug)]
pub struct StallReport {
    pub tid: u64,
    pub thread_name: String,
    pub is_main: bool,
    /// When the loop stopped turning (profile clock).
    pub start_ns: u64,
    /// When it turned again, or when the report was cut (a hang, an exit).
    pub end_ns: u64,
    pub kind: JobKind,
    /// Symbolicated; covers `keep` before the stall and the stall.
    pub profile: ProfileData,
    pub summary: String,
}

/// One call of `watchStalls()`: its loop's heartbeat, its settings, and
/// the reports waiting for the loop to take them.
pub struct Watch {
    pub heartbeat: Arc<Heartbeat>,
    pub options: StallOptions,
    symbols: SymbolicateOptions,
    /// Tells the watched thread that reports wait (from the reporter).
    wake: Box<dyn Fn() + Send + Sync>,
    queue: Mutex<VecDeque<StallReport>>,
    /// Jobs cut but not yet queued.
    in_flight: AtomicU64,
    closed: AtomicBool,
    stalls: AtomicU64,
    hangs: AtomicU64,
    hangs_not_written: AtomicU64,
}

impl Watch {
    /// Reports waiting, oldest first.
    pub fn take_reports(&self) -> Vec<StallReport> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect()
    }

    /// The oldest report waiting.
    pub fn take_one(&self) -> Option<StallReport> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn deliver(&self, report: StallReport) {
        if self.is_closed() {
            return;
        }
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(report);
        (self.wake)();
    }
}

/// What a watch has seen, and what the history holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchStats {
    pub stalls: u64,
    pub hangs: u64,
    /// Hangs whose files could not be written.
    pub hangs_not_written: u64,
    pub history: HistoryStats,
}

struct Stalls {
    observer: Arc<StallObserver>,
    /// Serializes adding and removing watches with the loop they need.
    change: Mutex<()>,
    tasks: crossbeam_channel::Sender<Task>,
    /// Symbol tables were loaded ahead (once per process).
    warmed: AtomicBool,
}

fn stalls() -> &'static Stalls {
    static STALLS: OnceLock<Stalls> = OnceLock::new();
    STALLS.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<Task>();
        let observer = Arc::new(StallObserver::new(tx.clone()));
        control::set_observer(observer.clone());
        // The reporter blocks every signal, as the sampler thread does, so
        // signals meant for the program never land on it. If it cannot be
        // created, jobs wait in the channel and watch() says so below.
        let spawn = || {
            std::thread::Builder::new().name("machsampler-stalls".into()).spawn(move || {
                let _own = crate::sampler::own_threads::OwnThread::mark();
                reporter(rx)
            })
        };
        let _ = crate::sampler::session::with_signals_blocked(spawn);
        Stalls { observer, change: Mutex::new(()), tasks: tx, warmed: AtomicBool::new(false) }
    })
}

/// How long after a watch starts the symbol tables are loaded: long enough
/// for the history to show some of the code that runs (the executable's
/// tables, the largest, are loaded whatever it shows), short enough that
/// loading them (a few hundred ms for Node's on a busy machine) is over
/// before most first stalls.
const WARM_AFTER: std::time::Duration = std::time::Duration::from_millis(250);

fn reporter(tasks: Receiver<Task>) {
    // A warm-up waits for its moment without holding up reports.
    let mut warm: Option<(std::time::Instant, SymbolicateOptions)> = None;
    loop {
        let task = match &warm {
            Some((at, _)) => match tasks.recv_deadline(*at) {
                Ok(task) => task,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    let (_, symbols) = warm.take().expect("a warm-up");
                    let now = crate::v8::now_ns();
                    let window = stalls().observer.window(now.saturating_sub(WARM_AFTER.as_nanos() as u64), now);
                    report::warm_symbols(window, &symbols);
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            },
            None => match tasks.recv() {
                Ok(task) => task,
                Err(_) => return,
            },
        };
        let job = match task {
            Task::Report(job) => *job,
            Task::WarmSymbols(symbols) => {
                warm = Some((std::time::Instant::now() + WARM_AFTER, symbols));
                continue;
            }
        };
        let watch = job.watch.clone();
        let kind = job.kind;
        let report = report::build(job);
        match kind {
            JobKind::Hang => {
                if let Some(dir) = &watch.options.hang_dir {
                    // Counted once written: `stats().hangs` is what the
                    // directory holds. A write that fails (the directory
                    // removed or made read-only since) is counted apart.
                    let n = watch.hangs.load(Ordering::Acquire) + watch.hangs_not_written.load(Ordering::Acquire) + 1;
                    match report::write_hang(&report, dir, n) {
                        Ok(()) => watch.hangs.fetch_add(1, Ordering::AcqRel),
                        Err(_) => watch.hangs_not_written.fetch_add(1, Ordering::AcqRel),
                    };
                }
            }
            JobKind::Stall | JobKind::AtExit => {
                watch.stalls.fetch_add(1, Ordering::AcqRel);
                watch.deliver(report);
            }
        }
        watch.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts watching a loop whose thread beats `heartbeat`. `wake` is called
/// (from another thread) when reports wait in the watch.
pub fn watch(
    heartbeat: Arc<Heartbeat>,
    options: StallOptions,
    symbols: SymbolicateOptions,
    wake: Box<dyn Fn() + Send + Sync>,
) -> Result<Arc<Watch>, SamplerError> {
    if let Some(dir) = &options.hang_dir {
        check_dir(dir)?;
    }
    let s = stalls();
    let watch = Arc::new(Watch {
        heartbeat,
        options,
        symbols,
        wake,
        queue: Mutex::new(VecDeque::new()),
        in_flight: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        stalls: AtomicU64::new(0),
        hangs: AtomicU64::new(0),
        hangs_not_written: AtomicU64::new(0),
    });
    let _change = s.change.lock().unwrap_or_else(PoisonError::into_inner);
    let interval = s.observer.add(watch.clone());
    if let Err(e) = control::serve_observer(Some(interval)) {
        let rest = s.observer.remove(&watch);
        let _ = control::serve_observer(rest);
        return Err(e);
    }
    if watch.options.warm_symbols && !s.warmed.swap(true, Ordering::AcqRel) {
        let _ = s.tasks.send(Task::WarmSymbols(watch.symbols.clone()));
    }
    Ok(watch)
}

/// `hangDir` must be a directory a file can be created in now: a hang is
/// written while the loop is stuck, too late to tell the caller.
fn check_dir(dir: &PathBuf) -> Result<(), SamplerError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(SamplerError::new(ErrorCode::NotDir, format!("hangDir '{}' is not a directory", dir.display())))
        }
        Err(e) => return Err(SamplerError::io(&e, format!("hangDir '{}': {e}", dir.display()))),
    }
    crate::formats::check_writable(&dir.join(".machsampler-hang"))
        .map_err(|e| SamplerError::io(&e, format!("hangDir '{}' cannot be written: {e}", dir.display())))
}

/// Stops watching. Reports not yet taken are dropped; none is made after.
pub fn unwatch(watch: &Arc<Watch>) {
    if watch.closed.swap(true, Ordering::AcqRel) {
        return;
    }
    let s = stalls();
    let _change = s.change.lock().unwrap_or_else(PoisonError::into_inner);
    let rest = s.observer.remove(watch);
    let _ = control::serve_observer(rest);
    watch.queue.lock().unwrap_or_else(PoisonError::into_inner).clear();
}

/// For a loop that will not turn again (the process is exiting): waits
/// briefly for reports being made, then returns every report waiting,
/// with the stall in progress, if it has lasted the threshold, cut now.
pub fn flush(watch: &Arc<Watch>) -> Vec<StallReport> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while watch.in_flight.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut out = watch.take_reports();
    if !watch.is_closed() {
        if let Some(job) = stalls().observer.cut_ongoing(watch, crate::v8::now_ns()) {
            watch.stalls.fetch_add(1, Ordering::AcqRel);
            let report = report::build(job);
            watch.in_flight.fetch_sub(1, Ordering::AcqRel);
            out.push(report);
        }
    }
    out
}

pub fn stats(watch: &Watch) -> WatchStats {
    WatchStats {
        stalls: watch.stalls.load(Ordering::Acquire),
        hangs: watch.hangs.load(Ordering::Acquire),
        hangs_not_written: watch.hangs_not_written.load(Ordering::Acquire),
        history: stalls().observer.history_stats(),
    }
}
