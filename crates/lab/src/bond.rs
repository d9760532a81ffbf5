//! `hirt lab --scenario bond --tunnel udp|srv6`: TCP bulk goodput over two equal paths, bonded
//! against one path.
//!
//! Both underlay paths get the profile's links (path 1 with other loss seeds) at
//! [`DEFAULT_RATE`] unless `--rate` is given. One tunnel runs the whole scenario; each of the
//! `--runs` rounds measures [`CONNECTIONS`] parallel TCP downloads for [`ROUND`] under the
//! `failover` policy (every flow on path 0: one path's goodput) and then under `bond` (flows
//! spread over both paths by capacity and RTT), the policy changed live on both ends through
//! their control sockets. Every byte is verified.
//!
//! Summary keys: `bond_over_single` (median over the rounds of bonded / single goodput),
//! `single_mbps` and `bond_mbps` (medians), `runs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use hirt_core::path::{PathManagerConfig, PolicyConfig, PolicyKind};
use serde_json::{json, Value};

use crate::config::LabConfig;
use crate::dual::{percentile, sorted, sources, DualNet, DualTunnel, PathLinks};
use crate::netns;
use crate::profile::links;
use crate::workload::{bulk, Samples};

/// Each path's rate in both directions unless `--rate` says otherwise.
pub const DEFAULT_RATE: u64 = 20_000_000;
/// Parallel TCP downloads of a measurement.
pub const CONNECTIONS: usize = 8;
/// Length of one measurement.
pub const ROUND: Duration = Duration::from_secs(6);
/// Pause after a policy change, before measuring: the previous measurement's queues drain
/// and the idle paths' probes bring their RTTs back down (bond weighs paths by RTT), so
/// every measurement starts from idle paths.
const SETTLE: Duration = Duration::from_secs(2);

fn path_links(args: &LabConfig, k: u64) -> PathLinks {
    let (mut up, mut down) = links(args);
    for d in [&mut up, &mut down] {
        if args.rate.is_none() {
            d.rate_bps = Some(DEFAULT_RATE);
        }
        d.seed = d.seed.wrapping_add(k * 1000);
    }
    (up, down)
}

/// Runs the scenario; the JSON summary.
pub fn bond(args: &LabConfig) -> anyhow::Result<Value> {
    args.validate()?;
    let links0 = path_links(args, 0);
    let rate_bps = links0.1.rate_bps;
    let net = DualNet::build([&links0, &path_links(args, 1)])?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, cc) = (stop.clone(), args.cc.clone());
        netns::join(netns::in_ns(&net.topo.server, move || {
            bulk::serve(crate::workload::http::any(bulk::PORT), &cc, stop)
        }))?;
    }
    let paths = PathManagerConfig {
        policy: PolicyConfig::of(PolicyKind::Bond),
        ..Default::default()
    };
    let tunnel = DualTunnel::start(&net, args.tunnel, args.seed, paths)?;
    let result = tunnel
        .wait_paths_up(Duration::from_secs(20))
        .and_then(|()| rounds(args, &net, &tunnel));
    let events = (tunnel.client_paths().events, tunnel.server_paths().events);
    tunnel.stop();
    stop.store(true, Ordering::Relaxed);
    let r = result?;
    let ratios: Vec<f64> = r
        .iter()
        .map(|x| {
            if x.single > 0.0 {
                x.bonded / x.single
            } else {
                0.0
            }
        })
        .collect();
    let each = |f: fn(&Round) -> f64| r.iter().map(f).collect::<Vec<_>>();
    let singles = sorted(&each(|x| x.single));
    let bonds = sorted(&each(|x| x.bonded));
    let sr = sorted(&ratios);
    Ok(json!({
        "scenario": "bond",
        "runs": r.len(),
        "bond_over_single": percentile(&sr, 50.0),
        "bond_over_single_min": sr.first(),
        "bond_over_single_max": sr.last(),
        "single_mbps": percentile(&singles, 50.0),
        "bond_mbps": percentile(&bonds, 50.0),
        "path_rate_mbps": rate_bps.map(|b| b as f64 / 1e6),
        "connections": CONNECTIONS,
        "round_s": ROUND.as_secs_f64(),
        "single_mbps_each": each(|x| x.single),
        "bond_mbps_each": each(|x| x.bonded),
        "single_path1_share_each": each(|x| x.single_share1),
        "bond_path1_share_each": each(|x| x.bonded_share1),
        "client_events": events.0,
        "server_events": events.1,
        "profile": format!("{:?}", args.profile).to_lowercase(),
        "tunnel": args.tunnel,
        "machine": crate::run::machine(),
    }))
}

/// Sets the path policy of both tunnel ends through their control sockets.
fn set_policy(net: &DualNet, kind: PolicyKind) -> anyhow::Result<()> {
    for ns in [&net.topo.client, &net.topo.server] {
        let sock = DualNet::control_socket(ns);
        let answer = hirt_linux::control::request(&sock, &format!("set path-policy {kind}"))
            .with_context(|| format!("control socket {}", sock.display()))?;
        if !answer.contains("\"ok\":true") {
            bail!("set path-policy {kind}: {answer}");
        }
    }
    Ok(())
}

/// Goodput of `CONNECTIONS` parallel downloads for `ROUND`, Mbit/s.
fn downloads(net: &DualNet, tunnel: &DualTunnel, cc: &str) -> anyhow::Result<f64> {
    let server = std::net::SocketAddr::new(tunnel.server_addr(), bulk::PORT);
    let bind = tunnel.client_addr();
    let handles: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let cc = cc.to_string();
            netns::in_ns(&net.topo.client, move || {
                Ok(bulk::run(bind, server, &cc, ROUND, &|_| {}))
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.push(netns::join(h)?);
    }
    let s = Samples::merge(all);
    if s.corrupt > 0 {
        bail!("{} corrupt bytes ranges in the downloads", s.corrupt);
    }
    Ok(s.bytes as f64 * 8.0 / ROUND.as_secs_f64() / 1e6)
}

/// One measurement: goodput (Mbit/s) and the share of the server's sources on path 1.
fn measured(net: &DualNet, tunnel: &DualTunnel, cc: &str) -> anyhow::Result<(f64, f64)> {
    let before = sources(&tunnel.server_paths());
    let mbps = downloads(net, tunnel, cc)?;
    let after = sources(&tunnel.server_paths());
    let d = |k: usize| after[k].saturating_sub(before[k]) as f64;
    let share1 = if d(0) + d(1) > 0.0 {
        d(1) / (d(0) + d(1))
    } else {
        0.0
    };
    Ok((mbps, share1))
}

/// One round's figures.
struct Round {
    single: f64,
    bonded: f64,
    single_share1: f64,
    bonded_share1: f64,
}

/// Every round's goodputs and path shares.
fn rounds(args: &LabConfig, net: &DualNet, tunnel: &DualTunnel) -> anyhow::Result<Vec<Round>> {
    let mut out = Vec::new();
    for run in 0..args.runs {
        set_policy(net, PolicyKind::Failover)?;
        std::thread::sleep(SETTLE);
        let (single, single_share1) = measured(net, tunnel, &args.cc)?;
        set_policy(net, PolicyKind::Bond)?;
        std::thread::sleep(SETTLE);
        let (bonded, bonded_share1) = measured(net, tunnel, &args.cc)?;
        if !args.quiet {
            eprintln!(
                "round {}/{}: one path {single:.1} Mbit/s ({:.0}% on path 1), bonded \
                 {bonded:.1} Mbit/s ({:.0}% on path 1): {:.2}x",
                run + 1,
                args.runs,
                100.0 * single_share1,
                100.0 * bonded_share1,
                bonded / single.max(1e-9)
            );
        }
        out.push(Round {
            single,
            bonded,
            single_share1,
            bonded_share1,
        });
    }
    Ok(out)
}
