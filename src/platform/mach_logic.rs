//! The platform-independent half of the Mach backend.
//!
//! Everything the macOS backend decides, as opposed to the system calls it
//! makes, lives here so that it compiles and is unit-tested on Linux, where
//! CI runs tests; `platform::macos` only does FFI and calls into this module.
//! That covers:
//!
//! - classifying `kern_return_t` values into "thread gone" and "error";
//! - what the pthread introspection hook does to the thread registry on
//!   THREAD_START and THREAD_TERMINATE, and which port rights that leaves to
//!   release;
//! - the lock-free exit log and release queue the hook and the sampler share;
//! - merging a `task_threads` rescan into the registry, and bringing a
//!   session's registry up to date with the hook's;
//! - CPU time and timebase conversions, pointer-authentication masking, and
//!   interpreting the Rosetta and address-size sysctls;
//! - parsing a Mach-O image's load commands (for the module list).
//!
//! The numeric Mach constants are hard-coded here so the module needs no
//! Mach headers; `platform::macos` asserts at compile time that they equal
//! the `mach2` crate's.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sampler::backend::SkipReason;
use crate::sampler::error::{ErrorCode, SamplerError};
use crate::sampler::registry::{ThreadEntry, ThreadName, ThreadRegistry};
use crate::sampler::timebase::Timebase;
use crate::sampler::walker::{strip_pointer_tag, Registers, StackBounds};

// ---------------------------------------------------------------------------
// kern_return_t classification.

pub const KERN_SUCCESS: i32 = 0;
pub const KERN_INVALID_ARGUMENT: i32 = 4;
pub const KERN_TERMINATED: i32 = 37;
/// A `mach_msg_return_t`, returned by MIG calls (`thread_get_state`,
/// `thread_info`, ...) when the port is a dead name.
pub const MACH_SEND_INVALID_DEST: i32 = 0x1000_0003;

/// What a Mach call's return value means for sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernOutcome {
    Success,
    /// The thread has exited (or is exiting): a normal race, not an error.
    Gone,
    /// Anything else.
    Error(i32),
}

/// Classifies a return value. `KERN_TERMINATED` (the thread is terminating),
/// `KERN_INVALID_ARGUMENT` (the port no longer names a thread) and
/// `MACH_SEND_INVALID_DEST` (our send right became a dead name) all mean the
/// thread went away between discovery and the call.
pub fn classify(kr: i32) -> KernOutcome {
    match kr {
        KERN_SUCCESS => KernOutcome::Success,
        KERN_TERMINATED | KERN_INVALID_ARGUMENT | MACH_SEND_INVALID_DEST => KernOutcome::Gone,
        other => KernOutcome::Error(other),
    }
}

/// The skip reason for a failed `thread_suspend`: gone, or (any other
/// error) not stoppable on this tick, which the next tick retries.
pub fn suspend_skip_reason(kr: i32) -> SkipReason {
    match classify(kr) {
        KernOutcome::Gone => SkipReason::Gone,
        _ => SkipReason::Pending,
    }
}

// ---------------------------------------------------------------------------
// Time.

/// A `time_value_t` (seconds, microseconds) in nanoseconds. The kernel never
/// reports negative parts; if one appears it counts as zero rather than
/// wrapping into an enormous CPU time.
pub fn time_value_ns(seconds: i32, microseconds: i32) -> u64 {
    let s = u64::try_from(seconds).unwrap_or(0);
    let us = u64::try_from(microseconds).unwrap_or(0);
    s.saturating_mul(1_000_000_000).saturating_add(us.saturating_mul(1_000))
}

/// CPU time from `thread_basic_info`: user plus system time. The resolution
/// is a microsecond, which is fine for the idle rule: a thread that ran for
/// less than 1 µs in a sampling interval is idle for profiling purposes.
pub fn basic_info_cpu_ns(user: (i32, i32), system: (i32, i32)) -> u64 {
    time_value_ns(user.0, user.1).saturating_add(time_value_ns(system.0, system.1))
}

/// The `mach_absolute_time` deadline for `ns`, rounded up, so that a wait
/// never ends before `now_ns() >= ns` (rounding down would make the sampler
/// loop spin for the last fraction of a tick).
pub fn deadline_ticks(tb: &Timebase, ns: u64) -> u64 {
    let ticks = tb.ns_to_ticks(ns);
    if tb.ticks_to_ns(ticks) < ns {
        ticks.saturating_add(1)
    } else {
        ticks
    }
}

/// Nanoseconds between two `mach_absolute_time` readings; zero if the clock
/// appears to go backwards.
pub fn elapsed_ns(tb: &Timebase, start_ticks: u64, end_ticks: u64) -> u64 {
    tb.ticks_to_ns(end_ticks.saturating_sub(start_ticks))
}

// ---------------------------------------------------------------------------
// Pointer authentication and address masks.

/// Virtual-address bits assumed when `machdep.virtual_address_size` cannot
/// be read: macOS on Apple silicon uses 47-bit user addresses.
pub const DEFAULT_VA_BITS: u32 = 47;

/// Interprets `sysctlbyname("machdep.virtual_address_size")`: `rc` is its
/// return value, `value` what it wrote. Out-of-range answers fall back to
/// the default rather than producing a mask that cuts real addresses.
pub fn interpret_va_bits(rc: i32, value: i32) -> u32 {
    match u32::try_from(value) {
        Ok(bits) if rc == 0 && (32..=48).contains(&bits) => bits,
        _ => DEFAULT_VA_BITS,
    }
}

/// The mask that keeps `bits` low address bits.
pub fn va_mask(bits: u32) -> u64 {
    let bits = bits.clamp(1, 64);
    u64::MAX >> (64 - bits)
}

/// Strips pointer-authentication bits from every register a walk starts
/// from. `walker::strip_pointer_tag` keeps 48 bits; on arm64 macOS the PAC
/// field starts at the first bit above the virtual-address size (bit 47), so
/// `mask` narrows further to the real address size.
pub fn strip_registers(regs: Registers, mask: u64) -> Registers {
    let strip = |v: u64| strip_pointer_tag(v) & mask;
    Registers { pc: strip(regs.pc), sp: strip(regs.sp), fp: strip(regs.fp), lr: strip(regs.lr) }
}

/// Applies `mask` to the addresses a walk recorded. `walk_stack` already
/// removed bits 48 and up; this clears the remaining PAC bits between the
/// virtual-address size and bit 48.
pub fn mask_frames(frames: &mut [u64], mask: u64) {
    for f in frames {
        *f &= mask;
    }
}

// ---------------------------------------------------------------------------
// Rosetta.

/// Interprets `sysctlbyname("sysctl.proc_translated")`. It returns 1 under
/// Rosetta and 0 natively; the OID does not exist (rc -1, ENOENT) on Intel
/// Macs and before macOS 11, which also means "not translated".
pub fn is_translated(rc: i32, value: i32) -> bool {
    rc == 0 && value == 1
}

pub const ROSETTA_MESSAGE: &str = "machsampler cannot sample under Rosetta translation: thread_get_state is \
unreliable there (it can fail or hang on the translator's own threads). Run the native arm64 build of \
Node.js or Electron instead.";

/// The error `start()` reports under Rosetta.
pub fn rosetta_error() -> SamplerError {
    SamplerError::new(ErrorCode::NotSup, ROSETTA_MESSAGE)
}

pub const FORKED_CHILD_MESSAGE: &str = "machsampler cannot sample in a process forked without exec from one \
where it was loaded: the thread list and Mach port names it inherited belong to the parent.";

/// The error `start()` reports in a forked child.
pub fn forked_child_error() -> SamplerError {
    SamplerError::new(ErrorCode::NotSup, FORKED_CHILD_MESSAGE)
}

// ---------------------------------------------------------------------------
// Lock-free state shared by the introspection hook and the sampler.

pub const EXIT_LOG_LEN: usize = 256;

/// The most recent thread ids that reached THREAD_TERMINATE.
///
/// A thread's stack is unmapped by the kernel after its TERMINATE hook ran
/// (in `__bsdthread_terminate`), but the thread can still be suspended in
/// between. The sampler checks this log after `thread_suspend` succeeds: if
/// the tid is not here, the thread had not reached its TERMINATE hook when it
/// stopped, so its stack is still mapped and safe to walk. Writers and the
/// reader use only atomics, so the check is allowed inside the stopped
/// window, and a thread suspended in the middle of `record` cannot block it.
pub struct ExitLog {
    slots: [AtomicU64; EXIT_LOG_LEN],
    next: AtomicUsize,
}

impl Default for ExitLog {
    fn default() -> Self {
        Self::new()
    }
}

impl ExitLog {
    pub const fn new() -> Self {
        ExitLog { slots: [const { AtomicU64::new(0) }; EXIT_LOG_LEN], next: AtomicUsize::new(0) }
    }

    /// Records that `tid` is exiting. Thread ids are never reused on macOS,
    /// so an old entry can never make a live thread look dead.
    pub fn record(&self, tid: u64) {
        if tid == 0 {
            return;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % EXIT_LOG_LEN;
        if let Some(slot) = self.slots.get(i) {
            slot.store(tid, Ordering::Release);
        }
    }

    /// True if `tid` was recorded among the last `EXIT_LOG_LEN` exits.
    #[inline]
    pub fn contains(&self, tid: u64) -> bool {
        tid != 0 && self.slots.iter().any(|s| s.load(Ordering::Acquire) == tid)
    }
}

pub const PORT_QUEUE_LEN: usize = 512;

/// Port rights waiting to be released by the sampler thread.
///
/// While a sampler runs, it may hold a thread's port name in its snapshot;
/// releasing that right elsewhere would let the kernel give the name to a new
/// thread, and the sampler would then suspend the wrong thread and walk it
/// with the old thread's stack bounds. So rights are queued here and the
/// sampler releases them at its next refresh, once no snapshot refers to
/// them. Push and drain are lock-free, so the hook can push.
pub struct PortQueue {
    slots: [AtomicU32; PORT_QUEUE_LEN],
}

impl Default for PortQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl PortQueue {
    pub const fn new() -> Self {
        PortQueue { slots: [const { AtomicU32::new(0) }; PORT_QUEUE_LEN] }
    }

    /// Queues `port`; false if the queue is full (or `port` is null).
    pub fn push(&self, port: u32) -> bool {
        port != 0 && self.slots.iter().any(|s| s.compare_exchange(0, port, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    }

    /// Takes every queued port.
    pub fn drain(&self, mut release: impl FnMut(u32)) {
        for s in &self.slots {
            let p = s.swap(0, Ordering::AcqRel);
            if p != 0 {
                release(p);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.load(Ordering::Relaxed) != 0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to do with a send right the registry no longer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// No sampler is running, so no snapshot can hold the name: release it.
    Now(u32),
    /// Queued for the running sampler to release.
    Deferred,
    /// The queue is full. Keeping the right (a dead name, a few bytes of
    /// kernel memory) is the safe failure: releasing it could let the name
    /// be reused under the running sampler.
    Leak(u32),
}

pub fn release_right(port: u32, sampler_active: bool, queue: &PortQueue) -> Release {
    if !sampler_active {
        Release::Now(port)
    } else if queue.push(port) {
        Release::Deferred
    } else {
        Release::Leak(port)
    }
}

// ---------------------------------------------------------------------------
// The introspection hook's effect on the registry.

/// A pthread introspection event, reduced to what the registry needs.
#[derive(Clone, Copy, Debug)]
pub enum HookEvent {
    /// THREAD_START, on the new thread: its entry, whose `handle` is a send
    /// right the hook just took with `mach_thread_self()`.
    Start(ThreadEntry),
    /// THREAD_TERMINATE, on the exiting thread: its tid and port name.
    Terminate { tid: u64, port: u32 },
}

/// What applying an event left for the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookOutcome {
    /// The registry now owns the entry's right.
    Added,
    /// A `task_threads` rescan got there first and owns a right already;
    /// release the redundant one.
    AlreadyTracked { release: u32 },
    /// No spare capacity (the hook never allocates). The registry's overflow
    /// flag is set, so the sampler will rescan and add the thread; release
    /// the right the hook took.
    Refused { release: u32 },
    /// The thread was removed; the registry's right must be released (see
    /// [`release_right`]).
    Removed { release: u32 },
    /// THREAD_TERMINATE for a thread the registry did not track.
    Untracked,
}

/// Applies one hook event. Never allocates: `try_add` fails rather than
/// grow, and the exit log is a fixed ring.
pub fn apply_hook_event(registry: &ThreadRegistry, exits: &ExitLog, event: HookEvent) -> HookOutcome {
    match event {
        HookEvent::Start(entry) => {
            let port = entry.handle as u32;
            if registry.contains(entry.tid) {
                return HookOutcome::AlreadyTracked { release: port };
            }
            match registry.try_add(entry) {
                Ok(()) => HookOutcome::Added,
                Err(_) => HookOutcome::Refused { release: port },
            }
        }
        HookEvent::Terminate { tid, port } => {
            // Log first, so a sampler that suspends this thread from now on
            // sees that its stack may be about to go.
            exits.record(tid);
            if registry.mark_removed(tid) {
                HookOutcome::Removed { release: port }
            } else {
                HookOutcome::Untracked
            }
        }
    }
}

/// Stack bounds from `pthread_get_stackaddr_np` (the top: stacks grow down)
/// and `pthread_get_stacksize_np`. Empty if either is unknown or absurd.
pub fn stack_bounds_from_top(top: u64, size: u64) -> StackBounds {
    match top.checked_sub(size) {
        Some(lo) if top != 0 && size != 0 => StackBounds::new(lo, top),
        _ => StackBounds::EMPTY,
    }
}

// ---------------------------------------------------------------------------
// Rescans and session synchronisation.

/// A thread `task_threads` returned: its port (a send right we now own) and
/// its tid from `thread_info(THREAD_IDENTIFIER_INFO)`, 0 if that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundThread {
    pub port: u32,
    pub tid: u64,
}

/// The main thread's tid: the caller's if it is the main thread, else the
/// lowest tid in the task. Thread ids come from a system-wide counter that
/// only grows, and the main thread is the task's first thread.
pub fn pick_main_tid(caller_main_tid: Option<u64>, found: &[FoundThread]) -> u64 {
    caller_main_tid.unwrap_or_else(|| found.iter().map(|f| f.tid).filter(|&t| t != 0).min().unwrap_or(0))
}

/// Merges a rescan into `registry`. `tracked_before` is the sorted list of
/// tids the registry tracked before `task_threads` was called.
///
/// - A found thread not yet tracked is added with its right (`describe`
///   builds the entry); one already tracked has its extra right released.
/// - A thread tracked before the call but not found has exited without a
///   TERMINATE event (a raw Mach thread, or an exit that raced the hook's
///   installation): it is removed, and `retire` gets its tid and port.
///   Threads that appeared after the call are left alone.
///
/// Returns how many threads were added.
pub fn merge_rescan(
    registry: &ThreadRegistry,
    tracked_before: &[ThreadEntry],
    found: &[FoundThread],
    mut describe: impl FnMut(&FoundThread) -> ThreadEntry,
    mut release: impl FnMut(u32),
    mut retire: impl FnMut(u64, u32),
) -> usize {
    let mut added = 0;
    for f in found {
        if f.tid == 0 || registry.contains(f.tid) {
            release(f.port);
        } else {
            registry.add(describe(f));
            added += 1;
        }
    }
    for e in tracked_before {
        if !found.iter().any(|f| f.tid == e.tid) && registry.mark_removed(e.tid) {
            retire(e.tid, e.handle as u32);
        }
    }
    added
}

/// Brings a session's registry up to date with the hook's live entries
/// (`tracked`, sorted by tid): adds threads it lacks (after `on_new` fills
/// in details such as the name) and removes those no longer tracked.
/// `scratch` keeps its allocation between calls. Returns how many were added.
pub fn sync_session(
    session: &ThreadRegistry,
    tracked: &[ThreadEntry],
    scratch: &mut Vec<ThreadEntry>,
    mut on_new: impl FnMut(&mut ThreadEntry),
) -> usize {
    session.snapshot(scratch);
    scratch.sort_unstable_by_key(|e| e.tid);
    let mut added = 0;
    for e in tracked {
        if scratch.binary_search_by_key(&e.tid, |s| s.tid).is_err() {
            let mut e = *e;
            on_new(&mut e);
            session.add(e);
            added += 1;
        }
    }
    session.remove_missing(|tid| tracked.binary_search_by_key(&tid, |e| e.tid).is_ok());
    added
}

/// A thread name from a fixed C buffer (`pth_name` of
/// `thread_extended_info`), as raw bytes.
pub fn name_from_c(buf: &[std::ffi::c_char]) -> ThreadName {
    let mut bytes = [0u8; crate::sampler::registry::THREAD_NAME_MAX];
    for (d, &s) in bytes.iter_mut().zip(buf) {
        *d = s as u8;
    }
    ThreadName::from_bytes(&bytes[..buf.len().min(bytes.len())])
}

// ---------------------------------------------------------------------------
// Mach-O images, for the module list.

pub const MH_MAGIC_64: u32 = 0xfeed_facf;
pub const MACH_HEADER_64_SIZE: usize = 32;
pub const LC_SEGMENT_64: u32 = 0x19;
pub const LC_UUID: u32 = 0x1b;

/// What the module list needs from an image's load commands, in the file's
/// (unslid) addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachImage {
    /// Lowest and highest address of its mapped segments. `__PAGEZERO`
    /// (no access) and `__LINKEDIT` (shared by every image in the dyld
    /// shared cache, so it would make their ranges overlap) are left out.
    pub start: u64,
    pub end: u64,
    pub uuid: Option<[u8; 16]>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// The size of the header plus load commands, from a 64-bit Mach-O header.
pub fn macho_commands_len(header: &[u8]) -> Option<usize> {
    if u32_at(header, 0)? != MH_MAGIC_64 {
        return None;
    }
    MACH_HEADER_64_SIZE.checked_add(u32_at(header, 20)? as usize)
}

/// Parses the header and load commands of a 64-bit little-endian Mach-O
/// image. `bytes` must start at the header and hold `macho_commands_len`.
pub fn parse_macho(bytes: &[u8]) -> Option<MachImage> {
    let total = macho_commands_len(bytes)?;
    let ncmds = u32_at(bytes, 16)?;
    let cmds = bytes.get(MACH_HEADER_64_SIZE..total)?;
    let mut image = MachImage { start: u64::MAX, end: 0, uuid: None };
    let mut at = 0usize;
    for _ in 0..ncmds {
        let cmd = u32_at(cmds, at)?;
        let size = u32_at(cmds, at + 4)? as usize;
        if size < 8 {
            return None;
        }
        let body = cmds.get(at..at.checked_add(size)?)?;
        if cmd == LC_SEGMENT_64 {
            let name = body.get(8..24)?;
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(16)];
            let (vmaddr, vmsize) = (u64_at(body, 24)?, u64_at(body, 32)?);
            if name != b"__PAGEZERO" && name != b"__LINKEDIT" && vmsize > 0 {
                image.start = image.start.min(vmaddr);
                image.end = image.end.max(vmaddr.saturating_add(vmsize));
            }
        } else if cmd == LC_UUID {
            image.uuid = body.get(8..24)?.try_into().ok();
        }
        at += size;
    }
    (image.start < image.end).then_some(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tid: u64, port: u32) -> ThreadEntry {
        ThreadEntry::new(tid, port as u64, ThreadName::EMPTY, StackBounds::new(0x1000, 0x2000))
    }

    #[test]
    fn kern_returns_are_classified() {
        assert_eq!(classify(0), KernOutcome::Success);
        for gone in [KERN_TERMINATED, KERN_INVALID_ARGUMENT, MACH_SEND_INVALID_DEST] {
            assert_eq!(classify(gone), KernOutcome::Gone, "{gone:#x}");
            assert_eq!(suspend_skip_reason(gone), SkipReason::Gone);
        }
        // KERN_FAILURE, KERN_ABORTED, MACH_SEND_TIMED_OUT: errors, not exits.
        for err in [5, 14, 0x1000_0004] {
            assert_eq!(classify(err), KernOutcome::Error(err));
            assert_eq!(suspend_skip_reason(err), SkipReason::Pending);
        }
    }

    #[test]
    fn cpu_time_converts_microseconds_to_nanoseconds() {
        assert_eq!(time_value_ns(0, 0), 0);
        assert_eq!(time_value_ns(1, 250_000), 1_250_000_000);
        assert_eq!(basic_info_cpu_ns((2, 1), (0, 999_999)), 2_000_001_000 + 999_999_000);
        assert_eq!(time_value_ns(-1, -5), 0, "negative parts count as zero");
        assert_eq!(time_value_ns(i32::MAX, i32::MAX), i32::MAX as u64 * 1_000_000_000 + i32::MAX as u64 * 1000);
    }

    #[test]
    fn deadlines_round_up_so_waits_never_end_early() {
        for tb in [Timebase::new(125, 3), Timebase::IDENTITY, Timebase::new(1, 3)] {
            for ns in [0u64, 1, 41, 42, 43, 999, 10_000_000, 1_000_000_007, u64::MAX / 200] {
                let t = deadline_ticks(&tb, ns);
                assert!(tb.ticks_to_ns(t) >= ns, "{tb:?} {ns}");
                assert!(t == 0 || tb.ticks_to_ns(t - 1) < ns, "smallest such tick: {tb:?} {ns}");
            }
        }
        let tb = Timebase::new(125, 3);
        assert_eq!(elapsed_ns(&tb, 1000, 1024), 1000);
        assert_eq!(elapsed_ns(&tb, 1024, 1000), 0, "never negative");
    }

    #[test]
    fn va_bits_fall_back_and_clamp() {
        assert_eq!(interpret_va_bits(0, 47), 47);
        assert_eq!(interpret_va_bits(0, 39), 39);
        assert_eq!(interpret_va_bits(-1, 0), DEFAULT_VA_BITS);
        assert_eq!(interpret_va_bits(0, 0), DEFAULT_VA_BITS);
        assert_eq!(interpret_va_bits(0, 64), DEFAULT_VA_BITS);
        assert_eq!(va_mask(47), 0x0000_7fff_ffff_ffff);
        assert_eq!(va_mask(48), 0x0000_ffff_ffff_ffff);
        assert_eq!(va_mask(64), u64::MAX);
    }

    #[test]
    fn pac_bits_are_stripped_from_registers_and_frames() {
        let mask = va_mask(47);
        let addr = 0x0000_0001_8a2b_3c40u64;
        // An IB-signed return address: PAC bits in 47..=54 and 56..=63.
        let signed = addr | 0x8000_0000_0000 | 0x003a_0000_0000_0000 | 0xa500_0000_0000_0000;
        let regs = Registers { pc: signed, sp: 0x0001_6fdf_f000, fp: 0x0001_6fdf_f100 | (1 << 47), lr: signed };
        let r = strip_registers(regs, mask);
        assert_eq!(r, Registers { pc: addr, sp: 0x0001_6fdf_f000, fp: 0x0001_6fdf_f100, lr: addr });
        // walk_stack leaves bit 47 alone; mask_frames clears it.
        let mut frames = [strip_pointer_tag(signed), addr];
        assert_eq!(frames[0], addr | (1 << 47));
        mask_frames(&mut frames, mask);
        assert_eq!(frames, [addr, addr]);
        // x86_64-style 48-bit mask leaves user addresses untouched.
        let x = Registers { pc: 0x7ff8_1234_5678, sp: 0x7ff7_bfef_f000, fp: 0x7ff7_bfef_f100, lr: 0 };
        assert_eq!(strip_registers(x, va_mask(48)), x);
    }

    #[test]
    fn rosetta_is_detected_only_on_a_clear_yes() {
        assert!(is_translated(0, 1));
        assert!(!is_translated(0, 0));
        assert!(!is_translated(-1, 0), "OID absent: Intel Mac or macOS 10");
        assert!(!is_translated(-1, 1));
        let e = rosetta_error();
        assert_eq!(e.code, ErrorCode::NotSup);
        assert_eq!(e.code.as_str(), "ENOTSUP");
        assert!(e.message.contains("Rosetta") && e.message.contains("arm64"));
        assert_eq!(forked_child_error().code, ErrorCode::NotSup);
    }

    #[test]
    fn exit_log_remembers_recent_exits() {
        let log = ExitLog::new();
        assert!(!log.contains(5));
        log.record(5);
        log.record(0); // ignored
        assert!(log.contains(5));
        assert!(!log.contains(0));
        for tid in 100..100 + EXIT_LOG_LEN as u64 - 1 {
            log.record(tid);
        }
        assert!(log.contains(5), "still within the window");
        log.record(9999);
        assert!(!log.contains(5), "oldest entry overwritten");
        assert!(log.contains(9999) && log.contains(100));
    }

    #[test]
    fn port_queue_is_bounded_and_drains_everything() {
        let q = PortQueue::new();
        assert!(!q.push(0), "null port");
        for p in 1..=PORT_QUEUE_LEN as u32 {
            assert!(q.push(p));
        }
        assert!(!q.push(9999), "full");
        assert_eq!(release_right(9999, true, &q), Release::Leak(9999));
        let mut got = Vec::new();
        q.drain(|p| got.push(p));
        assert_eq!(got.len(), PORT_QUEUE_LEN);
        assert!(q.is_empty());
        assert_eq!(release_right(7, false, &q), Release::Now(7));
        assert!(q.is_empty(), "no sampler: released at once, not queued");
        assert_eq!(release_right(7, true, &q), Release::Deferred);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn port_queue_concurrent_push_and_drain_loses_nothing() {
        use std::sync::Arc;
        let q = Arc::new(PortQueue::new());
        let pushers: Vec<_> = (0..4u32)
            .map(|w| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        while !q.push(w * 1000 + i + 1) {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 800 {
            q.drain(|p| got.push(p));
        }
        for p in pushers {
            p.join().unwrap();
        }
        q.drain(|p| got.push(p));
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 800);
    }

    #[test]
    fn hook_start_adds_without_allocating_and_reports_overflow() {
        let reg = ThreadRegistry::with_capacity(2);
        let log = ExitLog::new();
        let cap = reg.capacity();
        for tid in 1..=cap as u64 {
            assert_eq!(
                apply_hook_event(&reg, &log, HookEvent::Start(entry(tid, tid as u32 + 100))),
                HookOutcome::Added
            );
        }
        let out = apply_hook_event(&reg, &log, HookEvent::Start(entry(999, 1999)));
        assert_eq!(out, HookOutcome::Refused { release: 1999 });
        assert_eq!(reg.capacity(), cap, "the hook never grows the registry");
        assert!(reg.ensure_headroom(8), "overflow is visible to the sampler");
        // A thread a rescan already added: the hook's right is redundant.
        let out = apply_hook_event(&reg, &log, HookEvent::Start(entry(1, 555)));
        assert_eq!(out, HookOutcome::AlreadyTracked { release: 555 });
        let mut snap = Vec::new();
        reg.snapshot(&mut snap);
        assert_eq!(snap.iter().find(|e| e.tid == 1).unwrap().handle, 101, "the registry keeps its own right");
    }

    #[test]
    fn hook_terminate_logs_the_exit_and_hands_back_the_right() {
        let reg = ThreadRegistry::with_capacity(4);
        let log = ExitLog::new();
        apply_hook_event(&reg, &log, HookEvent::Start(entry(7, 70)));
        let out = apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 7, port: 70 });
        assert_eq!(out, HookOutcome::Removed { release: 70 });
        assert!(!reg.contains(7));
        assert!(log.contains(7));
        // Twice, or for a thread never tracked: nothing to release, but the
        // exit is still logged (it may be in a sampler's snapshot).
        assert_eq!(apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 7, port: 70 }), HookOutcome::Untracked);
        assert_eq!(apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 8, port: 80 }), HookOutcome::Untracked);
        assert!(log.contains(8));
    }

    #[test]
    fn hook_events_from_many_threads_keep_the_registry_consistent() {
        use std::sync::Arc;
        let reg = Arc::new(ThreadRegistry::with_capacity(4096));
        let log = Arc::new(ExitLog::new());
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (reg, log) = (reg.clone(), log.clone());
                std::thread::spawn(move || {
                    let mut released = 0;
                    for i in 0..300u64 {
                        let tid = w * 10_000 + i + 1;
                        assert_eq!(
                            apply_hook_event(&reg, &log, HookEvent::Start(entry(tid, tid as u32))),
                            HookOutcome::Added
                        );
                        if i % 3 == 0 {
                            let out = apply_hook_event(&reg, &log, HookEvent::Terminate { tid, port: tid as u32 });
                            assert_eq!(out, HookOutcome::Removed { release: tid as u32 });
                            released += 1;
                        }
                    }
                    released
                })
            })
            .collect();
        let released: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(released, 400);
        assert_eq!(reg.len(), 1200 - 400);
    }

    #[test]
    fn stack_bounds_come_from_the_top_down() {
        assert_eq!(
            stack_bounds_from_top(0x7000_0008_0000, 0x8_0000),
            StackBounds::new(0x7000_0000_0000, 0x7000_0008_0000)
        );
        assert_eq!(stack_bounds_from_top(0, 0x1000), StackBounds::EMPTY);
        assert_eq!(stack_bounds_from_top(0x1000, 0), StackBounds::EMPTY);
        assert_eq!(stack_bounds_from_top(0x1000, 0x2000), StackBounds::EMPTY);
    }

    #[test]
    fn main_thread_is_the_caller_or_the_oldest() {
        let found =
            [FoundThread { port: 1, tid: 900 }, FoundThread { port: 2, tid: 0 }, FoundThread { port: 3, tid: 77 }];
        assert_eq!(pick_main_tid(None, &found), 77);
        assert_eq!(pick_main_tid(Some(5), &found), 5);
        assert_eq!(pick_main_tid(None, &[]), 0);
    }

    #[test]
    fn rescan_adds_new_threads_releases_known_ones_and_retires_vanished() {
        let reg = ThreadRegistry::with_capacity(8);
        reg.add(entry(1, 11)); // tracked, still alive
        reg.add(entry(2, 22)); // tracked, vanished without TERMINATE
        let mut before = Vec::new();
        reg.snapshot(&mut before);
        before.sort_unstable_by_key(|e| e.tid);
        reg.add(entry(3, 33)); // appeared after task_threads: must be kept
        let found = [
            FoundThread { port: 11, tid: 1 },
            FoundThread { port: 44, tid: 4 },
            FoundThread { port: 55, tid: 0 }, // could not be identified
        ];
        let (mut released, mut retired) = (Vec::new(), Vec::new());
        let added = merge_rescan(
            &reg,
            &before,
            &found,
            |f| entry(f.tid, f.port),
            |p| released.push(p),
            |tid, port| retired.push((tid, port)),
        );
        assert_eq!(added, 1);
        assert_eq!(released, vec![11, 55]);
        assert_eq!(retired, vec![(2, 22)]);
        let mut live: Vec<u64> = {
            let mut s = Vec::new();
            reg.snapshot(&mut s);
            s.iter().map(|e| e.tid).collect()
        };
        live.sort_unstable();
        assert_eq!(live, vec![1, 3, 4]);
    }

    #[test]
    fn session_sync_adds_named_threads_and_removes_departed() {
        let session = ThreadRegistry::new();
        session.add(entry(1, 11));
        session.add(entry(9, 99)); // no longer tracked
        let tracked = [entry(1, 11), entry(2, 22), entry(3, 33)];
        let mut scratch = Vec::new();
        let added = sync_session(&session, &tracked, &mut scratch, |e| e.name = ThreadName::from_bytes(b"new"));
        assert_eq!(added, 2);
        let mut snap = Vec::new();
        session.snapshot(&mut snap);
        snap.sort_unstable_by_key(|e| e.tid);
        assert_eq!(snap.iter().map(|e| e.tid).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(snap[1].name.as_bytes(), b"new");
        assert_eq!(snap[0].name.as_bytes(), b"", "existing entries are not re-described");
        // Idempotent.
        assert_eq!(sync_session(&session, &tracked, &mut scratch, |_| {}), 0);
        assert_eq!(session.len(), 3);
    }

    #[test]
    fn c_names_stop_at_nul() {
        use std::ffi::c_char;
        let mut buf = [0 as c_char; 64];
        for (d, s) in buf.iter_mut().zip(b"libuv-worker") {
            *d = *s as c_char;
        }
        assert_eq!(name_from_c(&buf).as_bytes(), b"libuv-worker");
        assert_eq!(name_from_c(&[0 as c_char; 64]).as_bytes(), b"");
    }

    /// Builds a Mach-O header plus load commands.
    fn macho(cmds: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = cmds.concat();
        let mut b = Vec::new();
        for w in [MH_MAGIC_64, 0x0100_000c, 0, 6, cmds.len() as u32, body.len() as u32, 0, 0] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&body);
        b
    }

    fn segment(name: &str, vmaddr: u64, vmsize: u64) -> Vec<u8> {
        let mut c = Vec::new();
        c.extend_from_slice(&LC_SEGMENT_64.to_le_bytes());
        c.extend_from_slice(&72u32.to_le_bytes());
        let mut n = [0u8; 16];
        n[..name.len()].copy_from_slice(name.as_bytes());
        c.extend_from_slice(&n);
        for v in [vmaddr, vmsize, 0, 0] {
            c.extend_from_slice(&v.to_le_bytes());
        }
        c.extend_from_slice(&[0u8; 16]); // maxprot, initprot, nsects, flags
        c
    }

    #[test]
    fn macho_ranges_skip_pagezero_and_linkedit_and_find_the_uuid() {
        let mut uuid = Vec::new();
        uuid.extend_from_slice(&LC_UUID.to_le_bytes());
        uuid.extend_from_slice(&24u32.to_le_bytes());
        uuid.extend_from_slice(&[0xab; 16]);
        let img = macho(&[
            segment("__PAGEZERO", 0, 0x1_0000_0000),
            segment("__TEXT", 0x1_0000_0000, 0x4000),
            segment("__DATA", 0x1_0000_4000, 0x4000),
            segment("__LINKEDIT", 0x1_0000_8000, 0x10_0000),
            uuid,
        ]);
        assert_eq!(macho_commands_len(&img), Some(img.len()));
        let parsed = parse_macho(&img).unwrap();
        assert_eq!(parsed, MachImage { start: 0x1_0000_0000, end: 0x1_0000_8000, uuid: Some([0xab; 16]) });
    }

    #[test]
    fn malformed_macho_is_rejected_without_panicking() {
        assert_eq!(parse_macho(&[0u8; 8]), None);
        let img = macho(&[segment("__TEXT", 0x1000, 0x1000)]);
        assert!(parse_macho(&img).is_some());
        assert_eq!(parse_macho(&img[..img.len() - 1]), None, "truncated commands");
        let mut bad = img.clone();
        bad[MACH_HEADER_64_SIZE + 4..MACH_HEADER_64_SIZE + 8].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(parse_macho(&bad), None, "command smaller than its header");
        let mut huge = img.clone();
        huge[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(parse_macho(&huge), None, "more commands than bytes");
        assert_eq!(parse_macho(&macho(&[])), None, "no segments");
    }
}
