//! Other copies of this addon loaded in the same process (two libraries
//! that each bundle machsampler). V8 keeps one code-event handler per
//! isolate, so a copy that installed its own would silently take the slot
//! from a copy already naming that isolate's JavaScript with it, and that
//! copy's frames would go unnamed. Each copy exports which isolates it
//! holds the slot on; before installing on an isolate, a copy asks the
//! others (found among the loaded `.node` files) and leaves the slot to
//! one that holds it. First come, first served: the copy left out says so
//! in its stats for the session.
//!
//! The exported query reads atomics only, so two copies asking each other
//! at once cannot wait on each other.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The exported symbol, versioned: a copy that changes its meaning
/// exports another name.
const SYMBOL: &CStr = c"machsampler_holds_code_events_v1";

/// Isolates (`v8::Isolate*`) this copy holds the handler on; 0 is a free
/// entry. Far more than a process runs isolates at once; past that,
/// [`OVERFLOW`] answers for the rest.
static HELD: [AtomicUsize; 256] = [const { AtomicUsize::new(0) }; 256];
/// Isolates held that found no free entry.
static OVERFLOW: AtomicUsize = AtomicUsize::new(0);
/// In this session, this copy left an isolate's handler to another copy.
static LEFT: AtomicBool = AtomicBool::new(false);

/// Whether this copy holds V8's code-event handler on `isolate`: what the
/// other copies ask. Atomic loads only.
#[no_mangle]
pub extern "C" fn machsampler_holds_code_events_v1(isolate: usize) -> bool {
    isolate != 0 && (OVERFLOW.load(Ordering::Acquire) > 0 || HELD.iter().any(|h| h.load(Ordering::Acquire) == isolate))
}

/// Records that this copy now holds (or no longer holds) the handler on
/// `isolate`. Called under the code-event lifecycle lock, so one isolate
/// is never recorded twice.
pub fn set_held(isolate: usize, held: bool) {
    if held {
        if !HELD.iter().any(|h| h.compare_exchange(0, isolate, Ordering::AcqRel, Ordering::Acquire).is_ok()) {
            OVERFLOW.fetch_add(1, Ordering::AcqRel);
        }
    } else if !HELD.iter().any(|h| h.compare_exchange(isolate, 0, Ordering::AcqRel, Ordering::Acquire).is_ok()) {
        let _ = OVERFLOW.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// A session starts: nothing left to another copy yet.
pub fn reset_left() {
    LEFT.store(false, Ordering::Release);
}

/// Whether this copy left an isolate's handler to another copy in this
/// session.
pub fn left_to_another() -> bool {
    LEFT.load(Ordering::Acquire)
}

/// The path of another loaded copy that holds the handler on `isolate`,
/// if there is one; noted for [`left_to_another`]. Not for a signal
/// handler, nor under a lock the loader may need: it takes the loader's.
pub fn holder(isolate: usize) -> Option<String> {
    let ours = machsampler_holds_code_events_v1 as extern "C" fn(usize) -> bool as usize;
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
        let holds = if f.is_null() || f as usize == ours {
            false
        } else {
            // SAFETY: this versioned name is exported only by copies of
            // this addon, as the function above: `extern "C" fn(usize) ->
            // bool`, which only loads atomics.
            let holds: extern "C" fn(usize) -> bool = unsafe { std::mem::transmute(f) };
            holds(isolate)
        };
        // SAFETY: the handle from dlopen above; the object stays loaded
        // (the addon loader holds it).
        unsafe { libc::dlclose(handle) };
        if holds {
            LEFT.store(true, Ordering::Release);
            return Some(module.path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_isolates_are_answered_each_and_released() {
        let (a, b) = (0x1000, 0x2000);
        assert!(!machsampler_holds_code_events_v1(a));
        set_held(a, true);
        set_held(b, true);
        assert!(machsampler_holds_code_events_v1(a) && machsampler_holds_code_events_v1(b));
        assert!(!machsampler_holds_code_events_v1(0x3000));
        set_held(a, false);
        assert!(!machsampler_holds_code_events_v1(a) && machsampler_holds_code_events_v1(b));
        set_held(b, false);
        // More isolates than entries: the rest are answered as held until
        // released.
        let many: Vec<usize> = (1..=HELD.len() + 2).map(|i| i * 0x10).collect();
        for &i in &many {
            set_held(i, true);
        }
        assert!(machsampler_holds_code_events_v1(0x9999_0000));
        for &i in &many {
            set_held(i, false);
        }
        assert!(!machsampler_holds_code_events_v1(0x10));
        assert_eq!(OVERFLOW.load(Ordering::Acquire), 0);
        // This copy is never "another".
        set_held(a, true);
        assert_eq!(holder(a), None);
        set_held(a, false);
    }
}
