//! The core settings both dataplane modes take from the same flags (time-driven repairs,
//! overload control, in-order release), checked once and turned into encoder/decoder configs.

use std::time::Duration;

use hirt_core::{DecoderConfig, EncoderConfig, FecMode, SchemeConfig};

/// Settings of every encoder and decoder an instance runs, besides its FEC mode.
#[derive(Debug, Clone, PartialEq)]
pub struct CoderSettings {
    /// Worker load above which repair generation and solving are randomly skipped (HIRT §V;
    /// 1.0 = never).
    pub overload_threshold: f64,
    /// Time-driven repair delay (`None`: off), see `hirt_core::EncoderConfig`.
    pub repair_delay: Option<Duration>,
    /// Re-sends after a time-driven repair.
    pub repair_retries: u8,
    /// Gap between those re-sends (`None`: the repair delay).
    pub repair_retry_gap: Option<Duration>,
    /// In-order release hold of the decoder (`None`: off), see `hirt_core::DecoderConfig`.
    pub in_order: Option<Duration>,
    /// ESIs a repair may trail the decoder's newest source by, beyond the window (see
    /// `hirt_core::DecoderConfig::repair_lag`).
    pub repair_lag: u32,
}

impl Default for CoderSettings {
    /// The core's defaults; in-order release off.
    fn default() -> Self {
        CoderSettings {
            overload_threshold: hirt_core::DEFAULT_OVERLOAD_THRESHOLD,
            repair_delay: Some(hirt_core::DEFAULT_REPAIR_DELAY),
            repair_retries: hirt_core::DEFAULT_REPAIR_RETRIES,
            repair_retry_gap: None,
            in_order: None,
            repair_lag: 0,
        }
    }
}

/// `ms` as a duration within `0..=10000` ms; 0 is `None` (off).
fn millis(flag: &str, ms: f64) -> anyhow::Result<Option<Duration>> {
    anyhow::ensure!(
        ms.is_finite() && (0.0..=10_000.0).contains(&ms),
        "{flag} {ms}: must be within 0..=10000"
    );
    Ok((ms > 0.0).then(|| Duration::from_secs_f64(ms / 1e3)))
}

impl CoderSettings {
    /// From `--overload-threshold`, `--repair-delay-ms`, `--repair-retries`,
    /// `--repair-retry-gap-ms` and `--in-order-ms` (unset: the defaults).
    pub fn from_flags(
        overload_threshold: Option<f64>,
        repair_delay_ms: Option<f64>,
        repair_retries: Option<u8>,
        repair_retry_gap_ms: Option<f64>,
        in_order_ms: Option<f64>,
    ) -> anyhow::Result<Self> {
        let d = CoderSettings::default();
        let overload_threshold = overload_threshold.unwrap_or(d.overload_threshold);
        anyhow::ensure!(
            (0.0..=1.0).contains(&overload_threshold),
            "--overload-threshold must be within 0..=1 (1 = off)"
        );
        let repair_delay = match repair_delay_ms {
            None => d.repair_delay,
            Some(ms) => millis("--repair-delay-ms", ms)?,
        };
        let repair_retry_gap = match repair_retry_gap_ms {
            None => None,
            Some(ms) => {
                let gap = millis("--repair-retry-gap-ms", ms)?;
                anyhow::ensure!(gap.is_some(), "--repair-retry-gap-ms must be above 0");
                gap
            }
        };
        let in_order = match in_order_ms {
            None => None,
            Some(ms) => millis("--in-order-ms", ms)?,
        };
        Ok(CoderSettings {
            overload_threshold,
            repair_delay,
            repair_retries: repair_retries.unwrap_or(d.repair_retries),
            repair_retry_gap,
            in_order,
            repair_lag: d.repair_lag,
        })
    }

    /// An encoder configuration for `fec` with these settings.
    pub fn encoder(&self, fec: FecMode) -> EncoderConfig {
        let mut c = EncoderConfig::new(fec);
        c.overload_threshold = self.overload_threshold;
        c.repair_delay = self.repair_delay;
        c.repair_retries = self.repair_retries;
        c.repair_retry_gap = self.repair_retry_gap;
        c
    }

    /// A decoder configuration for `scheme` with these settings.
    pub fn decoder(&self, scheme: SchemeConfig) -> DecoderConfig {
        let mut c = DecoderConfig::new(scheme).with_repair_lag(self.repair_lag);
        c.overload_threshold = self.overload_threshold;
        c.in_order = self.in_order;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_give_the_settings_and_bad_values_are_refused() {
        assert_eq!(
            CoderSettings::from_flags(None, None, None, None, None).unwrap(),
            CoderSettings::default()
        );
        let s = CoderSettings::from_flags(Some(1.0), Some(1.0), Some(3), Some(0.25), Some(30.0))
            .unwrap();
        assert_eq!(s.overload_threshold, 1.0);
        assert_eq!(s.repair_delay, Some(Duration::from_millis(1)));
        assert_eq!(s.repair_retries, 3);
        assert_eq!(s.repair_retry_gap, Some(Duration::from_micros(250)));
        assert_eq!(s.in_order, Some(Duration::from_millis(30)));
        // 0 turns the timer and the hold off.
        let off = CoderSettings::from_flags(None, Some(0.0), None, None, Some(0.0)).unwrap();
        assert_eq!((off.repair_delay, off.in_order), (None, None));
        for bad in [
            CoderSettings::from_flags(Some(1.5), None, None, None, None),
            CoderSettings::from_flags(None, Some(-1.0), None, None, None),
            CoderSettings::from_flags(None, None, None, Some(0.0), None),
            CoderSettings::from_flags(None, None, None, None, Some(f64::NAN)),
        ] {
            assert!(bad.is_err());
        }
        let e = s.encoder("ours".parse().unwrap());
        assert_eq!(e.repair_retry_gap, s.repair_retry_gap);
        assert_eq!(e.overload_threshold, 1.0);
        let d = s.decoder(e.mode.scheme.clone());
        assert_eq!(d.in_order, s.in_order);
        assert_eq!(d.repair_lag, 0);
        let lagged = CoderSettings {
            repair_lag: 1000,
            ..s.clone()
        };
        let d = lagged.decoder(e.mode.scheme.clone());
        assert_eq!(d.repair_lag, 1000);
        assert!(
            d.horizon > s.decoder(e.mode.scheme.clone()).horizon,
            "a later repair moves the horizon"
        );
    }
}
