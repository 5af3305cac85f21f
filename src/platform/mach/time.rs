//! Mach time: `time_value_t` CPU times, and `mach_absolute_time` ticks
//! to and from nanoseconds (see [`Timebase`]).

use crate::sampler::timebase::Timebase;

/// A `time_value_t` (seconds, microseconds) in nanoseconds. The kernel never
/// reports negative parts; if one appears it counts as zero rather than
/// wrapping into an enormous CPU time.
pub fn time_value_ns(seconds: i32, microseconds: i32) -> u64 {
    let s = u64::try_from(seconds).unwrap_or(0);
    let us = u64::try_from(microseconds).unwrap_or(0);
    s.saturating_mul(1_000_000_000).saturating_add(us.saturating_mul(1_000))
}

/// CPU time from `thread_basic_info`: user plus system time. The resolution
/// is a microsecond, which is fine for the idle rule: a thread that ran for
/// less than 1 µs in a sampling interval is idle for profiling purposes.
pub fn basic_info_cpu_ns(user: (i32, i32), system: (i32, i32)) -> u64 {
    time_value_ns(user.0, user.1).saturating_add(time_value_ns(system.0, system.1))
}

/// The `mach_absolute_time` deadline for `ns`, rounded up, so that a wait
/// never ends before `now_ns() >= ns` (rounding down would make the sampler
/// loop spin for the last fraction of a tick).
pub fn deadline_ticks(tb: &Timebase, ns: u64) -> u64 {
    let ticks = tb.ns_to_ticks(ns);
    if tb.ticks_to_ns(ticks) < ns {
        ticks.saturating_add(1)
    } else {
        ticks
    }
}

/// Nanoseconds between two `mach_absolute_time` readings; zero if the clock
/// appears to go backwards.
pub fn elapsed_ns(tb: &Timebase, start_ticks: u64, end_ticks: u64) -> u64 {
    tb.ticks_to_ns(end_ticks.saturating_sub(start_ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_converts_microseconds_to_nanoseconds() {
        assert_eq!(time_value_ns(0, 0), 0);
        assert_eq!(time_value_ns(1, 250_000), 1_250_000_000);
        assert_eq!(basic_info_cpu_ns((2, 1), (0, 999_999)), 2_000_001_000 + 999_999_000);
        assert_eq!(time_value_ns(-1, -5), 0, "negative parts count as zero");
        assert_eq!(time_value_ns(i32::MAX, i32::MAX), i32::MAX as u64 * 1_000_000_000 + i32::MAX as u64 * 1000);
    }

    #[test]
    fn deadlines_round_up_so_waits_never_end_early() {
        for tb in [Timebase::new(125, 3), Timebase::IDENTITY, Timebase::new(1, 3)] {
            for ns in [0u64, 1, 41, 42, 43, 999, 10_000_000, 1_000_000_007, u64::MAX / 200] {
                let t = deadline_ticks(&tb, ns);
                assert!(tb.ticks_to_ns(t) >= ns, "{tb:?} {ns}");
                assert!(t == 0 || tb.ticks_to_ns(t - 1) < ns, "smallest such tick: {tb:?} {ns}");
            }
        }
        let tb = Timebase::new(125, 3);
        assert_eq!(elapsed_ns(&tb, 1000, 1024), 1000);
        assert_eq!(elapsed_ns(&tb, 1024, 1000), 0, "never negative");
    }
}
