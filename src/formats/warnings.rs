//! What a profile cannot show, said once: JavaScript that could not be
//! named shows as bare addresses (`0x7f1d0000c488`), and stacks cut at the
//! depth limit lose their callers, which a user cannot act on without
//! knowing why.

use super::names::{resolve, thread_label};
use crate::profile::{FunctionKind, ProfileData};

/// Below this share of a thread's running samples, unnamed code is noise.
const MIN_SHARE: f64 = 0.01;

/// Why JavaScript is unnamed when another copy of the addon held V8's
/// code events in the process.
pub const ANOTHER_COPY: &str = "JavaScript frames are unnamed: another copy of machsampler loaded in this process \
     names them (V8 lets one code-event handler per isolate describe code, and it took it first). Load one copy: \
     dedupe the dependency (npm dedupe).";

/// One warning if some thread spent time in code outside every module that
/// nothing named (JIT code V8 did not describe), naming the worst thread.
pub fn unnamed_js(profile: &ProfileData) -> Vec<String> {
    if profile.stats.js_names_left_to_another_copy > 0 {
        return vec![ANOTHER_COPY.to_string()];
    }
    let symbols = resolve(profile);
    let unnamed: Vec<bool> =
        symbols.functions.iter().map(|f| f.kind == FunctionKind::Unknown && f.module < 0).collect();
    // Node's own JavaScript (`node:internal/...`, a worker's bootstrap
    // above all, run while V8 describes its code to the sampler): code it
    // calls that has no name is no code of the user's.
    let internal: Vec<bool> =
        symbols.functions.iter().map(|f| f.kind == FunctionKind::Js && f.file.starts_with("node:")).collect();
    // Per stack node: does it or a caller sit in unnamed code called from
    // the user's JavaScript (or from no JavaScript at all)?
    let n = profile.stack_frame.len();
    let mut has = vec![false; n];
    // The nearest JavaScript function at or above each node, if internal.
    let mut under_internal = vec![false; n];
    for s in 0..n {
        let up = profile.stack_parent[s];
        let f = symbols.frame_function[profile.stack_frame[s] as usize] as usize;
        let caller_internal = up >= 0 && under_internal[up as usize];
        under_internal[s] = if symbols.functions[f].kind == FunctionKind::Js { internal[f] } else { caller_internal };
        has[s] = (up >= 0 && has[up as usize]) || (unnamed[f] && !caller_internal);
    }
    let mut per_thread = vec![(0u64, 0u64); profile.threads.len()];
    for i in 0..profile.sample_count() {
        if profile.sample_idle[i] != 0 {
            continue;
        }
        let e = &mut per_thread[profile.sample_thread[i] as usize];
        e.0 += profile.weight(i);
        if has[profile.sample_stack[i] as usize] {
            e.1 += profile.weight(i);
        }
    }
    let worst = (0..per_thread.len())
        .filter(|&t| per_thread[t].1 >= 3 && per_thread[t].1 as f64 >= MIN_SHARE * per_thread[t].0 as f64)
        .max_by_key(|&t| per_thread[t].1);
    let Some(t) = worst else { return Vec::new() };
    let others = (0..per_thread.len()).filter(|&u| u != t && per_thread[u].1 > 0).count();
    let (running, without) = per_thread[t];
    vec![format!(
        "{:.1}% of thread {}'s samples{} are in JavaScript that has no name (shown as 0x… addresses): \
         V8 did not describe that code to the sampler (a worker's isolate it could not read, or code \
         compiled before sampling began). Unless it already was, record again with --perf-map, which has \
         V8 write every isolate's code names to /tmp/perf-<pid>.map.",
        100.0 * without as f64 / running.max(1) as f64,
        thread_label(profile, t),
        if others > 0 {
            format!(" (and {others} other thread{})", if others == 1 { "" } else { "s" })
        } else {
            String::new()
        },
    )]
}

/// One warning if more than [`MIN_SHARE`] of the samples had their stacks
/// cut at the depth limit: their outer frames, the thread's entry point
/// included, are missing, and totals of callers above the cut are low.
pub fn cut_stacks(profile: &ProfileData) -> Vec<String> {
    let mut out = deeper_than_copied(profile);
    let Some(percent) = share_worth_saying(profile.stats.truncated_stacks, profile.stats.samples_captured) else {
        return out;
    };
    // The limit the session had: its deepest stack.
    let mut depth = vec![0u32; profile.stack_parent.len()];
    for s in 0..depth.len() {
        let up = profile.stack_parent[s];
        depth[s] = if up >= 0 { depth[up as usize] + 1 } else { 1 };
    }
    let limit = depth.iter().copied().max().unwrap_or(0);
    out.push(format!(
        "{percent:.1}% of stacks were cut at the depth limit ({limit} frames): their outer frames, the thread's \
         entry point included, are missing, and their callers' totals are too low. Record again with a \
         larger --depth (maxStackDepth, up to 1024)."
    ));
    out
}

/// One warning if more than [`MIN_SHARE`] of the samples taken were
/// dropped (the sample buffer or stack table was full): the profile then
/// covers only part of the run.
pub fn dropped_samples(profile: &ProfileData) -> Vec<String> {
    let s = &profile.stats;
    let Some(percent) = share_worth_saying(s.samples_dropped, s.samples_captured + s.samples_dropped) else {
        return Vec::new();
    };
    vec![format!(
        "{percent:.1}% of the samples taken ({}) were dropped: the sample buffer was full, so the profile covers only \
         part of the run. Record again with a larger --buffer (bufferSamples).",
        s.samples_dropped
    )]
}

/// The percentage `cut` is of `all` samples, if more than [`MIN_SHARE`].
fn share_worth_saying(cut: u64, all: u64) -> Option<f64> {
    (cut > 0 && cut as f64 >= MIN_SHARE * all as f64).then(|| 100.0 * cut as f64 / all.max(1) as f64)
}

/// One warning if more than [`MIN_SHARE`] of the samples had stacks deeper
/// than the copy could follow: above the 48 KiB copied, the sampler keeps
/// only frame records, and a frame of code without frame pointers there
/// (the runtime's C++ under deep JavaScript) ends the stack.
fn deeper_than_copied(profile: &ProfileData) -> Vec<String> {
    let Some(percent) = share_worth_saying(profile.stats.ended_truncated_copy, profile.stats.samples_captured) else {
        return Vec::new();
    };
    vec![format!(
        "{percent:.1}% of stacks were deeper than the sampler could follow (past the 48 KiB of stack it copies, \
         through code without frame pointers): their outer frames, the thread's entry point included, are \
         missing, and their callers' totals are too low."
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::profile::Function;

    #[test]
    fn warns_when_stacks_were_cut_at_the_depth_limit() {
        let mut p = sample_profile();
        p.stats.samples_captured = 1000;
        p.stats.truncated_stacks = 5;
        assert!(cut_stacks(&p).is_empty(), "0.5 % is noise");
        p.stats.truncated_stacks = 300;
        let w = cut_stacks(&p);
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("30.0% of stacks were cut at the depth limit ("), "{}", w[0]);
        assert!(w[0].contains("--depth"), "{}", w[0]);
    }

    #[test]
    fn warns_when_stacks_were_deeper_than_the_copy() {
        let mut p = sample_profile();
        p.stats.samples_captured = 1000;
        p.stats.ended_truncated_copy = 5;
        assert!(cut_stacks(&p).is_empty(), "0.5 % is noise");
        p.stats.ended_truncated_copy = 200;
        p.stats.truncated_stacks = 300;
        let w = cut_stacks(&p);
        assert_eq!(w.len(), 2);
        assert!(w[0].starts_with("20.0% of stacks were deeper than the sampler could follow"), "{}", w[0]);
        assert!(w[1].starts_with("30.0% of stacks were cut at the depth limit"), "{}", w[1]);
    }

    #[test]
    fn warns_when_samples_were_dropped() {
        let mut p = sample_profile();
        p.stats.samples_captured = 1000;
        p.stats.samples_dropped = 5;
        assert!(dropped_samples(&p).is_empty(), "0.5 % is noise");
        p.stats.samples_captured = 10;
        p.stats.samples_dropped = 140;
        let w = dropped_samples(&p);
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("93.3% of the samples taken (140) were dropped"), "{}", w[0]);
        assert!(w[0].contains("--buffer"), "{}", w[0]);
    }

    #[test]
    fn warns_once_about_another_copy_instead_of_unnamed_code() {
        let mut p = sample_profile();
        p.stats.js_names_left_to_another_copy = 1;
        assert_eq!(unnamed_js(&p), vec![ANOTHER_COPY.to_string()]);
    }

    #[test]
    fn warns_once_about_unnamed_code() {
        let mut p = sample_profile();
        assert!(unnamed_js(&p).is_empty());
        // "b" becomes an address outside every module, on the main thread.
        p.symbols.as_mut().unwrap().functions[2] = Function::unknown(0x7f1d_0000_c488, -1);
        p.sample_weight = vec![2, 2, 1, 1];
        let w = unnamed_js(&p);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("100.0% of thread main (100)'s samples are in JavaScript that has no name"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("--perf-map"));
        // The same code called from Node's own JavaScript is not the user's.
        p.symbols.as_mut().unwrap().functions[1] = Function {
            name: "requireBuiltin (node:internal/bootstrap/realm:420:24)".into(),
            module: -1,
            file: "node:internal/bootstrap/realm".into(),
            line: 420,
            kind: FunctionKind::Js,
        };
        assert!(unnamed_js(&p).is_empty());
    }
}
