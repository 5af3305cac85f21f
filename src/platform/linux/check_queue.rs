//! When each thread's signal mask is checked next: a min-heap of (due
//! time, tid), so that a refresh reaches the threads that are due without
//! touching the others. Scanning every thread's state instead missed the
//! cache on each entry, and was most of a refresh's own time in a process
//! with hundreds of idle threads.
//!
//! An entry is not removed when its thread's due time changes or the
//! thread goes: the caller tells a current entry from a stale one by the
//! due time it holds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Default)]
pub struct CheckQueue {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl CheckQueue {
    pub fn push(&mut self, due_ns: u64, tid: u64) {
        self.heap.push(Reverse((due_ns, tid)));
    }

    /// Removes and returns the earliest entry if it is due at `now`, as
    /// (due time, tid); it may be stale.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, u64)> {
        match self.heap.peek() {
            Some(&Reverse((due, _))) if due <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    /// Rebuilds from the current entries when stale ones outnumber them
    /// (threads that came and went): `current` yields each thread's (due
    /// time, tid), `live` is how many threads there are.
    pub fn compact(&mut self, live: usize, current: impl Iterator<Item = (u64, u64)>) {
        if self.heap.len() > 2 * live + 64 {
            self.heap = current.map(Reverse).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_entries_come_out_earliest_first_and_later_ones_stay() {
        let mut q = CheckQueue::default();
        for (due, tid) in [(30, 3), (10, 1), (20, 2), (40, 4)] {
            q.push(due, tid);
        }
        assert_eq!(q.pop_due(25), Some((10, 1)));
        assert_eq!(q.pop_due(25), Some((20, 2)));
        assert_eq!(q.pop_due(25), None, "30 is not due at 25");
        assert_eq!(q.heap.len(), 2);
        assert_eq!(q.pop_due(u64::MAX), Some((30, 3)));
    }

    #[test]
    fn compaction_keeps_only_current_entries() {
        let mut q = CheckQueue::default();
        for i in 0..200 {
            q.push(i, i);
        }
        q.compact(100, std::iter::empty());
        assert_eq!(q.heap.len(), 200, "not yet: 200 <= 2 * 100 + 64");
        q.compact(10, [(5, 7), (3, 8)].into_iter());
        assert_eq!(q.heap.len(), 2);
        assert_eq!(q.pop_due(10), Some((3, 8)));
    }
}
