//! Platform backends. Each implements [`crate::sampler::backend::Backend`];
//! everything above that trait is shared.

//!
//! With the `machsim` feature on Linux, the native backend is the Mach
//! backend, running against [`machsim`], a simulation of the Mach calls it
//! makes.

#[cfg(target_os = "linux")]
pub mod linux;
pub mod mach;
#[cfg(all(target_os = "linux", feature = "machsim"))]
pub mod machsim;
#[cfg(any(target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
pub mod macos;

use crate::sampler::error::SamplerError;

#[cfg(all(target_os = "linux", not(feature = "machsim")))]
pub type NativeBackend = linux::LinuxBackend;
#[cfg(any(target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
pub type NativeBackend = macos::MachBackend;

/// A loaded module (executable or shared library).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Path of the file it was loaded from.
    pub path: String,
    /// Address range of its mapped image in the process (code and data).
    pub start: u64,
    pub end: u64,
    /// What to subtract from a process address to get the address the
    /// file's symbol tables use (ELF load bias; Mach-O slide).
    pub bias: u64,
    /// GNU build id (Linux) or LC_UUID (macOS), lowercase hex; may be empty.
    pub build_id: String,
}

/// The modules loaded in this process, for symbolization.
pub fn loaded_modules() -> Vec<Module> {
    #[cfg(all(target_os = "linux", not(feature = "machsim")))]
    {
        linux::modules::loaded_modules()
    }
    #[cfg(any(target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
    {
        macos::modules::loaded_modules()
    }
}

/// Turns capture of V8's JavaScript frames, alongside each native stack,
/// on or off.
pub fn set_js_frames(on: bool) {
    #[cfg(all(target_os = "linux", not(feature = "machsim")))]
    linux::signal::set_js_frames(on);
    #[cfg(any(target_vendor = "apple", all(target_os = "linux", feature = "machsim")))]
    macos::set_js_frames(on);
}

/// After a session: leaves no sampling signal pending for the calling
/// thread (one could otherwise outlive the handler across `execve`).
pub fn discard_pending_on_this_thread() {
    #[cfg(target_os = "linux")]
    linux::signal::discard_pending_on_this_thread();
}

/// Creates the backend for this platform, ready for a sampling session.
pub fn new_backend() -> Result<NativeBackend, SamplerError> {
    // The simulated kernel audits rights against the hook's table.
    #[cfg(all(target_os = "linux", feature = "machsim"))]
    machsim::audit::set_owner(macos::hook::owned_rights);
    NativeBackend::new()
}
