//! The process's code for the unwinder: each loaded image with its
//! `__unwind_info`, `__eh_frame` and code, read where dyld mapped them, and
//! the executable memory outside every image (JIT code).
//!
//! Each image that can be unloaded is pinned with a `dlopen(RTLD_NOLOAD)`
//! reference while the unwinder holds its bytes, so an image the program
//! unloads meanwhile stays mapped until the session ends; the executable
//! and the shared cache's images never go. Only the sampler thread runs this,
//! never a stopped window.
//!
//! Under the simulated Mach (Linux) the process's code is ELF: its
//! modules and JIT regions come from the Linux backend's reader, so the
//! Mach backend unwinds real code by its real unwind information there too.

use std::ops::Range;

use crate::sampler::unwind::CodeModule;

#[cfg(target_vendor = "apple")]
pub use apple::{jit_regions, loaded_code};
#[cfg(not(target_vendor = "apple"))]
pub use simulated::{jit_regions, loaded_code};

#[cfg(target_vendor = "apple")]
mod apple {
    use super::*;

    use std::ffi::{c_void, CStr};

    use super::super::modules::for_each_image;
    use super::super::regions;
    use super::super::sys;
    use crate::platform::mach::macho::{never_unloaded, parse_unwind_sections};
    use crate::platform::mach::unwind_image::code_module;
    use crate::sampler::unwind::{ImageBytes, ImagePin};

    /// A `dlopen` reference to a loaded image.
    struct DlPin(usize);

    impl ImagePin for DlPin {}

    impl Drop for DlPin {
        fn drop(&mut self) {
            // SAFETY: the handle came from a successful dlopen and is closed once.
            unsafe { libc::dlclose(self.0 as *mut c_void) };
        }
    }

    /// Pins the image `name` whose header is at `header`, if that image is
    /// still loaded there.
    fn pin(name: &CStr, header: *const c_void) -> Option<Box<dyn ImagePin>> {
        // SAFETY: RTLD_NOLOAD only takes a reference on an image already loaded.
        let handle = unsafe { sys::dlopen(name.as_ptr(), sys::RTLD_NOW | sys::RTLD_NOLOAD) };
        if handle.is_null() {
            return None;
        }
        let pin = DlPin(handle as usize);
        // SAFETY: plain data; all-zero is valid.
        let mut info: sys::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer; dladdr only reads dyld's tables.
        let found = unsafe { sys::dladdr(header, &mut info) } != 0;
        // SAFETY: dyld's NUL-terminated path for the image, checked non-null.
        let same = found
            && std::ptr::eq(info.dli_fbase as *const c_void, header)
            && !info.dli_fname.is_null()
            && unsafe { CStr::from_ptr(info.dli_fname) } == name;
        same.then(|| Box::new(pin) as Box<dyn ImagePin>)
    }

    /// Every loaded image whose `__TEXT` does not start where `known` says
    /// a module already does, ready for the unwinder. An image that cannot
    /// be pinned keeps its place (its code is still code) but no sections.
    pub fn loaded_code(known: impl Fn(u64) -> bool) -> Vec<CodeModule> {
        let mut out = Vec::new();
        // An image's header starts its `__TEXT`: a known image is skipped
        // before anything of it is read.
        for_each_image(&known, |img| {
            // Pinned before its sections are read (its commands are a copy).
            let pinned = pin(img.path, img.header);
            let Some(sections) = parse_unwind_sections(img.commands) else { return };
            let slide = img.slide;
            let Some(start) = sections.text_segment.as_ref().map(|t| t.start.wrapping_add(slide)) else { return };
            if known(start) {
                return;
            }
            // The executable and the shared cache's images stay mapped for
            // the life of the process; others stay pinned while held.
            let permanent = never_unloaded(img.commands);
            let pinned = if permanent { None } else { pinned };
            let readable = permanent || pinned.is_some();
            let bytes = |r: Range<u64>| -> Option<ImageBytes> {
                let (start, len) = (r.start.checked_add(slide)?, r.end.checked_sub(r.start)?);
                // SAFETY: a range inside `__TEXT` (see `code_module`) of an
                // image that is never unloaded or that `pinned` keeps
                // loaded, where dyld mapped it: readable while the module
                // holds the pin.
                readable.then(|| unsafe { std::slice::from_raw_parts(start as *const u8, len as usize) })
            };
            let name = img.path.to_string_lossy().into_owned();
            out.extend(code_module(name, &sections, slide, bytes, pinned));
        });
        out
    }

    /// Executable regions that overlap no module (JIT code). The dyld
    /// shared cache is one region at this level (a submap) that holds many
    /// modules: it is not JIT code.
    pub fn jit_regions(overlaps_module: impl Fn(Range<u64>) -> bool) -> Vec<Range<u64>> {
        regions::list(0, u64::MAX)
            .into_iter()
            .filter(|r| r.executable && !overlaps_module(r.start..r.end))
            .map(|r| r.start..r.end)
            .collect()
    }
}

#[cfg(not(target_vendor = "apple"))]
mod simulated {
    use super::*;

    pub fn loaded_code(known: impl Fn(u64) -> bool) -> Vec<CodeModule> {
        crate::platform::linux::code::loaded_code(known)
    }

    pub fn jit_regions(overlaps_module: impl Fn(Range<u64>) -> bool) -> Vec<Range<u64>> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        crate::platform::linux::code::jit_regions(&maps, overlaps_module)
    }
}
