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
}
