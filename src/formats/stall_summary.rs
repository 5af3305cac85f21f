//! The few lines that describe a stall: how long the loop did not turn,
//! where its thread spent that time (the dominant call path, JavaScript
//! and native frames named), and which other threads were busy meanwhile.
//!
//! The dominant stack is the sampled call path whose functions appear in
//! the most samples (summed over its functions), each frame shown with the
//! share of samples it is in: unlike the heaviest path from the root, it
//! holds when some stacks were cut short. Work is proportional to the
//! distinct stacks times their depth.

use std::fmt::Write;

use super::names::{module_name, resolve};
use super::tree::CallTree;
use crate::profile::{FunctionKind, ProfileData};

/// Frames of the dominant path shown at most (leaf side first).
const PATH_LINES: usize = 40;
/// Other busy threads listed at most.
const OTHER_THREADS: usize = 5;

/// Which stall of `profile` to describe.
pub struct StallSpan {
    /// Index into `profile.threads` of the stalled thread.
    pub thread: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The stalled thread's sampling interval during the stall, when it
    /// was sampled faster than the others.
    pub stall_interval_ns: Option<u64>,
    /// The stall had not ended: the process was exiting, or it is written
    /// out as a hang.
    pub ongoing: bool,
}

fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

pub fn summary(profile: &ProfileData, span: &StallSpan) -> String {
    let symbols = resolve(profile);
    let tree = CallTree::build(profile, &symbols);
    let interval = profile.interval_ns.max(1);
    let in_span = |i: usize| (span.start_ns..=span.end_ns).contains(&profile.sample_time_ns[i]);
    let duration = span.end_ns.saturating_sub(span.start_ns);
    let t = &profile.threads[span.thread];
    let mut out = String::new();
    let who = if t.is_main { "the main thread".to_string() } else { format!("thread '{}'", t.name) };
    let verb = if span.ongoing { "has not turned for" } else { "stalled for" };
    let _ = writeln!(out, "machsampler: the event loop of {who} (tid {}) {verb} {}", t.tid, ms(duration));

    // The stalled thread: weight per call-tree leaf, and per function the
    // weight of the samples it is in (once per sample).
    let mut leaf_weight: rustc_hash::FxHashMap<u32, u64> = rustc_hash::FxHashMap::default();
    let mut total = 0u64;
    for i in (0..profile.sample_count()).filter(|&i| profile.sample_thread[i] as usize == span.thread && in_span(i)) {
        let w = profile.weight(i);
        total += w;
        *leaf_weight.entry(tree.of_stack[profile.sample_stack[i] as usize]).or_default() += w;
    }
    let rate = match span.stall_interval_ns {
        Some(fast) => format!(", sampled every {} during the stall", ms(fast)),
        None => String::new(),
    };
    let _ = writeln!(out, "  {} of it sampled{rate}", ms(total * interval));
    let paths: Vec<(u32, u64, Vec<u32>)> = leaf_weight
        .iter()
        .map(|(&leaf, &w)| {
            let mut funcs: Vec<u32> = tree.path(leaf).iter().map(|&n| tree.func[n as usize]).collect();
            funcs.dedup();
            (leaf, w, funcs)
        })
        .collect();
    let mut incl: rustc_hash::FxHashMap<u32, u64> = rustc_hash::FxHashMap::default();
    for (_, w, funcs) in &paths {
        let mut seen = rustc_hash::FxHashSet::default();
        for &f in funcs {
            if seen.insert(f) {
                *incl.entry(f).or_default() += w;
            }
        }
    }
    // The dominant stack: the sampled path whose functions are in the most
    // samples, summed, each function less a tenth of the samples. Stacks
    // cut short (an unwinder that stopped early) lose to whole ones that
    // share their frames, so the path shown runs from the thread's start
    // to its leaf whenever one such sample exists; a rare frame (a JIT
    // compile, a GC) costs more than it adds, so a rare deeper path does
    // not win over the common one it extends.
    let dominant = paths.iter().max_by_key(|(leaf, w, funcs)| {
        let mut seen = rustc_hash::FxHashSet::default();
        let score: i128 = funcs.iter().filter(|f| seen.insert(**f)).map(|f| incl[f] as i128 * 10 - total as i128).sum();
        (score, *w, std::cmp::Reverse(*leaf))
    });
    match dominant {
        None => {
            let _ = writeln!(out, "  no samples of the thread during the stall");
        }
        Some((leaf, _, _)) => {
            let path = tree.path(*leaf);
            let name_of = |n: u32| {
                let f = &symbols.functions[tree.func[n as usize] as usize];
                // JavaScript names carry their place already.
                let place = if !f.file.is_empty() && f.name.contains(f.file.as_str()) {
                    String::new()
                } else if !f.file.is_empty() {
                    if f.line > 0 {
                        format!("{}:{}", f.file, f.line)
                    } else {
                        f.file.clone()
                    }
                } else {
                    module_name(profile, f).to_string()
                };
                (f.name.as_str(), f.kind, place)
            };
            // JavaScript on the path, innermost first: what user code was doing.
            let mut js: Vec<String> = Vec::new();
            for &n in path.iter().rev() {
                let (name, kind, place) = name_of(n);
                let label = if place.is_empty() { name.to_string() } else { format!("{name} ({place})") };
                if kind == FunctionKind::Js && js.last() != Some(&label) && js.len() < 4 {
                    js.push(label);
                }
            }
            if !js.is_empty() {
                let _ = writeln!(out, "  in JavaScript: {}", js.join(" <- "));
            }
            let (name, kind, _) = name_of(*leaf);
            if kind != FunctionKind::Js {
                let share = (incl[&tree.func[*leaf as usize]] * 100).checked_div(total).unwrap_or(0);
                let _ = writeln!(out, "  innermost: {name} (in {share} % of the samples)");
            }
            let _ = writeln!(out, "  dominant stack (innermost first, share of the stall's samples in each):");
            let shown = path.len().min(PATH_LINES);
            for &n in path.iter().rev().take(shown) {
                let (name, _, place) = name_of(n);
                let pct = incl[&tree.func[n as usize]] as f64 * 100.0 / total as f64;
                let place = if place.is_empty() { String::new() } else { format!("  {place}") };
                let _ = writeln!(out, "    {pct:5.1} %  {name}{place}");
            }
            if path.len() > shown {
                let _ = writeln!(out, "    ... {} more frames toward the thread's start", path.len() - shown);
            }
        }
    }

    // Other threads that ran during the stall.
    let mut busy: Vec<(u64, usize)> = Vec::new();
    let mut busy_of = vec![0u64; profile.threads.len()];
    for i in (0..profile.sample_count()).filter(|&i| in_span(i) && profile.sample_idle[i] == 0) {
        let th = profile.sample_thread[i] as usize;
        if th != span.thread {
            busy_of[th] += profile.weight(i);
        }
    }
    for (th, &w) in busy_of.iter().enumerate() {
        // At least a tenth of the stall on CPU, and more than one sample.
        if w * interval * 10 >= duration && w * interval > interval {
            busy.push((w, th));
        }
    }
    busy.sort_by_key(|&(w, th)| (std::cmp::Reverse(w), th));
    if busy.is_empty() {
        let _ = writeln!(out, "  no other thread was busy");
    } else {
        let _ = writeln!(out, "  other threads busy during the stall:");
        for &(w, th) in busy.iter().take(OTHER_THREADS) {
            // Its hottest function, by self time.
            let mut self_w: rustc_hash::FxHashMap<u32, u64> = rustc_hash::FxHashMap::default();
            for i in (0..profile.sample_count())
                .filter(|&i| profile.sample_thread[i] as usize == th && in_span(i) && profile.sample_idle[i] == 0)
            {
                let leaf = tree.of_stack[profile.sample_stack[i] as usize];
                *self_w.entry(tree.func[leaf as usize]).or_default() += profile.weight(i);
            }
            let top = self_w
                .iter()
                .max_by_key(|&(f, w)| (*w, std::cmp::Reverse(*f)))
                .map(|(&f, _)| symbols.functions[f as usize].name.clone())
                .unwrap_or_default();
            // Its role where its OS name says nothing (`node`), as elsewhere.
            let name = crate::profile::roles::display_name(profile, th);
            let tid = profile.threads[th].tid;
            let _ = writeln!(out, "    {name} (tid {tid}): {} on CPU, most in {top}", ms(w * interval));
        }
        if busy.len() > OTHER_THREADS {
            let _ = writeln!(out, "    ... and {} more", busy.len() - OTHER_THREADS);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::profile::{Function, ThreadRecord};

    #[test]
    fn names_the_heaviest_path_the_javascript_on_it_and_busy_threads() {
        let mut p = sample_profile();
        // 1 ms units. Thread 0 (main): 8 samples main>a>b, 2 main>c; thread
        // 1: 5 busy samples of c, 3 idle.
        p.interval_ns = 1_000_000;
        p.sample_thread = vec![0, 0, 1, 1];
        p.sample_time_ns = vec![10, 20, 15, 25];
        p.sample_stack = vec![2, 3, 3, 1];
        p.sample_idle = vec![0, 0, 0, 1];
        p.sample_cpu_delta_ns = vec![0; 4];
        p.sample_weight = vec![8, 2, 5, 3];
        let s = p.symbols.as_mut().unwrap();
        s.functions[1] =
            Function { name: "handler".into(), file: "/app/x.js".into(), line: 7, kind: FunctionKind::Js, module: -1 };
        p.threads[0] = ThreadRecord { tid: 100, name: "node".into(), is_main: true };
        p.validate().unwrap();
        let span = StallSpan {
            thread: 0,
            start_ns: 0,
            end_ns: 10_000_000,
            stall_interval_ns: Some(1_000_000),
            ongoing: false,
        };
        let text = summary(&p, &span);
        assert!(
            text.starts_with("machsampler: the event loop of the main thread (tid 100) stalled for 10.0 ms\n"),
            "{text}"
        );
        assert!(text.contains("10.0 ms of it sampled, sampled every 1.0 ms during the stall"), "{text}");
        assert!(text.contains("in JavaScript: handler (/app/x.js:7)"), "{text}");
        assert!(text.contains("innermost: b (in 80 % of the samples)"), "{text}");
        let stack: Vec<&str> = text.lines().skip_while(|l| !l.contains("dominant stack")).skip(1).take(3).collect();
        assert_eq!(
            stack,
            ["     80.0 %  b  app.c:1", "     80.0 %  handler  /app/x.js:7", "    100.0 %  main  app.c:1"]
        );
        assert!(text.contains("worker (tid 101): 5.0 ms on CPU, most in c"), "{text}");
        // Stacks cut short at the leaf (more of them than whole ones) do
        // not hide the whole stack they belong to.
        p.stack_frame.push(2);
        p.stack_parent.push(-1);
        p.sample_thread.push(0);
        p.sample_time_ns.push(30);
        p.sample_stack.push(4);
        p.sample_idle.push(0);
        p.sample_cpu_delta_ns.push(0);
        p.sample_weight.push(12);
        p.validate().unwrap();
        let text = summary(&p, &span);
        let stack: Vec<&str> = text.lines().skip_while(|l| !l.contains("dominant stack")).skip(1).take(3).collect();
        assert_eq!(
            stack,
            ["     90.9 %  b  app.c:1", "     36.4 %  handler  /app/x.js:7", "     45.5 %  main  app.c:1"]
        );
        // Outside the span, nothing counts.
        let span = StallSpan { thread: 0, start_ns: 100, end_ns: 200, stall_interval_ns: None, ongoing: true };
        let text = summary(&p, &span);
        assert!(text.contains("has not turned for"), "{text}");
        assert!(text.contains("no samples of the thread during the stall"), "{text}");
        assert!(text.contains("no other thread was busy"), "{text}");
    }

    #[test]
    fn a_rare_deeper_path_does_not_hide_the_common_one_it_extends() {
        let mut p = sample_profile();
        p.interval_ns = 1_000_000;
        // main>a>b in 20 samples; once, b called a compiler (frame 4).
        p.frame_address.push(0x5000);
        p.stack_frame.push(4);
        p.stack_parent.push(2);
        let s = p.symbols.as_mut().unwrap();
        s.frame_function.push(4);
        s.frame_line.push(0);
        s.functions.push(Function {
            name: "compile".into(),
            file: String::new(),
            line: 0,
            kind: FunctionKind::Native,
            module: 0,
        });
        p.sample_thread = vec![0, 0];
        p.sample_time_ns = vec![10, 20];
        p.sample_stack = vec![2, 4];
        p.sample_idle = vec![0, 0];
        p.sample_cpu_delta_ns = vec![0, 0];
        p.sample_weight = vec![20, 1];
        p.validate().unwrap();
        let span = StallSpan { thread: 0, start_ns: 0, end_ns: 100, stall_interval_ns: None, ongoing: false };
        let text = summary(&p, &span);
        assert!(text.contains("innermost: b (in 100 % of the samples)"), "{text}");
        assert!(!text.contains("compile"), "{text}");
    }
}
