//! A watched loop's heartbeat handles: a prepare, a check and a repeating
//! timer on the environment's libuv loop (`napi_get_uv_event_loop`), whose
//! native callbacks beat a [`Heartbeat`]. No JavaScript runs in them.
//!
//! libuv's functions are looked up at run time in the process (Node and
//! Electron export them to addons), like napi-rs's own `napi_*`, so the
//! crate's tests link without Node. Handle sizes come from
//! `uv_handle_size`, and a handle's first field is its `data` pointer, as
//! libuv's public headers define. The handles are unreferenced (they never
//! keep a loop alive) and live on the loop's thread, which alone may touch
//! or close them; their memory is freed by the last close callback.

use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, OnceLock};

use crate::stalls::Heartbeat;

/// libuv's handle types (stable across libuv 1.x).
const UV_CHECK: c_int = 2;
const UV_PREPARE: c_int = 9;
const UV_TIMER: c_int = 13;

type HandleCb = unsafe extern "C" fn(*mut c_void);
type HandleSizeFn = unsafe extern "C" fn(c_int) -> usize;
type InitFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type StartFn = unsafe extern "C" fn(*mut c_void, HandleCb) -> c_int;
type TimerStartFn = unsafe extern "C" fn(*mut c_void, HandleCb, u64, u64) -> c_int;
type UnrefFn = unsafe extern "C" fn(*mut c_void);
type CloseFn = unsafe extern "C" fn(*mut c_void, HandleCb);
type IdleTimeFn = unsafe extern "C" fn(*mut c_void) -> u64;

struct Uv {
    handle_size: HandleSizeFn,
    prepare_init: InitFn,
    prepare_start: StartFn,
    check_init: InitFn,
    check_start: StartFn,
    timer_init: InitFn,
    timer_start: TimerStartFn,
    unref: UnrefFn,
    close: CloseFn,
    /// Idle time of the loop (libuv 1.39+), when the loop measures it.
    metrics_idle_time: Option<IdleTimeFn>,
}

fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT searches the process's global
    // symbols; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn uv() -> Result<&'static Uv, String> {
    static UV: OnceLock<Result<Uv, String>> = OnceLock::new();
    UV.get_or_init(|| {
        macro_rules! f {
            ($name:literal, $ty:ty) => {
                match symbol($name) {
                    // SAFETY: the symbol is libuv's function of that name,
                    // whose C signature `$ty` spells.
                    Some(p) => unsafe { std::mem::transmute::<*mut c_void, $ty>(p) },
                    None => return Err(format!("libuv's {} is not exported by this process", $name.to_string_lossy())),
                }
            };
        }
        Ok(Uv {
            handle_size: f!(c"uv_handle_size", HandleSizeFn),
            prepare_init: f!(c"uv_prepare_init", InitFn),
            prepare_start: f!(c"uv_prepare_start", StartFn),
            check_init: f!(c"uv_check_init", InitFn),
            check_start: f!(c"uv_check_start", StartFn),
            timer_init: f!(c"uv_timer_init", InitFn),
            timer_start: f!(c"uv_timer_start", TimerStartFn),
            unref: f!(c"uv_unref", UnrefFn),
            close: f!(c"uv_close", CloseFn),
            // SAFETY: as above; absent before libuv 1.39.
            metrics_idle_time: symbol(c"uv_metrics_idle_time")
                .map(|p| unsafe { std::mem::transmute::<*mut c_void, IdleTimeFn>(p) }),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Memory for one libuv handle, 16-byte aligned.
struct HandleMem(Box<[u128]>);

impl HandleMem {
    fn new(size: usize) -> Self {
        HandleMem(vec![0u128; size.div_ceil(16).max(8)].into_boxed_slice())
    }

    fn ptr(&mut self) -> *mut c_void {
        self.0.as_mut_ptr().cast()
    }
}

/// The heartbeat handles of one watched loop. Owned by the handles once
/// started (each handle's `data` points here); freed by the last close.
pub struct LoopBeat {
    uv: &'static Uv,
    uv_loop: *mut c_void,
    heartbeat: Arc<Heartbeat>,
    handles: [HandleMem; 3],
    open: u32,
    /// Called on the loop thread once every handle is closed.
    on_closed: Option<Box<dyn FnOnce()>>,
}

/// A started [`LoopBeat`]; close it on the loop's thread.
pub struct BeatHandle(*mut LoopBeat);

/// The `LoopBeat` a handle's `data` field points at.
///
/// # Safety
/// `handle` is one of a live `LoopBeat`'s handles.
unsafe fn beat_of<'a>(handle: *mut c_void) -> &'a mut LoopBeat {
    // SAFETY: the handle's first field is `void* data`, set to the
    // LoopBeat before the handle was started; the LoopBeat lives until
    // the last handle's close callback.
    unsafe { &mut *(*(handle as *mut *mut LoopBeat)) }
}

impl LoopBeat {
    fn idle_ns(&self) -> Option<u64> {
        // SAFETY: called on the loop's thread with its own loop.
        self.uv.metrics_idle_time.map(|f| unsafe { f(self.uv_loop) })
    }
}

unsafe extern "C" fn on_prepare(handle: *mut c_void) {
    // SAFETY: libuv calls this with our prepare handle.
    let b = unsafe { beat_of(handle) };
    b.heartbeat.on_prepare(crate::v8::now_ns(), b.idle_ns());
}

unsafe extern "C" fn on_check(handle: *mut c_void) {
    // SAFETY: libuv calls this with our check handle.
    let b = unsafe { beat_of(handle) };
    b.heartbeat.on_check(crate::v8::now_ns(), b.idle_ns());
}

unsafe extern "C" fn on_timer(handle: *mut c_void) {
    // SAFETY: libuv calls this with our timer handle.
    let b = unsafe { beat_of(handle) };
    b.heartbeat.on_turn(crate::v8::now_ns());
}

unsafe extern "C" fn on_close(handle: *mut c_void) {
    // SAFETY: libuv calls this with one of our handles, once each.
    let b = unsafe { beat_of(handle) };
    b.open -= 1;
    if b.open == 0 {
        // SAFETY: the last handle is closed: nothing refers to the
        // LoopBeat any more; it was leaked from a Box in `start`.
        let mut b = unsafe { Box::from_raw(b as *mut LoopBeat) };
        if let Some(f) = b.on_closed.take() {
            f();
        }
    }
}

/// Starts the heartbeat handles on `uv_loop` (the calling thread's loop),
/// the timer every `timer_ms`.
pub fn start(uv_loop: *mut c_void, heartbeat: Arc<Heartbeat>, timer_ms: u64) -> Result<BeatHandle, String> {
    let uv = uv()?;
    // SAFETY: uv_handle_size takes a handle type and returns its size.
    let size = |t| HandleMem::new(unsafe { (uv.handle_size)(t) });
    let beat = Box::new(LoopBeat {
        uv,
        uv_loop,
        heartbeat,
        handles: [size(UV_PREPARE), size(UV_CHECK), size(UV_TIMER)],
        open: 0,
        on_closed: None,
    });
    let raw = Box::into_raw(beat);
    // SAFETY: `raw` is a live LoopBeat, reached here only on this (the
    // loop's) thread; each handle is initialised before its `data` field
    // is set (init clears it) and before it is started; a handle whose
    // init failed is not counted as open.
    unsafe {
        let b = &mut *raw;
        let [p, c, t] = &mut b.handles;
        let (p, c, t) = (p.ptr(), c.ptr(), t.ptr());
        let inits: [(*mut c_void, InitFn); 3] = [(p, uv.prepare_init), (c, uv.check_init), (t, uv.timer_init)];
        for (h, init) in inits {
            if init(uv_loop, h) != 0 {
                close(BeatHandle(raw), None);
                return Err("cannot create libuv handles on this loop".into());
            }
            *(h as *mut *mut LoopBeat) = raw;
            b.open += 1;
            (uv.unref)(h);
        }
        let ok = (uv.prepare_start)(p, on_prepare) == 0
            && (uv.check_start)(c, on_check) == 0
            && (uv.timer_start)(t, on_timer, timer_ms, timer_ms) == 0;
        if !ok {
            close(BeatHandle(raw), None);
            return Err("cannot start libuv handles on this loop".into());
        }
    }
    Ok(BeatHandle(raw))
}

/// Closes the handles; `on_closed` runs on the loop thread when all are.
/// Must be called on the loop's thread.
pub fn close(handle: BeatHandle, on_closed: Option<Box<dyn FnOnce()>>) {
    // SAFETY: the LoopBeat is alive until its last handle's close callback,
    // which runs after this returns; only the loop's thread touches it.
    unsafe {
        let b = &mut *handle.0;
        b.on_closed = on_closed;
        if b.open == 0 {
            let mut b = Box::from_raw(handle.0);
            if let Some(f) = b.on_closed.take() {
                f();
            }
            return;
        }
        let open = b.open as usize;
        let uv = b.uv;
        let handles: Vec<*mut c_void> = b.handles.iter_mut().take(open).map(HandleMem::ptr).collect();
        for h in handles {
            (uv.close)(h, on_close);
        }
    }
}
