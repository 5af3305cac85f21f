//! How far V8's perf map had grown at each moment of a session.
//!
//! The perf map only grows, line by line, so its size at a moment says
//! which lines existed then. The sampler thread notes the size once a tick,
//! outside any stop window (one `fstat`). See
//! `docs/design/perf-map-timeline.md`.

use std::fs::File;

/// At most this many size changes are kept (16 bytes each). A session
/// that compiles new code on every tick for longer than this keeps the
/// later part unresolved by time (newest line wins), never wrong by omission.
const MAX_POINTS: usize = 1 << 18;

/// Watches the perf map of this process while a session runs.
#[derive(Debug, Default)]
pub struct PerfMapWatch {
    file: Option<File>,
    timeline: PerfMapTimeline,
}

/// `(time_ns, size)` pairs: at `time_ns` the perf map was `size` bytes
/// long, a pair per change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfMapTimeline {
    pub points: Vec<(u64, u64)>,
    /// False when points stopped being recorded (the bound was reached);
    /// after the last point, sizes are then unknown.
    pub complete: bool,
}

impl PerfMapWatch {
    /// Watches `/tmp/perf-<pid>.map` if it exists (V8 creates it when the
    /// isolate starts, so it is there before the addon loads).
    pub fn open_for_current_process() -> Self {
        let path = format!("/tmp/perf-{}.map", std::process::id());
        PerfMapWatch { file: File::open(path).ok(), timeline: PerfMapTimeline { points: Vec::new(), complete: true } }
    }

    /// Notes the current size. One `fstat`; called from the sampler loop
    /// between ticks' stop windows, never inside one.
    pub fn observe(&mut self, now_ns: u64) {
        let Some(file) = &self.file else { return };
        let Ok(meta) = file.metadata() else { return };
        let size = meta.len();
        let t = &mut self.timeline;
        if t.points.last().is_some_and(|&(_, s)| s == size) {
            return;
        }
        if t.points.len() >= MAX_POINTS {
            t.complete = false;
            self.file = None;
            return;
        }
        t.points.push((now_ns, size));
    }

    /// What was seen so far, watching going on.
    pub fn so_far(&self) -> PerfMapTimeline {
        self.timeline.clone()
    }

    /// Stops watching and hands over what was seen.
    pub fn finish(&mut self) -> PerfMapTimeline {
        self.file = None;
        std::mem::take(&mut self.timeline)
    }
}

impl PerfMapTimeline {
    /// The perf map's size as last observed at or before `time_ns`; `None`
    /// when unknown (no watch, before the first observation, or past the
    /// end of an incomplete timeline), meaning "every line counts".
    pub fn size_at(&self, time_ns: u64) -> Option<u64> {
        let i = self.points.partition_point(|&(t, _)| t <= time_ns).checked_sub(1)?;
        if i + 1 == self.points.len() && !self.complete {
            return None;
        }
        Some(self.points[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_at_picks_the_last_observation_before() {
        let t = PerfMapTimeline { points: vec![(100, 10), (200, 30), (300, 35)], complete: true };
        assert_eq!(t.size_at(99), None);
        assert_eq!(t.size_at(100), Some(10));
        assert_eq!(t.size_at(250), Some(30));
        assert_eq!(t.size_at(u64::MAX), Some(35));
        let cut = PerfMapTimeline { complete: false, ..t };
        assert_eq!(cut.size_at(250), Some(30));
        assert_eq!(cut.size_at(300), None);
    }

    #[test]
    fn observe_records_changes_only() {
        let dir = std::env::temp_dir().join(format!("machsampler-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf.map");
        std::fs::write(&path, "a\n").unwrap();
        let mut w = PerfMapWatch {
            file: Some(File::open(&path).unwrap()),
            timeline: PerfMapTimeline { points: Vec::new(), complete: true },
        };
        w.observe(1);
        w.observe(2);
        std::fs::write(&path, "a\nbb\n").unwrap();
        w.observe(3);
        let t = w.finish();
        assert_eq!(t.points, vec![(1, 2), (3, 5)]);
        assert!(t.complete);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
