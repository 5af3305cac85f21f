//! Where V8 remapped its embedded builtins.
//!
//! With short builtin calls (x64, Node 20 and later), V8 maps a second copy
//! of the node binary's embedded-builtins section inside the isolate's code
//! range, so JIT code reaches builtins with near calls. Stacks then hold
//! return addresses in that copy, which neither the code map (V8 reports
//! builtins at their address in the binary) nor `GetEmbeddedCodeRange`
//! (which returns the binary's copy) knows. On Linux the copy is a file
//! mapping of the node binary at the section's file offset, visible in
//! `/proc/self/maps`, e.g. for Node 20 (embedded blob at 0x18c4000):
//!
//! ```text
//! 7f6893e40000-7f6893fd2000 r-xp 014c4000 fe:00 5398817   /…/node   (inside the code range)
//! ```
//!
//! [`find_alias`] finds it, so addresses in it can be translated back to
//! the binary's copy ([`super::events::V8Ranges::canonical`]).
//!
//! On Darwin V8 makes the copy with `mach_vm_remap` (`OS::RemapPages`):
//! an anonymous alias of the same pages, with no file to name it. There
//! [`find_copy`] looks at the readable, executable regions inside the code
//! range (`mach_vm_region`) for one holding the blob's bytes at the blob's
//! page offset (4 KiB pages on x86_64, 16 KiB on arm64).

use super::api::CodeRange;

/// One line of `/proc/self/maps`, the fields used here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub exec: bool,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_ascii_whitespace();
            let (range, perms, offset, dev, inode) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                exec: perms.as_bytes().get(2) == Some(&b'x'),
                offset: u64::from_str_radix(offset, 16).ok()?,
                dev: dev.to_string(),
                inode: inode.parse().ok()?,
            })
        })
        .collect()
}

/// The copy of `embedded` mapped inside `code`, if any.
pub fn find_alias(maps: &[Mapping], embedded: CodeRange, code: CodeRange) -> Option<CodeRange> {
    if code.len == 0 {
        return None;
    }
    find_aliases(maps, embedded).into_iter().find(|a| code.contains(a.start))
}

/// Every copy of `embedded` mapped anywhere: one per isolate that has its
/// own code range (each worker's among them), whether or not it is
/// registered.
pub fn find_aliases(maps: &[Mapping], embedded: CodeRange) -> Vec<CodeRange> {
    if embedded.len == 0 {
        return Vec::new();
    }
    let Some(home) = maps.iter().find(|m| m.start <= embedded.start && embedded.start < m.end && m.inode != 0) else {
        return Vec::new();
    };
    let file_offset = embedded.start - home.start + home.offset;
    maps.iter()
        .filter(|m| m.exec && m.inode == home.inode && m.dev == home.dev && m.start != home.start)
        .filter(|m| m.offset <= file_offset && file_offset - m.offset < m.end - m.start)
        .map(|m| CodeRange { start: m.start + (file_offset - m.offset), len: embedded.len })
        .collect()
}

/// A mapped region, for [`find_copy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
}

/// Bytes compared at the start, middle and end of a candidate copy.
const PROBE: u64 = 256;

/// The copy of `embedded` inside `code`, found by content: the start of a
/// readable, executable region (plus the blob's offset within a page of
/// 4 or 16 KiB) where `same(candidate)` says the blob's bytes are.
pub fn find_copy(
    regions: &[Region],
    embedded: CodeRange,
    code: CodeRange,
    same: impl Fn(u64) -> bool,
) -> Option<CodeRange> {
    if embedded.len < PROBE || code.len == 0 {
        return None;
    }
    let code_end = code.start.saturating_add(code.len);
    for r in regions.iter().filter(|r| r.readable && r.executable && r.start >= code.start && r.end <= code_end) {
        for page in [0x1000u64, 0x4000] {
            let candidate = r.start + embedded.start % page;
            let fits = candidate.checked_add(embedded.len).is_some_and(|end| end <= r.end);
            if fits && candidate != embedded.start && same(candidate) {
                return Some(CodeRange { start: candidate, len: embedded.len });
            }
        }
    }
    None
}

/// True if the blob's bytes (start, middle, end) are also at `candidate`.
/// (Used where [`detect`] searches by content, and in tests.)
///
/// # Safety
/// `embedded` and `[candidate, candidate + embedded.len)` are mapped and
/// readable.
#[cfg(any(test, target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
unsafe fn same_bytes(embedded: CodeRange, candidate: u64) -> bool {
    [0, embedded.len / 2 - PROBE / 2, embedded.len - PROBE].iter().all(|&off| {
        // SAFETY: both ranges lie inside readable mappings (the caller's
        // contract) and `off + PROBE <= embedded.len`.
        unsafe {
            std::slice::from_raw_parts((embedded.start + off) as *const u8, PROBE as usize)
                == std::slice::from_raw_parts((candidate + off) as *const u8, PROBE as usize)
        }
    })
}

/// Finds the alias in this process: from `/proc/self/maps` on Linux, by
/// content on Darwin (and under the simulated Mach).
pub fn detect(embedded: CodeRange, code: CodeRange) -> Option<CodeRange> {
    #[cfg(all(target_os = "linux", not(feature = "machsim")))]
    {
        let text = std::fs::read_to_string("/proc/self/maps").ok()?;
        find_alias(&parse_maps(&text), embedded, code)
    }
    #[cfg(any(target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
    {
        let regions: Vec<Region> =
            crate::platform::macos::regions::list(code.start, code.start.saturating_add(code.len))
                .into_iter()
                .map(|r| Region { start: r.start, end: r.end, readable: r.readable, executable: r.executable })
                .collect();
        // SAFETY: `find_copy` only asks about candidates inside readable
        // regions it was given, with room for the whole blob; the blob is
        // in the binary's mapped text.
        find_copy(&regions, embedded, code, |c| unsafe { same_bytes(embedded, c) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-01400000 r-xp 00000000 fe:00 5398817                    /opt/node/bin/node
01400000-01a00000 r-xp 01000000 fe:00 5398817                    /opt/node/bin/node
7f6874000000-7f6874003000 ---p 00000000 00:00 0
7f6874003000-7f687403f000 rwxp 00000000 00:00 0
7f6893e40000-7f6893fd2000 r-xp 014c4000 fe:00 5398817                    /opt/node/bin/node
7fff00000000-7fff00001000 r-xp 00000000 fe:00 1111                       /lib/libc.so
";

    #[test]
    fn finds_the_remapped_copy_inside_the_code_range() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 6);
        let embedded = CodeRange { start: 0x18c4000, len: 1645248 };
        let code = CodeRange { start: 0x7f6874000000, len: 512 << 20 };
        let alias = find_alias(&maps, embedded, code).unwrap();
        assert_eq!(alias, CodeRange { start: 0x7f6893e40000, len: 1645248 });
        // Outside the code range, or no code range: no alias.
        assert_eq!(find_alias(&maps, embedded, CodeRange { start: 0x1000, len: 0x1000 }), None);
        assert_eq!(find_alias(&maps, embedded, CodeRange::default()), None);
        // Node 18: no copy.
        let node18 = "00400000-01a00000 r-xp 00000000 fe:00 7 /n\n05243000-05272000 r-xp 00000000 00:00 0\n";
        let code18 = CodeRange { start: 0x5238000, len: 128 << 20 };
        assert_eq!(find_alias(&parse_maps(node18), CodeRange { start: 0x168a240, len: 1419648 }, code18), None);
        assert!(parse_maps("garbage\n\nzz-yy r-xp 0 0 0").is_empty());
    }

    #[test]
    fn finds_every_isolate_copy() {
        // The main thread's and two workers' copies, each in its own code
        // range; a mapping of another file at the same offset is none.
        let maps = format!(
            "{MAPS}7f6900000000-7f6900200000 r-xp 014c4000 fe:00 5398817 /opt/node/bin/node\n\
             7f6a00000000-7f6a00200000 r-xp 014c4000 fe:00 5398817 /opt/node/bin/node\n\
             7f6b00000000-7f6b00200000 r-xp 014c4000 fe:00 9 /other\n"
        );
        let embedded = CodeRange { start: 0x18c4000, len: 1645248 };
        let starts: Vec<u64> = find_aliases(&parse_maps(&maps), embedded).iter().map(|a| a.start).collect();
        assert_eq!(starts, vec![0x7f6893e40000, 0x7f6900000000, 0x7f6a00000000]);
        assert!(find_aliases(&parse_maps(&maps), CodeRange::default()).is_empty());
    }

    #[test]
    fn finds_a_copy_made_with_mach_vm_remap_by_its_bytes() {
        // A blob 0x340 bytes into a 16 KiB page of the binary, remapped to a
        // page-aligned region inside the code range.
        let blob = vec![0xabu8; 0x20_000];
        let copy_region = Region { start: 0x3_0000_8000, end: 0x3_0003_0000, readable: true, executable: true };
        let embedded = CodeRange { start: 0x1_0000_4340, len: blob.len() as u64 };
        let code = CodeRange { start: 0x3_0000_0000, len: 128 << 20 };
        let regions = [
            Region { start: 0x3_0000_0000, end: 0x3_0000_4000, readable: true, executable: false },
            Region { start: 0x3_0000_4000, end: 0x3_0000_8000, readable: true, executable: true },
            copy_region,
        ];
        let holds_blob = |c: u64| c == 0x3_0000_8340;
        assert_eq!(
            find_copy(&regions, embedded, code, holds_blob),
            Some(CodeRange { start: 0x3_0000_8340, len: embedded.len })
        );
        // The bytes differ everywhere: no copy (V8 without short builtin calls).
        assert_eq!(find_copy(&regions, embedded, code, |_| false), None);
        // A region too small for the blob, or outside the code range, is
        // never asked about.
        let small = [Region { end: 0x3_0001_0000, ..copy_region }];
        assert_eq!(find_copy(&small, embedded, code, |_| panic!("asked")), None);
        let outside = CodeRange { start: 0x5_0000_0000, len: 1 << 20 };
        assert_eq!(find_copy(&regions, embedded, outside, |_| panic!("asked")), None);
        assert_eq!(find_copy(&regions, CodeRange { start: 1, len: 16 }, code, |_| panic!("asked")), None);
    }

    #[test]
    fn same_bytes_compares_start_middle_and_end() {
        let a = vec![7u8; 0x4000];
        let mut b = a.clone();
        let range = |v: &Vec<u8>| CodeRange { start: v.as_ptr() as u64, len: v.len() as u64 };
        // SAFETY: both vectors are live and as long as the range.
        assert!(unsafe { same_bytes(range(&a), b.as_ptr() as u64) });
        b[0x4000 - 1] = 8;
        // SAFETY: as above.
        assert!(!unsafe { same_bytes(range(&a), b.as_ptr() as u64) });
    }
}
