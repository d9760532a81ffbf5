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

use anyhow::{bail, Context};
use hirt_core::{ControllerConfig, FecMode};
use hirt_wire::tlv::TlvTypes;

use crate::cli::Srv6Args;
use crate::coder::CoderSettings;
use crate::control::{self, Control};
use crate::metrics::{add, Metrics};
use crate::netlink::{if_index, Installed, Netlink, Route, Rule, Seg6Local};
use crate::runtime::{self, StopFlag};
use crate::srv6::load::{self, DropWatch, LoadMeter, LOAD_PERIOD};
use crate::srv6::xdp_io::XdpIo;
use crate::srv6::{AuthKey, Behavior, Egress, NodeConfig, Shared, Srv6Node, BUF_LEN};
use crate::tun::{poll_readable, Tun};
use crate::xdp::{RingBuf, SidFilter, SourceTag, SourceTap, XdpProgram};

/// Default table hirt fills for End.DX6.
pub const DX6_TABLE: u32 = 4869;
const MAIN_TABLE: u32 = 254;
/// Transmit queue length of our TUN devices (the kernel default is 500).
pub const TUN_TXQLEN: u32 = 8192;

/// A running SRv6 instance (in-process; the CLI waits on it).
#[derive(Debug)]
pub struct Srv6Handle {
    stop: Arc<StopFlag>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    installed: Installed,
    _control: Option<control::ControlServer>,
    /// XDP programs of `--xdp`, detached when dropped (after the workers stopped).
    _xdp: Vec<SidFilter>,
}

impl Srv6Handle {
    /// Stops the workers, removes routes and rules.
    pub fn stop(mut self) {
        // Routes first: closing the TUN queues deletes the device and its routes with it.
        self.installed.remove_all();
        self.stop.stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// Waits until a signal asks to stop, then stops.
    pub fn wait(self) {
        while !self.stop.stopped() {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.stop();
    }
}

impl Drop for Srv6Handle {
    fn drop(&mut self) {
        self.installed.remove_all();
        self.stop.stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Runs `hirt srv6` until SIGINT/SIGTERM.
pub fn run(args: Srv6Args) -> anyhow::Result<()> {
    runtime::install_signal_handlers();
    let h = start(args)?;
    tracing::info!("hirt srv6 running");
    h.wait();
    Ok(())
}

/// Starts an instance in the calling thread's network namespace (workers inherit it).
pub fn start(args: Srv6Args) -> anyhow::Result<Srv6Handle> {
    let role = args.role.as_deref().unwrap_or("both");
    let (enc, dec) = match role {
        "encoder" => (true, false),
        "decoder" => (false, true),
        "both" => (true, true),
        r => bail!("--role must be encoder, decoder or both, not `{r}`"),
    };
    let enc_sid = args.enc_sid.context("--enc-sid is required")?;
    let dec_sid = args.dec_sid.context("--dec-sid is required")?;
    let behavior: Behavior = args
        .behavior
        .as_deref()
        .unwrap_or("dt6")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let fec_s = crate::cli::fec_string(args.fec.as_deref(), args.rs.as_deref());
    let fec = FecMode::parse_with_window(&fec_s, args.window.unwrap_or(hirt_core::DEFAULT_WINDOW))
        .map_err(|e| anyhow::anyhow!("--fec {fec_s}: {e}"))?;
    let threads = args.threads.unwrap_or(1).clamp(1, 64);
    let dev = args.dev.clone().unwrap_or_else(|| "hirt0".into());
    let mut tlv = TlvTypes::default();
    if let Some(t) = &args.tlv_types {
        let v: Vec<u8> = t
            .split(',')
            .map(|x| x.trim().parse())
            .collect::<Result<_, _>>()?;
        anyhow::ensure!(
            v.len() == 4,
            "--tlv-types wants source,repair,feedback,auth"
        );
        tlv = TlvTypes {
            source: v[0],
            repair: v[1],
            feedback: v[2],
            auth: v[3],
        };
    }
    let auth = match &args.hmac_key {
        Some(k) => Some(AuthKey {
            key_id: args.key_id.unwrap_or(1),
            key: crate::cli::parse_key(k)?,
            rfc8754: args.rfc8754_hmac,
            sources: args.auth_sources,
        }),
        None => {
            anyhow::ensure!(!args.auth_sources, "--auth-sources needs --hmac-key");
            None
        }
    };
    let mut coder = CoderSettings::from_flags(
        args.overload_threshold,
        args.repair_delay_ms,
        args.repair_retries,
        args.repair_retry_gap_ms,
        args.in_order_ms,
    )?;
    let kernel_sources = args.kernel_sources;
    coder.repair_lag = match args.repair_lag {
        Some(lag) => {
            anyhow::ensure!(
                lag <= hirt_fec::rlc::MAX_REPAIR_LAG,
                "--repair-lag {lag}: at most {}",
                hirt_fec::rlc::MAX_REPAIR_LAG
            );
            lag
        }
        None if kernel_sources => KERNEL_SOURCES_REPAIR_LAG,
        None => 0,
    };
    if kernel_sources {
        anyhow::ensure!(
            enc != dec,
            "--kernel-sources is for an encoder or a decoder (--role encoder|decoder)"
        );
        anyhow::ensure!(
            args.xdp.as_ref().is_some_and(|d| !d.is_empty()),
            "--kernel-sources needs --xdp"
        );
        anyhow::ensure!(threads == 1, "--kernel-sources needs --threads 1");
        anyhow::ensure!(
            enc || behavior == Behavior::Dt6,
            "--kernel-sources on a decoder is the End.DT6 behaviour (--behavior dt6)"
        );
        anyhow::ensure!(
            !args.auth_sources && args.in_order_ms.is_none(),
            "--kernel-sources forwards sources before hirt sees them: not with --auth-sources \
             or --in-order-ms"
        );
    }
    let repair_tclass = args.repair_dscp.unwrap_or(0).min(63) << 2;
    let seed = args.seed.unwrap_or_else(crate::crypto::initial_counter);
    let metrics = Metrics::new(threads, &format!("srv6 {role}"));

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
    let table = args.table;
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
    nl.link_up_qlen(idx, Some(args.mtu.unwrap_or(9000)), Some(TUN_TXQLEN))?;
    let mut installed = Installed::default();
    if !args.no_routes {
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
        nl.link_up_qlen(didx, Some(args.mtu.unwrap_or(9000)), Some(TUN_TXQLEN))?;
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

    let ctl = Control::new(metrics.clone(), &fec.controller.to_string());
    let control_path = args
        .control
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(format!("/run/hirt-{dev}.sock")));
    let control_srv = control::start_operations(&control_path, &ctl, args.metrics, &metrics)?;

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
    let xdp_mode = args.xdp_mode.as_deref().unwrap_or("auto");
    let modes = crate::xdp::AttachMode::parse_list(xdp_mode)
        .with_context(|| format!("--xdp-mode must be auto, native or generic, not `{xdp_mode}`"))?;
    if let Some(devs) = args.xdp.as_ref().filter(|d| !d.is_empty()) {
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

    let stop = Arc::new(StopFlag::default());
    let mut workers = Vec::new();
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
        ecn_ce: args.ecn_ce,
        repair_tclass,
        seed,
        coder,
    };
    let shared = Shared::new(&base, threads, threads);
    for ((i, q), xdp) in queues.into_iter().enumerate().zip(xdp_ios) {
        let cfg = NodeConfig {
            stream: i as u16,
            ..base.clone()
        };
        let node = Srv6Node::with_shared(cfg, metrics.clone(), shared.clone());
        let decap = decap_iter.next();
        let stop = stop.clone();
        let ctl = ctl.clone();
        // One worker with --kernel-sources.
        let tap = tap_ring.take();
        let untagged = untagged.take();
        workers.push(
            std::thread::Builder::new()
                .name(format!("hirt-srv6-{i}"))
                .spawn(move || worker(node, q, decap, xdp, Kernel { tap, untagged }, stop, ctl))?,
        );
    }
    Ok(Srv6Handle {
        stop,
        workers,
        metrics,
        installed,
        _control: control_srv,
        _xdp: filters,
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

/// How many ESIs a repair may trail the decoder's newest source with `--kernel-sources`:
/// the kernel delivers sources as they come and the decoder takes their copies from its ring
/// whenever it runs, while a repair waits for the encoder to read its own ring, code it and
/// send it. On a busy machine the two ends can be milliseconds apart: 2048 ESIs is ~20 ms at
/// 100 kpps. With W = 200 the decoder then keeps 4096 sources instead of 512.
const KERNEL_SOURCES_REPAIR_LAG: u32 = 2048;
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

impl Out<'_> {
    fn emit(&mut self, e: Egress, pkt: &[u8]) {
        let dev = match (e, self.decap) {
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
        let emit = &mut |e, p: &[u8]| out.emit(e, p);
        let _ = if tagged {
            node.handle_tagged_source(rbuf, len, word(4), now, emit)
        } else {
            node.handle_delivered_source(rbuf, len, now, emit)
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
    let mut gen = ctl.generation();
    let mut last_publish = Instant::now();
    let mut meter = LoadMeter::new(last_publish, load::thread_cpu_time(), LOAD_PERIOD);
    // Overload = packets dropped at the SID device's queue (see `srv6::load`).
    let mut drops = DropWatch::new(tun.name(), false, LOAD_PERIOD);
    let m = ctl.metrics.clone();
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
                    let _ = node.handle_packet(&mut buf, n, now, &mut |e, p| out.emit(e, p));
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
                let _ = node.handle_packet(&mut buf, n, now, &mut |e, p| out.emit(e, p));
            }
            add(&m.global.xdp_received, got as u64);
            full |= got == BATCH;
        }
        let now = Instant::now();
        out.now = now;
        if meter.due(now) {
            let dropped = drops.new_drops() + out.xdp.as_mut().map_or(0, XdpIo::new_drops);
            if dropped > 0 {
                meter.queue_dropped();
                node.add_local_drops(dropped);
            }
            node.set_cpu_load(meter.close(now, load::thread_cpu_time()));
        }
        if node.poll_timeout().is_some_and(|t| t <= now) {
            node.handle_timeout(now, &mut |e, p| out.emit(e, p));
        }
        if let Some(x) = out.xdp.as_mut() {
            x.flush();
        }
        let g = ctl.generation();
        if g != gen {
            gen = g;
            if let Ok(c) = ctl.controller().parse::<ControllerConfig>() {
                node.set_controller(&c);
            }
        }
        if now.duration_since(last_publish) > Duration::from_millis(200) {
            node.publish_stats();
            if let Some(u) = &untagged {
                publish_untagged(u, &m);
            }
            last_publish = now;
        }
    }
    node.publish_stats();
}
