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
//! inserts, the stopped window looks up (a signal handler, or the Mach
//! sampler while a thread is suspended), neither allocates nor locks. It
//! only grows; when full, further sites are not added. The set is the
//! process's: call sites are addresses of code, the same on every thread.

use std::sync::atomic::{AtomicU64, Ordering};

use super::copy::{outermost_record, Hole};

/// Bytes between two consecutive frame records from which a frame counts
/// as large.
pub const MIN_SPAN: u64 = 2048;

/// Holes one copy may skip.
pub const MAX_HOLES: usize = 8;

/// In a large frame a copy keeps this much above the callee's frame record
/// (arguments passed on the stack)...
const KEEP_ABOVE_RECORD: u64 = 128;
/// ...and this much below the frame's own record (V8's frame slots).
const KEEP_BELOW_RECORD: u64 = 128;

/// Plans the copy of a live stack `[start, limit)` in the stopped window:
/// follows the frame-pointer chain from `fp` (see [`outermost_record`])
/// and returns its outermost record; unless `whole`, fills `holes` with the
/// middles of large frames at known call sites ([`contains`]) and returns
/// how many. The holes lie between records of the chain, inside
/// `[start, limit)`, ascending and 8-aligned (records are).
///
/// `read` is asked only for aligned words of records the chain accepted,
/// inside `[start, limit)`. Allocation-free, lock-free.
#[inline(always)]
pub fn plan_copy(
    fp: u64,
    start: u64,
    limit: u64,
    whole: bool,
    read: impl Fn(u64) -> u64,
    holes: &mut [Hole],
) -> (Option<u64>, usize) {
    let (mut n, mut below) = (0usize, 0u64);
    let visit = |record: u64| {
        if below != 0 && !whole && n < holes.len() && record - below >= MIN_SPAN && contains(read(below + 8)) {
            holes[n] = [below + 16 + KEEP_ABOVE_RECORD, record - KEEP_BELOW_RECORD];
            n += 1;
        }
        below = record;
    };
    let outermost = outermost_record(fp, start, limit, |a| Some(read(a)), visit);
    (outermost, n)
}

/// Copies `[start, end)` without `holes` (as [`plan_copy`] left them,
/// all inside `[start, end)`) to `out`, the words after each hole following
/// those before it. Returns the words copied.
///
/// # Safety
/// `[start, end)` must be readable, 8-aligned memory that does not change
/// during the copy, and `out` must have room for `(end - start) / 8` words.
#[inline(always)]
pub unsafe fn copy_around(start: u64, end: u64, holes: &[Hole], out: *mut u64) -> usize {
    let (mut words, mut from) = (0usize, start);
    for i in 0..=holes.len() {
        let to = if i < holes.len() { holes[i][0] } else { end };
        let n = (to.saturating_sub(from) / 8) as usize;
        // SAFETY: [from, to) is a part of [start, end) (the holes are
        // inside it and ascending), and the segments together are at most
        // `(end - start) / 8` words, which `out` has room for.
        unsafe { std::ptr::copy_nonoverlapping(from as *const u64, out.add(words), n) };
        words += n;
        if i < holes.len() {
            from = holes[i][1];
        }
    }
    words
}

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

    #[test]
    fn a_copy_planned_around_a_known_large_frame_reads_the_records_on_both_sides() {
        // A stack of 1024 words: records at word 4 (returns to 0x5550 in a
        // function whose record is at word 700), 700 (returns to 0x6660,
        // record at 1000) and 1000 (the root).
        let mut stack = vec![0u64; 1024];
        let base = stack.as_ptr() as u64;
        let at = |w: usize| base + 8 * w as u64;
        stack[4] = at(700);
        stack[5] = 0x5550;
        stack[700] = at(1000);
        stack[701] = 0x6660;
        stack[1000] = 0;
        for (w, v) in stack.iter_mut().enumerate().skip(6).take(690) {
            *v = 0xdead_0000 + w as u64;
        }
        let (start, end) = (base, at(1024));
        let read = |a: u64| stack[((a - base) / 8) as usize];
        let mut holes = [[0u64; 2]; MAX_HOLES];
        assert_eq!(plan_copy(at(4), start, end, false, read, &mut holes), (Some(at(1000)), 0), "not a known site yet");
        insert(0x5550);
        let (outermost, n) = plan_copy(at(4), start, end, false, read, &mut holes);
        assert_eq!((outermost, n), (Some(at(1000)), 1));
        assert_eq!(holes[0], [at(6) + KEEP_ABOVE_RECORD, at(700) - KEEP_BELOW_RECORD]);
        assert_eq!(plan_copy(at(4), start, end, true, read, &mut holes).1, 0, "whole copies skip nothing");

        let mut out = vec![0u64; 1024];
        // SAFETY: [start, end) is `stack`, which nothing changes meanwhile;
        // `out` has room for all of it.
        let words = unsafe { copy_around(start, end, &holes[..1], out.as_mut_ptr()) };
        let skipped = ((holes[0][1] - holes[0][0]) / 8) as usize;
        assert_eq!(words, 1024 - skipped);
        let copy = super::super::copy::StackCopy {
            start,
            words: &out[..words],
            truncated: false,
            tail: &[],
            holes: &holes[..1],
        };
        assert_eq!(copy.end(), end);
        assert_eq!((copy.read(at(4)), copy.read(at(5))), (Some(at(700)), Some(0x5550)));
        assert_eq!((copy.read(at(700)), copy.read(at(701))), (Some(at(1000)), Some(0x6660)));
        assert_eq!(copy.read(at(6) + KEEP_ABOVE_RECORD - 8), Some(stack[6 + 15]), "kept above the callee's record");
        assert_eq!(copy.read(at(400)), None, "left out");
        assert_eq!(copy.read(at(699)), Some(stack[699]), "kept below the frame's record");
    }
}
