//! Where a code address is: in which module, in JIT code, or nowhere.
//! Every step of every unwind asks it twice (the return address, then the
//! same address as the next step's lookup); the unwinder keeps recent
//! answers in an [`AddrMemo`](crate::sampler::addr_memo::AddrMemo),
//! cleared whenever the code map changes (the answers hold its indexes).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::addr_memo::AddrMemo;

    fn jit(start: u64, end: u64) -> super::super::RangeSet {
        super::super::RangeSet::new(std::iter::once(start..end).collect())
    }

    #[test]
    fn answers_as_the_map_does_and_forgets_on_clear() {
        let mut code = CodeMap::default();
        code.jit = jit(0x5000, 0x6000);
        let memo = AddrMemo::new(10, Place::Nowhere);
        let place = |code: &CodeMap, a: u64| memo.get_or(a, || Place::of(code, a));
        for _ in 0..2 {
            assert_eq!(place(&code, 0x5100), Place::Jit);
            assert_eq!(place(&code, 0x7000), Place::Nowhere);
            assert_eq!(place(&code, 0), Place::Nowhere);
        }
        code.jit = jit(0x7000, 0x8000);
        assert_eq!(place(&code, 0x7000), Place::Nowhere, "stale until cleared");
        memo.clear();
        assert_eq!(place(&code, 0x7000), Place::Jit);
        assert_eq!(place(&code, 0x5100), Place::Nowhere);
        assert!(Place::Jit.is_executable() && Place::Module(0).is_executable() && !Place::Nowhere.is_executable());
    }
}
