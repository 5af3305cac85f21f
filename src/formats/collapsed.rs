//! Collapsed ("folded") stacks: one line per distinct stack, frames from the
//! root to the leaf separated by `;`, then a space and the sample count, as
//! flamegraph.pl and inferno read them. With `thread_prefix`, each stack
//! starts with its thread, `name (tid)`.

use std::fmt::Write;

use rustc_hash::FxHashMap;

use super::names::{collapsed_safe, resolve, thread_label};
use super::tree::{CallTree, SampleFilter};
use super::ExportOptions;
use crate::profile::ProfileData;

/// The collapsed lines, sorted, each ending in a newline.
pub fn export(profile: &ProfileData, opts: &ExportOptions) -> String {
    lines(profile, opts).concat()
}

/// One string per line (with its newline), sorted so output is stable.
pub fn lines(profile: &ProfileData, opts: &ExportOptions) -> Vec<String> {
    let symbols = resolve(profile);
    let tree = CallTree::build(profile, &symbols);
    let filter = SampleFilter { threads: None, include_idle: opts.include_idle };
    // Count first, then render each distinct (thread, node) once: a million
    // samples typically fold into a few thousand lines.
    let mut counts: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    for i in 0..profile.sample_count() {
        if filter.keeps(profile, i) {
            let thread = if opts.thread_prefix { profile.sample_thread[i] } else { 0 };
            *counts.entry((thread, tree.of_stack[profile.sample_stack[i] as usize])).or_default() += profile.weight(i);
        }
    }
    let mut out: Vec<String> = counts
        .into_iter()
        .map(|((thread, node), count)| {
            let mut line = String::new();
            if opts.thread_prefix {
                line.push_str(&collapsed_safe(&thread_label(profile, thread as usize)));
                line.push(';');
            }
            for (k, n) in tree.path(node).into_iter().enumerate() {
                if k > 0 {
                    line.push(';');
                }
                line.push_str(&collapsed_safe(&symbols.functions[tree.func[n as usize] as usize].name));
            }
            let _ = writeln!(line, " {count}");
            line
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn folds_per_thread_without_idle() {
        let p = sample_profile();
        let text = export(&p, &ExportOptions::default());
        assert_eq!(text, "main (100);main;a;b 2\nworker (101);main;c 1\n");
    }

    #[test]
    fn merged_threads_and_idle() {
        let p = sample_profile();
        let opts = ExportOptions { include_idle: true, thread_prefix: false, ..Default::default() };
        assert_eq!(export(&p, &opts), "main;a 1\nmain;a;b 2\nmain;c 1\n");
    }
}
