//! The tunnel encoder: numbers source packets per stream, feeds them to the stream's code, and
//! emits repairs when the controller, the code or the repair timer says so.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::aqm::Codel;
use crate::codec::EncCodec;
use crate::config::{Deadline, EncoderConfig, INITIAL_RTT};
use crate::controller::{self, Controller, FeedbackContext, QueueYield, RepairTrigger};
use crate::feedback::{Feedback, LossReport};
use crate::overload::Budget;
use crate::stats::EncoderStats;
use crate::streams::StreamMap;
use crate::timestamp::Clock;
use crate::{Esi, RepairInfo, StreamId};

/// How a source packet must be tagged on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceTag {
    /// Its stream.
    pub stream: StreamId,
    /// Its Encoding Symbol ID within the stream.
    pub esi: Esi,
}

/// What queue management on the path makes of a source ([`Encoder::admit_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceAdmission {
    /// Code and send it as it is.
    Send,
    /// Set its inner packet's ECN field to CE (the caller rewrites it), then code and send it.
    MarkCe,
    /// Leave it out: do not code it.
    Drop,
}

/// How soon a source needs a repair after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SourceNeed {
    /// The repair timer protects it within `repair_delay` (and re-sends).
    #[default]
    Timely,
    /// The next packet of its flow makes its loss good (a pure TCP ACK: ACKs are cumulative).
    /// It is coded like any source, but it does not start the repair timer: only the
    /// controller's repairs and those a timely source starts cover it. A bulk TCP transfer's
    /// ACK direction otherwise gets a timer repair every `repair_delay`.
    Superseded,
}

/// A repair packet to send. Borrowed from the encoder until the next `poll_repair`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repair<'a> {
    /// Its stream.
    pub stream: StreamId,
    /// Code parameters the decoder needs.
    pub info: RepairInfo,
    /// Send timestamp (encoder clock, microseconds, wraps) for the decoder to echo (RTT).
    pub timestamp: u32,
    /// The repair symbol.
    pub payload: &'a [u8],
}

#[derive(Debug)]
struct PendingRepair {
    stream: StreamId,
    info: RepairInfo,
    timestamp: u32,
    payload: Vec<u8>,
}

/// Most recycled repair buffers kept.
const POOL_MAX: usize = 64;

/// Feedback sequence numbers at most this far behind the last used one are stale; further
/// behind means the decoder restarted.
const STALE_SEQ: u16 = 64;
/// How long local drops reported by the decoder are set against later losses.
const DROP_CREDIT_TTL: Duration = Duration::from_millis(100);

/// How long after the decoder last reported drops of its own a queue on the path is taken as
/// that host's (see `Encoder::locally_overloaded`).
const LOCAL_OVERLOAD_MEMORY: Duration = Duration::from_secs(1);
/// How long repairs skipped by overload control are set against residual losses: a loss a
/// skipped repair would have recovered is reported unrecovered when it leaves the decoder's
/// window, which at the rates where overload happens is milliseconds later.
const SKIP_CREDIT_TTL: Duration = Duration::from_millis(500);
/// Repairs per source that loss reports may draw on (a token bucket), and the bucket's size:
/// the answers to reports are capped by what the reports name and by this budget, so neither
/// a burst of reports nor an overloaded decoder can make the encoder send more than a bounded
/// share of the traffic in repairs.
const REPORT_BUDGET_PER_SOURCE: f64 = 0.3;
const REPORT_BUDGET_MAX: f64 = 256.0;
/// Fewest slots of the per-source memory of loss reports (a power of two above the largest
/// window; more when the code keeps a longer history, see `Stream::memo_slots`).
const ANSWERED_SLOTS: usize = 4096;
/// Share of the answers to loss reports that may stay without a spare repair when lost.
const SPARE_MISS: f64 = 2e-4;
/// Share of the batches of answers whose lost answers may outnumber their spares. A batch
/// that falls short leaves most of its losses unrecovered (they share the equations), not
/// only as many as answers are missing: the in-time target (99.9 %) bounds how often.
const SPARE_SHORT: f64 = 1e-3;
/// Share of the time left to the deadline of a batch's first loss after which its spares go
/// out, where only they can replace its lost answers (see `Encoder::spare_wait`).
const TRAILING_SPARE_SHARE: f64 = 0.4;
/// How long the smallest RTT sample stands as the path's base RTT (a route change may raise it).
const BASE_RTT_WINDOW: Duration = Duration::from_secs(10);
/// Pacing of the answers to loss reports when no source comes between them (per unit of
/// their spacing).
const ANSWER_GAP: Duration = Duration::from_micros(200);
/// Spacing wanted between two answers beyond the next source, in multiples of what the
/// link's mean loss burst exceeds one packet by: answers that far apart are rarely taken by
/// the same burst, and independent losses need none.
const ANSWER_SPACING_BURSTS: f64 = 2.5;
/// Share of the slack a deadline leaves after a round trip (`D - RTT`) within which the
/// queued answers must all have gone out, whatever the spacing wanted. An answer recovers its
/// loss as it arrives, so spreading a long burst's answers costs those losses nothing of
/// their deadline while fewer of the answers share one link burst; the spares follow at half
/// the slack.
const ANSWER_SPREAD: f64 = 0.3;
/// How long a learning encoder keeps every source of a new stream while no feedback has
/// measured its path (see `Encoder::keep_until_measured`): the first feedback of a 600 ms
/// round trip comes ~650 ms after the first source.
const UNMEASURED_HISTORY: Duration = Duration::from_secs(1);

/// What the encoder remembers of a kept source for loss reports: when it was sent and when a
/// report naming it was last answered.
#[derive(Clone, Copy, Debug, Default)]
struct SourceMemo {
    esi: Esi,
    sent: Option<Instant>,
    answered: Option<Instant>,
}

/// Repairs over a window queued for one loss report or one batch of spares: the oldest loss
/// they back up, the end of their window (just after the newest loss named), how many are
/// left.
#[derive(Clone, Copy, Debug)]
struct AnswerRun {
    oldest: Esi,
    end: Esi,
    n: u32,
}

/// A repair waiting in the answer queue.
#[derive(Clone, Copy, Debug)]
enum Queued {
    /// The answer to one named loss: a repair over that source alone. A lost answer then
    /// leaves only its own loss to the spares; were the answers over the whole window, the
    /// batch's losses would share their equations and one answer too few would leave them
    /// all unrecovered.
    Loss(Esi),
    /// Repairs over a window (spares, or answers where a code cannot make a repair over one
    /// source).
    Window(AnswerRun),
}

impl Queued {
    fn count(&self) -> u32 {
        match self {
            Queued::Loss(_) => 1,
            Queued::Window(run) => run.n,
        }
    }
}

/// The spares behind a batch of answers whose losses one window covers: the oldest loss
/// answered, the end of the newest answer's window, the answers they back up, when they go.
#[derive(Clone, Copy, Debug)]
struct SpareBatch {
    oldest: Esi,
    end: Esi,
    answers: u32,
    due: Instant,
}

#[derive(Debug)]
struct Stream {
    id: StreamId,
    next_esi: Esi,
    codec: EncCodec,
    controller: Box<dyn Controller>,
    max_window: u16,
    /// How far behind the newest source a repair's window may start (`FeedbackContext::reach`).
    reach: u32,
    unprotected_since: Option<Instant>,
    /// Re-send of a time-driven repair due at this time (see [`EncoderConfig::repair_retries`]);
    /// cleared by any other repair that goes out.
    retry_at: Option<Instant>,
    /// Re-sends left after the one at `retry_at`.
    retries_left: u8,
    /// `retry_at` follows a rate-driven repair over the newest source: it stands for a pause
    /// there, and the next source, with a timer of its own, cancels it.
    retry_for_pause: bool,
    budget: Budget,
    last_seq: Option<u16>,
    srtt: Option<Duration>,
    stats: EncoderStats,
    /// Local drops reported by the decoder and not yet set against losses, and when the
    /// last ones were reported.
    drop_credit: u32,
    drop_credit_at: Option<Instant>,
    /// Repairs overload control skipped and not yet set against residual losses, and when the
    /// last one was skipped.
    skip_credit: u32,
    skip_credit_at: Option<Instant>,
    /// When the latest source came (the deadline mode's tail timer waits for a pause).
    last_source_at: Option<Instant>,
    /// Loss reports: the answer budget, the memory of each kept source (when it was sent,
    /// when it was last answered; allocated on the first report: a source past its deadline
    /// gets no answer), and local drops not yet set against named ESIs.
    report_tokens: f64,
    memo: Vec<SourceMemo>,
    report_drop_credit: u32,
    /// Smoothed time between two sources.
    source_gap: Duration,
    /// Spare repairs behind the answers to loss reports, one batch per window of answers
    /// (see `SpareBatch`), oldest first.
    spares: VecDeque<SpareBatch>,
    /// Answers (and spares) not sent yet (the oldest loss they answer, the end of their
    /// window, how many), when the next may go, the sources sent since the last one, and the
    /// time the queue must drain in: they are spaced (see `answer_spacing`) so that a burst of
    /// link losses does not take a whole batch of them (a burst of losses on the link is
    /// reported at once and would otherwise be answered back to back).
    answer_queue: VecDeque<Queued>,
    /// The ESIs a loss report names and gets answers for (scratch, reused).
    named: Vec<Esi>,
    /// The oldest loss of the latest batch of spares sent (see `handle_timeout`).
    previous_spares: Option<Esi>,
    /// The ESI after the newest loss a report named once no repair could recover it in time
    /// any more (an explicit deadline): the windows of answers and spares start there. A batch
    /// whose answers and spares fell short stays unsolved; in the equations of later batches
    /// its unknowns would hold their losses back too, past their own deadlines.
    answer_floor: Option<Esi>,
    answer_at: Option<Instant>,
    answer_sources: u32,
    answer_spread: Duration,
    /// Repairs per source of a block code (`SchemeConfig::block_rate`); `None`: sliding.
    block_rate: Option<f64>,
    /// What a block code has earned and not yet sent, in repairs: a time-driven flush earns its
    /// sources' share and sends at least one repair, the rest (or the debt, at most one
    /// repair) is carried to the next block, full or not.
    block_credit: f64,
    /// When the stream's first source came (see `keep_until_measured`).
    first_source_at: Option<Instant>,
    /// The partial block's flush already waited once (see `handle_timeout`).
    block_flush_waited: bool,
    /// Base RTT of the path (smallest recent sample, and when it was taken), and until when
    /// a queue on the path pauses loss-triggered repairs (see `watch_queue`).
    base_rtt: Option<(Duration, Instant)>,
    /// Queue management on the path's queueing delay ([`EncoderConfig::aqm`]).
    codel: Option<Codel>,
    /// The queue on the way back, where the feedback travels (see `set_return_queue`).
    return_queue: Duration,
    rttvar: Duration,
    queue_until: Option<Instant>,
    /// Consecutive RTT samples above the queue threshold (see `watch_queue`).
    queue_samples: u8,
    /// Until when the controller's own repairs give way to an overflowing queue (see
    /// `yielding_to_queue`).
    yield_until: Option<Instant>,
}

/// Shared output state, split from the streams so a stream and the queue borrow separately.
#[derive(Debug)]
struct Out {
    queue: VecDeque<PendingRepair>,
    pool: Vec<Vec<u8>>,
    clock: Clock,
}

impl Out {
    fn push(&mut self, stream: StreamId, info: RepairInfo, payload: &[u8], now: Instant) {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        let timestamp = self.clock.stamp(now);
        self.queue.push_back(PendingRepair {
            stream,
            info,
            timestamp,
            payload: buf,
        });
    }
}

/// The encoder half of the tunnel. Sans-IO: see the crate docs for the call order.
#[derive(Debug)]
pub struct Encoder {
    cfg: EncoderConfig,
    streams: Vec<Stream>,
    index: StreamMap,
    rng: ChaCha8Rng,
    out: Out,
    current: Option<PendingRepair>,
    feedback_unknown_stream: u64,
    /// Skip probability from the last injected CPU load (applied to new streams too).
    load_skip: f64,
}

impl Encoder {
    /// A new encoder; `seed` drives overload-control skips.
    pub fn new(cfg: EncoderConfig, seed: u64) -> Self {
        Encoder {
            cfg,
            streams: Vec::new(),
            index: StreamMap::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            out: Out {
                queue: VecDeque::new(),
                pool: Vec::new(),
                clock: Clock::default(),
            },
            current: None,
            feedback_unknown_stream: 0,
            load_skip: 0.0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// The ESI [`Encoder::handle_source`] gives the next source of `stream` (a stream not seen
    /// yet starts at 0).
    pub fn next_esi(&self, stream: StreamId) -> Esi {
        self.index
            .get(stream)
            .map_or(0, |i| self.streams[i].next_esi)
    }

    /// Whether loss reports get answers that reach past the window: a deadline asks for them,
    /// the decoder keeps an answer reach (`answer_reach_lag`), and the code is a sliding one
    /// (a block code's repairs cannot reach back into earlier blocks).
    fn answers_loss_reports(&self) -> bool {
        self.cfg.deadline.is_some()
            && self.cfg.answer_reach_lag > 0
            && self.cfg.mode.scheme.is_sliding()
    }

    fn stream_index(&mut self, id: StreamId) -> usize {
        if let Some(i) = self.index.get(id) {
            return i;
        }
        let scheme = &self.cfg.mode.scheme;
        let codec = EncCodec::new(scheme);
        let max_window = scheme.max_window();
        let reach = scheme.answer_reach(self.cfg.answer_reach_lag);
        let mut controller = controller::build(&self.cfg.mode.controller, max_window);
        let answers_reports = self.answers_loss_reports();
        if answers_reports && self.cfg.deadline.is_some_and(|d| d.leaves_round_trip()) {
            controller.expect_loss_reports();
        }
        let stats = EncoderStats {
            window: codec.window(),
            rate: controller.rate(),
            ..EncoderStats::default()
        };
        let mut budget = Budget::new(self.cfg.work_budget, self.cfg.budget_period);
        budget.set_load_skip(self.load_skip);
        self.streams.push(Stream {
            id,
            next_esi: 0,
            codec,
            controller,
            max_window,
            reach,
            unprotected_since: None,
            retry_at: None,
            retries_left: 0,
            retry_for_pause: false,
            budget,
            last_seq: None,
            drop_credit: 0,
            drop_credit_at: None,
            skip_credit: 0,
            skip_credit_at: None,
            last_source_at: None,
            report_tokens: 32.0,
            memo: Vec::new(),
            report_drop_credit: 0,
            source_gap: Duration::ZERO,
            spares: VecDeque::new(),
            answer_queue: VecDeque::new(),
            named: Vec::new(),
            previous_spares: None,
            answer_floor: None,
            answer_at: None,
            answer_sources: 0,
            answer_spread: Duration::ZERO,
            block_rate: scheme.block_rate(),
            block_credit: 0.0,
            first_source_at: None,
            block_flush_waited: false,
            base_rtt: None,
            codel: self.cfg.aqm.map(Codel::new),
            return_queue: Duration::ZERO,
            rttvar: Duration::ZERO,
            queue_until: None,
            queue_samples: 0,
            yield_until: None,
            srtt: None,
            stats,
        });
        let i = self.streams.len() - 1;
        self.index.insert(id, i);
        if answers_reports {
            // The decoder takes repairs as wide as the largest window
            // (`DecoderConfig::with_answer_reach`, `learning_answer_reach`): spares that back
            // up the answers of a round trip then cover them all, whatever the window.
            self.streams[i]
                .codec
                .allow_wide_repairs(hirt_fec::rlc::MAX_WINDOW);
        }
        if self.cfg.deadline.is_some()
            && self.cfg.answer_reach_lag > 0
            && !self.cfg.answer_reach_grows
        {
            // The first loss reports come a round trip after the first sources, before the
            // encoder has measured the round trip or the rate that size the history: it keeps
            // as many sources as the decoder's reach from the start, or the losses of the first
            // round trip of a long path are gone from the code when they are reported.
            Self::keep_history(&mut self.streams[i], reach);
        }
        i
    }

    /// What becomes of the next source of `stream`, arriving at `now`, under queue management
    /// on the path ([`EncoderConfig::aqm`]). When CoDel signals congestion, a source whose
    /// inner packet is ECN-capable (`ecn_capable`: ECT(0) or ECT(1), read by the caller) is to
    /// be marked CE and sent ([`SourceAdmission::MarkCe`], RFC 8289 §5.1 / RFC 3168): its
    /// transport slows down and nothing is lost. Any other source is dropped
    /// ([`SourceAdmission::Drop`]): it is not handed to [`Encoder::handle_source`], so it takes
    /// no ESI, the decoder sees no hole, and its transport sees one loss.
    ///
    /// A source a later one supersedes ([`SourceNeed::Superseded`]: a pure TCP ACK) is always
    /// sent and takes no turn in CoDel's schedule: losing it slows no sender, and the queue the
    /// RTT shows may lie the other way, on the feedback's return (a download fills the queue
    /// towards the client, whose encoder carries the ACKs). Always [`SourceAdmission::Send`]
    /// without `aqm`.
    pub fn admit_source(
        &mut self,
        stream: StreamId,
        need: SourceNeed,
        ecn_capable: bool,
        now: Instant,
    ) -> SourceAdmission {
        if self.cfg.aqm.is_none() || need == SourceNeed::Superseded {
            return SourceAdmission::Send;
        }
        let i = self.stream_index(stream);
        let s = &mut self.streams[i];
        if !s.codel.as_mut().is_some_and(|c| c.signals(now)) {
            return SourceAdmission::Send;
        }
        if ecn_capable {
            s.stats.aqm_marks += 1;
            SourceAdmission::MarkCe
        } else {
            s.stats.aqm_drops += 1;
            SourceAdmission::Drop
        }
    }

    /// The queueing delay the feedback of `stream` meets on its way back (`None`: unknown,
    /// taken as none), measured by the decoder of the other direction beside this encoder
    /// ([`crate::Decoder::arrival_queue`]). Queue management ([`EncoderConfig::aqm`]) takes it
    /// out of the RTT: a download's queue is in every RTT sample of the client's encoder, which
    /// sends only requests and ACKs into an empty queue.
    pub fn set_return_queue(&mut self, stream: StreamId, queue: Option<Duration>) {
        if self.cfg.aqm.is_none() {
            return;
        }
        if let Some(i) = self.index.get(stream) {
            self.streams[i].return_queue = queue.unwrap_or(Duration::ZERO);
        }
    }

    /// Takes a source packet of `stream` at `now`. The caller forwards the original bytes tagged
    /// with the returned [`SourceTag`]; the encoder only copies them into the code's window.
    /// Then drain [`Encoder::poll_repair`].
    pub fn handle_source(&mut self, stream: StreamId, packet: &[u8], now: Instant) -> SourceTag {
        self.handle_source_needing(stream, packet, SourceNeed::Timely, now)
    }

    /// [`Encoder::handle_source`] for a source that needs repairs as `need` says.
    pub fn handle_source_needing(
        &mut self,
        stream: StreamId,
        packet: &[u8],
        need: SourceNeed,
        now: Instant,
    ) -> SourceTag {
        let i = self.stream_index(stream);
        let sliding = self.cfg.mode.scheme.is_sliding();
        let pause = self.pause_timer(&self.streams[i]);
        let resend_gap = self
            .repair_delay(&self.streams[i])
            .map(|d| self.cfg.repair_retry_gap.unwrap_or(d));
        let s = &mut self.streams[i];
        let out = &mut self.out;
        let repairs_before = s.stats.repairs;
        if std::mem::take(&mut s.retry_for_pause) {
            s.retry_at = None;
        }
        let esi = s.next_esi;
        s.next_esi = esi.wrapping_add(1);
        s.stats.sources += 1;
        s.stats.source_bytes += packet.len() as u64;
        if let Some(last) = s.last_source_at {
            let gap = now.saturating_duration_since(last);
            s.source_gap = if s.source_gap.is_zero() {
                gap
            } else {
                (s.source_gap * 7 + gap) / 8
            };
        }
        s.last_source_at = Some(now);
        let since = *s.first_source_at.get_or_insert(now);
        if self.cfg.answer_reach_grows && self.cfg.deadline.is_some() && s.last_seq.is_none() {
            Self::keep_until_measured(s, esi, now.saturating_duration_since(since));
        }
        let mask = s.memo.len().wrapping_sub(1);
        if let Some(m) = s.memo.get_mut(esi as usize & mask) {
            *m = SourceMemo {
                esi,
                sent: Some(now),
                answered: None,
            };
        }
        if s.queue_until.is_none_or(|t| now >= t) {
            s.report_tokens = (s.report_tokens + REPORT_BUDGET_PER_SOURCE).min(REPORT_BUDGET_MAX);
        }

        // Block codes emit their repairs from push_source; their work is already done, overload
        // control can only withhold them (counted as skips).
        let cost = s.codec.repair_cost();
        let rng = &mut self.rng;
        let Stream {
            codec,
            budget,
            stats,
            controller,
            skip_credit,
            skip_credit_at,
            block_credit,
            block_rate,
            ..
        } = &mut *s;
        let mut emitted = 0u32;
        let pays_by_credit = block_rate.is_some();
        codec.push_source(esi, packet, &mut |info, payload| {
            emitted += 1;
            // Each repair a full block makes earns itself; one owed by an earlier flush's
            // rounded-up repair is withheld, never a block's only one.
            if pays_by_credit {
                *block_credit += 1.0;
                if *block_credit < 1.0 && emitted > 1 {
                    return;
                }
                *block_credit = (*block_credit - 1.0).max(-1.0);
            }
            if budget.admit(now, rng) {
                budget.spend(cost);
                out.push(stream, info, payload, now);
                stats.repairs += 1;
                stats.repairs_code += 1;
                stats.repair_bytes += payload.len() as u64;
            } else {
                stats.overload_skips += 1;
                *skip_credit = skip_credit.saturating_add(1);
                *skip_credit_at = Some(now);
            }
        });
        for _ in 0..emitted {
            controller.on_repair(RepairTrigger::Code);
        }

        s.answer_sources = s.answer_sources.saturating_add(1);
        if !s.answer_queue.is_empty() && s.answer_sources >= Self::answer_spacing(s) {
            Self::send_answer(s, out, &mut self.rng, now);
        }
        let wanted = s.controller.on_source();
        let yielding = Self::yielding_to_queue(s, self.load_skip, now);
        for _ in 0..wanted {
            if yielding {
                s.stats.queue_skips += 1;
                s.controller.on_repair(RepairTrigger::Controller);
            } else {
                Self::repair(s, out, &mut self.rng, RepairTrigger::Controller, now);
            }
        }
        if s.stats.repairs != repairs_before {
            // A repair over the current window went out: a pending re-send would repeat it.
            s.retry_at = None;
            // It protects the newest sources once, as a timer repair would if the traffic
            // paused here; it gets the timer repair's re-send series too, or two losses among
            // the sources before a pause (a repair recovers one) would wait for the traffic to
            // resume. The next source cancels it (its own timer takes over), so only a pause
            // sends it.
            if let (true, 0, Some(gap)) = (sliding, s.codec.unprotected(), resend_gap) {
                if self.cfg.repair_retries > 0 {
                    s.retries_left = self.cfg.repair_retries - 1;
                    s.retry_at = now.checked_add(gap);
                    s.retry_for_pause = true;
                }
            }
        } else if let (true, Some(gap)) = (pause, resend_gap) {
            // With a deadline the time-driven repair waits for a pause in the sources; so does
            // a pending re-send (rate-driven repairs may be further apart than its gap).
            if s.retry_at.is_some() {
                s.retry_at = now.checked_add(gap);
            }
        }
        if s.codec.unprotected() == 0 {
            s.unprotected_since = None;
        } else if s.unprotected_since.is_none() && need == SourceNeed::Timely {
            s.unprotected_since = Some(now);
            s.block_flush_waited = false;
        }
        // A pending re-send stays armed: it is due before this source's own timer would be (it
        // fires at most `repair_delay` after a timer repair that preceded this source) and its
        // repair covers this source too, so it replaces that timer at no extra cost.
        SourceTag { stream, esi }
    }

    /// Makes one repair on `s` (unless overload control skips it) and tells the controller.
    fn repair(
        s: &mut Stream,
        out: &mut Out,
        rng: &mut ChaCha8Rng,
        trigger: RepairTrigger,
        now: Instant,
    ) {
        Self::repair_until(s, out, rng, trigger, None, now);
    }

    /// [`Self::repair`] over the window that ends just before `end` (`None`: the newest source).
    fn repair_until(
        s: &mut Stream,
        out: &mut Out,
        rng: &mut ChaCha8Rng,
        trigger: RepairTrigger,
        range: Option<(Option<Esi>, Esi)>,
        now: Instant,
    ) {
        if !s.budget.admit(now, rng) {
            s.stats.overload_skips += 1;
            s.skip_credit = s.skip_credit.saturating_add(1);
            s.skip_credit_at = Some(now);
            s.controller.on_repair(trigger);
            return;
        }
        let cost = s.codec.repair_cost();
        let stream = s.id;
        let mut made = 0u64;
        let mut bytes = 0u64;
        // A time-driven flush of a block code's partial block sends the code's own ratio of
        // repairs for the sources in it, not all of a full block's: a pinned k:m code then
        // costs m/k whatever the traffic. A flush sends at least one repair (an isolated
        // source gets ceil(m/k)); what it earned beyond what it sent, or sent beyond what it
        // earned, is carried to the next block (`Stream::block_credit`). Block-code repairs
        // are independent (any k' of the block's symbols suffice), so the ones left out are
        // simply not sent.
        let limit = match (trigger, s.block_rate) {
            (RepairTrigger::Timer, Some(rate)) => {
                s.block_credit += rate * s.codec.unprotected() as f64;
                let n = s.block_credit.floor().max(1.0);
                s.block_credit = (s.block_credit - n).max(-1.0);
                n as u64
            }
            _ => u64::MAX,
        };
        // A sliding-window repair between explicit bounds costs the sources it covers: its
        // width, more than the window for a spare over a round trip's answers, one for an
        // answer over its own loss.
        let exact = range.is_some() && matches!(s.codec, EncCodec::Rlc(_));
        let mut ops = 0u64;
        let mut emit = |info: RepairInfo, payload: &[u8]| {
            if made < limit {
                ops += if exact {
                    u64::from(info.nss)
                } else {
                    cost.max(u64::from(info.nss))
                };
                out.push(stream, info, payload, now);
                made += 1;
                bytes += payload.len() as u64;
            }
        };
        match range {
            Some((start, end)) => s.codec.repair_until(start, end, &mut emit),
            None => s.codec.repair_now(&mut emit),
        };
        s.budget.spend(ops);
        s.stats.symbol_ops += ops;
        s.stats.repairs += made;
        s.stats.repair_bytes += bytes;
        match trigger {
            RepairTrigger::Controller => s.stats.repairs_controller += made,
            RepairTrigger::Timer => s.stats.repairs_timer += made,
            RepairTrigger::Code => s.stats.repairs_code += made,
            RepairTrigger::LossReport => s.stats.repairs_report += made,
        }
        s.controller.on_repair(trigger);
        if s.codec.unprotected() == 0 {
            s.unprotected_since = None;
        }
    }

    /// The next repair to send, until `None`. The payload is valid until the next call.
    pub fn poll_repair(&mut self) -> Option<Repair<'_>> {
        if let Some(done) = self.current.take() {
            if self.out.pool.len() < POOL_MAX {
                self.out.pool.push(done.payload);
            }
        }
        self.current = self.out.queue.pop_front();
        self.current.as_ref().map(|r| Repair {
            stream: r.stream,
            info: r.info,
            timestamp: r.timestamp,
            payload: &r.payload,
        })
    }

    /// Takes a feedback from the decoder. Old (reordered or duplicated) feedback is ignored; a
    /// missing one changes nothing.
    pub fn handle_feedback(&mut self, fb: &Feedback, now: Instant) {
        let Some(i) = self.index.get(fb.stream) else {
            self.feedback_unknown_stream += 1;
            return;
        };
        let s = &mut self.streams[i];
        if let Some(last) = s.last_seq {
            let behind = last.wrapping_sub(fb.seq);
            if behind < STALE_SEQ {
                s.stats.feedback_stale += 1;
                return;
            }
        }
        s.last_seq = Some(fb.seq);
        s.stats.feedback += 1;
        if let Some(echo) = fb.echo {
            if let Some(sample) = self.out.clock.rtt(now, echo.ts, echo.hold_us) {
                // RFC 6298 smoothing (1/8).
                s.srtt = Some(match s.srtt {
                    None => sample,
                    Some(srtt) => (srtt * 7 + sample) / 8,
                });
                s.stats.rtt = s.srtt;
                Self::watch_queue(s, sample, now);
                if let (Some(codel), Some((base, _))) = (&mut s.codel, s.base_rtt) {
                    // The queue this side can act on is the outbound one.
                    codel.on_rtt(sample.saturating_sub(s.return_queue), base, now);
                }
            }
        }
        // Residual losses that our own skipped repairs may have caused are not the link's
        // (see `FeedbackContext::own_residual`). A loss is given up once it leaves the decoder's
        // window, after the skip that left it unrecovered: skips are a credit set against
        // later residuals, forgotten `SKIP_CREDIT_TTL` after the last one.
        if s.skip_credit_at
            .is_some_and(|t| now.saturating_duration_since(t) > SKIP_CREDIT_TTL)
        {
            s.skip_credit = 0;
        }
        let own_residual = s.skip_credit.min(fb.residual);
        s.skip_credit -= own_residual;
        let ctx = FeedbackContext {
            now,
            rtt: s.srtt,
            window: s.codec.window(),
            max_window: s.max_window,
            reach: s.reach,
            own_residual,
            deadline: self.cfg.deadline.map(|d| d.resolve(s.srtt)),
        };
        // The decoder's own drops are not link losses (see `Feedback::link_only`). The driver
        // counts them every few milliseconds while the decoder declares losses as packets
        // arrive, so a drop and the loss it causes often come in different feedback messages:
        // drops are kept as a credit that later losses are set against, for at most
        // `DROP_CREDIT_TTL` after the last report, so an old overload does not hide new link
        // losses.
        s.stats.peer_local_drops += u64::from(fb.local_drops);
        if fb.local_drops > 0 {
            s.drop_credit = s.drop_credit.saturating_add(fb.local_drops);
            s.drop_credit_at = Some(now);
        } else if s
            .drop_credit_at
            .is_some_and(|t| now.saturating_duration_since(t) > DROP_CREDIT_TTL)
        {
            s.drop_credit = 0;
        }
        let mut seen = *fb;
        seen.local_drops = s.drop_credit.min(fb.lost);
        s.drop_credit -= seen.local_drops;
        if s.queue_until.is_some_and(|t| now < t)
            && !Self::locally_overloaded(s, self.load_skip, now)
            && match s.controller.queue_yield() {
                QueueYield::Overflow => {
                    Self::overflowing(&seen.link_only(), s.controller.loss_estimate())
                }
                // `Queue` follows the queue signal itself (`yielding_to_queue`).
                QueueYield::Off | QueueYield::Queue => false,
            }
        {
            s.yield_until = s
                .yield_until
                .max(now.checked_add(s.srtt.unwrap_or(INITIAL_RTT) * 2));
            s.stats.queue_overflows += 1;
        }
        let yielding = Self::yielding_to_queue(s, self.load_skip, now);
        if yielding {
            // The losses of a queue's periods are its drops: left to the transports carried,
            // not repaid, and kept out of the loss estimate (they would raise the rate that
            // the queue just paused).
            seen.local_drops = fb.lost;
        }
        if fb.ce_marks > 0 {
            // A queue on the path marks CE: the period's losses are the queue's, which more
            // repairs would only lengthen. The controller does not see them, and
            // loss-triggered repairs pause as for a queue seen in the RTT.
            seen.local_drops = fb.lost;
            Self::pause_for_congestion(s, now);
            s.stats.ce_signals += 1;
        }
        s.controller.on_feedback(&seen.link_only(), &ctx);
        if let Some(h) = s.controller.history_wanted() {
            Self::keep_history(s, h.min(s.reach));
        }
        if let Some(w) = s.controller.window() {
            let w = w.clamp(1, s.max_window.max(1));
            if w != s.codec.window() {
                s.codec.set_window(w);
            }
        }
        Self::refresh_code_stats(s);
        if fb.local_drops > 0 {
            s.report_drop_credit = s.report_drop_credit.saturating_add(fb.local_drops);
        } else if s.drop_credit == 0 {
            s.report_drop_credit = 0;
        }
        if !fb.loss_report.is_empty() {
            let deadline = self.cfg.deadline.map(|d| d.resolve(s.srtt));
            // An explicit deadline says a later recovery is worth nothing: its sources get no
            // answer once it has passed. `auto` answers them late rather than never.
            let give_up = match self.cfg.deadline {
                Some(Deadline::Auto) | None => None,
                Some(_) => deadline,
            };
            Self::answer_loss_report(
                s,
                &mut self.out,
                &mut self.rng,
                &fb.loss_report,
                deadline,
                give_up,
                now,
            );
        }
    }

    /// Loss-triggered repair: one repair per ESI the report names that the window still
    /// covers and that was not answered in the last RTT (a repeated report, or one that crossed
    /// the repair in flight, gets nothing new), less the decoder's local drops (more repairs do
    /// not help a decoder that drops packets itself), within the answer budget. The repairs
    /// cover the window that ends just after the newest ESI named: sources sent after it may
    /// be lost too and not reported yet, and an equation that includes them would wait for
    /// their answers as well.
    fn answer_loss_report(
        s: &mut Stream,
        out: &mut Out,
        rng: &mut ChaCha8Rng,
        report: &LossReport,
        deadline: Option<Duration>,
        give_up: Option<Duration>,
        now: Instant,
    ) {
        let named = u64::from(report.missing());
        if !s.controller.answers_loss_reports() || s.queue_until.is_some_and(|t| now < t) {
            s.stats.report_withheld += named;
            return;
        }
        if s.memo.is_empty() {
            s.memo = vec![SourceMemo::default(); Self::memo_slots(s)];
        }
        let mask = s.memo.len() - 1;
        let quiet = s.srtt.unwrap_or(INITIAL_RTT) + Duration::from_millis(1);
        let w = u32::from(s.codec.window());
        let kept = s.codec.history();
        let next = s.next_esi;
        // Age 1 = the newest source. Ages beyond what the code keeps cannot be covered; an age
        // of 0 or "negative" names a source not sent yet (a corrupted report).
        let age = |esi: Esi| next.wrapping_sub(esi);
        let sent = |esi: Esi| (1..=kept).contains(&age(esi));
        let Some(newest) = report
            .ranges()
            .iter()
            .flat_map(|r| {
                let last = r.first.wrapping_add(u32::from(r.len) - 1);
                [r.first, last]
            })
            .filter(|&e| sent(e))
            .min_by_key(|&e| age(e))
        else {
            s.stats.report_withheld += named;
            return;
        };
        let end = newest.wrapping_add(1);
        let mut want = 0u32;
        let mut oldest = newest;
        s.named.clear();

        for r in report.ranges() {
            // Distance from `end`: 1..=w are covered by a repair that ends there.
            let back_first = end.wrapping_sub(r.first);
            if back_first == 0 || back_first > u32::MAX / 2 {
                continue;
            }
            let skip = back_first.saturating_sub(w);
            for k in skip..u32::from(r.len).min(back_first) {
                let esi = r.first.wrapping_add(k);
                let m = &mut s.memo[esi as usize & mask];
                if m.esi != esi {
                    // Sent before the memory existed.
                    *m = SourceMemo {
                        esi,
                        ..SourceMemo::default()
                    };
                }
                let since = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t));
                if give_up.zip(since(m.sent)).is_some_and(|(d, age)| age > d) {
                    // Past its deadline (its answer would arrive after it).
                    let after = esi.wrapping_add(1);
                    if s.answer_floor
                        .is_none_or(|f| (after.wrapping_sub(f) as i32) > 0)
                    {
                        s.answer_floor = Some(after);
                    }
                    continue;
                }
                if since(m.answered).is_some_and(|a| a < quiet) {
                    continue;
                }
                m.answered = Some(now);
                want += 1;
                s.named.push(esi);
                if end.wrapping_sub(esi) > end.wrapping_sub(oldest) {
                    oldest = esi;
                }
            }
        }
        let drops = s.report_drop_credit.min(want);
        s.report_drop_credit -= drops;
        want -= drops;
        let allowed = want.min(s.report_tokens.max(0.0) as u32);
        s.report_tokens -= f64::from(allowed);
        s.stats.report_withheld += named - u64::from(allowed);
        if let Some(d) = deadline {
            let rtt = s.srtt.unwrap_or(INITIAL_RTT);
            s.answer_spread = d.saturating_sub(rtt).mul_f64(ANSWER_SPREAD);
        }
        if s.codec.repairs_one_source() {
            // The oldest first: their deadlines come first.
            s.named
                .sort_unstable_by_key(|&esi| std::cmp::Reverse(end.wrapping_sub(esi)));
            let named = s.named.iter().take(allowed as usize);
            s.answer_queue.extend(named.map(|&esi| Queued::Loss(esi)));
            if allowed > 0 && s.answer_at.is_none_or(|t| t <= now) {
                Self::send_answer(s, out, rng, now);
            }
        } else {
            Self::queue_answers(s, out, rng, allowed, (oldest, end), now);
        }
        if allowed > 0 && deadline.is_some() {
            // An answer is lost with the link's loss probability, and asking again takes a
            // round trip more than the deadline leaves: spare repairs over the window of the
            // answers follow half the remaining time later, as many as the answers sent by then
            // need (see `spares_needed`). Later answers join the batch while one window still
            // covers all its losses, so the spares cover them too; past that they start a
            // batch of their own.
            let w = Self::repair_reach(s).min(s.codec.history());
            match s.spares.back_mut() {
                Some(b) if end.wrapping_sub(b.oldest) <= w => {
                    b.end = end;
                    b.answers += allowed;
                }
                _ => {
                    let rtt = s.srtt.unwrap_or(INITIAL_RTT);
                    let slack = deadline.unwrap_or(rtt).saturating_sub(rtt);
                    let wait = Self::spare_wait(s, slack, rtt);
                    Self::keep_for_spares(s, oldest, wait);
                    let wait = wait.min(Self::spare_reach(s, oldest));
                    if let Some(due) = now.checked_add(wait.max(Duration::from_micros(100))) {
                        s.spares.push_back(SpareBatch {
                            oldest,
                            end,
                            answers: allowed,
                            due,
                        });
                    }
                }
            }
        }
    }

    /// Congestion signal: a smoothed RTT (or two RTT samples in a row) above the path's base
    /// RTT (the smallest smoothed RTT of the last `BASE_RTT_WINDOW`) by more than
    /// `max(base/8, 4 rttvar, 2 ms)` means a queue is building on the path. Loss-triggered
    /// repairs (answers and their spares), and the controller's own repairs where it yields to
    /// queues, then stop for two smoothed RTTs after each such sample: repairs would only add to
    /// that queue, and the transports carried see the congestion losses and back off as they
    /// would without the tunnel. Once the pause ends, repairs resume; feedback keeps measuring
    /// the path meanwhile.
    fn watch_queue(s: &mut Stream, sample: Duration, now: Instant) {
        // The base is the smallest *smoothed* RTT: jitter spreads the samples (and, where the
        // link keeps its order, delays most of them), a queue lifts the smoothed RTT itself.
        let srtt = s.srtt.unwrap_or(sample);
        let base = match s.base_rtt {
            Some((b, at)) if srtt >= b && now.saturating_duration_since(at) < BASE_RTT_WINDOW => b,
            _ => {
                s.base_rtt = Some((srtt, now));
                srtt
            }
        };
        // RFC 6298's deviation, for the margin.
        let dev = sample.abs_diff(srtt);
        s.rttvar = (s.rttvar * 3 + dev) / 4;
        let margin = (base / 8).max(s.rttvar * 4).max(Duration::from_millis(2));
        // Feedback comes every ~50 ms, so the smoothed RTT takes ~8 of them (400 ms) to show a
        // queue that slow-starting transports fill in a few round trips: two samples in a row
        // above the threshold count too (one alone may be jitter).
        s.queue_samples = if sample > base + margin {
            s.queue_samples.saturating_add(1)
        } else {
            0
        };
        if srtt > base + margin || s.queue_samples >= 2 {
            Self::pause_for_congestion(s, now);
            s.stats.queue_signals += 1;
        }
    }

    /// Whether `s`'s controller repairs stop now (see `QueueYield`): with `QueueYield::Queue`,
    /// while the queue signal pauses the answers (see `watch_queue`); with
    /// `QueueYield::Overflow`, for two RTTs after a feedback that came while the path queued
    /// and lost more than the link's loss process explains (`overflowing`). The transports carried then see the queue's drops, and back off as
    /// they would without the tunnel, instead of filling the queue to its end while the
    /// tunnel repairs the drops.
    fn yielding_to_queue(s: &Stream, load_skip: f64, now: Instant) -> bool {
        let queued = s.queue_until.is_some_and(|t| now < t);
        s.yield_until.is_some_and(|t| now < t)
            || (queued
                && s.controller.queue_yield() == QueueYield::Queue
                && !Self::locally_overloaded(s, load_skip, now))
    }

    /// Whether either end lacks CPU: this one skips repairs for load, or the decoder reported
    /// drops of its own in the last `LOCAL_OVERLOAD_MEMORY`. A queue then is most likely that
    /// end's own (a socket or TUN backlog, which the RTT includes) rather than the path's, and
    /// overload control already sheds repairs: they do not also give way to it.
    fn locally_overloaded(s: &Stream, load_skip: f64, now: Instant) -> bool {
        load_skip > 0.0
            || s.drop_credit_at
                .is_some_and(|t| now.saturating_duration_since(t) <= LOCAL_OVERLOAD_MEMORY)
    }

    /// Whether a feedback period's losses exceed what the link's loss process `(p, b)` (loss
    /// ratio, mean burst) explains: more than the mean plus three standard deviations of a
    /// compound Poisson count (bursts of geometric length `b`: variance `n p (2b - 1)`), plus
    /// one burst. A random loss burst alone seldom passes it; a drop-tail queue's overflow does.
    fn overflowing(fb: &Feedback, (p, b): (f64, f64)) -> bool {
        let n = f64::from(fb.received) + f64::from(fb.lost);
        let mean = n * p;
        let sd = (mean * (2.0 * b - 1.0).max(1.0)).sqrt();
        f64::from(fb.lost) > mean + 3.0 * sd + b.max(1.0)
    }

    /// Loss-triggered repairs (answers and their spares) stop for two smoothed RTTs: the
    /// answers sent before the signal still arrive for one more, and the budget saved meanwhile
    /// is dropped rather than spent at once when the pause ends.
    fn pause_for_congestion(s: &mut Stream, now: Instant) {
        let srtt = s.srtt.unwrap_or(INITIAL_RTT);
        s.queue_until = now.checked_add(srtt * 2);
        s.report_tokens = 0.0;
        s.answer_queue.clear();
        s.answer_at = None;
    }

    /// Queues `n` answers to losses from `oldest` up to `end` (exclusive) and sends the first
    /// at once. Answers go out oldest first, each over the window ending at the newest end
    /// queued whose window still reaches back to its losses (a newer end covers newer losses
    /// too), else at its own end.
    fn queue_answers(
        s: &mut Stream,
        out: &mut Out,
        rng: &mut ChaCha8Rng,
        n: u32,
        (oldest, end): (Esi, Esi),
        now: Instant,
    ) {
        if n == 0 {
            return;
        }
        match s.answer_queue.back_mut() {
            Some(Queued::Window(run)) if run.oldest == oldest && run.end == end => run.n += n,
            _ => s
                .answer_queue
                .push_back(Queued::Window(AnswerRun { oldest, end, n })),
        }
        if s.answer_at.is_none_or(|t| t <= now) {
            Self::send_answer(s, out, rng, now);
        }
    }

    /// How long after the first answer of a batch its spares go out, given the slack the
    /// deadline leaves after a round trip. Where an answer's window spans more than a round
    /// trip of sources, the answers and spares of later batches also cover this batch's
    /// losses: the spares wait half the slack and back up every answer sent meanwhile. Where
    /// it does not (the answers need more than twice the window kept, see `keep_history`),
    /// this batch's spares are all its lost answers get, and they must arrive
    /// before the deadline of its first loss, `slack - RTT/2` after its answer: they leave
    /// `TRAILING_SPARE_SHARE` of that time later (docs/results/2026-11-27-answer-reach.md).
    fn spare_wait(s: &Stream, slack: Duration, rtt: Duration) -> Duration {
        let wanted = s.controller.history_wanted().unwrap_or(0);
        if wanted > 2 * Self::repair_reach(s) {
            slack.saturating_sub(rtt / 2).mul_f64(TRAILING_SPARE_SHARE)
        } else {
            slack / 2
        }
    }

    /// The most sources one repair may span: the window, or wider where the code allows wider
    /// repairs (spares over a round trip's answers).
    fn repair_reach(s: &Stream) -> u32 {
        u32::from(s.codec.window()).max(s.codec.wide_repairs())
    }

    /// Keeps the sources the spares of a batch whose oldest loss is `oldest` will cover when
    /// they leave, `wait` from now (and a quarter more for their pacing), as far as a repair
    /// may reach. Where a round trip is a small part of the deadline the code would otherwise
    /// keep little more than its window, which new sources pass through in a few
    /// milliseconds.
    fn keep_for_spares(s: &mut Stream, oldest: Esi, wait: Duration) {
        if s.source_gap.is_zero() {
            return;
        }
        let age = s.next_esi.wrapping_sub(oldest);
        let during = (wait.as_secs_f64() / s.source_gap.as_secs_f64()).ceil() as u32;
        let need = age.saturating_add(during).saturating_mul(4) / 3;
        Self::keep_history(s, need.min(Self::repair_reach(s)));
    }

    /// How long the spares of a batch whose oldest loss is `oldest` may wait: a spare sent
    /// once that loss has left the sources the code keeps cannot cover it (see
    /// `keep_for_spares`). A quarter of what is kept is left for the spares' own pacing.
    fn spare_reach(s: &Stream, oldest: Esi) -> Duration {
        if s.source_gap.is_zero() {
            return Duration::MAX;
        }
        let kept = s.codec.history();
        let age = s.next_esi.wrapping_sub(oldest);
        s.source_gap * kept.saturating_sub(age).saturating_sub(kept / 4)
    }

    /// Slots of the memory of loss reports: a power of two that holds every source the code
    /// keeps.
    fn memo_slots(s: &Stream) -> usize {
        (s.codec.history() as usize)
            .next_power_of_two()
            .max(ANSWERED_SLOTS)
    }

    /// Before the first feedback a learning encoder (`EncoderConfig::answer_reach_grows`)
    /// cannot size its history, yet the first loss reports, a round trip later, need the
    /// sources of that whole round trip: the history doubles whenever the stream's sources
    /// fill it, for at most [`UNMEASURED_HISTORY`] and up to the reach. `esi` is the source
    /// just pushed (a stream's ESIs start at 0); `age` how long ago its first one came.
    fn keep_until_measured(s: &mut Stream, esi: Esi, age: Duration) {
        let kept = s.codec.history();
        if age <= UNMEASURED_HISTORY && esi.saturating_add(1) >= kept {
            Self::keep_history(s, kept.saturating_mul(2).min(s.reach));
        }
    }

    /// Keeps `n` sources for the answers to loss reports (the controller asks for more than a
    /// window when a round trip of sources exceeds it), and a memory of reports to match.
    /// Allocates when it grows, which happens a few times per stream at most.
    fn keep_history(s: &mut Stream, n: u32) {
        if n <= s.codec.history() {
            return;
        }
        s.codec.set_history(n);
        let slots = Self::memo_slots(s);
        if !s.memo.is_empty() && s.memo.len() < slots {
            let mut memo = vec![SourceMemo::default(); slots];
            for m in s.memo.drain(..).filter(|m| m.sent.is_some()) {
                memo[m.esi as usize & (slots - 1)] = m;
            }
            s.memo = memo;
        }
        s.stats.history = s.codec.history();
    }

    /// Sources between two answers (see `ANSWER_SPACING_BURSTS`), but no more than keeps the
    /// answers ahead of the losses (half a loss interval) and drains the queue within
    /// `answer_spread`. One (every source) without a deadline.
    fn answer_spacing(s: &Stream) -> u32 {
        let (p, burst) = s.controller.loss_estimate();
        let mut cap = (0.5 / p.max(1e-3)).floor();
        let due: u32 = s.answer_queue.iter().map(Queued::count).sum();
        if due > 0 && !s.source_gap.is_zero() {
            let sources = s.answer_spread.as_secs_f64() / s.source_gap.as_secs_f64();
            cap = cap.min((sources / f64::from(due)).floor());
        }
        // Independent losses (bursts of 1) need no spacing.
        (1.0 + (ANSWER_SPACING_BURSTS * (burst - 1.0)).ceil())
            .min(cap)
            .max(1.0) as u32
    }

    /// Copies the code's window and the controller's state into the stream's stats.
    fn refresh_code_stats(s: &mut Stream) {
        s.stats.window = s.codec.window();
        s.stats.window_max = s.max_window;
        s.stats.deadline_window_wanted = s.controller.deadline_window_wanted().unwrap_or(0);
        s.stats.rate = s.controller.rate();
    }

    /// Sends one queued answer and schedules the next.
    fn send_answer(s: &mut Stream, out: &mut Out, rng: &mut ChaCha8Rng, now: Instant) {
        let (oldest, mut end, single) = match s.answer_queue.front_mut() {
            None => return,
            Some(&mut Queued::Loss(esi)) => {
                s.answer_queue.pop_front();
                (esi, esi.wrapping_add(1), true)
            }
            Some(Queued::Window(run)) => {
                let span = (run.oldest, run.end, false);
                run.n -= 1;
                if run.n == 0 {
                    s.answer_queue.pop_front();
                }
                span
            }
        };
        s.answer_sources = 0;
        let w = u32::from(s.codec.window());
        if !single {
            for later in &s.answer_queue {
                let Queued::Window(later) = later else {
                    continue;
                };
                if (later.end.wrapping_sub(end) as i32) > 0 && later.end.wrapping_sub(oldest) <= w {
                    end = later.end;
                }
            }
        }
        let wide = s.codec.wide_repairs();
        let start = if single {
            Some(oldest)
        } else if end.wrapping_sub(oldest) > w && wide > w {
            // Losses spread over more than a window (a report's, or a batch's that spares
            // back up): one repair over all of them, from the oldest, not past the floor.
            let from = newer(oldest, end.wrapping_sub(wide));
            Some(s.answer_floor.map_or(from, |f| newer(from, f)))
        } else {
            Self::answer_start(s, end)
        };
        Self::repair_until(
            s,
            out,
            rng,
            RepairTrigger::LossReport,
            Some((start, end)),
            now,
        );
        s.answer_at = if !s.answer_queue.is_empty() {
            let spacing = Self::answer_spacing(s);
            let gap = if spacing > 1 {
                ANSWER_GAP.max(s.source_gap)
            } else {
                ANSWER_GAP
            };
            now.checked_add(gap * spacing)
        } else {
            None
        };
    }

    /// Where the window of an answer ending before `end` starts if it must not reach back to
    /// the stream's answer floor (see `Stream::answer_floor`); `None`: the full window.
    fn answer_start(s: &Stream, end: Esi) -> Option<Esi> {
        let floor = s.answer_floor?;
        let back = end.wrapping_sub(floor);
        (back > 0 && back < u32::from(s.codec.window())).then_some(floor)
    }

    /// Spare repairs that back up `answers` answers to loss reports, spares and answers sent
    /// `spacing` sources apart, on a link that loses a share `p` of the packets in bursts of mean length
    /// `burst`: the fewest `k` for which the expected number of lost answers beyond `k`
    /// (`E[(L - k)+]`) is at most `SPARE_MISS` per answer and more than `k` are lost
    /// (`P(L > k)`) in at most `SPARE_SHORT` of the batches.
    ///
    /// A packet after a lost one is lost too with probability about `1 - 1/burst`, so two
    /// answers `spacing + 1` packets apart fall in the same burst with probability
    /// `rho = (1 - 1/burst)^(spacing + 1)`: the lost answers come in runs of mean
    /// `1/(1 - rho)`. `L` is then compound Poisson (Polya-Aeppli): a Poisson number of runs,
    /// each of a geometric length. Its tail, not only its mean, sets the spares: a long
    /// burst that takes several answers is what a count of runs alone would miss.
    fn spares_needed(answers: u32, (p, burst): (f64, f64), spacing: u32) -> u32 {
        let n = f64::from(answers);
        let rho = (1.0 - 1.0 / burst.max(1.0)).powi(spacing.min(64) as i32 + 1);
        let run = (1.0 / (1.0 - rho).max(1e-6)).clamp(1.0, n.max(1.0));
        let runs = n * p.clamp(0.0, 0.5) / run;
        let tolerated = SPARE_MISS * n;
        Self::compound_poisson_quantile(runs, 1.0 / run, (tolerated, SPARE_SHORT), answers)
    }

    /// The fewest `k <= max` with `E[(L - k)+] <= tolerated` and `P(L > k) <= short`, `L`
    /// the sum of a Poisson(`runs`) number of geometric lengths on 1, 2, ... with parameter
    /// `theta` (mean `1/theta`). Panjer's recursion gives the distribution:
    /// `f(0) = exp(-runs)`, `f(m) = runs/m * sum_{j=1..m} j * theta * (1 - theta)^(j-1) * f(m - j)`.
    fn compound_poisson_quantile(
        runs: f64,
        theta: f64,
        (tolerated, short): (f64, f64),
        max: u32,
    ) -> u32 {
        let mean = runs / theta;
        let mut pmf = Vec::with_capacity(16);
        pmf.push((-runs).exp());
        // E[(L - k)+] = mean - k + sum_{l < k} (k - l) f(l), kept as running sums; `below`
        // is P(L < k) before and P(L <= k) after `pmf[k]` is added.
        let (mut below, mut weighted) = (0.0, 0.0);
        for k in 0..max {
            let m = k as usize;
            if m > 0 {
                let mut g = theta;
                let mut acc = 0.0;
                for j in 1..=m {
                    acc += j as f64 * g * pmf[m - j];
                    g *= 1.0 - theta;
                }
                pmf.push(runs / m as f64 * acc);
            }
            if mean - f64::from(k) + weighted <= tolerated && 1.0 - (below + pmf[m]) <= short {
                return k;
            }
            below += pmf[m];
            weighted += below;
        }
        max
    }

    /// The recovery deadline, where it shapes the time-driven repair: sliding-window codes
    /// only. A block code's flush sends the code's ratio for the sources of the partial block,
    /// so a block code costs m/k at any traffic rate only if its flush keeps the configured
    /// delay.
    fn timer_deadline(&self) -> Option<Deadline> {
        self.cfg
            .deadline
            .filter(|_| self.cfg.mode.scheme.is_sliding())
    }

    /// Whether the time-driven repair waits for a pause in the sources rather than for
    /// `repair_delay` after the first unprotected one: with a deadline (the loss reports or
    /// the proactive rate cover dense traffic).
    fn pause_timer(&self, _s: &Stream) -> bool {
        self.timer_deadline().is_some()
    }

    fn repair_delay(&self, s: &Stream) -> Option<Duration> {
        let d = s.controller.repair_delay().or(self.cfg.repair_delay)?;
        match self.timer_deadline() {
            Some(deadline) => Some(d.min(deadline.resolve(s.srtt) / 3)),
            None => Some(d),
        }
    }

    /// When the time-driven repair of `s` is due, if one is: `repair_delay` after its first
    /// unprotected source (with a deadline: after its latest source, so only a pause in the
    /// traffic triggers it), or its pending re-send, whichever comes first.
    fn timer_due(&self, s: &Stream) -> Option<Instant> {
        let since = if self.pause_timer(s) {
            s.unprotected_since.and(s.last_source_at)
        } else {
            s.unprotected_since
        };
        let fresh = since.and_then(|since| since.checked_add(self.repair_delay(s)?));
        match (fresh, s.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When [`Encoder::handle_timeout`] must be called next (a time-driven repair or its
    /// re-send is due), or `None` if no source is waiting for protection.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.streams
            .iter()
            .flat_map(|s| {
                [
                    self.timer_due(s),
                    s.spares.front().map(|b| b.due),
                    s.answer_at,
                ]
            })
            .flatten()
            .min()
    }

    /// Sends the time-driven repairs that are due at `now`; then drain [`Encoder::poll_repair`].
    pub fn handle_timeout(&mut self, now: Instant) {
        let sliding = self.cfg.mode.scheme.is_sliding();
        for s in &mut self.streams {
            if s.answer_at.is_some_and(|t| t <= now) {
                Self::send_answer(s, &mut self.out, &mut self.rng, now);
            }
            while s.spares.front().is_some_and(|b| b.due <= now) {
                let Some(b) = s.spares.pop_front() else {
                    break;
                };
                // The spares go out at the spacing the answers get now.
                let k = if s.queue_until.is_some_and(|t| now < t) {
                    0
                } else {
                    let spacing = Self::answer_spacing(s);
                    Self::spares_needed(b.answers, s.controller.loss_estimate(), spacing)
                };
                // Answers over one loss each share no equation with the losses around them,
                // so a batch whose lost answers outnumber its spares has only later spares
                // to turn to: each batch's spares also reach back over the previous batch's
                // losses, where one repair can cover both.
                let reach = Self::repair_reach(s);
                let oldest = match s.previous_spares {
                    Some(prev)
                        if s.codec.repairs_one_source() && b.end.wrapping_sub(prev) <= reach =>
                    {
                        older(prev, b.oldest)
                    }
                    _ => b.oldest,
                };
                s.previous_spares = Some(b.oldest);
                let span = (oldest, b.end);
                Self::queue_answers(s, &mut self.out, &mut self.rng, k, span, now);
            }
        }
        for i in 0..self.streams.len() {
            match self.timer_due(&self.streams[i]) {
                Some(due) if due <= now => {}
                _ => continue,
            }
            let delay = self.repair_delay(&self.streams[i]);
            let pause = self.pause_timer(&self.streams[i]);
            let s = &mut self.streams[i];
            let since = if pause {
                s.unprotected_since.and(s.last_source_at)
            } else {
                s.unprotected_since
            };
            let fresh = since
                .zip(delay)
                .and_then(|(since, d)| since.checked_add(d))
                .is_some_and(|due| due <= now);
            if let (Some(rate), true) = (s.block_rate, fresh) {
                // A flush whose sources have not earned a whole repair sends one anyway, so
                // lone sources between blocks would cost a repair each; a source that is just
                // late joins the flushed block if the flush waits one more delay (once).
                let earned = s.block_credit + rate * s.codec.unprotected() as f64;
                if earned < 1.0 && !s.block_flush_waited {
                    s.block_flush_waited = true;
                    s.unprotected_since = Some(now);
                    continue;
                }
            }
            if Self::yielding_to_queue(s, self.load_skip, now) {
                // The path queues: a timer repair would add to it (see `yielding_to_queue`).
                s.stats.queue_skips += 1;
                Self::forgo_timer_repair(s);
                continue;
            }
            if self.load_skip > 0.0 {
                // Overloaded (HIRT §V): timer repairs go first. They exist for sparse traffic,
                // and an overloaded worker leaves sources "unprotected" only because it is
                // behind; the rate-driven repairs still come. No re-send series either.
                s.stats.overload_skips += 1;
                s.stats.timer_skips += 1;
                Self::forgo_timer_repair(s);
                continue;
            }
            Self::repair(s, &mut self.out, &mut self.rng, RepairTrigger::Timer, now);
            // Even if skipped or empty: wait for new sources (or the re-send) before trying
            // again.
            s.unprotected_since = None;
            // The repair may be lost and, with sparse traffic, the next source may be far away:
            // re-send over the same window `repair_delay` later unless another repair goes out
            // first. A fresh timer repair starts a new series; a re-send uses one up.
            if fresh {
                s.retries_left = self.cfg.repair_retries;
            }
            s.retry_at = None;
            s.retry_for_pause = false;
            if let (true, Some(d)) = (sliding, delay) {
                if s.retries_left > 0 {
                    s.retries_left -= 1;
                    s.retry_at = now.checked_add(self.cfg.repair_retry_gap.unwrap_or(d));
                }
            }
        }
    }

    /// A due timer repair that is not sent: the controller counts it as made (so it does not
    /// owe it later), and neither it nor its re-send series is tried again before new sources.
    fn forgo_timer_repair(s: &mut Stream) {
        s.controller.on_repair(RepairTrigger::Timer);
        s.unprotected_since = None;
        s.retry_at = None;
        s.retry_for_pause = false;
        s.retries_left = 0;
    }

    /// Counters of one stream, if it exists.
    pub fn stats(&self, stream: StreamId) -> Option<EncoderStats> {
        self.index.get(stream).map(|i| self.streams[i].stats)
    }

    /// Ids of the streams created so far, in creation order.
    pub fn streams(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.streams.iter().map(|s| s.id)
    }

    /// Name of the controller of `stream` (for metrics).
    pub fn controller_name(&self, stream: StreamId) -> Option<&'static str> {
        self.index
            .get(stream)
            .map(|i| self.streams[i].controller.name())
    }

    /// Feedback messages dropped because their stream does not exist here.
    pub fn feedback_unknown_stream(&self) -> u64 {
        self.feedback_unknown_stream
    }

    /// Tells the encoder how busy the CPU that runs it is: `load` is the fraction of the last
    /// measurement period the driver's thread spent working rather than waiting (0.0..=1.0).
    /// Above [`EncoderConfig::overload_threshold`] repairs are skipped at random (counted in
    /// `overload_skips`), so that an overloaded router does not add work. The controller still
    /// sees each skipped repair as sent, so it does not try to make up for it later.
    pub fn set_cpu_load(&mut self, load: f64) {
        self.load_skip = crate::overload::load_skip_probability(load, self.cfg.overload_threshold);
        for s in &mut self.streams {
            s.budget.set_load_skip(self.load_skip);
        }
    }

    /// Replaces the repair-rate controller of every stream (and of streams created later), e.g.
    /// a live change from the dataplane's control socket. The code and the ESI numbering are
    /// untouched, so the decoder needs no change. (Added by the dataplane.)
    pub fn set_controller(&mut self, controller: &crate::ControllerConfig) {
        self.cfg.mode.controller = controller.clone();
        for s in &mut self.streams {
            s.controller = controller::build(controller, s.max_window);
            if let Some(w) = s.controller.window() {
                s.codec.set_window(w.clamp(1, s.max_window.max(1)));
            }
            Self::refresh_code_stats(s);
        }
    }
}

/// The earlier of two ESIs (serial order).
fn older(a: Esi, b: Esi) -> Esi {
    if (a.wrapping_sub(b) as i32) > 0 {
        b
    } else {
        a
    }
}

/// The later of two ESIs (serial order).
fn newer(a: Esi, b: Esi) -> Esi {
    if (a.wrapping_sub(b) as i32) > 0 {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_follow_the_tail_of_the_lost_answers() {
        // Runs of one answer: Poisson. With 0.225 expected losses, E[(L - 2)+] =
        // 0.225 - 2 + 2 e^-0.225 + 0.225 e^-0.225 = 0.0016986 (by hand).
        assert_eq!(
            Encoder::compound_poisson_quantile(0.225, 1.0, (0.0018, 1.0), 100),
            2
        );
        assert_eq!(
            Encoder::compound_poisson_quantile(0.225, 1.0, (0.0015, 1.0), 100),
            3
        );
        // The same mean in runs of mean 2 needs far more: a run takes several at once.
        assert_eq!(
            Encoder::compound_poisson_quantile(0.1125, 0.5, (0.0015, 1.0), 100),
            8
        );
        // Never more than asked.
        assert_eq!(
            Encoder::compound_poisson_quantile(50.0, 0.1, (1e-9, 1e-9), 12),
            12
        );
        assert_eq!(
            Encoder::compound_poisson_quantile(0.0, 1.0, (0.0, 0.0), 12),
            0
        );
    }

    #[test]
    fn spares_make_a_short_batch_rare() {
        // 100 answers at 3.5 % independent loss: L is Poisson(3.5). By hand,
        // E[(L - 8)+] = 0.0146 <= 0.02 but P(L > 8) = 0.0099; P(L > 10) = 0.00102,
        // P(L > 11) = 0.00029.
        let q = |limits| Encoder::compound_poisson_quantile(3.5, 1.0, limits, 100);
        assert_eq!(q((0.02, 1.0)), 8);
        assert_eq!(q((0.02, 1e-3)), 11);
        assert_eq!(q((1.0, 1.1e-3)), 10);
        // A lone answer is backed by one spare whichever limit decides.
        assert_eq!(Encoder::spares_needed(1, (0.035, 1.0), 1), 1);
        assert_eq!(Encoder::spares_needed(100, (0.035, 1.0), 1), 11);
    }

    #[test]
    fn spaced_answers_need_fewer_spares() {
        // 3 % loss in bursts of mean 4, 40 answers: back to back, the bursts take runs of
        // them; 8 sources apart they are nearly independent.
        let close = Encoder::spares_needed(40, (0.03, 4.0), 1);
        let apart = Encoder::spares_needed(40, (0.03, 4.0), 8);
        let uniform = Encoder::spares_needed(40, (0.03, 1.0), 1);
        assert!(
            close > apart && apart >= uniform,
            "{close} {apart} {uniform}"
        );
        assert_eq!(Encoder::spares_needed(0, (0.03, 4.0), 1), 0);
    }
}
