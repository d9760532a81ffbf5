//! Several paths per UDP tunnel: the sockets' side of [`hirt_core::path::PathManager`].
//!
//! A client with N paths has one socket per path (its own source address and/or
//! `SO_BINDTODEVICE`) and its server's address on that path; every datagram names its path in
//! the authenticated frame header ([`hirt_wire::udp`]), so the far end counts and answers per
//! path and the server learns each path's address (NAT) from authenticated datagrams.
//!
//! **Measurement.** Each end probes its paths ([`UdpRepr::Probe`]: a timestamp and the
//! datagrams sent on the path so far); the far end answers at once on the same path
//! ([`UdpRepr::ProbeReply`]: the echoes and what it received on the path so far). A reply gives
//! the manager an RTT sample (timestamp echo, held ~0), and, against the previous reply, the
//! datagrams and bytes delivered and lost in between ([`PathObservation`]). A reply that never
//! comes is the manager's silence rule at work: an outage without ICMP is seen. Paths that
//! carried traffic are probed every half feedback interval (so the newest confirmed send is
//! never older than the silence grace allows); idle paths when the manager asks
//! ([`PathManager::poll_probe`], every `probe-interval-ms`).
//!
//! **One manager per worker** ([`PathSet`] lives in the worker's `UdpMachine`): the path of
//! each source is chosen per packet, on the hot path, and a lock per packet across workers
//! would cost more than the choice. Probe counts are per sending worker, so a multi-path client
//! runs one worker (`--threads 1`, checked by the configuration). A server learns the paths
//! from the datagrams its worker receives; with several server workers, each worker that
//! hears the client's path probes keeps its own manager.
//!
//! **Streams.** Each path carries its own encoder stream (`worker + path x workers`): the
//! decoder tolerates a few ESIs of reordering within a stream, far less than two paths of
//! different delay produce, so streams never mix paths and per-path delay is never taken for
//! loss. With one path nothing of this runs: no probes, no manager, path 0 and the worker's
//! stream, as on a single-path tunnel.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hirt_core::path::{PathEvent, PathManager, PathManagerConfig, PathObservation, PathSnapshot};
use hirt_core::{PathId, SourceFlow, SourceNeed};
use hirt_wire::ipv6::Ipv6Packet;

use crate::config::MAX_PATHS;
use crate::metrics::{add, Metrics};

/// How often a multi-path end publishes its paths' state (`hirt status`, metrics): often
/// enough that an observer sees an EXP3 weight shift or a switch within a few tens of ms.
pub const PATH_PUBLISH: Duration = Duration::from_millis(25);

/// What one path's link knows: where it goes and its counts. `R` names the path's far end: a
/// socket address in UDP mode, nothing in SRv6 mode (a path's segment list is configuration).
#[derive(Debug, Clone)]
pub struct PathLink<R = SocketAddr> {
    /// The peer's address on this path (client: configured; server: learned).
    pub remote: Option<R>,
    /// Datagrams sent on the path (wrapping; what a probe carries).
    sent: u32,
    /// Datagrams and bytes received on the path (wrapping; what a reply carries).
    received: u32,
    received_bytes: u32,
    /// Sent anything since the last heartbeat probe.
    busy: bool,
    /// The newest reply's counts: (sent echo, received, bytes, when).
    last_reply: Option<(u32, u32, u32, Instant)>,
}

impl<R> PathLink<R> {
    fn new(remote: Option<R>) -> Self {
        Self {
            remote,
            sent: 0,
            received: 0,
            received_bytes: 0,
            busy: false,
            last_reply: None,
        }
    }
}

/// A worker's paths and their manager (see the module docs); SRv6 mode uses it too
/// (`PathSet<()>`: every path usable, probes counted by the caller).
#[derive(Debug)]
pub struct PathSet<R = SocketAddr> {
    cfg: PathManagerConfig,
    manager: PathManager,
    links: Vec<PathLink<R>>,
    seed: u64,
    /// Timestamps of probes are microseconds since this instant (wrapping u32).
    epoch: Instant,
    next_heartbeat: Instant,
    /// Probes due, filled by [`PathSet::on_timeout`] (reused).
    due: Vec<PathId>,
    /// The latest events, oldest first (`hirt status`: what switched, in which order, why).
    recent: std::collections::VecDeque<String>,
}

/// Events [`PathSet::recent_events`] keeps.
const RECENT_EVENTS: usize = 32;

/// A manager over paths `0..n`: `cfg` with the policy's `order` and `capacity-bps` cut to the
/// paths there are (a server's set grows as it hears them), else the defaults.
fn manager_over(cfg: &PathManagerConfig, n: usize, seed: u64) -> PathManager {
    let ids: Vec<PathId> = (0..n.clamp(1, MAX_PATHS) as PathId).collect();
    let mut fit = cfg.clone();
    fit.policy.order.retain(|p| ids.contains(p));
    fit.capacity_bps.retain(|(p, _)| ids.contains(p));
    match PathManager::new(fit, &ids, seed) {
        Ok(m) => m,
        Err(e) => {
            // Not reached with a validated configuration.
            tracing::warn!("path configuration: {e}; the defaults apply");
            PathManager::new(PathManagerConfig::default(), &ids, seed)
                .expect("the default configuration is valid for 1..=MAX_PATHS paths")
        }
    }
}

/// Largest gap between a probe and its reply that still gives an RTT sample.
const MAX_ECHO_AGE: Duration = Duration::from_secs(10);

impl<R: Copy> PathSet<R> {
    /// Paths `0..remotes.len()` with these peer addresses (a server: `None`, learned later).
    pub fn new(
        cfg: PathManagerConfig,
        remotes: &[Option<R>],
        seed: u64,
        now: Instant,
    ) -> PathSet<R> {
        let mut links: Vec<PathLink<R>> = remotes
            .iter()
            .take(MAX_PATHS)
            .map(|&r| PathLink::new(r))
            .collect();
        if links.is_empty() {
            links.push(PathLink::new(None));
        }
        PathSet {
            manager: manager_over(&cfg, links.len(), seed),
            links,
            seed,
            epoch: now,
            next_heartbeat: now,
            due: Vec::new(),
            recent: std::collections::VecDeque::new(),
            cfg,
        }
    }

    /// The latest switches and state changes, oldest first, as logged.
    pub fn recent_events(&self) -> impl Iterator<Item = &str> {
        self.recent.iter().map(String::as_str)
    }

    fn remember(&mut self, event: String) {
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back(event);
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Never empty (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The manager (for inspection).
    pub fn manager(&self) -> &PathManager {
        &self.manager
    }

    /// Server: makes room for path `path` (a new path id heard from the client). The manager
    /// starts again over the larger set (path ids appear at the client's start, once each).
    pub fn grow(&mut self, path: PathId) {
        let n = usize::from(path) + 1;
        if n <= self.links.len() || n > MAX_PATHS {
            return;
        }
        self.links.resize_with(n, || PathLink::new(None));
        self.manager = manager_over(&self.cfg, n, self.seed);
    }

    /// The peer's address on `path`, if known.
    #[inline]
    pub fn remote(&self, path: PathId) -> Option<R> {
        self.links.get(usize::from(path)).and_then(|l| l.remote)
    }

    /// The path of a source of the flow with 5-tuple hash `flow_hash`; a path whose peer
    /// address is not known yet falls back to path 0.
    #[inline]
    pub fn for_source(&mut self, flow_hash: u64, len: usize, now: Instant) -> PathId {
        let p = self.manager.path_for_flow(flow_hash, len, now);
        if self.remote(p).is_some() {
            p
        } else {
            0
        }
    }

    /// The path of a repair protecting sources sent on `source_path`.
    #[inline]
    pub fn for_repair(&mut self, source_path: PathId, len: usize, now: Instant) -> PathId {
        let p = self.manager.path_for_repair(source_path, len, now);
        if self.remote(p).is_some() {
            p
        } else {
            source_path
        }
    }

    /// The path control datagrams (feedback, handshake) take: the one the policy prefers.
    pub fn control_path(&self) -> PathId {
        self.manager
            .preferred()
            .filter(|&p| self.remote(p).is_some())
            .unwrap_or(0)
    }

    /// A datagram (not a probe) left on `path`.
    #[inline]
    pub fn note_sent(&mut self, path: PathId) {
        if let Some(l) = self.links.get_mut(usize::from(path)) {
            l.sent = l.sent.wrapping_add(1);
            l.busy = true;
        }
    }

    /// `path` carried something (a source, a repair) that its probes do not count: it is
    /// probed every half feedback interval while busy.
    #[inline]
    pub fn note_busy(&mut self, path: PathId) {
        if let Some(l) = self.links.get_mut(usize::from(path)) {
            l.busy = true;
        }
    }

    /// A datagram for the manager's books that the caller routed itself (feedback, keepalive).
    pub fn on_sent(&mut self, path: PathId, len: usize, now: Instant) {
        self.note_sent(path);
        self.manager.on_sent(path, len, now);
    }

    /// An authenticated datagram of `len` bytes arrived on `path`.
    #[inline]
    pub fn note_received(&mut self, path: PathId, len: usize) {
        if let Some(l) = self.links.get_mut(usize::from(path)) {
            l.received = l.received.wrapping_add(1);
            l.received_bytes = l.received_bytes.wrapping_add(len as u32);
        }
    }

    fn stamp(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_micros() as u32
    }

    /// The fields of a probe to send on `path` now (timestamp, sent count with the probe);
    /// counts it as sent.
    pub fn probe(&mut self, path: PathId, now: Instant) -> Option<(u32, u32)> {
        let ts = self.stamp(now);
        let l = self.links.get_mut(usize::from(path))?;
        l.sent = l.sent.wrapping_add(1);
        Some((ts, l.sent))
    }

    /// The counts a reply to a probe on `path` carries (received datagrams, bytes).
    pub fn reply_counts(&self, path: PathId) -> (u32, u32) {
        self.links
            .get(usize::from(path))
            .map_or((0, 0), |l| (l.received, l.received_bytes))
    }

    /// A reply to our probe arrived on `path`: an RTT sample, and the delivery and loss since
    /// the previous reply, for the manager.
    pub fn on_reply(
        &mut self,
        path: PathId,
        timestamp_echo: u32,
        sent_echo: u32,
        received: u32,
        received_bytes: u32,
        now: Instant,
    ) {
        let age = Duration::from_micros(u64::from(self.stamp(now).wrapping_sub(timestamp_echo)));
        let echo_sent_at = (age <= MAX_ECHO_AGE)
            .then(|| now.checked_sub(age))
            .flatten();
        let Some(l) = self.links.get_mut(usize::from(path)) else {
            return;
        };
        let mut obs = PathObservation {
            path,
            echo_sent_at,
            echo_held: Duration::ZERO,
            received: 0,
            lost: 0,
            bytes: 0,
            interval: Duration::ZERO,
        };
        match l.last_reply {
            // A reply older than the newest one: its echo only.
            Some((s, ..)) if (sent_echo.wrapping_sub(s) as i32) <= 0 => {}
            Some((s, r, b, at)) => {
                let sent = sent_echo.wrapping_sub(s);
                let got = received.wrapping_sub(r).min(sent);
                obs.received = got;
                obs.lost = sent - got;
                obs.bytes = u64::from(received_bytes.wrapping_sub(b));
                obs.interval = now.saturating_duration_since(at);
                l.last_reply = Some((sent_echo, received, received_bytes, now));
            }
            None => l.last_reply = Some((sent_echo, received, received_bytes, now)),
        }
        self.manager.handle_observation(&obs, now);
    }

    /// When [`PathSet::on_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(match self.manager.poll_timeout() {
            Some(t) => t.min(self.next_heartbeat),
            None => self.next_heartbeat,
        })
    }

    /// Runs the manager's timers and the heartbeat; returns the paths to probe now.
    pub fn on_timeout(&mut self, now: Instant) -> &[PathId] {
        self.due.clear();
        if self.manager.poll_timeout().is_some_and(|t| t <= now) {
            self.manager.handle_timeout(now);
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.cfg.feedback_interval() / 2;
            for (i, l) in self.links.iter_mut().enumerate() {
                if std::mem::take(&mut l.busy) && l.remote.is_some() {
                    self.due.push(i as PathId);
                }
            }
            for &p in &self.due {
                self.manager.on_sent(p, 0, now);
            }
        }
        while let Some(p) = self.manager.poll_probe() {
            if !self.due.contains(&p.path) && self.remote(p.path).is_some() {
                self.due.push(p.path);
            }
        }
        &self.due
    }

    /// Starts the manager's clock (see [`PathManager::start`]): for an end that may probe its
    /// paths before it has traffic.
    pub fn start(&mut self, now: Instant) {
        self.manager.start(now);
    }

    /// Logs and counts the manager's events (every switch and state change, with its reason).
    pub fn drain_events(&mut self, metrics: &Metrics) {
        while let Some(e) = self.manager.poll_event() {
            match e {
                PathEvent::Switch {
                    from, to, reason, ..
                } => {
                    add(&metrics.global.path_switches, 1);
                    let from = from.map_or("none".to_string(), |f| f.to_string());
                    tracing::info!(
                        "paths: traffic switches from path {from} to path {to} ({})",
                        reason_str(reason)
                    );
                    self.remember(format!("switch {from} -> {to} ({})", reason_name(reason)));
                }
                PathEvent::State {
                    path,
                    from,
                    to,
                    reason,
                    ..
                } => {
                    add(&metrics.global.path_state_changes, 1);
                    tracing::info!(
                        "paths: path {path} {} -> {} ({})",
                        from.as_str(),
                        to.as_str(),
                        reason_str(reason)
                    );
                    self.remember(format!(
                        "path {path} {} -> {} ({})",
                        from.as_str(),
                        to.as_str(),
                        reason_name(reason)
                    ));
                }
            }
        }
    }

    /// Every path's state and measurements.
    pub fn snapshot(&self) -> Vec<PathSnapshot> {
        self.manager.snapshot()
    }

    /// The paths' state for `hirt status` and the metrics; `remote` names each path's far end.
    pub fn status(&self, remote: impl Fn(PathId) -> String) -> crate::metrics::PathsStatus {
        let cfg = self.manager.config();
        crate::metrics::PathsStatus {
            policy: cfg.policy.kind.as_str().to_string(),
            repair_path: cfg.repair_path.as_str().to_string(),
            preferred: self.manager.preferred(),
            paths: self
                .snapshot()
                .into_iter()
                .map(|p| crate::metrics::PathStatus {
                    path: p.path,
                    remote: remote(p.path),
                    state: p.state.as_str().to_string(),
                    srtt_ms: p.srtt_ms,
                    loss: p.loss,
                    delivery_bps: p.delivery_bps,
                    share: p.share,
                    sources: p.sources,
                    repairs: p.repairs,
                    probes: p.probes,
                    exp3_weight: if p.exp3_weight_share > 0.0 {
                        self.manager.exp3_raw_weight_share(p.path)
                    } else {
                        0.0
                    },
                    probability: self.manager.probability(p.path),
                })
                .collect(),
            events: self.recent_events().map(str::to_string).collect(),
        }
    }

    /// A live change from the control socket: another policy kind and/or repair path (the
    /// rest of the policy stays); logged, and the events it caused drained.
    pub fn change(
        &mut self,
        kind: Option<hirt_core::path::PolicyKind>,
        repair: Option<hirt_core::path::RepairPath>,
        metrics: &Metrics,
        now: Instant,
    ) -> Result<(), String> {
        let mut policy = self.manager.config().policy.clone();
        if let Some(k) = kind {
            policy.kind = k;
        }
        tracing::info!(
            "paths: policy {}, repair path {}",
            policy.kind.as_str(),
            repair.unwrap_or(self.cfg.repair_path).as_str()
        );
        let r = self.set_policy(policy, repair, now);
        self.drain_events(metrics);
        r
    }

    /// Changes the policy (and, when given, the repair path) of the running manager.
    pub fn set_policy(
        &mut self,
        policy: hirt_core::path::PolicyConfig,
        repair: Option<hirt_core::path::RepairPath>,
        now: Instant,
    ) -> Result<(), String> {
        self.manager
            .set_policy(policy.clone(), now)
            .map_err(|e| e.to_string())?;
        self.cfg.policy = policy;
        if let Some(r) = repair {
            self.manager.set_repair_path(r);
            self.cfg.repair_path = r;
        }
        Ok(())
    }
}

impl PathSet<SocketAddr> {
    /// Server: the peer's address on `path` is `from` (an authenticated datagram on it). Path
    /// ids from [`MAX_PATHS`] on are not learned (a client has at most that many).
    pub fn learn(&mut self, path: PathId, from: SocketAddr) {
        self.grow(path);
        if let Some(l) = self.links.get_mut(usize::from(path)) {
            if l.remote != Some(from) {
                tracing::info!("path {path}: peer address {from}");
                l.remote = Some(from);
            }
        }
    }
}

/// The reason's kebab-case name (as serde writes it).
fn reason_name(r: hirt_core::path::SwitchReason) -> &'static str {
    use hirt_core::path::SwitchReason::*;
    match r {
        Silence => "silence",
        Loss => "loss",
        Recovered => "recovered",
        PathState => "path-state",
        Measurement => "measurement",
        PolicyChange => "policy-change",
    }
}

fn reason_str(r: hirt_core::path::SwitchReason) -> &'static str {
    use hirt_core::path::SwitchReason::*;
    match r {
        Silence => "silence: nothing confirmed within RTT + silence-intervals",
        Loss => "loss above loss-threshold",
        Recovered => "good reports again",
        PathState => "a path changed state",
        Measurement => "measurements prefer it",
        PolicyChange => "policy changed",
    }
}

/// A hash of the packet's flow (addresses, protocol, ports of TCP/UDP/SCTP/UDP-Lite), so one
/// flow's packets take one path; 0 for what is not IP.
#[inline]
pub fn flow_hash(pkt: &[u8]) -> u64 {
    let mix = |h: u64, x: u64| (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    let ports = |proto: u8, at: usize| -> u64 {
        match proto {
            6 | 17 | 132 | 136 => pkt.get(at..at + 4).map_or(0, |p| {
                u64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            }),
            _ => 0,
        }
    };
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let proto = pkt[9];
            let frag = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff != 0;
            let addrs = u64::from_be_bytes([
                pkt[12], pkt[13], pkt[14], pkt[15], pkt[16], pkt[17], pkt[18], pkt[19],
            ]);
            let p = if frag { 0 } else { ports(proto, ihl) };
            mix(mix(mix(4, addrs), u64::from(proto)), p)
        }
        Some(6) if pkt.len() >= 40 => {
            let word = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&pkt[at..at + 8]);
                u64::from_be_bytes(b)
            };
            let proto = pkt[6];
            let mut h = mix(6, u64::from(proto));
            for at in [8, 16, 24, 32] {
                h = mix(h, word(at));
            }
            mix(h, ports(proto, 40))
        }
        _ => 0,
    }
}

/// What in-order release needs to know of an inner packet: its flow, and whether it may pass
/// holes (a pure TCP ACK).
pub fn source_flow(pkt: &[u8]) -> SourceFlow {
    SourceFlow {
        hash: flow_hash(pkt),
        need: if is_pure_tcp_ack(pkt) {
            SourceNeed::Superseded
        } else {
            SourceNeed::Timely
        },
    }
}

/// Whether the packet is a pure TCP ACK: TCP over IPv4 or IPv6 (no extension headers, not a
/// fragment), no payload, ACK set, none of SYN, FIN and RST. The next ACK of the connection
/// makes such a packet's loss good, so it need not start the repair timer
/// ([`hirt_core::SourceNeed::Superseded`]).
pub fn is_pure_tcp_ack(pkt: &[u8]) -> bool {
    const TCP: u8 = 6;
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
            let fragment = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0;
            pkt[9] == TCP
                && !fragment
                && ihl >= 20
                && pkt.get(ihl..total).is_some_and(segment_is_pure_ack)
        }
        Some(6) => Ipv6Packet::new_checked(pkt)
            .is_ok_and(|p| p.next_header() == TCP && segment_is_pure_ack(p.payload())),
        _ => false,
    }
}

/// Whether a whole TCP segment is a header alone with ACK set and none of SYN, FIN and RST.
fn segment_is_pure_ack(segment: &[u8]) -> bool {
    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;
    let (Some(&offset), Some(&flags)) = (segment.get(12), segment.get(13)) else {
        return false;
    };
    let header = usize::from(offset >> 4) * 4;
    header >= 20 && header == segment.len() && flags & ACK != 0 && flags & (FIN | SYN | RST) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP segment over IPv4 (20-byte header) or IPv6 with `payload` bytes and `flags`.
    fn tcp(v6: bool, flags: u8, payload: usize) -> Vec<u8> {
        let ip = if v6 { 40 } else { 20 };
        let mut p = vec![0u8; ip + 20 + payload];
        if v6 {
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
            p[6] = 6;
        } else {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&((ip + 20 + payload) as u16).to_be_bytes());
            p[6] = 0x40; // DF
            p[9] = 6;
        }
        p[ip + 12] = 5 << 4;
        p[ip + 13] = flags;
        p
    }

    #[test]
    fn pure_tcp_acks_are_told_from_everything_else() {
        for v6 in [false, true] {
            assert!(is_pure_tcp_ack(&tcp(v6, 0x10, 0)), "ACK");
            assert!(
                is_pure_tcp_ack(&tcp(v6, 0x10 | 0x40 | 0x80, 0)),
                "ACK with ECE, CWR"
            );
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x10, 1)), "a byte of data");
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x18, 100)), "data");
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x11, 0)), "FIN");
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x12, 0)), "SYN-ACK");
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x14, 0)), "RST");
            assert!(!is_pure_tcp_ack(&tcp(v6, 0x00, 0)), "no ACK");
            let mut t = tcp(v6, 0x10, 0);
            t.truncate(t.len() - 1);
            assert!(!is_pure_tcp_ack(&t), "truncated");
        }
        // Trailing bytes past the IPv4 total length (Ethernet padding) are not payload.
        let mut padded = tcp(false, 0x10, 0);
        padded.extend_from_slice(&[0; 6]);
        assert!(is_pure_tcp_ack(&padded));
        // Options: 32-byte header (timestamps), no data.
        let mut opts = tcp(false, 0x10, 12);
        opts[32] = 8 << 4;
        assert!(is_pure_tcp_ack(&opts));
        // A fragment, UDP, garbage.
        let mut frag = tcp(false, 0x10, 0);
        frag[6] = 0x20; // MF
        assert!(!is_pure_tcp_ack(&frag));
        let mut udp = tcp(false, 0x10, 0);
        udp[9] = 17;
        assert!(!is_pure_tcp_ack(&udp));
        assert!(!is_pure_tcp_ack(&[]));
        assert!(!is_pure_tcp_ack(&[0x45; 30]));
        assert!(!is_pure_tcp_ack(&[0x60; 50]));
    }

    fn v4(src_port: u16, frag: bool) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        if frag {
            p[7] = 1;
        }
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&src_port.to_be_bytes());
        p[22..24].copy_from_slice(&53u16.to_be_bytes());
        p
    }

    #[test]
    fn flow_hash_follows_the_five_tuple() {
        assert_eq!(flow_hash(&v4(1000, false)), flow_hash(&v4(1000, false)));
        assert_ne!(flow_hash(&v4(1000, false)), flow_hash(&v4(1001, false)));
        // Fragments carry no ports: all of a datagram's fragments hash alike.
        assert_eq!(flow_hash(&v4(1000, true)), flow_hash(&v4(1001, true)));
        assert_eq!(flow_hash(&[0x45, 0, 0]), 0, "too short: no flow");
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 6;
        let a = flow_hash(&v6);
        v6[41] = 7;
        assert_ne!(a, flow_hash(&v6));
    }

    #[test]
    fn replies_give_rtt_and_loss_and_silence_moves_traffic() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let a: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let b: SocketAddr = "198.51.100.1:1".parse().unwrap();
        let mut ps = PathSet::new(PathManagerConfig::default(), &[Some(a), Some(b)], 1, t0);
        let m = Metrics::new(1, "test");
        // Traffic on path 0, probed every half interval, replies after 10 ms with 1 of 10 lost.
        let mut t = t0;
        let mut peer_received = 0u32;
        for round in 0..20 {
            for _ in 0..9 {
                let p = ps.for_source(7, 100, t);
                assert_eq!(p, 0, "round {round}: failover keeps path 0");
                ps.note_sent(p);
            }
            peer_received += 9;
            let due: Vec<PathId> = ps.on_timeout(t).to_vec();
            for p in due {
                let (ts, sent) = ps.probe(p, t).unwrap();
                if p == 0 {
                    // One data datagram of the round lost, the probe arrives.
                    peer_received += 1;
                    ps.on_reply(0, ts, sent, peer_received - 1 - round, 0, t + ms(10));
                } else {
                    ps.on_reply(p, ts, sent, sent, 0, t + ms(10));
                }
            }
            ps.drain_events(&m);
            t += ms(25);
        }
        let snap = ps.snapshot();
        assert!((snap[0].srtt_ms - 10.0).abs() < 1.0, "{snap:?}");
        assert!(snap[0].loss > 0.05 && snap[0].loss < 0.15, "{snap:?}");
        assert_eq!(ps.manager().preferred(), Some(0));
        // Path 0 goes silent: no more replies on it; path 1 still answers.
        let mut moved_at = None;
        for round in 0..20 {
            let p = ps.for_source(7, 100, t);
            ps.note_sent(p);
            if p == 1 && moved_at.is_none() {
                moved_at = Some(round);
            }
            let due: Vec<PathId> = ps.on_timeout(t).to_vec();
            for p in due {
                let (ts, sent) = ps.probe(p, t).unwrap();
                if p == 1 {
                    ps.on_reply(1, ts, sent, sent, 0, t + ms(10));
                }
            }
            ps.drain_events(&m);
            t += ms(25);
        }
        let moved = moved_at.expect("traffic moved to path 1");
        // Silence: SRTT 10 ms + 1.25 x 50 ms after the first unconfirmed send, i.e. within
        // 3 feedback intervals (6 rounds of 25 ms).
        assert!(moved <= 6, "moved after {moved} rounds");
        assert!(
            m.global
                .path_switches
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }

    #[test]
    fn a_server_grows_its_set_and_learns_addresses() {
        let t0 = Instant::now();
        let mut ps = PathSet::new(PathManagerConfig::default(), &[None], 1, t0);
        assert_eq!(ps.for_source(1, 10, t0), 0);
        let a: SocketAddr = "192.0.2.7:9".parse().unwrap();
        ps.learn(2, a);
        assert_eq!(ps.len(), 3);
        assert_eq!(ps.remote(2), Some(a));
        assert_eq!(ps.remote(1), None);
        assert_eq!(ps.manager().path_ids().count(), 3);
    }
}
