//! Fuzzing the CFI unwinder (`Unwinder::unwind`) over copied stacks.
//!
//! The unwinder runs on the sampler thread over stack copies of other
//! threads, with the unwind information of every loaded module. Whatever
//! the copy holds and whatever the CFI says, it must end the stack with a
//! reason: never panic, never loop, never read outside the copy. Here:
//!
//! - **Real modules, random copies.** The modules of this process, built
//!   by the Linux backend's own `loaded_code`, unwind copies that are
//!   random words, frame-record chains (with cycles, and return addresses
//!   into real code, JIT code and frame-pointer code), or a real stack of
//!   this thread (copied from a known call chain) with words replaced, bits
//!   flipped, the copy cut short and records added above it.
//! - **Mutated unwind information.** The same real stack is unwound with
//!   this test binary's `.eh_frame_hdr` and `.eh_frame` copied and mutated
//!   (bit flips and byte stores in the very table entries, FDEs and CIEs
//!   the stack's frames use, sections cut short) or replaced by garbage.
//! - **CFA expressions.** A synthetic module whose FDE gives the CFA as
//!   `DW_OP_breg7 rsp+N; DW_OP_deref; DW_OP_plus_uconst 8` (OpenSSL's
//!   realigned stacks), against a model of that step.
//!
//! Every copy lies in memory with `PROT_NONE` pages on both sides, and its
//! readable neighbourhood holds poison words that are addresses of code:
//! a word read from outside the copy would become a recorded frame. The
//! properties: `unwind` returns; at most `max_depth` frames; the first is
//! the pc; every later frame is a return address in executable code, read
//! from the copy at a slot above the previous one (on x86_64 the return
//! address is the word just below the caller's stack pointer, so this is
//! also how "the stack pointer rises at every step" shows from outside);
//! the end reason agrees with the frames.
//!
//! Cases per property come from `PROPTEST_CASES` (the defaults run in a
//! few seconds under `cargo test`).

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::cell::RefCell;
use std::ops::Range;
use std::sync::OnceLock;

use framehop::ExplicitModuleSectionInfo;
use machsampler::platform::linux::code::loaded_code;
use machsampler::sampler::unwind::{CodeModule, StackCopy, StackEnd, TailRecord, Unwinder, Unwound};
use machsampler::sampler::walker::Registers;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const PAGE: usize = 4096;
/// Readable pages that hold a copy and the poison around it.
const READ_PAGES: usize = 24;
const AREA_WORDS: usize = READ_PAGES * PAGE / 8;
/// `PROT_NONE` pages above the readable ones, where records above the copy
/// (`StackCopy::tail`) have their addresses: reading them anywhere but
/// from the tail faults.
const TAIL_PAGES: usize = 2;
/// Poison words always below the copy.
const MIN_PAD: usize = 16;
/// At most this much of the real stack is copied.
const MAX_SNAPSHOT_WORDS: usize = AREA_WORDS - 2 * MIN_PAD - 64;
/// Calls between the test and the snapshot, all from one call site.
const SNAPSHOT_DEPTH: u32 = 6;
/// Fake JIT code, executable but in no module; its first half keeps frame pointers.
const JIT: Range<u64> = 0x1000_0000_0000..0x1000_0010_0000;
const JIT_FRAME_POINTERS: Range<u64> = JIT.start..(JIT.start + JIT.end) / 2;

// ---------------------------------------------------------------------
// Memory between guard pages

/// `[PROT_NONE][READ_PAGES read-only][TAIL_PAGES + 1 PROT_NONE]`.
struct Guarded {
    base: *mut u8,
}

impl Guarded {
    const PAGES: usize = 1 + READ_PAGES + TAIL_PAGES + 1;

    fn new() -> Self {
        // SAFETY: an anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::PAGES * PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap failed");
        Guarded { base: base.cast() }
    }

    /// The address of word `i` of the readable area.
    fn addr(&self, i: usize) -> u64 {
        self.base as u64 + PAGE as u64 + 8 * i as u64
    }

    /// The first address of the `PROT_NONE` pages above the readable area.
    fn tail_base(&self) -> u64 {
        self.addr(AREA_WORDS)
    }

    fn protect(&self, prot: libc::c_int) {
        // SAFETY: the readable area lies inside our own mapping.
        let rc = unsafe { libc::mprotect(self.base.add(PAGE).cast(), READ_PAGES * PAGE, prot) };
        assert_eq!(rc, 0, "mprotect failed");
    }

    /// Fills the readable area with `words` and makes it read-only.
    fn load(&mut self, words: &[u64]) -> &[u64] {
        assert_eq!(words.len(), AREA_WORDS);
        self.protect(libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the area is AREA_WORDS words, writable now; `&mut self`
        // means no slice from an earlier `load` is alive.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), self.base.add(PAGE).cast::<u64>(), AREA_WORDS) };
        self.protect(libc::PROT_READ);
        // SAFETY: AREA_WORDS readable, aligned words, not written again
        // while the returned borrow of `self` lives.
        unsafe { std::slice::from_raw_parts(self.base.add(PAGE).cast::<u64>(), AREA_WORDS) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), Self::PAGES * PAGE) };
    }
}

thread_local! {
    static MEMORY: RefCell<Option<Guarded>> = const { RefCell::new(None) };
    /// One unwinder over the real modules, reused like the backend's (its
    /// rule cache carries over from case to case).
    static UNWINDER: RefCell<Option<Unwinder>> = const { RefCell::new(None) };
}

// ---------------------------------------------------------------------
// A real stack of this thread

struct Snapshot {
    pc: u64,
    sp: u64,
    fp: u64,
    /// The stack from `sp` up, at most MAX_SNAPSHOT_WORDS.
    words: Vec<u64>,
    /// The stack's top: pointers in `[sp, top)` point into the stack.
    top: u64,
    truncated: bool,
}

fn stack_top() -> u64 {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread; the
    // attribute is destroyed after use; out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        addr as u64 + size as u64
    }
}

#[inline(never)]
fn take_snapshot() -> Snapshot {
    let (pc, sp, fp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp into registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {fp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        )
    };
    let top = stack_top();
    let n = (((top - sp) / 8) as usize).min(MAX_SNAPSHOT_WORDS);
    // SAFETY: [sp, top) is this thread's stack, mapped and readable; the
    // words are only copied.
    let words = unsafe { std::slice::from_raw_parts(sp as *const u64, n) }.to_vec();
    Snapshot { pc, sp, fp, words, top, truncated: (top - sp) as usize > 8 * n }
}

/// A call chain of `n` frames from one call site, then the snapshot.
#[inline(never)]
fn snapshot_at_depth(n: u32) -> Snapshot {
    if n == 0 {
        return take_snapshot();
    }
    let s = snapshot_at_depth(std::hint::black_box(n - 1));
    std::hint::black_box(&s);
    s
}

impl Snapshot {
    /// `w` moved as if the stack had been at `start`.
    fn relocate(&self, w: u64, start: u64) -> u64 {
        if (self.sp..self.top).contains(&w) {
            w - self.sp + start
        } else {
            w
        }
    }
}

/// The unwind information of this test binary, as the backend found it,
/// and where in it the snapshot's frames are described.
struct OwnCfi {
    text: Range<u64>,
    bias: u64,
    hdr: &'static [u8],
    hdr_svma: u64,
    frame: &'static [u8],
    frame_svma: u64,
    /// For each frame of the snapshot in this binary: the byte offset of
    /// its `.eh_frame_hdr` table entry, its FDE's and its CIE's bytes.
    records: Vec<(usize, Range<usize>, Range<usize>)>,
}

struct Env {
    snapshot: Snapshot,
    /// The snapshot unwound where it was taken (nothing moved).
    frames: Vec<u64>,
    end: StackEnd,
    /// Text of every module, for return addresses into real code.
    texts: Vec<Range<u64>>,
    /// A text range that no module's text is near: poison lives here.
    poison_base: u64,
    cfi: OwnCfi,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let snapshot = snapshot_at_depth(SNAPSHOT_DEPTH);
        let mut u = real_unwinder();
        let copy = StackCopy {
            start: snapshot.sp,
            words: &snapshot.words,
            truncated: snapshot.truncated,
            tail: &[],
            holes: &[],
        };
        let mut out = Unwound::default();
        let regs = Registers { pc: snapshot.pc, sp: snapshot.sp, fp: snapshot.fp, lr: 0 };
        let end = u.unwind(regs, &copy, 1024, &mut out);
        let modules = loaded_code(|_| false);
        let texts: Vec<Range<u64>> = modules.iter().map(|m| m.text.clone()).collect();
        let own = modules.into_iter().find(|m| m.text.contains(&snapshot.pc)).expect("this binary's module");
        let cfi = own_cfi(&own, &out.frames);
        Env { poison_base: own.text.start, snapshot, frames: out.frames, end, texts, cfi }
    })
}

fn real_unwinder() -> Unwinder {
    let mut u = Unwinder::default();
    for m in loaded_code(|_| false) {
        u.add_module(m);
    }
    u.set_jit_regions(vec![JIT]);
    u.set_frame_pointer_code(vec![JIT_FRAME_POINTERS]);
    u
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Finds, by hand, the table entry, FDE and CIE that describe each frame.
fn own_cfi(m: &CodeModule, frames: &[u64]) -> OwnCfi {
    let s = &m.sections;
    let (hdr, frame) = (s.eh_frame_hdr.expect("own .eh_frame_hdr"), s.eh_frame.expect("own .eh_frame"));
    let (hdr_svma, frame_svma) = (s.eh_frame_hdr_svma.clone().unwrap().start, s.eh_frame_svma.clone().unwrap().start);
    // version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4.
    assert_eq!(hdr[..4], [1, 0x1b, 0x03, 0x3b], "an .eh_frame_hdr as GNU ld and lld write it");
    let count = u32_at(hdr, 8) as usize;
    let entry = |i: usize| {
        let at = 12 + 8 * i;
        (hdr_svma.wrapping_add(u32_at(hdr, at) as i32 as u64), hdr_svma.wrapping_add(u32_at(hdr, at + 4) as i32 as u64))
    };
    let record = |off: usize| off..off + 4 + u32_at(frame, off) as usize;
    let mut records = Vec::new();
    for (k, &f) in frames.iter().enumerate() {
        let svma = if k == 0 { f } else { f - 1 }.wrapping_sub(m.base_avma);
        if !m.text.contains(&f) {
            continue;
        }
        let i = (0..count).collect::<Vec<_>>().partition_point(|&i| entry(i).0 <= svma);
        if i == 0 {
            continue;
        }
        let fde = record((entry(i - 1).1 - frame_svma) as usize);
        let cie_pointer = u32_at(frame, fde.start + 4) as usize;
        let cie = record(fde.start + 4 - cie_pointer);
        records.push((12 + 8 * (i - 1), fde, cie));
    }
    assert!(records.len() > SNAPSHOT_DEPTH as usize, "the snapshot's frames have FDEs: {records:?}");
    OwnCfi { text: m.text.clone(), bias: m.base_avma, hdr, hdr_svma, frame, frame_svma, records }
}

#[test]
fn a_real_stack_unwinds_through_its_call_chain_wherever_it_lies() {
    let e = env();
    // The chain's frames all return to the one call site in snapshot_at_depth.
    let run = e.frames.windows(SNAPSHOT_DEPTH as usize).any(|w| w.iter().all(|&f| f == w[0]));
    assert!(run, "{} equal return addresses in a row: {:x?}", SNAPSHOT_DEPTH, e.frames);
    assert!(e.frames.len() > SNAPSHOT_DEPTH as usize + 2, "{:x?}", e.frames);
    let want = if e.snapshot.truncated { StackEnd::TruncatedCopy } else { StackEnd::Root };
    assert_eq!(e.end, want, "{:x?}", e.frames);
    // The same stack moved between guard pages unwinds to the same frames.
    let c = SnapCase { cut: None, edits: vec![] };
    let case = Case { base: Base::Snapshot(c), pad: 100, truncated: None, tail: vec![], regs: None, max_depth: 1024 };
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        let g = m.get_or_insert_with(Guarded::new);
        let layout = layout(g, &case);
        let area = g.load(&layout.memory);
        let copy = layout.copy(area);
        let mut u = real_unwinder();
        let mut out = Unwound::default();
        let end = u.unwind(layout.regs, &copy, 1024, &mut out);
        assert_eq!((end, &out.frames), (e.end, &e.frames));
    });
}

// ---------------------------------------------------------------------
// Cases over real modules

/// A code address.
#[derive(Clone, Copy, Debug)]
enum Code {
    /// One of the snapshot's return addresses (just after real calls).
    Known(u8),
    /// Anywhere in a module's text.
    Module(u8, u32),
    /// JIT code (no module); its first half keeps frame pointers.
    Jit(u32),
}

/// A word of a copy, relative to where the copy ends up.
#[derive(Clone, Copy, Debug)]
enum Word {
    Zero,
    Code(Code),
    /// Word `index` of the copy (past its end too), plus `misalign` bytes.
    Ptr {
        index: u16,
        misalign: u8,
    },
    /// `delta` bytes from the copy's start or end.
    Edge {
        high: bool,
        delta: i16,
    },
    /// Field `second` of record `index` above the copy.
    Tail {
        index: u8,
        second: bool,
    },
    Any(u64),
}

fn code() -> impl Strategy<Value = Code> {
    prop_oneof![
        3 => any::<u8>().prop_map(Code::Known),
        2 => (any::<u8>(), any::<u32>()).prop_map(|(m, o)| Code::Module(m, o)),
        2 => any::<u32>().prop_map(Code::Jit),
    ]
}

fn word() -> impl Strategy<Value = Word> {
    prop_oneof![
        2 => Just(Word::Zero),
        4 => code().prop_map(Word::Code),
        4 => (0u16..600, prop_oneof![6 => Just(0u8), 1 => 1u8..8]).prop_map(|(index, misalign)| Word::Ptr { index, misalign }),
        1 => (any::<bool>(), -128i16..128).prop_map(|(high, delta)| Word::Edge { high, delta }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(index, second)| Word::Tail { index, second }),
        1 => any::<u64>().prop_map(Word::Any),
    ]
}

#[derive(Clone, Debug)]
enum Edit {
    Set(Word),
    Flip(u8),
}

#[derive(Clone, Debug)]
struct SnapCase {
    /// Keep only this many words of the real stack (rounded into range).
    cut: Option<u16>,
    /// (word index modulo the copy's length, edit)
    edits: Vec<(u16, Edit)>,
}

#[derive(Clone, Debug)]
enum Base {
    /// `len` words: a cheap mix seeded by `fill`, then `words` from `at`.
    Random {
        len: u16,
        fill: u64,
        at: u16,
        words: Vec<Word>,
    },
    /// Frame records `[next, return address]` every `2 + gap` words; the
    /// last points back to record `back` (a cycle) or holds `last`.
    Chain {
        frames: u16,
        gap: u8,
        ras: Vec<Code>,
        back: Option<u16>,
        last: Word,
        edits: Vec<(u16, Word)>,
    },
    Snapshot(SnapCase),
}

#[derive(Clone, Debug)]
struct Case {
    base: Base,
    /// Poison words below the copy, beyond MIN_PAD.
    pad: u16,
    /// `None`: truncated as the base says.
    truncated: Option<bool>,
    /// Records above the copy: (gap in 16-byte units, saved fp, return address).
    tail: Vec<(u8, Word, Word)>,
    /// Registers other than the base's: pc, sp, fp.
    regs: Option<(Word, Word, Word)>,
    max_depth: usize,
}

fn max_depth() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 1usize..64, 2 => 64usize..=1024, 1 => Just(1_000_000)]
}

fn tail() -> impl Strategy<Value = Vec<(u8, Word, Word)>> {
    prop_oneof![
        2 => Just(vec![]),
        1 => prop::collection::vec((0u8..8, word(), word()), 1..6),
    ]
}

fn regs_override(often: u32) -> impl Strategy<Value = Option<(Word, Word, Word)>> {
    let pc = prop_oneof![6 => code().prop_map(Word::Code), 1 => word()];
    let sp = prop_oneof![6 => (0u16..4).prop_map(|index| Word::Ptr { index, misalign: 0 }), 1 => word()];
    prop_oneof![
        10 - often => Just(None),
        often => (pc, sp, word()).prop_map(Some),
    ]
}

fn random_case() -> impl Strategy<Value = Case> {
    let base = (1u16..1500, any::<u64>(), 0u16..1500, prop::collection::vec(word(), 0..200))
        .prop_map(|(len, fill, at, words)| Base::Random { len, fill, at, words });
    (base, 0u16..64, any::<bool>(), tail(), regs_override(10), max_depth()).prop_map(
        |(base, pad, truncated, tail, regs, max_depth)| Case {
            base,
            pad,
            truncated: Some(truncated),
            tail,
            regs,
            max_depth,
        },
    )
}

fn chain_case() -> impl Strategy<Value = Case> {
    let ra = prop_oneof![3 => (0u32..u32::MAX).prop_map(Code::Jit), 2 => code()];
    let base = (
        1u16..300,
        0u8..3,
        prop::collection::vec(ra, 1..8),
        prop_oneof![1 => Just(None), 1 => any::<u16>().prop_map(Some)],
        word(),
        prop::collection::vec((any::<u16>(), word()), 0..4),
    )
        .prop_map(|(frames, gap, ras, back, last, edits)| Base::Chain { frames, gap, ras, back, last, edits });
    // pc in frame-pointer code (so the first step follows fp), in JIT, or
    // in a module; sp at the copy's start; fp at the first record.
    let pc = prop_oneof![
        3 => (0u32..u32::MAX / 2).prop_map(|o| Word::Code(Code::Jit(o))),
        1 => code().prop_map(Word::Code),
    ];
    let regs = (pc, prop_oneof![4 => Just(2u16), 1 => 0u16..8])
        .prop_map(|(pc, fp)| Some((pc, Word::Ptr { index: 0, misalign: 0 }, Word::Ptr { index: fp, misalign: 0 })));
    (base, 0u16..64, any::<bool>(), tail(), regs, max_depth()).prop_map(
        |(base, pad, truncated, tail, regs, max_depth)| Case {
            base,
            pad,
            truncated: Some(truncated),
            tail,
            regs,
            max_depth,
        },
    )
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![2 => word().prop_map(Edit::Set), 1 => (0u8..64).prop_map(Edit::Flip)]
}

fn snap_case() -> impl Strategy<Value = SnapCase> {
    (
        prop_oneof![2 => Just(None), 1 => any::<u16>().prop_map(Some)],
        prop::collection::vec((prop_oneof![3 => 0u16..300, 1 => any::<u16>()], edit()), 0..6),
    )
        .prop_map(|(cut, edits)| SnapCase { cut, edits })
}

fn snapshot_case() -> impl Strategy<Value = Case> {
    (
        snap_case(),
        0u16..64,
        prop_oneof![3 => Just(None), 1 => any::<bool>().prop_map(Some)],
        tail(),
        regs_override(2),
        max_depth(),
    )
        .prop_map(|(s, pad, truncated, tail, regs, max_depth)| Case {
            base: Base::Snapshot(s),
            pad,
            truncated,
            tail,
            regs,
            max_depth,
        })
}

/// A case made concrete at its place in guarded memory.
struct Layout {
    memory: Vec<u64>,
    /// Word index of the copy in the readable area, and its length.
    first: usize,
    len: usize,
    truncated: bool,
    tail: Vec<TailRecord>,
    regs: Registers,
}

impl Layout {
    fn copy<'a>(&'a self, area: &'a [u64]) -> StackCopy<'a> {
        let start = area.as_ptr() as u64 + 8 * self.first as u64;
        StackCopy {
            start,
            words: &area[self.first..self.first + self.len],
            truncated: self.truncated,
            tail: &self.tail,
            holes: &[],
        }
    }
}

fn layout(g: &Guarded, c: &Case) -> Layout {
    let e = env();
    let first = MIN_PAD + c.pad as usize;
    let room = AREA_WORDS - first - MIN_PAD;
    let start = g.addr(first);
    // The base's words (before they know where they are, for Random and
    // Chain: those are realized below).
    let snap = &e.snapshot;
    let snap_len = |cut: Option<u16>| match cut {
        Some(n) => (n as usize % snap.words.len()).max(1).min(room),
        None => snap.words.len().min(room),
    };
    let len = match &c.base {
        Base::Random { len, .. } => (*len as usize).min(room),
        Base::Chain { frames, gap, .. } => ((*frames as usize) * (2 + *gap as usize) + 4).min(room),
        Base::Snapshot(s) => snap_len(s.cut),
    };
    let end = start + 8 * len as u64;
    // Records above the copy, in the PROT_NONE pages above the area.
    let mut tail_at: Vec<u64> = Vec::new();
    let mut at = g.tail_base();
    for &(gap, _, _) in &c.tail {
        tail_at.push(at + 16 * gap as u64);
        at += 16 * (gap as u64 + 1);
    }
    let known = &e.frames[1..];
    let value = |w: Word| -> u64 {
        match w {
            Word::Zero => 0,
            Word::Code(Code::Known(i)) => known[i as usize % known.len()],
            Word::Code(Code::Module(m, o)) => {
                let t = &e.texts[m as usize % e.texts.len()];
                t.start + o as u64 % (t.end - t.start)
            }
            Word::Code(Code::Jit(o)) => JIT.start + o as u64 % (JIT.end - JIT.start),
            Word::Ptr { index, misalign } => start + 8 * index as u64 + misalign as u64,
            Word::Edge { high, delta } => (if high { end } else { start }).wrapping_add(delta as i64 as u64),
            Word::Tail { index, second } => match tail_at.get(index as usize % tail_at.len().max(1)) {
                Some(a) => a + 8 * second as u64,
                None => end,
            },
            Word::Any(v) => v,
        }
    };
    // Poison: distinct addresses in this binary's code, so a word read
    // from outside the copy would be recorded as a frame.
    let mut memory: Vec<u64> = (0..AREA_WORDS).map(|i| e.poison_base + 0x41 + 16 * i as u64).collect();
    let words = &mut memory[first..first + len];
    let (mut regs, mut truncated) = (Registers::default(), false);
    match &c.base {
        Base::Random { fill, at, words: explicit, .. } => {
            let mut s = *fill | 1;
            for (i, w) in words.iter_mut().enumerate() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *w = match s % 8 {
                    0 | 1 => 0,
                    2 | 3 => start + 8 * ((i as u64 + 2 + (s >> 8) % 64) % len as u64),
                    4 => value(Word::Code(Code::Known((s >> 8) as u8))),
                    5 => value(Word::Code(Code::Module((s >> 8) as u8, (s >> 16) as u32))),
                    6 => s >> 16,
                    _ => s,
                };
            }
            for (k, w) in explicit.iter().enumerate() {
                if let Some(slot) = words.get_mut(*at as usize + k) {
                    *slot = value(*w);
                }
            }
        }
        Base::Chain { frames, gap, ras, back, last, edits } => {
            let stride = 2 + *gap as usize;
            let record = |f: usize| 2 + f * stride;
            let frames = (*frames as usize).min((len - 4) / stride).max(1);
            for f in 0..frames {
                let next = if f + 1 < frames {
                    start + 8 * record(f + 1) as u64
                } else if let Some(b) = back {
                    start + 8 * record(*b as usize % frames) as u64
                } else {
                    value(*last)
                };
                words[record(f)] = next;
                words[record(f) + 1] = value(Word::Code(ras[f % ras.len()]));
            }
            for &(i, w) in edits {
                words[i as usize % len] = value(w);
            }
        }
        Base::Snapshot(s) => {
            for (w, &v) in words.iter_mut().zip(&snap.words) {
                *w = snap.relocate(v, start);
            }
            for (i, edit) in &s.edits {
                let w = &mut words[*i as usize % len];
                *w = match edit {
                    Edit::Set(v) => value(*v),
                    Edit::Flip(bit) => *w ^ (1 << bit),
                };
            }
            regs = Registers { pc: snap.pc, sp: start, fp: snap.relocate(snap.fp, start), lr: 0 };
            truncated = snap.truncated || len < snap.words.len();
        }
    }
    if let Some((pc, sp, fp)) = c.regs {
        regs = Registers { pc: value(pc), sp: value(sp), fp: value(fp), lr: 0 };
    }
    let tail: Vec<TailRecord> =
        tail_at.iter().zip(&c.tail).map(|(&a, &(_, fp, ra))| [a, value(fp), value(ra), 0, 0, 0, 0]).collect();
    Layout { memory, first, len, truncated: c.truncated.unwrap_or(truncated), tail, regs }
}

// ---------------------------------------------------------------------
// Properties

/// How unwinds ended, to show the generators reach the endings.
#[derive(Default, Debug)]
struct Ends {
    counts: [u32; StackEnd::ALL.len()],
    deepest: usize,
}

impl Ends {
    fn add(&mut self, end: StackEnd, depth: usize) {
        self.counts[StackEnd::ALL.iter().position(|&e| e == end).unwrap()] += 1;
        self.deepest = self.deepest.max(depth);
    }
    fn count(&self, end: StackEnd) -> u32 {
        self.counts[StackEnd::ALL.iter().position(|&e| e == end).unwrap()]
    }
    fn report(&self, name: &str, n: u32) {
        let ends: Vec<String> =
            StackEnd::ALL.iter().zip(self.counts).filter(|(_, n)| *n > 0).map(|(e, n)| format!("{n} {e:?}")).collect();
        eprintln!("{name}: {n} cases; ends: {}; deepest {}", ends.join(", "), self.deepest);
    }
}

/// Checks one unwind of `copy` from `regs`. `slots`: also check that the
/// return addresses were read from the copy at rising slots, which holds
/// for unwind information whose return address is at CFA-8 (all real
/// x86_64 CFI), but not for garbage CFI.
fn check_unwind(
    u: &Unwinder,
    regs: Registers,
    copy: &StackCopy<'_>,
    max_depth: usize,
    end: StackEnd,
    out: &Unwound,
    slots: bool,
) -> Result<(), TestCaseError> {
    let frames = &out.frames;
    prop_assert_eq!(frames.len(), out.fps.len());
    prop_assert!(frames.len() <= max_depth, "{} frames, max_depth {max_depth}", frames.len());
    if regs.pc == 0 {
        prop_assert_eq!(end, StackEnd::NoPc);
        prop_assert!(frames.is_empty());
        return Ok(());
    }
    prop_assert_eq!(frames.first(), Some(&regs.pc));
    match end {
        StackEnd::DepthLimit => prop_assert_eq!(frames.len(), max_depth),
        StackEnd::TruncatedCopy => prop_assert!(copy.truncated, "TruncatedCopy from a whole copy"),
        StackEnd::NoPc | StackEnd::CopyFailed => prop_assert!(false, "{end:?} from a copy with a pc"),
        _ => {}
    }
    for (i, &f) in frames.iter().enumerate().skip(1) {
        prop_assert!(f != 0, "frame {i} is zero");
        prop_assert!(u.code().is_executable(f - 1), "frame {i} {f:#x} is not in executable code: {frames:x?}");
    }
    if slots {
        // The words the copy answers for, by address.
        let mut readable: Vec<(u64, u64)> =
            copy.words.iter().enumerate().map(|(i, &w)| (copy.start + 8 * i as u64, w)).collect();
        readable.extend(copy.tail.iter().flat_map(|r| [(r[0], r[1]), (r[0] + 8, r[2])]));
        let mut next = 0;
        for (i, &f) in frames.iter().enumerate().skip(1) {
            match readable[next..].iter().position(|&(_, w)| w == f) {
                Some(k) => next += k + 1,
                None => prop_assert!(
                    false,
                    "frame {i} {f:#x} was not read from the copy above the previous frame's slot \
                     (the stack pointer did not rise, or a read went outside the copy): {frames:x?}"
                ),
            }
        }
    }
    Ok(())
}

fn check_real(c: &Case, ends: &mut Ends) -> Result<(), TestCaseError> {
    MEMORY.with(|m| {
        UNWINDER.with(|u| {
            let mut m = m.borrow_mut();
            let g = m.get_or_insert_with(Guarded::new);
            let mut u = u.borrow_mut();
            let u = u.get_or_insert_with(real_unwinder);
            let layout = layout(g, c);
            let area = g.load(&layout.memory);
            let copy = layout.copy(area);
            let mut out = Unwound::default();
            let end = u.unwind(layout.regs, &copy, c.max_depth, &mut out);
            ends.add(end, out.frames.len());
            check_unwind(u, layout.regs, &copy, c.max_depth, end, &out, true)
        })
    })
}

fn run<C: std::fmt::Debug>(
    name: &str,
    strategy: impl Strategy<Value = C>,
    n: u32,
    check: impl Fn(&C, &mut Ends) -> Result<(), TestCaseError>,
) -> Ends {
    run_with(name, strategy, n, None, check)
}

/// `run` on the same cases every time (proptest's fixed seed), for counts
/// that random cases reach only most of the time.
fn run_seeded<C: std::fmt::Debug>(
    name: &str,
    strategy: impl Strategy<Value = C>,
    n: u32,
    check: impl Fn(&C, &mut Ends) -> Result<(), TestCaseError>,
) -> Ends {
    run_with(name, strategy, n, Some(TestRng::deterministic_rng(RngAlgorithm::ChaCha)), check)
}

fn run_with<C: std::fmt::Debug>(
    name: &str,
    strategy: impl Strategy<Value = C>,
    n: u32,
    rng: Option<TestRng>,
    check: impl Fn(&C, &mut Ends) -> Result<(), TestCaseError>,
) -> Ends {
    let ends = RefCell::new(Ends::default());
    let config = Config { cases: n, failure_persistence: None, ..Config::default() };
    let mut runner = match rng {
        Some(rng) => TestRunner::new_with_rng(config, rng),
        None => TestRunner::new(config),
    };
    if let Err(e) = runner.run(&strategy, |c| check(&c, &mut ends.borrow_mut())) {
        panic!("{name}: {e}");
    }
    let ends = ends.into_inner();
    ends.report(name, n);
    ends
}

#[test]
fn random_copies_with_real_modules() {
    let ends = run("random copies", random_case(), cases(300), check_real);
    assert!(ends.count(StackEnd::NotExecutable) > 0, "{ends:?}");
}

#[test]
fn frame_chains_and_cycles_with_real_modules() {
    let ends = run("frame chains", chain_case(), cases(300), check_real);
    assert!(ends.deepest > 20, "chains are followed: {ends:?}");
}

#[test]
fn mutated_real_stacks_with_real_modules() {
    let ends = run("mutated real stacks", snapshot_case(), cases(300), check_real);
    assert!(ends.count(StackEnd::Root) + ends.count(StackEnd::TruncatedCopy) > 0, "{ends:?}");
}

// ---------------------------------------------------------------------
// Mutated unwind information

/// Where in this binary's unwind information a mutation lands. `rec`
/// picks one of the snapshot's frames, so the bytes changed are the ones
/// its unwind reads.
#[derive(Clone, Copy, Debug)]
enum Spot {
    /// The `.eh_frame_hdr` header: version, encodings, pointer, count.
    HdrHead(u8),
    /// A byte of a table entry near a frame's.
    Entry {
        rec: u8,
        delta: i8,
        byte: u8,
    },
    Fde {
        rec: u8,
        pos: u16,
    },
    Cie {
        rec: u8,
        pos: u16,
    },
    Anywhere {
        hdr: bool,
        pos: u32,
    },
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Flip(u8),
    Set(u8),
}

#[derive(Clone, Debug)]
enum Cfi {
    /// The real sections with these edits, optionally cut to a length.
    Mutated { edits: Vec<(Spot, Op)>, cut: Option<(bool, u32)> },
    /// Random bytes; `head`: behind a valid `.eh_frame_hdr` header.
    Garbage { head: bool, hdr: Vec<u8>, frame: Vec<u8> },
}

fn spot() -> impl Strategy<Value = Spot> {
    prop_oneof![
        1 => (0u8..12).prop_map(Spot::HdrHead),
        3 => (any::<u8>(), -4i8..4, 0u8..8).prop_map(|(rec, delta, byte)| Spot::Entry { rec, delta, byte }),
        4 => (any::<u8>(), 0u16..64).prop_map(|(rec, pos)| Spot::Fde { rec, pos }),
        3 => (any::<u8>(), 0u16..32).prop_map(|(rec, pos)| Spot::Cie { rec, pos }),
        1 => (any::<bool>(), any::<u32>()).prop_map(|(hdr, pos)| Spot::Anywhere { hdr, pos }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![2 => (0u8..8).prop_map(Op::Flip), 1 => any::<u8>().prop_map(Op::Set)]
}

fn cfi_case() -> impl Strategy<Value = (Cfi, SnapCase, usize)> {
    let mutated = (
        prop::collection::vec((spot(), op()), 1..8),
        prop_oneof![4 => Just(None), 1 => (any::<bool>(), any::<u32>()).prop_map(Some)],
    )
        .prop_map(|(edits, cut)| Cfi::Mutated { edits, cut });
    let garbage =
        (any::<bool>(), prop::collection::vec(any::<u8>(), 0..128), prop::collection::vec(any::<u8>(), 0..512))
            .prop_map(|(head, hdr, frame)| Cfi::Garbage { head, hdr, frame });
    let snap = prop_oneof![
        4 => Just(SnapCase { cut: None, edits: vec![] }),
        1 => snap_case(),
    ];
    (prop_oneof![5 => mutated, 1 => garbage], snap, max_depth())
}

/// This binary's sections, edited as `cfi` says.
fn edited_sections(cfi: &Cfi) -> (Vec<u8>, Vec<u8>) {
    let own = &env().cfi;
    match cfi {
        Cfi::Mutated { edits, cut } => {
            let (mut hdr, mut frame) = (own.hdr.to_vec(), own.frame.to_vec());
            for &(spot, op) in edits {
                let rec = |r: u8| &own.records[r as usize % own.records.len()];
                let (bytes, at) = match spot {
                    Spot::HdrHead(i) => (&mut hdr, i as usize),
                    Spot::Entry { rec: r, delta, byte } => {
                        (&mut hdr, (rec(r).0 as isize + 8 * delta as isize).max(12) as usize + byte as usize)
                    }
                    Spot::Fde { rec: r, pos } => (&mut frame, rec(r).1.start + pos as usize % rec(r).1.len()),
                    Spot::Cie { rec: r, pos } => (&mut frame, rec(r).2.start + pos as usize % rec(r).2.len()),
                    Spot::Anywhere { hdr: true, pos } => (&mut hdr, pos as usize),
                    Spot::Anywhere { hdr: false, pos } => (&mut frame, pos as usize),
                };
                let at = at % bytes.len();
                match op {
                    Op::Flip(bit) => bytes[at] ^= 1 << bit,
                    Op::Set(v) => bytes[at] = v,
                }
            }
            match cut {
                Some((true, n)) => hdr.truncate(*n as usize % (hdr.len() + 1)),
                Some((false, n)) => frame.truncate(*n as usize % (frame.len() + 1)),
                None => {}
            }
            (hdr, frame)
        }
        Cfi::Garbage { head, hdr, frame } => {
            let mut h = if *head { own.hdr[..12].to_vec() } else { vec![] };
            h.extend_from_slice(hdr);
            (h, frame.clone())
        }
    }
}

/// Unwinds the snapshot (edited as `snap` says, between guard pages) with
/// this binary's unwind information replaced by `hdr` and `frame`, and the
/// other modules as they are.
fn unwind_with_own_cfi(
    hdr: &[u8],
    frame: &[u8],
    snap: &SnapCase,
    max_depth: usize,
    check: impl FnOnce(&Unwinder, Registers, &StackCopy<'_>, StackEnd, &Unwound) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let own = &env().cfi;
    // SAFETY: the unwinder that holds these slices is a local of this
    // function, dropped before it returns, while `hdr` and `frame` are
    // borrowed for the whole call: the bytes outlive every use.
    let (hdr_s, frame_s): (&'static [u8], &'static [u8]) = unsafe {
        (std::slice::from_raw_parts(hdr.as_ptr(), hdr.len()), std::slice::from_raw_parts(frame.as_ptr(), frame.len()))
    };
    let mut u = Unwinder::default();
    for mut m in loaded_code(|_| false) {
        if m.text == own.text {
            m.sections = ExplicitModuleSectionInfo {
                base_svma: 0,
                eh_frame_hdr_svma: Some(own.hdr_svma..own.hdr_svma + hdr.len() as u64),
                eh_frame_hdr: Some(hdr_s),
                eh_frame_svma: Some(own.frame_svma..own.frame_svma + frame.len() as u64),
                eh_frame: Some(frame_s),
                ..Default::default()
            };
            assert_eq!(m.base_avma, own.bias);
        }
        u.add_module(m);
    }
    let case =
        Case { base: Base::Snapshot(snap.clone()), pad: 40, truncated: None, tail: vec![], regs: None, max_depth };
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        let g = m.get_or_insert_with(Guarded::new);
        let layout = layout(g, &case);
        let area = g.load(&layout.memory);
        let copy = layout.copy(area);
        let mut out = Unwound::default();
        let end = u.unwind(layout.regs, &copy, max_depth, &mut out);
        check(&u, layout.regs, &copy, end, &out)
    })
}

#[test]
fn a_copy_of_own_unwind_information_unwinds_like_the_original() {
    // What the mutations below start from: the copied sections are the
    // ones the unwinder uses, and they work.
    let own = &env().cfi;
    assert!(own.records.iter().all(|(_, fde, cie)| cie.end <= fde.start), "each FDE follows its CIE");
    let none = SnapCase { cut: None, edits: vec![] };
    unwind_with_own_cfi(own.hdr, own.frame, &none, 1024, |_, _, _, end, out| {
        prop_assert_eq!((end, &out.frames), (env().end, &env().frames));
        Ok(())
    })
    .unwrap();
    // And with no unwind information, the same stack does not get there.
    unwind_with_own_cfi(&[], &[], &none, 1024, |_, _, _, _, out| {
        prop_assert_ne!(&out.frames, &env().frames);
        Ok(())
    })
    .unwrap();
}

#[test]
fn mutated_and_garbage_unwind_information() {
    let check = |(cfi, snap, max_depth): &(Cfi, SnapCase, usize), ends: &mut Ends| {
        let (hdr, frame) = edited_sections(cfi);
        unwind_with_own_cfi(&hdr, &frame, snap, *max_depth, |u, regs, copy, end, out| {
            ends.add(end, out.frames.len());
            check_unwind(u, regs, copy, *max_depth, end, out, false)
        })
    };
    run("mutated CFI", cfi_case(), cases(150), check);
    // The mutations must matter: some stacks end short of the root (a table
    // found corrupt drops the module's CFI; the frame-pointer fallback may
    // then still reach the root, or land on garbage). Random cases end
    // short only a few times in 150 (none in about 1 run of 12), so this
    // is counted on fixed ones.
    let ends = run_seeded("mutated CFI, fixed cases", cfi_case(), 600, check);
    let short = [StackEnd::BadCfa, StackEnd::NoUnwindInfo, StackEnd::NotExecutable];
    assert!(short.iter().map(|&e| ends.count(e)).sum::<u32>() > 0, "{ends:?}");
}

// ---------------------------------------------------------------------
// CFA expressions: `DW_OP_breg7 rsp+N; DW_OP_deref; DW_OP_plus_uconst 8`

/// A function whose CFA is the expression, and its caller, whose return
/// address is undefined (the thread's root). Fake addresses: the unwinder
/// reads only unwind information, never code.
const FN_EXPR: Range<u64> = 0x10_1000..0x10_1100;
const FN_ROOT: Range<u64> = 0x10_2000..0x10_2100;
const SYNTH_TEXT: Range<u64> = 0x10_0000..0x10_3000;
const HDR_SVMA: u64 = 0x20_0000;
const FRAME_SVMA: u64 = 0x20_1000;

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        out.push(if v == 0 { b } else { b | 0x80 });
        if v == 0 {
            return;
        }
    }
}

fn sleb(out: &mut Vec<u8>, mut v: i64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0);
        out.push(if done { b } else { b | 0x80 });
        if done {
            return;
        }
    }
}

/// Appends a CIE or FDE record with this body (after the length),
/// padded with DW_CFA_nop to a multiple of 8 bytes.
fn record(frame: &mut Vec<u8>, mut body: Vec<u8>) -> usize {
    while !(4 + body.len()).is_multiple_of(8) {
        body.push(0);
    }
    let at = frame.len();
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    at
}

/// `.eh_frame_hdr` and `.eh_frame` for FN_EXPR (CFA = `[rsp + n] + 8`,
/// return address at CFA-8) and FN_ROOT (return address undefined).
fn expression_cfi(n: i64) -> (Vec<u8>, Vec<u8>) {
    let mut frame = Vec::new();
    // CIE: id 0, version 1, "zR", code align 1, data align -8, RA r16,
    // FDE addresses as absolute udata8; CFA = rsp+8, RA at CFA-8.
    let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1];
    sleb(&mut cie, -8);
    cie.extend_from_slice(&[16, 1, 0x04, 0x0c, 7, 8, 0x90, 1]);
    let cie_at = record(&mut frame, cie);
    let fde = |frame: &Vec<u8>, f: &Range<u64>, cfa: &[u8]| {
        let mut body = (frame.len() + 4 - cie_at).to_le_bytes()[..4].to_vec();
        body.extend_from_slice(&f.start.to_le_bytes());
        body.extend_from_slice(&(f.end - f.start).to_le_bytes());
        body.push(0);
        body.extend_from_slice(cfa);
        body
    };
    let mut expr = vec![0x77];
    sleb(&mut expr, n);
    expr.extend_from_slice(&[0x06, 0x23, 8]);
    let mut cfa = vec![0x0f];
    uleb(&mut cfa, expr.len() as u64);
    cfa.extend_from_slice(&expr);
    let body = fde(&frame, &FN_EXPR, &cfa);
    let expr_at = record(&mut frame, body);
    // DW_CFA_undefined r16
    let body = fde(&frame, &FN_ROOT, &[0x07, 16]);
    let root_at = record(&mut frame, body);
    frame.extend_from_slice(&[0, 0, 0, 0]);

    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
    hdr.extend_from_slice(&((FRAME_SVMA - (HDR_SVMA + 4)) as i32).to_le_bytes());
    hdr.extend_from_slice(&2u32.to_le_bytes());
    for (f, at) in [(&FN_EXPR, expr_at), (&FN_ROOT, root_at)] {
        hdr.extend_from_slice(&(f.start.wrapping_sub(HDR_SVMA) as i32).to_le_bytes());
        hdr.extend_from_slice(&((FRAME_SVMA + at as u64 - HDR_SVMA) as i32).to_le_bytes());
    }
    (hdr, frame)
}

fn expression_unwinder(n: i64) -> Unwinder {
    let (hdr, frame) = expression_cfi(n);
    // Small, and the unwinder wants bytes that outlive it.
    let (hdr, frame): (&'static [u8], &'static [u8]) = (hdr.leak(), frame.leak());
    let mut u = Unwinder::default();
    u.add_module(CodeModule {
        name: "synthetic".into(),
        text: SYNTH_TEXT,
        base_avma: 0,
        sections: ExplicitModuleSectionInfo {
            base_svma: 0,
            eh_frame_hdr_svma: Some(HDR_SVMA..HDR_SVMA + hdr.len() as u64),
            eh_frame_hdr: Some(hdr),
            eh_frame_svma: Some(FRAME_SVMA..FRAME_SVMA + frame.len() as u64),
            eh_frame: Some(frame),
            ..Default::default()
        },
        pin: None,
    });
    u
}

const EXPR_COPY_START: u64 = 0x7ff0_0000_1000;
const PC_EXPR: u64 = FN_EXPR.start + 0x20;
/// Return addresses into each function (after a call).
const RA_EXPR: u64 = FN_EXPR.start + 0x31;
const RA_ROOT: u64 = FN_ROOT.start + 0x41;

fn expression_unwind(n: i64, words: &[u64], sp: u64, max_depth: usize, truncated: bool) -> (StackEnd, Unwound) {
    let mut u = expression_unwinder(n);
    let copy = StackCopy { start: EXPR_COPY_START, words, truncated, tail: &[], holes: &[] };
    let mut out = Unwound::default();
    let regs = Registers { pc: PC_EXPR, sp, fp: 0x1234_5678, lr: 0 };
    let end = u.unwind(regs, &copy, max_depth, &mut out);
    (end, out)
}

#[test]
fn cfa_expression_steps_to_a_known_return_address() {
    let word = |i: u64| EXPR_COPY_START + 8 * i;
    // OpenSSL's N: the realigned function saved the caller's rsp at rsp+152.
    let mut words = vec![0u64; 64];
    words[152 / 8] = word(40); // the caller's sp - 8
    words[40] = RA_ROOT;
    let (end, out) = expression_unwind(152, &words, word(0), 16, false);
    assert_eq!((end, &out.frames[..]), (StackEnd::Root, &[PC_EXPR, RA_ROOT][..]));
    assert_eq!(out.fps, [0x1234_5678; 2], "the expression's frame keeps the frame pointer");

    // Twice through the expression, the stack rising, then the root.
    words[40] = RA_EXPR;
    words[41 + 152 / 8] = word(50);
    words[50] = RA_ROOT;
    let (end, out) = expression_unwind(152, &words, word(0), 16, false);
    assert_eq!((end, &out.frames[..]), (StackEnd::Root, &[PC_EXPR, RA_EXPR, RA_ROOT][..]));

    // The saved sp points back down the stack: the second step would lower it.
    words[41 + 152 / 8] = word(10);
    words[10] = RA_ROOT;
    let (end, out) = expression_unwind(152, &words, word(0), 16, false);
    assert_eq!((end, &out.frames[..]), (StackEnd::BadCfa, &[PC_EXPR, RA_EXPR][..]));
}

#[test]
fn cfa_expression_pointing_outside_the_copy_fails_cleanly() {
    let word = |i: u64| EXPR_COPY_START + 8 * i;
    let end_of_copy = word(64);
    for (saved_sp, why) in [
        (end_of_copy, "just above the copy"),
        (end_of_copy + 0x1000, "far above the copy"),
        (EXPR_COPY_START - 8, "below the copy"),
        (word(8) + 4, "misaligned"),
        (u64::MAX - 3, "wrapping"),
        (0, "null"),
    ] {
        for truncated in [false, true] {
            let mut words = vec![RA_ROOT; 64];
            words[152 / 8] = saved_sp;
            let (end, out) = expression_unwind(152, &words, word(0), 16, truncated);
            assert_eq!((end, &out.frames[..]), (StackEnd::BadCfa, &[PC_EXPR][..]), "{why}");
        }
    }
    // The saved sp itself beyond the copy: rsp+N outside it.
    let words = vec![word(2); 16];
    let (end, out) = expression_unwind(152, &words, word(0), 16, false);
    assert_eq!((end, &out.frames[..]), (StackEnd::BadCfa, &[PC_EXPR][..]));
}

/// The expression step written out on its own, over the copy's words.
fn expression_model(n: i64, words: &[u64], sp: u64, max_depth: usize) -> (StackEnd, Vec<u64>) {
    let read = |a: u64| -> Option<u64> {
        let off = a.checked_sub(EXPR_COPY_START)?;
        if !a.is_multiple_of(8) {
            return None;
        }
        words.get((off / 8) as usize).copied()
    };
    let mut frames = vec![PC_EXPR];
    let (mut sp, mut lookup, mut first) = (sp, PC_EXPR, true);
    loop {
        if frames.len() >= max_depth {
            return (StackEnd::DepthLimit, frames);
        }
        if FN_ROOT.contains(&lookup) {
            return (StackEnd::Root, frames);
        }
        assert!(FN_EXPR.contains(&lookup));
        let Some(saved) = read(sp.wrapping_add(n as u64)) else { return (StackEnd::BadCfa, frames) };
        let cfa = saved.wrapping_add(8);
        let Some(ra) = cfa.checked_sub(8).and_then(read) else { return (StackEnd::BadCfa, frames) };
        if ra == 0 {
            return (StackEnd::Root, frames);
        }
        if !first && cfa <= sp {
            return (StackEnd::BadCfa, frames);
        }
        if !SYNTH_TEXT.contains(&(ra - 1)) {
            return (StackEnd::NotExecutable, frames);
        }
        frames.push(ra);
        (sp, lookup, first) = (cfa, ra - 1, false);
    }
}

#[derive(Clone, Copy, Debug)]
enum ExprWord {
    /// Word `i` of the copy (may be outside it), plus `misalign` bytes.
    Ptr(i8, u8),
    Ra(u8),
    Any(u64),
}

#[test]
fn cfa_expression_steps_match_the_model() {
    let expr_word = prop_oneof![
        4 => (-4i8..40, prop_oneof![6 => Just(0u8), 1 => 1u8..8]).prop_map(|(i, m)| ExprWord::Ptr(i, m)),
        3 => (0u8..4).prop_map(ExprWord::Ra),
        1 => any::<u64>().prop_map(ExprWord::Any),
    ];
    let strategy = (
        prop::collection::vec(expr_word, 1..36),
        prop_oneof![4 => (0i64..40).prop_map(|k| 8 * k), 1 => -64i64..320],
        0u64..4,
        1usize..12,
        any::<bool>(),
    );
    run("CFA expressions", strategy, cases(300), |(spec, n, sp, max_depth, truncated), ends| {
        let words: Vec<u64> = spec
            .iter()
            .map(|w| match *w {
                ExprWord::Ptr(i, m) => EXPR_COPY_START.wrapping_add((8 * i as i64) as u64) + m as u64,
                ExprWord::Ra(k) => [RA_EXPR, RA_ROOT, 0, 0xdead_beef][k as usize],
                ExprWord::Any(v) => v,
            })
            .collect();
        let sp = EXPR_COPY_START + 8 * sp;
        let (end, out) = expression_unwind(*n, &words, sp, *max_depth, *truncated);
        ends.add(end, out.frames.len());
        let (want_end, want) = expression_model(*n, &words, sp, *max_depth);
        prop_assert_eq!((end, &out.frames), (want_end, &want));
        Ok(())
    });
}
