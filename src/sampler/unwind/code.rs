//! The code of the process as the unwinder sees it: modules with their
//! unwind information, executable regions without any (JIT code), and
//! ranges of code known to keep frame pointers although it has no unwind
//! information (V8's builtins).
//!
//! A module's section bytes are read in place, where the image is mapped.
//! Each [`CodeModule`] may carry a pin that keeps its image mapped (on
//! Linux a `dlopen` reference) for as long as the unwinder holds it.

use std::ops::Range;

use framehop::ExplicitModuleSectionInfo;
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};

/// Section bytes inside a mapped image.
pub type ImageBytes = &'static [u8];

/// Keeps a module's image mapped while held.
pub trait ImagePin: Send + Sync {}

/// One loaded image, ready for the unwinder.
pub struct CodeModule {
    pub name: String,
    /// Its executable code, in process addresses.
    pub text: Range<u64>,
    /// The process address of the image's base (Mach-O: its header; ELF:
    /// the load bias).
    pub base_avma: u64,
    /// Its unwind sections, at their addresses in the image file (SVMAs).
    pub sections: ExplicitModuleSectionInfo<ImageBytes>,
    /// Keeps the bytes above mapped; `None` for images that are never
    /// unloaded (the executable, the vDSO).
    pub pin: Option<Box<dyn ImagePin>>,
}

impl std::fmt::Debug for CodeModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModule").field("name", &self.name).field("text", &self.text).finish()
    }
}

/// What is needed later about a module: where it is, and how to tell
/// whether an address in it is covered by unwind information.
pub(crate) struct ModuleEntry {
    pub name: String,
    pub text: Range<u64>,
    cover: Coverage,
    _pin: Option<Box<dyn ImagePin>>,
}

enum Coverage {
    /// No unwind information at all.
    None,
    /// ELF `.eh_frame_hdr` and `.eh_frame`, at these process addresses.
    EhFrame { hdr: ImageBytes, hdr_avma: u64, frame: ImageBytes, frame_avma: u64 },
    /// Mach-O `__unwind_info`, its function offsets from the image's
    /// header at `base_avma`. An entry whose encoding is 0 says "no
    /// information" (hand-written assembly): not covered.
    UnwindInfo { data: ImageBytes, base_avma: u64 },
    /// `.eh_frame` without a search table, or `.debug_frame`.
    Whole,
}

impl ModuleEntry {
    pub(crate) fn new(m: &mut CodeModule) -> Self {
        let s = &m.sections;
        let bias = m.base_avma.wrapping_sub(s.base_svma);
        let cover = match (&s.eh_frame_hdr, &s.eh_frame_hdr_svma, &s.eh_frame, &s.eh_frame_svma) {
            _ if s.unwind_info.is_some() => {
                Coverage::UnwindInfo { data: s.unwind_info.unwrap_or_default(), base_avma: m.base_avma }
            }
            (Some(hdr), Some(hdr_svma), Some(frame), Some(frame_svma)) => Coverage::EhFrame {
                hdr,
                hdr_avma: hdr_svma.start.wrapping_add(bias),
                frame,
                frame_avma: frame_svma.start.wrapping_add(bias),
            },
            _ if s.eh_frame.is_some() || s.debug_frame.is_some() => Coverage::Whole,
            _ => Coverage::None,
        };
        // A search table that points outside `.eh_frame` is corrupt, and
        // gimli's lookups would compute offsets that overflow: the module
        // is unwound as if it had no unwind information.
        let cover = match cover {
            Coverage::EhFrame { hdr, hdr_avma, frame, frame_avma }
                if !eh_frame_table_is_sound(hdr, hdr_avma, frame, frame_avma) =>
            {
                let s = &mut m.sections;
                (s.eh_frame_hdr, s.eh_frame_hdr_svma, s.eh_frame, s.eh_frame_svma) = (None, None, None, None);
                Coverage::None
            }
            c => c,
        };
        ModuleEntry { name: m.name.clone(), text: m.text.clone(), cover, _pin: m.pin.take() }
    }

    /// Whether unwind information covers `addr` (a lookup address in this
    /// module's text).
    pub(crate) fn has_cfi(&self, addr: u64) -> bool {
        match self.cover {
            Coverage::None => false,
            Coverage::Whole => true,
            Coverage::UnwindInfo { data, base_avma } => {
                let Ok(offset) = u32::try_from(addr.wrapping_sub(base_avma)) else { return false };
                let found = macho_unwind_info::UnwindInfo::parse(data).and_then(|info| info.lookup(offset));
                matches!(found, Ok(Some(f)) if f.opcode != 0)
            }
            Coverage::EhFrame { hdr, hdr_avma, frame, frame_avma } => {
                let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_avma).set_eh_frame(frame_avma);
                let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else { return false };
                let Some(table) = parsed.table() else { return false };
                let eh_frame = EhFrame::new(frame, LittleEndian);
                table.fde_for_address(&eh_frame, &bases, addr, EhFrame::cie_from_offset).is_ok()
            }
        }
    }
}

impl ModuleEntry {
    /// One step at `lookup` by [`super::cfa_expression`], for a frame
    /// framehop could not unwind; ELF `.eh_frame` only.
    pub(crate) fn cfi_step(
        &self,
        lookup: u64,
        regs: super::cfa_expression::StepRegs,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<super::cfa_expression::Step> {
        match self.cover {
            Coverage::EhFrame { hdr, hdr_avma, frame, frame_avma } => {
                super::cfa_expression::step(hdr, hdr_avma, frame, frame_avma, lookup, regs, read)
            }
            _ => None,
        }
    }
}

/// Whether `.eh_frame_hdr` names `.eh_frame` where it is, and every entry
/// of its search table points inside it.
fn eh_frame_table_is_sound(hdr: ImageBytes, hdr_avma: u64, frame: ImageBytes, frame_avma: u64) -> bool {
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_avma).set_eh_frame(frame_avma);
    let Ok(parsed) = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else { return false };
    if parsed.eh_frame_ptr().direct().ok() != Some(frame_avma) {
        return false;
    }
    let Some(table) = parsed.table() else { return true };
    let end = frame_avma.saturating_add(frame.len() as u64);
    let mut entries = table.iter(&bases);
    loop {
        match entries.next() {
            Ok(Some((_, fde))) => match fde.direct() {
                Ok(p) if (frame_avma..end).contains(&p) => {}
                _ => return false,
            },
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

/// Sorted, non-overlapping address ranges.
#[derive(Clone, Debug, Default)]
pub struct RangeSet {
    ranges: Vec<Range<u64>>,
}

impl RangeSet {
    pub fn new(mut ranges: Vec<Range<u64>>) -> Self {
        ranges.retain(|r| r.start < r.end);
        ranges.sort_unstable_by_key(|r| r.start);
        let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match out.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        RangeSet { ranges: out }
    }

    pub fn contains(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= addr);
        self.ranges.get(i).is_some_and(|r| r.start <= addr)
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// Everything the unwinder knows about code addresses.
#[derive(Default)]
pub struct CodeMap {
    /// Sorted by `text.start`.
    modules: Vec<ModuleEntry>,
    /// `modules[i].text`, by the same index: lookups, one per frame, search
    /// these 16-byte entries instead of the modules' larger ones (fewer
    /// cache lines touched).
    texts: Vec<Range<u64>>,
    /// Executable memory outside any module (JIT code).
    pub(crate) jit: RangeSet,
    /// Code with no unwind information that keeps frame pointers.
    pub(crate) frame_pointer_code: RangeSet,
}

impl CodeMap {
    pub(crate) fn module(&self, addr: u64) -> Option<&ModuleEntry> {
        self.module_index(addr).and_then(|i| self.modules.get(i))
    }

    /// The index of the module holding `addr`, for [`CodeMap::module_at`].
    pub(crate) fn module_index(&self, addr: u64) -> Option<usize> {
        let i = self.texts.partition_point(|t| t.end <= addr);
        self.texts.get(i).filter(|t| t.start <= addr).map(|_| i)
    }

    pub(crate) fn module_at(&self, index: usize) -> Option<&ModuleEntry> {
        self.modules.get(index)
    }

    /// The first module whose text overlaps `range`.
    pub(crate) fn module_in(&self, range: Range<u64>) -> Option<&ModuleEntry> {
        let i = self.texts.partition_point(|t| t.end <= range.start);
        self.texts.get(i).filter(|t| t.start < range.end).and_then(|_| self.modules.get(i))
    }

    /// Adds a module in text order.
    pub(crate) fn insert_module(&mut self, entry: ModuleEntry) {
        let at = self.texts.partition_point(|t| t.start < entry.text.start);
        self.texts.insert(at, entry.text.clone());
        self.modules.insert(at, entry);
    }

    /// Whether `addr` lies in code: a module's text or JIT code.
    pub fn is_executable(&self, addr: u64) -> bool {
        self.module(addr).is_some() || self.jit.contains(addr)
    }

    /// Whether `addr` is in code known to keep frame pointers without unwind
    /// information.
    pub fn keeps_frame_pointers(&self, addr: u64) -> bool {
        self.frame_pointer_code.contains(addr)
    }

    /// Whether unwind information covers `addr`.
    pub fn has_cfi(&self, addr: u64) -> bool {
        !self.keeps_frame_pointers(addr) && self.module(addr).is_some_and(|m| m.has_cfi(addr))
    }

    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// The name of the module holding `addr`.
    pub fn module_name(&self, addr: u64) -> Option<&str> {
        self.module(addr).map(|m| m.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Mach-O `__unwind_info` with one regular second-level page: each
    /// function's offset from the image's header and its encoding.
    fn unwind_info(functions: &[(u32, u32)]) -> &'static [u8] {
        let mut v = Vec::new();
        let w = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
        // Header: version, no common encodings, no personalities, the index
        // at 28, two index entries (the last is the end sentinel).
        for x in [1, 28, 0, 28, 0, 28, 2] {
            w(&mut v, x);
        }
        let page = 28 + 2 * 12;
        let end = functions.last().map_or(0, |f| f.0) + 0x100;
        for (offset, second) in [(functions[0].0, page), (end, 0)] {
            for x in [offset, second, 0] {
                w(&mut v, x);
            }
        }
        // Regular page: kind 2, then u16 entries offset 8 and u16 count.
        w(&mut v, 2);
        w(&mut v, 8 | ((functions.len() as u32) << 16));
        for &(offset, encoding) in functions {
            w(&mut v, offset);
            w(&mut v, encoding);
        }
        Box::leak(v.into_boxed_slice())
    }

    #[test]
    fn mach_o_code_with_encoding_zero_has_no_unwind_information() {
        // Frame-based (x86_64 RBP frame, arm64 FRAME) at 0x1000, "none" at
        // 0x2000 (hand-written assembly), frame-based again at 0x3000.
        let info = unwind_info(&[(0x1000, 0x0100_0000), (0x2000, 0), (0x3000, 0x0400_0000)]);
        let base = 0x1_0000_0000u64;
        let sections = ExplicitModuleSectionInfo { unwind_info: Some(info), ..Default::default() };
        let mut m = CodeModule { name: "lib".into(), text: base..base + 0x4000, base_avma: base, sections, pin: None };
        let e = ModuleEntry::new(&mut m);
        assert!(e.has_cfi(base + 0x1010));
        assert!(!e.has_cfi(base + 0x2010), "encoding 0: no information");
        assert!(e.has_cfi(base + 0x3010));
        assert!(!e.has_cfi(base + 0x10), "before the first function");
        assert!(!e.has_cfi(base.wrapping_sub(8)) && !e.has_cfi(base + (1 << 33)), "outside the image");
    }

    #[test]
    fn range_set_merges_and_finds() {
        let s = RangeSet::new(vec![30..40, 10..20, 15..25, 50..50, 40..45]);
        assert!(!s.contains(9));
        assert!(s.contains(10) && s.contains(24) && !s.contains(25));
        assert!(s.contains(30) && s.contains(44) && !s.contains(45));
        assert!(!s.contains(50), "empty ranges are dropped");
        assert!(RangeSet::default().is_empty() && !RangeSet::default().contains(0));
    }
}
