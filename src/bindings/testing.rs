//! Test-only JavaScript entry points, built only with the `testing` cargo
//! feature (the test and benchmark builds): `__v8*` for
//! `__test__/v8.test.js`, and the internals the benchmark and stress suites
//! read. The release addon exports none of them.
//!
//! Besides thin wrappers (register, code events, stats), this holds a small
//! signal-driven sampler of its own, so the layer is exercised exactly as
//! the real sampler will use it: a helper thread sends a real-time signal
//! (a different one from the sampler's) to every registered JS thread, and
//! the handler, on the interrupted thread, calls [`sample_js`] with the
//! registers from its `ucontext_t`, timing the call, and also walks the
//! native frame-pointer chain for comparison. Records go to a preallocated
//! buffer; `__v8ProfileStop` names them with the code map.

use napi_derive::napi;
use serde_json::{json, Value};

use crate::sampler::walker::Registers;
use crate::v8::{
    code_map, events, parse_js_name, register_current_thread, sample_js, unregister_current_thread, CodeMap,
};

fn hex(a: u64) -> String {
    format!("{a:#x}")
}

/// Names `frames` as of time `t`, as JSON objects.
fn describe(map: &CodeMap, frames: &[u64], t: u64, ranges: Option<events::V8Ranges>) -> Vec<Value> {
    frames
        .iter()
        .map(|&a| {
            let region = match ranges {
                Some(r) if r.embedded.contains(a) => "embedded",
                Some(r) if r.embedded_alias.contains(a) => "embedded-alias",
                Some(r) if r.code.contains(a) => "code-range",
                _ => "other",
            };
            let canonical = ranges.map_or(a, |r| r.canonical(a));
            match map.lookup(canonical, t) {
                Some(h) => {
                    let n = parse_js_name(h.raw);
                    json!({
                        "addr": hex(a), "name": n.display, "raw": h.raw, "js": n.is_js,
                        "tier": n.tier.map(String::from), "kind": format!("{:?}", h.kind),
                        "exact": h.exact, "offset": canonical.saturating_sub(h.start), "len": h.len, "region": region,
                    })
                }
                None => json!({ "addr": hex(a), "name": null, "region": region }),
            }
        })
        .collect()
}

fn current_ranges() -> Option<events::V8Ranges> {
    let tid = crate::sampler::thread_id::current();
    crate::v8::registry::lookup_tid(tid).and_then(|r| events::ranges_for(r.isolate))
}

/// Registers the calling JS thread; returns JSON `{ok, ...}`.
#[napi(js_name = "__v8Register")]
pub fn v8_register() -> String {
    let out = match register_current_thread() {
        Ok(r) => {
            #[cfg(target_os = "linux")]
            harness::remember_stack_bounds(r.tid);
            json!({
                "ok": true, "tid": r.tid, "isolate": hex(r.isolate as u64), "serial": r.serial,
                "version": crate::v8::v8_version().ok(),
                "embedded": [hex(r.ranges.embedded.start), r.ranges.embedded.len],
                "codeRange": [hex(r.ranges.code.start), r.ranges.code.len],
            })
        }
        Err(e) => json!({ "ok": false, "error": e.to_string(), "version": crate::v8::v8_version().ok() }),
    };
    out.to_string()
}

/// Registers the calling JS thread and unregisters it from an environment
/// cleanup hook, as the addon's module init is meant to (the hook runs on
/// the thread, before Node disposes of the isolate, also for a worker that
/// is terminated).
#[napi(js_name = "__v8RegisterWithCleanupHook")]
pub fn v8_register_with_cleanup_hook(env: napi::Env) -> String {
    let out = v8_register();
    if out.contains("\"ok\":true") {
        let _ = env.add_env_cleanup_hook((), |_| unregister_current_thread());
    }
    out
}

/// How many JS threads are registered now.
#[napi(js_name = "__v8RegisteredCount")]
pub fn v8_registered_count() -> u32 {
    crate::v8::registry::all().len() as u32
}

#[napi(js_name = "__v8Unregister")]
pub fn v8_unregister() {
    unregister_current_thread()
}

#[napi(js_name = "__v8EnableCodeEvents")]
pub fn v8_enable_code_events() -> bool {
    events::enable()
}

/// `"load"` installs the handler from registration on, anything else only
/// while sampling.
#[napi(js_name = "__v8SetCodeEventPolicy")]
pub fn v8_set_code_event_policy(policy: String) {
    events::set_policy(match policy.as_str() {
        "load" => events::Policy::FromLoad,
        "first-start" => events::Policy::FromFirstStart,
        _ => events::Policy::WhileSampling,
    })
}

#[napi(js_name = "__v8DisableCodeEvents")]
pub fn v8_disable_code_events() {
    events::disable()
}

/// Event and map counters, as JSON.
#[napi(js_name = "__v8Stats")]
pub fn v8_stats() -> String {
    let e = events::stats();
    let m = code_map().stats();
    let d = crate::v8::discover::stats();
    json!({
        "discovery": { "noted": d.noted, "posted": d.posted, "withdrawn": d.withdrawn, "requested": d.requested,
                       "registered": d.registered, "noEnvironment": d.no_environment, "waitedNsMax": d.waited_ns_max,
                       "registerCpuNs": d.register_cpu_ns },
        "registered": crate::v8::registry::all().len(),
        "events": e.events, "installs": e.installs, "interruptsRequested": e.interrupts_requested,
        "interruptsRun": e.interrupts_run, "lastInstallNs": e.last_install_ns, "installCpuNs": e.install_cpu_ns, "installsEnumerating": e.installs_enumerating, "installCpuNs": e.install_cpu_ns, "installedIsolates": e.installed_isolates,
        "map": { "added": m.added, "moved": m.moved, "removed": m.removed, "unknown": m.unknown, "evicted": m.evicted,
                 "forgotten": m.forgotten, "dropped": m.dropped, "repeated": m.repeated, "agedOut": m.aged_out, "live": m.live, "dead": m.dead, "names": m.names },
    })
    .to_string()
}

/// Samples the calling thread from inside this native call, as Node's
/// diagnostic report does (`pc` null, `sp`/`fp` at a local): V8 starts from
/// the API callback's exit frame. Returns JSON `{status, vmState, frames}`.
#[napi(js_name = "__v8SelfSample")]
pub fn v8_self_sample() -> String {
    let local = 0u64;
    let here = std::hint::black_box(&local) as *const u64 as u64;
    let regs = Registers { pc: 0, sp: here, fp: here, lr: 0 };
    let mut out = [0u64; 64];
    let s = sample_js(&regs, &mut out);
    let t = events::now_ns();
    json!({
        "status": format!("{:?}", s.status), "vmState": s.vm_state.as_str(), "count": s.count,
        "frames": describe(&code_map(), &out[..s.count], t, current_ranges()),
    })
    .to_string()
}

/// Starts the test sampler: every `interval_us`, a signal to each
/// registered JS thread.
#[napi(js_name = "__v8ProfileStart")]
pub fn v8_profile_start(interval_us: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        harness::start(interval_us.max(50) as u64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = interval_us;
        false
    }
}

/// Stops the test sampler and returns its records, named, as JSON.
#[napi(js_name = "__v8ProfileStop")]
pub fn v8_profile_stop() -> String {
    #[cfg(target_os = "linux")]
    {
        harness::stop().to_string()
    }
    #[cfg(not(target_os = "linux"))]
    {
        "[]".to_string()
    }
}

/// Samples a fresh native thread (no isolate) with the test signal and
/// returns its status.
#[napi(js_name = "__v8SampleForeignThread")]
pub fn v8_sample_foreign_thread() -> String {
    #[cfg(target_os = "linux")]
    {
        harness::sample_foreign_thread()
    }
    #[cfg(not(target_os = "linux"))]
    {
        String::new()
    }
}

/// Why JavaScript frames cannot be named from V8 here (null if they can).
#[napi(js_name = "_jsNamesUnavailable")]
pub fn js_names_unavailable() -> Option<String> {
    super::js_names_unavailable()
}

/// How interpreted frames are found: "learned" once the frame
/// layout has been learned from V8 (then the handler reads it from the
/// frames), "learning" before (V8's GetStackSample in the handler).
#[napi(js_name = "_jsFramesMode")]
pub fn js_frames_mode() -> String {
    match crate::v8::slots::learned() {
        Some(l) => format!("learned {}:{}:{}", l.array, l.offset, l.smi_shift),
        None if crate::v8::slots::failed() => "failed".into(),
        None => "learning".into(),
    }
}

/// Makes the interpreted-frame layout fail to learn, as on a V8 whose
/// frames agree with no candidate: only compiled code is named then.
#[napi(js_name = "__v8FailLayoutLearning")]
pub fn v8_fail_layout_learning() {
    crate::v8::slots::give_up();
}

/// For `npm run bench`: the kernel's share of a sample, the time
/// of an empty round trip of the sampling signal to the calling thread, in
/// nanoseconds, one entry per iteration. Empty where the backend does not
/// use signals (macOS).
#[napi(js_name = "_benchSignalRoundTrip")]
pub fn bench_signal_round_trip(iterations: u32) -> napi::bindgen_prelude::Result<Vec<f64>, &'static str> {
    #[cfg(target_os = "linux")]
    {
        let ns = crate::platform::linux::signal::round_trip_ns(iterations.min(1_000_000) as usize)
            .map_err(super::js_error)?;
        Ok(ns.into_iter().map(|v| v as f64).collect())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = iterations;
        Ok(Vec::new())
    }
}

#[cfg(target_os = "linux")]
mod harness {
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
    use std::sync::{Mutex, OnceLock};
    use std::thread::JoinHandle;

    use serde_json::{json, Value};

    use super::describe;
    use crate::sampler::walker::{walk_stack, Registers, StackBounds, WalkEnd};
    use crate::v8::merge::{classifier, merge_stacks, AddrClass, Merged};
    use crate::v8::{code_map, events, registry, sample_js, SampleStatus};

    const FRAMES: usize = 64;
    const CAPACITY: usize = 1 << 14;

    struct Record {
        done: AtomicU8,
        tid: u64,
        t_ns: u64,
        gss_ns: u64,
        status: SampleStatus,
        vm_state: &'static str,
        count: usize,
        native_count: usize,
        walk_end: WalkEnd,
        frames: [u64; FRAMES],
        native: [u64; FRAMES],
    }

    struct Ring {
        next: AtomicUsize,
        recs: Box<[UnsafeCell<Record>]>,
    }
    // SAFETY: each record is written only by the handler that claimed its
    // index (fetch_add), and read only after its `done` flag (Release/Acquire).
    unsafe impl Sync for Ring {}

    static RING: OnceLock<Ring> = OnceLock::new();
    static ACTIVE: AtomicBool = AtomicBool::new(false);
    static SIGNAL: AtomicI32 = AtomicI32::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

    /// Stack bounds of registered threads, for the native comparison walk.
    const BOUNDS: usize = 64;
    static BOUND_TID: [AtomicU64; BOUNDS] = [const { AtomicU64::new(0) }; BOUNDS];
    static BOUND_LO: [AtomicU64; BOUNDS] = [const { AtomicU64::new(0) }; BOUNDS];
    static BOUND_HI: [AtomicU64; BOUNDS] = [const { AtomicU64::new(0) }; BOUNDS];

    pub fn remember_stack_bounds(tid: u64) {
        // SAFETY: pthread_getattr_np fills `attr` for the calling thread;
        // it is destroyed after use.
        let (lo, hi) = unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
                return;
            }
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                return;
            }
            (addr as u64, addr as u64 + size as u64)
        };
        for i in 0..BOUNDS {
            if BOUND_TID[i].load(Ordering::Acquire) == tid
                || BOUND_TID[i].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                BOUND_LO[i].store(lo, Ordering::Release);
                BOUND_HI[i].store(hi, Ordering::Release);
                return;
            }
        }
    }

    fn bounds_of(tid: u64) -> StackBounds {
        for i in 0..BOUNDS {
            if BOUND_TID[i].load(Ordering::Acquire) == tid {
                return StackBounds::new(BOUND_LO[i].load(Ordering::Acquire), BOUND_HI[i].load(Ordering::Acquire));
            }
        }
        StackBounds::EMPTY
    }

    fn ring() -> &'static Ring {
        RING.get_or_init(|| Ring {
            next: AtomicUsize::new(0),
            recs: (0..CAPACITY)
                .map(|_| {
                    UnsafeCell::new(Record {
                        done: AtomicU8::new(0),
                        tid: 0,
                        t_ns: 0,
                        gss_ns: 0,
                        status: SampleStatus::Unsupported,
                        vm_state: "",
                        count: 0,
                        native_count: 0,
                        walk_end: WalkEnd::NoPc,
                        frames: [0; FRAMES],
                        native: [0; FRAMES],
                    })
                })
                .collect(),
        })
    }

    #[inline]
    fn gettid() -> u64 {
        // SAFETY: gettid takes no arguments.
        unsafe { libc::syscall(libc::SYS_gettid) as u64 }
    }

    extern "C" fn on_signal(_sig: libc::c_int, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
        // SAFETY: the errno slot of this thread, restored before returning.
        let errno = unsafe { *libc::__errno_location() };
        handle(uc);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    fn handle(uc: *mut libc::c_void) {
        if !ACTIVE.load(Ordering::Acquire) || uc.is_null() {
            return;
        }
        let Some(ring) = RING.get() else { return };
        let i = ring.next.fetch_add(1, Ordering::AcqRel);
        let Some(cell) = ring.recs.get(i) else { return };
        // SAFETY: index `i` was claimed by this handler alone.
        let rec = unsafe { &mut *cell.get() };
        // SAFETY: the kernel's ucontext for this signal.
        let mc = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
        #[cfg(target_arch = "x86_64")]
        let regs = Registers {
            pc: mc.gregs[libc::REG_RIP as usize] as u64,
            sp: mc.gregs[libc::REG_RSP as usize] as u64,
            fp: mc.gregs[libc::REG_RBP as usize] as u64,
            lr: 0,
        };
        #[cfg(target_arch = "aarch64")]
        let regs = Registers { pc: mc.pc, sp: mc.sp, fp: mc.regs[29], lr: mc.regs[30] };
        rec.tid = gettid();
        let t0 = events::now_ns();
        let s = sample_js(&regs, &mut rec.frames);
        let t1 = events::now_ns();
        let walk = walk_stack(&regs, bounds_of(rec.tid), FRAMES, &mut rec.native);
        rec.t_ns = t0;
        rec.gss_ns = t1 - t0;
        rec.status = s.status;
        rec.vm_state = s.vm_state.as_str();
        rec.count = s.count;
        rec.native_count = walk.depth;
        rec.walk_end = walk.end;
        rec.done.store(1, Ordering::Release);
    }

    fn install() -> Option<i32> {
        let installed = SIGNAL.load(Ordering::Acquire);
        if installed != 0 {
            return Some(installed);
        }
        // The lowest free real-time signal (the sampler takes the highest).
        for sig in libc::SIGRTMIN() + 2..libc::SIGRTMAX() {
            // SAFETY: querying and installing a disposition with fully
            // initialised structs; the handler is async-signal-safe.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                if libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 {
                    SIGNAL.store(sig, Ordering::Release);
                    return Some(sig);
                }
            }
        }
        None
    }

    fn send(tid: u64, sig: i32) {
        // SAFETY: tgkill to a thread of this process with our own signal.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, sig) };
    }

    pub fn start(interval_us: u64) -> bool {
        let Some(sig) = install() else { return false };
        let ring = ring();
        ring.next.store(0, Ordering::Release);
        for r in ring.recs.iter() {
            // SAFETY: not active yet, so no handler touches the records.
            unsafe { (*r.get()).done.store(0, Ordering::Relaxed) };
        }
        STOP.store(false, Ordering::Release);
        ACTIVE.store(true, Ordering::Release);
        let handle = std::thread::spawn(move || {
            while !STOP.load(Ordering::Acquire) {
                for r in registry::all() {
                    send(r.tid, sig);
                }
                std::thread::sleep(std::time::Duration::from_micros(interval_us));
            }
        });
        *THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        true
    }

    fn records() -> Vec<Value> {
        let Some(ring) = RING.get() else { return Vec::new() };
        let n = ring.next.load(Ordering::Acquire).min(CAPACITY);
        let ranges: Vec<(u64, Option<events::V8Ranges>)> =
            registry::all().into_iter().map(|r| (r.tid, events::ranges_for(r.isolate))).collect();
        let mut out = Vec::with_capacity(n);
        let map = code_map();
        for cell in ring.recs.iter().take(n) {
            // SAFETY: read only after the handler published it.
            let r = unsafe { &*cell.get() };
            if r.done.load(Ordering::Acquire) == 0 {
                continue;
            }
            let rg = ranges.iter().find(|(t, _)| *t == r.tid).and_then(|(_, g)| *g);
            let frames = &r.frames[..r.count.min(FRAMES)];
            let native = &r.native[..r.native_count.min(FRAMES)];
            let rg_or_default = rg.unwrap_or_default();
            let classify = classifier(&map, &rg_or_default, r.t_ns);
            let mut merged = Vec::new();
            merge_stacks(native, r.walk_end, frames, &classify, &mut merged);
            // Diagnostics: every JS frame placed, in order; trampolines left.
            let placed: Vec<u64> = merged
                .iter()
                .filter_map(|m| match m {
                    Merged::Js { addr, .. } | Merged::Native(addr) if frames.contains(addr) => Some(*addr),
                    _ => None,
                })
                .collect();
            let unpaired = merged
                .iter()
                .filter(|m| matches!(m, Merged::Native(a) if classify(*a) == AddrClass::InterpreterSlot))
                .count();
            let merged_addrs: Vec<u64> = merged
                .iter()
                .map(|m| match m {
                    Merged::Js { addr, .. } | Merged::Native(addr) => *addr,
                })
                .collect();
            out.push(json!({
                "tid": r.tid, "t": r.t_ns, "gssNs": r.gss_ns, "status": format!("{:?}", r.status),
                "vmState": r.vm_state, "frames": describe(&map, frames, r.t_ns, rg),
                "native": describe(&map, native, r.t_ns, rg), "walkEnd": format!("{:?}", r.walk_end),
                "merged": describe(&map, &merged_addrs, r.t_ns, rg),
                "allPlaced": is_subsequence(frames, &placed), "unpairedSlots": unpaired,
            }));
        }
        out
    }

    fn is_subsequence(needle: &[u64], hay: &[u64]) -> bool {
        let mut it = hay.iter();
        needle.iter().all(|n| it.any(|h| h == n))
    }

    pub fn stop() -> Value {
        STOP.store(true, Ordering::Release);
        if let Some(h) = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
        // Let signals already queued be delivered.
        std::thread::sleep(std::time::Duration::from_millis(20));
        ACTIVE.store(false, Ordering::Release);
        Value::Array(records())
    }

    pub fn sample_foreign_thread() -> String {
        let Some(sig) = install() else { return "no signal".into() };
        let ring = ring();
        let was_active = ACTIVE.swap(true, Ordering::AcqRel);
        let before = ring.next.load(Ordering::Acquire);
        let status = std::thread::spawn(move || {
            send(gettid(), sig);
            // The signal is delivered to this thread before tgkill returns.
            let i = ring.recs.iter().skip(before).position(|c| {
                // SAFETY: read after publication.
                let r = unsafe { &*c.get() };
                r.done.load(Ordering::Acquire) == 1 && r.tid == gettid()
            });
            i.map(|i| {
                // SAFETY: as above.
                let r = unsafe { &*ring.recs[before + i].get() };
                format!("{:?}", r.status)
            })
        })
        .join()
        .ok()
        .flatten();
        ACTIVE.store(was_active, Ordering::Release);
        status.unwrap_or_else(|| "none".into())
    }
}

/// The stall watcher's history, filled as `threads` busy threads sampled at
/// `hz` for `seconds` fill it while `keep_ms` is kept (the watcher's own
/// limits and chunk sizes), for the benchmark's memory figure. Each thread
/// has `stacks` distinct stacks of `depth` frames (a shared root half, as
/// real threads do) and every sample takes one at random, so consecutive
/// samples rarely share a row: the costly case. Returns JSON `{bytes,
/// peakBytes, rows, truncated}` (bytes: capacity held, spare chunk included).
#[napi(js_name = "__stallHistoryMemory")]
pub fn stall_history_memory(threads: u32, hz: u32, seconds: u32, keep_ms: u32, stacks: u32, depth: u32) -> String {
    use crate::sampler::history::{History, HistorySample, FLAG_CPU};
    let keep_ns = keep_ms as u64 * 1_000_000;
    let mut h = History::new(History::span_for(keep_ns), crate::stalls::observer::HISTORY_MAX_BYTES);
    let period = 1_000_000_000 / hz.max(1) as u64;
    let depth = depth.max(2) as u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut frames = vec![0u64; depth as usize];
    let mut peak = 0;
    for tick in 0..(seconds as u64 * hz as u64) {
        let t = tick * period;
        for tid in 0..threads as u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let which = rng % stacks.max(1) as u64;
            for (i, f) in frames.iter_mut().enumerate() {
                let i = i as u64;
                // Leaf first: the outer half is the thread's, the inner half the stack's.
                *f = if i >= depth / 2 { 0x10_0000 + tid * 0x1000 + i } else { 0x4000_0000 + which * 0x100 + i };
            }
            h.name_thread(tid + 1, "busy", false);
            h.push(HistorySample { tid: tid + 1, time_ns: t, frames: &frames, weight_ns: period, flags: FLAG_CPU });
        }
        h.trim(t.saturating_sub(keep_ns));
        peak = peak.max(h.bytes());
    }
    let s = h.stats();
    json!({ "bytes": s.bytes, "peakBytes": peak, "rows": s.rows, "truncated": s.truncated }).to_string()
}
