//! Frame-pointer stack walking.
//!
//! `walk_stack` runs while the sampled thread is stopped: inside the Linux
//! signal handler, or between `thread_suspend` and `thread_resume` on macOS.
//! So it must not allocate, lock, or panic, and it may only read memory that
//! the caller has proven readable: the `StackBounds` of the thread.
//!
//! Every frame record it follows must lie inside the bounds, be 8-byte
//! aligned, and sit strictly above the previous one (stacks grow down, so a
//! caller's frame is always at a higher address). The strict increase is what
//! makes a cyclic or corrupted chain terminate: the walk can take at most
//! `(hi - lo) / 16` steps even before the depth cap.

/// The registers a walk starts from. `lr` is only meaningful on arm64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub pc: u64,
    pub sp: u64,
    pub fp: u64,
    pub lr: u64,
}

/// A range of memory `[lo, hi)` that is known to be mapped and readable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackBounds {
    pub lo: u64,
    pub hi: u64,
}

impl StackBounds {
    pub const EMPTY: StackBounds = StackBounds { lo: 0, hi: 0 };

    pub fn new(lo: u64, hi: u64) -> Self {
        StackBounds { lo, hi }
    }

    pub fn is_empty(&self) -> bool {
        self.hi <= self.lo
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.lo && addr < self.hi
    }
}

/// Why a walk ended. Used for unwind-quality figures, not for control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// The chain ended normally: a zero frame pointer or a zero return address.
    Complete,
    /// `max_depth` frames were recorded and more were available.
    Truncated,
    /// A frame pointer left the bounds, was misaligned, or did not increase.
    BadFramePointer,
    /// The pc was zero: nothing was recorded.
    NoPc,
}

impl From<WalkEnd> for super::unwind::StackEnd {
    fn from(e: WalkEnd) -> Self {
        use super::unwind::StackEnd;
        match e {
            WalkEnd::Complete => StackEnd::Root,
            WalkEnd::Truncated => StackEnd::DepthLimit,
            WalkEnd::BadFramePointer => StackEnd::NoUnwindInfo,
            WalkEnd::NoPc => StackEnd::NoPc,
        }
    }
}

/// The result of one walk. The frames are in the caller's output slice,
/// `out[..depth]`, leaf first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    pub depth: usize,
    pub end: WalkEnd,
}

impl Walk {
    pub fn truncated(&self) -> bool {
        self.end == WalkEnd::Truncated
    }
}

/// Size of a frame record: saved frame pointer, then return address.
const FRAME_RECORD: u64 = 16;

/// Mask that keeps the virtual-address bits of a code or data pointer.
///
/// On arm64 macOS, return addresses saved on the stack carry pointer
/// authentication bits in the high bits, and so can pc, lr and fp as
/// `thread_get_state` reports them. User-space addresses on both arm64
/// (47-bit VA on macOS, 48 at most on Linux) and x86_64 (47-bit) fit in 48
/// bits, so masking to 48 bits is harmless everywhere and required on arm64.
pub const ADDRESS_MASK: u64 = 0x0000_ffff_ffff_ffff;

/// Strips pointer-authentication (or any other tag) bits from an address.
#[inline]
pub fn strip_pointer_tag(addr: u64) -> u64 {
    addr & ADDRESS_MASK
}

/// True if a frame record at `fp` lies fully inside `[lo, hi)` and is aligned.
#[inline]
pub fn validate_frame_pointer(fp: u64, lo: u64, hi: u64) -> bool {
    if fp < lo || fp & 0x7 != 0 {
        return false;
    }
    match fp.checked_add(FRAME_RECORD) {
        Some(end) => end <= hi,
        None => false,
    }
}

/// Walks the frame-pointer chain starting at `regs`, writing the pc and then
/// each return address into `out`, leaf first. At most
/// `min(max_depth, out.len())` frames are written.
///
/// All addresses are passed through [`strip_pointer_tag`]. Reads happen only
/// at addresses accepted by [`validate_frame_pointer`] against `bounds`
/// (narrowed below by `regs.sp` when the sp lies inside the bounds, since no
/// live frame record can sit below the stack pointer).
///
/// Async-signal-safe: no allocation, no locks, no panics.
pub fn walk_stack(regs: &Registers, bounds: StackBounds, max_depth: usize, out: &mut [u64]) -> Walk {
    walk_stack_visit(regs, bounds, max_depth, out, &mut |_, _| {})
}

/// As [`walk_stack`], also calling `visit(i, fp)` for each recorded frame
/// `out[i]` with the frame pointer of the function that frame is in: the
/// interrupted fp for the leaf, the saved fp of each record for the
/// others. (V8 keeps per-frame data, such as an interpreted frame's
/// bytecode array, at fixed offsets below the frame pointer.) `fp` is not
/// validated beyond what the walk itself needed; `visit` must bounds-check
/// any read. Async-signal-safe if `visit` is.
#[inline]
pub fn walk_stack_visit(
    regs: &Registers,
    bounds: StackBounds,
    max_depth: usize,
    out: &mut [u64],
    visit: &mut impl FnMut(usize, u64),
) -> Walk {
    let limit = if max_depth < out.len() { max_depth } else { out.len() };
    let pc = strip_pointer_tag(regs.pc);
    if pc == 0 {
        return Walk { depth: 0, end: WalkEnd::NoPc };
    }
    let Some(first) = out.first_mut() else {
        return Walk { depth: 0, end: WalkEnd::Truncated };
    };
    if limit == 0 {
        return Walk { depth: 0, end: WalkEnd::Truncated };
    }
    *first = pc;
    visit(0, strip_pointer_tag(regs.fp));
    let mut depth = 1usize;

    let sp = strip_pointer_tag(regs.sp);
    let mut lo = if bounds.contains(sp) && sp > bounds.lo { sp } else { bounds.lo };
    let hi = bounds.hi;
    let mut fp = strip_pointer_tag(regs.fp);

    loop {
        if fp == 0 {
            return Walk { depth, end: WalkEnd::Complete };
        }
        if !validate_frame_pointer(fp, lo, hi) {
            return Walk { depth, end: WalkEnd::BadFramePointer };
        }
        // SAFETY: `validate_frame_pointer` proved `[fp, fp + 16)` lies inside
        // `bounds`, which the caller guarantees is mapped and readable, and fp
        // is 8-byte aligned. The thread that owns this stack is stopped (or is
        // us, in a signal handler), so volatile reads see a stable value; a
        // racing writer could only give us a wrong value, which the next
        // validation rejects.
        let (next_fp, ret) = unsafe {
            let p = fp as *const u64;
            (core::ptr::read_volatile(p), core::ptr::read_volatile(p.add(1)))
        };
        let ret = strip_pointer_tag(ret);
        if ret == 0 {
            return Walk { depth, end: WalkEnd::Complete };
        }
        match out.get_mut(depth) {
            Some(slot) if depth < limit => *slot = ret,
            _ => return Walk { depth, end: WalkEnd::Truncated },
        }
        let next_fp = strip_pointer_tag(next_fp);
        visit(depth, next_fp);
        depth += 1;
        if next_fp == 0 {
            return Walk { depth, end: WalkEnd::Complete };
        }
        // The caller's frame must be strictly above this one; anything else
        // is a cycle or garbage.
        lo = match fp.checked_add(FRAME_RECORD) {
            Some(v) => v,
            None => return Walk { depth, end: WalkEnd::BadFramePointer },
        };
        if next_fp < lo {
            return Walk { depth, end: WalkEnd::BadFramePointer };
        }
        fp = next_fp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic stack: a word buffer whose real addresses serve as bounds.
    struct FakeStack {
        words: Vec<u64>,
    }

    impl FakeStack {
        fn new(words: usize) -> Self {
            FakeStack { words: vec![0; words] }
        }
        fn addr(&self, index: usize) -> u64 {
            self.words.as_ptr() as u64 + (index as u64) * 8
        }
        fn bounds(&self) -> StackBounds {
            StackBounds::new(self.addr(0), self.addr(self.words.len()))
        }
        /// Writes a frame record at word `index`: saved fp then return address.
        fn record(&mut self, index: usize, next_fp: u64, ret: u64) {
            self.words[index] = next_fp;
            self.words[index + 1] = ret;
        }
        /// Builds a chain of `n` frames at word indices 4, 8, 12, ... with
        /// return addresses 0x1000 + i; the last record ends the chain.
        fn chain(n: usize) -> (Self, Registers) {
            let mut s = FakeStack::new(4 * n + 8);
            for i in 0..n {
                let at = 4 + 4 * i;
                let next = if i + 1 < n { s.addr(at + 4) } else { 0 };
                s.record(at, next, 0x1000 + i as u64);
            }
            let regs = Registers { pc: 0xabc, sp: s.addr(2), fp: s.addr(4), lr: 0 };
            (s, regs)
        }
    }

    #[test]
    fn valid_chain_is_walked_leaf_first() {
        let (s, regs) = FakeStack::chain(5);
        let mut out = [0u64; 16];
        let w = walk_stack(&regs, s.bounds(), 16, &mut out);
        assert_eq!(w, Walk { depth: 6, end: WalkEnd::Complete });
        assert_eq!(&out[..6], &[0xabc, 0x1000, 0x1001, 0x1002, 0x1003, 0x1004]);
    }

    #[test]
    fn visitor_sees_each_frames_frame_pointer() {
        let (s, regs) = FakeStack::chain(3);
        let mut out = [0u64; 8];
        let mut seen = Vec::new();
        let w = walk_stack_visit(&regs, s.bounds(), 8, &mut out, &mut |i, fp| seen.push((i, fp)));
        assert_eq!(w.depth, 4);
        // The leaf's fp is the interrupted one; each return address's is
        // the frame its record points to (0 past the last record).
        assert_eq!(seen, vec![(0, s.addr(4)), (1, s.addr(8)), (2, s.addr(12)), (3, 0)]);
    }

    #[test]
    fn depth_cap_truncates_and_says_so() {
        let (s, regs) = FakeStack::chain(20);
        let mut out = [0u64; 64];
        let w = walk_stack(&regs, s.bounds(), 8, &mut out);
        assert_eq!(w.depth, 8);
        assert!(w.truncated());
        assert_eq!(out[8], 0, "nothing written past the cap");
        // The output slice caps too.
        let mut small = [0u64; 3];
        let w = walk_stack(&regs, s.bounds(), 100, &mut small);
        assert_eq!(w, Walk { depth: 3, end: WalkEnd::Truncated });
    }

    #[test]
    fn exact_depth_is_not_truncated() {
        let (s, regs) = FakeStack::chain(3);
        let mut out = [0u64; 4];
        let w = walk_stack(&regs, s.bounds(), 4, &mut out);
        assert_eq!(w, Walk { depth: 4, end: WalkEnd::Complete });
    }

    #[test]
    fn cycle_terminates() {
        let mut s = FakeStack::new(32);
        let a = s.addr(4);
        let b = s.addr(8);
        s.record(4, b, 0x10);
        s.record(8, a, 0x20); // points back down: a cycle
        let regs = Registers { pc: 1, sp: s.addr(0), fp: a, lr: 0 };
        let mut out = [0u64; 128];
        let w = walk_stack(&regs, s.bounds(), 128, &mut out);
        assert_eq!(w, Walk { depth: 3, end: WalkEnd::BadFramePointer });
        // A self-loop too.
        s.record(4, a, 0x10);
        let w = walk_stack(&regs, s.bounds(), 128, &mut out);
        assert_eq!(w, Walk { depth: 2, end: WalkEnd::BadFramePointer });
    }

    #[test]
    fn misaligned_frame_pointer_stops() {
        let (s, mut regs) = FakeStack::chain(4);
        regs.fp += 3;
        let mut out = [0u64; 16];
        let w = walk_stack(&regs, s.bounds(), 16, &mut out);
        assert_eq!(w, Walk { depth: 1, end: WalkEnd::BadFramePointer });
    }

    #[test]
    fn out_of_bounds_frame_pointer_is_never_read() {
        let (mut s, regs) = FakeStack::chain(4);
        // Point the second record far away (would fault if dereferenced).
        let far = 0x10u64;
        s.words[8] = far;
        let mut out = [0u64; 16];
        let w = walk_stack(&regs, s.bounds(), 16, &mut out);
        assert_eq!(w, Walk { depth: 3, end: WalkEnd::BadFramePointer });
        // Initial fp outside bounds, both below and above.
        for fp in [s.bounds().lo - 16, s.bounds().hi, s.bounds().hi - 8, u64::MAX - 7] {
            let r = Registers { fp, ..regs };
            let w = walk_stack(&r, s.bounds(), 16, &mut out);
            assert_eq!(w, Walk { depth: 1, end: WalkEnd::BadFramePointer }, "fp {fp:#x}");
        }
    }

    #[test]
    fn frame_below_sp_is_rejected() {
        let (s, mut regs) = FakeStack::chain(4);
        regs.sp = s.addr(6); // above the first record at word 4
        let mut out = [0u64; 16];
        let w = walk_stack(&regs, s.bounds(), 16, &mut out);
        assert_eq!(w, Walk { depth: 1, end: WalkEnd::BadFramePointer });
    }

    #[test]
    fn zero_registers_record_nothing() {
        let s = FakeStack::new(8);
        let mut out = [0u64; 8];
        let w = walk_stack(&Registers::default(), s.bounds(), 8, &mut out);
        assert_eq!(w, Walk { depth: 0, end: WalkEnd::NoPc });
        // A pc with a zero fp is a one-frame stack.
        let r = Registers { pc: 5, ..Default::default() };
        assert_eq!(walk_stack(&r, s.bounds(), 8, &mut out), Walk { depth: 1, end: WalkEnd::Complete });
        // Zero depth or empty bounds.
        assert_eq!(walk_stack(&r, s.bounds(), 0, &mut out).depth, 0);
        let (s2, regs) = FakeStack::chain(3);
        drop(s2);
        let w = walk_stack(&regs, StackBounds::EMPTY, 8, &mut out);
        assert_eq!(w, Walk { depth: 1, end: WalkEnd::BadFramePointer });
    }

    #[test]
    fn zero_return_address_ends_chain() {
        let (mut s, regs) = FakeStack::chain(4);
        s.words[9] = 0; // return address of the second record
        let mut out = [0u64; 16];
        let w = walk_stack(&regs, s.bounds(), 16, &mut out);
        assert_eq!(w, Walk { depth: 2, end: WalkEnd::Complete });
    }

    #[test]
    fn record_straddling_the_top_is_rejected() {
        let mut s = FakeStack::new(8);
        let top = s.words.len();
        s.words[top - 1] = 0x99;
        let regs = Registers { pc: 1, sp: s.addr(0), fp: s.addr(top - 1), lr: 0 };
        let mut out = [0u64; 8];
        let w = walk_stack(&regs, s.bounds(), 8, &mut out);
        assert_eq!(w, Walk { depth: 1, end: WalkEnd::BadFramePointer });
    }

    #[test]
    fn pointer_tags_are_stripped() {
        let (mut s, mut regs) = FakeStack::chain(2);
        let tag = 0x002b_0000_0000_0000u64;
        s.words[5] |= tag; // signed return address
        s.words[4] |= tag; // signed saved fp
        regs.pc |= tag;
        regs.fp |= tag;
        let mut out = [0u64; 8];
        let w = walk_stack(&regs, s.bounds(), 8, &mut out);
        assert_eq!(w, Walk { depth: 3, end: WalkEnd::Complete });
        assert_eq!(&out[..3], &[0xabc, 0x1000, 0x1001]);
    }

    #[test]
    fn validate_frame_pointer_contract() {
        let (lo, hi) = (0x7fff_0000_0000u64, 0x7fff_0001_0000u64);
        assert!(validate_frame_pointer(0x7fff_0000_8000, lo, hi));
        assert!(!validate_frame_pointer(0x7fff_0002_0000, lo, hi));
        assert!(!validate_frame_pointer(0x7ffe_ffff_f000, lo, hi));
        assert!(!validate_frame_pointer(0x7fff_0000_8001, lo, hi));
        assert!(!validate_frame_pointer(hi - 8, lo, hi));
        assert!(validate_frame_pointer(hi - 16, lo, hi));
        assert!(!validate_frame_pointer(!7, lo, u64::MAX));
    }
}
