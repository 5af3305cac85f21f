//! The profile as data: what a session recorded, plus the modules needed to
//! symbolize it later and, once symbolized, its function names.
//!
//! This is the one model that symbolization, the exporters and the file
//! format share. The JS `Profile` object is the same data as typed arrays.

use crate::sampler::session::Recording;

pub mod merge;
pub mod roles;

pub use crate::platform::Module;
/// A frame that names a JavaScript function: the low 32 bits index
/// [`ProfileData::js_names`].
pub use crate::sampler::backend::TAGGED_FRAME as JS_FRAME_TAG;
pub use crate::sampler::session::ThreadRecord;
pub use crate::sampler::stats::StatsSnapshot;

/// The name of a statistic in profiles, in files and in JavaScript: its
/// field name in camelCase (`stacks_reaching_root` is `stacksReachingRoot`),
/// the same rule napi applies to the `Stats` object.
pub fn stat_key(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for ch in field.chars() {
        if ch == '_' {
            upper = true;
        } else if upper {
            out.extend(ch.to_uppercase());
            upper = false;
        } else {
            out.push(ch);
        }
    }
    out
}

/// What kind of code a function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FunctionKind {
    /// Machine code from a module's symbol table.
    Native,
    /// JavaScript (or other JIT) code, named by V8.
    Js,
    /// Nothing resolved the address; the name is `0x…`.
    Unknown,
}

impl FunctionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FunctionKind::Native => "native",
            FunctionKind::Js => "js",
            FunctionKind::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "native" => Some(FunctionKind::Native),
            "js" => Some(FunctionKind::Js),
            "unknown" => Some(FunctionKind::Unknown),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    pub name: String,
    /// Index into `ProfileData::modules`, or -1.
    pub module: i32,
    /// Source file, or empty.
    pub file: String,
    /// Line where the function starts, or 0.
    pub line: u32,
    pub kind: FunctionKind,
}

impl Function {
    /// An address nothing resolved: named `0x…`, in `module` (-1 if none).
    pub fn unknown(addr: u64, module: i32) -> Self {
        Function { name: format!("0x{addr:x}"), module, file: String::new(), line: 0, kind: FunctionKind::Unknown }
    }

    /// The column where a JavaScript function starts (1-based), or 0. V8
    /// names carry their location, `fib (/app/fib.js:3:13)`; the column is
    /// read from there rather than stored twice.
    pub fn column(&self) -> u32 {
        if self.kind != FunctionKind::Js || self.line == 0 {
            return 0;
        }
        let Some(rest) = self.name.strip_suffix(')') else { return 0 };
        let Some((before, col)) = rest.rsplit_once(':') else { return 0 };
        if !before.ends_with(&format!(":{}", self.line)) {
            return 0;
        }
        col.parse().unwrap_or(0)
    }

    /// The name without the location V8 adds to a JavaScript function's
    /// (`fib (/app/fib.js:3:13)` is `fib`), for formats that keep the
    /// location in fields of their own. Other names are returned whole.
    pub fn short_name(&self) -> &str {
        if self.kind != FunctionKind::Js || self.line == 0 {
            return &self.name;
        }
        let Some(rest) = self.name.strip_suffix(')') else { return &self.name };
        let line = format!(":{}", self.line);
        // The first " (" whose remainder is `<file>:<line>[:<column>]`: a
        // path may hold " (" too, a name seldom does.
        for (at, _) in rest.match_indices(" (") {
            let location = &rest[at + 2..];
            let without_column = match location.rsplit_once(':') {
                Some((before, col)) if col.bytes().all(|b| b.is_ascii_digit()) && before.ends_with(&line) => before,
                _ => location,
            };
            if without_column.ends_with(&line) {
                return &self.name[..at];
            }
        }
        &self.name
    }

    /// An address in module `module` (named `module_name`) that nothing
    /// names: `0x<file address> in <module_name>`. The file address is the
    /// one `atos -o`, `addr2line -e` and `llvm-symbolizer` take.
    pub fn unknown_in(file_address: u64, module: i32, module_name: &str) -> Self {
        Function {
            name: format!("0x{file_address:x} in {module_name}"),
            module,
            file: String::new(),
            line: 0,
            kind: FunctionKind::Unknown,
        }
    }
}

/// Names for every frame: frame `i` is in function `frame_function[i]`, at
/// source line `frame_line[i]` (0 if unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbols {
    pub frame_function: Vec<u32>,
    pub frame_line: Vec<u32>,
    pub functions: Vec<Function>,
}

/// Where the profile came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// `linux` or `darwin`.
    pub platform: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    pub pid: u32,
    /// What a sample's time is: `cpu` (its thread's CPU time), `wall`
    /// (wall-clock time, waiting included), or "" when no one mode says it:
    /// files written before the mode was recorded, stall reports (their
    /// rows weigh CPU and wall-clock time each as taken), profiles merged
    /// from both modes.
    pub mode: String,
}

impl Meta {
    pub fn current() -> Self {
        Meta {
            platform: if cfg!(target_vendor = "apple") { "darwin".into() } else { std::env::consts::OS.into() },
            arch: std::env::consts::ARCH.into(),
            pid: std::process::id(),
            mode: String::new(),
        }
    }

    /// Samples stand for CPU time.
    pub fn is_cpu_time(&self) -> bool {
        self.mode == "cpu"
    }
}

/// One process of a profile. A profile from `start()`/`stop()` holds one
/// (the caller); `machsampler record` following a program's children
/// merges one profile per Node.js process into one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The command line, as the process saw it (`node app.js`), or "".
    pub command: String,
}

#[derive(Clone, Debug, Default)]
pub struct ProfileData {
    pub meta: Meta,
    pub threads: Vec<ThreadRecord>,
    pub sample_thread: Vec<u32>,
    pub sample_time_ns: Vec<u64>,
    pub sample_stack: Vec<u32>,
    pub sample_idle: Vec<u8>,
    pub sample_cpu_delta_ns: Vec<u64>,
    /// Sampling intervals each row stands for (at least 1): a run of idle
    /// samples with the same stack, or CPU-timer expirations, is one row.
    pub sample_weight: Vec<u32>,
    pub stack_frame: Vec<u32>,
    pub stack_parent: Vec<i32>,
    pub frame_address: Vec<u64>,
    pub modules: Vec<Module>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub interval_ns: u64,
    pub start_wall_ms: f64,
    pub stats: StatsSnapshot,
    pub symbols: Option<Symbols>,
    /// Names of JavaScript frames: a frame address with `JS_FRAME_TAG` set
    /// is a JS function, its low 32 bits an index here.
    pub js_names: Vec<String>,
    /// The processes, when known: empty means one process, `meta.pid`.
    pub processes: Vec<ProcessInfo>,
    /// Per thread, its index in `processes`; empty means all in the first.
    pub thread_process: Vec<u32>,
    /// Per thread, what it runs (`main`, `libuv pool`, `worker 1 (/app/w.js)`;
    /// see `roles.rs`), "" if unknown; empty until roles are computed.
    pub thread_roles: Vec<String>,
}

impl ProfileData {
    pub fn from_recording(rec: Recording, js_names: Vec<String>, modules: Vec<Module>) -> Self {
        let (frame_address, stack_frame, stack_parent) = rec.stacks.into_columns();
        let s = rec.samples;
        let mode = match rec.mode {
            crate::sampler::backend::Mode::Cpu => "cpu",
            crate::sampler::backend::Mode::Wall => "wall",
        };
        ProfileData {
            meta: Meta { mode: mode.into(), ..Meta::current() },
            threads: rec.threads,
            sample_thread: s.thread,
            sample_time_ns: s.time_ns,
            sample_stack: s.stack,
            sample_idle: s.idle,
            sample_cpu_delta_ns: s.cpu_delta_ns,
            sample_weight: s.weight,
            stack_frame,
            stack_parent,
            frame_address,
            modules,
            start_ns: rec.start_ns,
            end_ns: rec.end_ns,
            interval_ns: rec.interval_ns,
            start_wall_ms: rec.start_wall_ms,
            stats: rec.stats,
            symbols: None,
            js_names,
            processes: Vec::new(),
            thread_process: Vec::new(),
            thread_roles: Vec::new(),
        }
    }

    /// Index of thread `thread`'s process in `processes` (0 when there is
    /// one process).
    pub fn process_of(&self, thread: usize) -> usize {
        self.thread_process.get(thread).copied().unwrap_or(0) as usize
    }

    /// The pid of thread `thread`'s process.
    pub fn pid_of(&self, thread: usize) -> u32 {
        self.processes.get(self.process_of(thread)).map_or(self.meta.pid, |p| p.pid)
    }

    /// How many processes the profile holds.
    pub fn process_count(&self) -> usize {
        self.processes.len().max(1)
    }

    /// Thread `thread`'s role, or "".
    pub fn role(&self, thread: usize) -> &str {
        self.thread_roles.get(thread).map_or("", |r| r.as_str())
    }

    /// Rows of the sample table.
    pub fn sample_count(&self) -> usize {
        self.sample_thread.len()
    }

    /// How many samples row `i` stands for.
    #[inline]
    pub fn weight(&self, i: usize) -> u64 {
        self.sample_weight.get(i).copied().unwrap_or(1) as u64
    }

    /// Samples in all, weights counted.
    pub fn total_weight(&self) -> u64 {
        (0..self.sample_count()).map(|i| self.weight(i)).sum()
    }

    /// The frame indices of stack node `node`, leaf first. Stops (rather
    /// than loops or panics) on a malformed table; `validate` rejects those.
    pub fn stack_frames(&self, node: u32) -> StackFrames<'_> {
        StackFrames { profile: self, node: node as i64, steps: 0 }
    }

    /// Checks every index, so that code reading a profile from a file can
    /// trust it. Returns a description of the first problem.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.sample_thread.len();
        let cols = [
            ("samples.timeNs", self.sample_time_ns.len()),
            ("samples.stack", self.sample_stack.len()),
            ("samples.idle", self.sample_idle.len()),
            ("samples.cpuDeltaNs", self.sample_cpu_delta_ns.len()),
            ("samples.weight", self.sample_weight.len()),
        ];
        for (name, len) in cols {
            if len != n {
                return Err(format!("{name} has {len} entries, samples.thread has {n}"));
            }
        }
        if let Some(i) = self.sample_weight.iter().position(|&w| w == 0) {
            return Err(format!("sample {i} has weight 0 (weights are at least 1)"));
        }
        if self.stack_parent.len() != self.stack_frame.len() {
            return Err("stacks.frame and stacks.parent differ in length".into());
        }
        if let Some(i) = self.sample_thread.iter().position(|&t| t as usize >= self.threads.len()) {
            return Err(format!("sample {i} names thread {} of {}", self.sample_thread[i], self.threads.len()));
        }
        if let Some(i) = self.sample_stack.iter().position(|&s| s as usize >= self.stack_frame.len()) {
            return Err(format!("sample {i} names stack {} of {}", self.sample_stack[i], self.stack_frame.len()));
        }
        for (i, (&f, &p)) in self.stack_frame.iter().zip(&self.stack_parent).enumerate() {
            if f as usize >= self.frame_address.len() {
                return Err(format!("stack {i} names frame {f} of {}", self.frame_address.len()));
            }
            // Parents come first, which also rules out cycles.
            if p < -1 || p >= i as i32 {
                return Err(format!("stack {i} has parent {p}; a parent must come before its child"));
            }
        }
        for (name, len) in [("threadProcess", self.thread_process.len()), ("threadRoles", self.thread_roles.len())] {
            if len != 0 && len != self.threads.len() {
                return Err(format!("{name} has {len} entries for {} threads", self.threads.len()));
            }
        }
        if let Some(i) = self.thread_process.iter().position(|&p| p as usize >= self.process_count()) {
            return Err(format!("thread {i} names process {} of {}", self.thread_process[i], self.process_count()));
        }
        if let Some(sym) = &self.symbols {
            if sym.frame_function.len() != self.frame_address.len() || sym.frame_line.len() != self.frame_address.len()
            {
                return Err("symbols do not cover every frame".into());
            }
            if let Some(i) = sym.frame_function.iter().position(|&f| f as usize >= sym.functions.len()) {
                return Err(format!("frame {i} names function {} of {}", sym.frame_function[i], sym.functions.len()));
            }
            if let Some(f) = sym.functions.iter().find(|f| f.module < -1 || f.module >= self.modules.len() as i32) {
                return Err(format!("function {} names module {} of {}", f.name, f.module, self.modules.len()));
            }
        }
        Ok(())
    }
}

/// For a frame address that stands for a JavaScript function (top bit
/// set), the index of its name in `ProfileData::js_names`.
pub fn js_frame_index(addr: u64) -> Option<usize> {
    (addr & JS_FRAME_TAG != 0).then_some((addr & 0xffff_ffff) as usize)
}

pub struct StackFrames<'a> {
    profile: &'a ProfileData,
    node: i64,
    steps: usize,
}

impl Iterator for StackFrames<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.node < 0 || self.steps > self.profile.stack_frame.len() {
            return None;
        }
        let i = self.node as usize;
        let frame = *self.profile.stack_frame.get(i)?;
        self.node = *self.profile.stack_parent.get(i)? as i64;
        self.steps += 1;
        Some(frame)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny profile: two threads, stacks main>a>b and main>c.
    pub fn sample_profile() -> ProfileData {
        ProfileData {
            meta: Meta::current(),
            threads: vec![
                ThreadRecord { tid: 100, name: "main".into(), is_main: true },
                ThreadRecord { tid: 101, name: "worker".into(), is_main: false },
            ],
            sample_thread: vec![0, 0, 1, 1],
            sample_time_ns: vec![1_000, 2_000, 1_500, 2_500],
            sample_stack: vec![2, 2, 3, 1],
            sample_idle: vec![0, 0, 0, 1],
            sample_cpu_delta_ns: vec![1_000, 1_000, 900, 0],
            sample_weight: vec![1, 1, 1, 1],
            // frames: 0=main 1=a 2=b 3=c
            stack_frame: vec![0, 1, 2, 3],
            stack_parent: vec![-1, 0, 1, 0],
            frame_address: vec![0x1000, 0x2000, 0x3000, 0x4000],
            modules: vec![Module { path: "/bin/app".into(), start: 0, end: 0x10000, bias: 0, build_id: "ab".into() }],
            start_ns: 500,
            end_ns: 3_000,
            interval_ns: 1_000,
            start_wall_ms: 1.7e12,
            stats: StatsSnapshot::default(),
            symbols: Some(Symbols {
                frame_function: vec![0, 1, 2, 3],
                frame_line: vec![10, 20, 30, 0],
                functions: ["main", "a", "b", "c"]
                    .iter()
                    .map(|n| Function {
                        name: n.to_string(),
                        module: 0,
                        file: "app.c".into(),
                        line: 1,
                        kind: FunctionKind::Native,
                    })
                    .collect(),
            }),
            js_names: Vec::new(),
            processes: Vec::new(),
            thread_process: Vec::new(),
            thread_roles: Vec::new(),
        }
    }

    #[test]
    fn js_columns_come_from_the_name() {
        let f = |name: &str, line| Function {
            name: name.into(),
            module: -1,
            file: "/a.js".into(),
            line,
            kind: FunctionKind::Js,
        };
        assert_eq!(f("fib (/a.js:3:13)", 3).column(), 13);
        assert_eq!(f("fib (/a.js:3)", 3).column(), 0);
        assert_eq!(f("fib (/a.js:4:13)", 3).column(), 0);
        assert_eq!(f("fib", 0).column(), 0);
        assert_eq!(f("fib (/a.js:3:13)", 3).short_name(), "fib");
        assert_eq!(f("get x (/a (b).js:3:13)", 3).short_name(), "get x");
        assert_eq!(f(" (/a.js:3:13)", 3).short_name(), "");
        assert_eq!(f("fib (/a.js:4:13)", 3).short_name(), "fib (/a.js:4:13)");
        assert_eq!(f("fib", 0).short_name(), "fib");
        let native = Function { kind: FunctionKind::Native, ..f("f (x:3)", 3) };
        assert_eq!(native.short_name(), "f (x:3)");
    }

    #[test]
    fn stacks_walk_leaf_first() {
        let p = sample_profile();
        assert_eq!(p.stack_frames(2).collect::<Vec<_>>(), vec![2, 1, 0]);
        assert_eq!(p.stack_frames(3).collect::<Vec<_>>(), vec![3, 0]);
        p.validate().unwrap();
    }

    #[test]
    fn validate_rejects_bad_indices_and_cycles() {
        let mut p = sample_profile();
        p.stack_parent[1] = 2; // a cycle through a later node
        assert!(p.validate().unwrap_err().contains("parent"));
        // Iteration still terminates on the malformed table.
        assert!(p.stack_frames(2).count() <= p.stack_frame.len() + 1);
        let mut p = sample_profile();
        p.sample_stack[0] = 99;
        assert!(p.validate().is_err());
        let mut p = sample_profile();
        p.sample_idle.pop();
        assert!(p.validate().is_err());
        let mut p = sample_profile();
        p.symbols.as_mut().unwrap().functions[0].module = 5;
        assert!(p.validate().is_err());
    }
}
