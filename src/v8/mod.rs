//! JavaScript frames for native stacks, from V8's own exported API
//! ("route B" of issue 9), with no command-line flags.
//!
//! `abi`: `#[repr(C)]` mirrors of the V8 API structs the layer exchanges
//! with the node binary, chosen per V8 version, and their layout test.

pub mod abi;
