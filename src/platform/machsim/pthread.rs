//! libpthread's part: `pthread_create` (interposed for the whole process,
//! so the introspection hook sees every thread created after it is
//! installed), the hook itself, signal masks that cannot block the park
//! signal (a Mach suspend ignores signal masks), and thread exit as
//! libpthread and `__bsdthread_terminate` do it: THREAD_TERMINATE, then
//! the stack goes away (here: made inaccessible) while the thread is still
//! active, then the thread is terminated.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

use super::kernel::{self, KernelMode, Phase, Thread};
use super::park;

pub type IntrospectionHook =
    unsafe extern "C" fn(event: c_uint, thread: libc::pthread_t, addr: *mut c_void, size: usize);
type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
type CreateFn =
    unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartRoutine, *mut c_void) -> c_int;

pub const THREAD_START: c_uint = 2;
pub const THREAD_TERMINATE: c_uint = 3;

static HOOK: AtomicUsize = AtomicUsize::new(0);
static KEY: AtomicUsize = AtomicUsize::new(usize::MAX);
static REAL_CREATE: AtomicUsize = AtomicUsize::new(0);
/// Threads created but not yet registered with the kernel. libpthread
/// knows a thread before it runs; here a new thread registers itself first
/// thing, and `task_threads` waits for that, so it never lists a thread
/// whose pthread is unknown.
pub static STARTING: AtomicU32 = AtomicU32::new(0);

/// How long an exiting thread stays in the `Unmapped` phase (tests widen
/// the window in which a sampler can catch it there).
pub static EXIT_DELAY_NS: AtomicU64 = AtomicU64::new(0);

/// Bytes below the exiting code's stack pointer left accessible, for its
/// own calls and signal frames; everything below is "unmapped".
const EXIT_MARGIN: u64 = 32 << 10;
const PAGE: u64 = 4096;

/// The main thread's pthread, recorded before `main` runs (the only thread
/// that exists then), so that it is known like every other pthread.
pub static MAIN_PTHREAD: AtomicU64 = AtomicU64::new(0);

#[used]
#[unsafe(link_section = ".init_array")]
static RECORD_MAIN: extern "C" fn() = record_main;

extern "C" fn record_main() {
    // SAFETY: getpid and pthread_self have no preconditions.
    unsafe {
        if super::gettid() == libc::getpid() as u64 {
            MAIN_PTHREAD.store(libc::pthread_self() as u64, Ordering::Release);
        }
    }
}

/// Sets everything up once: the park signal, the exit key, faults from the
/// environment.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        park::signal();
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: creates a TSD key whose destructor runs at thread exit.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_exit)) } != 0 {
            super::fatal("machsim: pthread_key_create failed");
        }
        KEY.store(key as usize, Ordering::Release);
        if let Ok(spec) = std::env::var("MACHSIM_FAULTS") {
            if let Err(e) = super::faults::arm_from(&spec) {
                super::fatal(&e);
            }
        }
    });
}

pub(super) fn real_create() -> CreateFn {
    let mut f = REAL_CREATE.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: looks up the next definition of pthread_create (libc's).
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        if f == 0 {
            super::fatal("machsim: no libc pthread_create");
        }
        REAL_CREATE.store(f, Ordering::Release);
    }
    // SAFETY: `f` is libc's pthread_create, which has this signature.
    unsafe { std::mem::transmute::<usize, CreateFn>(f) }
}

/// Installs `hook`, returning the previous one (as libpthread does: a plain
/// exchange).
pub fn install_hook(hook: IntrospectionHook) -> Option<IntrospectionHook> {
    init();
    let previous = HOOK.swap(hook as usize, Ordering::AcqRel);
    // SAFETY: HOOK only ever holds 0 or an `IntrospectionHook`.
    (previous != 0).then(|| unsafe { std::mem::transmute::<usize, IntrospectionHook>(previous) })
}

fn fire(event: c_uint, t: &Thread) {
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        let (lo, hi) = (t.stack_lo.load(Ordering::Relaxed), t.stack_hi.load(Ordering::Relaxed));
        // SAFETY: as in `install_hook`; called on the thread itself, with
        // its pthread and its stack, as libpthread does.
        unsafe {
            let hook = std::mem::transmute::<usize, IntrospectionHook>(hook);
            hook(event, t.pthread.load(Ordering::Relaxed) as libc::pthread_t, lo as *mut c_void, (hi - lo) as usize);
        }
    }
}

/// Registers the calling thread's pthread and stack with the kernel.
pub fn register_self(t: &'static Thread) {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    // Known to pthread_from_mach_thread_np at once, as libpthread's list
    // knows a thread before it runs; the stack follows (and is computed on
    // demand if asked for first).
    t.pthread.store(me as u64, Ordering::Release);
    if t.stack_hi.load(Ordering::Acquire) == 0 {
        let (lo, hi) = stack_of(me);
        t.stack_lo.store(lo, Ordering::Relaxed);
        t.stack_hi.store(hi, Ordering::Release);
    }
}

/// The stack of a live pthread, from glibc: `[lo, hi)`.
pub fn stack_of(pt: libc::pthread_t) -> (u64, u64) {
    // SAFETY: attr is initialised by pthread_getattr_np and destroyed; `pt`
    // is a live thread (callers check).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(pt, &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return (0, 0);
        }
        (addr as u64, addr as u64 + size as u64)
    }
}

struct Start {
    start: StartRoutine,
    arg: *mut c_void,
}

/// The simulated `pthread_create`: libc's, with the new thread starting in
/// [`thread_main`].
///
/// # Safety
/// As `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    out: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    init();
    let boxed = Box::into_raw(Box::new(Start { start, arg }));
    STARTING.fetch_add(1, Ordering::SeqCst);
    // SAFETY: forwards the caller's arguments, with our start routine.
    let rc = unsafe { real_create()(out, attr, thread_main, boxed.cast()) };
    if rc != 0 {
        STARTING.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
    }
    rc
}

extern "C" fn thread_main(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the box `pthread_create` made for this thread.
    let Start { start, arg } = *unsafe { Box::from_raw(p.cast::<Start>()) };
    let t = {
        let _k = KernelMode::enter();
        let t = kernel::lock().new_thread(super::gettid());
        t.interposed.store(true, Ordering::Release);
        t
    };
    register_self(t);
    STARTING.fetch_sub(1, Ordering::SeqCst);
    // A Mach suspend ignores signal masks: the creator may have blocked
    // every signal, the park signal must not stay blocked.
    unblock_park_signal();
    // SAFETY: KEY was created in `init`; the value is a `&'static Thread`.
    unsafe { libc::pthread_setspecific(KEY.load(Ordering::Acquire) as libc::pthread_key_t, t as *const Thread as _) };
    fire(THREAD_START, t);
    start(arg)
}

fn unblock_park_signal() {
    // SAFETY: changes this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, park::signal());
        park::real_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// The exit path, from the TSD destructor (after the thread's Rust and C++
/// thread-local destructors): THREAD_TERMINATE, then `__bsdthread_terminate`.
extern "C" fn on_exit(value: *mut c_void) {
    // SAFETY: the value set in `thread_main`.
    let t: &'static Thread = unsafe { &*(value as *const Thread) };
    fire(THREAD_TERMINATE, t);
    // The registers it enters the kernel with point into the stack it is
    // about to lose: a sampler that walks them now reads unmapped memory.
    let here = &t as *const _ as u64;
    let lo = (t.stack_lo.load(Ordering::Relaxed) + PAGE - 1) & !(PAGE - 1);
    let top = here.saturating_sub(EXIT_MARGIN) & !(PAGE - 1);
    let unmap = (lo != PAGE - 1 && top > lo + PAGE).then_some((lo, top - lo));
    if let Some((lo, len)) = unmap {
        let entry = [on_exit as *const () as u64, lo + len - 512, lo + len - 256];
        for (slot, v) in t.kernel_entry.iter().zip(entry) {
            slot.store(v, Ordering::Relaxed);
        }
    }
    t.set_phase(Phase::Unmapped);
    if let Some((lo, len)) = unmap {
        // SAFETY: the pages below the margin hold only frames that have
        // returned; they are made accessible again before any user code
        // runs on this thread.
        unsafe { libc::mprotect(lo as *mut c_void, len as usize, libc::PROT_NONE) };
    }
    let delay = EXIT_DELAY_NS.load(Ordering::Relaxed);
    if delay > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(delay));
    }
    {
        let _k = KernelMode::enter();
        let mut k = kernel::lock();
        k.drop_libpthread_ref(t);
        t.set_phase(Phase::Terminated);
    }
    if let Some((lo, len)) = unmap {
        // SAFETY: restores the protection changed above.
        unsafe { libc::mprotect(lo as *mut c_void, len as usize, libc::PROT_READ | libc::PROT_WRITE) };
    }
    // The port stays alive until the thread is reaped (by the watchdog).
    t.set_phase(Phase::Disabled);
    if t.suspender.load(Ordering::Relaxed) {
        super::audit::on_suspender_exit();
    }
}

/// Glibc's internal signals, which `pthread_sigmask` never blocks either.
const SIGCANCEL: c_int = 32;
const SIGSETXID: c_int = 33;

fn filtered(how: c_int, set: *const libc::sigset_t) -> Option<libc::sigset_t> {
    if set.is_null() || how == libc::SIG_UNBLOCK {
        return None;
    }
    // SAFETY: `set` is non-null and points to a sigset_t (the caller's
    // contract); the copy is ours.
    unsafe {
        let mut copy = *set;
        libc::sigdelset(&mut copy, park::signal());
        libc::sigdelset(&mut copy, SIGCANCEL);
        libc::sigdelset(&mut copy, SIGSETXID);
        Some(copy)
    }
}

/// `pthread_sigmask` that never blocks the park signal.
///
/// # Safety
/// As `pthread_sigmask`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    let copy = filtered(how, set);
    let set = copy.as_ref().map_or(set, |c| c as *const libc::sigset_t);
    // SAFETY: forwards valid (or null) pointers.
    if unsafe { park::real_sigmask(how, set, old) } == 0 {
        0
    } else {
        // SAFETY: reading errno right after the failed call.
        unsafe { *libc::__errno_location() }
    }
}

/// `sigprocmask` that never blocks the park signal.
///
/// # Safety
/// As `sigprocmask`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    let copy = filtered(how, set);
    let set = copy.as_ref().map_or(set, |c| c as *const libc::sigset_t);
    // SAFETY: forwards valid (or null) pointers.
    unsafe { park::real_sigmask(how, set, old) }
}

/// Starts a thread of the simulation itself (invisible to `task_threads`),
/// past the interposer.
/// `f` must call [`internal_started`] first.
pub fn spawn_internal(f: extern "C" fn(*mut c_void) -> *mut c_void) {
    let mut pt: libc::pthread_t = 0;
    STARTING.fetch_add(1, Ordering::SeqCst);
    // SAFETY: libc's pthread_create with a valid start routine.
    let rc = unsafe { real_create()(&mut pt, std::ptr::null(), f, std::ptr::null_mut()) };
    if rc != 0 {
        super::fatal("machsim: cannot start the watchdog");
    }
    // SAFETY: detaching a thread we created.
    unsafe { libc::pthread_detach(pt) };
}

/// Marks the calling thread as the simulation's own (see [`spawn_internal`]).
pub fn internal_started() -> &'static Thread {
    let t = {
        let _k = KernelMode::enter();
        let t = kernel::lock().new_thread(super::gettid());
        t.internal.store(true, Ordering::Release);
        t
    };
    STARTING.fetch_sub(1, Ordering::SeqCst);
    t
}
