//! One-way propagation delay with optional jitter.

use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Adds `base` plus a jitter drawn uniformly in `[-jitter, +jitter]` (never below zero). Unless
/// `allow_reorder` is set, a packet never leaves before the one offered before it (jitter without
/// reordering, as on a real FIFO link).
#[derive(Clone, Debug)]
pub struct Delay {
    base: Duration,
    jitter: Duration,
    allow_reorder: bool,
    last: Option<Instant>,
    rng: ChaCha8Rng,
}

impl Delay {
    /// A delay element. `seed` only matters when `jitter` is non-zero.
    pub fn new(base: Duration, jitter: Duration, allow_reorder: bool, seed: u64) -> Self {
        Self {
            base,
            jitter,
            allow_reorder,
            last: None,
            rng: crate::rng(seed, 3),
        }
    }

    /// A fixed delay.
    pub fn fixed(base: Duration) -> Self {
        Self::new(base, Duration::ZERO, false, 0)
    }

    /// Changes the base delay for packets offered from now on (a path whose propagation delay
    /// changes); packets already inside keep theirs, and FIFO order still holds unless
    /// reordering is allowed.
    pub fn set_base(&mut self, base: Duration) {
        self.base = base;
    }

    /// The base delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// When a packet offered at `now` comes out.
    pub fn departure(&mut self, now: Instant) -> Instant {
        let mut d = self.base;
        if !self.jitter.is_zero() {
            let j = self.jitter.as_nanos() as i64;
            let off = self.rng.gen_range(-j..=j);
            d = if off >= 0 {
                d + Duration::from_nanos(off as u64)
            } else {
                d.saturating_sub(Duration::from_nanos(off.unsigned_abs()))
            };
        }
        let mut out = now + d;
        if !self.allow_reorder {
            if let Some(last) = self.last {
                out = out.max(last);
            }
            self.last = Some(out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_base_delay_applies_to_later_packets_without_overtaking() {
        let t0 = crate::test_util::t0();
        let ms = Duration::from_millis;
        let mut d = Delay::fixed(ms(50));
        assert_eq!(d.departure(t0), t0 + ms(50));
        d.set_base(ms(5));
        assert_eq!(d.base(), ms(5));
        // Offered 1 ms later: 6 ms by the new delay, but not before the packet ahead of it.
        assert_eq!(d.departure(t0 + ms(1)), t0 + ms(50));
        assert_eq!(d.departure(t0 + ms(60)), t0 + ms(65));
        d.set_base(ms(50));
        assert_eq!(d.departure(t0 + ms(61)), t0 + ms(111));
    }

    #[test]
    fn fixed_delay() {
        let t0 = crate::test_util::t0();
        let mut d = Delay::fixed(Duration::from_millis(25));
        assert_eq!(d.departure(t0), t0 + Duration::from_millis(25));
    }

    #[test]
    fn jitter_without_reordering_keeps_order_and_bounds() {
        let t0 = crate::test_util::t0();
        let (base, jit) = (Duration::from_millis(10), Duration::from_millis(5));
        let mut d = Delay::new(base, jit, false, 9);
        let mut last = t0;
        let mut spread = (Duration::MAX, Duration::ZERO);
        for i in 0..10_000u64 {
            let now = t0 + Duration::from_micros(i * 100);
            let out = d.departure(now);
            assert!(out >= last, "reordered at {i}");
            assert!(out - now <= base + jit);
            last = out;
            spread = (spread.0.min(out - now), spread.1.max(out - now));
        }
        assert!(
            spread.1 - spread.0 > Duration::from_millis(3),
            "no jitter: {spread:?}"
        );
    }

    #[test]
    fn jitter_with_reordering_reorders() {
        let t0 = crate::test_util::t0();
        let mut d = Delay::new(Duration::from_millis(10), Duration::from_millis(5), true, 9);
        let outs: Vec<Instant> = (0..1000u64)
            .map(|i| d.departure(t0 + Duration::from_micros(i * 100)))
            .collect();
        assert!(outs.windows(2).any(|w| w[1] < w[0]));
    }
}
