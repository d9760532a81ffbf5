//! The usual composition of elements: loss model -> bottleneck queue -> delay -> reordering.

use std::time::{Duration, Instant};

use crate::{Delay, LossModel, LossSpec, ParseLossError, QueueLimit, RateLimit, Reorder};

/// Parameters of a [`Link`].
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Loss process applied to every packet offered, in order.
    pub loss: LossSpec,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Jitter amplitude (uniform in ±jitter); FIFO order is kept.
    pub jitter: Duration,
    /// Bottleneck rate in bit/s; `None` = infinitely fast.
    pub rate_bps: Option<u64>,
    /// Queue in front of the bottleneck.
    pub queue: QueueLimit,
    /// Fraction of packets held back by `reorder_extra`.
    pub reorder_prob: f64,
    /// Extra delay of a reordered packet.
    pub reorder_extra: Duration,
    /// ECN marking (an AQM's simplest form): a packet that finds more than this many packets
    /// queued at the bottleneck is marked CE; `None` = no marking.
    pub ecn_mark_above: Option<usize>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            loss: LossSpec::None,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue: QueueLimit::Packets(1000),
            reorder_prob: 0.0,
            reorder_extra: Duration::ZERO,
            ecn_mark_above: None,
        }
    }
}

/// What a link did with the packets offered to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Packets offered.
    pub offered: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped by the full queue.
    pub queue_drops: u64,
    /// Marked CE at the bottleneck.
    pub ce_marked: u64,
}

/// A unidirectional link built from the elements of this crate.
pub struct Link {
    loss: Box<dyn LossModel>,
    rate: Option<RateLimit>,
    delay: Delay,
    reorder: Reorder,
    ecn_mark_above: Option<usize>,
    counters: LinkCounters,
}

impl Link {
    /// Builds the link; `seed` feeds every random element (each with its own salt).
    pub fn new(cfg: &LinkConfig, seed: u64) -> Result<Self, ParseLossError> {
        Ok(Self {
            loss: cfg.loss.build(seed)?,
            rate: cfg.rate_bps.map(|r| RateLimit::new(r, cfg.queue)),
            delay: Delay::new(cfg.delay, cfg.jitter, false, seed),
            reorder: Reorder::new(cfg.reorder_prob, cfg.reorder_extra, seed),
            ecn_mark_above: cfg.ecn_mark_above,
            counters: LinkCounters::default(),
        })
    }

    /// Offers a packet of `len` bytes at `now`; returns its arrival time at the far end, or `None`
    /// if it was lost or dropped.
    pub fn send(&mut self, now: Instant, len: usize) -> Option<Instant> {
        self.send_marked(now, len).map(|(arrival, _)| arrival)
    }

    /// [`Link::send`], with whether the packet arrives marked CE (see
    /// [`LinkConfig::ecn_mark_above`]).
    pub fn send_marked(&mut self, now: Instant, len: usize) -> Option<(Instant, bool)> {
        self.counters.offered += 1;
        if self.loss.lose() {
            self.counters.lost += 1;
            return None;
        }
        let mut ce = false;
        let sent = match &mut self.rate {
            Some(r) => match r.offer(now, len) {
                Some(t) => {
                    // The backlog now includes this packet: it found `backlog - 1` ahead.
                    ce = self
                        .ecn_mark_above
                        .is_some_and(|k| r.backlog_packets() > k + 1);
                    t
                }
                None => {
                    self.counters.queue_drops += 1;
                    return None;
                }
            },
            None => now,
        };
        self.counters.ce_marked += u64::from(ce);
        Some((self.delay.departure(sent) + self.reorder.extra_delay(), ce))
    }

    /// Changes the one-way propagation delay of packets offered from now on (see
    /// [`Delay::set_base`]).
    pub fn set_delay(&mut self, delay: Duration) {
        self.delay.set_base(delay);
    }

    /// Counters so far.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composes_loss_rate_and_delay() {
        let t0 = crate::test_util::t0();
        let cfg = LinkConfig {
            loss: "burst:len=1,every=4".parse().unwrap(),
            delay: Duration::from_millis(25),
            rate_bps: Some(8_000_000),
            queue: QueueLimit::Packets(2),
            ..LinkConfig::default()
        };
        let mut l = Link::new(&cfg, 1).unwrap();
        let out: Vec<_> = (0..4).map(|_| l.send(t0, 1000)).collect();
        assert_eq!(out[0], Some(t0 + Duration::from_millis(26)));
        assert_eq!(out[1], Some(t0 + Duration::from_millis(27)));
        assert_eq!(out[2], None, "queue of 2 is full");
        assert_eq!(out[3], None, "4th packet lost by the model");
        assert_eq!(
            l.counters(),
            LinkCounters {
                offered: 4,
                lost: 1,
                queue_drops: 1,
                ce_marked: 0,
            }
        );
    }

    #[test]
    fn marks_ce_above_the_threshold() {
        let t0 = crate::test_util::t0();
        let cfg = LinkConfig {
            rate_bps: Some(8_000_000),
            queue: QueueLimit::Packets(10),
            ecn_mark_above: Some(2),
            ..LinkConfig::default()
        };
        let mut l = Link::new(&cfg, 1).unwrap();
        // 1000 bytes take 1 ms: offered at once, packet i finds i packets ahead of it.
        let marks: Vec<bool> = (0..5).map(|_| l.send_marked(t0, 1000).unwrap().1).collect();
        assert_eq!(marks, [false, false, false, true, true]);
        assert_eq!(l.counters().ce_marked, 2);
        // Once the queue drained, no mark.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(l.send_marked(later, 1000).map(|x| x.1), Some(false));
    }
}
