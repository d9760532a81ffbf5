//! Queue management for the path: CoDel (RFC 8289) driven by the queueing delay the encoder
//! measures on the path, deciding which sources the tunnel drops before coding them.
//!
//! A tunnel that repairs random losses also removes the signal that kept loss-based congestion
//! control (CUBIC, Reno) off the path's queue: on a lossy link the flows' windows stayed small;
//! through the tunnel they grow until the bottleneck's buffer overflows, and a drop-tail
//! overflow takes dozens of packets at once, repairs included. The flows then pay a full buffer
//! of delay and the retransmission timeouts of overflow bursts. CoDel gives them back a
//! congestion signal early and one packet at a time: while the queueing delay has stayed above
//! `target` for an `interval`, one source is dropped, and the drops come closer together
//! (`interval / sqrt(count)`) until the delay falls below the target.
//!
//! CoDel reads a packet's sojourn time at the queue; the tunnel only sees the path's RTT from
//! feedback (a sample every feedback period), so the queueing delay here is the latest RTT
//! sample above the path's base RTT. Dropped sources never get an ESI: the decoder sees no hole
//! and the flow's transport sees one loss, as behind a CoDel queue. A source whose inner
//! packet is ECN-capable is marked CE instead of dropped, as a CoDel queue with ECN does: its
//! transport slows down without losing anything.

use std::time::{Duration, Instant};

/// CoDel's parameters on the path's queueing delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AqmConfig {
    /// Queueing delay the path may keep (RFC 8289: 5 ms).
    pub target: Duration,
    /// How long the delay must stay above the target before drops start, and the base of the
    /// drop spacing (RFC 8289: 100 ms, a worst-case RTT; the path's base RTT where longer).
    pub interval: Duration,
}

impl Default for AqmConfig {
    fn default() -> Self {
        AqmConfig {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
        }
    }
}

/// The CoDel state of one stream (RFC 8289 §5, with the measured queueing delay in place of
/// the sojourn time).
#[derive(Debug, Clone)]
pub(crate) struct Codel {
    cfg: AqmConfig,
    /// The latest queueing delay measured on the path, and when.
    delay: Duration,
    measured_at: Option<Instant>,
    /// The path's base RTT, which stretches the interval on long paths.
    base_rtt: Duration,
    /// When the delay will have stayed above the target for an interval (`None`: below it).
    first_above: Option<Instant>,
    dropping: bool,
    /// Drops in the current dropping state.
    count: u32,
    /// `count` when the last dropping state ended.
    last_count: u32,
    drop_next: Option<Instant>,
}

impl Codel {
    pub(crate) fn new(cfg: AqmConfig) -> Self {
        Codel {
            cfg,
            delay: Duration::ZERO,
            measured_at: None,
            base_rtt: Duration::ZERO,
            first_above: None,
            dropping: false,
            count: 0,
            last_count: 0,
            drop_next: None,
        }
    }

    /// A new measurement at `now`: the path's RTT `sample` over its base RTT `base`.
    pub(crate) fn on_rtt(&mut self, sample: Duration, base: Duration, now: Instant) {
        self.delay = sample.saturating_sub(base);
        self.base_rtt = base;
        self.measured_at = Some(now);
    }

    /// The queueing delay to act on at `now`: a measurement older than two intervals (the
    /// traffic paused, so feedback did) says nothing of the queue the next sources meet.
    fn delay(&self, now: Instant) -> Duration {
        match self.measured_at {
            Some(at) if now.saturating_duration_since(at) <= self.interval() * 2 => self.delay,
            _ => Duration::ZERO,
        }
    }

    fn interval(&self) -> Duration {
        self.cfg.interval.max(self.base_rtt)
    }

    fn spacing(&self) -> Duration {
        self.interval().div_f64(f64::from(self.count.max(1)).sqrt())
    }

    /// Whether the source arriving at `now` carries a congestion signal: dropped, or marked CE
    /// when ECN-capable (CoDel schedules marks as it schedules drops).
    pub(crate) fn signals(&mut self, now: Instant) -> bool {
        if self.delay(now) < self.cfg.target {
            self.first_above = None;
            if self.dropping {
                self.dropping = false;
                self.last_count = self.count;
            }
            return false;
        }
        let Some(due) = self.first_above else {
            self.first_above = now.checked_add(self.interval());
            return false;
        };
        if self.dropping {
            if let Some(next) = self.drop_next.filter(|t| now >= *t) {
                self.count = self.count.saturating_add(1);
                // From the drop, not from when it was due: after a pause in the sources the
                // schedule does not owe a burst of drops (the measurement is the same one).
                self.drop_next = next.max(now).checked_add(self.spacing());
                return true;
            }
            return false;
        }
        if now < due {
            return false;
        }
        // Enter the dropping state; a state left recently resumes near its old rate (§5.5).
        self.dropping = true;
        let recent = self
            .drop_next
            .is_some_and(|t| now.saturating_duration_since(t) < self.interval() * 16);
        self.count = if recent && self.last_count > 2 {
            self.last_count - 2
        } else {
            1
        };
        self.drop_next = now.checked_add(self.spacing());
        true
    }

    /// Whether CoDel is in its dropping state.
    #[cfg(test)]
    pub(crate) fn dropping(&self) -> bool {
        self.dropping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    /// A source every millisecond for `for_` from `start`, and feedback measuring `rtt` over
    /// `base` every 50 ms; returns when the drops came, from `start`.
    fn run(c: &mut Codel, start: Instant, for_: u64, (rtt, base): (u64, u64)) -> Vec<Duration> {
        let mut drops = Vec::new();
        for t in 0..for_ {
            if t % 50 == 0 {
                c.on_rtt(ms(rtt), ms(base), start + ms(t));
            }
            if c.signals(start + ms(t)) {
                drops.push(ms(t));
            }
        }
        drops
    }

    #[test]
    fn a_short_queue_is_left_alone() {
        let mut c = Codel::new(AqmConfig::default());
        assert!(run(&mut c, t0(), 2000, (54, 50)).is_empty());
    }

    #[test]
    fn a_standing_queue_gets_drops_closer_and_closer_until_it_drains() {
        let mut c = Codel::new(AqmConfig::default());
        let t0 = t0();
        // 100 ms above the target before the first drop, then 100/sqrt(n) ms apart:
        // 200, 200 + 70.7 -> the source at 271, + 57.7 -> 329, + 50 -> 379.
        let drops = run(&mut c, t0, 400, (80, 50));
        assert_eq!(drops, [100, 200, 271, 329, 379].map(ms), "{drops:?}");
        assert!(c.dropping());
        // The queue drains: no more drops, and the state ends.
        assert!(run(&mut c, t0 + ms(400), 500, (52, 50)).is_empty());
        assert!(!c.dropping());
    }

    #[test]
    fn a_queue_that_returns_soon_resumes_near_the_old_drop_rate() {
        let mut c = Codel::new(AqmConfig::default());
        let t0 = t0();
        let n = run(&mut c, t0, 1000, (80, 50)).len() as u32;
        assert!(n >= 8, "{n}");
        assert!(run(&mut c, t0 + ms(1000), 100, (50, 50)).is_empty());
        let again = run(&mut c, t0 + ms(1100), 400, (80, 50));
        // Back after 100 ms above the target, at count n - 2: the next drop 100/sqrt(n-2) later.
        assert_eq!(again[0], ms(100), "{again:?}");
        let gap = again[1] - again[0];
        let expected = ms(100).div_f64(f64::from(n - 2).sqrt());
        assert!(gap.abs_diff(expected) <= ms(1), "{gap:?} vs {expected:?}");
    }

    #[test]
    fn a_long_path_waits_its_round_trip() {
        let mut c = Codel::new(AqmConfig::default());
        let drops = run(&mut c, t0(), 1300, (650, 600));
        assert_eq!(drops[..2], [ms(600), ms(1200)], "{drops:?}");
    }

    #[test]
    fn sources_after_a_pause_get_no_burst_of_drops() {
        let mut c = Codel::new(AqmConfig::default());
        let t0 = t0();
        assert_eq!(run(&mut c, t0, 400, (80, 50)).len(), 5);
        // 150 ms without sources (the measurement stays fresh), then one every ms: one drop,
        // then the schedule again.
        c.on_rtt(ms(80), ms(50), t0 + ms(500));
        let drops = run(&mut c, t0 + ms(550), 100, (80, 50));
        assert_eq!(drops[0], ms(0), "{drops:?}");
        assert!(drops[1] >= ms(40), "{drops:?}");
    }

    #[test]
    fn a_measurement_from_before_a_pause_drops_nothing() {
        let mut c = Codel::new(AqmConfig::default());
        let t0 = t0();
        c.on_rtt(ms(80), ms(50), t0);
        // The traffic and its feedback stop; sources resume 300 ms later with no new sample.
        for t in 300..1000 {
            assert!(!c.signals(t0 + ms(t)), "{t}");
        }
    }
}
