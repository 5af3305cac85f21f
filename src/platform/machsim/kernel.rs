//! The simulated kernel's state: thread objects, the task's IPC space
//! (port names with user-reference counts, dead names, immediate reuse of
//! freed names) and the memory `task_threads` maps for its results.
//!
//! One lock guards it. Every entry point that takes the lock first
//! blocks the park signal on the calling thread (see [`KernelMode`]), so a
//! thread is never parked while it holds the lock, as a thread suspended in
//! user mode holds no kernel lock.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::park;

pub const KERN_SUCCESS: i32 = 0;
pub const KERN_INVALID_ADDRESS: i32 = 1;
pub const KERN_INVALID_ARGUMENT: i32 = 4;
pub const KERN_FAILURE: i32 = 5;
pub const KERN_ABORTED: i32 = 14;
pub const KERN_INVALID_NAME: i32 = 15;
pub const KERN_INVALID_TASK: i32 = 16;
pub const KERN_INVALID_RIGHT: i32 = 17;
pub const KERN_TERMINATED: i32 = 37;
pub const MACH_SEND_INVALID_DEST: i32 = 0x1000_0003;

/// The task's own port name (`mach_task_self()`), outside the table.
pub const TASK_NAME: u32 = 0x103;
/// `MACH_PORT_DEAD`.
pub const PORT_DEAD: u32 = !0;

/// Where a thread is in its life, as the Mach calls see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Running user code.
    Active = 0,
    /// Past its THREAD_TERMINATE hook, in `__bsdthread_terminate`: its
    /// stack is unmapped but it is still active, so it can be suspended,
    /// and its registers are those it entered the kernel with.
    Unmapped = 1,
    /// `thread->active` is false: calls return `KERN_TERMINATED`.
    Terminated = 2,
    /// Its port no longer names a thread: `KERN_INVALID_ARGUMENT`.
    Disabled = 3,
    /// Reaped: its port is destroyed and our rights are dead names.
    Reaped = 4,
}

/// A thread of the simulated task. Never freed (a parked handler and the
/// reaper may hold a pointer at any time); a test process makes hundreds.
pub struct Thread {
    pub tid: u64,
    pub pthread: AtomicU64,
    pub stack_lo: AtomicU64,
    pub stack_hi: AtomicU64,
    phase: AtomicU8,
    /// `user_stop_count`.
    pub stop_count: AtomicU32,
    /// See [`park`].
    pub park: AtomicU32,
    pub ctx: AtomicPtr<libc::ucontext_t>,
    /// Registers it entered the kernel with (rip, rsp, rbp), for the
    /// `Unmapped` phase.
    pub kernel_entry: [AtomicU64; 3],
    /// Our name for its port, 0 if none.
    pub name: AtomicU32,
    /// libpthread's own reference (its `kport`), dropped on exit.
    pub libpthread_ref: AtomicBool,
    /// Created through the `pthread_create` interposer: its exit is known.
    pub interposed: AtomicBool,
    /// The simulation's own threads: invisible to `task_threads`.
    pub internal: AtomicBool,
    /// For `thread_info`'s run state: the CPU time last reported.
    pub cpu_seen: AtomicU64,
    /// CPU time spent being parked (the signal and the handler), which a
    /// Mach suspension would not cost the thread: left out of its CPU time.
    pub park_cpu_ns: AtomicU64,
    /// When it was last suspended (ns), for the watchdog.
    pub suspended_at: AtomicU64,
    /// It called `thread_suspend` on another thread (a sampler).
    pub suspender: AtomicBool,
    pub qos: AtomicI32,
}

impl Thread {
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Active,
            1 => Phase::Unmapped,
            2 => Phase::Terminated,
            3 => Phase::Disabled,
            _ => Phase::Reaped,
        }
    }

    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Release);
        park::wake_all(&self.park);
    }

    /// The error a thread call gets in this phase, if any.
    pub fn call_error(&self) -> Option<i32> {
        match self.phase() {
            Phase::Active | Phase::Unmapped => None,
            Phase::Terminated => Some(KERN_TERMINATED),
            Phase::Disabled => Some(KERN_INVALID_ARGUMENT),
            Phase::Reaped => Some(MACH_SEND_INVALID_DEST),
        }
    }
}

#[derive(Clone, Copy)]
enum Right {
    Send(&'static Thread),
    Dead,
}

#[derive(Clone, Copy)]
struct Entry {
    right: Right,
    urefs: u32,
}

pub struct State {
    /// By name index (`name >> 8`); `None` is a free slot.
    entries: Vec<Option<Entry>>,
    /// Freed indices, most recent last: the next name reuses the last one.
    free: Vec<usize>,
    pub threads: Vec<&'static Thread>,
    /// Live `task_threads` arrays: (address, bytes).
    pub vm: Vec<(u64, u64)>,
    /// `mach_port_deallocate` on a name with no right: over-releases.
    pub invalid_releases: Vec<u32>,
    /// `mach_vm_deallocate` of memory the kernel never gave out.
    pub stray_vm_frees: u64,
}

/// A sleeping lock: a holder that is descheduled is waited for, not spun on.
static KERNEL: Mutex<Option<State>> = Mutex::new(None);

pub struct Guard(MutexGuard<'static, Option<State>>);

impl std::ops::Deref for Guard {
    type Target = State;
    fn deref(&self) -> &State {
        // SAFETY: `lock` initialised the state before making the guard.
        unsafe { self.0.as_ref().unwrap_unchecked() }
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut State {
        // SAFETY: as above.
        unsafe { self.0.as_mut().unwrap_unchecked() }
    }
}

/// Takes the kernel lock. The caller must be in [`KernelMode`], and must
/// drop the guard before it (bind both, the mode first: a temporary guard
/// in a block's last expression outlives the block's `KernelMode`, and a
/// thread parked between the two would hold the lock while parked).
pub fn lock() -> Guard {
    let mut g = KERNEL.lock().unwrap_or_else(PoisonError::into_inner);
    if g.is_none() {
        *g = Some(State {
            entries: Vec::with_capacity(4096),
            free: Vec::with_capacity(4096),
            threads: Vec::with_capacity(1024),
            vm: Vec::with_capacity(16),
            invalid_releases: Vec::with_capacity(16),
            stray_vm_frees: 0,
        });
    }
    Guard(g)
}

/// Blocks the park signal on the calling thread while it runs kernel code,
/// so it is parked only on its way back to user code.
pub struct KernelMode {
    old: libc::sigset_t,
}

impl KernelMode {
    pub fn enter() -> KernelMode {
        // SAFETY: sigset_t is plain data; the calls only change this
        // thread's mask, restored on drop.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, park::signal());
            park::real_sigmask(libc::SIG_BLOCK, &set, &mut old);
            KernelMode { old }
        }
    }
}

impl Drop for KernelMode {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `enter`.
        unsafe { park::real_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

fn index_of(name: u32) -> usize {
    (name >> 8) as usize
}

fn name_of(index: usize) -> u32 {
    ((index as u32) << 8) | 0x03
}

impl State {
    /// The thread with this tid, created (with libpthread's reference on a
    /// new name) if it was not known.
    pub fn thread_for_tid(&mut self, tid: u64) -> &'static Thread {
        if let Some(t) = self.threads.iter().rev().find(|t| t.tid == tid && t.phase() < Phase::Terminated) {
            return t;
        }
        self.new_thread(tid)
    }

    /// A thread that has just started: any older thread with the same tid
    /// (Linux reuses tids; macOS thread ids never repeat) died unseen, and
    /// is reaped first.
    pub fn new_thread(&mut self, tid: u64) -> &'static Thread {
        let stale: Vec<&'static Thread> =
            self.threads.iter().filter(|t| t.tid == tid && t.phase() < Phase::Reaped).copied().collect();
        for t in stale {
            self.drop_libpthread_ref(t);
            self.destroy_port(t);
        }
        let t: &'static Thread = Box::leak(Box::new(Thread {
            tid,
            pthread: AtomicU64::new(0),
            stack_lo: AtomicU64::new(0),
            stack_hi: AtomicU64::new(0),
            phase: AtomicU8::new(Phase::Active as u8),
            stop_count: AtomicU32::new(0),
            park: AtomicU32::new(park::RUNNING),
            ctx: AtomicPtr::new(std::ptr::null_mut()),
            kernel_entry: [const { AtomicU64::new(0) }; 3],
            name: AtomicU32::new(0),
            libpthread_ref: AtomicBool::new(false),
            interposed: AtomicBool::new(false),
            internal: AtomicBool::new(false),
            cpu_seen: AtomicU64::new(0),
            park_cpu_ns: AtomicU64::new(0),
            suspended_at: AtomicU64::new(0),
            suspender: AtomicBool::new(false),
            qos: AtomicI32::new(0),
        }));
        // SAFETY: getpid cannot fail.
        if tid == unsafe { libc::getpid() } as u64 {
            t.pthread.store(super::pthread::MAIN_PTHREAD.load(Ordering::Acquire), Ordering::Release);
        }
        self.threads.push(t);
        self.add_send_right(t);
        t.libpthread_ref.store(true, Ordering::Release);
        t
    }

    /// Adds one user reference to a send right for `t`'s port: to the name
    /// we hold, or under a new name (a freed one first).
    pub fn add_send_right(&mut self, t: &'static Thread) -> u32 {
        let name = t.name.load(Ordering::Acquire);
        if name != 0 {
            if let Some(Some(e)) = self.entries.get_mut(index_of(name)) {
                e.urefs += 1;
                return name;
            }
        }
        let entry = Some(Entry { right: Right::Send(t), urefs: 1 });
        let index = match self.free.pop() {
            Some(i) => {
                self.entries[i] = entry;
                i
            }
            None => {
                // Index 0 and 1 are never names (MACH_PORT_NULL, the task).
                if self.entries.len() < 2 {
                    self.entries.resize(2, None);
                }
                self.entries.push(entry);
                self.entries.len() - 1
            }
        };
        let name = name_of(index);
        t.name.store(name, Ordering::Release);
        name
    }

    /// What a name denotes: the thread, or the error a MIG call on it gets.
    pub fn lookup(&self, name: u32) -> Result<&'static Thread, i32> {
        if name == 0 || name == PORT_DEAD {
            return Err(MACH_SEND_INVALID_DEST);
        }
        match self.entries.get(index_of(name)).copied().flatten() {
            Some(Entry { right: Right::Send(t), .. }) if name_of(index_of(name)) == name => Ok(t),
            _ => Err(MACH_SEND_INVALID_DEST),
        }
    }

    /// `mach_port_deallocate`.
    pub fn deallocate(&mut self, name: u32) -> i32 {
        if name == 0 || name == PORT_DEAD {
            return KERN_INVALID_RIGHT;
        }
        let index = index_of(name);
        let Some(Some(e)) = self.entries.get_mut(index).filter(|_| name_of(index) == name) else {
            self.invalid_releases.push(name);
            return KERN_INVALID_NAME;
        };
        e.urefs -= 1;
        if e.urefs == 0 {
            if let Right::Send(t) = e.right {
                t.name.store(0, Ordering::Release);
            }
            self.entries[index] = None;
            self.free.push(index);
        }
        KERN_SUCCESS
    }

    /// Destroys `t`'s port: our rights to it become dead names.
    pub fn destroy_port(&mut self, t: &'static Thread) {
        let name = t.name.swap(0, Ordering::AcqRel);
        if let Some(Some(e)) = self.entries.get_mut(index_of(name)) {
            e.right = Right::Dead;
        }
        t.set_phase(Phase::Reaped);
    }

    /// libpthread releases its reference, as `__bsdthread_terminate` does.
    pub fn drop_libpthread_ref(&mut self, t: &'static Thread) {
        if t.libpthread_ref.swap(false, Ordering::AcqRel) {
            let name = t.name.load(Ordering::Acquire);
            if name != 0 {
                self.deallocate(name);
            }
        }
    }

    /// Every name with its user references and thread (None: dead name).
    pub fn rights(&self) -> Vec<(u32, u32, Option<&'static Thread>)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                e.map(|e| {
                    let t = match e.right {
                        Right::Send(t) => Some(t),
                        Right::Dead => None,
                    };
                    (name_of(i), e.urefs, t)
                })
            })
            .collect()
    }
}
