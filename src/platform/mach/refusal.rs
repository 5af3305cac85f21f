//! When the backend refuses to start: under Rosetta translation, and in a
//! child forked without exec.

use crate::sampler::error::{ErrorCode, SamplerError};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
