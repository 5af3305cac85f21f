//! What the sampler reads from `/proc/self`: the thread list, thread names,
//! signal masks, and the memory map that gives each stack its bounds.
//!
//! All of this runs on the sampler thread, never in the signal handler.

use std::fs;
use std::io::Read;

use crate::sampler::registry::ThreadName;
use crate::sampler::walker::StackBounds;

/// Lists the process's threads. Keeps `/proc/self/task` open and reads it
/// with `getdents64` into a reused buffer, so a rescan costs two system
/// calls and no allocation however many threads there are.
pub struct TaskList {
    fd: std::os::fd::OwnedFd,
    buf: Vec<u8>,
}

impl TaskList {
    pub fn open() -> std::io::Result<TaskList> {
        use std::os::fd::FromRawFd;
        // SAFETY: the path is a NUL-terminated literal; the returned fd, if
        // valid, is owned by the OwnedFd from here on.
        let fd =
            unsafe { libc::open(c"/proc/self/task".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(TaskList { fd, buf: vec![0; 64 * 1024] })
    }

    /// The number of threads, from the link count of `/proc/self/task`
    /// (procfs adds one per thread): one `fstat`, no directory walk.
    pub fn count(&self) -> Option<u64> {
        use std::os::fd::AsRawFd;
        // SAFETY: `st` is a valid out-pointer and the fd is ours.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        (st.st_nlink as u64).checked_sub(2)
    }

    /// Lists the thread ids, sorted, into `out`.
    pub fn list(&mut self, out: &mut Vec<u64>) -> std::io::Result<()> {
        self.list_from(0, out)?;
        out.sort_unstable();
        Ok(())
    }

    /// Lists the ids of the threads from the `skip`-th on, in the kernel's
    /// order, into `out`. That is the order they were created in (a new
    /// thread joins the end of its group's list), so the last few are the
    /// newest; the kernel walks to the `skip`-th without a dentry lookup
    /// for the ones before it.
    pub fn list_from(&mut self, skip: usize, out: &mut Vec<u64>) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        out.clear();
        let fd = self.fd.as_raw_fd();
        // Positions 0 and 1 are "." and "..", then one per thread.
        let pos = (skip as libc::off_t).saturating_add(2);
        // SAFETY: positioning a directory fd we own.
        if unsafe { libc::lseek(fd, pos, libc::SEEK_SET) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            // SAFETY: the kernel writes at most `buf.len()` bytes of
            // linux_dirent64 records into our buffer.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, self.buf.as_mut_ptr(), self.buf.len()) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
            parse_dirents(&self.buf[..n as usize], out);
        }
        Ok(())
    }
}

/// Parses `linux_dirent64` records (d_ino u64, d_off i64, d_reclen u16,
/// d_type u8, NUL-terminated d_name), keeping names that are numbers.
fn parse_dirents(mut buf: &[u8], out: &mut Vec<u64>) {
    while buf.len() >= 19 {
        let reclen = u16::from_ne_bytes([buf[16], buf[17]]) as usize;
        if reclen < 19 || reclen > buf.len() {
            return;
        }
        let name = &buf[19..reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
            if let Some(tid) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                out.push(tid);
            }
        }
        buf = &buf[reclen..];
    }
}

/// Lists the ids of the process's threads into `out` (one-off).
pub fn list_threads(out: &mut Vec<u64>) -> std::io::Result<()> {
    TaskList::open()?.list(out)
}

/// Reads a small `/proc` file into `buf`. Returns false if it is gone.
///
/// Not `read_to_end`: that asks for the file's size and position first
/// (`statx`, `lseek`), which `/proc` answers with 0, and the sampler thread
/// reads such files often.
fn read_small(path: &str, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let Ok(mut f) = fs::File::open(path) else { return false };
    let mut chunk = [0u8; 1024];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => return true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// The thread's `comm`, which Node, libuv and V8 set with `pthread_setname_np`.
pub fn thread_name(tid: u64, buf: &mut Vec<u8>) -> Option<ThreadName> {
    read_small(&format!("/proc/self/task/{tid}/comm"), buf).then(|| ThreadName::from_bytes(buf))
}

/// True if the thread currently blocks `signal`. Some threads (Node's
/// inspector I/O thread, for one) block every signal; signalling them would
/// only leave a pending signal behind.
pub fn blocks_signal(tid: u64, signal: i32, buf: &mut Vec<u8>) -> Option<bool> {
    signal_state(tid, signal, buf).map(|s| s.blocks)
}

/// What `/proc/<tid>/status` says of a thread's signals, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalState {
    /// It blocks the signal asked about.
    pub blocks: bool,
    /// Times it went to sleep of its own accord so far: unchanged between
    /// two reads, it did not start or end a wait in between.
    pub voluntary_switches: u64,
}

pub fn signal_state(tid: u64, signal: i32, buf: &mut Vec<u8>) -> Option<SignalState> {
    if !read_small(&format!("/proc/self/task/{tid}/status"), buf) {
        return None;
    }
    let text = std::str::from_utf8(buf).ok()?;
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let mask = u64::from_str_radix(field("SigBlk:")?, 16).ok()?;
    Some(SignalState {
        blocks: (1..=64).contains(&signal) && mask & (1u64 << (signal - 1)) != 0,
        voluntary_switches: field("voluntary_ctxt_switches:")?.parse().ok()?,
    })
}

/// Whether the thread waits in `sigtimedwait`/`sigwaitinfo` or
/// `sigsuspend` now. While it does, the kernel shows its signal mask
/// without the signals it waits for, so `SigBlk` cannot be trusted: a
/// thread that blocks every signal and loops on `sigtimedwait` shows an
/// empty mask there.
pub fn waits_for_signals(tid: u64, buf: &mut Vec<u8>) -> Option<bool> {
    syscall_state(tid, buf).map(|s| s == SyscallState::WaitsForSignals)
}

/// What a thread is doing, as `/proc/<tid>/syscall` tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyscallState {
    /// Runnable: on a CPU or waiting for one, in user space or anywhere in
    /// the kernel (a thread just woken inside `sigtimedwait` is too).
    Running,
    /// Asleep in `sigtimedwait`/`sigwaitinfo` or `sigsuspend`.
    WaitsForSignals,
    /// Asleep in another system call, or stopped outside one.
    Other,
}

pub fn syscall_state(tid: u64, buf: &mut Vec<u8>) -> Option<SyscallState> {
    if !read_small(&format!("/proc/self/task/{tid}/syscall"), buf) {
        return None;
    }
    let text = std::str::from_utf8(buf).ok()?;
    let nr: i64 = match text.split_ascii_whitespace().next()? {
        "running" => return Some(SyscallState::Running),
        n => n.parse().ok()?,
    };
    Some(if nr == libc::SYS_rt_sigtimedwait || nr == libc::SYS_rt_sigsuspend {
        SyscallState::WaitsForSignals
    } else {
        SyscallState::Other
    })
}

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub lo: u64,
    pub hi: u64,
    pub readable: bool,
    pub executable: bool,
    /// The path or pseudo-name (`[stack]`, `[vdso]`), or empty.
    pub name: String,
}

/// The mappings of the process, sorted by address.
#[derive(Debug, Default)]
pub struct Maps {
    pub text: String,
    pub mappings: Vec<Mapping>,
}

impl Maps {
    pub fn read() -> std::io::Result<Maps> {
        Ok(Self::parse(fs::read_to_string("/proc/self/maps")?))
    }

    pub fn parse(text: String) -> Maps {
        let mut mappings = Vec::new();
        for line in text.lines() {
            let mut parts = line.splitn(6, |c: char| c.is_ascii_whitespace()).filter(|p| !p.is_empty());
            let (Some(range), Some(perms)) = (parts.next(), parts.next()) else { continue };
            let Some((lo, hi)) = range.split_once('-') else { continue };
            let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
            let name = line.split_ascii_whitespace().nth(5).unwrap_or("").to_string();
            let p = perms.as_bytes();
            mappings.push(Mapping {
                lo,
                hi,
                readable: p.first() == Some(&b'r'),
                executable: p.get(2) == Some(&b'x'),
                name,
            });
        }
        Maps { text, mappings }
    }

    /// The mapping containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.hi <= addr);
        self.mappings.get(i).filter(|m| m.lo <= addr)
    }

    /// The stack a thread runs on, from a stack pointer it was seen at and
    /// its thread pointer: for a glibc thread, the one readable mapping
    /// holding both, below the thread's control block (which sits at the top
    /// of its stack block); for the main thread, the `[stack]` mapping. A
    /// stack pointer elsewhere (a fiber, a WebAssembly stack, an alternate
    /// signal stack) gives none.
    pub fn thread_stack(&self, sp: u64, tcb: u64, is_main: bool) -> Option<StackBounds> {
        let m = self.find(sp).filter(|m| m.readable)?;
        if is_main {
            return (m.name == "[stack]").then_some(StackBounds::new(m.lo, m.hi));
        }
        (tcb > sp && tcb < m.hi).then_some(StackBounds::new(m.lo, tcb))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0000000-55d0a0100000 r-xp 00000000 08:01 123 /usr/bin/node
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000001000-7f0000801000 rw-p 00000000 00:00 0
7f0000801000-7f0000802000 rw-p 00000000 00:00 0
7f0000900000-7f0000a00000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn thread_stacks_need_the_stack_pointer_and_the_control_block_in_one_mapping() {
        let m = Maps::parse(MAPS.to_string());
        assert_eq!(m.find(0x55d0a0000100).unwrap().name, "/usr/bin/node");
        assert!(m.find(0x55d0a0000100).unwrap().executable);
        // A glibc thread: sp and its control block in the same mapping.
        assert_eq!(
            m.thread_stack(0x7f0000400000, 0x7f0000800f00, false),
            Some(StackBounds::new(0x7f0000001000, 0x7f0000800f00))
        );
        // Its control block elsewhere: not a stack we can vouch for.
        assert_eq!(m.thread_stack(0x7f0000400000, 0x7f0000801100, false), None);
        assert_eq!(m.thread_stack(0x7f0000950000, 0x7f0000800f00, false), None);
        // The guard page is not readable.
        assert_eq!(m.thread_stack(0x7f0000000800, 0x7f0000000f00, false), None);
        // The main thread's is [stack], whatever its thread pointer.
        assert_eq!(m.thread_stack(0x7ffc00020ff8, 1, true), Some(StackBounds::new(0x7ffc00000000, 0x7ffc00021000)));
        assert_eq!(m.thread_stack(0x7f0000400000, 0x7f0000800f00, true), None);
    }

    #[test]
    fn reads_this_process() {
        let m = Maps::read().unwrap();
        let local = 0u64;
        let sp = &local as *const u64 as u64;
        assert!(m.find(sp).expect("our stack is mapped").readable);
        let mut tids = Vec::new();
        list_threads(&mut tids).unwrap();
        let me = crate::sampler::thread_id::current();
        assert!(tids.contains(&me));
        let mut buf = Vec::new();
        assert!(thread_name(me, &mut buf).is_some());
        assert_eq!(blocks_signal(me, libc::SIGRTMAX() - 1, &mut buf), Some(false));
        assert_eq!(waits_for_signals(me, &mut buf), Some(false), "this thread is running");
        assert_eq!(thread_name(u32::MAX as u64, &mut buf), None);
    }

    #[test]
    fn a_thread_in_sigtimedwait_is_seen_waiting() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(crate::sampler::thread_id::current()).unwrap();
            // SAFETY: an empty-ish set and a 2 s timeout; plain data.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                let ts = libc::timespec { tv_sec: 2, tv_nsec: 0 };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
            }
        });
        let tid = rx.recv().unwrap();
        let mut buf = Vec::new();
        let mut seen = false;
        for _ in 0..200 {
            if waits_for_signals(tid, &mut buf) == Some(true) {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(seen);
        t.join().unwrap();
    }

    #[test]
    fn task_list_sees_threads_come_and_go() {
        let mut list = TaskList::open().unwrap();
        let mut before = Vec::new();
        list.list(&mut before).unwrap();
        let (tid, tx, t) = super::super::parked_thread();
        let mut during = Vec::new();
        list.list(&mut during).unwrap();
        // The link count tracks the thread count (other tests' threads may
        // come and go, so compare with the listing taken just before).
        let n = list.count().unwrap();
        assert!(n.abs_diff(during.len() as u64) <= 8, "{n} vs {}", during.len());
        assert!(during.contains(&tid) && !before.contains(&tid));
        tx.send(()).unwrap();
        t.join().unwrap();
        // join returns once the kernel cleared the thread's tid; its task
        // entry may stay listed a moment longer, until it is reaped.
        let mut after = Vec::new();
        for _ in 0..200 {
            list.list(&mut after).unwrap();
            if !after.contains(&tid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!after.contains(&tid));
    }

    #[test]
    fn the_newest_threads_are_listed_last() {
        let mut list = TaskList::open().unwrap();
        let (tid, tx, t) = super::super::parked_thread();
        let mut all = Vec::new();
        list.list_from(0, &mut all).unwrap();
        let mut sorted = Vec::new();
        list.list(&mut sorted).unwrap();
        // The same threads either way (other tests' threads may come and
        // go in between, hence the slack).
        let mut unsorted = all.clone();
        unsorted.sort_unstable();
        assert!(unsorted.len().abs_diff(sorted.len()) <= 8);
        // The process's first thread comes first, the one just started
        // among the last (other tests may have started a few since).
        assert_eq!(all[0], std::process::id() as u64);
        let mut tail = Vec::new();
        list.list_from(all.len().saturating_sub(8), &mut tail).unwrap();
        assert!(tail.contains(&tid), "{tid} not among the last: {tail:?}");
        assert!(tail.len() <= 16);
        list.list_from(all.len() + 100, &mut tail).unwrap();
        assert!(tail.is_empty());
        tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn dirent_parser_rejects_garbage() {
        let mut out = Vec::new();
        parse_dirents(&[0xff; 40], &mut out);
        parse_dirents(&[0; 18], &mut out);
        let mut rec = vec![0u8; 24];
        rec[16] = 24;
        rec[19..23].copy_from_slice(b"1234");
        parse_dirents(&rec, &mut out);
        assert_eq!(out, vec![1234]);
    }
}
