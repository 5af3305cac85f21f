//! Symbols of one module: its symbol tables, its debug information
//! wherever it is, and the bounds of its functions.
//!
//! Names come from, in order (the first name found for an address wins):
//! the file's own tables (`.symtab` and `.dynsym`; a Mach-O symtab, leading
//! underscore removed), its separate debug information (a dSYM matched by
//! LC_UUID, beside the binary or in a symbol directory; an ELF debug file
//! matched by build id under `/usr/lib/debug/.build-id/` or in a symbol
//! directory), PLT stubs named from the relocations (`malloc@plt`), and a
//! Breakpad `.sym` file whose debug id matches. For an image of the dyld
//! shared cache, which exists as no file, the cache supplies it all (see
//! `dyld_cache`). DWARF gives file and line, and names a function that no
//! table names.
//!
//! Right or unknown, never wrong: a file whose build id differs from the
//! one recorded at sampling time is not used. In a Mach-O image, whose
//! symbols have no size, every function is bounded by the next function
//! start (see `macho`), so an address in a function without a name is
//! reported as unnamed, not as the function before it.
//!
//! Files are only parsed, never executed or loaded.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};
use rustc_hash::FxHashMap;

use super::breakpad::{self, BreakpadFile};
use super::demangle::demangle;
use super::macho::{self, FunctionBounds};

#[derive(Clone, Copy, Debug)]
struct Sym {
    start: u64,
    /// 0 when the table gives no size.
    size: u64,
    name: u32,
}

/// A resolved native function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeHit {
    /// Start address of the function (file address), a stable key.
    pub start: u64,
    pub name: String,
    pub file: String,
    pub line: u32,
}

/// What a module knows about an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A named function, and the source line of the address (0 if unknown).
    Named(NativeHit, u32),
    /// Inside a function that starts at `start` (file address) and has no
    /// name anywhere.
    Unnamed { start: u64 },
}

impl Lookup {
    /// The file address of the function's start.
    pub fn start(&self) -> u64 {
        match self {
            Lookup::Named(hit, _) => hit.start,
            Lookup::Unnamed { start } => *start,
        }
    }
}

/// Which module to load: its file, the build id recorded when sampling,
/// where its image starts in file addresses, and whether it is Mach-O.
#[derive(Clone, Copy, Debug)]
pub struct ModuleRef<'a> {
    pub path: &'a str,
    pub build_id: &'a str,
    /// The file address of the image's start (`module.start - module.bias`):
    /// Breakpad addresses are relative to it.
    pub image_base: u64,
    /// Recorded on macOS: a Mach-O image (whether or not its file exists).
    pub macho: bool,
}

pub struct ModuleSymbols {
    syms: Vec<Sym>,
    names: Vec<String>,
    /// Mach-O function starts; a symbol ends at the next.
    bounds: Option<FunctionBounds>,
    /// Whether a symbol at a function start names the whole function up
    /// to the next start: not when the starts may be folded (no
    /// LC_FUNCTION_STARTS) and the table is stripped of local functions,
    /// whose names would then be missing from between the starts.
    trust_starts: bool,
    demangled: FxHashMap<u32, String>,
    dwarf: Option<super::dwarf::Dwarf>,
    breakpad: Option<(BreakpadFile, u64)>,
    /// Function start -> (file, line), cached.
    decl: FxHashMap<u64, (String, u32)>,
    /// Symbol files that could have named this module but did not exist
    /// when it was loaded (a download may bring them later).
    absent: Vec<PathBuf>,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn build_id_of(file: &object::File) -> String {
    if let Ok(Some(id)) = file.build_id() {
        return hex(id);
    }
    file.mach_uuid().ok().flatten().map(|u| hex(&u)).unwrap_or_default()
}

/// Maps a regular file read-only. Anything else (a FIFO a crafted profile
/// names would block forever; a device is no module) is refused.
pub(crate) fn map_file(path: &Path) -> Option<memmap2::Mmap> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: the mapping is read-only and private; if another process
    // truncates the file meanwhile, reads could fault, which is the
    // documented hazard of mmap that every symbolizer (addr2line's own
    // Loader included) accepts for speed on multi-megabyte binaries.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

/// A separate ELF debug file for `build_id`: `.build-id/xx/rest.debug`
/// under `/usr/lib/debug` and each symbol directory, then `<name>.debug`
/// and `<name>` in each symbol directory; only one whose build id matches.
fn elf_debug_file(build_id: &str, name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if build_id.len() < 3 {
        return None;
    }
    let by_id = format!(".build-id/{}/{}.debug", &build_id[..2], &build_id[2..]);
    let mut candidates = vec![Path::new("/usr/lib/debug").join(&by_id)];
    for d in dirs {
        candidates.push(d.join(&by_id));
        candidates.push(d.join(format!("{name}.debug")));
        candidates.push(d.join(name));
    }
    candidates
        .into_iter()
        .find(|p| map_file(p).is_some_and(|m| object::File::parse(&*m).is_ok_and(|f| build_id_of(&f) == build_id)))
}

/// Breakpad files for `name` with `id` in the symbol directories (the
/// server layout, then `<name>.sym` in the directory itself).
fn breakpad_candidates(name: &str, id: &str, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let sym = format!("{name}.sym");
    let mut out = Vec::new();
    for d in dirs {
        out.push(d.join(name).join(id).join(&sym));
        out.push(d.join(&sym));
    }
    out
}

#[derive(Default)]
struct Builder {
    syms: Vec<Sym>,
    names: Vec<String>,
    index: FxHashMap<u64, usize>,
    /// A table with local (static) functions: not stripped.
    has_locals: bool,
}

impl Builder {
    fn add(&mut self, start: u64, size: u64, name: &str) {
        if name.is_empty() {
            return;
        }
        match self.index.get(&start) {
            // Keep the first name seen for an address, but take a size if
            // the first had none.
            Some(&i) => {
                if self.syms[i].size == 0 {
                    self.syms[i].size = size;
                }
            }
            None => {
                self.index.insert(start, self.syms.len());
                self.syms.push(Sym { start, size, name: self.names.len() as u32 });
                self.names.push(name.to_string());
            }
        }
    }

    fn add_object(&mut self, file: &object::File) {
        let macho = file.format() == object::BinaryFormat::MachO;
        for s in file.symbols().chain(file.dynamic_symbols()) {
            if s.kind() != SymbolKind::Text || s.address() == 0 || s.is_undefined() {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            self.has_locals |= s.is_local();
            let name = if macho { macho::strip_underscore(name) } else { name };
            // Mach-O sizes from object are guesses (the distance to the
            // next symbol); the function bounds decide instead.
            self.add(s.address(), if macho { 0 } else { s.size() }, name);
        }
    }
}

fn has_dwarf(file: &object::File) -> bool {
    file.section_by_name(".debug_info").is_some() || file.section_by_name("__debug_info").is_some()
}

impl ModuleSymbols {
    pub fn empty() -> Self {
        ModuleSymbols {
            syms: Vec::new(),
            names: Vec::new(),
            bounds: None,
            trust_starts: true,
            demangled: FxHashMap::default(),
            dwarf: None,
            breakpad: None,
            decl: FxHashMap::default(),
            absent: Vec::new(),
        }
    }

    /// Loads `path` alone (no symbol directories). `expected_build_id`
    /// (hex, may be empty) must match the file's, if both are known.
    pub fn load(path: &Path, expected_build_id: &str) -> Self {
        let path = path.to_string_lossy();
        let m = ModuleRef { path: &path, build_id: expected_build_id, image_base: 0, macho: false };
        Self::load_with(&m, &[], &mut |_| {})
    }

    /// Loads a module with everything the symbol directories hold for it.
    /// Problems worth telling (a corrupt symbol file) go to `warn`.
    pub fn load_with(m: &ModuleRef, dirs: &[PathBuf], warn: &mut dyn FnMut(String)) -> Self {
        let path = Path::new(m.path);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut b = Builder::default();
        let mut bounds = None;
        let mut macho = m.macho;
        let mut dwarf_path: Option<PathBuf> = None;
        let mut build_id = m.build_id.to_string();

        // The vDSO has no file: this process's copy stands in for it, if
        // its build id is the one recorded.
        let vdso = if super::vdso::is_vdso(m.path) { super::vdso::image() } else { None };
        let map = if vdso.is_none() { map_file(path) } else { None };
        // A universal binary: the slice that ran.
        let wanted = macho::uuid_from_hex(m.build_id);
        if let Some(whole) = vdso.as_deref().or(map.as_deref()) {
            let bytes = macho::image_in(whole, wanted).unwrap_or(whole);
            if let Ok(file) = object::File::parse(bytes) {
                let id = build_id_of(&file);
                let matches = if vdso.is_some() {
                    !id.is_empty() && id == m.build_id
                } else {
                    m.build_id.is_empty() || id.is_empty() || id == m.build_id
                };
                if matches {
                    if build_id.is_empty() {
                        build_id = id;
                    }
                    macho = file.format() == object::BinaryFormat::MachO;
                    b.add_object(&file);
                    if let object::File::MachO64(f) = &file {
                        bounds = Some(macho::function_bounds(f, bytes));
                    } else if !macho {
                        super::elf::add_plt_stubs(&file, &mut |start, size, name| b.add(start, size, name));
                    }
                    if has_dwarf(&file) && vdso.is_none() {
                        dwarf_path = Some(path.to_path_buf());
                    }
                }
            }
        } else if macho {
            if let Some(image) = super::dyld_cache::load_image(m.path, m.build_id, dirs, warn) {
                for (start, name) in &image.symbols {
                    b.add(*start, 0, name);
                }
                b.has_locals |= image.has_locals;
                bounds = Some(image.bounds);
            }
        }

        // Separate debug information, matched by id.
        let debug = if macho {
            macho::uuid_from_hex(&build_id).and_then(|uuid| macho::find_dsym(path, uuid, dirs))
        } else {
            elf_debug_file(&build_id, &name, dirs)
        };
        if let Some(debug) = debug {
            if let Some(map) = map_file(&debug) {
                let image = if macho { macho::image_in(&map, macho::uuid_from_hex(&build_id)) } else { Some(&*map) };
                if let Some(file) = image.and_then(|i| object::File::parse(i).ok()) {
                    b.add_object(&file);
                    if has_dwarf(&file) {
                        dwarf_path = Some(debug.clone());
                    }
                }
            }
        }

        // Breakpad symbol files, matched by debug id.
        let mut breakpad = None;
        let mut absent = Vec::new();
        if let Some(id) = breakpad::debug_id(&build_id, macho).filter(|_| !name.is_empty()) {
            let (present, missing): (Vec<PathBuf>, Vec<PathBuf>) =
                breakpad_candidates(&name, &id, dirs).into_iter().partition(|p| p.is_file());
            absent = missing;
            for file in present {
                let parsed = std::fs::read(&file).map_err(|e| e.to_string()).and_then(|t| BreakpadFile::parse(&t));
                match parsed {
                    Ok(sym) if sym.debug_id == id => {
                        for s in &sym.symbols {
                            b.add(m.image_base.wrapping_add(s.rva), s.size, &s.name);
                        }
                        breakpad = Some((sym, m.image_base));
                        break;
                    }
                    Ok(sym) => warn(format!(
                        "{}: debug id {} is not {id} (the module's); not used for {}",
                        file.display(),
                        sym.debug_id,
                        m.path
                    )),
                    Err(e) => warn(format!("{}: {e}; not used for {}", file.display(), m.path)),
                }
            }
        }

        let trust_starts = b.has_locals || bounds.as_ref().is_none_or(|b| b.complete);
        let breakpad_found = breakpad.is_some();
        let mut syms = b.syms;
        syms.sort_by_key(|s| s.start);
        // A symbol starts a function even where the start lists missed it.
        if let Some(bounds) = bounds.as_mut().filter(|b| !b.starts.is_empty()) {
            let first = bounds.starts[0];
            bounds.starts.extend(syms.iter().map(|s| s.start).filter(|&a| a >= first && a < bounds.text_end));
            bounds.starts.sort_unstable();
            bounds.starts.dedup();
        }
        let dwarf = dwarf_path.and_then(|p| super::dwarf::Dwarf::open(&p, macho::uuid_from_hex(&build_id)));
        ModuleSymbols {
            syms,
            names: b.names,
            bounds: bounds.filter(|b| !b.starts.is_empty()),
            trust_starts,
            demangled: FxHashMap::default(),
            dwarf,
            breakpad,
            decl: FxHashMap::default(),
            absent: if breakpad_found { Vec::new() } else { absent },
        }
    }

    /// True if a symbol file that was missing when this was loaded exists
    /// now: the module should be loaded again.
    pub fn stale(&self) -> bool {
        self.absent.iter().any(|p| p.is_file())
    }

    pub fn symbol_count(&self) -> usize {
        self.syms.len()
    }

    fn sym_at(&self, start: u64) -> Option<Sym> {
        let i = self.syms.partition_point(|s| s.start < start);
        self.syms.get(i).filter(|s| s.start == start).copied()
    }

    /// The symbol covering `svma` by its own size or, unsized, up to the
    /// next symbol (only when nothing better bounds functions).
    fn nearest_sym(&self, svma: u64, stretch: bool) -> Option<Sym> {
        let i = self.syms.partition_point(|s| s.start <= svma).checked_sub(1)?;
        let s = self.syms[i];
        let end = if s.size > 0 {
            s.start.saturating_add(s.size)
        } else if stretch {
            self.syms.get(i + 1).map_or(u64::MAX, |n| n.start)
        } else {
            return None;
        };
        (svma < end).then_some(s)
    }

    fn name_of(&mut self, s: Sym) -> String {
        if let Some(n) = self.demangled.get(&s.name) {
            return n.clone();
        }
        let n = demangle(&self.names[s.name as usize]);
        self.demangled.insert(s.name, n.clone());
        n
    }

    fn location(&self, svma: u64) -> Option<(String, u32)> {
        // addr2line computes `probe + 1`.
        if svma == u64::MAX {
            return None;
        }
        if let Some(loc) = self.dwarf.as_ref().and_then(|d| d.location(svma)) {
            return Some(loc);
        }
        let (sym, base) = self.breakpad.as_ref()?;
        let l = sym.line_at(svma.wrapping_sub(*base))?;
        Some((sym.file_name(l.file).to_string(), l.line))
    }

    /// The name DWARF gives the function containing `svma` (the outermost
    /// of its inlined frames).
    fn dwarf_name(&self, svma: u64) -> Option<String> {
        if svma == u64::MAX {
            return None;
        }
        self.dwarf.as_ref()?.outermost_function(svma).map(|n| demangle(&n))
    }

    fn named(&mut self, start: u64, name: String, svma: u64) -> Lookup {
        let frame_line = self.location(svma).map_or(0, |(_, l)| l);
        let (file, line) = match self.decl.get(&start) {
            Some(v) => v.clone(),
            None => {
                let v = self.location(start).unwrap_or_default();
                self.decl.insert(start, v.clone());
                v
            }
        };
        Lookup::Named(NativeHit { start, name, file, line }, frame_line)
    }

    /// Resolves a file address.
    pub fn lookup(&mut self, svma: u64) -> Option<Lookup> {
        let function_start = self.bounds.as_ref().and_then(|b| {
            let i = b.starts.partition_point(|&s| s <= svma).checked_sub(1)?;
            (svma < b.text_end).then(|| b.starts[i])
        });
        match function_start {
            Some(start) => {
                if let Some(s) = self.sym_at(start).filter(|_| self.trust_starts) {
                    let name = self.name_of(s);
                    return Some(self.named(start, name, svma));
                }
                // A sized symbol (Breakpad FUNC) may still cover it.
                if let Some(s) = self.nearest_sym(svma, false).filter(|s| s.start >= start) {
                    let name = self.name_of(s);
                    return Some(self.named(s.start, name, svma));
                }
                if let Some(name) = self.dwarf_name(svma) {
                    return Some(self.named(start, name, svma));
                }
                Some(Lookup::Unnamed { start })
            }
            None => {
                // Outside the bounded code (or no bounds known): only a
                // symbol that covers the address by its size, or, without
                // bounds, an unsized one stretched to the next.
                let stretch = self.bounds.is_none();
                if let Some(s) = self.nearest_sym(svma, stretch) {
                    let name = self.name_of(s);
                    return Some(self.named(s.start, name, svma));
                }
                let name = self.dwarf_name(svma)?;
                Some(self.named(svma, name, svma))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::test_fixtures::{fixture, tempdir};
    use object::ObjectSection;

    fn this_exe() -> PathBuf {
        std::env::current_exe().unwrap()
    }

    fn named(l: Option<Lookup>) -> (NativeHit, u32) {
        match l {
            Some(Lookup::Named(h, line)) => (h, line),
            other => panic!("not named: {other:?}"),
        }
    }

    #[test]
    fn resolves_a_function_of_this_test_binary() {
        let exe = this_exe();
        let mut m = ModuleSymbols::load(&exe, "");
        assert!(m.symbol_count() > 100);
        // Find our own function's file address through the loaded modules.
        let mods = crate::platform::loaded_modules();
        let addr = resolves_a_function_of_this_test_binary as *const () as u64;
        let module = mods.iter().find(|md| md.start <= addr && addr < md.end).unwrap();
        let (hit, line) = named(m.lookup(addr - module.bias + 4));
        assert!(hit.name.contains("resolves_a_function_of_this_test_binary"), "{}", hit.name);
        assert!(hit.file.ends_with("module.rs"), "file {:?}", hit.file);
        assert!(line > 0);
    }

    #[test]
    fn missing_files_and_wrong_build_ids_resolve_nothing() {
        let mut m = ModuleSymbols::load(Path::new("/nonexistent/lib.so"), "");
        assert!(m.lookup(0x1000).is_none());
        let m = ModuleSymbols::load(&this_exe(), "00112233");
        assert_eq!(m.symbol_count(), 0);
        // Not an object file at all.
        let m = ModuleSymbols::load(Path::new("/proc/self/status"), "");
        assert_eq!(m.symbol_count(), 0);
        // A FIFO is not opened at all (opening it would block).
        let fifo = std::env::temp_dir().join(format!("machsampler-fifo-module-{}", std::process::id()));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let m = ModuleSymbols::load(&fifo, "");
        std::fs::remove_file(&fifo).unwrap();
        assert_eq!(m.symbol_count(), 0);
    }

    #[test]
    fn garbage_addresses_resolve_nothing_or_something_without_panicking() {
        let mut m = ModuleSymbols::load(&this_exe(), "");
        for a in [0u64, 1, u64::MAX, u64::MAX / 2, 0xdead_beef] {
            let _ = m.lookup(a);
        }
    }

    /// The functions of the fixture in __text, by name, from the unstripped
    /// image.
    fn truth(full: &Path) -> Vec<(String, u64)> {
        let data = std::fs::read(full).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file.section_by_name("__text").unwrap().index();
        let mut v: Vec<(String, u64)> = file
            .symbols()
            .filter(|s| s.section_index() == Some(text) && s.is_definition())
            .map(|s| (macho::strip_underscore(s.name().unwrap()).to_string(), s.address()))
            .collect();
        v.sort_by_key(|x| x.1);
        v
    }

    fn load_macho(path: &Path, dirs: &[PathBuf]) -> ModuleSymbols {
        let uuid = hex(&macho::uuid_of_file(path).unwrap());
        let p = path.to_string_lossy();
        ModuleSymbols::load_with(&ModuleRef { path: &p, build_id: &uuid, image_base: 0, macho: true }, dirs, &mut |w| {
            panic!("{w}")
        })
    }

    /// Every address of every function, for each way of shipping a Mach-O
    /// image: right, or unnamed; never the neighbour's name.
    #[test]
    fn macho_names_are_right_or_unknown_never_wrong() {
        for dir in ["zig-arm64", "zig-x86_64", "lld-arm64", "lld-x86_64"] {
            let base = fixture(&format!("macho/{dir}"));
            let lib = std::fs::read_dir(base.join("full")).unwrap().next().unwrap().unwrap().file_name();
            let functions = truth(&base.join("full").join(&lib));
            let names: Vec<&str> = functions.iter().map(|f| f.0.as_str()).collect();
            let exported: Vec<String> = truth(&base.join("stripped").join(&lib)).into_iter().map(|f| f.0).collect();
            assert!(names.contains(&"exported_alpha") && names.contains(&"local_beta"), "{dir}: {names:?}");
            let tmp = tempdir(dir);
            std::fs::copy(base.join("stripped").join(&lib), tmp.join(&lib)).unwrap();
            copy_dir(&base.join("dsym"), &tmp.join("beside"));
            let cases: [(&str, PathBuf, Vec<PathBuf>, bool); 4] = [
                ("unstripped", base.join("full").join(&lib), vec![], true),
                ("stripped", base.join("stripped").join(&lib), vec![], false),
                ("stripped, dSYM on the symbol path", base.join("stripped").join(&lib), vec![base.join("dsym")], true),
                ("stripped, dSYM beside", tmp.join("beside").join(&lib), vec![], true),
            ];
            std::fs::copy(base.join("stripped").join(&lib), tmp.join("beside").join(&lib)).unwrap();
            for (case, path, dirs, all_named) in cases {
                let mut m = load_macho(&path, &dirs);
                for (i, (name, start)) in functions.iter().enumerate() {
                    let end = functions.get(i + 1).map_or(start + 8, |n| n.1);
                    for a in (*start..end).step_by(2) {
                        match m.lookup(a) {
                            Some(Lookup::Named(h, _)) => {
                                assert_eq!((&h.name, h.start), (name, *start), "{dir} {case} at {a:#x}")
                            }
                            Some(Lookup::Unnamed { start: s }) => {
                                // Only what stripping removed may lose its name.
                                assert!(!all_named, "{dir} {case}: {name} unnamed at {a:#x}");
                                // Without LC_FUNCTION_STARTS (zig), a stripped
                                // image cannot bound its exports either.
                                assert!(
                                    !exported.contains(name) || dir.starts_with("zig"),
                                    "{dir} {case}: exported {name} unnamed"
                                );
                                assert!(s <= a, "{dir} {case} at {a:#x}");
                                if name.starts_with("local_") && dir.starts_with("lld") {
                                    assert_eq!(s, *start, "{dir} {case} at {a:#x}");
                                }
                            }
                            None => panic!("{dir} {case}: nothing at {a:#x}"),
                        }
                    }
                }
            }
            std::fs::remove_dir_all(&tmp).unwrap();
        }
    }

    /// ELF: a stripped shared object named from its debug file or its
    /// Breakpad file on the symbol path; without them, only its exports.
    #[test]
    fn elf_names_from_debug_files_and_breakpad() {
        let full = fixture("elf/full/libfe.so");
        let data = std::fs::read(&full).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let build_id = build_id_of(&file);
        let functions: Vec<(String, u64, u64, bool)> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.name().is_ok_and(|n| n.contains("_")))
            .filter(|s| s.name().is_ok_and(|n| n.starts_with("local_") || n.starts_with("exported_")))
            .map(|s| (s.name().unwrap().to_string(), s.address(), s.size(), s.is_global()))
            .collect();
        assert_eq!(functions.len(), 5, "{functions:?}");
        let stripped = fixture("elf/stripped/libfe.so");
        let p = stripped.to_string_lossy();
        let m = ModuleRef { path: &p, build_id: &build_id, image_base: 0, macho: false };
        let cases = [
            ("no symbol files", vec![], false),
            ("debug file", vec![fixture("elf/debug")], true),
            ("Breakpad", vec![fixture("elf/breakpad")], true),
        ];
        for (case, dirs, all) in cases {
            let mut t = ModuleSymbols::load_with(&m, &dirs, &mut |w| panic!("{w}"));
            for (name, start, size, global) in &functions {
                for a in [*start, start + size / 2, start + size - 1] {
                    match t.lookup(a) {
                        Some(Lookup::Named(h, _)) => assert_eq!(&h.name, name, "{case} at {a:#x}"),
                        other => assert!(!all && !global, "{case}: {name} at {a:#x}: {other:?}"),
                    }
                }
            }
        }
        // A Breakpad file of another build is refused, with a warning.
        let mut warnings = Vec::new();
        let other = ModuleRef { build_id: "00112233445566778899aabbccddeeff00112233", ..m };
        let tmp = tempdir("bp-other");
        let id_dir = std::fs::read_dir(fixture("elf/breakpad/libfe.so")).unwrap().next().unwrap().unwrap().path();
        std::fs::copy(id_dir.join("libfe.so.sym"), tmp.join("libfe.so.sym")).unwrap();
        let t = ModuleSymbols::load_with(&other, std::slice::from_ref(&tmp), &mut |w| warnings.push(w));
        assert!(t.breakpad.is_none());
        assert!(warnings.len() == 1 && warnings[0].contains("debug id"), "{warnings:?}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    const X86_64: u32 = 0x0100_0007;
    const ARM64: u32 = 0x0100_000c;

    /// A universal binary of the given thin images, as lipo makes it.
    fn universal(slices: &[(&[u8], u32)]) -> Vec<u8> {
        const ALIGN: usize = 1 << 14;
        let mut out = Vec::new();
        out.extend_from_slice(&0xcafe_babe_u32.to_be_bytes());
        out.extend_from_slice(&(slices.len() as u32).to_be_bytes());
        let mut offset = ALIGN;
        for (data, cputype) in slices {
            let subtype: u32 = if *cputype == X86_64 { 3 } else { 0 };
            for v in [*cputype, subtype, offset as u32, data.len() as u32, 14] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            offset = (offset + data.len()).next_multiple_of(ALIGN);
        }
        for (data, _) in slices {
            out.resize(out.len().next_multiple_of(ALIGN), 0);
            out.extend_from_slice(data);
        }
        out
    }

    /// A universal binary is read through the slice that ran, for its
    /// symbols and for its universal dSYM's symbols and lines.
    #[test]
    fn universal_binaries_name_the_slice_that_ran() {
        let tmp = tempdir("universal");
        let read = |arch: &str, rel: &str| std::fs::read(fixture(&format!("macho/zig-{arch}/{rel}"))).unwrap();
        let dwarf = "dsym/libfx.dylib.dSYM/Contents/Resources/DWARF/libfx.dylib";
        let (arm, x86) = (ARM64, X86_64);
        for (kind, dir) in [("full", "full"), ("stripped", "stripped")] {
            std::fs::create_dir_all(tmp.join(dir)).unwrap();
            let fat = universal(&[
                (&read("x86_64", &format!("{kind}/libfx.dylib")), x86),
                (&read("arm64", &format!("{kind}/libfx.dylib")), arm),
            ]);
            std::fs::write(tmp.join(dir).join("libfx.dylib"), fat).unwrap();
        }
        let bundle = tmp.join("syms/libfx.dylib.dSYM/Contents/Resources/DWARF");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(
            bundle.join("libfx.dylib"),
            universal(&[(&read("x86_64", dwarf), x86), (&read("arm64", dwarf), arm)]),
        )
        .unwrap();
        for arch in ["arm64", "x86_64"] {
            let thin = fixture(&format!("macho/zig-{arch}/full/libfx.dylib"));
            let uuid = hex(&macho::uuid_of_file(&thin).unwrap());
            let functions = truth(&thin);
            for (dir, dirs) in [("full", vec![]), ("stripped", vec![tmp.join("syms")])] {
                let p = tmp.join(dir).join("libfx.dylib").to_string_lossy().into_owned();
                let r = ModuleRef { path: &p, build_id: &uuid, image_base: 0, macho: true };
                let mut m = ModuleSymbols::load_with(&r, &dirs, &mut |w| panic!("{w}"));
                // The thin library with its thin dSYM: the lines to expect.
                let base = fixture(&format!("macho/zig-{arch}"));
                let mut thin_dsym = load_macho(&base.join("stripped/libfx.dylib"), &[base.join("dsym")]);
                let mut with_lines = 0;
                for (name, start) in &functions {
                    let (hit, line) = named(m.lookup(*start));
                    assert_eq!((&hit.name, hit.start), (name, *start), "{arch} {dir}");
                    if dir == "stripped" {
                        // The universal dSYM's DWARF: the same file and line.
                        let (want, want_line) = named(thin_dsym.lookup(*start));
                        assert_eq!((&hit.file, line), (&want.file, want_line), "{arch} {name}");
                        with_lines += hit.file.ends_with("lib.c") as usize;
                    }
                }
                assert!(dir != "stripped" || with_lines > 0, "{arch}: no line from the dSYM");
            }
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn dsym_lines_name_the_source() {
        let base = fixture("macho/zig-arm64");
        let lib = base.join("stripped/libfx.dylib");
        let mut m = load_macho(&lib, &[base.join("dsym")]);
        let beta = truth(&base.join("full/libfx.dylib")).into_iter().find(|f| f.0 == "local_beta").unwrap().1;
        let (hit, line) = named(m.lookup(beta + 4));
        assert!(hit.file.ends_with("lib.c"), "{hit:?}");
        assert!(hit.line >= 9 && line >= hit.line, "{hit:?} {line}");
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
}
