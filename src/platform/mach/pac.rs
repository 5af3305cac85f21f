//! Pointer-authentication bits: the virtual-address size from
//! `machdep.virtual_address_size`, and stripping the bits above it from
//! registers and recorded frames.

use crate::sampler::walker::{strip_pointer_tag, Registers};

/// Virtual-address bits assumed when `machdep.virtual_address_size` cannot
/// be read: macOS on Apple silicon uses 47-bit user addresses.
pub const DEFAULT_VA_BITS: u32 = 47;

/// Interprets `sysctlbyname("machdep.virtual_address_size")`: `rc` is its
/// return value, `value` what it wrote. Out-of-range answers fall back to
/// the default rather than producing a mask that cuts real addresses.
pub fn interpret_va_bits(rc: i32, value: i32) -> u32 {
    match u32::try_from(value) {
        Ok(bits) if rc == 0 && (32..=48).contains(&bits) => bits,
        _ => DEFAULT_VA_BITS,
    }
}

/// The mask that keeps `bits` low address bits.
pub fn va_mask(bits: u32) -> u64 {
    let bits = bits.clamp(1, 64);
    u64::MAX >> (64 - bits)
}

/// Strips pointer-authentication bits from every register a walk starts
/// from. `walker::strip_pointer_tag` keeps 48 bits; on arm64 macOS the PAC
/// field starts at the first bit above the virtual-address size (bit 47), so
/// `mask` narrows further to the real address size.
pub fn strip_registers(regs: Registers, mask: u64) -> Registers {
    let strip = |v: u64| strip_pointer_tag(v) & mask;
    Registers { pc: strip(regs.pc), sp: strip(regs.sp), fp: strip(regs.fp), lr: strip(regs.lr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn va_bits_fall_back_and_clamp() {
        assert_eq!(interpret_va_bits(0, 47), 47);
        assert_eq!(interpret_va_bits(0, 39), 39);
        assert_eq!(interpret_va_bits(-1, 0), DEFAULT_VA_BITS);
        assert_eq!(interpret_va_bits(0, 0), DEFAULT_VA_BITS);
        assert_eq!(interpret_va_bits(0, 64), DEFAULT_VA_BITS);
        assert_eq!(va_mask(47), 0x0000_7fff_ffff_ffff);
        assert_eq!(va_mask(48), 0x0000_ffff_ffff_ffff);
        assert_eq!(va_mask(64), u64::MAX);
    }

    #[test]
    fn pac_bits_are_stripped_from_registers_and_return_addresses() {
        let mask = va_mask(47);
        let addr = 0x0000_0001_8a2b_3c40u64;
        // An IB-signed return address: PAC bits in 47..=54 and 56..=63.
        let signed = addr | 0x8000_0000_0000 | 0x003a_0000_0000_0000 | 0xa500_0000_0000_0000;
        let regs = Registers { pc: signed, sp: 0x0001_6fdf_f000, fp: 0x0001_6fdf_f100 | (1 << 47), lr: signed };
        let r = strip_registers(regs, mask);
        assert_eq!(r, Registers { pc: addr, sp: 0x0001_6fdf_f000, fp: 0x0001_6fdf_f100, lr: addr });
        // The tag strip alone leaves bit 47; the mask clears it.
        assert_eq!(strip_pointer_tag(signed), addr | (1 << 47));
        assert_eq!(strip_pointer_tag(signed) & mask, addr);
        // x86_64-style 48-bit mask leaves user addresses untouched.
        let x = Registers { pc: 0x7ff8_1234_5678, sp: 0x7ff7_bfef_f000, fp: 0x7ff7_bfef_f100, lr: 0 };
        assert_eq!(strip_registers(x, va_mask(48)), x);
    }
}
