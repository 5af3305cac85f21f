//! Memory protection keys (x86_64) in the signal handler.
//!
//! V8 tags its code memory with a protection key where the CPU has them
//! (`--memory-protection-keys`, on by default). The kernel starts every
//! signal handler with its default key rights, which deny any access to
//! memory of every key but the default one, so V8's `GetStackSample`,
//! which reads code objects, would fault in our handler. V8's own profiler
//! handler grants itself read access first; [`ReadAllKeys`] does the same
//! around our call, and gives the interrupted rights back before returning
//! (the kernel restores them at `sigreturn` too).
//!
//! Only where the OS enabled keys (`CPUID.7.0:ECX.OSPKE`): elsewhere
//! `rdpkru`/`wrpkru` are invalid instructions, and nothing here runs them.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Reads whether the OS enabled protection keys; called once when the
/// handler is installed, before any signal.
pub fn detect() {
    ENABLED.store(os_enabled_keys(), Ordering::Release);
}

#[cfg(target_arch = "x86_64")]
fn os_enabled_keys() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // `unsafe` for toolchains before cpuid became a safe function.
    #[allow(unused_unsafe)]
    // SAFETY: cpuid exists on every x86_64 CPU; leaf 7 is read only when
    // leaf 0 says it exists.
    unsafe {
        __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ecx & (1 << 4) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn os_enabled_keys() -> bool {
    false
}

/// The rights to use inside the handler: those of the default key as
/// they are, read (not write) access to every other key.
pub const fn read_all(current: u32) -> u32 {
    // Two bits per key: bit 2k denies access, bit 2k+1 denies writes.
    0xaaaa_aaa8 | (current & 0b11)
}

/// Read access to memory of every protection key until dropped.
/// Async-signal-safe: two instructions on entry, one on drop.
pub struct ReadAllKeys {
    saved: Option<u32>,
}

impl ReadAllKeys {
    #[inline]
    pub fn enter() -> ReadAllKeys {
        if !ENABLED.load(Ordering::Relaxed) {
            return ReadAllKeys { saved: None };
        }
        // SAFETY: the OS enabled protection keys (checked by `detect`), so
        // both instructions are valid; the new rights only add reads.
        let saved = unsafe { rdpkru() };
        // SAFETY: as above.
        unsafe { wrpkru(read_all(saved)) };
        ReadAllKeys { saved: Some(saved) }
    }
}

impl Drop for ReadAllKeys {
    #[inline]
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            // SAFETY: `enter` ran rdpkru, so keys are enabled; `saved` is
            // what the register held.
            unsafe { wrpkru(saved) };
        }
    }
}

/// # Safety
/// Only where the OS enabled protection keys.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn rdpkru() -> u32 {
    let eax: u32;
    // SAFETY: per the contract; rdpkru (0f 01 ee) reads PKRU into eax and
    // zeroes edx, with ecx = 0.
    unsafe {
        std::arch::asm!(".byte 0x0f, 0x01, 0xee", in("ecx") 0u32, out("eax") eax, out("edx") _, options(nostack, preserves_flags));
    }
    eax
}

/// # Safety
/// Only where the OS enabled protection keys.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn wrpkru(value: u32) {
    // SAFETY: per the contract; wrpkru (0f 01 ef) writes eax to PKRU, with
    // ecx = edx = 0. Not `nomem`: it changes what memory accesses are
    // allowed, so they must not move across it.
    unsafe {
        std::arch::asm!(".byte 0x0f, 0x01, 0xef", in("eax") value, in("ecx") 0u32, in("edx") 0u32, options(nostack, preserves_flags));
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn rdpkru() -> u32 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn wrpkru(_: u32) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_reads_and_keeps_the_default_key() {
        // The kernel's default in a handler: every key but 0 denied.
        assert_eq!(read_all(0x5555_5554), 0xaaaa_aaa8);
        assert_eq!(read_all(0x5555_5556), 0xaaaa_aaaa);
        for key in 1..16 {
            let r = read_all(0x5555_5554) >> (2 * key);
            assert_eq!(r & 0b11, 0b10, "key {key}: reads allowed, writes denied");
        }
    }

    #[test]
    fn changes_nothing_where_keys_are_off() {
        detect();
        let on = ENABLED.load(Ordering::Acquire);
        let before = if on {
            // SAFETY: keys are enabled here.
            Some(unsafe { rdpkru() })
        } else {
            None
        };
        {
            let g = ReadAllKeys::enter();
            assert_eq!(g.saved, before);
            if on {
                // SAFETY: as above.
                assert_eq!(unsafe { rdpkru() }, read_all(before.unwrap()));
            }
        }
        if on {
            // SAFETY: as above.
            assert_eq!(Some(unsafe { rdpkru() }), before);
        }
    }
}
