//! rQUIC's adaptive FEC ratio (rQUIC §III-A, Algorithm 1) driving a block XOR code.
//!
//! The ratio `r` is the block size: one XOR repair per `r` sources. Each measurement period the
//! residual loss `eps = residual / (received + lost)` (the paper's retransmissions over original
//! transmissions) is measured; the mean of the last `N` periods is compared with the target
//! `gamma`: above it `r *= 1 - delta` (more protection), otherwise `r *= 1 + delta`. Constants as
//! in the paper: N = 3, delta = 0.33, gamma = 1 %, r_init = 10 (their Fig. 2). The paper's period
//! is 3 RTT; ours is one feedback period (HIRT's n_f sources, or the decoder's feedback interval
//! with sparse traffic). `r` is kept in [1, 255] (the paper gives no bound; without an upper one
//! r grows without limit on a clean link).

use std::str::FromStr;

use super::{Controller, FeedbackContext};
use crate::config::{kv_pairs, parse_num, ConfigError};
use crate::feedback::Feedback;

/// Largest block: the block-XOR code's limit.
const MAX_R: f64 = hirt_fec::block_xor::MAX_BLOCK as f64;

/// Most periods averaged.
const MAX_N: usize = 64;

/// Constants of rQUIC's Algorithm 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RquicParams {
    /// Periods averaged (N).
    pub n: usize,
    /// Multiplicative step (delta).
    pub delta: f64,
    /// Target residual loss (gamma).
    pub gamma: f64,
    /// Initial ratio (block size).
    pub r_init: f64,
    /// Smallest block size.
    pub r_min: f64,
    /// Largest block size.
    pub r_max: f64,
}

impl Default for RquicParams {
    fn default() -> Self {
        RquicParams {
            n: 3,
            delta: 0.33,
            gamma: 0.01,
            r_init: 10.0,
            r_min: 1.0,
            r_max: 255.0,
        }
    }
}

/// Parses `n=3,delta=0.33,gamma=0.01,r=10,rmin=1,rmax=255` (each optional).
impl FromStr for RquicParams {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = RquicParams::default();
        for (k, v) in kv_pairs(s) {
            match k {
                "n" => p.n = parse_num(k, v, 1, MAX_N)?,
                "delta" => p.delta = parse_num(k, v, 0.0, 0.99)?,
                "gamma" => p.gamma = parse_num(k, v, 0.0, 1.0)?,
                "r" | "r_init" => p.r_init = parse_num(k, v, 1.0, MAX_R)?,
                "rmin" => p.r_min = parse_num(k, v, 1.0, MAX_R)?,
                "rmax" => p.r_max = parse_num(k, v, 1.0, MAX_R)?,
                _ => return Err(ConfigError::UnknownParameter(k.into())),
            }
        }
        if p.r_min > p.r_max {
            return Err(ConfigError::InvalidValue {
                key: "rmin".into(),
                value: s.into(),
            });
        }
        Ok(p)
    }
}

/// rQUIC's controller: block size steered by residual loss.
#[derive(Clone, Debug)]
pub struct Rquic {
    p: RquicParams,
    r: f64,
    eps: [f64; MAX_N],
    len: usize,
    next: usize,
}

impl Rquic {
    /// A controller starting at `r_init`.
    pub fn new(p: RquicParams) -> Self {
        let n = p.n.clamp(1, MAX_N);
        Rquic {
            p: RquicParams { n, ..p },
            r: p.r_init.clamp(p.r_min, p.r_max),
            eps: [0.0; MAX_N],
            len: 0,
            next: 0,
        }
    }

    /// Current ratio (block size, not rounded).
    pub fn ratio(&self) -> f64 {
        self.r
    }
}

impl Controller for Rquic {
    fn name(&self) -> &'static str {
        "rquic"
    }

    /// The block code emits its own repairs.
    fn on_source(&mut self) -> u32 {
        0
    }

    fn on_feedback(&mut self, fb: &Feedback, ctx: &FeedbackContext) {
        if fb.received == 0 && fb.lost == 0 {
            return; // an empty period says nothing about the residual loss
        }
        let link = Feedback {
            residual: fb.residual.saturating_sub(ctx.own_residual),
            ..*fb
        };
        self.eps[self.next] = link.residual_ratio();
        self.next = (self.next + 1) % self.p.n;
        self.len = (self.len + 1).min(self.p.n);
        let mean = self.eps[..self.len].iter().sum::<f64>() / self.len as f64;
        self.r *= if mean > self.p.gamma {
            1.0 - self.p.delta
        } else {
            1.0 + self.p.delta
        };
        self.r = self.r.clamp(self.p.r_min, self.p.r_max);
    }

    fn window(&self) -> Option<u16> {
        Some(self.r.round().clamp(1.0, MAX_R) as u16)
    }

    fn rate(&self) -> f64 {
        1.0 / self.r.round().max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> FeedbackContext {
        FeedbackContext {
            now: crate::test_util::t0(),
            rtt: None,
            window: 10,
            max_window: 4095,
            reach: 4095,
            own_residual: 0,
            deadline: None,
        }
    }

    fn fb(residual: u32, seen: u32) -> Feedback {
        Feedback {
            received: seen - residual.min(seen),
            lost: residual.min(seen),
            residual,
            ..Feedback::default()
        }
    }

    #[test]
    fn grows_without_residual_and_shrinks_above_target() {
        let mut c = Rquic::new(RquicParams::default());
        assert_eq!(c.window(), Some(10));
        c.on_feedback(&fb(0, 1000), &ctx());
        assert!((c.ratio() - 13.3).abs() < 1e-9);
        // 5 % residual: mean of (0, 0.05) = 0.025 > 1 % -> shrink.
        c.on_feedback(&fb(50, 1000), &ctx());
        assert!((c.ratio() - 13.3 * 0.67).abs() < 1e-9);
        assert_eq!(c.window(), Some(9));
    }

    #[test]
    fn averages_over_the_last_n_periods() {
        let mut c = Rquic::new(RquicParams::default());
        // One bad period (4 %), then clean ones: the mean stays above 1 % for N-1 more periods.
        c.on_feedback(&fb(40, 1000), &ctx()); // mean 4 % -> shrink
        c.on_feedback(&fb(0, 1000), &ctx()); // mean 2 % -> shrink
        c.on_feedback(&fb(0, 1000), &ctx()); // mean 1.33 % -> shrink
        c.on_feedback(&fb(0, 1000), &ctx()); // 4 % left the window: mean 0 -> grow
        let expect = 10.0 * 0.67 * 0.67 * 0.67 * 1.33;
        assert!((c.ratio() - expect).abs() < 1e-9, "{}", c.ratio());
    }

    #[test]
    fn stays_within_bounds_and_skips_empty_periods() {
        let mut c = Rquic::new(RquicParams::default());
        for _ in 0..100 {
            c.on_feedback(&fb(0, 100), &ctx());
        }
        assert_eq!(c.ratio(), 255.0);
        for _ in 0..100 {
            c.on_feedback(&fb(90, 100), &ctx());
        }
        assert_eq!(c.ratio(), 1.0);
        c.on_feedback(&Feedback::default(), &ctx());
        assert_eq!(c.ratio(), 1.0);
    }

    #[test]
    fn parses_params() {
        let p: RquicParams = "n=5,gamma=0.001,r=20".parse().unwrap();
        assert_eq!((p.n, p.gamma, p.r_init), (5, 0.001, 20.0));
        assert!("n=0".parse::<RquicParams>().is_err());
        assert!("rmin=10,rmax=5".parse::<RquicParams>().is_err());
    }
}
