//! Sampler statistics, readable from any thread while sampling.
//!
//! Only the sampler thread writes, so each counter is a plain load and store
//! of a relaxed atomic (no locked read-modify-write on the hot path, which
//! showed up at several hundred threads per tick); a reader sees each
//! counter at some recent value. `snapshot` reads the counters whose sum
//! matters (captured, dropped, sampled) in an order that keeps
//! `threads_sampled == samples_captured + samples_dropped` true for the
//! finished profile, where the sampler thread has stopped.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A counter with a single writer (the sampler thread) and any readers.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    #[inline]
    pub fn max(&self, v: u64) {
        if v > self.0.load(Relaxed) {
            self.0.store(v, Relaxed);
        }
    }

    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }

    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A log-linear histogram of durations in nanoseconds: 8 buckets per power
/// of two, so any reported percentile is within 12.5 % of the true value.
pub struct Histogram {
    buckets: [Counter; HISTOGRAM_BUCKETS],
}

const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Covers values up to 2^44 ns (about 4.9 hours); larger ones land in the
/// last bucket.
pub const HISTOGRAM_BUCKETS: usize = ((44 - SUB_BITS as usize) + 1) * SUB as usize;

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: std::array::from_fn(|_| Counter::default()) }
    }
}

impl Histogram {
    pub fn bucket_of(value: u64) -> usize {
        if value < SUB {
            return value as usize;
        }
        let exp = 63 - value.leading_zeros(); // >= SUB_BITS
        let sub = (value >> (exp - SUB_BITS)) & (SUB - 1);
        let idx = ((exp - SUB_BITS + 1) as u64 * SUB + sub) as usize;
        idx.min(HISTOGRAM_BUCKETS - 1)
    }

    /// Smallest value that falls in bucket `idx`.
    pub fn bucket_floor(idx: usize) -> u64 {
        let idx = idx as u64;
        if idx < SUB {
            return idx;
        }
        let exp = idx / SUB + SUB_BITS as u64 - 1;
        let sub = idx % SUB;
        (1u64 << exp) + (sub << (exp - SUB_BITS as u64))
    }

    pub fn record(&self, value: u64) {
        self.buckets[Self::bucket_of(value)].add(1);
    }

    pub fn counts(&self) -> Vec<u64> {
        self.buckets.iter().map(Counter::get).collect()
    }

    pub fn reset(&self) {
        for b in &self.buckets {
            b.set(0);
        }
    }

    /// The value below which `q` (0..=1) of the recorded values fall,
    /// reported as the upper edge of its bucket so it never understates.
    pub fn percentile(counts: &[u64], q: f64) -> u64 {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::bucket_floor(i + 1).saturating_sub(1).max(Self::bucket_floor(i));
            }
        }
        Self::bucket_floor(counts.len())
    }
}

/// The live counters.
#[derive(Default)]
pub struct Stats {
    pub samples_captured: Counter,
    pub samples_dropped: Counter,
    pub threads_skipped: Counter,
    pub total_suspend_ns: Counter,
    pub max_suspend_ns: Counter,
    pub walk_errors: Counter,
    pub idle_samples: Counter,
    pub truncated_stacks: Counter,
    pub ticks: Counter,
    pub ticks_missed: Counter,
    pub sampler_cpu_ns: Counter,
    pub stacks_reaching_root: Counter,
    /// Samples a [`StackRewrite`](super::backend::StackRewrite) merged
    /// runtime frames into.
    pub js_samples: Counter,
    pub samples_lost: Counter,
    pub foreign_stacks: Counter,
    pub starved_timers: Counter,
    pub stack_bytes_copied: Counter,
    pub capture_buffer_bytes: Counter,
    pub ended_truncated_copy: Counter,
    pub ended_no_unwind_info: Counter,
    pub ended_bad_cfa: Counter,
    pub ended_not_executable: Counter,
    pub ended_copy_failed: Counter,
    pub signal_taken_over: Counter,
    /// Set by the layer that names JavaScript frames (see the field list).
    pub code_events_cpu_ns: Counter,
    /// Set by the layer that names JavaScript frames (see the field list).
    pub js_names_left_to_another_copy: Counter,
    /// How long a thread is stopped per sample (suspend to resume, or
    /// signal-handler entry to exit).
    pub suspend_hist: Histogram,
    /// Linux only: from `tgkill` to handler entry.
    pub delivery_hist: Histogram,
}

/// Calls `$m!` with every field of [`StatsSnapshot`] and its doc, in
/// order: the one list from which the snapshot, the JavaScript `Stats`
/// object and the profile file's statistics are generated. Its docs are
/// `#[doc = "..."]` attributes: a `///` comment passed through a macro
/// becomes a raw string, which napi's .d.ts writer prints with its `r"`.
#[macro_export]
macro_rules! with_stats_fields {
    ($m:ident) => {
        $m! {
            #[doc = " Samples stored in the profile."]
            samples_captured,
            #[doc = " Samples lost because the buffer or stack table was full."]
            samples_dropped,
            #[doc = " Thread samples taken: always samples captured plus dropped."]
            threads_sampled,
            #[doc = " Thread samples not taken: the thread exited, had not yet been"]
            #[doc = " reached, or blocks the sampling signal. Normal, not an error."]
            threads_skipped,
            #[doc = " Total time sampled threads spent stopped, in nanoseconds."]
            total_suspend_ns,
            #[doc = " Longest single stop, in nanoseconds."]
            max_suspend_ns,
            #[doc = " Samples whose registers or stack bounds could not be read."]
            walk_errors,
            #[doc = " Samples of idle threads, recorded without stopping them."]
            idle_samples,
            #[doc = " Stacks cut at the maximum stack depth."]
            truncated_stacks,
            #[doc = " Sampler ticks run."]
            ticks,
            #[doc = " Ticks skipped because the sampler fell behind."]
            ticks_missed,
            #[doc = " CPU time used by the sampler thread, in nanoseconds."]
            sampler_cpu_ns,
            #[doc = " Stacks whose frame chain ended cleanly at the thread's root."]
            stacks_reaching_root,
            #[doc = " Samples whose runtime (JavaScript) frames were merged in."]
            js_samples,
            #[doc = " Samples lost because every capture buffer was in use."]
            samples_lost,
            #[doc = " Samples whose stack pointer was outside the thread's own stack"]
            #[doc = " (a fiber, a WebAssembly or signal stack): read with a call that"]
            #[doc = " cannot fault."]
            foreign_stacks,
            #[doc = " CPU mode (Linux): per-thread CPU-time timers the kernel had not"]
            #[doc = " fired after their thread ran 20 ms of CPU time past their expiry"]
            #[doc = " (it checks them only at scheduler ticks that find the thread"]
            #[doc = " running), fired by the sampler; their samples carry every"]
            #[doc = " interval missed."]
            starved_timers,
            #[doc = " Bytes of stack copied while threads were stopped (Linux): a"]
            #[doc = " copy ends at the thread's first frames, not at the top of"]
            #[doc = " its stack, once those are known."]
            stack_bytes_copied,
            #[doc = " Bytes reserved for the records stack copies are written to"]
            #[doc = " while threads are stopped (Linux), for all threads together:"]
            #[doc = " the bound of that memory (most of it is never touched)."]
            capture_buffer_bytes,
            #[doc = " Stacks cut because the copy was too short for them."]
            ended_truncated_copy,
            #[doc = " Stacks that ended in code without unwind information."]
            ended_no_unwind_info,
            #[doc = " Stacks that ended at a frame whose unwind information gave no"]
            #[doc = " usable caller."]
            ended_bad_cfa,
            #[doc = " Stacks that ended at a return address outside all code."]
            ended_not_executable,
            #[doc = " Samples whose stack could not be copied (the pc only)."]
            ended_copy_failed,
            #[doc = " 1 if another library took the sampling signal over while"]
            #[doc = " sampling: samples stopped arriving."]
            signal_taken_over,
            #[doc = " CPU time JavaScript threads spent having V8 describe their code"]
            #[doc = " for names (installing its code-event handler, which reports all"]
            #[doc = " existing code), in nanoseconds. It also writes V8's own log"]
            #[doc = " again when the program runs with one (`record`'s inlining)."]
            code_events_cpu_ns,
            #[doc = " 1 if another copy of machsampler loaded in this process held V8's"]
            #[doc = " code-event handler (one per isolate): this copy left it alone, so"]
            #[doc = " its JavaScript frames stay unnamed where that copy's are named."]
            js_names_left_to_another_copy,
            #[doc = " Median stop, in nanoseconds (from a histogram; within 12.5 %)."]
            suspend_p50_ns,
            #[doc = " 99th-percentile stop, in nanoseconds."]
            suspend_p99_ns,
            #[doc = " Linux: median time from sending the signal to the handler running."]
            delivery_p50_ns,
            #[doc = " Linux: 99th percentile of the delivery time."]
            delivery_p99_ns,
            #[doc = " Linux: longest delivery time seen."]
            delivery_max_ns,
            #[doc = " Threads known to the sampler."]
            thread_count,
        }
    };
}

macro_rules! define_snapshot {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// A plain copy of the counters.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct StatsSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl StatsSnapshot {
            /// Every field with its Rust name, in table order.
            pub fn fields_mut(&mut self) -> Vec<(&'static str, &mut u64)> {
                vec![$((stringify!($name), &mut self.$name),)*]
            }

            /// Every field with its Rust name, in table order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}
with_stats_fields!(define_snapshot);

impl Stats {
    pub fn reset(&self) {
        for c in [
            &self.samples_captured,
            &self.samples_dropped,
            &self.threads_skipped,
            &self.total_suspend_ns,
            &self.max_suspend_ns,
            &self.walk_errors,
            &self.idle_samples,
            &self.truncated_stacks,
            &self.ticks,
            &self.ticks_missed,
            &self.sampler_cpu_ns,
            &self.stacks_reaching_root,
            &self.js_samples,
            &self.samples_lost,
            &self.foreign_stacks,
            &self.starved_timers,
            &self.stack_bytes_copied,
            &self.capture_buffer_bytes,
            &self.ended_truncated_copy,
            &self.ended_no_unwind_info,
            &self.ended_bad_cfa,
            &self.ended_not_executable,
            &self.ended_copy_failed,
            &self.signal_taken_over,
            &self.code_events_cpu_ns,
            &self.js_names_left_to_another_copy,
        ] {
            c.set(0);
        }
        self.suspend_hist.reset();
        self.delivery_hist.reset();
    }

    /// Counts why a stack ended.
    pub fn record_end(&self, end: super::unwind::StackEnd) {
        use super::unwind::StackEnd::*;
        match end {
            Root => self.stacks_reaching_root.add(1),
            DepthLimit => self.truncated_stacks.add(1),
            TruncatedCopy => self.ended_truncated_copy.add(1),
            NoUnwindInfo => self.ended_no_unwind_info.add(1),
            BadCfa => self.ended_bad_cfa.add(1),
            NotExecutable => self.ended_not_executable.add(1),
            CopyFailed | NoPc => self.ended_copy_failed.add(1),
        }
    }

    /// Records one stop of a thread.
    pub fn record_suspend(&self, ns: u64) {
        self.total_suspend_ns.add(ns);
        self.max_suspend_ns.max(ns);
        self.suspend_hist.record(ns);
    }

    pub fn snapshot(&self, thread_count: u64) -> StatsSnapshot {
        let captured = self.samples_captured.get();
        let dropped = self.samples_dropped.get();
        let suspend = self.suspend_hist.counts();
        let delivery = self.delivery_hist.counts();
        let delivery_max =
            delivery.iter().rposition(|&c| c > 0).map(|i| Histogram::bucket_floor(i + 1) - 1).unwrap_or(0);
        StatsSnapshot {
            samples_captured: captured,
            samples_dropped: dropped,
            threads_sampled: captured + dropped,
            threads_skipped: self.threads_skipped.get(),
            total_suspend_ns: self.total_suspend_ns.get(),
            max_suspend_ns: self.max_suspend_ns.get(),
            walk_errors: self.walk_errors.get(),
            idle_samples: self.idle_samples.get(),
            truncated_stacks: self.truncated_stacks.get(),
            ticks: self.ticks.get(),
            ticks_missed: self.ticks_missed.get(),
            sampler_cpu_ns: self.sampler_cpu_ns.get(),
            stacks_reaching_root: self.stacks_reaching_root.get(),
            js_samples: self.js_samples.get(),
            samples_lost: self.samples_lost.get(),
            foreign_stacks: self.foreign_stacks.get(),
            starved_timers: self.starved_timers.get(),
            stack_bytes_copied: self.stack_bytes_copied.get(),
            capture_buffer_bytes: self.capture_buffer_bytes.get(),
            ended_truncated_copy: self.ended_truncated_copy.get(),
            ended_no_unwind_info: self.ended_no_unwind_info.get(),
            ended_bad_cfa: self.ended_bad_cfa.get(),
            ended_not_executable: self.ended_not_executable.get(),
            ended_copy_failed: self.ended_copy_failed.get(),
            signal_taken_over: self.signal_taken_over.get(),
            code_events_cpu_ns: self.code_events_cpu_ns.get(),
            js_names_left_to_another_copy: self.js_names_left_to_another_copy.get(),
            suspend_p50_ns: Histogram::percentile(&suspend, 0.50),
            suspend_p99_ns: Histogram::percentile(&suspend, 0.99),
            delivery_p50_ns: Histogram::percentile(&delivery, 0.50),
            delivery_p99_ns: Histogram::percentile(&delivery, 0.99),
            delivery_max_ns: delivery_max,
            thread_count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 20) + 12345, 1 << 40, u64::MAX]) {
            let b = Histogram::bucket_of(v);
            assert!(b >= last || v < 5000, "bucket order");
            if v < 5000 {
                last = b;
            }
            if b + 1 < HISTOGRAM_BUCKETS {
                assert!(Histogram::bucket_floor(b) <= v, "floor {v}");
                assert!(Histogram::bucket_floor(b + 1) > v, "ceil {v}");
            }
        }
    }

    #[test]
    fn bucket_width_is_at_most_an_eighth() {
        for b in 8..HISTOGRAM_BUCKETS - 1 {
            let lo = Histogram::bucket_floor(b) as f64;
            let hi = Histogram::bucket_floor(b + 1) as f64;
            assert!((hi - lo) / lo <= 0.125 + 1e-9, "bucket {b}");
        }
    }

    #[test]
    fn percentiles() {
        let h = Histogram::default();
        for _ in 0..99 {
            h.record(1000);
        }
        h.record(1_000_000);
        let c = h.counts();
        let p50 = Histogram::percentile(&c, 0.5);
        assert!((1000..=1125).contains(&p50), "{p50}");
        let p99 = Histogram::percentile(&c, 0.99);
        assert!((1000..=1125).contains(&p99), "{p99}");
        let p100 = Histogram::percentile(&c, 1.0);
        assert!((1_000_000..=1_125_000).contains(&p100), "{p100}");
        assert_eq!(Histogram::percentile(&[0; 4], 0.5), 0);
    }

    #[test]
    fn snapshot_adds_up() {
        let s = Stats::default();
        s.samples_captured.set(10);
        s.samples_dropped.set(3);
        s.record_suspend(500);
        s.record_suspend(1500);
        let snap = s.snapshot(4);
        assert_eq!(snap.threads_sampled, 13);
        assert_eq!(snap.total_suspend_ns, 2000);
        assert_eq!(snap.max_suspend_ns, 1500);
        assert_eq!(snap.thread_count, 4);
        s.reset();
        assert_eq!(s.snapshot(0), StatsSnapshot::default());
    }
}
