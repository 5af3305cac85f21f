//! The sampler's side of JavaScript frames: placing them in the native
//! stack, per sample, by address ranges only.
//!
//! A sample's native frames are told apart by fixed ranges: the embedded
//! builtins (the interpreter's entry trampoline and bytecode handlers, the
//! native stand-ins of interpreted frames, among them; their names come
//! from the code map once, not per sample) and the isolate's JIT code
//! range. Interpreted frames get their bytecode address from their frame
//! words once the layout is learned (`slots`), or from `GetStackSample`
//! until then. JS frames are recorded as the compiled code's pc or the
//! bytecode address; they are named when the session ends (`resolve`), so
//! the per-sample work takes no lock and looks nothing up in the code map
//! (which was a third of the sampler thread's time at 1 kHz).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rustc_hash::{FxHashMap, FxHashSet};

use super::api::CodeRange;
use super::events::{code_map, V8Ranges};
use super::merge::{is_interpreter_name, AddrClass, Merged, Merger};
use super::slots;
use crate::sampler::addr_memo::AddrMemo;
use crate::sampler::backend::{CapturedStack, StackRewrite};
use crate::sampler::unwind::{RangeSet, StackCopy, StackEnd};
use crate::sampler::walker::WalkEnd;

/// Ranges recorded when each JS thread registered, by tid. Read at harvest
/// time, when the thread's isolate may already be gone, so they are copied
/// here rather than asked of the isolate.
static RANGES: Mutex<Option<FxHashMap<u64, V8Ranges>>> = Mutex::new(None);
/// Bumped whenever `RANGES` changes, so the sampler's copy stays current.
static RANGES_VERSION: AtomicU64 = AtomicU64::new(1);

/// Remembers a JS thread's ranges (call when it registers).
pub fn remember_ranges(tid: u64, ranges: V8Ranges) {
    RANGES.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(FxHashMap::default).insert(tid, ranges);
    RANGES_VERSION.fetch_add(1, Ordering::Release);
}

/// Forgets them (call when it unregisters).
pub fn forget_ranges(tid: u64) {
    if let Some(m) = RANGES.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        m.remove(&tid);
    }
    RANGES_VERSION.fetch_add(1, Ordering::Release);
}

/// The copies of the builtins mapped when the sampler last read the
/// process's mappings, registered isolates' or not (a worker's before it
/// registers and after it unregisters). Only the present ones: an address
/// range a worker's copy left may hold other code since.
static ALIASES: Mutex<Vec<CodeRange>> = Mutex::new(Vec::new());
/// Copies remembered at most (one per isolate with its own code range).
const MAX_ALIASES: usize = 1024;

/// Takes note of the builtins' copies in `maps` (the text of
/// `/proc/self/maps`), once some isolate has told where the builtins are.
pub fn note_maps(maps: &str) {
    let embedded = {
        let ranges = RANGES.lock().unwrap_or_else(PoisonError::into_inner);
        match ranges.as_ref().and_then(|m| m.values().find(|r| r.embedded.len > 0)) {
            Some(r) => r.embedded,
            None => return,
        }
    };
    let mut found = super::remap::find_aliases(&super::remap::parse_maps(maps), embedded);
    found.truncate(MAX_ALIASES);
    let mut known = ALIASES.lock().unwrap_or_else(PoisonError::into_inner);
    if *known != found {
        *known = found;
        RANGES_VERSION.fetch_add(1, Ordering::Release);
    }
}

/// V8's builtins (the embedded blob and its remapped copy) of every
/// registered thread: code that keeps frame pointers without unwind
/// information.
pub fn builtin_ranges() -> Vec<std::ops::Range<u64>> {
    let map = RANGES.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out = Vec::new();
    for r in map.iter().flat_map(|m| m.values()) {
        for c in [r.embedded, r.embedded_alias] {
            if c.len > 0 {
                out.push(c.start..c.start.saturating_add(c.len));
            }
        }
    }
    out
}

/// How the merge sees the end of a native stack: complete, cut at the
/// depth limit, or cut short (where JS frames V8 found beyond it go on).
fn walk_end(e: StackEnd) -> WalkEnd {
    match e {
        StackEnd::Root => WalkEnd::Complete,
        StackEnd::DepthLimit => WalkEnd::Truncated,
        StackEnd::NoPc => WalkEnd::NoPc,
        _ => WalkEnd::BadFramePointer,
    }
}

/// What a builtin is, for placing frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BuiltinKind {
    /// The interpreter's trampoline or a bytecode handler.
    Interpreter,
    /// A `*_Baseline` builtin: called from baseline code without a frame.
    FramelessForBaseline,
    Other,
}

/// The named builtins of the embedded blob, by start address (binary's
/// copy), from the code map. Kept as offsets from the first one, in
/// columns: each frame of each sample searches `starts`, and 4-byte entries
/// keep that search within a few cache lines.
#[derive(Default)]
struct Builtins {
    base: u64,
    starts: Vec<u32>,
    ends: Vec<u32>,
    kinds: Vec<BuiltinKind>,
    /// Recent answers of `kind` (samples repeat their frames).
    memo: AddrMemo<Option<BuiltinKind>>,
}

impl Builtins {
    /// From the code map, where V8 reported them at either copy (the
    /// binary's on Node 20, the remapped one from Node 22 on).
    fn load(ranges: &V8Ranges) -> Builtins {
        let map = code_map();
        let mut found = map.live_in(ranges.embedded.start, ranges.embedded.start + ranges.embedded.len);
        if ranges.embedded_alias.len > 0 {
            let alias = ranges.embedded_alias;
            found.extend(
                map.live_in(alias.start, alias.start + alias.len)
                    .into_iter()
                    .map(|(s, len, raw)| (ranges.canonical(s), len, raw)),
            );
        }
        let mut spans: Vec<(u64, u64, BuiltinKind)> = found
            .into_iter()
            .map(|(start, len, raw)| {
                let kind = if is_interpreter_name(raw) {
                    BuiltinKind::Interpreter
                } else if raw.ends_with("_Baseline") {
                    BuiltinKind::FramelessForBaseline
                } else {
                    BuiltinKind::Other
                };
                (start, start + len, kind)
            })
            .collect();
        spans.sort_unstable_by_key(|&(s, _, _)| s);
        spans.dedup_by_key(|&mut (s, _, _)| s);
        Builtins::from_spans(&spans)
    }

    /// From (start, end, kind), sorted by start, without duplicates. A span
    /// more than 4 GiB after the first (none: the blob is a few MiB) is left
    /// unnamed.
    fn from_spans(spans: &[(u64, u64, BuiltinKind)]) -> Builtins {
        let base = spans.first().map_or(0, |s| s.0);
        let mut b = Builtins { base, memo: AddrMemo::new(9, None), ..Builtins::default() };
        for &(start, end, kind) in spans {
            // Sorted: once a start is out of reach, so are the rest. An end
            // out of reach (a bogus length) is cut at the reach.
            let Ok(s) = u32::try_from(start - base) else { break };
            let e = u32::try_from(end.saturating_sub(base)).unwrap_or(u32::MAX);
            b.starts.push(s);
            b.ends.push(e);
            b.kinds.push(kind);
        }
        b
    }

    fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The kind of the builtin at `addr` (binary's copy); None for an
    /// address no named builtin covers. V8 10.8 (Node 19) names neither
    /// the bytecode handlers nor the `*_Baseline` builtins.
    fn kind(&self, addr: u64) -> Option<BuiltinKind> {
        self.memo.get_or(addr, || self.search(addr))
    }

    fn search(&self, addr: u64) -> Option<BuiltinKind> {
        let off = u32::try_from(addr.checked_sub(self.base)?).ok()?;
        let i = self.starts.partition_point(|&s| s <= off).checked_sub(1)?;
        (off < self.ends[i]).then_some(self.kinds[i])
    }
}

/// The address ranges of the loaded modules (executable and libraries),
/// re-read at most once a second. V8's heap, where bytecode lives, is
/// never inside one.
#[derive(Default)]
struct ModuleImages {
    ranges: RangeSet,
    read_at: Option<std::time::Instant>,
}

impl ModuleImages {
    fn contains(&mut self, addr: u64) -> bool {
        if self.read_at.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            self.ranges = RangeSet::new(crate::platform::loaded_modules().iter().map(|m| m.start..m.end).collect());
            self.read_at = Some(std::time::Instant::now());
        }
        self.ranges.contains(addr)
    }
}

/// Places JavaScript frames for a session.
#[derive(Default)]
pub struct V8JsFrames {
    ranges: FxHashMap<u64, V8Ranges>,
    ranges_version: u64,
    builtins: Builtins,
    native: Vec<u64>,
    js: Vec<u64>,
    /// This sample's bytecode addresses (from the frames or from V8).
    bytecodes: FxHashSet<u64>,
    interpreted: Vec<[u64; slots::WORDS]>,
    /// The native address of each of `interpreted`'s frames.
    interpreted_at: Vec<u64>,
    /// Interpreter addresses of this sample whose frame holds no bytecode
    /// position: a bytecode handler's own frame, a native frame.
    not_slots: Vec<u64>,
    learner: slots::Learner,
    merged: Vec<Merged>,
    merger: Merger,
    /// Per thread, how its JS samples were checked against the code map
    /// (see `check_known`).
    checked: FxHashMap<u64, Checked>,
    modules: ModuleImages,
    /// Every copy of the builtins known, and the binary's own.
    aliases: Vec<CodeRange>,
    embedded: CodeRange,
}

/// JS samples of each thread whose addresses are checked against the code
/// map: code compiled before a thread registered is unknown to it until
/// its existing code is enumerated, which a thread created while sampling
/// skips unless this finds such code.
const CHECKED_SAMPLES: u32 = 16;
/// A thread whose samples show unknown code has its existing code
/// enumerated only if it still runs JavaScript this long after: the
/// enumeration walks the isolate's heap (~4-7 ms of CPU for a new worker),
/// more than a short worker costs in all, and too late to name more than
/// its last samples; a long-lived thread still gets it, and its earlier
/// samples are named from it (a lookup falls back to the nearest entry in
/// time).
const ENUMERATE_AFTER_NS: u64 = 100_000_000;

/// Where a thread is in `check_known`.
enum Checked {
    /// This many of its JS samples were checked, all known.
    Checking(u32),
    /// A sample taken at this time had an unknown JS frame.
    Waiting(u64),
    /// Enumeration asked for, or none needed.
    Done,
}

impl V8JsFrames {
    pub fn new() -> Self {
        Self::default()
    }

    fn refresh(&mut self) {
        let version = RANGES_VERSION.load(Ordering::Acquire);
        if version != self.ranges_version {
            self.ranges = RANGES.lock().unwrap_or_else(PoisonError::into_inner).clone().unwrap_or_default();
            self.aliases = ALIASES.lock().unwrap_or_else(PoisonError::into_inner).clone();
            for r in self.ranges.values().filter(|r| r.embedded_alias.len > 0) {
                if !self.aliases.contains(&r.embedded_alias) {
                    self.aliases.push(r.embedded_alias);
                }
            }
            self.embedded = self.ranges.values().map(|r| r.embedded).find(|e| e.len > 0).unwrap_or_default();
            self.ranges_version = version;
        }
    }

    /// The ranges of thread `tid`: those it registered with, or, for a
    /// thread not registered (yet, or any more) whose stack runs through a
    /// copy of the builtins, that copy's, so its interpreted frames are
    /// placed and its builtins named all the same. Without a JIT code
    /// range: its compiled frames are named when the session ends, from
    /// their addresses alone.
    fn ranges_of(&self, tid: u64, frames: &[u64]) -> (V8Ranges, bool) {
        if let Some(r) = self.ranges.get(&tid) {
            return (*r, true);
        }
        if self.embedded.len == 0 {
            return (V8Ranges::default(), false);
        }
        let alias = frames.iter().find_map(|&a| self.aliases.iter().find(|c| c.contains(a)).copied());
        let unregistered =
            V8Ranges { embedded: self.embedded, embedded_alias: alias.unwrap_or_default(), ..Default::default() };
        (unregistered, false)
    }
}

impl V8JsFrames {
    /// For a thread's first JS samples: if one of its JS frames is unknown
    /// to the code map, and the thread still runs JavaScript
    /// [`ENUMERATE_AFTER_NS`] later, asks its isolate to enumerate its
    /// existing code (once). Skipped when the map is busy; never waits.
    fn check_known(&mut self, tid: u64, time_ns: u64) {
        let state = self.checked.entry(tid).or_insert(Checked::Checking(0));
        match *state {
            Checked::Done => {}
            Checked::Waiting(first) => {
                if time_ns.saturating_sub(first) >= ENUMERATE_AFTER_NS {
                    *state = Checked::Done;
                    super::events::request_enumeration(tid);
                }
            }
            Checked::Checking(n) if n >= CHECKED_SAMPLES => *state = Checked::Done,
            Checked::Checking(n) => {
                let Some(map) = super::events::try_code_map() else { return };
                // Known only if a live entry covers it: a dead one may be
                // another isolate's, disposed of, whose addresses this one
                // now uses (short workers coming and going), and says
                // nothing of this code.
                let live = |addr: u64| map.covering(addr).iter().any(|&(_, died, _)| died == u64::MAX);
                let unknown = self.merged.iter().any(|m| matches!(*m, Merged::Js { addr, .. } if !live(addr)));
                *state = if unknown { Checked::Waiting(time_ns) } else { Checked::Checking(n + 1) };
            }
        }
    }
}

/// Below this no heap object lives (Linux maps nothing below 64 KiB; macOS
/// reserves the first 4 GiB).
const LOWEST_HEAP_ADDRESS: u64 = 1 << 16;

/// False for an address that cannot be in V8's heap: in the first pages,
/// in code, in a module.
fn could_be_heap(modules: &mut ModuleImages, ranges: &V8Ranges, addr: u64) -> bool {
    addr >= LOWEST_HEAP_ADDRESS && !in_builtins(ranges, addr) && !ranges.code.contains(addr) && !modules.contains(addr)
}

/// True if `addr` is in V8's builtins (either copy).
fn in_builtins(ranges: &V8Ranges, addr: u64) -> bool {
    ranges.embedded.contains(addr) || ranges.embedded_alias.contains(addr)
}

/// The class of a native frame's address, from ranges alone.
fn native_class(builtins: &Builtins, ranges: &V8Ranges, addr: u64) -> AddrClass {
    if in_builtins(ranges, addr) {
        return match builtins.kind(ranges.canonical(addr)) {
            Some(BuiltinKind::Interpreter) | None => AddrClass::InterpreterSlot,
            Some(_) => AddrClass::Other,
        };
    }
    if ranges.code.contains(addr) {
        AddrClass::JsCode
    } else {
        AddrClass::Other
    }
}

/// Bytes of the calling thread's stack an own-stack lesson reads, at most.
const OWN_STACK_BYTES: u64 = 1 << 20;

/// Learns the interpreted-frame layout (see [`slots`]) from the calling
/// thread's own stack, at once, instead of from samples: JS calls this from
/// the bottom of a fresh recursion of interpreted frames (`start()` does,
/// see `lib/frame-layout.js`). V8's own answer for this thread (`sample_js` from
/// inside this native call, as Node's diagnostic report samples itself)
/// gives the bytecode positions; the words below the frame pointer of each
/// interpreted frame on the stack are matched against them, as the
/// sampler does per sample. Learning from samples takes their first few
/// dozen, with V8's stack walk in each handler meanwhile, and on V8 10.8
/// (which names none of its bytecode handlers) failed in about one run in
/// eight.
///
/// Never called from a signal handler. Reads only the calling thread's
/// stack between its stack pointer and the top of its stack; a word is
/// taken as a frame record only if it points further up that range.
/// Returns the layout, learned now or before; `None` if it is still
/// unknown (the thread is not registered, V8 reported no interpreted
/// frame, or too few frames agreed).
pub fn learn_layout_from_own_stack() -> Option<slots::Layout> {
    if slots::learned().is_some() || slots::failed() {
        return slots::learned();
    }
    let tid = crate::sampler::thread_id::current();
    let ranges = RANGES.lock().unwrap_or_else(PoisonError::into_inner).as_ref()?.get(&tid).copied()?;
    let local = 0u64;
    let here = std::hint::black_box(&local) as *const u64 as u64;
    let top = own_stack_top()?.min(here.saturating_add(OWN_STACK_BYTES));
    if top <= here {
        return None;
    }
    let mut runtime = [0u64; 256];
    let sample =
        super::sample_js(&crate::sampler::walker::Registers { pc: 0, sp: here, fp: here, lr: 0 }, &mut runtime);
    let modules = RangeSet::new(crate::platform::loaded_modules().iter().map(|m| m.start..m.end).collect());
    let heap = |b: u64| !in_builtins(&ranges, b) && !ranges.code.contains(b) && !modules.contains(b);
    let reported: Vec<u64> = runtime[..sample.count.min(runtime.len())].iter().copied().filter(|&a| heap(a)).collect();
    if reported.is_empty() {
        return None;
    }
    let n = ((top - here) / 8) as usize;
    // SAFETY: `[here, top)` runs from a local of this frame up the calling
    // thread's own stack, at most to its top: stack in use, mapped, and
    // written only by this thread, which is running this code.
    let stack: Vec<u64> = unsafe { std::slice::from_raw_parts(here as *const u64, n) }.to_vec();
    let copy = StackCopy::whole(here, &stack);
    // A return address into V8's builtins, in its callee's frame record:
    // the word below it is the caller's frame pointer. Most are the
    // interpreter's (the recursion); the few others (entry and API-call
    // frames) can only fail to match, and telling them apart would need
    // the builtins' names, which the code map has only after draining
    // every code event so far (milliseconds).
    let fps: Vec<u64> = (1..stack.len())
        .filter(|&i| in_builtins(&ranges, stack[i]))
        .filter_map(|i| {
            let record = here + 8 * (i as u64 - 1);
            let fp = stack[i - 1];
            (fp > record && fp < top && fp.is_multiple_of(8)).then_some(fp)
        })
        .collect();
    let mut interpreted = Vec::new();
    slots::words_below(&fps, |a| copy.read(a), &mut interpreted);
    slots::Learner::new().observe(&interpreted, &reported, &heap)
}

/// The top (highest address) of the calling thread's stack.
#[cfg(target_os = "linux")]
fn own_stack_top() -> Option<u64> {
    // SAFETY: `attr` is initialized by pthread_getattr_np before it is
    // read, and destroyed after; the out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0 && !addr.is_null()).then(|| addr as u64 + size as u64)
    }
}

/// Elsewhere the layout is learned from samples only: this way has run on
/// Linux alone so far.
#[cfg(not(target_os = "linux"))]
fn own_stack_top() -> Option<u64> {
    None
}

impl StackRewrite for V8JsFrames {
    fn rewrite(&mut self, c: &CapturedStack<'_>, out: &mut Vec<u64>) {
        self.refresh();
        let (ranges, registered) = self.ranges_of(c.tid, c.frames);
        // The builtins are reported when the first isolate's handler is
        // installed (before sampling starts): read their names once.
        if self.builtins.is_empty() && registered && ranges.embedded.len > 0 {
            self.builtins = Builtins::load(&ranges);
        }
        let builtins = &self.builtins;
        let class = |addr: u64| native_class(builtins, &ranges, addr);

        // Interpreted frames: the native frames in the interpreter, with
        // the bytecode position read from their frames (`slots`), once the
        // layout is known; until then GetStackSample's answer
        // (`runtime_frames`), which also teaches the layout.
        self.interpreted.clear();
        self.interpreted_at.clear();
        for (i, &addr) in c.frames.iter().enumerate() {
            if class(addr) == AddrClass::InterpreterSlot {
                if let Some(w) = c.frame_words.get(i) {
                    self.interpreted.push(*w);
                    self.interpreted_at.push(addr);
                }
            }
        }
        self.js.clear();
        self.bytecodes.clear();
        self.not_slots.clear();
        if !c.runtime_frames.is_empty() {
            // V8's frames: compiled code and exit frames are in V8's code
            // ranges, interpreted frames are bytecode addresses (the heap).
            // An exit frame into a C++ API callback is reported as the
            // callback's entry point instead (in a module): that is no
            // frame of the stack (the native walk has the callback's own
            // frames), so it is left out.
            for &a in c.runtime_frames {
                if in_builtins(&ranges, a) || ranges.code.contains(a) {
                    self.js.push(a);
                } else if !self.modules.contains(a) {
                    self.js.push(a);
                    self.bytecodes.insert(a);
                }
            }
            let reported: Vec<u64> = self.js.iter().copied().filter(|a| self.bytecodes.contains(a)).collect();
            let heap = |b: u64| !in_builtins(&ranges, b) && !ranges.code.contains(b);
            self.learner.observe(&self.interpreted, &reported, &heap);
        } else if let Some(layout) = slots::learned() {
            for (w, &at) in self.interpreted.iter().zip(&self.interpreted_at) {
                // A bytecode handler that calls out builds a frame of its
                // own, whose words hold no bytecode position: what they
                // give is no heap address. That frame stays a native one.
                match layout.bytecode(w) {
                    Some(b) if could_be_heap(&mut self.modules, &ranges, b) => {
                        self.js.push(b);
                        self.bytecodes.insert(b);
                    }
                    _ => self.not_slots.push(at),
                }
            }
        }

        // A thread stopped in one of the builtins Sparkplug (baseline)
        // code calls without a frame (`*_Baseline`: arithmetic, compares,
        // ...) has its caller's return address on top of the stack, and a
        // frame-pointer walk, like GetStackSample, skips that caller. V8's
        // own profiler recovers it from the top of the stack; so do we. Only
        // for those builtins (or, where V8 names none, an unnamed builtin
        // under a JIT return address): elsewhere the word at sp may be a
        // stale return address left by an earlier call.
        self.native.clear();
        self.native.extend_from_slice(c.frames);
        let frameless_leaf = c.frames.first().is_some_and(|&pc| {
            in_builtins(&ranges, pc)
                && match builtins.kind(ranges.canonical(pc)) {
                    Some(kind) => kind == BuiltinKind::FramelessForBaseline,
                    None => true,
                }
        });
        if frameless_leaf && c.tos != 0 && c.frames.get(1) != Some(&c.tos) && ranges.code.contains(c.tos) {
            self.native.insert(1, c.tos);
        }
        let bytecodes = &self.bytecodes;
        let not_slots = &self.not_slots;
        let classify = |addr: u64| {
            if bytecodes.contains(&addr) {
                AddrClass::Bytecode
            } else if not_slots.contains(&addr) {
                AddrClass::Other
            } else {
                native_class(builtins, &ranges, addr)
            }
        };
        self.merged.clear();
        self.merger.merge(&self.native, walk_end(c.end), &self.js, &classify, &mut self.merged);
        if registered {
            self.check_known(c.tid, c.time_ns);
        }
        for m in &self.merged {
            match *m {
                // A builtin run from the copy V8 remapped into its code
                // range is named at the binary's copy (`Builtins_*`).
                Merged::Native(addr) => out.push(ranges.canonical(addr)),
                // Named when the session ends (`resolve`).
                Merged::Js { addr, .. } => out.push(addr),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_v8_frames_the_native_stack_passes_through() {
        let mut f = V8JsFrames::new();
        let mut out = Vec::new();
        let c = CapturedStack {
            tid: 1,
            time_ns: 0,
            frames: &[0x1000, 0x2000],
            end: StackEnd::Root,
            stopped_ns: 0,
            copied_bytes: 0,
            delivery_ns: None,
            weight: 1,
            off_cpu: false,
            lr: 0,
            runtime_frames: &[],
            tos: 0x1234,
            frame_words: &[],
        };
        f.rewrite(&c, &mut out);
        assert_eq!(out, vec![0x1000, 0x2000]);
    }

    #[test]
    fn frames_are_placed_by_ranges() {
        use super::super::api::CodeRange;
        let ranges = V8Ranges {
            embedded: CodeRange { start: 0x10_0000, len: 0x1000 },
            embedded_alias: CodeRange::default(),
            code: CodeRange { start: 0x50_0000, len: 0x10_0000 },
        };
        let builtins = Builtins::from_spans(&[
            (0x10_0000, 0x10_0100, BuiltinKind::Interpreter),
            (0x10_0100, 0x10_0200, BuiltinKind::Other),
            (0x10_0300, 0x10_0400, BuiltinKind::FramelessForBaseline),
        ]);
        let class = |a| native_class(&builtins, &ranges, a);
        // Twice: the second answers come from the memo.
        for _ in 0..2 {
            check_classes(&builtins, class);
        }
    }

    fn check_classes(builtins: &Builtins, class: impl Fn(u64) -> AddrClass) {
        assert_eq!(class(0x10_0010), AddrClass::InterpreterSlot);
        assert_eq!(class(0x10_0110), AddrClass::Other);
        // An unnamed builtin (V8 10.8's bytecode handlers).
        assert_eq!(class(0x10_0210), AddrClass::InterpreterSlot);
        assert_eq!(class(0x50_1000), AddrClass::JsCode);
        assert_eq!(class(0x7f00_0000), AddrClass::Other);
        assert_eq!(builtins.kind(0x10_0350), Some(BuiltinKind::FramelessForBaseline));
        assert_eq!(builtins.kind(0x10_0250), None);
        assert_eq!(builtins.kind(0x0f_ffff), None, "below the first");
        assert_eq!(builtins.kind(0x10_0400), None, "past the last");
        assert_eq!(builtins.kind(u64::MAX), None);
        assert!(Builtins::from_spans(&[]).is_empty() && Builtins::default().kind(0).is_none());
    }
}
