//! What the sampler reads from `/proc/self`: the thread list, thread names,
//! signal masks, and the memory map that gives each stack its bounds.
//!
//! All of this runs on the sampler thread, never in the signal handler.

use std::fs;
use std::io::Read;

use crate::core::registry::ThreadName;
use crate::core::walker::StackBounds;

/// Lists the ids of the process's threads into `out`.
pub fn list_threads(out: &mut Vec<u64>) -> std::io::Result<()> {
    out.clear();
    for entry in fs::read_dir("/proc/self/task")? {
        let Ok(entry) = entry else { continue };
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(tid);
        }
    }
    out.sort_unstable();
    Ok(())
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
        let me = crate::core::critical::current_thread_id();
        assert!(tids.contains(&me));
        let mut buf = Vec::new();
        assert!(thread_name(me, &mut buf).is_some());
        assert_eq!(blocks_signal(me, libc::SIGRTMAX() - 1, &mut buf), Some(false));
        assert_eq!(thread_name(u32::MAX as u64, &mut buf), None);
    }
}
