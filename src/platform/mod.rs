//! Platform backends. Each implements [`crate::core::backend::Backend`];
//! everything above that trait is shared.

#[cfg(target_os = "linux")]
pub mod linux;
pub mod mach_logic;
#[cfg(target_vendor = "apple")]
pub mod macos;

use crate::core::error::SamplerError;

#[cfg(target_os = "linux")]
pub type NativeBackend = linux::LinuxBackend;
#[cfg(target_vendor = "apple")]
pub type NativeBackend = macos::MachBackend;

/// The modules loaded in this process, for symbolization.
pub fn loaded_modules() -> Vec<crate::profile::Module> {
    #[cfg(target_os = "linux")]
    {
        linux::modules::loaded_modules()
    }
    #[cfg(target_vendor = "apple")]
    {
        macos::modules::loaded_modules()
    }
}

/// Turns capture of V8's JavaScript frames, alongside each native stack,
/// on or off.
pub fn set_js_frames(on: bool) {
    #[cfg(target_os = "linux")]
    linux::signal::set_js_frames(on);
    #[cfg(target_vendor = "apple")]
    macos::set_js_frames(on);
}

/// Creates the backend for this platform, ready for a sampling session.
pub fn new_backend() -> Result<NativeBackend, SamplerError> {
    NativeBackend::new()
}
