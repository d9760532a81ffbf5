//! HIRT's controller as published (HIRT §IV-B).
//!
//! The decoder reports, per loss window of n_f ESIs, the number of missing ESIs. The encoder keeps
//! an exponentially weighted moving average of that count, `mu`, and of its deviation, `sigma`,
//! and interleaves one repair every `step = ceil(n_f / (mu + k * sigma))` sources, i.e. it sends
//! `mu + k*sigma` repairs per window, spread evenly (paper Fig. 2). The step is recomputed at
//! every feedback.
//!
//! The paper names a "moving average" of the mean and of its deviation but gives no constants.
//! We take TCP's retransmission-timer estimator (RFC 6298, which the paper cites as [7] for the
//! same problem of estimating a mean and its spread from samples): gain `alpha = 1/8` for the mean,
//! `beta = 1/4` for the mean deviation, and `k = 1` because the paper's formula adds sigma once
//! (`ceil(1 / (mu + sigma))`). The first sample sets `mu = x`, `sigma = x / 2` (RFC 6298 §2.2).
//! Feedback aggregating n windows applies the EWMA n times with the period's mean and RMS
//! deviation (exact for n = 1, which is the default: one feedback per window).
//!
//! Two choices the paper leaves open, documented in `docs/core.md`: with fewer than one expected
//! loss per window the step is capped at n_f (one repair per window, so a lone loss can still be
//! recovered), and before the first feedback the step is n_f.

use std::str::FromStr;

use super::{Controller, FeedbackContext, RepairTrigger};
use crate::config::{kv_pairs, parse_num, ConfigError};
use crate::feedback::Feedback;

/// Constants of the HIRT controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HirtParams {
    /// EWMA gain of the mean losses per window (RFC 6298 alpha = 1/8).
    pub alpha: f64,
    /// EWMA gain of the deviation (RFC 6298 beta = 1/4).
    pub beta: f64,
    /// Deviations added to the mean (the paper's formula: 1).
    pub k: f64,
}

impl Default for HirtParams {
    fn default() -> Self {
        HirtParams {
            alpha: 0.125,
            beta: 0.25,
            k: 1.0,
        }
    }
}

/// Parses `alpha=..,beta=..,k=..` (each optional).
impl FromStr for HirtParams {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = HirtParams::default();
        for (k, v) in kv_pairs(s) {
            match k {
                "alpha" => p.alpha = parse_num(k, v, 0.0, 1.0)?,
                "beta" => p.beta = parse_num(k, v, 0.0, 1.0)?,
                "k" => p.k = parse_num(k, v, 0.0, 100.0)?,
                _ => return Err(ConfigError::UnknownParameter(k.into())),
            }
        }
        Ok(p)
    }
}

/// HIRT's step controller.
#[derive(Clone, Debug)]
pub struct Hirt {
    p: HirtParams,
    /// Mean losses per loss window.
    mu: f64,
    /// Mean deviation of the losses per window.
    sigma: f64,
    /// n_f, from the feedback (the code window until the first feedback).
    nf: f64,
    seeded: bool,
    step: u32,
    since: u32,
}

impl Hirt {
    /// A controller for a window of `window` sources.
    pub fn new(p: HirtParams, window: u16) -> Self {
        let nf = f64::from(window.max(1));
        Hirt {
            p,
            mu: 0.0,
            sigma: 0.0,
            nf,
            seeded: false,
            step: nf as u32,
            since: 0,
        }
    }

    /// Current step (sources between repairs).
    pub fn step(&self) -> u32 {
        self.step
    }

    /// Current (mu, sigma) in losses per window.
    pub fn estimate(&self) -> (f64, f64) {
        (self.mu, self.sigma)
    }

    fn recompute(&mut self) {
        let per_window = self.mu + self.p.k * self.sigma;
        let step = if per_window <= 0.0 {
            self.nf
        } else {
            (self.nf / per_window).ceil()
        };
        self.step = step.clamp(1.0, self.nf.max(1.0)) as u32;
    }
}

impl Controller for Hirt {
    fn name(&self) -> &'static str {
        "hirt"
    }

    fn on_source(&mut self) -> u32 {
        self.since += 1;
        u32::from(self.since >= self.step)
    }

    fn on_repair(&mut self, _trigger: RepairTrigger) {
        self.since = 0;
    }

    fn on_feedback(&mut self, fb: &Feedback, _ctx: &FeedbackContext) {
        if fb.windows == 0 {
            return;
        }
        if fb.loss_window > 0 {
            // n_f comes from the decoder; bounded by the largest RLC window so a bogus value
            // cannot stretch the step without limit.
            self.nf = f64::from(fb.loss_window.min(crate::config::MAX_WINDOW));
        }
        let n = f64::from(fb.windows);
        let mean = f64::from(fb.loss_sum) / n;
        let mean_sq = f64::from(fb.loss_sq_sum) / n;
        if !self.seeded {
            self.seeded = true;
            self.mu = mean;
            self.sigma = mean / 2.0;
        } else {
            // RMS deviation of the period's windows from the current estimate.
            let dev = (mean_sq - 2.0 * self.mu * mean + self.mu * self.mu)
                .max(0.0)
                .sqrt();
            let wa = 1.0 - (1.0 - self.p.alpha).powf(n);
            let wb = 1.0 - (1.0 - self.p.beta).powf(n);
            self.sigma = (1.0 - wb) * self.sigma + wb * dev;
            self.mu = (1.0 - wa) * self.mu + wa * mean;
        }
        self.recompute();
    }

    fn rate(&self) -> f64 {
        1.0 / f64::from(self.step.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> FeedbackContext {
        FeedbackContext {
            now: crate::test_util::t0(),
            rtt: None,
            window: 200,
            max_window: 200,
            reach: 200,
            own_residual: 0,
            deadline: None,
        }
    }

    fn fb(losses: &[u32]) -> Feedback {
        Feedback {
            windows: losses.len() as u16,
            loss_sum: losses.iter().sum(),
            loss_sq_sum: losses.iter().map(|x| x * x).sum(),
            loss_window: 200,
            ..Feedback::default()
        }
    }

    #[test]
    fn starts_with_one_repair_per_window() {
        let mut c = Hirt::new(HirtParams::default(), 200);
        assert_eq!(c.step(), 200);
        let n: u32 = (0..400)
            .map(|_| {
                let r = c.on_source();
                if r > 0 {
                    c.on_repair(RepairTrigger::Controller);
                }
                r
            })
            .sum();
        assert_eq!(n, 2);
    }

    #[test]
    fn first_sample_seeds_mean_and_half_deviation() {
        let mut c = Hirt::new(HirtParams::default(), 200);
        c.on_feedback(&fb(&[6]), &ctx());
        assert_eq!(c.estimate(), (6.0, 3.0));
        // step = ceil(200 / (6 + 3)) = 23
        assert_eq!(c.step(), 23);
    }

    #[test]
    fn ewma_update_by_hand() {
        let mut c = Hirt::new(HirtParams::default(), 200);
        c.on_feedback(&fb(&[6]), &ctx());
        c.on_feedback(&fb(&[10]), &ctx());
        // sigma = 0.75*3 + 0.25*|10-6| = 3.25 ; mu = 0.875*6 + 0.125*10 = 6.5
        let (mu, sigma) = c.estimate();
        assert!(
            (mu - 6.5).abs() < 1e-12 && (sigma - 3.25).abs() < 1e-12,
            "{mu} {sigma}"
        );
        // step = ceil(200 / 9.75) = 21
        assert_eq!(c.step(), 21);
    }

    #[test]
    fn converges_to_steady_loss() {
        let mut c = Hirt::new(HirtParams::default(), 200);
        for _ in 0..200 {
            c.on_feedback(&fb(&[6]), &ctx());
        }
        let (mu, sigma) = c.estimate();
        assert!((mu - 6.0).abs() < 1e-6 && sigma < 1e-6);
        assert_eq!(c.step(), 34); // ceil(200/6)
    }

    #[test]
    fn aggregated_windows_equal_repeated_single_windows_for_constant_losses() {
        let mut a = Hirt::new(HirtParams::default(), 200);
        let mut b = Hirt::new(HirtParams::default(), 200);
        a.on_feedback(&fb(&[2]), &ctx());
        b.on_feedback(&fb(&[2]), &ctx());
        a.on_feedback(&fb(&[8, 8, 8]), &ctx());
        for _ in 0..3 {
            b.on_feedback(&fb(&[8]), &ctx());
        }
        assert!((a.estimate().0 - b.estimate().0).abs() < 1e-9);
    }

    #[test]
    fn no_losses_caps_step_at_window_and_empty_feedback_is_ignored() {
        let mut c = Hirt::new(HirtParams::default(), 200);
        c.on_feedback(&fb(&[4]), &ctx());
        for _ in 0..500 {
            c.on_feedback(&fb(&[0]), &ctx());
        }
        assert_eq!(c.step(), 200);
        let before = c.estimate();
        c.on_feedback(&fb(&[]), &ctx());
        assert_eq!(c.estimate(), before);
    }

    #[test]
    fn parses_params() {
        let p: HirtParams = "alpha=0.5,k=2".parse().unwrap();
        assert_eq!(
            p,
            HirtParams {
                alpha: 0.5,
                beta: 0.25,
                k: 2.0
            }
        );
        assert!("alpha=2".parse::<HirtParams>().is_err());
        assert_eq!("".parse::<HirtParams>().unwrap(), HirtParams::default());
    }
}
