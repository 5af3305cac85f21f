//! The bounded, preallocated store of samples.
//!
//! Samples arrive from the sampler thread after the sampled thread runs again
//! (the walk itself writes into a per-thread scratch area), so the buffer is
//! never touched in the stopped window. It is still preallocated and bounded:
//! its columns reserve `capacity` entries up front and never reallocate, and a
//! push beyond capacity is refused and counted as a drop. Reserved pages that
//! are never written are never made resident, so a large default capacity
//! costs address space, not memory.

/// One sample: which thread, when, which interned stack, whether the thread
/// was idle (its stack was carried over without stopping it), and how much
/// CPU time it used since its previous sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleRecord {
    pub thread: u32,
    pub time_ns: u64,
    pub stack: u32,
    pub idle: bool,
    pub cpu_delta_ns: u64,
    /// Sampling intervals the row stands for: consecutive idle samples with
    /// the same stack, or CPU-timer expirations, share one row.
    pub weight: u32,
}

/// The buffer had no room; the sample was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferFull;

/// Columnar storage, so `stop()` can hand each column to JS as a typed array.
#[derive(Clone, Debug, Default)]
pub struct SampleBuffer {
    pub thread: Vec<u32>,
    pub time_ns: Vec<u64>,
    pub stack: Vec<u32>,
    pub idle: Vec<u8>,
    pub cpu_delta_ns: Vec<u64>,
    pub weight: Vec<u32>,
    capacity: usize,
}

impl SampleBuffer {
    pub fn with_capacity(capacity: usize) -> Self {
        SampleBuffer {
            thread: Vec::with_capacity(capacity),
            time_ns: Vec::with_capacity(capacity),
            stack: Vec::with_capacity(capacity),
            idle: Vec::with_capacity(capacity),
            cpu_delta_ns: Vec::with_capacity(capacity),
            weight: Vec::with_capacity(capacity),
            capacity,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.thread.len()
    }

    pub fn is_empty(&self) -> bool {
        self.thread.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.len() >= self.capacity
    }

    /// Appends a row; returns its index.
    pub fn push(&mut self, s: SampleRecord) -> Result<usize, BufferFull> {
        if self.is_full() {
            return Err(BufferFull);
        }
        self.thread.push(s.thread);
        self.time_ns.push(s.time_ns);
        self.stack.push(s.stack);
        self.idle.push(s.idle as u8);
        self.cpu_delta_ns.push(s.cpu_delta_ns);
        self.weight.push(s.weight);
        Ok(self.len() - 1)
    }

    /// Adds `weight` idle samples with `stack` to row `row`, if that row is
    /// idle with the same stack; false (and nothing changed) otherwise.
    pub fn extend_idle_run(&mut self, row: usize, stack: u32, weight: u32, cpu_delta_ns: u64) -> bool {
        let same = self.idle.get(row) == Some(&1) && self.stack.get(row) == Some(&stack);
        match (same, self.weight.get_mut(row), self.cpu_delta_ns.get_mut(row)) {
            (true, Some(w), Some(c)) if w.checked_add(weight).is_some() => {
                *w += weight;
                *c += cpu_delta_ns;
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, i: usize) -> Option<SampleRecord> {
        Some(SampleRecord {
            thread: *self.thread.get(i)?,
            time_ns: *self.time_ns.get(i)?,
            stack: *self.stack.get(i)?,
            idle: *self.idle.get(i)? != 0,
            cpu_delta_ns: *self.cpu_delta_ns.get(i)?,
            weight: *self.weight.get(i)?,
        })
    }

    /// Bytes held for the samples stored so far.
    pub fn bytes_used(&self) -> usize {
        self.len() * (4 + 8 + 4 + 1 + 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> SampleRecord {
        SampleRecord {
            thread: i % 3,
            time_ns: i as u64 * 10,
            stack: i,
            idle: i.is_multiple_of(2),
            cpu_delta_ns: 7,
            weight: 1,
        }
    }

    #[test]
    fn bounded_and_exact() {
        let mut b = SampleBuffer::with_capacity(100);
        let ptrs = (b.thread.as_ptr(), b.time_ns.as_ptr());
        let (mut ok, mut dropped) = (0, 0);
        for i in 0..250 {
            match b.push(rec(i)) {
                Ok(_) => ok += 1,
                Err(BufferFull) => dropped += 1,
            }
        }
        assert_eq!(ok, 100);
        assert_eq!(dropped, 150);
        assert_eq!(ok + dropped, 250, "every attempt is accounted for");
        assert_eq!(b.len(), 100);
        assert_eq!((b.thread.as_ptr(), b.time_ns.as_ptr()), ptrs, "never reallocated");
        assert_eq!(b.get(5), Some(rec(5)));
        assert_eq!(b.get(100), None);
    }

    #[test]
    fn idle_runs_share_a_row() {
        let mut b = SampleBuffer::with_capacity(10);
        let idle = SampleRecord { thread: 0, time_ns: 10, stack: 4, idle: true, cpu_delta_ns: 1, weight: 1 };
        let row = b.push(idle).unwrap();
        assert!(b.extend_idle_run(row, 4, 2, 5));
        assert_eq!((b.weight[row], b.cpu_delta_ns[row], b.len()), (3, 6, 1));
        assert!(!b.extend_idle_run(row, 5, 1, 0), "another stack");
        let busy = b.push(SampleRecord { idle: false, ..idle }).unwrap();
        assert!(!b.extend_idle_run(busy, 4, 1, 0), "a busy row");
        assert!(!b.extend_idle_run(99, 4, 1, 0), "no such row");
        b.weight[row] = u32::MAX;
        assert!(!b.extend_idle_run(row, 4, 1, 0), "the weight would overflow");
    }

    #[test]
    fn zero_capacity_drops_everything() {
        let mut b = SampleBuffer::with_capacity(0);
        assert_eq!(b.push(rec(1)), Err(BufferFull));
        assert!(b.is_empty());
    }
}
