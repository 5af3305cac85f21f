//! V8's JIT code events feed the process-wide [`CodeMap`].
//!
//! The handler (`Isolate::SetJitCodeEventHandler`: one slot per isolate) is
//! installed on each isolate's own thread, through
//! `Isolate::RequestInterrupt` for isolates of other threads, and only
//! while wanted; the interrupt reconciles the isolate with the wanted
//! state, so a late one does nothing wrong. The handler runs on the
//! isolate's thread and on GC threads; it never waits for the map: when the
//! map is locked, events queue and the next user of the map applies them,
//! in order. Why this API, and its limits: `docs/design/v8-code-events.md`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use super::abi::{jit_code_type, jit_event, JitCodeEvent, JIT_CODE_EVENT_DEFAULT, JIT_CODE_EVENT_ENUM_EXISTING};
use super::api::{api, api_if_resolved, Api, CodeRange, Isolate};
use super::codemap::{CodeKind, CodeMap};
use super::registry::{self, Registered};
use super::{script_maps, unnamed_scripts};

/// The clock of code events, which must be the clock of sample timestamps:
/// `CLOCK_MONOTONIC` on Linux (the signal handler's), and on macOS
/// `CLOCK_UPTIME_RAW`, which is `mach_absolute_time` in nanoseconds (the
/// Mach backend's).
pub fn now_ns() -> u64 {
    #[cfg(target_vendor = "apple")]
    const CLOCK: libc::clockid_t = libc::CLOCK_UPTIME_RAW;
    #[cfg(not(target_vendor = "apple"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

static MAP: LazyLock<Mutex<CodeMap>> = LazyLock::new(|| Mutex::new(CodeMap::default()));
/// The embedded builtins blob (the same for every isolate).
static EMBEDDED: OnceLock<CodeRange> = OnceLock::new();

/// Serializes installation, `RequestInterrupt` calls and unregistration.
static LIFECYCLE: Mutex<()> = Mutex::new(());
/// Code events are wanted (between `start()` and `stop()`).
static WANTED: AtomicBool = AtomicBool::new(false);
/// [`Policy::FromLoad`] when true.
static FROM_LOAD: AtomicBool = AtomicBool::new(false);
/// [`Policy::WhileSampling`] when true.
static WHILE_SAMPLING: AtomicBool = AtomicBool::new(false);
/// A session with code events has started (see [`Policy::FromFirstStart`]).
static EVER_WANTED: AtomicBool = AtomicBool::new(false);
/// When the current (or last) session with code events started, in the
/// kernel's clock ticks since boot (the unit of a thread's start time).
static SESSION_START_TICKS: AtomicU64 = AtomicU64::new(0);

/// When the JIT code event handler is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// From `start()` to `stop()` only: no cost while not sampling, and
    /// the slot is left to others in between. Optimized code that V8
    /// compiled before `start()` by on-stack replacement (a hot loop that
    /// was already running) is never reported by V8's enumeration of
    /// existing code, so such frames stay unnamed.
    WhileSampling,
    /// From registration (module load) until the environment is torn down:
    /// every later compilation is seen, OSR code included, at the cost of
    /// handling code events (and GC moves of code) all the time.
    FromLoad,
    /// The default: from the first `start()` (or, for an isolate registered
    /// later, its registration) until the environment is torn down. Each
    /// isolate's existing code is enumerated once, not at every `start()`,
    /// and not at all for a thread created after the session started (its
    /// only code before registration is Node's bootstrap; V8's enumeration
    /// walks the whole heap, ~7 ms of CPU for a new worker).
    FromFirstStart,
}
/// The user has not turned code events off.
static ALLOWED: AtomicBool = AtomicBool::new(true);
/// Registration serial → handler installed on that isolate.
static INSTALLED: LazyLock<Mutex<HashMap<u32, bool>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
/// Registrations whose existing code was enumerated (or is being).
static ENUMERATED: LazyLock<Mutex<HashMap<u32, bool>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

static EVENTS: AtomicU64 = AtomicU64::new(0);
static INSTALLS: AtomicU64 = AtomicU64::new(0);
static INTERRUPTS_REQUESTED: AtomicU64 = AtomicU64::new(0);
static INTERRUPTS_RUN: AtomicU64 = AtomicU64::new(0);
static LAST_INSTALL_NS: AtomicU64 = AtomicU64::new(0);
static INSTALL_CPU_NS: AtomicU64 = AtomicU64::new(0);
static INSTALLS_ENUMERATING: AtomicU64 = AtomicU64::new(0);

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Now, in clock ticks since boot (Linux; None elsewhere).
fn boot_ticks_now() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer; sysconf has no preconditions.
        let (ok, hz) =
            unsafe { (libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) == 0, libc::sysconf(libc::_SC_CLK_TCK)) };
        (ok && hz > 0).then(|| ts.tv_sec as u64 * hz as u64 + ts.tv_nsec as u64 * hz as u64 / 1_000_000_000)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// When the calling thread started, in clock ticks since boot (field 22 of
/// `/proc/thread-self/stat`; Linux only).
fn thread_start_ticks() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        // The name (field 2) may hold spaces and parentheses: fields after
        // it are counted from its last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_ascii_whitespace().nth(19)?.parse().ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Whether installing on the calling thread should enumerate the existing
/// code: not for a thread that started after the session did (one tick of
/// slack for the clock's resolution).
fn enumerate_on_install() -> bool {
    if policy() != Policy::FromFirstStart {
        return true;
    }
    let session = SESSION_START_TICKS.load(Ordering::Acquire);
    match thread_start_ticks() {
        Some(born) if session != 0 => born <= session + 1,
        _ => true,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a raw code event did.
#[derive(Clone, Copy, Debug)]
enum RawOp {
    Add { kind: CodeKind, isolate: u32 },
    Move { to: u64 },
    Remove,
    Retire { isolate: u32 },
}

/// A code event as the callback saw it: no name decoding, no hashing, no
/// map insert; the name's bytes are copied to the log's byte buffer.
#[derive(Clone, Copy, Debug)]
struct RawEvent {
    op: RawOp,
    start: u64,
    len: u64,
    t: u64,
    name: (u32, u32),
}

/// Code events not yet applied to the map, in arrival order, with their
/// names' bytes. Preallocated; only ever held for an append or a swap,
/// never across a call into V8 or a map update.
#[derive(Default)]
struct RawLog {
    events: Vec<RawEvent>,
    bytes: Vec<u8>,
}

impl RawLog {
    const EVENTS: usize = 1 << 14;
    const BYTES: usize = 1 << 20;

    fn reserve(&mut self) {
        if self.events.capacity() == 0 {
            self.events.reserve(Self::EVENTS);
            self.bytes.reserve(Self::BYTES);
        }
    }
}

/// Events fold into the map once this many wait (by whoever appends, if
/// the map is free; else by the next reader).
const FOLD_AT: usize = RawLog::EVENTS;

static LOG: Mutex<RawLog> = Mutex::new(RawLog { events: Vec::new(), bytes: Vec::new() });
/// The other buffer: the log is swapped with it to fold, so appending
/// never waits for a fold.
static SPARE: Mutex<RawLog> = Mutex::new(RawLog { events: Vec::new(), bytes: Vec::new() });

fn apply(map: &mut CodeMap, log: &RawLog) {
    for e in &log.events {
        match e.op {
            RawOp::Add { kind, isolate } => {
                let (at, len) = (e.name.0 as usize, e.name.1 as usize);
                let bytes = log.bytes.get(at..at + len).unwrap_or(&[]);
                map.add(e.start, e.len, kind, &String::from_utf8_lossy(bytes), isolate, e.t)
            }
            RawOp::Move { to } => map.move_code(e.start, to, Some(e.len), e.t),
            RawOp::Remove => map.remove(e.start, e.t),
            RawOp::Retire { isolate } => map.retire_isolate(isolate, e.t),
        }
    }
}

/// Applies every logged event to `map` (held by the caller).
fn drain_into(map: &mut CodeMap) {
    // The spare buffer is only touched by a holder of the map.
    let mut spare = lock(&SPARE);
    spare.events.clear();
    spare.bytes.clear();
    spare.reserve();
    std::mem::swap(&mut *lock(&LOG), &mut *spare);
    apply(map, &spare);
}

/// Appends an event (name bytes copied). Never waits for the map's lock:
/// a thread that holds the map (symbolizing) and calls into V8 may
/// trigger a GC whose code moves arrive here, on the same thread or on GC
/// threads it waits for, and waiting would deadlock. Folds the log into
/// the map when it is long and the map is free.
fn submit(op: RawOp, start: u64, len: u64, t: u64, name: &[u8]) {
    let waiting = {
        let mut log = lock(&LOG);
        log.reserve();
        let at = log.bytes.len() as u32;
        log.bytes.extend_from_slice(name);
        log.events.push(RawEvent { op, start, len, t, name: (at, name.len() as u32) });
        log.events.len()
    };
    if waiting >= FOLD_AT {
        let guard = match MAP.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut map) = guard {
            drain_into(&mut map);
        }
    }
}

/// The code map, locked and up to date, for symbolization (batch lookups
/// under one lock). Holding it is safe even across calls into V8: code
/// events that arrive meanwhile are queued and applied at the next call.
pub fn code_map() -> MutexGuard<'static, CodeMap> {
    let mut map = lock(&MAP);
    drain_into(&mut map);
    map
}

extern "C" fn on_jit_event(event: *const JitCodeEvent) {
    if event.is_null() {
        return;
    }
    // SAFETY: V8 passes a valid event for the duration of the call; the
    // struct mirror matches this version's layout (checked by abi.rs's test
    // for every supported version; unsupported versions never install).
    let e = unsafe { &*event };
    EVENTS.fetch_add(1, Ordering::Relaxed);
    let t = now_ns();
    let start = e.code_start as u64;
    let kind = match e.code_type {
        jit_code_type::BYTE_CODE => CodeKind::Bytecode,
        jit_code_type::WASM_CODE => CodeKind::Wasm,
        _ => CodeKind::Jit,
    };
    match e.type_ {
        jit_event::CODE_ADDED => {
            // SAFETY: for CODE_ADDED the union holds `name`, valid for the
            // call (possibly not NUL-terminated; `len` bytes).
            let name = unsafe { e.data.name };
            let bytes = if name.str.is_null() || name.len == 0 {
                &[][..]
            } else {
                // SAFETY: V8 guarantees `len` readable bytes at `str`.
                unsafe { std::slice::from_raw_parts(name.str, name.len) }
            };
            // Embedded builtins are one copy shared by every isolate: owned
            // by none (0), so a worker's exit does not retire them.
            let shared = EMBEDDED.get().is_some_and(|r| r.contains(start));
            let isolate = if shared { 0 } else { registry::serial_of(e.isolate).unwrap_or(0) };
            // A function of a script without a name: its sourceURL or its
            // script's id as its URL. V8 sets `script` only for code of a
            // Script.
            let mut renamed = [0u8; 1024];
            let mut source_url = [0u8; 512];
            let bytes = match api_if_resolved() {
                Some(api) if !e.script.is_null() && kind != CodeKind::Wasm => {
                    // Asked only for a name with an empty URL.
                    let source_url = &mut source_url;
                    let script = move || {
                        // Moved into the closure's body, so the bytes outlive it.
                        let buf = source_url;
                        // SAFETY (both calls): `script` is a
                        // Local<UnboundScript> V8 made for this event's
                        // SharedFunctionInfo, whose script is a Script,
                        // valid during the callback, which runs on the
                        // isolate's thread with a HandleScope open (the
                        // calls may make handles there, as any API call may).
                        let n = unsafe { api.source_url(e.isolate, e.script, &mut buf[..]) };
                        // SAFETY: as above.
                        let id = api.unbound_script_get_id.map_or(-1, |get_id| unsafe { get_id(e.script) });
                        let script = unnamed_scripts::Script { source_url: n.map(|n| &buf[..n]), id };
                        unnamed_scripts::remember(e.isolate as usize, &script);
                        script
                    };
                    let bytes = match unnamed_scripts::with_script_url(bytes, script, &mut renamed) {
                        Some(n) => &renamed[..n],
                        None => bytes,
                    };
                    note_inline_map(api, e, bytes);
                    bytes
                }
                _ => bytes,
            };
            submit(RawOp::Add { kind, isolate }, start, e.code_len as u64, t, bytes);
        }
        jit_event::CODE_MOVED => {
            // SAFETY: for CODE_MOVED the union holds `new_code_start`.
            let to = unsafe { e.data.new_code_start } as u64;
            submit(RawOp::Move { to }, start, e.code_len as u64, t, &[]);
        }
        jit_event::CODE_REMOVED => submit(RawOp::Remove, start, 0, t, &[]),
        // Line-position events are not requested and not needed: names
        // carry line and column.
        _ => {}
    }
}

/// Notes the inline source map of the script of a code event's function
/// named `name`, the first time this thread sees the script (see
/// [`script_maps`]).
fn note_inline_map(api: &Api, e: &JitCodeEvent, name: &[u8]) {
    if !script_maps::may_be_worth_noting(name) {
        return;
    }
    let Some(get_id) = api.unbound_script_get_id else { return };
    // SAFETY: `e.script` is a Local<UnboundScript> valid during the
    // callback, on the isolate's thread (see the caller).
    let id = unsafe { get_id(e.script) };
    if id < 0 || !script_maps::first_sight(e.isolate as usize, id) {
        return;
    }
    let Some(url) = script_maps::worth_noting(&String::from_utf8_lossy(name)) else { return };
    let max = script_maps::MAX_MAP_BYTES as usize;
    // SAFETY: as above; the call may make handles in the callback's scope.
    let Some(map) = (unsafe { api.source_mapping_url(e.isolate, e.script, max) }) else { return };
    if map.starts_with("data:") {
        // Too large, or over the total: those functions keep their compiled
        // positions.
        let _ = script_maps::note(&url, &map);
    }
}

/// Whether isolates should have the handler now.
fn wanted() -> bool {
    let keep = match policy() {
        Policy::FromLoad => true,
        Policy::FromFirstStart => EVER_WANTED.load(Ordering::Acquire),
        Policy::WhileSampling => false,
    };
    (WANTED.load(Ordering::Acquire) || keep) && ALLOWED.load(Ordering::Acquire)
}

/// Installs or clears the handler on the calling thread's isolate to match
/// the wanted state. Runs on the isolate's own thread only.
fn reconcile_current(api: &Api, isolate: *mut Isolate, serial: u32) {
    reconcile_current_with(api, isolate, serial, false)
}

/// As [`reconcile_current`]; with `defer_enumeration`, a handler that must
/// enumerate the existing code is installed without, and the enumeration
/// runs at the thread's next interrupt check: new code (OSR code included,
/// which enumeration never reports) is seen from now on, and the caller
/// does not wait for the heap walk.
fn reconcile_current_with(api: &Api, isolate: *mut Isolate, serial: u32, defer_enumeration: bool) {
    let want = wanted();
    // Every caller holds `LIFECYCLE`, so this stays true while `INSTALLED`
    // is let go below.
    let is_on = lock(&INSTALLED).get(&serial).copied().unwrap_or(false);
    if want == is_on {
        return;
    }
    // Another copy of the addon may name this isolate's JavaScript with
    // the one slot: asked without `INSTALLED` held, since the question
    // takes the loader's lock.
    if want && super::other_copies::holder(isolate as usize).is_some() {
        return;
    }
    let mut installed = lock(&INSTALLED);
    if want {
        let t0 = now_ns();
        let cpu0 = thread_cpu_ns();
        let enumerate = enumerate_on_install();
        let options = if enumerate && !defer_enumeration {
            INSTALLS_ENUMERATING.fetch_add(1, Ordering::Relaxed);
            lock(&ENUMERATED).insert(serial, true);
            JIT_CODE_EVENT_ENUM_EXISTING
        } else {
            JIT_CODE_EVENT_DEFAULT
        };
        // SAFETY: `isolate` is the calling thread's current, live isolate
        // (checked by the callers); the handler is a valid `extern "C"`
        // function that lives as long as the (pinned) library.
        unsafe { (api.set_jit_code_event_handler)(isolate, options, Some(on_jit_event)) };
        LAST_INSTALL_NS.store(now_ns() - t0, Ordering::Relaxed);
        INSTALL_CPU_NS.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
        INSTALLS.fetch_add(1, Ordering::Relaxed);
        if enumerate && defer_enumeration {
            lock(&ENUMERATED).insert(serial, true);
            INTERRUPTS_REQUESTED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the calling thread's own, live isolate; RequestInterrupt
            // may be called from any thread; the data is an integer.
            unsafe { (api.request_interrupt)(isolate, on_enumerate_interrupt, serial as usize as *mut c_void) };
        }
    } else {
        // SAFETY: as above; a null handler removes ours.
        unsafe { (api.set_jit_code_event_handler)(isolate, JIT_CODE_EVENT_DEFAULT, None) };
    }
    installed.insert(serial, want);
    super::other_copies::set_held(isolate as usize, want);
}

extern "C" fn on_interrupt(isolate: *mut Isolate, data: *mut c_void) {
    INTERRUPTS_RUN.fetch_add(1, Ordering::Relaxed);
    let Ok(api) = api() else { return };
    let serial = data as usize as u32;
    let _guard = lock(&LIFECYCLE);
    // Only if that registration is still this thread's, and current.
    let tid = crate::sampler::thread_id::current();
    let Some(reg) = registry::lookup_tid(tid) else { return };
    // SAFETY: TryGetCurrent reads a thread-local.
    let current = unsafe { (api.try_get_current)() };
    if reg.serial != serial || reg.isolate != isolate as usize || current != isolate {
        return;
    }
    reconcile_current(api, isolate, serial);
}

/// Runs on a registered thread at its next interrupt check: enumerates
/// its isolate's existing code, which it skipped when it was installed.
extern "C" fn on_enumerate_interrupt(isolate: *mut Isolate, data: *mut c_void) {
    INTERRUPTS_RUN.fetch_add(1, Ordering::Relaxed);
    let Ok(api) = api() else { return };
    let serial = data as usize as u32;
    let _guard = lock(&LIFECYCLE);
    let tid = crate::sampler::thread_id::current();
    let Some(reg) = registry::lookup_tid(tid) else { return };
    // SAFETY: TryGetCurrent reads a thread-local.
    let current = unsafe { (api.try_get_current)() };
    if reg.serial != serial || reg.isolate != isolate as usize || current != isolate {
        return;
    }
    if !lock(&INSTALLED).get(&serial).copied().unwrap_or(false) {
        return;
    }
    let cpu0 = thread_cpu_ns();
    INSTALLS_ENUMERATING.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the calling thread's current, live isolate; installing the
    // same handler again with the enumeration option only reports the
    // existing code.
    unsafe { (api.set_jit_code_event_handler)(isolate, JIT_CODE_EVENT_ENUM_EXISTING, Some(on_jit_event)) };
    INSTALL_CPU_NS.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
}

/// Asks thread `tid`'s isolate to enumerate its existing code, once: for
/// a thread whose handler was installed without (it was created while
/// sampling) and whose samples show code the map does not know (compiled
/// before its registration). Call from any thread but a signal handler.
pub fn request_enumeration(tid: u64) {
    let Ok(api) = api() else { return };
    let _guard = lock(&LIFECYCLE);
    let Some(reg) = registry::lookup_tid(tid) else { return };
    if lock(&ENUMERATED).insert(reg.serial, true).is_some() {
        return;
    }
    INTERRUPTS_REQUESTED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: registered, and its thread cannot finish unregistering (and
    // so dispose of it) while we hold LIFECYCLE; RequestInterrupt is
    // documented as callable from any thread; the data is an integer.
    unsafe {
        (api.request_interrupt)(reg.isolate as *mut Isolate, on_enumerate_interrupt, reg.serial as usize as *mut c_void)
    };
}

/// The code map if no one holds it (for checks that may be skipped).
pub fn try_code_map() -> Option<MutexGuard<'static, CodeMap>> {
    let mut map = match MAP.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    drain_into(&mut map);
    Some(map)
}

/// Brings every registered isolate to the wanted state: the caller's own
/// isolate directly, the others through `RequestInterrupt`.
fn reconcile_all(api: &Api, defer_enumeration: bool) {
    let _guard = lock(&LIFECYCLE);
    // SAFETY: TryGetCurrent reads a thread-local.
    let current = unsafe { (api.try_get_current)() };
    let want = wanted();
    for Registered { isolate, serial, .. } in registry::all() {
        let isolate = isolate as *mut Isolate;
        // Already as wanted (the handler stays installed between
        // sessions): nothing to ask of that thread.
        if lock(&INSTALLED).get(&serial).copied().unwrap_or(false) == want {
            continue;
        }
        if isolate == current {
            reconcile_current_with(api, isolate, serial, defer_enumeration);
        } else {
            INTERRUPTS_REQUESTED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the isolate is registered, and its thread cannot
            // finish unregistering (and so dispose of it) while we hold
            // LIFECYCLE; RequestInterrupt is documented as callable from any
            // thread. The data is a plain integer, nothing to free.
            unsafe { (api.request_interrupt)(isolate, on_interrupt, serial as usize as *mut c_void) };
        }
    }
}

/// Starts collecting code events on every registered isolate (call from
/// `start()`, on a JS thread). Returns false if the layer is unavailable or
/// turned off.
pub fn enable() -> bool {
    enable_with(false)
}

/// Like [`enable`], for `start()`: the calling thread's isolate enumerates
/// its existing code after `start()` returns, at its next interrupt check,
/// instead of inside it (5-12 ms in a fresh Node process).
pub fn enable_deferring_enumeration() -> bool {
    enable_with(true)
}

fn enable_with(defer_enumeration: bool) -> bool {
    let Ok(api) = api() else { return false };
    if !ALLOWED.load(Ordering::Acquire) {
        return false;
    }
    if let Some(t) = boot_ticks_now() {
        SESSION_START_TICKS.store(t, Ordering::Release);
    }
    super::other_copies::reset_left();
    WANTED.store(true, Ordering::Release);
    EVER_WANTED.store(true, Ordering::Release);
    reconcile_all(api, defer_enumeration);
    true
}

/// Stops collecting code events (call from `stop()`), unless the policy
/// keeps them ([`Policy::FromLoad`], [`Policy::FromFirstStart`]). The map
/// is kept, so the samples taken so far can still be named.
pub fn disable() {
    WANTED.store(false, Ordering::Release);
    if let Ok(api) = api() {
        reconcile_all(api, false);
    }
}

/// Whether code events are wanted now.
pub fn is_enabled() -> bool {
    WANTED.load(Ordering::Acquire)
}

/// Chooses when the handler is installed (default: while sampling). Takes
/// effect for each isolate at its next registration, `enable()` or
/// `disable()`.
pub fn set_policy(policy: Policy) {
    FROM_LOAD.store(policy == Policy::FromLoad, Ordering::Release);
    WHILE_SAMPLING.store(policy == Policy::WhileSampling, Ordering::Release);
}

pub fn policy() -> Policy {
    if FROM_LOAD.load(Ordering::Acquire) {
        Policy::FromLoad
    } else if WHILE_SAMPLING.load(Ordering::Acquire) {
        Policy::WhileSampling
    } else {
        Policy::FromFirstStart
    }
}

/// Lets the user veto the JIT code event handler (e.g. because another
/// tool in the process uses the same slot). Takes effect at the next
/// `enable()`/`disable()`.
pub fn set_enabled_by_user(allowed: bool) {
    ALLOWED.store(allowed, Ordering::Release);
}

/// The embedded builtins, once a thread has registered. Async-signal-safe
/// (one atomic load).
#[inline]
pub fn embedded_range() -> Option<CodeRange> {
    EMBEDDED.get().copied()
}

/// Called on a JS thread right after it registered: installs the handler
/// if sampling is already running.
pub(crate) fn on_registered(api: &Api, reg: Registered) {
    // SAFETY: the caller's own, live isolate; the blob is process-wide.
    EMBEDDED.get_or_init(|| unsafe { api.embedded_code_range(reg.isolate as *mut Isolate) });
    let _guard = lock(&LIFECYCLE);
    reconcile_current(api, reg.isolate as *mut Isolate, reg.serial);
}

/// Called on a JS thread when it unregisters for the last time: clears the
/// handler and ends the isolate's code-map entries.
pub(crate) fn on_unregistered(api: &Api, reg: Registered) {
    // Taken before the registry entry goes away (by the caller, which
    // already holds it): see `lifecycle_guard`.
    lock(&ENUMERATED).remove(&reg.serial);
    let mut installed = lock(&INSTALLED);
    if installed.remove(&reg.serial).unwrap_or(false) {
        // SAFETY: on the isolate's own thread, before it is disposed of.
        unsafe { (api.set_jit_code_event_handler)(reg.isolate as *mut Isolate, JIT_CODE_EVENT_DEFAULT, None) };
        super::other_copies::set_held(reg.isolate, false);
    }
    drop(installed);
    submit(RawOp::Retire { isolate: reg.serial }, 0, 0, now_ns(), &[]);
}

/// The lock unregistration holds so no `RequestInterrupt` targets an
/// isolate being torn down.
pub(crate) fn lifecycle_guard() -> MutexGuard<'static, ()> {
    lock(&LIFECYCLE)
}

/// Counters for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default)]
pub struct EventStats {
    pub events: u64,
    pub installs: u64,
    pub interrupts_requested: u64,
    pub interrupts_run: u64,
    /// Time the last install took (it enumerates existing code), ns.
    pub last_install_ns: u64,
    /// CPU time of all installs, ns.
    pub install_cpu_ns: u64,
    /// Installs that enumerated the existing code.
    pub installs_enumerating: u64,
    pub installed_isolates: u64,
}

/// CPU time of all installs so far, ns (what [`stats`] gives, without its lock).
pub fn install_cpu_ns() -> u64 {
    INSTALL_CPU_NS.load(Ordering::Relaxed)
}

pub fn stats() -> EventStats {
    EventStats {
        events: EVENTS.load(Ordering::Relaxed),
        installs: INSTALLS.load(Ordering::Relaxed),
        interrupts_requested: INTERRUPTS_REQUESTED.load(Ordering::Relaxed),
        interrupts_run: INTERRUPTS_RUN.load(Ordering::Relaxed),
        last_install_ns: LAST_INSTALL_NS.load(Ordering::Relaxed),
        install_cpu_ns: INSTALL_CPU_NS.load(Ordering::Relaxed),
        installs_enumerating: INSTALLS_ENUMERATING.load(Ordering::Relaxed),
        installed_isolates: lock(&INSTALLED).values().filter(|v| **v).count() as u64,
    }
}

/// Address ranges that tell V8 frames apart, for merging JS frames into a
/// native stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V8Ranges {
    /// Embedded builtins in the node binary (the interpreter entry
    /// trampoline among them); the code map names builtins here.
    pub embedded: CodeRange,
    /// The copy of `embedded` that V8 mapped into the code range (Node 20+
    /// on x64 Linux), empty if none: see `remap.rs`.
    pub embedded_alias: CodeRange,
    /// The JIT code range of the isolate (empty if V8 reserves none).
    pub code: CodeRange,
}

impl V8Ranges {
    /// `addr`, moved from the remapped builtins copy to the binary's copy
    /// (where the code map and the native symbols know it).
    #[inline]
    pub fn canonical(&self, addr: u64) -> u64 {
        if self.embedded_alias.contains(addr) {
            addr - self.embedded_alias.start + self.embedded.start
        } else {
            addr
        }
    }

    /// The other way: `addr` in the binary's copy of the builtins, moved to
    /// the remapped copy (if there is one).
    #[inline]
    pub fn aliased(&self, addr: u64) -> u64 {
        if self.embedded_alias.len > 0 && self.embedded.contains(addr) {
            addr - self.embedded.start + self.embedded_alias.start
        } else {
            addr
        }
    }
}

/// The ranges for an isolate. The caller guarantees it is alive (it is
/// registered and its thread has not reached its cleanup hook, or it is the
/// caller's own). The ranges are fixed for the isolate's life; this reads
/// `/proc/self/maps` once, so call it at registration, not per sample.
pub fn ranges_for(isolate: usize) -> Option<V8Ranges> {
    let api = api().ok()?;
    if isolate == 0 {
        return None;
    }
    let isolate = isolate as *mut Isolate;
    // SAFETY: the caller passes a live isolate; both calls only read fields
    // fixed at isolate creation.
    let (embedded, code) = unsafe { (api.embedded_code_range(isolate), api.code_range(isolate)) };
    let embedded_alias = super::remap::detect(embedded, code).unwrap_or_default();
    Some(V8Ranges { embedded, embedded_alias, code })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v8::abi::{JitEventData, JitName};

    fn added(start: u64, name: &'static str) -> JitCodeEvent {
        JitCodeEvent {
            type_: jit_event::CODE_ADDED,
            code_type: jit_code_type::JIT_CODE,
            code_start: start as *mut c_void,
            code_len: 0x40,
            script: std::ptr::null_mut(),
            user_data: std::ptr::null_mut(),
            wasm_source_info: std::ptr::null_mut(),
            data: JitEventData { name: JitName { str: name.as_ptr(), len: name.len() } },
            isolate: std::ptr::null_mut(),
        }
    }

    /// A code event that arrives while this very thread holds the map (as
    /// when a symbolizer's call into V8 triggers a GC) is queued, not
    /// waited for, and applied in order by the next user of the map.
    #[test]
    fn events_never_wait_for_the_map() {
        let base = 0x7ff0_0000_0000u64;
        let held = code_map();
        on_jit_event(&added(base, "JS:*a /a.js:1:1"));
        let mut moved = added(base, "");
        moved.type_ = jit_event::CODE_MOVED;
        moved.data = JitEventData { new_code_start: (base + 0x1000) as *mut c_void };
        on_jit_event(&moved);
        assert!(held.lookup(base, u64::MAX - 1).is_none(), "not applied while held");
        drop(held);
        let map = code_map();
        assert_eq!(map.lookup(base + 0x1010, u64::MAX - 1).map(|h| h.raw), Some("JS:*a /a.js:1:1"));
        assert!(map.lookup(base + 0x10, u64::MAX - 1).is_some_and(|h| !h.exact), "moved away");
        drop(map);
        // The callback only logs; the next reader of the map applies it.
        on_jit_event(&added(base + 0x2000, "JS:*b /b.js:1:1"));
        assert!(lock(&MAP).lookup(base + 0x2000, u64::MAX - 1).is_none(), "logged, not applied");
        assert!(code_map().lookup(base + 0x2000, u64::MAX - 1).is_some());
        on_jit_event(std::ptr::null());
    }
}
