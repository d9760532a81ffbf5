//! Overload control (HIRT §V): each stream has a work budget of symbol operations per period.
//! Over it, optional work (making a repair, decoding a repair) is skipped with a probability
//! proportional to the excess: `p = min(1, (used - budget) / budget)`. Source forwarding never
//! goes through here. The RNG is seeded by the caller.

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
}

impl Budget {
    pub(crate) fn new(budget: Option<u64>, period: Duration) -> Self {
        Budget {
            budget,
            period: period.max(Duration::from_micros(1)),
            start: None,
            used: 0,
        }
    }

    /// Whether optional work may be done now; draws from `rng` only when over budget.
    pub(crate) fn admit(&mut self, now: Instant, rng: &mut ChaCha8Rng) -> bool {
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
