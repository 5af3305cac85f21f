//! The macOS addons, read as the Mach-O files a Mac will load.
//!
//! `npm run build:darwin` links `machsampler.darwin-arm64.node` and
//! `machsampler.darwin-x64.node` on any host. Nothing here trusts that
//! build: each file is parsed with the `object` crate and must be
//!
//! - a 64-bit Mach-O dynamic library (`MH_DYLIB`) for its CPU (arm64 but
//!   not arm64e; x86_64);
//! - exporting `_napi_register_module_v1` from its export trie (what
//!   Node's and Electron's `dlsym` finds);
//! - ad-hoc code signed on arm64 (the kernel refuses unsigned arm64 code),
//!   with every page hash matching the file;
//! - built for macOS (`LC_BUILD_VERSION`) 11.0 on arm64 and 10.15 or
//!   earlier on x86_64;
//! - linked against libSystem only, every undefined symbol being one that
//!   the libSystem stubs (`.tbd` files) shipped with zig export for that
//!   architecture, or a `napi_*` function looked up in the host process
//!   (Node or Electron) at load;
//! - free of lazy binding for every function called while a thread is
//!   suspended, inside the thread hook, or on each tick
//!   ([`CALLED_WHILE_STOPPED`]): each is bound when dyld loads the addon
//!   (a non-lazy bind, or a chained fixup, which is never lazy). The only
//!   lazily bound symbols allowed are helpers the compiler itself emits
//!   ([`compiler_helpers`]), which none of those paths calls.
//!
//! The tests that read the built files are `#[ignore]`d in a plain
//! `cargo test`, which does not build them; `npm run test:macho` (part of
//! `npm test`, right after the build) runs them. Each check is also run on
//! a deliberately broken copy of a real file, to show that it fails.
//!
//! Environment: `MACHSAMPLER_DARWIN_DIR` (where the `.node` files are;
//! default: the package root), `MACHSAMPLER_TBD_DIR` (the `.tbd` stubs;
//! default: zig's in the venv `scripts/build-darwin.sh` makes).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use object::macho;
use object::read::macho::{LoadCommandVariant, MachHeader, MachOFile64, Nlist};
use object::{Endianness, Object, ObjectSection};
use sha2::{Digest, Sha256};

/// Functions the sampler calls while a thread is suspended (between
/// `thread_suspend` and `thread_resume`, including the allocation check's
/// `StoppedWindow`), inside the pthread introspection hook (which runs on
/// threads that may hold dyld's or libpthread's locks), and on every tick.
/// None may go through dyld's lazy binder.
const CALLED_WHILE_STOPPED: &[&str] = &[
    // The stopped window.
    "_thread_suspend",
    "_thread_get_state",
    "_thread_resume",
    "_mach_absolute_time",
    "_pthread_threadid_np",
    // The thread hook.
    "_pthread_self",
    "_pthread_mach_thread_np",
    "_pthread_get_stackaddr_np",
    "_pthread_get_stacksize_np",
    "_mach_thread_self",
    "_mach_port_deallocate",
    "_getpid",
    "_pthread_mutex_lock",
    "_pthread_mutex_unlock",
    "_sched_yield",
    // Each tick.
    "_mach_wait_until",
    "_clock_gettime",
    "_thread_info",
];

/// Lazily bound symbols that are allowed: calls LLVM emits on its own
/// rather than through a declaration `-Zplt=no` could mark, none of them on
/// the paths above. `_Unwind_Resume` continues a panic's unwinding (no
/// panic unwinds through the stopped window or the hook: both only call
/// functions that cannot panic); `__availability_version_check` backs the
/// standard library's OS-version checks; `__bzero` (x86_64) is how LLVM
/// lowers large zeroing of memory on Darwin.
fn compiler_helpers(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Arm64 => &["__Unwind_Resume", "__availability_version_check"],
        Arch::X86_64 => &["__Unwind_Resume", "__availability_version_check", "___bzero"],
    }
}

const LIBSYSTEM: &str = "/usr/lib/libSystem.B.dylib";
const REGISTER: &str = "_napi_register_module_v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Arm64,
    X86_64,
}

impl Arch {
    fn file_name(self) -> &'static str {
        match self {
            Arch::Arm64 => "machsampler.darwin-arm64.node",
            Arch::X86_64 => "machsampler.darwin-x64.node",
        }
    }

    /// Whether a `.tbd` target's architecture (`arm64e`, `x86_64`, ...)
    /// serves a file of this one. An arm64 file links against arm64 and
    /// arm64e exports (zig's stubs list most of libSystem for arm64e only);
    /// x86_64h exports are not for plain x86_64.
    fn accepts_tbd_arch(self, arch: &str) -> bool {
        match self {
            Arch::Arm64 => arch == "arm64" || arch == "arm64e" || arch.starts_with("arm64e."),
            Arch::X86_64 => arch == "x86_64",
        }
    }
}

// ---------------------------------------------------------------------------
// TAPI text stubs

/// What a set of `.tbd` files (TAPI text stubs, version 4, as zig ships)
/// says each library exports for one architecture.
#[derive(Default, Debug)]
struct Stubs {
    /// Install name -> exported symbols.
    exports: HashMap<String, HashSet<String>>,
    /// Install name -> libraries it re-exports.
    reexports: HashMap<String, Vec<String>>,
}

impl Stubs {
    fn parse(text: &str, arch: Arch) -> Stubs {
        let mut stubs = Stubs::default();
        for doc in text.split("\n--- ").map(|d| d.split("\n...").next().unwrap_or("")) {
            stubs.add_document(doc, arch);
        }
        stubs
    }

    fn load_dir(dir: &Path, arch: Arch) -> Stubs {
        let mut stubs = Stubs::default();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read the .tbd directory {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "tbd"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no .tbd files in {}", dir.display());
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let part = Stubs::parse(&text, arch);
            for (k, v) in part.exports {
                stubs.exports.entry(k).or_default().extend(v);
            }
            for (k, v) in part.reexports {
                stubs.reexports.entry(k).or_default().extend(v);
            }
        }
        stubs
    }

    fn add_document(&mut self, doc: &str, arch: Arch) {
        let mut install_name = None;
        let mut section = "";
        // The current list item of `exports`/`reexports`/`reexported-libraries`,
        // and the items so far with the section each belongs to.
        let mut item: Item = Vec::new();
        let mut items: Vec<(&str, Item)> = Vec::new();
        for (indent, key, value) in entries(doc) {
            if indent == 0 {
                if !item.is_empty() {
                    items.push((section, std::mem::take(&mut item)));
                }
                section = match key.as_str() {
                    "exports" => "exports",
                    "reexports" => "reexports",
                    "reexported-libraries" => "libraries",
                    _ => "",
                };
                if key == "install-name" {
                    install_name = Some(unquote(&value).to_string());
                }
                continue;
            }
            if section.is_empty() {
                continue;
            }
            if key.starts_with("- ") && !item.is_empty() {
                items.push((section, std::mem::take(&mut item)));
            }
            item.push((key.trim_start_matches("- ").to_string(), flow_list(&value)));
        }
        if !item.is_empty() {
            items.push((section, item));
        }
        let Some(name) = install_name else { return };
        for (section, fields) in items {
            let for_us = fields.iter().any(|(k, v)| {
                k == "targets"
                    && v.iter().any(|t| {
                        t.split_once('-').is_some_and(|(a, platform)| platform == "macos" && arch.accepts_tbd_arch(a))
                    })
            });
            if !for_us {
                continue;
            }
            for (k, values) in fields {
                if section == "libraries" {
                    if k == "libraries" {
                        self.reexports.entry(name.clone()).or_default().extend(values);
                    }
                    continue;
                }
                let set = self.exports.entry(name.clone()).or_default();
                match k.as_str() {
                    "symbols" | "weak-symbols" | "thread-local-symbols" => set.extend(values),
                    "objc-classes" => {
                        for c in values {
                            set.insert(format!("_OBJC_CLASS_$_{c}"));
                            set.insert(format!("_OBJC_METACLASS_$_{c}"));
                        }
                    }
                    "objc-eh-types" => set.extend(values.into_iter().map(|c| format!("_OBJC_EHTYPE_$_{c}"))),
                    "objc-ivars" => set.extend(values.into_iter().map(|c| format!("_OBJC_IVAR_$_{c}"))),
                    _ => {}
                }
            }
        }
    }

    /// Whether `library` (an install name) or a library it re-exports
    /// exports `symbol`.
    fn provides(&self, library: &str, symbol: &str) -> bool {
        let mut seen = HashSet::new();
        let mut todo = vec![library.to_string()];
        while let Some(lib) = todo.pop() {
            if !seen.insert(lib.clone()) {
                continue;
            }
            if self.exports.get(&lib).is_some_and(|s| s.contains(symbol)) {
                return true;
            }
            todo.extend(self.reexports.get(&lib).into_iter().flatten().cloned());
        }
        false
    }
}

/// One list item of a `.tbd` section: its keys and their list values.
type Item = Vec<(String, Vec<String>)>;

/// `key: value` entries of a YAML document, with flow lists (`[ a, b ]`)
/// that span lines joined: (indent, key, value). A list item's first key
/// keeps its `- ` prefix.
fn entries(doc: &str) -> Vec<(usize, String, String)> {
    let mut out: Vec<(usize, String, String)> = Vec::new();
    let mut open = false;
    for line in doc.lines() {
        if open {
            let last = out.last_mut().expect("an open list belongs to an entry");
            last.2.push(' ');
            last.2.push_str(line.trim());
            open = last.2.matches('[').count() > last.2.matches(']').count();
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else { continue };
        let value = value.trim().to_string();
        open = value.matches('[').count() > value.matches(']').count();
        out.push((line.len() - trimmed.len(), key.to_string(), value));
    }
    out
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
        .unwrap_or(s)
}

fn flow_list(value: &str) -> Vec<String> {
    let inner = value.trim().trim_start_matches('[').trim_end_matches(']');
    inner.split(',').map(unquote).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

// ---------------------------------------------------------------------------
// The checks

/// An imported symbol and where dyld looks for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum From {
    /// A library named in the load commands (its install name).
    Library(String),
    /// Flat namespace: every image loaded (from `-undefined dynamic_lookup`).
    Flat,
    /// Anything else (self, main executable, a bad ordinal).
    Other(String),
}

/// What one file is, for the checks and for the log.
#[derive(Debug, Default)]
struct Facts {
    libraries: Vec<String>,
    /// Imported symbol -> where from (symbol table and bind information).
    imports: HashMap<String, BTreeSet<From>>,
    /// Symbols bound when dyld loads the file.
    bound_at_load: BTreeSet<String>,
    /// Symbols bound on first call (LC_DYLD_INFO lazy bind opcodes).
    lazy: BTreeSet<String>,
    chained_fixups: bool,
    bind_at_load_flag: bool,
    sections: Vec<String>,
}

impl Facts {
    fn summary(&self) -> String {
        let has = |s: &str| self.sections.iter().any(|x| x == s);
        format!(
            "{} imports, {} bound at load, {} lazily bound {:?}; {}; MH_BINDATLOAD {}; __la_symbol_ptr {}, __stub_helper {}, __auth_stubs {}",
            self.imports.len(),
            self.bound_at_load.len(),
            self.lazy.len(),
            self.lazy,
            if self.chained_fixups { "LC_DYLD_CHAINED_FIXUPS" } else { "LC_DYLD_INFO bind opcodes" },
            if self.bind_at_load_flag { "set" } else { "not set" },
            if has("__la_symbol_ptr") { "present" } else { "absent" },
            if has("__stub_helper") { "present" } else { "absent" },
            if has("__auth_stubs") { "present" } else { "absent" },
        )
    }
}

fn library_from_ordinal(libraries: &[String], ordinal: i64) -> From {
    match ordinal {
        -2 => From::Flat,
        n if n >= 1 && (n as usize) <= libraries.len() => From::Library(libraries[n as usize - 1].clone()),
        n => From::Other(format!("ordinal {n}")),
    }
}

/// Every property in the module docs; returns the violations (empty: the
/// file is fine) and what was found.
fn check(data: &[u8], arch: Arch, stubs: &Stubs) -> (Vec<String>, Facts) {
    let mut bad = Vec::new();
    let mut facts = Facts::default();
    let file = match MachOFile64::<Endianness>::parse(data) {
        Ok(f) => f,
        Err(e) => return (vec![format!("not a 64-bit Mach-O file: {e}")], facts),
    };
    let endian = file.endian();
    let header = file.macho_header();

    // CPU, file type, flags.
    let cputype = header.cputype(endian).0;
    let subtype = header.cpusubtype(endian).0 & !macho::CPU_SUBTYPE_MASK;
    let (want_cpu, want_sub, cpu_name) = match arch {
        Arch::Arm64 => (macho::CPU_TYPE_ARM64.0, macho::CPU_SUBTYPE_ARM64_ALL.0, "arm64 (CPU_SUBTYPE_ARM64_ALL)"),
        Arch::X86_64 => (macho::CPU_TYPE_X86_64.0, macho::CPU_SUBTYPE_X86_64_ALL.0, "x86_64 (CPU_SUBTYPE_X86_64_ALL)"),
    };
    if cputype != want_cpu || subtype != want_sub {
        bad.push(format!("CPU type {cputype:#x} subtype {subtype:#x}, want {cpu_name}"));
    }
    if header.filetype(endian) != macho::MH_DYLIB {
        bad.push(format!("file type {}, want MH_DYLIB", header.filetype(endian).0));
    }
    let flags = header.flags(endian).0;
    facts.bind_at_load_flag = flags & macho::MH_BINDATLOAD.0 != 0;
    if flags & macho::MH_TWOLEVEL.0 == 0 {
        bad.push("not a two-level namespace image (MH_TWOLEVEL)".into());
    }

    for section in file.sections() {
        facts.sections.push(section.name().unwrap_or("?").to_string());
    }

    // Load commands.
    let mut build_version = None;
    let mut dyld_info = None;
    let mut exports_trie = None;
    let mut code_signature = None;
    let mut chained = None;
    let mut commands = match file.macho_load_commands() {
        Ok(c) => c,
        Err(e) => return (vec![format!("load commands: {e}")], facts),
    };
    loop {
        let command = match commands.next() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                bad.push(format!("load commands: {e}"));
                break;
            }
        };
        match command.variant() {
            Ok(LoadCommandVariant::Dylib(d)) => {
                let name = command.string(endian, d.dylib.name).unwrap_or(b"?");
                facts.libraries.push(String::from_utf8_lossy(name).into_owned());
            }
            Ok(LoadCommandVariant::BuildVersion(b, _)) => build_version = Some(b),
            Ok(LoadCommandVariant::DyldInfo(d)) => dyld_info = Some(d),
            Ok(LoadCommandVariant::LinkeditData(l)) => match command.cmd() {
                macho::LC_CODE_SIGNATURE => code_signature = Some(l),
                macho::LC_DYLD_EXPORTS_TRIE => exports_trie = Some(l),
                macho::LC_DYLD_CHAINED_FIXUPS => chained = Some(l),
                _ => {}
            },
            Ok(_) => {}
            Err(e) => bad.push(format!("load command {:#x}: {e}", command.cmd().0)),
        }
    }

    // Minimum macOS.
    match build_version {
        None => bad.push("no LC_BUILD_VERSION".into()),
        Some(b) => {
            let platform = b.platform.get(endian);
            let minos = b.minos.get(endian).0;
            let v = |x: u32| format!("{}.{}.{}", x >> 16, (x >> 8) & 0xff, x & 0xff);
            if platform != macho::PLATFORM_MACOS {
                bad.push(format!("LC_BUILD_VERSION platform {}, want macOS", platform.0));
            }
            match arch {
                Arch::Arm64 if minos != 0x000b_0000 => {
                    bad.push(format!("minimum macOS {}, want 11.0 on arm64", v(minos)))
                }
                Arch::X86_64 if minos > 0x000a_0f00 => {
                    bad.push(format!("minimum macOS {}, want 10.15 or earlier on x86_64", v(minos)))
                }
                _ => {}
            }
        }
    }

    // Libraries: libSystem only.
    if facts.libraries.iter().all(|l| l != LIBSYSTEM) {
        bad.push(format!("does not link {LIBSYSTEM}"));
    }
    for lib in facts.libraries.iter().filter(|l| *l != LIBSYSTEM) {
        bad.push(format!("links {lib}; only {LIBSYSTEM} is expected"));
    }

    // Exports.
    let trie = match (exports_trie, dyld_info) {
        (Some(t), _) => t.exports_trie(endian, data).map_err(|e| e.to_string()),
        (None, Some(d)) => d.exports_trie(endian, data).map_err(|e| e.to_string()),
        (None, None) => Err("no export trie".to_string()),
    };
    let mut exported = false;
    match trie {
        Ok(mut it) => loop {
            match it.next() {
                Ok(Some(sym)) => exported |= sym.name() == REGISTER.as_bytes(),
                Ok(None) => break,
                Err(e) => {
                    bad.push(format!("export trie: {e}"));
                    break;
                }
            }
        },
        Err(e) => bad.push(e),
    }
    if !exported {
        bad.push(format!("{REGISTER} is not exported"));
    }

    // Imports: undefined symbols of the symbol table ...
    let symbols = file.macho_symbol_table();
    for nlist in symbols.iter() {
        if nlist.is_stab() || !nlist.is_undefined() || nlist.n_type().0 & macho::N_EXT.0 == 0 {
            continue;
        }
        let name = String::from_utf8_lossy(nlist.name(endian, symbols.strings()).unwrap_or(b"?")).into_owned();
        let ordinal = (nlist.n_desc(endian).0 >> 8) as u8;
        let from = match ordinal {
            0xfe => From::Flat,
            0 => From::Other("self".into()),
            0xff => From::Other("the main executable".into()),
            n => library_from_ordinal(&facts.libraries, i64::from(n)),
        };
        facts.imports.entry(name).or_default().insert(from);
    }
    // ... and every bind dyld performs.
    if let Some(c) = chained {
        facts.chained_fixups = true;
        match c.chained_fixups(endian, data).and_then(|f| f.imports(endian)) {
            Ok(mut it) => loop {
                match it.next() {
                    Ok(Some(import)) => {
                        let name = String::from_utf8_lossy(import.name).into_owned();
                        let from = library_from_ordinal(&facts.libraries, i64::from(import.dylib.0));
                        facts.imports.entry(name.clone()).or_default().insert(from);
                        facts.bound_at_load.insert(name);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        bad.push(format!("chained fixups: {e}"));
                        break;
                    }
                }
            },
            Err(e) => bad.push(format!("chained fixups: {e}")),
        }
    }
    if let Some(d) = dyld_info {
        let tables = [
            ("binds", d.binds(endian, data, 8), false),
            ("weak binds", d.weak_binds(endian, data, 8), false),
            ("lazy binds", d.lazy_binds(endian, data, 8), true),
        ];
        for (what, table, lazy) in tables {
            let mut it = match table {
                Ok(it) => it,
                Err(e) => {
                    bad.push(format!("{what}: {e}"));
                    continue;
                }
            };
            loop {
                match it.next() {
                    Ok(Some(bind)) => {
                        let name = String::from_utf8_lossy(bind.symbol).into_owned();
                        if what != "weak binds" {
                            let from = library_from_ordinal(&facts.libraries, i64::from(bind.dylib.0));
                            facts.imports.entry(name.clone()).or_default().insert(from);
                        }
                        if lazy {
                            facts.lazy.insert(name);
                        } else {
                            facts.bound_at_load.insert(name);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        bad.push(format!("{what}: {e}"));
                        break;
                    }
                }
            }
        }
    } else if chained.is_none() {
        bad.push("neither LC_DYLD_INFO nor LC_DYLD_CHAINED_FIXUPS".into());
    }

    let mut imports: Vec<_> = facts.imports.iter().collect();
    imports.sort();
    for (name, froms) in imports {
        for from in froms {
            if let Some(why) = import_problem(name, from, stubs) {
                bad.push(why);
            }
        }
    }

    // Lazy binding.
    for f in CALLED_WHILE_STOPPED {
        if !facts.imports.contains_key(*f) {
            bad.push(format!("{f} is not imported: update CALLED_WHILE_STOPPED to what the sampler calls"));
        } else if facts.lazy.contains(*f) {
            bad.push(format!("{f} is called in the stopped window, the thread hook or the tick, but bound lazily"));
        } else if !facts.bound_at_load.contains(*f) {
            bad.push(format!("{f} is imported but never bound"));
        }
    }
    for s in &facts.lazy {
        if !compiler_helpers(arch).contains(&s.as_str()) {
            bad.push(format!("{s} is bound lazily (only compiler helpers may be)"));
        }
    }

    // Code signature.
    match code_signature {
        Some(cs) => bad.extend(signature_problems(data, cs, endian)),
        None if arch == Arch::Arm64 => bad.push("no LC_CODE_SIGNATURE: macOS refuses unsigned arm64 code".into()),
        None => {}
    }

    (bad, facts)
}

/// Why an import would not resolve on a Mac, if it would not.
fn import_problem(name: &str, from: &From, stubs: &Stubs) -> Option<String> {
    match from {
        From::Flat if name.starts_with("_napi_") => None,
        From::Flat => Some(format!("{name} is looked up in the flat namespace; only napi_* may be")),
        From::Library(lib) if stubs.provides(lib, name) => None,
        From::Library(lib) => Some(format!("{name} is imported from {lib}, whose stubs do not export it")),
        From::Other(what) => Some(format!("{name} is imported from {what}")),
    }
}

/// An ad-hoc signature whose page hashes match the file.
fn signature_problems(data: &[u8], cs: &macho::LinkeditDataCommand<Endianness>, endian: Endianness) -> Vec<String> {
    let mut bad = Vec::new();
    let signature = match cs.code_signature(endian, data) {
        Ok(s) => s,
        Err(e) => return vec![format!("code signature: {e}")],
    };
    let mut blobs = signature.blobs();
    let mut directory = None;
    loop {
        match blobs.next() {
            Ok(Some(blob)) => {
                if let Ok(Some(cd)) = blob.code_directory() {
                    directory.get_or_insert(cd);
                }
            }
            Ok(None) => break,
            Err(e) => return vec![format!("code signature blobs: {e}")],
        }
    }
    let Some(cd) = directory else { return vec!["code signature has no code directory".into()] };
    let h = cd.header();
    let be = object::BigEndian;
    let cs_flags = h.flags.get(be).0;
    if cs_flags & macho::CS_ADHOC.0 == 0 {
        bad.push(format!("code signature flags {cs_flags:#x}: not ad-hoc (CS_ADHOC)"));
    }
    let limit = cd.code_limit();
    if limit != u64::from(cs.dataoff.get(endian)) {
        bad.push(format!("the signature covers {limit} bytes, not everything before it ({})", cs.dataoff.get(endian)));
    }
    if h.hash_type != macho::CS_HASHTYPE_SHA256 || h.hash_size != 32 {
        bad.push(format!("hash type {} size {}, want SHA-256", h.hash_type.0, h.hash_size));
        return bad;
    }
    let page = 1u64 << h.page_size;
    let slots = h.n_code_slots.get(be);
    if u64::from(slots) != limit.div_ceil(page) {
        bad.push(format!("{slots} page hashes for {limit} bytes of {page}-byte pages"));
    }
    for i in 0..slots {
        let start = u64::from(i) * page;
        let end = (start + page).min(limit);
        let Some(bytes) = data.get(start as usize..end as usize) else {
            bad.push(format!("page {i} lies outside the file"));
            break;
        };
        match cd.code_hash(i) {
            Ok(want) if want == Sha256::digest(bytes).as_slice() => {}
            Ok(_) => {
                bad.push(format!("page {i} (bytes {start}..{end}) does not match its hash in the signature"));
                break;
            }
            Err(e) => {
                bad.push(format!("page hash {i}: {e}"));
                break;
            }
        }
    }
    bad
}

// ---------------------------------------------------------------------------
// Inputs

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn addon(arch: Arch) -> Vec<u8> {
    let dir = std::env::var_os("MACHSAMPLER_DARWIN_DIR").map_or_else(root, PathBuf::from);
    let path = dir.join(arch.file_name());
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (build it with `npm run build:darwin`)", path.display()))
}

fn tbd_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MACHSAMPLER_TBD_DIR") {
        return PathBuf::from(d);
    }
    // .cache/darwin-venv/lib/python3.X/site-packages/ziglang/lib/libc/darwin
    let lib = root().join(".cache/darwin-venv/lib");
    let found = std::fs::read_dir(&lib).ok().into_iter().flatten().flatten().find_map(|e| {
        let d = e.path().join("site-packages/ziglang/lib/libc/darwin");
        d.is_dir().then_some(d)
    });
    found.unwrap_or_else(|| {
        panic!("no zig libc stubs under {} (run `npm run build:darwin`, or set MACHSAMPLER_TBD_DIR)", lib.display())
    })
}

fn stubs(arch: Arch) -> Stubs {
    Stubs::load_dir(&tbd_dir(), arch)
}

fn assert_good(arch: Arch) {
    let data = addon(arch);
    let (bad, facts) = check(&data, arch, &stubs(arch));
    println!("{} ({} bytes): {}", arch.file_name(), data.len(), facts.summary());
    assert!(bad.is_empty(), "{}:\n  {}", arch.file_name(), bad.join("\n  "));
}

/// Checks a broken copy and expects a violation mentioning `expect`.
fn assert_caught(data: &[u8], arch: Arch, expect: &str) {
    let (bad, _) = check(data, arch, &stubs(arch));
    assert!(bad.iter().any(|b| b.contains(expect)), "expected a violation mentioning {expect:?}, got {bad:#?}");
}

// ---------------------------------------------------------------------------
// Byte surgery on copies of the real files, for the negative tests.

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(data[at..at + 4].try_into().unwrap())
}

fn put_u32(data: &mut [u8], at: usize, v: u32) {
    data[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// File offsets of the load commands with command `cmd`.
fn commands(data: &[u8], cmd: u32) -> Vec<usize> {
    let ncmds = u32_at(data, 16) as usize;
    let mut at = 32;
    let mut out = Vec::new();
    for _ in 0..ncmds {
        if u32_at(data, at) == cmd {
            out.push(at);
        }
        at += u32_at(data, at + 4) as usize;
    }
    out
}

fn replace_all(data: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= data.len() {
        if &data[i..i + from.len()] == from {
            data[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    n
}

// ---------------------------------------------------------------------------
// Tests

#[test]
#[ignore = "reads the built addon: npm run build:darwin, then npm run test:macho"]
fn arm64_addon_is_a_loadable_mach_o() {
    assert_good(Arch::Arm64);
}

#[test]
#[ignore = "reads the built addon: npm run build:darwin, then npm run test:macho"]
fn x86_64_addon_is_a_loadable_mach_o() {
    assert_good(Arch::X86_64);
}

#[test]
#[ignore = "reads the built addon: npm run build:darwin, then npm run test:macho"]
fn a_wrong_file_fails() {
    assert_caught(b"\x7fELF not a Mach-O file at all", Arch::Arm64, "not a 64-bit Mach-O");
    // The arm64 file where x86_64 is expected, and the other way round.
    assert_caught(&addon(Arch::Arm64), Arch::X86_64, "CPU type");
    assert_caught(&addon(Arch::X86_64), Arch::Arm64, "CPU type");
    // Minimum OS: 11.0 is above what x86_64 must support; 10.15 is not arm64's.
    assert_caught(&addon(Arch::Arm64), Arch::X86_64, "minimum macOS 11.0.0");
    assert_caught(&addon(Arch::X86_64), Arch::Arm64, "minimum macOS 10.15.0");
    assert_caught(&addon(Arch::X86_64), Arch::Arm64, "no LC_CODE_SIGNATURE");
}

#[test]
#[ignore = "reads the built addon: npm run build:darwin, then npm run test:macho"]
fn broken_copies_fail() {
    let arm = addon(Arch::Arm64);
    let x86 = addon(Arch::X86_64);

    // arm64e instead of arm64.
    let mut e = arm.clone();
    put_u32(&mut e, 8, macho::CPU_SUBTYPE_ARM64E.0);
    assert_caught(&e, Arch::Arm64, "CPU type");

    // An executable, not a dylib (x86_64: no signature to break first).
    let mut d = x86.clone();
    put_u32(&mut d, 12, macho::MH_EXECUTE.0);
    assert_caught(&d, Arch::X86_64, "want MH_DYLIB");

    // Any change to a signed arm64 file breaks a page hash.
    let mut d = arm.clone();
    put_u32(&mut d, 12, macho::MH_EXECUTE.0);
    assert_caught(&d, Arch::Arm64, "does not match its hash");

    // A newer minimum macOS.
    let mut d = x86.clone();
    let at = commands(&d, macho::LC_BUILD_VERSION.0)[0];
    put_u32(&mut d, at + 12, 0x000c_0000);
    assert_caught(&d, Arch::X86_64, "minimum macOS 12.0.0");

    // No exports.
    let mut d = x86.clone();
    for at in commands(&d, macho::LC_DYLD_INFO_ONLY.0).into_iter().chain(commands(&d, macho::LC_DYLD_INFO.0)) {
        put_u32(&mut d, at + 44, 0); // export_size
    }
    for at in commands(&d, macho::LC_DYLD_EXPORTS_TRIE.0) {
        put_u32(&mut d, at + 12, 0); // datasize
    }
    assert_caught(&d, Arch::X86_64, "_napi_register_module_v1 is not exported");

    // A symbol libSystem does not export (renamed in the string table and
    // the bind information alike).
    for (arch, base) in [(Arch::X86_64, &x86), (Arch::Arm64, &arm)] {
        let mut d = base.clone();
        assert!(replace_all(&mut d, b"_thread_suspend\0", b"_thread_suspenX\0") >= 2);
        assert_caught(
            &d,
            arch,
            "_thread_suspenX is imported from /usr/lib/libSystem.B.dylib, whose stubs do not export it",
        );
        assert_caught(&d, arch, "_thread_suspend is not imported");
    }

    // Another library.
    let mut d = x86.clone();
    assert_eq!(replace_all(&mut d, b"/usr/lib/libSystem.B.dylib\0", b"/usr/lib/libSystem.X.dylib\0"), 1);
    assert_caught(&d, Arch::X86_64, "links /usr/lib/libSystem.X.dylib");

    // Lazy binding: swap the bind and lazy bind tables, so that every symbol
    // the file binds at load (the window's functions among them) is lazy.
    let mut d = x86.clone();
    let at = commands(&d, macho::LC_DYLD_INFO_ONLY.0)[0];
    let (bind, lazy) = ((u32_at(&d, at + 16), u32_at(&d, at + 20)), (u32_at(&d, at + 32), u32_at(&d, at + 36)));
    put_u32(&mut d, at + 16, lazy.0);
    put_u32(&mut d, at + 20, lazy.1);
    put_u32(&mut d, at + 32, bind.0);
    put_u32(&mut d, at + 36, bind.1);
    assert_caught(
        &d,
        Arch::X86_64,
        "_thread_suspend is called in the stopped window, the thread hook or the tick, but bound lazily",
    );
    assert_caught(&d, Arch::X86_64, "is bound lazily (only compiler helpers may be)");
}

const SAMPLE_TBD: &str = "--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64e-macos ]
install-name:    '/usr/lib/libSystem.B.dylib'
reexported-libraries:
  - targets:         [ x86_64-macos, arm64e-macos ]
    libraries:       [ '/usr/lib/system/libsystem_kernel.dylib',
                       '/usr/lib/system/libdyld.dylib' ]
exports:
  - targets:         [ x86_64-macos ]
    symbols:         [ 'R8289209$_close', _x86_only ]
...
--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, x86_64h-macos, arm64e-macos ]
install-name:    '/usr/lib/system/libsystem_kernel.dylib'
exports:
  - targets:         [ x86_64-macos, arm64e-macos ]
    symbols:         [ _thread_suspend, _thread_resume,
                       _mach_absolute_time ]
    weak-symbols:    [ _weak_one ]
  - targets:         [ x86_64h-macos ]
    symbols:         [ _haswell_only ]
  - targets:         [ arm64e-macos ]
    objc-classes:    [ OS_thing ]
...
--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-maccatalyst ]
install-name:    '/usr/lib/system/libdyld.dylib'
exports:
  - targets:         [ x86_64-maccatalyst ]
    symbols:         [ _catalyst_only ]
...
";

#[test]
fn tbd_stubs_are_read_per_architecture_through_reexports() {
    let x86 = Stubs::parse(SAMPLE_TBD, Arch::X86_64);
    let arm = Stubs::parse(SAMPLE_TBD, Arch::Arm64);
    for s in ["_thread_suspend", "_thread_resume", "_mach_absolute_time", "_weak_one"] {
        assert!(x86.provides(LIBSYSTEM, s), "{s} on x86_64");
        assert!(arm.provides(LIBSYSTEM, s), "{s} on arm64");
    }
    assert!(x86.provides(LIBSYSTEM, "R8289209$_close"));
    assert!(x86.provides(LIBSYSTEM, "_x86_only"));
    assert!(!arm.provides(LIBSYSTEM, "_x86_only"));
    assert!(!x86.provides(LIBSYSTEM, "_haswell_only"), "x86_64h exports are not x86_64's");
    assert!(arm.provides(LIBSYSTEM, "_OBJC_CLASS_$_OS_thing"));
    assert!(!x86.provides(LIBSYSTEM, "_catalyst_only"), "Mac Catalyst is another platform");
    assert!(!x86.provides(LIBSYSTEM, "_missing"));
    // Not re-exported the other way.
    assert!(!x86.provides("/usr/lib/system/libsystem_kernel.dylib", "_x86_only"));
}

#[test]
fn imports_resolve_only_where_dyld_would_find_them() {
    let stubs = Stubs::parse(SAMPLE_TBD, Arch::Arm64);
    let lib = From::Library(LIBSYSTEM.into());
    assert_eq!(import_problem("_thread_suspend", &lib, &stubs), None);
    assert_eq!(import_problem("_napi_create_object", &From::Flat, &stubs), None);
    assert!(import_problem("_thread_suspend", &From::Flat, &stubs).is_some());
    assert!(import_problem("_nope", &lib, &stubs).is_some());
    assert!(import_problem("_thread_suspend", &From::Library("/usr/lib/libc++.1.dylib".into()), &stubs).is_some());
    assert!(import_problem("_thread_suspend", &From::Other("self".into()), &stubs).is_some());
}
