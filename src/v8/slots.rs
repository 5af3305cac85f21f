//! Interpreted frames without calling V8: their bytecode position, read
//! from the frame itself.
//!
//! `GetStackSample` is most of the time a JavaScript thread spends stopped
//! (2-4 µs a sample, against ~0.5 µs for the native walk), and what it adds
//! over the native walk is mostly the position of interpreted frames. V8
//! finds that in two slots of the frame, at fixed offsets below its frame
//! pointer: the BytecodeArray (a tagged pointer) and the bytecode offset (a
//! Smi), and reports `array + offset` (`src/profiler/tick-sample.cc`). Those
//! offsets and the Smi encoding depend on the V8 version and build, so the
//! sampler takes a few candidate words below every frame pointer from the
//! stack copy, cheaply, and learns which layout this V8 uses by comparing with what
//! `GetStackSample` reported for the same frames. Once a layout has matched
//! on enough samples and never failed, the handler stops calling
//! `GetStackSample`. Compiled frames need nothing of the kind: their pcs
//! are named from the code map.
//!
//! Nothing about the layout is assumed: not the offsets, not the Smi
//! encoding (32-bit shift in Node's builds, 1-bit with pointer compression,
//! as in Electron's). If no candidate layout agrees with `GetStackSample`
//! after [`GIVE_UP_AFTER`] interpreted frames, learning fails for good:
//! [`words_below`] then gives nothing, `GetStackSample` is no longer called, and
//! only compiled code is named (from the code events).
//!
//! The words come from the stack copy made in the stopped window, so
//! reading them cannot fault; the values are never dereferenced, only
//! looked up in the code map.

use std::sync::atomic::{AtomicU32, Ordering};

/// Offsets below the frame pointer read for every frame.
pub const OFFSETS: [u64; 4] = [24, 32, 40, 48];
pub const WORDS: usize = OFFSETS.len();
const _: () = assert!(WORDS == crate::sampler::backend::FRAME_WORDS);
// Frames above a cut copy keep these words (in ascending address order).
const _: () = {
    let kept = crate::sampler::unwind::TAIL_WORDS_BELOW;
    let mut i = 0;
    while i < WORDS {
        assert!(kept[WORDS - 1 - i] == OFFSETS[i]);
        i += 1;
    }
};

/// For each frame pointer in `fps`, the words at `fp - OFFSETS[i]` as
/// `read` answers them from a copy of the stack (0 where it has none),
/// into `out`; all 0 once learning has [`failed`].
pub fn words_below(fps: &[u64], read: impl Fn(u64) -> Option<u64>, out: &mut Vec<[u64; WORDS]>) {
    out.clear();
    let failed = failed();
    out.extend(fps.iter().map(|&fp| {
        if failed {
            return [0; WORDS];
        }
        OFFSETS.map(|off| fp.checked_sub(off).and_then(&read).unwrap_or(0))
    }));
}

/// Which words hold the array and the offset, and how a Smi is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub array: u8,
    pub offset: u8,
    /// 32 for 64-bit builds without pointer compression (Node's), 1 with.
    pub smi_shift: u8,
}

impl Layout {
    /// Every layout considered: the array slot directly above the offset
    /// slot, at each of the offsets read.
    pub fn all() -> impl Iterator<Item = Layout> {
        (0..WORDS - 1)
            .flat_map(|a| [32u8, 1].map(|smi_shift| Layout { array: a as u8, offset: a as u8 + 1, smi_shift }))
    }

    fn pack(self) -> u32 {
        1 << 24 | (self.array as u32) << 16 | (self.offset as u32) << 8 | self.smi_shift as u32
    }

    fn unpack(v: u32) -> Option<Layout> {
        (v >> 24 == 1).then_some(Layout { array: (v >> 16) as u8, offset: (v >> 8) as u8, smi_shift: v as u8 })
    }

    /// The bytecode address this layout gives for a frame's words, as
    /// `GetStackSample` would report it; None if the words are not a heap
    /// object and a Smi that can be a bytecode offset.
    pub fn bytecode(self, words: &[u64; WORDS]) -> Option<u64> {
        let array = *words.get(self.array as usize)?;
        let offset = *words.get(self.offset as usize)?;
        // V8's checks: a strong heap-object tag on the array, a Smi tag on
        // the offset.
        if array & 3 != 1 || offset & 1 != 0 {
            return None;
        }
        // Stricter than V8's, which knows the frame is interpreted: a
        // frame of another kind (a bytecode handler's own, which holds
        // heap pointers and small counts) must not pass. A 64-bit Smi has
        // an empty low half. Of a 31-bit one V8 reads the low half only.
        let value = match self.smi_shift {
            32 if offset as u32 == 0 => (offset as i64) >> 32,
            32 => return None,
            _ => ((offset as u32 as i32) >> 1) as i64,
        };
        // The offset counts from the array's start, past its header.
        if value < MIN_OFFSET {
            return None;
        }
        Some(array.wrapping_add(value as u64))
    }
}

/// The smallest bytecode offset a frame holds: V8 keeps it from the start
/// of the BytecodeArray, whose header (map, length, tables, sizes) comes
/// first; the function-entry position is one byte before the first bytecode.
const MIN_OFFSET: i64 = 16;

/// The layout learned in this process, if any, or [`FAILED`].
static LEARNED: AtomicU32 = AtomicU32::new(0);
/// `LEARNED` when no layout agreed with `GetStackSample`.
const FAILED: u32 = 2 << 24;

pub fn learned() -> Option<Layout> {
    Layout::unpack(LEARNED.load(Ordering::Acquire))
}

/// True once learning gave up: no frame words are read, and
/// `GetStackSample` is not called any more. Async-signal-safe.
#[inline]
pub fn failed() -> bool {
    LEARNED.load(Ordering::Acquire) == FAILED
}

/// Gives up learning, as when no layout agrees with `GetStackSample` (for
/// tests of that fallback).
pub fn give_up() {
    LEARNED.store(FAILED, Ordering::Release);
}

/// For tests and for an unknown V8: forget what was learned (or that it
/// failed).
pub fn forget() {
    LEARNED.store(0, Ordering::Release);
}

/// Interpreted frames a layout must match before it is trusted.
pub const CONFIRMATIONS: u32 = 64;
/// And the largest share of frames it may miss: frames caught in their
/// setup (the leaf just entering the interpreter) hold stale words.
pub const MAX_MISS_PER: u32 = 50;
/// Interpreted frames seen with `GetStackSample`'s answer after which, if
/// no layout is confirmed, learning fails for good. A confirmed layout is
/// normally reached after ~100 frames (a few dozen samples).
pub const GIVE_UP_AFTER: u32 = 1 << 14;

/// Learns the layout from samples that have both the frame words and
/// `GetStackSample`'s answer.
pub struct Learner {
    /// Per candidate layout: (frames matched, frames missed).
    scores: Vec<(Layout, u32, u32)>,
    /// Interpreted frames observed.
    seen: u32,
}

impl Default for Learner {
    fn default() -> Self {
        Self::new()
    }
}

impl Learner {
    pub fn new() -> Self {
        Learner { scores: Layout::all().map(|l| (l, 0, 0)).collect(), seen: 0 }
    }

    /// One sample: `interpreted` are the words of the frames the native
    /// walk shows in the interpreter, `reported` the bytecode addresses
    /// `GetStackSample` gave, `is_bytecode` whether an address lies in a
    /// bytecode array V8 reported. A frame matches when its candidate is
    /// among `reported`, and counts against the layout when its candidate
    /// is no bytecode address at all (V8 sometimes leaves a frame out, so a
    /// bytecode address it did not report proves nothing; nor do words that
    /// are not a tagged pointer and a Smi). Returns the
    /// layout once one is confirmed (and publishes it for the handler): one
    /// that matched at least `CONFIRMATIONS` frames, missed at most one in
    /// `MAX_MISS_PER`, and did best.
    pub fn observe(
        &mut self,
        interpreted: &[[u64; WORDS]],
        reported: &[u64],
        is_bytecode: &dyn Fn(u64) -> bool,
    ) -> Option<Layout> {
        if interpreted.is_empty() || reported.is_empty() || LEARNED.load(Ordering::Acquire) != 0 {
            return learned();
        }
        self.seen = self.seen.saturating_add(interpreted.len() as u32);
        for (layout, hits, misses) in &mut self.scores {
            for w in interpreted {
                match layout.bytecode(w) {
                    Some(b) if reported.contains(&b) => *hits += 1,
                    // Not an interpreted frame's words (a leaf caught in a
                    // handler's own frame, say): no evidence either way.
                    None => {}
                    Some(b) if is_bytecode(b) => {}
                    Some(_) => *misses += 1,
                }
            }
        }
        let best = self.scores.iter().max_by_key(|(_, hits, _)| *hits);
        if let Some(&(layout, hits, misses)) = best {
            if hits >= CONFIRMATIONS && misses.saturating_mul(MAX_MISS_PER) <= hits {
                LEARNED.store(layout.pack(), Ordering::Release);
                return learned();
            }
        }
        if self.seen >= GIVE_UP_AFTER {
            LEARNED.store(FAILED, Ordering::Release);
        }
        learned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::unwind::StackCopy;
    use std::sync::{Mutex, MutexGuard};

    /// The learned layout is process-wide: tests that set it take turns,
    /// each starting and ending with nothing learned.
    static LEARNED_LOCK: Mutex<()> = Mutex::new(());

    struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

    fn turn() -> Turn {
        let guard = LEARNED_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        forget();
        Turn(guard)
    }

    impl Drop for Turn {
        fn drop(&mut self) {
            forget();
        }
    }

    #[test]
    fn bytecode_follows_v8s_rule() {
        let l = Layout { array: 0, offset: 1, smi_shift: 32 };
        let array = 0x1000_0001u64; // tagged heap object
        let offset = 57u64 << 32; // Smi 57
        assert_eq!(l.bytecode(&[array, offset, 0, 0]), Some(0x1000_0001 + 57));
        assert_eq!(l.bytecode(&[array & !1, offset, 0, 0]), None, "untagged array");
        assert_eq!(l.bytecode(&[array, offset | 1, 0, 0]), None, "not a Smi");
        let c = Layout { array: 1, offset: 2, smi_shift: 1 };
        assert_eq!(c.bytecode(&[0, array, 57 << 1, 0]), Some(0x1000_0001 + 57));
        assert_eq!(c.bytecode(&[0, array, (-4i64 << 1) as u64, 0]), None, "negative offset");
        // A bytecode handler's own frame: a heap pointer beside a small
        // count, which V8's tag checks alone would take.
        assert_eq!(l.bytecode(&[array, 2, 0, 0]), None, "low half of a 64-bit Smi set");
        assert_eq!(l.bytecode(&[array, 3 << 32, 0, 0]), None, "inside the header");
        assert_eq!(c.bytecode(&[0, array, 2, 0]), None, "inside the header");
    }

    #[test]
    fn reads_only_what_the_copy_holds() {
        let _turn = turn();
        let stack = [11u64, 22, 33, 44, 55, 66, 77, 88];
        let base = 0x1000;
        // A copy of words 1..8.
        let copy = StackCopy::whole(base + 8, &stack[1..]);
        let mut out = vec![[9u64; WORDS]];
        // fp at word 7: reads words 4, 3, 2, 1 (offsets 24..48); fp at
        // word 5: word 0 would be at base, below the copy.
        words_below(&[base + 56, base + 40, 0, u64::MAX], |a| copy.read(a), &mut out);
        assert_eq!(out, [[55, 44, 33, 22], [33, 22, 0, 0], [0; WORDS], [0; WORDS]]);
    }

    #[test]
    fn a_frame_v8_left_out_is_neither_a_match_nor_a_miss() {
        let _turn = turn();
        let mut l = Learner::new();
        let array = 0x3000_0001u64;
        let mut got = None;
        for i in 0..CONFIRMATIONS as u64 {
            // Two interpreted frames; V8 reports only the first.
            let frames = [[0, array, (i + 0x20) << 32, 0], [0, array + 0x100, 0x25 << 32, 0]];
            got = l.observe(&frames, &[array + i + 0x20], &|b| b >= array && b < array + 0x200);
        }
        assert_eq!(got, Some(Layout { array: 1, offset: 2, smi_shift: 32 }));
    }

    #[test]
    fn learner_does_not_trust_a_layout_that_misses_often() {
        let _turn = turn();
        let mut l = Learner::new();
        let array = 0x2000_0001u64;
        for i in 0..200u64 {
            let words = [0x77, array, (i + 0x20) << 32, 0];
            // Every fourth frame reports something else.
            let reported = if i % 4 == 0 { [array + 9999] } else { [array + i + 0x20] };
            assert_eq!(l.observe(&[words], &reported, &|_| false), None);
        }
    }

    #[test]
    fn pointer_compression_smis_are_learned_too() {
        let _turn = turn();
        let mut l = Learner::new();
        let array = 0x0800_0001u64;
        let mut got = None;
        for i in 0..CONFIRMATIONS as u64 {
            // A 31-bit Smi (shifted by one), upper half sign extension.
            let words = [array + i * 8, (i + 0x20) << 1, 0, 0];
            got = l.observe(&[words], &[array + i * 8 + i + 0x20], &|_| false);
        }
        assert_eq!(got, Some(Layout { array: 0, offset: 1, smi_shift: 1 }));
    }

    #[test]
    fn learning_fails_for_good_when_nothing_agrees() {
        let _turn = turn();
        let mut l = Learner::new();
        let array = 0x4000_0001u64;
        let stack = [11u64, 22, 33, 44, 55, 66, 77, 88];
        let copy = StackCopy::whole(0x1000, &stack);
        let mut i = 0u64;
        while !failed() {
            // Words that decode to something, never what V8 reported.
            let words = [array, (i % 7 + 0x20) << 32, array, (i % 5 + 0x20) << 32];
            assert_eq!(l.observe(&[words], &[array + 100 + i], &|_| true), None);
            i += 1;
            assert!(i <= GIVE_UP_AFTER as u64, "never gave up");
        }
        assert_eq!(i, GIVE_UP_AFTER as u64);
        assert_eq!(learned(), None);
        // No more reads, and no later evidence revives it.
        let mut out = Vec::new();
        words_below(&[0x1000 + 56], |a| copy.read(a), &mut out);
        assert_eq!(out, [[0; WORDS]]);
        let words = [0, array, 0x23 << 32, 0];
        for _ in 0..CONFIRMATIONS {
            l.observe(&[words], &[array + 0x23], &|_| false);
        }
        assert!(failed());
    }

    #[test]
    fn learner_confirms_the_consistent_layout_only() {
        let _turn = turn();
        let mut l = Learner::new();
        let array = 0x2000_0001u64;
        let never = |_: u64| false;
        // One frame caught in its setup, with stale words.
        assert_eq!(l.observe(&[[0x77, 0x1235, 3 << 32, 0]], &[array], &never), None);
        assert_eq!(l.observe(&[[0x77, 0x1234, 3, 0]], &[array], &never), None);
        for i in 0..CONFIRMATIONS as u64 {
            // Words: [junk, array, offset(Smi i), junk]: layout (1, 2, 32).
            let words = [0x77, array + i * 8, (i + 0x20) << 32, 0x99 << 32];
            let reported = [array + i * 8 + i + 0x20];
            let got = l.observe(&[words], &reported, &never);
            if i + 1 < CONFIRMATIONS as u64 {
                assert_eq!(got, None);
            } else {
                assert_eq!(got, Some(Layout { array: 1, offset: 2, smi_shift: 32 }));
            }
        }
        assert_eq!(learned(), Some(Layout { array: 1, offset: 2, smi_shift: 32 }));
        forget();
        assert_eq!(learned(), None);
    }
}
