//! Which functions optimized code inlined, from V8's own log.
//!
//! V8's code events name only the function a code object was compiled
//! for, so time in functions TurboFan or Maglev inlined into it would be
//! credited to that function. Run with `--log-code` (and, from V8 10.8 on,
//! `--log-source-position`), V8 writes for each optimized code object its
//! source position table with inlining ids, one entry per inlining (the
//! function and the inlining it sits in), and the inlined functions'
//! `SharedFunctionInfo`s, which its `code-creation` lines name:
//!
//! ```text
//! code-creation,JS,13,64359,0x7f52e4005b80,388,outer /a.js:3:15,0x1846a6d8,*
//! code-source-info,0x7f52e4005b80,81,141,211,C0O141C165O110I0C282O30I1,F0O191F1O101I0,S0x1846a688S0x1846a638
//! ```
//!
//! Here pc offsets from 165 are in inlining 0 (function `S0`, called by
//! the code's own function), from 282 in inlining 1 (function `S1`, called
//! by inlining 0). That is the data V8's `CpuProfiler` builds its inline
//! stacks from. The log is read when the profile is built, never while
//! sampling. Why this way: `docs/design/inlined-js-frames.md`.

use std::path::Path;

use rustc_hash::FxHashMap;

use super::unnamed_scripts::{with_script_url, Script};

/// The environment variable that names the `--logfile` of a process run
/// with V8's `--log-code` and `--logfile-per-isolate` into a directory of
/// its own (`machsampler record` sets both).
pub const V8_LOG_ENV: &str = "MACHSAMPLER_V8_LOG";

/// Keeps the log of an isolate that goes away, under a name [`InlineLog::read`]
/// still reads. V8 names each isolate's file after the isolate's address,
/// which the allocator gives to later isolates: a pool that replaces its
/// workers would truncate the log of every worker before. V8 keeps writing
/// to the renamed file until it closes it. Only the log `record` asked for
/// (`MACHSAMPLER_V8_LOG`, in its own directory) is touched, never a user's.
pub fn set_aside(isolate: usize) {
    static SET_ASIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(prefix) = std::env::var_os(V8_LOG_ENV).filter(|p| !p.is_empty()) else { return };
    let prefix = Path::new(&prefix);
    let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name().and_then(|n| n.to_str())) else { return };
    let pid = std::process::id();
    let n = SET_ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // V8 prints the address as C++ streams print a pointer: `0x` and lowercase hex.
    let from = dir.join(format!("isolate-{isolate:#x}-{pid}-{name}"));
    let to = dir.join(format!("isolate-{isolate:#x}-ended{n}-{pid}-{name}"));
    // No file (another log, or none): nothing to keep.
    let _ = std::fs::rename(from, to);
}

/// One optimized code object with inlined functions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct LoggedCode {
    size: u64,
    /// The compiled function, as `name url:line:col`.
    name: String,
    /// (pc offset, inlining id or -1), by pc offset.
    positions: Vec<(u64, i32)>,
    /// Per inlining id: (index into `functions`, the inlining it sits in
    /// or -1 for the code's own function).
    inlinings: Vec<(u32, i32)>,
    /// The inlined functions, as `name url:line:col`.
    functions: Vec<String>,
}

/// Inlining tables of the code objects a V8 log describes.
#[derive(Default, Debug)]
pub struct InlineLog {
    /// By code start: every code object logged there, oldest first.
    codes: FxHashMap<u64, Vec<LoggedCode>>,
}

/// What reading a log in order keeps: the functions' names by
/// SharedFunctionInfo address, and the last code object created at each
/// address (size, name, SharedFunctionInfo).
#[derive(Default)]
struct LogState {
    sfi_names: FxHashMap<u64, String>,
    created: FxHashMap<u64, (u64, String, Option<u64>)>,
}

/// For a script id of the log's isolate: None if unknown, else the
/// `//# sourceURL` the sampler showed that script without a name under
/// (None: its id). See [`super::unnamed_scripts`].
type ScriptUrl<'a> = &'a dyn Fn(i32) -> Option<Option<String>>;

/// Upper bound on the functions one chain can hold (a corrupt log must not
/// make a loop).
const MAX_DEPTH: usize = 64;

impl InlineLog {
    /// Reads the logs `--logfile=<prefix>` made for process `pid`: the file
    /// itself (`--no-logfile-per-isolate`) and V8's per-isolate files
    /// beside it (`isolate-<address>-<pid>-<name>`). Missing or unreadable
    /// files are skipped.
    pub fn read(prefix: &Path, pid: u32) -> InlineLog {
        let mut log = InlineLog::default();
        let mut files = vec![prefix.to_path_buf()];
        if let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name().and_then(|n| n.to_str())) {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            let suffix = format!("-{pid}-{name}");
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    let n = e.file_name();
                    if n.to_str().is_some_and(|n| n.starts_with("isolate-") && n.ends_with(&suffix)) {
                        files.push(e.path());
                    }
                }
            }
        }
        for f in files {
            // Line by line: a long run's log can be large.
            if let Ok(file) = std::fs::File::open(&f) {
                let mut reader = std::io::BufReader::new(file);
                let mut line = Vec::new();
                let mut state = LogState::default();
                // Scripts are known for isolates still alive, which own
                // their address (see `set_aside`).
                let isolate = f.file_name().and_then(|n| n.to_str()).and_then(|n| live_isolate(n, pid));
                let script_url = |id| isolate.and_then(|i| super::unnamed_scripts::url_of(i, id));
                while matches!(std::io::BufRead::read_until(&mut reader, b'\n', &mut line), Ok(n) if n > 0) {
                    log.line(&mut state, &script_url, String::from_utf8_lossy(&line).trim_end());
                    line.clear();
                }
            }
        }
        log
    }

    /// Takes in one log's text. Lines it does not know, or cannot parse,
    /// are skipped.
    pub fn parse(&mut self, text: &str) {
        self.parse_with(text, &|_| None);
    }

    /// As [`InlineLog::parse`], with what the sampler knows of the log's
    /// isolate's scripts without a name.
    fn parse_with(&mut self, text: &str, script_url: ScriptUrl) {
        let mut state = LogState::default();
        for line in text.lines() {
            self.line(&mut state, script_url, line);
        }
    }

    /// Takes in one line of a log, read in order with `state`.
    fn line(&mut self, state: &mut LogState, script_url: ScriptUrl, line: &str) {
        let LogState { sfi_names, created } = state;
        let mut fields = line.split(',');
        match fields.next() {
            Some("code-creation") => {
                let f: Vec<&str> = fields.collect();
                // type, kind, time, address, size, name[, sfi, mark]
                let (Some(addr), Some(size), Some(name)) =
                    (f.get(3).and_then(|a| hex(a)), f.get(4).and_then(|s| s.parse().ok()), f.get(5))
                else {
                    return;
                };
                let name = unescape(name);
                let sfi = f.get(6).and_then(|a| hex(a));
                if let Some(sfi) = sfi {
                    sfi_names.insert(sfi, name.clone());
                }
                created.insert(addr, (size, name, sfi));
            }
            Some("sfi-move") => {
                let f: Vec<&str> = fields.collect();
                if let (Some(from), Some(to)) = (f.first().and_then(|a| hex(a)), f.get(1).and_then(|a| hex(a))) {
                    if let Some(n) = sfi_names.remove(&from) {
                        sfi_names.insert(to, n);
                    }
                }
            }
            Some("code-move") => {
                let f: Vec<&str> = fields.collect();
                if let (Some(from), Some(to)) = (f.first().and_then(|a| hex(a)), f.get(1).and_then(|a| hex(a))) {
                    if let Some(c) = created.remove(&from) {
                        created.insert(to, c);
                    }
                    if let Some(moved) = self.codes.get_mut(&from).and_then(|v| v.pop()) {
                        self.codes.entry(to).or_default().push(moved);
                    }
                }
            }
            Some("code-source-info") => {
                let f: Vec<&str> = fields.collect();
                // address, script, start, end, positions, inlinings, functions
                let (Some(addr), Some(positions), Some(inlinings), Some(functions)) =
                    (f.first().and_then(|a| hex(a)), f.get(4), f.get(5), f.get(6))
                else {
                    return;
                };
                let Some((size, name, sfi)) = created.get(&addr) else { return };
                // A function of a script without a name: the URL the
                // sampler's code events gave it, for when it is inlined.
                if let (Some(sfi), Some(Ok(id))) = (sfi, f.get(1).map(|i| i.parse::<i32>())) {
                    if let (Some(url), Some(named)) = (script_url(id), sfi_names.get_mut(sfi)) {
                        let mut out = [0u8; 1024];
                        let script = || Script { source_url: url.as_deref().map(str::as_bytes), id };
                        if let Some(n) = with_script_url(named.as_bytes(), script, &mut out) {
                            *named = String::from_utf8_lossy(&out[..n]).into_owned();
                        }
                    }
                }
                if inlinings.is_empty() {
                    return; // Nothing inlined.
                }
                let functions: Vec<String> = split_tagged(functions, 'S')
                    .map(|a| hex(a).and_then(|a| sfi_names.get(&a).cloned()).unwrap_or_default())
                    .collect();
                let Some(code) = parse_tables(positions, inlinings, functions) else { return };
                let code = LoggedCode { size: *size, name: name.clone(), ..code };
                let at = self.codes.entry(addr).or_default();
                // V8 may log the same code object's tables twice.
                if at.last() != Some(&code) {
                    at.push(code);
                }
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// The functions inlined at `pc_offset` into the code object of `size`
    /// bytes at `start` compiled for `name` (`name url:line:col`, or
    /// `name url:line` as V8 10.2's code events give it), from the
    /// outermost (called by `name`) to the innermost; empty if none, if the
    /// log has no such code object, or if a function of the chain has no
    /// name in the log.
    pub fn chain(&self, start: u64, size: u64, name: &str, pc_offset: u64) -> Vec<&str> {
        let same_function = |logged: &str| {
            logged == name
                || logged
                    .strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .is_some_and(|column| !column.is_empty() && column.bytes().all(|b| b.is_ascii_digit()))
        };
        let Some(code) =
            self.codes.get(&start).and_then(|v| v.iter().rev().find(|c| c.size == size && same_function(&c.name)))
        else {
            return Vec::new();
        };
        let i = code.positions.partition_point(|&(off, _)| off <= pc_offset);
        let Some(&(_, mut id)) = i.checked_sub(1).and_then(|i| code.positions.get(i)) else { return Vec::new() };
        let mut out = Vec::new();
        while id >= 0 && out.len() < MAX_DEPTH {
            let Some(&(function, parent)) = code.inlinings.get(id as usize) else { return Vec::new() };
            match code.functions.get(function as usize) {
                Some(f) if !f.is_empty() => out.push(f.as_str()),
                _ => return Vec::new(),
            }
            // Parents come before their children: anything else is corrupt.
            if parent >= id {
                return Vec::new();
            }
            id = parent;
        }
        out.reverse();
        out
    }
}

/// The position table (`C<pc offset>O<script offset>[I<inlining id>]...`)
/// and the inlinings (`F<function>O<script offset>[I<parent>]...`).
fn parse_tables(positions: &str, inlinings: &str, functions: Vec<String>) -> Option<LoggedCode> {
    let mut positions = tagged_pairs(positions, 'C')?;
    positions.sort_by_key(|&(off, _)| off);
    let inlinings = tagged_pairs(inlinings, 'F')?.into_iter().map(|(f, parent)| (f as u32, parent)).collect();
    Some(LoggedCode { positions, inlinings, functions, ..Default::default() })
}

/// `<tag><a>O<offset>[I<b>]...` as (a, b), b -1 where absent; None if an
/// entry does not parse.
fn tagged_pairs(s: &str, tag: char) -> Option<Vec<(u64, i32)>> {
    split_tagged(s, tag)
        .map(|entry| {
            let (a, rest) = entry.split_once('O')?;
            let b = match rest.split_once('I') {
                Some((_, b)) => b.parse().ok()?,
                None => -1,
            };
            Some((a.parse().ok()?, b))
        })
        .collect()
}

/// The parts of `s` that each start with `tag` (the tag left out).
fn split_tagged(s: &str, tag: char) -> impl Iterator<Item = &str> {
    s.split(tag).filter(|p| !p.is_empty())
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// The isolate address of a per-isolate log of process `pid`
/// (`isolate-0x5581d3c0-<pid>-<name>`), unless set aside (`-ended<n>-`).
fn live_isolate(file: &str, pid: u32) -> Option<usize> {
    let rest = file.strip_prefix("isolate-0x")?;
    let (address, rest) = rest.split_once('-')?;
    rest.strip_prefix(&format!("{pid}-"))?;
    usize::from_str_radix(address, 16).ok()
}

/// V8's log escapes `,` and non-printable characters as `\x..` or
/// `\u....`, a line break as `\n`, and `\` as `\\`.
fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let digits = match chars.clone().next() {
            Some('x') => 2,
            Some('u') => 4,
            Some(other) => {
                chars.next();
                out.push(if other == 'n' { '\n' } else { other });
                continue;
            }
            None => {
                out.push('\\');
                continue;
            }
        };
        let code: String = chars.clone().skip(1).take(digits).collect();
        match u32::from_str_radix(&code, 16).ok().and_then(char::from_u32).filter(|_| code.len() == digits) {
            Some(ch) => {
                out.push(ch);
                for _ in 0..=digits {
                    chars.next();
                }
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // From Node 22 (`--log-code --log-source-position`): `outer` inlines
    // `inner`, which inlines `add`.
    const LOG: &str = "\
code-creation,JS,10,50476,0x7f71967c5cc0,348,inner /tmp/inl/inl.js:2:15,0x3f55a9224d30,^
code-creation,JS,10,50480,0x7f71967c5000,40,add /tmp/inl/inl.js:1:13,0x3f55a9224cd8,^
code-creation,JS,12,55002,0x7f71967c6340,392,outer /tmp/inl/inl.js:3:15,0x3f55a9224d88,*
code-source-info,0x7f71967c6340,78,141,211,C0O141C39O176C64O158C67O176C93O110I0C101O67I0C131O85I0C141O110I0C154O30I1C166O93I0C170O67I0C182O191C187O182,F0O191F1O101I0,S0x3f55a9224d30S0x3f55a9224cd8
";

    #[test]
    fn pc_offsets_map_to_the_functions_inlined_there() {
        let mut log = InlineLog::default();
        log.parse(LOG);
        let chain = |off| log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3:15", off);
        assert!(chain(0).is_empty(), "outer's own code");
        assert!(chain(92).is_empty());
        assert_eq!(chain(93), ["inner /tmp/inl/inl.js:2:15"]);
        assert_eq!(chain(153), ["inner /tmp/inl/inl.js:2:15"]);
        assert_eq!(chain(154), ["inner /tmp/inl/inl.js:2:15", "add /tmp/inl/inl.js:1:13"]);
        assert_eq!(chain(165), ["inner /tmp/inl/inl.js:2:15", "add /tmp/inl/inl.js:1:13"]);
        assert_eq!(chain(166), ["inner /tmp/inl/inl.js:2:15"]);
        assert!(chain(182).is_empty());
        assert!(chain(10_000).is_empty());
        // Another code object, size or function: nothing.
        assert!(log.chain(0x7f71967c6340, 393, "outer /tmp/inl/inl.js:3:15", 154).is_empty());
        assert!(log.chain(0x7f71967c6340, 392, "other /tmp/inl/inl.js:3:15", 154).is_empty());
        // V8 10.2's code events name no column; the log does.
        assert_eq!(log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3", 154).len(), 2);
        assert!(log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:", 154).is_empty());
        assert!(log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3:1", 154).is_empty());
        assert!(log.chain(0x7f71967c5cc0, 348, "inner /tmp/inl/inl.js:2:15", 0).is_empty());
    }

    #[test]
    fn moves_are_followed_and_garbage_is_skipped() {
        let mut log = InlineLog::default();
        let moved = LOG
            .replace("code-source-info", "sfi-move,0x3f55a9224cd8,0x3f55a9990000\ncode-source-info")
            .replace("S0x3f55a9224cd8", "S0x3f55a9990000");
        log.parse(&format!(
            "garbage,,\ncode-source-info,zz\ncode-creation,JS\n{moved}code-move,0x7f71967c6340,0x7f0000001000\n"
        ));
        let chain = log.chain(0x7f0000001000, 392, "outer /tmp/inl/inl.js:3:15", 154);
        assert_eq!(chain, ["inner /tmp/inl/inl.js:2:15", "add /tmp/inl/inl.js:1:13"]);
        assert!(log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3:15", 154).is_empty());
        // A cycle in the inlinings is no chain.
        let mut bad = InlineLog::default();
        bad.parse(&LOG.replace("F1O101I0", "F1O101I1"));
        assert!(bad.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3:15", 154).is_empty());
    }

    #[test]
    fn read_takes_this_process_s_per_isolate_logs_only() {
        let dir = std::env::temp_dir().join(format!("machsampler-v8log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid = 4242;
        std::fs::write(dir.join(format!("isolate-0x1a2b-{pid}-v8.log")), LOG).unwrap();
        // Another process's log, with the same code at another size.
        std::fs::write(dir.join("isolate-0x1a2b-4243-v8.log"), LOG.replace(",392,", ",500,")).unwrap();
        let log = InlineLog::read(&dir.join("v8.log"), pid);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(log.chain(0x7f71967c6340, 392, "outer /tmp/inl/inl.js:3:15", 154).len(), 2);
        assert!(log.chain(0x7f71967c6340, 500, "outer /tmp/inl/inl.js:3:15", 154).is_empty());
        assert!(InlineLog::read(Path::new("/nonexistent/v8.log"), pid).is_empty());
    }

    #[test]
    fn names_are_unescaped() {
        assert_eq!(unescape(r"a\x2Cb"), "a,b");
        assert_eq!(unescape(r"a\\b"), r"a\b");
        assert_eq!(unescape(r"\u00e9t\xZZ"), "ét\\xZZ");
        assert_eq!(unescape("plain"), "plain");
        assert_eq!(unescape(r"a\nb"), "a\nb");
    }

    #[test]
    fn functions_of_unnamed_scripts_inlined_are_named_as_the_sampler_names_them() {
        // Node 20, an eval with a sourceURL (script 130) and one without
        // (131): `spin` inlines `fibonacci` in both.
        let log = "\
code-creation,JS,10,906762,0xa266,57,fibonacci :2:19,0xa10,~
code-source-info,0xa266,130,216,303,,,
code-creation,JS,13,907766,0x7f40,404,spin :10:14,0xa60,*
code-source-info,0x7f40,130,317,503,C0O0C20O30I0C40O50,F0O30,S0xa10
code-creation,JS,10,906762,0xb266,57,fibonacci :2:19,0xb10,~
code-source-info,0xb266,131,216,303,C0O226,,
code-creation,JS,13,907766,0x8f40,404,spin :10:14,0xb60,*
code-source-info,0x8f40,131,317,503,C0O0C20O30I0C40O50,F0O30,S0xb10
code-creation,JS,10,906762,0xc266,57,fibonacci :2:19,0xc10,~
code-source-info,0xc266,132,216,303,C0O226,,
code-creation,JS,13,907766,0x9f40,404,spin :10:14,0xc60,*
code-source-info,0x9f40,132,317,503,C0O0C20O30I0C40O50,F0O30,S0xc10
";
        let mut parsed = InlineLog::default();
        let known = |id| match id {
            130 => Some(Some("webpack://app/./src/a.ts".to_string())),
            131 => Some(None),
            _ => None,
        };
        parsed.parse_with(log, &known);
        assert_eq!(parsed.chain(0x7f40, 404, "spin :10:14", 25), ["fibonacci webpack://app/./src/a.ts:2:19"]);
        assert_eq!(parsed.chain(0x8f40, 404, "spin :10:14", 25), ["fibonacci VM131:2:19"]);
        // A script the sampler does not know: the name as V8 logged it.
        assert_eq!(parsed.chain(0x9f40, 404, "spin :10:14", 25), ["fibonacci :2:19"]);
        assert_eq!(live_isolate("isolate-0x5581d3c0-77-v8.log", 77), Some(0x5581d3c0));
        assert_eq!(live_isolate("isolate-0x5581d3c0-ended3-77-v8.log", 77), None);
        assert_eq!(live_isolate("isolate-0x5581d3c0-78-v8.log", 77), None);
    }
}
