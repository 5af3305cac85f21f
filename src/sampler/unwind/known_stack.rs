//! What an unwind teaches about its thread's stack, for the next copies
//! the stopped window makes of it: where the thread's first frames are (a
//! copy whose frame-pointer chain ends there can stop just above, see
//! [`root_extent`]), and whether its copies may leave out large frames
//! (see [`large_frames`]). Both backends keep this per thread and follow
//! the same rules: [`lesson`].

use super::copy::{root_extent, StackCopy};
use super::{large_frames, StackEnd, Unwound};

/// Bytes copied above the last word a complete unwind read, when a copy
/// ends at the thread's learned root.
pub const ROOT_MARGIN: u64 = 64;

/// Largest live stack below a learned root that a copy takes whole
/// without following its frame-pointer chain (see [`copy_end_at_root`]).
pub const SHORT_STACK_BYTES: u64 = 4096;

/// A fingerprint of a frame record: its saved frame pointer and return
/// address folded into 32 bits. A root record holding the same two words
/// as when it was learned is the same frame.
#[inline(always)]
pub fn record_fingerprint(saved_fp: u64, ret: u64) -> u32 {
    let x = ret ^ saved_fp.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    let x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x >> 32) as u32 ^ x as u32
}

/// Where a copy of the live stack `[start, limit)` can end without
/// following the frame-pointer chain: at the learned root (its `record` and
/// `extent`, see [`Lesson::learn_root`]; a zero record is none), when at
/// most [`SHORT_STACK_BYTES`] lie below its end and its record still holds
/// the words of `fingerprint`.
///
/// Following the chain costs one dependent load per frame, each a cache
/// miss on frames the thread has not touched since they were entered; on a
/// short stack that is most of the stopped window, and there is no large
/// frame worth leaving out. A wrong cut is still caught after the copy: an
/// unwind that does not reach the root forgets it (see [`lesson`]).
///
/// `read` is asked only for the record's two words, inside `[start,
/// limit)`. Allocation-free, lock-free.
#[inline(always)]
pub fn copy_end_at_root(
    start: u64,
    limit: u64,
    (record, extent): (u64, u64),
    fingerprint: u32,
    read: impl Fn(u64) -> u64,
) -> Option<u64> {
    let end = record.checked_add(extent)?;
    let fits = record != 0 && record >= start && record & 7 == 0 && extent >= 16 && end <= limit;
    if !fits || end - start > SHORT_STACK_BYTES {
        return None;
    }
    (record_fingerprint(read(record), read(record + 8)) == fingerprint).then_some(end)
}

/// How an unwind changes what is known of its thread's stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lesson {
    /// A left-out large frame turned out to be needed: copy the thread's
    /// stack whole from now on.
    pub copy_whole: bool,
    /// The copy ended at the learned root and did not unwind to it.
    pub forget_root: bool,
    /// A whole copy unwound to the root: the thread's outermost frame
    /// record and the bytes above it an unwind needs.
    pub learn_root: Option<(u64, u64)>,
}

/// The lesson of `unwound`, which ended at `end`, from `copy` of a
/// thread's own stack with frame pointer `fp`; `cut_at_root` says the copy
/// ended at the thread's learned root, `knows_root` that one is learned.
/// Learns the call sites in large frames the unwind shows on the way.
pub fn lesson(
    copy: &StackCopy<'_>,
    fp: u64,
    cut_at_root: bool,
    knows_root: bool,
    end: StackEnd,
    unwound: &Unwound,
) -> Lesson {
    large_frames::learn(&unwound.frames, &unwound.fps, |a| copy.read(a));
    let whole = !copy.truncated && !cut_at_root;
    Lesson {
        copy_whole: !copy.holes.is_empty() && end == StackEnd::TruncatedCopy,
        forget_root: cut_at_root && !matches!(end, StackEnd::Root | StackEnd::DepthLimit),
        learn_root: if whole && !knows_root && end == StackEnd::Root {
            root_extent(copy, fp, unwound.highest_read, ROOT_MARGIN)
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_stack_ends_at_its_root_when_the_record_is_unchanged() {
        // Root record at 0x1800 (saved fp 0, return 0x4242), 0x50 bytes read above it.
        let (record, extent) = (0x1800u64, 0x50u64);
        let root = (record, extent);
        let words = |ret: u64| move |a: u64| if a == record + 8 { ret } else { 0 };
        let fp = record_fingerprint(0, 0x4242);
        let reads = std::cell::Cell::new(0);
        let counted = |a: u64| {
            reads.set(reads.get() + 1);
            assert!((0x1000..0x2000).contains(&a), "read outside the stack: {a:#x}");
            words(0x4242)(a)
        };
        assert_eq!(copy_end_at_root(0x1000, 0x2000, root, fp, counted), Some(record + extent));
        assert_eq!(reads.get(), 2, "only the record's two words");
        assert_eq!(copy_end_at_root(0x1000, 0x2000, root, fp, words(0x4343)), None, "another frame there now");
        assert_eq!(copy_end_at_root(0x1000, 0x2000, (0, extent), record_fingerprint(0, 0), words(0)), None, "no root");
        assert_eq!(copy_end_at_root(0x1808, 0x2000, root, fp, words(0x4242)), None, "the stack is above the record");
        assert_eq!(copy_end_at_root(0x1000, 0x1840, root, fp, words(0x4242)), None, "the root ends beyond the stack");
        let far = (0x1000 + SHORT_STACK_BYTES, extent);
        assert_eq!(copy_end_at_root(0x1000, 0x4000, far, fp, |_| panic!("read")), None, "too deep: the chain decides");
        assert_eq!(copy_end_at_root(0x1000, 0x2000, (record + 4, extent), fp, |_| panic!("read")), None);
        assert_ne!(record_fingerprint(0, 0x4242), record_fingerprint(0x4242, 0));
    }

    #[test]
    fn roots_are_learned_from_whole_copies_and_forgotten_when_a_cut_falls_short() {
        // Records at 0x1010 -> 0x1030 (saved fp 0: the root).
        let mut words = [0u64; 8];
        words[2] = 0x1030;
        let whole = StackCopy::whole(0x1000, &words);
        let unwound = Unwound { frames: vec![0x10, 0x20], fps: vec![0x1010, 0x1030], highest_read: 0x1038 };
        let l = |copy: &StackCopy<'_>, cut: bool, knows: bool, end: StackEnd| {
            lesson(copy, 0x1010, cut, knows, end, &unwound)
        };
        let learned = Some((0x1030, 16 + ROOT_MARGIN));
        let nothing = Lesson { copy_whole: false, forget_root: false, learn_root: None };
        assert_eq!(l(&whole, false, false, StackEnd::Root), Lesson { learn_root: learned, ..nothing });
        assert_eq!(l(&whole, false, true, StackEnd::Root), nothing, "already known");
        assert_eq!(l(&whole, false, false, StackEnd::BadCfa), nothing, "not unwound to the root");
        let truncated = StackCopy { truncated: true, ..whole };
        assert_eq!(l(&truncated, false, false, StackEnd::Root), nothing, "not a whole copy");
        assert_eq!(l(&truncated, true, true, StackEnd::Root), nothing, "the cut held");
        assert_eq!(l(&truncated, true, true, StackEnd::DepthLimit), nothing, "the cut held as far as it went");
        assert_eq!(l(&truncated, true, true, StackEnd::TruncatedCopy), Lesson { forget_root: true, ..nothing });
        let holes = [[0x1018, 0x1028]];
        let holed = StackCopy { holes: &holes, ..truncated };
        assert_eq!(l(&holed, false, false, StackEnd::TruncatedCopy), Lesson { copy_whole: true, ..nothing });
    }
}
