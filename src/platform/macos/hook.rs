//! Process-wide thread tracking: the pthread introspection hook and the
//! thread table it feeds, independent of any session.
//!
//! Guarantees: installed once, never uninstalled, every event forwarded to
//! the hook installed before it; each tracked thread's `handle` is a send
//! right the table owns (never libpthread's name, which can be reused);
//! inside the hook nothing allocates, sends a MIG message, touches
//! thread-local state or takes a lock other than the table's spin lock.
//! Why: `docs/design/mach-thread-tracking.md`.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

use super::sys::{
    self, mach_port_t, mach_thread_self, pthread_introspection_hook_install as hook_install, pthread_t, size_t,
    IntrospectionHook, MACH_PORT_NULL,
};
use super::threads::deallocate;
use crate::platform::mach::exit_log::ExitLog;
use crate::platform::mach::hook_event::{apply_hook_event, stack_bounds_from_top, HookEvent, HookOutcome};
use crate::platform::mach::port_queue::{release_right, PortQueue, Release};
use crate::platform::mach::thread_table::ThreadTable;
use crate::sampler::registry::{ThreadEntry, ThreadName};

/// Slots the hook can fill between two refreshes without the registry
/// having to grow; the sampler restores this much headroom every refresh.
pub const HOOK_HEADROOM: usize = 64;
const INITIAL_CAPACITY: usize = 256;

static REGISTRY: OnceLock<ThreadTable> = OnceLock::new();
static INSTALL: Once = Once::new();
static ENABLED: AtomicBool = AtomicBool::new(true);
/// The pid the hook was installed in. A child forked (without exec) from a
/// process that had threads inherits our state, but not the threads or the
/// port names, and possibly a registry mutex some other thread held at the
/// fork; the hook leaves the registry alone there.
static PID: AtomicI32 = AtomicI32::new(0);

/// The hook that was installed before ours. `PREVIOUS_UNKNOWN` until
/// `hook_install` has returned it.
static PREVIOUS: AtomicUsize = AtomicUsize::new(PREVIOUS_UNKNOWN);
const PREVIOUS_UNKNOWN: usize = 1;

/// Threads that reached THREAD_TERMINATE, for the sampler's in-window check.
pub static EXITS: ExitLog = ExitLog::new();
/// Rights waiting for the running sampler to release them.
pub static RELEASES: PortQueue = PortQueue::new();
/// True while a sampler thread runs (from `prepare_sampler_thread` until its
/// backend is dropped).
pub static SAMPLER_ACTIVE: AtomicBool = AtomicBool::new(false);
/// Rights kept because the release queue was full (diagnostics).
pub static LEAKED_RIGHTS: AtomicU64 = AtomicU64::new(0);
/// Serialises `task_threads` rescans between backends.
pub static RESCAN: Mutex<()> = Mutex::new(());

/// The process-wide registry the hook feeds.
pub fn registry() -> &'static ThreadTable {
    REGISTRY.get_or_init(|| ThreadTable::with_capacity(INITIAL_CAPACITY))
}

/// Appends every port right the backend holds: one per tracked thread, and
/// those queued for the sampler to release.
pub fn owned_rights(out: &mut Vec<u32>) {
    let mut entries = Vec::new();
    registry().snapshot(&mut entries);
    out.extend(entries.iter().map(|e| e.handle as u32));
    RELEASES.for_each(|p| out.push(p));
}

/// Releases a right the registry no longer needs, deferring to the running
/// sampler if there is one (see [`PortQueue`]).
pub fn release(port: u32) {
    match release_right(port, SAMPLER_ACTIVE.load(Ordering::SeqCst), &RELEASES) {
        Release::Now(p) => deallocate(p),
        Release::Deferred => {}
        Release::Leak(_) => {
            LEAKED_RIGHTS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installs the hook, once per process. The registry exists before the hook
/// does, so no event finds it missing.
pub fn ensure_installed() {
    INSTALL.call_once(|| {
        let _ = registry();
        // SAFETY: getpid has no preconditions.
        PID.store(unsafe { sys::getpid() }, Ordering::SeqCst);
        warm_up();
        pin_library();
        // SAFETY: `introspection_hook` has the signature libpthread calls and
        // stays valid for the life of the process (the library is pinned).
        let previous = unsafe { hook_install(introspection_hook) };
        PREVIOUS.store(previous.map_or(0, |f| f as usize), Ordering::Release);
    });
}

/// True in a child forked from the process that installed the hook.
pub fn in_forked_child() -> bool {
    let installed = PID.load(Ordering::SeqCst);
    // SAFETY: getpid has no preconditions.
    installed != 0 && installed != unsafe { sys::getpid() }
}

/// Stops tracking threads. The hook stays installed and keeps forwarding
/// every event to the previous hook. One-way: the registry stops being
/// maintained, so only call this when the process is shutting down.
pub fn make_inert() {
    ENABLED.store(false, Ordering::SeqCst);
}

/// Calls, once, every function the hook and the stopped window use. The
/// built addons bind all of them at load (see the `macos` module docs);
/// in a build linked with lazy binding, this resolves them now rather than
/// in dyld's binder (which takes a lock) inside the hook or while a thread
/// is suspended.
fn warm_up() {
    // SAFETY: each call is made on the calling thread with valid arguments;
    // the right from mach_thread_self is released at once.
    unsafe {
        let me = sys::pthread_self();
        let mut tid = 0u64;
        sys::pthread_threadid_np(0, &mut tid);
        let _ = sys::pthread_get_stackaddr_np(me);
        let _ = sys::pthread_get_stacksize_np(me);
        let _ = sys::pthread_mach_thread_np(me);
        deallocate(mach_thread_self());
    }
    super::threads::warm_up();
}

/// Keeps this library mapped for the life of the process: the hook stays
/// installed forever, so its code must never be unmapped, even if whatever
/// loaded the addon unloads it.
fn pin_library() {
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: sys::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads dyld's tables for this address.
    let found = unsafe { sys::dladdr(introspection_hook as *const c_void, &mut info) };
    if found != 0 && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is a NUL-terminated path owned by dyld.
        // RTLD_NOLOAD only finds the already-loaded image and RTLD_NODELETE
        // marks it never to be unloaded; the handle is leaked on purpose.
        unsafe { sys::dlopen(info.dli_fname, sys::RTLD_NOW | sys::RTLD_NOLOAD | sys::RTLD_NODELETE) };
    }
}

unsafe extern "C" fn introspection_hook(event: c_uint, thread: pthread_t, addr: *mut c_void, size: size_t) {
    if ENABLED.load(Ordering::Relaxed) && !in_forked_child() {
        match event {
            sys::PTHREAD_INTROSPECTION_THREAD_START => on_start(thread),
            sys::PTHREAD_INTROSPECTION_THREAD_TERMINATE => on_terminate(thread),
            _ => {}
        }
    }
    // Between our installation and `PREVIOUS` being stored, the previous
    // hook is not known yet; wait (microseconds, once per process) rather
    // than drop an event another tool (a sanitizer, Instruments) relies on.
    let mut previous = PREVIOUS.load(Ordering::Acquire);
    while previous == PREVIOUS_UNKNOWN {
        std::thread::yield_now();
        previous = PREVIOUS.load(Ordering::Acquire);
    }
    if previous != 0 {
        // SAFETY: PREVIOUS holds 0, the sentinel (handled above) or a
        // non-null `IntrospectionHook` returned by `hook_install`.
        let previous: IntrospectionHook = unsafe { std::mem::transmute::<usize, IntrospectionHook>(previous) };
        // SAFETY: forwarding libpthread's own arguments to the hook that was
        // installed before ours, as its contract expects.
        unsafe { previous(event, thread, addr, size) };
    }
}

/// THREAD_START: sent on the new thread itself, before its start routine.
fn on_start(thread: pthread_t) {
    let Some(reg) = REGISTRY.get() else { return };
    let mut tid = 0u64;
    // SAFETY: a null thread means the calling thread; libpthread then reads
    // its own struct without taking its list lock.
    unsafe { sys::pthread_threadid_np(0, &mut tid) };
    // SAFETY: a trap with no arguments; it returns a send right we own.
    let port: mach_port_t = unsafe { mach_thread_self() };
    if port == MACH_PORT_NULL {
        return;
    }
    if tid == 0 {
        // Not identifiable here; a rescan will find it.
        deallocate(port);
        return;
    }
    // SAFETY: `thread` is the calling thread (START is sent from the new
    // thread), for which these read its own struct without locking.
    let (top, size) = unsafe { (sys::pthread_get_stackaddr_np(thread) as u64, sys::pthread_get_stacksize_np(thread)) };
    let entry = ThreadEntry::new(tid, port as u64, ThreadName::EMPTY, stack_bounds_from_top(top, size as u64));
    let outcome = apply_hook_event(reg, &EXITS, HookEvent::Start(entry));
    match outcome {
        HookOutcome::Added => {}
        // The registry already holds a right on this name (or holds none,
        // and the thread, being alive, keeps the name): dropping ours
        // cannot free a name anyone uses.
        HookOutcome::AlreadyTracked { release } | HookOutcome::Refused { release } => deallocate(release),
        HookOutcome::Removed { .. } | HookOutcome::Untracked => {}
    }
}

/// THREAD_TERMINATE: sent on the exiting thread, after its TSD destructors
/// and before the kernel unmaps its stack.
fn on_terminate(thread: pthread_t) {
    let mut tid = 0u64;
    // SAFETY: a null thread means the calling thread; a plain struct read.
    unsafe { sys::pthread_threadid_np(0, &mut tid) };
    // SAFETY: `thread` is the calling thread, for which this reads its own
    // struct without locking and adds no reference. It is the same name as
    // the registry's right: a task has one name per port.
    let port = unsafe { sys::pthread_mach_thread_np(thread) };
    let Some(reg) = REGISTRY.get() else {
        EXITS.record(tid);
        return;
    };
    let outcome = apply_hook_event(reg, &EXITS, HookEvent::Terminate { tid, port });
    if let HookOutcome::Removed { release: p } = outcome {
        release(p);
    }
}
