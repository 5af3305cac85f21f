//! Sampler options and their validation.
//!
//! Ranges are checked here, once, for every caller (JS API, CLI, tests).
//! Out-of-range values are errors that name the valid range; nothing is
//! clamped.

use super::error::SamplerError;

pub const INTERVAL_MS_MIN: u64 = 1;
pub const INTERVAL_MS_MAX: u64 = 1000;
pub const INTERVAL_MS_DEFAULT: u64 = 10;
pub const MAX_STACK_DEPTH_MIN: usize = 1;
pub const MAX_STACK_DEPTH_MAX: usize = 1024;
pub const MAX_STACK_DEPTH_DEFAULT: usize = 512;
pub const BUFFER_SAMPLES_MIN: usize = 1;
pub const BUFFER_SAMPLES_MAX: usize = 100_000_000;
/// 1 M samples: 100 s of 100 threads at 100 Hz. Reserved, not resident.
pub const BUFFER_SAMPLES_DEFAULT: usize = 1_000_000;
pub const DURATION_MS_MIN: u64 = 1;
/// About 31 years: the largest duration in ms that fits a u64 of ns.
pub const DURATION_MS_MAX: u64 = 1_000_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerOptions {
    pub interval_ns: u64,
    pub max_stack_depth: usize,
    pub native_unwinding: bool,
    pub buffer_samples: usize,
    /// Carry an idle thread's previous stack forward instead of stopping it.
    pub idle_skip: bool,
    /// What a sample stands for: CPU time (default) or wall-clock time.
    pub mode: super::backend::Mode,
    /// Stop sampling this long after the start (the session still ends at
    /// `stop()`), measured by the sampler thread, so it holds however busy
    /// the JavaScript threads are.
    pub duration_ns: Option<u64>,
    /// Name JavaScript frames from V8 where the thread's isolate is known.
    pub js_names: bool,
    /// Keep what is sampled. False for a loop that only serves an
    /// observer (see `super::observer`): nothing is stored and the
    /// statistics are left alone.
    pub record: bool,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            interval_ns: INTERVAL_MS_DEFAULT * 1_000_000,
            max_stack_depth: MAX_STACK_DEPTH_DEFAULT,
            native_unwinding: true,
            buffer_samples: BUFFER_SAMPLES_DEFAULT,
            idle_skip: true,
            mode: super::backend::Mode::Cpu,
            duration_ns: None,
            js_names: true,
            record: true,
        }
    }
}

/// Checks that `value` is an integer in `[min, max]`; `what` names it.
pub fn integer_in_range(what: &str, value: f64, min: u64, max: u64) -> Result<u64, SamplerError> {
    let ok = value.is_finite() && value.fract() == 0.0 && value >= min as f64 && value <= max as f64;
    if ok {
        Ok(value as u64)
    } else {
        Err(SamplerError::inval(format!("{what} must be an integer from {min} to {max}, got {}", js_number(value))))
    }
}

/// `value` as JavaScript spells it (`Infinity`, `NaN`, `0` for -0).
pub fn js_number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else if value == 0.0 {
        "0".to_string()
    } else {
        value.to_string()
    }
}

impl SamplerOptions {
    pub fn with_interval_ms(mut self, ms: f64) -> Result<Self, SamplerError> {
        self.interval_ns = integer_in_range("intervalMs", ms, INTERVAL_MS_MIN, INTERVAL_MS_MAX)? * 1_000_000;
        Ok(self)
    }

    pub fn with_max_stack_depth(mut self, depth: f64) -> Result<Self, SamplerError> {
        self.max_stack_depth =
            integer_in_range("maxStackDepth", depth, MAX_STACK_DEPTH_MIN as u64, MAX_STACK_DEPTH_MAX as u64)? as usize;
        Ok(self)
    }

    pub fn with_duration_ms(mut self, ms: f64) -> Result<Self, SamplerError> {
        self.duration_ns = Some(integer_in_range("durationMs", ms, DURATION_MS_MIN, DURATION_MS_MAX)? * 1_000_000);
        Ok(self)
    }

    pub fn with_mode(mut self, mode: &str) -> Result<Self, SamplerError> {
        self.mode = super::backend::Mode::parse(mode)
            .ok_or_else(|| SamplerError::inval(format!("mode must be 'cpu' or 'wall', got '{mode}'")))?;
        Ok(self)
    }

    pub fn with_buffer_samples(mut self, n: f64) -> Result<Self, SamplerError> {
        self.buffer_samples =
            integer_in_range("bufferSamples", n, BUFFER_SAMPLES_MIN as u64, BUFFER_SAMPLES_MAX as u64)? as usize;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::error::ErrorCode;

    #[test]
    fn values_refused_are_spelled_as_javascript_does() {
        let e = |v: f64| integer_in_range("n", v, 1, 10).unwrap_err().message;
        assert_eq!(e(f64::INFINITY), "n must be an integer from 1 to 10, got Infinity");
        assert_eq!(e(f64::NEG_INFINITY), "n must be an integer from 1 to 10, got -Infinity");
        assert_eq!(e(f64::NAN), "n must be an integer from 1 to 10, got NaN");
        assert_eq!(e(-0.0), "n must be an integer from 1 to 10, got 0");
        assert_eq!(e(2.5), "n must be an integer from 1 to 10, got 2.5");
    }

    #[test]
    fn accepts_the_range_ends() {
        let o = SamplerOptions::default().with_interval_ms(1.0).unwrap().with_max_stack_depth(1024.0).unwrap();
        assert_eq!(o.interval_ns, 1_000_000);
        assert_eq!(o.max_stack_depth, 1024);
        assert_eq!(SamplerOptions::default().with_interval_ms(1000.0).unwrap().interval_ns, 1_000_000_000);
    }

    #[test]
    fn rejects_without_clamping() {
        for bad in [0.0, 0.5, 2000.0, f64::NAN, f64::INFINITY, -1.0, 1001.0] {
            let e = SamplerOptions::default().with_interval_ms(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Inval);
            assert!(e.message.contains("1 to 1000"), "{}", e.message);
        }
        for bad in [0.0, -5.0, 1025.0, 3.5] {
            let e = SamplerOptions::default().with_max_stack_depth(bad).unwrap_err();
            assert!(e.message.contains("1 to 1024"), "{}", e.message);
        }
        assert!(SamplerOptions::default().with_buffer_samples(0.0).is_err());
    }
}
