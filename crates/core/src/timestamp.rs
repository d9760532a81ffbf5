//! The encoder's repair timestamps: microseconds since the encoder's first `now`, as a wrapping
//! u32 (wraps every ~71 minutes; RTTs are computed with wrapping subtraction).

use std::time::{Duration, Instant};

/// Maps `Instant`s to wrapping 32-bit microsecond timestamps relative to a lazily set epoch.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    epoch: Option<Instant>,
}

impl Clock {
    /// The timestamp of `now` (the first call sets the epoch).
    pub(crate) fn stamp(&mut self, now: Instant) -> u32 {
        let epoch = *self.epoch.get_or_insert(now);
        // Truncation is the wrap-around.
        now.saturating_duration_since(epoch).as_micros() as u32
    }

    /// RTT from an echo: `now - ts - hold`, or `None` if that is negative or absurd (> 60 s).
    pub(crate) fn rtt(&mut self, now: Instant, ts: u32, hold_us: u32) -> Option<Duration> {
        let elapsed = self.stamp(now).wrapping_sub(ts);
        let rtt = elapsed.checked_sub(hold_us)?;
        (rtt <= 60_000_000).then(|| Duration::from_micros(u64::from(rtt)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_rtt() {
        let t0 = crate::test_util::t0();
        let mut c = Clock::default();
        assert_eq!(c.stamp(t0), 0);
        let ts = c.stamp(t0 + Duration::from_micros(1500));
        assert_eq!(ts, 1500);
        let rtt = c.rtt(t0 + Duration::from_micros(61_500), ts, 10_000);
        assert_eq!(rtt, Some(Duration::from_micros(50_000)));
        // Hold longer than elapsed: refused.
        assert_eq!(c.rtt(t0 + Duration::from_micros(2000), ts, 10_000), None);
    }

    #[test]
    fn wraps() {
        let t0 = crate::test_util::t0();
        let mut c = Clock::default();
        c.stamp(t0);
        let late = t0 + Duration::from_micros(u64::from(u32::MAX) + 11);
        assert_eq!(c.stamp(late), 10);
        let ts = u32::MAX - 5; // sent just before the wrap
        assert_eq!(c.rtt(late, ts, 0), Some(Duration::from_micros(16)));
    }
}
