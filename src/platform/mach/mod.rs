//! The decisions of the Mach backend, one Mach concept per file, apart
//! from the calls it makes (`platform::macos`), so they build and are
//! unit-tested everywhere.

pub mod exit_log;
pub mod first_frame;
pub mod hook_event;
pub mod kern;
pub mod macho;
pub mod pac;
pub mod port_queue;
pub mod refusal;
pub mod rescan;
pub mod thread_table;
pub mod time;
pub mod unwind_image;
