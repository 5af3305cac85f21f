//! What a Mach-O image says about its functions beyond its symbol table,
//! and where its dSYM is.
//!
//! Mach-O symbols have no size, so a symbol cannot say where its function
//! ends. Every linked image records where each function starts, stripped
//! or not: `LC_FUNCTION_STARTS` (always written by Apple's linker) and the
//! compact unwind table `__unwind_info`. With those as bounds, an address
//! in a function that has no symbol (a static function of a stripped
//! binary) is known to be in an unnamed function instead of being given
//! the name of the exported function before it. The lists are merged, with
//! the symbol addresses (see `module`). `__unwind_info` alone is not
//! enough: linkers fold neighbouring functions with the same unwind
//! encoding into one entry (every frame-pointer function on x86_64), so
//! without `LC_FUNCTION_STARTS` the bounds are marked incomplete, and a
//! symbol table without local symbols then names nothing (see `module`).

use std::path::{Path, PathBuf};

use object::macho;
use object::read::macho::{MachOFile64, Segment};
use object::{Endianness, Object, ObjectSection, ObjectSegment, ReadRef};

/// A Mach-O image's function starts and the end of its code, as file
/// (unslid) addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionBounds {
    /// Sorted, without duplicates.
    pub starts: Vec<u64>,
    /// One past the last byte of `__text` (functions end there at the latest).
    pub text_end: u64,
    /// True if `LC_FUNCTION_STARTS` listed the functions: every function
    /// start is in `starts`. False if they come from `__unwind_info` alone,
    /// which may fold neighbours into one entry.
    pub complete: bool,
}

/// The function bounds of a 64-bit Mach-O image. `linkedit` is the data
/// that `__LINKEDIT` offsets refer to: the file itself, or for an image of
/// the dyld shared cache the (sub)cache file holding its `__LINKEDIT`.
pub fn function_bounds<'data, R: ReadRef<'data>>(
    file: &MachOFile64<'data, Endianness, R>,
    linkedit: R,
) -> FunctionBounds {
    let endian = file.endian();
    let mut text_base = None;
    let mut starts = Vec::new();
    for segment in file.segments() {
        if segment.name() == Ok(Some("__TEXT")) {
            text_base = Some(segment.macho_segment().vmaddr(endian));
        }
    }
    let Some(text_base) = text_base else { return FunctionBounds::default() };
    if let Ok(mut commands) = file.macho_load_commands() {
        while let Ok(Some(command)) = commands.next() {
            if command.cmd() != macho::LC_FUNCTION_STARTS {
                continue;
            }
            let Ok(cmd) = command.data::<macho::LinkeditDataCommand<Endianness>>() else { continue };
            if let Ok(mut it) = cmd.function_starts(endian, linkedit, text_base) {
                // A corrupt list ends the iteration; what was read is kept.
                while let Ok(Some(addr)) = it.next() {
                    starts.push(addr);
                }
            }
        }
    }
    let complete = !starts.is_empty();
    if let Some(data) = file.section_by_name("__unwind_info").and_then(|s| s.data().ok()) {
        if let Ok(info) = macho_unwind_info::UnwindInfo::parse(data) {
            let mut functions = info.functions();
            while let Ok(Some(f)) = functions.next() {
                starts.push(text_base + u64::from(f.start_address));
            }
            // The table ends where its last function ends; code after it
            // (stubs some linkers put in __text) is not part of that function.
            starts.push(text_base + u64::from(info.address_range().end));
        }
    }
    let text_end = file.section_by_name("__text").map_or(0, |s| s.address().saturating_add(s.size()));
    starts.retain(|&a| a < text_end);
    starts.sort_unstable();
    starts.dedup();
    FunctionBounds { starts, text_end, complete }
}

/// Mach-O symbol names carry a leading underscore that C never wrote
/// (`_malloc` is `malloc`); C++ and Rust manglings keep theirs (`__Z…` is
/// `_Z…`), which the demangler then reads.
pub fn strip_underscore(name: &str) -> &str {
    name.strip_prefix('_').unwrap_or(name)
}

/// The DWARF file of a dSYM bundle for the image `uuid`, looked for beside
/// the binary (`<binary>.dSYM`, or any `*.dSYM` in its directory, as lldb
/// does) and in each symbol directory. Only a file whose own LC_UUID is
/// `uuid` is returned.
pub fn find_dsym(binary: &Path, uuid: [u8; 16], symbol_dirs: &[PathBuf]) -> Option<PathBuf> {
    let name = binary.file_name()?;
    let mut bundles: Vec<PathBuf> = Vec::new();
    let mut in_dir = |dir: &Path| {
        let mut exact = dir.join(name);
        exact.as_mut_os_string().push(".dSYM");
        bundles.push(exact);
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut others: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "dSYM"))
                .collect();
            others.sort();
            bundles.extend(others);
        }
    };
    if let Some(parent) = binary.parent() {
        in_dir(parent);
    }
    for dir in symbol_dirs {
        in_dir(dir);
    }
    bundles.into_iter().find_map(|bundle| {
        let dwarf_dir = bundle.join("Contents/Resources/DWARF");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dwarf_dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        files.into_iter().find(|f| file_has_uuid(f, uuid))
    })
}

/// The image in `data` with LC_UUID `uuid`: `data` itself unless it is a
/// universal (fat) binary, whose slices are images of their own; then the
/// slice with that UUID, or without one given, this machine's
/// architecture's (else the first). Anything else is returned as it is.
pub fn image_in(data: &[u8], uuid: Option<[u8; 16]>) -> Option<&[u8]> {
    let slices: Vec<(&[u8], object::Architecture)> = match object::FileKind::parse(data) {
        Ok(object::FileKind::MachOFat32) => fat_slices::<macho::FatArch32>(data)?,
        Ok(object::FileKind::MachOFat64) => fat_slices::<macho::FatArch64>(data)?,
        _ => return Some(data),
    };
    let uuid_of = |d: &[u8]| object::File::parse(d).ok()?.mach_uuid().ok()?;
    match uuid {
        Some(u) => slices.iter().find(|(d, _)| uuid_of(d) == Some(u)).map(|s| s.0),
        None => {
            let host = if cfg!(target_arch = "aarch64") {
                object::Architecture::Aarch64
            } else {
                object::Architecture::X86_64
            };
            slices.iter().find(|s| s.1 == host).or(slices.first()).map(|s| s.0)
        }
    }
}

fn fat_slices<A: object::read::macho::FatArch>(data: &[u8]) -> Option<Vec<(&[u8], object::Architecture)>> {
    let fat = object::read::macho::MachOFatFile::<A>::parse(data).ok()?;
    Some(fat.arches().iter().filter_map(|a| Some((a.data(data).ok()?, a.architecture()))).collect())
}

/// The LC_UUID of the Mach-O file at `path` (for a universal binary, of
/// its slice for this machine).
pub fn uuid_of_file(path: &Path) -> Option<[u8; 16]> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let data = std::fs::read(path).ok()?;
    object::File::parse(image_in(&data, None)?).ok()?.mach_uuid().ok()?
}

/// True if the Mach-O file at `path`, or one slice of it, has LC_UUID
/// `uuid`.
pub fn file_has_uuid(path: &Path, uuid: [u8; 16]) -> bool {
    let uuid_in = |data: &[u8]| object::File::parse(image_in(data, Some(uuid))?).ok()?.mach_uuid().ok()?;
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
        && std::fs::read(path).is_ok_and(|data| uuid_in(&data) == Some(uuid))
}

/// A LC_UUID as the lowercase hex a profile's `buildId` holds.
pub fn uuid_from_hex(hex: &str) -> Option<[u8; 16]> {
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::test_fixtures::fixture;

    fn bounds_of(path: &Path) -> FunctionBounds {
        let data = std::fs::read(path).unwrap();
        let file = MachOFile64::<Endianness, _>::parse(&*data).unwrap();
        function_bounds(&file, &*data)
    }

    fn symbol_names(path: &Path) -> Vec<(String, u64)> {
        use object::ObjectSymbol;
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file.section_by_name("__text").unwrap().index();
        file.symbols()
            .filter(|s| s.section_index() == Some(text) && s.is_definition())
            .map(|s| (s.name().unwrap().to_string(), s.address()))
            .collect()
    }

    /// The symbol addresses of the unstripped image: the ground truth.
    fn symbol_addresses(path: &Path) -> Vec<u64> {
        use object::ObjectSymbol;
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file.section_by_name("__text").unwrap().index();
        let mut v: Vec<u64> = file
            .symbols()
            .filter(|s| s.section_index() == Some(text) && s.is_definition())
            .map(|s| s.address())
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn function_starts_come_from_lc_function_starts() {
        // Linked by lld: LC_FUNCTION_STARTS lists every function. Its
        // __unwind_info is ignored here by comparing with a zig-linked
        // image below, whose LC_FUNCTION_STARTS is empty.
        for arch in ["arm64", "x86_64"] {
            let stripped = fixture(&format!("macho/lld-{arch}/stripped/libfl.dylib"));
            let b = bounds_of(&stripped);
            assert_eq!(b.starts, symbol_addresses(&fixture(&format!("macho/lld-{arch}/full/libfl.dylib"))), "{arch}");
            assert!(b.complete);
            assert!(b.text_end > *b.starts.last().unwrap());
        }
    }

    #[test]
    fn function_starts_come_from_unwind_info_when_lc_function_starts_is_empty() {
        // zig puts its call thunks (`malloc__thunk`) in __text without
        // unwind entries: the table's end bounds the last function instead.
        // On x86_64 the table folds functions with the same encoding, so
        // its starts are true starts but not all of them.
        for arch in ["arm64", "x86_64"] {
            let b = bounds_of(&fixture(&format!("macho/zig-{arch}/stripped/libfx.dylib")));
            assert!(!b.complete, "{arch}: no LC_FUNCTION_STARTS here");
            let full = fixture(&format!("macho/zig-{arch}/full/libfx.dylib"));
            let thunks: Vec<u64> =
                symbol_names(&full).into_iter().filter(|(n, _)| n.ends_with("__thunk")).map(|x| x.1).collect();
            let mut all: Vec<u64> =
                symbol_names(&full).into_iter().filter(|(n, _)| !n.ends_with("__thunk")).map(|x| x.1).collect();
            all.extend(thunks.iter().min());
            assert!(b.starts.iter().all(|s| all.contains(s)), "{arch}: {:x?} not all in {all:x?}", b.starts);
            if arch == "arm64" {
                // Every function has its own encoding here: none folded.
                all.sort_unstable();
                assert_eq!(b.starts, all);
            } else {
                assert!(b.starts.len() < all.len(), "{arch}: expected folded entries: {:x?}", b.starts);
            }
        }
    }

    #[test]
    fn dsyms_are_found_by_uuid_only() {
        let bin = fixture("macho/zig-arm64/stripped/libfx.dylib");
        let uuid = uuid_of_file(&bin).unwrap();
        // Not beside the binary in the fixtures: on the symbol path.
        assert_eq!(find_dsym(&bin, uuid, &[]), None);
        let found = find_dsym(&bin, uuid, &[fixture("macho/zig-arm64/dsym")]).unwrap();
        assert!(found.to_string_lossy().contains(".dSYM/Contents/Resources/DWARF/"), "{found:?}");
        assert_eq!(uuid_of_file(&found), Some(uuid));
        // Another UUID finds nothing, even though a dSYM is there.
        let mut other = uuid;
        other[0] ^= 1;
        assert_eq!(find_dsym(&bin, other, &[fixture("macho/zig-arm64/dsym")]), None);
        assert_eq!(uuid_from_hex(&crate::symbols::module::hex(&uuid)), Some(uuid));
        assert_eq!(uuid_from_hex("zz"), None);
    }

    #[test]
    fn underscores() {
        assert_eq!(strip_underscore("_exported_alpha"), "exported_alpha");
        assert_eq!(strip_underscore("__ZN4node5StartEv"), "_ZN4node5StartEv");
        assert_eq!(strip_underscore("plain"), "plain");
    }
}
