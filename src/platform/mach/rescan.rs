//! Merging a `task_threads` rescan into the hook's table, and bringing a
//! session's registry up to date with it.

use super::thread_table::{Added, ThreadTable};
use crate::sampler::registry::{ThreadEntry, ThreadName, ThreadRegistry};

/// A thread `task_threads` returned: its port (a send right we now own) and
/// its tid from `thread_info(THREAD_IDENTIFIER_INFO)`, 0 if that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundThread {
    pub port: u32,
    pub tid: u64,
}

/// The main thread's tid: the caller's if it is the main thread, else the
/// lowest tid in the task. Thread ids come from a system-wide counter that
/// only grows, and the main thread is the task's first thread.
pub fn pick_main_tid(caller_main_tid: Option<u64>, found: &[FoundThread]) -> u64 {
    caller_main_tid.unwrap_or_else(|| found.iter().map(|f| f.tid).filter(|&t| t != 0).min().unwrap_or(0))
}

/// Merges a rescan into `table`. `tracked_before` is the sorted list of
/// tids the table tracked before `task_threads` was called.
///
/// - A found thread not yet tracked is added with its right (`describe`
///   builds the entry); one already tracked has its extra right released.
/// - A thread tracked before the call but not found has exited without a
///   TERMINATE event (a raw Mach thread, or an exit that raced the hook's
///   installation): it is removed, and `retire` gets its tid and port.
///   Threads that appeared after the call are left alone.
///
/// Returns how many threads were added.
pub fn merge_rescan(
    table: &ThreadTable,
    tracked_before: &[ThreadEntry],
    found: &[FoundThread],
    mut describe: impl FnMut(&FoundThread) -> ThreadEntry,
    mut release: impl FnMut(u32),
    mut retire: impl FnMut(u64, u32),
) -> usize {
    let mut added = 0;
    for f in found {
        // `describe` may take libpthread's lock: skip it for known threads.
        // The hook can still add this thread before `add` does; then `add`
        // leaves the hook's entry, and this right is released.
        if f.tid == 0 || table.contains(f.tid) || table.add(describe(f)) == Added::AlreadyTracked {
            release(f.port);
        } else {
            added += 1;
        }
    }
    for e in tracked_before {
        if !found.iter().any(|f| f.tid == e.tid) && table.mark_removed(e.tid, e.handle) {
            retire(e.tid, e.handle as u32);
        }
    }
    added
}

/// Brings a session's registry up to date with the hook's live entries
/// (`tracked`, sorted by tid): adds threads it lacks (after `on_new` fills
/// in details such as the name) and removes those no longer tracked.
/// `scratch` keeps its allocation between calls. Returns how many were added.
pub fn sync_session(
    session: &ThreadRegistry,
    tracked: &[ThreadEntry],
    scratch: &mut Vec<ThreadEntry>,
    mut on_new: impl FnMut(&mut ThreadEntry),
) -> usize {
    session.snapshot(scratch);
    scratch.sort_unstable_by_key(|e| e.tid);
    let mut added = 0;
    for e in tracked {
        let known = scratch.binary_search_by_key(&e.tid, |s| s.tid).ok().map(|i| scratch[i].handle);
        if known.is_some_and(|h| h != e.handle) {
            // A new thread under a reused tid (Linux reuses them; the
            // simulated Mach passes them through): the old one has left.
            session.mark_removed(e.tid);
        }
        if known != Some(e.handle) {
            let mut e = *e;
            on_new(&mut e);
            session.add(e);
            added += 1;
        }
    }
    session.remove_missing(|tid| tracked.binary_search_by_key(&tid, |e| e.tid).is_ok());
    added
}

/// A thread name from a fixed C buffer (`pth_name` of
/// `thread_extended_info`), as raw bytes.
pub fn name_from_c(buf: &[std::ffi::c_char]) -> ThreadName {
    let mut bytes = [0u8; crate::sampler::registry::THREAD_NAME_MAX];
    for (d, &s) in bytes.iter_mut().zip(buf) {
        *d = s as u8;
    }
    ThreadName::from_bytes(&bytes[..buf.len().min(bytes.len())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::walker::StackBounds;

    fn entry(tid: u64, port: u32) -> ThreadEntry {
        ThreadEntry::new(tid, port as u64, ThreadName::EMPTY, StackBounds::new(0x1000, 0x2000))
    }

    #[test]
    fn main_thread_is_the_caller_or_the_oldest() {
        let found =
            [FoundThread { port: 1, tid: 900 }, FoundThread { port: 2, tid: 0 }, FoundThread { port: 3, tid: 77 }];
        assert_eq!(pick_main_tid(None, &found), 77);
        assert_eq!(pick_main_tid(Some(5), &found), 5);
        assert_eq!(pick_main_tid(None, &[]), 0);
    }

    #[test]
    fn rescan_adds_new_threads_releases_known_ones_and_retires_vanished() {
        let reg = ThreadTable::with_capacity(8);
        reg.add(entry(1, 11)); // tracked, still alive
        reg.add(entry(2, 22)); // tracked, vanished without TERMINATE
        let mut before = Vec::new();
        reg.snapshot(&mut before);
        before.sort_unstable_by_key(|e| e.tid);
        reg.add(entry(3, 33)); // appeared after task_threads: must be kept
        let found = [
            FoundThread { port: 11, tid: 1 },
            FoundThread { port: 44, tid: 4 },
            FoundThread { port: 55, tid: 0 }, // could not be identified
        ];
        let (mut released, mut retired) = (Vec::new(), Vec::new());
        let added = merge_rescan(
            &reg,
            &before,
            &found,
            |f| entry(f.tid, f.port),
            |p| released.push(p),
            |tid, port| retired.push((tid, port)),
        );
        assert_eq!(added, 1);
        assert_eq!(released, vec![11, 55]);
        assert_eq!(retired, vec![(2, 22)]);
        let mut live: Vec<u64> = {
            let mut s = Vec::new();
            reg.snapshot(&mut s);
            s.iter().map(|e| e.tid).collect()
        };
        live.sort_unstable();
        assert_eq!(live, vec![1, 3, 4]);
    }

    #[test]
    fn a_thread_the_hook_adds_during_the_rescan_keeps_one_right() {
        // The thread starts between the rescan's check and its insertion:
        // the hook's entry (and right) stays, the rescan's right goes back.
        let reg = ThreadTable::with_capacity(8);
        let found = [FoundThread { port: 70, tid: 7 }];
        let mut released = Vec::new();
        let added = merge_rescan(
            &reg,
            &[],
            &found,
            |f| {
                assert_eq!(reg.try_add(entry(f.tid, 70)), Ok(Added::New), "the hook, racing");
                entry(f.tid, f.port)
            },
            |p| released.push(p),
            |_, _| {},
        );
        assert_eq!(added, 0);
        assert_eq!(released, vec![70], "one of the two rights, not both and not neither");
        assert_eq!(reg.len(), 1);
    }

    #[test]
    fn session_sync_adds_named_threads_and_removes_departed() {
        let session = ThreadRegistry::new();
        session.add(entry(1, 11));
        session.add(entry(9, 99)); // no longer tracked
        let tracked = [entry(1, 11), entry(2, 22), entry(3, 33)];
        let mut scratch = Vec::new();
        let added = sync_session(&session, &tracked, &mut scratch, |e| e.name = ThreadName::from_bytes(b"new"));
        assert_eq!(added, 2);
        let mut snap = Vec::new();
        session.snapshot(&mut snap);
        snap.sort_unstable_by_key(|e| e.tid);
        assert_eq!(snap.iter().map(|e| e.tid).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(snap[1].name.as_bytes(), b"new");
        assert_eq!(snap[0].name.as_bytes(), b"", "existing entries are not re-described");
        // Idempotent.
        assert_eq!(sync_session(&session, &tracked, &mut scratch, |_| {}), 0);
        assert_eq!(session.len(), 3);
    }

    #[test]
    fn session_sync_replaces_a_thread_whose_tid_was_reused() {
        let session = ThreadRegistry::new();
        session.add(entry(1, 11));
        let mut scratch = Vec::new();
        let added = sync_session(&session, &[entry(1, 12)], &mut scratch, |_| {});
        assert_eq!(added, 1);
        let mut snap = Vec::new();
        session.snapshot(&mut snap);
        assert_eq!(snap.iter().map(|e| (e.tid, e.handle)).collect::<Vec<_>>(), vec![(1, 12)]);
    }

    #[test]
    fn c_names_stop_at_nul() {
        use std::ffi::c_char;
        let mut buf = [0 as c_char; 64];
        for (d, s) in buf.iter_mut().zip(b"libuv-worker") {
            *d = *s as c_char;
        }
        assert_eq!(name_from_c(&buf).as_bytes(), b"libuv-worker");
        assert_eq!(name_from_c(&[0 as c_char; 64]).as_bytes(), b"");
    }
}
