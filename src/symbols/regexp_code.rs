//! Regular-expression code V8 did not name.
//!
//! V8 compiles a regular expression to machine code of its own. From V8
//! 13.6 (Node 24) on, its code events report only the expressions compiled
//! before sampling started, and no perf map names the rest: their frames
//! are bare addresses, one row per address, so one hot expression was
//! spread over dozens of rows and counted as unnamed JavaScript. Such code
//! is only ever run by V8's regular-expression builtins (or, from C++, by
//! the irregexp macro assembler's entry): an address outside every module
//! that nothing named, whose samples are mostly under one of those, is
//! that code, and becomes one function. Mostly, not always: a sample caught
//! in the code's frameless prologue has a wrong caller, and one such sample
//! must not leave the expression's other samples unnamed. A function the
//! program passed to a builtin (a `replace` callback) is called from it
//! too: only if V8 also left that function unnamed (a worker the sampler
//! could not read) is it taken for expression code.

use crate::profile::{Function, FunctionKind, ProfileData, Symbols};

/// The name such frames get; named expressions are `RegExp:<pattern>`.
pub const UNNAMED_REGEXP: &str = "RegExp:(compiled while sampling; V8 did not name it)";

/// Whether a function of this name runs regular-expression code directly.
fn runs_regexp_code(name: &str) -> bool {
    name.starts_with("Builtins_RegExp") || name.contains("NativeRegExpMacroAssembler::Execute")
}

/// Renames, in `symbols`, the frames of `profile` that are unnamed code
/// called only from V8's regular-expression entry points, and drops the
/// functions no frame uses any more.
pub fn name_unnamed_regexp_code(profile: &ProfileData, symbols: &mut Symbols) {
    let unnamed = |f: &Function| f.kind == FunctionKind::Unknown && f.module < 0;
    let frames = symbols.frame_function.len();
    // Samples through each stack node (a parent comes before its child).
    let mut through = vec![0u64; profile.stack_frame.len()];
    for (i, &stack) in profile.sample_stack.iter().enumerate() {
        if let Some(n) = through.get_mut(stack as usize) {
            *n += u64::from(profile.sample_weight.get(i).copied().unwrap_or(1).max(1));
        }
    }
    for node in (0..through.len()).rev() {
        if let Ok(parent) = usize::try_from(profile.stack_parent[node]) {
            if parent < node {
                through[parent] += through[node];
            }
        }
    }
    // Per frame: samples under a regular-expression caller, and the others.
    let mut under = vec![(0u64, 0u64); frames];
    for (node, &frame) in profile.stack_frame.iter().enumerate() {
        let frame = frame as usize;
        let Some(&f) = symbols.frame_function.get(frame) else { continue };
        if !symbols.functions.get(f as usize).is_some_and(unnamed) {
            continue;
        }
        let caller = usize::try_from(profile.stack_parent[node])
            .ok()
            .and_then(|p| profile.stack_frame.get(p))
            .and_then(|&cf| symbols.frame_function.get(cf as usize))
            .and_then(|&cf| symbols.functions.get(cf as usize));
        // A node no sample ends under still counts once.
        let n = through[node].max(1);
        if caller.is_some_and(|c| runs_regexp_code(&c.name)) {
            under[frame].0 += n;
        } else {
            under[frame].1 += n;
        }
    }
    // At least nine in ten.
    let callers_ok: Vec<bool> = under.iter().map(|&(yes, no)| yes > 0 && yes >= 9 * no).collect();
    if !callers_ok.contains(&true) {
        return;
    }
    let regexp = symbols.functions.len() as u32;
    symbols.functions.push(Function {
        name: UNNAMED_REGEXP.to_string(),
        module: -1,
        file: String::new(),
        line: 0,
        kind: FunctionKind::Js,
    });
    for (frame, &ok) in callers_ok.iter().enumerate() {
        if ok {
            symbols.frame_function[frame] = regexp;
            symbols.frame_line[frame] = 0;
        }
    }
    // Functions no frame refers to any more go; the others keep their order.
    let mut used = vec![false; symbols.functions.len()];
    for &f in &symbols.frame_function {
        used[f as usize] = true;
    }
    let mut new_index = vec![0u32; symbols.functions.len()];
    let mut kept = 0u32;
    for (i, u) in used.iter().enumerate() {
        new_index[i] = kept;
        if *u {
            kept += 1;
        }
    }
    let mut i = 0;
    symbols.functions.retain(|_| {
        i += 1;
        used[i - 1]
    });
    for f in &mut symbols.frame_function {
        *f = new_index[*f as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, kind: FunctionKind, module: i32) -> Function {
        Function { name: name.into(), module, file: String::new(), line: 0, kind }
    }

    #[test]
    fn unnamed_code_under_regexp_builtins_becomes_one_function() {
        let mut p = crate::profile::tests::sample_profile();
        // Frames: 0 exec builtin, 1 and 2 unnamed code under it, 3 unnamed
        // code under both it and a JS function, 4 that JS function, 5 a
        // native function in a module under the builtin.
        p.frame_address = vec![0x100, 0x7000, 0x7010, 0x8000, 0x200, 0x300];
        p.stack_frame = vec![0, 1, 2, 3, 4, 3, 5];
        p.stack_parent = vec![-1, 0, 0, 0, -1, 4, 0];
        let mut s = Symbols {
            frame_function: vec![0, 1, 2, 3, 4, 5],
            frame_line: vec![0; 6],
            functions: vec![
                function("Builtins_RegExpPrototypeExec", FunctionKind::Native, 0),
                function("0x7000", FunctionKind::Unknown, -1),
                function("0x7010", FunctionKind::Unknown, -1),
                function("0x8000", FunctionKind::Unknown, -1),
                function("work (/a.js:1:1)", FunctionKind::Js, -1),
                function("v8::internal::IrregexpInterpreter::MatchForCallFromJs", FunctionKind::Native, 0),
            ],
        };
        name_unnamed_regexp_code(&p, &mut s);
        let names: Vec<&str> = s.frame_function.iter().map(|&f| s.functions[f as usize].name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Builtins_RegExpPrototypeExec",
                UNNAMED_REGEXP,
                UNNAMED_REGEXP,
                "0x8000",
                "work (/a.js:1:1)",
                "v8::internal::IrregexpInterpreter::MatchForCallFromJs"
            ]
        );
        // The two functions no frame uses are gone.
        assert_eq!(s.functions.len(), 5);
        assert!(!s.functions.iter().any(|f| f.name == "0x7000" || f.name == "0x7010"));
    }

    #[test]
    fn a_few_samples_under_another_caller_do_not_unname_the_rest() {
        let named = |under_builtin: usize| {
            let mut p = crate::profile::tests::sample_profile();
            // Frames: 0 exec builtin, 1 unnamed code, 2 a JS function.
            // Nodes: 0 builtin, 1 code under it, 2 the JS function, 3 the
            // code under that (a mis-unwound prologue).
            p.frame_address = vec![0x100, 0x7000, 0x200];
            p.stack_frame = vec![0, 1, 2, 1];
            p.stack_parent = vec![-1, 0, -1, 2];
            p.sample_stack = [vec![1; under_builtin], vec![3]].concat();
            p.sample_weight = vec![1; p.sample_stack.len()];
            let mut s = Symbols {
                frame_function: vec![0, 1, 2],
                frame_line: vec![0; 3],
                functions: vec![
                    function("Builtins_RegExpExecInternal", FunctionKind::Native, 0),
                    function("0x7000", FunctionKind::Unknown, -1),
                    function("work (/a.js:1:1)", FunctionKind::Js, -1),
                ],
            };
            name_unnamed_regexp_code(&p, &mut s);
            s.functions[s.frame_function[1] as usize].name == UNNAMED_REGEXP
        };
        assert!(named(40));
        assert!(named(9));
        assert!(!named(8));
    }

    #[test]
    fn without_such_frames_nothing_changes() {
        let mut p = crate::profile::tests::sample_profile();
        p.frame_address = vec![0x100, 0x7000];
        p.stack_frame = vec![0, 1];
        p.stack_parent = vec![-1, 0];
        let functions = vec![function("main", FunctionKind::Native, 0), function("0x7000", FunctionKind::Unknown, -1)];
        let mut s = Symbols { frame_function: vec![0, 1], frame_line: vec![0, 0], functions: functions.clone() };
        name_unnamed_regexp_code(&p, &mut s);
        assert_eq!(s.functions, functions);
        assert_eq!(s.frame_function, [0, 1]);
    }
}
