//! Breakpad symbol files (`.sym`): the text format `dump_syms` writes and
//! symbol servers (Electron's, Mozilla's) serve as
//! `<debug file>/<DEBUG ID>/<debug file>.sym`.
//!
//! Only what names frames is read: the `MODULE` line (its debug id is
//! checked against the module's build id), `FILE`, `FUNC` with its line
//! records, and `PUBLIC`. `STACK` records (unwind data, most of a large
//! file) end the reading. Addresses are relative to the module's image
//! base. A malformed line is skipped; a file without a valid `MODULE` line
//! is rejected as a whole.

/// One function or public symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakpadSymbol {
    /// Address relative to the image base.
    pub rva: u64,
    /// 0 for a `PUBLIC` symbol (it runs to the next one).
    pub size: u64,
    pub name: String,
}

/// One line record: `size` bytes from `rva` are line `line` of `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRecord {
    pub rva: u64,
    pub size: u64,
    pub line: u32,
    pub file: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BreakpadFile {
    /// `mac`, `linux`, …
    pub os: String,
    /// The debug id in the `MODULE` line, uppercase hex (33 digits for
    /// Mach-O and ELF: a GUID and an age).
    pub debug_id: String,
    /// The debug file name.
    pub name: String,
    pub symbols: Vec<BreakpadSymbol>,
    /// Sorted by address.
    pub lines: Vec<LineRecord>,
    /// File names by index (`FILE` records); absent indices are empty.
    pub files: Vec<String>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

impl BreakpadFile {
    /// Parses a `.sym` file. Errors say why the file is not one.
    pub fn parse(text: &[u8]) -> Result<BreakpadFile, String> {
        let mut lines =
            text.split(|&b| b == b'\n').map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)));
        let first = lines.next().unwrap_or_default();
        let mut module = first.splitn(5, ' ');
        if module.next() != Some("MODULE") {
            return Err("not a Breakpad symbol file (no MODULE line)".into());
        }
        let (Some(os), Some(_arch), Some(id), Some(name)) =
            (module.next(), module.next(), module.next(), module.next())
        else {
            return Err("malformed MODULE line".into());
        };
        if id.len() < 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("malformed debug id '{id}' in the MODULE line"));
        }
        let mut out = BreakpadFile {
            os: os.to_string(),
            debug_id: id.to_ascii_uppercase(),
            name: name.trim_end().to_string(),
            ..Default::default()
        };
        for line in lines {
            let line = line.as_ref();
            let Some(first) = line.as_bytes().first() else { continue };
            if first.is_ascii_hexdigit() && !line.starts_with("FUNC") && !line.starts_with("FILE") {
                // A line record of the preceding FUNC: addr size line file.
                let mut f = line.split(' ');
                if let (Some(a), Some(s), Some(l), Some(n)) = (f.next(), f.next(), f.next(), f.next()) {
                    if let (Some(rva), Some(size), Ok(line), Ok(file)) = (hex(a), hex(s), l.parse(), n.parse()) {
                        out.lines.push(LineRecord { rva, size, line, file });
                    }
                }
                continue;
            }
            let (record, rest) = line.split_once(' ').unwrap_or((line, ""));
            match record {
                "FILE" => {
                    if let Some((n, path)) = rest.split_once(' ') {
                        if let Ok(n) = n.parse::<u32>() {
                            // Bounded: an index far past the records seen so
                            // far is not worth a huge allocation.
                            if (n as usize) < out.files.len() + 1_000_000 {
                                if out.files.len() <= n as usize {
                                    out.files.resize(n as usize + 1, String::new());
                                }
                                out.files[n as usize] = path.to_string();
                            }
                        }
                    }
                }
                "FUNC" | "PUBLIC" => {
                    let rest = rest.strip_prefix("m ").unwrap_or(rest);
                    let fields = if record == "FUNC" { 4 } else { 3 };
                    let f: Vec<&str> = rest.splitn(fields, ' ').collect();
                    if f.len() != fields {
                        continue;
                    }
                    let Some(rva) = hex(f[0]) else { continue };
                    let size = if record == "FUNC" {
                        match hex(f[1]) {
                            Some(s) => s,
                            None => continue,
                        }
                    } else {
                        0
                    };
                    let name = f[fields - 1].trim();
                    if !name.is_empty() {
                        out.symbols.push(BreakpadSymbol { rva, size, name: name.to_string() });
                    }
                }
                "STACK" => break,
                _ => {}
            }
        }
        out.lines.sort_by_key(|l| l.rva);
        Ok(out)
    }

    /// The line record covering `rva`.
    pub fn line_at(&self, rva: u64) -> Option<&LineRecord> {
        let i = self.lines.partition_point(|l| l.rva <= rva).checked_sub(1)?;
        let l = &self.lines[i];
        (rva < l.rva.saturating_add(l.size)).then_some(l)
    }

    pub fn file_name(&self, index: u32) -> &str {
        self.files.get(index as usize).map_or("", |s| s.as_str())
    }
}

/// The Breakpad debug id of a module from its build id (lowercase hex, as
/// profiles hold it): a Mach-O LC_UUID is the GUID as is; an ELF build id's
/// first 16 bytes are read as a little-endian GUID (the first three fields
/// byte-swapped), padded with zeros if shorter. The age is 0.
pub fn debug_id(build_id: &str, macho: bool) -> Option<String> {
    if build_id.len() < 2 || !build_id.len().is_multiple_of(2) {
        return None;
    }
    let mut bytes: Vec<u8> = (0..build_id.len() / 2)
        .map(|i| u8::from_str_radix(&build_id[2 * i..2 * i + 2], 16).ok())
        .collect::<Option<_>>()?;
    bytes.resize(bytes.len().max(16), 0);
    bytes.truncate(16);
    if !macho {
        bytes[0..4].reverse();
        bytes[4..6].reverse();
        bytes[6..8].reverse();
    }
    let mut s: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    s.push('0');
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "MODULE mac arm64 ba940815414031579D26A53B89DE388A0 libfx.dylib\r
INFO CODE_ID BA94081541403157
FILE 0 /src/lib.c
FILE 2 /src/other file.c
FUNC 468 18 0 exported_alpha
468 8 14 0
470 10 15 2
FUNC m 480 18 0 local beta(int)
480 18 9 0
PUBLIC 8000 0 __mh_dylib_header
PUBLIC m 9000 0
FUNC zz 10 0 bad
STACK CFI INIT 468 18 .cfa: sp 0 +
FUNC 900 10 0 after_stack
";

    #[test]
    fn parses_functions_publics_lines_and_stops_at_stack() {
        let f = BreakpadFile::parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!((f.os.as_str(), f.name.as_str()), ("mac", "libfx.dylib"));
        assert_eq!(f.debug_id, "BA940815414031579D26A53B89DE388A0");
        let names: Vec<_> = f.symbols.iter().map(|s| (s.rva, s.size, s.name.as_str())).collect();
        assert_eq!(
            names,
            vec![(0x468, 0x18, "exported_alpha"), (0x480, 0x18, "local beta(int)"), (0x8000, 0, "__mh_dylib_header")]
        );
        assert_eq!(f.line_at(0x474).map(|l| (l.line, f.file_name(l.file))), Some((15, "/src/other file.c")));
        assert_eq!(f.line_at(0x490).map(|l| l.line), Some(9));
        assert_eq!(f.line_at(0x498), None);
        assert_eq!(f.file_name(1), "");
    }

    #[test]
    fn rejects_what_is_not_a_symbol_file() {
        assert!(BreakpadFile::parse(b"").is_err());
        assert!(BreakpadFile::parse(b"<html>404</html>").is_err());
        assert!(BreakpadFile::parse(b"MODULE mac arm64").is_err());
        assert!(BreakpadFile::parse(b"MODULE mac arm64 XYZ lib").is_err());
        // Garbage after a valid MODULE line is skipped, never a panic.
        let mut junk = b"MODULE linux x86_64 000102030405060708090A0B0C0D0E0F0 l\n".to_vec();
        junk.extend((0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
        junk.extend_from_slice(b"\nFILE 4294967295 x\nFUNC ffffffffffffffff ffffffffffffffff 0 big\n");
        let f = BreakpadFile::parse(&junk).unwrap();
        let _ = f.line_at(u64::MAX);
    }

    #[test]
    fn debug_ids_from_build_ids() {
        // Mach-O: the UUID as is, age 0.
        assert_eq!(debug_id("ba940815414031579d26a53b89de388a", true).unwrap(), "BA940815414031579D26A53B89DE388A0");
        // ELF: the GUID's first three fields swapped; longer ids cut to 16 bytes.
        assert_eq!(
            debug_id("00112233445566778899aabbccddeeff01020304", false).unwrap(),
            "33221100554477668899AABBCCDDEEFF0"
        );
        assert_eq!(debug_id("0011", false).unwrap(), "000011000000000000000000000000000");
        assert_eq!(debug_id("", true), None);
        assert_eq!(debug_id("zz", true), None);
    }
}
