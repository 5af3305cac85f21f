//! What a pthread introspection event does to the hook's thread table, and
//! which port rights that leaves to release.

use super::exit_log::ExitLog;
use super::thread_table::{Added, ThreadTable};
use crate::sampler::registry::ThreadEntry;
use crate::sampler::walker::StackBounds;

/// A pthread introspection event, reduced to what the table needs.
#[derive(Clone, Copy, Debug)]
pub enum HookEvent {
    /// THREAD_START, on the new thread: its entry, whose `handle` is a send
    /// right the hook just took with `mach_thread_self()`.
    Start(ThreadEntry),
    /// THREAD_TERMINATE, on the exiting thread: its tid and port name.
    Terminate { tid: u64, port: u32 },
}

/// What applying an event left for the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookOutcome {
    /// The table now owns the entry's right.
    Added,
    /// A `task_threads` rescan got there first and owns a right already;
    /// release the redundant one.
    AlreadyTracked { release: u32 },
    /// No spare capacity (the hook never allocates). The table's overflow
    /// flag is set, so the sampler will rescan and add the thread; release
    /// the right the hook took.
    Refused { release: u32 },
    /// The thread was removed; the table's right must be released (see
    /// [`release_right`]).
    Removed { release: u32 },
    /// THREAD_TERMINATE for a thread the table did not track.
    Untracked,
}

/// Applies one hook event. Never allocates: `try_add` fails rather than
/// grow, and the exit log is a fixed ring.
pub fn apply_hook_event(table: &ThreadTable, exits: &ExitLog, event: HookEvent) -> HookOutcome {
    match event {
        HookEvent::Start(entry) => {
            let port = entry.handle as u32;
            match table.try_add(entry) {
                Ok(Added::New) => HookOutcome::Added,
                Ok(Added::AlreadyTracked) => HookOutcome::AlreadyTracked { release: port },
                Err(_) => HookOutcome::Refused { release: port },
            }
        }
        HookEvent::Terminate { tid, port } => {
            // Log first, so a sampler that suspends this thread from now on
            // sees that its stack may be about to go.
            exits.record(tid);
            if table.mark_removed(tid, port as u64) {
                HookOutcome::Removed { release: port }
            } else {
                HookOutcome::Untracked
            }
        }
    }
}

/// Stack bounds from `pthread_get_stackaddr_np` (the top: stacks grow down)
/// and `pthread_get_stacksize_np`. Empty if either is unknown or absurd.
pub fn stack_bounds_from_top(top: u64, size: u64) -> StackBounds {
    match top.checked_sub(size) {
        Some(lo) if top != 0 && size != 0 => StackBounds::new(lo, top),
        _ => StackBounds::EMPTY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::registry::ThreadName;

    fn entry(tid: u64, port: u32) -> ThreadEntry {
        ThreadEntry::new(tid, port as u64, ThreadName::EMPTY, StackBounds::new(0x1000, 0x2000))
    }

    #[test]
    fn hook_start_adds_without_allocating_and_reports_overflow() {
        let reg = ThreadTable::with_capacity(2);
        let log = ExitLog::new();
        let cap = reg.capacity();
        for tid in 1..=cap as u64 {
            assert_eq!(
                apply_hook_event(&reg, &log, HookEvent::Start(entry(tid, tid as u32 + 100))),
                HookOutcome::Added
            );
        }
        let out = apply_hook_event(&reg, &log, HookEvent::Start(entry(999, 1999)));
        assert_eq!(out, HookOutcome::Refused { release: 1999 });
        assert_eq!(reg.capacity(), cap, "the hook never grows the table");
        assert!(reg.ensure_headroom(8), "overflow is visible to the sampler");
        // A thread a rescan already added: the hook's right is redundant.
        let out = apply_hook_event(&reg, &log, HookEvent::Start(entry(1, 555)));
        assert_eq!(out, HookOutcome::AlreadyTracked { release: 555 });
        let mut snap = Vec::new();
        reg.snapshot(&mut snap);
        assert_eq!(snap.iter().find(|e| e.tid == 1).unwrap().handle, 101, "the table keeps its own right");
    }

    #[test]
    fn hook_terminate_logs_the_exit_and_hands_back_the_right() {
        let reg = ThreadTable::with_capacity(4);
        let log = ExitLog::new();
        apply_hook_event(&reg, &log, HookEvent::Start(entry(7, 70)));
        let out = apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 7, port: 70 });
        assert_eq!(out, HookOutcome::Removed { release: 70 });
        assert!(!reg.contains(7));
        assert!(log.contains(7));
        // Twice, or for a thread never tracked: nothing to release, but the
        // exit is still logged (it may be in a sampler's snapshot).
        assert_eq!(apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 7, port: 70 }), HookOutcome::Untracked);
        assert_eq!(apply_hook_event(&reg, &log, HookEvent::Terminate { tid: 8, port: 80 }), HookOutcome::Untracked);
        assert!(log.contains(8));
    }

    #[test]
    fn hook_events_from_many_threads_keep_the_registry_consistent() {
        use std::sync::Arc;
        let reg = Arc::new(ThreadTable::with_capacity(4096));
        let log = Arc::new(ExitLog::new());
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (reg, log) = (reg.clone(), log.clone());
                std::thread::spawn(move || {
                    let mut released = 0;
                    for i in 0..300u64 {
                        let tid = w * 10_000 + i + 1;
                        assert_eq!(
                            apply_hook_event(&reg, &log, HookEvent::Start(entry(tid, tid as u32))),
                            HookOutcome::Added
                        );
                        if i % 3 == 0 {
                            let out = apply_hook_event(&reg, &log, HookEvent::Terminate { tid, port: tid as u32 });
                            assert_eq!(out, HookOutcome::Removed { release: tid as u32 });
                            released += 1;
                        }
                    }
                    released
                })
            })
            .collect();
        let released: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(released, 400);
        assert_eq!(reg.len(), 1200 - 400);
    }

    #[test]
    fn stack_bounds_come_from_the_top_down() {
        assert_eq!(
            stack_bounds_from_top(0x7000_0008_0000, 0x8_0000),
            StackBounds::new(0x7000_0000_0000, 0x7000_0008_0000)
        );
        assert_eq!(stack_bounds_from_top(0, 0x1000), StackBounds::EMPTY);
        assert_eq!(stack_bounds_from_top(0x1000, 0), StackBounds::EMPTY);
        assert_eq!(stack_bounds_from_top(0x1000, 0x2000), StackBounds::EMPTY);
    }
}
