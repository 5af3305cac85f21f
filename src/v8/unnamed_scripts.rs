//! Functions of scripts without a name (`eval`, `new Function`, `vm`
//! code compiled without a filename): V8's code events name them
//! `work :1:15`, with an empty URL, so two such scripts' functions at the
//! same line and column would be one. Each gets its script's id as its URL,
//! `work VM79:1:15`, as Chrome's DevTools show such scripts. V8's own log
//! keeps the empty URL: [`as_v8_logs_it`] gives that name back (a script
//! really named `VM12` is looked up under its own name first).

use std::borrow::Cow;

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

/// Writes `name` with `VM<script>` as its URL into `out` if its URL is
/// empty (`name` ends in ` :<line>` or ` :<line>:<column>`); returns the
/// bytes written, or None (name left as it is) if the URL is not empty or
/// `out` is too small. `script` is asked only for a name with an empty URL.
/// Allocates nothing.
pub fn with_script_id(name: &[u8], script: impl FnOnce() -> i32, out: &mut [u8]) -> Option<usize> {
    use std::io::Write;
    let at = url_end(name).filter(|&at| at > 0 && name[at - 1] == b' ')?;
    let script = script();
    if script < 0 {
        return None;
    }
    let capacity = out.len();
    let mut w = &mut out[..];
    // A slice too small fails the write: the name is left as it is.
    w.write_all(&name[..at]).ok()?;
    write!(w, "{PREFIX}{script}").ok()?;
    w.write_all(&name[at..]).ok()?;
    Some(capacity - w.len())
}

/// `name` as V8's log names it: a `VM<script>` URL given by
/// [`with_script_id`] taken out again.
pub fn as_v8_logs_it(name: &str) -> Cow<'_, str> {
    // The URL starts after the last space before the position.
    let Some(colon) = url_end(name.as_bytes()) else { return Cow::Borrowed(name) };
    let Some(space) = name[..colon].rfind(' ') else { return Cow::Borrowed(name) };
    match name[space + 1..colon].strip_prefix(PREFIX) {
        Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
            Cow::Owned(format!("{}{}", &name[..space + 1], &name[colon..]))
        }
        _ => Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(name: &str, id: i32) -> Option<String> {
        let mut out = [0u8; 64];
        with_script_id(name.as_bytes(), || id, &mut out).map(|n| String::from_utf8(out[..n].to_vec()).unwrap())
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
        let _ = with_script_id(
            b"JS:*work /a.js:1:15",
            || {
                asked += 1;
                1
            },
            &mut out,
        );
        assert_eq!(asked, 0);
        let _ = with_script_id(
            b"JS:*work :1:15",
            || {
                asked += 1;
                1
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
    fn the_v8_log_s_name_comes_back() {
        assert_eq!(as_v8_logs_it("work VM79:1:15"), "work :1:15");
        assert_eq!(as_v8_logs_it(" VM79:1:1"), " :1:1");
        assert_eq!(as_v8_logs_it("work VM79:3"), "work :3");
        assert_eq!(as_v8_logs_it("work /a/VM79:1:15"), "work /a/VM79:1:15");
        assert_eq!(as_v8_logs_it("work /a.js:1:15"), "work /a.js:1:15");
        assert_eq!(as_v8_logs_it("work VMx:1:15"), "work VMx:1:15");
        assert_eq!(as_v8_logs_it("work"), "work");
    }
}
