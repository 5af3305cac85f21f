//! DWARF for file:line and the names of inlined code. addr2line's loader
//! opens a file of its own (with its split DWARF); it cannot open a
//! universal (fat) Mach-O, such as the dSYM of an app built for both Mac
//! architectures, so the slice that ran is read through a context over the
//! mapped slice.

use std::path::Path;

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection};

pub enum Dwarf {
    File(Box<addr2line::Loader>),
    Slice(Slice),
}

/// The DWARF of one slice of a mapped universal file.
pub struct Slice {
    // Declared before the map it borrows, so dropped first.
    context: addr2line::Context<EndianSlice<'static, RunTimeEndian>>,
    _map: memmap2::Mmap,
}

impl Dwarf {
    /// The DWARF of `path`; of a universal file, of the slice whose
    /// LC_UUID is `uuid` (the host's architecture without one).
    pub fn open(path: &Path, uuid: Option<[u8; 16]>) -> Option<Dwarf> {
        let map = super::module::map_file(path)?;
        let fat =
            matches!(object::FileKind::parse(&*map), Ok(object::FileKind::MachOFat32 | object::FileKind::MachOFat64));
        if !fat {
            drop(map);
            return addr2line::Loader::new(path).ok().map(|l| Dwarf::File(Box::new(l)));
        }
        let slice = super::macho::image_in(&map, uuid)?;
        // SAFETY: the bytes lie in `map`, which is stored beside the
        // context and dropped after it; a mapping stays where it is when
        // the `Mmap` value moves.
        let slice: &'static [u8] = unsafe { std::slice::from_raw_parts(slice.as_ptr(), slice.len()) };
        let file = object::File::parse(slice).ok()?;
        let endian = if file.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
        let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
            // `object` finds Mach-O's `__debug_info` for `.debug_info`.
            let data = file.section_by_name(id.name()).and_then(|s| s.data().ok()).unwrap_or(&[]);
            Ok(EndianSlice::new(data, endian))
        })
        .ok()?;
        let context = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf::Slice(Slice { context, _map: map }))
    }

    /// The source file and line of `probe`.
    pub fn location(&self, probe: u64) -> Option<(String, u32)> {
        let loc = match self {
            Dwarf::File(l) => l.find_location(probe).ok(),
            Dwarf::Slice(s) => s.context.find_location(probe).ok(),
        }
        .flatten()?;
        Some((loc.file.unwrap_or("").to_string(), loc.line.unwrap_or(0)))
    }

    /// The raw name of the function containing `probe`: the outermost of
    /// its inlined frames.
    pub fn outermost_function(&self, probe: u64) -> Option<String> {
        fn last<R: gimli::Reader>(mut frames: addr2line::FrameIter<'_, R>) -> Option<String> {
            let mut name = None;
            while let Ok(Some(f)) = frames.next() {
                if let Some(n) = f.function.and_then(|n| n.raw_name().ok().map(|r| r.into_owned())) {
                    name = Some(n);
                }
            }
            name
        }
        match self {
            Dwarf::File(l) => last(l.find_frames(probe).ok()?),
            Dwarf::Slice(s) => last(s.context.find_frames(probe).skip_all_loads().ok()?),
        }
    }
}
