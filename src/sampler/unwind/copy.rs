//! A stopped thread's stack as it was copied in the stopped window: the
//! words from the copy's start up, less the holes the copier skipped, and,
//! for a stack deeper than the copy, the frame records found above it by
//! following frame pointers.
//!
//! Every read the unwinder makes goes through [`StackCopy::read`], which
//! answers only from those bytes: unwinding a copy can never touch the
//! thread's memory, whatever the stack holds.

/// Offsets below a frame pointer whose words a tail record keeps: where the
/// JavaScript layer finds an interpreted frame's bytecode position
/// (`v8::slots::OFFSETS`), so frames above the copy are named too.
pub const TAIL_WORDS_BELOW: [u64; 4] = [48, 40, 32, 24];

/// A frame record found above the end of the copy: the address of the
/// record, the saved frame pointer stored there, the return address after
/// it, then the words at [`TAIL_WORDS_BELOW`] under it (0 where not read).
pub type TailRecord = [u64; 3 + TAIL_WORDS_BELOW.len()];

/// A range `[lo, hi)` inside the copy that was not copied: the middle of a
/// large frame (an I/O buffer, say) between two frame records.
pub type Hole = [u64; 2];

#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    /// The address `words[0]` was copied from (8-byte aligned).
    pub start: u64,
    pub words: &'a [u64],
    /// The stack goes on above the copy (the copy was cut at its bound).
    pub truncated: bool,
    /// Frame records above the copy, by ascending address.
    pub tail: &'a [TailRecord],
    /// Ranges skipped inside the copy, by ascending address, aligned: the
    /// words after a hole follow the words before it in `words`.
    pub holes: &'a [Hole],
}

impl<'a> StackCopy<'a> {
    pub const EMPTY: StackCopy<'static> = StackCopy { start: 0, words: &[], truncated: false, tail: &[], holes: &[] };

    /// A copy without holes or tail.
    pub fn whole(start: u64, words: &'a [u64]) -> Self {
        StackCopy { start, words, truncated: false, tail: &[], holes: &[] }
    }

    /// The first address past the copied words.
    pub fn end(&self) -> u64 {
        let skipped: u64 = self.holes.iter().map(|h| h[1].saturating_sub(h[0])).sum();
        self.start.saturating_add(8 * self.words.len() as u64).saturating_add(skipped)
    }

    /// Whether `addr` lies in a range the copier skipped.
    pub fn in_hole(&self, addr: u64) -> bool {
        self.holes.iter().any(|h| (h[0]..h[1]).contains(&addr))
    }

    /// The word at `addr`, if the copy has it: an aligned word inside the
    /// copied range, or a field of a frame record above it.
    pub fn read(&self, addr: u64) -> Option<u64> {
        if addr & 7 != 0 {
            return None;
        }
        if let Some(mut off) = addr.checked_sub(self.start) {
            for h in self.holes {
                if addr >= h[1] {
                    off = off.saturating_sub(h[1].saturating_sub(h[0]));
                } else if addr >= h[0] {
                    return None;
                } else {
                    break;
                }
            }
            if let Some(&w) = self.words.get((off / 8) as usize) {
                return Some(w);
            }
        }
        // A record is 16 bytes: saved fp at its address, return address
        // after; some words below it were kept too.
        let i = self.tail.partition_point(|r| r[0].saturating_add(16) <= addr);
        let r = self.tail.get(i)?;
        if r[0] == addr {
            return Some(r[1]);
        }
        if r[0].checked_add(8) == Some(addr) {
            return Some(r[2]);
        }
        let below = r[0].checked_sub(addr)?;
        TAIL_WORDS_BELOW.iter().position(|&o| o == below).map(|k| r[3 + k])
    }
}

/// The outermost frame record of the chain that starts at `fp`: follows
/// saved frame pointers upwards while each record lies in `[start, limit)`,
/// is aligned and is above the last, and returns the last such record.
/// None when `fp` itself is not one. At most `(limit - start) / 16` steps.
/// `visit` sees each record of the chain, in ascending order.
///
/// A thread's outermost record (that of its first function that keeps a
/// frame pointer) stays where it is for the thread's life, so the signal
/// handler, walking the live stack, and the sampler, walking a copy of it,
/// find the same one.
#[inline(always)]
pub fn outermost_record(
    mut fp: u64,
    start: u64,
    limit: u64,
    mut read: impl FnMut(u64) -> Option<u64>,
    mut visit: impl FnMut(u64),
) -> Option<u64> {
    let inside = |a: u64| a >= start && a & 7 == 0 && a.checked_add(16).is_some_and(|e| e <= limit);
    if !inside(fp) {
        return None;
    }
    loop {
        visit(fp);
        match read(fp) {
            Some(next) if next > fp && inside(next) => fp = next,
            _ => return Some(fp),
        }
    }
}

/// What a copy unwound to its root teaches about the thread: its outermost
/// frame record, and how many bytes from that record up the unwind needed
/// (the highest word it read, plus `margin`, in 16-byte steps). A later
/// copy whose frame-pointer chain ends at the same record can stop there.
/// None when `fp` starts no chain inside the copy or the unwind read
/// nothing at or above the record.
pub fn root_extent(copy: &StackCopy<'_>, fp: u64, highest_read: u64, margin: u64) -> Option<(u64, u64)> {
    let record = outermost_record(fp, copy.start, copy.end(), |a| copy.read(a), |_| {})?;
    (highest_read >= record).then(|| (record, (highest_read + 8 - record).next_multiple_of(16) + margin))
}

/// For a stack whose copy `[start, end)` was cut below `hi`: follows the
/// frame-pointer chain from `fp` and keeps the records that end above
/// `end` (one may straddle it) in `out`, so the unwinder can continue through frames that keep frame
/// pointers. Returns how many it kept. Reads (through `read`) only aligned
/// 16-byte records inside `[start, hi)`, each above the last.
#[inline(always)]
pub fn frame_records_above(
    mut fp: u64,
    start: u64,
    end: u64,
    hi: u64,
    mut read: impl FnMut(u64) -> u64,
    out: &mut [TailRecord],
) -> usize {
    let mut n = 0;
    let mut lo = start;
    while n < out.len() {
        if fp < lo || fp & 7 != 0 || fp.checked_add(16).is_none_or(|e| e > hi) {
            break;
        }
        let (next, ret) = (read(fp), read(fp + 8));
        if fp + 16 > end {
            let mut record = [0; 3 + TAIL_WORDS_BELOW.len()];
            record[..3].copy_from_slice(&[fp, next, ret]);
            for (k, &off) in TAIL_WORDS_BELOW.iter().enumerate() {
                // Above the copy's start, below the record: inside [start, hi).
                if let Some(a) = fp.checked_sub(off).filter(|&a| a >= start) {
                    record[3 + k] = read(a);
                }
            }
            out[n] = record;
            n += 1;
        }
        if next == 0 || ret == 0 {
            break;
        }
        lo = fp + 16;
        fp = next;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_after_a_hole_are_read_at_their_own_addresses() {
        // 0x1000..0x1010 copied, 0x1010..0x1030 skipped, 0x1030..0x1040
        // copied, 0x1040..0x1048 skipped, 0x1048..0x1050 copied.
        let words = [1, 2, 3, 4, 5];
        let holes = [[0x1010, 0x1030], [0x1040, 0x1048]];
        let c = StackCopy { start: 0x1000, words: &words, truncated: false, tail: &[], holes: &holes };
        assert_eq!(c.end(), 0x1050);
        assert_eq!(c.read(0x1008), Some(2));
        assert_eq!(c.read(0x1010), None);
        assert_eq!(c.read(0x1028), None);
        assert!(c.in_hole(0x1028) && !c.in_hole(0x1030));
        assert_eq!(c.read(0x1030), Some(3));
        assert_eq!(c.read(0x1038), Some(4));
        assert_eq!(c.read(0x1040), None);
        assert_eq!(c.read(0x1048), Some(5));
        assert_eq!(c.read(0x1050), None, "one past the copy");
    }

    #[test]
    fn the_outermost_record_is_the_last_one_inside_the_bounds() {
        // Records at 0x1010 -> 0x1030 -> 0x1060, whose saved fp is 0.
        let mut words = [0u64; 16];
        words[2] = 0x1030;
        words[6] = 0x1060;
        words[12] = 0;
        let c = StackCopy::whole(0x1000, &words);
        let walk = |fp, limit| outermost_record(fp, 0x1000, limit, |a| c.read(a), |_| {});
        assert_eq!(walk(0x1010, c.end()), Some(0x1060));
        assert_eq!(walk(0x1030, c.end()), Some(0x1060));
        assert_eq!(walk(0x1010, 0x1068), Some(0x1030), "a record that ends past the limit is not followed");
        assert_eq!(walk(0x1014, c.end()), None, "unaligned");
        assert_eq!(walk(0x0ff0, c.end()), None, "below the start");
        // A saved fp that points down (a cycle) ends the chain.
        let mut cyclic = words;
        cyclic[6] = 0x1010;
        let c = StackCopy::whole(0x1000, &cyclic);
        let mut seen = Vec::new();
        assert_eq!(outermost_record(0x1010, 0x1000, c.end(), |a| c.read(a), |r| seen.push(r)), Some(0x1030));
        assert_eq!(seen, [0x1010, 0x1030]);
    }

    #[test]
    fn the_root_extent_covers_what_the_unwind_read() {
        // Records at 0x1010 -> 0x1030 -> 0x1060 (saved fp 0: the root).
        let mut words = [0u64; 16];
        words[2] = 0x1030;
        words[6] = 0x1060;
        let c = StackCopy::whole(0x1000, &words);
        assert_eq!(root_extent(&c, 0x1010, 0x1068, 64), Some((0x1060, 16 + 64)));
        assert_eq!(root_extent(&c, 0x1010, 0x1070, 0), Some((0x1060, 32)));
        assert_eq!(root_extent(&c, 0x1010, 0x1058, 64), None, "the unwind stopped below the record");
        assert_eq!(root_extent(&c, 0x0ff0, 0x1068, 64), None, "no chain");
    }

    #[test]
    fn reads_only_inside_the_copy_and_the_tail() {
        let words = [10, 11, 12, 13];
        // The second record keeps the words 48 and 24 bytes below it.
        let tail = [[0x2000, 0x2100, 0xaaaa, 0, 0, 0, 0], [0x2100, 0, 0xbbbb, 0x48, 0, 0, 0x24]];
        let c = StackCopy { start: 0x1000, words: &words, truncated: true, tail: &tail, holes: &[] };
        assert_eq!(c.end(), 0x1020);
        assert_eq!(c.read(0x1000), Some(10));
        assert_eq!(c.read(0x1018), Some(13));
        assert_eq!(c.read(0x1020), None, "one past the copy");
        assert_eq!(c.read(0x0ff8), None, "below the copy");
        assert_eq!(c.read(0x1004), None, "unaligned");
        assert_eq!(c.read(0x2000), Some(0x2100));
        assert_eq!(c.read(0x2008), Some(0xaaaa));
        assert_eq!(c.read(0x2010), None, "between records, not kept");
        assert_eq!((c.read(0x2100 - 48), c.read(0x2100 - 24)), (Some(0x48), Some(0x24)));
        assert_eq!(c.read(0x2100 - 16), None, "not a kept offset");
        assert_eq!(c.read(0x2108), Some(0xbbbb));
        assert_eq!(c.read(!7), None);
        assert_eq!(StackCopy::EMPTY.read(0), None);
    }

    #[test]
    fn frame_records_above_the_copy_follow_the_chain_upwards() {
        // A fake stack: frame records at words 4, 10 and 20 (byte offsets
        // from `base`), each linking to the next; the copy ends at word 8.
        let mut words = vec![0u64; 32];
        let base = words.as_ptr() as u64;
        let at = |w: u64| base + 8 * w;
        words[4] = at(10);
        words[5] = 0x1111;
        words[10] = at(20);
        words[11] = 0x2222;
        words[20] = at(4); // a cycle back down: must stop
        words[21] = 0x3333;
        for (w, v) in words.iter_mut().enumerate().filter(|(_, v)| **v == 0) {
            *v = 0x100 + w as u64; // marks the words below the records
        }
        let mut out = [[0u64; 7]; 8];
        // SAFETY: in-bounds reads of `words`, which outlives them.
        let read = |a: u64| unsafe { (a as *const u64).read() };
        let n = frame_records_above(at(4), base, at(8), base + 8 * 32, read, &mut out);
        assert_eq!(n, 2);
        // With the words 48, 40, 32 and 24 bytes below each record.
        assert_eq!(out[0], [at(10), at(20), 0x2222, at(10), 0x1111, 0x106, 0x107]);
        assert_eq!(out[1], [at(20), at(4), 0x3333, 0x10e, 0x10f, 0x110, 0x111]);
        // A record the cut goes through is kept: its return address is
        // above the copy.
        let n = frame_records_above(at(4), base, at(11), base + 8 * 32, read, &mut out);
        assert_eq!(
            out[..n].iter().map(|r| [r[0], r[1], r[2]]).collect::<Vec<_>>(),
            [[at(10), at(20), 0x2222], [at(20), at(4), 0x3333]]
        );
        let copy = StackCopy { start: base, words: &words[..11], truncated: true, tail: &out[..n], holes: &[] };
        assert_eq!((copy.read(at(10)), copy.read(at(10) + 8)), (Some(at(20)), Some(0x2222)));
        // A misaligned or out-of-bounds start records nothing.
        assert_eq!(frame_records_above(at(4) + 1, base, at(8), base + 8 * 32, read, &mut out), 0);
        assert_eq!(frame_records_above(base + 8 * 40, base, at(8), base + 8 * 32, read, &mut out), 0);
    }
}
