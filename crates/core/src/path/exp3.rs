//! EXP3 (TPC Algorithm 1) over a set of paths, with TPC's weight normalisation (Listing 6):
//! after every update the weights are rescaled to sum to `max_weight` and floored at 1, so the
//! best path holds at most `max_weight / (max_weight + K - 1)` of the weight and a path that
//! turns bad loses its lead within a few rewards of the others.

use rand::Rng;

/// EXP3 weights over `K` arms (the manager's paths, by index).
#[derive(Clone, Debug)]
pub struct Exp3 {
    weights: Vec<f64>,
    gamma: f64,
    max_weight: f64,
}

impl Exp3 {
    /// `arms` arms, every weight 1.
    pub fn new(arms: usize, gamma: f64, max_weight: f64) -> Self {
        Self {
            weights: vec![1.0; arms],
            gamma,
            max_weight,
        }
    }

    /// Changes Γ and the weight cap, keeping the weights.
    pub fn set_params(&mut self, gamma: f64, max_weight: f64) {
        self.gamma = gamma;
        self.max_weight = max_weight;
        self.normalize();
    }

    /// The weights, by arm.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Share of the weight sum held by `arm` among the arms `usable` says yes to.
    pub fn weight_share(&self, arm: usize, usable: impl Fn(usize) -> bool) -> f64 {
        let sum: f64 = (0..self.weights.len())
            .filter(|&i| usable(i))
            .map(|i| self.weights[i])
            .sum();
        if sum > 0.0 && usable(arm) {
            self.weights[arm] / sum
        } else {
            0.0
        }
    }

    /// Algorithm 1's `p_a = (1 - Γ) w_a / Σw + Γ / K`, over the usable arms only (an unusable
    /// arm gets 0); `K` is the number of usable arms.
    pub fn probabilities(&self, usable: impl Fn(usize) -> bool, out: &mut Vec<f64>) {
        out.clear();
        let k = (0..self.weights.len()).filter(|&i| usable(i)).count();
        let sum: f64 = (0..self.weights.len())
            .filter(|&i| usable(i))
            .map(|i| self.weights[i])
            .sum();
        for i in 0..self.weights.len() {
            out.push(if usable(i) && sum > 0.0 {
                (1.0 - self.gamma) * self.weights[i] / sum + self.gamma / k as f64
            } else {
                0.0
            });
        }
    }

    /// Draws an arm from `probabilities` with the caller's seeded RNG; `None` if none is usable.
    pub fn draw<R: Rng>(probabilities: &[f64], rng: &mut R) -> Option<usize> {
        Self::pick(probabilities, rng.gen::<f64>())
    }

    /// The arm whose cumulative-probability interval holds `u` in [0, 1) (inverse CDF).
    pub fn pick(probabilities: &[f64], u: f64) -> Option<usize> {
        let total: f64 = probabilities.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let mut x = u * total;
        let mut last = None;
        for (i, &p) in probabilities.iter().enumerate() {
            if p <= 0.0 {
                continue;
            }
            last = Some(i);
            if x < p {
                return Some(i);
            }
            x -= p;
        }
        last
    }

    /// Algorithm 1's update for arm `arm`, drawn with probability `p`, observed reward `u`
    /// over `k` usable arms: `w *= exp(Γ (u / p) / K)`, then normalisation.
    pub fn reward(&mut self, arm: usize, p: f64, u: f64, k: usize) {
        if arm >= self.weights.len() || p <= 0.0 || k == 0 || u <= 0.0 {
            return;
        }
        // The exponent is capped so that huge rewards (milliseconds, tiny p) saturate the arm at
        // the normalisation cap instead of overflowing to infinity.
        let x = (self.gamma * (u / p) / k as f64).min(600.0);
        self.weights[arm] *= x.exp();
        self.normalize();
    }

    fn normalize(&mut self) {
        let sum: f64 = self.weights.iter().sum();
        if !(sum > 0.0 && sum.is_finite()) {
            self.weights.iter_mut().for_each(|w| *w = 1.0);
            return;
        }
        for w in &mut self.weights {
            *w = (*w * self.max_weight / sum).max(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn weights_stay_in_range_and_rewarded_arm_wins() {
        let mut e = Exp3::new(2, 0.1, 10_000.0);
        let mut p = Vec::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            e.probabilities(|_| true, &mut p);
            let a = Exp3::draw(&p, &mut rng).unwrap();
            // Arm 1 is the low-delay one: reward 0.9 of SRTT_max; arm 0 gets 0.
            let u = if a == 1 { 0.9 } else { 0.0 };
            e.reward(a, p[a], u, 2);
            assert!(e.weights().iter().all(|&w| (1.0..=10_000.0).contains(&w)));
        }
        assert!(e.weight_share(1, |_| true) > 0.99);
        e.probabilities(|_| true, &mut p);
        // Exploration keeps Γ/K on the bad arm.
        assert!((p[0] - (0.9 / 10_001.0 + 0.05)).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn unusable_arms_get_nothing_and_pick_is_inverse_cdf() {
        let e = Exp3::new(3, 0.1, 10_000.0);
        let mut p = Vec::new();
        e.probabilities(|i| i != 1, &mut p);
        assert_eq!(p[1], 0.0);
        assert!((p[0] - 0.5).abs() < 1e-12 && (p[2] - 0.5).abs() < 1e-12);
        assert_eq!(Exp3::pick(&p, 0.0), Some(0));
        assert_eq!(Exp3::pick(&p, 0.49), Some(0));
        assert_eq!(Exp3::pick(&p, 0.51), Some(2));
        assert_eq!(Exp3::pick(&p, 0.999_999), Some(2));
        assert_eq!(Exp3::pick(&[0.0, 0.0], 0.3), None);
    }
}
