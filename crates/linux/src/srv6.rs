//! The SRv6 network function: what happens to each packet that reaches one of our SIDs.
//!
//! This module holds no sockets: [`Srv6Node::handle_packet`] takes a packet the kernel routed to
//! the TUN device and puts every packet to send into the driver's batch as a
//! [`crate::engine::Transmit`] whose destination, an [`Egress`], tells which device to write it
//! to; [`Srv6Node::handle_timeout`] does the time-driven work. The runtime in
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
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use hirt_core::{Encoder, FecMode, Feedback, StreamId, Verdict};
use hirt_wire::replay::ReplayWindow;
use hirt_wire::srv6::{self as wsrv6, Auth, Srv6Builder, Srv6Header, Srv6Layout};
use hirt_wire::tlv::{FeedbackRepr, HirtTlvs, RepairRepr, SourceRepr, TlvTypes, SOURCE_TLV_SIZE};

pub use crate::config::{AuthKey, Behavior, CoderSettings};
pub use crate::ecn::mark_ce;
use crate::engine::{
    lock, CoderSlots, DecoderSlot, SlotsConfig, StreamCoder, Transmit, TransmitSink,
};
use crate::metrics::{add, Metrics};

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
}

/// The latest (hop limit, traffic class) seen per stream, kept beside each decoder slot: a
/// recovered packet gets those of its stream.
pub type HopLimits = Vec<(u8, u8)>;

/// What the workers of an instance share: the engine's coder slots (see
/// [`crate::engine::CoderSlots`]), the replay windows of the auth TLV and our auth sequence.
#[derive(Debug)]
pub struct Shared {
    slots: Arc<CoderSlots<HopLimits>>,
    /// Replay windows of the auth TLV sequence, per stream.
    replay: Mutex<Vec<ReplayWindow>>,
    /// Sequence number of our auth TLVs (one space per instance).
    auth_seq: AtomicU64,
}

impl Shared {
    /// The auth TLV for the next packet we sign with `key` (each takes a fresh sequence
    /// number from this instance's space).
    fn next_auth<'k>(&self, cfg: &NodeConfig, key: &'k AuthKey, rfc8754_hmac: bool) -> Auth<'k> {
        Auth {
            tlv_type: cfg.tlv.auth,
            key_id: key.key_id,
            key: &key.key,
            seq: self.auth_seq.fetch_add(1, Ordering::Relaxed),
            rfc8754_hmac,
        }
    }

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
        Arc::new(Shared {
            slots,
            replay: Mutex::new((0..streams).map(|_| ReplayWindow::new()).collect()),
            auth_seq: AtomicU64::new(crate::crypto::initial_counter()),
        })
    }

    fn enc(&self, stream: StreamId) -> Option<MutexGuard<'_, Encoder>> {
        self.slots.enc(stream)
    }

    fn dec(&self, stream: StreamId) -> Option<MutexGuard<'_, DecState>> {
        self.slots.dec(stream)
    }
}

type DecState = DecoderSlot<HopLimits>;

/// One worker: its configuration (its own stream), the shared state, scratch buffers.
pub struct Srv6Node {
    cfg: NodeConfig,
    shared: Arc<Shared>,
    coder: StreamCoder<HopLimits>,
    metrics: Arc<Metrics>,
    /// Scratch for building repair / feedback / recovered packets.
    out: Vec<u8>,
}

impl std::fmt::Debug for Srv6Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srv6Node")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

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
        let coder = StreamCoder::new(shared.slots.clone(), cfg.stream, metrics.clone());
        Srv6Node {
            cfg,
            shared,
            coder,
            metrics,
            out: vec![0u8; BUF_LEN],
        }
    }

    /// The node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The engine's side of this worker: timers, load, controller, stats.
    pub fn coder(&self) -> &StreamCoder<HopLimits> {
        &self.coder
    }

    /// Reports `n` packets dropped at the SID device's queue before the worker read them.
    /// Only a node that is a decoder and not an encoder passes them on (feedback
    /// `local_drops`): on a node with both roles the queue also holds sources still to be
    /// encoded, whose drops the decoder never sees as losses.
    pub fn add_local_drops(&mut self, n: u64) {
        if !self.shared.slots.encodes() {
            self.coder.add_local_drops(n);
        }
    }

    /// When [`Self::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.coder.poll_timeout()
    }

    /// Time-driven work (sparse-traffic repairs, feedback); emits what it produces.
    pub fn handle_timeout(&mut self, now: Instant, tx: &mut impl TransmitSink<Egress>) {
        let shared = self.shared.clone();
        if let Some(mut e) = shared.enc(self.cfg.stream) {
            e.handle_timeout(now);
            drain_repairs(&self.cfg, &self.metrics, &shared, &mut self.out, &mut e, tx);
        }
        if let Some(mut d) = shared.dec(self.cfg.stream) {
            d.dec.handle_timeout(now);
            drain_decoder(
                &self.cfg,
                &self.metrics,
                &shared,
                &mut self.out,
                &mut d,
                now,
                tx,
            );
        };
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
        if len < 40 {
            return self.count_drop(Drop::Malformed);
        }
        if buf[0] >> 4 != 6 {
            // IPv4 or anything else the kernel hands the device: not addressed to a SID.
            return self.count_drop(Drop::NotOurs);
        }
        let mut da = [0u8; 16];
        da.copy_from_slice(&buf[24..40]);
        let da = Ipv6Addr::from(da);
        let ours = Some(da) == self.cfg.enc_sid || Some(da) == self.cfg.dec_sid;
        if !ours || buf[6] != NH_ROUTING {
            // Not SRv6 traffic for our SIDs: the kernel's own link-local traffic on the
            // device, or an ICMPv6 error about a packet we sent (a Packet Too Big for a repair
            // larger than the path MTU lands here).
            return self.count_drop(Drop::NotOurs);
        }
        if Some(da) == self.cfg.enc_sid {
            self.encoder_packet(buf, len, now, tx)
        } else if Some(da) == self.cfg.dec_sid {
            self.decoder_packet(buf, len, now, true, tx)
        } else {
            self.count_drop(Drop::NotOurs)
        }
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

    /// Hands the symbol of the source `buf[..len]` (after its End: Segments Left `sl`, the
    /// decoder SID at `dec_idx`) to the encoder: normalised (what routers may change inside
    /// the tunnel set as the decoder will rebuild it), coded, restored.
    #[allow(clippy::too_many_arguments)]
    fn code_source(
        &self,
        enc: &mut Encoder,
        buf: &mut [u8],
        len: usize,
        l: &Srv6Layout,
        sl: u8,
        dec_idx: u8,
        now: Instant,
    ) -> hirt_core::SourceTag {
        let dec_sid = self.cfg.dec_sid.unwrap_or(self.cfg.peer_dec_sid);
        let saved = normalize(buf, l.srh_offset, sl, dec_idx, dec_sid);
        let tag = enc.handle_source(self.cfg.stream, &buf[..len], now);
        restore(buf, l.srh_offset, &saved);
        tag
    }

    /// Whether this node has the encoder SID.
    pub fn is_encoder(&self) -> bool {
        self.cfg.enc_sid.is_some()
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
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed);
        };
        if l.segments_left == 0 || wsrv6::advance_segment(buf, len).is_err() {
            return self.count_drop(Drop::Malformed);
        }
        let sl = l.segments_left - 1;
        let shared = self.shared.clone();
        let stream = self.cfg.stream;
        let Some(mut enc) = shared.enc(stream) else {
            return self.count_drop(Drop::NotOurs);
        };
        let Some(dec_idx) = self.decoder_index(&buf[..len], &l, sl) else {
            return self.count_drop(Drop::Malformed);
        };
        if enc.next_esi(stream) != esi {
            tracing::error!(
                "tagged source ESI {esi}, encoder expects {}",
                enc.next_esi(stream)
            );
            return self.count_drop(Drop::Malformed);
        }
        let c = self.metrics.stream(stream);
        add(&c.enc_packets_in, 1);
        self.code_source(&mut enc, buf, len, &l, sl, dec_idx, now);
        add(&c.enc_packets_out, 1);
        add(&c.source_bytes_sent, (len + SOURCE_TLV_SIZE) as u64);
        drain_repairs(
            &self.cfg,
            &self.metrics,
            &shared,
            &mut self.out,
            &mut enc,
            tx,
        );
        Ok(())
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
        if len < 40 || buf[0] >> 4 != 6 || buf[6] != NH_ROUTING {
            return self.count_drop(Drop::Malformed);
        }
        if buf[24..40] != self.cfg.dec_sid.map_or([0; 16], |s| s.octets()) {
            return self.count_drop(Drop::NotOurs);
        }
        self.decoder_packet(buf, len, now, false, tx)
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

    fn verify(&mut self, pkt: &[u8], stream: StreamId) -> Result<(), Drop> {
        let Some(a) = self.cfg.auth.as_ref() else {
            return Ok(());
        };
        let key = a.key.as_slice();
        let key_id = a.key_id;
        match wsrv6::verify_auth(pkt, &self.cfg.tlv, |id| (id == key_id).then_some(key)) {
            Ok(r) => {
                let mut replay = lock(&self.shared.replay);
                let i = (stream as usize).min(replay.len() - 1);
                if replay[i].update(r.seq) {
                    Ok(())
                } else {
                    add(&self.metrics.stream(stream).auth_failures, 1);
                    Err(Drop::Auth)
                }
            }
            Err(_) => {
                add(&self.metrics.stream(stream).auth_failures, 1);
                Err(Drop::Auth)
            }
        }
    }

    fn encoder_packet(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed);
        };
        let Ok(tlvs) = HirtTlvs::parse(&buf[l.tlv_range()], &self.cfg.tlv) else {
            return self.count_drop(Drop::Malformed);
        };
        if let Some((_, fb)) = tlvs.feedback {
            let stream = fb.stream;
            let body = fb.body;
            let decoded = Feedback::decode(body);
            let len_ok = l.next_header == NH_NONE;
            if !len_ok {
                return self.count_drop(Drop::Malformed);
            }
            let Ok(fb) = decoded else {
                return self.count_drop(Drop::Malformed);
            };
            self.verify(&buf[..len], stream)?;
            add(&self.metrics.stream(stream).feedback_in, 1);
            let shared = self.shared.clone();
            if let Some(mut e) = shared.enc(stream) {
                e.handle_feedback(&fb, now);
                drain_repairs(&self.cfg, &self.metrics, &shared, &mut self.out, &mut e, tx);
            }
            return Ok(());
        }
        if tlvs.repair.is_some() || tlvs.source.is_some() || l.segments_left == 0 {
            return self.count_drop(Drop::Malformed);
        }
        // End behaviour: next segment.
        let sl = l.segments_left - 1;
        if wsrv6::advance_segment(buf, len).is_err() {
            return self.count_drop(Drop::Malformed);
        }
        let shared = self.shared.clone();
        let enc_stream = self.cfg.stream;
        let Some(mut enc) = shared.enc(enc_stream) else {
            return self.count_drop(Drop::NotOurs);
        };
        let Some(dec_idx) = self.decoder_index(&buf[..len], &l, sl) else {
            // Not a tunnel we protect: forward as a plain End.
            add(&self.metrics.global.unprotected, 1);
            send(tx, Egress::Kernel, &buf[..len]);
            return Ok(());
        };
        let c = self.metrics.stream(enc_stream);
        add(&c.enc_packets_in, 1);
        let tag = self.code_source(&mut enc, buf, len, &l, sl, dec_idx, now);
        let src = SourceRepr {
            stream: tag.stream,
            esi: tag.esi,
        };
        let tagged = wsrv6::insert_source_tlv(buf, len, self.cfg.tlv.source, &src);
        let tagged = match (tagged, self.cfg.auth.as_ref()) {
            (Ok(n), Some(a)) if a.sources => {
                wsrv6::sign(buf, n, &shared.next_auth(&self.cfg, a, false))
            }
            (t, _) => t,
        };
        match tagged {
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
        drain_repairs(
            &self.cfg,
            &self.metrics,
            &shared,
            &mut self.out,
            &mut enc,
            tx,
        );
        Ok(())
    }

    /// `deliver`: false for a source the kernel already delivered (only recorded).
    fn decoder_packet(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        deliver: bool,
        tx: &mut impl TransmitSink<Egress>,
    ) -> Result<(), Drop> {
        let Ok(l) = Srv6Layout::parse(&buf[..len]) else {
            return self.count_drop(Drop::Malformed);
        };
        let Ok(tlvs) = HirtTlvs::parse(&buf[l.tlv_range()], &self.cfg.tlv) else {
            return self.count_drop(Drop::Malformed);
        };
        if let Some((_, rep)) = tlvs.repair {
            let payload = l.payload_range();
            if l.next_header != NH_NONE || payload.len() != rep.payload_len as usize {
                return self.count_drop(Drop::Malformed);
            }
            self.verify(&buf[..len], rep.stream)?;
            let c = self.metrics.stream(rep.stream);
            add(&c.repairs_received, 1);
            let shared = self.shared.clone();
            let Some(mut d) = shared.dec(rep.stream) else {
                return self.count_drop(Drop::NotOurs);
            };
            let recovered =
                |d: &DecState| d.dec.stats(rep.stream).map(|s| s.recovered).unwrap_or(0);
            let before = recovered(&d);
            // A refused repair (wrong scheme, out of range) is counted by the core.
            let _ = d
                .dec
                .handle_repair(rep.stream, &rep.info, rep.timestamp, &buf[payload], now);
            if recovered(&d) > before {
                add(&c.repairs_used, 1);
            }
            drain_decoder(
                &self.cfg,
                &self.metrics,
                &shared,
                &mut self.out,
                &mut d,
                now,
                tx,
            );
            return Ok(());
        }
        if tlvs.feedback.is_some() {
            return self.count_drop(Drop::Malformed);
        }
        let auth_sources = self.cfg.auth.as_ref().is_some_and(|a| a.sources);
        let Some((_, src)) = tlvs.source else {
            if auth_sources {
                // Anyone can send to the SID; with source authentication on, only what our
                // encoder signed leaves the decoder.
                return self.count_drop(Drop::Auth);
            }
            // Unprotected traffic to our decoder SID: apply the behaviour directly.
            add(&self.metrics.global.unprotected, 1);
            behave(&self.cfg, &self.metrics, 0, buf, len, false, tx);
            return Ok(());
        };
        let len = if tlvs.auth.is_some() {
            // Verified whenever we have a key (required or not); always stripped, so the
            // symbol is the encoder's (which was made before the TLVs went in).
            if self.cfg.auth.is_some() {
                self.verify(&buf[..len], src.stream)?;
            }
            match wsrv6::remove_tlv(buf, len, self.cfg.tlv.auth) {
                Ok(Some(n)) => n,
                _ => return self.count_drop(Drop::Malformed),
            }
        } else if auth_sources {
            add(&self.metrics.stream(src.stream).auth_failures, 1);
            return Err(Drop::Auth);
        } else {
            len
        };
        let Ok(Some(len)) = wsrv6::remove_tlv(buf, len, self.cfg.tlv.source) else {
            return self.count_drop(Drop::Malformed);
        };
        let c = self.metrics.stream(src.stream);
        add(&c.dec_packets_in, 1);
        let hl = buf[7];
        let tc = traffic_class(buf);
        let shared = self.shared.clone();
        let Some(mut d) = shared.dec(src.stream) else {
            return self.count_drop(Drop::NotOurs);
        };
        let slot = (src.stream as usize).min(d.extra.len() - 1);
        d.extra[slot] = (hl, tc);
        buf[7] = 0;
        set_traffic_class(buf, 0);
        // Hop limit and traffic class are not part of the symbol: a held packet keeps its own.
        let meta = u32::from(hl) | u32::from(tc) << 8;
        let verdict = d
            .dec
            .handle_source_with(src.stream, src.esi, &buf[..len], meta, now);
        buf[7] = hl;
        set_traffic_class(buf, tc);
        let res = match verdict {
            Verdict::Deliver if !deliver => {
                add(&c.delivered_by_kernel, 1);
                add(&c.dec_packets_out, 1);
                Ok(())
            }
            Verdict::Deliver => {
                behave(&self.cfg, &self.metrics, src.stream, buf, len, false, tx);
                Ok(())
            }
            Verdict::Duplicate => {
                add(&c.duplicates, 1);
                Err(Drop::Duplicate)
            }
            Verdict::Hold => {
                add(&c.held, 1);
                Ok(())
            }
        };
        drain_decoder(
            &self.cfg,
            &self.metrics,
            &shared,
            &mut self.out,
            &mut d,
            now,
            tx,
        );
        res
    }
}

/// Sends every repair the encoder has ready, as SRv6 repair packets to the decoder SID.
fn drain_repairs(
    cfg: &NodeConfig,
    metrics: &Metrics,
    shared: &Shared,
    out: &mut [u8],
    enc: &mut Encoder,
    tx: &mut impl TransmitSink<Egress>,
) {
    let src = cfg.enc_sid.unwrap_or(Ipv6Addr::UNSPECIFIED);
    let dst = [cfg.dec_sid.unwrap_or(cfg.peer_dec_sid)];
    while let Some(r) = enc.poll_repair() {
        let h = internal_header(cfg, src, &dst);
        let repr = RepairRepr {
            stream: r.stream,
            info: r.info,
            timestamp: r.timestamp,
            payload_len: r.payload.len() as u16,
        };
        let auth = cfg
            .auth
            .as_ref()
            .map(|a| shared.next_auth(cfg, a, a.rfc8754));
        let built = Srv6Builder::new(out, &h).and_then(|mut b| {
            b.push_repair(cfg.tlv.repair, &repr)?;
            b.finish(r.payload, auth.as_ref())
        });
        let c = metrics.stream(r.stream);
        match built {
            Ok(n) => {
                add(&c.repairs_sent, 1);
                add(&c.repair_bytes_sent, r.payload.len() as u64);
                send(tx, Egress::Kernel, &out[..n]);
            }
            Err(_) => add(&metrics.global.send_errors, 1),
        }
    }
}

/// Outer header of a repair or feedback packet: from `src` to our peer's SID `dst` as the last
/// segment, with Next Header 59, so it never leaves the tunnel.
fn internal_header<'a>(cfg: &NodeConfig, src: Ipv6Addr, dst: &'a [Ipv6Addr]) -> Srv6Header<'a> {
    Srv6Header {
        src,
        segments: dst,
        segments_left: 0,
        hop_limit: 64,
        traffic_class: cfg.repair_tclass,
        flow_label: 0,
        next_header: NH_NONE,
        tag: 0,
    }
}

/// Delivers recovered packets (rebuilt, then the behaviour) and sends pending feedback.
fn drain_decoder(
    cfg: &NodeConfig,
    metrics: &Metrics,
    shared: &Shared,
    out: &mut [u8],
    st: &mut DecState,
    now: Instant,
    tx: &mut impl TransmitSink<Egress>,
) {
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
            timestamp_echo: fb.echo.map(|e| e.ts).unwrap_or(0),
            body: &body[..blen],
        };
        let auth = cfg
            .auth
            .as_ref()
            .map(|a| shared.next_auth(cfg, a, a.rfc8754));
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
