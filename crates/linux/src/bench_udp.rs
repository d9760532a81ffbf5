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
//! datagram on the underlay both ways (the veths get one segment per packet, like a wire).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::config::{UdpConfig, UdpRole};
use crate::netns::{self, NetNs};
use crate::udp;

/// Arguments of `hirt bench udp`.
#[derive(Debug, Clone, clap::Args)]
pub struct UdpBenchArgs {
    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Parallel TCP connections.
    #[arg(long, default_value_t = 8)]
    pub flows: usize,
    /// Worker threads of each peer (`hirt udp --threads`).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Random loss per datagram on the underlay, both ways (0 = none).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Runs per configuration; the best counts (other processes only ever slow a run down).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// FEC mode of the tunnel (`hirt udp --fec`).
    #[arg(long, default_value = "ours")]
    pub fec: String,
    /// Overload threshold of the peers (`hirt udp --overload-threshold`; 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
}

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
}

const SERVER: &str = "10.79.0.1";

/// CPU seconds used so far by this process's threads whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with(prefix))
        })
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
            Some((u + s) / hz)
        })
        .sum()
}

fn peer_args(server: bool, args: &UdpBenchArgs, offload: bool, tag: &str) -> UdpConfig {
    UdpConfig {
        role: Some(if server {
            UdpRole::Server
        } else {
            UdpRole::Client
        }),
        listen: server.then(|| "0.0.0.0:4098".into()),
        remote: (!server).then(|| "192.168.79.1:4098".into()),
        key: Some("hirt bench udp".into()),
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
        ..Default::default()
    }
}

/// `flows` TCP connections from `c` to `addr` for `dur`; returns payload bytes received.
fn transfer(c: &NetNs, s: &NetNs, addr: &str, flows: usize, dur: Duration) -> anyhow::Result<u64> {
    let a = addr.to_string();
    let listener = s
        .spawn(move || TcpListener::bind(a))
        .join()
        .expect("join")?;
    let received = Arc::new(AtomicU64::new(0));
    let r2 = received.clone();
    let acceptor = std::thread::spawn(move || {
        let mut readers = Vec::new();
        for _ in 0..flows {
            let Ok((mut k, _)) = listener.accept() else {
                break;
            };
            let r = r2.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let _ = k.set_read_timeout(Some(Duration::from_secs(10)));
                while let Ok(n) = k.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    r.fetch_add(n as u64, Ordering::Relaxed);
                }
            }));
        }
        for r in readers {
            let _ = r.join();
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for _ in 0..flows {
        let (a, stop) = (addr.to_string(), stop.clone());
        senders.push(c.spawn(move || {
            let mut k = None;
            for _ in 0..100 {
                match TcpStream::connect(&a) {
                    Ok(x) => {
                        k = Some(x);
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            let mut k = k.ok_or_else(|| std::io::Error::other("no connection"))?;
            k.set_write_timeout(Some(Duration::from_secs(10)))?;
            let buf = vec![0x5au8; 256 << 10];
            while !stop.load(Ordering::Relaxed) {
                k.write_all(&buf)?;
            }
            k.shutdown(std::net::Shutdown::Write)
        }));
    }
    // Count from the moment data flows, so connection set-up is not timed.
    let t0 = Instant::now();
    while received.load(Ordering::Relaxed) == 0 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = received.load(Ordering::Relaxed);
    std::thread::sleep(dur);
    let bytes = received.load(Ordering::Relaxed) - start;
    stop.store(true, Ordering::Relaxed);
    for h in senders {
        h.join().expect("join").context("TCP sender")?;
    }
    let _ = acceptor.join();
    Ok(bytes)
}

fn one_run(
    c: &NetNs,
    s: &NetNs,
    args: &UdpBenchArgs,
    name: &str,
    tunnel: Option<bool>,
) -> anyhow::Result<UdpRun> {
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
    let cpu0 = threads_cpu("hirt-udp");
    let t0 = Instant::now();
    let bytes = transfer(c, s, &format!("{SERVER}:7101"), args.flows, dur)?;
    // The CPU time covers set-up and tear-down of the connections too, so it is divided by
    // the whole time, not only the measured part.
    let wall = t0.elapsed().as_secs_f64();
    let cores = (threads_cpu("hirt-udp") - cpu0) / wall;
    let sum = |m: &crate::metrics::Metrics,
               f: fn(&crate::metrics::StreamCounters) -> &AtomicU64| {
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
    }
    client.stop();
    server.stop();
    run.gbps = bytes as f64 * 8.0 / dur.as_secs_f64() / 1e9;
    run.rounds_gbps.push(run.gbps);
    run.hirt_cores = cores;
    run.gbps_per_hirt_core = bytes as f64 * 8.0 / wall / 1e9 / cores.max(1e-9);
    Ok(run)
}

/// Runs `hirt bench udp`.
pub fn run(args: UdpBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(netns::available(), "hirt bench udp needs root and iproute2");
    let u = netns::Underlay::new(&netns::unique_name("hbu"), "192.168.79")?;
    if args.loss > 0.0 {
        u.like_a_wire()?;
        u.lose(4098, args.loss)?;
    }
    let (c, s) = (&u.client, &u.server);
    let configs: [(&str, Option<bool>); 3] = [
        ("no_tunnel", None),
        ("tunnel_offload", Some(true)),
        ("tunnel_no_offload", Some(false)),
    ];
    let mut runs: Vec<UdpRun> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for (name, tunnel) in configs {
            let r = one_run(c, s, &args, name, tunnel)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU time of threads found by name: a thread that burned 60 ms of its own CPU time
    /// (its thread clock) is counted with at least 50 ms (clock ticks are 10 ms), and a name
    /// that matches nothing counts 0.
    #[test]
    fn thread_cpu_time_by_name() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("bench-cpu-probe".into())
            .spawn(move || {
                let mut x = 0u64;
                while crate::engine::load::thread_cpu_time() < Duration::from_millis(60) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                done_tx.send(()).unwrap();
                let _ = rx.recv();
            })
            .unwrap();
        done_rx.recv().unwrap();
        let cpu = threads_cpu("bench-cpu-prob");
        tx.send(()).unwrap();
        h.join().unwrap();
        assert!(cpu >= 0.05, "{cpu}");
        assert_eq!(threads_cpu("no-such-thread-name"), 0.0);
    }
}
