//! `hirt lab --scenario outage --tunnel udp|srv6`: failover time of a two-path tunnel when the
//! active path dies silently, over `--runs` outages.
//!
//! Two underlay paths between the client and the server, each through its own emulator in
//! the link namespace: path 0 with the profile's links, path 1 with LTE-like links under
//! `--profile dual` (Starlink-like path 0), else the same links as path 0. The tunnel's ends
//! run in this process ([`crate::dual`]: UDP, or SRv6 with an encoder and a decoder per end),
//! each sending end with one path per underlay path and the `failover` policy. A flow of one
//! 200-byte datagram per millisecond crosses the tunnel from the client's to the server's
//! address in it; each run drops everything on the server's device of path 0, both ways (nft,
//! no ICMP), then restores it and waits for the client to fail back.
//!
//! Failover time of a run: from when the drop began (the send time of the first datagram of the
//! outage's run of losses, plus path 0's one-way delay) to the arrival, at the server's
//! socket, of the next datagram that arrives (path 0 drops them all, so it crossed path 1).
//! Summary keys: `failover_p50_ms`, `failover_p99_ms`, `feedback_interval_ms`, `runs`.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hirt_core::path::{PathManagerConfig, PolicyConfig, PolicyKind};

use crate::config::{LabConfig, Profile};
use crate::dual::{percentile, wait_for, DualNet, DualTunnel};
use crate::netns;
use crate::profile::{links, profile_links};
use crate::topo::{Topology, UnderlayPath};

const FLOW_PORT: u16 = 9400;

/// Runs the scenario; the JSON summary.
pub fn outage(args: &LabConfig) -> anyhow::Result<serde_json::Value> {
    args.validate()?;
    let path0 = links(args);
    let path1 = if args.profile == Profile::Dual {
        profile_links(Profile::Lte, args.seed.wrapping_add(1))
    } else {
        path0.clone()
    };
    let net = DualNet::build([&path0, &path1])?;
    let paths = PathManagerConfig {
        policy: PolicyConfig::of(PolicyKind::Failover),
        ..Default::default()
    };
    let interval_ms = paths.feedback_interval_ms;
    let tunnel = DualTunnel::start(&net, args.tunnel, args.seed, paths)?;
    let result = tunnel
        .wait_paths_up(Duration::from_secs(20))
        .and_then(|()| measure(args, &net.topo, &net.paths[0], &tunnel, interval_ms));
    tunnel.stop();
    let mut json = result?;
    json["failover_cdf_svg"] = serde_json::json!(failover_cdf(args, &json)?);
    json["http"] = crate::outage_http::http_across_outages(args, &net)?;
    json["profile"] = serde_json::json!(format!("{:?}", args.profile).to_lowercase());
    json["tunnel"] = serde_json::json!(args.tunnel);
    json["machine"] = serde_json::json!(crate::run::machine());
    Ok(json)
}

/// Draws the failover times' CDF into `<results>/outage-failover-cdf.svg`; its path.
fn failover_cdf(args: &LabConfig, json: &serde_json::Value) -> anyhow::Result<String> {
    let us: Vec<u64> = json["failover_ms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_f64)
        .map(|ms| (ms * 1000.0).round() as u64)
        .collect();
    let name = "outage-failover-cdf";
    let label = format!("{} tunnel, failover policy", args.tunnel.as_str());
    crate::report::write_cdf_svg(
        &args.results,
        name,
        "Silent outage of path 0 -> first datagram delivered over path 1",
        &[(label.as_str(), us.as_slice())],
    )?;
    Ok(args
        .results
        .join(format!("{name}.svg"))
        .display()
        .to_string())
}

/// Runs `ip netns exec NS nft ARGS`.
fn nft(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut a = vec!["netns", "exec", ns, "nft"];
    a.extend_from_slice(args);
    netns::run("ip", &a)
}

/// A silent outage of underlay path 0: everything on the server's device of the path is
/// dropped both ways (nft, no ICMP) between `start` and `stop`.
pub(crate) struct SilentDrop {
    ns: String,
    rules_file: std::path::PathBuf,
}

const DROP_TABLE: &str = "hirt_outage";

impl SilentDrop {
    pub(crate) fn new(topo: &Topology, p0: &UnderlayPath) -> anyhow::Result<Self> {
        let rules = format!(
            "table inet {DROP_TABLE} {{\n chain pre {{ type filter hook prerouting priority -300; \
             iifname \"{dev}\" drop; }}\n chain out {{ type filter hook output priority -300; \
             oifname \"{dev}\" drop; }}\n}}\n",
            dev = p0.server_dev
        );
        let rules_file =
            std::env::temp_dir().join(format!("hirt-outage-{}.nft", std::process::id()));
        std::fs::write(&rules_file, rules)?;
        Ok(SilentDrop {
            ns: topo.server.clone(),
            rules_file,
        })
    }

    pub(crate) fn start(&self) -> anyhow::Result<()> {
        nft(&self.ns, &["-f", &self.rules_file.display().to_string()])
    }

    pub(crate) fn stop(&self) -> anyhow::Result<()> {
        nft(&self.ns, &["delete", "table", "inet", DROP_TABLE])
    }
}

impl Drop for SilentDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.rules_file);
    }
}

fn measure(
    args: &LabConfig,
    topo: &Topology,
    p0: &UnderlayPath,
    tunnel: &DualTunnel,
    interval_ms: f64,
) -> anyhow::Result<serde_json::Value> {
    let (server_addr, client_addr) = (tunnel.server_addr(), tunnel.client_addr());
    let t0 = Instant::now();
    let since = move |t: Instant| t.saturating_duration_since(t0).as_nanos() as u64;
    let received: Arc<Mutex<Vec<(u64, u32)>>> = Arc::default();
    let sent_at: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let rx = {
        let (received, stop) = (received.clone(), stop.clone());
        netns::in_ns(&topo.server, move || {
            let sock = UdpSocket::bind((server_addr, FLOW_PORT))?;
            sock.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut buf = [0u8; 256];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let now = since(Instant::now());
                    if let Some(seq) = buf.get(..4).filter(|_| n >= 4) {
                        let seq = u32::from_be_bytes([seq[0], seq[1], seq[2], seq[3]]);
                        if let Ok(mut r) = received.lock() {
                            r.push((now, seq));
                        }
                    }
                }
            }
            Ok(())
        })
    };
    let tx = {
        let (sent_at, stop) = (sent_at.clone(), stop.clone());
        netns::in_ns(&topo.client, move || {
            let sock = UdpSocket::bind((client_addr, 0))?;
            let mut p = [0u8; 200];
            let mut seq = 0u32;
            while !stop.load(Ordering::Relaxed) {
                p[..4].copy_from_slice(&seq.to_be_bytes());
                if let Ok(mut s) = sent_at.lock() {
                    s.push(since(Instant::now()));
                }
                let _ = sock.send_to(&p, (server_addr, FLOW_PORT));
                seq = seq.wrapping_add(1);
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
    };
    let outage = SilentDrop::new(topo, p0)?;
    let mut failover_ms = Vec::new();
    let mut failed = 0usize;
    let mut notes: Vec<String> = Vec::new();
    for run in 0..args.runs {
        let back = wait_for(Duration::from_secs(20), || {
            let s = tunnel.client_paths();
            s.preferred == Some(0) && s.paths.iter().all(|p| p.state == "up")
        });
        if !back {
            eprintln!("run {run}: path 0 did not come back; stopping");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        outage.start()?;
        let after = since(Instant::now());
        let send_time = |seq: u32| sent_at.lock().ok()?.get(seq as usize).copied();
        let delivered_after = wait_for(Duration::from_secs(10), || {
            received.lock().is_ok_and(|r| {
                r.iter()
                    .any(|&(at, seq)| at > after && send_time(seq).is_some_and(|t| t > after))
            })
        });
        let lost_gap = if delivered_after {
            first_gap(&received, &sent_at, after)
        } else {
            Err("nothing sent after the drop arrived within 10 s".into())
        };
        let note = match lost_gap {
            Ok(ms) => {
                failover_ms.push(ms);
                format!("{ms:.1} ms")
            }
            Err(why) => {
                failed += 1;
                let why = format!("run {run}: {why}");
                notes.push(why.clone());
                why
            }
        };
        outage.stop()?;
        if !args.quiet {
            eprintln!("outage {}/{}: {note}", run + 1, args.runs);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = netns::join(tx);
    let _ = netns::join(rx);
    let raw = failover_ms.clone();
    failover_ms.sort_by(f64::total_cmp);
    let st = tunnel.client_paths();
    Ok(serde_json::json!({
        "scenario": "outage",
        "runs": failover_ms.len(),
        "failed": failed,
        "feedback_interval_ms": interval_ms,
        "failover_p50_ms": percentile(&failover_ms, 50.0),
        "failover_p99_ms": percentile(&failover_ms, 99.0),
        "failover_min_ms": failover_ms.first(),
        "failover_max_ms": failover_ms.last(),
        "failover_ms": raw,
        "path_srtt_ms": st.paths.iter().map(|p| p.srtt_ms).collect::<Vec<_>>(),
        "switches": tunnel.client_metrics().global.path_switches.load(Ordering::Relaxed),
        "events": st.events,
        "notes": notes,
    }))
}

/// Consecutive lost datagrams (1 ms apart) that make an outage, not a burst of the link's loss
/// model.
const OUTAGE_RUN: u32 = 20;

/// The failover time of the outage that began before `after` (ns since the flow's start). The
/// outage begins where the first run of [`OUTAGE_RUN`] or more lost datagrams sent within
/// 200 ms before `after` begins: at the send time of its first datagram plus the one-way delay
/// of the last datagram that arrived before it (when the drop reached that datagram's place on
/// path 0). It ends at the arrival of the first datagram after the run.
fn first_gap(
    received: &Mutex<Vec<(u64, u32)>>,
    sent_at: &Mutex<Vec<u64>>,
    after: u64,
) -> Result<f64, String> {
    const POISONED: &str = "a logging thread panicked";
    let arrived: HashMap<u32, u64> = received
        .lock()
        .map_err(|_| POISONED.to_string())?
        .iter()
        .map(|&(at, seq)| (seq, at))
        .collect();
    let sends = sent_at.lock().map_err(|_| POISONED.to_string())?.clone();
    let lo = sends
        .iter()
        .position(|&t| t + 200_000_000 >= after)
        .ok_or("no datagram sent around the drop")? as u32;
    let n = sends.len() as u32;
    let mut q = lo;
    let mut shorter = Vec::new();
    while q < n {
        if arrived.contains_key(&q) {
            q += 1;
            continue;
        }
        let Some(end) = (q..n).find(|k| arrived.contains_key(k)) else {
            break;
        };
        if end - q < OUTAGE_RUN {
            shorter.push(end - q);
            q = end;
            continue;
        }
        let owd = q
            .checked_sub(1)
            .and_then(|prev| Some(arrived.get(&prev)?.saturating_sub(sends[prev as usize])))
            .unwrap_or(0);
        let began = sends[q as usize] + owd;
        let at = arrived.get(&end).copied().unwrap_or(began);
        return Ok(at.saturating_sub(began) as f64 / 1e6);
    }
    Err(format!(
        "no run of {OUTAGE_RUN} lost datagrams from 200 ms before the drop (shorter: {shorter:?})"
    ))
}
