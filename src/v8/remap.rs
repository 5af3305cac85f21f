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
    if embedded.len == 0 || code.len == 0 {
        return None;
    }
    let home = maps.iter().find(|m| m.start <= embedded.start && embedded.start < m.end && m.inode != 0)?;
    let file_offset = embedded.start - home.start + home.offset;
    maps.iter()
        .filter(|m| m.exec && m.inode == home.inode && m.dev == home.dev && m.start != home.start)
        .filter(|m| code.contains(m.start))
        .find(|m| m.offset <= file_offset && file_offset - m.offset < m.end - m.start)
        .map(|m| CodeRange { start: m.start + (file_offset - m.offset), len: embedded.len })
}

/// Reads this process's maps and finds the alias (Linux only).
pub fn detect(embedded: CodeRange, code: CodeRange) -> Option<CodeRange> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/self/maps").ok()?;
        find_alias(&parse_maps(&text), embedded, code)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (embedded, code);
        None
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
}
