//! The SRv6 network function: what happens to each packet that reaches one of our SIDs.
//!
//! This module holds no sockets and no locks: [`Srv6Machine`] is the engine's
//! [`crate::engine::Transport`] of SRv6 mode and [`Srv6Node`] the engine's
//! [`crate::engine::Node`] around it. [`Srv6Node::handle_packet`] takes a packet the kernel
//! routed to the TUN device (the machine parses and authenticates it, the engine checks the
//! auth TLV's replay window and locks the slot of its stream) and puts every packet to send into
//! the driver's batch as a [`crate::engine::Transmit`] whose destination, an [`Egress`], tells
//! which device to write it to; [`Srv6Node::handle_timeout`] does the time-driven work. The runtime in
//! [`crate::srv6_run`] does the I/O; the unit tests below run an encoder and a decoder back to
//! back with losses, in memory.
//!
//! # Packets and symbols
//!
//! The kernel (H.Encaps at the ingress) sends `IPv6(DA=ENC_SID) + SRH[DEC_SID, .., ENC_SID] +
//! inner packet`. The encoder does the End behaviour (SL -= 1, DA = next segment), inserts the
//! source TLV (stream, ESI) and writes the packet back to the kernel, which routes it on.
//!
//! A source *symbol* is the packet exactly as it will arrive at the decoder, minus what routers
//! may change in the tunnel: IPv6 header with Hop Limit and Traffic Class zeroed, Segments Left
//! and DA set to the decoder SID's position (so intermediate End SIDs do not matter), the SRH
//! without the source TLV, and the payload. The decoder rebuilds the same bytes from a received
//! source (remove TLV, zero HL/TC), so both sides code identical symbols. A recovered packet gets
//! the Hop Limit and Traffic Class of the latest source received on its stream (the ingress sets
//! them identically for all packets of a tunnel: Linux H.Encaps uses the route's hop limit and
//! copies nothing per packet... see docs/dataplane.md), and optionally ECN-CE.
//!
//! After decoding, the decoder SID acts as End.DT6 (decapsulate, route in a table), End.DX6
//! (decapsulate, send to a fixed next hop: a policy rule on the decapsulation device) or End
//! (next segment; with SL = 0 it decapsulates like End.DT6, since the kernel would drop it).
//! Repair packets (`SRH[DEC_SID] + repair TLV + payload`, Next Header 59) go from the encoder SID
//! to the decoder SID, feedback (`SRH[ENC_SID] + feedback TLV`) the other way: both end at our
//! SIDs and never leave the tunnel.

use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hirt_core::path::{PathManagerConfig, PolicyKind, RepairPath};
use hirt_core::{
    Encoder, FecMode, Feedback, PathId, SourceAdmission, SourceFlow, SourceNeed, StreamId,
};
use hirt_wire::replay::ReplayWindow;
use hirt_wire::srv6::{self as wsrv6, Auth, Srv6Builder, Srv6Header, Srv6Layout};
use hirt_wire::tlv::{
    FeedbackRepr, HirtTlvs, ProbeBody, ProbeReplyBody, RepairRepr, SourceRepr, TlvTypes,
    FEEDBACK_KIND_FEC, FEEDBACK_KIND_PROBE, FEEDBACK_KIND_PROBE_REPLY, SOURCE_TLV_SIZE,
};

pub use crate::config::{AuthKey, Behavior, CoderSettings, Srv6PathConfig};
use crate::config::{MAX_PATHS, MAX_PATH_SIDS};
pub use crate::ecn::mark_ce;
use crate::engine::{
    self, Classified, CoderSlots, DecoderSlot, Need, NeedsState, Node, Slot, SlotsConfig, Transmit,
    TransmitSink, Transport,
};
use crate::metrics::{add, Metrics};
use crate::udp::paths::{flow_hash, is_pure_tcp_ack, source_flow, PathSet};

pub mod xdp_io;

/// Buffer size for one packet (jumbo frame plus our headers).
pub const BUF_LEN: usize = 9216 + 512;

const NH_IPV6: u8 = 41;
const NH_IPV4: u8 = 4;
const NH_NONE: u8 = 59;
const NH_ROUTING: u8 = 43;

/// Where to write a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Egress {
    /// Back to the kernel on the SID device: routed by its destination in the main table.
    Kernel,
    /// A decapsulated packet: written to the decapsulation device (policy-routed for DX6 / a
    /// DT6 table), or the SID device when none is configured.
    Decap,
}

/// Configuration of one worker's node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Our encoder SID, if we run the encoder.
    pub enc_sid: Option<Ipv6Addr>,
    /// Our decoder SID, if we run the decoder.
    pub dec_sid: Option<Ipv6Addr>,
    /// The peer's decoder SID (where repairs go) when we only encode.
    pub peer_dec_sid: Ipv6Addr,
    /// The peer's encoder SID (where feedback goes) when we only decode.
    pub peer_enc_sid: Ipv6Addr,
    /// Decoder behaviour.
    pub behavior: Behavior,
    /// The encoder stream this worker owns.
    pub stream: StreamId,
    /// FEC mode (code + controller).
    pub fec: FecMode,
    /// TLV type values.
    pub tlv: TlvTypes,
    /// Authentication of repair/feedback, if configured.
    pub auth: Option<AuthKey>,
    /// Mark recovered packets ECN-CE (when ECN-capable).
    pub ecn_ce: bool,
    /// Traffic class of repair packets (DSCP << 2).
    pub repair_tclass: u8,
    /// Seed for the core's randomness.
    pub seed: u64,
    /// Repair timers, overload control (see [`crate::engine::StreamCoder::set_cpu_load`]) and in-order release.
    pub coder: CoderSettings,
    /// The encoder's paths to the decoder SID (path id = position; at least one). With more
    /// than one, the encoder runs a path manager (see [`crate::srv6`]'s "Paths").
    pub paths: Vec<Srv6PathConfig>,
    /// Policy, probes and repair path of several paths.
    pub path_cfg: PathManagerConfig,
}

/// The latest (hop limit, traffic class) seen per stream, kept beside each decoder slot: a
/// recovered packet gets those of its stream.
pub type HopLimits = Vec<(u8, u8)>;

/// What the workers of an SRv6 instance share (see [`crate::engine::Shared`]): the coder
/// slots, the replay windows of the auth TLV sequence per stream (the engine's state lock) and
/// the sequence number space of our auth TLVs (one per instance, an atomic).
pub type Shared = engine::Shared<Srv6Machine>;

impl engine::Shared<Srv6Machine> {
    /// State for `slots` workers and up to `streams` stream ids (for the replay windows).
    pub fn new(cfg: &NodeConfig, slots: usize, streams: usize) -> Arc<Shared> {
        let streams = streams.max(1);
        let slots = CoderSlots::new(
            &SlotsConfig {
                fec: &cfg.fec,
                coder: &cfg.coder,
                slots,
                encode: cfg.enc_sid.is_some(),
                decode: cfg.dec_sid.is_some(),
                enc_seed: cfg.seed,
                dec_seed: cfg.seed ^ 0x5eed,
            },
            || vec![(64, 0); streams],
        );
        engine::Shared::with_slots(
            slots,
            (0..streams).map(|_| ReplayWindow::new()).collect(),
            AtomicU64::new(crate::crypto::initial_counter()),
        )
    }
}

/// The auth TLV for the next packet we sign with `key` (each takes a fresh sequence number
/// from the instance's space `seq`).
fn next_auth<'k>(
    cfg: &NodeConfig,
    seq: &AtomicU64,
    key: &'k AuthKey,
    rfc8754_hmac: bool,
) -> Auth<'k> {
    Auth {
        tlv_type: cfg.tlv.auth,
        key_id: key.key_id,
        key: &key.key,
        seq: seq.fetch_add(1, Ordering::Relaxed),
        rfc8754_hmac,
    }
}

type DecState = DecoderSlot<HopLimits>;

/// One worker's SRv6 state machine, the [`Transport`] of SRv6 mode: its configuration (its
/// own stream) and a scratch buffer. It holds no locks: the engine's [`Node`] hands it the
/// slot a packet needs.
pub struct Srv6Machine {
    cfg: NodeConfig,
    metrics: Arc<Metrics>,
    /// The instance's auth TLV sequence ([`Shared::common`](crate::engine::Shared)).
    auth_seq: Arc<AtomicU64>,
    /// Scratch for building repair / feedback / recovered packets.
    out: Vec<u8>,
    /// The encoder's paths, when it has several.
    paths: Option<SrPaths>,
    /// Decoder: probes and their bytes received per path id (what a probe reply carries).
    probes_received: [(u32, u32); MAX_PATHS],
}

/// An encoder's several paths: the manager and each path's segment lists.
#[derive(Debug)]
struct SrPaths {
    set: PathSet<()>,
    /// Per path: the middle SIDs in wire order (inserted into a source's segment list).
    wire_sids: Vec<Vec<Ipv6Addr>>,
    /// Per path: the segment list of a repair or probe (the decoder SID at index 0).
    internal: Vec<Vec<Ipv6Addr>>,
    /// Per path: how `hirt status` shows it.
    describe: Vec<String>,
    /// When the path status is published next.
    next_publish: Instant,
    /// Repairs held until their sources, on a slower path, catch up.
    held: crate::engine::held::HeldRepairs<Egress>,
}

impl std::fmt::Debug for Srv6Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srv6Machine")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// One worker of an SRv6 instance: the engine's [`Node`] around its [`Srv6Machine`].
pub type Srv6Node = Node<Srv6Machine>;

/// What the first step of a packet found (see [`Transport::handle`]).
#[derive(Debug, Clone, Copy)]
pub enum Srv6Step {
    /// Feedback about one of our encoder streams.
    Feedback(Feedback),
    /// A source at the encoder, after its End (Segments Left `sl`, the decoder SID at
    /// `dec_idx`): coded, tagged and sent on; `tagged`: the ESI the XDP program gave a source
    /// it passed on itself (coded only).
    Encode {
        /// Where things are in the packet.
        l: Srv6Layout,
        /// Its length.
        len: usize,
        /// Segments Left after the End.
        sl: u8,
        /// Index of the decoder SID.
        dec_idx: u8,
        /// See the variant.
        tagged: Option<u32>,
    },
    /// A repair for the decoder, its payload at `buf[start..end]`.
    Repair {
        /// The repair TLV.
        rep: RepairRepr,
        /// Start of the payload.
        start: usize,
        /// End of the payload.
        end: usize,
    },
    /// A path probe at the decoder: answered over the reverse of its segment list.
    Probe {
        /// Where things are in the probe.
        l: Srv6Layout,
        /// Its path.
        path: PathId,
        /// Its timestamp (echoed).
        timestamp: u32,
        /// Packets sent on the path with it (echoed).
        sent: u32,
        /// Its length.
        len: usize,
    },
    /// The answer to one of our probes, at the encoder.
    ProbeReply {
        /// The path.
        path: PathId,
        /// The probe's timestamp.
        timestamp_echo: u32,
        /// The probe's sent count.
        sent_echo: u32,
        /// Probes the decoder received on the path so far.
        received: u32,
        /// Their bytes.
        received_bytes: u32,
    },
    /// A source at the decoder, its TLVs removed (`buf[..len]`); `deliver`: false for a source
    /// the kernel delivered itself (only recorded).
    Decode {
        /// The source TLV.
        src: SourceRepr,
        /// Length without the TLVs.
        len: usize,
        /// Offset of the inner packet (after the SRH without the TLVs).
        inner_at: usize,
        /// See the variant.
        deliver: bool,
    },
}

/// What a packet's first step returns: nothing left to do, or the rest for the engine.
type Step1 = Result<Option<Classified<(StreamId, u64), Srv6Step>>, Drop>;

/// Why a packet was dropped (counted, never fatal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Not a well-formed IPv6+SRH packet for us.
    Malformed,
    /// Failed authentication or replayed.
    Auth,
    /// A duplicate source.
    Duplicate,
    /// Not SRv6 traffic for one of our SIDs (the kernel's MLD reports on the device, ICMPv6
    /// errors about our packets).
    NotOurs,
}

impl Srv6Node {
    /// A single-worker node with its own state; `metrics` has a slot per stream id in use.
    pub fn new(cfg: NodeConfig, metrics: Arc<Metrics>) -> anyhow::Result<Srv6Node> {
        let shared = Shared::new(&cfg, 1, metrics.streams.len());
        Ok(Srv6Node::with_shared(cfg, metrics, shared))
    }

    /// A worker of a multi-worker instance; `cfg.stream` is the worker's index (its slot).
    pub fn with_shared(cfg: NodeConfig, metrics: Arc<Metrics>, shared: Arc<Shared>) -> Srv6Node {
        let stream = cfg.stream;
        let paths = (cfg.enc_sid.is_some() && cfg.paths.len() > 1).then(|| {
            let dec = cfg.dec_sid.unwrap_or(cfg.peer_dec_sid);
            let now = Instant::now();
            let mut set = PathSet::new(
                cfg.path_cfg.clone(),
                &vec![Some(()); cfg.paths.len()],
                cfg.seed ^ 0x9a75,
                now,
            );
            // SRv6 needs no handshake: paths are probed from the start, so a backup path is
            // known before the first failover.
            set.start(now);
            SrPaths {
                set,
                wire_sids: cfg.paths.iter().map(Srv6PathConfig::wire_sids).collect(),
                internal: cfg.paths.iter().map(|p| p.internal_segments(dec)).collect(),
                describe: cfg.paths.iter().map(|p| p.describe(dec)).collect(),
                next_publish: now,
                held: Default::default(),
            }
        });
        let machine = Srv6Machine {
            cfg,
            metrics: metrics.clone(),
            auth_seq: shared.common.clone(),
            out: vec![0u8; BUF_LEN],
            paths,
            probes_received: [(0, 0); MAX_PATHS],
        };
        Node::with_machine(machine, shared, stream, metrics)
    }

    /// The encoder's paths, when it has several.
    pub fn paths(&self) -> Option<&PathSet<()>> {
        self.machine().paths.as_ref().map(|p| &p.set)
    }

    /// Changes the path policy kind and/or the repair path live (the rest of the policy
    /// stays); an error when the policy does not fit the paths. Nothing to change with one
    /// path.
    pub fn set_path_policy(
        &mut self,
        kind: Option<PolicyKind>,
        repair: Option<RepairPath>,
        now: Instant,
    ) -> Result<(), String> {
        let m = self.machine_mut();
        let Some(p) = &mut m.paths else {
            return Ok(());
        };
        let r = p.set.change(kind, repair, &m.metrics, now);
        p.next_publish = now;
        r
    }

    /// The node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.machine().cfg
    }

    /// Whether this node has the encoder SID.
    pub fn is_encoder(&self) -> bool {
        self.config().enc_sid.is_some()
    }

    /// Reports `n` packets dropped at the SID device's queue before the worker read them.
    /// Only a node that is a decoder and not an encoder passes them on (feedback
    /// `local_drops`): on a node with both roles the queue also holds sources still to be
    /// encoded, whose drops the decoder never sees as losses.
    pub fn add_local_drops(&mut self, n: u64) {
        if !self.coder().slots().encodes() {
            self.coder().add_local_drops(n);
        }
    }

    /// Time-driven work (sparse-traffic repairs, feedback); emits what it produces.
    pub fn handle_timeout(&mut self, now: Instant, tx: &mut impl TransmitSink<Egress>) {
        self.on_timeout(now, tx);
    }

    /// Processes one packet from the SID device. `buf[..len]` holds it; `buf` must be
    /// [`BUF_LEN`] long (the source TLV is inserted in place).
    pub fn handle_packet(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let c = self.machine_mut().classify(buf, len, tx)?;
        self.process(c, buf, now, tx)
    }

    /// Takes a copy of a source that the XDP program tagged with `esi` and passed on to the
    /// kernel's forwarding (see [`crate::xdp::SourceTag`]): `buf[..len]` is the packet as it
    /// arrived at the encoder SID. The encoder codes it exactly as [`Srv6Node::handle_packet`]
    /// would have (same End, same symbol); nothing is emitted for it but repairs. Returns
    /// `Err(Drop::Malformed)`, and codes nothing, if `esi` is not the encoder's next ESI (the
    /// program and the encoder count the same sources, so that would be a bug).
    pub fn handle_tagged_source(
        &mut self,
        buf: &mut [u8],
        len: usize,
        esi: u32,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let c = self.machine_mut().classify_tagged(buf, len, esi)?;
        self.process(c, buf, now, tx)
    }

    /// Takes a copy of a protected source that the kernel delivers itself (its End.DT6 on the
    /// decoder SID; the XDP program copied it before passing it on, see
    /// [`crate::xdp::SourceTap`]): the decoder records it for recovery and loss detection, and
    /// nothing is emitted for it. Repairs solved with it still emit what they recover.
    pub fn handle_delivered_source(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let c = self.machine_mut().classify_delivered(buf, len, tx)?;
        self.process(c, buf, now, tx)
    }
}

impl Transport for Srv6Machine {
    type Extra = HopLimits;
    type State = Vec<ReplayWindow>;
    type Common = AtomicU64;
    type Dest = Egress;
    type Route = ();
    /// The stream and auth TLV sequence number of a verified packet.
    type Admit = (StreamId, u64);
    type Step = Srv6Step;
    type Drop = Drop;

    fn admit(
        &mut self,
        replay: &mut Vec<ReplayWindow>,
        (stream, seq): (StreamId, u64),
        _now: Instant,
    ) -> Result<(), Drop> {
        let i = (stream as usize).min(replay.len() - 1);
        if replay[i].update(seq) {
            Ok(())
        } else {
            add(&self.metrics.stream(stream).auth_failures, 1);
            Err(Drop::Auth)
        }
    }

    fn route(&self, _: Option<&Vec<ReplayWindow>>, _: Instant) -> Result<(), NeedsState> {
        Ok(())
    }

    fn handle(
        &mut self,
        step: Srv6Step,
        slot: Slot<'_, HopLimits>,
        _route: (),
        buf: &mut [u8],
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        match (step, slot) {
            (Srv6Step::Feedback(fb), Slot::Encoder(e)) => {
                add(&self.metrics.stream(fb.stream).feedback_in, 1);
                e.handle_feedback(&fb, now);
                self.drain_repairs(e, now, tx);
                Ok(())
            }
            (
                Srv6Step::Encode {
                    l,
                    len,
                    sl,
                    dec_idx,
                    tagged,
                },
                Slot::Encoder(e),
            ) => self.encode(e, buf, len, &l, sl, dec_idx, tagged, now, tx),
            (Srv6Step::Repair { rep, start, end }, Slot::Decoder(d)) => {
                self.repair(d, &rep, &buf[start..end], now, tx);
                Ok(())
            }
            (
                Srv6Step::Decode {
                    src,
                    len,
                    inner_at,
                    deliver,
                },
                Slot::Decoder(d),
            ) => self.decode(d, src, buf, (inner_at, len), deliver, now, tx),
            (
                Srv6Step::Probe {
                    l,
                    path,
                    timestamp,
                    sent,
                    len,
                },
                Slot::Decoder(_),
            ) => {
                self.answer_probe(&buf[..len], &l, path, timestamp, sent, tx);
                Ok(())
            }
            (
                Srv6Step::ProbeReply {
                    path,
                    timestamp_echo,
                    sent_echo,
                    received,
                    received_bytes,
                },
                Slot::Encoder(_),
            ) => {
                if let Some(p) = &mut self.paths {
                    p.set.on_reply(
                        path,
                        timestamp_echo,
                        sent_echo,
                        received,
                        received_bytes,
                        now,
                    );
                    p.set.drain_events(&self.metrics);
                }
                Ok(())
            }
            // `Node::process` locks the slot the first step named.
            _ => self.count_drop(Drop::Malformed),
        }
    }

    fn timeout(
        &mut self,
        slot: Slot<'_, HopLimits>,
        _route: (),
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) {
        match slot {
            Slot::Encoder(e) => {
                e.handle_timeout(now);
                self.drain_repairs(e, now, tx);
            }
            Slot::Decoder(d) => {
                d.dec.handle_timeout(now);
                self.drain_decoder(d, now, tx);
            }
        }
    }

    fn no_slot(&mut self) -> Drop {
        let _ = self.count_drop(Drop::NotOurs);
        Drop::NotOurs
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let p = self.paths.as_ref()?;
        [
            p.set.poll_timeout().map(|t| t.min(p.next_publish)),
            p.held.next(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn own_timeout(&mut self, _route: (), now: Instant, tx: &mut impl TransmitSink<Egress>) {
        if let Some(p) = &mut self.paths {
            p.held.release(now, &mut |bytes, dest, tos| {
                tx.transmit(Transmit { bytes, dest, tos })
            });
        }
        self.path_timeout(now, tx);
    }
}

impl Srv6Machine {
    /// The first step of a packet from the SID device (see [`Srv6Node::handle_packet`]).
    fn classify(
        &mut self,
        buf: &mut [u8],
        len: usize,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Step1 {
        if len < 40 {
            return self.count_drop(Drop::Malformed).map(|_| None);
        }
        if buf[0] >> 4 != 6 {
            // IPv4 or anything else the kernel hands the device: not addressed to a SID.
            return self.count_drop(Drop::NotOurs).map(|_| None);
        }
        let mut da = [0u8; 16];
        da.copy_from_slice(&buf[24..40]);
        let da = Ipv6Addr::from(da);
        let ours = Some(da) == self.cfg.enc_sid || Some(da) == self.cfg.dec_sid;
        if !ours || buf[6] != NH_ROUTING {
            // Not SRv6 traffic for our SIDs: the kernel's own link-local traffic on the
            // device, or an ICMPv6 error about a packet we sent (a Packet Too Big for a repair
            // larger than the path MTU lands here).
            return self.count_drop(Drop::NotOurs).map(|_| None);
        }
        if Some(da) == self.cfg.enc_sid {
            self.classify_encoder(buf, len, tx)
        } else {
            self.classify_decoder(buf, len, true, tx)
        }
    }

    /// The first step of a source the XDP program tagged (see
    /// [`Srv6Node::handle_tagged_source`]).
    fn classify_tagged(&mut self, buf: &mut [u8], len: usize, esi: u32) -> Step1 {
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        if l.segments_left == 0 || wsrv6::advance_segment(buf, len).is_err() {
            return self.count_drop(Drop::Malformed).map(|_| None);
        }
        let sl = l.segments_left - 1;
        let Some(dec_idx) = self.decoder_index(&buf[..len], &l, sl) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        Ok(Some(Classified {
            admit: None,
            need: Some(Need::Encoder(self.cfg.stream)),
            step: Srv6Step::Encode {
                l,
                len,
                sl,
                dec_idx,
                tagged: Some(esi),
            },
        }))
    }

    /// The first step of a source the kernel delivered (see
    /// [`Srv6Node::handle_delivered_source`]).
    fn classify_delivered(
        &mut self,
        buf: &mut [u8],
        len: usize,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Step1 {
        if len < 40 || buf[0] >> 4 != 6 || buf[6] != NH_ROUTING {
            return self.count_drop(Drop::Malformed).map(|_| None);
        }
        if buf[24..40] != self.cfg.dec_sid.map_or([0; 16], |s| s.octets()) {
            return self.count_drop(Drop::NotOurs).map(|_| None);
        }
        self.classify_decoder(buf, len, false, tx)
    }

    /// Where the decoder SID is in the segment list of `pkt` (at or after the next segment,
    /// Segments Left `sl` after the End), if it is there.
    fn decoder_index(&self, pkt: &[u8], l: &Srv6Layout, sl: u8) -> Option<u8> {
        let dec_sid = self.cfg.dec_sid.unwrap_or(self.cfg.peer_dec_sid);
        let srh = l.srh(pkt);
        (0..=sl)
            .rev()
            .find(|&i| srh.segment(i as usize) == Some(dec_sid))
    }

    fn count_drop(&self, d: Drop) -> Result<(), Drop> {
        match d {
            Drop::Malformed => add(&self.metrics.global.malformed, 1),
            // The kernel's own link-local traffic on the device (MLD reports, router
            // solicitations; mostly avoided by `Netlink::link_addr_gen_mode_none`), ICMPv6
            // errors: not an attack and not a parse error, so not "malformed".
            Drop::NotOurs => add(&self.metrics.global.not_ours, 1),
            Drop::Auth => add(&self.metrics.global.auth_failures, 1),
            Drop::Duplicate => {}
        }
        Err(d)
    }

    /// Verifies the auth TLV of `pkt` when we have a key: what the replay window of `stream`
    /// must then accept ([`Transport::admit`]), or `None` without a key.
    fn verify(&mut self, pkt: &[u8], stream: StreamId) -> Result<Option<(StreamId, u64)>, Drop> {
        let Some(a) = self.cfg.auth.as_ref() else {
            return Ok(None);
        };
        let key = a.key.as_slice();
        let key_id = a.key_id;
        match wsrv6::verify_auth(pkt, &self.cfg.tlv, |id| (id == key_id).then_some(key)) {
            Ok(r) => Ok(Some((stream, r.seq))),
            Err(_) => {
                add(&self.metrics.stream(stream).auth_failures, 1);
                Err(Drop::Auth)
            }
        }
    }

    fn classify_encoder(
        &mut self,
        buf: &mut [u8],
        len: usize,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Step1 {
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        let Ok(tlvs) = HirtTlvs::parse(&buf[l.tlv_range()], &self.cfg.tlv) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        if let Some((_, fb)) = tlvs.feedback {
            let stream = fb.stream;
            if l.next_header != NH_NONE {
                return self.count_drop(Drop::Malformed).map(|_| None);
            }
            if fb.kind == FEEDBACK_KIND_PROBE_REPLY {
                let Ok(body) = ProbeReplyBody::new_checked(fb.body) else {
                    return self.count_drop(Drop::Malformed).map(|_| None);
                };
                let step = Srv6Step::ProbeReply {
                    path: fb.path_id,
                    timestamp_echo: fb.timestamp_echo,
                    sent_echo: body.sent_echo(),
                    received: body.received(),
                    received_bytes: body.received_bytes(),
                };
                // The reply's replay window: its path's.
                let admit = self.verify(&buf[..len], StreamId::from(fb.path_id))?;
                return Ok(Some(Classified {
                    admit,
                    need: Some(Need::Encoder(self.cfg.stream)),
                    step,
                }));
            }
            if fb.kind != FEEDBACK_KIND_FEC {
                return self.count_drop(Drop::Malformed).map(|_| None);
            }
            let decoded = Feedback::decode(fb.body);
            let Ok(fb) = decoded else {
                return self.count_drop(Drop::Malformed).map(|_| None);
            };
            let admit = self.verify(&buf[..len], stream)?;
            return Ok(Some(Classified {
                admit,
                need: Some(Need::Encoder(stream)),
                step: Srv6Step::Feedback(fb),
            }));
        }
        if tlvs.repair.is_some() || tlvs.source.is_some() || l.segments_left == 0 {
            return self.count_drop(Drop::Malformed).map(|_| None);
        }
        // End behaviour: next segment.
        let sl = l.segments_left - 1;
        if wsrv6::advance_segment(buf, len).is_err() {
            return self.count_drop(Drop::Malformed).map(|_| None);
        }
        let Some(dec_idx) = self.decoder_index(&buf[..len], &l, sl) else {
            // Not a tunnel we protect: forward as a plain End.
            add(&self.metrics.global.unprotected, 1);
            send(tx, Egress::Kernel, &buf[..len]);
            return Ok(None);
        };
        Ok(Some(Classified {
            admit: None,
            need: Some(Need::Encoder(self.cfg.stream)),
            step: Srv6Step::Encode {
                l,
                len,
                sl,
                dec_idx,
                tagged: None,
            },
        }))
    }

    /// `deliver`: false for a source the kernel already delivered (only recorded).
    fn classify_decoder(
        &mut self,
        buf: &mut [u8],
        len: usize,
        deliver: bool,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Step1 {
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        let Ok(tlvs) = HirtTlvs::parse(&buf[l.tlv_range()], &self.cfg.tlv) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        if let Some((_, rep)) = tlvs.repair {
            let payload = l.payload_range();
            if l.next_header != NH_NONE || payload.len() != rep.payload_len as usize {
                return self.count_drop(Drop::Malformed).map(|_| None);
            }
            let admit = self.verify(&buf[..len], rep.stream)?;
            return Ok(Some(Classified {
                admit,
                need: Some(Need::Decoder(rep.stream)),
                step: Srv6Step::Repair {
                    rep,
                    start: payload.start,
                    end: payload.end,
                },
            }));
        }
        if let Some((_, fb)) = tlvs.feedback {
            let body = ProbeBody::new_checked(fb.body);
            let (Ok(body), FEEDBACK_KIND_PROBE, NH_NONE) = (body, fb.kind, l.next_header) else {
                return self.count_drop(Drop::Malformed).map(|_| None);
            };
            let step = Srv6Step::Probe {
                l,
                path: fb.path_id,
                timestamp: fb.timestamp_echo,
                sent: body.sent(),
                len,
            };
            // The probe's replay window: its path's (the sources on the path share it).
            let admit = self.verify(&buf[..len], StreamId::from(fb.path_id))?;
            return Ok(Some(Classified {
                admit,
                need: Some(Need::Decoder(self.cfg.stream)),
                step,
            }));
        }
        let auth_sources = self.cfg.auth.as_ref().is_some_and(|a| a.sources);
        let Some((_, src)) = tlvs.source else {
            if auth_sources {
                // Anyone can send to the SID; with source authentication on, only what our
                // encoder signed leaves the decoder.
                return self.count_drop(Drop::Auth).map(|_| None);
            }
            // Unprotected traffic to our decoder SID: apply the behaviour directly.
            add(&self.metrics.global.unprotected, 1);
            behave(&self.cfg, &self.metrics, 0, buf, len, false, tx);
            return Ok(None);
        };
        let has_auth = tlvs.auth.is_some();
        let (len, admit) = if has_auth {
            // Verified whenever we have a key (required or not); always stripped, so the
            // symbol is the encoder's (which was made before the TLVs went in).
            let admit = self.verify(&buf[..len], src.stream)?;
            match wsrv6::remove_tlv(buf, len, self.cfg.tlv.auth) {
                Ok(Some(n)) => (n, admit),
                _ => return self.count_drop(Drop::Malformed).map(|_| None),
            }
        } else if auth_sources {
            add(&self.metrics.stream(src.stream).auth_failures, 1);
            return Err(Drop::Auth);
        } else {
            (len, None)
        };
        let Ok(Some(len)) = wsrv6::remove_tlv(buf, len, self.cfg.tlv.source) else {
            return self.count_drop(Drop::Malformed).map(|_| None);
        };
        // Removing TLVs shortens the SRH, not the inner packet.
        let inner_at = len.saturating_sub(l.packet_len - l.payload_offset);
        Ok(Some(Classified {
            admit,
            need: Some(Need::Decoder(src.stream)),
            step: Srv6Step::Decode {
                src,
                len,
                inner_at,
                deliver,
            },
        }))
    }

    /// Codes a source (see [`Srv6Step::Encode`]), then sends what the encoder has ready.
    #[allow(clippy::too_many_arguments)]
    fn encode(
        &mut self,
        enc: &mut Encoder,
        buf: &mut [u8],
        len: usize,
        l: &Srv6Layout,
        sl: u8,
        dec_idx: u8,
        tagged: Option<u32>,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let stream = self.cfg.stream;
        if let Some(esi) = tagged {
            if enc.next_esi(stream) != esi {
                tracing::error!(
                    "tagged source ESI {esi}, encoder expects {}",
                    enc.next_esi(stream)
                );
                return self.count_drop(Drop::Malformed);
            }
        }
        let need = match buf.get(l.payload_offset..len) {
            Some(inner) if is_pure_tcp_ack(inner) => SourceNeed::Superseded,
            _ => SourceNeed::Timely,
        };
        // Several paths: the flow's path, its middle SIDs inserted after the End (so they are
        // part of the symbol: the decoder receives them), its own stream.
        let (stream, len, sl) = match (&mut self.paths, tagged) {
            (Some(p), None) => {
                let inner = buf.get(l.payload_offset..len).unwrap_or(&[]);
                let path = p.set.for_source(flow_hash(inner), len, now);
                p.set.note_busy(path);
                let sids = &p.wire_sids[usize::from(path)];
                match wsrv6::insert_segments(buf, len, usize::from(sl) + 1, sids) {
                    Ok(n) => (stream + StreamId::from(path), n, sl + sids.len() as u8),
                    Err(_) => return self.count_drop(Drop::Malformed),
                }
            }
            _ => (stream, len, sl),
        };
        let c = self.metrics.stream(stream);
        add(&c.enc_packets_in, 1);
        // A source the kernel tagged already went out with its ESI: only untagged ones can be
        // left out.
        if tagged.is_none() {
            // The inner packet ends the frame (segments inserted above moved its start).
            let inner_at = len.saturating_sub(l.packet_len.saturating_sub(l.payload_offset));
            let ecn_capable = buf
                .get(inner_at..len)
                .is_some_and(|p| matches!(crate::ecn::inner_tos(p) & 3, 1 | 2));
            match enc.admit_source(stream, need, ecn_capable, now) {
                SourceAdmission::Send => {}
                // The outer header keeps its ECN field: a CE mark there is the path's (the
                // decoder counts it as a congestion signal), and the encoder knows of its own.
                SourceAdmission::MarkCe => crate::ecn::set_ecn(&mut buf[inner_at..len], 3),
                SourceAdmission::Drop => return Ok(()),
            }
        }
        // The symbol: normalised (what routers may change inside the tunnel set as the decoder
        // will rebuild it), coded, restored.
        let dec_sid = self.cfg.dec_sid.unwrap_or(self.cfg.peer_dec_sid);
        let saved = normalize(buf, l.srh_offset, sl, dec_idx, dec_sid);
        let tag = enc.handle_source_needing(stream, &buf[..len], need, now);
        restore(buf, l.srh_offset, &saved);
        if tagged.is_some() {
            add(&c.enc_packets_out, 1);
            add(&c.source_bytes_sent, (len + SOURCE_TLV_SIZE) as u64);
            self.drain_repairs(enc, now, tx);
            return Ok(());
        }
        let src = SourceRepr {
            stream: tag.stream,
            esi: tag.esi,
        };
        let n = wsrv6::insert_source_tlv(buf, len, self.cfg.tlv.source, &src);
        let n = match (n, self.cfg.auth.as_ref()) {
            (Ok(n), Some(a)) if a.sources => {
                wsrv6::sign(buf, n, &next_auth(&self.cfg, &self.auth_seq, a, false))
            }
            (t, _) => t,
        };
        match n {
            Ok(n) => {
                add(&c.enc_packets_out, 1);
                add(&c.source_bytes_sent, n as u64);
                send(tx, Egress::Kernel, &buf[..n]);
            }
            Err(_) => {
                // Too big for a TLV: forward unprotected (the symbol is already counted; the
                // decoder will recover it if it can).
                add(&self.metrics.global.unprotected, 1);
                send(tx, Egress::Kernel, &buf[..len]);
            }
        }
        self.drain_repairs(enc, now, tx);
        Ok(())
    }

    /// Builds an internal packet (no payload) with one feedback TLV over `dst`, signed when we
    /// have a key, and sends it.
    fn send_internal(
        &mut self,
        src: Ipv6Addr,
        dst: &[Ipv6Addr],
        repr: &FeedbackRepr<'_>,
        tx: &mut impl TransmitSink<Egress>,
    ) -> bool {
        let Srv6Machine {
            cfg, auth_seq, out, ..
        } = self;
        let h = internal_header(cfg, src, dst);
        let auth = cfg
            .auth
            .as_ref()
            .map(|a| next_auth(cfg, auth_seq, a, a.rfc8754));
        let built = Srv6Builder::new(out, &h).and_then(|mut b| {
            b.push_feedback(cfg.tlv.feedback, repr)?;
            b.finish(&[], auth.as_ref())
        });
        match built {
            Ok(n) => {
                send(tx, Egress::Kernel, &out[..n]);
                true
            }
            Err(_) => {
                add(&self.metrics.global.send_errors, 1);
                false
            }
        }
    }

    /// Answers a probe (`pkt`, authenticated) on `path` with what this decoder received on the
    /// path, over the probe's segment list reversed: back through the same middle SIDs to the
    /// encoder SID, so the reply crosses the path it measures.
    fn answer_probe(
        &mut self,
        pkt: &[u8],
        l: &Srv6Layout,
        path: PathId,
        timestamp: u32,
        sent: u32,
        tx: &mut impl TransmitSink<Egress>,
    ) {
        let Some(counts) = self.probes_received.get_mut(usize::from(path)) else {
            return;
        };
        counts.0 = counts.0.wrapping_add(1);
        counts.1 = counts.1.wrapping_add(pkt.len() as u32);
        let (received, received_bytes) = *counts;
        // The probe's list is [decoder, middle SIDs (last visited first)]: the reply's is
        // [encoder, the same middle SIDs in visit order].
        let srh = l.srh(pkt);
        let middles = usize::from(l.last_entry);
        if middles > MAX_PATH_SIDS {
            let _ = self.count_drop(Drop::Malformed);
            return;
        }
        let mut segs = [Ipv6Addr::UNSPECIFIED; MAX_PATH_SIDS + 1];
        segs[0] = self.cfg.enc_sid.unwrap_or(self.cfg.peer_enc_sid);
        for (i, seg) in segs[1..=middles].iter_mut().enumerate() {
            match srh.segment(i + 1) {
                Some(s) => *seg = s,
                None => return,
            }
        }
        segs[1..=middles].reverse();
        let body = ProbeReplyBody::to_bytes(sent, received, received_bytes);
        let repr = FeedbackRepr {
            stream: self.cfg.stream,
            path_id: path,
            kind: FEEDBACK_KIND_PROBE_REPLY,
            timestamp_echo: timestamp,
            body: &body,
        };
        let src = self.cfg.dec_sid.unwrap_or(Ipv6Addr::UNSPECIFIED);
        self.send_internal(src, &segs[..=middles], &repr, tx);
    }

    /// The paths' timers: the manager's (silence, probes of idle paths), heartbeat probes of
    /// busy paths, events logged, the status published.
    fn path_timeout(&mut self, now: Instant, tx: &mut impl TransmitSink<Egress>) {
        let Some(p) = &mut self.paths else {
            return;
        };
        let mut due = [0 as PathId; MAX_PATHS];
        let mut n = 0;
        if p.set.poll_timeout().is_some_and(|t| t <= now) {
            for &path in p.set.on_timeout(now).iter().take(MAX_PATHS) {
                due[n] = path;
                n += 1;
            }
        }
        let src = self.cfg.enc_sid.unwrap_or(Ipv6Addr::UNSPECIFIED);
        for &path in &due[..n] {
            let Some(p) = &mut self.paths else {
                return;
            };
            let Some((timestamp, sent)) = p.set.probe(path, now) else {
                continue;
            };
            let Some(list) = p.internal.get(usize::from(path)) else {
                continue;
            };
            let mut segs = [Ipv6Addr::UNSPECIFIED; MAX_PATH_SIDS + 1];
            let k = list.len().min(segs.len());
            segs[..k].copy_from_slice(&list[..k]);
            let body = ProbeBody::to_bytes(sent);
            let repr = FeedbackRepr {
                stream: self.cfg.stream + StreamId::from(path),
                path_id: path,
                kind: FEEDBACK_KIND_PROBE,
                timestamp_echo: timestamp,
                body: &body,
            };
            if self.send_internal(src, &segs[..k], &repr, tx) {
                add(&self.metrics.global.path_probes_sent, 1);
            }
        }
        let Some(p) = &mut self.paths else {
            return;
        };
        p.set.drain_events(&self.metrics);
        if p.next_publish <= now {
            p.next_publish = now + crate::udp::paths::PATH_PUBLISH;
            let describe = &p.describe;
            let status = p
                .set
                .status(|i| describe.get(usize::from(i)).cloned().unwrap_or_default());
            self.metrics.publish_paths(status);
        }
    }

    /// Hands a repair to the decoder, then delivers what it recovered.
    fn repair(
        &mut self,
        d: &mut DecState,
        rep: &RepairRepr,
        payload: &[u8],
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) {
        engine::decode_repair(
            d,
            &self.metrics,
            rep.stream,
            &rep.info,
            rep.timestamp,
            payload,
            now,
        );
        self.drain_decoder(d, now, tx);
    }

    /// Hands a source (TLVs removed, `buf[..len]`, its inner packet at `inner_at`) to the
    /// decoder; delivers it and what it recovered.
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &mut self,
        d: &mut DecState,
        src: SourceRepr,
        buf: &mut [u8],
        (inner_at, len): (usize, usize),
        deliver: bool,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let c = self.metrics.stream(src.stream);
        add(&c.dec_packets_in, 1);
        let hl = buf[7];
        let tc = traffic_class(buf);
        let slot = (src.stream as usize).min(d.extra.len() - 1);
        d.extra[slot] = (hl, tc);
        buf[7] = 0;
        set_traffic_class(buf, 0);
        // Hop limit and traffic class are not part of the symbol: a held packet keeps its own.
        let meta = u32::from(hl) | u32::from(tc) << 8;
        if tc & 3 == 3 {
            // CE: a queue on the path marks; the encoder hears of it in feedback.
            d.dec.note_ce(src.stream);
        }
        let flow = match d.dec.config().in_order {
            Some(_) => buf
                .get(inner_at..len)
                .map_or(SourceFlow::default(), source_flow),
            None => SourceFlow::default(),
        };
        let verdict =
            d.dec
                .handle_source_in_flow(src.stream, src.esi, &buf[..len], meta, flow, now);
        buf[7] = hl;
        set_traffic_class(buf, tc);
        let res = match engine::count_verdict(&self.metrics, src.stream, verdict) {
            Ok(true) if !deliver => {
                add(&c.delivered_by_kernel, 1);
                add(&c.dec_packets_out, 1);
                Ok(())
            }
            Ok(true) => {
                behave(&self.cfg, &self.metrics, src.stream, buf, len, false, tx);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(engine::Duplicate) => Err(Drop::Duplicate),
        };
        self.drain_decoder(d, now, tx);
        res
    }

    /// Sends every repair the encoder has ready, as SRv6 repair packets to the decoder SID
    /// (with several paths: over the path the manager picks for its stream's path).
    fn drain_repairs(
        &mut self,
        enc: &mut Encoder,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) {
        let Srv6Machine {
            cfg,
            metrics,
            auth_seq,
            out,
            paths,
            ..
        } = self;
        let src = cfg.enc_sid.unwrap_or(Ipv6Addr::UNSPECIFIED);
        let direct = [cfg.dec_sid.unwrap_or(cfg.peer_dec_sid)];
        while let Some(r) = enc.poll_repair() {
            let mut hold = Duration::ZERO;
            let dst: &[Ipv6Addr] = match paths {
                None => &direct,
                Some(p) => {
                    let source_path = r.stream.saturating_sub(cfg.stream) as PathId;
                    let path = p.set.for_repair(source_path, r.payload.len(), now);
                    p.set.note_busy(path);
                    hold = p.set.manager().repair_hold(source_path, path);
                    p.internal
                        .get(usize::from(path))
                        .map_or(&direct[..], Vec::as_slice)
                }
            };
            let h = internal_header(cfg, src, dst);
            let repr = RepairRepr {
                stream: r.stream,
                info: r.info,
                timestamp: r.timestamp,
                payload_len: r.payload.len() as u16,
            };
            let auth = cfg
                .auth
                .as_ref()
                .map(|a| next_auth(cfg, auth_seq, a, a.rfc8754));
            let built = Srv6Builder::new(out, &h).and_then(|mut b| {
                b.push_repair(cfg.tlv.repair, &repr)?;
                b.finish(r.payload, auth.as_ref())
            });
            let c = metrics.stream(r.stream);
            match built {
                Ok(n) => {
                    add(&c.repairs_sent, 1);
                    add(&c.repair_bytes_sent, r.payload.len() as u64);
                    let held = !hold.is_zero()
                        && paths
                            .as_mut()
                            .is_some_and(|p| p.held.hold(now + hold, Egress::Kernel, 0, &out[..n]));
                    if !held {
                        send(tx, Egress::Kernel, &out[..n]);
                    }
                }
                Err(_) => add(&metrics.global.send_errors, 1),
            }
        }
    }

    /// Delivers recovered packets (rebuilt, then the behaviour) and sends pending feedback.
    fn drain_decoder(
        &mut self,
        st: &mut DecState,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) {
        let Srv6Machine {
            cfg,
            metrics,
            auth_seq,
            out,
            ..
        } = self;
        let DecoderSlot {
            dec,
            extra: last_hl_tc,
        } = st;
        while let Some(r) = dec.poll_recovered() {
            let n = r.data.len();
            if n < 40 || n > out.len() {
                continue;
            }
            out[..n].copy_from_slice(r.data);
            if r.original {
                out[7] = r.meta as u8;
                set_traffic_class(out, (r.meta >> 8) as u8);
                behave(cfg, metrics, r.stream, out, n, false, tx);
                continue;
            }
            let slot = (r.stream as usize).min(last_hl_tc.len() - 1);
            let (hl, tc) = last_hl_tc[slot];
            out[7] = hl;
            set_traffic_class(out, tc);
            add(&metrics.stream(r.stream).recovered, 1);
            behave(cfg, metrics, r.stream, out, n, true, tx);
        }
        let src = cfg.dec_sid.unwrap_or(Ipv6Addr::UNSPECIFIED);
        let dst = [cfg.enc_sid.unwrap_or(cfg.peer_enc_sid)];
        while let Some(fb) = dec.poll_feedback(now) {
            let mut body = [0u8; Feedback::MAX_LEN];
            let Some(blen) = fb.encode(&mut body) else {
                continue;
            };
            let h = internal_header(cfg, src, &dst);
            let repr = FeedbackRepr {
                stream: fb.stream,
                path_id: fb.path,
                kind: FEEDBACK_KIND_FEC,
                timestamp_echo: fb.echo.map(|e| e.ts).unwrap_or(0),
                body: &body[..blen],
            };
            let auth = cfg
                .auth
                .as_ref()
                .map(|a| next_auth(cfg, auth_seq, a, a.rfc8754));
            let built = Srv6Builder::new(out, &h).and_then(|mut b| {
                b.push_feedback(cfg.tlv.feedback, &repr)?;
                b.finish(&[], auth.as_ref())
            });
            if let Ok(n) = built {
                add(&metrics.stream(fb.stream).feedback_sent, 1);
                send(tx, Egress::Kernel, &out[..n]);
            }
        }
    }
}

/// Outer header of a repair, feedback or probe packet: from `src` through the segment list
/// `dst` (wire order: our peer's SID at index 0, the first segment to visit at the top), with
/// Next Header 59, so it never leaves the tunnel.
fn internal_header<'a>(cfg: &NodeConfig, src: Ipv6Addr, dst: &'a [Ipv6Addr]) -> Srv6Header<'a> {
    Srv6Header {
        src,
        segments: dst,
        segments_left: dst.len().saturating_sub(1) as u8,
        hop_limit: 64,
        traffic_class: cfg.repair_tclass,
        flow_label: 0,
        next_header: NH_NONE,
        tag: 0,
    }
}

/// Hands `bytes` for `dest` to the driver's batch. An SRv6 packet carries its traffic class
/// itself: the transmit's outer TOS is unused.
#[inline]
fn send(tx: &mut impl TransmitSink<Egress>, dest: Egress, bytes: &[u8]) {
    tx.transmit(Transmit {
        bytes,
        dest,
        tos: 0,
    });
}

/// Applies the decoder behaviour to a decoded packet in `buf[..len]` and emits the result.
fn behave(
    cfg: &NodeConfig,
    m: &Metrics,
    stream: StreamId,
    buf: &mut [u8],
    len: usize,
    recovered: bool,
    tx: &mut impl TransmitSink<Egress>,
) {
    let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
        add(&m.global.malformed, 1);
        return;
    };
    let stream_out = |m: &Metrics| add(&m.stream(stream).dec_packets_out, 1);
    if cfg.behavior == Behavior::End && l.segments_left > 0 {
        if wsrv6::advance_segment(buf, len).is_ok() {
            if recovered && cfg.ecn_ce {
                mark_ce(buf);
            }
            stream_out(m);
            send(tx, Egress::Kernel, &buf[..len]);
        }
        return;
    }
    let inner = l.payload_range();
    match l.next_header {
        NH_IPV6 | NH_IPV4 if inner.len() >= 20 => {
            if recovered && cfg.ecn_ce {
                mark_ce(&mut buf[inner.clone()]);
            }
            stream_out(m);
            send(tx, Egress::Decap, &buf[inner]);
        }
        _ => add(&m.global.malformed, 1),
    }
}

fn traffic_class(pkt: &[u8]) -> u8 {
    (pkt[0] << 4) | (pkt[1] >> 4)
}

fn set_traffic_class(pkt: &mut [u8], tc: u8) {
    pkt[0] = 0x60 | (tc >> 4);
    pkt[1] = (pkt[1] & 0x0f) | (tc << 4);
}

/// Fields [`normalize`] changed: hop limit, traffic class, segments left, DA.
struct Saved {
    hl: u8,
    tc: u8,
    sl: u8,
    da: [u8; 16],
}

/// Turns the packet (after the End step, SL = `sl`) into the symbol: HL = TC = 0, SL and DA at
/// the decoder's position.
fn normalize(buf: &mut [u8], srh_off: usize, sl: u8, dec_idx: u8, dec_sid: Ipv6Addr) -> Saved {
    let mut da = [0u8; 16];
    da.copy_from_slice(&buf[24..40]);
    let saved = Saved {
        hl: buf[7],
        tc: traffic_class(buf),
        sl,
        da,
    };
    buf[7] = 0;
    set_traffic_class(buf, 0);
    buf[srh_off + 3] = dec_idx;
    buf[24..40].copy_from_slice(&dec_sid.octets());
    saved
}

fn restore(buf: &mut [u8], srh_off: usize, s: &Saved) {
    buf[7] = s.hl;
    set_traffic_class(buf, s.tc);
    buf[srh_off + 3] = s.sl;
    buf[24..40].copy_from_slice(&s.da);
}

#[cfg(test)]
mod tests;
