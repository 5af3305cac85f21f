//! Symbolization: frame addresses to function names, modules, files and
//! lines.
//!
//! Crates: `object` for symbol tables and the dyld shared cache,
//! `addr2line` for DWARF (the gimli stack that std's backtraces and samply
//! build on), `macho-unwind-info` for Mach-O function starts, `sourcemap`,
//! `cpp_demangle` and `rustc-demangle`. Chosen over `samply-symbols` and
//! `wholesym` (async helper-driven API that stop() would block on; a
//! second, older copy of object/gimli/addr2line; wholesym downloads from
//! inside symbolization, which must never happen here) and `blazesym`
//! (Linux only; we must also build for macOS).
//!
//! Each frame is resolved, in order, by:
//! 0. for a JavaScript frame V8 named while sampling (see `crate::v8`), that
//!    name, moved to the original source if the script has a source map
//!    (see `source_map`);
//! 1. the module containing it (from the profile's module table), with
//!    everything known about it (see `module`): a named function, with
//!    file:line where debug information exists; or a function known to
//!    have no name, shown as `0x<file address> in <module>`;
//! 2. V8's perf map for JIT code (`/tmp/perf-<pid>.map`), newest line first
//!    (addresses whose meaning changed during the session were already
//!    pinned per sample at `stop()`, see `jit_history`);
//! 3. otherwise it stays `0x…` (with its module, if it has one).
//!
//! Return addresses point after the call, so every frame used as a caller is
//! looked up at `address - 1`; only frames that are never callers (sample
//! leaves, the interrupted pc) are looked up as is.
//!
//! Symbolization reads files only: symbol servers on the symbol path are
//! read from their download cache (see `symbol_path`), which only the
//! explicit download step fills. Module tables are cached for the life of
//! the process, keyed by path, build id and symbol path, so symbolizing a
//! second profile is cheap.

pub mod breakpad;
pub mod demangle;
pub mod dwarf;
pub mod dyld_cache;
pub mod elf;
pub mod jit_history;
pub mod macho;
pub mod module;
pub mod perf_map_watch;
pub mod perfmap;
pub mod regexp_code;
pub mod source_map;
pub mod symbol_path;
#[cfg(test)]
pub(crate) mod test_fixtures;
pub mod vdso;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;

use crate::profile::{js_frame_index, Function, FunctionKind, ProfileData, Symbols};
use module::{Lookup, ModuleRef, ModuleSymbols};
use perfmap::{parse_name, PerfMap};
use symbol_path::SymbolPath;

/// Where to find names besides the module files.
#[derive(Clone, Debug, Default)]
pub struct SymbolicateOptions {
    /// The perf map to read; default `/tmp/perf-<pid>.map` of the profile's
    /// process.
    pub perf_map: Option<PathBuf>,
    /// Symbol directories and (cached) symbol servers.
    pub symbol_path: SymbolPath,
}

type Cache = Mutex<HashMap<(String, String, String), Arc<Mutex<ModuleSymbols>>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn module_symbols(m: &ModuleRef, symbol_path: &SymbolPath, warn: &mut dyn FnMut(String)) -> Arc<Mutex<ModuleSymbols>> {
    let key = (m.path.to_string(), m.build_id.to_string(), format!("{}:{}", symbol_path.key(), m.image_base));
    let mut c = cache().lock().unwrap_or_else(|e| e.into_inner());
    // A symbol file downloaded since the module was loaded: load it again.
    if c.get(&key).is_some_and(|t| t.lock().unwrap_or_else(|e| e.into_inner()).stale()) {
        c.remove(&key);
    }
    c.entry(key)
        .or_insert_with(|| Arc::new(Mutex::new(ModuleSymbols::load_with(m, &symbol_path.local_dirs(), warn))))
        .clone()
}

/// The file name of a module path, for `0x… in <module>`.
fn module_name(path: &str) -> &str {
    path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or(path)
}

/// Drops every cached module table (for tests and long-lived tools).
pub fn clear_cache() {
    cache().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// For each frame, the address to look it up at. Return addresses point
/// after the call, so a frame that is ever a caller is looked up at
/// `address - 1`; one that is only ever the interrupted pc, as is.
pub(crate) fn lookup_addresses(profile: &ProfileData) -> Vec<u64> {
    let mut caller = vec![false; profile.frame_address.len()];
    for &parent in &profile.stack_parent {
        if parent >= 0 {
            if let Some(&f) = profile.stack_frame.get(parent as usize) {
                if let Some(c) = caller.get_mut(f as usize) {
                    *c = true;
                }
            }
        }
    }
    profile.frame_address.iter().zip(caller).map(|(&a, c)| if c { a.saturating_sub(1) } else { a }).collect()
}

/// The profile's module table, searchable by address.
pub(crate) struct ModuleRanges(Vec<(usize, u64, u64)>);

impl ModuleRanges {
    pub fn new(profile: &ProfileData) -> Self {
        let mut v: Vec<(usize, u64, u64)> =
            profile.modules.iter().enumerate().map(|(i, m)| (i, m.start, m.end)).collect();
        v.sort_by_key(|m| m.1);
        ModuleRanges(v)
    }

    /// The index (in `profile.modules`) of the module containing `addr`.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.0.partition_point(|m| m.1 <= addr).checked_sub(1)?;
        let (idx, _, end) = self.0[i];
        (addr < end).then_some(idx)
    }
}

#[derive(Hash, PartialEq, Eq)]
enum FunctionKey {
    Native { module: usize, start: u64 },
    Jit(usize),
    V8(usize),
    Unknown(u64),
}

/// Resolves every frame of `profile`.
pub fn symbolicate(profile: &ProfileData, options: &SymbolicateOptions) -> Symbols {
    symbolicate_with_warnings(profile, options).0
}

/// Resolves every frame of `profile`, and says what went wrong on the way
/// (a corrupt symbol file, a broken source map), each problem once.
pub fn symbolicate_with_warnings(profile: &ProfileData, options: &SymbolicateOptions) -> (Symbols, Vec<String>) {
    let mut warnings: Vec<String> = Vec::new();
    let mut warn = |w: String| {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    };
    let darwin = profile.meta.platform == "darwin";
    let mut source_maps = source_map::SourceMaps::default();
    let probes = lookup_addresses(profile);
    let modules = ModuleRanges::new(profile);
    let perf_map_path =
        options.perf_map.clone().unwrap_or_else(|| PathBuf::from(format!("/tmp/perf-{}.map", profile.meta.pid)));
    let mut perf_map: Option<PerfMap> = None;
    let mut tables: FxHashMap<usize, Arc<Mutex<ModuleSymbols>>> = FxHashMap::default();

    let mut functions: Vec<Function> = Vec::new();
    let mut by_key: FxHashMap<FunctionKey, u32> = FxHashMap::default();
    let mut frame_function = Vec::with_capacity(profile.frame_address.len());
    let mut frame_line = Vec::with_capacity(profile.frame_address.len());
    let mut intern = |key: FunctionKey, make: &mut dyn FnMut() -> Function| -> u32 {
        *by_key.entry(key).or_insert_with(|| {
            functions.push(make());
            (functions.len() - 1) as u32
        })
    };

    for (i, &addr) in profile.frame_address.iter().enumerate() {
        // Named by V8 when the sample was taken. (A tagged address with no
        // name, as in a hand-edited profile, is just an unknown address.)
        if let Some((j, raw)) = js_frame_index(addr).and_then(|j| Some((j, profile.js_names.get(j)?))) {
            let f = intern(FunctionKey::V8(j), &mut || source_maps.function(raw, &mut warn));
            frame_function.push(f);
            frame_line.push(0);
            continue;
        }
        let probe = probes[i];
        let module = modules.find(probe);
        if let Some(mi) = module {
            let m = &profile.modules[mi];
            let table = tables.entry(mi).or_insert_with(|| {
                let r = ModuleRef {
                    path: &m.path,
                    build_id: &m.build_id,
                    image_base: m.start.wrapping_sub(m.bias),
                    macho: darwin,
                };
                module_symbols(&r, &options.symbol_path, &mut warn)
            });
            let svma = probe.wrapping_sub(m.bias);
            let hit = {
                let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
                table.lookup(svma).or_else(|| {
                    // A return address at the very start of a function,
                    // after bytes no function covers, was not left by a
                    // call: it was pushed as where to go next (V8's
                    // deoptimizer does so), and is that function's frame.
                    let at = addr.wrapping_sub(m.bias);
                    (probe != addr).then(|| table.lookup(at)).flatten().filter(|h| h.start() == at)
                })
            };
            let (key, function, line) = match hit {
                Some(Lookup::Named(hit, line)) => (
                    FunctionKey::Native { module: mi, start: hit.start },
                    Function {
                        name: hit.name,
                        module: mi as i32,
                        file: hit.file,
                        line: hit.line,
                        kind: FunctionKind::Native,
                    },
                    line,
                ),
                // In a function without a name: one entry per function.
                Some(Lookup::Unnamed { start }) => (
                    FunctionKey::Native { module: mi, start },
                    Function::unknown_in(start, mi as i32, module_name(&m.path)),
                    0,
                ),
                None => (
                    FunctionKey::Unknown(addr),
                    Function::unknown_in(addr.wrapping_sub(m.bias), mi as i32, module_name(&m.path)),
                    0,
                ),
            };
            let mut function = Some(function);
            let f = intern(key, &mut || function.take().unwrap_or_else(|| Function::unknown(addr, mi as i32)));
            frame_function.push(f);
            frame_line.push(line);
            continue;
        } else {
            // Not in any module: JIT code, if V8 wrote a perf map.
            let map = perf_map.get_or_insert_with(|| PerfMap::read(&perf_map_path));
            if let Some((entry_index, entry)) = map.find(probe) {
                let f = intern(FunctionKey::Jit(entry_index), &mut || {
                    let n = parse_name(&entry.raw);
                    Function {
                        name: n.display,
                        module: -1,
                        file: n.file,
                        line: n.line,
                        kind: if n.is_js { FunctionKind::Js } else { FunctionKind::Native },
                    }
                });
                frame_function.push(f);
                frame_line.push(0);
                continue;
            }
        }
        let f = intern(FunctionKey::Unknown(addr), &mut || Function::unknown(addr, module.map_or(-1, |m| m as i32)));
        frame_function.push(f);
        frame_line.push(0);
    }
    let mut symbols = Symbols { frame_function, frame_line, functions };
    regexp_code::name_unnamed_regexp_code(profile, &mut symbols);
    (symbols, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn unknown_addresses_stay_hex_with_their_module() {
        let mut p = sample_profile();
        p.symbols = None;
        p.modules[0].path = "/nonexistent/app".into();
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        assert_eq!(s.frame_function.len(), 4);
        // In a module: the file address (of the frame, not of the lookup
        // probe one byte before a return address) and the module.
        assert_eq!(s.functions[s.frame_function[1] as usize].name, "0x2000 in app");
        assert_eq!(s.functions[0].module, 0);
        assert!(s.functions.iter().all(|f| f.kind == FunctionKind::Unknown));
    }

    /// A return address is looked up one byte before it; at a function's
    /// first byte it stays in that function only where the byte before
    /// belongs to none (a pushed continuation, not a call).
    #[test]
    fn a_return_address_at_a_function_start_after_padding_names_that_function() {
        let mut p = sample_profile();
        p.symbols = None;
        let lib = crate::symbols::test_fixtures::fixture("elf/full/libfe.so");
        p.modules[0] = crate::profile::Module {
            path: lib.to_string_lossy().into_owned(),
            start: 0,
            end: 0x3000,
            bias: 0,
            build_id: String::new(),
        };
        // Frames 0 and 1 are callers. In libfe.so, `_fini` (0x11fc)
        // follows a byte of padding; `local_gamma` (0x1180) follows
        // `local_beta` directly, so a return address there is a call at the
        // end of `local_beta`.
        p.frame_address[0] = 0x11fc;
        p.frame_address[1] = 0x1180;
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        let name = |frame: usize| s.functions[s.frame_function[frame] as usize].name.clone();
        assert_eq!(name(0), "_fini");
        assert_eq!(name(1), "local_beta");
    }

    #[test]
    fn jit_frames_are_named_from_the_perf_map() {
        let mut p = sample_profile();
        p.modules.clear();
        let dir = std::env::temp_dir().join(format!("machsampler-perfmap-{}", std::process::id()));
        std::fs::write(&dir, "1f00 200 JS:*main /app.js:1:1\n2f00 200 JS:~b /app.js:5:3\n").unwrap();
        let s = symbolicate(&p, &SymbolicateOptions { perf_map: Some(dir.clone()), ..Default::default() });
        std::fs::remove_file(&dir).unwrap();
        let name = |frame: usize| s.functions[s.frame_function[frame] as usize].name.clone();
        // Frame 0 (0x1000) is a caller: looked up at 0xfff, outside the map.
        assert_eq!(name(0), "0x1000");
        assert_eq!(name(1), "main (/app.js:1:1)"); // 0x2000 - 1 = 0x1fff
        assert_eq!(name(2), "b (/app.js:5:3)"); // leaf: 0x3000 itself
        let b = &s.functions[s.frame_function[2] as usize];
        assert_eq!((b.kind, b.file.as_str(), b.line), (FunctionKind::Js, "/app.js", 5));
    }

    #[test]
    fn v8_named_frames_use_their_names() {
        let mut p = sample_profile();
        p.js_names = vec!["JS:*fib /app/fib.js:3:13".into()];
        p.frame_address[2] = crate::profile::JS_FRAME_TAG;
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        let f = &s.functions[s.frame_function[2] as usize];
        assert_eq!(
            (f.name.as_str(), f.file.as_str(), f.line, f.kind),
            ("fib (/app/fib.js:3:13)", "/app/fib.js", 3, FunctionKind::Js)
        );
    }

    /// A symbol file that appears after a module was loaded (a download)
    /// is used by the next symbolization in the same process.
    #[test]
    fn symbol_files_downloaded_later_are_noticed() {
        use crate::symbols::test_fixtures::{fixture, tempdir};
        let sym_dir = fixture("macho/lld-arm64/breakpad/libfl.dylib");
        let id = std::fs::read_dir(&sym_dir).unwrap().next().unwrap().unwrap().file_name();
        let sym = sym_dir.join(&id).join("libfl.dylib.sym");
        let rva = std::fs::read_to_string(&sym)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_suffix(" local_beta").and_then(|l| l.strip_prefix("FUNC ")).map(|l| l.to_string()))
            .unwrap();
        let rva = u64::from_str_radix(rva.split(' ').next().unwrap(), 16).unwrap();
        let mut p = sample_profile();
        p.meta.platform = "darwin".into();
        p.modules[0].path = fixture("macho/lld-arm64/stripped/libfl.dylib").to_string_lossy().into_owned();
        p.modules[0].build_id = id.to_string_lossy()[..32].to_ascii_lowercase();
        p.frame_address[2] = rva + 4;
        let dir = tempdir("later");
        let options = SymbolicateOptions {
            perf_map: Some("/nonexistent.map".into()),
            symbol_path: SymbolPath::parse(&[dir.to_string_lossy()], &dir).unwrap(),
        };
        let name = |s: &Symbols| s.functions[s.frame_function[2] as usize].name.clone();
        assert_eq!(name(&symbolicate(&p, &options)), format!("0x{rva:x} in libfl.dylib"));
        std::fs::create_dir_all(dir.join("libfl.dylib").join(&id)).unwrap();
        std::fs::copy(&sym, dir.join("libfl.dylib").join(&id).join("libfl.dylib.sym")).unwrap();
        assert_eq!(name(&symbolicate(&p, &options)), "local_beta");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The vDSO has no file; this process's image names its frames.
    #[cfg(target_os = "linux")]
    #[test]
    fn vdso_frames_are_named() {
        use object::{Object, ObjectSymbol};
        let modules = crate::platform::loaded_modules();
        let vdso = modules.iter().find(|m| vdso::is_vdso(&m.path)).expect("the vDSO is a loaded module").clone();
        let image = vdso::image().unwrap();
        let file = object::File::parse(&*image).unwrap();
        let sym = file.dynamic_symbols().find(|s| s.name().is_ok_and(|n| n.ends_with("clock_gettime"))).unwrap();
        let mut p = sample_profile();
        p.frame_address = vec![0x1000, 0x2000, sym.address() + vdso.bias + 1, 0x4000];
        p.modules = vec![vdso.clone()];
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        let f = &s.functions[s.frame_function[2] as usize];
        assert!(f.name.ends_with("clock_gettime"), "{f:?}");
        // Recorded under another kernel (build id): unknown, not wrong.
        p.modules[0].build_id = "00".repeat(20);
        clear_cache();
        let s =
            symbolicate(&p, &SymbolicateOptions { perf_map: Some("/nonexistent.map".into()), ..Default::default() });
        assert_eq!(s.functions[s.frame_function[2] as usize].kind, FunctionKind::Unknown);
    }

    #[test]
    fn native_frames_of_this_process_resolve() {
        let mut p = sample_profile();
        p.modules = crate::platform::loaded_modules();
        let addr = native_frames_of_this_process_resolve as *const () as u64;
        p.frame_address = vec![addr + 8, addr + 16, addr + 24, addr + 32];
        let s = symbolicate(&p, &SymbolicateOptions::default());
        let f = &s.functions[s.frame_function[2] as usize];
        assert!(f.name.contains("native_frames_of_this_process_resolve"), "{}", f.name);
        assert_eq!(f.kind, FunctionKind::Native);
        assert!(f.module >= 0);
        // All four frames are in the same function: one entry.
        assert!(s.frame_function.iter().all(|&x| x == s.frame_function[2]));
    }
}
