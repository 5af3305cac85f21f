//! Functions of scripts without a name (`eval`, `new Function`, `vm`
//! code compiled without a filename): V8's code events name them
//! `work :1:15`, with an empty URL, so two such scripts' functions at the
//! same line and column would be one. Each gets the script's
//! `//# sourceURL` as its URL where it has one (bundlers' `eval` builds
//! name every module so), `work webpack://app/./src/a.js:1:15`, and its
//! script's id otherwise, `work VM79:1:15`, as Chrome's DevTools show such
//! scripts. V8's own log keeps the empty URL: [`as_v8_logs_it`] gives that
//! name back.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The URL a script without a name is shown under.
const PREFIX: &str = "VM";

/// The index of the `:` that ends the URL of a name ending in
/// `:<line>` or `:<line>:<column>` (`VM79:1:15`: the URL ends at the first
/// colon of the position). Allocates nothing.
fn url_end(name: &[u8]) -> Option<usize> {
    let mut first = None;
    let mut colons = 0;
    for i in (0..name.len()).rev() {
        match name[i] {
            b'0'..=b'9' => {}
            b':' if colons < 2 && i + 1 < name.len() && name[i + 1] != b':' => {
                colons += 1;
                first = Some(i);
            }
            _ => break,
        }
    }
    first
}

/// Whether `url` is a script's id as [`with_script_url`] writes it
/// (`VM79`), unique only within one isolate.
pub fn is_id_url(url: &str) -> bool {
    url.strip_prefix(PREFIX).is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// What identifies a script without a name.
pub struct Script<'a> {
    /// Its `//# sourceURL`, if it has one.
    pub source_url: Option<&'a [u8]>,
    /// Its id (negative: none).
    pub id: i32,
}

/// Whether a `//# sourceURL` can stand as a URL in a frame's name, which
/// readers split at spaces and at the position's colons.
fn usable(url: &[u8]) -> bool {
    !url.is_empty() && url.iter().all(|&b| b > b' ' && b != 0x7f) && url_end(url).is_none()
}

/// Writes `name` with its script's URL (see the module docs) into `out` if
/// its URL is empty (`name` ends in ` :<line>` or ` :<line>:<column>`);
/// returns the bytes written, or None (name left as it is) if the URL is
/// not empty or `out` is too small. `script` is asked only for a name with
/// an empty URL. Allocates nothing.
pub fn with_script_url<'a>(name: &[u8], script: impl FnOnce() -> Script<'a>, out: &mut [u8]) -> Option<usize> {
    use std::io::Write;
    let at = url_end(name).filter(|&at| at > 0 && name[at - 1] == b' ')?;
    let script = script();
    let capacity = out.len();
    let mut w = &mut out[..];
    // A slice too small fails the write: the name is left as it is.
    w.write_all(&name[..at]).ok()?;
    match script.source_url.filter(|u| usable(u)) {
        Some(url) => w.write_all(url).ok()?,
        None if script.id >= 0 => write!(w, "{PREFIX}{}", script.id).ok()?,
        None => return None,
    }
    w.write_all(&name[at..]).ok()?;
    Some(capacity - w.len())
}

/// (isolate address, script id) -> the `//# sourceURL` a script without a
/// name was shown under (None: its id), while the isolate lives: for
/// naming its functions where V8's log names them (inlined functions),
/// which knows the script's id only.
type Shown = Mutex<HashMap<(usize, i32), Option<Box<str>>>>;

fn shown() -> &'static Shown {
    static SHOWN: OnceLock<Shown> = OnceLock::new();
    SHOWN.get_or_init(Default::default)
}

/// Scripts remembered at most (per process): past that, their functions
/// inlined elsewhere keep V8's empty URL.
const MAX_SHOWN: usize = 1 << 16;

/// Remembers what [`with_script_url`] showed script `id` of `isolate` under.
pub fn remember(isolate: usize, script: &Script) {
    let mut shown = shown().lock().unwrap_or_else(|e| e.into_inner());
    if shown.len() < MAX_SHOWN && !shown.contains_key(&(isolate, script.id)) {
        let url = script.source_url.filter(|u| usable(u)).map(|u| String::from_utf8_lossy(u).into());
        shown.insert((isolate, script.id), url);
    }
}

/// What script `id` of the live `isolate` was shown under: None if not
/// known, else its sourceURL, or None for its id.
pub fn url_of(isolate: usize, id: i32) -> Option<Option<String>> {
    let shown = shown().lock().unwrap_or_else(|e| e.into_inner());
    shown.get(&(isolate, id)).map(|u| u.as_deref().map(str::to_string))
}

/// Forgets the scripts of an isolate that goes away (its address may be
/// given to another).
pub fn forget_isolate(isolate: usize) {
    shown().lock().unwrap_or_else(|e| e.into_inner()).retain(|&(i, _), _| i != isolate);
}

/// `name` as V8's log would name it had [`with_script_url`] given it its
/// URL: the URL taken out again. For a lookup after the name itself found
/// nothing (a script really named `VM12` is in the log as it is).
pub fn as_v8_logs_it(name: &str) -> Cow<'_, str> {
    // The URL starts after the last space before the position.
    let Some(colon) = url_end(name.as_bytes()) else { return Cow::Borrowed(name) };
    let Some(space) = name[..colon].rfind(' ') else { return Cow::Borrowed(name) };
    if space + 1 == colon {
        return Cow::Borrowed(name);
    }
    Cow::Owned(format!("{}{}", &name[..space + 1], &name[colon..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(name: &str, id: i32) -> Option<String> {
        named(name, None, id)
    }

    fn named(name: &str, source_url: Option<&str>, id: i32) -> Option<String> {
        let mut out = [0u8; 64];
        let script = || Script { source_url: source_url.map(str::as_bytes), id };
        with_script_url(name.as_bytes(), script, &mut out).map(|n| String::from_utf8(out[..n].to_vec()).unwrap())
    }

    #[test]
    fn empty_urls_get_the_script_s_id() {
        assert_eq!(renamed("JS:*work :1:15", 79).as_deref(), Some("JS:*work VM79:1:15"));
        // V8 10.2: line only; top-level code without a function name.
        assert_eq!(renamed("LazyCompile:~work :3", 0).as_deref(), Some("LazyCompile:~work VM0:3"));
        assert_eq!(renamed("JS:~ :1:1", 1234567).as_deref(), Some("JS:~ VM1234567:1:1"));
        assert_eq!(renamed("JS:~get a b :2:7", 5).as_deref(), Some("JS:~get a b VM5:2:7"));
    }

    #[test]
    fn the_id_is_asked_for_names_without_a_url_only() {
        let mut out = [0u8; 64];
        let mut asked = 0;
        let _ = with_script_url(
            b"JS:*work /a.js:1:15",
            || {
                asked += 1;
                Script { source_url: None, id: 1 }
            },
            &mut out,
        );
        assert_eq!(asked, 0);
        let _ = with_script_url(
            b"JS:*work :1:15",
            || {
                asked += 1;
                Script { source_url: None, id: 1 }
            },
            &mut out,
        );
        assert_eq!(asked, 1);
    }

    #[test]
    fn names_with_a_url_or_no_position_stay() {
        assert_eq!(renamed("JS:*work /a.js:1:15", 79), None);
        assert_eq!(renamed("JS:*work node:fs:1:15", 79), None);
        assert_eq!(renamed("JS:*work", 79), None);
        assert_eq!(renamed("JS:*work :", 79), None);
        assert_eq!(renamed("JS:*work ::1", 79), None);
        assert_eq!(renamed(":1:1", 79), None);
        assert_eq!(renamed("JS:*work :1:15", -1), None);
        // Too long for the buffer: left as it is.
        let long = format!("JS:*{} :1:1", "x".repeat(60));
        assert_eq!(renamed(&long, 1), None);
    }

    #[test]
    fn a_source_url_is_the_url_where_usable() {
        assert_eq!(
            named("JS:*work :1:15", Some("webpack://app/./src/a.js"), 7).as_deref(),
            Some("JS:*work webpack://app/./src/a.js:1:15")
        );
        // Empty, with spaces, or ending like a position: the id instead.
        for bad in ["", "my file.js", "a.js:3", "tab\there"] {
            assert_eq!(named("JS:*work :1:15", Some(bad), 7).as_deref(), Some("JS:*work VM7:1:15"), "{bad:?}");
        }
        assert_eq!(named("JS:*work :1:15", Some("a b"), -1), None);
        // Too long for the buffer: left as it is.
        assert_eq!(named("JS:*work :1:15", Some(&"u".repeat(60)), 7), None);
    }

    #[test]
    fn the_v8_log_s_name_comes_back() {
        assert_eq!(as_v8_logs_it("work VM79:1:15"), "work :1:15");
        assert_eq!(as_v8_logs_it(" VM79:1:1"), " :1:1");
        assert_eq!(as_v8_logs_it("work VM79:3"), "work :3");
        assert_eq!(as_v8_logs_it("work webpack://app/./a.js:1:15"), "work :1:15");
        assert_eq!(as_v8_logs_it("work :1:15"), "work :1:15");
        assert_eq!(as_v8_logs_it("work"), "work");
    }
}
