//! JIT frames whose address V8 reused during the session, pinned to the
//! name they had when each sample was taken.
//!
//! At `stop()`, each sample whose stack holds an address that more than one
//! perf-map line covers gets the newest line written by the sample's time
//! (from [`PerfMapTimeline`]), as a tagged JavaScript frame, so a saved
//! profile needs no timeline. Unambiguous addresses are left to
//! symbolization. Why: `docs/design/perf-map-timeline.md`.

use std::path::Path;

use rustc_hash::FxHashMap;

use super::perfmap::PerfMap;
use super::{lookup_addresses, ModuleRanges};
use crate::profile::JS_FRAME_TAG;
use crate::profile::{js_frame_index, ProfileData};
use crate::symbols::perf_map_watch::PerfMapTimeline;

/// Pins the ambiguous JIT frames of a profile just recorded by this
/// process. Returns how many samples changed.
pub fn pin_reused_jit_frames(profile: &mut ProfileData, timeline: &PerfMapTimeline) -> usize {
    if timeline.points.is_empty() {
        return 0;
    }
    let map = PerfMap::read(Path::new(&format!("/tmp/perf-{}.map", profile.meta.pid)));
    pin_with(profile, timeline, &map)
}

fn pin_with(profile: &mut ProfileData, timeline: &PerfMapTimeline, map: &PerfMap) -> usize {
    if map.is_empty() || profile.sample_count() == 0 {
        return 0;
    }
    let probes = lookup_addresses(profile);
    let modules = ModuleRanges::new(profile);

    // Frame index -> the address to look up.
    let mut ambiguous: FxHashMap<u32, u64> = FxHashMap::default();
    for (i, (&addr, &probe)) in profile.frame_address.iter().zip(&probes).enumerate() {
        if js_frame_index(addr).is_some() || modules.find(probe).is_some() {
            continue;
        }
        let mut names = map.covering(probe).map(|(_, e, _)| e.raw.as_str());
        let Some(first) = names.next() else { continue };
        if names.any(|n| n != first) {
            ambiguous.insert(i as u32, probe);
        }
    }
    if ambiguous.is_empty() {
        return 0;
    }

    let mut name_index: FxHashMap<String, u32> =
        profile.js_names.iter().enumerate().map(|(i, n)| (n.clone(), i as u32)).collect();
    // Tagged frames already in the profile are reused, not duplicated.
    let mut frame_of: FxHashMap<u64, u32> = profile
        .frame_address
        .iter()
        .enumerate()
        .filter(|(_, &a)| js_frame_index(a).is_some())
        .map(|(i, &a)| (a, i as u32))
        .collect();
    let mut node_of: FxHashMap<(i32, u32), u32> = FxHashMap::default();
    let mut path: Vec<u32> = Vec::new();
    let mut changed = 0;
    for s in 0..profile.sample_count() {
        path.clear();
        let mut node = profile.sample_stack[s] as i64;
        while node >= 0 && path.len() <= profile.stack_frame.len() {
            path.push(node as u32);
            node = profile.stack_parent[node as usize] as i64;
        }
        if !path.iter().any(|&n| ambiguous.contains_key(&profile.stack_frame[n as usize])) {
            continue;
        }
        let at = profile.sample_time_ns[s].saturating_add(profile.interval_ns);
        let Some(size) = timeline.size_at(at) else { continue };
        // Rebuild the stack from the root, sharing nodes up to the first
        // frame that changes.
        let mut parent: i32 = -1;
        let mut diverged = false;
        for &n in path.iter().rev() {
            let f = profile.stack_frame[n as usize];
            let pinned = ambiguous.get(&f).and_then(|&probe| map.find_written_by(probe, size)).map(|(_, e)| {
                let next = name_index.len() as u32;
                let j = *name_index.entry(e.raw.clone()).or_insert_with(|| {
                    profile.js_names.push(e.raw.clone());
                    next
                });
                let addr = JS_FRAME_TAG | j as u64;
                *frame_of.entry(addr).or_insert_with(|| {
                    profile.frame_address.push(addr);
                    (profile.frame_address.len() - 1) as u32
                })
            });
            let f2 = pinned.unwrap_or(f);
            if !diverged && f2 == f {
                parent = n as i32;
                continue;
            }
            diverged = true;
            parent = *node_of.entry((parent, f2)).or_insert_with(|| {
                profile.stack_frame.push(f2);
                profile.stack_parent.push(parent);
                (profile.stack_frame.len() - 1) as u32
            }) as i32;
        }
        if diverged {
            profile.sample_stack[s] = parent as u32;
            changed += 1;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::{symbolicate, SymbolicateOptions};

    /// Two samples in the same JIT address, before and after V8 reused it.
    #[test]
    fn each_sample_gets_the_name_it_had_then() {
        let text = "5000 100 JS:*fib /app/fib.js:3:13\n5000 40 JS:~flushSync node:x:47:19\n";
        let first_end = text.find('\n').unwrap() as u64 + 1;
        let map = PerfMap::parse(text);
        let mut p = ProfileData {
            // caller (a module-less return address) then leaf
            frame_address: vec![0x9000, 0x5010],
            stack_frame: vec![0, 1],
            stack_parent: vec![-1, 0],
            sample_thread: vec![0, 0, 0],
            sample_time_ns: vec![1_000, 5_000, 9_000],
            sample_stack: vec![1, 1, 1],
            sample_idle: vec![0; 3],
            sample_cpu_delta_ns: vec![0; 3],
            sample_weight: vec![1; 3],
            interval_ns: 1_000,
            threads: vec![crate::profile::ThreadRecord { tid: 1, name: "w".into(), is_main: false }],
            ..Default::default()
        };
        let timeline = PerfMapTimeline { points: vec![(0, first_end), (7_000, text.len() as u64)], complete: true };
        assert_eq!(pin_with(&mut p, &timeline, &map), 3);
        p.validate().unwrap();
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        let leaf = |i: usize| {
            let f = p.stack_frame[p.sample_stack[i] as usize] as usize;
            s.functions[s.frame_function[f] as usize].name.clone()
        };
        assert_eq!(leaf(0), "fib (/app/fib.js:3:13)");
        // 5 000 + one interval is still before the size grew.
        assert_eq!(leaf(1), "fib (/app/fib.js:3:13)");
        assert_eq!(leaf(2), "flushSync (node:x:47:19)");
        // The caller frame is shared, not copied.
        let parent = |i: usize| p.stack_parent[p.sample_stack[i] as usize];
        assert_eq!(parent(0), 0);
        assert_eq!(parent(2), 0);
        // The two fib samples share one node.
        assert_eq!(p.sample_stack[0], p.sample_stack[1]);
    }

    #[test]
    fn unambiguous_or_unknown_times_are_left_alone() {
        let map = PerfMap::parse("5000 100 JS:*fib /app/fib.js:3:13\n");
        let mut p = ProfileData {
            frame_address: vec![0x5010],
            stack_frame: vec![0],
            stack_parent: vec![-1],
            sample_thread: vec![0],
            sample_time_ns: vec![1_000],
            sample_stack: vec![0],
            sample_idle: vec![0],
            sample_cpu_delta_ns: vec![0],
            sample_weight: vec![1],
            ..Default::default()
        };
        let before = p.clone();
        let timeline = PerfMapTimeline { points: vec![(0, 10)], complete: true };
        assert_eq!(pin_with(&mut p, &timeline, &map), 0);
        assert_eq!(p.frame_address, before.frame_address);
        let map = PerfMap::parse("5000 100 JS:*a /a.js:1:1\n5000 100 JS:*b /b.js:1:1\n");
        assert_eq!(pin_with(&mut p, &PerfMapTimeline { points: vec![(5_000, 10)], complete: true }, &map), 0);
        assert_eq!(p.stack_frame, before.stack_frame);
    }
}
