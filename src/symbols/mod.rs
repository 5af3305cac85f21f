//! Symbolization: frame addresses to function names, modules, files and
//! lines.

use crate::profile::{Function, FunctionKind, ProfileData, Symbols};

/// The module containing `addr`, if any.
pub fn module_of(profile: &ProfileData, addr: u64) -> Option<usize> {
    profile.modules.iter().position(|m| m.start <= addr && addr < m.end)
}

/// Resolves every frame of `profile`.
pub fn symbolicate(profile: &ProfileData) -> Symbols {
    let mut functions = Vec::new();
    let mut frame_function = Vec::with_capacity(profile.frame_address.len());
    for &addr in &profile.frame_address {
        frame_function.push(functions.len() as u32);
        functions.push(Function {
            name: format!("0x{addr:x}"),
            module: module_of(profile, addr).map(|m| m as i32).unwrap_or(-1),
            file: String::new(),
            line: 0,
            kind: FunctionKind::Unknown,
        });
    }
    Symbols { frame_line: vec![0; frame_function.len()], frame_function, functions }
}
