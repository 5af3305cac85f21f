//! Conversion between nanoseconds and a platform's clock ticks, where
//! `ns = ticks * numer / denom` (Mach's `mach_timebase_info`; 1/1 on Intel
//! Macs, 125/3 on Apple silicon).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timebase {
    pub numer: u32,
    pub denom: u32,
}

impl Timebase {
    pub const IDENTITY: Timebase = Timebase { numer: 1, denom: 1 };

    /// A zero field (a failed query) falls back to identity.
    pub fn new(numer: u32, denom: u32) -> Self {
        if numer == 0 || denom == 0 {
            Self::IDENTITY
        } else {
            Timebase { numer, denom }
        }
    }

    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        let ns = ticks as u128 * self.numer as u128 / self.denom as u128;
        ns.min(u64::MAX as u128) as u64
    }

    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        let t = ns as u128 * self.denom as u128 / self.numer as u128;
        t.min(u64::MAX as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apple_silicon_timebase() {
        let tb = Timebase::new(125, 3);
        assert_eq!(tb.ticks_to_ns(24_000_000), 1_000_000_000); // 24 MHz
        assert_eq!(tb.ns_to_ticks(1_000_000_000), 24_000_000);
        assert_eq!(tb.ns_to_ticks(1_000_000), 24_000); // 1 ms interval
    }

    #[test]
    fn identity_and_fallback() {
        assert_eq!(Timebase::new(1, 1).ticks_to_ns(123), 123);
        assert_eq!(Timebase::new(0, 0), Timebase::IDENTITY);
    }

    #[test]
    fn no_overflow_for_large_values() {
        let tb = Timebase::new(125, 3);
        // Uptime of ~24 years in ticks must convert without wrapping.
        let ticks = 24_000_000u64 * 3600 * 24 * 365 * 24;
        assert_eq!(tb.ticks_to_ns(ticks), ticks / 3 * 125);
        assert_eq!(tb.ticks_to_ns(u64::MAX), u64::MAX);
        assert_eq!(tb.ns_to_ticks(tb.ticks_to_ns(ticks)), ticks);
    }

    #[test]
    fn round_trip_is_within_one_tick() {
        let tb = Timebase::new(125, 3);
        for ns in [1u64, 41, 42, 999, 1_000_001, 10_000_000] {
            let back = tb.ticks_to_ns(tb.ns_to_ticks(ns));
            assert!(ns - back < 42, "{ns} -> {back}");
        }
    }
}
