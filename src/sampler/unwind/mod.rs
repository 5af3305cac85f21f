//! Unwinding a stack copied in the stopped window, on the sampler thread
//! after the thread has resumed.
//!
//! framehop does the work: it follows each module's CFI (`.eh_frame`, Mach-O
//! `__unwind_info`) and falls back to frame pointers where there is none,
//! which is right for V8's JIT code. Around it, [`Unwinder::unwind`] adds
//! what a profiler of foreign code needs:
//! - every read comes from the copy ([`StackCopy::read`]), so a corrupt
//!   stack or garbage CFI can only end the stack, never read elsewhere;
//! - the stack pointer must rise at every step after the first, so a
//!   cyclic chain ends, and the depth is capped;
//! - a return address outside every executable region ends the stack and
//!   is never recorded ([`StackEnd::NotExecutable`]);
//! - a first frame in code that keeps frame pointers but has no CFI (V8's
//!   builtins inside node's text) is unwound by its frame pointer;
//! - a frame whose CFA is a DWARF expression that reads memory (OpenSSL's
//!   assembly), which framehop leaves, is stepped by [`cfa_expression`];
//! - why each stack ended is reported ([`StackEnd`]).

mod cfa_expression;
mod code;
mod copy;
mod known_stack;
pub mod large_frames;
mod place;

pub use code::{CodeMap, CodeModule, ImageBytes, ImagePin, RangeSet};
pub use copy::{frame_records_above, outermost_record, Hole, StackCopy, TailRecord, TAIL_WORDS_BELOW};
pub use known_stack::{copy_end_at_root, lesson, record_fingerprint, Lesson};

use std::ops::Range;

use framehop::{CacheNative, Error, FrameAddress, MayAllocateDuringUnwind, Module, Unwinder as _, UnwinderNative};

use super::addr_memo::AddrMemo;
use super::walker::Registers;
use code::ModuleEntry;
use place::Place;

/// Why a stack's frames ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackEnd {
    /// The thread's first frame was reached (CFI says the return address
    /// is undefined, or the frame pointer chain ends at zero).
    Root,
    /// `maxStackDepth` frames were recorded and there were more.
    DepthLimit,
    /// The unwinder needed a word above the copy, which was cut at its
    /// bound, or one the copy skipped.
    TruncatedCopy,
    /// The failing step was in code without unwind information, where the
    /// frame-pointer fallback failed too.
    NoUnwindInfo,
    /// The CFA or frame pointer pointed outside the copy, or the stack
    /// pointer did not rise, in code that had unwind information.
    BadCfa,
    /// A return address lay in no executable region: garbage, not a frame.
    NotExecutable,
    /// The stack could not be copied (it was unreadable, or there was no
    /// free buffer); the sample has the interrupted pc only.
    CopyFailed,
    /// The pc was zero: nothing was recorded.
    NoPc,
}

impl StackEnd {
    pub const ALL: [StackEnd; 8] = [
        StackEnd::Root,
        StackEnd::DepthLimit,
        StackEnd::TruncatedCopy,
        StackEnd::NoUnwindInfo,
        StackEnd::BadCfa,
        StackEnd::NotExecutable,
        StackEnd::CopyFailed,
        StackEnd::NoPc,
    ];
}

/// The result of one unwind: frames leaf first (the pc, then return
/// addresses), and for each frame the frame pointer of the function it is
/// in (V8 keeps per-frame data below it).
#[derive(Debug, Default)]
pub struct Unwound {
    pub frames: Vec<u64>,
    pub fps: Vec<u64>,
    /// The highest stack address the unwind read a word from (0 if none).
    pub highest_read: u64,
}

/// Unwinds copied stacks of this process. Lives on the sampler thread.
pub struct Unwinder {
    inner: UnwinderNative<ImageBytes, MayAllocateDuringUnwind>,
    cache: CacheNative<MayAllocateDuringUnwind>,
    code: CodeMap,
    /// Recent answers of `Place::of` (see `place`).
    places: AddrMemo<Place>,
    /// arm64: the bits of a code pointer that are address, not signature.
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    address_mask: u64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self::new(u64::MAX)
    }
}

impl Unwinder {
    /// `address_mask` strips pointer-authentication bits from return
    /// addresses (arm64); `u64::MAX` where there are none.
    pub fn new(address_mask: u64) -> Self {
        Unwinder {
            inner: UnwinderNative::new(),
            cache: CacheNative::new(),
            code: CodeMap::default(),
            places: AddrMemo::new(10, Place::Nowhere),
            address_mask,
        }
    }

    /// Adds a module, unless one with the same text start is known.
    pub fn add_module(&mut self, mut m: CodeModule) {
        if m.text.start >= m.text.end || self.code.module(m.text.start).is_some() {
            return;
        }
        let entry = ModuleEntry::new(&mut m);
        self.inner.add_module(Module::new(m.name, m.text, m.base_avma, m.sections));
        self.code.insert_module(entry);
        self.places.clear();
    }

    pub fn has_module_at(&self, addr: u64) -> bool {
        self.code.module(addr).is_some()
    }

    /// Whether some module's text overlaps `range`.
    pub fn has_module_in(&self, range: Range<u64>) -> bool {
        self.code.module_in(range).is_some()
    }

    /// Sets the executable regions outside modules (JIT code).
    pub fn set_jit_regions(&mut self, regions: Vec<Range<u64>>) {
        self.code.jit = RangeSet::new(regions);
        self.places.clear();
    }

    fn place(&self, addr: u64) -> Place {
        self.places.get_or(addr, || Place::of(&self.code, addr))
    }

    /// Whether `addr` is in executable memory outside any module.
    pub fn in_jit(&self, addr: u64) -> bool {
        self.place(addr) == Place::Jit
    }

    /// Sets the code that keeps frame pointers without unwind information.
    pub fn set_frame_pointer_code(&mut self, ranges: Vec<Range<u64>>) {
        self.code.frame_pointer_code = RangeSet::new(ranges);
    }

    pub fn code(&self) -> &CodeMap {
        &self.code
    }

    /// Unwinds `copy` from `regs`, at most `max_depth` frames, into `out`.
    pub fn unwind(&mut self, regs: Registers, copy: &StackCopy<'_>, max_depth: usize, out: &mut Unwound) -> StackEnd {
        out.frames.clear();
        out.fps.clear();
        out.highest_read = 0;
        if regs.pc == 0 {
            return StackEnd::NoPc;
        }
        let highest = std::cell::Cell::new(0);
        let mut read = |a: u64| {
            let w = copy.read(a).ok_or(())?;
            highest.set(highest.get().max(a));
            Ok(w)
        };
        let end = self.steps(regs, copy, max_depth, out, &mut read);
        out.highest_read = highest.get();
        end
    }

    fn steps(
        &mut self,
        regs: Registers,
        copy: &StackCopy<'_>,
        max_depth: usize,
        out: &mut Unwound,
        mut read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> StackEnd {
        out.frames.push(regs.pc);
        out.fps.push(regs.fp);
        let mut state = arch::regs(regs, self.address_mask);
        let mut address = FrameAddress::from_instruction_pointer(regs.pc);
        loop {
            if out.frames.len() >= max_depth {
                return StackEnd::DepthLimit;
            }
            let lookup = address.address_for_lookup();
            let first = !address.is_return_address();
            let sp_before = arch::sp(&state);
            // Code outside modules (JIT code) has no unwind information:
            // framehop would walk its frame pointer too, but through its
            // rule cache, where each distinct JIT address takes a slot and
            // evicts a module's rule, which then costs a DWARF parse again.
            let module = match self.place(lookup) {
                Place::Module(i) => self.code.module_at(i as usize),
                _ => None,
            };
            let mut step = if (first && self.code.keeps_frame_pointers(lookup)) || module.is_none() {
                arch::frame_pointer_step(&mut state, &mut read)
            } else {
                self.inner.unwind_frame(address, &mut state, &mut self.cache, &mut read)
            };
            if matches!(step, Err(ref e) if !matches!(e, Error::CouldNotReadStack(_))) {
                if let Some(s) = module.and_then(|m| m.cfi_step(lookup, arch::step_regs(&state), &mut read)) {
                    arch::apply(&mut state, s.sp, s.fp, s.ra);
                    step = Ok(s.ra);
                }
            }
            match step {
                Ok(None) | Ok(Some(0)) | Err(Error::ReturnAddressIsNull) => return StackEnd::Root,
                Ok(Some(ra)) => {
                    let ra = arch::strip(ra, self.address_mask);
                    if !first && arch::sp(&state) <= sp_before {
                        return self.failed(lookup, copy, None);
                    }
                    if !self.place(ra.wrapping_sub(1)).is_executable() {
                        return StackEnd::NotExecutable;
                    }
                    let Some(next) = FrameAddress::from_return_address(ra) else { return StackEnd::Root };
                    address = next;
                    out.frames.push(ra);
                    out.fps.push(arch::fp(&state));
                }
                Err(Error::CouldNotReadStack(at)) => return self.failed(lookup, copy, Some(at)),
                Err(_) => return self.failed(lookup, copy, None),
            }
        }
    }

    /// Why a step at `lookup` failed; `unread` is the address it could not
    /// read, if that was the cause.
    fn failed(&self, lookup: u64, copy: &StackCopy<'_>, unread: Option<u64>) -> StackEnd {
        if unread.is_some_and(|a| (a >= copy.end() && copy.truncated) || copy.in_hole(a)) {
            return StackEnd::TruncatedCopy;
        }
        if self.code.has_cfi(lookup) {
            StackEnd::BadCfa
        } else {
            StackEnd::NoUnwindInfo
        }
    }

    /// How often framehop's rule cache answered.
    pub fn cache_stats(&self) -> framehop::CacheStats {
        self.cache.stats()
    }
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use framehop::x86_64::UnwindRegsX86_64 as Regs;
    use framehop::Error;

    use super::cfa_expression::StepRegs;

    use crate::sampler::walker::Registers;

    pub fn regs(r: Registers, _mask: u64) -> Regs {
        Regs::new(r.pc, r.sp, r.fp)
    }
    pub fn sp(r: &Regs) -> u64 {
        r.sp()
    }
    pub fn fp(r: &Regs) -> u64 {
        r.bp()
    }
    pub fn strip(a: u64, _mask: u64) -> u64 {
        a
    }

    /// The registers a CFI step can use, with their DWARF numbers.
    pub fn step_regs(r: &Regs) -> StepRegs {
        StepRegs { sp: r.sp(), fp: r.bp(), sp_reg: 7, fp_reg: 6, ra_reg: 16 }
    }

    pub fn apply(r: &mut Regs, sp: u64, fp: u64, ra: Option<u64>) {
        r.set_sp(sp);
        r.set_bp(fp);
        if let Some(ra) = ra {
            r.set_ip(ra);
        }
    }

    /// One frame-pointer step: `[bp]` is the caller's bp, `[bp + 8]` the
    /// return address.
    pub fn frame_pointer_step(
        r: &mut Regs,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Option<u64>, Error> {
        let bp = r.bp();
        if bp == 0 {
            return Ok(None);
        }
        let new_sp = bp.checked_add(16).ok_or(Error::IntegerOverflow)?;
        if new_sp <= r.sp() {
            return Err(Error::FramepointerUnwindingMovedBackwards);
        }
        let new_bp = read(bp).map_err(|_| Error::CouldNotReadStack(bp))?;
        let ra = read(bp + 8).map_err(|_| Error::CouldNotReadStack(bp + 8))?;
        r.set_sp(new_sp);
        r.set_bp(new_bp);
        Ok(Some(ra))
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use framehop::aarch64::{PtrAuthMask, UnwindRegsAarch64 as Regs};
    use framehop::Error;

    use super::cfa_expression::StepRegs;

    use crate::sampler::walker::Registers;

    pub fn regs(r: Registers, mask: u64) -> Regs {
        Regs::new_with_ptr_auth_mask(PtrAuthMask(mask), r.lr, r.sp, r.fp)
    }
    pub fn sp(r: &Regs) -> u64 {
        r.sp()
    }
    pub fn fp(r: &Regs) -> u64 {
        r.fp()
    }
    pub fn strip(a: u64, mask: u64) -> u64 {
        a & mask
    }

    /// The registers a CFI step can use, with their DWARF numbers.
    pub fn step_regs(r: &Regs) -> StepRegs {
        StepRegs { sp: r.sp(), fp: r.fp(), sp_reg: 31, fp_reg: 29, ra_reg: 30 }
    }

    pub fn apply(r: &mut Regs, sp: u64, fp: u64, ra: Option<u64>) {
        r.set_sp(sp);
        r.set_fp(fp);
        if let Some(ra) = ra {
            r.set_lr(ra);
        }
    }

    /// One frame-pointer step: `[fp]` is the caller's fp, `[fp + 8]` the
    /// return address (signed on arm64e).
    pub fn frame_pointer_step(
        r: &mut Regs,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Option<u64>, Error> {
        let fp = r.fp();
        if fp == 0 {
            return Ok(None);
        }
        let new_sp = fp.checked_add(16).ok_or(Error::IntegerOverflow)?;
        if new_sp <= r.sp() {
            return Err(Error::FramepointerUnwindingMovedBackwards);
        }
        let new_fp = read(fp).map_err(|_| Error::CouldNotReadStack(fp))?;
        let ra = read(fp + 8).map_err(|_| Error::CouldNotReadStack(fp + 8))?;
        r.set_sp(new_sp);
        r.set_fp(new_fp);
        r.set_lr(ra);
        Ok(Some(r.lr_mask().strip_ptr_auth(ra)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JIT frames are walked by their frame pointers without framehop's
    /// rule cache, which is left to the modules' rules.
    #[test]
    fn jit_frames_are_walked_without_the_rule_cache() {
        let jit = 0x7f00_0000_0000..0x7f00_0001_0000;
        let mut u = Unwinder::default();
        u.set_jit_regions(vec![jit.clone()]);
        // Records at 0x1010 -> 0x1030 (saved fp 0: the root), each
        // returning into JIT code.
        let mut words = [0u64; 8];
        words[2] = 0x1030;
        words[3] = jit.start + 0x2000;
        words[7] = jit.start + 0x3000;
        let copy = StackCopy::whole(0x1000, &words);
        let regs = Registers { pc: jit.start + 0x1000, sp: 0x1000, fp: 0x1010, lr: 0 };
        let mut out = Unwound::default();
        assert_eq!(u.unwind(regs, &copy, 64, &mut out), StackEnd::Root);
        assert_eq!(out.frames, vec![jit.start + 0x1000, jit.start + 0x2000, jit.start + 0x3000]);
        let c = u.cache_stats();
        let lookups = c.hit_count + c.miss_empty_slot_count + c.miss_wrong_modules_count + c.miss_wrong_address_count;
        assert_eq!(lookups, 0, "{c:?}");
    }
}
