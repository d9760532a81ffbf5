//! One simulated run: source -> encoder -> forward link -> decoder, feedback over a reverse link.
//!
//! The run is a discrete-event simulation on a virtual clock (nanoseconds since the start). The
//! event heap is keyed on `(time, seq)` so that simultaneous events fire in the order they were
//! scheduled (smoltcp `netsim`): with the same seed every run is bit-for-bit identical. The
//! hirt-core [`Encoder`] and [`Decoder`] are driven exactly through their public sans-IO API;
//! time is handed to them as `base + virtual time` where `base` is one `Instant` taken per run
//! (only differences are ever reported, so the report does not depend on it).

use crate::events::{EventHeap, Fate, Queued};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use hirt_channel::{Link, LinkConfig, LossSpec, QueueLimit};
use hirt_core::{
    answer_reach_lag, Deadline, Decoder, DecoderConfig, Encoder, EncoderConfig, FecMode, Feedback,
    RepairInfo, StreamId, Verdict, DEFAULT_LOSS_REPORT_GAP,
};
use serde::Serialize;

use crate::traffic::{Pattern, SizeMix, Source};

/// Everything that defines a run. Two runs with equal `Scenario`s produce equal [`Report`]s.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// FEC mode string (`ours`, `hirt`, `maelstrom:r=20,i=1-20`, ...), see `hirt_core::FecMode`.
    pub scheme: String,
    /// Sliding window for RLC modes that do not set `w=`; `None`: [`hirt_core::DEFAULT_WINDOW`]
    /// (HIRT's 200), except `ours`, which uses [`OURS_WINDOW`].
    pub window: Option<u16>,
    /// Forward-link loss model.
    pub loss: LossSpec,
    /// Reverse-link (feedback) loss model.
    pub feedback_loss: LossSpec,
    /// Source packets to send.
    pub packets: u64,
    /// Source packet rate (mean), packets per second.
    pub rate_pps: f64,
    /// Arrival process.
    pub pattern: Pattern,
    /// Packet sizes (bytes given to the encoder).
    pub sizes: SizeMix,
    /// One-way delay of both links.
    pub delay: Duration,
    /// Jitter of both links (FIFO kept).
    pub jitter: Duration,
    /// Forward bottleneck in bit/s (`None`: unlimited) and its queue.
    pub link_rate_bps: Option<u64>,
    /// Drop-tail queue in front of the bottleneck.
    pub queue: QueueLimit,
    /// ECN marking at the bottleneck: a packet finding more than this many queued is marked
    /// CE, and the decoder passes the marks on (`None`: no marking).
    pub ecn_mark_above: Option<usize>,
    /// Fraction of forward packets reordered, and by how much they are held back.
    pub reorder: (f64, Duration),
    /// Time-driven repair delay (`None`: off).
    pub repair_delay: Option<Duration>,
    /// Time-driven re-sends after a timer repair (`hirt_core::EncoderConfig::repair_retries`).
    pub repair_retries: u8,
    /// In-order release at the decoder (`hirt_core::DecoderConfig::in_order`; `None`: off).
    pub in_order: Option<Duration>,
    /// The flows the sources belong to: (flows, run): runs of `run` consecutive sources each
    /// belong to one flow drawn at random among `flows`, like the segment trains of several
    /// connections sharing the tunnel. The decoder is told each source's flow (in-order release
    /// per flow, `hirt_core::HoldScope`). `None`: one unnamed flow.
    pub flows: Option<(u32, u32)>,
    /// What a hole holds back under in-order release.
    pub in_order_scope: hirt_core::HoldScope,
    /// Master seed: the links, the source and the core derive theirs from it.
    pub seed: u64,
    /// Extra source packets sent after the `packets` measured ones and not counted, so that the
    /// last measured losses get the repairs a long-lived tunnel would send after them (without
    /// it, every loss in the final window is unrecoverable: an artefact of stopping).
    pub tail: u64,
    /// Recovery deadline. Recoveries later than it (after the time the original would have
    /// arrived) are counted as late; `ours` also runs its deadline mode (window from the
    /// deadline, loss reports answered when it exceeds a round trip, the decoder sends them).
    /// `None`: no deadline (every recovery is in time; `ours` as without one).
    pub deadline: Option<Deadline>,
    /// How far back `ours`'s answers to loss reports may reach, with a deadline past the
    /// round trip.
    pub answer_reach: AnswerReach,
}

/// How far behind its newest source the decoder keeps sources for answers to loss reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnswerReach {
    /// The path's need ([`hirt_core::answer_reach_lag`] of the rate, the RTT and the deadline)
    /// from the start, and the encoder keeps as much from the first source.
    #[default]
    Path,
    /// Learned: the window's span at first, grown by the decoder up to the most it allows when
    /// an answer reaches past it (`hirt_core::EncoderConfig::answer_reach_grows`); the encoder
    /// keeps what its controller asks.
    Grown,
    /// The window's span only.
    Window,
}

impl std::str::FromStr for AnswerReach {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "path" => Ok(AnswerReach::Path),
            "grown" => Ok(AnswerReach::Grown),
            "window" => Ok(AnswerReach::Window),
            other => Err(format!("{other:?}: path | grown | window")),
        }
    }
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            scheme: "ours".into(),
            window: None,
            loss: LossSpec::None,
            feedback_loss: LossSpec::None,
            packets: 100_000,
            rate_pps: 10_000.0,
            pattern: Pattern::Cbr,
            sizes: SizeMix {
                entries: vec![(32, 1)],
            },
            delay: Duration::from_millis(25),
            jitter: Duration::ZERO,
            link_rate_bps: None,
            queue: QueueLimit::Packets(10_000),
            ecn_mark_above: None,
            reorder: (0.0, Duration::ZERO),
            repair_delay: Some(Duration::from_millis(5)),
            repair_retries: 1,
            in_order: None,
            flows: None,
            in_order_scope: hirt_core::HoldScope::Flow,
            seed: 1,
            tail: 5_000,
            deadline: None,
            answer_reach: AnswerReach::Path,
        }
    }
}

/// Window of `ours` unless one is given: 12x HIRT's 200. The RLC code's recovery grows with the
/// window (a convolutional code averages the loss process over it) while its cost per repair is
/// linear in it; see `docs/simulator.md` for the reasons and `docs/results/2026-simulator.md`
/// for the measurements behind this choice.
pub const OURS_WINDOW: u16 = 2400;

/// Whether a scheme string names our controller (the one with a deadline mode).
pub fn is_ours(scheme: &str) -> bool {
    scheme.trim().starts_with("ours")
}

/// The window a scheme string gets when the scenario names none (with a deadline, `ours` gets
/// the largest window and sizes the one it uses from the deadline).
pub fn default_window_with(scheme: &str, deadline: Option<Deadline>) -> u16 {
    if is_ours(scheme) && deadline.is_some() {
        hirt_core::config::MAX_WINDOW
    } else {
        default_window(scheme)
    }
}

/// The window a scheme string gets when the scenario names none.
pub fn default_window(scheme: &str) -> u16 {
    if is_ours(scheme) {
        OURS_WINDOW
    } else {
        hirt_core::DEFAULT_WINDOW
    }
}

/// Counters and distributions of one run (the JSON `hirt sim --json` prints).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// The FEC mode as given.
    pub scheme: String,
    /// The forward loss model (canonical form).
    pub loss: String,
    /// Master seed (replays this run).
    pub seed: u64,
    /// Source packets sent by the source.
    pub sources: u64,
    /// Source bytes.
    pub source_bytes: u64,
    /// Source packets lost on the forward link (loss model + queue drops).
    pub lost: u64,
    /// Lost sources the decoder recovered (delivered through `poll_recovered`).
    pub recovered: u64,
    /// Lost sources never delivered.
    pub unrecovered: u64,
    /// `recovered / lost` (1 when nothing was lost).
    pub recovered_ratio: f64,
    /// `unrecovered / sources`: the loss the end hosts see.
    pub residual_loss: f64,
    /// `lost / sources` on the forward link.
    pub link_loss: f64,
    /// Repair packets sent.
    pub repairs: u64,
    /// Repair payload bytes sent.
    pub repair_bytes: u64,
    /// Repair packets lost on the forward link.
    pub repairs_lost: u64,
    /// `repairs / sources`.
    pub overhead: f64,
    /// `repair_bytes / source_bytes`.
    pub overhead_bytes: f64,
    /// Recovery delay in source packets: sources due at the decoder (send time + one-way delay)
    /// after the lost one and before its recovery.
    pub recovery_delay_p50_pkts: f64,
    /// 99th percentile of the above.
    pub recovery_delay_p99_pkts: f64,
    /// Maximum of the above.
    pub recovery_delay_max_pkts: f64,
    /// Recovery delay in ms: recovery time minus the time the original would have arrived
    /// (send time + one-way delay).
    pub recovery_delay_p50_ms: f64,
    /// 99th percentile of the above.
    pub recovery_delay_p99_ms: f64,
    /// Maximum of the above.
    pub recovery_delay_max_ms: f64,
    /// 99th percentile of the recovery latency: recovery time minus the source's send time (the
    /// quantity bounded by `2 x repair_delay + one-way delay` with sparse traffic).
    pub recovery_latency_p99_ms: f64,
    /// Maximum of the above.
    pub recovery_latency_max_ms: f64,
    /// Decoder symbol operations (row operations, the decoding work).
    pub decoder_symbol_ops: u64,
    /// Encoder symbol operations (a multiply-add of one source into one repair each: a
    /// repair over W sources costs W).
    pub encoder_symbol_ops: u64,
    /// Feedback messages sent by the decoder.
    pub feedback_sent: u64,
    /// Feedback messages lost on the reverse link.
    pub feedback_lost: u64,
    /// Originals that arrived after their recovery (dropped as duplicates by the decoder).
    pub late_originals: u64,
    /// Packets delivered twice (must be 0).
    pub double_deliveries: u64,
    /// Recovered packets whose bytes differ from the original (must be 0).
    pub corrupt_recoveries: u64,
    /// Virtual duration of the run, seconds.
    pub sim_seconds: f64,
    /// With in-order release: measured originals held behind a loss.
    pub held: u64,
    /// Their extra delay (release time minus arrival), median, ms.
    pub hold_delay_p50_ms: f64,
    /// 99th percentile of the above.
    pub hold_delay_p99_ms: f64,
    /// Maximum of the above.
    pub hold_delay_max_ms: f64,
    /// Holes in-order release gave up (their sources, if recovered later, went out of order).
    pub order_skipped: u64,
    /// Sources in-order release let past a hole (their flow was not suspected of it).
    pub order_passed: u64,
    /// With flows: measured sources delivered after a later source of their own flow.
    pub flow_reordered: u64,
    /// The recovery deadline, ms (resolved against the true RTT, twice the one-way delay);
    /// 0 without one.
    pub deadline_ms: f64,
    /// Lost sources recovered no later than the deadline after the time the original would
    /// have arrived (all recoveries without a deadline).
    pub recovered_in_time: u64,
    /// `recovered_in_time / lost` (1 when nothing was lost).
    pub recovered_in_time_ratio: f64,
    /// Recoveries after the deadline (`recovered - recovered_in_time`).
    pub late_recoveries: u64,
    /// Lower bound on the overhead (repairs per source) any scheme needs to recover 99.9 % of
    /// this run's losses in time (see `bound::overhead_bound`).
    pub bound_overhead: f64,
    /// The same bound for the fraction this run recovered in time.
    pub bound_overhead_achieved: f64,
    /// `overhead / bound_overhead_achieved` (0 when the bound is 0).
    pub overhead_to_bound: f64,
    /// Repairs sent in answer to loss reports (part of `repairs`, whole run).
    pub repairs_report: u64,
    /// Feedback messages that carried a loss report (whole run).
    pub loss_reports: u64,
    /// Packets dropped by the full bottleneck queue (sources and repairs, whole run).
    pub queue_drops: u64,
    /// Packets marked CE at the bottleneck (whole run).
    pub ce_marked: u64,
    /// Feedback messages the encoder took as a congestion signal: a queue seen in the RTT, or
    /// CE marks (whole run).
    pub congestion_signals: u64,
}

/// What travels on the links.
enum Ev {
    /// The source emits its next packet.
    Emit,
    /// A source packet reaches the decoder.
    Source { esi: u32, size: u32, ce: bool },
    /// A repair packet reaches the decoder (payload buffer comes back to the pool afterwards).
    Repair {
        stream: StreamId,
        info: RepairInfo,
        ts: u32,
        payload: Vec<u8>,
        ce: bool,
    },
    /// A feedback reaches the encoder.
    Feedback(Feedback),
    /// Encoder timer armed for this time.
    EncTimer,
    /// Decoder timer armed for this time.
    DecTimer,
}

/// Deterministic content of source `n` (so recovered bytes can be checked without storing them).
fn fill_payload(buf: &mut Vec<u8>, n: u64, size: usize) {
    buf.clear();
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    buf.extend((0..size).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs one scenario to completion.
pub fn run(sc: &Scenario) -> anyhow::Result<Report> {
    let window = sc
        .window
        .unwrap_or_else(|| default_window_with(&sc.scheme, sc.deadline));
    let mode = FecMode::parse_with_window(&sc.scheme, window)
        .map_err(|e| anyhow::anyhow!("--scheme {}: {e}", sc.scheme))?;
    let mut enc_cfg = EncoderConfig::new(mode.clone());
    enc_cfg.repair_delay = sc.repair_delay;
    enc_cfg.repair_retries = sc.repair_retries;
    let mut dec_cfg = DecoderConfig::new(mode.scheme.clone());
    dec_cfg.in_order = sc.in_order;
    dec_cfg.in_order_scope = sc.in_order_scope;
    // The other controllers have no deadline mode: for them the deadline only sorts the
    // recoveries into in time and late.
    if is_ours(&sc.scheme) && sc.deadline.is_some() {
        enc_cfg.deadline = sc.deadline;
        dec_cfg.loss_report_gap = Some(DEFAULT_LOSS_REPORT_GAP);
        // Where loss reports can be answered (a deadline past the path's round trip), the
        // decoder keeps the span that lets the answers reach a round trip of sources beyond
        // the window; shorter deadlines are proactive and keep the window's span (a longer
        // one would also move the horizon their residual-loss loop counts against).
        let rtt = sc.delay * 2;
        if sc.deadline.is_some_and(|d| d.resolve(Some(rtt)) > rtt) {
            let deadline = sc.deadline.map_or(rtt, |d| d.resolve(Some(rtt)));
            match sc.answer_reach {
                AnswerReach::Path => {
                    let lag = answer_reach_lag(sc.rate_pps, rtt, deadline);
                    enc_cfg.answer_reach_lag = lag;
                    dec_cfg = dec_cfg.with_answer_reach(lag);
                }
                AnswerReach::Grown => {
                    enc_cfg = enc_cfg.learning_answer_reach();
                    dec_cfg = dec_cfg.learning_answer_reach();
                }
                AnswerReach::Window => {}
            }
        }
    }
    let debug = std::env::var_os("HIRT_SIM_DEBUG").is_some();
    // Prints every repair whose window covers this ESI, and its fate.
    let trace_esi: Option<u32> = std::env::var("HIRT_SIM_TRACE_ESI")
        .ok()
        .and_then(|v| v.parse().ok());
    let deadline_ns = sc
        .deadline
        .map(|d| d.resolve(Some(sc.delay * 2)).as_nanos() as u64);
    let mut enc = Encoder::new(enc_cfg, sc.seed);
    let mut dec = Decoder::new(dec_cfg, sc.seed ^ 0xDEC0DE);

    let fwd_cfg = LinkConfig {
        loss: sc.loss.clone(),
        delay: sc.delay,
        jitter: sc.jitter,
        rate_bps: sc.link_rate_bps,
        queue: sc.queue,
        reorder_prob: sc.reorder.0,
        reorder_extra: sc.reorder.1,
        ecn_mark_above: sc.ecn_mark_above,
    };
    let rev_cfg = LinkConfig {
        loss: sc.feedback_loss.clone(),
        delay: sc.delay,
        jitter: sc.jitter,
        ..LinkConfig::default()
    };
    let mut fwd = Link::new(&fwd_cfg, sc.seed.wrapping_add(1))?;
    let mut rev = Link::new(&rev_cfg, sc.seed.wrapping_add(2))?;
    let mut source = Source::new(sc.pattern.clone(), sc.rate_pps, sc.sizes.clone(), sc.seed);

    let base = Instant::now();
    let at = |ns: u64| base + Duration::from_nanos(ns);
    let ns_of = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;

    let n = sc.packets as usize;
    // With a deadline the tail lasts at least a round trip plus the deadline: the last
    // measured losses are answered a round trip after they are reported, within a budget that
    // the sources sent meanwhile earn (as in a long-lived tunnel).
    let tail = deadline_ns.map_or(sc.tail, |d| {
        let ns = (2 * sc.delay.as_nanos() as u64).saturating_add(d);
        sc.tail.max((ns as f64 * sc.rate_pps / 1e9).ceil() as u64)
    });
    let total = sc.packets + if sc.packets > 0 { tail } else { 0 };
    let n_all = total as usize;
    let mut fate = vec![Fate::InFlight; n_all];
    let mut send_ns = vec![0u64; n_all];
    let mut esi0: Option<u32> = None;
    let mut emitted = 0u64;
    let mut r = Report {
        scheme: sc.scheme.clone(),
        loss: sc.loss.to_string(),
        seed: sc.seed,
        ..Report::default()
    };
    // Send times of the measured sources the link lost (the loss trace of the bound).
    let mut lost_at: Vec<u64> = Vec::new();
    let mut delays_pkts: Vec<f64> = Vec::new();
    let mut delays_ms: Vec<f64> = Vec::new();
    let mut latency_ms: Vec<f64> = Vec::new();
    // Flows: each source's flow, and the newest source of each flow delivered so far.
    let flow_of = |idx: usize| -> u64 {
        sc.flows.map_or(0, |(flows, run)| {
            let x = (idx as u64 / u64::from(run.max(1))) ^ sc.seed.rotate_left(32);
            let h = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31);
            1 + h % u64::from(flows.max(1))
        })
    };
    let mut flow_top: HashMap<u64, usize> = HashMap::new();
    let mut delivered_in_flow = |idx: usize, r: &mut Report| {
        if sc.flows.is_none() || idx >= n {
            return;
        }
        let top = flow_top.entry(flow_of(idx)).or_insert(idx);
        if *top > idx {
            r.flow_reordered += 1;
        } else {
            *top = idx;
        }
    };
    // In-order release: when each held original arrived (ns), and how long it waited.
    let mut held_at: Vec<u64> = vec![u64::MAX; n_all];
    let mut hold_ms: Vec<f64> = Vec::new();

    let mut heap: EventHeap<Ev> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut EventHeap<Ev>, t: u64, ev: Ev| {
        seq += 1;
        heap.push(Reverse(Queued { t, seq, ev }));
    };
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut payload = Vec::new();
    let mut fb_buf = [0u8; Feedback::MAX_LEN];
    let (mut enc_armed, mut dec_armed): (Option<u64>, Option<u64>) = (None, None);
    let delay_ns = sc.delay.as_nanos() as u64;
    let mut end_ns = u64::MAX;

    if n > 0 {
        push(&mut heap, 0, Ev::Emit);
    }
    let mut pending_emit: Option<(u64, usize)> = None;

    while let Some(Reverse(Queued { t, ev, .. })) = heap.pop() {
        if t > end_ns {
            break;
        }
        let now = at(t);
        let mut enc_touched = false;
        let mut dec_touched = false;
        match ev {
            Ev::Emit => {
                let (_, size) = pending_emit.take().unwrap_or_else(|| source.next_packet());
                let idx = emitted as usize;
                fill_payload(&mut payload, emitted, size);
                let tag = enc.handle_source(0, &payload, now);
                let e0 = *esi0.get_or_insert(tag.esi);
                debug_assert_eq!(tag.esi.wrapping_sub(e0) as usize, idx);
                send_ns[idx] = t;
                emitted += 1;
                let measured = idx < n;
                if measured {
                    r.sources += 1;
                    r.source_bytes += size as u64;
                }
                match fwd.send_marked(now, size) {
                    Some((arr, ce)) => push(
                        &mut heap,
                        ns_of(arr),
                        Ev::Source {
                            esi: tag.esi,
                            size: size as u32,
                            ce,
                        },
                    ),
                    None => {
                        fate[idx] = Fate::Lost;
                        r.lost += measured as u64;
                        if measured {
                            lost_at.push(t);
                        }
                    }
                }
                enc_touched = true;
                if emitted < total {
                    let next = source.next_packet();
                    pending_emit = Some(next);
                    push(&mut heap, next.0.max(t), Ev::Emit);
                } else {
                    end_ns = t + 4 * delay_ns + 2_000_000_000;
                }
            }
            Ev::Source { esi, size, ce } => {
                if ce {
                    dec.note_ce(0);
                }
                let idx = esi.wrapping_sub(esi0.unwrap_or(0)) as usize;
                fill_payload(&mut payload, idx as u64, size as usize);
                match dec.handle_source_in_flow(0, esi, &payload, 0, flow_of(idx), now) {
                    // A held original (in-order release) counts as delivered when it arrived;
                    // its later release is skipped below.
                    v @ (Verdict::Deliver | Verdict::Hold) => {
                        if v == Verdict::Hold && idx < n_all {
                            held_at[idx] = t;
                        } else {
                            delivered_in_flow(idx, &mut r);
                        }
                        if fate[idx] == Fate::Recovered {
                            r.double_deliveries += 1;
                        } else {
                            fate[idx] = Fate::Delivered;
                        }
                    }
                    Verdict::Duplicate => r.late_originals += 1,
                }
                dec_touched = true;
            }
            Ev::Repair {
                stream,
                info,
                ts,
                payload: p,
                ce,
            } => {
                if ce {
                    dec.note_ce(stream);
                }
                let _ = dec.handle_repair(stream, &info, ts, &p, now);
                pool.push(p);
                dec_touched = true;
            }
            Ev::Feedback(fb) => {
                enc.handle_feedback(&fb, now);
                enc_touched = true;
            }
            Ev::EncTimer => {
                if enc_armed == Some(t) {
                    enc_armed = None;
                    enc.handle_timeout(now);
                    enc_touched = true;
                }
            }
            Ev::DecTimer => {
                if dec_armed == Some(t) {
                    dec_armed = None;
                    dec.handle_timeout(now);
                    dec_touched = true;
                }
            }
        }
        if enc_touched {
            while let Some(rep) = enc.poll_repair() {
                // Repairs made once the tail started are not counted (nor are its sources).
                let measured = emitted <= sc.packets;
                if measured {
                    r.repairs += 1;
                    r.repair_bytes += rep.payload.len() as u64;
                }
                let sent = fwd.send_marked(now, rep.payload.len());
                if let Some(esi) = trace_esi {
                    let first = rep.info.first_esi;
                    if esi.wrapping_sub(first) < u32::from(rep.info.nss) {
                        eprintln!(
                            "repair at {:.4} s over {first}+{}: {}",
                            t as f64 / 1e9,
                            rep.info.nss,
                            if sent.is_some() { "sent" } else { "LOST" }
                        );
                    }
                }
                match sent {
                    Some((arr, ce)) => {
                        let mut buf = pool.pop().unwrap_or_default();
                        buf.clear();
                        buf.extend_from_slice(rep.payload);
                        let ev = Ev::Repair {
                            stream: rep.stream,
                            info: rep.info,
                            ts: rep.timestamp,
                            payload: buf,
                            ce,
                        };
                        push(&mut heap, ns_of(arr), ev);
                    }
                    None => r.repairs_lost += measured as u64,
                }
            }
            if let Some(tt) = enc.poll_timeout() {
                let tt = ns_of(tt).max(t);
                if enc_armed != Some(tt) {
                    enc_armed = Some(tt);
                    push(&mut heap, tt, Ev::EncTimer);
                }
            }
        }
        if dec_touched {
            let e0 = esi0.unwrap_or(0);
            while let Some(rec) = dec.poll_recovered() {
                if rec.original {
                    let idx = rec.esi.wrapping_sub(e0) as usize;
                    if idx < n && held_at[idx] != u64::MAX {
                        r.held += 1;
                        hold_ms.push(t.saturating_sub(held_at[idx]) as f64 / 1e6);
                    }
                    delivered_in_flow(idx, &mut r);
                    continue;
                }
                let idx = rec.esi.wrapping_sub(e0) as usize;
                if idx >= n_all {
                    r.corrupt_recoveries += 1;
                    continue;
                }
                // Compare with the original content.
                let size = rec.data.len();
                fill_payload(&mut payload, idx as u64, size);
                if payload != rec.data {
                    r.corrupt_recoveries += 1;
                }
                delivered_in_flow(idx, &mut r);
                match fate[idx] {
                    Fate::Delivered | Fate::Recovered => r.double_deliveries += 1,
                    Fate::Lost if idx >= n => fate[idx] = Fate::Recovered,
                    Fate::Lost => {
                        fate[idx] = Fate::Recovered;
                        r.recovered += 1;
                        // Sources due at the decoder after this one and before its recovery.
                        let due_before =
                            send_ns[..emitted as usize].partition_point(|&s| s + delay_ns <= t);
                        delays_pkts.push(due_before.saturating_sub(idx + 1) as f64);
                        let due = send_ns[idx] + delay_ns;
                        let late_by = t.saturating_sub(due);
                        if deadline_ns.is_none_or(|d| late_by <= d) {
                            r.recovered_in_time += 1;
                        } else if debug {
                            eprintln!(
                                "late: esi {idx} sent {:.3} s, {:.1} ms late",
                                send_ns[idx] as f64 / 1e9,
                                late_by as f64 / 1e6
                            );
                        }
                        delays_ms.push(late_by as f64 / 1e6);
                        latency_ms.push(t.saturating_sub(send_ns[idx]) as f64 / 1e6);
                    }
                    Fate::InFlight => fate[idx] = Fate::Recovered,
                }
            }
            while let Some(fb) = dec.poll_feedback(now) {
                r.feedback_sent += 1;
                let len = fb.encode(&mut fb_buf).unwrap_or(Feedback::MAX_LEN);
                match rev.send(now, len) {
                    Some(arr) => push(&mut heap, ns_of(arr), Ev::Feedback(fb)),
                    None => r.feedback_lost += 1,
                }
            }
            if let Some(tt) = dec.poll_timeout() {
                let tt = ns_of(tt).max(t);
                if dec_armed != Some(tt) {
                    dec_armed = Some(tt);
                    push(&mut heap, tt, Ev::DecTimer);
                }
            }
        }
        r.sim_seconds = t as f64 / 1e9;
    }

    r.unrecovered = r.lost - r.recovered;
    if debug {
        let miss: Vec<usize> = (0..n).filter(|&i| fate[i] == Fate::Lost).collect();
        eprintln!("unrecovered ESIs: {miss:?}");
    }
    let s = r.sources.max(1) as f64;
    r.recovered_ratio = if r.lost == 0 {
        1.0
    } else {
        r.recovered as f64 / r.lost as f64
    };
    r.residual_loss = r.unrecovered as f64 / s;
    r.link_loss = r.lost as f64 / s;
    r.overhead = r.repairs as f64 / s;
    r.overhead_bytes = r.repair_bytes as f64 / r.source_bytes.max(1) as f64;
    delays_pkts.sort_by(f64::total_cmp);
    delays_ms.sort_by(f64::total_cmp);
    r.recovery_delay_p50_pkts = percentile(&delays_pkts, 0.5);
    r.recovery_delay_p99_pkts = percentile(&delays_pkts, 0.99);
    r.recovery_delay_max_pkts = delays_pkts.last().copied().unwrap_or(0.0);
    r.recovery_delay_p50_ms = percentile(&delays_ms, 0.5);
    r.recovery_delay_p99_ms = percentile(&delays_ms, 0.99);
    r.recovery_delay_max_ms = delays_ms.last().copied().unwrap_or(0.0);
    latency_ms.sort_by(f64::total_cmp);
    r.recovery_latency_p99_ms = percentile(&latency_ms, 0.99);
    r.recovery_latency_max_ms = latency_ms.last().copied().unwrap_or(0.0);
    hold_ms.sort_by(f64::total_cmp);
    r.hold_delay_p50_ms = percentile(&hold_ms, 0.5);
    r.hold_delay_p99_ms = percentile(&hold_ms, 0.99);
    r.hold_delay_max_ms = hold_ms.last().copied().unwrap_or(0.0);
    r.order_skipped = dec.stats(0).map_or(0, |s| s.order_skipped);
    r.order_passed = dec.stats(0).map_or(0, |s| s.order_passed);
    r.late_recoveries = r.recovered - r.recovered_in_time;
    r.recovered_in_time_ratio = if r.lost == 0 {
        1.0
    } else {
        r.recovered_in_time as f64 / r.lost as f64
    };
    let rtt_ns = 2 * delay_ns;
    r.deadline_ms = deadline_ns.map_or(0.0, |d| d as f64 / 1e6);
    let trace = crate::bound::LossTrace {
        sources: r.sources,
        lost_at_ns: &lost_at,
        deadline_ns,
        rtt_ns,
        duration_ns: send_ns[..n].last().copied().unwrap_or(0),
    };
    r.bound_overhead = crate::bound::overhead_bound(&trace, 0.999);
    r.bound_overhead_achieved = crate::bound::overhead_bound(&trace, r.recovered_in_time_ratio);
    r.overhead_to_bound = if r.bound_overhead_achieved > 0.0 {
        r.overhead / r.bound_overhead_achieved
    } else {
        0.0
    };
    r.repairs_report = enc.stats(0).map_or(0, |s| s.repairs_report);
    r.loss_reports = dec.stats(0).map_or(0, |s| s.loss_reports);
    r.queue_drops = fwd.counters().queue_drops;
    r.ce_marked = fwd.counters().ce_marked;
    r.congestion_signals = enc.stats(0).map_or(0, |s| s.queue_signals + s.ce_signals);
    r.decoder_symbol_ops = dec.stats(0).map_or(0, |s| s.symbol_ops);
    r.encoder_symbol_ops = enc.stats(0).map_or(0, |s| s.symbol_ops);
    Ok(r)
}
