//! Mach-O load commands: the address range and LC_UUID of a loaded image,
//! for the module list, and where its code and unwind sections are, for
//! the unwinder.

use std::ops::Range;

pub const MH_MAGIC_64: u32 = 0xfeed_facf;
pub const MACH_HEADER_64_SIZE: usize = 32;
pub const LC_SEGMENT_64: u32 = 0x19;
pub const LC_UUID: u32 = 0x1b;

/// What the module list needs from an image's load commands, in the file's
/// (unslid) addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachImage {
    /// Lowest and highest address of its mapped segments. `__PAGEZERO`
    /// (no access) and `__LINKEDIT` (shared by every image in the dyld
    /// shared cache, so it would make their ranges overlap) are left out.
    pub start: u64,
    pub end: u64,
    pub uuid: Option<[u8; 16]>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The size of the header plus load commands, from a 64-bit Mach-O header.
pub fn macho_commands_len(header: &[u8]) -> Option<usize> {
    if u32_at(header, 0)? != MH_MAGIC_64 {
        return None;
    }
    let commands = u32_at(header, 20)? as usize;
    // Far beyond any real image's (tens of KiB): a header torn or reused
    // while being read must not size a copy of gigabytes.
    (commands <= MAX_COMMANDS_BYTES).then_some(MACH_HEADER_64_SIZE + commands)
}

/// The most load-command bytes an image is taken to have.
const MAX_COMMANDS_BYTES: usize = 16 << 20;

/// Calls `f(cmd, body)` for each load command of a 64-bit little-endian
/// Mach-O image (`body` includes the command's own 8-byte head). None if
/// the commands are malformed.
fn each_command(bytes: &[u8], mut f: impl FnMut(u32, &[u8]) -> Option<()>) -> Option<()> {
    let total = macho_commands_len(bytes)?;
    let ncmds = u32_at(bytes, 16)?;
    let cmds = bytes.get(MACH_HEADER_64_SIZE..total)?;
    let mut at = 0usize;
    for _ in 0..ncmds {
        let cmd = u32_at(cmds, at)?;
        let size = u32_at(cmds, at.checked_add(4)?)? as usize;
        if size < 8 {
            return None;
        }
        f(cmd, cmds.get(at..at.checked_add(size)?)?)?;
        at += size;
    }
    Some(())
}

/// A segment command's name (NUL-padded to 16 bytes).
fn name16(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// Parses the header and load commands of a 64-bit little-endian Mach-O
/// image. `bytes` must start at the header and hold `macho_commands_len`.
pub fn parse_macho(bytes: &[u8]) -> Option<MachImage> {
    let mut image = MachImage { start: u64::MAX, end: 0, uuid: None };
    each_command(bytes, |cmd, body| {
        if cmd == LC_SEGMENT_64 {
            let name = name16(body.get(8..24)?);
            let (vmaddr, vmsize) = (u64_at(body, 24)?, u64_at(body, 32)?);
            if name != b"__PAGEZERO" && name != b"__LINKEDIT" && vmsize > 0 {
                image.start = image.start.min(vmaddr);
                image.end = image.end.max(vmaddr.saturating_add(vmsize));
            }
        } else if cmd == LC_UUID {
            image.uuid = body.get(8..24)?.try_into().ok();
        }
        Some(())
    })?;
    (image.start < image.end).then_some(image)
}

const MH_EXECUTE: u32 = 2;
/// `MH_DYLIB_IN_CACHE`: the image lies in the dyld shared cache.
const MH_DYLIB_IN_CACHE: u32 = 0x8000_0000;

/// Whether an image, by its 64-bit Mach-O header, can never be unloaded:
/// the main executable, or an image of the dyld shared cache.
pub fn never_unloaded(header: &[u8]) -> bool {
    let (Some(filetype), Some(flags)) = (u32_at(header, 12), u32_at(header, 24)) else { return false };
    filetype == MH_EXECUTE || flags & MH_DYLIB_IN_CACHE != 0
}

/// Where an image's code and unwind information are, in the file's
/// (unslid) addresses: what the unwinder reads of a loaded image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindSections {
    /// The `__TEXT` segment: the header, the code, and (in `__TEXT`)
    /// `__unwind_info` and `__eh_frame`.
    pub text_segment: Option<Range<u64>>,
    pub text: Option<Range<u64>>,
    pub stubs: Option<Range<u64>>,
    pub stub_helper: Option<Range<u64>>,
    pub unwind_info: Option<Range<u64>>,
    pub eh_frame: Option<Range<u64>>,
    pub got: Option<Range<u64>>,
}

/// The sections the unwinder uses, from the header and load commands of a
/// 64-bit little-endian Mach-O image. Ranges that overflow are left out;
/// None if the commands are malformed or there is no `__TEXT` segment.
pub fn parse_unwind_sections(bytes: &[u8]) -> Option<UnwindSections> {
    const SEGMENT_HEAD: usize = 72;
    const SECTION_SIZE: usize = 80;
    let mut out = UnwindSections::default();
    each_command(bytes, |cmd, body| {
        if cmd != LC_SEGMENT_64 {
            return Some(());
        }
        let segment = name16(body.get(8..24)?);
        let range = |addr: u64, size: u64| addr.checked_add(size).map(|end| addr..end);
        if segment == b"__TEXT" {
            out.text_segment = range(u64_at(body, 24)?, u64_at(body, 32)?);
        }
        let nsects = u32_at(body, 64)? as usize;
        for i in 0..nsects {
            let at = SEGMENT_HEAD.checked_add(i.checked_mul(SECTION_SIZE)?)?;
            let section = body.get(at..at.checked_add(SECTION_SIZE)?)?;
            let r = range(u64_at(section, 32)?, u64_at(section, 40)?);
            let slot = match (segment, name16(&section[..16])) {
                (b"__TEXT", b"__text") => &mut out.text,
                (b"__TEXT", b"__stubs") => &mut out.stubs,
                (b"__TEXT", b"__stub_helper") => &mut out.stub_helper,
                (b"__TEXT", b"__unwind_info") => &mut out.unwind_info,
                (b"__TEXT", b"__eh_frame") => &mut out.eh_frame,
                (b"__DATA_CONST" | b"__DATA", b"__got") => &mut out.got,
                _ => continue,
            };
            *slot = r;
        }
        Some(())
    })?;
    out.text_segment.is_some().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a Mach-O header plus load commands.
    fn macho(cmds: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = cmds.concat();
        let mut b = Vec::new();
        for w in [MH_MAGIC_64, 0x0100_000c, 0, 6, cmds.len() as u32, body.len() as u32, 0, 0] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&body);
        b
    }

    fn segment(name: &str, vmaddr: u64, vmsize: u64) -> Vec<u8> {
        let mut c = Vec::new();
        c.extend_from_slice(&LC_SEGMENT_64.to_le_bytes());
        c.extend_from_slice(&72u32.to_le_bytes());
        let mut n = [0u8; 16];
        n[..name.len()].copy_from_slice(name.as_bytes());
        c.extend_from_slice(&n);
        for v in [vmaddr, vmsize, 0, 0] {
            c.extend_from_slice(&v.to_le_bytes());
        }
        c.extend_from_slice(&[0u8; 16]); // maxprot, initprot, nsects, flags
        c
    }

    #[test]
    fn macho_ranges_skip_pagezero_and_linkedit_and_find_the_uuid() {
        let mut uuid = Vec::new();
        uuid.extend_from_slice(&LC_UUID.to_le_bytes());
        uuid.extend_from_slice(&24u32.to_le_bytes());
        uuid.extend_from_slice(&[0xab; 16]);
        let img = macho(&[
            segment("__PAGEZERO", 0, 0x1_0000_0000),
            segment("__TEXT", 0x1_0000_0000, 0x4000),
            segment("__DATA", 0x1_0000_4000, 0x4000),
            segment("__LINKEDIT", 0x1_0000_8000, 0x10_0000),
            uuid,
        ]);
        assert_eq!(macho_commands_len(&img), Some(img.len()));
        // A torn header's size sizes no copy.
        let mut torn = img.clone();
        torn[20..24].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert_eq!(macho_commands_len(&torn), None);
        let parsed = parse_macho(&img).unwrap();
        assert_eq!(parsed, MachImage { start: 0x1_0000_0000, end: 0x1_0000_8000, uuid: Some([0xab; 16]) });
    }

    #[test]
    fn the_executable_and_shared_cache_images_are_never_unloaded() {
        let mut img = macho(&[segment("__TEXT", 0x1000, 0x1000)]);
        assert!(!never_unloaded(&img), "a dylib (filetype 6) loaded from a file");
        img[12..16].copy_from_slice(&2u32.to_le_bytes());
        assert!(never_unloaded(&img), "MH_EXECUTE");
        img[12..16].copy_from_slice(&6u32.to_le_bytes());
        img[24..28].copy_from_slice(&0x8000_0000u32.to_le_bytes());
        assert!(never_unloaded(&img), "MH_DYLIB_IN_CACHE");
        assert!(!never_unloaded(&img[..20]));
    }

    #[test]
    fn malformed_macho_is_rejected_without_panicking() {
        assert_eq!(parse_macho(&[0u8; 8]), None);
        let img = macho(&[segment("__TEXT", 0x1000, 0x1000)]);
        assert!(parse_macho(&img).is_some());
        assert_eq!(parse_macho(&img[..img.len() - 1]), None, "truncated commands");
        let mut bad = img.clone();
        bad[MACH_HEADER_64_SIZE + 4..MACH_HEADER_64_SIZE + 8].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(parse_macho(&bad), None, "command smaller than its header");
        let mut huge = img.clone();
        huge[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(parse_macho(&huge), None, "more commands than bytes");
        assert_eq!(parse_macho(&macho(&[])), None, "no segments");
    }
}
