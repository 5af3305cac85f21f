//! Inline source maps of scripts compiled from text that is not their
//! file's, kept for naming their frames.
//!
//! A TypeScript loader (ts-node, tsx, an ESM `load` hook), a test runner's
//! transform, or a bundler's `eval` build hands V8 JavaScript whose map is
//! inline (`//# sourceMappingURL=data:…`) and on disk nowhere. Such maps
//! are noted two ways: by the module loader hooks in JavaScript
//! ([`note`]), and from V8's code events, which carry the script: its
//! `sourceMappingURL` is asked once per script ([`first_sight`],
//! [`worth_noting`]). Scripts that are `.js` files on disk are left out:
//! their map, if any, is read from the file.
//!
//! The maps are keyed by the script's URL as frames' names carry it, and
//! bounded in size, each and together.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use super::codemap::{js_location, strip_number};

/// The largest map kept.
pub const MAX_MAP_BYTES: u64 = 256 << 20;
/// All maps and their scripts' URLs together: what a process keeps for
/// naming its frames is bounded.
const MAX_NOTED_BYTES: u64 = 256 << 20;
/// Scripts with a map kept, at most.
const MAX_NOTED_MAPS: usize = 1 << 16;
/// Scripts remembered as asked, per thread, before the memory is cleared.
const MAX_SEEN: usize = 1 << 16;

#[derive(Default)]
struct Noted {
    /// A script's map; None where two different maps came for one id-named
    /// script (see [`note`]).
    maps: HashMap<String, Option<Arc<str>>>,
    bytes: usize,
}

fn noted() -> &'static Mutex<Noted> {
    static NOTED: OnceLock<Mutex<Noted>> = OnceLock::new();
    NOTED.get_or_init(Default::default)
}

/// Notes the map (a `data:` URL) of the script `url` (as its frames name
/// it), for every later symbolization in this process. A map noted again
/// for the same script replaces it, except for a script named by its id
/// (`VM12`): ids are per isolate and per process, so two different maps
/// for one such name make it ambiguous, and its frames keep their compiled
/// positions rather than take another script's.
pub fn note(url: &str, map: &str) -> Result<(), String> {
    if url.is_empty() || !map.starts_with("data:") || map.len() as u64 > MAX_MAP_BYTES {
        return Err(format!("a source map needs a script path and a data: URL of at most {} MiB", MAX_MAP_BYTES >> 20));
    }
    let mut noted = noted().lock().unwrap_or_else(|e| e.into_inner());
    let before = noted.maps.get(url).cloned();
    let map = match &before {
        Some(Some(m)) if **m == *map => return Ok(()),
        Some(_) if super::unnamed_scripts::is_id_url(url) => None,
        _ => Some(map),
    };
    let size = |m: &Option<Option<Arc<str>>>| m.as_ref().map_or(0, |m| url.len() + m.as_ref().map_or(0, |m| m.len()));
    let bytes = noted.bytes - size(&before) + url.len() + map.map_or(0, str::len);
    if bytes as u64 > MAX_NOTED_BYTES || (before.is_none() && noted.maps.len() >= MAX_NOTED_MAPS) {
        return Err(format!(
            "maps of scripts compiled in memory are kept up to {} MiB and {MAX_NOTED_MAPS} scripts",
            MAX_NOTED_BYTES >> 20
        ));
    }
    noted.maps.insert(url.to_string(), map.map(Arc::from));
    noted.bytes = bytes;
    Ok(())
}

/// The map noted for the script `url`.
pub fn get(url: &str) -> Option<Arc<str>> {
    noted().lock().unwrap_or_else(|e| e.into_inner()).maps.get(url).cloned().flatten()
}

/// Every map noted in this process: (script URL, map).
pub fn all() -> Vec<(String, String)> {
    let noted = noted().lock().unwrap_or_else(|e| e.into_inner());
    noted.maps.iter().filter_map(|(url, map)| Some((url.clone(), map.as_ref()?.to_string()))).collect()
}

thread_local! {
    static SEEN: RefCell<HashSet<(usize, i32)>> = RefCell::new(HashSet::new());
}

/// Whether this is the first time this thread sees script `id` of the
/// isolate at `isolate`: code events come many per script, its map is
/// asked once.
pub fn first_sight(isolate: usize, id: i32) -> bool {
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if seen.len() >= MAX_SEEN {
            seen.clear();
        }
        seen.insert((isolate, id))
    })
}

/// Whether a code event's name (bytes as V8 gives them) may be of a script
/// worth asking for its map: never false where [`worth_noting`] would take
/// it, and false for nearly all code of Node's own modules and of local
/// `.js` files. Allocates nothing; most names take a byte scan only, as it
/// runs for every function V8 compiles.
pub fn may_be_worth_noting(name: &[u8]) -> bool {
    let mut end = name.len();
    for _ in 0..2 {
        let digits = name[..end].iter().rev().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || end < digits + 1 || name[end - digits - 1] != b':' {
            break;
        }
        end -= digits + 1;
    }
    let tail = &name[..end];
    let last_space = tail.iter().rposition(|&b| b == b' ');
    let url = &tail[last_space.map_or(0, |i| i + 1)..];
    let local = url.starts_with(b"/") || url.starts_with(b"file://");
    let own_map = [&b".js"[..], b".mjs", b".cjs"].iter().any(|ext| url.ends_with(ext));
    if !(url.starts_with(b"node:") || (local && own_map)) {
        return true;
    }
    // With one space (between the function and a URL that starts as only
    // a URL does) that last part is the URL; with more, the function's
    // name or the URL holds spaces, and the parser decides. Names that
    // are not UTF-8 are decided on their lossy text later.
    if tail.iter().filter(|&&b| b == b' ').count() == 1 {
        return false;
    }
    std::str::from_utf8(name).map_or(true, |name| script_url(name).is_some())
}

/// The script URL of a code event's name (`JS:*work file:///app/a.ts:3:10`)
/// if the script's map is worth asking for: not one of Node's own modules,
/// nor a `.js`, `.mjs` or `.cjs` file, whose map (if any) is read from the
/// file itself.
pub fn worth_noting(name: &str) -> Option<String> {
    script_url(name).map(str::to_string)
}

/// [`worth_noting`]'s URL, borrowed from `name`.
fn script_url(name: &str) -> Option<&str> {
    let url = strip_position(js_location(name)?);
    let local = url.starts_with('/') || url.starts_with("file://");
    let own_map = [".js", ".mjs", ".cjs"].iter().any(|ext| url.ends_with(ext));
    let skip = url.is_empty() || url.starts_with("node:") || (local && own_map);
    (!skip).then_some(url)
}

/// `url` without a trailing `:<line>` or `:<line>:<column>`.
fn strip_position(location: &str) -> &str {
    let line = strip_number(location).unwrap_or(location);
    strip_number(line).unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_worth_asking_for_their_map() {
        assert_eq!(worth_noting("JS:*work file:///app/a.ts:3:10").as_deref(), Some("file:///app/a.ts"));
        assert_eq!(worth_noting("JS:~ /app/src/b.tsx:1:1").as_deref(), Some("/app/src/b.tsx"));
        assert_eq!(worth_noting("JS:^work webpack://app/./src/a.js:1:15").as_deref(), Some("webpack://app/./src/a.js"));
        assert_eq!(worth_noting("Script:~ /app/c.mts").as_deref(), Some("/app/c.mts"));
        assert_eq!(worth_noting("JS:*work /app/a.js:3:10"), None);
        assert_eq!(worth_noting("JS:*work file:///app/a.mjs:3:10"), None);
        assert_eq!(worth_noting("Builtin:ArrayMap"), None);
        assert_eq!(worth_noting("JS:~emit node:events:45:20"), None);
        for name in [
            "JS:*work file:///app/a.ts:3:10",
            "Script:~ /app/c.mts",
            "JS:~ /my dir/a.ts:1:1",
            "JS:^w webpack://app/./src/a.js:1:15",
        ] {
            assert!(may_be_worth_noting(name.as_bytes()), "{name}");
        }
        for name in ["JS:*work /app/a.js:3:10", "JS:~emit node:events:45:20", "JS:~ file:///app/a.mjs:1:1"] {
            assert!(!may_be_worth_noting(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn the_byte_filter_agrees_with_the_parser() {
        for name in [
            "JS:~f webpack://x /y.js:1:1",
            "JS:~get size /my app/a.ts:1:1",
            "JS:~get size node:internal/a:1:1",
            "JS:~ [eval]:1:1",
            "JS:*a b c /d e.mjs:3:4",
            "LazyCompile:~f file:///A B/c.cts:3",
            "Builtin:ArrayMap",
            "JS:~ VM12:1:1",
            "JS:~",
        ] {
            assert!(may_be_worth_noting(name.as_bytes()) || worth_noting(name).is_none(), "{name}");
        }
        for name in ["JS:~get size node:internal/a:1:1", "JS:*a b /d.mjs:3:4"] {
            assert!(!may_be_worth_noting(name.as_bytes()), "{name}");
        }
        assert!(may_be_worth_noting(b"JS:~f g /a\xff.js:1:1"));
    }

    #[test]
    fn an_id_named_script_with_two_maps_keeps_neither() {
        note("VM90001", "data:application/json,{\"a\":1}").unwrap();
        note("VM90001", "data:application/json,{\"a\":1}").unwrap();
        assert!(get("VM90001").is_some());
        note("VM90001", "data:application/json,{\"b\":2}").unwrap();
        assert_eq!(get("VM90001"), None);
        note("VM90001", "data:application/json,{\"a\":1}").unwrap();
        assert_eq!(get("VM90001"), None);
        assert!(!all().iter().any(|(u, _)| u == "VM90001"));
        // A named script's map is replaced.
        note("/noted/b.ts", "data:application/json,{}").unwrap();
        note("/noted/b.ts", "data:application/json,{ }").unwrap();
        assert_eq!(get("/noted/b.ts").as_deref(), Some("data:application/json,{ }"));
    }

    #[test]
    fn a_script_is_asked_once_per_isolate() {
        assert!(first_sight(7, 12));
        assert!(!first_sight(7, 12));
        assert!(first_sight(8, 12));
    }

    #[test]
    fn maps_are_data_urls_within_bounds() {
        assert!(note("", "data:,{}").is_err() && note("/a.ts", "{}").is_err());
        note("/noted/a.ts", "data:application/json,{}").unwrap();
        assert_eq!(get("/noted/a.ts").as_deref(), Some("data:application/json,{}"));
        note("/noted/a.ts", "data:application/json,{ }").unwrap();
        assert_eq!(get("/noted/a.ts").as_deref(), Some("data:application/json,{ }"));
        assert!(all().iter().any(|(u, _)| u == "/noted/a.ts"));
    }
}
