//! A stopped thread's stack as it was copied in the stopped window: the
//! words from the copy's start up, and, for a stack deeper than the copy,
//! the frame records found above it by following frame pointers.
//!
//! Every read the unwinder makes goes through [`StackCopy::read`], which
//! answers only from those bytes: unwinding a copy can never touch the
//! thread's memory, whatever the stack holds.

/// A frame record found above the end of the copy: the address of the
/// record, the saved frame pointer stored there, and the return address
/// after it.
pub type TailRecord = [u64; 3];

#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    /// The address `words[0]` was copied from (8-byte aligned).
    pub start: u64,
    pub words: &'a [u64],
    /// The stack goes on above the copy (the copy was cut at its bound).
    pub truncated: bool,
    /// Frame records above the copy, by ascending address.
    pub tail: &'a [TailRecord],
}

impl<'a> StackCopy<'a> {
    pub const EMPTY: StackCopy<'static> = StackCopy { start: 0, words: &[], truncated: false, tail: &[] };

    /// The first address past the copied words.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(8 * self.words.len() as u64)
    }

    /// The word at `addr`, if the copy has it: an aligned word inside the
    /// copied range, or a field of a frame record above it.
    pub fn read(&self, addr: u64) -> Option<u64> {
        if addr & 7 != 0 {
            return None;
        }
        if let Some(off) = addr.checked_sub(self.start) {
            if let Some(&w) = self.words.get((off / 8) as usize) {
                return Some(w);
            }
        }
        // A record is 16 bytes: saved fp at its address, return address after.
        let i = self.tail.partition_point(|r| r[0].saturating_add(16) <= addr);
        match self.tail.get(i) {
            Some(r) if r[0] == addr => Some(r[1]),
            Some(r) if r[0].checked_add(8) == Some(addr) => Some(r[2]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_inside_the_copy_and_the_tail() {
        let words = [10, 11, 12, 13];
        let tail = [[0x2000, 0x2100, 0xaaaa], [0x2100, 0, 0xbbbb]];
        let c = StackCopy { start: 0x1000, words: &words, truncated: true, tail: &tail };
        assert_eq!(c.end(), 0x1020);
        assert_eq!(c.read(0x1000), Some(10));
        assert_eq!(c.read(0x1018), Some(13));
        assert_eq!(c.read(0x1020), None, "one past the copy");
        assert_eq!(c.read(0x0ff8), None, "below the copy");
        assert_eq!(c.read(0x1004), None, "unaligned");
        assert_eq!(c.read(0x2000), Some(0x2100));
        assert_eq!(c.read(0x2008), Some(0xaaaa));
        assert_eq!(c.read(0x2010), None, "between records");
        assert_eq!(c.read(0x2108), Some(0xbbbb));
        assert_eq!(c.read(!7), None);
        assert_eq!(StackCopy::EMPTY.read(0), None);
    }
}
