//! Images of the dyld shared cache.
//!
//! Since macOS 11 the system libraries (libsystem_kernel, libdispatch,
//! CoreFoundation, AppKit, …) exist only inside the dyld shared cache, not
//! as files, so their frames are named from the cache file: the image is
//! found by its install path, and used only if its LC_UUID is the one
//! recorded when sampling (a cache from another OS version would give
//! wrong names). A cache in the system's own places must also be the one
//! this machine runs (`_dyld_get_shared_cache_uuid`); one on the symbol
//! path (a copy from another Mac) is checked by the image UUID alone.
//!
//! Names come from the image's symbol table (exports) and, on macOS 13 and
//! later, from the `.symbols` subcache, which holds every image's local
//! symbols (`dyld_cache_local_symbols_info` in dyld's
//! `dyld_cache_format.h`); functions are bounded by the image's
//! `LC_FUNCTION_STARTS` and `__unwind_info`. Reading uses `object`'s
//! `DyldCache` (mappings, subcaches, images); the local-symbols table,
//! which `object` does not read, is parsed here.

use std::path::{Path, PathBuf};

use object::macho::{DyldCacheHeader, Nlist64};
use object::read::macho::{DyldCache, Segment};
use object::{Endianness, LittleEndian as LE, Object, ObjectSegment, ObjectSymbol, SymbolKind, U32, U64};

use super::macho::{function_bounds, strip_underscore, FunctionBounds};
use super::module::{hex, map_file};

/// What the cache knows about one image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheImage {
    /// (file address, name), exported and local.
    pub symbols: Vec<(u64, String)>,
    pub bounds: FunctionBounds,
    /// Whether local symbols were found.
    pub has_locals: bool,
}

/// Where macOS keeps the cache: since macOS 13 in the OS cryptex, before
/// that in /System/Library/dyld.
const SYSTEM_DIRS: [&str; 2] = ["/System/Volumes/Preboot/Cryptexes/OS/System/Library/dyld", "/System/Library/dyld"];

/// The UUID of the shared cache this process runs with, if any.
fn running_cache_uuid() -> Option<[u8; 16]> {
    #[cfg(target_vendor = "apple")]
    {
        extern "C" {
            fn _dyld_get_shared_cache_uuid(uuid: *mut u8) -> bool;
        }
        let mut uuid = [0u8; 16];
        // SAFETY: dyld writes 16 bytes into the buffer and returns whether
        // a cache is in use.
        if unsafe { _dyld_get_shared_cache_uuid(uuid.as_mut_ptr()) } {
            return Some(uuid);
        }
    }
    None
}

/// Main cache files (`dyld_shared_cache_<arch>`, not the subcaches) in `dir`.
fn cache_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("dyld_shared_cache_"))
                .is_some_and(|arch| !arch.is_empty() && !arch.contains('.'))
        })
        .collect();
    v.sort();
    v
}

/// Names and bounds of the image installed at `path` whose LC_UUID is
/// `uuid_hex`, from a cache in the symbol directories or the system's.
pub fn load_image(path: &str, uuid_hex: &str, dirs: &[PathBuf], warn: &mut dyn FnMut(String)) -> Option<CacheImage> {
    if uuid_hex.is_empty() {
        return None;
    }
    let running = running_cache_uuid();
    let system = SYSTEM_DIRS.iter().flat_map(|d| cache_files(Path::new(d))).map(|f| (f, true));
    let user = dirs.iter().flat_map(|d| cache_files(d)).map(|f| (f, false));
    for (file, is_system) in user.chain(system) {
        match image_in_cache(&file, path, uuid_hex, if is_system { running } else { None }) {
            Ok(Some(image)) => return Some(image),
            Ok(None) => {}
            Err(e) => warn(format!("{}: {e}", file.display())),
        }
    }
    None
}

fn cache_uuid(data: &[u8]) -> Option<[u8; 16]> {
    DyldCacheHeader::<Endianness>::parse(data).ok().map(|h| h.uuid)
}

/// The image at `path` with LC_UUID `uuid_hex` in the cache `file`;
/// `Ok(None)` if the cache has no such image (or is not the running one
/// when `running` says which that is).
fn image_in_cache(
    file: &Path,
    path: &str,
    uuid_hex: &str,
    running: Option<[u8; 16]>,
) -> Result<Option<CacheImage>, String> {
    let main = map_file(file).ok_or("cannot be read")?;
    let main_uuid = cache_uuid(&main).ok_or("not a dyld shared cache")?;
    if running.is_some_and(|r| r != main_uuid) {
        return Ok(None);
    }
    let suffixes = DyldCache::<Endianness, &[u8]>::subcache_suffixes(&main[..]).map_err(|e| e.to_string())?;
    let mut maps = Vec::with_capacity(suffixes.len());
    for s in &suffixes {
        let mut p = file.as_os_str().to_owned();
        p.push(s);
        maps.push(map_file(Path::new(&p)).ok_or_else(|| format!("its subcache {s} is missing"))?);
    }
    let sub: Vec<&[u8]> = maps.iter().map(|m| &m[..]).collect();
    let cache = DyldCache::<Endianness, &[u8]>::parse(&main[..], &sub).map_err(|e| e.to_string())?;
    let Some(image) = cache.images().find(|i| i.path() == Ok(path)) else { return Ok(None) };
    let object::File::MachO64(macho) = image.parse_object().map_err(|e| format!("{path}: {e}"))? else {
        return Ok(None);
    };
    if macho.mach_uuid().ok().flatten().map(|u| hex(&u)).as_deref() != Some(uuid_hex) {
        // Another build of this library: its names would be wrong.
        return Ok(None);
    }
    let mut out = CacheImage::default();
    for s in macho.symbols() {
        if s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0 {
            if let Ok(name) = s.name() {
                out.symbols.push((s.address(), strip_underscore(name).to_string()));
            }
        }
    }
    let endian = macho.endian();
    let text = macho.segments().find(|s| s.name() == Ok(Some("__TEXT"))).map(|s| s.macho_segment().vmaddr(endian));
    let linkedit =
        macho.segments().find(|s| s.name() == Ok(Some("__LINKEDIT"))).map(|s| s.macho_segment().vmaddr(endian));
    if let Some((data, _)) = linkedit.and_then(|a| cache.data_and_offset_for_address(a)) {
        out.bounds = function_bounds::<&[u8]>(&macho, data);
    }
    if let Some(text) = text {
        let base = cache.mappings().next().map_or(0, |m| m.address());
        // The local symbols are in the .symbols subcache (the last), or,
        // in caches before it existed, in the main file.
        let symbols_file = if suffixes.last().is_some_and(|s| s == ".symbols") { sub.last().copied() } else { None };
        let new_format = symbols_file.is_some();
        let locals = local_symbols(symbols_file.unwrap_or(&main[..]), text.wrapping_sub(base), new_format);
        out.has_locals = !locals.is_empty();
        out.symbols.extend(locals.into_iter().map(|(a, n)| (a, strip_underscore(&n).to_string())));
    }
    Ok(Some(out))
}

fn get<T: object::Pod>(data: &[u8], offset: u64) -> Option<&T> {
    object::ReadRef::read_at::<T>(data, offset).ok()
}

/// The local function symbols of the image whose header is `dylib_offset`
/// past the cache's base (new format: a VM offset, 64-bit entries; old:
/// a file offset, 32-bit entries), from the local-symbols table of `data`.
fn local_symbols(data: &[u8], dylib_offset: u64, new_format: bool) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let Some(h) = get::<DyldCacheHeader<LE>>(data, 0) else { return out };
    let (off, size) = (h.local_symbols_offset.get(LE), h.local_symbols_size.get(LE));
    if off == 0 || size == 0 {
        return out;
    }
    let Some(info) = data.get(off as usize..off.saturating_add(size) as usize) else { return out };
    let word = |i: u64| get::<U32<LE>>(info, i * 4).map(|v| u64::from(v.get(LE)));
    let (
        Some(nlist_off),
        Some(nlist_count),
        Some(strings_off),
        Some(strings_size),
        Some(entries_off),
        Some(entries_count),
    ) = (word(0), word(1), word(2), word(3), word(4), word(5))
    else {
        return out;
    };
    let strings = info.get(strings_off as usize..strings_off.saturating_add(strings_size) as usize).unwrap_or(&[]);
    let entry_size = if new_format { 16 } else { 12 };
    for e in 0..entries_count.min(1 << 20) {
        let at = entries_off + e * entry_size;
        let (dylib, start, count) = if new_format {
            let (Some(d), Some(s), Some(c)) =
                (get::<U64<LE>>(info, at), get::<U32<LE>>(info, at + 8), get::<U32<LE>>(info, at + 12))
            else {
                break;
            };
            (d.get(LE), u64::from(s.get(LE)), u64::from(c.get(LE)))
        } else {
            let (Some(d), Some(s), Some(c)) = (word(at / 4), word(at / 4 + 1), word(at / 4 + 2)) else { break };
            (d, s, c)
        };
        if dylib != dylib_offset {
            continue;
        }
        for i in start..start.saturating_add(count).min(nlist_count) {
            let Some(n) = get::<Nlist64<LE>>(info, nlist_off + i * 16) else { break };
            // N_SECT, not a stab: a symbol defined in a section.
            let t = n.n_type.0;
            if t & 0xe0 != 0 || t & 0x0e != 0x0e {
                continue;
            }
            let strx = n.n_strx.get(LE) as usize;
            let Some(name) = strings.get(strx..).and_then(|s| s.split(|&b| b == 0).next()) else { continue };
            if !name.is_empty() {
                out.push((n.n_value.get(LE), String::from_utf8_lossy(name).into_owned()));
            }
        }
        break;
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    //! A synthetic cache in the macOS 13+ layout (main file + `.symbols`
    //! subcache), built from `object`'s own definitions of the structures,
    //! so that `object`'s parser accepts it. The local-symbols table follows
    //! dyld's `dyld_cache_format.h`. No real cache can be read on Linux.
    use super::*;
    use object::macho::*;
    use object::pod::bytes_of;

    pub const BASE: u64 = 0x1_8000_0000;
    pub const IMAGE: u64 = 0x4000;
    pub const PATH: &str = "/usr/lib/system/libsynthetic.dylib";
    pub const IMAGE_UUID: [u8; 16] = [0x5a; 16];
    /// Functions at these offsets from the image: exported, local (only in
    /// .symbols), unnamed, exported.
    pub const FUNCS: [(u64, &str); 4] =
        [(0x400, "_exported_one"), (0x440, "_local_two"), (0x480, ""), (0x4c0, "_exported_four")];

    fn put<T: object::Pod>(buf: &mut Vec<u8>, at: usize, v: &T) {
        let b = bytes_of(v);
        if buf.len() < at + b.len() {
            buf.resize(at + b.len(), 0);
        }
        buf[at..at + b.len()].copy_from_slice(b);
    }

    fn zeroed<T: object::Pod>() -> T {
        *object::from_bytes::<T>(&vec![0u8; std::mem::size_of::<T>()]).unwrap().0
    }

    fn header(uuid: [u8; 16], symbols_uuid: [u8; 16]) -> DyldCacheHeader<LE> {
        let mut h: DyldCacheHeader<LE> = zeroed();
        h.magic = *b"dyld_v1  arm64e\0";
        let size = std::mem::size_of::<DyldCacheHeader<LE>>() as u32;
        h.mapping_offset = U32::new(LE, size);
        h.mapping_with_slide_offset = U32::new(LE, size);
        h.uuid = uuid;
        h.symbol_file_uuid = symbols_uuid;
        h
    }

    fn seg(name: &str, vmaddr: u64, size: u64, fileoff: u64, nsects: u32) -> SegmentCommand64<LE> {
        let mut s: SegmentCommand64<LE> = zeroed();
        s.cmd = U32::new(LE, LC_SEGMENT_64);
        s.cmdsize = U32::new(LE, 72 + 80 * nsects);
        s.segname[..name.len()].copy_from_slice(name.as_bytes());
        s.vmaddr = U64::new(LE, vmaddr);
        s.vmsize = U64::new(LE, size);
        s.fileoff = U64::new(LE, fileoff);
        s.filesize = U64::new(LE, size);
        s.nsects = U32::new(LE, nsects);
        s
    }

    fn nlist(strx: u32, value: u64, ext: bool) -> Nlist64<LE> {
        let mut n: Nlist64<LE> = zeroed();
        n.n_strx = U32::new(LE, strx);
        n.n_type = SymbolFlags(0x0e | u8::from(ext)); // N_SECT, N_EXT
        n.n_sect = 1;
        n.n_value = U64::new(LE, value);
        n
    }

    /// Writes `dyld_shared_cache_arm64e` and its `.symbols` into `dir`.
    pub fn write_cache(dir: &Path, cache_uuid: [u8; 16]) {
        let symbols_uuid = [0x77; 16];
        let text = BASE + IMAGE;
        let linkedit_off = 0x8000u64;
        let mut f = Vec::new();
        let hsize = std::mem::size_of::<DyldCacheHeader<LE>>();
        let mut h = header(cache_uuid, symbols_uuid);
        h.mapping_with_slide_count = U32::new(LE, 1);
        h.images_offset = U32::new(LE, (hsize + 56) as u32);
        h.images_count = U32::new(LE, 1);
        put(&mut f, 0, &h);
        let mut m: DyldCacheMappingAndSlideInfo<LE> = zeroed();
        m.address = U64::new(LE, BASE);
        m.size = U64::new(LE, 0x9000);
        m.file_offset = U64::new(LE, 0);
        put(&mut f, hsize, &m);
        let path_at = hsize + 56 + 32;
        let mut info: DyldCacheImageInfo<LE> = zeroed();
        info.address = U64::new(LE, text);
        info.path_file_offset = U32::new(LE, path_at as u32);
        put(&mut f, hsize + 56, &info);
        f.resize(path_at, 0);
        f.extend_from_slice(PATH.as_bytes());
        f.push(0);

        // The image: __TEXT (one __text section), __LINKEDIT, symtab,
        // function starts, UUID.
        let mut cmds = Vec::new();
        let text_seg = seg("__TEXT", text, 0x1000, IMAGE, 1);
        cmds.extend_from_slice(bytes_of(&text_seg));
        let mut sect: Section64<LE> = zeroed();
        sect.sectname[..6].copy_from_slice(b"__text");
        sect.segname[..6].copy_from_slice(b"__TEXT");
        sect.addr = U64::new(LE, text + 0x400);
        sect.size = U64::new(LE, 0x100);
        sect.offset = U32::new(LE, (IMAGE + 0x400) as u32);
        sect.flags = U32::new(LE, S_ATTR_PURE_INSTRUCTIONS);
        cmds.extend_from_slice(bytes_of(&sect));
        cmds.extend_from_slice(bytes_of(&seg("__LINKEDIT", BASE + linkedit_off, 0x1000, linkedit_off, 0)));
        // LINKEDIT: the exported symbols, their names, the function starts.
        let mut strings = vec![0u8];
        let mut syms = Vec::new();
        for (off, name) in FUNCS {
            if name.starts_with("_exported") {
                syms.push(nlist(strings.len() as u32, text + off, true));
                strings.extend_from_slice(name.as_bytes());
                strings.push(0);
            }
        }
        let symoff = linkedit_off;
        let stroff = symoff + 16 * syms.len() as u64;
        let starts_off = stroff + strings.len() as u64;
        let starts = [0x80u8, 0x08, 0x40, 0x40, 0x40, 0]; // 0x400, +0x40 ×3, end
        let mut symtab: SymtabCommand<LE> = zeroed();
        symtab.cmd = U32::new(LE, LC_SYMTAB);
        symtab.cmdsize = U32::new(LE, 24);
        symtab.symoff = U32::new(LE, symoff as u32);
        symtab.nsyms = U32::new(LE, syms.len() as u32);
        symtab.stroff = U32::new(LE, stroff as u32);
        symtab.strsize = U32::new(LE, strings.len() as u32);
        cmds.extend_from_slice(bytes_of(&symtab));
        let mut fs: LinkeditDataCommand<LE> = zeroed();
        fs.cmd = U32::new(LE, LC_FUNCTION_STARTS);
        fs.cmdsize = U32::new(LE, 16);
        fs.dataoff = U32::new(LE, starts_off as u32);
        fs.datasize = U32::new(LE, starts.len() as u32);
        cmds.extend_from_slice(bytes_of(&fs));
        let mut uuid: UuidCommand<LE> = zeroed();
        uuid.cmd = U32::new(LE, LC_UUID);
        uuid.cmdsize = U32::new(LE, 24);
        uuid.uuid = IMAGE_UUID;
        cmds.extend_from_slice(bytes_of(&uuid));
        let mut mh: MachHeader64<LE> = zeroed();
        mh.magic = U32::new(object::BigEndian, MH_CIGAM_64);
        mh.cputype = U32::new(LE, CPU_TYPE_ARM64);
        mh.filetype = U32::new(LE, MH_DYLIB);
        mh.ncmds = U32::new(LE, 5);
        mh.sizeofcmds = U32::new(LE, cmds.len() as u32);
        put(&mut f, IMAGE as usize, &mh);
        let at = IMAGE as usize + std::mem::size_of::<MachHeader64<LE>>();
        f.resize(at, 0);
        f.extend_from_slice(&cmds);
        for (i, s) in syms.iter().enumerate() {
            put(&mut f, symoff as usize + 16 * i, s);
        }
        f.resize(stroff as usize, 0);
        f.extend_from_slice(&strings);
        f.extend_from_slice(&starts);
        f.resize(0x9000, 0);
        std::fs::write(dir.join("dyld_shared_cache_arm64e"), &f).unwrap();

        // .symbols: a header and the local-symbols table.
        let mut s = Vec::new();
        let mut sh = header(symbols_uuid, [0; 16]);
        let info_off = hsize as u64;
        let local_name = b"_local_two\0";
        let nlist_off = 24u64;
        let strings_off = nlist_off + 16;
        let entries_off = strings_off + 1 + local_name.len() as u64;
        let size = entries_off + 16;
        sh.local_symbols_offset = U64::new(LE, info_off);
        sh.local_symbols_size = U64::new(LE, size);
        put(&mut s, 0, &sh);
        let mut table = Vec::new();
        for w in [nlist_off, 1, strings_off, 1 + local_name.len() as u64, entries_off, 1] {
            table.extend_from_slice(&(w as u32).to_le_bytes());
        }
        table.extend_from_slice(bytes_of(&nlist(1, text + 0x440, false)));
        table.push(0);
        table.extend_from_slice(local_name);
        table.extend_from_slice(&IMAGE.to_le_bytes()); // dylibOffset: VM offset from the cache base
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&1u32.to_le_bytes());
        s.extend_from_slice(&table);
        std::fs::write(dir.join("dyld_shared_cache_arm64e.symbols"), &s).unwrap();
    }

    #[test]
    fn images_are_named_from_the_cache_with_local_symbols() {
        let dir = crate::symbols::test_fixtures::tempdir("dyld");
        write_cache(&dir, [0x11; 16]);
        let mut warnings = Vec::new();
        let image = load_image(PATH, &hex(&IMAGE_UUID), std::slice::from_ref(&dir), &mut |w| warnings.push(w)).unwrap();
        assert_eq!(warnings, Vec::<String>::new());
        let mut names = image.symbols.clone();
        names.sort();
        let text = BASE + IMAGE;
        assert_eq!(
            names,
            vec![
                (text + 0x400, "exported_one".to_string()),
                (text + 0x440, "local_two".to_string()),
                (text + 0x4c0, "exported_four".to_string())
            ]
        );
        assert_eq!(image.bounds.starts, FUNCS.iter().map(|f| text + f.0).collect::<Vec<_>>());
        assert_eq!(image.bounds.text_end, text + 0x500);

        // Another build of the library (UUID), another path: nothing.
        assert_eq!(load_image(PATH, &hex(&[1; 16]), std::slice::from_ref(&dir), &mut |w| warnings.push(w)), None);
        assert_eq!(
            load_image("/usr/lib/other.dylib", &hex(&IMAGE_UUID), std::slice::from_ref(&dir), &mut |_| {}),
            None
        );
        // Not the running cache: skipped when the running one is known.
        let file = dir.join("dyld_shared_cache_arm64e");
        assert!(image_in_cache(&file, PATH, &hex(&IMAGE_UUID), Some([0x22; 16])).unwrap().is_none());
        assert!(image_in_cache(&file, PATH, &hex(&IMAGE_UUID), Some([0x11; 16])).unwrap().is_some());

        // A missing .symbols subcache is said, not a panic.
        std::fs::remove_file(dir.join("dyld_shared_cache_arm64e.symbols")).unwrap();
        assert_eq!(load_image(PATH, &hex(&IMAGE_UUID), std::slice::from_ref(&dir), &mut |w| warnings.push(w)), None);
        assert!(warnings.iter().any(|w| w.contains(".symbols is missing")), "{warnings:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncated_caches_never_panic() {
        let dir = crate::symbols::test_fixtures::tempdir("dyld-cut");
        write_cache(&dir, [0x11; 16]);
        let main = std::fs::read(dir.join("dyld_shared_cache_arm64e")).unwrap();
        let syms = std::fs::read(dir.join("dyld_shared_cache_arm64e.symbols")).unwrap();
        for cut in (0..main.len()).step_by(97) {
            std::fs::write(dir.join("dyld_shared_cache_arm64e"), &main[..cut]).unwrap();
            let _ = load_image(PATH, &hex(&IMAGE_UUID), std::slice::from_ref(&dir), &mut |_| {});
        }
        std::fs::write(dir.join("dyld_shared_cache_arm64e"), &main).unwrap();
        for cut in 0..syms.len() {
            std::fs::write(dir.join("dyld_shared_cache_arm64e.symbols"), &syms[..cut]).unwrap();
            let _ = load_image(PATH, &hex(&IMAGE_UUID), std::slice::from_ref(&dir), &mut |_| {});
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
