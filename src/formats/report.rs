//! The text report's numbers: hot functions
//! by self and by total samples, and the hottest call paths, for all
//! threads or those matching `--thread`.
//!
//! Work is proportional to the distinct stacks, not the samples: samples
//! are first counted per call-tree node, then each node with samples is
//! walked once. A million samples take milliseconds.
//!
//! Idle samples are left out unless asked for (see the module docs of
//! `formats`): the report answers where the CPU went.

use std::cmp::Reverse;

use super::names::{module_name, resolve, thread_label};
use super::tree::{CallTree, SampleFilter};
use super::view::{self, View};
use crate::profile::{roles, ProfileData};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    SelfSamples,
    TotalSamples,
}

impl SortBy {
    pub fn parse(s: &str) -> Option<SortBy> {
        match s {
            "self" => Some(SortBy::SelfSamples),
            "total" => Some(SortBy::TotalSamples),
            _ => None,
        }
    }
}

pub struct ReportOptions<'a> {
    /// A thread role, name or tid (see `roles::matches`); `None` for every
    /// thread.
    pub thread: Option<&'a str>,
    pub top: usize,
    pub by: SortBy,
    pub include_idle: bool,
    pub view: View,
}

impl Default for ReportOptions<'_> {
    fn default() -> Self {
        ReportOptions { thread: None, top: 15, by: SortBy::SelfSamples, include_idle: false, view: View::Mixed }
    }
}

#[derive(Debug)]
pub struct ThreadRow {
    pub tid: u64,
    pub name: String,
    /// What the thread runs (`roles.rs`), or "".
    pub role: String,
    /// Its process.
    pub pid: u32,
    pub is_main: bool,
    /// All samples of the thread, idle included.
    pub samples: u64,
    pub idle: u64,
}

#[derive(Debug)]
pub struct FunctionRow {
    pub name: String,
    /// File name of the module, or "".
    pub module: String,
    pub file: String,
    pub line: u32,
    pub kind: &'static str,
    /// Samples with this function as the leaf.
    pub self_samples: u64,
    /// Samples with this function anywhere on the stack (once per sample,
    /// however deep the recursion).
    pub total_samples: u64,
}

#[derive(Debug)]
pub struct PathRow {
    /// Function names, root first.
    pub frames: Vec<String>,
    pub samples: u64,
}

#[derive(Debug)]
pub struct Report {
    /// Samples counted (the selected threads, idle ones only if asked).
    pub samples: u64,
    /// Idle samples of the selected threads that were left out.
    pub idle_left_out: u64,
    pub interval_ns: u64,
    pub duration_ns: u64,
    /// The selected threads, busiest first.
    pub threads: Vec<ThreadRow>,
    /// Top functions, sorted by `by`.
    pub functions: Vec<FunctionRow>,
    /// Top call paths by samples.
    pub paths: Vec<PathRow>,
}

/// Thread indices matching a role, a name or a tid (several threads may
/// share one, such as libuv's pool). The error lists the threads there are.
pub fn select_threads(profile: &ProfileData, which: &str) -> Result<Vec<bool>, String> {
    let sel: Vec<bool> = (0..profile.threads.len()).map(|t| roles::matches(profile, t, which)).collect();
    if sel.iter().any(|&s| s) {
        return Ok(sel);
    }
    let mut names: Vec<String> = (0..profile.threads.len()).map(|t| thread_label(profile, t)).collect();
    if names.len() > 20 {
        names.truncate(20);
        names.push("…".into());
    }
    Err(format!("no thread has the role, name or tid '{which}'; threads are: {}", names.join(", ")))
}

pub fn report(profile: &ProfileData, opts: &ReportOptions) -> Result<Report, String> {
    profile.validate()?;
    let viewed = view::apply(profile, opts.view);
    let profile = viewed.as_ref();
    let selected = opts.thread.map(|t| select_threads(profile, t)).transpose()?;
    let symbols = resolve(profile);
    let tree = CallTree::build(profile, &symbols);
    let filter = SampleFilter { threads: selected.as_deref(), include_idle: opts.include_idle };
    let everything = SampleFilter { threads: selected.as_deref(), include_idle: true };

    let mut node_count = vec![0u64; tree.len()];
    let mut per_thread = vec![(0u64, 0u64); profile.threads.len()];
    let (mut samples, mut idle_left_out) = (0u64, 0u64);
    for i in 0..profile.sample_count() {
        if !everything.keeps(profile, i) {
            continue;
        }
        let idle = profile.sample_idle[i] != 0;
        let w = profile.weight(i);
        let t = &mut per_thread[profile.sample_thread[i] as usize];
        t.0 += w;
        t.1 += if idle { w } else { 0 };
        if filter.keeps(profile, i) {
            samples += w;
            node_count[tree.of_stack[profile.sample_stack[i] as usize] as usize] += w;
        } else {
            idle_left_out += w;
        }
    }

    let nf = symbols.functions.len();
    let (mut self_s, mut total_s) = (vec![0u64; nf], vec![0u64; nf]);
    // `seen[f] == node + 1` marks f as counted for this node's path.
    let mut seen = vec![0u32; nf];
    for (node, &count) in node_count.iter().enumerate() {
        if count == 0 {
            continue;
        }
        self_s[tree.func[node] as usize] += count;
        let mut n = node as i32;
        while n >= 0 {
            let f = tree.func[n as usize] as usize;
            if seen[f] != node as u32 + 1 {
                seen[f] = node as u32 + 1;
                total_s[f] += count;
            }
            n = tree.parent[n as usize];
        }
    }

    let name_of = |f: usize| symbols.functions[f].name.clone();
    let mut funcs: Vec<usize> = (0..nf).filter(|&f| total_s[f] > 0).collect();
    let key = |f: usize| match opts.by {
        SortBy::SelfSamples => (self_s[f], total_s[f]),
        SortBy::TotalSamples => (total_s[f], self_s[f]),
    };
    funcs.sort_by(|&a, &b| key(b).cmp(&key(a)).then_with(|| symbols.functions[a].name.cmp(&symbols.functions[b].name)));
    funcs.truncate(opts.top);
    let functions = funcs
        .into_iter()
        .map(|f| {
            let func = &symbols.functions[f];
            FunctionRow {
                name: func.name.clone(),
                module: module_name(profile, func).to_string(),
                file: func.file.clone(),
                line: func.line,
                kind: func.kind.as_str(),
                self_samples: self_s[f],
                total_samples: total_s[f],
            }
        })
        .collect();

    let mut leaves: Vec<usize> = (0..tree.len()).filter(|&n| node_count[n] > 0).collect();
    leaves.sort_by_key(|&n| (Reverse(node_count[n]), n));
    leaves.truncate(opts.top);
    let paths = leaves
        .into_iter()
        .map(|n| PathRow {
            frames: tree.path(n as u32).into_iter().map(|m| name_of(tree.func[m as usize] as usize)).collect(),
            samples: node_count[n],
        })
        .collect();

    let mut threads: Vec<ThreadRow> = profile
        .threads
        .iter()
        .zip(&per_thread)
        .enumerate()
        .filter(|(t, _)| selected.as_ref().is_none_or(|s| s[*t]))
        .map(|(t, (rec, &(samples, idle)))| ThreadRow {
            tid: rec.tid,
            name: rec.name.clone(),
            role: profile.role(t).to_string(),
            pid: profile.pid_of(t),
            is_main: rec.is_main,
            samples,
            idle,
        })
        .collect();
    threads.sort_by_key(|t| (Reverse(t.samples - t.idle), Reverse(t.samples), t.tid));

    Ok(Report {
        samples,
        idle_left_out,
        interval_ns: profile.interval_ns,
        duration_ns: profile.end_ns.saturating_sub(profile.start_ns),
        threads,
        functions,
        paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn self_total_and_paths() {
        let p = sample_profile();
        let r = report(&p, &ReportOptions::default()).unwrap();
        assert_eq!(r.samples, 3);
        assert_eq!(r.idle_left_out, 1);
        let rows: Vec<_> = r.functions.iter().map(|f| (f.name.as_str(), f.self_samples, f.total_samples)).collect();
        assert_eq!(rows, [("b", 2, 2), ("c", 1, 1), ("main", 0, 3), ("a", 0, 2)]);
        assert_eq!(r.paths[0].frames, ["main", "a", "b"]);
        assert_eq!(r.paths[0].samples, 2);
        assert_eq!(r.functions[0].module, "app");

        let by_total = ReportOptions { by: SortBy::TotalSamples, top: 2, ..Default::default() };
        let r = report(&p, &by_total).unwrap();
        let names: Vec<_> = r.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main", "b"]);
        assert_eq!(r.paths.len(), 2);
    }

    #[test]
    fn recursion_counts_once_in_total() {
        let mut p = sample_profile();
        // b's frame is also "main": main > a > main.
        p.symbols.as_mut().unwrap().frame_function[2] = 0;
        let r = report(&p, &ReportOptions::default()).unwrap();
        let main = r.functions.iter().find(|f| f.name == "main").unwrap();
        assert_eq!((main.self_samples, main.total_samples), (2, 3));
    }

    #[test]
    fn threads_by_name_or_tid_and_idle() {
        let p = sample_profile();
        let opts = ReportOptions { thread: Some("101"), include_idle: true, ..Default::default() };
        let r = report(&p, &opts).unwrap();
        assert_eq!(r.samples, 2);
        assert_eq!(r.threads.len(), 1);
        assert_eq!(r.threads[0].name, "worker");
        let opts = ReportOptions { thread: Some("main"), ..Default::default() };
        assert_eq!(report(&p, &opts).unwrap().samples, 2);
        let opts = ReportOptions { thread: Some("nope"), ..Default::default() };
        let e = report(&p, &opts).unwrap_err();
        assert!(e.contains("main (100), worker (101)"), "{e}");
        // Roles select too.
        let mut p = sample_profile();
        p.threads[1].name = "node".into();
        p.thread_roles = vec!["main".into(), "libuv pool".into()];
        let opts = ReportOptions { thread: Some("pool"), include_idle: true, ..Default::default() };
        assert_eq!(report(&p, &opts).unwrap().samples, 2);
        assert_eq!(thread_label(&p, 1), "libuv pool (101)");
    }
}
