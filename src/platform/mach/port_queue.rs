//! Port rights waiting for the running sampler to release them.

use std::sync::atomic::{AtomicU32, Ordering};

pub const PORT_QUEUE_LEN: usize = 512;

/// Port rights waiting to be released by the sampler thread.
///
/// While a sampler runs, it may hold a thread's port name in its snapshot;
/// releasing that right elsewhere would let the kernel give the name to a new
/// thread, and the sampler would then suspend the wrong thread and walk it
/// with the old thread's stack bounds. So rights are queued here and the
/// sampler releases them at its next refresh, once no snapshot refers to
/// them. Push and drain are lock-free, so the hook can push.
pub struct PortQueue {
    slots: [AtomicU32; PORT_QUEUE_LEN],
}

impl Default for PortQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl PortQueue {
    pub const fn new() -> Self {
        PortQueue { slots: [const { AtomicU32::new(0) }; PORT_QUEUE_LEN] }
    }

    /// Queues `port`; false if the queue is full (or `port` is null).
    pub fn push(&self, port: u32) -> bool {
        port != 0 && self.slots.iter().any(|s| s.compare_exchange(0, port, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    }

    /// Takes every queued port.
    pub fn drain(&self, mut release: impl FnMut(u32)) {
        for s in &self.slots {
            let p = s.swap(0, Ordering::AcqRel);
            if p != 0 {
                release(p);
            }
        }
    }

    /// Visits every queued port without taking it.
    pub fn for_each(&self, mut f: impl FnMut(u32)) {
        for s in &self.slots {
            let p = s.load(Ordering::Acquire);
            if p != 0 {
                f(p);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.load(Ordering::Relaxed) != 0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to do with a send right the registry no longer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// No sampler is running, so no snapshot can hold the name: release it.
    Now(u32),
    /// Queued for the running sampler to release.
    Deferred,
    /// The queue is full. Keeping the right (a dead name, a few bytes of
    /// kernel memory) is the safe failure: releasing it could let the name
    /// be reused under the running sampler.
    Leak(u32),
}

pub fn release_right(port: u32, sampler_active: bool, queue: &PortQueue) -> Release {
    if !sampler_active {
        Release::Now(port)
    } else if queue.push(port) {
        Release::Deferred
    } else {
        Release::Leak(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_queue_is_bounded_and_drains_everything() {
        let q = PortQueue::new();
        assert!(!q.push(0), "null port");
        for p in 1..=PORT_QUEUE_LEN as u32 {
            assert!(q.push(p));
        }
        assert!(!q.push(9999), "full");
        assert_eq!(release_right(9999, true, &q), Release::Leak(9999));
        let mut got = Vec::new();
        q.drain(|p| got.push(p));
        assert_eq!(got.len(), PORT_QUEUE_LEN);
        assert!(q.is_empty());
        assert_eq!(release_right(7, false, &q), Release::Now(7));
        assert!(q.is_empty(), "no sampler: released at once, not queued");
        assert_eq!(release_right(7, true, &q), Release::Deferred);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn port_queue_concurrent_push_and_drain_loses_nothing() {
        use std::sync::Arc;
        let q = Arc::new(PortQueue::new());
        let pushers: Vec<_> = (0..4u32)
            .map(|w| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        while !q.push(w * 1000 + i + 1) {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 800 {
            q.drain(|p| got.push(p));
        }
        for p in pushers {
            p.join().unwrap();
        }
        q.drain(|p| got.push(p));
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 800);
    }
}
