//! Chrome's `.cpuprofile` (the DevTools protocol's `Profiler.Profile`), as
//! Chrome DevTools, VS Code and Node's `--cpu-prof` use it. The format has
//! one thread, so this is the main thread (or, if no thread is marked main,
//! the one with the most samples).
//!
//! Nodes are the call tree by function under a `(root)` node; `samples` and
//! `timeDeltas` (microseconds) give the timeline, one entry per sampling
//! interval (a row of weight n is n entries; at most one entry per
//! interval of the profile's span plus one per row in all, so corrupt
//! weights cannot make the file endless). Idle samples go to an
//! `(idle)` node under the root, as `--cpu-prof` records them, so DevTools
//! shows idle time as idle rather than as time in `epoll_wait`. Locations
//! are 0-based as in the protocol: `lineNumber` and `columnNumber` of a
//! JavaScript function where it starts, -1 when unknown; a JavaScript
//! function's name is its name alone and each source has a script id of its
//! own, as in `--cpu-prof`'s files.

use serde::Serialize;

use rustc_hash::FxHashMap;

use super::names::{module_name, resolve};
use super::tree::CallTree;
use crate::profile::{FunctionKind, ProfileData};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CpuProfile {
    nodes: Vec<Node>,
    start_time: u64,
    end_time: u64,
    samples: Vec<u32>,
    time_deltas: Vec<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Node {
    id: u32,
    call_frame: CallFrame,
    hit_count: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    children: Vec<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallFrame {
    function_name: String,
    script_id: String,
    url: String,
    line_number: i64,
    column_number: i64,
}

/// The thread a single-thread format shows.
pub fn main_thread(profile: &ProfileData) -> Option<usize> {
    if let Some(t) = profile.threads.iter().position(|t| t.is_main) {
        return Some(t);
    }
    let mut counts = vec![0u64; profile.threads.len()];
    for &t in &profile.sample_thread {
        counts[t as usize] += 1;
    }
    (0..counts.len()).max_by_key(|&t| counts[t])
}

/// A source path as the URL DevTools and VS Code resolve: absolute paths
/// become `file://` URLs, percent-encoded as Node's `pathToFileURL` does
/// (and V8's own profiles show them); anything else is passed through.
fn url_of(file: &str) -> String {
    if !file.starts_with('/') {
        return file.to_string();
    }
    let mut url = String::with_capacity(file.len() + 8);
    url.push_str("file://");
    for &b in file.as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

pub fn export(profile: &ProfileData) -> Vec<u8> {
    let symbols = resolve(profile);
    let tree = CallTree::build(profile, &symbols);
    let thread = main_thread(profile);
    let mut indices: Vec<usize> =
        (0..profile.sample_count()).filter(|&i| Some(profile.sample_thread[i] as usize) == thread).collect();
    indices.sort_by_key(|&i| profile.sample_time_ns[i]);

    // Ids: 1 is (root); call-tree nodes this thread reaches get 2, 3, ….
    let mut id = vec![0u32; tree.len()];
    let mut order = Vec::new(); // call-tree nodes in id order
    let mut hits = vec![0u64; tree.len()];
    let mut idle_hits = 0u64;
    for &i in &indices {
        if profile.sample_idle[i] != 0 {
            idle_hits += profile.weight(i);
            continue;
        }
        let leaf = tree.of_stack[profile.sample_stack[i] as usize];
        hits[leaf as usize] += profile.weight(i);
        for n in tree.path(leaf) {
            if id[n as usize] == 0 {
                order.push(n);
                id[n as usize] = order.len() as u32 + 1;
            }
        }
    }
    let mut root = Node {
        id: 1,
        call_frame: CallFrame {
            function_name: "(root)".into(),
            script_id: "0".into(),
            url: String::new(),
            line_number: -1,
            column_number: -1,
        },
        hit_count: 0,
        children: Vec::new(),
    };
    // A script id per JavaScript source, as V8 numbers its scripts.
    let mut scripts: FxHashMap<String, u32> = FxHashMap::default();
    let mut nodes: Vec<Node> = order
        .iter()
        .map(|&n| {
            let f = &symbols.functions[tree.func[n as usize] as usize];
            // Native functions: name the module, as DevTools does for
            // native frames, so `memcpy` from libc and from node differ.
            let url = if f.file.is_empty() { module_name(profile, f).to_string() } else { url_of(&f.file) };
            let script_id = if f.kind == FunctionKind::Js && !f.file.is_empty() {
                let next = scripts.len() as u32 + 1;
                *scripts.entry(url.clone()).or_insert(next)
            } else {
                0
            };
            Node {
                id: id[n as usize],
                call_frame: CallFrame {
                    // The location is in its own fields, as --cpu-prof has it.
                    function_name: f.short_name().to_string(),
                    script_id: script_id.to_string(),
                    url,
                    line_number: f.line as i64 - 1, // 0-based; -1 if unknown
                    column_number: f.column() as i64 - 1,
                },
                hit_count: hits[n as usize],
                children: Vec::new(),
            }
        })
        .collect();
    for &n in &order {
        let child = id[n as usize];
        match tree.parent[n as usize] {
            p if p < 0 => root.children.push(child),
            p => nodes[id[p as usize] as usize - 2].children.push(child),
        }
    }
    let idle_id = nodes.len() as u32 + 2;
    let line = timeline(profile, &indices, idle_id, |i| match profile.sample_idle[i] {
        0 => id[tree.of_stack[profile.sample_stack[i] as usize] as usize],
        _ => idle_id,
    });
    let gaps = line.off_cpu;
    if idle_hits + gaps > 0 {
        root.children.push(idle_id);
        nodes.push(Node {
            id: idle_id,
            call_frame: CallFrame {
                function_name: "(idle)".into(),
                script_id: "0".into(),
                url: String::new(),
                line_number: -1,
                column_number: -1,
            },
            hit_count: idle_hits + gaps,
            children: Vec::new(),
        });
    }
    nodes.insert(0, root);
    let out = CpuProfile {
        nodes,
        start_time: profile.start_ns / 1000,
        end_time: (profile.end_ns / 1000).max(line.last_us),
        samples: line.samples,
        time_deltas: line.time_deltas,
    };
    // Serializing plain data into a Vec cannot fail.
    serde_json::to_vec(&out).unwrap_or_default()
}

/// A thread's timeline in the file's terms.
struct Timeline {
    samples: Vec<u32>,
    /// Microseconds since the previous entry (the first: since the start).
    time_deltas: Vec<i64>,
    /// Time of the last entry, µs.
    last_us: u64,
    /// Entries that are time off the CPU (CPU mode).
    off_cpu: u64,
}

/// The timeline: node ids and their time deltas, one entry per sampling
/// interval.
///
/// DevTools and speedscope take an entry to last until the next one. In
/// wall-clock mode a row of weight n at time t stands for the intervals t,
/// t + interval, …, kept before the next row's time. In CPU mode a sample
/// stands for the CPU time its thread used before it: the row's entries
/// end at t, and time between the previous row's end and this row's
/// start (the thread waited, or was not scheduled) becomes `(idle)`
/// entries, so it is not credited to the function sampled before it.
fn timeline(profile: &ProfileData, indices: &[usize], idle: u32, node_of: impl Fn(usize) -> u32) -> Timeline {
    let us = |ns: u64| ns / 1000;
    let cpu = profile.meta.mode == "cpu";
    let interval = profile.interval_ns;
    let mut last = us(profile.start_ns) as i64;
    let mut samples = Vec::with_capacity(indices.len());
    let mut time_deltas = Vec::with_capacity(indices.len());
    let mut gaps = 0u64;
    // The file's resolution is a microsecond: an interval below it (or 0,
    // in a corrupt file) counts as one.
    let span_intervals = profile.end_ns.saturating_sub(profile.start_ns) / interval.max(1000) + 1;
    let max_entries = span_intervals.saturating_add(indices.len() as u64).saturating_mul(2);
    let push = |samples: &mut Vec<u32>, time_deltas: &mut Vec<i64>, node: u32, at_ns: u64, last: &mut i64| {
        let t = (us(at_ns) as i64).max(*last);
        samples.push(node);
        time_deltas.push(t - *last);
        *last = t;
    };
    // CPU mode: where the previous row's CPU time ended.
    let mut ran_until = profile.start_ns;
    for (k, &i) in indices.iter().enumerate() {
        let node = node_of(i);
        let at = profile.sample_time_ns[i];
        let weight = profile.weight(i).min(span_intervals);
        let next = indices.get(k + 1).map_or(u64::MAX, |&j| profile.sample_time_ns[j]);
        let first = if cpu { at.saturating_sub(weight.saturating_mul(interval)).max(profile.start_ns) } else { at };
        if cpu && first > ran_until.saturating_add(interval / 2) && k > 0 {
            push(&mut samples, &mut time_deltas, idle, ran_until, &mut last);
            gaps += 1;
        }
        for r in 0..weight {
            if samples.len() as u64 >= max_entries {
                break;
            }
            push(&mut samples, &mut time_deltas, node, first.saturating_add(r * interval).min(next), &mut last);
        }
        ran_until = at;
    }
    // CPU mode: the thread did not run after its last sample.
    if cpu && !indices.is_empty() && profile.end_ns > ran_until.saturating_add(interval) {
        push(&mut samples, &mut time_deltas, idle, ran_until, &mut last);
        gaps += 1;
    }
    Timeline { samples, time_deltas, last_us: last as u64, off_cpu: gaps }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn main_thread_tree_and_timeline() {
        let p = sample_profile();
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let nodes = v["nodes"].as_array().unwrap();
        // (root) > main > a > b
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0]["callFrame"]["functionName"], "(root)");
        assert_eq!(nodes[0]["children"], serde_json::json!([2]));
        assert_eq!(nodes[3]["callFrame"]["functionName"], "b");
        assert_eq!(nodes[3]["hitCount"], 2);
        assert_eq!(nodes[3]["callFrame"]["lineNumber"], 0);
        assert_eq!(v["samples"], serde_json::json!([4, 4]));
        assert_eq!(v["timeDeltas"], serde_json::json!([1, 1]));
        assert_eq!(v["startTime"], 0);
        assert_eq!(v["endTime"], 3);
    }

    #[test]
    fn idle_goes_to_an_idle_node_and_weights_repeat_samples() {
        let mut p = sample_profile();
        p.sample_idle = vec![0, 1, 0, 0];
        p.sample_weight = vec![1, 3, 1, 1];
        let s = p.symbols.as_mut().unwrap();
        s.functions[2] = crate::profile::Function {
            name: "b (/app/x.js:30:7)".into(),
            module: -1,
            file: "/app/x.js".into(),
            line: 30,
            kind: crate::profile::FunctionKind::Js,
        };
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let nodes = v["nodes"].as_array().unwrap();
        let idle = nodes.iter().find(|n| n["callFrame"]["functionName"] == "(idle)").unwrap();
        assert_eq!(idle["hitCount"], 3);
        assert!(nodes[0]["children"].as_array().unwrap().contains(&idle["id"]));
        // The name alone; the location in its fields, with a script id.
        let b = nodes.iter().find(|n| n["callFrame"]["functionName"] == "b").unwrap();
        assert_eq!(
            (b["callFrame"]["lineNumber"].as_i64(), b["callFrame"]["columnNumber"].as_i64()),
            (Some(29), Some(6))
        );
        assert_eq!(b["callFrame"]["url"], "file:///app/x.js");
        assert_eq!(url_of("/my project/a#1%.js"), "file:///my%20project/a%231%25.js");
        assert_eq!(url_of("/tmp/é.js"), "file:///tmp/%C3%A9.js");
        assert_eq!(url_of("node:internal/x"), "node:internal/x");
        assert_eq!(b["callFrame"]["scriptId"], "1");
        assert_eq!(v["samples"].as_array().unwrap().len(), 4, "one per interval");
        assert_eq!(v["samples"][1], idle["id"]);
        // A corrupt weight: no row stands for more than the profile's span.
        p.sample_weight = vec![1, u32::MAX, 1, 1];
        let span = (p.end_ns - p.start_ns) / p.interval_ns + 1;
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        // The main thread's rows: one of weight 1, the corrupt one.
        assert_eq!(v["samples"].as_array().unwrap().len() as u64, 1 + span);
        // Every row corrupt, and no interval: bounded all the same.
        p.sample_weight = vec![u32::MAX; 4];
        p.interval_ns = 0;
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let n = v["samples"].as_array().unwrap().len() as u64;
        assert!(n <= (p.end_ns - p.start_ns) / 1000 + 1 + 4, "{n}");
    }

    #[test]
    fn cpu_mode_credits_time_off_the_cpu_to_idle_not_to_the_sample_before() {
        // Main runs `a` for 3 ms, waits 2 s, runs `b` for 3 ms (1 ms CPU
        // intervals; a sample comes at the end of each interval), then the
        // session lasts 1 s more.
        let ms = 1_000_000u64;
        let mut p = sample_profile();
        p.meta.mode = "cpu".into();
        p.interval_ns = ms;
        p.start_ns = 0;
        p.sample_time_ns = vec![ms, 2 * ms, 3 * ms, 2003 * ms, 2005 * ms];
        p.sample_thread = vec![0; 5];
        p.sample_stack = vec![1, 1, 1, 2, 2];
        p.sample_idle = vec![0; 5];
        p.sample_cpu_delta_ns = vec![ms; 5];
        p.sample_weight = vec![1, 1, 1, 1, 2];
        p.end_ns = 3005 * ms;
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let nodes = v["nodes"].as_array().unwrap();
        let id = |name: &str| nodes.iter().find(|n| n["callFrame"]["functionName"] == name).unwrap()["id"].clone();
        let (a, b, idle) = (id("a"), id("b"), id("(idle)"));
        let samples = v["samples"].as_array().unwrap();
        let deltas: Vec<i64> = v["timeDeltas"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
        // Time per node as DevTools counts it: each entry until the next.
        let mut at = v["startTime"].as_i64().unwrap();
        let times: Vec<i64> = deltas
            .iter()
            .map(|d| {
                at += d;
                at
            })
            .collect();
        let mut spent = std::collections::HashMap::new();
        for k in 0..samples.len() {
            let until = times.get(k + 1).copied().unwrap_or(v["endTime"].as_i64().unwrap());
            *spent.entry(samples[k].to_string()).or_insert(0) += until - times[k];
        }
        assert_eq!(spent[&a.to_string()], 3000, "{samples:?} {deltas:?}");
        // `b`: 2002-2003 ms, and a row of weight 2 for 2003-2005 ms.
        assert_eq!(spent[&b.to_string()], 3000, "{samples:?} {deltas:?}");
        // 3-2002 ms, and from 2005 ms to the end.
        assert_eq!(spent[&idle.to_string()], 2_999_000, "{samples:?} {deltas:?}");
        // Wall-clock mode keeps its meaning: each entry from its time on.
        p.meta.mode = "wall".into();
        let w: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        assert!(w["nodes"].as_array().unwrap().iter().all(|n| n["callFrame"]["functionName"] != "(idle)"));
    }

    #[test]
    fn without_a_main_thread_the_busiest_is_shown() {
        let mut p = sample_profile();
        p.threads[0].is_main = false;
        p.sample_thread = vec![1, 1, 1, 0];
        assert_eq!(main_thread(&p), Some(1));
        assert_eq!(main_thread(&ProfileData::default()), None);
    }
}
