//! Stall detection for one watched loop, on the sampler thread: from the
//! heartbeat's age alone, it decides when to sample the loop's thread
//! faster, when a stall is confirmed, when it has ended (and for how
//! long it lasted, from the gap the loop thread noted), and when a stall
//! that has not ended is long enough to be written out as a hang.

use super::heartbeat::{Gap, Heartbeat};
use super::options::StallOptions;

/// Fast samples per stall; then the stalled thread is sampled at the
/// background interval (a deadlocked thread woken 1000 times a second
/// for ever would cost a few percent of a core for nothing new).
pub const FAST_SAMPLES: u32 = 2000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Suspect {
    /// The last beat before the loop stopped beating.
    last_beat_ns: u64,
    /// When the next capture of the thread is due.
    next_capture_ns: u64,
    captures: u32,
    hang_written: bool,
}

/// What a wake-up decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Capture the loop's thread now.
    pub capture: bool,
    /// The thread started being sampled faster at this wake-up.
    pub fast_started: bool,
    /// Sampling faster ended (the loop turned).
    pub fast_ended: bool,
    /// A stall ended: when the loop stopped turning and when it turned again.
    pub stall: Option<(u64, u64)>,
    /// A stall has lasted `hang_after`: write it out, from its start to now.
    pub hang: Option<u64>,
    /// When to wake next.
    pub next_ns: u64,
    /// The sampling period of the thread from now on, while fast.
    pub period_ns: u64,
}

#[derive(Debug)]
pub struct Detector {
    pub options: StallOptions,
    suspect: Option<Suspect>,
}

impl Detector {
    pub fn new(options: StallOptions) -> Self {
        Detector { options, suspect: None }
    }

    /// Whether the thread is being sampled faster (a stall may be on).
    pub fn is_suspect(&self) -> bool {
        self.suspect.is_some()
    }

    /// Since when the loop has not turned, while it has not.
    pub fn stalled_since(&self) -> Option<u64> {
        self.suspect.map(|s| s.last_beat_ns)
    }

    pub fn wake(&mut self, now_ns: u64, heartbeat: &Heartbeat) -> Decision {
        let (beat_ns, _) = heartbeat.last();
        self.decide(now_ns, beat_ns, || heartbeat.last_gap())
    }

    fn decide(&mut self, now_ns: u64, beat_ns: u64, last_gap: impl Fn() -> Option<Gap>) -> Decision {
        let o = &self.options;
        let suspect_ns = o.suspect_ns();
        let mut d = Decision { period_ns: o.stall_interval_ns, ..Default::default() };
        if let Some(s) = self.suspect {
            if beat_ns != s.last_beat_ns {
                // The loop turned. The gap the loop thread noted is exact;
                // if it is not this one (noted over since), the first beat
                // seen after it is the end.
                self.suspect = None;
                d.fast_ended = true;
                let (start, end) = match last_gap() {
                    Some(g) if g.last_beat_ns == s.last_beat_ns => (g.start_ns, g.end_ns),
                    _ => (s.last_beat_ns, beat_ns),
                };
                if end.saturating_sub(start) >= o.threshold_ns {
                    d.stall = Some((start, end));
                }
                d.next_ns = beat_ns.saturating_add(suspect_ns).max(now_ns + 1);
                return d;
            }
        } else if now_ns.saturating_sub(beat_ns) >= suspect_ns {
            self.suspect =
                Some(Suspect { last_beat_ns: beat_ns, next_capture_ns: now_ns, captures: 0, hang_written: false });
            d.fast_started = true;
        } else {
            d.next_ns = beat_ns.saturating_add(suspect_ns);
            return d;
        }
        let s = self.suspect.as_mut().expect("suspect");
        if now_ns >= s.next_capture_ns {
            d.capture = true;
            s.captures += 1;
            let period = if s.captures < FAST_SAMPLES { o.stall_interval_ns } else { o.interval_ns };
            // On time, or from now if the loop fell behind.
            s.next_capture_ns = (s.next_capture_ns + period).max(now_ns + period / 2);
        }
        if s.captures >= FAST_SAMPLES {
            d.period_ns = o.interval_ns;
        }
        d.next_ns = s.next_capture_ns;
        if let Some(after) = o.hang_after_ns {
            let hang_at = s.last_beat_ns.saturating_add(after);
            if !s.hang_written {
                if now_ns >= hang_at {
                    s.hang_written = true;
                    d.hang = Some(s.last_beat_ns);
                } else {
                    d.next_ns = d.next_ns.min(hang_at);
                }
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn detector() -> Detector {
        Detector::new(StallOptions { threshold_ns: 200 * MS, ..Default::default() })
    }

    #[test]
    fn a_responsive_loop_is_only_looked_at_when_its_beat_could_be_stale() {
        let mut d = detector();
        let r = d.decide(50 * MS, 40 * MS, || None);
        assert_eq!(r, Decision { next_ns: 140 * MS, period_ns: MS, ..Default::default() });
        assert!(!d.is_suspect());
    }

    #[test]
    fn a_stall_is_sampled_fast_and_reported_once_with_the_gap_the_loop_noted() {
        let mut d = detector();
        // The loop last beat at 1000 ms.
        let r = d.decide(1100 * MS, 1000 * MS, || None);
        assert!(r.capture && r.fast_started);
        assert_eq!(r.next_ns, 1101 * MS);
        let mut captures = 1;
        let mut t = 1101 * MS;
        while t < 1320 * MS {
            let r = d.decide(t, 1000 * MS, || None);
            assert!(r.stall.is_none() && r.capture);
            captures += 1;
            t = r.next_ns;
        }
        assert_eq!(captures, 220, "one a millisecond from 1100 to 1319 ms");
        assert_eq!(d.stalled_since(), Some(1000 * MS));
        // It turned at 1310 ms: the gap says the stall began at 1005 ms.
        let gap = Gap { last_beat_ns: 1000 * MS, start_ns: 1005 * MS, end_ns: 1310 * MS };
        let r = d.decide(1320 * MS, 1311 * MS, || Some(gap));
        assert_eq!(r.stall, Some((1005 * MS, 1310 * MS)));
        assert!(r.fast_ended && !r.capture);
        assert!(!d.is_suspect());
        // Once only.
        assert_eq!(d.decide(1321 * MS, 1321 * MS, || Some(gap)).stall, None);
    }

    #[test]
    fn a_slow_turn_below_the_threshold_is_no_stall() {
        let mut d = detector();
        d.decide(1150 * MS, 1000 * MS, || None);
        let gap = Gap { last_beat_ns: 1000 * MS, start_ns: 1000 * MS, end_ns: 1190 * MS };
        let r = d.decide(1191 * MS, 1190 * MS, || Some(gap));
        assert!(r.fast_ended);
        assert_eq!(r.stall, None);
        // A gap noted for another beat is not this one: the beat seen ends it.
        let mut d = detector();
        d.decide(1150 * MS, 1000 * MS, || None);
        let r = d.decide(1250 * MS, 1240 * MS, || Some(Gap { last_beat_ns: 7, start_ns: 7, end_ns: 8 }));
        assert_eq!(r.stall, Some((1000 * MS, 1240 * MS)));
    }

    #[test]
    fn fast_sampling_slows_down_and_a_hang_is_written_once() {
        let mut d = Detector::new(StallOptions {
            threshold_ns: 200 * MS,
            interval_ns: 10 * MS,
            hang_after_ns: Some(5_000 * MS),
            hang_dir: Some("/tmp".into()),
            ..Default::default()
        });
        let mut t = 100 * MS;
        let (mut hangs, mut captures) = (0, 0);
        while t < 10_000 * MS {
            let r = d.decide(t, 0, || None);
            captures += r.capture as u32;
            if let Some(start) = r.hang {
                assert_eq!(start, 0);
                assert!((5_000 * MS..5_011 * MS).contains(&t), "{t}");
                hangs += 1;
            }
            t = r.next_ns;
        }
        assert_eq!(hangs, 1);
        // 2000 at 1 ms, then every 10 ms.
        let expected = FAST_SAMPLES + (10_000 - 100 - FAST_SAMPLES as u64) as u32 / 10;
        assert!(captures.abs_diff(expected) <= 2, "{captures} captures, expected {expected}");
    }
}
