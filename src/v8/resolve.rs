//! JavaScript frames named once, when the session ends, not per sample.
//!
//! While sampling, the sampler thread only places JS frames in native
//! stacks (by address ranges: `frames`), recording the compiled code's pc
//! or the interpreted frame's bytecode address. At `stop()` every distinct
//! address of the recorded stack table is looked up in the code map once:
//! if every entry that covered it during the session has the same
//! function, the frame is renamed for all samples at once; only an address
//! that V8 reused for another function during the session is named per
//! sample, at the sample's time. Each distinct function becomes one tagged
//! frame (`TAGGED_FRAME | index` into the returned names), whatever its
//! tier. Why: `docs/design/js-names-at-stop.md`.
//!
//! Where V8's log describes the functions optimized code inlined (see
//! [`InlineLog`]), a caller's frame in such code becomes the compiled
//! function's frame followed by one frame per function inlined at its call,
//! as V8's own profiler (`--cpu-prof`, DevTools) shows them. Like V8's, the
//! frame at the interrupted pc stays the compiled function's, so self time
//! compares with theirs.

use rustc_hash::FxHashMap;

use super::codemap::{parse_js_name, split_js_name, strip_number, CodeKind, CodeMap, Hit};
use super::inline_log::InlineLog;
use crate::sampler::backend::TAGGED_FRAME;

/// A stack table as columns (a profile's `frames`/`stacks`).
pub struct StackColumns<'a> {
    pub frame_address: &'a mut Vec<u64>,
    pub stack_frame: &'a mut Vec<u32>,
    pub stack_parent: &'a mut Vec<i32>,
}

/// What a frame address becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// The same for every sample (maybe the address itself).
    Fixed(u64),
    /// Depends on the sample's time.
    ByTime,
}

/// The function of machsampler's own JavaScript that wraps the program's
/// module compiles (`lib/compiled-maps.js`): on the stack under every
/// module's top level, and left out of stacks, as the program runs the same
/// without it.
const OWN_WRAPPER: &str = "machsamplerNotesSourceMap";

/// Function names, one tagged frame per displayed name.
#[derive(Default)]
struct Names {
    raw: Vec<String>,
    by_display: FxHashMap<String, u32>,
    /// Per name: machsampler's own wrapper, left out of stacks.
    own: Vec<bool>,
}

impl Names {
    fn tag(&mut self, raw: &str) -> u64 {
        let display = parse_js_name(raw).display;
        let next = self.raw.len() as u32;
        let i = *self.by_display.entry(display).or_insert_with(|| {
            self.raw.push(raw.to_string());
            self.own.push(is_own_wrapper(raw));
            next
        });
        TAGGED_FRAME | i as u64
    }

    /// The tagged frame `raw` has, if it has one yet.
    fn tag_of(&self, raw: &str) -> Option<u64> {
        self.by_display.get(&parse_js_name(raw).display).map(|&i| TAGGED_FRAME | i as u64)
    }

    /// Whether the frame `addr` became is machsampler's own wrapper.
    fn is_own(&self, addr: u64) -> bool {
        addr & TAGGED_FRAME != 0 && self.own.get((addr & !TAGGED_FRAME) as usize) == Some(&true)
    }
}

fn is_own_wrapper(raw: &str) -> bool {
    let js = parse_js_name(raw);
    js.function == OWN_WRAPPER && js.location.contains("compiled-maps.js")
}

/// The frame a JS function's entry becomes: tagged if it is JavaScript or
/// a compiled regular expression (code no module holds, named only by
/// V8), the address itself otherwise (builtins and stubs are named
/// natively, from the binary).
fn renamed(names: &mut Names, addr: u64, raw: Option<&str>) -> u64 {
    match raw {
        Some(raw) if super::codemap::is_js_name(raw) || is_runtime_code(raw) => names.tag(raw),
        _ => addr,
    }
}

/// Code V8 generates at run time that is not a JS function: compiled
/// regular expressions and stubs (the wrappers between JavaScript and
/// WebAssembly). No module holds it, so only V8's name can name it.
fn is_runtime_code(raw: &str) -> bool {
    raw.starts_with("RegExp:") || raw.starts_with("Stub:")
}

fn fate(map: &CodeMap, names: &mut Names, addr: u64, window: (u64, u64)) -> Fate {
    if addr & TAGGED_FRAME != 0 {
        return Fate::Fixed(addr);
    }
    let all = map.covering(addr);
    if all.is_empty() {
        return Fate::Fixed(addr);
    }
    // Entries alive at some point of the session.
    let during: Vec<&str> =
        all.iter().filter(|(born, died, _)| *born <= window.1 && *died > window.0).map(|(_, _, raw)| *raw).collect();
    if during.is_empty() {
        // Only entries from before or after: the nearest in time names it.
        return Fate::ByTime;
    }
    let first = parse_js_name(during[0]).display;
    let same = during.iter().all(|raw| parse_js_name(raw).display == first)
        && during.iter().all(|raw| super::codemap::is_js_name(raw) == super::codemap::is_js_name(during[0]));
    if same {
        Fate::Fixed(renamed(names, addr, Some(during[0])))
    } else {
        Fate::ByTime
    }
}

/// The tagged frames of the functions inlined at return address `addr`
/// of the code `hit`, outermost first; empty if none.
fn inlined_at(inlines: &InlineLog, names: &mut Names, addr: u64, hit: &Hit<'_>) -> Vec<u64> {
    // As V8's log names it: without kind and tier marks.
    let Some((_, _, name)) = split_js_name(hit.raw) else { return Vec::new() };
    if hit.kind == CodeKind::Bytecode {
        return Vec::new();
    }
    // A return address is one past its call.
    let offset = addr.saturating_sub(hit.start).saturating_sub(1);
    // A script's own `VM<id>` URL, or one this sampler gave a script
    // without a name (which V8's log keeps empty).
    let mut chain = inlines.chain(hit.start, hit.len, name, offset);
    if chain.is_empty() {
        let logged = super::unnamed_scripts::as_v8_logs_it(name);
        if logged != name {
            chain = inlines.chain(hit.start, hit.len, &logged, offset);
        }
    }
    // V8 10.2's code events name a function by its line alone, its log by
    // line and column: the same function, inlined or not, is one row.
    let line_only = strip_number(name).is_some() && !has_column(name);
    chain.into_iter().map(|f| names.tag(&format!("JS:{}", if line_only { without_column(f) } else { f }))).collect()
}

/// Whether a JS name ends in `:<line>:<column>`.
fn has_column(name: &str) -> bool {
    strip_number(name).and_then(strip_number).is_some()
}

/// A JS name ending in `:<line>:<column>` without its column.
fn without_column(name: &str) -> &str {
    match strip_number(name) {
        Some(rest) if strip_number(rest).is_some() => rest,
        _ => name,
    }
}

/// Renames the JS frames of a stack table whose samples have the given
/// stacks and times (`CLOCK_MONOTONIC`, as the code map), appending their
/// names to `js_names` (which tagged frames already in the table index),
/// and splits out inlined functions that `inlines` knows of, as far as
/// stacks stay within `max_depth` frames. Returns how many samples needed
/// a by-time lookup.
pub fn resolve_js_frames(
    map: &CodeMap,
    cols: StackColumns<'_>,
    sample_stack: &mut [u32],
    sample_time_ns: &[u64],
    js_names: &mut Vec<String>,
    inlines: &InlineLog,
    max_depth: usize,
) -> usize {
    if sample_stack.is_empty() {
        return 0;
    }
    let lo = sample_time_ns.iter().copied().min().unwrap_or(0);
    let hi = sample_time_ns.iter().copied().max().unwrap_or(u64::MAX);
    let mut names = Names::default();
    for (i, raw) in js_names.iter().enumerate() {
        names.by_display.entry(parse_js_name(raw).display).or_insert(i as u32);
    }
    names.raw = std::mem::take(js_names);
    names.own = names.raw.iter().map(|r| is_own_wrapper(r)).collect();
    let mut fates: Vec<Fate> = cols.frame_address.iter().map(|&a| fate(map, &mut names, a, (lo, hi))).collect();
    // Callers' frames in code that inlined functions: the inlined
    // functions' frames. Where one code object held the address all
    // session, once per frame; where several did (V8 reused the address,
    // in another isolate or after the code died), per sample, from the
    // object of its time.
    let mut inlined: FxHashMap<usize, Vec<u64>> = FxHashMap::default();
    let mut caller = vec![false; cols.frame_address.len()];
    // Frames named once whose inlined functions are taken per sample.
    let mut pinned: FxHashMap<usize, u64> = FxHashMap::default();
    if !inlines.is_empty() {
        for &parent in cols.stack_parent.iter() {
            if let Some(&f) = usize::try_from(parent).ok().and_then(|p| cols.stack_frame.get(p)) {
                if let Some(c) = caller.get_mut(f as usize) {
                    *c = true;
                }
            }
        }
        for (i, &addr) in cols.frame_address.iter().enumerate() {
            let Fate::Fixed(tagged) = fates[i] else { continue };
            if !caller[i] || tagged & TAGGED_FRAME == 0 || addr & TAGGED_FRAME != 0 {
                continue;
            }
            if map.several_objects_during(addr, lo, hi) {
                fates[i] = Fate::ByTime;
                pinned.insert(i, tagged);
                continue;
            }
            let chain = map.lookup(addr, hi).map(|hit| inlined_at(inlines, &mut names, addr, &hit)).unwrap_or_default();
            if !chain.is_empty() {
                inlined.insert(i, chain);
            }
        }
    }
    // Per-sample chains, by address and code object.
    let mut inlined_then: FxHashMap<(u64, u64, u64, &str), Vec<u64>> = FxHashMap::default();

    // The new table: frames by address, nodes by (parent, frame).
    let mut frame_of: FxHashMap<u64, u32> = FxHashMap::default();
    let mut new_frames: Vec<u64> = Vec::new();
    let mut node_of: FxHashMap<(i32, u32), u32> = FxHashMap::default();
    let (mut new_frame_col, mut new_parent_col): (Vec<u32>, Vec<i32>) = (Vec::new(), Vec::new());
    let mut intern = |parent: i32, addr: u64| -> u32 {
        let f = *frame_of.entry(addr).or_insert_with(|| {
            new_frames.push(addr);
            new_frames.len() as u32 - 1
        });
        *node_of.entry((parent, f)).or_insert_with(|| {
            new_frame_col.push(f);
            new_parent_col.push(parent);
            new_frame_col.len() as u32 - 1
        })
    };
    // Nodes whose whole path is fixed map once (parents come first).
    let n = cols.stack_frame.len();
    // Stacks stay within `max_depth` frames: a node's inlined functions
    // are split out only where the deepest stack through it still fits
    // (`height`: frames from the node to its deepest descendant).
    let mut height = vec![1usize; n];
    for i in (0..n).rev() {
        if let Ok(p) = usize::try_from(cols.stack_parent[i]) {
            if p < i {
                height[p] = height[p].max(height[i] + 1);
            }
        }
    }
    let split = |frame: usize, node: usize, depth_above: usize| -> &[u64] {
        match inlined.get(&frame) {
            Some(chain) if depth_above + chain.len() + height[node] <= max_depth => chain,
            _ => &[],
        }
    };
    let mut fixed_node: Vec<Option<u32>> = vec![None; n];
    let mut new_depth: Vec<usize> = vec![0; n];
    for i in 0..n {
        let parent = cols.stack_parent[i];
        let parent_new = if parent < 0 { Some(-1) } else { fixed_node[parent as usize].map(|p| p as i32) };
        let above = if parent < 0 { 0 } else { new_depth[parent as usize] };
        let frame = cols.stack_frame[i] as usize;
        if let (Some(p), Fate::Fixed(addr)) = (parent_new, fates[frame]) {
            if p >= 0 && names.is_own(addr) {
                fixed_node[i] = Some(p as u32);
                new_depth[i] = above;
                continue;
            }
            let mut node = intern(p, addr);
            let chain = split(frame, i, above);
            for &f in chain {
                node = intern(node as i32, f);
            }
            fixed_node[i] = Some(node);
            new_depth[i] = above + 1 + chain.len();
        }
    }
    let mut by_time = 0;
    let mut path: Vec<u32> = Vec::new();
    for (s, stack) in sample_stack.iter_mut().enumerate() {
        if let Some(node) = fixed_node[*stack as usize] {
            *stack = node;
            continue;
        }
        by_time += 1;
        let t = sample_time_ns[s];
        path.clear();
        let mut node = *stack as i64;
        while node >= 0 && path.len() <= n {
            path.push(node as u32);
            node = cols.stack_parent[node as usize] as i64;
        }
        let mut parent = -1i32;
        let mut depth = 0;
        for &node in path.iter().rev() {
            let frame = cols.stack_frame[node as usize] as usize;
            let addr = cols.frame_address[frame];
            let (new, chain) = match fates[frame] {
                Fate::Fixed(a) => (a, split(frame, node as usize, depth)),
                Fate::ByTime => {
                    let hit = map.lookup(addr, t);
                    // A pinned frame keeps its name; its inlined functions
                    // come from the code of the sample's time if that is
                    // its function's (not the nearest entry of another).
                    let pin = pinned.get(&frame).copied();
                    let new = match pin {
                        Some(p) => p,
                        None => renamed(&mut names, addr, hit.as_ref().map(|h| h.raw)),
                    };
                    let chain = match hit {
                        Some(hit) if caller[frame] && new & TAGGED_FRAME != 0 => {
                            let chain = inlined_then.entry((addr, hit.start, hit.len, hit.raw)).or_insert_with(|| {
                                if pin.is_some() && names.tag_of(hit.raw) != pin {
                                    return Vec::new();
                                }
                                inlined_at(inlines, &mut names, addr, &hit)
                            });
                            let fits = depth + chain.len() + height[node as usize] <= max_depth;
                            if fits {
                                chain.as_slice()
                            } else {
                                &[]
                            }
                        }
                        _ => &[],
                    };
                    (new, chain)
                }
            };
            if parent >= 0 && names.is_own(new) {
                continue;
            }
            parent = intern(parent, new) as i32;
            for &f in chain {
                parent = intern(parent, f) as i32;
            }
            depth += 1 + chain.len();
        }
        *stack = parent as u32;
    }
    *cols.frame_address = new_frames;
    *cols.stack_frame = new_frame_col;
    *cols.stack_parent = new_parent_col;
    *js_names = names.raw;
    by_time
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v8::codemap::CodeKind;

    #[test]
    fn machsampler_s_own_wrapper_is_left_out_of_stacks() {
        let mut map = CodeMap::default();
        map.add(0x1000, 0x100, CodeKind::Jit, "JS:*load /a.js:1:1", 1, 0);
        map.add(0x2000, 0x100, CodeKind::Jit, "JS:*machsamplerNotesSourceMap /m/lib/compiled-maps.js:58:10", 1, 0);
        // 0x3000 holds `top` until t=50, then `other`: named by time.
        map.add(0x3000, 0x100, CodeKind::Jit, "JS:*top /a.js:9:1", 1, 0);
        map.add(0x3000, 0x100, CodeKind::Jit, "JS:*other /a.js:20:1", 1, 50);
        // native <- load <- wrapper <- top/other
        let mut frames = vec![0x9000, 0x1010, 0x2010, 0x3010];
        let mut stack_frame = vec![0, 1, 2, 3];
        let mut stack_parent = vec![-1, 0, 1, 2];
        let mut samples = vec![2, 3, 3];
        let times = [10, 20, 60];
        let mut names = Vec::new();
        let cols =
            StackColumns { frame_address: &mut frames, stack_frame: &mut stack_frame, stack_parent: &mut stack_parent };
        resolve_js_frames(&map, cols, &mut samples, &times, &mut names, &InlineLog::default(), usize::MAX);
        let path = |s: usize| {
            let mut out = Vec::new();
            let mut n = samples[s] as i32;
            while n >= 0 {
                let f = frames[stack_frame[n as usize] as usize];
                out.push(if f & TAGGED_FRAME != 0 {
                    names[(f & !TAGGED_FRAME) as usize].clone()
                } else {
                    format!("{f:#x}")
                });
                n = stack_parent[n as usize];
            }
            out
        };
        assert_eq!(path(0), ["JS:*load /a.js:1:1", "0x9000"]);
        assert_eq!(path(1), ["JS:*top /a.js:9:1", "JS:*load /a.js:1:1", "0x9000"]);
        assert_eq!(path(2), ["JS:*other /a.js:20:1", "JS:*load /a.js:1:1", "0x9000"]);
    }

    #[test]
    fn fixed_frames_rename_once_reused_addresses_by_time() {
        let mut map = CodeMap::default();
        map.add(0x1000, 0x100, CodeKind::Jit, "JS:*fib /a.js:1:1", 1, 0);
        // 0x2000 holds `a` until t=50, then `b`.
        map.add(0x2000, 0x100, CodeKind::Jit, "JS:*a /a.js:5:1", 1, 0);
        map.add(0x2000, 0x100, CodeKind::Jit, "JS:*b /a.js:9:1", 1, 50);
        map.add(0x3000, 0x100, CodeKind::Jit, "Builtin:Foo", 0, 0);
        // A compiled regular expression, called from the builtin.
        map.add(0x5000, 0x100, CodeKind::Jit, "RegExp:^a+b$", 1, 0);
        // A wrapper V8 generated, called from fib.
        map.add(0x6000, 0x100, CodeKind::Jit, "Stub:js-to-wasm:i:i", 1, 0);
        // The same function at another tier: one name.
        map.add(0x4000, 0x100, CodeKind::Bytecode, "JS:~fib /a.js:1:1", 1, 0);
        // Frames: native, fib, reused, builtin, fib's bytecode, regexp, stub.
        let mut frames = vec![0x9000, 0x1010, 0x2010, 0x3010, 0x4010, 0x5010, 0x6010];
        // Stacks: 0 = [native], 1 = native<-fib, 2 = native<-reused,
        // 3 = native<-builtin<-fib bytecode, 5 = native<-builtin<-regexp,
        // 6 = native<-fib<-stub
        let mut stack_frame = vec![0, 1, 2, 3, 4, 5, 6];
        let mut stack_parent = vec![-1, 0, 0, 0, 3, 3, 1];
        let mut samples = vec![1, 2, 2, 4, 5, 6];
        let times = [10, 20, 60, 70, 80, 90];
        let mut names = Vec::new();
        let cols =
            StackColumns { frame_address: &mut frames, stack_frame: &mut stack_frame, stack_parent: &mut stack_parent };
        let by_time =
            resolve_js_frames(&map, cols, &mut samples, &times, &mut names, &InlineLog::default(), usize::MAX);
        assert_eq!(by_time, 2);
        assert_eq!(
            names,
            vec![
                "JS:*fib /a.js:1:1".to_string(),
                "RegExp:^a+b$".into(),
                "Stub:js-to-wasm:i:i".into(),
                "JS:*a /a.js:5:1".into(),
                "JS:*b /a.js:9:1".into()
            ]
        );
        let leaf = |s: usize| frames[stack_frame[samples[s] as usize] as usize];
        let root = |s: usize| {
            let mut n = samples[s] as i32;
            while stack_parent[n as usize] >= 0 {
                n = stack_parent[n as usize];
            }
            frames[stack_frame[n as usize] as usize]
        };
        assert_eq!(leaf(0), TAGGED_FRAME);
        assert_eq!(leaf(1), TAGGED_FRAME | 3, "a at t=20");
        assert_eq!(leaf(2), TAGGED_FRAME | 4, "b at t=60");
        assert_eq!(leaf(3), TAGGED_FRAME, "fib's bytecode is fib");
        assert_eq!(leaf(4), TAGGED_FRAME | 1, "the regular expression is named");
        assert_eq!(leaf(5), TAGGED_FRAME | 2, "the wrapper is named: no module holds it");
        assert_eq!(frames[stack_frame[stack_parent[samples[3] as usize] as usize] as usize], 0x3010, "builtins stay");
        for s in 0..6 {
            assert_eq!(root(s), 0x9000);
        }
        // Tagged frames are unique.
        let mut tagged: Vec<u64> = frames.iter().copied().filter(|a| a & TAGGED_FRAME != 0).collect();
        tagged.sort();
        tagged.dedup();
        assert_eq!(tagged.len(), frames.iter().filter(|a| *a & TAGGED_FRAME != 0).count());
    }

    /// A stack node's frames, root first: addresses, or the function of
    /// tagged frames.
    fn path_of(node: u32, frames: &[u64], stack_frame: &[u32], stack_parent: &[i32], names: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        let mut n = node as i32;
        while n >= 0 {
            let a = frames[stack_frame[n as usize] as usize];
            out.push(match a & TAGGED_FRAME {
                0 => format!("{a:#x}"),
                _ => parse_js_name(&names[(a & 0xffff_ffff) as usize]).function,
            });
            n = stack_parent[n as usize];
        }
        out.reverse();
        out
    }

    #[test]
    fn inlined_functions_come_from_the_code_of_the_sample_s_time() {
        // One worker's optimized `outer` at 0x1000 inlined `inner`; after
        // it ended, the next worker's baseline `outer` took the address.
        let mut log = InlineLog::default();
        log.parse(
            "code-creation,JS,10,1,0x5000,40,inner /a.js:2:1,0xa2,^\n\
             code-creation,JS,12,2,0x1000,256,outer /a.js:3:1,0xa3,*\n\
             code-source-info,0x1000,1,0,99,C0O1C16O2I0C48O4,F0O9,S0xa2\n",
        );
        log.parse("code-creation,JS,10,1,0x1000,128,outer /a.js:3:1,0xb3,^\n");
        let mut map = CodeMap::default();
        map.add(0x1000, 0x100, CodeKind::Jit, "JS:*outer /a.js:3:1", 1, 0);
        map.retire_isolate(1, 100);
        map.add(0x1000, 0x80, CodeKind::Jit, "JS:^outer /a.js:3:1", 2, 120);
        // root <- return address 0x1018 (in inner, in the optimized code)
        // <- native callee, at t=10 and at t=150.
        let mut frames = vec![0x9000, 0x1018, 0x9100];
        let mut stack_frame = vec![0, 1, 2];
        let mut stack_parent = vec![-1, 0, 1];
        let mut samples = vec![2, 2];
        let mut names = Vec::new();
        let cols =
            StackColumns { frame_address: &mut frames, stack_frame: &mut stack_frame, stack_parent: &mut stack_parent };
        resolve_js_frames(&map, cols, &mut samples, &[10, 150], &mut names, &log, usize::MAX);
        let path = |s: usize| path_of(samples[s], &frames, &stack_frame, &stack_parent, &names);
        assert_eq!(path(0), ["0x9000", "outer", "inner", "0x9100"]);
        assert_eq!(path(1), ["0x9000", "outer", "0x9100"]);
    }

    #[test]
    fn inlined_functions_are_named_by_line_where_code_events_are() {
        // V8 10.2: code events give `url:line`, its log `url:line:column`.
        let mut log = InlineLog::default();
        log.parse(
            "code-creation,JS,10,1,0x5000,40,inner /a.js:2:1,0xa2,^\n\
             code-creation,JS,12,2,0x1000,256,outer /a.js:3:1,0xa3,*\n\
             code-source-info,0x1000,1,0,99,C0O1C16O2I0C48O4,F0O9,S0xa2\n",
        );
        for (outer, inner) in
            [("LazyCompile:*outer /a.js:3", "JS:inner /a.js:2"), ("JS:*outer /a.js:3:1", "JS:inner /a.js:2:1")]
        {
            let mut map = CodeMap::default();
            map.add(0x1000, 0x100, CodeKind::Jit, outer, 1, 0);
            let mut frames = vec![0x9000, 0x1018, 0x9100];
            let (mut stack_frame, mut stack_parent, mut samples, mut names) =
                (vec![0, 1, 2], vec![-1, 0, 1], vec![2], Vec::new());
            let cols = StackColumns {
                frame_address: &mut frames,
                stack_frame: &mut stack_frame,
                stack_parent: &mut stack_parent,
            };
            resolve_js_frames(&map, cols, &mut samples, &[10], &mut names, &log, usize::MAX);
            assert!(names.iter().any(|n| n == inner), "{outer}: {names:?}");
        }
        assert_eq!(without_column("f /a.js:2:1"), "f /a.js:2");
        assert_eq!(without_column("f /a.js:2"), "f /a.js:2");
        assert!(has_column("f [eval]:1:5") && !has_column("f [eval]:1") && !has_column("f"));
    }

    #[test]
    fn frames_in_code_that_inlined_functions_split_into_those_functions() {
        // `outer` at 0x1000 inlined `inner` at pc offsets 0x10.. and `add`
        // (inside `inner`) at 0x20..; a native callee at 0x9100.
        let mut log = InlineLog::default();
        log.parse(
            "code-creation,JS,10,1,0x5000,40,inner /a.js:2:1,0xa2,^\n\
             code-creation,JS,10,1,0x6000,40,add /a.js:1:1,0xa1,^\n\
             code-creation,JS,12,2,0x1000,256,outer /a.js:3:1,0xa3,*\n\
             code-source-info,0x1000,1,0,99,C0O1C16O2I0C32O3I1C48O4I0C64O5,F0O9F1O8I0,S0xa2S0xa1\n",
        );
        let mut map = CodeMap::default();
        map.add(0x1000, 0x100, CodeKind::Jit, "JS:*outer /a.js:3:1", 1, 0);
        // Each sample's stack, root first, by function name.
        let paths = |max_depth: usize| -> Vec<Vec<String>> {
            // Frames: native root, then return addresses in outer: in its
            // own code, in inner, in add, and just past a call in add
            // (0x1030: the call at 0x102f is in add); a pc in add's code;
            // native callees.
            let mut frames = vec![0x9000, 0x1008, 0x1018, 0x1028, 0x1030, 0x1029, 0x9100];
            // Stacks: 1 = root<-own, 2 = root<-inner, 3 = root<-add, 4 =
            // root<-ret (each with a native callee: 6-9), 5 = root<-pc in
            // add (leaf).
            let mut stack_frame = vec![0, 1, 2, 3, 4, 5, 6, 6, 6, 6];
            let mut stack_parent = vec![-1, 0, 0, 0, 0, 0, 1, 2, 3, 4];
            let mut samples = vec![6, 7, 8, 9, 5];
            let mut names = Vec::new();
            let cols = StackColumns {
                frame_address: &mut frames,
                stack_frame: &mut stack_frame,
                stack_parent: &mut stack_parent,
            };
            resolve_js_frames(&map, cols, &mut samples, &[10, 20, 30, 40, 50], &mut names, &log, max_depth);
            samples.iter().map(|&s| path_of(s, &frames, &stack_frame, &stack_parent, &names)).collect()
        };
        let p = paths(usize::MAX);
        assert_eq!(p[0], ["0x9000", "outer", "0x9100"]);
        assert_eq!(p[1], ["0x9000", "outer", "inner", "0x9100"]);
        assert_eq!(p[2], ["0x9000", "outer", "inner", "add", "0x9100"]);
        assert_eq!(p[3], ["0x9000", "outer", "inner", "add", "0x9100"]);
        // The interrupted pc stays the compiled function's, as in V8's profiler.
        assert_eq!(p[4], ["0x9000", "outer"]);
        // Stacks stay within the depth: where all inlined functions do not
        // fit, none are split out.
        let p = paths(4);
        assert_eq!(p[1], ["0x9000", "outer", "inner", "0x9100"]);
        assert_eq!(p[2], ["0x9000", "outer", "0x9100"]);
        assert!(p.iter().all(|s| s.len() <= 4));
        // Without the log, one frame per compiled function.
        let mut frames = vec![0x9000, 0x1028];
        let (mut stack_frame, mut stack_parent, mut samples, mut names) =
            (vec![0, 1], vec![-1, 0], vec![1], Vec::new());
        let cols =
            StackColumns { frame_address: &mut frames, stack_frame: &mut stack_frame, stack_parent: &mut stack_parent };
        resolve_js_frames(&map, cols, &mut samples, &[10], &mut names, &InlineLog::default(), usize::MAX);
        assert_eq!(names, ["JS:*outer /a.js:3:1"]);
        assert_eq!(stack_frame.len(), 2);
    }
}
