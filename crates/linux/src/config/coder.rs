//! The core settings both dataplane modes take from the same configuration keys (time-driven repairs,
//! overload control, in-order release), checked once and turned into encoder/decoder configs.

use std::time::Duration;

use hirt_core::{
    AqmConfig, Deadline, DecoderConfig, EncoderConfig, FecMode, HoldScope, SchemeConfig,
};

use super::ConfigError;

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
    /// What a hole holds back under in-order release.
    pub in_order_scope: HoldScope,
    /// ESIs a repair may trail the decoder's newest source by, beyond the window (see
    /// `hirt_core::DecoderConfig::repair_lag`), from the start.
    pub repair_lag: u32,
    /// The repair lag the decoder may grow to by itself when repairs come later than that
    /// (`hirt_core::DecoderConfig::repair_lag_limit`; at least `repair_lag`). 0 by default;
    /// SRv6 mode sets it, since a decoder SID cannot see its peer's segment lists.
    pub repair_lag_limit: u32,
    /// Recovery deadline (`None`: none): the encoder sizes its window and repairs from it and
    /// answers the decoder's loss reports, which the decoder then sends (see
    /// `hirt_core::EncoderConfig::deadline`, `hirt_core::DecoderConfig::loss_report_gap`).
    pub deadline: Option<Deadline>,
    /// Queue management on the path's queueing delay (`None`: off), see
    /// `hirt_core::EncoderConfig::aqm`.
    pub aqm: Option<AqmConfig>,
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
            in_order_scope: HoldScope::Flow,
            repair_lag: 0,
            repair_lag_limit: 0,
            deadline: None,
            aqm: None,
        }
    }
}

/// `ms` as a duration within `0..=10000` ms; 0 is `None` (off).
fn millis(key: &'static str, ms: f64) -> Result<Option<Duration>, ConfigError> {
    if !(ms.is_finite() && (0.0..=10_000.0).contains(&ms)) {
        return Err(ConfigError::new(
            key,
            format!("{ms}: must be within 0..=10000"),
        ));
    }
    Ok((ms > 0.0).then(|| Duration::from_secs_f64(ms / 1e3)))
}

impl CoderSettings {
    /// From the `overload-threshold`, `repair-delay-ms`, `repair-retries`,
    /// `repair-retry-gap-ms` (`None`: the repair delay) and `in-order-ms` settings; a
    /// repair lag of 0.
    pub fn new(
        overload_threshold: f64,
        repair_delay_ms: f64,
        repair_retries: u8,
        repair_retry_gap_ms: Option<f64>,
        in_order_ms: f64,
    ) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&overload_threshold) {
            return Err(ConfigError::new(
                "overload-threshold",
                format!("{overload_threshold}: must be within 0..=1 (1 = off)"),
            ));
        }
        let repair_retry_gap = match repair_retry_gap_ms {
            None => None,
            Some(ms) => match millis("repair-retry-gap-ms", ms)? {
                None => return Err(ConfigError::new("repair-retry-gap-ms", "must be above 0")),
                gap => gap,
            },
        };
        Ok(CoderSettings {
            overload_threshold,
            repair_delay: millis("repair-delay-ms", repair_delay_ms)?,
            repair_retries,
            repair_retry_gap,
            in_order: millis("in-order-ms", in_order_ms)?,
            in_order_scope: HoldScope::Flow,
            repair_lag: 0,
            repair_lag_limit: 0,
            deadline: None,
            aqm: None,
        })
    }

    /// These settings with queue management for the path at a target queueing delay of
    /// `target_ms` (`None` or 0: off; CoDel's interval, 100 ms).
    pub fn with_aqm(mut self, target_ms: Option<f64>) -> Result<Self, ConfigError> {
        self.aqm = match target_ms {
            None => None,
            Some(ms) => millis("aqm-target-ms", ms)?.map(|target| AqmConfig {
                target,
                ..AqmConfig::default()
            }),
        };
        Ok(self)
    }

    /// These settings with the recovery deadline `deadline` (`30ms`, `2rtt`, `auto`, ...;
    /// `None` or `off`: none).
    pub fn with_deadline(mut self, deadline: Option<&str>) -> Result<Self, ConfigError> {
        self.deadline = deadline
            .filter(|d| !d.trim().eq_ignore_ascii_case("off"))
            .map(|d| d.parse::<Deadline>())
            .transpose()
            .map_err(|e| ConfigError::new("deadline", e.to_string()))?;
        Ok(self)
    }

    /// These settings with in-order release scoped by `scope` (`flow` or `stream`; `None`:
    /// `flow`).
    pub fn with_in_order_scope(mut self, scope: Option<&str>) -> Result<Self, ConfigError> {
        if let Some(s) = scope {
            self.in_order_scope = s.trim().parse().map_err(|e: hirt_core::ConfigError| {
                ConfigError::new("in-order-scope", e.to_string())
            })?;
        }
        Ok(self)
    }

    /// An encoder configuration for `fec` with these settings. With a deadline, answers to
    /// loss reports may reach as far back as the peer's decoder grows to (a tunnel learns its
    /// path: `EncoderConfig::learning_answer_reach`).
    pub fn encoder(&self, fec: FecMode) -> EncoderConfig {
        let mut c = EncoderConfig::new(fec);
        c.overload_threshold = self.overload_threshold;
        c.repair_delay = self.repair_delay;
        c.repair_retries = self.repair_retries;
        c.repair_retry_gap = self.repair_retry_gap;
        c.deadline = self.deadline;
        c.aqm = self.aqm;
        if self.deadline.is_some() {
            c = c.learning_answer_reach();
        }
        c
    }

    /// A decoder configuration for `scheme` with these settings. With a deadline, its span
    /// grows when answers to its loss reports reach past it
    /// (`DecoderConfig::learning_answer_reach`).
    pub fn decoder(&self, scheme: SchemeConfig) -> DecoderConfig {
        let mut c = DecoderConfig::new(scheme).with_repair_lag(self.repair_lag);
        c.repair_lag_limit = self.repair_lag_limit.max(self.repair_lag);
        if self.deadline.is_some() {
            c = c.learning_answer_reach();
        }
        c.overload_threshold = self.overload_threshold;
        c.in_order = self.in_order;
        c.in_order_scope = self.in_order_scope;
        c.loss_report_gap = self.deadline.map(|_| hirt_core::DEFAULT_LOSS_REPORT_GAP);
        c.recovery_deadline = self.deadline;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_no_deadline() {
        let s = CoderSettings::default().with_deadline(Some("off")).unwrap();
        assert_eq!(s.deadline, None);
        assert_eq!(
            s.decoder("ours".parse::<FecMode>().unwrap().scheme)
                .loss_report_gap,
            None
        );
    }

    #[test]
    fn a_deadline_turns_loss_reports_on() {
        let fec: FecMode = "ours".parse().unwrap();
        let d = CoderSettings::default();
        assert_eq!(d.decoder(fec.scheme.clone()).loss_report_gap, None);
        let s = CoderSettings::default()
            .with_deadline(Some("2rtt"))
            .unwrap();
        assert_eq!(s.deadline, Some(Deadline::Rtt(2.0)));
        assert_eq!(s.encoder(fec.clone()).deadline, Some(Deadline::Rtt(2.0)));
        assert_eq!(
            s.decoder(fec.scheme).loss_report_gap,
            Some(hirt_core::DEFAULT_LOSS_REPORT_GAP)
        );
        let e = CoderSettings::default()
            .with_deadline(Some("soon"))
            .unwrap_err();
        assert_eq!(e.key, "deadline");
    }

    #[test]
    fn queue_management_takes_its_target_and_reaches_the_encoder() {
        let fec: FecMode = "ours".parse().unwrap();
        assert_eq!(CoderSettings::default().encoder(fec.clone()).aqm, None);
        let s = CoderSettings::default().with_aqm(Some(15.0)).unwrap();
        let aqm = s.encoder(fec.clone()).aqm.unwrap();
        assert_eq!(aqm.target, Duration::from_millis(15));
        assert_eq!(aqm.interval, Duration::from_millis(100));
        assert_eq!(
            CoderSettings::default().with_aqm(Some(0.0)).unwrap().aqm,
            None
        );
        assert_eq!(CoderSettings::default().with_aqm(None).unwrap().aqm, None);
        for bad in [-1.0, f64::NAN, 20_000.0] {
            let e = CoderSettings::default().with_aqm(Some(bad)).unwrap_err();
            assert_eq!(e.key, "aqm-target-ms");
        }
    }

    #[test]
    fn settings_and_bad_values_are_refused() {
        let d = CoderSettings::default();
        let from_defaults =
            CoderSettings::new(d.overload_threshold, 5.0, d.repair_retries, None, 0.0).unwrap();
        assert_eq!(from_defaults, d);
        let s = CoderSettings::new(1.0, 1.0, 3, Some(0.25), 30.0).unwrap();
        assert_eq!(s.overload_threshold, 1.0);
        assert_eq!(s.repair_delay, Some(Duration::from_millis(1)));
        assert_eq!(s.repair_retries, 3);
        assert_eq!(s.repair_retry_gap, Some(Duration::from_micros(250)));
        assert_eq!(s.in_order, Some(Duration::from_millis(30)));
        // 0 turns the timer and the hold off.
        let off = CoderSettings::new(0.9, 0.0, 1, None, 0.0).unwrap();
        assert_eq!((off.repair_delay, off.in_order), (None, None));
        for (bad, key) in [
            (
                CoderSettings::new(1.5, 5.0, 1, None, 0.0),
                "overload-threshold",
            ),
            (
                CoderSettings::new(0.9, -1.0, 1, None, 0.0),
                "repair-delay-ms",
            ),
            (
                CoderSettings::new(0.9, 5.0, 1, Some(0.0), 0.0),
                "repair-retry-gap-ms",
            ),
            (
                CoderSettings::new(0.9, 5.0, 1, None, f64::NAN),
                "in-order-ms",
            ),
        ] {
            assert_eq!(bad.unwrap_err().key, key);
        }
        let e = s.encoder("ours".parse().unwrap());
        assert_eq!(e.repair_retry_gap, s.repair_retry_gap);
        assert_eq!(e.overload_threshold, 1.0);
        let d = s.decoder(e.mode.scheme.clone());
        assert_eq!(d.in_order, s.in_order);
        assert_eq!((d.repair_lag, d.repair_lag_limit), (0, 0));
        let lagged = CoderSettings {
            repair_lag: 1000,
            ..s.clone()
        };
        let d = lagged.decoder(e.mode.scheme.clone());
        assert_eq!((d.repair_lag, d.repair_lag_limit), (1000, 1000));
        let learning = CoderSettings {
            repair_lag_limit: 1024,
            ..lagged.clone()
        };
        let d = learning.decoder(e.mode.scheme.clone());
        assert_eq!((d.repair_lag, d.repair_lag_limit), (1000, 1024));
        assert!(
            d.horizon > s.decoder(e.mode.scheme.clone()).horizon,
            "a later repair moves the horizon"
        );
        assert_eq!((e.answer_reach_lag, e.answer_reach_grows), (0, false));
        let timely = s.clone().with_deadline(Some("auto")).unwrap();
        let e = timely.encoder("ours".parse().unwrap());
        assert_eq!(
            (e.answer_reach_lag, e.answer_reach_grows),
            (hirt_core::LEARNED_ANSWER_REACH_LIMIT, true)
        );
        let d = timely.decoder(e.mode.scheme.clone());
        assert_eq!(
            (d.repair_lag, d.repair_lag_limit),
            (0, hirt_core::LEARNED_ANSWER_REACH_LIMIT)
        );
        assert_eq!(d.horizon, s.decoder(e.mode.scheme.clone()).horizon);
    }
}
