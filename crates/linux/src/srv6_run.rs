//! The I/O around [`crate::srv6::Srv6Node`]: TUN queues, routes, workers, control, shutdown.
//!
//! Start-up: open the SID device (`--dev`, multi-queue with one queue per worker), bring it up,
//! route our SIDs (/128) to it; for End.DX6 or End.DT6 with a table, also open a decapsulation
//! device `<dev>x` with a policy rule `iif <dev>x lookup <table>` (and, for DX6, a default route
//! via the next hop in that table), so decapsulated packets leave by the configured next hop
//! while everything else hirt writes is routed normally. Shutdown (SIGINT/SIGTERM or
//! [`Srv6Handle::stop`]) removes the routes and rules.

use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::Srv6Config;
use crate::control::Control;
use crate::engine::load::{DropWatch, LOAD_PERIOD};
use crate::engine::{
    Housekeeping, Operations, QueueDrops, Transmit, TransmitSink, Workers, TUN_TXQLEN,
};
use crate::metrics::{add, Metrics};
use crate::netlink::{if_index, Installed, Netlink, Route, Rule, Seg6Local};
use crate::runtime::{self, StopFlag};
use crate::srv6::xdp_io::XdpIo;
use crate::srv6::{Behavior, Egress, NodeConfig, Shared, Srv6Node, BUF_LEN};
use crate::tun::{poll_readable, Tun};
use crate::xdp::{RingBuf, SidFilter, SourceTag, SourceTap, XdpProgram};

/// Default table hirt fills for End.DX6.
pub const DX6_TABLE: u32 = 4869;
const MAIN_TABLE: u32 = 254;

/// A running SRv6 instance (in-process; the CLI waits on it).
#[derive(Debug)]
pub struct Srv6Handle {
    /// Counters.
    pub metrics: Arc<Metrics>,
    // Field order is drop order: routes first (closing the TUN queues deletes the device and
    // its routes with it), then the workers, then the XDP programs and the control socket.
    installed: Installed,
    workers: Workers,
    /// XDP programs of `--xdp`, detached when dropped (after the workers stopped).
    _xdp: Vec<SidFilter>,
    _ops: Operations,
}

impl Srv6Handle {
    /// Stops the workers, removes routes and rules.
    pub fn stop(mut self) {
        self.installed.remove_all();
        self.workers.stop();
    }

    /// Waits until a signal asks to stop, then stops.
    pub fn wait(self) {
        self.workers.wait_for_stop();
        self.stop();
    }
}

impl Drop for Srv6Handle {
    fn drop(&mut self) {
        self.installed.remove_all();
        self.workers.stop();
    }
}

/// Runs `hirt srv6` until SIGINT/SIGTERM.
pub fn run(cfg: Srv6Config) -> anyhow::Result<()> {
    let drain = cfg.drain();
    if drain.is_zero() {
        runtime::install_signal_handlers();
    } else {
        runtime::install_draining_signal_handlers(drain, crate::metrics::close_endpoints)
            .context("signal handlers")?;
    }
    let h = start(cfg)?;
    tracing::info!("hirt srv6 running");
    h.wait();
    Ok(())
}

/// Starts an instance in the calling thread's network namespace (workers inherit it).
pub fn start(cfg: Srv6Config) -> anyhow::Result<Srv6Handle> {
    cfg.validate()?;
    let role = cfg.role;
    let (enc, dec) = (role.encodes(), role.decodes());
    let enc_sid = cfg.enc_sid()?;
    let dec_sid = cfg.dec_sid()?;
    let behavior = cfg.behavior;
    let fec = cfg.fec_mode()?;
    let threads = cfg.threads;
    let dev = cfg.dev.clone();
    let tlv = cfg.tlv()?;
    let auth = cfg.auth()?;
    let coder = cfg.coder()?;
    let kernel_sources = cfg.kernel_sources;
    let repair_tclass = cfg.repair_dscp << 2;
    let seed = cfg.seed.unwrap_or_else(crate::crypto::initial_counter);
    let paths = cfg.paths_or_default();
    // Several paths: each carries its own encoder stream (stream = path id, one worker).
    let metrics = Metrics::new(threads.max(paths.len()), &format!("srv6 {}", role.as_str()));

    // Devices.
    let mut queues = Vec::with_capacity(threads);
    for _ in 0..threads {
        queues.push(Tun::open(&dev, threads > 1).with_context(|| format!("opening TUN {dev}"))?);
    }
    let mut nl = Netlink::open()?;
    let idx = if_index(&dev)?;
    // No IPv6 link-local address (so no router solicitations, DAD or MLD for its solicited-node
    // group): the device only carries our SIDs. Set before the link goes up.
    nl.link_addr_gen_mode_none(idx)
        .context("addrgenmode none on the SID device")?;
    let table = cfg.table;
    let decap_needed = matches!(behavior, Behavior::Dx6(_))
        || (behavior != Behavior::End && table.is_some_and(|t| t != MAIN_TABLE));
    let decap_name = format!("{}x", &dev[..dev.len().min(14)]);
    let mut decap_queues = Vec::new();
    if dec && decap_needed {
        for _ in 0..threads {
            decap_queues.push(Tun::open(&decap_name, threads > 1)?);
        }
        nl.link_addr_gen_mode_none(if_index(&decap_name)?)?;
    }
    // A long queue absorbs bursts while a worker is busy (a drop here happens before the encoder
    // numbers the packet, or after the tunnel at the decoder, where it would look like loss).
    nl.link_up_qlen(idx, Some(cfg.mtu), Some(TUN_TXQLEN))?;
    let mut installed = Installed::default();
    if !cfg.no_routes {
        let own: Vec<Ipv6Addr> = [(enc, enc_sid), (dec, dec_sid)]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, s)| *s)
            .collect();
        for sid in own {
            // With --kernel-sources the kernel does the End (encoder: what the XDP program does
            // not tag) or the End.DT6 (decoder) of what the XDP program passes on.
            let seg6local = match (kernel_sources, enc) {
                (false, _) => None,
                (true, true) => Some(Seg6Local::End),
                (true, false) => Some(Seg6Local::EndDt6(table.unwrap_or(MAIN_TABLE))),
            };
            installed.route(
                &mut nl,
                Route {
                    dst: IpAddr::V6(sid),
                    prefix_len: 128,
                    gateway: None,
                    oif: idx,
                    table: MAIN_TABLE,
                    seg6local,
                },
            )?;
        }
    }
    if !decap_queues.is_empty() {
        let didx = if_index(&decap_name)?;
        nl.link_up_qlen(didx, Some(cfg.mtu), Some(TUN_TXQLEN))?;
        let t = match behavior {
            Behavior::Dx6(_) => table.unwrap_or(DX6_TABLE),
            _ => table.unwrap_or(MAIN_TABLE),
        };
        if let Behavior::Dx6(nh) = behavior {
            installed.route(
                &mut nl,
                Route {
                    dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                    prefix_len: 0,
                    gateway: Some(IpAddr::V6(nh)),
                    oif: 0,
                    table: t,
                    seg6local: None,
                },
            )?;
        }
        installed.rule(
            &mut nl,
            Rule {
                family: libc::AF_INET6 as u8,
                iif: decap_name.clone(),
                table: t,
                priority: 1000,
            },
        )?;
    }

    let control_path = cfg
        .control
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(format!("/run/hirt-{dev}.sock")));
    let ops = Operations::start(&metrics, &fec, &control_path, cfg.metrics)?;

    // AF_XDP fast path: a program per device, a socket per worker and device.
    let mut filters = Vec::new();
    let mut xdp_ios: Vec<Option<XdpIo>> = (0..threads).map(|_| None).collect();
    let mut tap_ring: Option<RingBuf> = None;
    let mut untagged: Option<OwnedFd> = None;
    let tap = (kernel_sources && dec).then_some(SourceTap {
        sid: dec_sid,
        source_tlv: tlv.source,
    });
    let tag = (kernel_sources && enc).then_some(SourceTag {
        sid: enc_sid,
        dec_sid,
        source_tlv: tlv.source,
        stream: 0,
    });
    let xdp_mode = cfg.xdp_mode.as_str();
    let modes = crate::xdp::AttachMode::parse_list(xdp_mode)
        .with_context(|| format!("xdp-mode `{xdp_mode}`"))?;
    if let Some(devs) = Some(&cfg.xdp).filter(|d| !d.is_empty()) {
        let own: Vec<Ipv6Addr> = [(enc, enc_sid), (dec, dec_sid)]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, s)| *s)
            .collect();
        let idxs = devs
            .iter()
            .map(|d| if_index(d).with_context(|| format!("--xdp device {d}")))
            .collect::<anyhow::Result<Vec<u32>>>()?;
        let program = XdpProgram::load(
            &own,
            threads as u32,
            tap.as_ref(),
            tag.as_ref(),
            TAP_RING_BYTES,
        )
        .context("loading the XDP program")?;
        if kernel_sources {
            tap_ring = Some(
                program
                    .ring()
                    .context("BPF ring buffer for --kernel-sources")?,
            );
        }
        if tag.is_some() {
            untagged = Some(
                program
                    .untagged_counters()
                    .context("counters for --kernel-sources")?,
            );
        }
        for (d, &i) in devs.iter().zip(&idxs) {
            if kernel_sources {
                warn_other_rx_queues(d);
            }
            let f = program
                .attach(i, modes)
                .with_context(|| format!("attaching the XDP program to {d}"))?;
            tracing::info!("XDP program on {d} ({:?} mode)", f.mode());
            filters.push(f);
        }
        for (q, slot) in xdp_ios.iter_mut().enumerate() {
            let io = XdpIo::open(&idxs, q as u32).with_context(|| {
                format!("AF_XDP socket on queue {q} of {devs:?} (a device needs one receive queue per --threads)")
            })?;
            for (f, (_, sock)) in filters.iter().zip(io.sockets()) {
                f.register(q as u32, sock)?;
            }
            *slot = Some(io);
        }
    }

    let mut workers = Workers::default();
    let mut decap_iter = decap_queues.into_iter();
    let base = NodeConfig {
        enc_sid: enc.then_some(enc_sid),
        dec_sid: dec.then_some(dec_sid),
        peer_dec_sid: dec_sid,
        peer_enc_sid: enc_sid,
        behavior,
        stream: 0,
        fec: fec.clone(),
        tlv,
        auth,
        ecn_ce: cfg.ecn_ce,
        repair_tclass,
        seed,
        coder,
        paths,
        path_cfg: cfg.paths.clone(),
    };
    // A replay window per stream id an encoder with several paths may use (its sources, probes
    // and replies on each path have their own, so a slow path's packets are not replays).
    let shared = Shared::new(&base, threads, threads.max(crate::config::MAX_PATHS));
    for ((i, q), xdp) in queues.into_iter().enumerate().zip(xdp_ios) {
        let cfg = NodeConfig {
            stream: i as u16,
            ..base.clone()
        };
        let node = Srv6Node::with_shared(cfg, metrics.clone(), shared.clone());
        let decap = decap_iter.next();
        let ctl = ops.ctl.clone();
        // One worker with --kernel-sources.
        let tap = tap_ring.take();
        let untagged = untagged.take();
        workers.spawn(format!("hirt-srv6-{i}"), move |stop| {
            worker(node, q, decap, xdp, Kernel { tap, untagged }, stop, ctl)
        })?;
    }
    Ok(Srv6Handle {
        metrics,
        installed,
        workers,
        _xdp: filters,
        _ops: ops,
    })
}

/// Packets read per wake-up (per source) before timers and control are looked at.
const BATCH: usize = 64;
/// With AF_XDP, the TUN device is read at least every this many rounds that skip `poll`.
const TUN_EVERY: u32 = 8;
/// With `--kernel-sources` only receive queue 0 is tagged (encoder) or tapped (decoder): says so
/// when `dev` has more, for what arrives elsewhere is forwarded unprotected by the encoder and
/// dropped (then recovered) by the decoder. Not for a veth: there the peer's transmit queue
/// picks the receive queue, and a veth transmits on one queue unless made with more.
fn warn_other_rx_queues(dev: &str) {
    if crate::ethtool::driver(dev).is_ok_and(|d| d == "veth") {
        return;
    }
    match crate::ethtool::rx_queues(dev) {
        Ok(n) if n > 1 => tracing::warn!(
            "{dev} has {n} receive queues; --kernel-sources protects what arrives on queue 0: \
             steer the tunnel there (e.g. `ethtool -N {dev} flow-type ip6 dst-ip <SID> action \
             0`, or `ethtool -L {dev} combined 1`)"
        ),
        _ => {}
    }
}

/// Copies the tag program's counts of sources it passed on untagged into the metrics.
fn publish_untagged(counters: &OwnedFd, m: &Metrics) {
    use crate::xdp::Untagged;
    let total: u64 = [Untagged::OtherQueue, Untagged::TooLong, Untagged::RingFull]
        .into_iter()
        .filter_map(|why| crate::xdp::untagged(counters.as_raw_fd(), why).ok())
        .sum();
    m.global.kernel_untagged.store(total, Ordering::Relaxed);
}

/// Ring buffer of `--kernel-sources`: 4080 records of a 2048-byte packet, 40 ms at 100 kpps.
const TAP_RING_BYTES: u32 = 8 << 20;
/// The longest a `--kernel-sources` worker sleeps: the XDP programs wake it for few of the
/// copies (the encoder's when it is `WAKE_BEHIND` records behind, the decoder's for none:
/// repairs wake it), so it reads them at least this often.
const TAP_MAX_SLEEP: Duration = Duration::from_millis(2);

/// Where a worker writes what its node emits.
struct Out<'a> {
    tun: &'a Tun,
    decap: Option<&'a Tun>,
    xdp: Option<XdpIo>,
    metrics: &'a Metrics,
    now: Instant,
}

impl TransmitSink<Egress> for Out<'_> {
    #[inline]
    fn transmit(&mut self, t: Transmit<'_, Egress>) {
        let pkt = t.bytes;
        let dev = match (t.dest, self.decap) {
            (Egress::Decap, Some(d)) => d,
            // A decapsulated packet without a decapsulation device is routed in the main
            // table, like anything else we forward: the fast path may take it.
            _ => {
                if let Some(x) = self.xdp.as_mut() {
                    if x.send(pkt, self.now, self.metrics) {
                        return;
                    }
                }
                self.tun
            }
        };
        if dev.send(pkt).is_err() {
            add(&self.metrics.global.send_errors, 1);
        }
    }
}

/// Takes the copies of the sources the kernel forwarded or delivered (`--kernel-sources`) that
/// wait in `ring`: the encoder codes them (`tagged`: the XDP program gave them their ESI), the
/// decoder records them. Called before anything that may use them: a repair read from a socket
/// was queued after the sources that reached the same receive queue before it, so once it is in
/// hand those are in the ring.
fn drain_ring(
    ring: &mut RingBuf,
    tagged: bool,
    node: &mut Srv6Node,
    rbuf: &mut [u8],
    out: &mut Out,
) {
    if !ring.pending() {
        return;
    }
    let now = out.now;
    ring.consume(usize::MAX, |rec| {
        let word = |at: usize| {
            rec.get(at..at + 4)
                .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        let len = word(0) as usize;
        // 0: the program could not copy it and dropped the packet (the decoder recovers it).
        if len == 0 || len + 8 > rec.len() || len > rbuf.len() {
            return;
        }
        rbuf[..len].copy_from_slice(&rec[8..8 + len]);
        let _ = if tagged {
            node.handle_tagged_source(rbuf, len, word(4), now, out)
        } else {
            node.handle_delivered_source(rbuf, len, now, out)
        };
    });
}

/// What a `--kernel-sources` worker reads from the XDP programs: the ring of copies and (on an
/// encoder) the counters of sources passed on untagged.
struct Kernel {
    tap: Option<RingBuf>,
    untagged: Option<OwnedFd>,
}

fn worker(
    mut node: Srv6Node,
    tun: Tun,
    decap: Option<Tun>,
    xdp: Option<XdpIo>,
    kernel: Kernel,
    stop: Arc<StopFlag>,
    ctl: Arc<Control>,
) {
    let Kernel { mut tap, untagged } = kernel;
    if let Err(e) = tun.set_nonblocking(true) {
        tracing::error!("nonblocking TUN: {e}");
        return;
    }
    let mut buf = vec![0u8; BUF_LEN];
    let tagged = node.is_encoder();
    let mut tap_buf = if tap.is_some() {
        vec![0u8; BUF_LEN]
    } else {
        Vec::new()
    };
    let max_sleep = if tap.is_some() {
        TAP_MAX_SLEEP
    } else {
        Duration::from_millis(100)
    };
    let mut fds = vec![tun.as_raw_fd()];
    fds.extend(xdp.iter().flat_map(|x| x.fds()));
    // Readable while records wait; the programs wake us only now and then (see `SourceTag`).
    fds.extend(tap.as_ref().map(RingBuf::fd));
    let mut housekeeping = Housekeeping::new(ctl.clone(), Instant::now());
    // Overload = packets dropped at the SID device's queue (see `engine::load`).
    let mut drops = DropWatch::new(tun.name(), false, LOAD_PERIOD);
    let m = ctl.metrics.clone();
    let mut path_generation = ctl.path_generation();
    let mut out = Out {
        tun: &tun,
        decap: decap.as_ref(),
        xdp,
        metrics: &m,
        now: Instant::now(),
    };
    let xdp_socks = out.xdp.as_ref().map_or(0, XdpIo::len);
    // After a full batch the queue very likely holds more: read again without a `poll`.
    let mut full = false;
    // Whether to read the TUN device this round. With AF_XDP it rarely has anything, and a
    // read that finds it empty is a system call per batch: after a `poll` it is read only when
    // the `poll` said so; in a run of rounds without `poll` (the sockets kept us busy) every
    // `TUN_EVERY`th round, so it is not starved.
    let mut tun_due = true;
    let mut rounds_without_poll = 0u32;
    while !stop.stopped() {
        if full {
            rounds_without_poll += 1;
            tun_due = tun_due || rounds_without_poll.is_multiple_of(TUN_EVERY);
        } else {
            rounds_without_poll = 0;
            let wait = runtime::poll_wait(Instant::now(), node.poll_timeout(), max_sleep);
            tun_due = wait.is_zero()
                || match poll_readable(&fds, wait) {
                    Ok(ready) => xdp_socks == 0 || ready & 1 != 0,
                    Err(_) => true,
                };
        }
        if ctl.path_generation() != path_generation {
            path_generation = ctl.path_generation();
            let c = ctl.path_change();
            if let Err(e) = node.set_path_policy(c.kind, c.repair, Instant::now()) {
                tracing::warn!("path policy change refused: {e}");
            }
        }
        // One clock read per batch: the packets of a batch arrived within microseconds.
        let now = Instant::now();
        out.now = now;
        if let Some(ring) = tap.as_mut() {
            drain_ring(ring, tagged, &mut node, &mut tap_buf, &mut out);
        }
        let mut got = 0;
        while tun_due && got < BATCH {
            match tun.recv(&mut buf) {
                Ok(n) => {
                    got += 1;
                    let _ = node.handle_packet(&mut buf, n, now, &mut out);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("TUN read: {e}");
                    break;
                }
            }
        }
        full = got == BATCH;
        // A full TUN batch: it likely holds more, read it next round too.
        tun_due = full;
        for i in 0..xdp_socks {
            let mut got = 0;
            while got < BATCH {
                let Some(n) = out.xdp.as_mut().and_then(|x| x.recv(i, &mut buf)) else {
                    break;
                };
                got += 1;
                if let Some(ring) = tap.as_mut() {
                    drain_ring(ring, tagged, &mut node, &mut tap_buf, &mut out);
                }
                let _ = node.handle_packet(&mut buf, n, now, &mut out);
            }
            add(&m.global.xdp_received, got as u64);
            full |= got == BATCH;
        }
        let now = Instant::now();
        out.now = now;
        if node.poll_timeout().is_some_and(|t| t <= now) {
            node.handle_timeout(now, &mut out);
        }
        if let Some(x) = out.xdp.as_mut() {
            x.flush();
        }
        // Only a decoder-only node's queue drops are the decoder's (see
        // `Srv6Node::add_local_drops`).
        let encodes = node.is_encoder();
        let published = housekeeping.tick(now, node.coder(), || {
            let dropped = drops.new_drops() + out.xdp.as_mut().map_or(0, XdpIo::new_drops);
            QueueDrops {
                queue_dropped: dropped > 0,
                for_decoder: if encodes { 0 } else { dropped },
            }
        });
        if let (true, Some(u)) = (published, &untagged) {
            publish_untagged(u, &m);
        }
    }
    node.coder().publish_stats();
}
