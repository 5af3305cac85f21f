//! A simulation of the Mach and libSystem calls the Mach backend makes,
//! so that backend runs on Linux (cargo feature `machsim`).
//!
//! It is as strict as XNU and no kinder: port names carry user-reference
//! counts, become dead names when their thread is reaped, and a freed name
//! is reused at once; `task_threads` returns send rights in memory that
//! must be `vm_deallocate`d; suspension is real and nests ([`park`]);
//! `thread_get_state` reads the parked thread's `ucontext_t` and adds fake
//! pointer-authentication bits; an exiting thread passes through the
//! phases of [`kernel::Phase`], returning `KERN_TERMINATED`,
//! `KERN_INVALID_ARGUMENT` and `MACH_SEND_INVALID_DEST` where XNU does.
//! [`audit`] accounts for every right and every suspension. What it cannot
//! show is in `docs/design/mach-simulation.md`.

#![allow(non_camel_case_types, non_upper_case_globals, clippy::missing_safety_doc)]

pub mod audit;
pub mod dyld;
pub mod faults;
pub mod kernel;
pub mod park;
pub mod pthread;

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::Ordering;

pub use dyld::{_dyld_get_image_header, _dyld_get_image_name, _dyld_get_image_vmaddr_slide, _dyld_image_count};
pub use kernel::{KERN_FAILURE, KERN_INVALID_ARGUMENT, KERN_SUCCESS, KERN_TERMINATED, MACH_SEND_INVALID_DEST};
pub use pthread::THREAD_TERMINATE as PTHREAD_INTROSPECTION_THREAD_TERMINATE;
pub use pthread::{IntrospectionHook, THREAD_START as PTHREAD_INTROSPECTION_THREAD_START};

use faults::Call;
use kernel::{KernelMode, Phase, Thread, KERN_ABORTED, KERN_INVALID_TASK};

pub type kern_return_t = c_int;
pub type mach_port_t = c_uint;
pub type thread_act_t = mach_port_t;
pub type mach_msg_type_number_t = c_uint;
pub type thread_state_t = *mut c_uint;
pub type thread_state_flavor_t = c_int;
pub type thread_act_array_t = *mut thread_act_t;
pub type thread_info_t = *mut c_int;

pub const MACH_PORT_NULL: mach_port_t = 0;
pub const x86_THREAD_STATE64: thread_state_flavor_t = 4;
pub const ARM_THREAD_STATE64: thread_state_flavor_t = 6;
pub const THREAD_BASIC_INFO: c_int = 3;
pub const THREAD_IDENTIFIER_INFO: c_int = 4;
pub const THREAD_EXTENDED_INFO: c_int = 5;
pub const THREAD_BASIC_INFO_COUNT: mach_msg_type_number_t = 10;
pub const THREAD_IDENTIFIER_INFO_COUNT: mach_msg_type_number_t = 6;
pub const THREAD_EXTENDED_INFO_COUNT: mach_msg_type_number_t = 28;
pub const MAXTHREADNAMESIZE: usize = 64;
/// `thread_basic_info.run_state`.
pub const TH_STATE_RUNNING: c_int = 1;
pub const TH_STATE_STOPPED: c_int = 2;
pub const TH_STATE_WAITING: c_int = 3;
pub const TH_STATE_HALTED: c_int = 5;
/// Simulated Apple silicon: 24 MHz ticks.
pub const TIMEBASE: (u32, u32) = (125, 3);
/// What `machdep.virtual_address_size` answers (Linux x86_64 and arm64
/// user space fit in 47 bits).
pub const VA_BITS: c_int = 47;
/// Fake pointer-authentication bits added to returned code and frame
/// pointers: bits 47..=54 and 56..=63, as an arm64e signature.
pub const FAKE_PAC: u64 = 0xa53a_8000_0000_0000;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mach_timebase_info {
    pub numer: u32,
    pub denom: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct x86_thread_state64_t {
    pub __rax: u64,
    pub __rbx: u64,
    pub __rcx: u64,
    pub __rdx: u64,
    pub __rdi: u64,
    pub __rsi: u64,
    pub __rbp: u64,
    pub __rsp: u64,
    pub __r8: u64,
    pub __r9: u64,
    pub __r10: u64,
    pub __r11: u64,
    pub __r12: u64,
    pub __r13: u64,
    pub __r14: u64,
    pub __r15: u64,
    pub __rip: u64,
    pub __rflags: u64,
    pub __cs: u64,
    pub __fs: u64,
    pub __gs: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct arm_thread_state64_t {
    pub __x: [u64; 29],
    pub __fp: u64,
    pub __lr: u64,
    pub __sp: u64,
    pub __pc: u64,
    pub __cpsr: u32,
    pub __pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct time_value_t {
    pub seconds: c_int,
    pub microseconds: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct thread_basic_info {
    pub user_time: time_value_t,
    pub system_time: time_value_t,
    pub cpu_usage: c_int,
    pub policy: c_int,
    pub run_state: c_int,
    pub flags: c_int,
    pub suspend_count: c_int,
    pub sleep_time: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct thread_identifier_info {
    pub thread_id: u64,
    pub thread_handle: u64,
    pub dispatch_qaddr: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct thread_extended_info {
    pub pth_user_time: u64,
    pub pth_system_time: u64,
    pub pth_cpu_usage: c_int,
    pub pth_policy: c_int,
    pub pth_run_state: c_int,
    pub pth_flags: c_int,
    pub pth_sleep_time: c_int,
    pub pth_curpri: c_int,
    pub pth_priority: c_int,
    pub pth_maxpriority: c_int,
    pub pth_name: [c_char; MAXTHREADNAMESIZE],
}

const _: () = {
    assert!(std::mem::size_of::<thread_basic_info>() == THREAD_BASIC_INFO_COUNT as usize * 4);
    assert!(std::mem::size_of::<thread_identifier_info>() == THREAD_IDENTIFIER_INFO_COUNT as usize * 4);
    assert!(std::mem::size_of::<thread_extended_info>() == THREAD_EXTENDED_INFO_COUNT as usize * 4);
};

#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum qos_class_t {
    QOS_CLASS_USER_INTERACTIVE = 0x21,
    QOS_CLASS_USER_INITIATED = 0x19,
    QOS_CLASS_DEFAULT = 0x15,
    QOS_CLASS_UTILITY = 0x11,
    QOS_CLASS_BACKGROUND = 0x09,
    QOS_CLASS_UNSPECIFIED = 0x00,
}

/// Stops the process with a message: a broken invariant of the simulated
/// kernel, or a misuse Mach itself would punish (hang, crash).
pub fn fatal(msg: &str) -> ! {
    eprintln!("{msg}");
    std::process::abort()
}

pub fn gettid() -> u64 {
    // SAFETY: gettid cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's kernel object.
fn current() -> &'static Thread {
    let _k = KernelMode::enter();
    let t = kernel::lock().thread_for_tid(gettid());
    if t.pthread.load(Ordering::Acquire) == 0 {
        pthread::register_self(t);
    }
    t
}

/// Looks a thread call's port up: the thread, or the call's error.
fn thread_of(name: thread_act_t) -> Result<&'static Thread, kern_return_t> {
    let t = {
        let _k = KernelMode::enter();
        let k = kernel::lock();
        k.lookup(name)?
    };
    match t.call_error() {
        Some(kr) => Err(kr),
        None => Ok(t),
    }
}

// ----- time -----------------------------------------------------------------

pub unsafe fn mach_absolute_time() -> u64 {
    (monotonic_ns() as u128 * TIMEBASE.1 as u128 / TIMEBASE.0 as u128) as u64
}

pub unsafe fn mach_timebase_info(info: *mut mach_timebase_info) -> kern_return_t {
    if let Some(kr) = faults::take(Call::TimebaseInfo) {
        return kr;
    }
    // SAFETY: the caller passes a valid out-pointer.
    unsafe { *info = mach_timebase_info { numer: TIMEBASE.0, denom: TIMEBASE.1 } };
    KERN_SUCCESS
}

pub unsafe fn mach_wait_until(deadline: u64) -> kern_return_t {
    if let Some(kr) = faults::take(Call::WaitUntil) {
        return kr;
    }
    let ns = (deadline as u128 * TIMEBASE.0 as u128).div_ceil(TIMEBASE.1 as u128) as u64;
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 };
    // SAFETY: an absolute sleep on the monotonic clock.
    let rc = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
    if rc == libc::EINTR {
        KERN_ABORTED
    } else {
        KERN_SUCCESS
    }
}

// ----- task_info --------------------------------------------------------------

pub const TASK_DYLD_INFO: c_uint = 17;
pub const TASK_DYLD_INFO_COUNT: mach_msg_type_number_t = 5;

#[repr(C, packed(4))]
#[derive(Clone, Copy, Default)]
pub struct task_dyld_info {
    pub all_image_info_addr: u64,
    pub all_image_info_size: u64,
    pub all_image_info_format: c_int,
}

/// The Mach-O image a test puts where dyld's own image would be (Linux has
/// no dyld: its loader, ld.so, is in the simulated image list already).
/// Unset, `TASK_DYLD_INFO` fails, as it never does on a Mac.
pub static DYLD_ITSELF: std::sync::Mutex<Option<&'static [u8]>> = std::sync::Mutex::new(None);

/// `dyld_all_image_infos` as far as the backend reads it: version 2 and
/// later keep dyld's load address at byte 32.
#[repr(C)]
struct AllImageInfos {
    version: u32,
    count: u32,
    info_array: u64,
    notification: u64,
    flags: [u8; 8],
    dyld_image_load_address: u64,
}

pub unsafe fn task_info(
    task: mach_port_t,
    flavor: c_uint,
    out: *mut c_int,
    count: *mut mach_msg_type_number_t,
) -> kern_return_t {
    let Some(image) = *DYLD_ITSELF.lock().unwrap_or_else(|e| e.into_inner()) else { return KERN_FAILURE };
    // SAFETY: the caller passes a count it may read and write.
    if task != kernel::TASK_NAME || flavor != TASK_DYLD_INFO || unsafe { *count } < TASK_DYLD_INFO_COUNT {
        return KERN_INVALID_ARGUMENT;
    }
    let infos = Box::leak(Box::new(AllImageInfos {
        version: 15,
        count: 0,
        info_array: 0,
        notification: 0,
        flags: [0; 8],
        dyld_image_load_address: image.as_ptr() as u64,
    }));
    let info = task_dyld_info {
        all_image_info_addr: infos as *const AllImageInfos as u64,
        all_image_info_size: std::mem::size_of::<AllImageInfos>() as u64,
        all_image_info_format: 1,
    };
    // SAFETY: the caller's buffer holds TASK_DYLD_INFO_COUNT words.
    unsafe {
        (out as *mut task_dyld_info).write_unaligned(info);
        *count = TASK_DYLD_INFO_COUNT;
    }
    KERN_SUCCESS
}

// ----- ports ----------------------------------------------------------------

pub unsafe fn mach_task_self() -> mach_port_t {
    kernel::TASK_NAME
}

pub unsafe fn mach_thread_self() -> mach_port_t {
    if faults::take(Call::ThreadSelf).is_some() {
        return MACH_PORT_NULL;
    }
    let t = current();
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    k.add_send_right(t)
}

pub unsafe fn mach_port_deallocate(task: mach_port_t, name: mach_port_t) -> kern_return_t {
    if task != kernel::TASK_NAME {
        return KERN_INVALID_TASK;
    }
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    k.deallocate(name)
}

pub unsafe fn mach_vm_deallocate(task: mach_port_t, address: u64, size: u64) -> kern_return_t {
    if task != kernel::TASK_NAME {
        return KERN_INVALID_TASK;
    }
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    match k.vm.iter().position(|&(a, s)| a == address && s == size.next_multiple_of(4096)) {
        Some(i) => {
            k.vm.swap_remove(i);
            // SAFETY: the mapping `task_threads` made, unmapped whole.
            unsafe { libc::munmap(address as *mut c_void, size as usize) };
        }
        // Not what task_threads gave out (or not all of it): recorded for
        // the audit, memory left alone.
        None => k.stray_vm_frees += 1,
    }
    KERN_SUCCESS
}

pub type vm_region_info_t = *mut c_int;
pub const VM_REGION_BASIC_INFO_64: c_int = 9;
pub const VM_REGION_BASIC_INFO_COUNT_64: mach_msg_type_number_t = 9;
pub const VM_PROT_READ: c_int = 1;
pub const VM_PROT_EXECUTE: c_int = 4;

#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug)]
pub struct vm_region_basic_info_64 {
    pub protection: c_int,
    pub max_protection: c_int,
    pub inheritance: c_uint,
    pub shared: c_uint,
    pub reserved: c_uint,
    pub offset: u64,
    pub behavior: c_int,
    pub user_wired_count: u16,
}

const _: () = assert!(std::mem::size_of::<vm_region_basic_info_64>() == VM_REGION_BASIC_INFO_COUNT_64 as usize * 4);

/// `mach_vm_region` from `/proc/self/maps`: the first region that ends
/// above `*address`, its start written back, as XNU does.
pub unsafe fn mach_vm_region(
    task: mach_port_t,
    address: *mut u64,
    size: *mut u64,
    flavor: c_int,
    info: vm_region_info_t,
    count: *mut mach_msg_type_number_t,
    object: *mut mach_port_t,
) -> kern_return_t {
    // SAFETY: the caller passes valid pointers (checked count below).
    unsafe {
        if task != kernel::TASK_NAME {
            return MACH_SEND_INVALID_DEST;
        }
        if flavor != VM_REGION_BASIC_INFO_64 || *count < VM_REGION_BASIC_INFO_COUNT_64 {
            return KERN_INVALID_ARGUMENT;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let want = *address;
        for line in maps.lines() {
            let mut it = line.split_ascii_whitespace();
            let (Some(range), Some(perms)) = (it.next(), it.next()) else { continue };
            let Some((a, b)) = range.split_once('-') else { continue };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
            if b <= want {
                continue;
            }
            let p = perms.as_bytes();
            let protection = (p[0] == b'r') as c_int | ((p[1] == b'w') as c_int) << 1 | ((p[2] == b'x') as c_int) << 2;
            *address = a;
            *size = b - a;
            *info.cast::<vm_region_basic_info_64>() = vm_region_basic_info_64 {
                protection,
                max_protection: 7,
                inheritance: 0,
                shared: (p[3] == b's') as c_uint,
                reserved: 0,
                offset: 0,
                behavior: 0,
                user_wired_count: 0,
            };
            *count = VM_REGION_BASIC_INFO_COUNT_64;
            *object = MACH_PORT_NULL;
            return KERN_SUCCESS;
        }
        kernel::KERN_INVALID_ADDRESS
    }
}

/// Copies `size` bytes at `address` into `data`, as the kernel does: a
/// page that is not mapped readable fails the call instead of faulting
/// (`process_vm_readv` on the calling process checks each page the same way).
pub unsafe fn mach_vm_read_overwrite(
    task: mach_port_t,
    address: u64,
    size: u64,
    data: u64,
    out_size: *mut u64,
) -> kern_return_t {
    if task != kernel::TASK_NAME {
        return KERN_INVALID_TASK;
    }
    let local = libc::iovec { iov_base: data as *mut c_void, iov_len: size as usize };
    let remote = libc::iovec { iov_base: address as *mut c_void, iov_len: size as usize };
    // SAFETY: the kernel writes at most `size` bytes at `data`, which the
    // caller provides, and reads the source with its own checks.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 || n as u64 != size {
        return kernel::KERN_INVALID_ADDRESS;
    }
    if !out_size.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *out_size = size };
    }
    KERN_SUCCESS
}

// ----- threads --------------------------------------------------------------

/// Lists the task's threads: every thread in `/proc/self/task` but the
/// simulation's own. Threads the kernel knew that are gone are reaped.
fn live_threads() -> Vec<&'static Thread> {
    while pthread::STARTING.load(Ordering::SeqCst) > 0 {
        std::thread::yield_now();
    }
    let mut tids: Vec<u64> = std::fs::read_dir("/proc/self/task")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    let known: Vec<&'static Thread> = k.threads.clone();
    for t in known {
        let gone = tids.binary_search(&t.tid).is_err();
        match t.phase() {
            Phase::Active if gone => {
                // Exited without going through the interposer.
                k.drop_libpthread_ref(t);
                k.destroy_port(t);
            }
            Phase::Disabled if gone => k.destroy_port(t),
            _ => {}
        }
    }
    tids.iter()
        .map(|&tid| k.thread_for_tid(tid))
        .filter(|t| !t.internal.load(Ordering::Relaxed) && t.phase() < Phase::Terminated)
        .collect()
}

pub unsafe fn task_threads(
    task: mach_port_t,
    list: *mut thread_act_array_t,
    count: *mut mach_msg_type_number_t,
) -> kern_return_t {
    if let Some(kr) = faults::take(Call::TaskThreads) {
        return kr;
    }
    if task != kernel::TASK_NAME {
        return MACH_SEND_INVALID_DEST;
    }
    let threads = live_threads();
    let bytes = (threads.len() * 4).next_multiple_of(4096).max(4096) as u64;
    // SAFETY: an anonymous private mapping, as vm_allocate makes.
    let array = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if array == libc::MAP_FAILED {
        return kernel::KERN_FAILURE;
    }
    let _k = KernelMode::enter();
    let mut k = kernel::lock();
    k.vm.push((array as u64, bytes));
    let ports = array.cast::<thread_act_t>();
    for (i, t) in threads.iter().enumerate() {
        let name = k.add_send_right(t);
        // SAFETY: `i` < threads.len(), within the mapping.
        unsafe { *ports.add(i) = name };
    }
    // SAFETY: out-pointers from the caller.
    unsafe {
        *list = ports;
        *count = threads.len() as mach_msg_type_number_t;
    }
    KERN_SUCCESS
}

pub unsafe fn thread_suspend(name: thread_act_t) -> kern_return_t {
    let t = match thread_of(name) {
        Ok(t) => t,
        Err(kr) => return kr,
    };
    // Faults answer calls on real threads (not the warm-up's null port).
    if let Some(kr) = faults::take(Call::ThreadSuspend) {
        return kr;
    }
    if t.tid == gettid() {
        fatal("machsim: FATAL: thread_suspend on the calling thread: nothing would ever resume it");
    }
    audit::start_watchdog();
    current().suspender.store(true, Ordering::Relaxed);
    if t.stop_count.fetch_add(1, Ordering::SeqCst) == 0 {
        t.suspended_at.store(monotonic_ns(), Ordering::Relaxed);
        if park::stop(t) == park::Stop::Ended && t.phase() == Phase::Active {
            // It vanished without an exit we saw.
            t.stop_count.store(0, Ordering::SeqCst);
            return KERN_TERMINATED;
        }
    }
    KERN_SUCCESS
}

pub unsafe fn thread_resume(name: thread_act_t) -> kern_return_t {
    let t = match thread_of(name) {
        Ok(t) => t,
        Err(kr) => return kr,
    };
    // Faults answer calls on real threads (not the warm-up's null port).
    if let Some(kr) = faults::take(Call::ThreadResume) {
        return kr;
    }
    let mut n = t.stop_count.load(Ordering::SeqCst);
    loop {
        if n == 0 {
            return KERN_FAILURE;
        }
        match t.stop_count.compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => break,
            Err(now) => n = now,
        }
    }
    if n == 1 {
        park::release(t);
    }
    KERN_SUCCESS
}

/// The registers of a parked (or kernel-entered) thread: (rip/pc, rsp/sp,
/// rbp/fp, lr).
fn registers_of(t: &'static Thread) -> Option<(u64, u64, u64, u64)> {
    if t.phase() == Phase::Unmapped {
        let [pc, sp, fp] = &t.kernel_entry;
        return Some((pc.load(Ordering::Relaxed), sp.load(Ordering::Relaxed), fp.load(Ordering::Relaxed), 0));
    }
    let ctx = t.ctx.load(Ordering::Acquire);
    if ctx.is_null() || t.park.load(Ordering::Acquire) != park::PARKED {
        return None;
    }
    // SAFETY: the context stays valid while the thread is parked, which it
    // is until its stop count (held by our caller) returns to zero.
    let mc = unsafe { &(*ctx).uc_mcontext };
    #[cfg(target_arch = "x86_64")]
    {
        let g = &mc.gregs;
        let r = |i: c_int| g[i as usize] as u64;
        Some((r(libc::REG_RIP), r(libc::REG_RSP), r(libc::REG_RBP), 0))
    }
    #[cfg(target_arch = "aarch64")]
    {
        Some((mc.pc, mc.sp, mc.regs[29], mc.regs[30]))
    }
}

pub unsafe fn thread_get_state(
    name: thread_act_t,
    flavor: thread_state_flavor_t,
    state: thread_state_t,
    count: *mut mach_msg_type_number_t,
) -> kern_return_t {
    let t = match thread_of(name) {
        Ok(t) => t,
        Err(kr) => return kr,
    };
    // Faults answer calls on real threads (not the warm-up's null port).
    if let Some(kr) = faults::take(Call::ThreadGetState) {
        return kr;
    }
    let (want, host) = if cfg!(target_arch = "aarch64") { (68, ARM_THREAD_STATE64) } else { (42, x86_THREAD_STATE64) };
    // SAFETY: the caller passes a valid count.
    if flavor != host || unsafe { *count } < want {
        return KERN_INVALID_ARGUMENT;
    }
    // Like XNU, hold the thread for the read if nobody has.
    let held = t.stop_count.fetch_add(1, Ordering::SeqCst) == 0;
    if held && park::stop(t) == park::Stop::Ended {
        t.stop_count.fetch_sub(1, Ordering::SeqCst);
        return KERN_TERMINATED;
    }
    let regs = registers_of(t);
    if t.stop_count.fetch_sub(1, Ordering::SeqCst) == 1 {
        park::release(t);
    }
    let Some((pc, sp, fp, lr)) = regs else { return KERN_TERMINATED };
    let short = faults::take(Call::ThreadGetStateShort).is_some();
    // SAFETY: `state` has room for `want` words (checked above).
    unsafe {
        if cfg!(target_arch = "aarch64") {
            let s = state.cast::<arm_thread_state64_t>();
            *s = arm_thread_state64_t {
                __fp: fp | FAKE_PAC,
                __lr: lr | FAKE_PAC,
                __sp: sp,
                __pc: pc | FAKE_PAC,
                ..Default::default()
            };
        } else {
            let s = state.cast::<x86_thread_state64_t>();
            *s = x86_thread_state64_t { __rip: pc | FAKE_PAC, __rsp: sp, __rbp: fp | FAKE_PAC, ..Default::default() };
        }
        *count = if short { want - 2 } else { want };
    }
    KERN_SUCCESS
}

/// A thread's CPU time (total, user) in ns from its CPU clocks, or None
/// if the thread no longer exists.
pub(crate) fn cpu_times(tid: u64) -> Option<(u64, u64)> {
    let read = |clock: libc::clockid_t| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid out-pointer; an unknown clock fails with EINVAL.
        (unsafe { libc::clock_gettime(clock, &mut ts) } == 0)
            .then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    };
    let base = (!(tid as libc::clockid_t)) << 3;
    let total = read(base | 6)?;
    let user = read(base | 5).unwrap_or(total).min(total);
    Some((total, user))
}

fn time_value(ns: u64) -> time_value_t {
    time_value_t { seconds: (ns / 1_000_000_000) as c_int, microseconds: ((ns % 1_000_000_000) / 1000) as c_int }
}

/// Test knob: `thread_info` reports no CPU time at all, as XNU does for a
/// thread that has run on its own core since its last context switch (its
/// counters are updated then); the run state still tells it runs.
pub static CPU_CLOCK_LAGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub unsafe fn thread_info(
    name: thread_act_t,
    flavor: c_uint,
    out: thread_info_t,
    count: *mut mach_msg_type_number_t,
) -> kern_return_t {
    let flavor = flavor as c_int;
    let t = match thread_of(name) {
        Ok(t) => t,
        Err(kr) => return kr,
    };
    let fault = match flavor {
        THREAD_BASIC_INFO => faults::take(Call::ThreadInfoBasic),
        THREAD_IDENTIFIER_INFO => faults::take(Call::ThreadInfoIdentifier),
        THREAD_EXTENDED_INFO => faults::take(Call::ThreadInfoExtended),
        _ => None,
    };
    if let Some(kr) = fault {
        return kr;
    }
    let want = match flavor {
        THREAD_BASIC_INFO => THREAD_BASIC_INFO_COUNT,
        THREAD_IDENTIFIER_INFO => THREAD_IDENTIFIER_INFO_COUNT,
        THREAD_EXTENDED_INFO => THREAD_EXTENDED_INFO_COUNT,
        _ => return KERN_INVALID_ARGUMENT,
    };
    // SAFETY: the caller passes a valid count.
    if unsafe { *count } < want {
        return KERN_INVALID_ARGUMENT;
    }
    let Some((total, user)) = cpu_times(t.tid) else {
        // Gone without our seeing its exit: reap it now.
        let _k = KernelMode::enter();
        let mut k = kernel::lock();
        k.drop_libpthread_ref(t);
        k.destroy_port(t);
        return MACH_SEND_INVALID_DEST;
    };
    // What the thread ran itself: being parked is not its CPU time.
    let parked = t.park_cpu_ns.load(Ordering::Relaxed);
    let total = total.saturating_sub(parked).max(t.cpu_seen.load(Ordering::Relaxed));
    let user = user.min(total);
    let before = t.cpu_seen.swap(total, Ordering::Relaxed);
    let stopped = t.stop_count.load(Ordering::Relaxed);
    let run_state = match t.phase() {
        _ if stopped > 0 => TH_STATE_STOPPED,
        Phase::Unmapped => TH_STATE_HALTED,
        _ if total > before => TH_STATE_RUNNING,
        _ => TH_STATE_WAITING,
    };
    let (total, user) = if CPU_CLOCK_LAGS.load(Ordering::Relaxed) { (0, 0) } else { (total, user) };
    // SAFETY: `out` has room for `want` words (checked above).
    unsafe {
        match flavor {
            THREAD_BASIC_INFO => {
                *out.cast::<thread_basic_info>() = thread_basic_info {
                    user_time: time_value(user),
                    system_time: time_value(total - user),
                    run_state,
                    suspend_count: stopped as c_int,
                    ..Default::default()
                };
            }
            THREAD_IDENTIFIER_INFO => {
                *out.cast::<thread_identifier_info>() = thread_identifier_info {
                    thread_id: t.tid,
                    thread_handle: t.pthread.load(Ordering::Relaxed),
                    dispatch_qaddr: 0,
                };
            }
            _ => {
                let mut info = thread_extended_info {
                    pth_user_time: user,
                    pth_system_time: total - user,
                    pth_cpu_usage: 0,
                    pth_policy: 0,
                    pth_run_state: run_state,
                    pth_flags: 0,
                    pth_sleep_time: 0,
                    pth_curpri: 0,
                    pth_priority: 0,
                    pth_maxpriority: 0,
                    pth_name: [0; MAXTHREADNAMESIZE],
                };
                read_name(t.tid, &mut info.pth_name);
                *out.cast::<thread_extended_info>() = info;
            }
        }
        *count = want;
    }
    KERN_SUCCESS
}

/// The thread's name (`/proc/self/task/<tid>/comm`), without allocating.
fn read_name(tid: u64, out: &mut [c_char; MAXTHREADNAMESIZE]) {
    let mut path = [0u8; 64];
    let mut w = std::io::Cursor::new(&mut path[..]);
    use std::io::Write;
    if write!(w, "/proc/self/task/{tid}/comm\0").is_err() {
        return;
    }
    let mut buf = [0u8; 64];
    // SAFETY: a NUL-terminated path; the read fills at most `buf`.
    let n = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len() - 1);
        libc::close(fd);
        n
    };
    for (d, &s) in out.iter_mut().zip(&buf[..n.max(0) as usize]) {
        *d = if s == b'\n' { 0 } else { s as c_char };
    }
}

// ----- libpthread -------------------------------------------------------------

pub unsafe fn pthread_introspection_hook_install(hook: IntrospectionHook) -> Option<IntrospectionHook> {
    pthread::install_hook(hook)
}

fn thread_by_pthread(pt: libc::pthread_t) -> Option<&'static Thread> {
    // SAFETY: pthread_self has no preconditions.
    if pt == unsafe { libc::pthread_self() } {
        return Some(current());
    }
    let _k = KernelMode::enter();
    let k = kernel::lock();
    k.threads.iter().rev().find(|t| t.pthread.load(Ordering::Relaxed) == pt && t.phase() < Phase::Reaped).copied()
}

pub unsafe fn pthread_threadid_np(pt: libc::pthread_t, tid: *mut u64) -> c_int {
    let t = if pt == 0 { Some(current()) } else { thread_by_pthread(pt) };
    let Some(t) = t else { return libc::ESRCH };
    let value = if faults::take(Call::ThreadIdZero).is_some() { 0 } else { t.tid };
    // SAFETY: the caller passes a valid out-pointer.
    unsafe { *tid = value };
    0
}

pub unsafe fn pthread_mach_thread_np(pt: libc::pthread_t) -> mach_port_t {
    match thread_by_pthread(pt) {
        Some(t) => {
            if t.name.load(Ordering::Acquire) == 0 && t.phase() < Phase::Terminated {
                // libpthread's own reference, lost if a caller released it.
                let _k = KernelMode::enter();
                kernel::lock().add_send_right(t);
                t.libpthread_ref.store(true, Ordering::Release);
            }
            t.name.load(Ordering::Acquire)
        }
        None => MACH_PORT_NULL,
    }
}

pub unsafe fn pthread_from_mach_thread_np(name: mach_port_t) -> libc::pthread_t {
    if faults::take(Call::PthreadFromPort).is_some() {
        return 0;
    }
    let _k = KernelMode::enter();
    let k = kernel::lock();
    match k.lookup(name) {
        Ok(t) if t.phase() < Phase::Terminated => t.pthread.load(Ordering::Relaxed) as libc::pthread_t,
        _ => 0,
    }
}

pub unsafe fn pthread_get_stackaddr_np(pt: libc::pthread_t) -> *mut c_void {
    if faults::take(Call::StackAddr).is_some() {
        return std::ptr::null_mut();
    }
    match thread_by_pthread(pt) {
        Some(t) => {
            if t.stack_hi.load(Ordering::Acquire) == 0 {
                let (lo, hi) = pthread::stack_of(pt);
                t.stack_lo.store(lo, Ordering::Relaxed);
                t.stack_hi.store(hi, Ordering::Release);
            }
            t.stack_hi.load(Ordering::Acquire) as *mut c_void
        }
        None => std::ptr::null_mut(),
    }
}

pub unsafe fn pthread_get_stacksize_np(pt: libc::pthread_t) -> usize {
    match thread_by_pthread(pt) {
        Some(t) => (t.stack_hi.load(Ordering::Acquire) - t.stack_lo.load(Ordering::Acquire)) as usize,
        None => 0,
    }
}

pub unsafe fn pthread_main_np() -> c_int {
    // SAFETY: getpid cannot fail.
    (gettid() == unsafe { libc::getpid() } as u64) as c_int
}

pub unsafe fn pthread_set_qos_class_self_np(class: qos_class_t, _priority: c_int) -> c_int {
    current().qos.store(class as i32, Ordering::Relaxed);
    // USER_INTERACTIVE is macOS's highest priority short of real time; its
    // Linux counterpart is a negative nice value (where permitted).
    if class == qos_class_t::QOS_CLASS_USER_INTERACTIVE {
        // SAFETY: changes the calling thread's nice value only.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid() as libc::id_t, -10) };
    }
    0
}

/// The tids of the threads that set `class` for themselves.
pub fn threads_with_qos(class: qos_class_t) -> Vec<u64> {
    let _k = KernelMode::enter();
    let k = kernel::lock();
    k.threads.iter().filter(|t| t.qos.load(Ordering::Relaxed) == class as i32).map(|t| t.tid).collect()
}

pub unsafe fn sysctlbyname(
    name: *const c_char,
    old: *mut c_void,
    oldlen: *mut usize,
    _new: *mut c_void,
    _newlen: usize,
) -> c_int {
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    let value: c_int = match name {
        b"sysctl.proc_translated" => faults::take(Call::Rosetta).map_or(0, |_| 1),
        b"machdep.virtual_address_size" if faults::take(Call::VaBits).is_some() => return -1,
        b"machdep.virtual_address_size" => VA_BITS,
        _ => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = libc::ENOENT };
            return -1;
        }
    };
    // SAFETY: the caller passes room for `*oldlen` bytes.
    unsafe {
        if *oldlen < 4 {
            *libc::__errno_location() = libc::ENOMEM;
            return -1;
        }
        *old.cast::<c_int>() = value;
        *oldlen = 4;
    }
    0
}
