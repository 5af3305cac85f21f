//! Several processes' profiles as one: what `machsampler record` writes
//! when it followed a program's child processes. Each input must already
//! carry its names (symbols come from each process's own binaries and perf
//! map, which mean nothing in another process), so the merged profile is
//! symbolicated, with every table concatenated and its indices shifted.
//! Times stay as recorded: every process reads the same monotonic clock.

use super::{ProcessInfo, ProfileData, Symbols, JS_FRAME_TAG};

/// Merges `parts` (each symbolicated), in order; `commands[i]` is part
/// `i`'s command line. The first part gives the platform, interval and
/// the stats that are not added up. Fails on an unsymbolicated part.
pub fn merge(parts: Vec<ProfileData>, commands: &[String]) -> Result<ProfileData, String> {
    let mut out = ProfileData::default();
    let mut symbols = Symbols::default();
    let mut first = true;
    for (k, p) in parts.into_iter().enumerate() {
        p.validate()?;
        let sym = p.symbols.as_ref().ok_or_else(|| format!("process {} has no names yet", p.meta.pid))?;
        let process_base = out.processes.len() as u32;
        if p.processes.is_empty() {
            out.processes.push(ProcessInfo { pid: p.meta.pid, command: commands.get(k).cloned().unwrap_or_default() });
        } else {
            out.processes.extend(p.processes.iter().cloned());
        }
        let (thread_base, stack_base, frame_base) =
            (out.threads.len() as u32, out.stack_frame.len() as i32, out.frame_address.len() as u32);
        let (function_base, module_base, js_base) =
            (symbols.functions.len() as u32, out.modules.len() as i32, out.js_names.len() as u64);
        for t in 0..p.threads.len() {
            out.thread_process.push(process_base + p.process_of(t) as u32);
            out.thread_roles.push(p.role(t).to_string());
        }
        out.threads.extend(p.threads.iter().cloned());
        out.sample_thread.extend(p.sample_thread.iter().map(|&t| t + thread_base));
        out.sample_time_ns.extend_from_slice(&p.sample_time_ns);
        out.sample_stack.extend(p.sample_stack.iter().map(|&s| s + stack_base as u32));
        out.sample_idle.extend_from_slice(&p.sample_idle);
        out.sample_cpu_delta_ns.extend_from_slice(&p.sample_cpu_delta_ns);
        out.sample_weight.extend((0..p.sample_count()).map(|i| p.weight(i) as u32));
        out.stack_frame.extend(p.stack_frame.iter().map(|&f| f + frame_base));
        out.stack_parent.extend(p.stack_parent.iter().map(|&s| if s < 0 { -1 } else { s + stack_base }));
        out.frame_address.extend(p.frame_address.iter().map(|&a| match a & JS_FRAME_TAG {
            0 => a,
            _ => JS_FRAME_TAG | ((a & 0xffff_ffff) + js_base),
        }));
        out.js_names.extend(p.js_names.iter().cloned());
        out.modules.extend(p.modules.iter().cloned());
        symbols.frame_function.extend(sym.frame_function.iter().map(|&f| f + function_base));
        symbols.frame_line.extend_from_slice(&sym.frame_line);
        symbols.functions.extend(sym.functions.iter().map(|f| {
            let mut f = f.clone();
            if f.module >= 0 {
                f.module += module_base;
            }
            f
        }));
        if first {
            out.meta = p.meta.clone();
            out.interval_ns = p.interval_ns;
            out.start_ns = p.start_ns;
            out.end_ns = p.end_ns;
            out.start_wall_ms = p.start_wall_ms;
            out.stats = p.stats.clone();
            first = false;
        } else {
            // Processes recorded in different modes: their samples do not
            // stand for the same kind of time.
            if out.meta.mode != p.meta.mode {
                out.meta.mode.clear();
            }
            out.start_ns = out.start_ns.min(p.start_ns);
            out.end_ns = out.end_ns.max(p.end_ns);
            if p.start_wall_ms < out.start_wall_ms {
                out.start_wall_ms = p.start_wall_ms;
            }
            // Counters add up; the maxima and histograms-as-numbers too,
            // which over-counts only those few (documented in the stats).
            let theirs = p.stats.fields();
            for ((_, mine), (_, v)) in out.stats.fields_mut().into_iter().zip(theirs) {
                *mine = mine.saturating_add(v);
            }
        }
    }
    if out.thread_roles.iter().all(|r| r.is_empty()) {
        out.thread_roles.clear();
    }
    out.symbols = Some(symbols);
    out.validate()?;
    Ok(out)
}

/// The part of `profile` that is process `process` (an index into
/// `processes`), as a profile of its own.
pub fn split(profile: &ProfileData, process: usize) -> ProfileData {
    let keep: Vec<bool> = (0..profile.threads.len()).map(|t| profile.process_of(t) == process).collect();
    let mut thread_map = vec![u32::MAX; profile.threads.len()];
    let mut out = ProfileData {
        meta: profile.meta.clone(),
        modules: profile.modules.clone(),
        start_ns: profile.start_ns,
        end_ns: profile.end_ns,
        interval_ns: profile.interval_ns,
        start_wall_ms: profile.start_wall_ms,
        stats: profile.stats.clone(),
        js_names: profile.js_names.clone(),
        frame_address: profile.frame_address.clone(),
        stack_frame: profile.stack_frame.clone(),
        stack_parent: profile.stack_parent.clone(),
        symbols: profile.symbols.clone(),
        ..Default::default()
    };
    if let Some(p) = profile.processes.get(process) {
        out.meta.pid = p.pid;
        out.processes = vec![p.clone()];
    }
    for t in (0..profile.threads.len()).filter(|&t| keep[t]) {
        thread_map[t] = out.threads.len() as u32;
        out.threads.push(profile.threads[t].clone());
        if !profile.thread_roles.is_empty() {
            out.thread_roles.push(profile.role(t).to_string());
        }
    }
    for i in 0..profile.sample_count() {
        let t = profile.sample_thread[i] as usize;
        if !keep[t] {
            continue;
        }
        out.sample_thread.push(thread_map[t]);
        out.sample_time_ns.push(profile.sample_time_ns[i]);
        out.sample_stack.push(profile.sample_stack[i]);
        out.sample_idle.push(profile.sample_idle[i]);
        out.sample_cpu_delta_ns.push(profile.sample_cpu_delta_ns[i]);
        out.sample_weight.push(profile.weight(i) as u32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn two_processes_merge_and_split_back() {
        let a = sample_profile();
        let mut b = sample_profile();
        b.meta.pid = 4242;
        b.frame_address[1] = JS_FRAME_TAG; // a JS frame, name 0
        b.js_names = vec!["JS:*f /x.js:1:1".into()];
        let m = merge(vec![a.clone(), b.clone()], &["node a.js".into(), "node b.js".into()]).unwrap();
        assert_eq!(m.processes.len(), 2);
        assert_eq!(m.processes[1], ProcessInfo { pid: 4242, command: "node b.js".into() });
        assert_eq!(m.threads.len(), 4);
        assert_eq!(m.thread_process, vec![0, 0, 1, 1]);
        assert_eq!(m.pid_of(3), 4242);
        assert_eq!(m.total_weight(), a.total_weight() + b.total_weight());
        // The second process's frames still name its own functions.
        let s = m.symbols.as_ref().unwrap();
        let leaf =
            |i: usize| &s.functions[s.frame_function[m.stack_frame[m.sample_stack[i] as usize] as usize] as usize];
        assert_eq!(leaf(4).name, "b");
        assert_eq!(leaf(4).module, 1, "module index shifted");
        assert_eq!(m.frame_address[5], JS_FRAME_TAG, "JS name index shifted by the first's (none)");
        // Splitting gives each process back.
        let back = split(&m, 1);
        back.validate().unwrap();
        assert_eq!(back.meta.pid, 4242);
        assert_eq!(back.threads, b.threads);
        assert_eq!(back.total_weight(), b.total_weight());
        // An unsymbolicated part is refused.
        let mut raw = sample_profile();
        raw.symbols = None;
        assert!(merge(vec![raw], &[]).unwrap_err().contains("no names"));
    }
}
