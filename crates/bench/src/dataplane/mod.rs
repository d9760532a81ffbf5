//! `hirt bench dataplane`: forwarding rate and added latency of the SRv6 dataplane over
//! veth namespaces (root), with the hirt nodes on AF_XDP (default) or TUN (`--dataplane tun`).
//!
//! ```text
//!  xdp: sender ns --veth--> encoder ns [hirt] --veth--> router ns (loss) --veth--> decoder ns [hirt] --veth--> receiver ns
//!  tun: sender ns --veth--> encoder ns [hirt] --veth (loss)--> decoder ns [hirt] --veth--> receiver ns
//! ```
//!
//! Configurations, each with fresh hirt instances: plain kernel forwarding (no encap, no hirt),
//! hirt with `--fec none` (tag/strip only), hirt FEC at 0% and at 3% random loss (an nftables
//! rule on the encoder->decoder path, [`hirt_os::nft`]). For each, the sender offers paced 1280-byte IPv6
//! packets at 10k, 20k, 40k, ... packets/s (1 s each, `sendmmsg` bursts, sleeping between
//! bursts) until fewer than 99% arrive, then bisects four times between the last rate that
//! passed and the first that failed; the capacity is the best delivered rate of the loads that
//! passed (with FEC, recovered packets count as arrived; duplicates do not), and the tunnel
//! counters (losses, recovered, overhead) are those of that load. Blasting at full speed would
//! measure the sender and the receiver more than the dataplane on a small machine. The four
//! sweeps are repeated `--rounds` times, interleaved, and each configuration reports its best
//! round (other processes on the machine only ever lower a capacity). Then the
//! added one-way latency without loss, hirt FEC vs kernel forwarding, at a paced 100 kpps and,
//! when that is not well below capacity, also at half the FEC capacity: from the send time
//! carried in the payload to the kernel's receive timestamp (`SO_TIMESTAMPNS`, taken when the
//! packet enters the receiver's stack; all namespaces share CLOCK_REALTIME), so the bench's own
//! receiver waiting for a CPU is not counted as the dataplane's delay; packets of the first
//! 200 ms of a run are warm-up and not counted.

mod config;
mod counters;
mod measure;
mod report;
mod sweep;
mod topology;
mod traffic;

use std::time::Duration;

use hirt_linux::netns;
use hirt_os::nft;

pub use config::{ConfigError, Dataplane, DataplaneConfig};
use measure::{goal_check, latency_pair, one_run, Mode};
use report::{added_latency, CARRIED, LATENCY_GOAL_P99_US};
pub use report::{AddedLatency, GoalCheck, Latency, LoadCounters, Report, Run};
use topology::{probe_xdp, topo};

/// Runs `hirt bench dataplane`: prints the report (JSON) on stdout, progress on stderr.
pub fn run(args: DataplaneConfig) -> anyhow::Result<()> {
    args.validate()?;
    anyhow::ensure!(
        netns::available(),
        "hirt bench dataplane needs root and iproute2"
    );
    if args.loss > 0.0 {
        nft::require()?;
    }
    let mut args = args;
    if args.dataplane.xdp() {
        if let Err(e) = probe_xdp() {
            // Without CAP_BPF, locked memory or XDP support the TUN path still runs.
            eprintln!("AF_XDP not usable here ({e:#}); measuring the TUN dataplane instead");
            args.dataplane = Dataplane::Tun;
        }
    }
    let t = topo(args.dataplane.xdp())?;
    let dur = Duration::from_secs_f64(args.duration);
    let configs = [
        ("kernel", Mode::Kernel, 0.0),
        ("hirt_nofec", Mode::Hirt { fec: false }, 0.0),
        ("hirt_fec_0pct", Mode::Hirt { fec: true }, 0.0),
        ("hirt_fec_3pct", Mode::Hirt { fec: true }, args.loss),
    ];
    if let Some(pps) = args.goal_only_pps {
        let mut tries = Vec::new();
        for _ in 0..args.rounds.max(1) {
            tries.push(goal_check(&t, &args, pps)?);
        }
        println!("{}", serde_json::to_string_pretty(&tries)?);
        return Ok(());
    }
    if args.latency_only {
        let ldur = Duration::from_secs_f64(args.latency_duration);
        let mut latency = latency_pair(&t, &args, args.latency_pps, ldur)?;
        for &rate in args.latency_curve.iter().flatten() {
            latency.extend(latency_pair(&t, &args, rate, ldur)?);
        }
        println!("{}", serde_json::to_string_pretty(&latency)?);
        return Ok(());
    }
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for (name, mode, loss) in configs {
            let (r, _) = one_run(&t, &args, name, mode, loss, 0, dur)?;
            if !args.json {
                eprintln!(
                    "round {round} {name}: {:.3} Mpps {:.2} Gbps recovered {}/{}",
                    r.mpps, r.gbps, r.recovered, r.losses
                );
            }
            match runs.iter_mut().find(|b| b.name == name) {
                None => runs.push(Run {
                    rounds_mpps: vec![r.mpps],
                    ..r
                }),
                Some(best) => {
                    let mut rounds = std::mem::take(&mut best.rounds_mpps);
                    rounds.push(r.mpps);
                    if r.mpps > best.mpps {
                        *best = r;
                    }
                    best.rounds_mpps = rounds;
                }
            }
        }
    }
    let ldur = Duration::from_secs_f64(args.latency_duration);
    let by = |n: &str| runs.iter().find(|r| r.name == n).cloned().expect("run");
    // Latency means something only below capacity (above it, it is a queue filling): besides
    // the fixed rate, a curve of lower loads shows up to where the added latency stays small.
    let curve = args
        .latency_curve
        .clone()
        .unwrap_or_else(|| vec![20_000, 40_000, 60_000, 80_000]);
    let mut rates = vec![args.latency_pps];
    rates.extend(curve.iter().copied().filter(|&r| r != args.latency_pps));
    let mut latency = Vec::new();
    for &rate in &rates {
        latency.extend(latency_pair(&t, &args, rate, ldur)?);
    }
    let nofec = by("hirt_nofec");
    let fec3 = by("hirt_fec_3pct");
    let goal_pps = (nofec.mpps * 1e6 * 0.85).round() as u64;
    // Like the capacities, the goal check gets `--rounds` tries (stopping at the first that
    // meets it): a try that another process disturbed only fails it. Every try is reported.
    let mut goal_tries = Vec::new();
    for _ in 0..args.rounds.max(1) {
        let g = goal_check(&t, &args, goal_pps.max(1000))?;
        if !args.json {
            eprintln!("goal_3pct: {g:?}");
        }
        let met = g.met;
        goal_tries.push(g);
        if met {
            break;
        }
    }
    let goal = goal_tries.last().cloned().expect("at least one try");
    let added_p50 = latency[1].p50_us - latency[0].p50_us;
    let added_p99 = latency[1].p99_us - latency[0].p99_us;
    let mut summary = serde_json::json!({
        "fec_over_nofec_3pct": fec3.mpps / nofec.mpps.max(1e-9),
        // At the FEC 3% run's capacity load (the highest load where >= 99% arrived).
        "recovered_ratio_3pct": fec3.recovered_ratio,
        // The goal itself: FEC at 3% loss offered 0.85 x the no-FEC capacity.
        "goal_3pct_offered_pps": goal.offered_pps,
        "goal_3pct_recovered_ratio": goal.recovered_ratio,
        "goal_3pct_recovered_in_time_ratio": goal.recovered_in_time_ratio,
        "goal_3pct_delivered_ratio": goal.delivered_ratio,
        "goal_3pct_met": goal.met,
        "goal_3pct_tries": goal_tries.len(),
        "latency_p50_us": added_p50,
        "latency_p99_us": added_p99,
        // Only if the load was carried: a chain that fell behind measured a lower load.
        "latency_p99_goal_met": added_p99 <= LATENCY_GOAL_P99_US && latency[1].carried >= CARRIED,
        "latency_pps": args.latency_pps,
        "kernel_mpps": by("kernel").mpps,
        "nofec_mpps": nofec.mpps,
        "nofec_gbps_per_hirt_core": nofec.gbps_per_hirt_core,
        "fec_3pct_gbps_per_hirt_core": fec3.gbps_per_hirt_core,
    });
    let added = added_latency(&latency);
    summary["latency_goal_max_pps"] = serde_json::json!(added
        .iter()
        .filter(|a| a.p99_us <= LATENCY_GOAL_P99_US && a.carried >= CARRIED)
        .map(|a| a.pps)
        .max());
    summary["latency_carried"] = serde_json::json!(latency[1].carried);
    summary["latency_cpu_share"] = serde_json::json!({
        "kernel": latency[0].cpu_share,
        "hirt_fec": latency[1].cpu_share,
    });
    summary["latency_curve"] = serde_json::to_value(&added)?;
    let report = Report {
        packet_size: args.packet_size,
        window: args.window,
        fec: args.fec.clone(),
        dataplane: args.dataplane,
        kernel_sources: args.dataplane == Dataplane::KernelSources,
        runs,
        latency,
        goal_3pct: goal,
        goal_3pct_tries: goal_tries,
        summary,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report.summary)?);
    }
    Ok(())
}
