//! Per-stream counters, cumulative since the stream was created. Cheap to copy; read them with
//! `Encoder::stats` / `Decoder::stats` for metrics and the simulator's report.

use std::time::Duration;

/// Encoder counters of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EncoderStats {
    /// Source packets tagged.
    pub sources: u64,
    /// Bytes of those sources.
    pub source_bytes: u64,
    /// Repairs emitted (all triggers).
    pub repairs: u64,
    /// Payload bytes of those repairs.
    pub repair_bytes: u64,
    /// Repairs the controller asked for.
    pub repairs_controller: u64,
    /// Time-driven repairs (sparse traffic).
    pub repairs_timer: u64,
    /// Repairs a block code emitted on its own.
    pub repairs_code: u64,
    /// Repairs skipped by overload control.
    pub overload_skips: u64,
    /// Symbol operations spent making repairs (window length per repair).
    pub symbol_ops: u64,
    /// Time-driven repairs not sent because the worker was overloaded (also counted in
    /// `overload_skips`).
    pub timer_skips: u64,
    /// Feedback messages used.
    pub feedback: u64,
    /// Feedback messages ignored (older than one already used).
    pub feedback_stale: u64,
    /// Packets the decoder's host dropped locally, as its feedback reported (taken out of the
    /// losses the controller sees).
    pub peer_local_drops: u64,
    /// Smoothed RTT from the timestamp echo, once measured.
    pub rtt: Option<Duration>,
    /// Repairs per source the controller currently aims at.
    pub rate: f64,
    /// Window / block size currently used by the code.
    pub window: u16,
    /// The largest window the code keeps (`--window`, or the scheme's largest).
    pub window_max: u16,
    /// Sources a deadline asks the code to keep: the deadline's length of the measured source
    /// rate (0 without a deadline or before the rate is known). Above `window_max`, answers to
    /// loss reports need the longer `history`; beyond what it can reach, repairs are proactive.
    pub deadline_window_wanted: u32,
    /// Sources the code keeps for answers to loss reports, when more than `window_max` (0
    /// otherwise): a round trip of sources and the window of an answer.
    pub history: u32,
    /// Repairs sent in answer to the decoder's loss reports (also in `repairs`).
    pub repairs_report: u64,
    /// Sources named by loss reports that got no repair: answered less than an RTT ago, out of
    /// the window, set against local drops, over the answer budget, or while the path queues.
    pub report_withheld: u64,
    /// RTT samples that showed a queue building on the path (each pauses loss-triggered
    /// repairs for an RTT).
    pub queue_signals: u64,
    /// Rate-driven and time-driven repairs not sent because the path queued (controllers that
    /// yield to a queue; see `Controller::yields_to_queue`).
    pub queue_skips: u64,
    /// Sources dropped before coding by queue management on the path's queueing delay
    /// ([`crate::EncoderConfig::aqm`]).
    pub aqm_drops: u64,
    /// ECN-capable sources marked CE instead of dropped by the same queue management.
    pub aqm_marks: u64,
    /// With `QueueYield::Overflow`: feedback periods after which the controller's own repairs
    /// stop for two RTTs (the path queued and the period lost more than the link's loss
    /// process explains). `QueueYield::Queue` follows `queue_signals` instead.
    pub queue_overflows: u64,
    /// Feedback messages that reported CE-marked packets (each is a congestion signal: it
    /// pauses loss-triggered repairs, and the period's losses do not raise the repair rate).
    pub ce_signals: u64,
}

/// Decoder counters of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Original source packets delivered.
    pub delivered: u64,
    /// Sources dropped as duplicates (including `late`).
    pub duplicates: u64,
    /// Originals that arrived after their recovery (dropped; part of `duplicates`).
    pub late: u64,
    /// Sources older than the history (delivery state unknown: dropped; part of `duplicates`).
    pub stale: u64,
    /// Repairs received.
    pub repairs: u64,
    /// Repairs refused by the code (malformed, wrong scheme, out of range).
    pub repairs_invalid: u64,
    /// Repairs not decoded because of overload control.
    pub overload_skips: u64,
    /// Sources recovered and delivered.
    pub recovered: u64,
    /// ESIs declared lost on the link.
    pub lost: u64,
    /// Lost ESIs that left the recovery horizon unrecovered.
    pub residual: u64,
    /// Feedback messages emitted.
    pub feedback: u64,
    /// Row operations done by the code.
    pub symbol_ops: u64,
    /// Sources held back for in-order release (originals and recovered ones).
    pub held: u64,
    /// Missing ESIs that in-order release gave up waiting for (deadline, out of every future
    /// repair's window, or too many held).
    pub order_skipped: u64,
    /// Sources that in-order release delivered past a hole because their flow was not
    /// suspected of a packet in it ([`crate::HoldScope::Flow`]).
    pub order_passed: u64,
    /// Times the stream was started afresh because its encoder restarted its ESIs (see
    /// [`crate::Decoder::handle_source`]).
    pub restarts: u64,
    /// Packets the host dropped before this decoder read them, as reported by the driver
    /// ([`crate::Decoder::add_local_drops`]) and passed on in feedback.
    pub local_drops: u64,
    /// Feedback messages that carried a loss report.
    pub loss_reports: u64,
    /// Packets that arrived marked CE ([`crate::Decoder::note_ce`]), passed on in feedback.
    pub ce_marks: u64,
    /// Of `repairs_invalid`, repairs refused because their window began behind what the code
    /// keeps, while its span could still grow ([`crate::DecoderConfig::repair_lag_limit`]).
    pub repairs_behind: u64,
    /// The repair lag the stream's code keeps, when it grew past the configured one (else 0).
    pub repair_lag: u64,
    /// Recoveries later than the recovery deadline ([`crate::DecoderConfig::recovery_deadline`])
    /// after the decoder knew of the loss, or whose notice time was no longer known (0 without
    /// a deadline). `recovered - recovered_late` were recovered in time.
    pub recovered_late: u64,
    /// How long recoveries took from the arrival of the first packet that showed the loss.
    pub recovery_delays: RecoveryDelays,
}

/// Buckets per doubling of [`RecoveryDelays`].
const DELAY_BUCKETS_PER_OCTAVE: f64 = 4.0;
/// Upper bound of the first bucket of [`RecoveryDelays`], microseconds.
const DELAY_FIRST_BOUND_US: f64 = 64.0;
/// Buckets of [`RecoveryDelays`]: up to 64 us, then a quarter octave each up to 3.5 s; the
/// last takes all above.
const DELAY_BUCKETS: usize = 64;

/// A histogram of recovery delays: buckets a quarter of an octave wide (19 %) from 64 us up,
/// plus the largest delay. Quantiles read as their bucket's upper bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryDelays {
    buckets: [u64; DELAY_BUCKETS],
    /// Recoveries whose loss had no notice time left (see the decoder's recovery clock).
    pub unknown: u64,
    /// The largest delay recorded.
    pub max: Duration,
}

impl Default for RecoveryDelays {
    fn default() -> Self {
        RecoveryDelays {
            buckets: [0; DELAY_BUCKETS],
            unknown: 0,
            max: Duration::ZERO,
        }
    }
}

impl RecoveryDelays {
    fn bucket(delay: Duration) -> usize {
        let us = delay.as_secs_f64() * 1e6;
        if us <= DELAY_FIRST_BOUND_US {
            return 0;
        }
        let i = (DELAY_BUCKETS_PER_OCTAVE * (us / DELAY_FIRST_BOUND_US).log2()).ceil();
        (i as usize).min(DELAY_BUCKETS - 1)
    }

    fn bound(i: usize) -> Duration {
        let us = DELAY_FIRST_BOUND_US * (i as f64 / DELAY_BUCKETS_PER_OCTAVE).exp2();
        Duration::from_nanos((us * 1e3).round() as u64)
    }

    /// Counts one recovery that took `delay`.
    pub fn record(&mut self, delay: Duration) {
        self.buckets[Self::bucket(delay)] += 1;
        self.max = self.max.max(delay);
    }

    /// Recoveries recorded with a delay.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Recoveries that took at most `limit` (counted by bucket: those in the bucket that holds
    /// `limit` count as within it).
    pub fn within(&self, limit: Duration) -> u64 {
        self.buckets[..=Self::bucket(limit)].iter().sum()
    }

    /// The delay below which a fraction `q` of the recoveries fall (the upper bound of its
    /// bucket, at most the largest delay), or `None` before any.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // The last bucket has no upper bound but the largest delay.
                let last = i == DELAY_BUCKETS - 1;
                return Some(if last {
                    self.max
                } else {
                    Self::bound(i).min(self.max)
                });
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_delay_quantiles_read_as_their_bucket_bound() {
        let ms = Duration::from_millis;
        let mut d = RecoveryDelays::default();
        assert_eq!(d.quantile(0.99), None);
        for _ in 0..98 {
            d.record(Duration::from_micros(50));
        }
        d.record(ms(3));
        d.record(ms(52));
        assert_eq!(d.count(), 100);
        // 50 us is in the first bucket (<= 64 us).
        assert_eq!(d.quantile(0.5), Some(Duration::from_micros(64)));
        // 3 ms: 64 us x 2^(23/4) = 3.444 ms is the bound of its bucket (2^(22/4) gives 2.896).
        let p99 = d.quantile(0.99).unwrap();
        assert!(p99 > Duration::from_micros(3444) && p99 < Duration::from_micros(3445));
        assert_eq!(d.quantile(1.0), Some(ms(52)));
        assert_eq!(d.max, ms(52));
        assert_eq!(d.within(ms(2)), 98);
        assert_eq!(d.within(ms(3)), 99);
        assert_eq!(d.within(ms(60)), 100);
        // Beyond the last bound everything lands in the last bucket.
        d.record(Duration::from_secs(100));
        assert_eq!(d.quantile(1.0), Some(Duration::from_secs(100)));
    }
}
