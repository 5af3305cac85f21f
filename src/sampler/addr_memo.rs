//! A small direct-mapped memo from code addresses to what a lookup found
//! for them. Samples repeat most of their frames, so per-frame lookups
//! (a binary search with a cache miss at each probe) are asked the same
//! addresses again and again; a few hundred slots answer nearly all of
//! them. A colliding address replaces the slot's; answers stay exact.

use std::cell::Cell;

/// The key of an empty slot; that address is looked up, never kept.
const EMPTY: u64 = u64::MAX;

/// Up to `2^slots_log2` (address, value) pairs. The owner clears it when
/// what the values were looked up in changes.
#[derive(Default)]
pub struct AddrMemo<V: Copy> {
    slots: Box<[Cell<(u64, V)>]>,
    shift: u32,
}

impl<V: Copy> AddrMemo<V> {
    pub fn new(slots_log2: u32, fill: V) -> Self {
        AddrMemo {
            slots: (0..1usize << slots_log2).map(|_| Cell::new((EMPTY, fill))).collect(),
            shift: 64 - slots_log2,
        }
    }

    /// The value kept for `addr`, or `look_up()`'s, then kept.
    pub fn get_or(&self, addr: u64, look_up: impl FnOnce() -> V) -> V {
        let slot = self.slots.get((addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize);
        match slot {
            Some(s) if addr != EMPTY => match s.get() {
                (a, v) if a == addr => v,
                _ => {
                    let v = look_up();
                    s.set((addr, v));
                    v
                }
            },
            _ => look_up(),
        }
    }

    /// Forgets every value.
    pub fn clear(&self) {
        for s in self.slots.iter() {
            s.set((EMPTY, s.get().1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_stay_exact_through_collisions_and_clears() {
        let memo = AddrMemo::new(4, 0u64);
        let calls = Cell::new(0);
        let f = |a: u64| {
            calls.set(calls.get() + 1);
            a / 3
        };
        // More addresses than slots, three rounds: every answer right.
        for _ in 0..3 {
            for a in (0..500u64).map(|i| 0x800 + i * 7) {
                assert_eq!(memo.get_or(a, || f(a)), a / 3);
            }
        }
        assert_eq!(memo.get_or(0x800, || f(0x800)), 0x800 / 3);
        assert_eq!(memo.get_or(0x800, || unreachable!("kept")), 0x800 / 3);
        memo.clear();
        assert_eq!(memo.get_or(0x800, || 7), 7, "looked up again after clear");
        assert_eq!(memo.get_or(EMPTY, || 9), 9);
        assert_eq!(memo.get_or(EMPTY, || 10), 10, "the empty key is never kept");
        // An empty memo (Default) looks everything up.
        assert_eq!(AddrMemo::<u8>::default().get_or(5, || 1), 1);
    }
}
