//! A link whose conditions change at given times: outages (every packet dropped, as a dish
//! dropping out or a peering link failing) and changes of the one-way delay (a delay
//! inversion). Times are offsets from the instant the link was built for.

use std::time::{Duration, Instant};

use crate::{Link, LinkConfig, LinkCounters, ParseLossError};

/// Outages and delay changes, as offsets from the start of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkSchedule {
    /// `(start, length)`: packets offered in `[start, start + length)` are dropped.
    pub outages: Vec<(Duration, Duration)>,
    /// `(at, delay)`: from `at` on, the base one-way delay is `delay` (later entries win).
    pub delay_changes: Vec<(Duration, Duration)>,
}

impl LinkSchedule {
    /// Whether offset `t` falls in an outage.
    pub fn in_outage(&self, t: Duration) -> bool {
        self.outages.iter().any(|&(s, l)| t >= s && t < s + l)
    }

    /// The base delay at offset `t`, given the configured one.
    pub fn delay_at(&self, base: Duration, t: Duration) -> Duration {
        self.delay_changes
            .iter()
            .filter(|&&(at, _)| at <= t)
            .max_by_key(|&&(at, _)| at)
            .map_or(base, |&(_, d)| d)
    }
}

/// A [`Link`] under a [`LinkSchedule`]. A packet sent during an outage is counted in
/// [`ScheduledLink::outage_drops`] (not in the link's loss counters); a delay change applies to
/// packets sent from then on, so a drop in delay lets later packets overtake earlier ones, as
/// a route change does.
pub struct ScheduledLink {
    link: Link,
    base_delay: Duration,
    schedule: LinkSchedule,
    start: Instant,
    outage_drops: u64,
}

impl ScheduledLink {
    /// Builds the link; `start` is the instant schedule offsets count from.
    pub fn new(
        cfg: &LinkConfig,
        schedule: LinkSchedule,
        start: Instant,
        seed: u64,
    ) -> Result<Self, ParseLossError> {
        // The inner link keeps loss, rate, jitter and reordering; the base delay is added here
        // so that it can change over time.
        let inner = LinkConfig {
            delay: Duration::ZERO,
            ..cfg.clone()
        };
        Ok(Self {
            link: Link::new(&inner, seed)?,
            base_delay: cfg.delay,
            schedule,
            start,
            outage_drops: 0,
        })
    }

    /// Offers a packet of `len` bytes at `now`; returns its arrival time, or `None` if it was
    /// lost, dropped by the queue or sent during an outage.
    pub fn send(&mut self, now: Instant, len: usize) -> Option<Instant> {
        let t = now.saturating_duration_since(self.start);
        if self.schedule.in_outage(t) {
            self.outage_drops += 1;
            return None;
        }
        let delay = self.schedule.delay_at(self.base_delay, t);
        self.link.send(now, len).map(|a| a + delay)
    }

    /// Whether offset `t` is in an outage.
    pub fn in_outage_at(&self, now: Instant) -> bool {
        self.schedule
            .in_outage(now.saturating_duration_since(self.start))
    }

    /// Packets dropped by outages.
    pub fn outage_drops(&self) -> u64 {
        self.outage_drops
    }

    /// The inner link's counters (loss model, queue).
    pub fn counters(&self) -> LinkCounters {
        self.link.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_and_delay_change() {
        let t0 = crate::test_util::t0();
        let ms = Duration::from_millis;
        let cfg = LinkConfig {
            delay: ms(10),
            ..LinkConfig::default()
        };
        let sched = LinkSchedule {
            outages: vec![(ms(100), ms(50))],
            delay_changes: vec![(ms(200), ms(40)), (ms(300), ms(5))],
        };
        let mut l = ScheduledLink::new(&cfg, sched, t0, 1).unwrap();
        assert_eq!(l.send(t0 + ms(99), 100), Some(t0 + ms(109)));
        assert_eq!(l.send(t0 + ms(100), 100), None);
        assert_eq!(l.send(t0 + ms(149), 100), None);
        assert_eq!(l.send(t0 + ms(150), 100), Some(t0 + ms(160)));
        assert_eq!(l.send(t0 + ms(250), 100), Some(t0 + ms(290)));
        assert_eq!(l.send(t0 + ms(300), 100), Some(t0 + ms(305)));
        assert_eq!(l.outage_drops(), 2);
        assert!(l.in_outage_at(t0 + ms(120)));
    }
}
