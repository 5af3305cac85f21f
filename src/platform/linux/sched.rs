//! Scheduling of the addon's own threads that sleep almost always and must
//! run soon after a wake-up: the sampler thread, and the thread that asks
//! V8 to register an isolate while that isolate's thread waits in its
//! signal handler. With more runnable threads than cores, a normal thread
//! woken up waits for others' time slices (several ms each).

/// How the calling thread was made to run promptly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promptness {
    /// `SCHED_FIFO` at the lowest priority: runs as soon as it wakes. It
    /// sleeps between short jobs, and the kernel's real-time throttling
    /// bounds it regardless.
    RealTime,
    /// A 100 µs time slice (Linux 6.12 on): the scheduler gives a thread
    /// with a shorter slice an earlier deadline, so it preempts busy
    /// threads when it wakes. Needs no privilege.
    ShortSlice,
    /// Neither could be set (an older kernel without the privilege), or
    /// `MACHSAMPLER_NO_REALTIME` is set.
    Normal,
}

/// The slice asked for: the shortest the kernel accepts.
const SLICE_NS: u64 = 100_000;

/// Makes the calling thread run promptly after wake-ups, as far as the
/// kernel and the process's privileges allow.
pub fn run_promptly() -> Promptness {
    if std::env::var_os("MACHSAMPLER_NO_REALTIME").is_some() {
        return Promptness::Normal;
    }
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: changes only the calling thread's policy; `param` is valid.
    if unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) } == 0 {
        return Promptness::RealTime;
    }
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: SLICE_NS,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid sched_attr of the size it states; pid 0
    // is the calling thread; flags 0. Kernels before 6.12 ignore the
    // runtime of a normal thread, older ones may refuse: either way the
    // thread stays as it was.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0u32) };
    if set == 0 && slice_applied() {
        Promptness::ShortSlice
    } else {
        Promptness::Normal
    }
}

/// Whether the kernel kept the short slice (it reads it back only from
/// Linux 6.12, where it also uses it).
fn slice_applied() -> bool {
    let mut attr = std::mem::MaybeUninit::<libc::sched_attr>::zeroed();
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            attr.as_mut_ptr(),
            std::mem::size_of::<libc::sched_attr>() as u32,
            0u32,
        )
    };
    // SAFETY: zero-initialised, and filled by the kernel on success.
    got == 0 && unsafe { attr.assume_init() }.sched_runtime == SLICE_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_made_prompt_or_left_normal() {
        let got = std::thread::spawn(run_promptly).join().unwrap();
        // Which one depends on privileges and kernel; each must be true
        // of the thread afterwards.
        let checked = std::thread::spawn(|| {
            let p = run_promptly();
            let mut policy = 0;
            let mut param = libc::sched_param { sched_priority: 0 };
            // SAFETY: valid out-pointers for the calling thread.
            unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
            match p {
                Promptness::RealTime => assert_eq!(policy, libc::SCHED_FIFO),
                Promptness::ShortSlice => assert!(policy == libc::SCHED_OTHER && slice_applied()),
                Promptness::Normal => assert_eq!(policy, libc::SCHED_OTHER),
            }
            p
        })
        .join()
        .unwrap();
        assert_eq!(got, checked);
    }
}
