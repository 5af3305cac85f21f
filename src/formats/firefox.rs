//! The Firefox Profiler's processed format (profiler.firefox.com), written
//! by `fxprof-processed-profile`, the crate samply uses, so the output
//! follows the format version the Profiler loads.
//!
//! One process per process of the profile (several when `record` followed
//! child processes), one thread per sampled thread, each sample with its
//! CPU delta (the Profiler draws CPU usage from it; idle samples have
//! none). An idle sample's leaf frame is in the `Idle` category, which the
//! Profiler shows as idle rather than running.
//! Frames are labels carrying the resolved names; JS functions are flagged
//! so the Profiler's "JavaScript only" call tree works, and categories
//! colour JS, native and unresolved frames apart.

use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CpuDelta, Frame, FrameFlags, FrameHandle, FrameInfo, Profile, ReferenceTimestamp,
    SamplingInterval, StackHandle, ThreadHandle, Timestamp,
};
use rustc_hash::FxHashMap;

use super::names::resolve;
use crate::profile::{FunctionKind, ProfileData, Symbols};

/// Per-thread interning: fxprof handles belong to one thread.
struct ThreadCtx {
    handle: ThreadHandle,
    /// By (function, idle).
    frames: FxHashMap<(u32, bool), FrameHandle>,
    stacks: FxHashMap<u32, StackHandle>,
    idle_stacks: FxHashMap<u32, StackHandle>,
}

struct Writer<'a> {
    profile: &'a ProfileData,
    symbols: &'a Symbols,
    fx: Profile,
    /// JavaScript, Native, Unresolved, Idle.
    categories: [CategoryHandle; 4],
}

impl Writer<'_> {
    fn frame(&mut self, ctx: &mut ThreadCtx, func: u32, idle: bool) -> FrameHandle {
        if let Some(&h) = ctx.frames.get(&(func, idle)) {
            return h;
        }
        let f = &self.symbols.functions[func as usize];
        let (category, flags) = match f.kind {
            FunctionKind::Js => (self.categories[0], FrameFlags::IS_JS),
            FunctionKind::Native => (self.categories[1], FrameFlags::empty()),
            FunctionKind::Unknown => (self.categories[2], FrameFlags::empty()),
        };
        let category = if idle { self.categories[3] } else { category };
        let label = self.fx.intern_string(&f.name);
        let h = self
            .fx
            .intern_frame(ctx.handle, FrameInfo { frame: Frame::Label(label), category_pair: category.into(), flags });
        ctx.frames.insert((func, idle), h);
        h
    }

    /// The stack of an idle sample at `node`: the same frames, its leaf in
    /// the Idle category.
    fn idle_stack(&mut self, ctx: &mut ThreadCtx, node: u32) -> StackHandle {
        if let Some(&h) = ctx.idle_stacks.get(&node) {
            return h;
        }
        let parent = match self.profile.stack_parent[node as usize] {
            p if p < 0 => None,
            p => self.stack(ctx, p as u32),
        };
        let func = self.symbols.frame_function[self.profile.stack_frame[node as usize] as usize];
        let frame = self.frame(ctx, func, true);
        let h = self.fx.intern_stack(ctx.handle, parent, frame);
        ctx.idle_stacks.insert(node, h);
        h
    }

    /// The fxprof stack for stack-table node `node`, interning the nodes
    /// above it that this thread has not used yet (root first).
    fn stack(&mut self, ctx: &mut ThreadCtx, node: u32) -> Option<StackHandle> {
        let mut missing = Vec::new();
        let mut n = node as i32;
        let mut parent = None;
        while n >= 0 {
            if let Some(&h) = ctx.stacks.get(&(n as u32)) {
                parent = Some(h);
                break;
            }
            missing.push(n as u32);
            n = self.profile.stack_parent[n as usize];
        }
        for &m in missing.iter().rev() {
            let func = self.symbols.frame_function[self.profile.stack_frame[m as usize] as usize];
            let frame = self.frame(ctx, func, false);
            let h = self.fx.intern_stack(ctx.handle, parent, frame);
            ctx.stacks.insert(m, h);
            parent = Some(h);
        }
        parent
    }
}

pub fn export(profile: &ProfileData) -> Vec<u8> {
    let symbols = resolve(profile);
    let mut fx = Profile::new(
        "machsampler",
        ReferenceTimestamp::from_millis_since_unix_epoch(profile.start_wall_ms),
        SamplingInterval::from_nanos(profile.interval_ns.max(1)),
    );
    fx.set_os_name(&profile.meta.platform);
    fx.set_symbolicated(profile.symbols.is_some());
    let categories = [
        fx.add_category("JavaScript", CategoryColor::Yellow),
        fx.add_category("Native", CategoryColor::LightBlue),
        fx.add_category("Unresolved", CategoryColor::Gray),
        fx.add_category("Idle", CategoryColor::Transparent),
    ];
    let at = |ns: u64| Timestamp::from_nanos_since_reference(ns.saturating_sub(profile.start_ns));
    // The Profiler names the main thread after its process: use the main
    // thread's own name ("node", "electron", …), and the command line when
    // known.
    let processes: Vec<_> = (0..profile.process_count())
        .map(|p| {
            let main = (0..profile.threads.len())
                .find(|&t| {
                    profile.process_of(t) == p && profile.threads[t].is_main && !profile.threads[t].name.is_empty()
                })
                .map_or("node", |t| profile.threads[t].name.as_str());
            let info = profile.processes.get(p);
            let name = match info {
                Some(i) if !i.command.is_empty() => i.command.clone(),
                _ => main.to_string(),
            };
            let process = fx.add_process(&name, info.map_or(profile.meta.pid, |i| i.pid), at(profile.start_ns));
            fx.set_process_end_time(process, at(profile.end_ns));
            process
        })
        .collect();

    let mut order: Vec<usize> = (0..profile.sample_count()).collect();
    order.sort_by_key(|&i| profile.sample_time_ns[i]);
    let mut first_sample = vec![None; profile.threads.len()];
    for &i in &order {
        first_sample[profile.sample_thread[i] as usize].get_or_insert(profile.sample_time_ns[i]);
    }

    // A profile without samples still needs a thread: the Profiler does
    // not load a file with none.
    if first_sample.iter().all(Option::is_none) {
        if let Some(t) = super::cpuprofile::main_thread(profile) {
            first_sample[t] = Some(profile.start_ns);
        }
    }

    let mut w = Writer { profile, symbols: &symbols, fx, categories };
    let mut threads: Vec<Option<ThreadCtx>> = Vec::with_capacity(profile.threads.len());
    for (t, rec) in profile.threads.iter().enumerate() {
        // Threads without samples would be empty tracks; leave them out.
        threads.push(first_sample[t].map(|start| {
            let handle = w.fx.add_thread(processes[profile.process_of(t)], rec.tid as u32, at(start), rec.is_main);
            w.fx.set_thread_name(handle, crate::profile::roles::display_name(profile, t));
            ThreadCtx {
                handle,
                frames: FxHashMap::default(),
                stacks: FxHashMap::default(),
                idle_stacks: FxHashMap::default(),
            }
        }));
    }
    let mut started = vec![false; profile.threads.len()];
    for &i in &order {
        let t = profile.sample_thread[i] as usize;
        let Some(ctx) = threads[t].as_mut() else { continue };
        if !std::mem::replace(&mut started[t], true) {
            // The Profiler ignores a thread's first CPU delta (it has
            // nothing before it to be a delta from), so the thread opens
            // with an empty sample of no weight where its first one's CPU
            // time began: that first sample's time then counts.
            let begin = profile.sample_time_ns[i].saturating_sub(profile.sample_cpu_delta_ns[i]);
            w.fx.add_sample(ctx.handle, at(begin), None, CpuDelta::ZERO, 0);
        }
        let stack = match profile.sample_idle[i] {
            0 => w.stack(ctx, profile.sample_stack[i]),
            _ => Some(w.idle_stack(ctx, profile.sample_stack[i])),
        };
        let cpu = CpuDelta::from_nanos(profile.sample_cpu_delta_ns[i]);
        let weight = profile.weight(i).min(i32::MAX as u64) as i32;
        w.fx.add_sample(ctx.handle, at(profile.sample_time_ns[i]), stack, cpu, weight);
    }
    // Serializing plain data cannot fail.
    let mut json = serde_json::to_value(&w.fx).unwrap_or_default();
    add_source_locations(&mut json, &symbols);
    serde_json::to_vec(&json).unwrap_or_default()
}

/// Fills the function tables' `fileName`, `lineNumber` and `columnNumber`,
/// which `fxprof-processed-profile` leaves empty, for JavaScript functions
/// with a known source, and names those functions without the location
/// their label carries (the Profiler shows the file beside the name).
fn add_source_locations(json: &mut serde_json::Value, symbols: &Symbols) {
    use serde_json::Value;
    let mut by_label: FxHashMap<&str, &crate::profile::Function> = FxHashMap::default();
    for f in &symbols.functions {
        if f.kind == FunctionKind::Js && !f.file.is_empty() {
            by_label.insert(f.name.as_str(), f);
        }
    }
    let Some(threads) = json.get_mut("threads").and_then(Value::as_array_mut) else { return };
    for thread in threads {
        let Some(thread) = thread.as_object_mut() else { continue };
        let Some(mut strings) = thread.remove("stringArray") else { continue };
        if let (Some(table), Some(list)) = (thread.get_mut("funcTable"), strings.as_array_mut()) {
            locate_functions(table, list, &by_label);
        }
        thread.insert("stringArray".into(), strings);
    }
}

fn locate_functions(
    table: &mut serde_json::Value,
    strings: &mut Vec<serde_json::Value>,
    by_label: &FxHashMap<&str, &crate::profile::Function>,
) {
    use serde_json::Value;
    let len = table.get("length").and_then(Value::as_u64).unwrap_or(0) as usize;
    let names: Vec<Option<u64>> = match table.get("name").and_then(Value::as_array) {
        Some(a) => a.iter().map(Value::as_u64).collect(),
        None => return,
    };
    let mut interned: FxHashMap<String, u64> = FxHashMap::default();
    let mut intern = |strings: &mut Vec<Value>, s: &str| -> u64 {
        *interned.entry(s.to_string()).or_insert_with(|| {
            strings.push(Value::String(s.to_string()));
            strings.len() as u64 - 1
        })
    };
    let (mut files, mut lines, mut columns, mut new_names) =
        (vec![Value::Null; len], vec![Value::Null; len], vec![Value::Null; len], names.clone());
    for (i, name) in names.iter().enumerate().take(len) {
        let Some(label) = name.and_then(|n| strings.get(n as usize)).and_then(Value::as_str) else { continue };
        let Some(f) = by_label.get(label).copied() else { continue };
        files[i] = Value::from(intern(strings, &f.file));
        lines[i] = Value::from(f.line);
        if f.column() > 0 {
            columns[i] = Value::from(f.column());
        }
        new_names[i] = Some(intern(strings, f.short_name()));
    }
    let Some(table) = table.as_object_mut() else { return };
    table.insert("fileName".into(), Value::from(files));
    table.insert("lineNumber".into(), Value::from(lines));
    table.insert("columnNumber".into(), Value::from(columns));
    table.insert(
        "name".into(),
        Value::from(new_names.into_iter().map(|n| n.map_or(Value::Null, Value::from)).collect::<Vec<_>>()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn threads_samples_and_names() {
        let p = sample_profile();
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 2);
        assert_eq!(threads[0]["name"], "main");
        assert_eq!(threads[0]["isMainThread"], true);
        assert_eq!(threads[1]["tid"], "101");
        // An empty sample of no weight first: the Profiler takes a thread's
        // first CPU delta for nothing, and the first real sample's counts.
        assert_eq!(threads[0]["samples"]["length"], 3);
        assert_eq!(threads[0]["samples"]["stack"][0], serde_json::Value::Null);
        assert_eq!(threads[0]["samples"]["weight"][0], 0);
        assert_eq!(threads[0]["samples"]["threadCPUDelta"][0], 0);
        assert_eq!(threads[0]["samples"]["threadCPUDelta"][1], 1);
        let strings: Vec<&str> = v["shared"]["stringArray"]
            .as_array()
            .or(threads[0]["stringArray"].as_array())
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
            .unwrap_or_default();
        for name in ["main", "a", "b"] {
            assert!(strings.contains(&name), "{name} missing from {strings:?}");
        }
        // The worker's idle sample (its second) has a leaf in the Idle
        // category; its running one does not.
        let categories: Vec<&str> =
            v["meta"]["categories"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        let idle = categories.iter().position(|&c| c == "Idle").unwrap() as u64;
        let t = &threads[1];
        let stack_category = |k: usize| {
            let s = t["samples"]["stack"][k].as_u64().unwrap() as usize;
            let f = t["stackTable"]["frame"][s].as_u64().unwrap() as usize;
            t["frameTable"]["category"][f].as_u64().unwrap()
        };
        assert_ne!(stack_category(1), idle);
        assert_eq!(stack_category(2), idle);
    }

    #[test]
    fn a_profile_without_samples_keeps_its_main_thread() {
        let mut p = sample_profile();
        for v in [&mut p.sample_thread, &mut p.sample_stack] {
            v.clear();
        }
        p.sample_time_ns.clear();
        p.sample_idle.clear();
        p.sample_cpu_delta_ns.clear();
        p.sample_weight.clear();
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 1);
        assert_eq!(threads[0]["isMainThread"], true);
        assert_eq!(threads[0]["samples"]["length"], 0);
    }

    #[test]
    fn javascript_functions_have_their_source_location() {
        let mut p = sample_profile();
        p.symbols.as_mut().unwrap().functions[2] = crate::profile::Function {
            name: "b (/app/x.js:30:7)".into(),
            module: -1,
            file: "/app/x.js".into(),
            line: 30,
            kind: FunctionKind::Js,
        };
        let v: serde_json::Value = serde_json::from_slice(&export(&p)).unwrap();
        let t = &v["threads"][0];
        let strings = t["stringArray"].as_array().unwrap();
        let funcs = &t["funcTable"];
        let named = |i: usize| strings[funcs["name"][i].as_u64().unwrap() as usize].as_str().unwrap().to_string();
        let b = (0..funcs["length"].as_u64().unwrap() as usize)
            .find(|&i| named(i) == "b")
            .expect("b, without its location");
        assert_eq!(strings[funcs["fileName"][b].as_u64().unwrap() as usize], "/app/x.js");
        assert_eq!((funcs["lineNumber"][b].as_u64(), funcs["columnNumber"][b].as_u64()), (Some(30), Some(7)));
        let a = (0..funcs["length"].as_u64().unwrap() as usize).find(|&i| named(i) == "a").unwrap();
        assert!(funcs["fileName"][a].is_null(), "a native function has none");
    }

    #[test]
    fn several_processes_in_one_file() {
        let m =
            crate::profile::merge::merge(vec![sample_profile(), sample_profile()], &["node a".into(), "node b".into()])
                .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&export(&m)).unwrap();
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 4);
        assert_eq!(threads[2]["processName"], "node b");
    }
}
