//! The first frames of a stopped thread that a frame-pointer walk cannot
//! see: the caller of a function that built no frame record.
//!
//! On x86_64 a call pushes the return address, so while a frameless
//! function runs, its caller's return address is the word at `sp`. On
//! arm64 the call leaves it in `lr` and nothing is pushed: `[sp]` is
//! whatever the caller stored there. So the "top of stack" word a runtime
//! needs (V8's frameless baseline builtins) is `[sp]` on x86_64 and `lr` on
//! arm64, and on arm64 a frameless leaf's caller is `lr`. Images say so
//! in their unwind tables; for code without any (JIT code) this module
//! decides whether `lr` is the caller a frame-pointer step would skip.

/// The architecture whose call convention applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    pub const HOST: Arch = if cfg!(target_arch = "aarch64") { Arch::Arm64 } else { Arch::X86_64 };
}

/// Bytes around the pc within which `lr` is taken to point into the
/// stopped function itself (the return point of a call it made and has
/// returned from) rather than into its caller.
pub const SAME_FUNCTION_BYTES: u64 = 512;

/// Where the "top of stack" word comes from: the memory at `sp`, or a
/// register value already known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopOfStack {
    /// Read the 8 bytes at `sp` (x86_64).
    ReadAtSp,
    /// This value (arm64: `lr`, already stripped).
    Value(u64),
}

pub fn top_of_stack(arch: Arch, lr: u64) -> TopOfStack {
    match arch {
        Arch::X86_64 => TopOfStack::ReadAtSp,
        Arch::Arm64 => TopOfStack::Value(lr),
    }
}

/// The top-of-stack word: `lr` on arm64, `read_at_sp()` on x86_64.
#[inline(always)]
pub fn top_of_stack_word(arch: Arch, lr: u64, read_at_sp: impl FnOnce() -> u64) -> u64 {
    match top_of_stack(arch, lr) {
        TopOfStack::Value(v) => v,
        TopOfStack::ReadAtSp => read_at_sp(),
    }
}

/// The caller to insert after the pc when the thread stopped in a
/// frameless leaf (arm64 only): `lr`, unless it is what the frame-pointer
/// walk found as the first return address (the function has its frame
/// record, so the walk has its caller), or it lies so close to the pc that
/// it is a return point inside the stopped function itself.
///
/// `first_return` is the walk's second frame (0 if the walk has none).
pub fn leaf_caller(arch: Arch, pc: u64, lr: u64, first_return: u64) -> Option<u64> {
    if arch != Arch::Arm64 || lr == 0 || !lr.is_multiple_of(4) || lr == first_return {
        return None;
    }
    if pc.abs_diff(lr) <= SAME_FUNCTION_BYTES {
        return None;
    }
    Some(lr)
}

/// Inserts `caller` as frame 1 of `frames[..depth]` (leaf first), within
/// `frames.len()` and `max_depth`. Returns the new depth, and whether the
/// outermost frame had to be dropped to make room.
pub fn insert_caller(frames: &mut [u64], depth: usize, max_depth: usize, caller: u64) -> (usize, bool) {
    let cap = frames.len().min(max_depth);
    if depth == 0 || cap < 2 {
        return (depth, false);
    }
    let dropped = depth >= cap;
    let keep = if dropped { cap - 1 } else { depth };
    frames.copy_within(1..keep, 2);
    frames[1] = caller;
    (keep + 1, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PC: u64 = 0x1_8a2b_3c40;
    const CALLER: u64 = 0x1_0000_4abc;
    const CALLERS_CALLER: u64 = 0x1_0000_9000;

    #[test]
    fn a_frameless_arm64_leaf_gets_its_caller_from_lr() {
        // _platform_memmove: no frame record, fp still is the caller's, so
        // the walk's first return address is the caller's caller.
        assert_eq!(leaf_caller(Arch::Arm64, PC, CALLER, CALLERS_CALLER), Some(CALLER));
        let mut frames = [PC, CALLERS_CALLER, 0x1_0000_a000, 0, 0];
        assert_eq!(insert_caller(&mut frames, 3, 128, CALLER), (4, false));
        assert_eq!(frames[..4], [PC, CALLER, CALLERS_CALLER, 0x1_0000_a000]);
    }

    #[test]
    fn a_function_with_its_frame_record_is_left_alone() {
        // After the prologue the record holds lr: the walk has the caller.
        assert_eq!(leaf_caller(Arch::Arm64, PC, CALLER, CALLER), None);
        // After a call returned, lr points just behind that call, in the
        // stopped function: not a caller.
        assert_eq!(leaf_caller(Arch::Arm64, PC, PC - 0x40, CALLER), None);
        assert_eq!(leaf_caller(Arch::Arm64, PC, PC + 0x100, CALLER), None, "a loop back over the call");
        // Garbage in lr (used as a scratch register): misaligned or zero.
        assert_eq!(leaf_caller(Arch::Arm64, PC, CALLER + 2, CALLERS_CALLER), None);
        assert_eq!(leaf_caller(Arch::Arm64, PC, 0, CALLERS_CALLER), None);
    }

    #[test]
    fn x86_64_never_uses_lr_and_reads_the_word_at_sp() {
        assert_eq!(leaf_caller(Arch::X86_64, PC, CALLER, CALLERS_CALLER), None);
        assert_eq!(top_of_stack(Arch::X86_64, CALLER), TopOfStack::ReadAtSp);
        assert_eq!(top_of_stack(Arch::Arm64, CALLER), TopOfStack::Value(CALLER));
    }

    #[test]
    fn the_top_of_stack_word_is_lr_on_arm64_and_read_on_x86_64() {
        assert_eq!(top_of_stack_word(Arch::Arm64, CALLER, || unreachable!()), CALLER);
        assert_eq!(top_of_stack_word(Arch::X86_64, CALLER, || 7), 7);
    }

    #[test]
    fn inserting_respects_the_depth_limit() {
        let mut frames = [PC, 2, 3, 4];
        assert_eq!(insert_caller(&mut frames, 4, 4, CALLER), (4, true));
        assert_eq!(frames, [PC, CALLER, 2, 3], "the outermost frame gives way");
        let mut frames = [PC, 2, 3, 4];
        assert_eq!(insert_caller(&mut frames, 3, 3, CALLER), (3, true));
        assert_eq!(frames[..3], [PC, CALLER, 2]);
        let mut one = [PC];
        assert_eq!(insert_caller(&mut one, 1, 1, CALLER), (1, false), "pc-only captures stay pc-only");
        assert_eq!(insert_caller(&mut [0u64; 4], 0, 4, CALLER), (0, false));
        let mut frames = [PC, 0, 0];
        assert_eq!(insert_caller(&mut frames, 1, 3, CALLER), (2, false));
        assert_eq!(frames[..2], [PC, CALLER]);
    }
}
