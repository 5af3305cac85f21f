//! Errors the sampler reports, with errno-style codes (EINVAL, EAGAIN,
//! ESRCH, ...). The JS binding turns each into an `Error` whose `code` is the
//! code's name.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// Invalid argument.
    Inval,
    /// The sampler is already running.
    Again,
    /// The sampler is not running.
    Srch,
    /// Out of memory, or a thread could not be created.
    NoMem,
    /// The platform cannot sample here (for example under Rosetta).
    NotSup,
    /// A resource (such as a free real-time signal) is in use.
    Busy,
    /// A file or directory does not exist.
    NoEnt,
    /// A file or directory may not be written.
    Access,
    /// A path that must be a directory is not one.
    NotDir,
    /// The file system is mounted read-only.
    ReadOnlyFs,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Inval => "EINVAL",
            ErrorCode::Again => "EAGAIN",
            ErrorCode::Srch => "ESRCH",
            ErrorCode::NoMem => "ENOMEM",
            ErrorCode::NotSup => "ENOTSUP",
            ErrorCode::Busy => "EBUSY",
            ErrorCode::NoEnt => "ENOENT",
            ErrorCode::Access => "EACCES",
            ErrorCode::NotDir => "ENOTDIR",
            ErrorCode::ReadOnlyFs => "EROFS",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerError {
    pub code: ErrorCode,
    pub message: String,
}

impl SamplerError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        SamplerError { code, message: message.into() }
    }

    pub fn inval(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Inval, message)
    }

    /// A file-system error: its code from the error's kind (EINVAL for
    /// kinds without one here).
    pub fn io(e: &std::io::Error, message: impl Into<String>) -> Self {
        use std::io::ErrorKind::*;
        let code = match e.kind() {
            NotFound => ErrorCode::NoEnt,
            PermissionDenied => ErrorCode::Access,
            ReadOnlyFilesystem => ErrorCode::ReadOnlyFs,
            NotADirectory => ErrorCode::NotDir,
            _ => ErrorCode::Inval,
        };
        Self::new(code, message)
    }
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for SamplerError {}
