//! Thread queries: enumeration with `task_threads`, identity, stack bounds,
//! names and CPU time. None of these run while a thread is suspended.

use std::mem::size_of;

use super::sys::{
    self, mach_msg_type_number_t, mach_port_deallocate, mach_port_t, mach_task_self, mach_vm_deallocate, task_threads,
    thread_act_array_t, thread_act_t, KERN_SUCCESS, MACH_PORT_NULL,
};
use crate::platform::mach::hook_event::stack_bounds_from_top;
use crate::platform::mach::kern::{IntoResult, KernelError};
use crate::platform::mach::rescan::{name_from_c, FoundThread};
use crate::platform::mach::time::basic_info_cpu_ns;
use crate::sampler::registry::{ThreadEntry, ThreadName};

/// Drops one user reference on a right we own.
pub fn deallocate(port: mach_port_t) {
    if port != MACH_PORT_NULL {
        // SAFETY: releases a reference this process owns on `port`; the
        // call only touches our IPC space. A failure (already gone) is
        // harmless.
        let _ = unsafe { mach_port_deallocate(mach_task_self(), port) };
    }
}

/// Calls every function used here and in the stopped window once, at
/// installation (see `hook::warm_up`); the null port makes each call fail
/// at once.
pub fn warm_up() {
    let _ = thread_tid(MACH_PORT_NULL);
    let _ = cpu_ns(MACH_PORT_NULL);
    let _ = name(MACH_PORT_NULL);
    super::warm_up_sampling();
}

/// The kernel's thread id for `port` (the same value `pthread_threadid_np`
/// reports), or 0 if the thread is gone.
pub fn thread_tid(port: mach_port_t) -> u64 {
    // SAFETY: plain data; all-zero is valid.
    let mut info: sys::thread_identifier_info = unsafe { std::mem::zeroed() };
    let mut count = sys::THREAD_IDENTIFIER_INFO_COUNT;
    // SAFETY: `info` has room for THREAD_IDENTIFIER_INFO_COUNT words, and
    // `count` says so.
    let kr = unsafe {
        sys::thread_info(
            port,
            sys::THREAD_IDENTIFIER_INFO as u32,
            &mut info as *mut sys::thread_identifier_info as sys::thread_info_t,
            &mut count,
        )
    };
    if kr == KERN_SUCCESS {
        info.thread_id
    } else {
        0
    }
}

/// User plus system CPU time, or the `kern_return_t` of the failure.
pub fn cpu_ns(port: mach_port_t) -> Result<u64, KernelError> {
    cpu_and_state(port).map(|(ns, _)| ns)
}

/// `run_state` of a thread on a CPU now.
const TH_STATE_RUNNING: i32 = 1;

/// As [`cpu_ns`], and whether the thread is on a CPU. The kernel adds a
/// thread's time to its counters at context switches, so a thread that has
/// run on its own core since its last one shows no progress: its run state
/// says it runs.
pub fn cpu_and_state(port: mach_port_t) -> Result<(u64, bool), KernelError> {
    // SAFETY: plain data; all-zero is valid.
    let mut info: sys::thread_basic_info = unsafe { std::mem::zeroed() };
    let mut count = sys::THREAD_BASIC_INFO_COUNT;
    // SAFETY: `info` has room for THREAD_BASIC_INFO_COUNT words.
    let kr = unsafe {
        sys::thread_info(
            port,
            sys::THREAD_BASIC_INFO as u32,
            &mut info as *mut sys::thread_basic_info as sys::thread_info_t,
            &mut count,
        )
    };
    kr.into_result()?;
    let (u, s) = (info.user_time, info.system_time);
    let running = info.run_state as i32 == TH_STATE_RUNNING;
    Ok((basic_info_cpu_ns((u.seconds, u.microseconds), (s.seconds, s.microseconds)), running))
}

/// The thread's name as the kernel has it (`pthread_setname_np` stores it
/// there). Unlike `pthread_getname_np` on another thread, this takes no
/// libpthread lock.
pub fn name(port: mach_port_t) -> Option<ThreadName> {
    // SAFETY: plain data; all-zero is valid.
    let mut info: sys::thread_extended_info = unsafe { std::mem::zeroed() };
    let mut count = sys::THREAD_EXTENDED_INFO_COUNT;
    // SAFETY: `info` has room for THREAD_EXTENDED_INFO_COUNT words.
    let kr = unsafe {
        sys::thread_info(
            port,
            sys::THREAD_EXTENDED_INFO as u32,
            &mut info as *mut sys::thread_extended_info as sys::thread_info_t,
            &mut count,
        )
    };
    (kr == KERN_SUCCESS).then(|| name_from_c(&info.pth_name))
}

/// Lists the task's threads into `out`. Each port carries a send right the
/// caller now owns and must keep or release. The kernel's array is freed
/// here.
pub fn list(out: &mut Vec<FoundThread>) -> Result<(), KernelError> {
    out.clear();
    let mut array: thread_act_array_t = std::ptr::null_mut();
    let mut count: mach_msg_type_number_t = 0;
    // SAFETY: both out-pointers are valid; on success the kernel maps an
    // array of `count` ports into our address space.
    unsafe { task_threads(mach_task_self(), &mut array, &mut count) }.into_result()?;
    if array.is_null() {
        return Ok(());
    }
    // SAFETY: on success `array` points to `count` initialised ports.
    let ports: &[thread_act_t] = unsafe { std::slice::from_raw_parts(array, count as usize) };
    out.reserve(ports.len());
    for &port in ports {
        out.push(FoundThread { port, tid: thread_tid(port) });
    }
    let bytes = (count as usize * size_of::<thread_act_t>()) as u64;
    // SAFETY: the array was allocated in our address space by task_threads,
    // and nothing refers to it after this point (`ports` is not used again).
    let _ = unsafe { mach_vm_deallocate(mach_task_self(), array as u64, bytes) };
    Ok(())
}

/// Builds a registry entry for a thread found by `task_threads`. Its stack
/// bounds come through `pthread_from_mach_thread_np`, which takes
/// libpthread's list lock: fine here, never in the hook or the window. A
/// thread that is not a pthread (or exits meanwhile) gets empty bounds and
/// is sampled pc-only.
pub fn describe(found: &FoundThread, main_tid: u64) -> ThreadEntry {
    // SAFETY: looks the port up in libpthread's thread list; returns null
    // if no pthread has it.
    let pt = unsafe { sys::pthread_from_mach_thread_np(found.port) };
    let bounds = if pt == 0 {
        crate::sampler::walker::StackBounds::EMPTY
    } else {
        // SAFETY: for a thread other than the caller, both functions
        // re-validate `pt` under the list lock and return an error value
        // (which `stack_bounds_from_top` rejects) if it has gone.
        let (top, size) = unsafe { (sys::pthread_get_stackaddr_np(pt) as u64, sys::pthread_get_stacksize_np(pt)) };
        stack_bounds_from_top(top, size as u64)
    };
    let mut entry =
        ThreadEntry::new(found.tid, found.port as u64, name(found.port).unwrap_or(ThreadName::EMPTY), bounds);
    entry.is_main = found.tid == main_tid;
    entry
}
