//! `hirt bench udp`: TCP goodput through the UDP tunnel and what it costs hirt in CPU (root).
//!
//! ```text
//!  client ns [TCP senders -> hirt udp -c] --veth--> server ns [hirt udp -s -> TCP receivers]
//! ```
//!
//! Configurations, each with fresh hirt instances in this process: plain TCP over the veth (no
//! tunnel: what the machine does without hirt), the tunnel with TUN offloads (the default), and
//! without (`--no-tun-offload`). Each runs `--flows` TCP connections for `--duration` seconds,
//! best of `--rounds`. The CPU time of the hirt worker threads (both peers, from
//! `/proc/self/task/*/stat`) gives "Gbit/s per hirt core"; the TCP senders and receivers and
//! the kernel work done in their threads are not counted. With `--loss`, random loss per
//! datagram on the underlay both ways (an nftables rule, [`hirt_os::nft`]; the veths
//! get one segment per packet, like a wire).

mod config;
mod cpu;
mod tcp;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use hirt_linux::config::{UdpConfig, UdpRole};
use hirt_linux::netns::{self, Underlay};
use hirt_linux::udp;
use hirt_os::nft;

pub use config::{UdpBenchConfig, UdpBenchConfigError};
use cpu::threads_cpu;
use tcp::transfer;

/// One configuration's best run.
#[derive(Debug, Clone, Serialize)]
pub struct UdpRun {
    /// Configuration name.
    pub name: String,
    /// Goodput of every round, Gbit/s.
    pub rounds_gbps: Vec<f64>,
    /// Goodput of the best round (TCP payload bytes received), Gbit/s.
    pub gbps: f64,
    /// CPU cores the hirt workers of both peers used on average (0 without the tunnel).
    pub hirt_cores: f64,
    /// Goodput per hirt core, Gbit/s (0 without the tunnel).
    pub gbps_per_hirt_core: f64,
    /// Losses the decoders saw, and how many they recovered.
    pub losses: u64,
    /// Recovered packets.
    pub recovered: u64,
    /// TSO packets cut into segments / coalesced writes (both peers).
    pub tun_segmented: u64,
    /// Coalesced writes (both peers).
    pub tun_coalesced: u64,
    /// Datagrams the peers sent on the underlay: sources, repairs and feedback (both ways).
    pub datagrams_sent: u64,
    /// Of the underlay's datagrams, those the `--loss` rule dropped (both ways).
    pub underlay_drops: u64,
}

const SERVER: &str = "10.79.0.1";
/// The tunnel server's UDP port.
const TUNNEL_PORT: u16 = 4098;

/// Key files of the two peers (generated once per process): (private key file, its public
/// key) of the server, then of the client.
fn peer_keys() -> &'static [(std::path::PathBuf, String); 2] {
    static KEYS: std::sync::OnceLock<[(std::path::PathBuf, String); 2]> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        ["server", "client"].map(|who| {
            let path = std::env::temp_dir()
                .join(format!("hirt-bench-udp-{}-{who}.key", std::process::id()));
            let public = udp::keys::write_new_private_key(&path).expect("writing a key file");
            (path, public)
        })
    })
}

fn peer_args(server: bool, args: &UdpBenchConfig, offload: bool, tag: &str) -> UdpConfig {
    let [s_key, c_key] = peer_keys();
    let (ours, theirs) = if server {
        (s_key, c_key)
    } else {
        (c_key, s_key)
    };
    UdpConfig {
        role: Some(if server {
            UdpRole::Server
        } else {
            UdpRole::Client
        }),
        listen: server.then(|| "0.0.0.0:4098".into()),
        remote: (!server).then(|| "192.168.79.1:4098".into()),
        private_key_file: Some(ours.0.clone()),
        peer_public_key: Some(theirs.1.clone()),
        fec: args.fec.clone(),
        dev: "hbu0".into(),
        tun_addr: Some(
            if server {
                "10.79.0.1/24"
            } else {
                "10.79.0.2/24"
            }
            .into(),
        ),
        threads: args.threads,
        no_tun_offload: !offload,
        overload_threshold: args
            .overload_threshold
            .unwrap_or(UdpConfig::default().overload_threshold),
        control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
        repair_lag: args.repair_lag,
        ..Default::default()
    }
}

fn one_run(
    u: &Underlay,
    args: &UdpBenchConfig,
    name: &str,
    tunnel: Option<bool>,
) -> anyhow::Result<UdpRun> {
    let (c, s) = (&u.client, &u.server);
    let dur = Duration::from_secs_f64(args.duration);
    let mut run = UdpRun {
        name: name.into(),
        rounds_gbps: Vec::new(),
        gbps: 0.0,
        hirt_cores: 0.0,
        gbps_per_hirt_core: 0.0,
        losses: 0,
        recovered: 0,
        tun_segmented: 0,
        tun_coalesced: 0,
        datagrams_sent: 0,
        underlay_drops: 0,
    };
    let Some(offload) = tunnel else {
        let bytes = transfer(c, s, "192.168.79.1:7100", args.flows, dur)?;
        run.gbps = bytes as f64 * 8.0 / dur.as_secs_f64() / 1e9;
        run.rounds_gbps.push(run.gbps);
        return Ok(run);
    };
    let tag = format!("{}-{name}", c.name());
    let a = peer_args(true, args, offload, &tag);
    let server = s
        .spawn(move || udp::start(a).map_err(std::io::Error::other))
        .join()
        .expect("join")?;
    let a = peer_args(false, args, offload, &tag);
    let client = c
        .spawn(move || udp::start(a).map_err(std::io::Error::other))
        .join()
        .expect("join")?;
    let lost = || {
        if args.loss > 0.0 {
            u.lost().unwrap_or(0)
        } else {
            0
        }
    };
    let lost0 = lost();
    let cpu0 = threads_cpu("hirt-udp");
    let t0 = Instant::now();
    let bytes = transfer(c, s, &format!("{SERVER}:7101"), args.flows, dur)?;
    // The CPU time covers set-up and tear-down of the connections too, so it is divided by
    // the whole time, not only the measured part.
    let wall = t0.elapsed().as_secs_f64();
    let cores = (threads_cpu("hirt-udp") - cpu0) / wall;
    let sum = |m: &hirt_linux::metrics::Metrics,
               f: fn(&hirt_linux::metrics::StreamCounters) -> &AtomicU64| {
        m.streams
            .iter()
            .map(|x| f(x).load(Ordering::Relaxed))
            .sum::<u64>()
    };
    for m in [&server.metrics, &client.metrics] {
        run.losses += sum(m, |x| &x.losses);
        run.recovered += sum(m, |x| &x.recovered);
        run.tun_segmented += m.global.tun_segmented.load(Ordering::Relaxed);
        run.tun_coalesced += m.global.tun_coalesced.load(Ordering::Relaxed);
        run.datagrams_sent += sum(m, |x| &x.enc_packets_out)
            + sum(m, |x| &x.repairs_sent)
            + sum(m, |x| &x.feedback_sent);
    }
    run.underlay_drops = lost().saturating_sub(lost0);
    client.stop();
    server.stop();
    run.gbps = bytes as f64 * 8.0 / dur.as_secs_f64() / 1e9;
    run.rounds_gbps.push(run.gbps);
    run.hirt_cores = cores;
    run.gbps_per_hirt_core = bytes as f64 * 8.0 / wall / 1e9 / cores.max(1e-9);
    Ok(run)
}

/// Runs `hirt bench udp`: prints the report (JSON) on stdout, progress on stderr.
pub fn run(args: UdpBenchConfig) -> anyhow::Result<()> {
    args.validate()?;
    anyhow::ensure!(netns::available(), "hirt bench udp needs root and iproute2");
    if args.loss > 0.0 {
        nft::require()?;
    }
    let u = Underlay::new(&netns::unique_name("hbu"), "192.168.79")?;
    if args.loss > 0.0 {
        u.like_a_wire()?;
        u.lose(TUNNEL_PORT, args.loss)?;
    }
    let configs: [(&str, Option<bool>); 3] = [
        ("no_tunnel", None),
        ("tunnel_offload", Some(true)),
        ("tunnel_no_offload", Some(false)),
    ];
    let mut runs: Vec<UdpRun> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for (name, tunnel) in configs {
            let r = one_run(&u, &args, name, tunnel)?;
            if !args.json {
                eprintln!(
                    "round {round} {name}: {:.2} Gbit/s, hirt {:.2} cores, {:.2} Gbit/s per hirt core",
                    r.gbps, r.hirt_cores, r.gbps_per_hirt_core
                );
            }
            match runs.iter_mut().find(|b| b.name == name) {
                None => runs.push(r),
                Some(best) => {
                    let mut rounds = std::mem::take(&mut best.rounds_gbps);
                    rounds.extend(&r.rounds_gbps);
                    if r.gbps > best.gbps {
                        *best = r;
                    }
                    best.rounds_gbps = rounds;
                }
            }
        }
    }
    let by = |n: &str| runs.iter().find(|r| r.name == n).cloned().expect("run");
    let (on, off) = (by("tunnel_offload"), by("tunnel_no_offload"));
    let summary = serde_json::json!({
        "gbps_no_tunnel": by("no_tunnel").gbps,
        "gbps": on.gbps,
        "gbps_per_hirt_core": on.gbps_per_hirt_core,
        "gbps_no_offload": off.gbps,
        "gbps_per_hirt_core_no_offload": off.gbps_per_hirt_core,
        "flows": args.flows,
        "threads": args.threads,
        "loss": args.loss,
        "underlay_loss_share": on.underlay_drops as f64 / on.datagrams_sent.max(1) as f64,
        "recovered_ratio": if on.losses > 0 { on.recovered as f64 / on.losses as f64 } else { 1.0 },
    });
    let report = serde_json::json!({ "runs": runs, "summary": summary });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}
