//! The emulator's sans-IO core: one direction of a link. The decisions (loss, rate and drop-tail
//! queue, delay with jitter, optional reordering) are `hirt_channel::Link`'s, the very elements the
//! simulator uses; this module adds the scheduling the real emulator needs: packets held until
//! their release time, in release order, with counters. No clock reads and no unseeded randomness:
//! for a given arrival order and seed the decisions are identical, which is what makes the
//! "without FEC" and "with FEC" runs of a lab face the same loss process, and what lets the tests
//! check the model in virtual time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use hirt_channel::{Link, LinkConfig, LossSpec};

pub use hirt_channel::QueueLimit;

/// Per-direction link parameters.
#[derive(Debug, Clone)]
pub struct DirectionConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Delay varies uniformly in `delay ± jitter`; packets never overtake each other because of
    /// it (a packet is never released before the previous one).
    pub jitter: Duration,
    /// Link rate in bits per second; `None` is unlimited (no queue).
    pub rate_bps: Option<u64>,
    /// Drop-tail limit of the queue (used only with a rate).
    pub queue: QueueLimit,
    /// Loss model in the shared syntax (`none`, `uniform:P`, `ge:p=..,r=..`, `burst:..`,
    /// `trace:FILE`).
    pub loss: String,
    /// Probability that a packet is held back by `reorder_extra` (and so overtaken).
    pub reorder: f64,
    /// Extra delay of a reordered packet.
    pub reorder_extra: Duration,
    /// Seed of this direction's randomness (loss, jitter, reordering).
    pub seed: u64,
}

impl Default for DirectionConfig {
    fn default() -> Self {
        DirectionConfig {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue: QueueLimit::Packets(1000),
            loss: "none".into(),
            reorder: 0.0,
            reorder_extra: Duration::from_millis(1),
            seed: 1,
        }
    }
}

impl DirectionConfig {
    /// The equivalent `hirt_channel` link configuration.
    pub fn link_config(&self) -> anyhow::Result<LinkConfig> {
        let loss: LossSpec = self
            .loss
            .parse()
            .map_err(|e| anyhow::anyhow!("loss model {:?}: {e}", self.loss))?;
        Ok(LinkConfig {
            loss,
            delay: self.delay,
            jitter: self.jitter,
            rate_bps: self.rate_bps.filter(|r| *r > 0),
            queue: self.queue,
            reorder_prob: self.reorder.clamp(0.0, 1.0),
            reorder_extra: self.reorder_extra,
            ecn_mark_above: None,
        })
    }
}

/// Why a packet was dropped by the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The loss model decided it, or the drop-tail queue was full.
    Link,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Packets that arrived.
    pub rx_packets: u64,
    /// Bytes that arrived.
    pub rx_bytes: u64,
    /// Packets dropped by the loss model.
    pub lost: u64,
    /// Packets dropped by the full queue.
    pub queue_drops: u64,
    /// Packets released (handed to the caller for transmission).
    pub released: u64,
    /// Bytes released.
    pub released_bytes: u64,
}

/// One direction of the emulated link. `T` is the caller's handle on the packet's bytes (a
/// buffer slot index in the emulator, a sequence number in tests).
pub struct Pipeline<T> {
    link: Link,
    /// Packets waiting for their release time; ties keep arrival order (`seq`).
    heap: BinaryHeap<Reverse<(Instant, u64, u32, T)>>,
    seq: u64,
    counters: Counters,
}

impl<T: Copy + Ord> Pipeline<T> {
    /// Builds the pipeline; `capacity` preallocates the queue (packets in flight at once), so
    /// that the hot path does not allocate.
    pub fn new(cfg: &DirectionConfig, capacity: usize) -> anyhow::Result<Self> {
        let link = Link::new(&cfg.link_config()?, cfg.seed)
            .map_err(|e| anyhow::anyhow!("loss model {:?}: {e}", cfg.loss))?;
        Ok(Pipeline {
            link,
            heap: BinaryHeap::with_capacity(capacity),
            seq: 0,
            counters: Counters::default(),
        })
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        let l = self.link.counters();
        Counters {
            lost: l.lost,
            queue_drops: l.queue_drops,
            ..self.counters
        }
    }

    /// Changes the one-way delay of packets that arrive from now on (a delay inversion of two
    /// paths); packets inside keep their release times.
    pub fn set_delay(&mut self, delay: Duration) {
        self.link.set_delay(delay);
    }

    /// Packets currently inside.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no packet is inside.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// A packet of `len` bytes arrives at `now`. `Ok` if it was queued; `Err` gives the token back
    /// when it was dropped (the caller frees its buffer).
    pub fn push(&mut self, now: Instant, len: usize, token: T) -> Result<(), (T, DropReason)> {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += len as u64;
        match self.link.send(now, len) {
            None => Err((token, DropReason::Link)),
            Some(release) => {
                self.seq += 1;
                self.heap
                    .push(Reverse((release, self.seq, len as u32, token)));
                Ok(())
            }
        }
    }

    /// The next packet due at `now`, if any, with its length.
    pub fn pop_due(&mut self, now: Instant) -> Option<(T, usize)> {
        let Reverse((release, _, _, _)) = self.heap.peek()?;
        if *release > now {
            return None;
        }
        let Reverse((_, _, len, token)) = self.heap.pop()?;
        self.counters.released += 1;
        self.counters.released_bytes += u64::from(len);
        Some((token, len as usize))
    }

    /// When the next packet becomes due (the caller sleeps until then or the next arrival).
    pub fn next_release(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, ..))| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(loss: &str) -> DirectionConfig {
        DirectionConfig {
            loss: loss.into(),
            seed: 7,
            ..Default::default()
        }
    }

    /// Runs `n` packets at `pps` through a pipeline in virtual time; returns the delivered
    /// sequence numbers with their one-way delays, and the pipeline.
    fn drive(
        c: &DirectionConfig,
        n: u64,
        pps: u64,
        len: usize,
    ) -> (Vec<(u64, Duration)>, Pipeline<u64>) {
        let mut p = Pipeline::new(c, 1 << 16).unwrap();
        let t0 = Instant::now();
        let gap = Duration::from_nanos(1_000_000_000 / pps);
        let mut out = Vec::new();
        let mut sent_at = Vec::with_capacity(n as usize);
        for i in 0..n {
            let now = t0 + gap * i as u32;
            sent_at.push(now);
            // Release everything due before this arrival, each at its own release time.
            while let Some(t) = p.next_release().filter(|t| *t <= now) {
                while let Some((seq, _)) = p.pop_due(t) {
                    out.push((seq, t - sent_at[seq as usize]));
                }
            }
            let _ = p.push(now, len, i);
        }
        let mut now = t0 + gap * n as u32;
        while let Some(t) = p.next_release() {
            now = now.max(t);
            while let Some((seq, _)) = p.pop_due(now) {
                out.push((seq, t - sent_at[seq as usize]));
            }
        }
        (out, p)
    }

    fn burst_lengths(delivered: &[(u64, Duration)], n: u64) -> Vec<u64> {
        let mut got = vec![false; n as usize];
        for (s, _) in delivered {
            got[*s as usize] = true;
        }
        let mut bursts = Vec::new();
        let mut run = 0;
        for g in got {
            if g {
                if run > 0 {
                    bursts.push(run);
                }
                run = 0;
            } else {
                run += 1;
            }
        }
        if run > 0 {
            bursts.push(run);
        }
        bursts
    }

    fn within(measured: f64, expected: f64, tol: f64) -> bool {
        (measured - expected).abs() <= tol * expected
    }

    #[test]
    fn uniform_loss_rate_matches_within_5pct() {
        let n = 1_000_000;
        let (d, p) = drive(&cfg("uniform:0.01"), n, 100_000, 100);
        let rate = 1.0 - d.len() as f64 / n as f64;
        assert!(within(rate, 0.01, 0.05), "loss {rate}");
        assert_eq!(p.counters().lost, n - d.len() as u64);
    }

    #[test]
    fn gilbert_elliott_rate_and_bursts_match_within_5pct() {
        // Starlink approximation (HIRT §VIII): p = 0.00151, r = 1/3, lossy bad state.
        let (p_, r) = (0.00151, 1.0 / 3.0);
        let n = 3_000_000;
        let (d, _) = drive(&cfg(&format!("ge:p={p_},r={r}")), n, 100_000, 100);
        let rate = 1.0 - d.len() as f64 / n as f64;
        assert!(within(rate, p_ / (p_ + r), 0.05), "loss {rate}");
        let bursts = burst_lengths(&d, n);
        let mean = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
        assert!(within(mean, 1.0 / r, 0.05), "mean burst {mean}");
    }

    #[test]
    fn fixed_bursts_have_the_configured_length() {
        let n = 100_000;
        let (d, _) = drive(&cfg("burst:len=9,every=1000"), n, 100_000, 100);
        let bursts = burst_lengths(&d, n);
        assert_eq!(bursts.len(), 100);
        assert!(bursts.iter().all(|b| *b == 9), "{bursts:?}");
    }

    #[test]
    fn delay_and_jitter_match_and_never_reorder() {
        let c = DirectionConfig {
            delay: Duration::from_millis(25),
            jitter: Duration::from_millis(2),
            ..cfg("none")
        };
        // At 10 kpps, jitter would reorder; the pipeline must not.
        let (d, _) = drive(&c, 200_000, 10_000, 1280);
        assert_eq!(d.len(), 200_000);
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0), "reordered");
        // At 100 pps (gaps wider than the jitter) the delay distribution is the configured one.
        let (d, p) = drive(&c, 20_000, 100, 1280);
        let mean = d.iter().map(|x| x.1.as_secs_f64()).sum::<f64>() / d.len() as f64;
        assert!(within(mean, 0.025, 0.05), "mean delay {mean}");
        let min = d.iter().map(|x| x.1).min().unwrap();
        let max = d.iter().map(|x| x.1).max().unwrap();
        assert!(
            min >= Duration::from_millis(23) && max <= Duration::from_millis(27),
            "{min:?} {max:?}"
        );
        assert!(max - min > Duration::from_millis(3), "jitter not applied");
        assert_eq!(p.counters().released, 20_000);
    }

    #[test]
    fn rate_limit_serializes_and_drops_at_the_tail() {
        // 10 Mbit/s, 1250-byte packets = 1 ms each; offered 2000 pps = twice the rate.
        let c = DirectionConfig {
            rate_bps: Some(10_000_000),
            queue: QueueLimit::Packets(50),
            ..cfg("none")
        };
        let n = 20_000;
        let (d, p) = drive(&c, n, 2_000, 1250);
        let delivered = d.len() as f64 / n as f64;
        assert!(within(delivered, 0.5, 0.05), "delivered {delivered}");
        assert!(p.counters().queue_drops > 0);
        // Queueing delay is bounded by the queue: at most 51 serialization times.
        assert!(d.iter().all(|x| x.1 <= Duration::from_millis(52)));
        // Bytes limit too.
        let c = DirectionConfig {
            queue: QueueLimit::Bytes(12_500),
            ..c
        };
        let (d, _) = drive(&c, n, 2_000, 1250);
        assert!(d.iter().all(|x| x.1 <= Duration::from_millis(11)));
    }

    #[test]
    fn reordering_only_when_asked() {
        // 1% of packets held 0.5 ms at 10 kpps: each is overtaken by about 5 packets.
        let c = DirectionConfig {
            reorder: 0.01,
            reorder_extra: Duration::from_micros(500),
            ..cfg("none")
        };
        let (d, _) = drive(&c, 100_000, 10_000, 100);
        assert_eq!(d.len(), 100_000);
        let mut max = 0;
        let mut late = 0.0;
        for (s, _) in &d {
            if *s < max {
                late += 1.0;
            }
            max = max.max(*s);
        }
        assert!(within(late, 1000.0, 0.15), "{late}");
    }

    #[test]
    fn same_seed_same_decisions() {
        let c = cfg("ge:p=0.01,r=0.3");
        let (a, _) = drive(&c, 50_000, 10_000, 100);
        let (b, _) = drive(&c, 50_000, 10_000, 100);
        assert_eq!(
            a.iter().map(|x| x.0).collect::<Vec<_>>(),
            b.iter().map(|x| x.0).collect::<Vec<_>>()
        );
        let c2 = DirectionConfig { seed: 8, ..c };
        let (e, _) = drive(&c2, 50_000, 10_000, 100);
        assert_ne!(a.len(), 0);
        assert_ne!(
            a.iter().map(|x| x.0).collect::<Vec<_>>(),
            e.iter().map(|x| x.0).collect::<Vec<_>>()
        );
    }
}
