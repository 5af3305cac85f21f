//! Merging `GetStackSample`'s JS frames into a native frame-pointer stack.
//!
//! Both lists run leaf to root over the same stack, and V8 keeps frame
//! pointers in all its code, so the native walk passes through every V8
//! frame. What V8 reports, measured on Node 18-26 (`__test__/v8.test.js`):
//!
//! - A compiled frame (TurboFan, Maglev, Sparkplug, JS-linkage builtins)
//!   and an exit frame appear as their pc, which is exactly the return
//!   address the native walk has for that frame.
//! - An interpreted frame appears as the address of its current bytecode
//!   (inside its BytecodeArray), where the native walk has a return address
//!   into `InterpreterEntryTrampoline` (or `InterpreterEnterAt*Bytecode`,
//!   or, for an interpreted leaf, the pc in a `BytecodeHandler:*`).
//! - The leaf frame is not reported when the thread was stopped in
//!   compiled code (V8's profiler takes it from the sampled pc); an
//!   interpreted leaf is reported.
//! - Frames without a JS function (stubs, `JSEntry`, C++ frames between
//!   two JS sections) are not reported; V8 jumps from an entry frame to the
//!   exit frame beneath it.
//!
//! So equal addresses anchor the two lists, and between anchors each
//! interpreter slot of the native stack takes one bytecode frame, paired
//! from the root side (leaf-side oddities, such as a sample landing in the
//! trampoline itself, then cannot shift the frames below). If the native
//! walk stopped early (a native frame without a frame pointer), the JS
//! frames beyond it are appended: V8 walks from its own exit frame, so JS
//! callers are still known.

use crate::sampler::walker::WalkEnd;

use super::codemap::{is_js_name, CodeKind, CodeMap};
use super::events::V8Ranges;

/// What an address is, for merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrClass {
    /// A return address or pc in the interpreter (trampoline, bytecode
    /// handler): the native stand-in for an interpreted frame.
    InterpreterSlot,
    /// Inside a BytecodeArray: an interpreted frame from `GetStackSample`.
    Bytecode,
    /// Compiled JavaScript: name it from the code map.
    JsCode,
    /// Anything else (native code, builtins, stubs).
    Other,
}

/// One frame of a merged stack, leaf first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged {
    /// A native frame: name it with the native symbolizer.
    Native(u64),
    /// A JS frame: name it with the code map at the sample's time. For an
    /// interpreted frame `addr` is a bytecode address.
    Js { addr: u64, interpreted: bool },
}

/// Merges `js` (from `GetStackSample`) into `native` (the frame-pointer
/// walk, whose end is `walk_end`), appending to `out`. `classify` tells the
/// kinds of addresses apart: [`classifier`] builds one from the code map.
pub fn merge_stacks(
    native: &[u64],
    walk_end: WalkEnd,
    js: &[u64],
    classify: &dyn Fn(u64) -> AddrClass,
    out: &mut Vec<Merged>,
) {
    Merger::default().merge(native, walk_end, js, classify, out)
}

/// [`merge_stacks`] with buffers kept from one merge to the next: once they
/// have grown, a merge allocates nothing, and it asks `classify` once per
/// address.
#[derive(Default)]
pub struct Merger {
    native_class: Vec<AddrClass>,
    js_class: Vec<AddrClass>,
    anchors: Vec<(usize, usize)>,
    bytecodes: Vec<u64>,
    orphans: Vec<(u64, AddrClass)>,
    slots: Vec<usize>,
    extras: Vec<u64>,
}

impl Merger {
    /// See [`merge_stacks`].
    pub fn merge(
        &mut self,
        native: &[u64],
        walk_end: WalkEnd,
        js: &[u64],
        classify: &dyn Fn(u64) -> AddrClass,
        out: &mut Vec<Merged>,
    ) {
        let Merger { native_class, js_class, anchors, bytecodes, orphans, slots, extras } = self;
        native_class.clear();
        native_class.extend(native.iter().map(|&a| classify(a)));
        js_class.clear();
        js_class.extend(js.iter().map(|&a| classify(a)));
        // Anchors: JS entries (not bytecode) found, in order, in the native list.
        anchors.clear();
        let mut from = 0;
        for (j, &addr) in js.iter().enumerate() {
            if js_class[j] == AddrClass::Bytecode {
                continue;
            }
            if let Some(k) = native[from..].iter().position(|&n| n == addr) {
                anchors.push((from + k, j));
                from += k + 1;
            }
        }
        let (mut n0, mut j0) = (0, 0);
        for &(n1, j1) in anchors.iter() {
            // Between two anchors both lists are complete: pair from the root.
            bytecodes.clear();
            orphans.clear();
            for j in j0..j1 {
                match js_class[j] {
                    AddrClass::Bytecode => bytecodes.push(js[j]),
                    class => orphans.push((js[j], class)),
                }
            }
            let seg = Segment { native: &native[n0..n1], class: &native_class[n0..n1] };
            pair_segment(seg, bytecodes, false, slots, extras, out);
            // JS frames the walk had no slot for: just above the anchor.
            out.extend(extras.iter().map(|&a| Merged::Js { addr: a, interpreted: true }));
            out.extend(orphans.iter().map(|&(a, class)| merged(a, class)));
            out.push(merged(native[n1], native_class[n1]));
            n0 = n1 + 1;
            j0 = j1 + 1;
        }
        // The last segment: the walk may have ended early, and V8 may know
        // frames beyond its end. Its JS entries up to the first unanchored
        // compiled/exit entry belong to the native frames walked; the rest are
        // beyond them.
        let seg = Segment { native: &native[n0..], class: &native_class[n0..] };
        let split = js_class[j0..].iter().position(|&c| c != AddrClass::Bytecode).map_or(js.len(), |k| j0 + k);
        let walked_js = &js[j0..split];
        let ended_in_js = seg.class.last().is_some_and(|c| matches!(c, AddrClass::InterpreterSlot | AddrClass::JsCode));
        let cut = matches!(walk_end, WalkEnd::BadFramePointer | WalkEnd::NoPc);
        let truncated = walk_end == WalkEnd::Truncated;
        // If the walk stopped inside JS, its slots are the leaf-side ones.
        let from_top = (cut || truncated) && ended_in_js;
        pair_segment(seg, walked_js, from_top, slots, extras, out);
        if !truncated {
            out.extend(extras.iter().map(|&a| Merged::Js { addr: a, interpreted: true }));
            out.extend((split..js.len()).map(|j| merged(js[j], js_class[j])));
        }
    }
}

/// Native frames with their classes.
#[derive(Clone, Copy)]
struct Segment<'a> {
    native: &'a [u64],
    class: &'a [AddrClass],
}

/// Writes `seg`, with its interpreter slots replaced by `bytecodes` paired
/// from the root side (or from the leaf side if `from_top`), and leaves the
/// bytecode frames left without a slot, in order, in `extras`.
fn pair_segment(
    seg: Segment<'_>,
    bytecodes: &[u64],
    from_top: bool,
    slots: &mut Vec<usize>,
    extras: &mut Vec<u64>,
    out: &mut Vec<Merged>,
) {
    slots.clear();
    slots.extend((0..seg.native.len()).filter(|&i| seg.class[i] == AddrClass::InterpreterSlot));
    let pairs = slots.len().min(bytecodes.len());
    let (used, paired, left) = if from_top {
        (&slots[..pairs], &bytecodes[..pairs], &bytecodes[pairs..])
    } else {
        (&slots[slots.len() - pairs..], &bytecodes[bytecodes.len() - pairs..], &bytecodes[..bytecodes.len() - pairs])
    };
    // Leaf-side extras with slots below them were seen by V8 above the
    // walked frames: they go first.
    let leaf_extras = !from_top && pairs > 0;
    if leaf_extras {
        out.extend(left.iter().map(|&a| Merged::Js { addr: a, interpreted: true }));
    }
    // `used` is ascending: walk it alongside the frames.
    let mut next = 0;
    for (i, &addr) in seg.native.iter().enumerate() {
        if used.get(next) == Some(&i) {
            out.push(Merged::Js { addr: paired[next], interpreted: true });
            next += 1;
        } else {
            out.push(merged(addr, seg.class[i]));
        }
    }
    extras.clear();
    if !leaf_extras {
        extras.extend_from_slice(left);
    }
}

/// The merged frame of an address of class `class`.
fn merged(addr: u64, class: AddrClass) -> Merged {
    match class {
        AddrClass::JsCode => Merged::Js { addr, interpreted: false },
        AddrClass::Bytecode => Merged::Js { addr, interpreted: true },
        _ => Merged::Native(addr),
    }
}

/// True for the code-map names of the interpreter's entry points and
/// bytecode handlers (V8 10.2 to 14.6). `BaselineOrInterpreterEnterAt*`
/// (V8 up to 12.x) resumes an interpreted frame too: the deoptimizer leaves
/// its entry as the return address of the frame it rebuilt.
pub fn is_interpreter_name(raw: &str) -> bool {
    raw.starts_with("BytecodeHandler:")
        || raw.starts_with("Builtin:InterpreterEntryTrampoline")
        || raw.starts_with("Builtin:InterpreterEnter")
        || raw.starts_with("Builtin:BaselineOrInterpreterEnter")
}

/// Looks `addr` up as it is and, for an address in the embedded builtins,
/// in the other copy too: V8 reports builtins at the binary's copy on some
/// versions (Node 20) and at the copy remapped into the code range on
/// others (Node 22+), while native stacks hold whichever copy ran.
pub fn lookup_code<'m>(map: &'m CodeMap, ranges: &V8Ranges, addr: u64, t: u64) -> Option<super::codemap::Hit<'m>> {
    map.lookup(addr, t).or_else(|| {
        let other = match ranges.canonical(addr) {
            c if c != addr => c,
            _ => ranges.aliased(addr),
        };
        (other != addr).then(|| map.lookup(other, t)).flatten()
    })
}

/// A classifier from the code map as of time `t` (call with the map locked;
/// the closure borrows it).
pub fn classifier<'a>(map: &'a CodeMap, ranges: &'a V8Ranges, t: u64) -> impl Fn(u64) -> AddrClass + 'a {
    move |addr| lookup_code(map, ranges, addr, t).map_or(AddrClass::Other, |h| class_of(&h))
}

/// The class of an address the code map knows.
pub fn class_of(h: &super::codemap::Hit<'_>) -> AddrClass {
    if h.kind == CodeKind::Bytecode {
        AddrClass::Bytecode
    } else if is_interpreter_name(h.raw) {
        AddrClass::InterpreterSlot
    } else if is_js_name(h.raw) {
        AddrClass::JsCode
    } else {
        AddrClass::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Address plan for the synthetic stacks:
    //   0x1xxx compiled JS, 0x2xxx interpreter trampoline/handlers,
    //   0x3xxx bytecode, 0x4xxx other V8 builtins, 0x9xxx native C++.
    fn classify(a: u64) -> AddrClass {
        match a >> 12 {
            1 => AddrClass::JsCode,
            2 => AddrClass::InterpreterSlot,
            3 => AddrClass::Bytecode,
            _ => AddrClass::Other,
        }
    }

    fn run(native: &[u64], end: WalkEnd, js: &[u64]) -> Vec<Merged> {
        let mut out = Vec::new();
        merge_stacks(native, end, js, &classify, &mut out);
        out
    }

    fn jsf(addr: u64) -> Merged {
        Merged::Js { addr, interpreted: false }
    }
    fn interp(addr: u64) -> Merged {
        Merged::Js { addr, interpreted: true }
    }
    use Merged::Native;

    #[test]
    fn compiled_leaf_over_interpreted_callers() {
        // leaf (compiled, not in GSS) <- mid (interp) <- top (interp) <- JSEntry <- C++ main
        let native = [0x1100, 0x2000, 0x2000, 0x4000, 0x9000];
        let js = [0x3100, 0x3200];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(m, vec![jsf(0x1100), interp(0x3100), interp(0x3200), Native(0x4000), Native(0x9000)]);
    }

    #[test]
    fn interpreted_leaf_in_a_bytecode_handler() {
        let native = [0x2500, 0x1200, 0x2000, 0x9000];
        let js = [0x3100, 0x1200, 0x3200];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(m, vec![interp(0x3100), jsf(0x1200), interp(0x3200), Native(0x9000)]);
    }

    #[test]
    fn cpp_between_js_sections_and_exit_frames() {
        // reviver (compiled leaf) <- JSEntryTrampoline <- C++ JSON parser <- CEntry (exit) <- parser (interp)
        let native = [0x1100, 0x4100, 0x4200, 0x9001, 0x9002, 0x4300, 0x2000, 0x9000];
        let js = [0x4300, 0x3100];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(
            m,
            vec![
                jsf(0x1100),
                Native(0x4100),
                Native(0x4200),
                Native(0x9001),
                Native(0x9002),
                Native(0x4300),
                interp(0x3100),
                Native(0x9000)
            ]
        );
    }

    #[test]
    fn recursion_with_equal_return_addresses() {
        let native = [0x1100, 0x1180, 0x1180, 0x1180, 0x2000, 0x9000];
        let js = [0x1180, 0x1180, 0x1180, 0x3100];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(m, vec![jsf(0x1100), jsf(0x1180), jsf(0x1180), jsf(0x1180), interp(0x3100), Native(0x9000)]);
    }

    #[test]
    fn extra_leaf_slot_does_not_shift_frames() {
        // Sampled inside the trampoline of the leaf: V8 omits the leaf, so
        // there is one slot more than bytecode frames; pairing from the root
        // keeps every caller right.
        let native = [0x2010, 0x2000, 0x2000, 0x9000];
        let js = [0x3200, 0x3300];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(m, vec![Native(0x2010), interp(0x3200), interp(0x3300), Native(0x9000)]);
    }

    #[test]
    fn native_walk_cut_short_gets_v8_frames_appended() {
        // Leaf in libc without frame pointers: the walk ends at once, V8
        // walks from its exit frame.
        let native = [0x9500];
        let js = [0x4300, 0x1200, 0x3100, 0x3200];
        let m = run(&native, WalkEnd::BadFramePointer, &js);
        assert_eq!(m, vec![Native(0x9500), Native(0x4300), jsf(0x1200), interp(0x3100), interp(0x3200)]);
        // Cut after one trampoline: it pairs with the leaf-side bytecode.
        let native = [0x9500, 0x4300, 0x2000];
        let js = [0x4300, 0x3100, 0x3200];
        let m = run(&native, WalkEnd::BadFramePointer, &js);
        assert_eq!(m, vec![Native(0x9500), Native(0x4300), interp(0x3100), interp(0x3200)]);
    }

    #[test]
    fn walk_ending_after_the_js_section_pairs_from_the_root() {
        // Interpreted leaf whose handler has a frame (two slots for one
        // frame), walk cut in C++ below JSEntry: pairing from the root.
        let native = [0x2500, 0x2000, 0x2000, 0x2000, 0x4100];
        let js = [0x3100, 0x3200];
        let m = run(&native, WalkEnd::BadFramePointer, &js);
        assert_eq!(m, vec![Native(0x2500), Native(0x2000), interp(0x3100), interp(0x3200), Native(0x4100)]);
        // A lower JS section behind an exit frame the walk never reached.
        let native = [0x1100, 0x4100, 0x9001];
        let js = [0x4300, 0x3100];
        let m = run(&native, WalkEnd::BadFramePointer, &js);
        assert_eq!(m, vec![jsf(0x1100), Native(0x4100), Native(0x9001), Native(0x4300), interp(0x3100)]);
    }

    #[test]
    fn leaf_without_frame_pointer_puts_js_frames_after_it() {
        // rbp was 0 in a native leaf: a one-frame "complete" walk.
        let native = [0x9500];
        let js = [0x1200, 0x3100];
        let m = run(&native, WalkEnd::Complete, &js);
        assert_eq!(m, vec![Native(0x9500), jsf(0x1200), interp(0x3100)]);
    }

    #[test]
    fn truncated_walk_pairs_leaf_side_and_appends_nothing() {
        let native = [0x1100, 0x2000, 0x2000];
        let js = [0x3100, 0x3200, 0x3300];
        let m = run(&native, WalkEnd::Truncated, &js);
        assert_eq!(m, vec![jsf(0x1100), interp(0x3100), interp(0x3200)]);
    }

    #[test]
    fn no_js_frames_keeps_native_and_names_compiled_code() {
        let native = [0x1100, 0x2000, 0x9000];
        let m = run(&native, WalkEnd::Complete, &[]);
        assert_eq!(m, vec![jsf(0x1100), Native(0x2000), Native(0x9000)]);
        assert!(run(&[], WalkEnd::NoPc, &[]).is_empty());
    }

    #[test]
    fn every_js_frame_is_placed_once_in_order() {
        // Property over many shapes: the JS frames of the output, in order,
        // are exactly `js` when the walk is complete and slots suffice.
        let shapes: &[(&[u64], &[u64])] = &[
            (&[0x1100, 0x2000, 0x1300, 0x2000, 0x4000, 0x9000], &[0x3100, 0x1300, 0x3200]),
            (&[0x2500, 0x2000, 0x2000, 0x9000], &[0x3100, 0x3200, 0x3300]),
            (&[0x9100, 0x9200, 0x4300, 0x2000, 0x1400, 0x9000], &[0x4300, 0x3100, 0x1400]),
        ];
        for (native, js) in shapes {
            let m = run(native, WalkEnd::Complete, js);
            let got: Vec<u64> = m
                .iter()
                .filter_map(|f| match f {
                    Merged::Js { addr, .. } if js.contains(addr) => Some(*addr),
                    Merged::Native(a) if js.contains(a) => Some(*a),
                    _ => None,
                })
                .collect();
            assert_eq!(&got, js, "{native:x?}");
            assert_eq!(m.len(), native.len(), "one output frame per native frame");
        }
    }

    #[test]
    fn interpreter_names() {
        assert!(is_interpreter_name("Builtin:InterpreterEntryTrampoline"));
        assert!(is_interpreter_name("Builtin:InterpreterEnterAtBytecode"));
        assert!(is_interpreter_name("Builtin:InterpreterEnterBytecodeAdvance"));
        assert!(is_interpreter_name("Builtin:BaselineOrInterpreterEnterAtBytecode"));
        assert!(!is_interpreter_name("Builtin:BaselineLeaveFrame"));
        assert!(is_interpreter_name("BytecodeHandler:LdaZero"));
        assert!(!is_interpreter_name("Builtin:JSEntry"));
        assert!(!is_interpreter_name("JS:~fib /a.js:1:1"));
    }
}
