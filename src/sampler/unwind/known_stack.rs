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
