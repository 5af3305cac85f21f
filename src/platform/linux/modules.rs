//! The loaded ELF modules, from `dl_iterate_phdr`.
//!
//! Each module's range spans its PT_LOAD segments; its bias is the loader's
//! `dlpi_addr` (process address minus the address in the file's tables);
//! its build id is read from its PT_NOTE segments in memory, which are
//! mapped and read-only, so no file needs to be opened.

use crate::platform::Module;

const NT_GNU_BUILD_ID: u32 = 3;

/// Parses ELF notes and returns the GNU build id, if any.
pub fn build_id_from_notes(mut notes: &[u8]) -> Option<Vec<u8>> {
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let word = |i: usize| u32::from_ne_bytes([notes[i], notes[i + 1], notes[i + 2], notes[i + 3]]);
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_end = 12usize.checked_add(align4(namesz))?;
        let desc_end = name_end.checked_add(align4(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && notes.get(12..12 + namesz)? == b"GNU\0" {
            return Some(notes.get(name_end..name_end + descsz)?.to_vec());
        }
        notes = &notes[desc_end..];
    }
    None
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
}

unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `data` is the `&mut Vec<Module>` passed to dl_iterate_phdr
    // below, and `info` is valid for the duration of this callback.
    let (out, info) = unsafe { (&mut *(data as *mut Vec<Module>), &*info) };
    let bias = info.dlpi_addr;
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader guarantees `dlpi_phnum` headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let mut start = u64::MAX;
    let mut end = 0u64;
    let mut build_id = String::new();
    for ph in phdrs {
        if ph.p_type == libc::PT_LOAD {
            start = start.min(bias.wrapping_add(ph.p_vaddr));
            end = end.max(bias.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz));
        } else if ph.p_type == libc::PT_NOTE && build_id.is_empty() && ph.p_memsz > 0 {
            // SAFETY: PT_NOTE segments are part of a PT_LOAD segment, mapped
            // read-only for the life of the module, which is loaded while
            // dl_iterate_phdr holds the loader lock.
            let notes =
                unsafe { std::slice::from_raw_parts(bias.wrapping_add(ph.p_vaddr) as *const u8, ph.p_memsz as usize) };
            if let Some(id) = build_id_from_notes(notes) {
                build_id = hex(&id);
            }
        }
    }
    if start >= end {
        return 0;
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    // The main program has an empty name; the vDSO has a name but no file.
    let path = if name.is_empty() && out.is_empty() { exe_path() } else { name };
    if !path.is_empty() {
        out.push(Module { path, start, end, bias, build_id });
    }
    0
}

/// Every loaded module, in the loader's order (the executable first).
pub fn loaded_modules() -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    // SAFETY: `visit` matches the callback signature and only uses `data`
    // as the Vec we pass.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut out as *mut Vec<Module> as *mut libc::c_void) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_build_id_note() {
        let mut n = Vec::new();
        // An unrelated note first.
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&1u32.to_ne_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0, 0, 0, 0]);
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(&NT_GNU_BUILD_ID.to_ne_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xde, 0xad, 0xbe]);
        n.push(0); // padding
        assert_eq!(build_id_from_notes(&n), Some(vec![0xde, 0xad, 0xbe]));
        assert_eq!(build_id_from_notes(&n[..20]), None, "truncated");
        assert_eq!(build_id_from_notes(&[0xff; 12]), None, "huge sizes");
    }

    #[test]
    fn finds_this_test_binary_and_libc() {
        let mods = loaded_modules();
        let me = loaded_modules as *const () as u64;
        let exe = mods.iter().find(|m| m.start <= me && me < m.end).expect("our own code is in a module");
        assert!(!exe.path.is_empty());
        assert!(mods.iter().any(|m| m.path.contains("libc.so")));
        assert!(mods.iter().any(|m| !m.build_id.is_empty()));
    }
}
