//! Reordering: holds a random fraction of packets back by an extra delay so later ones overtake.

use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// With probability `prob`, a packet is delayed by `extra` on top of the link delay.
#[derive(Clone, Debug)]
pub struct Reorder {
    prob: f64,
    extra: Duration,
    rng: ChaCha8Rng,
}

impl Reorder {
    /// `prob` is clamped to [0, 1].
    pub fn new(prob: f64, extra: Duration, seed: u64) -> Self {
        Self {
            prob: prob.clamp(0.0, 1.0),
            extra,
            rng: crate::rng(seed, 4),
        }
    }

    /// The extra delay for the next packet (zero for most).
    pub fn extra_delay(&mut self) -> Duration {
        if self.prob > 0.0 && self.rng.gen::<f64>() < self.prob {
            self.extra
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_held_back() {
        let mut r = Reorder::new(0.1, Duration::from_millis(3), 1);
        let held = (0..100_000).filter(|_| !r.extra_delay().is_zero()).count();
        assert!((9_000..11_000).contains(&held), "{held}");
        let mut none = Reorder::new(0.0, Duration::from_millis(3), 1);
        assert!((0..1000).all(|_| none.extra_delay().is_zero()));
    }
}
