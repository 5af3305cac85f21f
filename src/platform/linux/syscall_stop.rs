//! Whether a sampled thread was stopped in a system call (waiting, not
//! running), decided on the sampler thread from the registers the handler
//! saved.
//!
//! A signal that interrupts a blocking system call leaves either the
//! call's error (`-EINTR`) in the return register just after the system
//! call instruction, or, to restart the call, the pc back on that
//! instruction. Telling which needs the code bytes around the pc. The
//! handler does not read them: code pages may deny reads to a signal
//! handler (x86 protection keys, which V8 puts on its code; execute-only
//! mappings). The sampler reads them with `process_vm_readv`, which
//! returns an error instead of faulting, and remembers the answer per pc.

/// `syscall` (x86_64), little-endian.
#[cfg(target_arch = "x86_64")]
const SYSCALL: u32 = 0x050f;
#[cfg(target_arch = "x86_64")]
const SYSCALL_BYTES: u64 = 2;
/// `svc #0` (aarch64).
#[cfg(target_arch = "aarch64")]
const SYSCALL: u32 = 0xd400_0001;
#[cfg(target_arch = "aarch64")]
const SYSCALL_BYTES: u64 = 4;

/// Remembered answers, direct-mapped by pc.
const MEMO_SLOTS: usize = 1024;

/// Whether the registers say "stopped in a system call", given a reader of
/// the instruction at an address (`None`: unreadable).
///
/// x86_64: `rax` is -EINTR and the instruction before pc is `syscall`, or
/// `rax` is a system call number (below 512) and pc is on `syscall`.
/// aarch64: `x0` is -EINTR and the instruction before pc is `svc #0`, or
/// pc is on `svc #0` (x0 then holds the first argument, not the number).
pub fn in_syscall(pc: u64, ret: u64, mut read: impl FnMut(u64) -> Option<u32>) -> bool {
    let eintr = ret as i64 == -(libc::EINTR as i64);
    if eintr && pc >= SYSCALL_BYTES && read(pc - SYSCALL_BYTES) == Some(SYSCALL) {
        return true;
    }
    let may_restart = if cfg!(target_arch = "x86_64") { ret < 512 } else { true };
    may_restart && read(pc) == Some(SYSCALL)
}

/// [`in_syscall`] on this process's memory, with answers remembered per pc
/// (the sites are the few system call wrappers of libc and libuv).
pub struct SyscallSites {
    memory: OwnMemory,
    /// Per slot, a pc and what its code is: bit 0, the instruction before
    /// pc is a system call; bit 1, the one at pc is.
    memo: Vec<(u64, u8)>,
}

impl SyscallSites {
    /// `vm_readv`: whether `process_vm_readv` works here; where it is
    /// refused (a seccomp filter), `/proc/self/mem` is read instead.
    pub fn new(vm_readv: bool) -> SyscallSites {
        let memory = if vm_readv {
            OwnMemory::VmReadv(std::process::id() as i32)
        } else {
            OwnMemory::ProcMem(std::fs::File::open("/proc/self/mem").ok())
        };
        SyscallSites { memory, memo: vec![(0, 0); MEMO_SLOTS] }
    }

    pub fn stopped_in_syscall(&mut self, pc: u64, ret: u64) -> bool {
        // x86_64: neither -EINTR nor a system call number, so no reads.
        if pc == 0 || (cfg!(target_arch = "x86_64") && ret >= 512 && ret as i64 != -(libc::EINTR as i64)) {
            return false;
        }
        let slot = ((pc ^ (pc >> 12)) as usize) % MEMO_SLOTS;
        let bits = match self.memo[slot] {
            (at, bits) if at == pc => bits,
            _ => {
                let (before, on) = self.memory.around(pc);
                let bits = (before == Some(SYSCALL)) as u8 | ((on == Some(SYSCALL)) as u8) << 1;
                self.memo[slot] = (pc, bits);
                bits
            }
        };
        in_syscall(pc, ret, |a| match (a == pc, bits) {
            (true, b) if b & 2 != 0 => Some(SYSCALL),
            (false, b) if b & 1 != 0 => Some(SYSCALL),
            _ => None,
        })
    }

    /// Forgets every answer (code was unmapped, or mapped anew).
    pub fn forget(&mut self) {
        self.memo.fill((0, 0));
    }
}

/// Reads of this process's memory that return an error where it is not
/// readable, instead of faulting.
enum OwnMemory {
    VmReadv(i32),
    ProcMem(Option<std::fs::File>),
}

impl OwnMemory {
    /// The instructions just before `pc` and at `pc` (one read when both
    /// are readable).
    fn around(&self, pc: u64) -> (Option<u32>, Option<u32>) {
        let n = SYSCALL_BYTES as usize;
        let mask = (1u64 << (8 * n)) - 1;
        let one = |addr: u64| self.read(addr, n).map(|v| (v & mask) as u32);
        let Some(before) = pc.checked_sub(SYSCALL_BYTES) else { return (None, one(pc)) };
        match self.read(before, 2 * n) {
            Some(both) => (Some((both & mask) as u32), Some((both >> (8 * n) & mask) as u32)),
            // The two straddle an unreadable page.
            None => (one(before), one(pc)),
        }
    }

    /// `len` (at most 8) bytes at `addr`, little-endian, or `None` where
    /// they are not all readable.
    fn read(&self, addr: u64, len: usize) -> Option<u64> {
        let mut out = [0u8; 8];
        let len = len.min(out.len());
        let got = match self {
            OwnMemory::VmReadv(pid) => {
                let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: len };
                let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
                // SAFETY: the kernel copies `len` bytes of our own address
                // space into `out`, checking each page: an unreadable
                // address gives -1 or a short count, never a fault.
                unsafe { libc::process_vm_readv(*pid, &local, 1, &remote, 1, 0) }
            }
            OwnMemory::ProcMem(Some(file)) => {
                use std::os::unix::fs::FileExt;
                file.read_at(&mut out[..len], addr).map_or(-1, |n| n as isize)
            }
            OwnMemory::ProcMem(None) => -1,
        };
        (got == len as isize).then(|| u64::from_le_bytes(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EINTR: u64 = (-(libc::EINTR as i64)) as u64;

    #[test]
    fn decides_from_the_return_register_and_the_code() {
        let at = |site: u64| move |a: u64| (a == site).then_some(SYSCALL);
        // Returned -EINTR, the instruction before pc is a syscall.
        assert!(in_syscall(0x1000 + SYSCALL_BYTES, EINTR, at(0x1000)));
        // Back on the instruction, to restart it.
        assert!(in_syscall(0x2000, 7, at(0x2000)));
        // No system call instruction: running code.
        assert!(!in_syscall(0x3000, EINTR, |_| Some(0x9090)));
        assert!(!in_syscall(0x3000, 7, |_| None));
        if cfg!(target_arch = "x86_64") {
            // rax is not a system call number: running code that happens to
            // sit before a syscall instruction.
            assert!(!in_syscall(0x2000, 1 << 40, at(0x2000)));
        }
    }

    #[test]
    fn reads_this_process_and_never_faults() {
        for vm_readv in [true, false] {
            reads_this_process_with(vm_readv);
        }
    }

    fn reads_this_process_with(vm_readv: bool) {
        let mut sites = SyscallSites::new(vm_readv);
        let probe = 0x5eed_u64;
        if vm_readv && sites.memory.read(&probe as *const u64 as u64, 8) != Some(probe) {
            eprintln!("process_vm_readv refused here: only /proc/self/mem is tested");
            return;
        }
        // A nop, then the system call instruction (data, never run).
        #[cfg(target_arch = "x86_64")]
        let code: [u8; 4] = [0x90, 0x0f, 0x05, 0x90];
        #[cfg(target_arch = "aarch64")]
        let code: [u8; 8] = [0x1f, 0x20, 0x03, 0xd5, 0x01, 0x00, 0x00, 0xd4];
        let site = code.as_ptr() as u64 + if cfg!(target_arch = "x86_64") { 1 } else { 4 };
        assert_eq!(sites.memory.around(site).1, Some(SYSCALL));
        assert_eq!(sites.memory.around(site + SYSCALL_BYTES).0, Some(SYSCALL));
        assert!(sites.stopped_in_syscall(site, 3));
        assert!(sites.stopped_in_syscall(site + SYSCALL_BYTES, EINTR));
        assert!(!sites.stopped_in_syscall(site + SYSCALL_BYTES, 3));
        // Remembered: the same answers again.
        assert!(sites.stopped_in_syscall(site, 3));
        // Unmapped and kernel addresses: no answer, no fault.
        assert_eq!(sites.memory.around(8), (None, None));
        assert!(!sites.stopped_in_syscall(0xffff_ffff_ff60_0000, 3));
        assert!(!sites.stopped_in_syscall(16, EINTR));
        sites.forget();
        assert!(sites.stopped_in_syscall(site, 3));
    }
}
