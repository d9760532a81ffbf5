//! `hirt lab --flood RATE`: junk at the UDP tunnel's server port while legitimate traffic runs
//! through the tunnel.
//!
//! The lab topology (client, emulated link, server) runs a UDP tunnel; a fourth namespace, the
//! flooder, has a veth straight into the server's namespace. Through the tunnel run a paced,
//! checked datagram stream and a TCP bulk stream, client to server ([`traffic`]). The run
//! measures one window of `duration` without flood (the baseline), then one with the flooder
//! sending datagrams of a [`FloodKind`] to the server's port at the rate asked for, in batches
//! of 64 (`sendmmsg`), and reports:
//! - the goodput of both streams in each window, and their ratio (the goal: at least 0.95);
//! - the rate that arrived: the kernel's packet counter of the server's device towards the
//!   flooder, and the server namespace's UDP receive-buffer drops;
//! - the hirt server's CPU time (`/proc/PID/stat`, all threads) in each window, and the extra
//!   CPU per junk datagram hirt read (counted by its own drop counters);
//! - its resident set before and after the flood;
//! - the server's drop counters that moved (`hirt status`: `auth_failures` counts data-looking
//!   junk, short datagrams and replays; `handshake_dropped` handshake-looking junk;
//!   `handshake_rate_limited` initiations refused by the token buckets).
//!
//! Replays and truncations need datagrams of the real session: the run records the client's
//! datagrams to the server's port (a packet socket on the server's underlay device) before
//! the baseline window.

pub mod junk;
mod net;
mod traffic;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

pub use junk::FloodKind;

use crate::config::LabConfig;
use crate::emu::Emulator;
use crate::netns;
use crate::profile::links;
use crate::topo::{self, Topology};
use crate::tuning::tunnel_args;
use crate::tunnel::{Side, Tunnel, TunnelMode};

/// The tunnel server's UDP port in the lab.
const TUNNEL_PORT: u16 = 4096;
/// Port of the paced stream; the TCP stream uses the next one.
const PORT: u16 = 5401;
/// Traffic runs this long before the baseline window (TCP's slow start, the recording).
const WARM_UP: Duration = Duration::from_secs(3);
/// Pause after the flooder starts and before its window opens.
const SETTLE: Duration = Duration::from_secs(1);
/// Datagrams recorded for replays.
const RECORD_MAX: usize = 4096;
/// Distinct junk datagrams the flooder cycles through.
const POOL: usize = 8192;
/// Share of the baseline goodput legitimate traffic must keep under the flood.
pub const GOAL_RATIO: f64 = 0.95;

/// What `hirt lab --flood` does besides the lab's own settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FloodConfig {
    /// Junk datagrams per second.
    pub rate_pps: u64,
    /// What the junk is.
    pub kind: FloodKind,
    /// Datagrams per second of the paced stream (1000 bytes each).
    pub paced_pps: u32,
    /// Run a TCP bulk stream beside the paced one.
    pub tcp: bool,
}

/// One measurement window's samples.
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    cpu_s: f64,
    rss_kb: u64,
    datagrams: u64,
    datagram_bytes: u64,
    bad: u64,
    tcp_bytes: u64,
    dev: net::DevCounters,
    udp: net::UdpCounters,
    hirt: BTreeMap<String, u64>,
    flood_sent: u64,
}

/// Goodput of one stream in both windows.
#[derive(Debug, Clone, Serialize)]
pub struct Goodput {
    /// Without flood, Mbit/s.
    pub baseline_mbps: f64,
    /// With flood, Mbit/s.
    pub flood_mbps: f64,
    /// With / without.
    pub ratio: f64,
}

/// One window's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Length, seconds.
    pub seconds: f64,
    /// Paced stream: datagrams that arrived intact and first, per second.
    pub paced_pps: f64,
    /// Paced stream: corrupt or duplicated datagrams.
    pub paced_bad: u64,
    /// Datagrams the flooder's kernel took, per second.
    pub flood_sent_pps: f64,
    /// Packets received on the server's device towards the flooder, per second.
    pub flood_arrived_pps: f64,
    /// Packets that device dropped.
    pub flood_dev_dropped: u64,
    /// UDP datagrams the server namespace delivered to its sockets (junk, tunnel, the paced
    /// stream after decapsulation), per second.
    pub udp_delivered_pps: f64,
    /// UDP datagrams the server namespace dropped for a full socket buffer (junk and tunnel).
    pub udp_rcvbuf_errors: u64,
    /// Junk datagrams hirt read and dropped (the drop counters below, summed), per second.
    pub junk_seen_pps: f64,
    /// The hirt server's CPU time, seconds per second.
    pub server_cpu: f64,
    /// Global counters of the hirt server that moved in the window.
    pub server_counters: BTreeMap<String, u64>,
}

/// The report of `hirt lab --flood`.
#[derive(Debug, Clone, Serialize)]
pub struct FloodReport {
    /// What was asked for.
    pub config: FloodConfig,
    /// Datagrams recorded from the session for replays and truncations.
    pub recorded: usize,
    /// The window without flood.
    pub baseline: Window,
    /// The window with flood.
    pub flood: Window,
    /// Paced stream goodput.
    pub paced: Goodput,
    /// TCP bulk goodput (absent without `tcp`).
    pub tcp: Option<Goodput>,
    /// Extra server CPU per junk datagram hirt read, µs (flood window minus baseline).
    pub cpu_per_junk_us: Option<f64>,
    /// Extra server CPU per junk datagram that arrived at the server's device, µs.
    pub cpu_per_arrived_us: Option<f64>,
    /// Server resident set before the baseline window, kB.
    pub rss_before_kb: u64,
    /// Server resident set when the flood window opened (the flood running for a second), kB.
    pub rss_flood_start_kb: u64,
    /// Server resident set after the flood window, kB.
    pub rss_after_kb: u64,
    /// Every stream kept at least 95% of its baseline goodput.
    pub goal_met: bool,
}

/// The drop counters of a hirt UDP server that count junk.
pub const JUNK_COUNTERS: [&str; 3] = [
    "auth_failures",
    "handshake_dropped",
    "handshake_rate_limited",
];

/// Runs a flood lab: builds the topology and the UDP tunnel, measures the baseline and the
/// flood windows, tears everything down.
pub fn flood(args: &LabConfig, cfg: &FloodConfig) -> anyhow::Result<FloodReport> {
    if !crate::sys::is_root() {
        bail!("hirt lab --flood builds network namespaces and needs root (run it with sudo)");
    }
    if args.tunnel != TunnelMode::Udp {
        bail!("--flood floods the UDP tunnel's port: use --tunnel udp");
    }
    if cfg.rate_pps == 0 || cfg.paced_pps == 0 {
        bail!("the flood rate and the paced stream's rate must be at least 1");
    }
    args.validate()?;
    let (up, down) = links(args);
    netns::install_signal_handler();
    netns::remove_stale();
    let _teardown = netns::Teardown;
    let topo = Topology::build().context("building the lab topology")?;
    let _emu = Emulator::start(Some(&topo.link), "la", "lb", &up, &down)
        .context("starting the link emulator")?;
    let extra = tunnel_args(args.tunnel_args.as_deref(), &up, &down, false);
    let tunnel = Tunnel::start(&topo, TunnelMode::Udp, Some(&extra), args.seed)?;
    let server_pid = *tunnel
        .pids(Side::Server)
        .first()
        .context("no tunnel server")?;
    let target = SocketAddr::new(topo::UNDER_B4.parse()?, TUNNEL_PORT);
    let flood_ns = net::wire_flooder(&topo.server, target)?;

    let (client_app, server_app) = (Topology::client_app(false), Topology::server_app(false));
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(traffic::Totals::default());
    let mut threads = vec![traffic::receive_paced(
        &topo.server,
        SocketAddr::new(server_app, PORT),
        totals.clone(),
        stop.clone(),
    )?];
    if cfg.tcp {
        threads.push(traffic::tcp_sink(
            &topo.server,
            SocketAddr::new(server_app, PORT + 1),
            totals.clone(),
            stop.clone(),
        )?);
        threads.push(traffic::tcp_bulk(
            &topo.client,
            client_app,
            SocketAddr::new(server_app, PORT + 1),
            stop.clone(),
        ));
    }
    let sender = traffic::send_paced(
        &topo.client,
        client_app,
        SocketAddr::new(server_app, PORT),
        cfg.paced_pps,
        stop.clone(),
    );
    let recorded = net::record(&topo.server, "b0", TUNNEL_PORT, RECORD_MAX, WARM_UP)?;
    let pool = junk::pool(cfg.kind, &recorded, POOL, args.seed)?;

    let flood_counts = Arc::new(net::FloodCounts::default());
    let sample = |tunnel: &Tunnel| -> anyhow::Result<Sample> {
        let (cpu_s, rss_kb) = net::process_usage(server_pid)?;
        Ok(Sample {
            at: Instant::now(),
            cpu_s,
            rss_kb,
            datagrams: totals.datagrams.load(Ordering::Relaxed),
            datagram_bytes: totals.datagram_bytes.load(Ordering::Relaxed),
            bad: totals.bad.load(Ordering::Relaxed),
            tcp_bytes: totals.tcp_bytes.load(Ordering::Relaxed),
            dev: net::dev_counters(&topo.server, net::SERVER_FLOOD_DEV)?,
            udp: net::udp_counters(&topo.server)?,
            hirt: server_counters(tunnel),
            flood_sent: flood_counts.sent.load(Ordering::Relaxed),
        })
    };
    let b0 = sample(&tunnel)?;
    std::thread::sleep(args.duration);
    let b1 = sample(&tunnel)?;

    let flood_stop = Arc::new(AtomicBool::new(false));
    let flooder = net::flood(
        &flood_ns,
        target,
        pool,
        cfg.rate_pps,
        flood_counts.clone(),
        flood_stop.clone(),
    );
    std::thread::sleep(SETTLE);
    let f0 = sample(&tunnel)?;
    std::thread::sleep(args.duration);
    let f1 = sample(&tunnel)?;
    flood_stop.store(true, Ordering::Relaxed);
    netns::join(flooder)?;
    stop.store(true, Ordering::Relaxed);
    let _ = netns::join(sender);
    for t in threads {
        netns::join(t)?;
    }

    let baseline = window(&b0, &b1);
    let flood = window(&f0, &f1);
    let paced = goodput(&b0, &b1, &f0, &f1, |s| s.datagram_bytes);
    let tcp = cfg
        .tcp
        .then(|| goodput(&b0, &b1, &f0, &f1, |s| s.tcp_bytes));
    let extra_cpu = flood.server_cpu - baseline.server_cpu;
    let per = |pps: f64| (pps > 0.0).then(|| extra_cpu / pps * 1e6);
    let goal_met = paced.ratio >= GOAL_RATIO && tcp.as_ref().is_none_or(|t| t.ratio >= GOAL_RATIO);
    Ok(FloodReport {
        config: cfg.clone(),
        recorded: recorded.len(),
        cpu_per_junk_us: per(flood.junk_seen_pps - baseline.junk_seen_pps),
        cpu_per_arrived_us: per(flood.flood_arrived_pps),
        baseline,
        flood,
        paced,
        tcp,
        rss_before_kb: b0.rss_kb,
        rss_flood_start_kb: f0.rss_kb,
        rss_after_kb: f1.rss_kb,
        goal_met,
    })
}

/// The hirt server's global counters (`hirt status`).
fn server_counters(tunnel: &Tunnel) -> BTreeMap<String, u64> {
    for (_, raw) in tunnel.raw_status() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&raw) else {
            continue;
        };
        if v["status"]["mode"].as_str() != Some("udp server") {
            continue;
        }
        if let Some(g) = v["status"]["global"].as_object() {
            return g
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect();
        }
    }
    BTreeMap::new()
}

fn seconds(a: &Sample, b: &Sample) -> f64 {
    b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-9)
}

fn window(a: &Sample, b: &Sample) -> Window {
    let s = seconds(a, b);
    let server_counters: BTreeMap<String, u64> = b
        .hirt
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(a.hirt.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect();
    let junk: u64 = JUNK_COUNTERS
        .iter()
        .map(|k| server_counters.get(*k).copied().unwrap_or(0))
        .sum();
    Window {
        seconds: s,
        paced_pps: (b.datagrams - a.datagrams) as f64 / s,
        paced_bad: b.bad - a.bad,
        flood_sent_pps: (b.flood_sent - a.flood_sent) as f64 / s,
        flood_arrived_pps: b.dev.rx_packets.saturating_sub(a.dev.rx_packets) as f64 / s,
        flood_dev_dropped: b.dev.rx_dropped.saturating_sub(a.dev.rx_dropped),
        udp_delivered_pps: b.udp.in_datagrams.saturating_sub(a.udp.in_datagrams) as f64 / s,
        udp_rcvbuf_errors: b.udp.rcvbuf_errors.saturating_sub(a.udp.rcvbuf_errors),
        junk_seen_pps: junk as f64 / s,
        server_cpu: (b.cpu_s - a.cpu_s) / s,
        server_counters,
    }
}

fn goodput(
    b0: &Sample,
    b1: &Sample,
    f0: &Sample,
    f1: &Sample,
    bytes: impl Fn(&Sample) -> u64,
) -> Goodput {
    let mbps = |a: &Sample, b: &Sample| {
        bytes(b).saturating_sub(bytes(a)) as f64 * 8.0 / seconds(a, b) / 1e6
    };
    let (baseline_mbps, flood_mbps) = (mbps(b0, b1), mbps(f0, f1));
    Goodput {
        baseline_mbps,
        flood_mbps,
        ratio: if baseline_mbps > 0.0 {
            flood_mbps / baseline_mbps
        } else {
            0.0
        },
    }
}

impl FloodReport {
    /// The report as a table for people.
    pub fn table(&self) -> String {
        let c = &self.config;
        let (b, f) = (&self.baseline, &self.flood);
        let mut out = format!(
            "flood: {} pps of {:?} junk at the UDP tunnel server ({} datagrams of the session recorded)\n\n",
            c.rate_pps, c.kind, self.recorded
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let mut row = |name: &str, a: String, b: String| {
            out.push_str(&format!("{name:<44} {a:>14} {b:>14}\n"));
        };
        row("", "no flood".into(), "flood".into());
        row(
            "paced stream goodput, Mbit/s",
            format!("{:.2}", self.paced.baseline_mbps),
            format!("{:.2}", self.paced.flood_mbps),
        );
        if let Some(t) = &self.tcp {
            row(
                "TCP bulk goodput, Mbit/s",
                format!("{:.2}", t.baseline_mbps),
                format!("{:.2}", t.flood_mbps),
            );
        }
        row(
            "junk sent by the flooder, pps",
            format!("{:.0}", b.flood_sent_pps),
            format!("{:.0}", f.flood_sent_pps),
        );
        row(
            "junk arrived at the server's device, pps",
            format!("{:.0}", b.flood_arrived_pps),
            format!("{:.0}", f.flood_arrived_pps),
        );
        row(
            "junk read and dropped by hirt, pps",
            format!("{:.0}", b.junk_seen_pps),
            format!("{:.0}", f.junk_seen_pps),
        );
        row(
            "UDP receive-buffer drops (server ns)",
            b.udp_rcvbuf_errors.to_string(),
            f.udp_rcvbuf_errors.to_string(),
        );
        row(
            "hirt server CPU, s/s",
            format!("{:.3}", b.server_cpu),
            format!("{:.3}", f.server_cpu),
        );
        out.push('\n');
        out.push_str(&format!(
            "goodput ratio: paced {:.3}{}; goal >= {GOAL_RATIO}: {}\n",
            self.paced.ratio,
            self.tcp
                .as_ref()
                .map_or(String::new(), |t| format!(", TCP {:.3}", t.ratio)),
            if self.goal_met { "met" } else { "missed" }
        ));
        out.push_str(&format!(
            "server CPU per junk datagram: {} µs (read by hirt), {} µs (arrived)\n",
            opt(self.cpu_per_junk_us),
            opt(self.cpu_per_arrived_us)
        ));
        out.push_str(&format!(
            "server RSS: {} kB before, {} kB a second into the flood, {} kB after\n",
            self.rss_before_kb, self.rss_flood_start_kb, self.rss_after_kb
        ));
        out.push_str(&format!(
            "server counters during the flood: {:?}\n",
            f.server_counters
        ));
        out
    }
}

/// Runs `hirt lab --flood` and prints its report (JSON with `args.json`).
pub fn run(args: &LabConfig, cfg: &FloodConfig) -> anyhow::Result<()> {
    let report = flood(args, cfg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
