//! What each thread runs, from the functions its stacks start with.
//!
//! Operating-system thread names are often no help: on Node 20 every thread
//! is called `node`. The functions a thread's stacks start from say what it
//! is: libuv's pool threads run `worker` under `uv__thread_start`, V8's
//! platform threads `PlatformWorkerThread`, a `worker_threads` Worker
//! `node::worker::Worker::Run`. An addon's threads start in its own
//! library. The CLI adds what only Node knows (which script a Worker runs,
//! and its `threadId`) through `assign`. See
//! docs/design/profiling-what-users-run.md.

use super::{FunctionKind, ProfileData, Symbols};

/// How many frames from the root are looked at.
const ENTRY_DEPTH: usize = 24;

/// (substring of a function name, role), first match wins.
const RULES: &[(&str, &str)] = &[
    ("node::worker::Worker::", "worker"),
    ("node::inspector::", "inspector"),
    ("DelayedTaskScheduler", "V8 delayed tasks"),
    ("PlatformWorkerThread", "V8 worker"),
    ("v8::platform::DefaultWorkerThreadsTaskRunner", "V8 worker"),
    ("WorkerThreadsTaskRunner", "V8 worker"),
    ("node::tracing::", "tracing"),
    ("node::Watchdog", "watchdog"),
    ("vips_thread", "libvips worker"),
    ("vips_worker", "libvips worker"),
    ("vips__thread", "libvips worker"),
    ("g_thread_proxy", "glib thread"),
    ("uv__io_poll", "event loop"),
];

/// Names an operating system gives a thread that say nothing about it.
pub fn is_generic_name(name: &str) -> bool {
    // Node 24 and later name threads `node-MainThread` and `WorkerThread`;
    // a worker sampled before Node names it has its creator's name.
    matches!(
        name,
        "" | "node" | "nodejs" | "electron" | "Electron" | "thread" | "MainThread" | "node-MainThread" | "WorkerThread"
    )
}

/// Whether a module is part of the runtime (Node, Electron, V8, libc and
/// the system's libraries) rather than the program or one of its addons.
pub fn is_runtime_module(path: &str) -> bool {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    const SYSTEM_DIRS: [&str; 6] = ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/System/", "/usr/libexec/"];
    SYSTEM_DIRS.iter().any(|d| path.starts_with(d))
        || matches!(base, "node" | "nodejs" | "electron" | "Electron" | "Electron Framework")
        || base.starts_with("libnode")
        || base.starts_with("linux-vdso")
        || base.starts_with("linux-gate")
        || base == "[vdso]"
        || base.starts_with("ld-linux")
        || base.starts_with("machsampler.")
        || path.contains("Electron Framework.framework")
}

/// The role of every thread, from its entry frames ("" when nothing
/// matched).
pub fn classify(profile: &ProfileData, symbols: &Symbols) -> Vec<String> {
    let n = profile.threads.len();
    // Functions near the root, per thread, each once; distinct stacks only.
    let mut seen_stack = vec![u32::MAX; profile.stack_frame.len()];
    let mut entry: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut path = Vec::new();
    // Indexes are checked, not trusted: a profile may come from JavaScript
    // with symbols that do not match it; what does not resolve is skipped.
    for (&t, &s) in profile.sample_thread.iter().zip(&profile.sample_stack) {
        let s = s as usize;
        let (Some(seen), Some(list)) = (seen_stack.get_mut(s), entry.get_mut(t as usize)) else { continue };
        if *seen == t {
            continue;
        }
        *seen = t;
        path.clear();
        path.extend(
            profile
                .stack_frames(s as u32)
                .filter_map(|f| symbols.frame_function.get(f as usize).copied())
                .filter(|&f| (f as usize) < symbols.functions.len()),
        );
        for &f in path.iter().rev().take(ENTRY_DEPTH) {
            if !list.contains(&f) {
                list.push(f);
            }
        }
    }
    let in_runtime = |f: &super::Function| {
        usize::try_from(f.module).ok().and_then(|m| profile.modules.get(m)).is_some_and(|m| is_runtime_module(&m.path))
    };
    (0..n)
        .map(|t| {
            if profile.threads[t].is_main {
                return "main".to_string();
            }
            let names = || entry[t].iter().map(|&f| &symbols.functions[f as usize]);
            // The frame nearest the root that says something decides.
            for f in names() {
                if let Some((_, role)) = RULES.iter().find(|(pattern, _)| f.name.contains(pattern)) {
                    return role.to_string();
                }
                // libuv's pool: `worker` in threadpool.c (its caller,
                // uv__thread_start, is often inlined away).
                if (f.name == "worker" || f.name.starts_with("worker(")) && in_runtime(f) {
                    return "libuv pool".to_string();
                }
            }
            // An addon's own thread: the first function from a library
            // that is not the runtime's.
            let addon = names().find(|f| {
                f.kind == FunctionKind::Native
                    && usize::try_from(f.module)
                        .ok()
                        .and_then(|m| profile.modules.get(m))
                        .is_some_and(|m| !is_runtime_module(&m.path))
            });
            if let Some(f) = addon {
                let path = &profile.modules[f.module as usize].path;
                let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
                return format!("{} thread", library_stem(base));
            }
            if names().any(|f| f.kind == FunctionKind::Js) {
                return "JavaScript".to_string();
            }
            String::new()
        })
        .collect()
}

/// `libvips-cpp.so.42` → `libvips-cpp`, `sharp-linux-x64.node` → `sharp-linux-x64`.
fn library_stem(base: &str) -> &str {
    let end = base.find(".so").or_else(|| base.find(".dylib")).or_else(|| base.rfind(".node")).unwrap_or(base.len());
    &base[..end]
}

/// Sets the roles of `profile`: computed from the entry frames, then what
/// the caller knows better, as (tid, role) pairs (`worker 1 (/app/w.js)`).
pub fn assign(profile: &mut ProfileData, symbols: &Symbols, known: &[(u64, String)]) {
    let mut roles = classify(profile, symbols);
    for (t, rec) in profile.threads.iter().enumerate() {
        if let Some((_, role)) = known.iter().find(|(tid, _)| *tid == rec.tid) {
            roles[t] = role.clone();
        }
    }
    profile.thread_roles = roles;
}

/// The name a thread is shown by: its OS name, unless that is generic and
/// a role is known.
pub fn display_name(profile: &ProfileData, thread: usize) -> &str {
    let name = profile.threads[thread].name.as_str();
    let role = profile.role(thread);
    if is_generic_name(name) && !role.is_empty() {
        role
    } else if name.is_empty() {
        "thread"
    } else {
        name
    }
}

/// Whether `which` (as `report --thread` takes it) selects thread `t`: its
/// tid, its OS name, its role, its role without the script a worker runs
/// (`worker 2` selects `worker 2 (/app/w.js)`), or the first word of its
/// role (`worker` selects every `worker N (…)`; `pool` the libuv pool).
pub fn matches(profile: &ProfileData, t: usize, which: &str) -> bool {
    let rec = &profile.threads[t];
    if which.parse::<u64>().ok() == Some(rec.tid) || rec.name == which {
        return true;
    }
    let role = profile.role(t);
    if role.is_empty() {
        return false;
    }
    role == which
        || role.split(' ').next() == Some(which)
        || role.split(" (").next() == Some(which)
        || (which == "pool" && role == "libuv pool")
        || role.eq_ignore_ascii_case(which)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::profile::{Function, Module, ThreadRecord};

    fn native(name: &str, module: i32) -> Function {
        Function { name: name.into(), module, file: String::new(), line: 0, kind: FunctionKind::Native }
    }

    #[test]
    fn roles_from_entry_frames_and_known_workers() {
        let mut p = sample_profile();
        p.threads = ["node", "node", "node", "node", "node"]
            .iter()
            .enumerate()
            .map(|(i, n)| ThreadRecord { tid: 100 + i as u64, name: n.to_string(), is_main: i == 0 })
            .collect();
        p.modules = vec![
            Module { path: "/usr/bin/node".into(), start: 0, end: 0x10000, ..Default::default() },
            Module {
                path: "/app/node_modules/@img/sharp-libvips-linux-x64/lib/libvips-cpp.so.42".into(),
                start: 0x10000,
                end: 0x20000,
                ..Default::default()
            },
            Module { path: "/app/node_modules/foo/build/Release/foo.node".into(), ..Default::default() },
        ];
        // One root function per thread: start_thread > entry.
        let functions = vec![
            native("start_thread", 0),
            native("main", 0),
            native("uv__thread_start", 0),
            native("worker", 0), // libuv's pool, under an inlined uv__thread_start in release builds
            native("node::(anonymous namespace)::PlatformWorkerThread(void*)", 0),
            native("node::worker::Worker::Run()", 0),
            native("foo_thread_main", 2),
        ];
        // stacks: 0 start_thread; 1 main; 2 start>uv_start; 3 >worker;
        // 4 start>platform; 5 start>uv_start>Worker::Run; 6 start>foo
        p.frame_address = (0..7).map(|i| 0x100 * (i + 1)).collect();
        p.stack_frame = vec![0, 1, 2, 3, 4, 5, 6];
        p.stack_parent = vec![-1, -1, 0, 2, 0, 2, 0];
        p.symbols = Some(Symbols { frame_function: (0..7).collect(), frame_line: vec![0; 7], functions });
        p.sample_thread = vec![0, 1, 2, 3, 4];
        p.sample_stack = vec![1, 3, 4, 5, 6];
        p.sample_time_ns = vec![1; 5];
        p.sample_idle = vec![0; 5];
        p.sample_cpu_delta_ns = vec![0; 5];
        p.sample_weight = vec![1; 5];
        p.validate().unwrap();
        let s = p.symbols.clone().unwrap();
        assert_eq!(classify(&p, &s), ["main", "libuv pool", "V8 worker", "worker", "foo thread"]);
        assign(&mut p, &s, &[(103, "worker 1 (/app/pool.js)".into())]);
        assert_eq!(p.role(3), "worker 1 (/app/pool.js)");
        assert_eq!(display_name(&p, 3), "worker 1 (/app/pool.js)");
        // Node 24 and later: its own thread names, or the creator's name on
        // a worker sampled before Node named it, say less than the role.
        for name in ["WorkerThread", "node-MainThread"] {
            p.threads[3].name = name.into();
            assert_eq!(display_name(&p, 3), "worker 1 (/app/pool.js)");
        }
        assert!(matches(&p, 0, "main"));
        assert!(matches(&p, 3, "worker"));
        assert!(matches(&p, 3, "worker 1"), "the name the threads table shows");
        assert!(matches(&p, 3, "worker 1 (/app/pool.js)"));
        assert!(!matches(&p, 3, "worker 2"));
        assert!(matches(&p, 1, "pool"));
        assert!(matches(&p, 1, "libuv pool"));
        assert!(matches(&p, 2, "102"));
        assert!(!matches(&p, 2, "main"));
        // A named thread keeps its name.
        p.threads[1].name = "libuv-worker".into();
        assert_eq!(display_name(&p, 1), "libuv-worker");
        assert_eq!(library_stem("libvips-cpp.so.42"), "libvips-cpp");
        assert!(is_runtime_module("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!is_runtime_module("/app/node_modules/x/y.node"));
        // Symbols that do not match the profile (built in JavaScript): what
        // does not resolve is skipped, nothing panics.
        let mut short = s.clone();
        short.frame_function.truncate(3);
        short.functions.truncate(2);
        short.frame_function[2] = 99;
        let roles = classify(&p, &short);
        assert_eq!(roles.len(), p.threads.len());
        assert_eq!(roles[0], "main");
    }
}
