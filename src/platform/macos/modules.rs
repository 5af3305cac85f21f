//! The loaded Mach-O images, from dyld's image list.
//!
//! Each image's range spans its segments except `__PAGEZERO` and
//! `__LINKEDIT` (see `mach::macho::MachImage`); its bias is dyld's slide; its
//! build id is its LC_UUID. The load commands are read from the mapped
//! header, so no file is opened.

use super::sys::{_dyld_get_image_header, _dyld_get_image_name, _dyld_get_image_vmaddr_slide, _dyld_image_count};
use crate::platform::mach::macho::{macho_commands_len, parse_macho, MACH_HEADER_64_SIZE};
use crate::platform::Module;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One loaded image as dyld lists it.
pub struct Image<'a> {
    /// Its Mach-O header, where dyld mapped it.
    pub header: *const std::ffi::c_void,
    /// The header and load commands (`macho_commands_len` bytes).
    pub commands: &'a [u8],
    pub path: &'a std::ffi::CStr,
    /// dyld's slide: loaded address minus file address.
    pub slide: u64,
}

/// Calls `f` for every loaded image, in dyld's order (the executable
/// first). Images unloaded meanwhile, or with a header that is not a
/// 64-bit Mach-O, are left out.
pub fn for_each_image(mut f: impl FnMut(Image<'_>)) {
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
        // SAFETY: a loaded image's header is mapped read-only for as long as
        // the image is loaded; the 64-bit header is 32 bytes.
        let head = unsafe { std::slice::from_raw_parts(header as *const u8, MACH_HEADER_64_SIZE) };
        let Some(len) = macho_commands_len(head) else { continue };
        // SAFETY: the load commands follow the header inside the image's
        // first segment, which is mapped; `len` is the size the header gives.
        let commands = unsafe { std::slice::from_raw_parts(header as *const u8, len) };
        // SAFETY: dyld's image names are NUL-terminated and live as long as
        // the image.
        let path = unsafe { std::ffi::CStr::from_ptr(name) };
        f(Image { header: header.cast(), commands, path, slide: slide as u64 });
    }
}

/// Every loaded image, in dyld's order (the executable first).
pub fn loaded_modules() -> Vec<Module> {
    let mut out = Vec::new();
    for_each_image(|img| {
        let Some(image) = parse_macho(img.commands) else { return };
        out.push(Module {
            path: img.path.to_string_lossy().into_owned(),
            start: image.start.wrapping_add(img.slide),
            end: image.end.wrapping_add(img.slide),
            bias: img.slide,
            build_id: image.uuid.map(|u| hex(&u)).unwrap_or_default(),
        });
    });
    out
}
