//! The path-awareness measurements of `docs/results/*-paths-sim.md`, over many seeds of
//! [`crate::multipath`] runs: failover time after an outage of the active path, EXP3
//! convergence after a delay inversion (TPC §IV-C: 10 ms vs 100 ms RTT) against greedy and
//! uniform random, and diverse-path repairs across a 2 s outage of one of two bonded paths.
//!
//! ```text
//! hirt sim --path-experiments --runs 50 --out docs/figures/paths-sim
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use hirt_core::path::{Exp3Reward, PathManagerConfig, PolicyKind, RepairPath};
use serde::Serialize;

use crate::multipath::{self, quantile, MultipathReport, MultipathScenario, PathSpec};
use crate::plot::{self, Panel, Series};

const MS: Duration = Duration::from_millis(1);

/// Keys a script checks (`summary.json`), named as the issue's lab summary names them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PathsSummary {
    /// Seeds per configuration.
    pub runs: u64,
    /// Feedback (path report) interval of every run, ms.
    pub feedback_interval_ms: f64,
    /// Outage events measured for failover.
    pub failover_events: usize,
    /// Outage start to the first source delivered over the other path: median, ms.
    pub failover_p50_ms: f64,
    /// Its 99th percentile, ms.
    pub failover_p99_ms: f64,
    /// EXP3 (TPC's ms reward) 90%-of-weight convergence after the inversion, 90th
    /// percentile, ms, Gamma 0.1.
    pub exp3_converge_p90_ms_gamma_0_1: f64,
    /// The same for Gamma 0.01.
    pub exp3_converge_p90_ms_gamma_0_01: f64,
    /// Median over runs of the mean flow completion after the inversion: EXP3 (Gamma 0.1,
    /// reward ms).
    pub exp3_p50_ms: f64,
    /// The same under uniform random path choice.
    pub random_p50_ms: f64,
    /// The same under greedy lowest-SRTT choice.
    pub greedy_p50_ms: f64,
    /// Bonded paths, 2 s outage of one, timer re-sends on: the largest send-to-recovery time
    /// over every run, repairs on the sources' path, ms.
    pub bond_recovery_max_ms_same: f64,
    /// The same with repairs on the other path.
    pub bond_recovery_max_ms_diverse: f64,
    /// Repairs per source with diverse repairs and timer re-sends (median over runs).
    pub bond_overhead_diverse: f64,
}

/// Runs `f` over `items` on `jobs` threads, results in item order.
fn par_map<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() {
                    break;
                }
                let r = f(&items[i]);
                if let Ok(mut o) = out.lock() {
                    o[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

fn path(delay_ms: u64) -> PathSpec {
    PathSpec {
        delay: MS * delay_ms as u32,
        ..PathSpec::default()
    }
}

/// A phase offset in [0, 50) ms that differs per seed, so that outages and inversions fall at
/// every point of the report cycle.
fn phase(seed: u64) -> Duration {
    Duration::from_micros((seed.wrapping_mul(7_919) % 50) * 1000 + (seed * 331) % 1000)
}

/// min / median / p90 / p99 / max of `v` as a table row.
fn row(label: &str, v: &[f64]) -> String {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return format!("| {label} | 0 | - | - | - | - | - |\n");
    }
    format!(
        "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
        s.len(),
        s[0],
        quantile(&s, 0.5),
        quantile(&s, 0.9),
        quantile(&s, 0.99),
        s[s.len() - 1]
    )
}

const HEADER: &str = "| | n | min | median | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n";

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Runs every measurement with seeds `1..=runs` on `jobs` threads; writes SVG CDFs and
/// `summary.json` under `out`; returns the markdown tables.
pub fn run_all(runs: u64, jobs: usize, out: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let seeds: Vec<u64> = (1..=runs).collect();
    let interval = PathManagerConfig::default().feedback_interval_ms;
    let mut md = String::new();
    let mut sum = PathsSummary {
        runs,
        feedback_interval_ms: interval,
        ..PathsSummary::default()
    };

    // 1. Failover: two 25 ms paths, the active one out for 2 s at 3 s and at 7 s (+ phase);
    // repairs on the sources' path, or on the other path with 100 timer re-sends 5 ms apart.
    let fo_variants: [(&str, RepairPath, Option<u8>); 2] = [
        ("same, default re-sends", RepairPath::Same, None),
        (
            "diverse, 100 re-sends 5 ms apart",
            RepairPath::Diverse,
            Some(100),
        ),
    ];
    let items: Vec<(usize, u64)> = (0..fo_variants.len())
        .flat_map(|v| seeds.iter().map(move |&s| (v, s)))
        .collect();
    let failover_all = par_map(&items, jobs, |&(v, seed)| {
        let (_, repair, retries) = fo_variants[v];
        let mut p0 = path(25);
        let ph = phase(seed);
        p0.schedule.outages = vec![
            (Duration::from_secs(3) + ph, Duration::from_secs(2)),
            (Duration::from_secs(7) + ph, Duration::from_secs(2)),
        ];
        let mut sc = MultipathScenario {
            paths: vec![p0, path(25)],
            duration: Duration::from_secs(10),
            seed,
            repair_retries: retries,
            repair_retry_gap: retries.map(|_| MS * 5),
            ..MultipathScenario::default()
        };
        sc.manager.policy.kind = PolicyKind::Failover;
        sc.manager.repair_path = repair;
        multipath::run(&sc)
    })
    .into_iter()
    .collect::<anyhow::Result<Vec<MultipathReport>>>()?;
    let failover = &failover_all[..seeds.len()];
    let fo: Vec<f64> = sorted(
        failover
            .iter()
            .flat_map(|r| r.failover_ms.clone())
            .collect(),
    );
    let ev: Vec<f64> = sorted(
        failover
            .iter()
            .flat_map(|r| r.evacuate_ms.clone())
            .collect(),
    );
    sum.failover_events = fo.len();
    sum.failover_p50_ms = quantile(&fo, 0.5);
    sum.failover_p99_ms = quantile(&fo, 0.99);
    let _ = write!(
        md,
        "### Failover (policy failover, 2 paths of 25 ms one way, 2 outages of 2 s per run, \
         feedback interval {interval} ms, 2000 pps, FEC `ours`)\n\n{HEADER}{}{}\n\
         Three feedback intervals: {:.0} ms. TPC's published NRTOChanger(3,2) median: ~1600 ms.\n\n\
         | repairs | runs | sources | lost | unrecovered | double deliveries | decoder restarts \
         | repairs/sources median | send-to-recovery max, median over runs (ms) |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        row(
            "outage -> first source delivered over the other path (ms)",
            &fo
        ),
        row("outage -> path given no new flow (ms)", &ev),
        3.0 * interval,
    );
    for (k, (name, _, _)) in fo_variants.iter().enumerate() {
        let rs = &failover_all[k * seeds.len()..(k + 1) * seeds.len()];
        let s = |f: fn(&MultipathReport) -> u64| rs.iter().map(f).sum::<u64>();
        let ov = sorted(rs.iter().map(|r| r.overhead).collect());
        let mx = sorted(rs.iter().map(|r| r.recovery_max_ms).collect());
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {:.3} | {:.1} |",
            rs.len(),
            s(|r| r.sources),
            s(|r| r.lost),
            s(|r| r.unrecovered),
            s(|r| r.double_deliveries),
            s(|r| r.restarts),
            quantile(&ov, 0.5),
            quantile(&mx, 0.5),
        );
    }
    md.push('\n');

    // 2. Delay inversion: 10 ms vs 100 ms RTT, swapped at 3 s (+ phase), 10 s after it.
    #[derive(Clone, Copy)]
    struct Inv {
        label: &'static str,
        kind: PolicyKind,
        gamma: f64,
        reward: Exp3Reward,
    }
    let configs = [
        Inv {
            label: "EXP3 Gamma 0.1, reward ms (TPC)",
            kind: PolicyKind::LowestDelay,
            gamma: 0.1,
            reward: Exp3Reward::Milliseconds,
        },
        Inv {
            label: "EXP3 Gamma 0.01, reward ms (TPC)",
            kind: PolicyKind::LowestDelay,
            gamma: 0.01,
            reward: Exp3Reward::Milliseconds,
        },
        Inv {
            label: "EXP3 Gamma 0.1, reward normalized",
            kind: PolicyKind::LowestDelay,
            gamma: 0.1,
            reward: Exp3Reward::Normalized,
        },
        Inv {
            label: "EXP3 Gamma 0.01, reward normalized",
            kind: PolicyKind::LowestDelay,
            gamma: 0.01,
            reward: Exp3Reward::Normalized,
        },
        Inv {
            label: "greedy (lowest SRTT)",
            kind: PolicyKind::Greedy,
            gamma: 0.1,
            reward: Exp3Reward::Milliseconds,
        },
        Inv {
            label: "uniform random",
            kind: PolicyKind::Random,
            gamma: 0.1,
            reward: Exp3Reward::Milliseconds,
        },
    ];
    let items: Vec<(usize, u64)> = (0..configs.len())
        .flat_map(|c| seeds.iter().map(move |&s| (c, s)))
        .collect();
    let inv = par_map(&items, jobs, |&(c, seed)| {
        let cfg = configs[c];
        let at = Duration::from_secs(3) + phase(seed);
        let mut p0 = path(5);
        p0.schedule.delay_changes = vec![(at, MS * 50)];
        let mut p1 = path(50);
        p1.schedule.delay_changes = vec![(at, MS * 5)];
        let mut sc = MultipathScenario {
            paths: vec![p0, p1],
            duration: Duration::from_secs(13),
            rate_pps: 1000.0,
            seed,
            ..MultipathScenario::default()
        };
        sc.manager.policy.kind = cfg.kind;
        sc.manager.policy.gamma = cfg.gamma;
        sc.manager.policy.reward = cfg.reward;
        multipath::run(&sc)
    })
    .into_iter()
    .collect::<anyhow::Result<Vec<MultipathReport>>>()?;
    let per = |c: usize| &inv[c * seeds.len()..(c + 1) * seeds.len()];
    let _ = write!(
        md,
        "### Delay inversion (paths of 5 ms and 50 ms one way swap at 3 s; 1000 pps, 4 flows \
         at a time, 20 packets per flow: 50 new flows/s; 10 s after the swap)\n\n\
         Convergence: time from the swap until 90% of the EXP3 weight sum is on the new fast \
         path (greedy: until it is the preferred path); runs that never converged are left out \
         of the row and counted in n. TPC's published p90 for Gamma 0.1: 1250 ms; Gamma 0.01: \
         about 5000 ms.\n\n{HEADER}"
    );
    let mut conv_series = Vec::new();
    let mut flow_series = Vec::new();
    for (c, cfg) in configs.iter().enumerate() {
        let rs = per(c);
        let conv: Vec<f64> = sorted(rs.iter().filter_map(|r| r.converge_ms).collect());
        let traffic: Vec<f64> = sorted(rs.iter().filter_map(|r| r.traffic_converge_ms).collect());
        if cfg.kind != PolicyKind::Random {
            md.push_str(&row(&format!("{}: weights 90% (ms)", cfg.label), &conv));
            md.push_str(&row(
                &format!("{}: P(new flow on fast path) >= 0.9 (ms)", cfg.label),
                &traffic,
            ));
            conv_series.push(Series {
                name: cfg.label.to_string(),
                points: plot::cdf(&conv),
            });
        }
        let flows: Vec<f64> = sorted(rs.iter().map(|r| r.flow_mean_ms).collect());
        flow_series.push(Series {
            name: cfg.label.to_string(),
            points: plot::cdf(&flows),
        });
        match c {
            0 => {
                sum.exp3_converge_p90_ms_gamma_0_1 = quantile(&conv, 0.9);
                sum.exp3_p50_ms = quantile(&flows, 0.5);
            }
            1 => sum.exp3_converge_p90_ms_gamma_0_01 = quantile(&conv, 0.9),
            4 => sum.greedy_p50_ms = quantile(&flows, 0.5),
            5 => sum.random_p50_ms = quantile(&flows, 0.5),
            _ => {}
        }
    }
    let _ = write!(
        md,
        "\nFlow completion after the swap (first send to last source at the application, a flow \
         of 20 packets spans 76 ms of sending, 4 flows sharing 1000 pps; per run the mean \
         and the median over its flows; the row is over runs, ms):\n\n{HEADER}"
    );
    for (c, cfg) in configs.iter().enumerate() {
        let rs = per(c);
        let p50: Vec<f64> = rs.iter().map(|r| r.flow_p50_ms).collect();
        let mean: Vec<f64> = rs.iter().map(|r| r.flow_mean_ms).collect();
        md.push_str(&row(&format!("{}: flow mean", cfg.label), &mean));
        md.push_str(&row(&format!("{}: flow p50", cfg.label), &p50));
    }
    md.push('\n');

    // 3. Diverse repairs: bonded 25 ms paths, path 0 out for 2 s at 3 s (+ phase); the
    // encoder's default timer re-sends, and 100 re-sends 5 ms or 1 ms apart.
    type Variant = (&'static str, RepairPath, Option<(u8, u32)>);
    let variants: [Variant; 5] = [
        ("same, default re-sends", RepairPath::Same, None),
        ("diverse, default re-sends", RepairPath::Diverse, None),
        (
            "same, 100 re-sends 5 ms apart",
            RepairPath::Same,
            Some((100, 5)),
        ),
        (
            "diverse, 100 re-sends 5 ms apart",
            RepairPath::Diverse,
            Some((100, 5)),
        ),
        (
            "diverse, 100 re-sends 1 ms apart",
            RepairPath::Diverse,
            Some((100, 1)),
        ),
    ];
    let items: Vec<(usize, u64)> = (0..variants.len())
        .flat_map(|v| seeds.iter().map(move |&s| (v, s)))
        .collect();
    let bond = par_map(&items, jobs, |&(v, seed)| {
        let (_, repair, retries) = variants[v];
        let mut p0 = path(25);
        p0.schedule.outages = vec![(Duration::from_secs(3) + phase(seed), Duration::from_secs(2))];
        let mut sc = MultipathScenario {
            paths: vec![p0, path(25)],
            duration: Duration::from_secs(7),
            seed,
            repair_retries: retries.map(|r| r.0),
            repair_retry_gap: retries.map(|r| MS * r.1),
            ..MultipathScenario::default()
        };
        sc.manager.policy.kind = PolicyKind::Bond;
        sc.manager.repair_path = repair;
        multipath::run(&sc)
    })
    .into_iter()
    .collect::<anyhow::Result<Vec<MultipathReport>>>()?;
    let _ = write!(
        md,
        "### Diverse-path repairs (policy bond over two 25 ms paths, path 0 out for 2 s; 2000 \
         pps, FEC `ours`, repair delay 5 ms)\n\n| repairs | runs | sources | lost | unrecovered \
         | double deliveries | decoder restarts | repairs/sources min / median / max | \
         send-to-recovery p99, median over runs (ms) | send-to-recovery max, max over runs (ms) \
         |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut rec_series = Vec::new();
    for (k, (name, _, _)) in variants.iter().enumerate() {
        let rs = &bond[k * seeds.len()..(k + 1) * seeds.len()];
        let s = |f: fn(&MultipathReport) -> u64| rs.iter().map(f).sum::<u64>();
        let ov = sorted(rs.iter().map(|r| r.overhead).collect());
        let p99 = sorted(rs.iter().map(|r| r.recovery_p99_ms).collect());
        let mx = sorted(rs.iter().map(|r| r.recovery_max_ms).collect());
        match k {
            2 => sum.bond_recovery_max_ms_same = mx[mx.len() - 1],
            3 => {
                sum.bond_recovery_max_ms_diverse = mx[mx.len() - 1];
                sum.bond_overhead_diverse = quantile(&ov, 0.5);
            }
            _ => {}
        }
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {:.3} / {:.3} / {:.3} | {:.1} | {:.1} |",
            rs.len(),
            s(|r| r.sources),
            s(|r| r.lost),
            s(|r| r.unrecovered),
            s(|r| r.double_deliveries),
            s(|r| r.restarts),
            ov[0],
            quantile(&ov, 0.5),
            ov[ov.len() - 1],
            quantile(&p99, 0.5),
            mx[mx.len() - 1],
        );
        rec_series.push(Series {
            name: name.to_string(),
            points: plot::cdf(&mx),
        });
    }
    md.push('\n');

    let panel = |title: &str, x: &str, series: Vec<Series>| Panel {
        title: title.into(),
        x_label: x.into(),
        y_label: "CDF".into(),
        series,
        steps: true,
        y_log_min: None,
    };
    let figs = [
        (
            "failover.svg",
            "Failover after an outage of the active path",
            vec![panel(
                "outage events",
                "ms after the outage began",
                vec![
                    Series {
                        name: "first source over the other path".into(),
                        points: plot::cdf(&fo),
                    },
                    Series {
                        name: "path given no new flow".into(),
                        points: plot::cdf(&ev),
                    },
                ],
            )],
        ),
        (
            "inversion.svg",
            "After a 10 ms / 100 ms RTT inversion",
            vec![
                panel("90% of the EXP3 weight on the fast path", "ms", conv_series),
                panel("mean flow completion per run", "ms", flow_series),
            ],
        ),
        (
            "diverse.svg",
            "2 s outage of one of two bonded paths",
            vec![panel(
                "largest send-to-recovery time per run",
                "ms",
                rec_series,
            )],
        ),
    ];
    for (name, title, panels) in figs {
        let p = out.join(name);
        std::fs::write(&p, plot::render(title, &panels))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let p = out.join("summary.json");
    std::fs::write(&p, serde_json::to_string_pretty(&sum)? + "\n")
        .with_context(|| format!("writing {}", p.display()))?;
    let _ = write!(
        md,
        "Summary (`summary.json`):\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(&sum)?
    );
    Ok(md)
}
