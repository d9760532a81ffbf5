//! `hirt lab` and `hirt demo`: build the lab, compare every workload without and with FEC,
//! write the results, tear everything down.

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::config::{DemoConfig, LabConfig};
use crate::netns;
use crate::profile::links;
use crate::report::Comparison;
use crate::session::Lab;
use crate::topo::Topology;

/// Runs `hirt demo`: a short starlink lab of 10 kB HTTP requests, without and with FEC.
pub fn run_demo(args: DemoConfig) -> anyhow::Result<()> {
    if !crate::sys::is_root() {
        bail!(
            "hirt demo builds network namespaces and needs root: run `sudo hirt` (or `sudo hirt demo`).\n\
             Without root, try `hirt sim --loss ge:p=0.00151,r=0.333` (the simulator needs no privileges)."
        );
    }
    if !args.json {
        println!(
            "hirt demo: a Starlink-like link (50 ms RTT, ~0.45% loss in bursts) emulated between two\n\
             network namespaces. A client fetches 10 kB over HTTP/1.1 (kernel TCP, 16 connections),\n\
             first straight over the lossy link, then through the hirt tunnel with FEC, with the same\n\
             loss process. Lost packets cost TCP a retransmission timeout or a fast-retransmit round\n\
             trip, which shows in the tail (p99) of request completion times; FEC repairs them inside\n\
             the tunnel. Each run takes {}s.{}\n",
            args.duration.as_secs(),
            if args.lossless {
                "\nBefore them, a run over the same link without loss gives the p99 that a tunnel\n\
                 recovering every loss at once would reach: the most FEC could take off the tail."
            } else {
                ""
            }
        );
    }
    let lab = LabConfig {
        duration: args.duration,
        tunnel: args.tunnel,
        json: args.json,
        lossless: args.lossless,
        ..LabConfig::default()
    };
    run_lab(lab)
}

/// Runs `hirt lab`.
pub fn run_lab(args: LabConfig) -> anyhow::Result<()> {
    if let Some(scenario) = args.scenario {
        use crate::config::Scenario;
        let report = match scenario {
            Scenario::Outage => crate::outage::outage(&args)?,
            Scenario::Inversion => crate::inversion::inversion(&args)?,
            Scenario::Bond => crate::bond::bond(&args)?,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    if args.soak.is_some() {
        let report = crate::soak::soak(&args)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        if !report.checks.ok {
            bail!("the soak failed a check: {:?}", report.checks);
        }
        return Ok(());
    }
    let report = lab(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json)?);
    } else if let Some(dir) = &report.dir {
        println!("results (JSON, tables, CDF plots): {}", dir.display());
    }
    Ok(())
}

/// What a lab produced.
#[derive(Debug)]
pub struct LabReport {
    /// One comparison per workload.
    pub comparisons: Vec<Comparison>,
    /// The JSON written to `summary.json`.
    pub json: serde_json::Value,
    /// The results folder.
    pub dir: Option<PathBuf>,
}

/// Builds the lab, runs every workload without and with FEC, tears everything down (also on
/// error and Ctrl-C) and returns the results. Tables are printed unless `--json`.
pub fn lab(args: &LabConfig) -> anyhow::Result<LabReport> {
    if !crate::sys::is_root() {
        bail!("hirt lab builds network namespaces and needs root (run it with sudo)");
    }
    // Every field, the loss models included, is checked before anything is built.
    args.validate()?;
    let (up, down) = links(args);
    netns::install_signal_handler();
    netns::remove_stale();
    let _teardown = netns::Teardown;
    let topo = Topology::build().context("building the lab topology")?;
    if args.hosts_ecn || args.ecn_mark_above.is_some() {
        // The hosts' TCP asks for ECN, so the marks of the link or of the tunnel's queue
        // management reach its congestion control (and, through the tunnel, the outer headers
        // carry the inner packets' ECN field).
        for ns in [&topo.client, &topo.server] {
            netns::sysctl(ns, "net.ipv4.tcp_ecn=1")?;
        }
    }
    if args.bench_emulator {
        let json = crate::emulator_bench::bench_emulator(args, &topo)?;
        return Ok(LabReport {
            comparisons: Vec::new(),
            json,
            dir: None,
        });
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = args
        .results
        .join(format!("lab-{:?}-{stamp}-{}", args.profile, std::process::id()).to_lowercase());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut comparisons = Vec::new();
    let mut lab = Lab::new(args, &topo, up, down, dir.clone())?;
    for w in &args.workload {
        let c = lab.compare(*w)?;
        if !args.json {
            println!("{}", c.table());
        }
        std::fs::write(dir.join(format!("{}.txt", c.workload)), c.table())?;
        comparisons.push(c);
    }
    let json = serde_json::json!({
        "profile": format!("{:?}", args.profile).to_lowercase(),
        "seed": args.seed,
        "tunnel": format!("{:?}", args.tunnel).to_lowercase(),
        "uplink": format!("{:?}", lab.up),
        "downlink": format!("{:?}", lab.down),
        "machine": machine(),
        "summary": comparisons.first().map(Comparison::json),
        "workloads": comparisons.iter().map(Comparison::json).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    drop(lab);
    Ok(LabReport {
        comparisons,
        json,
        dir: Some(dir),
    })
}

/// The machine a result was measured on: CPUs, model, load average.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{n} x {cpu}; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}
