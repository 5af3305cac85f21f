//! The calling thread's OS id, without allocating or locking: safe in a
//! signal handler and in the stopped window.

/// The calling thread's id as the OS reports it to users: the Linux tid,
/// or macOS's `pthread_threadid_np`.
#[inline]
pub fn current() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as u64 }
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut tid = 0u64;
        // SAFETY: a null thread means the calling thread; `tid` is a valid
        // out-pointer.
        unsafe { libc::pthread_threadid_np(0 as libc::pthread_t, &mut tid) };
        tid
    }
}
