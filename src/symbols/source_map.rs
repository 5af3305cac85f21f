//! JavaScript frames moved to their original source through source maps.
//!
//! A script compiled from TypeScript or bundled from many files usually
//! carries a source map: an inline `//# sourceMappingURL=data:…` comment,
//! a comment naming a `.map` file, or a `<script>.map` file beside it. V8
//! names each function by its position in the compiled script; through the
//! map that position becomes the original file, line and column, and the
//! original function name where the map records one. Each function of a
//! bundle maps on its own, so a bundle is split back into its original
//! functions and files. No flag is needed.
//!
//! Maps are read once per script (per process, while the script file is
//! unchanged). A script without a map keeps its compiled position; a map
//! that is referenced but missing or broken does too, with one warning.
//! Only local files are read, never a URL.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::profile::{Function, FunctionKind};

/// Scripts larger than this are not searched for a map (a map of a script
/// that size is rarely useful, and reading it costs).
const MAX_SCRIPT_BYTES: u64 = 64 << 20;
const MAX_MAP_BYTES: u64 = 256 << 20;

type Loaded = Result<Option<Arc<ScriptMap>>, String>;
/// Script path -> (its modification time and size, its map).
type Cache = Mutex<HashMap<PathBuf, ((std::time::SystemTime, u64), Loaded)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

pub struct ScriptMap {
    map: sourcemap::SourceMap,
    /// Where relative `sources` are resolved from (the map's directory).
    dir: PathBuf,
    /// The compiled script: which identifier a map entry stands on.
    script: sourcemap::SourceView,
}

/// How many map entries before a function's position are searched for
/// its name (`name = (a, b) =>` puts the name a few entries back).
const NAME_LOOKBACK: usize = 12;

/// The map noted for a script compiled in memory. Relative sources are
/// resolved from the script's directory, or kept as written for a script
/// that is no local file (`webpack://app/./src/a.js`).
fn load_compiled(url: &str, path: Option<&Path>) -> Loaded {
    let Some(text) = crate::v8::script_maps::get(url) else { return Ok(None) };
    let map = decode_inline(&text)?;
    let dir = path.map_or_else(PathBuf::new, |p| p.parent().unwrap_or(Path::new("/")).to_path_buf());
    // The compiled text is not kept: names come from V8 and the map.
    Ok(Some(Arc::new(ScriptMap { map, dir, script: sourcemap::SourceView::from_string(String::new()) })))
}

/// The per-symbolization view: maps by script, each problem said once.
#[derive(Default)]
pub struct SourceMaps {
    by_script: HashMap<String, Option<Arc<ScriptMap>>>,
}

/// `url` as a local file path: an absolute path or a `file://` URL.
fn script_path(url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        let decoded = percent_decode(rest);
        return decoded.starts_with('/').then(|| PathBuf::from(decoded));
    }
    url.starts_with('/').then(|| PathBuf::from(url))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let digit = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (digit(b[i + 1]), digit(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A script inside an installed package (`…/node_modules/…`).
fn is_installed_package(script: &Path) -> bool {
    script.components().any(|c| c.as_os_str() == "node_modules")
}

/// Removes `.` and `..` components without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The last `sourceMappingURL` comment of a script: a line that starts
/// with it. The same words inside code (a bundler's template literal that
/// writes such comments) are not one.
fn map_reference(script: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(script);
    text.lines().rev().find_map(|line| {
        let line = line.trim();
        let rest = line.strip_prefix("//# sourceMappingURL=").or_else(|| line.strip_prefix("//@ sourceMappingURL="))?;
        let url = rest.split_whitespace().next()?;
        let code_like = url.contains(['`', '$', '{', '}', '"', '\'', '(', ')']);
        (!code_like).then(|| url.to_string())
    })
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(format!("larger than {} MiB", max >> 20));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

fn decode(bytes: &[u8]) -> Result<sourcemap::SourceMap, String> {
    regular(sourcemap::decode_slice(bytes).map_err(|e| e.to_string())?)
}

/// A `data:` URL's map.
fn decode_inline(url: &str) -> Result<sourcemap::SourceMap, String> {
    sourcemap::decode_data_url(url)
        .map_err(|e| e.to_string())
        .and_then(regular)
        .map_err(|e| format!("inline source map: {e}"))
}

fn regular(map: sourcemap::DecodedMap) -> Result<sourcemap::SourceMap, String> {
    match map {
        sourcemap::DecodedMap::Regular(m) => Ok(m),
        sourcemap::DecodedMap::Index(i) => i.flatten().map_err(|e| e.to_string()),
        sourcemap::DecodedMap::Hermes(h) => Ok((*h).clone()),
    }
}

/// Finds and reads the map of the script at `path`: `Ok(None)` if it has
/// none, an error if it names one that cannot be used.
fn load(path: &Path) -> Loaded {
    // No script there (code evaluated from a string, `[eval1]`, or a file
    // deleted since): no source map to look for, and nothing to say.
    if matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    let script = read_bounded(path, MAX_SCRIPT_BYTES)?;
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let view = || sourcemap::SourceView::from_string(String::from_utf8_lossy(&script).into_owned());
    let (bytes, map_dir, what) = match map_reference(&script) {
        Some(url) if url.starts_with("data:") => {
            return Ok(Some(Arc::new(ScriptMap { map: decode_inline(&url)?, dir, script: view() })));
        }
        Some(url) if url.contains("://") && !url.starts_with("file://") => {
            return Err(format!("source map {url} is not a local file"));
        }
        Some(url) => {
            let p = script_path(&url).unwrap_or_else(|| normalize(&dir.join(percent_decode(&url))));
            let bytes = read_bounded(&p, MAX_MAP_BYTES).map_err(|e| format!("source map {}: {e}", p.display()))?;
            (bytes, p.parent().unwrap_or(Path::new("/")).to_path_buf(), p)
        }
        None => {
            let mut beside = path.as_os_str().to_owned();
            beside.push(".map");
            let p = PathBuf::from(beside);
            match read_bounded(&p, MAX_MAP_BYTES) {
                Ok(b) => (b, dir.clone(), p),
                Err(_) => return Ok(None),
            }
        }
    };
    let map = decode(&bytes).map_err(|e| format!("source map {}: {e}", what.display()))?;
    Ok(Some(Arc::new(ScriptMap { map, dir: map_dir, script: view() })))
}

fn cached_load(path: &Path) -> Loaded {
    let stamp = std::fs::metadata(path).ok().map(|m| (m.modified().unwrap_or(std::time::UNIX_EPOCH), m.len()));
    let mut c = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let (Some(stamp), Some((s, loaded))) = (stamp, c.get(path)) {
        if *s == stamp {
            return loaded.clone();
        }
    }
    let loaded = load(path);
    if let Some(stamp) = stamp {
        c.insert(path.to_path_buf(), (stamp, loaded.clone()));
    }
    loaded
}

/// An original position: file, 1-based line and column, and the original
/// name if the map has one there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Original {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub name: Option<String>,
}

impl ScriptMap {
    /// Maps a 1-based compiled position of the function V8 names
    /// `compiled` there.
    pub fn original(&self, line: u32, column: u32, compiled: &str) -> Option<Original> {
        let (l, c) = (line.checked_sub(1)?, column.saturating_sub(1));
        let t = self.map.lookup_token(l, c)?;
        // A token from an earlier line says nothing about this position.
        if t.get_dst_line() != l {
            return None;
        }
        // Only a line (V8 10.2): the line stands for the function only
        // where all of it maps to one original line (not a line of a
        // minified bundle); the function's name is looked for from where
        // its own name is written on the line, and no column is given.
        let line_only = column == u32::MAX;
        if line_only {
            let first = self.first_on_line(l, t.get_dst_col())?;
            if (first.get_source(), first.get_src_line()) != (t.get_source(), t.get_src_line()) {
                return None;
            }
        }
        let source = t.get_source().filter(|s| !s.is_empty())?;
        let file = match script_path(source) {
            Some(p) => p,
            // A URL the bundler made up (`webpack://app/./src/a.ts`) is
            // shown as written: joined to a directory it names no file.
            None if has_scheme(source) => PathBuf::from(source),
            None => normalize(&self.dir.join(percent_decode(source))),
        };
        let name = match line_only {
            true => self.after_own_name(l, compiled).and_then(|c| self.original_name(l, c, compiled)),
            false => self.original_name(l, c, compiled),
        };
        Some(Original {
            file: file.to_string_lossy().into_owned(),
            line: t.get_src_line() + 1,
            column: if line_only { 0 } else { t.get_src_col() + 1 },
            name,
        })
    }

    /// The first entry of 0-based compiled line `l`, which has one at
    /// column `known` or before: a line's first entry usually comes after
    /// its indentation, and an entry before it is the previous line's.
    fn first_on_line(&self, l: u32, known: u32) -> Option<sourcemap::Token<'_>> {
        let on_line = |c: u32| self.map.lookup_token(l, c).is_some_and(|t| t.get_dst_line() == l);
        let (mut lo, mut hi) = (0, known);
        if !on_line(hi) {
            return None;
        }
        // The smallest column whose entry is on the line.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if on_line(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.map.lookup_token(l, lo)
    }

    /// The UTF-16 column just after the first place on 0-based compiled
    /// line `l` where the function's own name (`compiled`'s) is written as
    /// a whole identifier: where V8 would have put the function.
    fn after_own_name(&self, l: u32, compiled: &str) -> Option<u32> {
        let wanted = own_name(compiled)?;
        let line = self.script.get_line(l)?;
        let at = line.match_indices(wanted).map(|(i, _)| i).find(|&i| {
            let before = line[..i].chars().next_back();
            let after = line[i + wanted.len()..].chars().next();
            !before.is_some_and(|ch| is_identifier_char(ch) || ch == '#') && !after.is_some_and(is_identifier_char)
        })?;
        let units = |text: &str| text.chars().map(|ch| ch.len_utf16() as u32).sum::<u32>();
        Some(units(&line[..at]) + units(wanted))
    }

    /// The original name of the function V8 calls `compiled` and places
    /// at 0-based (l, c), the start of its parameters. A map names every
    /// identifier, parameters too, and an arrow function starts at its
    /// first parameter: the name is taken only from an entry that stands
    /// on the function's own compiled name (`c` in `c=n=>…`, `b` in
    /// `function b(…)` or `b=function(…)`), at or a few entries before the
    /// position, on its line or the one before. None when no entry does,
    /// or it has no name (the name was not changed).
    fn original_name(&self, l: u32, c: u32, compiled: &str) -> Option<String> {
        let wanted = own_name(compiled)?;
        let mut at = (l, c);
        for _ in 0..NAME_LOOKBACK {
            let t = self.map.lookup_token(at.0, at.1)?;
            let (tl, tc) = t.get_dst();
            if l - tl > 1 {
                return None;
            }
            // A map may stand on a private name's `#` or after it.
            if self.identifier_at(tl, tc).is_some_and(|i| i == wanted || i == wanted.trim_start_matches('#')) {
                return t.get_name().filter(|n| !n.is_empty()).map(str::to_string);
            }
            at = match (tl, tc) {
                (_, 1..) => (tl, tc - 1),
                (1.., 0) => (tl - 1, u32::MAX),
                (0, 0) => return None,
            };
        }
        None
    }

    /// The identifier that starts at 0-based line `l`, UTF-16 column `c`
    /// of the compiled script.
    fn identifier_at(&self, l: u32, c: u32) -> Option<&str> {
        let line = self.script.get_line(l)?;
        let mut units = 0;
        let start = line.char_indices().find_map(|(i, ch)| {
            let here = units;
            units += ch.len_utf16() as u32;
            (here >= c).then_some(i)
        })?;
        let rest = &line[start..];
        // A private name (`#work`) starts with `#`.
        let hash = usize::from(rest.starts_with('#'));
        let end = rest[hash..].find(|ch: char| !is_identifier_char(ch)).map_or(rest.len(), |e| e + hash);
        (end > hash).then(|| &rest[..end])
    }
}

fn is_identifier_char(ch: char) -> bool {
    ch == '_' || ch == '$' || ch.is_alphanumeric()
}

/// The identifier a function's own name ends with: `arrowProp` of V8's
/// `obj.arrowProp`, `size` of `get size`. None for an anonymous function.
fn own_name(compiled: &str) -> Option<&str> {
    let bare = compiled.strip_prefix("get ").or_else(|| compiled.strip_prefix("set ")).unwrap_or(compiled);
    let last = bare.rsplit('.').next()?;
    // A private method's name keeps its `#`.
    let ident = last.strip_prefix('#').unwrap_or(last);
    (!ident.is_empty() && ident.chars().all(is_identifier_char) && !ident.starts_with(|ch: char| ch.is_ascii_digit()))
        .then_some(last)
}

/// A URL with a scheme (`webpack://`, `http:`), not a path.
fn has_scheme(s: &str) -> bool {
    s.split_once(':').is_some_and(|(scheme, _)| {
        scheme.len() > 1
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// `url:line:column` split. V8 10.2 names functions `url:line`, without
/// the column: the column is then `u32::MAX`, the line's end, whose mapping
/// is the line's last (`{` of `function f(a: number) {`).
fn split_position(location: &str) -> Option<(&str, u32, u32)> {
    let number = |s: &str| s.parse::<u32>().ok().filter(|_| s.bytes().all(|b| b.is_ascii_digit()));
    let (rest, last) = location.rsplit_once(':')?;
    let last = number(last)?;
    match rest.rsplit_once(':') {
        Some((url, line)) if number(line).is_some() => Some((url, number(line)?, last)),
        _ => Some((rest, last, u32::MAX)),
    }
}

impl SourceMaps {
    fn map_for(&mut self, url: &str, warn: &mut dyn FnMut(String)) -> Option<Arc<ScriptMap>> {
        if let Some(m) = self.by_script.get(url) {
            return m.clone();
        }
        let loaded = match script_path(url) {
            Some(p) => cached_load(&p).and_then(|m| match m {
                Some(m) => Ok(Some(m)),
                None => load_compiled(url, Some(&p)),
            }),
            // Evaluated code named by its `//# sourceURL`: its map, if any,
            // came inline with it.
            None => load_compiled(url, None),
        };
        let map = match loaded {
            Ok(m) => m,
            // A package that names a map it does not ship (common in
            // node_modules, npm's own included): nothing the user can act
            // on, so nothing is said.
            Err(e) if script_path(url).is_some_and(|p| is_installed_package(&p)) && e.contains("No such file") => None,
            Err(e) => {
                warn(format!("{e}; functions of {url} are shown at their compiled positions"));
                None
            }
        };
        self.by_script.insert(url.to_string(), map.clone());
        map
    }

    /// The function for V8's name text `raw` (`JS:*fib /app/fib.js:3:13`),
    /// at its original position when its script has a source map.
    pub fn function(&mut self, raw: &str, warn: &mut dyn FnMut(String)) -> Function {
        let n = super::perfmap::parse_name(raw);
        let js = crate::v8::parse_js_name(raw);
        let compiled = Function { name: n.display, module: -1, file: n.file, line: n.line, kind: FunctionKind::Js };
        let Some((url, line, column)) = split_position(&js.location).filter(|_| js.is_js) else { return compiled };
        let Some(map) = self.map_for(url, warn) else { return compiled };
        let Some(o) = map.original(line, column, &js.function) else { return compiled };
        let name = match o.name {
            // A minifier's map may drop a private name's `#` (terser's does).
            Some(n)
                if !n.is_empty()
                    && own_name(&js.function).is_some_and(|c| c.starts_with('#'))
                    && !n.starts_with('#') =>
            {
                format!("#{n}")
            }
            Some(n) if !n.is_empty() => n,
            _ => js.function.clone(),
        };
        let column = if o.column > 0 { format!(":{}", o.column) } else { String::new() };
        Function {
            name: format!("{name} ({}:{}{column})", o.file, o.line),
            module: -1,
            file: o.file,
            line: o.line,
            kind: FunctionKind::Js,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::test_fixtures::fixture;

    fn map_all(raw: &str) -> (Function, Vec<String>) {
        let mut warnings = Vec::new();
        let f = SourceMaps::default().function(raw, &mut |w| warnings.push(w));
        (f, warnings)
    }

    /// Positions in the compiled fixture (`tsc`), found by text, so the
    /// test does not depend on how the compiler laid it out.
    fn position_of(js: &Path, needle: &str) -> (u32, u32) {
        let text = std::fs::read_to_string(js).unwrap();
        for (i, line) in text.lines().enumerate() {
            if let Some(c) = line.find(needle) {
                return (i as u32 + 1, (c + needle.len()) as u32);
            }
        }
        panic!("{needle} not in {}", js.display());
    }

    fn ts_line_of(ts: &Path, needle: &str) -> u32 {
        std::fs::read_to_string(ts).unwrap().lines().position(|l| l.contains(needle)).unwrap() as u32 + 1
    }

    #[test]
    fn only_a_comment_line_references_a_map() {
        let r = |s: &str| map_reference(s.as_bytes());
        assert_eq!(r("f()\n//# sourceMappingURL=a.js.map\n").as_deref(), Some("a.js.map"));
        assert_eq!(r("f()\n  //@ sourceMappingURL=b.map  \n").as_deref(), Some("b.map"));
        // A bundler writing such comments into the code it emits.
        assert_eq!(r("code += `\\n//# sourceMappingURL=${url(map)}`;\n"), None);
        assert_eq!(r("const c = '//# sourceMappingURL=' + url\n"), None);
        assert_eq!(r("//# sourceMappingURL=${genSourceMapUrl(map)}`;\n"), None);
        // The last one wins; a template line after it does not hide it.
        let two =
            "//# sourceMappingURL=old.map\nf()\n//# sourceMappingURL=new.map\nx = `\n//# sourceMappingURL=${u}`\n";
        assert_eq!(r(two).as_deref(), Some("new.map"));
        assert_eq!(r("f()\n"), None);
    }

    #[test]
    fn compiled_typescript_is_shown_at_its_ts_lines() {
        let dir = fixture("sourcemap");
        let ts = dir.join("src/fib.ts");
        for (js, how) in [("dist/fib.js", "a .map file named by the script"), ("inline/fib.js", "an inline map")] {
            let js = dir.join(js);
            for func in ["fibonacci", "sumOfSquares"] {
                // V8 puts a function at its `(`.
                let (line, col) = position_of(&js, &format!("function {func}"));
                let raw = format!("JS:*{func} {}:{line}:{}", js.display(), col + 1);
                let (f, w) = map_all(&raw);
                assert!(w.is_empty(), "{w:?}");
                let want = ts_line_of(&ts, &format!("function {func}"));
                assert_eq!((f.file.as_str(), f.line), (ts.to_str().unwrap(), want), "{how}: {func}");
                assert!(f.name.starts_with(&format!("{func} ({}:{want}:", ts.display())), "{}", f.name);
                // V8 10.2's name has the line only.
                let (f, _) = map_all(&format!("LazyCompile:*{func} {}:{line}", js.display()));
                assert_eq!((f.file.as_str(), f.line), (ts.to_str().unwrap(), want), "{how}: {func}, line only");
            }
        }
    }

    #[test]
    fn indented_methods_and_nested_functions_map_from_their_line_alone() {
        // V8 10.2 names carry the line only; tsc maps each line from its
        // first statement, after the indentation.
        let dir = fixture("sourcemap/methods");
        let (js, ts) = (dir.join("dist/counter.js"), dir.join("src/counter.ts"));
        for (func, v8_name) in
            [("spinMethod", "spinMethod"), ("nestedInner", "nestedInner"), ("#privateWork", "#privateWork")]
        {
            let (line, col) = position_of(&js, &format!("{func}("));
            let want = ts_line_of(&ts, &format!("{func}("));
            let (f, w) = map_all(&format!("LazyCompile:*{v8_name} {}:{line}", js.display()));
            assert!(w.is_empty(), "{w:?}");
            assert_eq!((f.file.as_str(), f.line), (ts.to_str().unwrap(), want), "{func}, line only");
            // No column: the line alone does not give one.
            assert_eq!(f.name, format!("{func} ({}:{want})", ts.display()));
            // With a column, as later V8s give it, at the `(`.
            let (f, _) = map_all(&format!("JS:*{v8_name} {}:{line}:{col}", js.display()));
            assert_eq!((f.file.as_str(), f.line), (ts.to_str().unwrap(), want), "{func}");
            assert!(f.name.starts_with(&format!("{func} ({}:{want}:", ts.display())), "{}", f.name);
        }
    }

    #[test]
    fn minified_private_methods_get_their_names_back() {
        let dir = fixture("sourcemap/methods");
        let (js, ts) = (dir.join("min/counter.js"), dir.join("src/counter.ts"));
        for (minified, original) in [("#r", "#privateWork"), ("#t", "#staticSecret"), ("spinMethod", "spinMethod")] {
            // V8 puts a method at its `(`.
            let (line, col) = position_of(&js, &format!("{minified}("));
            let raw = format!("JS:*{minified} {}:{line}:{col}", js.display());
            let (f, w) = map_all(&raw);
            assert!(w.is_empty(), "{w:?}");
            let want = ts_line_of(&ts, &format!("{original}("));
            assert_eq!(f.line, want, "{minified}");
            assert!(f.name.starts_with(&format!("{original} ({}:{want}:", ts.display())), "{minified}: {}", f.name);
        }
        // A map whose names dropped the `#` (terser's): put back.
        let tmp = crate::symbols::test_fixtures::tempdir("srcmap-private");
        let map = std::fs::read_to_string(dir.join("min/counter.js.map"))
            .unwrap()
            .replace("\"#privateWork\"", "\"privateWork\"");
        std::fs::write(tmp.join("counter.js.map"), map).unwrap();
        std::fs::copy(&js, tmp.join("counter.js")).unwrap();
        let (line, col) = position_of(&tmp.join("counter.js"), "#r(");
        let (f, _) = map_all(&format!("JS:*#r {}:{line}:{col}", tmp.join("counter.js").display()));
        assert!(f.name.starts_with("#privateWork ("), "{}", f.name);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_script_transpiled_in_memory_maps_through_the_map_noted_for_it() {
        // As ts-node runs src/fib.ts: V8 sees the compiled text under the
        // .ts path, whose file names no map.
        let dir = fixture("sourcemap");
        let ts = dir.join("src/fib.ts");
        let js = dir.join("inline/fib.js");
        let text = std::fs::read_to_string(&js).unwrap();
        let (line, col) = position_of(&js, "function fibonacci");
        let raw = format!("JS:*fibonacci {}:{line}:{}", ts.display(), col + 1);
        assert_eq!(map_all(&raw).0.line, line, "nothing noted: the compiled position");
        crate::v8::script_maps::note(ts.to_str().unwrap(), map_reference(text.as_bytes()).unwrap().as_str()).unwrap();
        let (f, w) = map_all(&raw);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((f.file.as_str(), f.line), (ts.to_str().unwrap(), ts_line_of(&ts, "function fibonacci")));
    }

    #[test]
    fn a_bundle_is_split_into_its_original_files_and_names() {
        let dir = fixture("sourcemap");
        let js = dir.join("bundle/bundle.min.js");
        // The minifier renamed the functions; the map has the originals.
        let text = std::fs::read_to_string(&js).unwrap();
        let mut seen = Vec::new();
        for (i, line) in text.lines().enumerate() {
            for (c, _) in line.match_indices("function ") {
                let open = line[c..].find('(').unwrap() + c;
                let short = &line[c + 9..open];
                let raw = format!("JS:*{short} {}:{}:{}", js.display(), i + 1, open + 1);
                let (f, w) = map_all(&raw);
                assert!(w.is_empty(), "{w:?}");
                // Only the line (V8 10.2): the line holds several
                // functions, so the compiled position, never another's.
                let (by_line, _) = map_all(&format!("LazyCompile:*{short} {}:{}", js.display(), i + 1));
                assert_eq!(by_line.file, js.display().to_string(), "{short}, line only");
                seen.push((
                    f.name.split(' ').next().unwrap().to_string(),
                    Path::new(&f.file).file_name().unwrap().to_owned(),
                ));
            }
        }
        seen.sort();
        let want: Vec<(String, std::ffi::OsString)> =
            [("add", "math.js"), ("greet", "greet.js"), ("multiply", "math.js")]
                .iter()
                .map(|(n, f)| (n.to_string(), (*f).into()))
                .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn minified_functions_get_their_own_names_never_a_parameter_s() {
        // esbuild --minify of src/shapes.ts (see the fixture's README).
        let dir = fixture("sourcemap/arrows");
        let js = dir.join("out/min.js");
        let text = std::fs::read_to_string(&js).unwrap();
        // (V8's name, text around the function, where V8 places it in
        // that text: an arrow at its parameter, a function at its `(`).
        let cases = [
            ("c", "c=n=>o(n)", 2, "arrowOneParam"),
            ("s", "s=n=>o(n)", 2, "arrowParenless"),
            ("p", "p=async n=>", 8, "asyncArrow"),
            ("b", "b=function(r)", 10, "fnExpr"),
            ("x", "x=function(n)", 10, "anonFnExpr"),
            ("a.arrowProp", "arrowProp:n=>", 10, "a.arrowProp"),
            ("w", "function w(n)", 10, "declared"),
            ("o", "function o(n)", 10, "spin"),
        ];
        for (v8_name, needle, offset, want) in cases {
            let at = text.find(needle).unwrap_or_else(|| panic!("{needle}")) + offset;
            let (line, col) = (text[..at].matches('\n').count() + 1, at - text[..at].rfind('\n').map_or(0, |n| n + 1));
            let (f, w) = map_all(&format!("JS:*{v8_name} {}:{line}:{}", js.display(), col + 1));
            assert!(w.is_empty(), "{w:?}");
            assert!(f.file.ends_with("src/shapes.ts"), "{}", f.file);
            assert_eq!(f.name.split(' ').next().unwrap(), want, "{needle}: {}", f.name);
        }
        // Anonymous: V8's name stays, whatever the map calls the parameter.
        let at = text.find("c=n=>").unwrap() + 2;
        let (f, _) = map_all(&format!("JS:* {}:1:{}", js.display(), at + 1));
        assert!(!f.name.contains("budgetMs"), "{}", f.name);
    }

    #[test]
    fn a_source_with_a_scheme_is_kept_as_written() {
        let dir = crate::symbols::test_fixtures::tempdir("srcmap-scheme");
        let js = dir.join("bundle.js");
        std::fs::write(&js, "function f(){}\n//# sourceMappingURL=bundle.js.map\n").unwrap();
        // One segment: column 0 of line 0 maps to source 0, line 4, column 2.
        std::fs::write(
            dir.join("bundle.js.map"),
            r#"{"version":3,"sources":["webpack://app/./src/a.ts"],"names":[],"mappings":"AAIE"}"#,
        )
        .unwrap();
        let (f, w) = map_all(&format!("JS:*f {}:1:11", js.display()));
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((f.file.as_str(), f.line), ("webpack://app/./src/a.ts", 5));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_map_keeps_the_compiled_position_silently_a_broken_one_warns() {
        let dir = crate::symbols::test_fixtures::tempdir("srcmap");
        let plain = dir.join("plain.js");
        std::fs::write(&plain, "function f() {}\n").unwrap();
        let (f, w) = map_all(&format!("JS:*f {}:1:11", plain.display()));
        assert_eq!((f.file.as_str(), f.line, w.len()), (plain.to_str().unwrap(), 1, 0));

        let broken = dir.join("broken.js");
        std::fs::write(&broken, "function f() {}\n//# sourceMappingURL=broken.js.map\n").unwrap();
        std::fs::write(dir.join("broken.js.map"), "{ not json").unwrap();
        let missing = dir.join("missing.js");
        std::fs::write(&missing, "function f() {}\n//# sourceMappingURL=nowhere.map\n").unwrap();
        let bad_inline = dir.join("inline.js");
        std::fs::write(&bad_inline, "function f() {}\n//# sourceMappingURL=data:application/json;base64,!!!\n")
            .unwrap();
        for script in [&broken, &missing, &bad_inline] {
            let mut maps = SourceMaps::default();
            let mut w = Vec::new();
            for _ in 0..3 {
                let f = maps.function(&format!("JS:*f {}:1:11", script.display()), &mut |x| w.push(x));
                assert_eq!((f.file.as_str(), f.line), (script.to_str().unwrap(), 1));
            }
            assert_eq!(w.len(), 1, "{script:?}: {w:?}");
            assert!(w[0].contains("compiled positions"), "{w:?}");
        }
        // A package that names a map it does not ship: silent; a broken
        // one still warns.
        let pkg = dir.join("node_modules/pkg");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::copy(&missing, pkg.join("missing.js")).unwrap();
        std::fs::copy(&broken, pkg.join("broken.js")).unwrap();
        std::fs::copy(dir.join("broken.js.map"), pkg.join("broken.js.map")).unwrap();
        assert_eq!(map_all(&format!("JS:*f {}:1:11", pkg.join("missing.js").display())).1.len(), 0);
        assert_eq!(map_all(&format!("JS:*f {}:1:11", pkg.join("broken.js").display())).1.len(), 1);
        // No script on disk (an ES module evaluated from a string): silent.
        let eval = format!("JS:*f file://{}/[eval1]:1:11", dir.display());
        let (f, w) = map_all(&eval);
        assert_eq!((f.line, w.len()), (1, 0), "{w:?}");
        // Builtins and names without a position are left alone.
        assert_eq!(map_all("Builtin:ArgumentsAdaptorTrampoline").0.name, "Builtin:ArgumentsAdaptorTrampoline");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn urls_and_paths() {
        assert!(has_scheme("webpack://app/a.ts") && has_scheme("http://x") && !has_scheme("src/a.ts"));
        assert!(!has_scheme("C:/a.ts") && !has_scheme(""));
        assert_eq!(own_name("obj.arrowProp"), Some("arrowProp"));
        assert_eq!(own_name("get size"), Some("size"));
        assert_eq!(own_name(""), None);
        assert_eq!(own_name("(anonymous)"), None);
        assert_eq!(script_path("file:///a/b%20c.js"), Some(PathBuf::from("/a/b c.js")));
        assert_eq!(script_path("node:internal/x"), None);
        assert_eq!(script_path("/a.js"), Some(PathBuf::from("/a.js")));
        assert_eq!(normalize(Path::new("/a/b/../c/./d.ts")), PathBuf::from("/a/c/d.ts"));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(split_position("/a.js:3:13"), Some(("/a.js", 3, 13)));
        assert_eq!(split_position("/a.js:3"), Some(("/a.js", 3, u32::MAX)));
        assert_eq!(split_position("VM12"), None);
        assert_eq!(split_position("webpack://app/a.js:3:1"), Some(("webpack://app/a.js", 3, 1)));
    }
}
