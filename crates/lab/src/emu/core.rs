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
    /// Mark ECN-capable packets CE when they find more than this many packets queued ahead
    /// (an AQM's marking threshold; only with a rate). `None`: never.
    pub ecn_mark_above: Option<usize>,
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
            ecn_mark_above: None,
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
            ecn_mark_above: self.ecn_mark_above,
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
    /// Packets the queue asked to mark CE (marked when ECN-capable).
    pub ce_marked: u64,
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
            ce_marked: l.ce_marked,
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

    /// A packet of `len` bytes arrives at `now`. `Ok` if it was queued, with whether the queue
    /// marks it CE ([`DirectionConfig::ecn_mark_above`]; the caller rewrites the packet, see
    /// [`mark_ce`]); `Err` gives the token back when it was dropped (the caller frees its
    /// buffer).
    pub fn push(&mut self, now: Instant, len: usize, token: T) -> Result<bool, (T, DropReason)> {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += len as u64;
        match self.link.send_marked(now, len) {
            None => Err((token, DropReason::Link)),
            Some((release, ce)) => {
                self.seq += 1;
                self.heap
                    .push(Reverse((release, self.seq, len as u32, token)));
                Ok(ce)
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

/// Sets the ECN field of the IP packet in Ethernet frame `frame` to CE (RFC 3168) if it is
/// ECN-capable (ECT(0), ECT(1)); IPv4's header checksum is updated (RFC 1624). Whether it
/// marked: a Not-ECT packet is left alone (a real AQM would drop it instead; the queue limit
/// does that here), as are frames that are not IPv4/IPv6 or too short.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    const ETH: usize = 14;
    if frame.len() < ETH + 20 {
        return false;
    }
    match (u16::from_be_bytes([frame[12], frame[13]]), frame[ETH] >> 4) {
        (0x0800, 4) => {
            let tos = frame[ETH + 1];
            if tos & 0b11 == 0 {
                return false;
            }
            let new = tos | 0b11;
            frame[ETH + 1] = new;
            // HC' = ~(~HC + ~m + m') over the 16-bit word holding the TOS byte.
            let old_word = u16::from_be_bytes([frame[ETH], tos]);
            let new_word = u16::from_be_bytes([frame[ETH], new]);
            let hc = u16::from_be_bytes([frame[ETH + 10], frame[ETH + 11]]);
            let mut sum = u32::from(!hc) + u32::from(!old_word) + u32::from(new_word);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            frame[ETH + 10..ETH + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        (0x86dd, 6) if frame.len() >= ETH + 40 => {
            // Traffic class: low 4 bits of byte 0, high 4 of byte 1; ECN = its low 2 bits.
            if frame[ETH + 1] & 0x30 == 0 {
                return false;
            }
            frame[ETH + 1] |= 0x30;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ones'-complement sum of the IPv4 header (0xffff when its checksum is right).
    fn ipv4_sum(h: &[u8]) -> u16 {
        let mut sum: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    fn ipv4_frame(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        // 192.0.2.1 -> 198.51.100.7, UDP, TTL 64, id 0x1c46, total length 84.
        let mut h = vec![
            0x45, tos, 0x00, 0x54, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0, 0, 192, 0, 2, 1, 198, 51,
            100, 7,
        ];
        let c = !ipv4_sum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(&[0u8; 64]);
        f
    }

    #[test]
    fn ce_marks_ect_ipv4_with_a_valid_checksum() {
        for ect in [0b10u8, 0b01] {
            let mut f = ipv4_frame((46 << 2) | ect);
            assert_eq!(ipv4_sum(&f[14..34]), 0xffff);
            assert!(mark_ce(&mut f));
            assert_eq!(f[15], (46 << 2) | 0b11, "DSCP kept, ECN = CE");
            assert_eq!(ipv4_sum(&f[14..34]), 0xffff, "checksum still right");
        }
        // Hand-checked: TOS 0x02 -> 0x03 lowers the checksum word by one.
        let mut f = ipv4_frame(0x02);
        let before = u16::from_be_bytes([f[24], f[25]]);
        mark_ce(&mut f);
        assert_eq!(u16::from_be_bytes([f[24], f[25]]), before - 1);
        // Not-ECT and CE already: unchanged.
        for tos in [0x00u8, 0xb8, 0x03] {
            let mut f = ipv4_frame(tos);
            let copy = f.clone();
            assert_eq!(mark_ce(&mut f), tos & 3 == 3);
            assert_eq!(f, copy);
        }
    }

    #[test]
    fn ce_marks_ect_ipv6_and_leaves_other_frames() {
        let mut f = vec![0u8; 14 + 40];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        // Version 6, traffic class 0xb9 (DSCP 46, ECT(1)), flow label 0x12345.
        f[14..18].copy_from_slice(&[0x6b, 0x91, 0x23, 0x45]);
        assert!(mark_ce(&mut f));
        assert_eq!(&f[14..18], &[0x6b, 0xb1, 0x23, 0x45], "traffic class 0xbb");
        let mut not_ect = f.clone();
        not_ect[15] = 0x81;
        assert!(!mark_ce(&mut not_ect));
        assert_eq!(not_ect[15], 0x81);
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!mark_ce(&mut arp));
        assert!(!mark_ce(&mut [0u8; 20]));
    }

    #[test]
    fn the_queue_marks_above_its_threshold() {
        let c = DirectionConfig {
            rate_bps: Some(8_000_000),
            ecn_mark_above: Some(2),
            ..cfg("none")
        };
        let mut p: Pipeline<u64> = Pipeline::new(&c, 16).unwrap();
        let t = Instant::now();
        // 1000 bytes take 1 ms at 8 Mbit/s: offered at once, packet i finds i ahead of it.
        let marks: Vec<bool> = (0..5).map(|i| p.push(t, 1000, i).unwrap()).collect();
        assert_eq!(marks, [false, false, false, true, true]);
        assert_eq!(p.counters().ce_marked, 2);
    }

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
