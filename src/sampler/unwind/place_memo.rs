//! Where recent code addresses are (which module, JIT code, or nowhere),
//! remembered between unwinds.
//!
//! Every step of every unwind asks where its address is, twice (the return
//! address, then the same address as the next step's lookup), and the
//! answer is a binary search over the modules. Samples of a thread repeat
//! most of their frames, so a small direct-mapped table of recent answers
//! serves nearly all of them. It holds indexes into the code map: the
//! owner clears it whenever the map changes.

use super::code::CodeMap;

/// Where an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the text of the module at this index of the code map.
    Module(u32),
    /// In executable memory outside any module (JIT code).
    Jit,
    /// In no executable region.
    Nowhere,
}

impl Place {
    pub fn of(code: &CodeMap, addr: u64) -> Place {
        match code.module_index(addr) {
            Some(i) => Place::Module(i as u32),
            None if code.jit.contains(addr) => Place::Jit,
            None => Place::Nowhere,
        }
    }

    pub fn is_executable(self) -> bool {
        self != Place::Nowhere
    }
}

const SLOTS_LOG2: u32 = 10;

/// A direct-mapped table of (address, place). Address 0 is never kept (it
/// marks an empty slot).
pub struct PlaceMemo {
    slots: Box<[(u64, Place)]>,
}

impl Default for PlaceMemo {
    fn default() -> Self {
        PlaceMemo { slots: vec![(0, Place::Nowhere); 1 << SLOTS_LOG2].into_boxed_slice() }
    }
}

impl PlaceMemo {
    /// The place of `addr` in `code`, from the table or looked up and kept.
    pub fn place(&mut self, code: &CodeMap, addr: u64) -> Place {
        let slot = (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS_LOG2)) as usize;
        match self.slots.get_mut(slot) {
            Some((a, p)) if *a == addr && addr != 0 => *p,
            Some(entry) => {
                let p = Place::of(code, addr);
                if addr != 0 {
                    *entry = (addr, p);
                }
                p
            }
            None => Place::of(code, addr),
        }
    }

    /// Forgets every answer (the code map changed).
    pub fn clear(&mut self) {
        self.slots.fill((0, Place::Nowhere));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jit(start: u64, end: u64) -> super::super::RangeSet {
        super::super::RangeSet::new(std::iter::once(start..end).collect())
    }

    #[test]
    fn answers_as_the_map_does_and_forgets_on_clear() {
        let mut code = CodeMap::default();
        code.jit = jit(0x5000, 0x6000);
        let mut memo = PlaceMemo::default();
        for _ in 0..2 {
            assert_eq!(memo.place(&code, 0x5100), Place::Jit);
            assert_eq!(memo.place(&code, 0x7000), Place::Nowhere);
            assert_eq!(memo.place(&code, 0), Place::Nowhere);
        }
        code.jit = jit(0x7000, 0x8000);
        assert_eq!(memo.place(&code, 0x7000), Place::Nowhere, "stale until cleared");
        memo.clear();
        assert_eq!(memo.place(&code, 0x7000), Place::Jit);
        assert_eq!(memo.place(&code, 0x5100), Place::Nowhere);
        assert!(Place::Jit.is_executable() && Place::Module(0).is_executable() && !Place::Nowhere.is_executable());
    }

    #[test]
    fn colliding_addresses_take_turns_in_a_slot() {
        let mut code = CodeMap::default();
        code.jit = jit(0x1000, 0x2000);
        let mut memo = PlaceMemo::default();
        // Many addresses, more than the slots: every answer stays right.
        for round in 0..3 {
            for a in (0..5000u64).map(|i| 0x800 + i * 3) {
                let want = if (0x1000..0x2000).contains(&a) { Place::Jit } else { Place::Nowhere };
                assert_eq!(memo.place(&code, a), want, "round {round}, {a:#x}");
            }
        }
    }
}
