//! Frame names for the exporters: the profile's own symbols when it has
//! them, otherwise one function per frame named by its address.

use std::borrow::Cow;

use rustc_hash::FxHashMap;

use crate::profile::{Function, FunctionKind, ProfileData, Symbols};

/// The symbols to export with: `profile.symbols`, or a stand-in that names
/// every frame `0x…` and attributes it to the module whose range holds it.
///
/// Identical functions are merged: V8 gives each isolate (each worker) and
/// each tier its own code object for one JS function, and the symbolizer
/// names each; views should count `fib (app.js:3:1)` once, not per copy.
pub fn resolve(profile: &ProfileData) -> Cow<'_, Symbols> {
    match &profile.symbols {
        Some(s) => merge_identical(s, profile).map_or(Cow::Borrowed(s), Cow::Owned),
        None => Cow::Owned(address_symbols(profile)),
    }
}

/// `s` with every frame pointing at the first of identical functions, or
/// `None` if no two are identical. The later copies stay in the table,
/// unused, so function indices keep their meaning. Modules compare by
/// path, so the same function in two processes of one profile is one.
fn merge_identical<'a>(s: &'a Symbols, profile: &'a ProfileData) -> Option<Symbols> {
    type Key<'a> = (&'a str, &'a str, &'a str, u32, FunctionKind);
    fn key<'a>(f: &'a Function, profile: &'a ProfileData) -> Key<'a> {
        let module =
            usize::try_from(f.module).ok().and_then(|m| profile.modules.get(m)).map_or("", |m| m.path.as_str());
        (f.name.as_str(), module, f.file.as_str(), f.line, f.kind)
    }
    let key = |f: &'a Function| key(f, profile);
    let mut first: FxHashMap<Key, u32> = FxHashMap::default();
    let remap: Vec<u32> =
        s.functions.iter().enumerate().map(|(i, f)| *first.entry(key(f)).or_insert(i as u32)).collect();
    if remap.iter().enumerate().all(|(i, &j)| i as u32 == j) {
        return None;
    }
    Some(Symbols {
        frame_function: s.frame_function.iter().map(|&f| remap.get(f as usize).copied().unwrap_or(f)).collect(),
        frame_line: s.frame_line.clone(),
        functions: s.functions.clone(),
    })
}

fn address_symbols(profile: &ProfileData) -> Symbols {
    // Modules sorted by start, for a binary search per frame.
    let mut by_start: Vec<usize> = (0..profile.modules.len()).collect();
    by_start.sort_by_key(|&i| profile.modules[i].start);
    let module_of = |addr: u64| -> i32 {
        let k = by_start.partition_point(|&i| profile.modules[i].start <= addr);
        match k.checked_sub(1).map(|k| by_start[k]) {
            Some(i) if addr < profile.modules[i].end => i as i32,
            _ => -1,
        }
    };
    let functions = profile.frame_address.iter().map(|&a| Function::unknown(a, module_of(a))).collect();
    let n = profile.frame_address.len();
    Symbols { frame_function: (0..n as u32).collect(), frame_line: vec![0; n], functions }
}

/// The file name of a module path (`/usr/lib/libc.so.6` → `libc.so.6`).
pub fn basename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// The module a function is in, by file name, or "" for none.
pub fn module_name<'a>(profile: &'a ProfileData, f: &Function) -> &'a str {
    usize::try_from(f.module).ok().and_then(|m| profile.modules.get(m)).map(|m| basename(&m.path)).unwrap_or("")
}

/// A thread's label in views that put threads side by side: its name (its
/// role when the OS name says nothing, see `roles::display_name`) and tid,
/// and its pid when the profile holds several processes.
pub fn thread_label(profile: &ProfileData, thread: usize) -> String {
    let t = &profile.threads[thread];
    let name = crate::profile::roles::display_name(profile, thread);
    if profile.process_count() > 1 {
        format!("{name} ({}, pid {})", t.tid, profile.pid_of(thread))
    } else {
        format!("{name} ({})", t.tid)
    }
}

/// Function names for collapsed stacks, where `;` separates frames and a
/// line ends the record: those characters are replaced, nothing else.
pub fn collapsed_safe(name: &str) -> Cow<'_, str> {
    if name.contains([';', '\n', '\r']) {
        Cow::Owned(name.replace(';', ":").replace(['\n', '\r'], " "))
    } else {
        Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use crate::profile::Module;

    #[test]
    fn address_fallback_names_and_attributes_modules() {
        let mut p = sample_profile();
        p.symbols = None;
        p.frame_address = vec![0x1000, 0x20_000, 0x5, 0xffff];
        p.modules = vec![
            Module { path: "/b".into(), start: 0x20_000, end: 0x30_000, ..Default::default() },
            Module { path: "/a".into(), start: 0x1000, end: 0x2000, ..Default::default() },
        ];
        let s = resolve(&p);
        let names: Vec<_> = s.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["0x1000", "0x20000", "0x5", "0xffff"]);
        let mods: Vec<_> = s.functions.iter().map(|f| f.module).collect();
        assert_eq!(mods, [1, 0, -1, -1]);
    }

    #[test]
    fn identical_functions_merge() {
        let mut p = sample_profile();
        let s = p.symbols.as_mut().unwrap();
        s.functions[3] = s.functions[1].clone(); // "c" is another copy of "a"
        let r = resolve(&p);
        assert_eq!(r.frame_function, vec![0, 1, 2, 1]);
        assert_eq!(r.functions.len(), 4);
    }

    #[test]
    fn symbols_are_used_when_present() {
        let p = sample_profile();
        assert!(matches!(resolve(&p), Cow::Borrowed(_)));
        assert_eq!(basename("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(basename("node"), "node");
        assert_eq!(collapsed_safe("a;b\nc"), "a:b c");
        assert_eq!(thread_label(&p, 1), "worker (101)");
    }
}
