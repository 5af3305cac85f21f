//! Names ELF symbol tables do not hold: PLT stubs.
//!
//! A call to another module's function goes through a stub in `.plt`
//! (`.plt.sec` with IBT, `.plt.got` for eagerly bound ones) that jumps
//! through a GOT slot. The dynamic relocation of that slot names the
//! function, so each stub is named `<function>@plt`, as perf and objdump
//! name them. Stubs are decoded, not counted: the jump's GOT address ties
//! a stub to its relocation whatever the layout (x86_64 `jmp *disp(%rip)`;
//! aarch64 `adrp x16` + `ldr x17, [x16, #off]`).

use object::{Architecture, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};
use rustc_hash::FxHashMap;

/// Calls `add(start, size, name)` for every PLT stub of `file` whose GOT
/// slot has a relocation naming a symbol.
pub fn add_plt_stubs(file: &object::File, add: &mut dyn FnMut(u64, u64, &str)) {
    let arch = file.architecture();
    if !matches!(arch, Architecture::X86_64 | Architecture::Aarch64) {
        return;
    }
    let Some(relocations) = file.dynamic_relocations() else { return };
    let Some(dynsym) = file.dynamic_symbol_table() else { return };
    // GOT slot -> symbol; names are read only for slots a stub uses (a
    // large binary has far more dynamic relocations than stubs).
    let slot_symbol: FxHashMap<u64, object::SymbolIndex> = relocations
        .filter_map(|(got, r)| match r.target() {
            RelocationTarget::Symbol(i) => Some((got, i)),
            _ => None,
        })
        .collect();
    if slot_symbol.is_empty() {
        return;
    }
    let slot_name = |got: u64| -> Option<&str> {
        let i = *slot_symbol.get(&got)?;
        dynsym.symbol_by_index(i).ok()?.name().ok().filter(|n| !n.is_empty())
    };
    for section in file.sections() {
        let Ok(sname) = section.name() else { continue };
        if !matches!(sname, ".plt" | ".plt.sec" | ".plt.got") {
            continue;
        }
        let Ok(code) = section.data() else { continue };
        let base = section.address();
        let stubs = match arch {
            Architecture::X86_64 => x86_64_stubs(code, base, sname == ".plt.got"),
            _ => aarch64_stubs(code, base),
        };
        for (start, size, got) in stubs {
            if let Some(name) = slot_name(got) {
                add(start, size, &format!("{name}@plt"));
            }
        }
    }
}

/// (stub start, stub size, GOT slot) of each x86_64 stub: an entry holding
/// `ff 25 <disp32>` (`jmp *disp(%rip)`, after an `endbr64` and a `bnd`
/// prefix with IBT).
fn x86_64_stubs(code: &[u8], base: u64, plt_got: bool) -> Vec<(u64, u64, u64)> {
    // .plt.got entries are 8 bytes without IBT (jmp + 2-byte nop), else 16.
    let size = if plt_got && code.starts_with(&[0xff, 0x25]) { 8 } else { 16 };
    let mut out = Vec::new();
    for (n, entry) in code.chunks(size).enumerate() {
        let Some(p) = entry.windows(2).position(|w| w == [0xff, 0x25]) else { continue };
        let Some(disp) = entry.get(p + 2..p + 6) else { continue };
        let disp = i32::from_le_bytes([disp[0], disp[1], disp[2], disp[3]]) as i64;
        let start = base + (n * size) as u64;
        let next_ip = start + (p + 6) as u64;
        out.push((start, size as u64, next_ip.wrapping_add(disp as u64)));
    }
    out
}

/// (stub start, 16, GOT slot) of each aarch64 stub: `adrp x16, page`
/// followed by `ldr x17, [x16, #off]`.
fn aarch64_stubs(code: &[u8], base: u64) -> Vec<(u64, u64, u64)> {
    let word = |i: usize| code.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mut out = Vec::new();
    let mut i = 0;
    while let (Some(adrp), Some(ldr)) = (word(i), word(i + 4)) {
        let is_adrp_x16 = adrp & 0x9f00_001f == 0x9000_0010;
        let is_ldr_x17_x16 = ldr & 0xffc0_03ff == 0xf940_0211;
        if is_adrp_x16 && is_ldr_x17_x16 {
            let pc = base + i as u64;
            let immlo = u64::from((adrp >> 29) & 3);
            let immhi = u64::from((adrp >> 5) & 0x7_ffff);
            // Sign-extend the 21-bit page offset.
            let pages = (((immhi << 2) | immlo) << 43) as i64 >> 43;
            let page = (pc & !0xfff).wrapping_add((pages << 12) as u64);
            let off = u64::from((ldr >> 10) & 0xfff) * 8;
            // A `bti c` just before belongs to the stub.
            let start = if i >= 4 && word(i - 4) == Some(0xd503_245f) { pc - 4 } else { pc };
            out.push((start, 16, page.wrapping_add(off)));
            i += 16;
        } else {
            i += 4;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::test_fixtures::fixture;

    /// objdump's names of the PLT stubs, `<addr> <name@plt>`, the reference.
    fn objdump_plt(path: &std::path::Path) -> Vec<(u64, String)> {
        let out = std::process::Command::new("objdump")
            .args(["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"])
            .arg(path)
            .output()
            .expect("objdump (binutils) is needed for this test");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut v: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(" <")?;
                let name = rest.strip_suffix(">:")?;
                name.ends_with("@plt").then(|| (u64::from_str_radix(addr.trim(), 16).ok(), name.to_string()))
            })
            .filter_map(|(a, n)| Some((a?, n)))
            .collect();
        v.sort();
        v
    }

    fn ours(path: &std::path::Path) -> Vec<(u64, String)> {
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let mut v = Vec::new();
        add_plt_stubs(&file, &mut |start, _, name| v.push((start, name.to_string())));
        v.sort();
        v
    }

    #[test]
    fn plt_stubs_are_named_as_objdump_names_them() {
        let lib = fixture("elf/stripped/libfe.so");
        let expected = objdump_plt(&lib);
        assert!(expected.iter().any(|(_, n)| n == "malloc@plt"), "{expected:?}");
        assert_eq!(ours(&lib), expected);
        // And on a large real binary: the node running the tests' suites,
        // if there is one on PATH; this test binary otherwise.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(ours(&exe), objdump_plt(&exe));
    }

    #[test]
    fn aarch64_stub_decoding() {
        // adrp x16, #0x10000 (1 page * 16) ; ldr x17, [x16, #0x18] ; add ; br x17
        let pages: u32 = 16;
        let adrp: u32 = 0x9000_0010 | ((pages & 3) << 29) | ((pages >> 2) << 5);
        let ldr: u32 = 0xf940_0211 | ((0x18 / 8) << 10);
        let mut code = Vec::new();
        for w in [adrp, ldr, 0x9100_6210, 0xd61f_0220] {
            code.extend_from_slice(&u32::to_le_bytes(w));
        }
        assert_eq!(aarch64_stubs(&code, 0x1_0010), vec![(0x1_0010, 16, 0x2_0018)]);
        assert_eq!(aarch64_stubs(&code[..6], 0), vec![]);
    }
}
