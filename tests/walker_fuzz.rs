//! Fuzzing `walk_stack` (issue 7, scenario 8).
//!
//! The walker runs inside a signal handler on a stopped thread, on stack
//! memory full of whatever the thread left there, so it must never read
//! outside the bounds it is given, must always terminate, and must never
//! panic. Here it walks random stacks held in memory surrounded by
//! `PROT_NONE` guard pages:
//!
//! - the readable pages are exactly the pages the bounds touch, mapped
//!   read-only, so a read outside them (or any write) kills the test with
//!   SIGSEGV;
//! - inside those pages, the bytes outside `[lo, hi)` hold unique poison
//!   values, so a read outside the bounds but inside a page shows up as a
//!   poison return address in the output;
//! - a reference model written from the walker's documented contract reads
//!   memory through an accessor that asserts every read is in bounds; the
//!   walker's result must equal the model's, frame for frame;
//! - depth never exceeds `min(max_depth, out.len(), (hi - lo) / 16 + 1)`
//!   and nothing is written past it;
//! - `walk_stack_visit` with the signal handler's own visitor
//!   (`v8::slots::read`, the V8 frame words below each frame pointer) gives
//!   the same walk, visits each recorded frame once with the right frame
//!   pointer, and reads nothing outside the bounds either.
//!
//! The number of cases comes from `PROPTEST_CASES` (default 3000 per
//! property, which `cargo test` runs in seconds); `npm run stress` runs
//! hundreds of thousands. Arithmetic overflow checks are on in the debug
//! build `cargo test` uses, so an overflow is a panic, and a failure.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use machsampler::sampler::walker::{
    strip_pointer_tag, validate_frame_pointer, walk_stack, walk_stack_visit, Registers, StackBounds, Walk, WalkEnd,
    ADDRESS_MASK,
};
use machsampler::v8::slots;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const PAGE: usize = 4096;
/// Readable pages available for one stack (the bounds use a sub-range).
const PAGES: usize = 6;
const WORDS: usize = PAGES * PAGE / 8;
/// Poison: what lies in readable memory outside the bounds. Never produced
/// by the generators, so seeing it in the output means an out-of-bounds read.
const POISON: u64 = 0x0000_dead_0000_0000;
/// Output slots are pre-filled with this, to check nothing is written past `depth`.
const SENTINEL: u64 = 0x5e47_1e15_e471_e1e1;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `PAGES` pages with a `PROT_NONE` guard page on each side.
struct Guarded {
    base: *mut u8,
}

impl Guarded {
    fn new() -> Self {
        // SAFETY: an anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                (PAGES + 2) * PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap failed");
        Guarded { base: base.cast() }
    }

    /// Address of word `i` of the usable area.
    fn addr(&self, i: usize) -> u64 {
        self.base as u64 + PAGE as u64 + (i as u64) * 8
    }

    fn protect(&self, first_page: usize, pages: usize, prot: libc::c_int) {
        if pages == 0 {
            return;
        }
        // SAFETY: the range lies inside our own mapping.
        let rc = unsafe { libc::mprotect(self.base.add((1 + first_page) * PAGE).cast(), pages * PAGE, prot) };
        assert_eq!(rc, 0, "mprotect failed");
    }

    /// Writes `words` into the usable area, then leaves only pages
    /// `[first, first + count)` readable (read-only) and the rest PROT_NONE.
    fn load(&self, words: &[u64], first: usize, count: usize) {
        self.protect(0, PAGES, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the usable area is WORDS words, now writable, and
        // `words.len() == WORDS`.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), self.base.add(PAGE).cast::<u64>(), WORDS) };
        self.protect(0, PAGES, libc::PROT_NONE);
        self.protect(first, count, libc::PROT_READ);
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), (PAGES + 2) * PAGE) };
    }
}

thread_local! {
    static MEMORY: RefCell<Option<Guarded>> = const { RefCell::new(None) };
}

/// What a word of the fake stack holds, relative to the region (its real
/// address is only known at run time).
#[derive(Clone, Copy, Debug)]
enum Word {
    Zero,
    /// A return-address-like value.
    Code(u64),
    /// A pointer to word `index` of the region, plus `misalign` bytes, with
    /// `tag` in the top 16 bits (pointer authentication, tagging).
    Ptr {
        index: u16,
        misalign: u8,
        tag: u16,
    },
    /// A pointer `delta` bytes from the low or high end of the bounds.
    NearEdge {
        high: bool,
        delta: i16,
    },
    Any(u64),
}

fn word() -> impl Strategy<Value = Word> {
    prop_oneof![
        2 => Just(Word::Zero),
        3 => (1u64..0x7fff_ffff_ffff).prop_map(Word::Code),
        5 => (0u16..WORDS as u16, prop_oneof![8 => Just(0u8), 1 => 1u8..8], prop_oneof![8 => Just(0u16), 1 => any::<u16>()])
            .prop_map(|(index, misalign, tag)| Word::Ptr { index, misalign, tag }),
        1 => (any::<bool>(), -64i16..64).prop_map(|(high, delta)| Word::NearEdge { high, delta }),
        1 => any::<u64>().prop_map(Word::Any),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    /// Bounds as byte offsets into the usable area: [lo, hi).
    lo: usize,
    hi: usize,
    /// Explicit words, written from word `at`; the rest comes from `fill`.
    words: Vec<Word>,
    at: usize,
    fill: u64,
    pc: Word,
    sp: Word,
    fp: Word,
    max_depth: usize,
    out_len: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let bounds = (0usize..PAGES * PAGE, 0usize..PAGES * PAGE, 0u8..4).prop_map(|(a, b, align)| {
        let (mut lo, mut hi) = if a <= b { (a, b) } else { (b, a) };
        // Mostly 8-aligned bounds, sometimes page-aligned, sometimes odd.
        match align {
            0 | 1 => {
                lo &= !7;
                hi &= !7;
            }
            2 => {
                lo &= !(PAGE - 1);
                hi = (hi + PAGE - 1) & !(PAGE - 1);
            }
            _ => {}
        }
        (lo, hi.min(PAGES * PAGE))
    });
    (
        bounds,
        prop::collection::vec(word(), 0..160),
        0usize..WORDS,
        any::<u64>(),
        prop_oneof![1 => Just(Word::Zero), 4 => (1u64..0x7fff_ffff_ffff).prop_map(Word::Code), 2 => word()],
        word(),
        word(),
        prop_oneof![4 => 0usize..40, 2 => 0usize..1100, 1 => Just(usize::MAX)],
        prop_oneof![4 => 0usize..64, 1 => 0usize..1100],
    )
        .prop_map(|((lo, hi), words, at, fill, pc, sp, fp, max_depth, out_len)| Case {
            lo,
            hi,
            words,
            at,
            fill,
            pc,
            sp,
            fp,
            max_depth,
            out_len,
        })
}

/// A structured case: a real-looking chain of frame records, then a few
/// corruptions. Reaches deep walks, truncation and clean ends often.
fn chain_case() -> impl Strategy<Value = Case> {
    (
        1usize..200,
        prop::collection::vec((0usize..200, word()), 0..6),
        0usize..4,
        prop_oneof![2 => 1usize..300, 1 => 1usize..1100],
        0usize..1100,
        any::<bool>(),
    )
        .prop_map(|(frames, corruptions, gap, max_depth, out_len, zero_end)| {
            // Records at increasing word indices with gaps of 2 + gap words.
            let stride = 2 + gap;
            let mut words = vec![Word::Zero; frames * stride + 4];
            for f in 0..frames {
                let at = 2 + f * stride;
                let next = if f + 1 < frames {
                    Word::Ptr { index: (2 + (f + 1) * stride) as u16, misalign: 0, tag: 0 }
                } else if zero_end {
                    Word::Zero
                } else {
                    Word::Code(0x1234)
                };
                words[at] = next;
                words[at + 1] = Word::Code(0x40_0000 + f as u64);
            }
            let len = words.len();
            for (i, w) in corruptions {
                words[i % len] = w;
            }
            Case {
                lo: 0,
                hi: (len * 8).min(PAGES * PAGE),
                words,
                at: 0,
                fill: 0,
                pc: Word::Code(0xabc),
                sp: Word::Ptr { index: 0, misalign: 0, tag: 0 },
                fp: Word::Ptr { index: 2, misalign: 0, tag: 0 },
                max_depth,
                out_len,
            }
        })
}

struct Realized {
    memory: Vec<u64>,
    bounds: StackBounds,
    regs: Registers,
}

fn realize(g: &Guarded, c: &Case) -> Realized {
    let lo = g.addr(0) + c.lo as u64;
    let hi = g.addr(0) + c.hi as u64;
    let value = |w: Word| -> u64 {
        match w {
            Word::Zero => 0,
            Word::Code(v) => v,
            Word::Ptr { index, misalign, tag } => {
                (g.addr(index as usize % WORDS) + misalign as u64) | ((tag as u64) << 48)
            }
            Word::NearEdge { high, delta } => {
                let edge = if high { hi } else { lo };
                edge.wrapping_add(delta as i64 as u64)
            }
            Word::Any(v) => v,
        }
    };
    // The fill: a cheap deterministic mix of the same kinds of word.
    let mut s = c.fill | 1;
    let mut memory: Vec<u64> = (0..WORDS)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match s % 8 {
                0 | 1 => 0,
                2 | 3 => g.addr((i + 2 + (s >> 8) as usize % 64) % WORDS),
                4 => g.addr((s >> 8) as usize % WORDS),
                5 => 0x40_0000 + (s >> 40),
                6 => s >> 16,
                _ => s,
            }
        })
        .collect();
    for (k, w) in c.words.iter().enumerate() {
        let i = c.at + k;
        if i < WORDS {
            memory[i] = value(*w);
        }
    }
    // Poison every readable byte outside the bounds (whole words; a word
    // that straddles a bound keeps its value: no aligned 16-byte record
    // can use it without also reaching outside the bounds).
    for (i, m) in memory.iter_mut().enumerate() {
        let a = g.addr(i);
        if a + 8 <= lo || a >= hi {
            *m = POISON | i as u64;
        }
    }
    Realized {
        memory,
        bounds: StackBounds::new(lo, hi),
        regs: Registers { pc: value(c.pc), sp: value(c.sp), fp: value(c.fp), lr: 0 },
    }
}

/// The walker's contract, written out on its own. `read` asserts that
/// every address it is asked for lies inside the bounds. Also returns, for
/// each recorded frame, the frame pointer of the function it is in (what
/// `walk_stack_visit` passes to its visitor).
fn model(
    regs: &Registers,
    b: StackBounds,
    max_depth: usize,
    out_len: usize,
    read: &dyn Fn(u64) -> u64,
) -> (Walk, Vec<u64>, Vec<u64>) {
    let limit = max_depth.min(out_len);
    let pc = regs.pc & ADDRESS_MASK;
    if pc == 0 {
        return (Walk { depth: 0, end: WalkEnd::NoPc }, vec![], vec![]);
    }
    if limit == 0 {
        return (Walk { depth: 0, end: WalkEnd::Truncated }, vec![], vec![]);
    }
    let mut frames = vec![pc];
    let mut fps = vec![regs.fp & ADDRESS_MASK];
    let sp = regs.sp & ADDRESS_MASK;
    // No frame record lies below the stack pointer.
    let mut lo = if sp > b.lo && sp < b.hi { sp } else { b.lo };
    let mut fp = regs.fp & ADDRESS_MASK;
    loop {
        let end = |frames: Vec<u64>, fps: Vec<u64>, end| (Walk { depth: frames.len(), end }, frames, fps);
        if fp == 0 {
            return end(frames, fps, WalkEnd::Complete);
        }
        // A record: 8-aligned, at or above lo, ending at or below hi.
        if fp < lo || !fp.is_multiple_of(8) || (fp as u128) + 16 > b.hi as u128 {
            return end(frames, fps, WalkEnd::BadFramePointer);
        }
        let next = read(fp) & ADDRESS_MASK;
        let ret = read(fp + 8) & ADDRESS_MASK;
        if ret == 0 {
            return end(frames, fps, WalkEnd::Complete);
        }
        if frames.len() >= limit {
            return end(frames, fps, WalkEnd::Truncated);
        }
        frames.push(ret);
        // The return address is in the caller, whose frame is `next`.
        fps.push(next);
        if next == 0 {
            return end(frames, fps, WalkEnd::Complete);
        }
        // The caller's record lies strictly above this one.
        lo = fp + 16;
        if next < lo {
            return end(frames, fps, WalkEnd::BadFramePointer);
        }
        fp = next;
    }
}

/// Counts of how walks ended, to show the generators reach every ending.
#[derive(Default)]
struct Ends {
    complete: AtomicU64,
    truncated: AtomicU64,
    bad: AtomicU64,
    no_pc: AtomicU64,
    deepest: AtomicU64,
}

fn check(c: &Case, ends: &Ends) -> Result<(), TestCaseError> {
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        let g = m.get_or_insert_with(Guarded::new);
        let r = realize(g, c);
        // Readable: exactly the pages the bounds touch.
        let first = c.lo / PAGE;
        let last = if c.hi > c.lo { c.hi.div_ceil(PAGE) } else { first };
        g.load(&r.memory, first, last - first);

        let mut out = vec![SENTINEL; c.out_len];
        let walk = walk_stack(&r.regs, r.bounds, c.max_depth, &mut out);

        let (lo, hi) = (r.bounds.lo, r.bounds.hi);
        let cap = c.max_depth.min(c.out_len);
        let span_cap = if hi > lo { ((hi - lo) / 16) as usize + 1 } else { 1 };
        prop_assert!(walk.depth <= cap, "depth {} > min(max_depth, out.len()) {}", walk.depth, cap);
        prop_assert!(walk.depth <= span_cap, "depth {} > (hi - lo) / 16 + 1 = {}", walk.depth, span_cap);
        prop_assert!(out[walk.depth..].iter().all(|&v| v == SENTINEL), "wrote past depth {}", walk.depth);
        for (i, &f) in out[..walk.depth].iter().enumerate() {
            prop_assert!(f & !ADDRESS_MASK == 0, "frame {i} {f:#x} keeps tag bits");
            prop_assert!(!(POISON..POISON + WORDS as u64).contains(&f), "frame {i} {f:#x} was read outside the bounds");
            if i > 0 {
                prop_assert!(f != 0, "frame {i} is zero");
            }
        }
        if walk.depth > 0 {
            prop_assert_eq!(out[0], strip_pointer_tag(r.regs.pc));
        }

        let base = g.addr(0);
        let memory = &r.memory;
        let read = |a: u64| -> u64 {
            assert!(a >= lo && a + 8 <= hi && a.is_multiple_of(8), "the model read {a:#x} outside [{lo:#x}, {hi:#x})");
            memory[((a - base) / 8) as usize]
        };
        let (want, frames, fps) = model(&r.regs, r.bounds, c.max_depth, c.out_len, &read);
        prop_assert_eq!(walk, want, "walker and model disagree");
        prop_assert_eq!(&out[..walk.depth], &frames[..], "frames differ from the model");

        // The same walk with a visitor that takes V8's frame words below
        // each frame pointer (`v8::slots::words_below`) from the live stack,
        // where it lies inside the bounds: identical result, one visit per
        // recorded frame in order with the model's frame pointer, and every
        // word it reads lies inside the bounds (a read outside faults on a
        // guard page or returns poison).
        let mut out2 = vec![SENTINEL; c.out_len];
        let mut visits: Vec<(usize, u64)> = Vec::new();
        let mut poisoned = None;
        let mut words = Vec::new();
        let live = |a: u64| {
            let inside = a >= r.bounds.lo && a.checked_add(8).is_some_and(|e| e <= r.bounds.hi) && a.is_multiple_of(8);
            // SAFETY: the 8 aligned bytes at `a` lie inside the bounds,
            // which are readable memory of this test.
            inside.then(|| unsafe { (a as *const u64).read_volatile() })
        };
        let walk2 = walk_stack_visit(&r.regs, r.bounds, c.max_depth, &mut out2, &mut |i, fp| {
            slots::words_below(&[fp], live, &mut words);
            if let Some(w) = words[0].iter().find(|w| (POISON..POISON + WORDS as u64).contains(w)) {
                poisoned = Some((i, fp, *w));
            }
            visits.push((i, fp));
        });
        prop_assert_eq!(walk2, walk, "walk_stack_visit differs from walk_stack");
        prop_assert_eq!(&out2[..], &out[..], "walk_stack_visit wrote other frames");
        prop_assert!(poisoned.is_none(), "slots::words_below returned a word from outside the bounds: {:?}", poisoned);
        prop_assert_eq!(visits.len(), walk.depth, "one visit per recorded frame");
        for (k, &(i, fp)) in visits.iter().enumerate() {
            prop_assert_eq!(i, k, "visits in order");
            prop_assert_eq!(fp, fps[k], "frame pointer of frame {}", k);
        }

        let counter = match walk.end {
            WalkEnd::Complete => &ends.complete,
            WalkEnd::Truncated => &ends.truncated,
            WalkEnd::BadFramePointer => &ends.bad,
            WalkEnd::NoPc => &ends.no_pc,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        ends.deepest.fetch_max(walk.depth as u64, Ordering::Relaxed);
        Ok(())
    })
}

fn run(name: &str, strategy: impl Strategy<Value = Case>, n: u32) -> Ends {
    let ends = Ends::default();
    let mut runner = TestRunner::new(Config { cases: n, failure_persistence: None, ..Config::default() });
    if let Err(e) = runner.run(&strategy, |c| check(&c, &ends)) {
        panic!("{name}: {e}");
    }
    eprintln!(
        "{name}: {n} cases; ends: {} complete, {} truncated, {} bad frame pointer, {} no pc; deepest {}",
        ends.complete.load(Ordering::Relaxed),
        ends.truncated.load(Ordering::Relaxed),
        ends.bad.load(Ordering::Relaxed),
        ends.no_pc.load(Ordering::Relaxed),
        ends.deepest.load(Ordering::Relaxed),
    );
    ends
}

#[test]
fn random_stacks_between_guard_pages() {
    let ends = run("random stacks", case(), cases(3000));
    // The generator reaches every way a walk can end.
    assert!(ends.bad.load(Ordering::Relaxed) > 0);
    assert!(ends.complete.load(Ordering::Relaxed) > 0);
    assert!(ends.no_pc.load(Ordering::Relaxed) > 0);
}

#[test]
fn corrupted_chains_between_guard_pages() {
    let ends = run("corrupted chains", chain_case(), cases(3000));
    assert!(ends.truncated.load(Ordering::Relaxed) > 0);
    assert!(ends.complete.load(Ordering::Relaxed) > 0);
    assert!(ends.deepest.load(Ordering::Relaxed) > 100, "chains should walk deep");
}

proptest! {
    #![proptest_config(Config { cases: cases(3000).saturating_mul(10), failure_persistence: None, ..Config::default() })]

    /// The bounds check itself, over all of u64 (no overflow, no panic).
    #[test]
    fn validate_frame_pointer_is_exact(fp in any::<u64>(), lo in any::<u64>(), hi in any::<u64>()) {
        let want = fp >= lo && fp.is_multiple_of(8) && (fp as u128) + 16 <= hi as u128;
        prop_assert_eq!(validate_frame_pointer(fp, lo, hi), want);
    }

    /// Frame pointers that fail validation are never read, whatever the
    /// bounds claim: a walk with bounds far from any mapping, and every
    /// frame pointer outside them, reads nothing (or it would crash).
    #[test]
    fn unmapped_bounds_are_never_read_when_fp_is_outside(
        pc in any::<u64>(), sp in any::<u64>(), fp in any::<u64>(), lo in any::<u64>(), len in 0u64..1 << 20,
    ) {
        let lo = lo & ADDRESS_MASK;
        let hi = lo.saturating_add(len);
        let f = fp & ADDRESS_MASK;
        prop_assume!(!validate_frame_pointer(f, lo, hi) || f == 0);
        let regs = Registers { pc, sp, fp, lr: 0 };
        let mut out = [SENTINEL; 8];
        let w = walk_stack(&regs, StackBounds::new(lo, hi), 8, &mut out);
        prop_assert!(w.depth <= 1);
    }
}

/// A writer thread rewrites the stack while the walker walks it, as a
/// thread that is not fully stopped would: the walk must stay in bounds
/// and terminate. Iterations scale with PROPTEST_CASES.
#[test]
fn stack_rewritten_during_the_walk() {
    let g = Guarded::new();
    g.protect(0, PAGES, libc::PROT_READ | libc::PROT_WRITE);
    let base = g.addr(0);
    let (lo, hi) = (base, base + (PAGES * PAGE) as u64);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let addr = base as usize;
        std::thread::spawn(move || {
            let words = addr as *mut u64;
            let mut s = 0x9e37_79b9_7f4a_7c15u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    let i = (s % WORDS as u64) as usize;
                    let v = match (s >> 60) % 4 {
                        0 => addr as u64 + ((s >> 20) % WORDS as u64) * 8,
                        1 => addr as u64 + (i as u64 + 2 + (s >> 50) % 8) * 8,
                        2 => 0,
                        _ => s,
                    };
                    // SAFETY: i < WORDS, inside the writable mapping; the
                    // reader only uses volatile reads of these words.
                    unsafe { words.add(i).write_volatile(v) };
                }
            }
        })
    };
    let n = cases(3000) as u64 * 20;
    let mut out = [0u64; 256];
    let mut deepest = 0;
    for i in 0..n {
        let fp = base + (i * 8 * 7) % ((PAGES * PAGE) as u64 - 16);
        let regs = Registers { pc: 0x1000, sp: base, fp, lr: 0 };
        let w = walk_stack(&regs, StackBounds::new(lo, hi), 256, &mut out);
        assert!(w.depth <= 256 && w.depth <= ((hi - lo) / 16) as usize + 1);
        deepest = deepest.max(w.depth);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("racing writer: {n} walks, deepest {deepest}");
}
