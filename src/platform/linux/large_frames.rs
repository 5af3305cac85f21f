//! Call sites in large frames: return addresses into functions that keep a
//! frame pointer and whose frame, at that call, spans at least
//! [`MIN_SPAN`] bytes between the callee's frame record and their own.
//!
//! Between those two records lie only the caller's locals (an I/O buffer,
//! say), which unwinding does not read: the handler may leave them out of
//! a stack copy. A call site gets here only after a complete unwind showed
//! both records chained as frame pointers would chain them, so a gap whose
//! lower record returns elsewhere is copied whole, frames of functions
//! without frame pointers included.
//!
//! The set is a fixed open-addressed table of atomics: the sampler thread
//! inserts, signal handlers look up, neither allocates nor locks. It only
//! grows; when full, further sites are not added.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes between two consecutive frame records from which a frame counts
/// as large.
pub const MIN_SPAN: u64 = 2048;

const SLOTS: usize = 512;
const PROBES: usize = 8;

static SITES: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

#[inline(always)]
fn home(ra: u64) -> usize {
    ((ra.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 55) as usize % SLOTS
}

/// Whether `ra` is a known call site in a large frame. Async-signal-safe.
#[inline(always)]
pub fn contains(ra: u64) -> bool {
    if ra == 0 {
        return false;
    }
    let h = home(ra);
    for i in 0..PROBES {
        match SITES[(h + i) % SLOTS].load(Ordering::Acquire) {
            0 => return false,
            v if v == ra => return true,
            _ => {}
        }
    }
    false
}

/// Adds a call site. Sampler thread only (one writer).
pub fn insert(ra: u64) {
    if ra == 0 {
        return;
    }
    let h = home(ra);
    for i in 0..PROBES {
        let slot = &SITES[(h + i) % SLOTS];
        match slot.load(Ordering::Acquire) {
            0 => {
                slot.store(ra, Ordering::Release);
                return;
            }
            v if v == ra => return,
            _ => {}
        }
    }
}

/// Adds the call sites a complete unwind shows in large frames: where
/// frame `k + 1`'s function keeps a frame pointer (its record holds the
/// next frame pointer and return address the unwind found) and frame `k`'s
/// record, directly below, links to it across at least [`MIN_SPAN`] bytes.
/// `read` answers from the stack copy.
pub fn learn(frames: &[u64], fps: &[u64], read: impl Fn(u64) -> Option<u64>) {
    let n = frames.len().min(fps.len());
    for k in 0..n.saturating_sub(2) {
        let (below, above) = (fps[k], fps[k + 1]);
        if above < below.saturating_add(MIN_SPAN) || contains(frames[k + 1]) {
            continue;
        }
        let chained = |record: u64, next_fp: u64, ra: u64| {
            read(record) == Some(next_fp) && read(record.wrapping_add(8)) == Some(ra)
        };
        if chained(below, above, frames[k + 1]) && chained(above, fps[k + 2], frames[k + 2]) {
            insert(frames[k + 1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_only_call_sites_whose_records_chain_across_a_large_frame() {
        // Records at 0x1000 (returns to 0xaaa0 in a function whose record is
        // at 0x3000) and 0x3000 (returns to 0xbbb0, record 0x3100).
        let mut mem = std::collections::HashMap::new();
        mem.insert(0x1000u64, 0x3000u64);
        mem.insert(0x1008, 0xaaa0);
        mem.insert(0x3000, 0x3100);
        mem.insert(0x3008, 0xbbb0);
        let read = |a: u64| mem.get(&a).copied();
        learn(&[0x9990, 0xaaa0, 0xbbb0], &[0x1000, 0x3000, 0x3100], read);
        assert!(contains(0xaaa0));
        assert!(!contains(0xbbb0), "0x3000 to 0x3100 is not large");
        // A function without a frame pointer: its frame pointer is the one
        // it was called with, and no record there names the next frame.
        learn(&[0x9990, 0xccc0, 0xbbb0], &[0x1000, 0x3000, 0x3000], read);
        assert!(!contains(0xccc0));
        assert!(!contains(0));
    }
}
