//! What the simulated kernel checks that XNU would only punish later: every
//! port right is accounted for, every suspension is undone.
//!
//! [`audit`] compares the rights the task holds with those its owners say
//! they hold (libpthread's one per live thread, plus what [`set_owner`]
//! reports: the backend's thread table). A watchdog thread stops the
//! process if a thread stays suspended for [`SUSPEND_LIMIT_NS`], and
//! reaps threads whose exit has completed (their ports die). When a thread
//! that suspended others (a sampler) exits, the audit runs and a failure
//! stops the process with the report.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use super::kernel::{self, KernelMode, Phase};

/// Longer than any suspension a sampler makes: a thread suspended this long
/// was never resumed.
pub const SUSPEND_LIMIT_NS: u64 = 3_000_000_000;

static OWNER: AtomicUsize = AtomicUsize::new(0);

/// Registers who else owns rights: `owner(out)` appends every name it
/// holds a reference on (once per reference).
pub fn set_owner(owner: fn(&mut Vec<u32>)) {
    OWNER.store(owner as usize, Ordering::Release);
}

/// What an audit found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// (name, references held, references owned): held > owned.
    pub leaked: Vec<(u32, u32, u32)>,
    /// Owned > held, or released while not held at all.
    pub over_released: Vec<(u32, u32, u32)>,
    /// Names `mach_port_deallocate` was given that held no right.
    pub invalid_releases: Vec<u32>,
    /// `task_threads` arrays never `vm_deallocate`d, and frees of memory it
    /// never gave out.
    pub vm_outstanding: usize,
    pub stray_vm_frees: u64,
    /// Live threads with a suspend count above zero: (tid, count).
    pub suspended: Vec<(u64, u32)>,
    /// Rights held in total, for the record.
    pub rights: usize,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.leaked.is_empty()
            && self.over_released.is_empty()
            && self.invalid_releases.is_empty()
            && self.vm_outstanding == 0
            && self.stray_vm_frees == 0
            && self.suspended.is_empty()
    }
}

fn audit_once() -> Report {
    let mut owned: Vec<u32> = Vec::new();
    let owner = OWNER.load(Ordering::Acquire);
    if owner != 0 {
        // SAFETY: OWNER only holds 0 or a `fn(&mut Vec<u32>)`.
        let owner = unsafe { std::mem::transmute::<usize, fn(&mut Vec<u32>)>(owner) };
        owner(&mut owned);
    }
    let _k = KernelMode::enter();
    let k = kernel::lock();
    let mut report = Report::default();
    for (name, urefs, thread) in k.rights() {
        let mut expected = owned.iter().filter(|&&o| o == name).count() as u32;
        if thread.is_some_and(|t| t.libpthread_ref.load(Ordering::Acquire)) {
            expected += 1;
        }
        if urefs > expected {
            report.leaked.push((name, urefs, expected));
        } else if urefs < expected {
            report.over_released.push((name, urefs, expected));
        }
        report.rights += urefs as usize;
    }
    for &name in &owned {
        if !k.rights().iter().any(|r| r.0 == name) {
            report.over_released.push((name, 0, 1));
        }
    }
    report.invalid_releases = k.invalid_releases.clone();
    report.vm_outstanding = k.vm.len();
    report.stray_vm_frees = k.stray_vm_frees;
    for t in &k.threads {
        let n = t.stop_count.load(Ordering::SeqCst);
        if n > 0 && t.phase() < Phase::Terminated {
            report.suspended.push((t.tid, n));
        }
    }
    report
}

/// Audits the task. Rights move between owners for an instant (a hook
/// taking a right before adding it to the table), so a discrepancy must
/// persist for 200 ms to count.
pub fn audit() -> Report {
    let mut report = audit_once();
    for _ in 0..20 {
        if report.is_clean() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        report = audit_once();
    }
    report
}

/// Forgets recorded misuse (tests that provoke it on purpose).
pub fn reset_misuse() {
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    k.invalid_releases.clear();
    k.stray_vm_frees = 0;
}

/// Audits when a thread that suspended others exits, and stops the process
/// if the audit fails.
pub fn on_suspender_exit() {
    let report = audit();
    if !report.is_clean() {
        super::fatal(&format!("machsim: FATAL: audit after the sampler thread exited: {report:?}"));
    }
}

pub fn start_watchdog() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| super::pthread::spawn_internal(watchdog));
}

extern "C" fn watchdog(_: *mut c_void) -> *mut c_void {
    super::pthread::internal_started();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = super::monotonic_ns();
        let _k = KernelMode::enter();
        let mut k = kernel::lock();
        let threads = k.threads.clone();
        for t in threads {
            match t.phase() {
                Phase::Active | Phase::Unmapped
                    if t.stop_count.load(Ordering::SeqCst) > 0
                        && now.saturating_sub(t.suspended_at.load(Ordering::Relaxed)) > SUSPEND_LIMIT_NS =>
                {
                    super::fatal(&format!(
                        "machsim: FATAL: thread {} has been suspended for {} s: a thread_suspend without its thread_resume",
                        t.tid,
                        SUSPEND_LIMIT_NS / 1_000_000_000
                    ));
                }
                Phase::Disabled => {
                    // SAFETY: signal 0 only checks that the thread exists.
                    let gone = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), t.tid, 0) } != 0;
                    if gone {
                        k.destroy_port(t);
                    }
                }
                _ => {}
            }
        }
    }
}
