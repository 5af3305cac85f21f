//! Views: which frames a report, a file or a flame graph shows.
//!
//! - `mixed`: every frame, JavaScript and native (what was sampled).
//! - `js`: what `node --cpu-prof` shows. Runtime internals (V8, Node, libc:
//!   frames in the runtime's own modules, see `roles::is_runtime_module`)
//!   are folded into the JavaScript function that called them, so a
//!   TypeScript compile shows the compiler's functions on top, not
//!   TurboFan. Native frames of the program's own addons are kept (a
//!   `.node` file, a library from node_modules): they are user code. On a
//!   thread that runs JavaScript, a stack with nothing left is `(garbage
//!   collector)` when it was in V8's heap, else `(program)`, as
//!   `--cpu-prof` names them; the collector running under a JavaScript
//!   function (an allocation that needed space) is a `(garbage collector)`
//!   frame on that function, so its time is not the function's own. Threads that never run JavaScript or addon
//!   code (V8's compiler threads, libuv's pool hashing in OpenSSL) have
//!   nothing to show in this view and are left out; the per-thread totals
//!   and the mixed view still show them.
//! - `native`: native frames only; JavaScript is folded into the native
//!   code that called it.
//!
//! A view is a new stack table over the same frames, plus the two synthetic
//! functions, so every exporter works on it unchanged.

use std::borrow::Cow;

use rustc_hash::FxHashMap;

use super::names::resolve;
use crate::profile::roles::is_runtime_module;
use crate::profile::{Function, FunctionKind, ProfileData};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    #[default]
    Mixed,
    Js,
    Native,
}

impl View {
    pub const NAMES: &'static str = "mixed, js, native";

    pub fn parse(s: &str) -> Option<View> {
        match s {
            "mixed" => Some(View::Mixed),
            "js" => Some(View::Js),
            "native" => Some(View::Native),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            View::Mixed => "mixed",
            View::Js => "js",
            View::Native => "native",
        }
    }
}

/// Substrings of V8's garbage collector's functions.
const GC: [&str; 5] =
    ["v8::internal::Heap::", "v8::internal::Scavenger", "MarkCompact", "v8::internal::MinorMC", "cppgc::"];

/// `profile` as `view` shows it (borrowed for `mixed`).
pub fn apply(profile: &ProfileData, view: View) -> Cow<'_, ProfileData> {
    if view == View::Mixed {
        return Cow::Borrowed(profile);
    }
    let mut symbols = resolve(profile).into_owned();
    let runtime: Vec<bool> = profile.modules.iter().map(|m| is_runtime_module(&m.path)).collect();
    let in_runtime = |f: &Function| usize::try_from(f.module).ok().and_then(|m| runtime.get(m).copied());
    let keep: Vec<bool> = symbols
        .functions
        .iter()
        .map(|f| match (view, f.kind) {
            (View::Js, FunctionKind::Js) => true,
            // Unnamed code outside every module is JIT code: kept, so it
            // is seen (and warned about) rather than hidden.
            (View::Js, _) => in_runtime(f) != Some(true),
            (View::Native, FunctionKind::Js) => false,
            (View::Native, FunctionKind::Native) => true,
            (View::Native, FunctionKind::Unknown) => f.module >= 0,
            (View::Mixed, _) => true,
        })
        .collect();
    let gc: Vec<bool> = symbols.functions.iter().map(|f| GC.iter().any(|g| f.name.contains(g))).collect();

    let mut out = profile.clone();
    // The two synthetic functions, each with a frame of its own.
    let synthetic = |name: &str| Function {
        name: name.into(),
        module: -1,
        file: String::new(),
        line: 0,
        kind: FunctionKind::Native,
    };
    let base_frame = out.frame_address.len() as u32;
    let base_function = symbols.functions.len() as u32;
    for name in ["(program)", "(garbage collector)"] {
        symbols.functions.push(synthetic(name));
        symbols.frame_function.push(base_function + symbols.frame_function.len() as u32 - base_frame);
        symbols.frame_line.push(0);
        out.frame_address.push(0);
    }
    let (program_frame, gc_frame) = (base_frame, base_frame + 1);

    out.stack_frame.clear();
    out.stack_parent.clear();
    let mut index: FxHashMap<(i32, u32), u32> = FxHashMap::default();
    let mut intern = |out: &mut ProfileData, parent: i32, frame: u32| -> i32 {
        *index.entry((parent, frame)).or_insert_with(|| {
            out.stack_frame.push(frame);
            out.stack_parent.push(parent);
            out.stack_frame.len() as u32 - 1
        }) as i32
    };
    let n = profile.stack_frame.len();
    let mut mapped = vec![-1i32; n];
    let mut in_gc = vec![false; n];
    for s in 0..n {
        let frame = profile.stack_frame[s];
        let func = symbols.frame_function[frame as usize] as usize;
        let parent = profile.stack_parent[s];
        let (up, up_gc) = if parent < 0 { (-1, false) } else { (mapped[parent as usize], in_gc[parent as usize]) };
        // In the collector since the last frame kept (JavaScript that a
        // collector's callback ran is not the collector's time).
        in_gc[s] = !keep[func] && (up_gc || gc[func]);
        mapped[s] = if keep[func] { intern(&mut out, up, frame) } else { up };
    }
    // Threads with something to show: any sample with a kept frame.
    let mut shows = vec![view == View::Native; profile.threads.len()];
    for i in 0..profile.sample_count() {
        if mapped[profile.sample_stack[i] as usize] >= 0 {
            shows[profile.sample_thread[i] as usize] = true;
        }
    }
    let mut kept = 0;
    for i in 0..profile.sample_count() {
        let s = profile.sample_stack[i] as usize;
        let thread = profile.sample_thread[i] as usize;
        let stack = match mapped[s] {
            // The collector running under JavaScript (an allocation that
            // needed space): its own row, as `--cpu-prof` counts it, on the
            // allocating function.
            m if m >= 0 && in_gc[s] && view == View::Js => intern(&mut out, m, gc_frame) as u32,
            m if m >= 0 => m as u32,
            _ if !shows[thread] => continue,
            _ => intern(&mut out, -1, if in_gc[s] { gc_frame } else { program_frame }) as u32,
        };
        out.sample_thread[kept] = profile.sample_thread[i];
        out.sample_time_ns[kept] = profile.sample_time_ns[i];
        out.sample_stack[kept] = stack;
        out.sample_idle[kept] = profile.sample_idle[i];
        out.sample_cpu_delta_ns[kept] = profile.sample_cpu_delta_ns[i];
        out.sample_weight[kept] = profile.sample_weight[i];
        kept += 1;
    }
    out.sample_thread.truncate(kept);
    out.sample_time_ns.truncate(kept);
    out.sample_stack.truncate(kept);
    out.sample_idle.truncate(kept);
    out.sample_cpu_delta_ns.truncate(kept);
    out.sample_weight.truncate(kept);
    out.symbols = Some(symbols);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::collapsed;
    use crate::formats::ExportOptions;
    use crate::profile::tests::sample_profile;
    use crate::profile::Module;

    /// main (node) > run (JS) > v8::internal::Compile (node) > addon_work
    /// (addon); and a thread in the GC with no JS.
    fn mixed_profile() -> ProfileData {
        let mut p = sample_profile();
        p.modules = vec![
            Module { path: "/usr/bin/node".into(), start: 0, end: 0x10000, ..Default::default() },
            Module { path: "/app/build/Release/addon.node".into(), start: 0x10000, end: 0x20000, ..Default::default() },
        ];
        let s = p.symbols.as_mut().unwrap();
        s.functions[0].name = "uv_run".into();
        s.functions[1] = Function {
            name: "run (/app/x.js:3:5)".into(),
            module: -1,
            file: "/app/x.js".into(),
            line: 3,
            kind: FunctionKind::Js,
        };
        s.functions[2].name = "v8::internal::Compiler::Compile".into();
        s.functions[3].name = "v8::internal::Heap::CollectGarbage".into();
        for f in &mut s.functions {
            if f.kind == FunctionKind::Native {
                f.module = 0;
            }
        }
        s.functions.push(Function {
            name: "addon_work".into(),
            module: 1,
            file: String::new(),
            line: 0,
            kind: FunctionKind::Native,
        });
        // frame 4 = addon_work under b (stack 4: main>a>b>addon_work)
        s.frame_function.push(4);
        s.frame_line.push(0);
        p.frame_address.push(0x11000);
        p.stack_frame.push(4);
        p.stack_parent.push(2);
        p.sample_stack = vec![2, 4, 3, 1];
        p.validate().unwrap();
        p
    }

    fn folded(p: &ProfileData, view: View) -> String {
        let v = apply(p, view);
        v.validate().unwrap();
        collapsed::export(&v, &ExportOptions { include_idle: true, ..Default::default() })
    }

    #[test]
    fn js_view_folds_runtime_into_the_js_caller_and_keeps_addons() {
        let p = mixed_profile();
        assert_eq!(
            folded(&p, View::Js),
            "main (100);run (/app/x.js:3:5) 1\n\
             main (100);run (/app/x.js:3:5);addon_work 1\n\
             worker (101);(garbage collector) 1\n\
             worker (101);run (/app/x.js:3:5) 1\n"
        );
        assert_eq!(
            folded(&p, View::Native),
            "main (100);uv_run;v8::internal::Compiler::Compile 1\n\
             main (100);uv_run;v8::internal::Compiler::Compile;addon_work 1\n\
             worker (101);uv_run 1\n\
             worker (101);uv_run;v8::internal::Heap::CollectGarbage 1\n"
        );
        assert!(matches!(apply(&p, View::Mixed), Cow::Borrowed(_)));
        // A thread that never runs JavaScript has nothing in the js view.
        let mut p = mixed_profile();
        p.sample_stack = vec![2, 4, 3, 0];
        assert_eq!(
            folded(&p, View::Js),
            "main (100);run (/app/x.js:3:5) 1\n\
             main (100);run (/app/x.js:3:5);addon_work 1\n"
        );
        // The collector under JavaScript: its own frame on the allocating function.
        let mut p = mixed_profile();
        p.stack_frame.push(3); // stack 5: main>a(run)>CollectGarbage
        p.stack_parent.push(1);
        p.sample_stack = vec![5, 4, 3, 1];
        assert_eq!(
            folded(&p, View::Js),
            "main (100);run (/app/x.js:3:5);(garbage collector) 1\n\
             main (100);run (/app/x.js:3:5);addon_work 1\n\
             worker (101);(garbage collector) 1\n\
             worker (101);run (/app/x.js:3:5) 1\n"
        );
        assert_eq!(View::parse("js"), Some(View::Js));
        assert_eq!(View::parse("JS"), None);
    }
}
