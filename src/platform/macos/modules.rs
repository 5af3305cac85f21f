//! The loaded Mach-O images, from dyld's image list.
//!
//! Each image's range spans its segments except `__PAGEZERO` and
//! `__LINKEDIT` (see `mach::macho::MachImage`); its bias is dyld's slide; its
//! build id is its LC_UUID. The load commands are read from the mapped
//! header, so no file is opened. An image other than dyld may be unloaded
//! by another thread at any moment (a worker's addon, at the worker's
//! exit), so its header, commands and name are copied with the kernel's
//! checked read: memory unmapped meanwhile fails the copy, and the image
//! is left out, instead of faulting.

use super::sys::{
    _dyld_get_image_header, _dyld_get_image_name, _dyld_get_image_vmaddr_slide, _dyld_image_count,
    mach_msg_type_number_t, mach_task_self, mach_vm_read_overwrite, task_dyld_info, task_info, KERN_SUCCESS,
    TASK_DYLD_INFO, TASK_DYLD_INFO_COUNT,
};
use crate::platform::mach::macho::{macho_commands_len, parse_macho, MACH_HEADER_64_SIZE};
use crate::platform::Module;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One loaded image as dyld lists it.
pub struct Image<'a> {
    /// Its Mach-O header, where dyld mapped it.
    pub header: *const std::ffi::c_void,
    /// A copy of the header and load commands (`macho_commands_len` bytes).
    pub commands: &'a [u8],
    pub path: &'a std::ffi::CStr,
    /// dyld's slide: loaded address minus file address.
    pub slide: u64,
}

/// Where `dyld_all_image_infos` (version 2 and later) keeps dyld's own
/// load address, on 64-bit: after version, count, two pointers and two
/// bools, aligned.
const DYLD_LOAD_ADDRESS_AT: usize = 32;

/// dyld's own Mach-O header: dyld does not list itself among the images,
/// yet the main thread starts in it (`start`) and `dlopen` runs in it.
fn dyld_header() -> Option<*const u8> {
    let mut info = task_dyld_info::default();
    let mut count: mach_msg_type_number_t = TASK_DYLD_INFO_COUNT;
    // SAFETY: `info` has room for TASK_DYLD_INFO_COUNT words.
    let kr =
        unsafe { task_info(mach_task_self(), TASK_DYLD_INFO, (&mut info as *mut task_dyld_info).cast(), &mut count) };
    let (addr, size) = (info.all_image_info_addr, info.all_image_info_size);
    if kr != KERN_SUCCESS || addr == 0 || size < (DYLD_LOAD_ADDRESS_AT + 8) as u64 {
        return None;
    }
    // SAFETY: dyld's `dyld_all_image_infos` is mapped for the life of the
    // process, and at least `size` bytes long (checked above).
    let (version, load) = unsafe {
        let p = addr as *const u8;
        ((p as *const u32).read_unaligned(), (p.add(DYLD_LOAD_ADDRESS_AT) as *const u64).read_unaligned())
    };
    (version >= 2 && load != 0).then_some(load as *const u8)
}

/// dyld's slide: where its header is mapped minus where its lowest segment
/// (`__TEXT`, holding the header) asks to be.
pub(crate) fn slide_of_header_at(load_address: u64, commands: &[u8]) -> Option<u64> {
    Some(load_address.wrapping_sub(parse_macho(commands)?.start))
}

/// Fills `out` from `addr` with the kernel's checked read; false if any of
/// it is not mapped readable.
fn read_checked(addr: u64, out: &mut [u8]) -> bool {
    let mut got = 0u64;
    // SAFETY: the kernel writes at most `out.len()` bytes into `out` and
    // checks every source page; nothing is read directly.
    let kr =
        unsafe { mach_vm_read_overwrite(mach_task_self(), addr, out.len() as u64, out.as_mut_ptr() as u64, &mut got) };
    kr == KERN_SUCCESS && got == out.len() as u64
}

/// The NUL-terminated string at `addr` (up to 4 KiB) into `out`, with its
/// NUL; read a page at a time, as its end may lie on the last readable one.
fn read_c_string(addr: u64, out: &mut Vec<u8>) -> bool {
    const PAGE: u64 = 4096;
    out.clear();
    let mut at = addr;
    while out.len() < PAGE as usize {
        let start = out.len();
        out.resize(start + (PAGE - at % PAGE) as usize, 0);
        if !read_checked(at, &mut out[start..]) {
            return false;
        }
        if let Some(nul) = out[start..].iter().position(|&b| b == 0) {
            out.truncate(start + nul + 1);
            return true;
        }
        at = at.next_multiple_of(PAGE);
    }
    false
}

/// The header and load commands at `header`, copied into `out`.
fn read_commands(header: u64, out: &mut Vec<u8>) -> bool {
    let mut head = [0u8; MACH_HEADER_64_SIZE];
    let Some(len) = read_checked(header, &mut head).then(|| macho_commands_len(&head)).flatten() else {
        return false;
    };
    out.clear();
    out.resize(len, 0);
    read_checked(header, out)
}

/// Calls `f` for every loaded image, in dyld's order (the executable
/// first), then dyld itself, except those whose header address `skip`
/// takes (known ones: nothing of them is read). Images unloaded meanwhile,
/// or with a header that is not a 64-bit Mach-O, are left out.
pub fn for_each_image(skip: impl Fn(u64) -> bool, mut f: impl FnMut(Image<'_>)) {
    let dyld = dyld_header();
    let mut dyld_listed = false;
    let (mut commands, mut path) = (Vec::new(), Vec::new());
    // SAFETY: reads dyld's image count.
    let count = unsafe { _dyld_image_count() };
    for i in 0..count {
        // SAFETY: dyld returns null for an index that is no longer valid
        // (an image unloaded meanwhile); both are checked below.
        let (header, name, slide) =
            unsafe { (_dyld_get_image_header(i), _dyld_get_image_name(i), _dyld_get_image_vmaddr_slide(i)) };
        if header.is_null() || name.is_null() {
            continue;
        }
        dyld_listed |= dyld == Some(header as *const u8);
        if skip(header as u64) {
            continue;
        }
        if !read_commands(header as u64, &mut commands) || !read_c_string(name as u64, &mut path) {
            continue;
        }
        let Ok(path) = std::ffi::CStr::from_bytes_with_nul(&path) else { continue };
        f(Image { header: header.cast(), commands: &commands, path, slide: slide as u64 });
    }
    let Some(header) = dyld.filter(|&h| !dyld_listed && !skip(h as u64)) else { return };
    if !read_commands(header as u64, &mut commands) {
        return;
    }
    let Some(slide) = slide_of_header_at(header as u64, &commands) else { return };
    f(Image { header: header.cast(), commands: &commands, path: c"/usr/lib/dyld", slide });
}

/// Every loaded image, in dyld's order (the executable first).
pub fn loaded_modules() -> Vec<Module> {
    let mut out = Vec::new();
    for_each_image(
        |_| false,
        |img| {
            let Some(image) = parse_macho(img.commands) else { return };
            out.push(Module {
                path: img.path.to_string_lossy().into_owned(),
                start: image.start.wrapping_add(img.slide),
                end: image.end.wrapping_add(img.slide),
                bias: img.slide,
                build_id: image.uuid.map(|u| hex(&u)).unwrap_or_default(),
            });
        },
    );
    out
}
