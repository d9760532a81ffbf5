//! The encoder's repair timestamps: microseconds since the encoder's first `now`, as a wrapping
//! u32 (wraps every ~71 minutes; RTTs are computed with wrapping subtraction). The decoder reads
//! the same timestamps for the queue its packets met on their way ([`ArrivalQueue`]).

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

/// How long one window of [`ArrivalQueue`]'s minimum lasts: the minimum covers one to two of
/// them, so a clock drifting 100 ppm against the sender's moves it by well under a millisecond.
const ARRIVAL_MIN_WINDOW: Duration = Duration::from_secs(5);
/// An [`ArrivalQueue`] measurement older than this says nothing of the queue now.
const ARRIVAL_STALE: Duration = Duration::from_millis(250);

/// The queueing delay the peer's packets meet on their way here, from the send timestamps of
/// its repairs: each packet's one-way delay above the smallest of the last 5-10 s. The two
/// clocks' offset is unknown, but the same in every packet, so it cancels in the difference.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ArrivalQueue {
    clock: Clock,
    /// The smallest raw delay (arrival stamp - send stamp, wrapping) of the current window and
    /// of the one before, and when the current window began.
    min_now: Option<u32>,
    min_before: Option<u32>,
    window_start: Option<Instant>,
    /// The latest packet's raw delay, and when it came.
    last: Option<(u32, Instant)>,
}

/// The smaller of two raw delays (wrapping: they are close to each other, not to zero).
fn earlier(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if (b.wrapping_sub(a) as i32) < 0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl ArrivalQueue {
    /// A packet stamped `sent` by the peer's clock arrived at `now`.
    pub(crate) fn on_packet(&mut self, sent: u32, now: Instant) {
        let raw = self.clock.stamp(now).wrapping_sub(sent);
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= ARRIVAL_MIN_WINDOW {
            self.min_before = self.min_now.take();
            self.window_start = Some(now);
        }
        self.min_now = earlier(self.min_now, Some(raw));
        self.last = Some((raw, now));
    }

    /// The queueing delay of the latest packet, unless it is older than 250 ms.
    pub(crate) fn queue(&self, now: Instant) -> Option<Duration> {
        let (raw, at) = self.last?;
        if now.saturating_duration_since(at) > ARRIVAL_STALE {
            return None;
        }
        let min = earlier(self.min_now, self.min_before)?;
        let above = (raw.wrapping_sub(min) as i32).max(0);
        Some(Duration::from_micros(above as u64))
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

    #[test]
    fn the_arrival_queue_is_the_one_way_delay_above_its_minimum() {
        let t0 = crate::test_util::t0();
        let us = Duration::from_micros;
        let mut a = ArrivalQueue::default();
        // The sender's clock is ~4.29e9 us ahead (its stamps wrap before ours): only
        // differences count. Delays 30, 25, 40 ms: the minimum is 25, the queue 15 ms.
        let offset = u32::MAX - 1000;
        for (at, delay) in [(0u64, 30_000u64), (10_000, 25_000), (20_000, 40_000)] {
            let sent = (at as u32).wrapping_add(offset).wrapping_sub(delay as u32);
            a.on_packet(sent, t0 + us(at));
        }
        assert_eq!(a.queue(t0 + us(20_000)), Some(Duration::from_millis(15)));
        // Stale after 250 ms without packets.
        assert_eq!(a.queue(t0 + us(20_000 + 251_000)), None);
        // The minimum covers the last one to two windows: 6 s later, the 25 ms is still in it;
        // 11 s later it has gone, and a 35 ms delay is the new floor.
        let at = 6_000_000u64;
        a.on_packet(
            (at as u32).wrapping_add(offset).wrapping_sub(35_000),
            t0 + us(at),
        );
        assert_eq!(a.queue(t0 + us(at)), Some(Duration::from_millis(10)));
        let at = 11_000_000u64;
        a.on_packet(
            (at as u32).wrapping_add(offset).wrapping_sub(35_000),
            t0 + us(at),
        );
        assert_eq!(a.queue(t0 + us(at)), Some(Duration::ZERO));
    }
}
