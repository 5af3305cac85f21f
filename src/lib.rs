//! machsampler: a native stack sampler for every thread of a Node.js or
//! Electron process.
//!
//! Data flows one way: threads → samples → profile → symbols → formats.
//! Each layer uses only the layers below it:
//!
//! ```text
//! bindings        napi: the only code that sees JavaScript values
//!   control       the process-wide session behind start() and stop()
//!     profile     the recorded data: the one model the layers above share
//!     symbols     addresses to names
//!     formats     files people open (one exporter per file)
//!       v8        JavaScript frames: V8's API, code events, frame merging
//!       platform  how threads are found and stopped (Linux signals, Mach)
//!         sampler the engine: sampler thread, walker, buffers, statistics
//! ```

pub mod control;
pub mod formats;
pub mod platform;
pub mod profile;
pub mod sampler;
pub mod stalls;
pub mod symbols;
pub mod v8;

// napi-derive registers exports only outside `cfg(test)`, and the bindings are
// tested through Node (jest), so unit-test builds leave them out.
#[cfg(not(test))]
mod bindings;

#[global_allocator]
static ALLOC: sampler::stopped_window::CheckedAlloc = sampler::stopped_window::CheckedAlloc;
