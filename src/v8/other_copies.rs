//! Other copies of this addon loaded in the same process (two libraries
//! that each bundle machsampler). V8 keeps one code-event handler per
//! isolate, so a copy that installed its own would silently take the slot
//! from a copy already naming JavaScript with it, and that copy's frames
//! would go unnamed. Each copy exports how many isolates it holds the slot
//! on; before installing, a copy looks for the others among the loaded
//! `.node` files and leaves the slot to one that holds it. First come,
//! first served: the copy left out says so in its stats.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The exported symbol, versioned: a later copy that changes its meaning
/// exports another name.
const SYMBOL: &CStr = c"machsampler_code_event_slots_v1";

/// Isolates on which this copy holds the code-event handler.
static HELD: AtomicU64 = AtomicU64::new(0);
/// This copy left the handler to another copy at least once.
static LEFT: AtomicBool = AtomicBool::new(false);

/// How many isolates this copy holds V8's code-event handler on; what the
/// other copies read.
#[no_mangle]
pub extern "C" fn machsampler_code_event_slots_v1() -> u64 {
    HELD.load(Ordering::Acquire)
}

/// Records how many isolates this copy now holds the handler on.
pub fn set_held(isolates: usize) {
    HELD.store(isolates as u64, Ordering::Release);
}

/// Whether this copy ever left the handler to another copy.
pub fn left_to_another() -> bool {
    LEFT.load(Ordering::Acquire)
}

/// The path of another loaded copy that holds the handler on some isolate,
/// if there is one; noted for [`left_to_another`]. Not for a signal
/// handler: it takes the loader's lock.
pub fn holder() -> Option<String> {
    let ours = machsampler_code_event_slots_v1 as extern "C" fn() -> u64 as usize;
    for module in crate::platform::loaded_modules() {
        if !module.path.ends_with(".node") {
            continue;
        }
        let Ok(path) = CString::new(module.path.as_str()) else { continue };
        // SAFETY: RTLD_NOLOAD returns a handle to an object already loaded
        // (counting one more reference to it) and never loads one.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: `handle` is valid until the dlclose below; a lookup
        // through it finds that object's own definition first.
        let f = unsafe { libc::dlsym(handle, SYMBOL.as_ptr()) };
        let held = if f.is_null() || f as usize == ours {
            0
        } else {
            // SAFETY: a copy of this addon exports this name as the
            // function above, `extern "C" fn() -> u64`, which only loads
            // an atomic.
            let count: extern "C" fn() -> u64 = unsafe { std::mem::transmute(f) };
            count()
        };
        // SAFETY: the handle from dlopen above; the object stays loaded
        // (the addon loader holds it).
        unsafe { libc::dlclose(handle) };
        if held > 0 {
            LEFT.store(true, Ordering::Release);
            return Some(module.path);
        }
    }
    None
}
