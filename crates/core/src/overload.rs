//! Overload control (HIRT §V): optional work (making a repair, decoding a repair) is skipped at
//! random when a stream is overloaded, so that FEC does not feed the vicious circle of losses ->
//! more repairs -> more load -> more losses. Two signals, either of which skips:
//! - a work budget of symbol operations per period: over it, skip with probability
//!   `min(1, (used - budget) / budget)`;
//! - the CPU load that the driver measures and injects (the core reads no clock of its own):
//!   above `threshold`, skip with probability `(load - threshold) / (1 - threshold)`, as HIRT
//!   does when a stream's core "sees its load reaching a defined threshold value".
//!
//! Source forwarding never goes through here. The RNG is seeded by the caller.

use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// One stream's budget.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    budget: Option<u64>,
    period: Duration,
    start: Option<Instant>,
    used: u64,
    /// Skip probability from the injected CPU load.
    load_skip: f64,
}

/// Skip probability for a CPU `load` (busy fraction) above `threshold`.
pub(crate) fn load_skip_probability(load: f64, threshold: f64) -> f64 {
    if !load.is_finite() || !threshold.is_finite() || threshold >= 1.0 || load <= threshold {
        return 0.0;
    }
    ((load - threshold) / (1.0 - threshold.max(0.0))).clamp(0.0, 1.0)
}

impl Budget {
    pub(crate) fn new(budget: Option<u64>, period: Duration) -> Self {
        Budget {
            budget,
            period: period.max(Duration::from_micros(1)),
            start: None,
            used: 0,
            load_skip: 0.0,
        }
    }

    /// Sets the skip probability that comes from the measured CPU load.
    pub(crate) fn set_load_skip(&mut self, p: f64) {
        self.load_skip = p.clamp(0.0, 1.0);
    }

    /// Whether optional work may be done now; draws from `rng` only when over budget.
    pub(crate) fn admit(&mut self, now: Instant, rng: &mut ChaCha8Rng) -> bool {
        if self.load_skip > 0.0 && rng.gen_bool(self.load_skip) {
            return false;
        }
        let Some(budget) = self.budget else {
            return true;
        };
        match self.start {
            Some(s) if now.saturating_duration_since(s) < self.period => {}
            _ => {
                self.start = Some(now);
                self.used = 0;
            }
        }
        if self.used <= budget {
            return true;
        }
        let p = ((self.used - budget) as f64 / budget.max(1) as f64).min(1.0);
        !rng.gen_bool(p)
    }

    /// Records `ops` symbol operations done.
    pub(crate) fn spend(&mut self, ops: u64) {
        if self.budget.is_some() {
            self.used = self.used.saturating_add(ops);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn unlimited_always_admits() {
        let mut b = Budget::new(None, Duration::from_millis(1));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let t0 = crate::test_util::t0();
        b.spend(u64::MAX);
        assert!(b.admit(t0, &mut rng));
    }

    #[test]
    fn cpu_load_above_the_threshold_skips_proportionally() {
        assert_eq!(load_skip_probability(0.5, 0.9), 0.0);
        assert_eq!(load_skip_probability(0.9, 0.9), 0.0);
        assert!((load_skip_probability(0.95, 0.9) - 0.5).abs() < 1e-9);
        assert_eq!(load_skip_probability(1.0, 0.9), 1.0);
        assert_eq!(load_skip_probability(2.0, 0.9), 1.0);
        // threshold 1.0 switches it off; garbage never skips everything by accident
        assert_eq!(load_skip_probability(1.0, 1.0), 0.0);
        assert_eq!(load_skip_probability(f64::NAN, 0.9), 0.0);

        let t0 = crate::test_util::t0();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut b = Budget::new(None, Duration::from_millis(1));
        b.set_load_skip(load_skip_probability(0.96, 0.8));
        let admitted = (0..10_000).filter(|_| b.admit(t0, &mut rng)).count();
        assert!((1_700..2_300).contains(&admitted), "{admitted}");
        b.set_load_skip(0.0);
        assert!((0..1000).all(|_| b.admit(t0, &mut rng)));
    }

    #[test]
    fn skip_probability_grows_with_excess_and_resets_each_period() {
        let t0 = crate::test_util::t0();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut b = Budget::new(Some(100), Duration::from_millis(1));
        assert!(b.admit(t0, &mut rng));
        b.spend(100);
        assert!(b.admit(t0, &mut rng)); // at budget: still admitted
        b.spend(50); // 50 % excess
        let admitted = (0..10_000).filter(|_| b.admit(t0, &mut rng)).count();
        assert!((4_500..5_500).contains(&admitted), "{admitted}");
        b.spend(1000); // excess >= budget: everything skipped
        assert!((0..1000).all(|_| !b.admit(t0, &mut rng)));
        // Next period: budget restored.
        assert!(b.admit(t0 + Duration::from_millis(1), &mut rng));
    }
}
