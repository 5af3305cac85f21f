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
        use std::os::fd::AsRawFd;
        out.clear();
        let fd = self.fd.as_raw_fd();
        // SAFETY: rewinding a directory fd we own.
        if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
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
        out.sort_unstable();
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
fn read_small(path: &str, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    match fs::File::open(path) {
        Ok(mut f) => f.read_to_end(buf).is_ok(),
        Err(_) => false,
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
    if !read_small(&format!("/proc/self/task/{tid}/status"), buf) {
        return None;
    }
    let text = std::str::from_utf8(buf).ok()?;
    let mask = text.lines().find_map(|l| l.strip_prefix("SigBlk:"))?.trim();
    let mask = u64::from_str_radix(mask, 16).ok()?;
    Some((1..=64).contains(&signal) && mask & (1u64 << (signal - 1)) != 0)
}

/// The readable mappings of the process, sorted by address, with adjacent
/// readable mappings joined (a stack's guard page is not readable and so
/// separates it from its neighbour).
#[derive(Debug, Default)]
pub struct MemoryMap {
    ranges: Vec<(u64, u64)>,
}

impl MemoryMap {
    pub fn read() -> std::io::Result<MemoryMap> {
        let text = fs::read_to_string("/proc/self/maps")?;
        Ok(Self::parse(&text))
    }

    pub fn parse(text: &str) -> MemoryMap {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(range), Some(perms)) = (parts.next(), parts.next()) else { continue };
            if !perms.starts_with('r') {
                continue;
            }
            let Some((lo, hi)) = range.split_once('-') else { continue };
            let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
            match ranges.last_mut() {
                Some(last) if last.1 == lo => last.1 = hi,
                _ => ranges.push((lo, hi)),
            }
        }
        MemoryMap { ranges }
    }

    /// The readable range containing `addr`.
    pub fn find(&self, addr: u64) -> Option<StackBounds> {
        let i = self.ranges.partition_point(|&(_, hi)| hi <= addr);
        let &(lo, hi) = self.ranges.get(i)?;
        (lo <= addr).then_some(StackBounds::new(lo, hi))
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
    fn finds_the_readable_range_around_an_address() {
        let m = MemoryMap::parse(MAPS);
        assert_eq!(m.find(0x7f0000400000), Some(StackBounds::new(0x7f0000001000, 0x7f0000802000)));
        assert_eq!(m.find(0x7ffc00020ff8), Some(StackBounds::new(0x7ffc00000000, 0x7ffc00021000)));
        assert_eq!(m.find(0x7f0000000800), None, "guard page is not readable");
        assert_eq!(m.find(0x7f0000850000), None, "gap");
        assert_eq!(m.find(0xffffffffff600000), None, "execute-only");
        assert_eq!(m.find(0), None);
    }

    #[test]
    fn reads_this_process() {
        let m = MemoryMap::read().unwrap();
        let local = 0u64;
        let sp = &local as *const u64 as u64;
        let b = m.find(sp).expect("our stack is mapped");
        assert!(b.contains(sp));
        let mut tids = Vec::new();
        list_threads(&mut tids).unwrap();
        let me = crate::sampler::thread_id::current();
        assert!(tids.contains(&me));
        let mut buf = Vec::new();
        assert!(thread_name(me, &mut buf).is_some());
        assert_eq!(blocks_signal(me, libc::SIGRTMAX() - 1, &mut buf), Some(false));
        assert_eq!(thread_name(u32::MAX as u64, &mut buf), None);
    }

    #[test]
    fn task_list_sees_threads_come_and_go() {
        let mut list = TaskList::open().unwrap();
        let mut before = Vec::new();
        list.list(&mut before).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tid_tx.send(crate::sampler::thread_id::current()).unwrap();
            rx.recv().unwrap();
        });
        let tid = tid_rx.recv().unwrap();
        let mut during = Vec::new();
        list.list(&mut during).unwrap();
        // The link count tracks the thread count (other tests' threads may
        // come and go, so compare with the listing taken just before).
        let n = list.count().unwrap();
        assert!(n.abs_diff(during.len() as u64) <= 8, "{n} vs {}", during.len());
        assert!(during.contains(&tid) && !before.contains(&tid));
        tx.send(()).unwrap();
        t.join().unwrap();
        let mut after = Vec::new();
        list.list(&mut after).unwrap();
        assert!(!after.contains(&tid));
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
