//! Options of `watchStalls()` and their ranges. Out-of-range values are
//! errors that name the range; nothing is clamped.

use std::path::PathBuf;

use crate::sampler::error::SamplerError;
use crate::sampler::options::integer_in_range;

pub const THRESHOLD_MS: (u64, u64) = (20, 60_000);
pub const KEEP_MS: (u64, u64) = (0, 60_000);
pub const INTERVAL_MS: (u64, u64) = (1, 1000);
pub const STALL_INTERVAL_MS: (u64, u64) = (1, 1000);
pub const HANG_AFTER_MS: (u64, u64) = (100, 3_600_000);

/// One watched loop's settings, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StallOptions {
    /// The loop did not turn for this long: a stall.
    pub threshold_ns: u64,
    /// History kept before a stall.
    pub keep_ns: u64,
    /// Background sampling interval.
    pub interval_ns: u64,
    /// Sampling interval of the stalled thread during a stall.
    pub stall_interval_ns: u64,
    /// A stall this long is written to `hang_dir` from the sampler side,
    /// without waiting for the loop to turn (a deadlock never does).
    pub hang_after_ns: Option<u64>,
    pub hang_dir: Option<PathBuf>,
    /// Load the symbol tables of the code seen running soon after the
    /// watch starts, so the first report is as quick as the later ones.
    pub warm_symbols: bool,
}

impl Default for StallOptions {
    fn default() -> Self {
        StallOptions {
            threshold_ns: 200_000_000,
            keep_ns: 5_000_000_000,
            interval_ns: 10_000_000,
            stall_interval_ns: 1_000_000,
            hang_after_ns: None,
            hang_dir: None,
            warm_symbols: true,
        }
    }
}

fn ms(what: &str, value: f64, (min, max): (u64, u64)) -> Result<u64, SamplerError> {
    Ok(integer_in_range(what, value, min, max)? * 1_000_000)
}

impl StallOptions {
    pub fn with_threshold_ms(mut self, v: f64) -> Result<Self, SamplerError> {
        self.threshold_ns = ms("thresholdMs", v, THRESHOLD_MS)?;
        Ok(self)
    }

    pub fn with_keep_ms(mut self, v: f64) -> Result<Self, SamplerError> {
        self.keep_ns = ms("keepMs", v, KEEP_MS)?;
        Ok(self)
    }

    pub fn with_interval_ms(mut self, v: f64) -> Result<Self, SamplerError> {
        self.interval_ns = ms("intervalMs", v, INTERVAL_MS)?;
        Ok(self)
    }

    pub fn with_stall_interval_ms(mut self, v: f64) -> Result<Self, SamplerError> {
        self.stall_interval_ns = ms("stallIntervalMs", v, STALL_INTERVAL_MS)?;
        Ok(self)
    }

    pub fn with_hang_after_ms(mut self, v: f64) -> Result<Self, SamplerError> {
        self.hang_after_ns = Some(ms("hangAfterMs", v, HANG_AFTER_MS)?);
        Ok(self)
    }

    /// Checks what single options cannot: a hang needs both its settings.
    pub fn check(self) -> Result<Self, SamplerError> {
        match (self.hang_after_ns, &self.hang_dir) {
            (Some(_), None) => Err(SamplerError::inval("hangAfterMs needs hangDir, the directory to write hangs to")),
            (None, Some(_)) => Err(SamplerError::inval(format!(
                "hangDir needs hangAfterMs, how long a stall lasts before it is written there ({} to {})",
                HANG_AFTER_MS.0, HANG_AFTER_MS.1
            ))),
            _ => Ok(self),
        }
    }

    /// How old the heartbeat gets before the stalled thread is sampled
    /// faster: half the threshold, so a stall's second half is readable
    /// and a loop that is merely slow costs no more than a short burst.
    pub fn suspect_ns(&self) -> u64 {
        self.threshold_ns / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::error::ErrorCode;

    #[test]
    fn ranges_are_checked_and_named() {
        let o = StallOptions::default();
        assert_eq!(o.clone().with_threshold_ms(20.0).unwrap().threshold_ns, 20_000_000);
        assert_eq!(o.clone().with_keep_ms(0.0).unwrap().keep_ns, 0);
        for (bad, what) in [
            (o.clone().with_threshold_ms(19.0), "thresholdMs must be an integer from 20 to 60000"),
            (o.clone().with_threshold_ms(60001.0), "thresholdMs must be an integer from 20 to 60000"),
            (o.clone().with_keep_ms(-1.0), "keepMs must be an integer from 0 to 60000"),
            (o.clone().with_interval_ms(0.0), "intervalMs must be an integer from 1 to 1000"),
            (o.clone().with_interval_ms(1.5), "intervalMs must be an integer from 1 to 1000"),
            (o.clone().with_stall_interval_ms(f64::NAN), "stallIntervalMs must be an integer from 1 to 1000"),
            (o.clone().with_hang_after_ms(99.0), "hangAfterMs must be an integer from 100 to 3600000"),
        ] {
            let e = bad.unwrap_err();
            assert_eq!(e.code, ErrorCode::Inval);
            assert!(e.message.starts_with(what), "{}", e.message);
        }
        let e = o.clone().with_hang_after_ms(1000.0).unwrap().check().unwrap_err();
        assert!(e.message.contains("hangDir"));
        let e = StallOptions { hang_dir: Some("/tmp".into()), ..o }.check().unwrap_err();
        assert!(e.message.contains("100 to 3600000"), "{}", e.message);
    }
}
