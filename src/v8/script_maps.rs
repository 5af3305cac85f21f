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

/// The largest map kept.
pub const MAX_MAP_BYTES: u64 = 256 << 20;
/// All maps together: what a process keeps for naming its frames is bounded.
const MAX_NOTED_BYTES: u64 = 256 << 20;
/// Scripts remembered as asked, per thread, before the memory is cleared.
const MAX_SEEN: usize = 1 << 16;

#[derive(Default)]
struct Noted {
    maps: HashMap<String, Arc<str>>,
    bytes: usize,
}

fn noted() -> &'static Mutex<Noted> {
    static NOTED: OnceLock<Mutex<Noted>> = OnceLock::new();
    NOTED.get_or_init(Default::default)
}

/// Notes the map (a `data:` URL) of the script `url` (as its frames name
/// it), for every later symbolization in this process. A map noted again
/// for the same script replaces it.
pub fn note(url: &str, map: &str) -> Result<(), String> {
    if url.is_empty() || !map.starts_with("data:") || map.len() as u64 > MAX_MAP_BYTES {
        return Err(format!("a source map needs a script path and a data: URL of at most {} MiB", MAX_MAP_BYTES >> 20));
    }
    let mut noted = noted().lock().unwrap_or_else(|e| e.into_inner());
    if noted.maps.get(url).is_some_and(|m| **m == *map) {
        return Ok(());
    }
    let replaced = noted.maps.get(url).map_or(0, |m| m.len());
    let bytes = noted.bytes - replaced + map.len();
    if bytes as u64 > MAX_NOTED_BYTES {
        return Err(format!("maps of scripts compiled in memory are kept up to {} MiB", MAX_NOTED_BYTES >> 20));
    }
    noted.maps.insert(url.to_string(), Arc::from(map));
    noted.bytes = bytes;
    Ok(())
}

/// The map noted for the script `url`.
pub fn get(url: &str) -> Option<Arc<str>> {
    noted().lock().unwrap_or_else(|e| e.into_inner()).maps.get(url).cloned()
}

/// Every map noted in this process: (script URL, map).
pub fn all() -> Vec<(String, String)> {
    let noted = noted().lock().unwrap_or_else(|e| e.into_inner());
    noted.maps.iter().map(|(url, map)| (url.clone(), map.to_string())).collect()
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

/// Whether a code event's name may be of a script worth asking for its
/// map ([`worth_noting`] decides): a cheap look at the name's end, which
/// rules out Node's internal modules and local `.js` files without
/// allocating. Never false for a script [`worth_noting`] would take.
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
    // The URL's last part: a URL with spaces is longer, never shorter.
    let url = &tail[tail.iter().rposition(|&b| b == b' ').map_or(0, |i| i + 1)..];
    let local = url.starts_with(b"/") || url.starts_with(b"file://");
    let own_map = [&b".js"[..], b".mjs", b".cjs"].iter().any(|ext| url.ends_with(ext));
    !(url.starts_with(b"node:") || (local && own_map))
}

/// The script URL of a code event's name (`JS:*work file:///app/a.ts:3:10`)
/// if the script's map is worth asking for: not one of Node's own modules,
/// nor a `.js`, `.mjs` or `.cjs` file, whose map (if any) is read from the
/// file itself.
pub fn worth_noting(name: &str) -> Option<String> {
    let js = super::codemap::parse_js_name(name);
    if !js.is_js || js.location.is_empty() {
        return None;
    }
    let url = strip_position(&js.location);
    let local = url.starts_with('/') || url.starts_with("file://");
    let own_map = [".js", ".mjs", ".cjs"].iter().any(|ext| url.ends_with(ext));
    let skip = url.is_empty() || url.starts_with("node:") || (local && own_map);
    (!skip).then(|| url.to_string())
}

/// `url` without a trailing `:<line>` or `:<line>:<column>`.
fn strip_position(location: &str) -> &str {
    let mut url = location;
    for _ in 0..2 {
        match url.rsplit_once(':') {
            Some((rest, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => url = rest,
            _ => break,
        }
    }
    url
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
            "JS:~ /my dir/a.js:1:1",
            "JS:^w webpack://app/./src/a.js:1:15",
        ] {
            assert!(may_be_worth_noting(name.as_bytes()), "{name}");
        }
        for name in ["JS:*work /app/a.js:3:10", "JS:~emit node:events:45:20", "JS:~ file:///app/a.mjs:1:1"] {
            assert!(!may_be_worth_noting(name.as_bytes()), "{name}");
        }
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
