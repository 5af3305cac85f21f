//! Symbols of one module file: its symbol tables, and DWARF for lines.
//!
//! Function names come from `.symtab` and `.dynsym` together (the node
//! binary is not stripped, so `.dynsym` alone would name only exports).
//! Where a separate debug file exists under `/usr/lib/debug/.build-id/`,
//! its tables and DWARF are used too. A file whose build id differs from
//! the one recorded at sampling time has been replaced since, so its
//! symbols would be wrong: it resolves nothing.
//!
//! The file is only parsed, never executed or loaded.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};
use rustc_hash::FxHashMap;

use super::demangle::demangle;

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
    /// Start address of the symbol (file address), a stable key.
    pub start: u64,
    pub name: String,
    pub file: String,
    pub line: u32,
}

pub struct ModuleSymbols {
    syms: Vec<Sym>,
    names: Vec<String>,
    demangled: FxHashMap<u32, String>,
    dwarf: Option<addr2line::Loader>,
    /// Function start -> (file, line), cached.
    decl: FxHashMap<u64, (String, u32)>,
}

fn build_id_of(file: &object::File) -> Option<String> {
    file.build_id().ok().flatten().map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
}

fn debug_file_for(build_id: &str) -> Option<PathBuf> {
    if build_id.len() < 3 {
        return None;
    }
    let p = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &build_id[..2], &build_id[2..]));
    p.is_file().then_some(p)
}

fn collect_symbols(
    file: &object::File,
    syms: &mut Vec<Sym>,
    names: &mut Vec<String>,
    index: &mut FxHashMap<u64, usize>,
) {
    let tables = file.symbols().chain(file.dynamic_symbols());
    for s in tables {
        if s.kind() != SymbolKind::Text || s.address() == 0 || s.is_undefined() {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        if name.is_empty() {
            continue;
        }
        match index.get(&s.address()) {
            // Keep the first name seen for an address (.symtab before
            // .dynsym), but take a size if the first had none.
            Some(&i) => {
                if syms[i].size == 0 {
                    syms[i].size = s.size();
                }
            }
            None => {
                index.insert(s.address(), syms.len());
                syms.push(Sym { start: s.address(), size: s.size(), name: names.len() as u32 });
                names.push(name.to_string());
            }
        }
    }
}

impl ModuleSymbols {
    pub fn empty() -> Self {
        ModuleSymbols {
            syms: Vec::new(),
            names: Vec::new(),
            demangled: FxHashMap::default(),
            dwarf: None,
            decl: FxHashMap::default(),
        }
    }

    /// Loads `path`. `expected_build_id` (hex, may be empty) must match the
    /// file's, if both are known. Any failure gives an empty table.
    pub fn load(path: &Path, expected_build_id: &str) -> Self {
        Self::try_load(path, expected_build_id).unwrap_or_else(|_| Self::empty())
    }

    fn try_load(path: &Path, expected_build_id: &str) -> Result<Self, Box<dyn std::error::Error>> {
        // Only regular files: opening a FIFO (a crafted profile can name
        // any path) would block forever, and a device is no module.
        if !std::fs::metadata(path)?.is_file() {
            return Err("not a regular file".into());
        }
        let f = std::fs::File::open(path)?;
        // SAFETY: the mapping is read-only and private; if another process
        // truncates the file meanwhile, reads could fault, which is the
        // documented hazard of mmap that every symbolizer (addr2line's own
        // Loader included) accepts for speed on multi-megabyte binaries.
        let map = unsafe { memmap2::Mmap::map(&f)? };
        let file = object::File::parse(&*map)?;
        let build_id = build_id_of(&file).unwrap_or_default();
        if !expected_build_id.is_empty() && !build_id.is_empty() && build_id != expected_build_id {
            return Err("build id mismatch: the file changed since the profile was taken".into());
        }
        let mut syms = Vec::new();
        let mut names = Vec::new();
        let mut index = FxHashMap::default();
        collect_symbols(&file, &mut syms, &mut names, &mut index);

        let debug = debug_file_for(&build_id);
        let mut dwarf_path = path.to_path_buf();
        if let Some(dbg) = &debug {
            if let Ok(df) = std::fs::File::open(dbg) {
                // SAFETY: as above.
                if let Ok(dmap) = unsafe { memmap2::Mmap::map(&df) } {
                    if let Ok(dfile) = object::File::parse(&*dmap) {
                        collect_symbols(&dfile, &mut syms, &mut names, &mut index);
                        dwarf_path = dbg.clone();
                    }
                }
            }
        }
        syms.sort_by_key(|s| s.start);
        let has_dwarf =
            |f: &object::File| f.section_by_name(".debug_info").is_some() || f.format() == object::BinaryFormat::MachO;
        let dwarf =
            if dwarf_path != path || has_dwarf(&file) { addr2line::Loader::new(&dwarf_path).ok() } else { None };
        Ok(ModuleSymbols { syms, names, demangled: FxHashMap::default(), dwarf, decl: FxHashMap::default() })
    }

    pub fn symbol_count(&self) -> usize {
        self.syms.len()
    }

    fn find_sym(&self, svma: u64) -> Option<Sym> {
        let i = self.syms.partition_point(|s| s.start <= svma).checked_sub(1)?;
        let s = self.syms[i];
        let end = if s.size > 0 {
            s.start + s.size
        } else {
            // Unsized: assume it runs to the next symbol.
            self.syms.get(i + 1).map_or(u64::MAX, |n| n.start)
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
        let loc = self.dwarf.as_ref()?.find_location(svma).ok()??;
        Some((loc.file.unwrap_or("").to_string(), loc.line.unwrap_or(0)))
    }

    /// Resolves a file address. `frame_line` is the line of `svma` itself.
    pub fn lookup(&mut self, svma: u64) -> Option<(NativeHit, u32)> {
        let s = self.find_sym(svma)?;
        let name = self.name_of(s);
        let frame_line = self.location(svma).map_or(0, |(_, l)| l);
        let (file, line) = match self.decl.get(&s.start) {
            Some(v) => v.clone(),
            None => {
                let v = self.location(s.start).unwrap_or_default();
                self.decl.insert(s.start, v.clone());
                v
            }
        };
        Some((NativeHit { start: s.start, name, file, line }, frame_line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_exe() -> PathBuf {
        std::env::current_exe().unwrap()
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
        let (hit, line) = m.lookup(addr - module.bias + 4).unwrap();
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
}
