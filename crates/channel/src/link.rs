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
}

/// A unidirectional link built from the elements of this crate.
pub struct Link {
    loss: Box<dyn LossModel>,
    rate: Option<RateLimit>,
    delay: Delay,
    reorder: Reorder,
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
            counters: LinkCounters::default(),
        })
    }

    /// Offers a packet of `len` bytes at `now`; returns its arrival time at the far end, or `None`
    /// if it was lost or dropped.
    pub fn send(&mut self, now: Instant, len: usize) -> Option<Instant> {
        self.counters.offered += 1;
        if self.loss.lose() {
            self.counters.lost += 1;
            return None;
        }
        let sent = match &mut self.rate {
            Some(r) => match r.offer(now, len) {
                Some(t) => t,
                None => {
                    self.counters.queue_drops += 1;
                    return None;
                }
            },
            None => now,
        };
        Some(self.delay.departure(sent) + self.reorder.extra_delay())
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
                queue_drops: 1
            }
        );
    }
}
