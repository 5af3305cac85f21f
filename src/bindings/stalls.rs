//! `watchStalls()`: watches the calling thread's event loop.
//!
//! The loop's heartbeat handles are libuv handles on this environment's
//! loop (`super::uv`); stall reports come back through a thread-safe
//! function, whose callback runs on this thread once its loop turns
//! again and hands one report to `onStall`. The watch ends with
//! `close()`, or when the environment is torn down (a worker exits): an
//! async cleanup hook then closes the handles, and Node runs the loop
//! until they are closed.

use std::cell::RefCell;
use std::ffi::c_void;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::*;
use napi::{sys, Env, JsValue, ValueType};
use napi_derive::napi;

use super::formats::entries;
use super::profile::{JsProfile, JsThreadInfo};
use super::uv::{self, BeatHandle};
use super::{einval, js_error, napi_fail, number_option, symbols, JsResult};
use crate::stalls::{self, Heartbeat, StallOptions, StallReport, Watch};

const WATCH_KEYS: &str = "thresholdMs, keepMs, intervalMs, stallIntervalMs, hangAfterMs, hangDir, warmSymbols, onStall";

/// Options for {@link watchStalls}. Every field but `onStall` is optional.
// Only its type is used (for the .d.ts): `watchStalls` validates by hand.
#[allow(dead_code)]
#[napi(object, js_name = "WatchStallsOptions")]
pub struct JsWatchStallsOptions {
    /// A stall: the loop did not turn for this long, in ms: an integer
    /// from 20 to 60000. Default 200.
    pub threshold_ms: Option<u32>,
    /// History kept before a stall, in ms: an integer from 0 to 60000.
    /// Default 5000.
    pub keep_ms: Option<u32>,
    /// Background sampling interval while watching, in ms: an integer
    /// from 1 to 1000. Default 10.
    pub interval_ms: Option<u32>,
    /// Sampling interval of the stalled thread during a stall, in ms: an
    /// integer from 1 to 1000. Default 1. Its first 2000 samples; then
    /// `intervalMs`.
    pub stall_interval_ms: Option<u32>,
    /// Write a stall that has lasted this long (an integer from 100 to
    /// 3600000 ms) to `hangDir`, from the sampler's side: a deadlocked
    /// loop never turns again, so `onStall` would never be called. Needs
    /// `hangDir`.
    pub hang_after_ms: Option<u32>,
    /// Directory for hangs: `machsampler-hang-<pid>-<n>.machprof` and its
    /// summary, `machsampler-hang-<pid>-<n>.txt`. Needs `hangAfterMs`.
    pub hang_dir: Option<String>,
    /// Load the symbol tables of the code seen running a quarter second after the
    /// watch starts (default true), so that the first stall's report is as
    /// quick as later ones (reports are ready within tens of milliseconds
    /// of the loop turning, against a hundred or more for the first with
    /// cold tables). The tables stay loaded: tens of MB for Node's own.
    pub warm_symbols: Option<bool>,
    /// Called on the watched thread once its loop turns again after a
    /// stall, with the {@link Stall}.
    #[napi(ts_type = "(stall: Stall) => void")]
    pub on_stall: (),
}

/// A stall of an event loop (see {@link watchStalls}).
#[napi(object, js_name = "Stall")]
pub struct JsStall<'env> {
    /// The thread whose loop stalled.
    pub thread: JsThreadInfo,
    /// When the loop stopped turning, on the profile's clock (nanoseconds).
    pub start_time_ns: BigInt,
    /// How long it did not turn, in milliseconds.
    pub duration_ms: f64,
    /// Every thread, from `keepMs` before the stall to its end, symbolicated.
    /// `intervalNs` is the stalled thread's interval during the stall when
    /// it was sampled faster; samples taken at the background interval
    /// weigh proportionally more, so weight times `intervalNs` is the time
    /// each sample stands for.
    #[napi(ts_type = "Profile")]
    pub profile: JsProfile<'env>,
    /// A few lines: the duration, the stalled thread's dominant stack
    /// during the stall (JavaScript and native frames named), and the other
    /// threads that were busy.
    pub summary: String,
}

fn stall_object<'env>(env: &'env Env, r: &StallReport) -> napi::Result<JsStall<'env>> {
    Ok(JsStall {
        thread: JsThreadInfo {
            tid: r.tid as f64,
            name: r.thread_name.clone(),
            is_main: r.is_main,
            role: None,
            pid: None,
            command: None,
        },
        start_time_ns: BigInt::from(r.start_ns),
        duration_ms: r.end_ns.saturating_sub(r.start_ns) as f64 / 1e6,
        profile: JsProfile::from_data(env, &r.profile)?,
        summary: r.summary.clone(),
    })
}

fn parse<'env>(options: Unknown<'env>) -> JsResult<(StallOptions, Option<Function<'env>>)> {
    let mut o = StallOptions::default();
    let mut on_stall = None;
    for (key, v) in entries(options, "options")? {
        if v.get_type().map_err(napi_fail)? == ValueType::Undefined && WATCH_KEYS.split(", ").any(|k| k == key) {
            continue;
        }
        o = match key.as_str() {
            "thresholdMs" => number_option(&key, &v, |x| o.clone().with_threshold_ms(x))?,
            "keepMs" => number_option(&key, &v, |x| o.clone().with_keep_ms(x))?,
            "intervalMs" => number_option(&key, &v, |x| o.clone().with_interval_ms(x))?,
            "stallIntervalMs" => number_option(&key, &v, |x| o.clone().with_stall_interval_ms(x))?,
            "hangAfterMs" => number_option(&key, &v, |x| o.clone().with_hang_after_ms(x))?,
            "hangDir" => {
                if v.get_type().map_err(napi_fail)? != ValueType::String {
                    return Err(einval("options.hangDir must be a string (a directory)"));
                }
                // SAFETY: the type was just checked to be String.
                let dir: String = unsafe { v.cast::<String>() }.map_err(napi_fail)?;
                o.hang_dir = Some(PathBuf::from(dir));
                o
            }
            "warmSymbols" => {
                if v.get_type().map_err(napi_fail)? != ValueType::Boolean {
                    return Err(einval("options.warmSymbols must be a boolean (true or false)"));
                }
                // SAFETY: the type was just checked to be Boolean.
                o.warm_symbols = unsafe { v.cast::<bool>() }.map_err(napi_fail)?;
                o
            }
            "onStall" => {
                if v.get_type().map_err(napi_fail)? != ValueType::Function {
                    return Err(einval("options.onStall must be a function"));
                }
                // SAFETY: the type was just checked to be Function.
                on_stall = Some(unsafe { v.cast::<Function<'env>>() }.map_err(napi_fail)?);
                o
            }
            other => return Err(einval(format!("unknown option '{other}'; valid options are {WATCH_KEYS}"))),
        };
    }
    Ok((o.check().map_err(js_error)?, on_stall))
}

/// Checks options exactly as {@link watchStalls} does, without watching
/// (`onStall` may be left out): the CLI validates `--stalls` before it
/// runs the program.
///
/// @throws `EINVAL` with watchStalls()'s message for a bad option.
#[napi(ts_args_type = "options: Partial<WatchStallsOptions>")]
pub fn check_watch_stalls_options(options: Unknown) -> Result<(), &'static str> {
    parse(options).map(|_| ())
}

/// The thread-safe function that wakes the watched thread, while it lives.
#[derive(Default)]
struct Wake(Mutex<Option<usize>>);

impl Wake {
    fn call(&self) {
        let slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tsfn) = *slot {
            // SAFETY: the function is alive while it is in the slot (its
            // finalizer and `release` empty the slot under this lock).
            unsafe {
                sys::napi_call_threadsafe_function(tsfn as sys::napi_threadsafe_function, std::ptr::null_mut(), 0)
            };
        }
    }

    fn release(&self) {
        if let Some(tsfn) = self.0.lock().unwrap_or_else(PoisonError::into_inner).take() {
            // SAFETY: the function was alive in the slot; aborting drops its
            // queue (it holds no data: the reports are in the watch).
            unsafe { sys::napi_release_threadsafe_function(tsfn as sys::napi_threadsafe_function, 1) };
        }
    }
}

/// What the thread-safe function holds: its context and finalize data.
struct TsfnData {
    wake: Arc<Wake>,
    watch: Arc<Watch>,
}

unsafe extern "C" fn tsfn_finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the TsfnData leaked in `create_tsfn`; Node calls
    // this once, after the last call of `tsfn_call`.
    let data = unsafe { Box::from_raw(data as *mut TsfnData) };
    data.wake.0.lock().unwrap_or_else(PoisonError::into_inner).take();
}

unsafe extern "C" fn tsfn_call(env: sys::napi_env, js_cb: sys::napi_value, context: *mut c_void, _data: *mut c_void) {
    if env.is_null() || js_cb.is_null() {
        return; // the environment is being torn down
    }
    // SAFETY: `context` is the TsfnData, alive until the finalizer.
    let data = unsafe { &*(context as *const TsfnData) };
    if data.watch.is_closed() {
        return;
    }
    let Some(report) = data.watch.take_one() else { return };
    let env = Env::from_raw(env);
    let deliver = || -> napi::Result<()> {
        let stall = stall_object(&env, &report)?;
        let value = stall.into_unknown(&env)?;
        let mut undefined = std::ptr::null_mut();
        // SAFETY: plain N-API calls on this thread's environment. An
        // exception thrown by onStall stays pending: Node reports it as
        // uncaught when this callback returns.
        unsafe {
            sys::napi_get_undefined(env.raw(), &mut undefined);
            sys::napi_call_function(env.raw(), undefined, js_cb, 1, [value.raw()].as_ptr(), std::ptr::null_mut());
        }
        Ok(())
    };
    let _ = deliver();
}

fn create_tsfn(env: &Env, on_stall: &Function, wake: Arc<Wake>, watch: Arc<Watch>) -> napi::Result<()> {
    let name = env.create_string("machsampler.onStall")?;
    let data = Box::into_raw(Box::new(TsfnData { wake: wake.clone(), watch })) as *mut c_void;
    let mut tsfn = std::ptr::null_mut();
    // SAFETY: N-API calls with values of this environment; `data` lives
    // until `tsfn_finalize`.
    let status = unsafe {
        sys::napi_create_threadsafe_function(
            env.raw(),
            on_stall.raw(),
            std::ptr::null_mut(),
            name.raw(),
            0,
            1,
            data,
            Some(tsfn_finalize),
            data,
            Some(tsfn_call),
            &mut tsfn,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: not handed to Node: ours to free.
        drop(unsafe { Box::from_raw(data as *mut TsfnData) });
        return Err(napi::Error::from_reason("cannot create the stall callback"));
    }
    // It must not keep the loop alive.
    // SAFETY: the function was just created on this environment.
    unsafe { sys::napi_unref_threadsafe_function(env.raw(), tsfn) };
    *wake.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(tsfn as usize);
    Ok(())
}

struct State {
    watch: Arc<Watch>,
    wake: Arc<Wake>,
    beat: Option<BeatHandle>,
    /// The async cleanup hook's handle, and its argument (ours to free if
    /// the hook never runs).
    hook: Option<(usize, *mut Rc<RefCell<State>>)>,
    closed: bool,
}

/// Ends the watch. With `teardown`, the environment is going away: the
/// hook's handle is removed once the libuv handles are closed.
fn close_state(state: &Rc<RefCell<State>>, teardown: Option<sys::napi_async_cleanup_hook_handle>) {
    let mut s = state.borrow_mut();
    let finish: Box<dyn FnOnce()> = match teardown {
        Some(h) => {
            let h = h as usize;
            // SAFETY: Node's handle for this hook, removed once, when done.
            Box::new(move || unsafe {
                sys::napi_remove_async_cleanup_hook(h as sys::napi_async_cleanup_hook_handle);
            })
        }
        None => Box::new(|| {}),
    };
    if s.closed {
        finish();
        return;
    }
    s.closed = true;
    stalls::unwatch(&s.watch);
    s.wake.release();
    if teardown.is_none() {
        if let Some((h, arg)) = s.hook.take() {
            // SAFETY: the hook has not run (the environment is alive): it is
            // removed, and its argument is ours to free.
            unsafe {
                sys::napi_remove_async_cleanup_hook(h as sys::napi_async_cleanup_hook_handle);
                drop(Box::from_raw(arg));
            }
        }
    }
    match s.beat.take() {
        Some(beat) => uv::close(beat, Some(finish)),
        None => finish(),
    }
}

unsafe extern "C" fn on_teardown(handle: sys::napi_async_cleanup_hook_handle, arg: *mut c_void) {
    // SAFETY: `arg` is the Rc leaked when the hook was added; the hook runs
    // once, on the environment's thread.
    let state = unsafe { Box::from_raw(arg as *mut Rc<RefCell<State>>) };
    state.borrow_mut().hook = None;
    close_state(&state, Some(handle));
}

/// A running {@link watchStalls}.
#[napi]
pub struct StallWatcher {
    state: Rc<RefCell<State>>,
}

/// Statistics of a stall watcher.
#[napi(object, js_name = "StallWatcherStats")]
pub struct JsStallWatcherStats {
    /// Stalls reported (handed to `onStall`, or cut at exit).
    pub stalls: f64,
    /// Hangs written to `hangDir`.
    pub hangs: f64,
    /// Hangs that could not be written (`hangDir` removed or made
    /// read-only after `watchStalls()` checked it).
    pub hangs_not_written: f64,
    /// Sample rows the history holds (every watcher of the process shares it).
    pub history_rows: f64,
    /// Bytes the history holds.
    pub history_bytes: f64,
    /// History chunks dropped early to stay under the history's byte limit.
    pub history_truncated: f64,
}

#[napi]
impl StallWatcher {
    /// Stops watching. A stall not yet handed to `onStall` is dropped, and
    /// none is reported after. Calling it again does nothing.
    #[napi]
    pub fn close(&self) {
        close_state(&self.state, None);
    }

    /// Counters of this watcher, and of the history all watchers share.
    #[napi]
    pub fn stats(&self) -> JsStallWatcherStats {
        let s = stalls::stats(&self.state.borrow().watch);
        JsStallWatcherStats {
            stalls: s.stalls as f64,
            hangs: s.hangs as f64,
            hangs_not_written: s.hangs_not_written as f64,
            history_rows: s.history.rows as f64,
            history_bytes: s.history.bytes as f64,
            history_truncated: s.history.truncated as f64,
        }
    }

    /// For the process's 'exit': the stalls not yet handed over, with the
    /// one in progress (the loop will not turn again), for the caller to
    /// hand to `onStall`.
    #[napi(js_name = "_flush", ts_return_type = "Stall[]")]
    pub fn flush<'env>(&self, env: &'env Env) -> napi::Result<Vec<JsStall<'env>>> {
        let watch = self.state.borrow().watch.clone();
        if self.state.borrow().closed {
            return Ok(Vec::new());
        }
        stalls::flush(&watch).iter().map(|r| stall_object(env, r)).collect()
    }
}

/// Watches the calling thread's event loop for stalls: times it does not
/// turn for `thresholdMs` or longer. Each stall is handed to `onStall` on
/// this thread once the loop turns again, with a profile of every thread
/// (the `keepMs` before the stall and the stall itself) and a summary.
/// Detection needs no JavaScript during the stall: native libuv handles
/// beat a heartbeat on every turn, and the sampler thread notices when it
/// stops. Call it on the main thread to watch the main thread; a worker
/// watches itself by calling it. It runs alongside `start()`/`stop()`.
///
/// @throws `EINVAL` for a bad option (the message names the range).
#[napi(ts_args_type = "options: WatchStallsOptions", ts_return_type = "StallWatcher")]
pub fn watch_stalls(env: &Env, options: Unknown) -> Result<StallWatcher, &'static str> {
    let (options, on_stall) = parse(options)?;
    let on_stall = on_stall.ok_or_else(|| einval("options.onStall must be a function: it is given each stall"))?;
    let symbols = symbols::default_symbol_options()?;
    let uv_loop = env.get_uv_event_loop().map_err(napi_fail)? as *mut c_void;
    let tid = crate::sampler::thread_id::current();
    let heartbeat = Arc::new(Heartbeat::new(tid, crate::v8::now_ns(), options.suspect_ns()));
    // The timer bounds an idle poll to a quarter of the threshold, well
    // below the age at which the loop is suspected.
    let timer_ms = (options.threshold_ns / 4 / 1_000_000).max(1);
    let wake = Arc::new(Wake::default());
    let w = wake.clone();
    let watch = stalls::watch(heartbeat.clone(), options, symbols, Box::new(move || w.call())).map_err(js_error)?;
    let state = Rc::new(RefCell::new(State {
        watch: watch.clone(),
        wake: wake.clone(),
        beat: None,
        hook: None,
        closed: false,
    }));
    let setup = || -> JsResult<()> {
        create_tsfn(env, &on_stall, wake, watch).map_err(napi_fail)?;
        let beat = uv::start(uv_loop, heartbeat, timer_ms).map_err(|e| napi::Error::new("ENOTSUP", e))?;
        state.borrow_mut().beat = Some(beat);
        let arg = Box::into_raw(Box::new(state.clone()));
        let mut handle = std::ptr::null_mut();
        // SAFETY: `arg` lives until the hook runs or is removed.
        let status =
            unsafe { sys::napi_add_async_cleanup_hook(env.raw(), Some(on_teardown), arg as *mut c_void, &mut handle) };
        if status != sys::Status::napi_ok {
            // SAFETY: not handed to Node: ours to free.
            drop(unsafe { Box::from_raw(arg) });
            return Err(napi_fail(napi::Error::from_reason("cannot add a cleanup hook")));
        }
        state.borrow_mut().hook = Some((handle as usize, arg));
        Ok(())
    };
    if let Err(e) = setup() {
        close_state(&state, None);
        return Err(e);
    }
    Ok(StallWatcher { state })
}
