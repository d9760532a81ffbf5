//! UDP mode: two peers, each with a TUN device, carrying IP packets over UDP with FEC in each
//! direction (like tinyfecVPN, but adaptive, multi-core and authenticated).
//!
//! [`UdpMachine`] is one worker's per-packet logic, the engine's [`Transport`] of this mode (no
//! sockets, no locks), and [`UdpPeer`] the engine's [`Node`] around it: TUN packet -> source
//! frame (+ repairs); datagram -> authenticate and parse, then (engine) admit into the shared
//! receive state and lock the stream's slot, then source / repair / feedback / keepalive. Every
//! datagram is sealed with ChaCha20-Poly1305 ([`crate::crypto`]) under the keys of a session
//! that a Noise IKpsk2 handshake established ([`handshake`], static keys: [`keys`]); anything
//! that does not open is dropped silently and counted, so nothing reaches the TUN device
//! without the keys. Before the first session nothing is sent but the handshake.
//!
//! **Several workers** (`--threads N`): worker `t` owns TUN queue `t`, UDP socket `t` and
//! encoder stream `t` (the stream id travels in the frame header). The kernel decides which
//! socket a datagram reaches, so a datagram of stream `s` may land on any worker: encoders and
//! decoders live in the engine's per-stream slots (slot `s % N`, one mutex each; a worker's own
//! stream is uncontended), and the engine locks the slot of the stream a datagram names for
//! whichever worker received it.
//! - Nonces and replay, per sending worker: the 64-bit AEAD counter is `worker index (6 bits)
//!   | sequence (58 bits)`, each worker counting its own sequence from 0 in every session
//!   (sessions have fresh keys, so a restarted peer's counters start again under new keys). No
//!   two workers can produce the same counter (nonce) under a key. The receiver keeps one replay
//!   window per sending worker and key phase (all in the shared [`RxState`], under the engine's
//!   lock, reset when a new session takes the phase), tested and set *after* the tag verified
//!   ([`Transport::admit`]), so a datagram replayed to two workers at once is accepted once and
//!   forged datagrams cannot move a window. A window per sender matters:
//!   the senders' datagrams travel through different sockets and receiving workers, which run
//!   milliseconds apart on a loaded machine, and one shared 2048-counter window dropped the
//!   lagging worker's datagrams as replays (seen at ~50 kpps on 2 vCPUs).
//! - Addresses: the server learns the client's address per socket (each client worker sends
//!   from its own port, and the server's `SO_REUSEPORT` group hands client worker `t`'s
//!   datagrams to socket `t mod N` by the sender index in the AEAD counter,
//!   [`io::steer_by_sender`]; without it, a hash of the 4-tuple): worker `t`
//!   answers the address its socket learned; if its socket heard nothing for three keepalive
//!   intervals, or nothing since a new peer address appeared (a worker whose client port went
//!   away with an address change must not keep sending to it while other sockets hear the new
//!   one), it answers the peer address that appeared last (or the newest datagram's, if that
//!   one went quiet or is on another IP). A socket that hears two client ports keeps answering
//!   the one it learned (answering the newest alternates between them and reorders a stream
//!   across the client's sockets); a newer datagram from another IP moves it at once. "Newer"
//!   is per sending worker, so a replay from elsewhere never is. `peer_address_changes` counts
//!   new peer addresses (not heard within three keepalive intervals) after the first: a client
//!   with N workers adds N - 1 at start (one port each) and up to N per address change.
//! - Keepalives are sent by every worker from its own socket: on the client each socket is a
//!   NAT binding of its own that must be kept alive; on the server it costs N small datagrams
//!   per interval.
//!
//! **Traffic class per datagram** (a cmsg per datagram, [`io::TosBatch`]): a source datagram
//! carries the inner packet's DSCP and ECN (RFC 2983 uniform model, RFC 6040 normal mode);
//! repairs, feedback and keepalives carry `--repair-dscp` and Not-ECT. On receipt an outer CE
//! mark is copied to an ECN-capable inner packet, and a CE-marked datagram whose inner packet is
//! Not-ECT is dropped (RFC 6040 §4.2).
//!
//! The frame inside the AEAD is `hirt_wire::udp` (source, repair, feedback, keepalive). A
//! source frame carries the TUN packet unchanged: the symbol is the exact inner IP packet (as
//! read from the TUN device, before any ECN change on the way).

pub mod handshake;
pub mod io;
pub mod keys;
pub mod offload;
pub mod paths;

use crate::engine::load::{self, DropWatch, LOAD_PERIOD};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hirt_core::path::PathManagerConfig;
use hirt_core::{
    Decoder, Encoder, FecMode, Feedback, PathId, SourceAdmission, SourceFlow, SourceNeed, StreamId,
};
use hirt_fec::RepairInfo;
use hirt_wire::udp::{UdpPacket, UdpRepr, SOURCE_LEN};
use paths::PathSet;

use crate::config::CoderSettings;
use crate::config::{parse_cidr, UdpConfig, UdpRole};
use crate::control::Control;
use crate::crypto::{self, Opener, ReplayWindow, Sealer, HEADER_LEN, OVERHEAD};
pub use crate::ecn::{decap_ecn, inner_tos};
use crate::ecn::{mark_ce, set_ecn};
use crate::engine::{
    self, Classified, CoderSlots, Housekeeping, Need, NeedsState, Node, Operations, QueueDrops,
    Slot, SlotsConfig, Transmit, TransmitSink, Transport, Workers,
};
use crate::metrics::{add, Metrics};
use crate::netlink::{if_index, Netlink};
use crate::runtime::{self, StopFlag};
use crate::tun::{poll_readable, Tun};

/// Largest TUN packet handled.
pub const MAX_PACKET: usize = 9216;
/// Offset at which a TUN packet is read so the frame header and AEAD header fit in front.
pub const TUN_OFFSET: usize = HEADER_LEN + SOURCE_LEN;
/// Buffer length for one datagram.
pub const BUF_LEN: usize = TUN_OFFSET + MAX_PACKET + 64;
/// A learned per-socket address is used while heard within this many keepalive intervals.
const LEARNED_KEEPALIVES: u32 = 3;
/// High bits of the AEAD counter that name the sending worker.
const SENDER_BITS: u32 = 6;
const SEQ_BITS: u32 = 64 - SENDER_BITS;
/// Most workers (`--threads`) per peer.
pub const MAX_WORKERS: usize = 1 << SENDER_BITS;

const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// The first AEAD counter of worker `index` in a session: the index in the top bits, sequence
/// 0 (see the module docs).
pub fn counter_start(index: usize) -> u64 {
    ((index % MAX_WORKERS) as u64) << SEQ_BITS
}

/// The sending worker named in an AEAD counter.
fn sender_of(counter: u64) -> usize {
    (counter >> SEQ_BITS) as usize
}

/// What admits an authenticated datagram: its session and key phase, its AEAD counter, where
/// it came from and the path it names.
pub type Admission = (u64, u8, u64, SocketAddr, PathId);

/// Where a datagram goes: the path (the socket it leaves from) and the peer's address on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathDest {
    /// The path (0 on a single-path tunnel).
    pub path: PathId,
    /// The peer's address.
    pub addr: SocketAddr,
}

impl From<PathDest> for SocketAddr {
    /// A single-socket driver only needs the address.
    #[inline]
    fn from(d: PathDest) -> SocketAddr {
        d.addr
    }
}

/// The paths of a worker: the client's configured paths, the server's policy for the paths
/// it learns (see [`paths`]).
#[derive(Clone, Debug)]
pub struct PathSetup {
    /// Policy, probes, repair path.
    pub cfg: PathManagerConfig,
    /// Client: the server's address on each path (path id = index); server: empty.
    pub remotes: Vec<SocketAddr>,
}

/// Which end of the tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listens; learns the client's address.
    Server,
    /// Connects to a fixed server address.
    Client,
}

/// Configuration of one peer (one worker of it).
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Server or client.
    pub role: Role,
    /// Our private key, the peer's public key, the pre-shared key.
    pub keys: keys::StaticKeys,
    /// Rekey timers and handshake limits.
    pub handshake: handshake::HandshakeConfig,
    /// Encrypt (true) or authenticate only.
    pub encrypt: bool,
    /// FEC mode of our encoder (the peer's decoder must use the same scheme).
    pub fec: FecMode,
    /// Our encoder stream: the worker index (its slot in [`Shared`]).
    pub stream: StreamId,
    /// Clamp TCP MSS of SYNs to fit this TUN MTU (None: no clamping).
    pub mss_mtu: Option<u16>,
    /// Mark recovered packets ECN-CE.
    pub ecn_ce: bool,
    /// DSCP (0-63) of repair, feedback and keepalive datagrams.
    pub repair_dscp: u8,
    /// Keepalive interval.
    pub keepalive: Duration,
    /// The server's address (client only).
    pub remote: Option<SocketAddr>,
    /// Seed for the core's randomness.
    pub seed: u64,
    /// Repair timers, overload control and in-order release.
    pub coder: CoderSettings,
}

/// What the workers of a UDP-mode instance share (see [`crate::engine::Shared`]): the coder
/// slots, the receive state (replay windows, peer addresses: the engine's state lock) and
/// [`UdpCommon`].
pub type Shared = engine::Shared<UdpMachine>;

/// The lock-free part of what the workers share.
#[derive(Debug)]
pub struct UdpCommon {
    /// The address epoch: bumped whenever a new peer address appears; an address a worker
    /// learned before is not used until its socket hears it again, it may be the one that just
    /// went away.
    addr_epoch: AtomicU64,
    /// The handshake and the session keys (their own lock, taken only when keys change).
    pub sessions: handshake::Sessions,
    /// Workers of the instance (path `p` of worker `t` carries stream `t + p x workers`).
    workers: usize,
}

/// Replay state of one key phase's session: a window and the newest counter per sending
/// worker.
#[derive(Debug)]
struct PhaseWindows {
    session: u64,
    windows: Vec<ReplayWindow>,
    tops: [Option<u64>; MAX_WORKERS],
}

impl PhaseWindows {
    fn new(session: u64) -> PhaseWindows {
        PhaseWindows {
            session,
            windows: vec![ReplayWindow::default(); MAX_WORKERS],
            tops: [None; MAX_WORKERS],
        }
    }
}

/// What the receive side of all workers shares.
#[derive(Debug)]
pub struct RxState {
    /// Per key phase: the replay state of the session that holds it.
    phases: [Option<PhaseWindows>; handshake::PHASES],
    /// The address of the datagram that was last the newest of its sender.
    newest: Option<SocketAddr>,
    /// Server: peer addresses heard lately, and when (a client with N workers has N ports).
    recent: [Option<(SocketAddr, Instant)>; RECENT],
    /// Server: whether any peer address was ever heard.
    heard_any: bool,
    /// Server: the peer address that appeared last (a stable answer for workers whose socket
    /// hears nothing: `newest` alternates between the client's ports).
    stable: Option<SocketAddr>,
}

/// Peer addresses remembered for counting address changes.
const RECENT: usize = 16;

impl RxState {
    /// Server: notes that `from` was heard. Returns true for a new peer address: one not heard
    /// within `fresh` while another had been heard before (NAT rebinding, address change, or a
    /// client worker's port seen for the first time).
    fn note(&mut self, from: SocketAddr, now: Instant, fresh: Duration) -> bool {
        let live = |t: Instant| now.saturating_duration_since(t) < fresh;
        if let Some(e) = self.recent.iter_mut().flatten().find(|(a, _)| *a == from) {
            let was_live = live(e.1);
            e.1 = now;
            if !was_live {
                self.stable = Some(from);
            }
            return !was_live;
        }
        // Replace an empty or the stalest entry.
        let slot = self
            .recent
            .iter_mut()
            .min_by_key(|e| e.as_ref().map(|&(_, t)| t))
            .expect("RECENT > 0");
        *slot = Some((from, now));
        self.stable = Some(from);
        let new = self.heard_any;
        self.heard_any = true;
        new
    }

    /// Server: where a worker whose socket heard nothing (lately) sends: the address that
    /// appeared last while it is live and on the newest datagram's IP, else the newest.
    fn fallback(&self, now: Instant, fresh: Duration) -> Option<SocketAddr> {
        let live = |a: SocketAddr| {
            self.recent
                .iter()
                .flatten()
                .any(|&(x, t)| x == a && now.saturating_duration_since(t) < fresh)
        };
        match (self.stable, self.newest) {
            (Some(s), Some(n)) if s.ip() == n.ip() && live(s) => Some(s),
            (_, n) => n,
        }
    }
}

impl engine::Shared<UdpMachine> {
    /// State for `slots` workers (encoder and decoder slots; stream `s` lives in `s % slots`).
    pub fn new(cfg: &PeerConfig, slots: usize) -> Arc<Shared> {
        let workers = slots;
        let slots = CoderSlots::new(
            &SlotsConfig {
                fec: &cfg.fec,
                coder: &cfg.coder,
                slots,
                encode: true,
                decode: true,
                enc_seed: cfg.seed,
                dec_seed: cfg.seed ^ 0xdec0de,
            },
            || (),
        );
        let hs = handshake::Handshake::new(
            cfg.keys.clone(),
            cfg.role == Role::Client,
            cfg.handshake.clone(),
        );
        engine::Shared::with_slots(
            slots,
            RxState {
                phases: Default::default(),
                newest: None,
                recent: [None; RECENT],
                heard_any: false,
                stable: None,
            },
            UdpCommon {
                addr_epoch: AtomicU64::new(0),
                sessions: handshake::Sessions::new(hs, Instant::now()),
                workers: workers.max(1),
            },
        )
    }

    /// The address of the newest authenticated datagram, whichever worker received it.
    pub fn newest_peer(&self) -> Option<SocketAddr> {
        self.state().newest
    }
}

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpDrop {
    /// Did not authenticate (or replayed).
    Auth,
    /// A handshake message, consumed (answered when it was a valid initiation).
    Handshake,
    /// Authenticated but not a valid frame.
    Malformed,
    /// A duplicate source.
    Duplicate,
    /// Outer ECN CE on a Not-ECT inner packet (RFC 6040 §4.2: drop).
    CeOnNotEct,
}

/// One worker of a UDP-mode peer: the engine's [`Node`] around its [`UdpMachine`].
pub type UdpPeer = Node<UdpMachine>;

/// One worker's UDP-mode state machine, the [`Transport`] of UDP mode: its configuration,
/// sealer and opener, the address its socket learned, scratch. It holds no locks: the engine's
/// [`Node`] hands it the slot a datagram needs and the shared receive state.
pub struct UdpMachine {
    cfg: PeerConfig,
    /// This worker's copy of the session keys.
    keys: WorkerKeys,
    /// Server: the address this worker's socket heard last (newest counter), and when.
    learned: Option<Learned>,
    /// The instance's address epoch and sessions ([`Shared::common`](crate::engine::Shared)).
    common: Arc<UdpCommon>,
    metrics: Arc<Metrics>,
    next_keepalive: Option<Instant>,
    /// Client worker 0: when to look at the handshake timers next.
    next_handshake: Option<Instant>,
    out: Vec<u8>,
    epoch: Instant,
    /// Several paths: the manager and each path's link (`None`: one path, nothing to choose).
    paths: Option<PathSet>,
    /// Server: the policy of the paths it learns.
    path_cfg: PathManagerConfig,
    /// When the path status was last published.
    next_path_publish: Option<Instant>,
    /// Repairs held until the sources they cover, on a slower path, catch up.
    held: crate::engine::held::HeldRepairs<PathDest>,
}

/// A worker's sealer and openers, rebuilt from [`handshake::Sessions`] when its version moves.
#[derive(Default)]
struct WorkerKeys {
    version: Option<u64>,
    /// (session id, sealer).
    sealer: Option<(u64, Sealer)>,
    /// Per key phase.
    openers: [Option<RecvKey>; handshake::PHASES],
    /// The session for which this worker asked for a rekey.
    rekey_asked: Option<u64>,
}

struct RecvKey {
    session: u64,
    confirmed: bool,
    opener: Opener,
}

/// How often client worker 0 looks at the handshake timers.
const HANDSHAKE_TICK: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug)]
struct Learned {
    addr: SocketAddr,
    heard: Instant,
    /// The address epoch when last heard.
    epoch: u64,
}

impl std::fmt::Debug for UdpMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpMachine")
            .field("cfg", &self.cfg)
            .field("learned", &self.learned)
            .finish_non_exhaustive()
    }
}

/// Where a UDP-mode packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpDest {
    /// A datagram to the peer, on a path.
    Peer(PathDest),
    /// A packet for the TUN device.
    Tun,
}

/// What the first step of a packet found (see [`Transport::handle`]).
#[derive(Clone, Copy, Debug)]
pub enum UdpStep {
    /// A packet from the TUN device at `buf[TUN_OFFSET..TUN_OFFSET + len]`.
    Tun {
        /// Its length.
        len: usize,
    },
    /// A source frame whose packet is `buf[start..end]`; `tos`: of the outer header.
    Source {
        /// The stream.
        stream: StreamId,
        /// Its ESI.
        esi: u32,
        /// Start of the packet.
        start: usize,
        /// End of the packet.
        end: usize,
        /// Outer TOS / traffic class.
        tos: u8,
    },
    /// A repair frame whose payload is `buf[start..end]`.
    Repair {
        /// The stream.
        stream: StreamId,
        /// What the decoder needs.
        info: RepairInfo,
        /// Sender timestamp.
        timestamp: u32,
        /// Start of the payload.
        start: usize,
        /// End of the payload.
        end: usize,
    },
    /// Feedback about our encoder stream `fb.stream`, in a frame of `stream`.
    Feedback {
        /// The frame's stream.
        stream: StreamId,
        /// The feedback.
        fb: Feedback,
    },
    /// A path probe, to answer on its path.
    Probe {
        /// Its timestamp.
        timestamp: u32,
        /// Its sent count.
        sent: u32,
    },
    /// The answer to one of our path probes.
    ProbeReply {
        /// Our probe's timestamp.
        timestamp_echo: u32,
        /// Our probe's sent count.
        sent_echo: u32,
        /// What the peer received on the path.
        received: u32,
        /// Bytes the peer received on the path.
        received_bytes: u32,
    },
    /// Nothing to code (a keepalive).
    Nothing,
}

/// A sink for [`UdpDest`] made of the driver's datagram batch and its TUN writer.
struct Split<'a, S, F, D> {
    send: &'a mut S,
    deliver: &'a mut F,
    dest: std::marker::PhantomData<fn(D)>,
}

impl<'a, S, F, D> Split<'a, S, F, D> {
    #[inline]
    fn new(send: &'a mut S, deliver: &'a mut F) -> Self {
        Split {
            send,
            deliver,
            dest: std::marker::PhantomData,
        }
    }
}

impl<D: From<PathDest>, S: TransmitSink<D>, F: FnMut(&[u8])> TransmitSink<UdpDest>
    for Split<'_, S, F, D>
{
    #[inline]
    fn transmit(&mut self, t: Transmit<'_, UdpDest>) {
        match t.dest {
            UdpDest::Peer(a) => self.send.transmit(Transmit {
                bytes: t.bytes,
                dest: a.into(),
                tos: t.tos,
            }),
            UdpDest::Tun => (self.deliver)(t.bytes),
        }
    }
}

impl UdpPeer {
    /// A single-worker peer with its own state.
    pub fn new(cfg: PeerConfig, metrics: Arc<Metrics>, now: Instant) -> UdpPeer {
        let shared = Shared::new(&cfg, 1);
        UdpPeer::with_shared(cfg, metrics, shared, now)
    }

    /// Worker `cfg.stream` of a multi-worker peer.
    pub fn with_shared(
        cfg: PeerConfig,
        metrics: Arc<Metrics>,
        shared: Arc<Shared>,
        now: Instant,
    ) -> UdpPeer {
        let stream = cfg.stream;
        let initiates = cfg.role == Role::Client && stream == 0;
        let mut machine = UdpMachine {
            keys: WorkerKeys::default(),
            learned: None,
            common: shared.common.clone(),
            metrics: metrics.clone(),
            next_keepalive: Some(now),
            next_handshake: initiates.then_some(now),
            out: vec![0u8; BUF_LEN],
            epoch: now,
            paths: None,
            path_cfg: PathManagerConfig::default(),
            next_path_publish: None,
            held: Default::default(),
            cfg,
        };
        machine.refresh_keys();
        Node::with_machine(machine, shared, stream, metrics)
    }

    /// Where this worker currently sends (the server: see the module docs).
    pub fn peer(&self, now: Instant) -> Option<SocketAddr> {
        self.route(now)
    }

    /// Gives this worker its paths: a client's several paths (more than one remote: a
    /// [`PathSet`] over them), a server's policy for the paths it learns.
    pub fn set_paths(&mut self, setup: PathSetup, now: Instant) {
        let m = self.machine_mut();
        if setup.remotes.len() > 1 {
            let remotes: Vec<Option<SocketAddr>> = setup.remotes.iter().map(|&r| Some(r)).collect();
            m.paths = Some(PathSet::new(
                setup.cfg.clone(),
                &remotes,
                m.cfg.seed ^ 0x9a75,
                now,
            ));
            m.next_path_publish = Some(now);
        }
        m.path_cfg = setup.cfg;
    }

    /// This worker's paths, when it has several.
    pub fn paths(&self) -> Option<&PathSet> {
        self.machine().paths.as_ref()
    }

    /// Changes the path policy kind and/or the repair path live (the rest of the policy
    /// stays); an error when the policy does not fit the paths.
    pub fn set_path_policy(
        &mut self,
        kind: Option<hirt_core::path::PolicyKind>,
        repair: Option<hirt_core::path::RepairPath>,
        now: Instant,
    ) -> Result<(), String> {
        let m = self.machine_mut();
        let mut policy = match &m.paths {
            Some(ps) => ps.manager().config().policy.clone(),
            None => m.path_cfg.policy.clone(),
        };
        if let Some(k) = kind {
            policy.kind = k;
        }
        tracing::info!(
            "paths: policy {}, repair path {}",
            policy.kind.as_str(),
            repair.unwrap_or(m.path_cfg.repair_path).as_str()
        );
        m.path_cfg.policy = policy.clone();
        if let Some(r) = repair {
            m.path_cfg.repair_path = r;
        }
        match &mut m.paths {
            Some(ps) => {
                let r = ps.set_policy(policy, repair, now);
                ps.drain_events(&m.metrics);
                m.next_path_publish = Some(now);
                r
            }
            None => Ok(()),
        }
    }

    /// A packet read from the TUN device into `buf[TUN_OFFSET..TUN_OFFSET + len]`. Seals it in
    /// place and hands the datagram (and any repairs) to `send`.
    pub fn handle_tun<D: From<PathDest>>(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        send: &mut impl TransmitSink<D>,
    ) {
        self.machine_mut().refresh_keys();
        let c = Classified {
            admit: None,
            need: Some(Need::Encoder(self.coder().stream())),
            step: UdpStep::Tun { len },
        };
        let mut nothing = |_: &[u8]| {};
        let mut tx = Split::new(send, &mut nothing);
        let _ = self.process(Some(c), buf, now, &mut tx);
    }

    /// A datagram from `from` whose outer header had TOS / traffic class `tos`. `deliver` gets
    /// every packet for the TUN device.
    pub fn handle_udp<D: From<PathDest>>(
        &mut self,
        buf: &mut [u8],
        from: SocketAddr,
        tos: u8,
        now: Instant,
        send: &mut impl TransmitSink<D>,
        deliver: &mut impl FnMut(&[u8]),
    ) -> Result<(), UdpDrop> {
        let m = self.machine_mut();
        m.refresh_keys();
        if buf.first().is_some_and(|&b| handshake::is_handshake(b)) {
            m.handshake(buf, from, now, send);
            return Err(UdpDrop::Handshake);
        }
        let len = buf.len();
        let c = m.classify(buf, from, tos)?;
        let path = c.admit.map_or(0, |a| a.4);
        let step = c.step;
        let r = self.process(Some(c), buf, now, &mut Split::new(send, deliver));
        // Admitted (authenticated, not a replay): the path's books, probes.
        if !matches!(r, Err(UdpDrop::Auth)) {
            let m = self.machine_mut();
            if path != 0 || m.paths.is_some() || matches!(step, UdpStep::Probe { .. }) {
                m.on_path_datagram(path, len, from, step, now, &mut Split::new(send, deliver));
            }
        }
        r
    }

    /// The sessions of this worker's instance.
    pub fn sessions(&self) -> &handshake::Sessions {
        &self.machine().common.sessions
    }

    /// Timers of this worker's slots: time-driven repairs, feedback; and its keepalive.
    pub fn handle_timeout<D: From<PathDest>>(
        &mut self,
        now: Instant,
        send: &mut impl TransmitSink<D>,
        deliver: &mut impl FnMut(&[u8]),
    ) {
        self.machine_mut().refresh_keys();
        self.on_timeout(now, &mut Split::new(send, deliver));
    }
}

impl Transport for UdpMachine {
    type Extra = ();
    type State = RxState;
    type Common = UdpCommon;
    type Dest = UdpDest;
    type Route = Option<SocketAddr>;
    type Admit = Admission;
    type Step = UdpStep;
    type Drop = UdpDrop;

    /// Test-and-set of the sender's replay window after authentication, under the engine's
    /// lock: a replay raced to two workers passes once. Then address learning (server).
    fn admit(
        &mut self,
        rx: &mut RxState,
        (session, phase, counter, from, path): Admission,
        now: Instant,
    ) -> Result<(), UdpDrop> {
        let sender = sender_of(counter);
        let slot = &mut rx.phases[phase as usize % handshake::PHASES];
        // A new session in this phase: its counters start again, so do its windows.
        let pw = match slot {
            Some(pw) if pw.session == session => pw,
            _ => slot.insert(PhaseWindows::new(session)),
        };
        if !pw.windows[sender].check(counter) {
            add(&self.metrics.global.auth_failures, 1);
            return Err(UdpDrop::Auth);
        }
        pw.windows[sender].update(counter);
        let newest = pw.tops[sender].is_none_or(|t| counter > t);
        if newest {
            pw.tops[sender] = Some(counter);
        }
        self.common.sessions.note_rx(now);
        if path != 0 {
            // Another path's address is that path's (learned per path, `on_path_datagram`),
            // never the address of path 0, which the rules below keep.
            return Ok(());
        }
        if newest {
            rx.newest = Some(from);
        }
        if self.cfg.role == Role::Server {
            if rx.note(from, now, self.cfg.keepalive * LEARNED_KEEPALIVES) {
                self.common.addr_epoch.fetch_add(1, Ordering::Relaxed);
                add(&self.metrics.global.peer_address_changes, 1);
                tracing::info!("new peer address {from}");
            }
            let epoch = self.common.addr_epoch.load(Ordering::Relaxed);
            self.learn(from, newest, now, epoch);
        }
        Ok(())
    }

    /// The client its server; the server the address its own socket heard last (while fresh),
    /// else the one the shared receive state names (`RxState::fallback`).
    fn route(&self, rx: Option<&RxState>, now: Instant) -> Result<Option<SocketAddr>, NeedsState> {
        let fresh = self.cfg.keepalive * LEARNED_KEEPALIVES;
        match self.cfg.role {
            Role::Client => Ok(self.cfg.remote),
            Role::Server => match self.learned {
                Some(l)
                    if now.saturating_duration_since(l.heard) < fresh
                        && l.epoch == self.common.addr_epoch.load(Ordering::Relaxed) =>
                {
                    Ok(Some(l.addr))
                }
                _ => rx.map(|rx| rx.fallback(now, fresh)).ok_or(NeedsState),
            },
        }
    }

    fn handle(
        &mut self,
        step: UdpStep,
        slot: Slot<'_, ()>,
        dest: Option<SocketAddr>,
        buf: &mut [u8],
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) -> Result<(), UdpDrop> {
        match (step, slot) {
            (UdpStep::Tun { len }, Slot::Encoder(enc)) => {
                self.encode(enc, buf, len, dest, now, tx);
                Ok(())
            }
            (
                UdpStep::Source {
                    stream,
                    esi,
                    start,
                    end,
                    tos,
                },
                Slot::Decoder(dec),
            ) => {
                let c = self.metrics.stream(stream);
                add(&c.dec_packets_in, 1);
                let payload = &mut buf[start..end];
                if tos & 3 == 3 {
                    // CE: a queue on the path marks; the encoder hears of it in feedback.
                    dec.note_ce(stream);
                }
                // The decoder keeps the packet as sent (before the ECN update below), the
                // symbol the encoder coded.
                let flow = match dec.config().in_order {
                    Some(_) => paths::source_flow(payload),
                    None => SourceFlow::default(),
                };
                let verdict =
                    dec.handle_source_in_flow(stream, esi, payload, u32::from(tos), flow, now);
                let res = match engine::count_verdict(&self.metrics, stream, verdict) {
                    Ok(true) if decap_ecn(tos, payload) => {
                        add(&c.dec_packets_out, 1);
                        tx.transmit(Transmit {
                            bytes: payload,
                            dest: UdpDest::Tun,
                            tos: 0,
                        });
                        Ok(())
                    }
                    Ok(true) => Err(UdpDrop::CeOnNotEct),
                    Ok(false) => Ok(()),
                    Err(engine::Duplicate) => Err(UdpDrop::Duplicate),
                };
                self.drain_decoder(dec, dest, now, tx);
                res
            }
            (
                UdpStep::Repair {
                    stream,
                    info,
                    timestamp,
                    start,
                    end,
                },
                Slot::Decoder(dec),
            ) => {
                engine::decode_repair(
                    dec,
                    &self.metrics,
                    stream,
                    &info,
                    timestamp,
                    &buf[start..end],
                    now,
                );
                self.drain_decoder(dec, dest, now, tx);
                Ok(())
            }
            (UdpStep::Feedback { stream, fb }, Slot::Encoder(enc)) => {
                add(&self.metrics.stream(stream).feedback_in, 1);
                enc.handle_feedback(&fb, now);
                if let Some(peer) = dest {
                    self.drain_repairs(enc, peer, now, tx);
                }
                Ok(())
            }
            // `Node::process` locks the slot the first step named.
            _ => {
                add(&self.metrics.global.malformed, 1);
                Err(UdpDrop::Malformed)
            }
        }
    }

    fn timeout(
        &mut self,
        slot: Slot<'_, ()>,
        dest: Option<SocketAddr>,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        match slot {
            Slot::Encoder(enc) => {
                enc.handle_timeout(now);
                if let Some(peer) = dest {
                    self.drain_repairs(enc, peer, now, tx);
                }
            }
            Slot::Decoder(dec) => {
                dec.handle_timeout(now);
                self.drain_decoder(dec, dest, now, tx);
            }
        }
    }

    /// Not reached: a UDP peer has an encoder and a decoder in every slot.
    fn no_slot(&mut self) -> UdpDrop {
        add(&self.metrics.global.malformed, 1);
        UdpDrop::Malformed
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // Path timers run once there is a session (see `path_timeout`).
        let paths = self
            .paths
            .as_ref()
            .filter(|_| self.keys.sealer.is_some())
            .and_then(PathSet::poll_timeout);
        [
            self.next_keepalive,
            self.next_handshake,
            paths,
            self.held.next(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn own_timeout(
        &mut self,
        dest: Option<SocketAddr>,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        if self.next_handshake.is_some_and(|t| t <= now) {
            self.next_handshake = Some(now + HANDSHAKE_TICK);
            let last_rx = self.common.sessions.last_rx();
            let init = self
                .common
                .sessions
                .with(|hs| hs.poll_initiation(now, last_rx));
            // On the path the policy prefers (the first path may be the one that is down).
            let path = self.paths.as_ref().map_or(0, PathSet::control_path);
            if let (Some(msg), Some(addr)) = (init, self.path_addr(path, self.cfg.remote)) {
                add(&self.metrics.global.handshake_initiations, 1);
                tx.transmit(Transmit {
                    bytes: &msg,
                    dest: UdpDest::Peer(PathDest { path, addr }),
                    tos: self.repair_tos(),
                });
            }
        }
        // A held repair counts as sent on its path when it leaves: a probe sent meanwhile
        // must not claim it, or the far end's reply shows it lost.
        let paths = &mut self.paths;
        self.held.release(now, &mut |bytes, dest, tos| {
            if let Some(ps) = paths {
                ps.note_sent(dest.path);
            }
            tx.transmit(Transmit {
                bytes,
                dest: UdpDest::Peer(dest),
                tos,
            })
        });
        self.path_timeout(dest, now, tx);
        if self.next_keepalive.is_none_or(|t| t > now) {
            return;
        }
        self.next_keepalive = Some(now + self.cfg.keepalive);
        // Every path keeps its NAT binding and its address at the far end.
        let paths = self.paths.as_ref().map_or(1, PathSet::len) as PathId;
        for path in 0..paths {
            let Some(addr) = self.path_addr(path, dest) else {
                continue;
            };
            if let Some(n) = self.keepalive(path, now) {
                if let Some(ps) = &mut self.paths {
                    ps.note_sent(path);
                }
                tx.transmit(Transmit {
                    bytes: &self.out[..n],
                    dest: UdpDest::Peer(PathDest { path, addr }),
                    tos: self.repair_tos(),
                });
            }
        }
    }
}

impl UdpMachine {
    /// The encoder stream of `path` on this worker.
    #[inline]
    fn stream_of(&self, path: PathId) -> StreamId {
        self.cfg.stream + u16::from(path) * self.common.workers as u16
    }

    /// The peer's address on `path`: path 0's is the route (`dest`), the others' the path
    /// set's (configured or learned).
    #[inline]
    fn path_addr(&self, path: PathId, dest: Option<SocketAddr>) -> Option<SocketAddr> {
        if path == 0 {
            dest
        } else {
            self.paths.as_ref().and_then(|ps| ps.remote(path))
        }
    }

    /// Emits `repr` into `out` naming `path`.
    fn emit_out(&mut self, repr: &UdpRepr<'_>, path: PathId) -> Option<usize> {
        emit_on(&mut self.out, repr, path)
    }

    /// An admitted datagram of `len` bytes from `from` on `path`: the path's counts, the
    /// server's address of the path (and its path set, created when the client shows it has
    /// several paths), a probe answered, a reply handed to the manager.
    fn on_path_datagram(
        &mut self,
        path: PathId,
        len: usize,
        from: SocketAddr,
        step: UdpStep,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        if self.cfg.role == Role::Server {
            let ps = self.paths.get_or_insert_with(|| {
                tracing::info!("the client uses several paths");
                PathSet::new(self.path_cfg.clone(), &[None], self.cfg.seed ^ 0x9a75, now)
            });
            ps.learn(path, from);
            self.next_path_publish.get_or_insert(now);
        }
        let Some(ps) = &mut self.paths else {
            return;
        };
        ps.note_received(path, len);
        match step {
            UdpStep::Probe { timestamp, sent } => {
                let (received, received_bytes) = ps.reply_counts(path);
                let repr = UdpRepr::ProbeReply {
                    timestamp_echo: timestamp,
                    sent_echo: sent,
                    received,
                    received_bytes,
                };
                // Back where it came from, on its path.
                let Some(flen) = emit_on(&mut self.out, &repr, path) else {
                    return;
                };
                let Some(n) = self.seal_out(flen) else {
                    return;
                };
                if let Some(ps) = &mut self.paths {
                    ps.note_sent(path);
                }
                tx.transmit(Transmit {
                    bytes: &self.out[..n],
                    dest: UdpDest::Peer(PathDest { path, addr: from }),
                    tos: self.repair_tos(),
                });
            }
            UdpStep::ProbeReply {
                timestamp_echo,
                sent_echo,
                received,
                received_bytes,
            } => {
                ps.on_reply(
                    path,
                    timestamp_echo,
                    sent_echo,
                    received,
                    received_bytes,
                    now,
                );
                ps.drain_events(&self.metrics);
            }
            _ => {}
        }
    }

    /// The path set's timers: the manager's (silence, probes of idle paths), heartbeat probes
    /// of busy paths, events logged, the status published.
    fn path_timeout(
        &mut self,
        dest: Option<SocketAddr>,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        let Some(ps) = &mut self.paths else {
            return;
        };
        if self.keys.sealer.is_none() {
            // No session: probes could not leave, and silence would be counted against paths
            // that were never tried.
            return;
        }
        if ps.poll_timeout().is_some_and(|t| t <= now) {
            let due = ps.on_timeout(now).to_vec();
            for path in due {
                let Some(ps) = &mut self.paths else {
                    return;
                };
                let Some((timestamp, sent)) = ps.probe(path, now) else {
                    continue;
                };
                let Some(addr) = self.path_addr(path, dest) else {
                    continue;
                };
                let repr = UdpRepr::Probe { timestamp, sent };
                let Some(flen) = emit_on(&mut self.out, &repr, path) else {
                    continue;
                };
                let Some(n) = self.seal_out(flen) else {
                    continue;
                };
                add(&self.metrics.global.path_probes_sent, 1);
                tx.transmit(Transmit {
                    bytes: &self.out[..n],
                    dest: UdpDest::Peer(PathDest { path, addr }),
                    tos: self.repair_tos(),
                });
            }
        }
        let Some(ps) = &mut self.paths else {
            return;
        };
        ps.drain_events(&self.metrics);
        if self.next_path_publish.is_some_and(|t| t <= now) {
            self.next_path_publish = Some(now + paths::PATH_PUBLISH);
            self.publish_paths(dest);
        }
    }

    /// Publishes the paths' state for `hirt status` and the metrics.
    fn publish_paths(&self, dest: Option<SocketAddr>) {
        let Some(ps) = &self.paths else {
            return;
        };
        let status = ps.status(|p| {
            self.path_addr(p, dest)
                .map_or(String::new(), |a| a.to_string())
        });
        self.metrics.publish_paths(status);
    }

    /// Rebuilds this worker's sealer and openers when the sessions changed (one atomic load
    /// otherwise). A sealer of a session this worker already sends under keeps its counter.
    fn refresh_keys(&mut self) {
        let sessions = &self.common.sessions;
        if self.keys.version == Some(sessions.version()) {
            return;
        }
        let snap = sessions.snapshot();
        let encrypt = self.cfg.encrypt;
        match (&snap.send, &self.keys.sealer) {
            (Some((id, _, _)), Some((have, _))) if id == have => {}
            (Some((id, phase, key)), _) => {
                let start = counter_start(self.cfg.stream as usize);
                self.keys.sealer = Some((*id, Sealer::new(key, encrypt, *phase, start)));
            }
            (None, _) => self.keys.sealer = None,
        }
        for (phase, (slot, new)) in self.keys.openers.iter_mut().zip(&snap.recv).enumerate() {
            match (new, slot.as_mut()) {
                (Some((id, confirmed, _)), Some(k)) if k.session == *id => {
                    k.confirmed = *confirmed;
                }
                (Some((id, confirmed, key)), _) => {
                    *slot = Some(RecvKey {
                        session: *id,
                        confirmed: *confirmed,
                        opener: Opener::new(key, encrypt, phase as u8),
                    });
                }
                (None, _) => *slot = None,
            }
        }
        self.keys.version = Some(snap.version);
    }

    /// A handshake datagram: the server answers a valid initiation; the client installs the
    /// session of a valid response and confirms it at once with a keepalive.
    fn handshake<D: From<PathDest>>(
        &mut self,
        buf: &[u8],
        from: SocketAddr,
        now: Instant,
        send: &mut impl TransmitSink<D>,
    ) {
        let g = &self.metrics.global;
        let r = self
            .common
            .sessions
            .with(|hs| hs.handle(buf, from.ip(), now));
        match r {
            Ok(Some(response)) => {
                add(&g.handshake_responses, 1);
                tx_to(
                    send,
                    &response,
                    PathDest {
                        path: 0,
                        addr: from,
                    },
                    self.repair_tos(),
                );
            }
            Ok(None) => {
                add(&g.sessions, 1);
                tracing::info!("session established with {from}");
                self.refresh_keys();
                // Confirmed on the path the response came back on (the one the initiation took).
                let path = self.paths.as_ref().map_or(0, PathSet::control_path);
                if let (Some(n), Some(addr)) = (
                    self.keepalive(path, now),
                    self.path_addr(path, self.cfg.remote),
                ) {
                    tx_to(
                        send,
                        &self.out[..n],
                        PathDest { path, addr },
                        self.repair_tos(),
                    );
                }
            }
            Err(handshake::HandshakeDrop::RateLimited) => add(&g.handshake_rate_limited, 1),
            Err(_) => add(&g.handshake_dropped, 1),
        }
    }

    /// Seals a keepalive on `path` into `out`; its length, or None without a session.
    fn keepalive(&mut self, path: PathId, now: Instant) -> Option<usize> {
        let ts = now.duration_since(self.epoch).as_micros() as u32;
        let repr = UdpRepr::Keepalive { timestamp: ts };
        let flen = self.emit_out(&repr, path)?;
        let n = self.seal_out(flen)?;
        add(&self.metrics.global.keepalives_sent, 1);
        Some(n)
    }

    /// The first step of a datagram: authenticate (decrypting in place) under the key of the
    /// phase its mode byte names, and parse the frame.
    fn classify(
        &mut self,
        buf: &mut [u8],
        from: SocketAddr,
        tos: u8,
    ) -> Result<Classified<Admission, UdpStep>, UdpDrop> {
        let phase = buf.first().map_or(0, |&m| crypto::phase_of(m));
        let opened = match &self.keys.openers[phase as usize] {
            Some(k) => k
                .opener
                .open_unwindowed(buf, |_| true)
                .map(|r| (r, k.session, k.confirmed)),
            None => Err(crypto::OpenError::Malformed),
        };
        let Ok(((range, counter), session, confirmed)) = opened else {
            add(&self.metrics.global.auth_failures, 1);
            return Err(UdpDrop::Auth);
        };
        if !confirmed {
            // The first datagram under a new session: the peer has its keys, send under them.
            self.common.sessions.with(|hs| hs.confirm(session));
            if self.cfg.role == Role::Server {
                add(&self.metrics.global.sessions, 1);
                tracing::info!("session confirmed by {from}");
            }
            self.refresh_keys();
        }
        if buf[0] & crypto::REKEY_REQUEST != 0
            && self.cfg.role == Role::Client
            && self.keys.rekey_asked != Some(session)
        {
            self.keys.rekey_asked = Some(session);
            self.common.sessions.with(|hs| hs.request_rekey());
        }
        let (start, end) = (range.start, range.end);
        let malformed = |m: &Metrics| {
            add(&m.global.malformed, 1);
            Err(UdpDrop::Malformed)
        };
        let Ok(pkt) = UdpPacket::new_checked(&buf[start..end]) else {
            return malformed(&self.metrics);
        };
        let path = pkt.path_id();
        let Ok(repr) = UdpRepr::parse(&pkt) else {
            return malformed(&self.metrics);
        };
        let (need, step) = match repr {
            UdpRepr::Source { stream, esi, .. } => (
                Some(Need::Decoder(stream)),
                UdpStep::Source {
                    stream,
                    esi,
                    start: start + SOURCE_LEN,
                    end,
                    tos,
                },
            ),
            UdpRepr::Repair {
                stream,
                info,
                timestamp,
                payload,
            } => (
                Some(Need::Decoder(stream)),
                UdpStep::Repair {
                    stream,
                    info,
                    timestamp,
                    start: end - payload.len(),
                    end,
                },
            ),
            UdpRepr::Feedback { stream, body, .. } => match Feedback::decode(body) {
                // Feedback is about our encoder stream `fb.stream` (any worker's).
                Ok(fb) => (
                    Some(Need::Encoder(fb.stream)),
                    UdpStep::Feedback { stream, fb },
                ),
                Err(_) => return malformed(&self.metrics),
            },
            // Nothing to code: admitted for the replay window and address learning only.
            UdpRepr::Keepalive { .. } => (None, UdpStep::Nothing),
            // Answered after admission (`UdpPeer::handle_udp`).
            UdpRepr::Probe { timestamp, sent } => (None, UdpStep::Probe { timestamp, sent }),
            UdpRepr::ProbeReply {
                timestamp_echo,
                sent_echo,
                received,
                received_bytes,
            } => (
                None,
                UdpStep::ProbeReply {
                    timestamp_echo,
                    sent_echo,
                    received,
                    received_bytes,
                },
            ),
        };
        Ok(Classified {
            admit: Some((session, phase, counter, from, path)),
            need,
            step,
        })
    }

    /// Codes the TUN packet in `buf[TUN_OFFSET..TUN_OFFSET + len]` as a source, seals it in
    /// place and sends it and the repairs ready.
    fn encode(
        &mut self,
        enc: &mut Encoder,
        buf: &mut [u8],
        len: usize,
        dest: Option<SocketAddr>,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        let Some(peer) = dest else {
            return;
        };
        if len == 0 || TUN_OFFSET + len + 16 > buf.len() {
            return;
        }
        let pkt = &mut buf[TUN_OFFSET..TUN_OFFSET + len];
        if let Some(mtu) = self.cfg.mss_mtu {
            crate::mss::clamp(pkt, mtu);
        }
        // RFC 2983 uniform model / RFC 6040 normal mode: the outer header carries the inner
        // DSCP and ECN, so the underlay treats the tunnelled flow as the flow itself.
        let tos = inner_tos(pkt);
        // One path: path 0 and the worker's stream, no lookup. Several: the flow's path
        // (5-tuple hash, so a flow does not reorder) and that path's stream.
        let (path, stream, addr) = match &mut self.paths {
            None => (0, self.cfg.stream, peer),
            // Before the first session nothing leaves: the manager must not wait for answers.
            Some(_) if self.keys.sealer.is_none() => {
                add(&self.metrics.global.no_session, 1);
                return;
            }
            Some(ps) => {
                let p = ps.for_source(paths::flow_hash(pkt), len, now);
                let addr = if p == 0 { Some(peer) } else { ps.remote(p) };
                match addr {
                    Some(a) => (p, self.stream_of(p), a),
                    None => (0, self.cfg.stream, peer),
                }
            }
        };
        let c = self.metrics.stream(stream);
        add(&c.enc_packets_in, 1);
        let need = if paths::is_pure_tcp_ack(pkt) {
            SourceNeed::Superseded
        } else {
            SourceNeed::Timely
        };
        match enc.admit_source(stream, need, matches!(tos & 3, 1 | 2), now) {
            SourceAdmission::Send => {}
            // The outer header keeps the ECN field the packet came with: a CE mark there is
            // the path's (the decoder counts it as a congestion signal), and the encoder knows
            // of its own.
            SourceAdmission::MarkCe => set_ecn(pkt, 3),
            SourceAdmission::Drop => return,
        }
        let tag = enc.handle_source_needing(stream, pkt, need, now);
        let repr = UdpRepr::Source {
            stream: tag.stream,
            esi: tag.esi,
            payload: &[],
        };
        if repr.emit_header(&mut buf[HEADER_LEN..TUN_OFFSET]).is_err() {
            return;
        }
        if path != 0 {
            UdpPacket::new_unchecked(&mut buf[HEADER_LEN..TUN_OFFSET]).set_path_id(path);
        }
        let Some(n) = self.seal(buf, SOURCE_LEN + len) else {
            add(&self.metrics.global.no_session, 1);
            return;
        };
        let c = self.metrics.stream(stream);
        add(&c.enc_packets_out, 1);
        add(&c.source_bytes_sent, n as u64);
        if let Some(ps) = &mut self.paths {
            ps.note_sent(path);
        }
        tx.transmit(Transmit {
            bytes: &buf[..n],
            dest: UdpDest::Peer(PathDest { path, addr }),
            tos,
        });
        self.drain_repairs(enc, peer, now, tx);
    }

    fn repair_tos(&self) -> u8 {
        self.cfg.repair_dscp.min(63) << 2
    }

    /// Seals the frame in `out[HEADER_LEN..HEADER_LEN + len]` with this worker's next counter;
    /// None before the first session.
    fn seal_out(&mut self, len: usize) -> Option<usize> {
        let mut out = std::mem::take(&mut self.out);
        let n = self.seal(&mut out, len);
        self.out = out;
        n
    }

    /// Seals the frame in `buf[HEADER_LEN..HEADER_LEN + len]` under the current session; past
    /// `rekey_packets` datagrams, asks for a new session (the client starts one, the server
    /// sets the rekey-request bit).
    #[inline]
    fn seal(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        let (session, sealer) = self.keys.sealer.as_mut()?;
        if sealer.counter() & SEQ_MASK >= self.cfg.handshake.rekey_packets
            && self.keys.rekey_asked != Some(*session)
        {
            self.keys.rekey_asked = Some(*session);
            match self.cfg.role {
                Role::Client => self.common.sessions.with(|hs| hs.request_rekey()),
                Role::Server => sealer.set_rekey_request(true),
            }
        }
        Some(sealer.seal(buf, len))
    }

    /// Server: address learning on this worker's socket from an authenticated datagram.
    /// `newest`: the datagram was the newest of its sender (a replay never is).
    fn learn(&mut self, from: SocketAddr, newest: bool, now: Instant, epoch: u64) {
        match &mut self.learned {
            Some(l) if l.addr == from => {
                l.heard = now;
                l.epoch = epoch;
            }
            // A new peer address appeared since, or ours went silent: relearn. A newer datagram
            // from another IP moves it (the client moved; a replay cannot be newer). Another
            // port of the same IP is another client worker: keep answering ours, so a stream's
            // datagrams reach the client in order through one port.
            Some(l)
                if l.epoch != epoch
                    || now.saturating_duration_since(l.heard)
                        >= self.cfg.keepalive * LEARNED_KEEPALIVES
                    || (newest && from.ip() != l.addr.ip()) =>
            {
                tracing::debug!(
                    "worker {}: peer address now {from} (was {})",
                    self.cfg.stream,
                    l.addr
                );
                *l = Learned {
                    addr: from,
                    heard: now,
                    epoch,
                };
            }
            Some(_) => {}
            None => {
                tracing::debug!("worker {}: peer address {from}", self.cfg.stream);
                self.learned = Some(Learned {
                    addr: from,
                    heard: now,
                    epoch,
                });
            }
        }
    }

    fn drain_repairs(
        &mut self,
        enc: &mut Encoder,
        peer: SocketAddr,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        let tos = self.repair_tos();
        while let Some(r) = enc.poll_repair() {
            // Several paths: the manager's repair path for the path of the repair's stream
            // (`repair-path = diverse`: another one).
            let (path, addr, hold) = match &mut self.paths {
                None => (0, peer, Duration::ZERO),
                Some(ps) => {
                    let src = path_of_stream(r.stream, self.cfg.stream, self.common.workers);
                    let p = ps.for_repair(src, r.payload.len(), now);
                    let hold = ps.manager().repair_hold(src, p);
                    match (p, ps.remote(p)) {
                        (0, _) => (0, peer, hold),
                        (p, Some(a)) => (p, a, hold),
                        (_, None) => (0, peer, Duration::ZERO),
                    }
                }
            };
            let repr = UdpRepr::Repair {
                stream: r.stream,
                info: r.info,
                timestamp: r.timestamp,
                payload: r.payload,
            };
            let Some(flen) = emit_on(&mut self.out, &repr, path) else {
                continue;
            };
            let Some(n) = self.seal_out(flen) else {
                continue;
            };
            let c = self.metrics.stream(r.stream);
            add(&c.repairs_sent, 1);
            add(&c.repair_bytes_sent, r.payload.len() as u64);
            let dest = PathDest { path, addr };
            if !hold.is_zero() && self.held.hold(now + hold, dest, tos, &self.out[..n]) {
                continue;
            }
            if let Some(ps) = &mut self.paths {
                ps.note_sent(path);
            }
            tx.transmit(Transmit {
                bytes: &self.out[..n],
                dest: UdpDest::Peer(dest),
                tos,
            });
        }
    }

    fn drain_decoder(
        &mut self,
        dec: &mut Decoder,
        peer: Option<SocketAddr>,
        now: Instant,
        tx: &mut impl TransmitSink<UdpDest>,
    ) {
        let mut deliver = |bytes: &[u8]| {
            tx.transmit(Transmit {
                bytes,
                dest: UdpDest::Tun,
                tos: 0,
            })
        };
        while let Some(r) = dec.poll_recovered() {
            let n = r.data.len();
            if n == 0 || n > MAX_PACKET {
                continue;
            }
            let c = self.metrics.stream(r.stream);
            if r.original {
                // A held original: the same outer-ECN decapsulation as when it arrived.
                self.out[..n].copy_from_slice(r.data);
                if decap_ecn(r.meta as u8, &mut self.out[..n]) {
                    add(&c.dec_packets_out, 1);
                    deliver(&self.out[..n]);
                }
                continue;
            }
            add(&c.recovered, 1);
            add(&c.dec_packets_out, 1);
            if self.cfg.ecn_ce {
                self.out[..n].copy_from_slice(r.data);
                mark_ce(&mut self.out[..n]);
                deliver(&self.out[..n]);
            } else {
                deliver(r.data);
            }
        }
        let Some(peer) = peer else {
            while dec.poll_feedback(now).is_some() {}
            return;
        };
        let tos = self.repair_tos();
        while let Some(fb) = dec.poll_feedback(now) {
            let mut body = [0u8; Feedback::MAX_LEN];
            let Some(blen) = fb.encode(&mut body) else {
                continue;
            };
            let repr = UdpRepr::Feedback {
                stream: fb.stream,
                path_id: fb.path,
                timestamp_echo: fb.echo.map(|e| e.ts).unwrap_or(0),
                body: &body[..blen],
            };
            // On the path our policy prefers: the path the peer's stream took may be the one
            // that failed.
            let path = self.paths.as_ref().map_or(0, PathSet::control_path);
            let Some(addr) = self.path_addr(path, Some(peer)) else {
                continue;
            };
            let Some(flen) = emit_on(&mut self.out, &repr, path) else {
                continue;
            };
            // Sealed and sent by whichever worker holds the decoder slot (its own counter).
            let Some(n) = self.seal_out(flen) else {
                continue;
            };
            add(&self.metrics.stream(fb.stream).feedback_sent, 1);
            if let Some(ps) = &mut self.paths {
                ps.on_sent(path, n, now);
            }
            tx.transmit(Transmit {
                bytes: &self.out[..n],
                dest: UdpDest::Peer(PathDest { path, addr }),
                tos,
            });
        }
    }
}

/// Sends `bytes` to `to` through a datagram sink.
fn tx_to<D: From<PathDest>>(send: &mut impl TransmitSink<D>, bytes: &[u8], to: PathDest, tos: u8) {
    send.transmit(Transmit {
        bytes,
        dest: to.into(),
        tos,
    });
}

/// Emits `repr` into `out[HEADER_LEN..]` naming `path`; the frame's length.
#[inline]
fn emit_on(out: &mut [u8], repr: &UdpRepr<'_>, path: PathId) -> Option<usize> {
    let frame = out.get_mut(HEADER_LEN..BUF_LEN - 16)?;
    let n = repr.emit(frame).ok()?;
    if path != 0 {
        UdpPacket::new_unchecked(frame).set_path_id(path);
    }
    Some(n)
}

/// The path whose stream `stream` is, for worker stream `own` of `workers` (path `p` of
/// worker `t` carries stream `t + p x workers`).
#[inline]
fn path_of_stream(stream: StreamId, own: StreamId, workers: usize) -> PathId {
    let w = workers.max(1) as u16;
    (stream.saturating_sub(own) / w).min(u16::from(PathId::MAX)) as PathId
}

/// A running UDP-mode instance.
#[derive(Debug)]
pub struct UdpHandle {
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The bound UDP address of worker 0's socket (the server: the listening address).
    pub local: SocketAddr,
    /// Every worker's bound address (the client: one source port per worker).
    pub locals: Vec<SocketAddr>,
    shared: Arc<Shared>,
    workers: Workers,
    _ops: Operations,
}

impl UdpHandle {
    /// The handshake and session keys of the instance.
    pub fn sessions(&self) -> &handshake::Sessions {
        &self.shared.common.sessions
    }

    /// What the workers share (the sessions among it), for observers that outlive a borrow.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops the workers.
    pub fn stop(mut self) {
        self.workers.stop();
    }
}

/// Runs `hirt udp` until SIGINT/SIGTERM.
pub fn run(cfg: UdpConfig) -> anyhow::Result<()> {
    runtime::install_signal_handlers();
    let h = start(cfg)?;
    h.workers.wait_for_stop();
    h.stop();
    Ok(())
}

/// Requested receive and send buffer of the tunnel sockets (the kernel caps it at
/// net.core.rmem_max / wmem_max).
const SOCKET_BUFFER: usize = 4 << 20;

/// A non-blocking UDP socket bound to `addr` (with `SO_REUSEPORT` when `reuse`), reporting the
/// TOS of what it receives.
fn udp_socket(addr: SocketAddr, reuse: bool) -> anyhow::Result<UdpSocket> {
    udp_socket_on(addr, reuse, None)
}

/// [`udp_socket`], bound to the interface `dev` (`SO_BINDTODEVICE`) when given: a path's
/// socket leaves through its own uplink whatever the routing table says.
fn udp_socket_on(addr: SocketAddr, reuse: bool, dev: Option<&str>) -> anyhow::Result<UdpSocket> {
    let dom = socket2::Domain::for_address(addr);
    let s = socket2::Socket::new(dom, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if reuse {
        s.set_reuse_port(true)?;
    }
    if let Some(d) = dev {
        s.bind_device(Some(d.as_bytes()))
            .with_context(|| format!("binding to device {d}"))?;
    }
    s.bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    s.set_nonblocking(true)?;
    // Room for bursts while the worker is descheduled: the default (~200 kB, ~90 datagrams of
    // 1.3 kB = 10 ms at 9 kpps) overflowed on a busy host and each overflow is a burst of losses
    // the code cannot cover (docs/lab.md, bulk). Capped by net.core.{r,w}mem_max; best effort.
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    io::enable_recv_tos(&s, addr.is_ipv4());
    Ok(s.into())
}

/// Starts an instance in the calling thread's network namespace (workers inherit it).
pub fn start(cfg: UdpConfig) -> anyhow::Result<UdpHandle> {
    cfg.validate()?;
    let role = match cfg.role()? {
        UdpRole::Server => Role::Server,
        UdpRole::Client => Role::Client,
    };
    let static_keys = cfg.static_keys()?;
    if cfg.insecure {
        tracing::warn!("insecure: publicly known keys, anyone can inject packets into the tunnel");
    }
    let fec = cfg.fec_mode()?;
    let threads = cfg.threads;
    let mtu = cfg.mtu;
    let dev = cfg.dev.clone();
    // Server: N sockets on the listening address in one SO_REUSEPORT group, steered by the
    // sender index in the AEAD counter (`io::steer_by_sender`). Client: N sockets with distinct
    // source ports (one NAT binding each; without the steering program the kernel's 4-tuple
    // hash spreads them).
    // One socket per worker; a multi-path client's single worker has one per path.
    let mut socks = Vec::with_capacity(threads);
    let mut path_socks: Vec<UdpSocket> = Vec::new();
    let mut remotes: Vec<SocketAddr> = Vec::new();
    let remote = match role {
        Role::Server => {
            let l = cfg.listen.as_deref().unwrap_or("0.0.0.0:4096");
            let la = l
                .to_socket_addrs()?
                .next()
                .with_context(|| format!("cannot resolve {l}"))?;
            for i in 0..threads {
                // Port 0: the first socket picks the port, the others join it.
                let a = if i == 0 {
                    la
                } else {
                    socks
                        .first()
                        .map(|s: &UdpSocket| s.local_addr())
                        .transpose()?
                        .unwrap_or(la)
                };
                socks.push(udp_socket(a, threads > 1)?);
            }
            if threads > 1 {
                // Client worker t -> server worker t mod N, by the sender index in the AEAD
                // counter (else the kernel's 4-tuple hash decides).
                if let Err(e) = io::steer_by_sender(&socks[0], threads) {
                    tracing::warn!("reuseport selector: {e}; the kernel's hash spreads clients");
                }
            }
            None
        }
        Role::Client => {
            let paths = cfg.client_paths()?;
            let first = paths.first().context("a client has a path")?;
            let (bind, ra) = (first.bind, first.remote);
            for i in 0..threads {
                // Worker 0 takes `-l` as given; the others the same address, any port.
                let a = if i == 0 {
                    bind
                } else {
                    SocketAddr::new(bind.ip(), 0)
                };
                socks.push(udp_socket_on(a, false, first.dev.as_deref())?);
            }
            for p in paths.iter().skip(1) {
                path_socks.push(udp_socket_on(p.bind, false, p.dev.as_deref())?);
            }
            remotes = paths.iter().map(|p| p.remote).collect();
            Some(ra)
        }
    };
    let locals = socks
        .iter()
        .chain(&path_socks)
        .map(|s| s.local_addr())
        .collect::<Result<Vec<_>, _>>()?;
    let offload = !cfg.no_tun_offload;
    let mut queues = Vec::with_capacity(threads);
    for _ in 0..threads {
        let q = Tun::open_with(&dev, threads > 1, offload)
            .with_context(|| format!("opening TUN {dev}"))?;
        q.set_nonblocking(true)?;
        if offload {
            use crate::tun::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN};
            if let Err(e) = q.set_offload(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) {
                // The packets still carry a (zero) virtio_net_hdr; only the speed-up is lost.
                tracing::warn!("TUNSETOFFLOAD: {e}; packets cross the TUN one by one");
            }
        }
        queues.push(q);
    }
    let mut nl = Netlink::open()?;
    let idx = if_index(&dev)?;
    nl.link_up_qlen(idx, Some(mtu), Some(crate::engine::TUN_TXQLEN))?;
    let (a, p) = cfg.tun_addr(cfg.role()?)?;
    nl.add_addr(idx, a, p)?;
    if let Some(a6) = &cfg.tun_addr6 {
        let (a, p) = parse_cidr(a6).map_err(anyhow::Error::msg)?;
        nl.add_addr(idx, a, p)?;
    }
    let metrics = Metrics::new(
        threads * remotes.len().max(1),
        &format!(
            "udp {}",
            if role == Role::Server {
                "server"
            } else {
                "client"
            }
        ),
    );
    let coder = cfg.coder()?;
    let base = PeerConfig {
        role,
        keys: static_keys,
        handshake: cfg.handshake(),
        encrypt: !cfg.no_encrypt,
        fec: fec.clone(),
        stream: 0,
        mss_mtu: (!cfg.no_mss_clamp).then_some(mtu.min(65535) as u16),
        ecn_ce: cfg.ecn_ce,
        repair_dscp: cfg.repair_dscp,
        keepalive: Duration::from_millis(cfg.keepalive_ms),
        remote,
        seed: cfg.seed.unwrap_or_else(crypto::initial_counter),
        coder,
    };
    let control_path = cfg
        .control
        .clone()
        .unwrap_or_else(|| format!("/run/hirt-{dev}.sock").into());
    let ops = Operations::start(&metrics, &fec, &control_path, cfg.metrics)?;
    let shared = Shared::new(&base, threads);
    let now = Instant::now();
    let mut workers = Workers::default();
    let setup = PathSetup {
        cfg: cfg.paths.clone(),
        remotes,
    };
    if setup.remotes.len() > 1 {
        tracing::info!(
            "{} paths, policy {}, repair path {}",
            setup.remotes.len(),
            setup.cfg.policy.kind.as_str(),
            setup.cfg.repair_path.as_str()
        );
    }
    let mut path_socks = Some(path_socks);
    for (i, (q, sock)) in queues.into_iter().zip(socks).enumerate() {
        let cfg = PeerConfig {
            stream: i as StreamId,
            ..base.clone()
        };
        let mut peer = UdpPeer::with_shared(cfg, metrics.clone(), shared.clone(), now);
        peer.set_paths(setup.clone(), now);
        let mut sockets = vec![sock];
        if i == 0 {
            sockets.extend(path_socks.take().unwrap_or_default());
        }
        let ctl = ops.ctl.clone();
        workers.spawn(format!("hirt-udp-{i}"), move |stop| {
            worker(peer, q, offload, sockets, stop, ctl)
        })?;
    }
    Ok(UdpHandle {
        metrics,
        local: locals[0],
        locals,
        shared,
        workers,
        _ops: ops,
    })
}

/// One worker's loop. `socks[p]` is the socket of path `p` (a server and a single-path client:
/// one socket, whatever path a datagram names).
fn worker(
    mut peer: UdpPeer,
    tun: Tun,
    vnet_hdr: bool,
    socks: Vec<UdpSocket>,
    stop: Arc<StopFlag>,
    ctl: Arc<Control>,
) {
    let mut buf = vec![0u8; BUF_LEN];
    // With TUN offloads: what a read returns (virtio_net_hdr + up to 64 KiB), and the runs of
    // segments put together for one write.
    let mut read_buf = if vnet_hdr {
        hirt_os::heap::committed_buffer(offload::VNET_HDR_LEN + offload::MAX_SUPER)
    } else {
        Vec::new()
    };
    let mut coalescer = offload::Coalescer::default();
    let sfds: Vec<i32> = socks.iter().map(|s| s.as_raw_fd()).collect();
    let last_sock = sfds.len() - 1;
    let mut inb = io::TosBatch::receiver();
    for &sfd in &sfds {
        if !io::enable_gro(sfd) {
            tracing::debug!("UDP GRO not available; datagrams are received one by one");
        }
    }
    let mut outb: Vec<io::TosBatch> = sfds.iter().map(|_| io::TosBatch::default()).collect();
    let fds: Vec<i32> = std::iter::once(tun.as_raw_fd())
        .chain(sfds.iter().copied())
        .collect();
    let m = ctl.metrics.clone();
    let mut path_generation = ctl.path_generation();
    let mut housekeeping = Housekeeping::new(ctl.clone(), Instant::now());
    // Overload (see `engine::load`): drops at our TUN device's queue (packets to encode that we
    // did not read in time) or at UDP receive buffers (datagrams to decode) make a period 1.0.
    let mut drops = DropWatch::new(tun.name(), true, LOAD_PERIOD);
    let socket_drops = |sfds: &[i32]| -> Option<u64> {
        sfds.iter()
            .map(|&fd| load::socket_drops(fd))
            .sum::<Option<u64>>()
    };
    let mut sock_drops = socket_drops(&sfds).unwrap_or(0);
    // After a full batch on either side more is very likely queued: skip the `poll`.
    let mut full = false;
    while !stop.stopped() {
        if !full {
            let wait = runtime::poll_wait(
                Instant::now(),
                peer.poll_timeout(),
                Duration::from_millis(100),
            );
            if !wait.is_zero() {
                let _ = poll_readable(&fds, wait);
            }
        }
        full = false;
        if ctl.path_generation() != path_generation {
            path_generation = ctl.path_generation();
            let c = ctl.path_change();
            if let Err(e) = peer.set_path_policy(c.kind, c.repair, Instant::now()) {
                tracing::warn!("path policy change refused: {e}");
            }
        }
        {
            let mut send = |t: Transmit<'_, PathDest>| {
                // A datagram leaves through its path's socket (one socket: all paths).
                let i = usize::from(t.dest.path).min(last_sock);
                if !outb[i].push(t.bytes, t.dest.addr, t.tos) {
                    outb[i].send(sfds[i]);
                    outb[i].push(t.bytes, t.dest.addr, t.tos);
                }
            };
            // TUN -> UDP.
            // One clock read per batch: its packets arrived within microseconds.
            let now = Instant::now();
            let mut got = 0;
            while got < crate::batch::BATCH {
                let end = BUF_LEN - 16;
                if vnet_hdr {
                    let Ok(n) = tun.recv(&mut read_buf) else {
                        break;
                    };
                    got += 1;
                    let split = offload::split(
                        &mut read_buf[..n],
                        &mut buf[..end],
                        TUN_OFFSET,
                        |b, len| peer.handle_tun(b, len, now, &mut send),
                    );
                    match split {
                        Ok(n) if n > 1 => add(&m.global.tun_segmented, 1),
                        Ok(_) => {}
                        Err(_) => add(&m.global.malformed, 1),
                    }
                    continue;
                }
                match tun.recv(&mut buf[TUN_OFFSET..end]) {
                    Ok(n) => {
                        got += 1;
                        peer.handle_tun(&mut buf, n, now, &mut send);
                    }
                    Err(_) => break,
                }
            }
            full |= got == crate::batch::BATCH;
            // UDP -> TUN.
            let mut write = |p: &[u8]| {
                if tun.send(p).is_err() {
                    add(&m.global.send_errors, 1);
                }
            };
            // With offloads, packets go through the coalescer, which writes runs (flushed
            // below, once the batch is through).
            let mut deliver = |p: &[u8]| {
                if vnet_hdr {
                    coalescer.push(p, &mut write);
                } else {
                    write(p);
                }
            };
            for &sfd in &sfds {
                let Ok(n) = inb.recv(sfd) else {
                    continue;
                };
                full |= inb.messages() == crate::batch::BATCH;
                let now = Instant::now();
                for i in 0..n {
                    let (d, from, tos) = inb.get_mut(i);
                    if d.len() < OVERHEAD {
                        add(&m.global.auth_failures, 1);
                        continue;
                    }
                    if let Some(from) = from {
                        let _ = peer.handle_udp(d, from, tos, now, &mut send, &mut deliver);
                    }
                }
            }
            let now = Instant::now();
            if peer.poll_timeout().is_some_and(|t| t <= now) {
                peer.handle_timeout(now, &mut send, &mut deliver);
            }
            coalescer.flush(&mut write);
            let merged = coalescer.take_merged();
            if merged > 0 {
                add(&m.global.tun_coalesced, merged);
            }
        }
        for (b, &sfd) in outb.iter_mut().zip(&sfds) {
            if !b.is_empty() {
                b.send(sfd);
            }
        }
        housekeeping.tick(Instant::now(), peer.coder(), || {
            // This socket's own receive-buffer drops (not the namespace's) are the decoder's
            // local drops.
            let mut for_decoder = 0;
            if let Some(d) = socket_drops(&sfds) {
                for_decoder = d.saturating_sub(sock_drops);
                sock_drops = d;
            }
            QueueDrops {
                queue_dropped: drops.new_drops() > 0,
                for_decoder,
            }
        });
    }
    peer.coder().publish_stats();
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod restart_tests;

#[cfg(test)]
mod abuse_tests;
