//! The sampler's side of JavaScript frames: merging what `GetStackSample`
//! reported into the native stack, and naming the JS frames while the code
//! map still knows them.
//!
//! Names are resolved when a sample is harvested (on the sampler thread,
//! the sampled thread already running again), not when the profile is
//! symbolized: V8 moves and frees code, and the map keeps only a bounded
//! number of dead entries, so a late lookup could miss. Each distinct JS
//! function (by displayed name, whatever its tier) becomes one tagged frame
//! (`TAGGED_FRAME | index` into the session's names, which keeps V8's
//! text of the first code object seen, e.g. `JS:*fib /app/fib.js:3:13`); an
//! address the map does not know stays a plain address, for the perf map or
//! `0x…` later.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::{FxHashMap, FxHashSet};

use super::codemap::parse_js_name;
use super::events::{code_map, V8Ranges};
use super::merge::{class_of, lookup_code, merge_stacks, AddrClass, Merged};
use super::slots;
use crate::sampler::backend::{CapturedStack, StackRewrite, TAGGED_FRAME};

/// Ranges recorded when each JS thread registered, by tid. Read at harvest
/// time, when the thread's isolate may already be gone, so they are copied
/// here rather than asked of the isolate.
static RANGES: Mutex<Option<FxHashMap<u64, V8Ranges>>> = Mutex::new(None);

/// Remembers a JS thread's ranges (call when it registers).
pub fn remember_ranges(tid: u64, ranges: V8Ranges) {
    RANGES.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(FxHashMap::default).insert(tid, ranges);
}

/// Forgets them (call when it unregisters).
pub fn forget_ranges(tid: u64) {
    if let Some(m) = RANGES.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        m.remove(&tid);
    }
}

fn ranges_of(tid: u64) -> V8Ranges {
    RANGES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(&tid).copied())
        .unwrap_or_default()
}

/// The names of a session's tagged frames, by index: filled when the
/// session ends.
pub type SessionNames = Arc<Mutex<Vec<String>>>;

/// Names collected over one session.
#[derive(Default)]
pub struct V8JsFrames {
    names: Vec<String>,
    /// Where `names` go when the session ends.
    out: SessionNames,
    /// By displayed name: one frame per function, whatever its tier.
    index: FxHashMap<String, u32>,
    /// By V8's raw text, so the common case (a code object seen before)
    /// costs one hash lookup, not a parse and two allocations per frame
    /// (which were a third of the sampler thread's time at 1 kHz).
    by_raw: FxHashMap<String, u32>,
    native: Vec<u64>,
    js: Vec<u64>,
    interpreted: Vec<[u64; slots::WORDS]>,
    learner: slots::Learner,
    merged: Vec<Merged>,
    /// Addresses the code map has no entry for (most native frames), valid
    /// for `uncovered_generation` of the map: without it, each native frame
    /// of each sample cost a backward scan of the map (a third of the
    /// sampler thread's time at 1 kHz).
    uncovered: RefCell<FxHashSet<u64>>,
    uncovered_generation: u64,
}

/// Bounds the `uncovered` cache (distinct native return addresses).
const MAX_UNCOVERED: usize = 1 << 16;

impl V8JsFrames {
    /// Merges JavaScript frames for a session; its names are moved to
    /// `out` when the session ends.
    pub fn new(out: SessionNames) -> Self {
        V8JsFrames { out, ..Self::default() }
    }

    /// The names collected so far.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn intern(&mut self, raw: &str) -> u64 {
        if let Some(&i) = self.by_raw.get(raw) {
            return TAGGED_FRAME | i as u64;
        }
        let display = parse_js_name(raw).display;
        let next = self.names.len() as u32;
        let i = *self.index.entry(display).or_insert_with(|| {
            self.names.push(raw.to_string());
            next
        });
        self.by_raw.insert(raw.to_string(), i);
        TAGGED_FRAME | i as u64
    }
}

/// True if `addr` is in V8's builtins (either copy).
fn in_builtins(ranges: &V8Ranges, addr: u64) -> bool {
    ranges.embedded.contains(addr) || ranges.embedded_alias.contains(addr)
}

impl StackRewrite for V8JsFrames {
    fn rewrite(&mut self, c: &CapturedStack<'_>, out: &mut Vec<u64>) {
        let ranges = ranges_of(c.tid);
        let map = code_map();
        if self.uncovered_generation != map.generation() || self.uncovered.get_mut().len() >= MAX_UNCOVERED {
            self.uncovered.get_mut().clear();
            self.uncovered_generation = map.generation();
        }
        let uncovered = &self.uncovered;
        // V8 10.8 (Node 19) reports every builtin but the bytecode handlers
        // when the handler is installed; the unnamed gaps of the builtins
        // are those handlers, the native stand-ins of interpreted frames.
        let unnamed = |addr: u64| {
            if in_builtins(&ranges, addr) {
                AddrClass::InterpreterSlot
            } else {
                AddrClass::Other
            }
        };
        let classify = |addr: u64| {
            if uncovered.borrow().contains(&addr) {
                return unnamed(addr);
            }
            match lookup_code(&map, &ranges, addr, c.time_ns) {
                Some(h) => class_of(&h),
                None => {
                    uncovered.borrow_mut().insert(addr);
                    unnamed(addr)
                }
            }
        };

        // Interpreted frames: the native frames in the interpreter, with
        // the bytecode position read from their frames (`slots`), once the
        // layout is known; until then GetStackSample's answer (`runtime_frames`), which
        // also teaches the layout.
        self.interpreted.clear();
        for (i, &addr) in c.frames.iter().enumerate() {
            if classify(addr) == AddrClass::InterpreterSlot {
                if let Some(w) = c.frame_words.get(i) {
                    self.interpreted.push(*w);
                }
            }
        }
        self.js.clear();
        if !c.runtime_frames.is_empty() {
            self.js.extend_from_slice(c.runtime_frames);
            let reported: Vec<u64> =
                c.runtime_frames.iter().copied().filter(|&a| classify(a) == AddrClass::Bytecode).collect();
            self.learner.observe(&self.interpreted, &reported, &|b| classify(b) == AddrClass::Bytecode);
        } else if let Some(layout) = slots::learned() {
            for w in &self.interpreted {
                if let Some(b) = layout.bytecode(w).filter(|&b| classify(b) == AddrClass::Bytecode) {
                    self.js.push(b);
                }
            }
        }

        // A thread stopped in one of the builtins Sparkplug (baseline)
        // code calls without a frame (`*_Baseline`: arithmetic, compares,
        // ...) has its caller's return address on top of the stack, and a
        // frame-pointer walk, like GetStackSample, skips that caller. V8's
        // own profiler recovers it from the top of the stack; so do we. Only
        // for those builtins: elsewhere the word at sp may be a stale return
        // address left by an earlier call.
        self.native.clear();
        self.native.extend_from_slice(c.frames);
        // V8 10.8 reports no names for these builtins: an unnamed builtin
        // with baseline code's return address on top of the stack is one.
        let frameless_leaf = c.frames.first().is_some_and(|&pc| {
            in_builtins(&ranges, pc)
                && match lookup_code(&map, &ranges, pc, c.time_ns) {
                    Some(h) => h.raw.ends_with("_Baseline"),
                    None => {
                        c.tos != 0
                            && lookup_code(&map, &ranges, c.tos, c.time_ns).is_some_and(|h| h.raw.starts_with("JS:^"))
                    }
                }
        });
        if frameless_leaf && c.tos != 0 && c.frames.get(1) != Some(&c.tos) && classify(c.tos) == AddrClass::JsCode {
            self.native.insert(1, c.tos);
        }
        self.merged.clear();
        merge_stacks(&self.native, c.end, &self.js, &classify, &mut self.merged);
        let merged = std::mem::take(&mut self.merged);
        for m in &merged {
            match *m {
                // A builtin run from the copy V8 remapped into its code
                // range is named at the binary's copy (`Builtins_*`).
                Merged::Native(addr) => out.push(ranges.canonical(addr)),
                Merged::Js { addr, .. } => match lookup_code(&map, &ranges, addr, c.time_ns) {
                    Some(hit) => out.push(self.intern(hit.raw)),
                    None => out.push(addr),
                },
            }
        }
        self.merged = merged;
    }

    fn finish(&mut self) {
        *self.out.lock().unwrap_or_else(PoisonError::into_inner) = std::mem::take(&mut self.names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::walker::WalkEnd;

    #[test]
    fn interning_tags_and_dedups() {
        let mut f = V8JsFrames::new(SessionNames::default());
        let a = f.intern("JS:~fib /a.js:1:1");
        let b = f.intern("JS:*main /a.js:9:1");
        // The same function at another tier is the same frame.
        assert_eq!(f.intern("JS:*fib /a.js:1:1"), a);
        assert_eq!(a, TAGGED_FRAME);
        assert_eq!(b, TAGGED_FRAME | 1);
        assert_eq!(f.names(), &["JS:~fib /a.js:1:1".to_string(), "JS:*main /a.js:9:1".to_string()]);
    }

    #[test]
    fn without_v8_frames_the_native_stack_passes_through() {
        let mut f = V8JsFrames::new(SessionNames::default());
        let mut out = Vec::new();
        let c = CapturedStack {
            tid: 1,
            time_ns: 0,
            frames: &[0x1000, 0x2000],
            end: WalkEnd::Complete,
            stopped_ns: 0,
            delivery_ns: None,
            walk_error: false,
            runtime_frames: &[],
            tos: 0x1234,
            frame_words: &[],
        };
        f.rewrite(&c, &mut out);
        assert_eq!(out, vec![0x1000, 0x2000]);
    }
}
