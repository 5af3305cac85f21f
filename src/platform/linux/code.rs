//! The process's code for the unwinder: every loaded ELF object with its
//! `.eh_frame` (found through `PT_GNU_EH_FRAME`, read where it is mapped),
//! and the executable memory that belongs to no object (JIT code).
//!
//! Each shared object is pinned with a `dlopen(RTLD_NOLOAD)` reference for
//! as long as the unwinder holds its bytes, so an object the program
//! unloads meanwhile stays mapped until the session ends. Only the
//! sampler thread runs this, never a stopped window.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ops::Range;

use framehop::ExplicitModuleSectionInfo;

use crate::sampler::unwind::{CodeModule, ImageBytes, ImagePin};

/// A `dlopen` reference to a loaded object.
struct DlPin(usize);

impl ImagePin for DlPin {}

impl Drop for DlPin {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful dlopen and is closed once.
        unsafe { libc::dlclose(self.0 as *mut c_void) };
    }
}

/// What `dl_iterate_phdr` tells about one object.
struct Found {
    name: String,
    bias: u64,
    text: Range<u64>,
    sections: ExplicitModuleSectionInfo<ImageBytes>,
}

/// Reads a `DW_EH_PE`-encoded pointer at `p`: the encodings
/// `.eh_frame_hdr` uses for its `eh_frame_ptr` in practice.
///
/// # Safety
/// `p` must point to at least 8 readable bytes.
unsafe fn read_encoded(p: u64, encoding: u8) -> Option<u64> {
    // SAFETY: per the contract the bytes are readable; unaligned reads.
    let raw = unsafe {
        match encoding & 0x0f {
            0x00 | 0x04 => (p as *const u64).read_unaligned(),
            0x03 => (p as *const u32).read_unaligned() as u64,
            0x0b => (p as *const i32).read_unaligned() as i64 as u64,
            0x0c => (p as *const i64).read_unaligned() as u64,
            _ => return None,
        }
    };
    match encoding & 0x70 {
        0x00 => Some(raw),
        0x10 => Some(p.wrapping_add(raw)),
        _ => None,
    }
}

unsafe extern "C" fn on_object(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the
    // call, and `data` is the Vec passed by `loaded`.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Found>)) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    let bias = info.dlpi_addr;
    // SAFETY: the loader's program headers for this object, dlpi_phnum of them.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let exec = phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0);
    let lo = exec.clone().map(|p| bias.wrapping_add(p.p_vaddr)).min();
    let hi = exec.map(|p| bias.wrapping_add(p.p_vaddr).wrapping_add(p.p_memsz)).max();
    let (Some(lo), Some(hi)) = (lo, hi) else { return 0 };
    let mut sections = ExplicitModuleSectionInfo { base_svma: 0, ..Default::default() };
    if let Some(h) = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME && p.p_memsz >= 12) {
        let hdr_avma = bias.wrapping_add(h.p_vaddr);
        // SAFETY: PT_GNU_EH_FRAME lies inside a loaded segment: p_memsz
        // mapped, readable bytes.
        let hdr: ImageBytes = unsafe { std::slice::from_raw_parts(hdr_avma as *const u8, h.p_memsz as usize) };
        // version 1, then the encodings, then eh_frame_ptr.
        // SAFETY: p_memsz >= 12, so bytes 4..12 (enough for any eh_frame_ptr
        // encoding) are readable.
        let frame = if hdr[0] == 1 { unsafe { read_encoded(hdr_avma + 4, hdr[1]) } } else { None };
        // .eh_frame's size is in no program header: it runs to the end of
        // the file-backed part of its segment (mapped and readable); with
        // the hdr table only the entries it points at are parsed.
        let segment = frame.and_then(|f| {
            phdrs.iter().find(|p| {
                let start = bias.wrapping_add(p.p_vaddr);
                p.p_type == libc::PT_LOAD && f >= start && f < start.wrapping_add(p.p_filesz)
            })
        });
        if let (Some(frame_avma), Some(seg)) = (frame, segment) {
            let end = bias.wrapping_add(seg.p_vaddr).wrapping_add(seg.p_filesz);
            // SAFETY: [frame_avma, end) is inside the file-backed part of a
            // loaded segment, mapped for the object's lifetime.
            let frame: ImageBytes =
                unsafe { std::slice::from_raw_parts(frame_avma as *const u8, (end - frame_avma) as usize) };
            let frame_svma = frame_avma.wrapping_sub(bias);
            sections.eh_frame_hdr_svma = Some(h.p_vaddr..h.p_vaddr + h.p_memsz);
            sections.eh_frame_hdr = Some(hdr);
            sections.eh_frame_svma = Some(frame_svma..frame_svma + frame.len() as u64);
            sections.eh_frame = Some(frame);
        }
    }
    out.push(Found { name, bias, text: lo..hi, sections });
    0
}

/// The load bias of the object behind a dlopen handle.
fn handle_bias(handle: *mut c_void) -> Option<u64> {
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP stores a `struct link_map *` in `map`.
    let rc = unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, &mut map as *mut _ as *mut c_void) };
    if rc != 0 || map.is_null() {
        return None;
    }
    // SAFETY: `l_addr`, the load bias, is the first field of glibc's
    // `struct link_map`, which the loader keeps while the object is open.
    Some(unsafe { *(map as *const u64) })
}

/// Pins the object named `name` loaded at `bias`, if it is still that one.
fn pin(name: &str, bias: u64) -> Option<Box<dyn ImagePin>> {
    let c = CString::new(name).ok()?;
    // SAFETY: RTLD_NOLOAD only takes a reference on an object already loaded.
    let handle = unsafe { libc::dlopen(c.as_ptr() as *const c_char, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let pin = DlPin(handle as usize);
    (handle_bias(handle) == Some(bias)).then(|| Box::new(pin) as Box<dyn ImagePin>)
}

/// Every loaded object not yet in `known` (by text start), ready for the
/// unwinder. An object that cannot be pinned keeps its place (its code is
/// still code) but no unwind sections.
pub fn loaded_code(known: impl Fn(u64) -> bool) -> Vec<CodeModule> {
    let mut found: Vec<Found> = Vec::new();
    // SAFETY: the callback only reads the loader's data and appends to `found`.
    unsafe { libc::dl_iterate_phdr(Some(on_object), &mut found as *mut Vec<Found> as *mut c_void) };
    let mut out = Vec::new();
    for f in found {
        if known(f.text.start) {
            continue;
        }
        // The executable and the vDSO are never unloaded.
        let permanent = f.name.is_empty() || f.name.starts_with("linux-vdso") || f.name.starts_with("linux-gate");
        let (sections, pin) = if permanent {
            (f.sections, None)
        } else {
            match pin(&f.name, f.bias) {
                Some(p) => (f.sections, Some(p)),
                None => (ExplicitModuleSectionInfo { base_svma: 0, ..Default::default() }, None),
            }
        };
        out.push(CodeModule { name: f.name, text: f.text, base_avma: f.bias, sections, pin });
    }
    out
}

/// Executable mappings of `/proc/self/maps` that overlap no object: JIT
/// code (V8's code space, WebAssembly, trampolines).
pub fn jit_regions(maps: &str, overlaps_object: impl Fn(Range<u64>) -> bool) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        if perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else { continue };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
        if !overlaps_object(lo..hi) {
            out.push(lo..hi);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_process_objects_with_their_eh_frame() {
        let code = loaded_code(|_| false);
        assert!(code.len() >= 3, "{code:?}");
        let libc_obj = code.iter().find(|m| m.name.contains("libc.so")).expect("libc");
        assert!(libc_obj.sections.eh_frame_hdr.is_some() && libc_obj.sections.eh_frame.is_some());
        assert!(libc_obj.pin.is_some(), "libc is pinned while held");
        let this = code
            .iter()
            .find(|m| m.text.contains(&(finds_this_process_objects_with_their_eh_frame as *const () as u64)));
        assert!(this.is_some(), "the test binary's own code");
        // Already known objects are skipped.
        let starts: Vec<u64> = code.iter().map(|m| m.text.start).collect();
        assert!(loaded_code(|s| starts.contains(&s)).is_empty());
    }

    #[test]
    fn jit_regions_are_executable_mappings_of_no_object() {
        let maps = "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n\
                    7f0000000000-7f0000010000 rwxp 00000000 00:00 0\n\
                    7f0000010000-7f0000020000 rw-p 00000000 00:00 0\n\
                    7f0000020000-7f0000030000 r-xp 00000000 00:00 0 \n";
        let r = jit_regions(maps, |r| r.contains(&0x400000));
        assert_eq!(r, vec![0x7f0000000000..0x7f0000010000, 0x7f0000020000..0x7f0000030000]);
    }

    /// macOS lists the dyld shared cache as one executable region around
    /// its images: a region holding a module is no JIT code, nor is one
    /// inside a module; one that ends where a module starts is.
    #[test]
    fn a_region_that_overlaps_a_module_is_not_jit_code() {
        use crate::sampler::unwind::{CodeModule, Unwinder};
        let mut u = Unwinder::default();
        u.add_module(CodeModule {
            name: "image".into(),
            text: 0x7f0000400000..0x7f0000410000,
            base_avma: 0x7f0000400000,
            sections: Default::default(),
            pin: None,
        });
        let maps = "7f0000100000-7f0000900000 r-xp 00000000 00:00 0\n\
                    7f0000404000-7f0000405000 r-xp 00000000 00:00 0\n\
                    7f00003f0000-7f0000400000 r-xp 00000000 00:00 0\n\
                    7f0000410000-7f0000420000 r-xp 00000000 00:00 0\n";
        let r = jit_regions(maps, |r| u.has_module_in(r));
        assert_eq!(r, vec![0x7f00003f0000..0x7f0000400000, 0x7f0000410000..0x7f0000420000]);
    }
}
