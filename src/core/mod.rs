//! The platform-independent sampler core: everything between "a thread's
//! registers" and "a profile of deduplicated stacks". Platform backends
//! plug in through [`backend::Backend`].

pub mod backend;
pub mod buffer;
pub mod critical;
pub mod error;
pub mod options;
pub mod perf_map_watch;
pub mod registry;
pub mod sampler;
pub mod stacks;
pub mod stats;
pub mod timebase;
pub mod walker;
