//! dyld's image list, made from the loaded ELF objects: each becomes a
//! 64-bit Mach-O header with one `LC_SEGMENT_64` per `PT_LOAD` and, when
//! its GNU build id is 16 bytes long, an `LC_UUID` (a longer build id has
//! no Mach-O equivalent, so the image goes without, as a Mach-O without
//! `LC_UUID` does, and the Linux symbolizer still accepts the file). Tests
//! can ask for UUIDs cut from longer build ids ([`UUID_FROM_BUILD_ID`]).
//! The slide is the ELF load bias.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Give every image with a build id of 16 bytes or more an `LC_UUID` (its
/// first 16 bytes).
pub static UUID_FROM_BUILD_ID: AtomicBool = AtomicBool::new(false);

/// Test hook: one more image listed after the loaded ones, whose header
/// and name lie at this address in memory no longer mapped (an image
/// another thread unloaded between dyld's listing and the reading). 0: none.
pub static UNLOADED_AT: AtomicUsize = AtomicUsize::new(0);

struct Image {
    header: Box<[u8]>,
    name: CString,
    slide: isize,
}

/// Every image ever listed: headers and names stay valid for the life of
/// the process, as dyld's do while an image is loaded.
static IMAGES: Mutex<Vec<Image>> = Mutex::new(Vec::new());
static CURRENT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

const MH_MAGIC_64: u32 = 0xfeed_facf;
const CPU_TYPE: u32 = if cfg!(target_arch = "aarch64") { 0x0100_000c } else { 0x0100_0007 };
const LC_SEGMENT_64: u32 = 0x19;
const LC_UUID: u32 = 0x1b;

fn header_for(segments: &[(u64, u64, bool)], uuid: Option<[u8; 16]>) -> Box<[u8]> {
    let mut cmds = Vec::new();
    for &(vmaddr, vmsize, exec) in segments {
        cmds.extend_from_slice(&LC_SEGMENT_64.to_le_bytes());
        cmds.extend_from_slice(&72u32.to_le_bytes());
        let mut name = [0u8; 16];
        let n: &[u8] = if exec { b"__TEXT" } else { b"__DATA" };
        name[..n.len()].copy_from_slice(n);
        cmds.extend_from_slice(&name);
        for v in [vmaddr, vmsize, 0, 0] {
            cmds.extend_from_slice(&v.to_le_bytes());
        }
        cmds.extend_from_slice(&[0u8; 16]);
    }
    if let Some(u) = uuid {
        cmds.extend_from_slice(&LC_UUID.to_le_bytes());
        cmds.extend_from_slice(&24u32.to_le_bytes());
        cmds.extend_from_slice(&u);
    }
    let ncmds = segments.len() as u32 + uuid.is_some() as u32;
    let mut out = Vec::new();
    for w in [MH_MAGIC_64, CPU_TYPE, 0, 6, ncmds, cmds.len() as u32, 0, 0] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&cmds);
    out.into_boxed_slice()
}

/// The GNU build id in a PT_NOTE segment, if it is 16 bytes.
fn uuid_from_note(bias: u64, ph: &libc::Elf64_Phdr) -> Option<[u8; 16]> {
    // SAFETY: a loaded PT_NOTE segment is mapped and readable.
    let bytes = unsafe { std::slice::from_raw_parts((bias + ph.p_vaddr) as *const u8, ph.p_memsz as usize) };
    let mut at = 0usize;
    while at + 12 <= bytes.len() {
        let w = |i: usize| u32::from_le_bytes(bytes[at + i..at + i + 4].try_into().unwrap_or([0; 4])) as usize;
        let (namesz, descsz, kind) = (w(0), w(4), w(8));
        let desc = at + 12 + namesz.next_multiple_of(4);
        if kind == 3 && bytes.get(at + 12..at + 12 + namesz) == Some(b"GNU\0") {
            let cut = if UUID_FROM_BUILD_ID.load(Ordering::Relaxed) { 16 } else { descsz };
            return bytes.get(desc..desc + descsz)?.get(..cut)?.try_into().ok();
        }
        at = desc + descsz.next_multiple_of(4);
    }
    None
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, out: *mut c_void) -> c_int {
    // SAFETY: glibc passes a valid info for each object; `out` is ours.
    let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<Image>>()) };
    // SAFETY: dlpi_phdr has dlpi_phnum entries.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let segments: Vec<(u64, u64, bool)> = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| (p.p_vaddr, p.p_memsz, p.p_flags & libc::PF_X != 0))
        .collect();
    if segments.is_empty() {
        return 0;
    }
    let uuid = phdrs.iter().filter(|p| p.p_type == libc::PT_NOTE).find_map(|p| uuid_from_note(bias, p));
    // SAFETY: dlpi_name is NUL-terminated (empty for the executable).
    let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned();
    let name = if name.as_bytes().is_empty() {
        let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        CString::new(exe).unwrap_or_default()
    } else {
        name
    };
    out.push(Image { header: header_for(&segments, uuid), name, slide: bias as isize });
    0
}

pub unsafe fn _dyld_image_count() -> u32 {
    let mut found: Vec<Image> = Vec::new();
    // SAFETY: `each` matches the callback type and only uses `found`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut Vec<Image>).cast()) };
    let mut images = IMAGES.lock().unwrap_or_else(|e| e.into_inner());
    let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    current.clear();
    for img in found {
        let same = |i: &Image| i.name == img.name && i.slide == img.slide && i.header == img.header;
        let i = match images.iter().position(same) {
            Some(i) => i,
            None => {
                images.push(img);
                images.len() - 1
            }
        };
        current.push(i);
    }
    current.len() as u32 + (UNLOADED_AT.load(Ordering::SeqCst) != 0) as u32
}

/// The address [`UNLOADED_AT`] gives for `index`, if it is the extra one.
fn unloaded(index: u32) -> Option<usize> {
    let at = UNLOADED_AT.load(Ordering::SeqCst);
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    (at != 0 && index as usize == current.len()).then_some(at)
}

fn image<T>(index: u32, f: impl FnOnce(&Image) -> T) -> Option<T> {
    let images = IMAGES.lock().unwrap_or_else(|e| e.into_inner());
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    current.get(index as usize).and_then(|&i| images.get(i)).map(f)
}

pub unsafe fn _dyld_get_image_header(index: u32) -> *const c_void {
    if let Some(at) = unloaded(index) {
        return at as *const c_void;
    }
    image(index, |i| i.header.as_ptr().cast()).unwrap_or(std::ptr::null())
}

pub unsafe fn _dyld_get_image_name(index: u32) -> *const c_char {
    if let Some(at) = unloaded(index) {
        return (at + 64) as *const c_char;
    }
    image(index, |i| i.name.as_ptr()).unwrap_or(std::ptr::null())
}

pub unsafe fn _dyld_get_image_vmaddr_slide(index: u32) -> isize {
    image(index, |i| i.slide).unwrap_or(0)
}
