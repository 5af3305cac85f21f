//! A Mach-O image as the unwinder sees it: its `__TEXT` segment, with the
//! compact unwind table (`__unwind_info`), `__eh_frame` for the functions
//! the table defers to, and the code itself (framehop reads instructions
//! to tell a prologue or epilogue from a function body).
//!
//! Where the bytes come from is the caller's: a loaded image's sections
//! are read where dyld mapped them (file address + slide); a test reads
//! them from the file.

use std::ops::Range;

use framehop::ExplicitModuleSectionInfo;

use super::macho::UnwindSections;
use crate::sampler::unwind::{CodeModule, ImageBytes, ImagePin};

/// The unwinder's module for an image whose sections are `s` (file
/// addresses), loaded `slide` bytes from them. `bytes` gives the contents
/// of a file-address range, or None. A section whose bytes cannot be had is
/// left out; without `__TEXT` there is no module.
pub fn code_module(
    name: String,
    s: &UnwindSections,
    slide: u64,
    bytes: impl Fn(Range<u64>) -> Option<ImageBytes>,
    pin: Option<Box<dyn ImagePin>>,
) -> Option<CodeModule> {
    let segment = s.text_segment.clone().filter(|r| r.start < r.end)?;
    let text = segment.start.checked_add(slide)?..segment.end.checked_add(slide)?;
    // Sections are read only inside `__TEXT`, whose whole size is mapped;
    // a load command that says otherwise gets no bytes.
    let inside = |r: &Range<u64>| segment.start <= r.start && r.start <= r.end && r.end <= segment.end;
    let data = |r: &Option<Range<u64>>| r.clone().filter(inside).and_then(&bytes);
    let sections = ExplicitModuleSectionInfo {
        base_svma: segment.start,
        text_svma: s.text.clone(),
        text: data(&s.text),
        stubs_svma: s.stubs.clone(),
        stub_helper_svma: s.stub_helper.clone(),
        got_svma: s.got.clone(),
        unwind_info: data(&s.unwind_info),
        eh_frame_svma: s.eh_frame.clone(),
        eh_frame: data(&s.eh_frame),
        text_segment_svma: Some(segment.clone()),
        text_segment: bytes(segment),
        ..Default::default()
    };
    Some(CodeModule { name, base_avma: text.start, text, sections, pin })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mach::macho::parse_unwind_sections;

    use object::{Object, ObjectSegment, ObjectSymbol};

    /// A fixture dylib built by zig (`scripts/build-symbol-fixtures.sh`),
    /// kept for the test's life.
    fn fixture(arch: &str) -> &'static [u8] {
        let path =
            format!("{}/__test__/fixtures/symbols/macho/zig-{arch}/full/libfx.dylib", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")).leak()
    }

    /// The image as if loaded `slide` bytes above its file addresses: its
    /// unwinder module (bytes read from the file through its segments) and
    /// each named function's loaded address.
    fn load(file: &'static [u8], slide: u64) -> (CodeModule, impl Fn(&str) -> u64) {
        let sections = parse_unwind_sections(file).expect("sections");
        let obj = object::File::parse(file).expect("Mach-O");
        let segments: Vec<(u64, u64, u64)> =
            obj.segments().map(|s| (s.address(), s.file_range().0, s.file_range().1)).collect();
        let bytes = move |r: Range<u64>| -> Option<ImageBytes> {
            let &(addr, off, _) = segments.iter().find(|(a, _, n)| r.start >= *a && r.end <= a + n)?;
            let from = (off + r.start - addr) as usize;
            file.get(from..from + (r.end - r.start) as usize)
        };
        let module = code_module("libfx.dylib".into(), &sections, slide, bytes, None).expect("module");
        let symbols: Vec<(String, u64)> =
            obj.symbols().map(|s| (s.name().unwrap_or("").to_string(), s.address() + slide)).collect();
        let at = move |name: &str| symbols.iter().find(|(n, _)| n == name).map(|s| s.1).expect(name);
        (module, at)
    }

    /// As [`load`], for the fixture of `arch`; without its unwind tables
    /// unless `with_tables`.
    fn load_fixture(arch: &str, slide: u64, with_tables: bool) -> (CodeModule, impl Fn(&str) -> u64) {
        let (mut m, at) = load(fixture(arch), slide);
        if !with_tables {
            m.sections = ExplicitModuleSectionInfo { base_svma: m.sections.base_svma, ..Default::default() };
        }
        (m, at)
    }

    #[test]
    fn finds_the_unwind_sections_of_zig_built_dylibs() {
        for arch in ["arm64", "x86_64"] {
            let s = parse_unwind_sections(fixture(arch)).expect(arch);
            let seg = s.text_segment.clone().expect("__TEXT");
            for (what, r) in [("__text", &s.text), ("__unwind_info", &s.unwind_info)] {
                let r = r.clone().unwrap_or_else(|| panic!("{arch}: no {what}"));
                assert!(seg.start <= r.start && r.end <= seg.end && r.start < r.end, "{arch} {what}: {r:x?}");
            }
            assert!(s.got.is_some(), "{arch}: __got");
            let (m, _) = load(fixture(arch), 0x7000_0000);
            assert_eq!(m.text, seg.start + 0x7000_0000..seg.end + 0x7000_0000);
            assert_eq!(m.base_avma, m.text.start);
            let unwind = m.sections.unwind_info.expect("bytes of __unwind_info");
            assert_eq!(&unwind[..4], &1u32.to_le_bytes(), "{arch}: version 1 of the compact unwind table");
        }
    }

    #[test]
    fn malformed_commands_give_no_module() {
        let file = fixture("x86_64");
        assert!(parse_unwind_sections(&file[..40]).is_none());
        let mut cut = file.to_vec();
        cut[20..24].copy_from_slice(&u32::MAX.to_le_bytes()); // sizeofcmds
        assert!(parse_unwind_sections(&cut).is_none());
        let none = UnwindSections::default();
        assert!(code_module("x".into(), &none, 0, |_| None, None).is_none());
        let wraps = UnwindSections { text_segment: Some(0x1000..0x2000), ..Default::default() };
        assert!(code_module("x".into(), &wraps, u64::MAX - 0x1800, |_| None, None).is_none());
        // A section outside __TEXT is never read.
        let outside = UnwindSections {
            text_segment: Some(0x1000..0x2000),
            unwind_info: Some(0x1f00..0x2100),
            eh_frame: Some(0x1100..0x1200),
            ..Default::default()
        };
        let asked = std::cell::RefCell::new(Vec::new());
        let m = code_module(
            "x".into(),
            &outside,
            0,
            |r| {
                asked.borrow_mut().push(r);
                None
            },
            None,
        )
        .expect("module");
        assert!(m.sections.unwind_info.is_none());
        assert_eq!(*asked.borrow(), [0x1100..0x1200, 0x1000..0x2000], "only __eh_frame and __TEXT itself");
    }

    /// x86_64, through the sampler's own unwinder: stopped on the first
    /// instruction of `local_beta` (before its `push rbp`), called from
    /// `exported_alpha`, called from `exported_delta`, the thread's first
    /// function. Only the compact unwind table and the code (prologue
    /// analysis) place the return address at `[rsp]`; a frame-pointer
    /// walk from rbp skips `exported_alpha`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn unwinds_a_zig_built_x86_64_dylib_by_its_compact_unwind_table() {
        use crate::sampler::unwind::{StackCopy, StackEnd, Unwinder, Unwound};
        use crate::sampler::walker::Registers;

        let slide = 0x5_0000_0000;
        let unwind = |with_tables: bool| {
            let (m, at) = load_fixture("x86_64", slide, with_tables);
            let (beta, alpha, delta) = (at("_local_beta"), at("_exported_alpha"), at("_exported_delta"));
            // Return addresses: after each `call` (5 bytes, at +4).
            let (in_alpha, in_delta) = (alpha + 9, delta + 9);
            let sp = 0x7ff0_0000_1000u64;
            let words = [in_alpha, sp + 24, in_delta, 0, 0];
            let mut u = Unwinder::default();
            u.add_module(m);
            let mut out = Unwound::default();
            let regs = Registers { pc: beta, sp, fp: sp + 8, lr: 0 };
            let end = u.unwind(regs, &StackCopy::whole(sp, &words), 64, &mut out);
            (end, out.frames, [beta, in_alpha, in_delta])
        };
        let (end, frames, want) = unwind(true);
        assert_eq!((end, frames.as_slice()), (StackEnd::Root, &want[..]));
        let (_, frames, want) = unwind(false);
        assert_eq!(frames, [want[0], want[2]], "without the tables the walk skips the caller");
    }

    /// arm64, through framehop's arm64 unwinder (this host's is x86_64):
    /// stopped in `local_beta`, a frameless leaf whose caller is only in
    /// `lr`, called from `exported_alpha`, whose frame record leads to
    /// `exported_delta`.
    #[test]
    fn unwinds_a_zig_built_arm64_dylib_by_its_compact_unwind_table() {
        use crate::sampler::unwind::StackCopy;
        use framehop::aarch64::{CacheAarch64, UnwindRegsAarch64, UnwinderAarch64};
        use framehop::{FrameAddress, Module, Unwinder as _};

        let slide = 0x1_2000_0000;
        let unwind = |with_tables: bool| {
            let (m, at) = load_fixture("arm64", slide, with_tables);
            let (beta, alpha, delta) = (at("_local_beta"), at("_exported_alpha"), at("_exported_delta"));
            // Return addresses: after each `bl` (at +8).
            let (in_alpha, in_delta) = (alpha + 0xc, delta + 0xc);
            let sp = 0x16f0_0000u64;
            // exported_alpha's record at sp: (fp, lr) of exported_delta's
            // frame; exported_delta's record above it ends the chain.
            let words = [sp + 16, in_delta, 0, 0];
            let mut u: UnwinderAarch64<ImageBytes> = UnwinderAarch64::new();
            u.add_module(Module::new(m.name, m.text, m.base_avma, m.sections));
            let mut cache: CacheAarch64 = CacheAarch64::new();
            let mut regs = UnwindRegsAarch64::new(in_alpha, sp, sp);
            let mut read = |a: u64| StackCopy::whole(sp, &words).read(a).ok_or(());
            let mut frames = vec![beta + 8];
            let mut address = FrameAddress::from_instruction_pointer(beta + 8);
            while frames.len() < 16 {
                match u.unwind_frame(address, &mut regs, &mut cache, &mut read) {
                    Ok(Some(ra)) if ra != 0 => {
                        frames.push(ra);
                        address = FrameAddress::from_return_address(ra).expect("return address");
                    }
                    _ => break,
                }
            }
            (frames, [beta + 8, in_alpha, in_delta])
        };
        let (frames, want) = unwind(true);
        assert_eq!(frames, want);
        let (frames, want) = unwind(false);
        assert_eq!(frames, [want[0], want[2]], "without the tables the walk skips the caller in lr");
    }
}
