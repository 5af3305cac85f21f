//! `kern_return_t`: what the backend's Mach calls return, as a `Result`
//! ([`IntoResult`], after samply's `kernel_error.rs`), and which failures
//! mean that the thread is gone. The values are hard-coded so this compiles
//! everywhere; `platform::macos` asserts they equal `mach2`'s.

use crate::sampler::backend::SkipReason;

pub type KernReturn = i32;

pub const KERN_SUCCESS: KernReturn = 0;
pub const KERN_INVALID_ADDRESS: KernReturn = 1;
pub const KERN_INVALID_ARGUMENT: KernReturn = 4;
pub const KERN_FAILURE: KernReturn = 5;
pub const KERN_ABORTED: KernReturn = 14;
pub const KERN_INVALID_NAME: KernReturn = 15;
pub const KERN_INVALID_TASK: KernReturn = 16;
pub const KERN_INVALID_RIGHT: KernReturn = 17;
pub const KERN_TERMINATED: KernReturn = 37;
/// A `mach_msg_return_t`, returned by MIG calls (`thread_get_state`,
/// `thread_info`, ...) when the port is a dead name or no name at all.
pub const MACH_SEND_INVALID_DEST: KernReturn = 0x1000_0003;

/// A Mach call that did not return `KERN_SUCCESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// `KERN_INVALID_ARGUMENT`: for a thread call, the port no longer names
    /// a thread (the thread is terminating and its port was disabled).
    InvalidArgument,
    /// `KERN_TERMINATED`: the thread is terminating.
    Terminated,
    /// `MACH_SEND_INVALID_DEST`: our right became a dead name.
    SendInvalidDest,
    /// Anything else (`KERN_FAILURE`, `KERN_ABORTED`, ...).
    Other(KernReturn),
}

impl KernelError {
    pub fn code(self) -> KernReturn {
        match self {
            KernelError::InvalidArgument => KERN_INVALID_ARGUMENT,
            KernelError::Terminated => KERN_TERMINATED,
            KernelError::SendInvalidDest => MACH_SEND_INVALID_DEST,
            KernelError::Other(kr) => kr,
        }
    }

    /// The thread went away between discovery and the call: a normal race,
    /// not an error.
    pub fn thread_gone(self) -> bool {
        !matches!(self, KernelError::Other(_))
    }
}

pub trait IntoResult {
    fn into_result(self) -> Result<(), KernelError>;
}

impl IntoResult for KernReturn {
    #[inline]
    fn into_result(self) -> Result<(), KernelError> {
        match self {
            KERN_SUCCESS => Ok(()),
            KERN_INVALID_ARGUMENT => Err(KernelError::InvalidArgument),
            KERN_TERMINATED => Err(KernelError::Terminated),
            MACH_SEND_INVALID_DEST => Err(KernelError::SendInvalidDest),
            other => Err(KernelError::Other(other)),
        }
    }
}

/// The skip reason for a failed `thread_suspend`: gone, or (any other
/// error) not stoppable on this tick, which the next tick retries.
pub fn suspend_skip_reason(e: KernelError) -> SkipReason {
    if e.thread_gone() {
        SkipReason::Gone
    } else {
        SkipReason::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kern_returns_are_classified() {
        assert_eq!(KERN_SUCCESS.into_result(), Ok(()));
        for gone in [KERN_TERMINATED, KERN_INVALID_ARGUMENT, MACH_SEND_INVALID_DEST] {
            let e = gone.into_result().unwrap_err();
            assert!(e.thread_gone(), "{gone:#x}");
            assert_eq!(e.code(), gone);
            assert_eq!(suspend_skip_reason(e), SkipReason::Gone);
        }
        // KERN_FAILURE, KERN_ABORTED, MACH_SEND_TIMED_OUT: errors, not exits.
        for err in [KERN_FAILURE, KERN_ABORTED, 0x1000_0004] {
            let e = err.into_result().unwrap_err();
            assert_eq!(e, KernelError::Other(err));
            assert_eq!(e.code(), err);
            assert!(!e.thread_gone());
            assert_eq!(suspend_skip_reason(e), SkipReason::Pending);
        }
    }
}
