//! The loop of `hirt health`: probe rounds every interval, the route replaced when its set of
//! next hops changes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::config::HealthConfig;
use super::probe;
use super::tracker::{Checker, NodeState, ProbeResult};
use crate::netlink::{if_index, Netlink, Seg6NextHop};
use crate::runtime;

/// Runs `hirt health` until SIGINT/SIGTERM. The route stays as it is when it stops: it is the
/// network's, the checker only keeps its next-hop set.
pub fn run(cfg: HealthConfig) -> anyhow::Result<()> {
    runtime::install_signal_handlers();
    run_until(cfg, runtime::shutdown_requested)
}

/// Runs the checker in the calling thread's network namespace until `stop()` says so.
pub fn run_until(cfg: HealthConfig, stop: impl Fn() -> bool) -> anyhow::Result<()> {
    cfg.validate()?;
    let (prefix, prefix_len) = cfg.prefix()?;
    let hops = cfg
        .node
        .iter()
        .map(|n| {
            let oif = match &n.dev {
                Some(d) => if_index(d).with_context(|| format!("node `{n}`"))?,
                None => 0,
            };
            Ok(Seg6NextHop {
                segments: n.segs.clone(),
                gateway: n.via,
                oif,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Every target of every node in one round; `owner[i]` is the node of target `i`.
    let (targets, owner): (Vec<SocketAddr>, Vec<usize>) = cfg
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.probe.iter().map(move |&t| (t, i)))
        .unzip();
    let mut nl = Netlink::open()?;
    let mut checker = Checker::new(cfg.node.len(), cfg.thresholds());
    let mut installed: Option<Vec<usize>> = None;
    let (interval, timeout) = (cfg.interval(), cfg.timeout());
    tracing::info!(
        "checking {} nodes every {interval:?} for {prefix}/{prefix_len}",
        cfg.node.len()
    );
    let mut next = Instant::now();
    while !stop() {
        let results = probe::round(&targets, timeout);
        let now = Instant::now();
        for node in 0..cfg.node.len() {
            let r = ProbeResult::worst(
                results
                    .iter()
                    .zip(&owner)
                    .filter(|(_, &o)| o == node)
                    .map(|(&r, _)| r),
            );
            if let Some(t) = checker.observe(node, r, now) {
                let seen: Vec<String> = targets
                    .iter()
                    .zip(&results)
                    .zip(&owner)
                    .filter(|(_, &o)| o == node)
                    .map(|((t, r), _)| format!("{t} {r:?}"))
                    .collect();
                if t.to == NodeState::Down {
                    tracing::warn!("{t}; last round: {}", seen.join(", "));
                } else {
                    tracing::info!("{t}; last round: {}", seen.join(", "));
                }
            }
        }
        if let Some(set) = checker.route_set() {
            if installed.as_ref() != Some(&set.nodes) {
                let chosen: Vec<Seg6NextHop> = set.nodes.iter().map(|&i| hops[i].clone()).collect();
                match nl.replace_seg6_multipath(prefix.into(), prefix_len, cfg.table, &chosen) {
                    Ok(()) => {
                        if set.all_down {
                            tracing::error!(
                                "no node is up: {prefix}/{prefix_len} over every node until one answers"
                            );
                        } else {
                            tracing::info!("{prefix}/{prefix_len} over nodes {:?}", set.nodes);
                        }
                        installed = Some(set.nodes);
                    }
                    // Tried again next round.
                    Err(e) => tracing::error!("{e}"),
                }
            }
        }
        next += interval;
        let now = Instant::now();
        if next < now {
            // A round overran (a slow netlink answer, a descheduled process): start afresh
            // rather than probing in a burst to catch up.
            next = now;
        }
        while !stop() {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    Ok(())
}
