//! The macOS (Mach) backend. Not yet implemented: see issue 3.
compile_error!("the Mach backend is not implemented yet");
