//! The tunnel decoder: delivers originals at once (or, with in-order release, after the sources
//! before them), recovers lost sources the moment the code can, never delivers a source twice,
//! and reports what it saw in periodic feedback.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hirt_fec::DecodeError;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::codec::DecCodec;
use crate::config::{Deadline, DecoderConfig, HoldScope, SchemeConfig, MAX_WINDOW};
use crate::encoder::SourceNeed;
use crate::feedback::{Feedback, TimestampEcho};
use crate::loss::{Arrival, LossTracker};
use crate::order::{Held, Place, Reorder};
use crate::overload::Budget;
use crate::recovery_clock::RecoveryClock;
use crate::stats::DecoderStats;
use crate::streams::StreamMap;
use crate::timestamp::ArrivalQueue;
use crate::{Esi, RepairInfo, StreamId};

/// What to do with a received source packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it now.
    Deliver,
    /// In-order release keeps it (a source before it is missing): it comes out of
    /// [`Decoder::poll_recovered`] later, with `original` set. Do not deliver it now.
    Hold,
    /// Drop it: already delivered (as an original or recovered), or too old to tell.
    Duplicate,
}

/// A source packet to deliver after the input that released it: a recovered source, or with
/// in-order release an original that was held ([`Verdict::Hold`]). Exact bytes, borrowed from
/// the decoder until the next `poll_recovered`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered<'a> {
    /// Its stream.
    pub stream: StreamId,
    /// Its ESI.
    pub esi: Esi,
    /// The original packet bytes.
    pub data: &'a [u8],
    /// A held original (true), not a recovered source.
    pub original: bool,
    /// For a held original: the `meta` given to [`Decoder::handle_source_with`]; else 0.
    pub meta: u32,
}

#[derive(Debug)]
struct RecBuf {
    stream: StreamId,
    esi: Esi,
    original: bool,
    meta: u32,
    data: Vec<u8>,
}

/// A repair narrower than the widest recent one shrinks the decoder's idea of how far back
/// repairs reach by at most this fraction of it (see `Decoder::handle_repair`).
const REPAIR_SPAN_DECAY: u32 = 64;
/// Most recycled buffers kept (in-order release holds up to a few hundred at a time).
const POOL_MAX: usize = 512;
/// Recycled buffers kept once the output is idle: past it, each feedback the decoder sends
/// gives back half of the excess, so that a burst of recoveries after an outage does not pin
/// hundreds of buffers for the rest of the run.
const POOL_KEEP: usize = 32;

/// Sources in a row refused as duplicates or too old after which the decoder takes the stream's
/// encoder for restarted (its ESIs began again from a value the decoder has already seen, e.g.
/// a restarted peer) and starts the stream afresh. A network that duplicates packets still
/// delivers new ones in between; with authentication on, nobody else can send them.
const RESTART_RUN: u32 = 32;

/// An encoder numbers its sources from 0. A source 0 refused as a duplicate or as too old while
/// the stream is more than this many ESIs past it is a restarted encoder's first packet: no
/// network delays a duplicate by that many packets (1 s at 1,000 pps), and a late original is
/// taken (it was lost or recovered, not received). The stream starts afresh at once and the
/// packet is delivered, instead of after [`RESTART_RUN`] refused ones.
const RESTART_FIRST_ESI_BEHIND: i64 = 1024;

/// With loss reports on, a missing ESI is declared lost once a later one came this fraction of
/// the measured answer delay (about a round trip) ago, even before `reorder_tolerance` later
/// ones came: RACK's reordering window (RFC 8985, a quarter of the minimum RTT). At low packet
/// rates, waiting for three later packets would cost more than the round trip the report
/// takes (1.5 ms at 2,000 pps on a 0.1 ms path).
const REORDER_WINDOW_DIVISOR: u32 = 4;

/// How long a decoder that learns its reach keeps a named loss in its span before it measured
/// how long answers take: a round trip of up to 600 ms and a deadline of two.
const ASKED_HOLD_UNMEASURED: Duration = Duration::from_millis(1500);

#[derive(Debug)]
struct Stream {
    id: StreamId,
    codec: DecCodec,
    tracker: LossTracker,
    budget: Budget,
    stats: DecoderStats,
    seq: u16,
    period_start: Option<Instant>,
    echo: Option<(u32, Instant)>,
    /// The queue the peer's repairs met on their way (their send timestamps).
    arrival: ArrivalQueue,
    due: bool,
    order: Option<Reorder>,
    /// Sources refused in a row (duplicate, late or stale).
    refused_run: u32,
    /// Local drops to report in the next feedback.
    local_drops: u32,
    /// CE-marked arrivals to report in the next feedback.
    ce_marks: u8,
    /// Loss reports: when the last one went out, the losses declared by then, whether it named
    /// something (then it is repeated while that stays missing), and the span of the latest
    /// repair (what the encoder's window covers: older losses are not reported).
    report_at: Option<Instant>,
    reported_lost: u64,
    report_open: bool,
    repair_span: u32,
    /// The repair lag its code keeps: `repair_lag`, or more once repairs came later than that.
    repair_lag: u32,
    /// Time from the report that first named a loss to its recovery, smoothed: about a round
    /// trip plus the encoder's pacing. A report that goes unanswered is repeated after twice
    /// that (see [`Decoder::report_repeat`]). Sampled on the newest ESI of a report when no
    /// earlier report named it (`answer_probe`); `newest_named` is the newest ESI any report
    /// named.
    answer_delay: Option<Duration>,
    answer_probe: Option<(Esi, Instant)>,
    newest_named: Option<Esi>,
    /// The oldest loss a report named, and when: while its answers may still come, a decoder
    /// that learns its reach keeps it in its span (see [`Decoder::keep_asked_in_reach`]).
    asked: Option<(Esi, Instant)>,
    /// The newest ESI when a gap below it was first seen, and when (see
    /// `REORDER_WINDOW_DIVISOR`).
    gap_seen: Option<(Esi, Instant)>,
    /// When each missing source was first known to be missing (for the recovery delays).
    clock: RecoveryClock,
    /// The path's RTT as the driver measured it ([`Decoder::set_rtt`]).
    rtt: Option<Duration>,
}

/// Buffer memory of one stream of a [`Decoder`] ([`Decoder::buffer_bytes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderBuffers {
    /// The code's source symbol columns (sliding-window codes; each keeps the capacity of the
    /// largest symbol it held).
    pub columns: usize,
    /// The code's equation rows (live ones and those kept free for reuse).
    pub rows: usize,
    /// Packets held by in-order release.
    pub held: usize,
}

/// Recovered-packet output, split from the streams for disjoint borrows.
#[derive(Debug, Default)]
struct Out {
    queue: VecDeque<RecBuf>,
    pool: Vec<Vec<u8>>,
}

impl Out {
    fn copy(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        buf
    }

    /// Gives back half of the recycled buffers past [`POOL_KEEP`] while nothing waits for
    /// delivery.
    fn trim_pool(&mut self) {
        if self.queue.is_empty() && self.pool.len() > POOL_KEEP {
            let excess = self.pool.len() - POOL_KEEP;
            self.pool.truncate(self.pool.len() - excess.div_ceil(2));
        }
    }

    fn push(&mut self, stream: StreamId, esi: Esi, data: &[u8]) {
        let data = self.copy(data);
        self.queue.push_back(RecBuf {
            stream,
            esi,
            original: false,
            meta: 0,
            data,
        });
    }

    fn push_held(&mut self, stream: StreamId, h: Held) {
        self.queue.push_back(RecBuf {
            stream,
            esi: h.esi,
            original: h.original,
            meta: h.meta,
            data: h.data,
        });
    }

    /// A recovered source: delivered now, or held by in-order release.
    fn recovered(
        &mut self,
        order: &mut Option<Reorder>,
        stats: &mut DecoderStats,
        stream: StreamId,
        esi: Esi,
        data: &[u8],
        now: Instant,
    ) {
        let Some(o) = order else {
            return self.push(stream, esi, data);
        };
        self.make_room(o, stream);
        match o.place(esi) {
            Place::Now | Place::Pass => {
                self.push(stream, esi, data);
                o.release(&mut |h| self.push_held(stream, h));
            }
            Place::Hold => {
                stats.held += 1;
                let data = self.copy(data);
                o.hold(Held {
                    esi,
                    at: now,
                    original: false,
                    passed: false,
                    meta: 0,
                    data,
                });
            }
        }
    }

    /// Gives the first hole up when the release buffer is full.
    fn make_room(&mut self, o: &mut Reorder, stream: StreamId) {
        if o.full() {
            o.skip_hole(&mut |h| self.push_held(stream, h));
        }
    }
}

/// What makes a recovery late: the recovery deadline and the RTT it may be relative to (the
/// RTT the encoder of the opposite direction measured, or else the answer delay of the
/// decoder's loss reports), resolved only when something is recovered.
#[derive(Clone, Copy)]
struct LateAfter {
    deadline: Option<Deadline>,
    rtt: Option<Duration>,
}

impl LateAfter {
    fn of(cfg: &DecoderConfig, s: &Stream) -> Self {
        LateAfter {
            deadline: cfg.recovery_deadline,
            rtt: s.rtt.or(s.answer_delay),
        }
    }

    fn resolve(self) -> Option<Duration> {
        self.deadline.map(|d| d.resolve(self.rtt))
    }
}

/// What the caller knows of a source's inner packet ([`Decoder::handle_source_in_flow`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourceFlow {
    /// A hash of its 5-tuple (0: not known, held behind any hole).
    pub hash: u64,
    /// Whether a later packet of its flow makes its loss good.
    pub need: SourceNeed,
}

impl From<u64> for SourceFlow {
    fn from(hash: u64) -> Self {
        SourceFlow {
            hash,
            need: SourceNeed::Timely,
        }
    }
}

/// The decoder half of the tunnel. Sans-IO: see the crate docs for the call order.
#[derive(Debug)]
pub struct Decoder {
    cfg: DecoderConfig,
    streams: Vec<Stream>,
    index: StreamMap,
    rng: ChaCha8Rng,
    out: Out,
    current: Option<RecBuf>,
    due: VecDeque<usize>,
    untracked: u64,
    /// Skip probability from the last injected CPU load (applied to new streams too).
    load_skip: f64,
}

impl Decoder {
    /// A new decoder; `seed` drives overload-control skips.
    pub fn new(cfg: DecoderConfig, seed: u64) -> Self {
        Decoder {
            cfg,
            streams: Vec::new(),
            index: StreamMap::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            out: Out::default(),
            current: None,
            due: VecDeque::new(),
            untracked: 0,
            load_skip: 0.0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The stream's index, creating it unless `max_streams` are tracked already.
    fn stream_index(&mut self, id: StreamId) -> Option<usize> {
        if let Some(i) = self.index.get(id) {
            return Some(i);
        }
        if self.streams.len() >= self.cfg.max_streams {
            return None;
        }
        let mut budget = Budget::new(self.cfg.work_budget, self.cfg.budget_period);
        budget.set_load_skip(self.load_skip);
        self.streams.push(Stream {
            id,
            codec: Self::new_codec(&self.cfg, self.cfg.repair_lag),
            tracker: Self::new_tracker(&self.cfg, self.cfg.repair_lag),
            budget,
            stats: DecoderStats::default(),
            seq: 0,
            period_start: None,
            echo: None,
            arrival: ArrivalQueue::default(),
            due: false,
            order: Self::new_order(&self.cfg),
            refused_run: 0,
            local_drops: 0,
            ce_marks: 0,
            report_at: None,
            reported_lost: 0,
            report_open: false,
            repair_span: 0,
            repair_lag: self.cfg.repair_lag,
            answer_delay: None,
            answer_probe: None,
            newest_named: None,
            asked: None,
            gap_seen: None,
            clock: RecoveryClock::default(),
            rtt: None,
        });
        let i = self.streams.len() - 1;
        self.index.insert(id, i);
        Some(i)
    }

    /// The loss history of a stream whose code keeps repair lag `lag` (it grows with the
    /// code's span: `LossTracker::grow_to_horizon`).
    fn new_tracker(cfg: &DecoderConfig, lag: u32) -> LossTracker {
        let horizon = Self::horizon_for_lag(cfg, lag);
        LossTracker::new(cfg.history, horizon, cfg.reorder_tolerance, cfg.loss_window)
    }

    /// The code of a stream that keeps repair lag `repair_lag`, taking repairs as wide as
    /// [`DecoderConfig::max_repair_nss`].
    fn new_codec(cfg: &DecoderConfig, repair_lag: u32) -> DecCodec {
        let mut codec = DecCodec::new(&cfg.scheme, repair_lag);
        if cfg.max_repair_nss > 0 {
            codec.accept_repairs_up_to(cfg.max_repair_nss);
        }
        codec
    }

    /// How far back a stream whose code keeps repair lag `lag` may still recover a source: the
    /// configured horizon, or the reach of a span grown past the configured lag.
    fn horizon_for_lag(cfg: &DecoderConfig, lag: u32) -> u32 {
        if lag > cfg.repair_lag {
            cfg.scheme
                .recovery_horizon_with_repair_lag(lag)
                .max(cfg.horizon)
        } else {
            cfg.horizon
        }
    }

    fn new_order(cfg: &DecoderConfig) -> Option<Reorder> {
        cfg.in_order
            .map(|hold| Reorder::new(hold, cfg.in_order_max))
    }

    /// Starts stream `s` afresh (its encoder restarted): what in-order release held goes out in
    /// order, the code and the loss history are new. Statistics and feedback numbering go on.
    fn restart(cfg: &DecoderConfig, s: &mut Stream, out: &mut Out) {
        if let Some(o) = &mut s.order {
            let stream = s.id;
            while o.deadline().is_some() {
                o.skip_hole(&mut |h| out.push_held(stream, h));
            }
            s.stats.order_skipped = o.skipped;
        }
        s.codec = Self::new_codec(cfg, s.repair_lag);
        s.tracker = Self::new_tracker(cfg, s.repair_lag);
        let counts = s.order.as_ref().map(|o| (o.skipped, o.passed));
        s.order = Self::new_order(cfg);
        if let (Some(o), Some((skipped, passed))) = (&mut s.order, counts) {
            (o.skipped, o.passed) = (skipped, passed);
        }
        s.refused_run = 0;
        s.newest_named = None;
        s.answer_probe = None;
        s.asked = None;
        s.gap_seen = None;
        s.clock.reset();
        s.stats.restarts += 1;
    }

    /// Takes a source packet tagged (`stream`, `esi`). On [`Verdict::Deliver`] the caller
    /// delivers `packet` at once; then drain [`Decoder::poll_recovered`] (it may have completed
    /// a recovery, or released held sources) and [`Decoder::poll_feedback`].
    ///
    /// The stream's encoder is taken for restarted (its ESIs began again) and the stream starts
    /// afresh with this source (`restarts` in the stats) when source 0 is refused as a duplicate
    /// or as older than the history more than 1024 ESIs behind the newest, or after 32 sources
    /// in a row so refused: a peer that restarts loses nothing when its first packet arrives,
    /// a few dozen packets otherwise, never its stream.
    pub fn handle_source(
        &mut self,
        stream: StreamId,
        esi: Esi,
        packet: &[u8],
        now: Instant,
    ) -> Verdict {
        self.handle_source_with(stream, esi, packet, 0, now)
    }

    /// [`Decoder::handle_source`] with a caller's value `meta` that comes back with the packet
    /// if in-order release holds it (e.g. fields of the packet the symbol does not cover).
    pub fn handle_source_with(
        &mut self,
        stream: StreamId,
        esi: Esi,
        packet: &[u8],
        meta: u32,
        now: Instant,
    ) -> Verdict {
        self.handle_source_in_flow(stream, esi, packet, meta, 0, now)
    }

    /// [`Decoder::handle_source_with`] for a source of flow `flow` (a hash of its 5-tuple, or
    /// a [`SourceFlow`]). With [`HoldScope::Flow`], in-order release holds it behind a hole only
    /// when its flow is suspected of a packet in the hole (see the `order` module). A
    /// [`SourceNeed::Superseded`] source (a pure TCP ACK) never waits behind a hole.
    pub fn handle_source_in_flow(
        &mut self,
        stream: StreamId,
        esi: Esi,
        packet: &[u8],
        meta: u32,
        flow: impl Into<SourceFlow>,
        now: Instant,
    ) -> Verdict {
        let SourceFlow { hash, need } = flow.into();
        let flow = match self.cfg.in_order_scope {
            HoldScope::Flow => hash,
            HoldScope::Stream => 0,
        };
        let passes_holes = need == SourceNeed::Superseded;
        let Some(i) = self.stream_index(stream) else {
            self.untracked += 1;
            return Verdict::Deliver;
        };
        let s = &mut self.streams[i];
        s.period_start.get_or_insert(now);
        let out = &mut self.out;
        if let Some(o) = &mut s.order {
            o.expire(now, &mut |h| out.push_held(stream, h));
        }
        let late_after = LateAfter::of(&self.cfg, s);
        let mut arrival = s.tracker.on_source(esi);
        // A late original of a recovered packet is in the encoder's current ESI space (it was
        // recovered from this encoder's repairs): proof the stream is in sync, not restarted.
        // Paths with different delays deliver such originals in long runs.
        if matches!(arrival, Arrival::New | Arrival::Late) {
            s.refused_run = 0;
        } else {
            s.refused_run += 1;
            let first_again = esi == 0 && s.tracker.behind_top(esi) > RESTART_FIRST_ESI_BEHIND;
            if s.refused_run >= RESTART_RUN || first_again {
                Self::restart(&self.cfg, s, out);
                s.period_start = Some(now);
                arrival = s.tracker.on_source(esi);
            }
        }
        let verdict = match arrival {
            Arrival::New => {
                s.stats.delivered += 1;
                s.clock.on_packet(esi.wrapping_add(1), Some(esi), now);
                let Stream {
                    codec,
                    tracker,
                    stats,
                    budget,
                    order,
                    clock,
                    ..
                } = &mut *s;
                let verdict = match order {
                    None => Verdict::Deliver,
                    Some(o) => {
                        out.make_room(o, stream);
                        let place = o.place_in_flow(esi, flow, passes_holes, now);
                        if place == Place::Now && out.queue.is_empty() {
                            o.release(&mut |h| out.push_held(stream, h));
                            Verdict::Deliver
                        } else if place == Place::Pass && out.queue.is_empty() {
                            Verdict::Deliver
                        } else {
                            // Behind a hole, or behind packets released just now that the
                            // caller will only see after this one: keep it.
                            stats.held += 1;
                            let h = Held {
                                esi,
                                at: now,
                                original: true,
                                passed: false,
                                meta,
                                data: out.copy(packet),
                            };
                            match place {
                                Place::Now => {
                                    out.push_held(stream, h);
                                    o.release(&mut |h| out.push_held(stream, h));
                                }
                                Place::Pass => out.push_held(stream, h),
                                Place::Hold => o.hold(h),
                            }
                            Verdict::Hold
                        }
                    }
                };
                let before = codec.symbol_ops();
                // The code's own verdict does not matter: the tracker is the delivered-set.
                // Sources always enter the code (overload control only skips repairs).
                let _ = codec.on_source(esi, packet, &mut |e, data| {
                    if tracker.on_recovered(e) {
                        stats.recovered += 1;
                        Self::time_recovery(clock, stats, e, late_after, now);
                        out.recovered(order, stats, stream, e, data, now);
                    }
                });
                let ops = codec.symbol_ops().saturating_sub(before);
                budget.spend(ops);
                stats.symbol_ops += ops;
                verdict
            }
            Arrival::Duplicate => {
                s.stats.duplicates += 1;
                Verdict::Duplicate
            }
            Arrival::Late => {
                s.stats.duplicates += 1;
                s.stats.late += 1;
                Verdict::Duplicate
            }
            Arrival::Stale => {
                s.stats.duplicates += 1;
                s.stats.stale += 1;
                Verdict::Duplicate
            }
        };
        self.after_input(i, now);
        verdict
    }

    /// Takes a repair packet of `stream` with its code parameters, the encoder's send
    /// `timestamp` (echoed in feedback) and payload. Then drain [`Decoder::poll_recovered`] and
    /// [`Decoder::poll_feedback`]. A refused repair leaves the state unchanged but is counted.
    /// A repair skipped by overload control returns `Ok`.
    pub fn handle_repair(
        &mut self,
        stream: StreamId,
        info: &RepairInfo,
        timestamp: u32,
        payload: &[u8],
        now: Instant,
    ) -> Result<(), DecodeError> {
        let Some(i) = self.stream_index(stream) else {
            self.untracked += 1;
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.stats.repairs += 1;
        s.arrival.on_packet(timestamp, now);
        if let Some(o) = &mut s.order {
            let out = &mut self.out;
            o.expire(now, &mut |h| out.push_held(stream, h));
        }
        if info.nss == 0 || info.nss > MAX_WINDOW {
            s.stats.repairs_invalid += 1;
            return Err(DecodeError::InvalidNss);
        }
        if info.stride == 0 {
            s.stats.repairs_invalid += 1;
            return Err(DecodeError::InvalidParameters);
        }
        let span = u32::from(info.nss - 1) * u32::from(info.stride);
        let last = info.first_esi.wrapping_add(span);
        let late_after = LateAfter::of(&self.cfg, s);
        s.clock.on_packet(last.wrapping_add(1), None, now);
        if s.budget.admit(now, &mut self.rng) {
            let Stream {
                codec,
                tracker,
                stats,
                order,
                answer_probe,
                clock,
                ..
            } = &mut *s;
            let out = &mut self.out;
            let probe = answer_probe.map(|(e, _)| e);
            let mut probe_recovered = false;
            let before = codec.symbol_ops();
            // Recovered ESIs past the highest source seen move the tracker forward themselves;
            // the coverage is recorded only once the code accepted the repair.
            let res = codec.on_repair(info, payload, &mut |e, data| {
                if tracker.on_recovered(e) {
                    stats.recovered += 1;
                    Self::time_recovery(clock, stats, e, late_after, now);
                    probe_recovered |= probe == Some(e);
                    out.recovered(order, stats, stream, e, data, now);
                }
            });
            let ops = codec.symbol_ops().saturating_sub(before);
            s.budget.spend(ops);
            s.stats.symbol_ops += ops;
            if probe_recovered {
                // Sampled only when the repair is an answer to a report that named the probe
                // (answers end at the newest ESI named): a rate-driven repair or a spare that
                // recovers it first says nothing about the round trip.
                let answer = probe == Some(last);
                if let Some((_, at)) = s.answer_probe.take().filter(|_| answer) {
                    let sample = now.saturating_duration_since(at);
                    // An eighth per sample, and a sample counts at most twice the estimate:
                    // one whose first answer was lost spans a repeat.
                    s.answer_delay = Some(match s.answer_delay {
                        Some(d) => (d * 7 + sample.min(d * 2)) / 8,
                        None => sample,
                    });
                }
            }
            if let Err(e) = res {
                s.stats.repairs_invalid += 1;
                if e == DecodeError::OutOfRange && s.repair_lag < self.cfg.repair_lag_limit {
                    s.stats.repairs_behind += 1;
                    let limit = self.cfg.repair_lag_limit;
                    if let Some(lag) = s.codec.grow_to_reach(info.first_esi, limit) {
                        s.repair_lag = lag;
                        s.stats.repair_lag = u64::from(lag);
                        s.tracker
                            .grow_to_horizon(Self::horizon_for_lag(&self.cfg, lag));
                    }
                }
                return Err(e);
            }
        } else {
            s.stats.overload_skips += 1;
        }
        s.period_start.get_or_insert(now);
        if matches!(self.cfg.scheme, SchemeConfig::BlockXor { .. }) {
            s.tracker.set_horizon(2 * u32::from(info.nss));
        }
        // A window that begins at the stream's first ESI may be cut short by it (the encoder
        // had fewer sources than its window): it says nothing about how far back repairs
        // reach, and taken for the span it would keep a loss report from naming a loss again.
        // The span decays slowly rather than following every repair: an answer cut short at
        // the encoder's answer floor (losses past their deadline left out) says nothing about
        // how far back its window reaches either, and a lookback taken from it would stop
        // the reports from naming losses that are still in time. Nor does an answer over the
        // one loss it repairs.
        if s.tracker.base() != Some(info.first_esi) && info.nss > 1 {
            s.repair_span = (span + 1).max(s.repair_span - s.repair_span / REPAIR_SPAN_DECAY);
        }
        s.tracker.on_repair(info.first_esi, last);
        s.echo = Some((timestamp, now));
        self.after_input(i, now);
        Ok(())
    }

    /// The queueing delay the peer's packets of `stream` meet on their way here at `now`: the
    /// one-way delay of its latest repair above the smallest of the last 5-10 s (`None`
    /// without a repair in the last 250 ms). The encoder of the other direction, beside this
    /// decoder, takes it out of its RTT samples: its feedback comes back through this queue
    /// ([`crate::Encoder::set_return_queue`]).
    pub fn arrival_queue(&self, stream: StreamId, now: Instant) -> Option<Duration> {
        let i = self.index.get(stream)?;
        self.streams[i].arrival.queue(now)
    }

    /// Records the delay of the recovery of `esi` at `now`, and whether it came late.
    fn time_recovery(
        clock: &RecoveryClock,
        stats: &mut DecoderStats,
        esi: Esi,
        late_after: LateAfter,
        now: Instant,
    ) {
        let delay = clock
            .noticed(esi)
            .map(|at| now.saturating_duration_since(at));
        match delay {
            Some(d) => stats.recovery_delays.record(d),
            None => stats.recovery_delays.unknown += 1,
        }
        if let Some(limit) = late_after.resolve() {
            if delay.is_none_or(|d| d > limit) {
                stats.recovered_late += 1;
            }
        }
    }

    /// The path's round trip as the driver measured it (e.g. the encoder of the opposite
    /// direction), for the recovery deadline's late count when it is RTT-relative.
    pub fn set_rtt(&mut self, stream: StreamId, rtt: Duration) {
        if let Some(i) = self.index.get(stream) {
            self.streams[i].rtt = Some(rtt);
        }
    }

    /// How long a named loss is kept in reach for its answers: three answer delays once one
    /// was measured (the answer, and spares up to half a deadline's slack later), before
    /// that [`ASKED_HOLD_UNMEASURED`].
    fn asked_hold(s: &Stream) -> Duration {
        s.answer_delay.map_or(ASKED_HOLD_UNMEASURED, |d| {
            (d * 3).min(ASKED_HOLD_UNMEASURED)
        })
    }

    /// A decoder that learns how far back answers reach ([`DecoderConfig::repair_lag_limit`])
    /// grows its span before the sources a named loss needs leave it, not once the first
    /// answer that needed them was refused: otherwise the losses of the first round trip of a
    /// path longer than the window's span stay unrecovered.
    fn keep_asked_in_reach(cfg: &DecoderConfig, s: &mut Stream, now: Instant) {
        let Some((oldest, at)) = s.asked else {
            return;
        };
        if now.saturating_duration_since(at) > Self::asked_hold(s) {
            s.asked = None;
            return;
        }
        if s.repair_lag >= cfg.repair_lag_limit {
            return;
        }
        if let Some(lag) = s.codec.keep_in_reach(oldest, cfg.repair_lag_limit) {
            s.repair_lag = lag;
            s.stats.repair_lag = u64::from(lag);
            s.tracker.grow_to_horizon(Self::horizon_for_lag(cfg, lag));
        }
    }

    /// Updates cumulative stats and the feedback schedule of stream `i` after an input, and
    /// releases what waited behind losses that became final.
    fn after_input(&mut self, i: usize, now: Instant) {
        let s = &mut self.streams[i];
        Self::keep_asked_in_reach(&self.cfg, s, now);
        Self::watch_gap(&self.cfg, s, now);
        if let Some(o) = &mut s.order {
            let (out, stream) = (&mut self.out, s.id);
            o.skip_before(s.tracker.finalized(), &mut |h| out.push_held(stream, h));
            s.stats.order_skipped = o.skipped;
            s.stats.order_passed = o.passed;
        }
        s.stats.lost = s.tracker.total_lost;
        s.stats.residual = s.tracker.total_residual;
        if !s.due && Self::feedback_due(&self.cfg, s, now) {
            s.due = true;
            self.due.push_back(i);
        }
    }

    /// How long a gap waits for the missing ESIs once a later one came (see
    /// `REORDER_WINDOW_DIVISOR`): only with loss reports on, once an answer delay is measured.
    fn reorder_window(cfg: &DecoderConfig, s: &Stream) -> Option<Duration> {
        cfg.loss_report_gap?;
        s.answer_delay.map(|d| d / REORDER_WINDOW_DIVISOR)
    }

    /// When the gap seen last is declared lost by the time rule, if one waits.
    fn gap_due(cfg: &DecoderConfig, s: &Stream) -> Option<Instant> {
        let (_, at) = s.gap_seen?;
        at.checked_add(Self::reorder_window(cfg, s)?)
    }

    /// The time rule of loss detection: declares the ESIs missing below the one that showed a
    /// gap once the reorder window has passed, and notes a new gap.
    fn watch_gap(cfg: &DecoderConfig, s: &mut Stream, now: Instant) {
        if Self::reorder_window(cfg, s).is_none() || !s.tracker.gap_pending() {
            s.gap_seen = None;
            return;
        }
        let (esi, _) = *s.gap_seen.get_or_insert((s.tracker.highest(), now));
        if Self::gap_due(cfg, s).is_some_and(|t| t <= now) {
            s.tracker.declare_before(esi);
            s.gap_seen = s.tracker.gap_pending().then(|| (s.tracker.highest(), now));
        }
    }

    /// When the next loss report may go out, if one is wanted: new losses were declared since
    /// the last one, or the last one named sources and its repeat interval passed.
    fn report_due(cfg: &DecoderConfig, s: &Stream) -> Option<Instant> {
        let gap = cfg.loss_report_gap?;
        // Without a previous report, `feedback_due` sends the first one at once.
        let at = s.report_at?;
        if s.tracker.total_lost > s.reported_lost {
            at.checked_add(gap)
        } else if s.report_open {
            at.checked_add(Self::report_repeat(cfg, s))
        } else {
            None
        }
    }

    /// How long after a loss report that named sources still missing it is repeated: twice
    /// the measured answer delay, within [`DecoderConfig::loss_report_gap`] and
    /// [`DecoderConfig::loss_report_repeat`]. A lost report or a lost answer then costs a
    /// couple of round trips, not the fixed repeat interval, and a short path gets several
    /// tries inside a short deadline. The encoder answers an ESI at most once per RTT, so
    /// repeats that cross an answer in flight add no repairs.
    fn report_repeat(cfg: &DecoderConfig, s: &Stream) -> Duration {
        let gap = cfg.loss_report_gap.unwrap_or_default();
        let cap = cfg.loss_report_repeat.max(gap);
        s.answer_delay.map_or(cap, |d| (d * 2).clamp(gap, cap))
    }

    fn feedback_due(cfg: &DecoderConfig, s: &Stream, now: Instant) -> bool {
        if s.tracker.period.classified >= cfg.feedback_period.max(1) {
            return true;
        }
        if cfg.loss_report_gap.is_some()
            && s.tracker.total_lost > s.reported_lost
            && s.report_at.is_none()
        {
            return true;
        }
        if Self::report_due(cfg, s).is_some_and(|t| t <= now) {
            return true;
        }
        match (s.period_start, cfg.feedback_interval) {
            (Some(t), Some(iv)) => now.saturating_duration_since(t) >= iv,
            _ => false,
        }
    }

    /// Buffer memory of stream `stream`, if it is tracked.
    pub fn buffer_bytes(&self, stream: StreamId) -> Option<DecoderBuffers> {
        let s = &self.streams[self.index.get(stream)?];
        let code = s.codec.buffer_bytes();
        Some(DecoderBuffers {
            columns: code.columns,
            rows: code.rows,
            held: s.order.as_ref().map_or(0, |o| o.held_bytes()),
        })
    }

    /// Bytes of the recycled output buffers and of the recovered packets waiting to be
    /// polled (shared by every stream of this decoder).
    pub fn output_bytes(&self) -> usize {
        let pool: usize = self.out.pool.iter().map(Vec::capacity).sum();
        pool + self
            .out
            .queue
            .iter()
            .map(|r| r.data.capacity())
            .sum::<usize>()
    }

    /// The next recovered source packet, until `None`. Deliver it at once.
    pub fn poll_recovered(&mut self) -> Option<Recovered<'_>> {
        if let Some(done) = self.current.take() {
            if self.out.pool.len() < POOL_MAX {
                self.out.pool.push(done.data);
            }
        }
        self.current = self.out.queue.pop_front();
        self.current.as_ref().map(|r| Recovered {
            stream: r.stream,
            esi: r.esi,
            data: &r.data,
            original: r.original,
            meta: r.meta,
        })
    }

    /// The next feedback to send to the encoder, until `None`.
    pub fn poll_feedback(&mut self, now: Instant) -> Option<Feedback> {
        let i = self.due.pop_front()?;
        self.out.trim_pool();
        let s = &mut self.streams[i];
        s.due = false;
        s.period_start = None;
        let p = s.tracker.take_period();
        let echo = s.echo.take().map(|(ts, at)| TimestampEcho {
            ts,
            hold_us: now
                .saturating_duration_since(at)
                .as_micros()
                .min(u128::from(u32::MAX)) as u32,
        });
        let mut loss_report = crate::feedback::LossReport::default();
        if self.cfg.loss_report_gap.is_some() {
            let lookback = if s.repair_span > 0 {
                s.repair_span
            } else {
                self.cfg.horizon
            };
            s.tracker.missing(lookback, &mut loss_report);
            s.reported_lost = s.tracker.total_lost;
            s.report_open = !loss_report.is_empty();
            if let Some(r) = loss_report.ranges().first() {
                let newest = r.first.wrapping_add(u32::from(r.len) - 1);
                if s.newest_named
                    .is_none_or(|n| (newest.wrapping_sub(n) as i32) > 0)
                {
                    s.newest_named = Some(newest);
                    s.answer_probe = Some((newest, now));
                }
            }
            if s.report_open {
                s.report_at = Some(now);
                s.stats.loss_reports += 1;
                let learning = s.repair_lag < self.cfg.repair_lag_limit;
                if let Some(r) = loss_report.ranges().last().filter(|_| learning) {
                    let hold = Self::asked_hold(s);
                    if s.asked
                        .is_none_or(|(_, at)| now.saturating_duration_since(at) > hold)
                    {
                        s.asked = Some((r.first, now));
                    }
                }
            }
        }
        let fb = Feedback {
            stream: s.id,
            path: self.cfg.path,
            seq: s.seq,
            highest_esi: s.tracker.highest(),
            received: p.received,
            lost: p.lost,
            recovered: p.recovered,
            residual: p.residual,
            repairs: p.repairs,
            windows: p.windows,
            window_loss_max: p.window_loss_max,
            loss_sum: p.loss_sum,
            loss_sq_sum: p.loss_sq_sum,
            bursts: p.bursts,
            burst_sum: p.burst_sum,
            burst_max: p.burst_max,
            loss_window: self.cfg.loss_window.min(u32::from(u16::MAX)) as u16,
            echo,
            ce_marks: std::mem::take(&mut s.ce_marks),
            local_drops: std::mem::take(&mut s.local_drops),
            loss_report,
        };
        s.seq = s.seq.wrapping_add(1);
        s.stats.feedback += 1;
        Some(fb)
    }

    /// Reports `n` packets that the host dropped before this decoder could read them (the
    /// driver counts them at its device queue or socket buffer). They cannot be told apart
    /// from link losses, so every stream passes them on in its next feedback
    /// ([`Feedback::local_drops`]) and its encoder takes them out of the losses its controller
    /// sees: repairs do not help against a decoder that is already overloaded.
    pub fn add_local_drops(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        for s in &mut self.streams {
            s.local_drops = s.local_drops.saturating_add(n);
            s.stats.local_drops += u64::from(n);
        }
    }

    /// Notes that a packet (source or repair) of `stream` arrived with its outer header marked
    /// CE (ECN congestion experienced): a queue on the path marks rather than drops. The count
    /// goes to the encoder in the next feedback ([`Feedback::ce_marks`]), which then treats the
    /// path as congested.
    pub fn note_ce(&mut self, stream: StreamId) {
        if let Some(i) = self.stream_index(stream) {
            let s = &mut self.streams[i];
            s.ce_marks = s.ce_marks.saturating_add(1);
            s.stats.ce_marks += 1;
        }
    }

    /// When [`Decoder::handle_timeout`] must be called next (a time-driven feedback, the end of
    /// a gap's reorder window, or the end of an in-order hold), if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let iv: Option<Duration> = self.cfg.feedback_interval;
        self.streams
            .iter()
            .flat_map(|s| {
                let fb = iv.and_then(|iv| s.period_start?.checked_add(iv));
                let hold = s.order.as_ref().and_then(Reorder::deadline);
                let report = Self::report_due(&self.cfg, s);
                let gap = Self::gap_due(&self.cfg, s);
                [fb, hold, report, gap]
            })
            .flatten()
            .min()
    }

    /// Schedules the feedback due at `now` and releases sources whose hold ended; then drain
    /// [`Decoder::poll_recovered`] and [`Decoder::poll_feedback`].
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.streams.len() {
            let s = &mut self.streams[i];
            if let Some(o) = &mut s.order {
                let (out, stream) = (&mut self.out, s.id);
                o.expire(now, &mut |h| out.push_held(stream, h));
                s.stats.order_skipped = o.skipped;
            }
            if s.gap_seen.is_some() {
                Self::watch_gap(&self.cfg, s, now);
                s.stats.lost = s.tracker.total_lost;
                s.stats.residual = s.tracker.total_residual;
            }
            if !s.due && Self::feedback_due(&self.cfg, s, now) {
                s.due = true;
                self.due.push_back(i);
            }
        }
    }

    /// Counters of one stream, if it exists.
    pub fn stats(&self, stream: StreamId) -> Option<DecoderStats> {
        self.index.get(stream).map(|i| self.streams[i].stats)
    }

    /// Tells the decoder how busy the CPU that runs it is (see [`crate::Encoder::set_cpu_load`]):
    /// above [`DecoderConfig::overload_threshold`] repairs are dropped unsolved at random
    /// (counted in `overload_skips`). Sources are always delivered.
    pub fn set_cpu_load(&mut self, load: f64) {
        self.load_skip = crate::overload::load_skip_probability(load, self.cfg.overload_threshold);
        for s in &mut self.streams {
            s.budget.set_load_skip(self.load_skip);
        }
    }

    /// Ids of the streams tracked, in creation order.
    pub fn streams(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.streams.iter().map(|s| s.id)
    }

    /// Packets of streams beyond `max_streams` (delivered unprotected, repairs ignored).
    pub fn untracked(&self) -> u64 {
        self.untracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffers_past_the_keep_are_given_back_when_idle() {
        let mut out = Out {
            pool: (0..POOL_MAX).map(|_| vec![0u8; 1500]).collect(),
            ..Out::default()
        };
        out.queue.push_back(RecBuf {
            stream: 0,
            esi: 0,
            original: false,
            meta: 0,
            data: Vec::new(),
        });
        // Deliveries pending: nothing is trimmed.
        out.trim_pool();
        assert_eq!(out.pool.len(), POOL_MAX);
        out.queue.clear();
        let mut sizes = Vec::new();
        for _ in 0..12 {
            out.trim_pool();
            sizes.push(out.pool.len());
        }
        assert_eq!(sizes[0], POOL_KEEP + (POOL_MAX - POOL_KEEP) / 2);
        assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "{sizes:?}");
        assert_eq!(*sizes.last().unwrap(), POOL_KEEP);
    }
}
