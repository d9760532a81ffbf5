//! UDP mode: two peers, each with a TUN device, carrying IP packets over UDP with FEC in each
//! direction (like tinyfecVPN, but adaptive and authenticated).
//!
//! [`UdpPeer`] is the per-packet logic (no sockets): TUN packet -> source frame (+ repairs);
//! datagram -> authenticate, then source / repair / feedback / keepalive. Every datagram is
//! sealed with ChaCha20-Poly1305 ([`crate::crypto`]); anything that does not open is dropped
//! silently and counted, so nothing reaches the TUN device without the key. The server learns
//! the client's address from authenticated packets whose counter is the newest it has seen
//! (NAT rebinding, address change); a replayed packet from elsewhere cannot move it.
//!
//! The frame inside the AEAD is `hirt_wire::udp` (source, repair, feedback, keepalive). A
//! source frame carries the TUN packet unchanged: the symbol is the exact inner IP packet.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hirt_core::{
    ControllerConfig, Decoder, DecoderConfig, Encoder, EncoderConfig, FecMode, Feedback, StreamId,
    Verdict,
};
use hirt_wire::udp::{UdpPacket, UdpRepr, SOURCE_LEN};

use crate::batch::Batch;
use crate::cli::UdpArgs;
use crate::control::{self, Control};
use crate::crypto::{self, Direction, Opener, Sealer, HEADER_LEN, OVERHEAD};
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

/// Which end of the tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listens; learns the client's address.
    Server,
    /// Connects to a fixed server address.
    Client,
}

/// Configuration of one peer.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Server or client.
    pub role: Role,
    /// Shared secret (empty with `--insecure`).
    pub secret: Vec<u8>,
    /// Encrypt (true) or authenticate only.
    pub encrypt: bool,
    /// FEC mode of our encoder (the peer's decoder must use the same scheme).
    pub fec: FecMode,
    /// Our encoder stream.
    pub stream: StreamId,
    /// Clamp TCP MSS of SYNs to fit this TUN MTU (None: no clamping).
    pub mss_mtu: Option<u16>,
    /// Mark recovered packets ECN-CE.
    pub ecn_ce: bool,
    /// Keepalive interval.
    pub keepalive: Duration,
    /// The server's address (client only).
    pub remote: Option<SocketAddr>,
    /// Seed for the core's randomness.
    pub seed: u64,
}

/// One peer's state.
pub struct UdpPeer {
    cfg: PeerConfig,
    enc: Encoder,
    dec: Decoder,
    sealer: Sealer,
    opener: Opener,
    peer: Option<SocketAddr>,
    top: Option<u64>,
    metrics: Arc<Metrics>,
    next_keepalive: Option<Instant>,
    out: Vec<u8>,
    epoch: Instant,
}

impl std::fmt::Debug for UdpPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpPeer")
            .field("cfg", &self.cfg)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpDrop {
    /// Did not authenticate (or replayed).
    Auth,
    /// Authenticated but not a valid frame.
    Malformed,
    /// A duplicate source.
    Duplicate,
}

impl UdpPeer {
    /// A peer.
    pub fn new(cfg: PeerConfig, metrics: Arc<Metrics>, now: Instant) -> UdpPeer {
        let (tx, rx) = match cfg.role {
            Role::Client => (Direction::ClientToServer, Direction::ServerToClient),
            Role::Server => (Direction::ServerToClient, Direction::ClientToServer),
        };
        let sealer = Sealer::new(
            &crypto::derive_key(&cfg.secret, tx),
            cfg.encrypt,
            crypto::initial_counter(),
        );
        let opener = Opener::new(&crypto::derive_key(&cfg.secret, rx), cfg.encrypt);
        UdpPeer {
            enc: Encoder::new(EncoderConfig::new(cfg.fec.clone()), cfg.seed),
            dec: Decoder::new(
                DecoderConfig::new(cfg.fec.scheme.clone()),
                cfg.seed ^ 0xdec0de,
            ),
            sealer,
            opener,
            peer: cfg.remote,
            top: None,
            metrics,
            next_keepalive: Some(now),
            out: vec![0u8; BUF_LEN],
            epoch: now,
            cfg,
        }
    }

    /// Where we currently send (the server: the last authenticated client address).
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Switches the encoder's controller (live change).
    pub fn set_controller(&mut self, c: &ControllerConfig) {
        self.enc.set_controller(c);
    }

    /// A packet read from the TUN device into `buf[TUN_OFFSET..TUN_OFFSET + len]`. Seals it in
    /// place and hands the datagram (and any repairs) to `send`.
    pub fn handle_tun(
        &mut self,
        buf: &mut [u8],
        len: usize,
        now: Instant,
        send: &mut dyn FnMut(&[u8], SocketAddr),
    ) {
        let Some(peer) = self.peer else { return };
        if len == 0 || TUN_OFFSET + len + 16 > buf.len() {
            return;
        }
        if let Some(mtu) = self.cfg.mss_mtu {
            crate::mss::clamp(&mut buf[TUN_OFFSET..TUN_OFFSET + len], mtu);
        }
        let stream = self.cfg.stream;
        let c = self.metrics.stream(stream);
        add(&c.enc_packets_in, 1);
        let tag = self
            .enc
            .handle_source(stream, &buf[TUN_OFFSET..TUN_OFFSET + len], now);
        let repr = UdpRepr::Source {
            stream: tag.stream,
            esi: tag.esi,
            payload: &[],
        };
        if repr.emit_header(&mut buf[HEADER_LEN..TUN_OFFSET]).is_err() {
            return;
        }
        let n = self.sealer.seal(buf, SOURCE_LEN + len);
        add(&c.enc_packets_out, 1);
        add(&c.source_bytes_sent, n as u64);
        send(&buf[..n], peer);
        self.drain_repairs(peer, send);
    }

    fn drain_repairs(&mut self, peer: SocketAddr, send: &mut dyn FnMut(&[u8], SocketAddr)) {
        while let Some(r) = self.enc.poll_repair() {
            let repr = UdpRepr::Repair {
                stream: r.stream,
                info: r.info,
                timestamp: r.timestamp,
                payload: r.payload,
            };
            let Ok(flen) = repr.emit(&mut self.out[HEADER_LEN..BUF_LEN - 16]) else {
                continue;
            };
            let n = self.sealer.seal(&mut self.out, flen);
            let c = self.metrics.stream(r.stream);
            add(&c.repairs_sent, 1);
            add(&c.repair_bytes_sent, r.payload.len() as u64);
            send(&self.out[..n], peer);
        }
    }

    /// A datagram from `from`. `deliver` gets every packet for the TUN device.
    pub fn handle_udp(
        &mut self,
        buf: &mut [u8],
        from: SocketAddr,
        now: Instant,
        send: &mut dyn FnMut(&[u8], SocketAddr),
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), UdpDrop> {
        let (range, counter) = match self.opener.open(buf) {
            Ok(x) => x,
            Err(_) => {
                add(&self.metrics.global.auth_failures, 1);
                return Err(UdpDrop::Auth);
            }
        };
        // Address learning: only the newest authenticated packet may move the peer address.
        if self.top.is_none_or(|t| counter > t) {
            self.top = Some(counter);
            if self.cfg.role == Role::Server && self.peer != Some(from) {
                if self.peer.is_some() {
                    add(&self.metrics.global.peer_address_changes, 1);
                }
                tracing::info!("peer address now {from}");
                self.peer = Some(from);
            }
        }
        let frame = &buf[range];
        let Ok(pkt) = UdpPacket::new_checked(frame) else {
            add(&self.metrics.global.malformed, 1);
            return Err(UdpDrop::Malformed);
        };
        let Ok(repr) = UdpRepr::parse(&pkt) else {
            add(&self.metrics.global.malformed, 1);
            return Err(UdpDrop::Malformed);
        };
        let mut res = Ok(());
        match repr {
            UdpRepr::Source {
                stream,
                esi,
                payload,
            } => {
                let c = self.metrics.stream(stream);
                add(&c.dec_packets_in, 1);
                match self.dec.handle_source(stream, esi, payload, now) {
                    Verdict::Deliver => {
                        add(&c.dec_packets_out, 1);
                        deliver(payload);
                    }
                    Verdict::Duplicate => {
                        add(&c.duplicates, 1);
                        res = Err(UdpDrop::Duplicate);
                    }
                }
            }
            UdpRepr::Repair {
                stream,
                info,
                timestamp,
                payload,
            } => {
                let c = self.metrics.stream(stream);
                add(&c.repairs_received, 1);
                let before = self.dec.stats(stream).map(|s| s.recovered).unwrap_or(0);
                let _ = self
                    .dec
                    .handle_repair(stream, &info, timestamp, payload, now);
                if self.dec.stats(stream).map(|s| s.recovered).unwrap_or(0) > before {
                    add(&c.repairs_used, 1);
                }
            }
            UdpRepr::Feedback { stream, body, .. } => match Feedback::decode(body) {
                Ok(fb) => {
                    add(&self.metrics.stream(stream).feedback_in, 1);
                    self.enc.handle_feedback(&fb, now);
                }
                Err(_) => {
                    add(&self.metrics.global.malformed, 1);
                    res = Err(UdpDrop::Malformed);
                }
            },
            UdpRepr::Keepalive { .. } => {}
        }
        self.drain_decoder(now, send, deliver);
        if let Some(peer) = self.peer {
            self.drain_repairs(peer, send);
        }
        res
    }

    fn drain_decoder(
        &mut self,
        now: Instant,
        send: &mut dyn FnMut(&[u8], SocketAddr),
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        while let Some(r) = self.dec.poll_recovered() {
            let n = r.data.len();
            if n == 0 || n > MAX_PACKET {
                continue;
            }
            let c = self.metrics.stream(r.stream);
            add(&c.recovered, 1);
            add(&c.dec_packets_out, 1);
            if self.cfg.ecn_ce {
                self.out[..n].copy_from_slice(r.data);
                crate::srv6::mark_ce(&mut self.out[..n]);
                deliver(&self.out[..n]);
            } else {
                deliver(r.data);
            }
        }
        let Some(peer) = self.peer else {
            while self.dec.poll_feedback(now).is_some() {}
            return;
        };
        while let Some(fb) = self.dec.poll_feedback(now) {
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
            let Ok(flen) = repr.emit(&mut self.out[HEADER_LEN..BUF_LEN - 16]) else {
                continue;
            };
            let n = self.sealer.seal(&mut self.out, flen);
            add(&self.metrics.stream(fb.stream).feedback_sent, 1);
            send(&self.out[..n], peer);
        }
    }

    /// When [`Self::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.enc.poll_timeout(),
            self.dec.poll_timeout(),
            self.next_keepalive,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Timers: time-driven repairs, feedback, keepalive.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        send: &mut dyn FnMut(&[u8], SocketAddr),
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        self.enc.handle_timeout(now);
        self.dec.handle_timeout(now);
        if let Some(peer) = self.peer {
            self.drain_repairs(peer, send);
        }
        self.drain_decoder(now, send, deliver);
        if self.next_keepalive.is_some_and(|t| t <= now) {
            self.next_keepalive = Some(now + self.cfg.keepalive);
            if let Some(peer) = self.peer {
                let ts = now.duration_since(self.epoch).as_micros() as u32;
                let repr = UdpRepr::Keepalive { timestamp: ts };
                if let Ok(flen) = repr.emit(&mut self.out[HEADER_LEN..BUF_LEN - 16]) {
                    let n = self.sealer.seal(&mut self.out, flen);
                    add(&self.metrics.global.keepalives_sent, 1);
                    send(&self.out[..n], peer);
                }
            }
        }
    }

    /// Copies the core's counters into the metrics (periodically, not per packet).
    pub fn publish_stats(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        for s in self.enc.streams() {
            if let Some(st) = self.enc.stats(s) {
                let c = self.metrics.stream(s);
                c.controller_ratio_ppm
                    .store((st.rate * 1e6) as u64, Relaxed);
                c.overload_skips.store(st.overload_skips, Relaxed);
            }
        }
        for s in self.dec.streams() {
            if let Some(st) = self.dec.stats(s) {
                let c = self.metrics.stream(s);
                c.losses.store(st.lost, Relaxed);
                c.unrecoverable.store(st.residual, Relaxed);
            }
        }
    }
}

/// A running UDP-mode instance.
#[derive(Debug)]
pub struct UdpHandle {
    stop: Arc<StopFlag>,
    worker: Option<std::thread::JoinHandle<()>>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The bound UDP address.
    pub local: SocketAddr,
    _control: Option<control::ControlServer>,
}

impl UdpHandle {
    /// Stops the worker.
    pub fn stop(mut self) {
        self.stop.stop();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for UdpHandle {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Runs `hirt udp` until SIGINT/SIGTERM.
pub fn run(args: UdpArgs) -> anyhow::Result<()> {
    runtime::install_signal_handlers();
    let h = start(args)?;
    while !runtime::shutdown_requested() {
        std::thread::sleep(Duration::from_millis(100));
    }
    h.stop();
    Ok(())
}

fn parse_cidr(s: &str) -> anyhow::Result<(IpAddr, u8)> {
    let (a, p) = s.split_once('/').context("address needs /prefix")?;
    Ok((a.parse()?, p.parse()?))
}

/// Starts an instance in the calling thread's network namespace.
pub fn start(args: UdpArgs) -> anyhow::Result<UdpHandle> {
    let role = match (args.server, args.client) {
        (true, false) => Role::Server,
        (false, true) => Role::Client,
        _ => bail!("give exactly one of -s (server) or -c (client)"),
    };
    let secret = match (&args.key, args.insecure) {
        (Some(k), _) => k.as_bytes().to_vec(),
        (None, true) => {
            tracing::warn!("--insecure: no key, anyone can inject packets into the tunnel");
            Vec::new()
        }
        (None, false) => bail!("-k KEY is required (or --insecure to run without authentication)"),
    };
    let fec_s = crate::cli::fec_string(args.fec.as_deref(), args.rs.as_deref());
    let fec = FecMode::parse_with_window(&fec_s, args.window.unwrap_or(hirt_core::DEFAULT_WINDOW))
        .map_err(|e| anyhow::anyhow!("--fec {fec_s}: {e}"))?;
    let mtu = args.mtu.unwrap_or(1400);
    let dev = args.dev.clone().unwrap_or_else(|| "hirt-udp".into());
    let (sock, remote) = match role {
        Role::Server => {
            let l = args.listen.as_deref().unwrap_or("0.0.0.0:4096");
            (
                UdpSocket::bind(l).with_context(|| format!("binding {l}"))?,
                None,
            )
        }
        Role::Client => {
            let r = args
                .remote
                .as_deref()
                .context("-r SERVER:PORT is required with -c")?;
            let ra = r
                .to_socket_addrs()?
                .next()
                .context("cannot resolve the server")?;
            let bind = args.listen.clone().unwrap_or_else(|| {
                if ra.is_ipv4() {
                    "0.0.0.0:0".into()
                } else {
                    "[::]:0".into()
                }
            });
            (UdpSocket::bind(&bind)?, Some(ra))
        }
    };
    sock.set_nonblocking(true)?;
    let local = sock.local_addr()?;
    let tun = Tun::open(&dev, false).with_context(|| format!("opening TUN {dev}"))?;
    tun.set_nonblocking(true)?;
    let mut nl = Netlink::open()?;
    let idx = if_index(&dev)?;
    nl.link_up_qlen(idx, Some(mtu), Some(crate::srv6_run::TUN_TXQLEN))?;
    let tun_addr = args.tun_addr.clone().unwrap_or_else(|| match role {
        Role::Server => "10.77.0.1/24".into(),
        Role::Client => "10.77.0.2/24".into(),
    });
    let (a, p) = parse_cidr(&tun_addr)?;
    nl.add_addr(idx, a, p)?;
    if let Some(a6) = &args.tun_addr6 {
        let (a, p) = parse_cidr(a6)?;
        nl.add_addr(idx, a, p)?;
    }
    let metrics = Metrics::new(
        1,
        &format!(
            "udp {}",
            if role == Role::Server {
                "server"
            } else {
                "client"
            }
        ),
    );
    let cfg = PeerConfig {
        role,
        secret,
        encrypt: !args.no_encrypt,
        fec: fec.clone(),
        stream: 0,
        mss_mtu: (!args.no_mss_clamp).then_some(mtu.min(65535) as u16),
        ecn_ce: args.ecn_ce,
        keepalive: Duration::from_millis(args.keepalive_ms.unwrap_or(1000)),
        remote,
        seed: args.seed.unwrap_or_else(crypto::initial_counter),
    };
    let ctl = Control::new(metrics.clone(), &fec.controller.to_string());
    let control_path = args
        .control
        .clone()
        .unwrap_or_else(|| format!("/run/hirt-{dev}.sock").into());
    let control_srv = control::start_operations(&control_path, &ctl, args.metrics, &metrics)?;
    let repair_tos = u32::from(args.repair_dscp.unwrap_or(0).min(63) << 2);
    if repair_tos != 0 {
        // One socket carries every packet type, so the DSCP applies to the whole tunnel.
        set_tos(&sock, local.is_ipv4(), repair_tos);
    }
    let stop = Arc::new(StopFlag::default());
    let peer = UdpPeer::new(cfg, metrics.clone(), Instant::now());
    let s2 = stop.clone();
    let worker = std::thread::Builder::new()
        .name("hirt-udp".into())
        .spawn(move || worker(peer, tun, sock, s2, ctl))?;
    Ok(UdpHandle {
        stop,
        worker: Some(worker),
        metrics,
        local,
        _control: control_srv,
    })
}

fn set_tos(sock: &UdpSocket, v4: bool, tos: u32) {
    let (level, opt) = if v4 {
        (libc::IPPROTO_IP, libc::IP_TOS)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    };
    let v = tos as libc::c_int;
    // SAFETY: setsockopt with a c_int value of the right size on a socket we own.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}

fn worker(mut peer: UdpPeer, tun: Tun, sock: UdpSocket, stop: Arc<StopFlag>, ctl: Arc<Control>) {
    let mut buf = vec![0u8; BUF_LEN];
    let mut inb = Batch::default();
    let mut outb = Batch::default();
    let fds = [tun.as_raw_fd(), sock.as_raw_fd()];
    let sfd = sock.as_raw_fd();
    let m = ctl.metrics.clone();
    let mut gen = ctl.generation();
    let mut last_publish = Instant::now();
    // After a full batch on either side more is very likely queued: skip the `poll`.
    let mut full = false;
    while !stop.stopped() {
        if !full {
            let wait = runtime::poll_ms(
                Instant::now(),
                peer.poll_timeout(),
                Duration::from_millis(100),
            );
            if wait > 0 {
                let _ = poll_readable(&fds, wait);
            }
        }
        full = false;
        {
            let mut send = |d: &[u8], to: SocketAddr| {
                if !outb.push(d, to) {
                    let _ = outb.send(sfd);
                    outb.push(d, to);
                }
            };
            // TUN -> UDP.
            // One clock read per batch: its packets arrived within microseconds.
            let now = Instant::now();
            let mut got = 0;
            while got < crate::batch::BATCH {
                let end = BUF_LEN - 16;
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
            let mut deliver = |p: &[u8]| {
                if tun.send(p).is_err() {
                    add(&m.global.send_errors, 1);
                }
            };
            if let Ok(n) = inb.recv(sfd) {
                full |= n == crate::batch::BATCH;
                let now = Instant::now();
                for i in 0..n {
                    let (d, from) = inb.get_mut(i);
                    if d.len() < OVERHEAD {
                        add(&m.global.auth_failures, 1);
                        continue;
                    }
                    if let Some(from) = from {
                        let _ = peer.handle_udp(d, from, now, &mut send, &mut deliver);
                    }
                }
            }
            let now = Instant::now();
            if peer.poll_timeout().is_some_and(|t| t <= now) {
                peer.handle_timeout(now, &mut send, &mut deliver);
            }
        }
        if !outb.is_empty() {
            let _ = outb.send(sfd);
        }
        let g = ctl.generation();
        if g != gen {
            gen = g;
            if let Ok(c) = ctl.controller().parse::<ControllerConfig>() {
                peer.set_controller(&c);
            }
        }
        let now = Instant::now();
        if now.duration_since(last_publish) > Duration::from_millis(200) {
            peer.publish_stats();
            last_publish = now;
        }
    }
    peer.publish_stats();
}

#[cfg(test)]
mod tests;
