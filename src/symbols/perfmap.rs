//! V8's perf map (`/tmp/perf-<pid>.map`), written when node runs with
//! `--perf-basic-prof` or `--perf-basic-prof-only-functions`.
//!
//! Each line is `START SIZE NAME`, START and SIZE in hex without `0x`. The
//! file is append-only: when V8 moves or frees code, a later line may cover
//! addresses an earlier one did, and the later line wins. A truncated or
//! garbled line is skipped, never an error.

use std::path::Path;

/// One code object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitEntry {
    pub start: u64,
    pub end: u64,
    /// As V8 wrote it, e.g. `JS:*fib /app/fib.js:3:13`.
    pub raw: String,
}

/// The name of a JIT code object, split into parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitName {
    /// `fib (/app/fib.js:3:13)` for JavaScript, the raw text otherwise.
    pub display: String,
    pub file: String,
    pub line: u32,
    /// True for JavaScript functions (not builtins, stubs or regexps).
    pub is_js: bool,
}

/// Splits V8's function name text (as in the perf map, or reported by V8's
/// code events) into the name shown and its source location.
pub fn parse_name(raw: &str) -> JitName {
    let n = crate::v8::parse_js_name(raw);
    let (file, line) = split_location(&n.location);
    JitName { display: n.display, file, line, is_js: n.is_js }
}

/// `url:line[:column]` to (url, line); a location without a line number is
/// all url.
pub fn split_location(location: &str) -> (String, u32) {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match location.rsplitn(3, ':').collect::<Vec<_>>()[..] {
        [col, line, file] if numeric(col) && numeric(line) => (file.to_string(), line.parse().unwrap_or(0)),
        [line, ..] if numeric(line) => {
            let file = location.rsplit_once(':').map_or(location, |(f, _)| f);
            (file.to_string(), line.parse().unwrap_or(0))
        }
        _ => (location.to_string(), 0),
    }
}

#[derive(Debug, Default)]
pub struct PerfMap {
    /// Sorted by start, each with the byte offset where its line ends: the
    /// file is append-only, so that offset orders the lines (later lines
    /// win) and says when each had been written (see
    /// `crate::symbols::perf_map_watch`).
    entries: Vec<(JitEntry, u64)>,
    /// Longest entry, to bound the backward scan in `find`.
    max_len: u64,
}

impl PerfMap {
    pub fn parse(text: &str) -> PerfMap {
        Self::parse_bytes(text.as_bytes())
    }

    pub fn parse_bytes(bytes: &[u8]) -> PerfMap {
        let mut entries = Vec::new();
        let mut max_len = 0;
        let mut line_end = 0u64;
        for raw_line in bytes.split_inclusive(|&b| b == b'\n') {
            line_end += raw_line.len() as u64;
            let line = String::from_utf8_lossy(raw_line);
            let line = line.trim_end_matches(['\n', '\r']);
            let mut it = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
            let (Ok(start), Ok(size)) = (u64::from_str_radix(start, 16), u64::from_str_radix(size, 16)) else {
                continue;
            };
            let Some(end) = start.checked_add(size) else { continue };
            if size == 0 || name.is_empty() {
                continue;
            }
            max_len = max_len.max(size);
            entries.push((JitEntry { start, end, raw: name.to_string() }, line_end));
        }
        entries.sort_by_key(|(e, at)| (e.start, *at));
        PerfMap { entries, max_len }
    }

    /// Reads a perf map; a missing or unreadable file is an empty map.
    pub fn read(path: &Path) -> PerfMap {
        match std::fs::read(path) {
            Ok(bytes) => Self::parse_bytes(&bytes),
            Err(_) => PerfMap::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry covering `addr` written last, with its index (a stable key).
    pub fn find(&self, addr: u64) -> Option<(usize, &JitEntry)> {
        self.find_written_by(addr, u64::MAX)
    }

    /// As `find`, among the lines that end at or before byte `size` of the
    /// file: the name `addr` had when the file was that long.
    pub fn find_written_by(&self, addr: u64, size: u64) -> Option<(usize, &JitEntry)> {
        let mut best: Option<(usize, u64)> = None; // (index, line end)
        for (i, _, at) in self.covering(addr) {
            if at <= size && best.is_none_or(|(_, b)| at > b) {
                best = Some((i, at));
            }
        }
        best.map(|(i, _)| (i, &self.entries[i].0))
    }

    /// Every entry covering `addr`: (index, entry, byte offset of its line end).
    pub fn covering(&self, addr: u64) -> impl Iterator<Item = (usize, &JitEntry, u64)> {
        let upper = self.entries.partition_point(|(e, _)| e.start <= addr);
        let max_len = self.max_len;
        (0..upper)
            .rev()
            .map(|i| (i, &self.entries[i].0, self.entries[i].1))
            .take_while(move |(_, e, _)| addr - e.start < max_len)
            .filter(move |(_, e, _)| addr < e.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_entries_and_later_lines_win() {
        let m = PerfMap::parse(
            "1000 100 JS:*fib /app/fib.js:3:13\n\
             2000 10 Builtin:ArgumentsAdaptorTrampoline\n\
             1000 40 JS:~moved /app/m.js:1:1\n\
             garbage line\n\
             zz 10 bad\n\
             3000 0 empty\n\
             4000 20",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m.find(0x1010).unwrap().1.raw, "JS:~moved /app/m.js:1:1");
        assert_eq!(m.find(0x1050).unwrap().1.raw, "JS:*fib /app/fib.js:3:13");
        assert_eq!(m.find(0x2005).unwrap().1.raw, "Builtin:ArgumentsAdaptorTrampoline");
        assert!(m.find(0x10ff + 1).is_none());
        assert!(m.find(0x999).is_none());
        assert!(m.find(u64::MAX).is_none());
    }

    #[test]
    fn lines_written_by_a_size_exclude_later_reuse() {
        let text = "1000 100 JS:*fib /app/fib.js:3:13\n1000 40 JS:~flushSync node:x:47:19\n";
        let m = PerfMap::parse(text);
        let first_end = text.find('\n').unwrap() as u64 + 1;
        assert_eq!(m.find(0x1010).unwrap().1.raw, "JS:~flushSync node:x:47:19");
        assert_eq!(m.find_written_by(0x1010, first_end).unwrap().1.raw, "JS:*fib /app/fib.js:3:13");
        assert_eq!(m.find_written_by(0x1010, text.len() as u64).unwrap().1.raw, "JS:~flushSync node:x:47:19");
        assert!(m.find_written_by(0x1010, first_end - 1).is_none());
        assert_eq!(m.covering(0x1010).count(), 2);
        assert_eq!(m.covering(0x1050).count(), 1);
    }

    #[test]
    fn invalid_utf8_keeps_byte_offsets() {
        let mut bytes = b"1000 10 JS:~a\xff /x.js:1:1\n".to_vec();
        let first_end = bytes.len() as u64;
        bytes.extend_from_slice(b"1000 10 JS:~b /x.js:2:1\n");
        let m = PerfMap::parse_bytes(&bytes);
        assert!(m.find_written_by(0x1000, first_end).unwrap().1.raw.starts_with("JS:~a"));
    }

    #[test]
    fn truncated_file_is_tolerated() {
        let m = PerfMap::parse("1000 100 JS:*a /x.js:1:1\n2000 4");
        assert_eq!(m.len(), 1);
        assert!(PerfMap::read(Path::new("/nonexistent/perf-1.map")).is_empty());
    }

    #[test]
    fn parses_v8_names() {
        let n = parse_name("JS:*fib /app/fib.js:3:13");
        assert_eq!(
            n,
            JitName { display: "fib (/app/fib.js:3:13)".into(), file: "/app/fib.js".into(), line: 3, is_js: true }
        );
        let n = parse_name("JS:~ file:///C:/a b/app.mjs:10:2");
        assert!(n.is_js);
        assert_eq!(n.line, 10);
        let n = parse_name("LazyCompile:~hot /x.js:1:1");
        assert_eq!(n.display, "hot (/x.js:1:1)");
        let n = parse_name("Builtin:InterpreterEntryTrampoline");
        assert!(!n.is_js);
        assert_eq!(n.display, "Builtin:InterpreterEntryTrampoline");
        assert!(!parse_name("no colon at all").is_js);
        let n = parse_name("JS:*weird");
        assert!(n.is_js);
        // Node 18: no column.
        let n = parse_name("LazyCompile:*fib /app/fib.js:306");
        assert_eq!((n.display.as_str(), n.file.as_str(), n.line), ("fib (/app/fib.js:306)", "/app/fib.js", 306));
        // Node 24+: context-specialized mark.
        let n = parse_name("JS:*'fib [eval]:1:13");
        assert_eq!((n.display.as_str(), n.file.as_str(), n.line), ("fib ([eval]:1:13)", "[eval]", 1));
        let n = parse_name("JS:~ node:internal/main/eval_string:1:1");
        assert_eq!(n.display, "(anonymous) (node:internal/main/eval_string:1:1)");
    }
}
