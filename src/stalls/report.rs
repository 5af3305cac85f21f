//! A stall's window of history as a normal profile: JavaScript frames
//! named from V8's code events, every frame symbolicated, and a summary.
//!
//! Rows weigh time (see `crate::sampler::history`); the profile's unit is
//! the stalled thread's fast interval when it was sampled faster, else the
//! background interval, and each row weighs its time in that unit, so
//! weights times `interval_ns` stay the time each row stands for.

use std::io;
use std::path::Path;

use super::{Job, JobKind, StallReport};
use crate::formats::stall_summary::{summary, StallSpan};
use crate::formats::{export, write_atomic, Format};
use crate::profile::{Meta, ProfileData, StatsSnapshot, ThreadRecord};
use crate::sampler::history::{HistoryWindow, FLAG_CPU, FLAG_FAST, FLAG_IDLE};
use crate::symbols::SymbolicateOptions;

pub fn build(job: Job) -> StallReport {
    let Job { watch, kind, start_ns, end_ns, window: w } = job;
    let o = &watch.options;
    let tid = watch.heartbeat.tid;
    let fast = w.flags.iter().any(|f| f & FLAG_FAST != 0);
    let unit = if fast { o.stall_interval_ns.min(o.interval_ns) } else { o.interval_ns }.max(1);
    let weight: Vec<u32> =
        w.weight_ns.iter().map(|&ns| ((ns + unit / 2) / unit).clamp(1, u32::MAX as u64) as u32).collect();
    let cpu: Vec<u64> = w
        .weight_ns
        .iter()
        .zip(&w.flags)
        .map(|(&ns, &f)| if f & FLAG_CPU != 0 || f & FLAG_IDLE == 0 { ns } else { 0 })
        .collect();
    let mut threads: Vec<ThreadRecord> = w
        .threads
        .iter()
        .map(|(tid, name, is_main)| ThreadRecord { tid: *tid, name: name.clone(), is_main: *is_main })
        .collect();
    let thread = match threads.iter().position(|t| t.tid == tid) {
        Some(i) => i,
        None => {
            // Not sampled at all (it blocked the signal, say): still named.
            threads.push(ThreadRecord { tid, name: String::new(), is_main: tid == std::process::id() as u64 });
            threads.len() - 1
        }
    };
    let from = start_ns.saturating_sub(o.keep_ns);
    let now = crate::v8::now_ns();
    let wall_now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);
    let total: u64 = weight.iter().map(|&w| w as u64).sum();
    let stats = StatsSnapshot {
        samples_captured: total,
        threads_sampled: total,
        thread_count: threads.len() as u64,
        ..Default::default()
    };
    let (frame_address, stack_frame, stack_parent) = w.stacks.into_columns();
    let mut data = ProfileData {
        meta: Meta::current(),
        threads,
        sample_thread: w.thread,
        sample_time_ns: w.time_ns,
        sample_stack: w.stack,
        sample_idle: w.flags.iter().map(|f| (f & FLAG_IDLE != 0) as u8).collect(),
        sample_cpu_delta_ns: cpu,
        sample_weight: weight,
        stack_frame,
        stack_parent,
        frame_address,
        modules: crate::platform::loaded_modules(),
        start_ns: from,
        end_ns,
        interval_ns: unit,
        start_wall_ms: wall_now_ms - now.saturating_sub(from) as f64 / 1e6,
        stats,
        symbols: None,
        js_names: Vec::new(),
        processes: Vec::new(),
        thread_process: Vec::new(),
        thread_roles: Vec::new(),
    };
    // While the program runs: V8's log is not read (it is at stop()).
    let no_log = crate::v8::inline_log::InlineLog::default();
    crate::control::name_js_frames_of(&mut data, &no_log, crate::sampler::options::MAX_STACK_DEPTH_MAX);
    let symbols = crate::symbols::symbolicate(&data, &watch.symbols);
    crate::profile::roles::assign(&mut data, &symbols, &[]);
    data.symbols = Some(symbols);
    let t = &data.threads[thread];
    let (thread_name, is_main) = (t.name.clone(), t.is_main);
    let span = StallSpan {
        thread,
        start_ns,
        end_ns,
        stall_interval_ns: fast.then_some(unit),
        ongoing: kind != JobKind::Stall,
    };
    let summary = summary(&data, &span);
    StallReport { tid, thread_name, is_main, start_ns, end_ns, kind, profile: data, summary }
}

/// Loads the symbol tables of the code in `window`, of the main
/// executable, of this addon and of libc into the process-wide cache, and
/// drops the names. The addon's own threads (sampler, reporter) are in
/// every profile, and loading its table (line tables to decompress) was
/// most of a cold first report (`docs/design/stalls.md`).
pub fn warm_symbols(window: HistoryWindow, symbols: &SymbolicateOptions) {
    let (mut frame_address, _, _) = window.stacks.into_columns();
    frame_address.push(warm_symbols as *const () as usize as u64);
    frame_address.push(libc::getpid as *const () as usize as u64);
    let modules = crate::platform::loaded_modules();
    let exe = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok());
    if let Some(m) = modules.iter().find(|m| exe.as_deref().is_some_and(|e| Path::new(&m.path) == e)) {
        frame_address.push(m.start);
    }
    frame_address.retain(|&a| a & crate::profile::JS_FRAME_TAG == 0);
    let n = frame_address.len() as u32;
    let data = ProfileData {
        meta: Meta::current(),
        stack_frame: (0..n).collect(),
        stack_parent: vec![-1; n as usize],
        frame_address,
        modules,
        ..Default::default()
    };
    let _ = crate::symbols::symbolicate(&data, symbols);
}

/// Writes a hang as `machsampler-hang-<pid>-<n>.machprof` in `dir`, with
/// its summary beside it (`.txt`), each atomically.
pub fn write_hang(report: &StallReport, dir: &Path, n: u64) -> io::Result<()> {
    let stem = format!("machsampler-hang-{}-{n}", std::process::id());
    let bytes = export(&report.profile, Format::Machprof).map_err(io::Error::other)?;
    let profile = dir.join(format!("{stem}.machprof"));
    write_atomic(&profile, &bytes)?;
    // Both files or neither: a hang is counted written only whole.
    write_atomic(&dir.join(format!("{stem}.txt")), report.summary.as_bytes()).inspect_err(|_| {
        let _ = std::fs::remove_file(&profile);
    })
}
