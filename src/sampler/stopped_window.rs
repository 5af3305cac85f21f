//! The stopped window, and the check that nothing allocates inside it.
//!
//! While a sampled thread is stopped (inside our Linux signal handler, or
//! between `thread_suspend` and `thread_resume` on macOS), it may hold the
//! malloc lock or any other lock. Code that runs in that window must not
//! allocate. This module makes that checkable: code in the window holds a
//! [`StoppedWindow`], and [`CheckedAlloc`], the addon's global allocator,
//! aborts the process with a message if the thread holding a window
//! allocates. The check costs one relaxed load per allocation unless it is
//! enabled (`MACHSAMPLER_ALLOC_CHECK=1`, or `set_enabled` in tests).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
const OWNER_SLOTS: usize = 64;
static OWNERS: [AtomicU64; OWNER_SLOTS] = [const { AtomicU64::new(0) }; OWNER_SLOTS];
/// Fault injection (test builds only): allocate inside the window, to prove
/// the check fires.
#[cfg(any(test, feature = "testing"))]
static INJECT_ALLOCATION: AtomicBool = AtomicBool::new(false);

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::SeqCst);
}

pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

#[cfg(any(test, feature = "testing"))]
pub fn set_inject_allocation(on: bool) {
    INJECT_ALLOCATION.store(on, Ordering::SeqCst);
}

/// Reads `MACHSAMPLER_ALLOC_CHECK=1` (turn the check on) once per
/// `start()`, outside any window. Test builds also read
/// `MACHSAMPLER_FAULT_INJECTION=alloc-in-window` (allocate inside the
/// window, so a test can prove the check fires).
pub fn enable_from_env() {
    if std::env::var_os("MACHSAMPLER_ALLOC_CHECK").is_some_and(|v| v == "1") {
        set_enabled(true);
    }
    #[cfg(any(test, feature = "testing"))]
    if std::env::var_os("MACHSAMPLER_FAULT_INJECTION").is_some_and(|v| v == "alloc-in-window") {
        set_inject_allocation(true);
    }
}

/// Marks the calling thread as inside the stopped window until dropped.
pub struct StoppedWindow {
    slot: Option<usize>,
}

impl StoppedWindow {
    /// Async-signal-safe: atomics and one raw syscall, and only when the
    /// check is enabled.
    #[inline]
    pub fn enter() -> StoppedWindow {
        if !ENABLED.load(Ordering::Relaxed) {
            return StoppedWindow { slot: None };
        }
        let tid = super::thread_id::current();
        for (i, owner) in OWNERS.iter().enumerate() {
            if owner.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
                ACTIVE.fetch_add(1, Ordering::SeqCst);
                return StoppedWindow { slot: Some(i) };
            }
        }
        // More than OWNER_SLOTS windows at once: this one goes unchecked.
        StoppedWindow { slot: None }
    }

    /// Where the sampler would do work in the window; allocates only when
    /// fault injection is on, so tests can show that the check catches it.
    #[inline]
    pub fn fault_injection_point(&self) {
        #[cfg(any(test, feature = "testing"))]
        if INJECT_ALLOCATION.load(Ordering::Relaxed) {
            let b = Box::new(0u64);
            std::hint::black_box(b);
        }
    }
}

impl Drop for StoppedWindow {
    #[inline]
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            if let Some(owner) = OWNERS.get(i) {
                owner.store(0, Ordering::SeqCst);
            }
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// True if the calling thread holds a `StoppedWindow`.
pub fn in_stopped_window() -> bool {
    if ACTIVE.load(Ordering::SeqCst) == 0 {
        return false;
    }
    let tid = super::thread_id::current();
    OWNERS.iter().any(|o| o.load(Ordering::SeqCst) == tid)
}

/// The global allocator: the system allocator, plus the window check.
pub struct CheckedAlloc;

#[cold]
fn allocation_in_window() -> ! {
    let msg = b"machsampler: FATAL: heap allocation while a sampled thread is stopped\n";
    // SAFETY: writing a static buffer to stderr and aborting are both
    // async-signal-safe and need no allocation.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort();
    }
}

#[inline]
fn check() {
    if ENABLED.load(Ordering::Relaxed) && in_stopped_window() {
        allocation_in_window();
    }
}

// SAFETY: every method forwards to `System` with the same arguments, so the
// GlobalAlloc contract is upheld by `System`; the added check only reads
// atomics and may abort.
unsafe impl GlobalAlloc for CheckedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        check();
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn window_is_per_thread() {
        set_enabled(true);
        assert!(!in_stopped_window());
        let (to_main, from_worker) = mpsc::channel();
        let (to_worker, from_main) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let w = StoppedWindow::enter();
            let inside = in_stopped_window();
            // Sending on a channel may allocate, so leave the window first.
            drop(w);
            to_main.send(inside).unwrap();
            from_main.recv().unwrap();
        });
        assert!(from_worker.recv().unwrap(), "the worker saw itself inside");
        assert!(!in_stopped_window(), "the main thread is not inside");
        to_worker.send(()).unwrap();
        worker.join().unwrap();
    }

    /// Runs in a child process: allocates inside the window, which must abort.
    #[test]
    fn child_allocates_in_window() {
        if std::env::var_os("MACHSAMPLER_TEST_CHILD").is_none() {
            return;
        }
        set_enabled(true);
        set_inject_allocation(true);
        let w = StoppedWindow::enter();
        w.fault_injection_point();
        drop(w);
        // Reaching here means the check did not fire.
        std::process::exit(0);
    }

    #[test]
    fn allocation_in_window_aborts() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "sampler::stopped_window::tests::child_allocates_in_window",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MACHSAMPLER_TEST_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("heap allocation while a sampled thread is stopped"));
    }
}
