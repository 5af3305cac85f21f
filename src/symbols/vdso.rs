//! The vDSO: the kernel's small shared object mapped into every process
//! (`clock_gettime`, `gettimeofday`, …). It has no file, so its frames are
//! named from the image in this process's own memory, which is the same
//! for every process on this kernel: it is used only if its build id is
//! the one recorded for the profile's vDSO.

/// Names the loader gives the vDSO.
pub fn is_vdso(path: &str) -> bool {
    matches!(path, "linux-vdso.so.1" | "linux-gate.so.1" | "linux-vdso64.so.1" | "[vdso]")
}

/// A copy of this process's vDSO image.
#[cfg(target_os = "linux")]
pub fn image() -> Option<Vec<u8>> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return None;
    }
    let read = |at: usize, len: usize| -> &'static [u8] {
        // SAFETY: the vDSO is mapped readable for the life of the process;
        // every range read here is inside the image, whose extent is taken
        // from its own ELF header and checked below.
        unsafe { std::slice::from_raw_parts((base + at) as *const u8, len) }
    };
    let ehdr = read(0, 64);
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8])) as usize;
    // The image ends with its section headers (or its last segment).
    let (phoff, phnum, phentsize) = (u64_at(ehdr, 32), u16_at(ehdr, 56), u16_at(ehdr, 54));
    let (shoff, shnum, shentsize) = (u64_at(ehdr, 40), u16_at(ehdr, 60), u16_at(ehdr, 58));
    if phentsize < 56 || phnum == 0 || phnum > 64 || phoff > 1 << 16 {
        return None;
    }
    let mut size = shoff.saturating_add(shnum.saturating_mul(shentsize));
    for i in 0..phnum {
        let ph = read(phoff + i * phentsize, 56);
        // PT_LOAD: offset + file size.
        if u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == 1 {
            size = size.max(u64_at(ph, 8).saturating_add(u64_at(ph, 32)));
        }
    }
    // The vDSO is a few pages; anything larger is not what we think.
    if size == 0 || size > 1 << 20 {
        return None;
    }
    Some(read(0, size).to_vec())
}

#[cfg(not(target_os = "linux"))]
pub fn image() -> Option<Vec<u8>> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    #[test]
    fn the_vdso_of_this_process_has_its_functions() {
        let img = image().expect("a vDSO on Linux");
        let file = object::File::parse(&*img).unwrap();
        let names: Vec<String> = file.dynamic_symbols().filter_map(|s| s.name().ok().map(str::to_string)).collect();
        assert!(names.iter().any(|n| n.contains("clock_gettime")), "{names:?}");
        assert!(file.build_id().unwrap().is_some());
        assert!(is_vdso("linux-vdso.so.1") && !is_vdso("/lib/libc.so.6"));
    }
}
