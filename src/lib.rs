//! machsampler: a native stack sampler for every thread of a Node.js or
//! Electron process.
//!
//! Layout, in the direction data flows:
//! - `platform`: how threads are found and stopped (Linux signals, macOS Mach);
//! - `core`: the sampler loop, stack walker, sample buffer, statistics;
//! - `control`: the process-wide sampler that `start()`/`stop()` drive;
//! - `profile`: the recorded data, shared by symbolization and exporters;
//! - `symbols`: addresses to names;
//! - `js`: the napi bindings (the only place that knows about JavaScript).

pub mod control;
pub mod core;
pub mod formats;
pub mod platform;
pub mod profile;
pub mod symbols;
pub mod v8;

// napi-derive registers exports only outside `cfg(test)`, and the bindings are
// tested through Node (jest), so unit-test builds leave them out.
#[cfg(not(test))]
mod js;

#[global_allocator]
static ALLOC: core::critical::CheckedAlloc = core::critical::CheckedAlloc;
