//! The HIRT §VIII experiments (Fig. 10, 11a, 11b) and the sparse-traffic check, as sweeps of
//! [`Scenario`]s run in parallel, with their tables and figures.
//!
//! Every point records its seed; `hirt sim --loss .. --scheme .. --seed ..` with the same
//! parameters replays it (the CSV has all of them).

use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use hirt_channel::LossSpec;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;

use crate::plot::{self, Panel, Series};
use crate::traffic::Pattern;
use crate::{Report, Scenario};

/// Which experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Sweep {
    /// Fig. 10: uniform loss 0-5 %.
    Fig10,
    /// Fig. 11a: Latin hypercube over Gilbert-Elliott (p, r).
    Fig11a,
    /// Fig. 11b: Starlink approximation, several seeds.
    Fig11b,
    /// Sparse traffic: 100 pps Poisson, 1 % uniform, 25 ms.
    Sparse,
}

impl Sweep {
    /// Every sweep, in the order `all` runs them.
    pub const ALL: [Sweep; 4] = [Sweep::Fig10, Sweep::Fig11a, Sweep::Fig11b, Sweep::Sparse];

    /// File stem of its outputs.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Fig10 => "fig10",
            Sweep::Fig11a => "fig11a",
            Sweep::Fig11b => "fig11b",
            Sweep::Sparse => "sparse",
        }
    }
}

impl FromStr for Sweep {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Sweep::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown sweep `{s}` (fig10 | fig11a | fig11b | sparse | all)"))
    }
}

/// The schemes of HIRT Fig. 10/11 (label, `--scheme` string). Maelstrom `M:I:r` = interleaves
/// I, r sources per XOR.
pub const SCHEMES: [(&str, &str); 6] = [
    ("HIRT", "hirt"),
    ("ours", "ours"),
    ("M:1-20:20", "maelstrom:r=20,i=1-20"),
    ("M:1-20-40:20", "maelstrom:r=20,i=1-20-40"),
    ("M:1-20-40:8", "maelstrom:r=8,i=1-20-40"),
    ("rQUIC", "rquic"),
];

/// Knobs shared by every point of a sweep.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Source packets per point.
    pub packets: u64,
    /// Fig. 11a design points.
    pub lhs_points: usize,
    /// Seeds per Fig. 11b point (noise estimate).
    pub seeds: u64,
    /// Base seed; point i uses `seed + i`.
    pub seed: u64,
    /// Template scenario (rate, delay, window, sizes, repair delay...).
    pub base: Scenario,
}

/// One point of a sweep.
#[derive(Clone, Debug)]
pub struct Point {
    /// The sweep.
    pub sweep: Sweep,
    /// Scheme label (legend).
    pub label: String,
    /// Design coordinates: Fig. 10 p; Fig. 11 (p, r).
    pub p: f64,
    /// Gilbert-Elliott r (0 for uniform).
    pub r: f64,
    /// Index of the design point (schemes at the same index see the same loss pattern).
    pub index: usize,
    /// What to run.
    pub scenario: Scenario,
}

/// Seeded Latin hypercube: `n` points in [0,1]^2, one per row and column stratum.
pub fn latin_hypercube(n: usize, seed: u64) -> Vec<(f64, f64)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let perm = |rng: &mut rand_chacha::ChaCha8Rng| {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, rng.gen_range(0..=i));
        }
        v
    };
    let (a, b) = (perm(&mut rng), perm(&mut rng));
    (0..n)
        .map(|i| {
            let u = (a[i] as f64 + rng.gen::<f64>()) / n as f64;
            let v = (b[i] as f64 + rng.gen::<f64>()) / n as f64;
            (u, v)
        })
        .collect()
}

/// The points of a sweep.
pub fn plan(sweep: Sweep, o: &PlanOptions) -> Vec<Point> {
    let mut pts = Vec::new();
    let mut add = |index: usize, p: f64, r: f64, loss: LossSpec, sc: &Scenario| {
        for (label, scheme) in SCHEMES {
            let scenario = Scenario {
                scheme: scheme.into(),
                loss: loss.clone(),
                ..sc.clone()
            };
            pts.push(Point {
                sweep,
                label: label.into(),
                p,
                r,
                index,
                scenario,
            });
        }
    };
    // HIRT §VIII counts packets, not time: no scheme there has time-driven repairs (HIRT as
    // published has none), so the §VIII sweeps turn them off for everyone. The sparse sweep is
    // about them and keeps the configured delay.
    let base = Scenario {
        packets: o.packets,
        ..o.base.clone()
    };
    let base = if sweep == Sweep::Sparse {
        base
    } else {
        Scenario {
            repair_delay: None,
            ..base
        }
    };
    match sweep {
        Sweep::Fig10 => {
            for i in 0..=10 {
                let p = i as f64 * 0.005;
                let sc = Scenario {
                    seed: o.seed + i as u64,
                    ..base.clone()
                };
                add(i, p, 0.0, LossSpec::Uniform { p }, &sc);
            }
        }
        Sweep::Fig11a => {
            for (i, (u, v)) in latin_hypercube(o.lhs_points, o.seed)
                .into_iter()
                .enumerate()
            {
                let p = 0.0001 + u * (0.01 - 0.0001);
                let r = 0.10 + v * (0.50 - 0.10);
                let sc = Scenario {
                    seed: o.seed + i as u64,
                    ..base.clone()
                };
                add(
                    i,
                    p,
                    r,
                    LossSpec::GilbertElliott {
                        p,
                        r,
                        k: 1.0,
                        h: 0.0,
                    },
                    &sc,
                );
            }
        }
        Sweep::Fig11b => {
            let (p, r) = (0.00151, 1.0 / 3.0);
            for i in 0..o.seeds.max(1) as usize {
                let sc = Scenario {
                    seed: o.seed + i as u64,
                    ..base.clone()
                };
                add(
                    i,
                    p,
                    r,
                    LossSpec::GilbertElliott {
                        p,
                        r,
                        k: 1.0,
                        h: 0.0,
                    },
                    &sc,
                );
            }
        }
        Sweep::Sparse => {
            // One point per seed (`--seeds`, from `--seed`): the p99 of ~1000 recoveries is
            // decided by a handful of them, so one seed says little.
            for i in 0..o.seeds.max(1) as usize {
                let sc = Scenario {
                    pattern: Pattern::Poisson,
                    rate_pps: 100.0,
                    delay: Duration::from_millis(25),
                    seed: o.seed + i as u64,
                    // 1e6 packets at 100 pps would be 2.8 h of virtual time for one point; 1e5
                    // is already 1000 losses.
                    packets: o.packets.min(100_000),
                    ..base.clone()
                };
                add(i, 0.01, 0.0, LossSpec::Uniform { p: 0.01 }, &sc);
            }
        }
    }
    pts
}

/// Runs points on `jobs` threads (order of the results = order of the points), with a progress
/// bar on stderr when it is a terminal.
pub fn run_points(points: &[Point], jobs: usize) -> anyhow::Result<Vec<Report>> {
    use std::io::IsTerminal;
    let bar = indicatif::ProgressBar::new(points.len() as u64);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()?;
    let out = pool.install(|| {
        points
            .par_iter()
            .map(|pt| {
                let r = crate::run(&pt.scenario);
                bar.inc(1);
                r
            })
            .collect::<anyhow::Result<Vec<_>>>()
    });
    bar.finish_and_clear();
    out
}

/// CSV of a sweep: one row per point, with everything needed to replay it.
pub fn csv(points: &[Point], reports: &[Report]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for (pt, r) in points.iter().zip(reports) {
        let _ = writeln!(
            s,
            "{},{},{},{}",
            pt.sweep.name(),
            pt.label,
            pt.index,
            csv_row(&pt.scenario, r)
        );
    }
    s
}

/// Columns of [`csv_row`] preceded by sweep, label, index.
pub const CSV_HEADER: &str = "sweep,label,index,scheme,loss,seed,packets,rate_pps,delay_ms,window,sources,lost,recovered,unrecovered,recovered_ratio,residual_loss,overhead,overhead_bytes,recovery_delay_p50_pkts,recovery_delay_p99_pkts,recovery_delay_max_pkts,recovery_delay_p50_ms,recovery_delay_p99_ms,recovery_delay_max_ms,recovery_latency_p99_ms,decoder_symbol_ops,feedback_sent,feedback_lost,double_deliveries,corrupt_recoveries";

/// One CSV row (scheme and loss quoted: they contain commas).
pub fn csv_row(sc: &Scenario, r: &Report) -> String {
    format!(
        "\"{}\",\"{}\",{},{},{},{},{},{},{},{},{},{:.6},{:.8},{:.6},{:.6},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{}",
        sc.scheme,
        sc.loss,
        sc.seed,
        sc.packets,
        sc.rate_pps,
        sc.delay.as_secs_f64() * 1e3,
        sc.window.unwrap_or_else(|| crate::scenario::default_window(&sc.scheme)),
        r.sources,
        r.lost,
        r.recovered,
        r.unrecovered,
        r.recovered_ratio,
        r.residual_loss,
        r.overhead,
        r.overhead_bytes,
        r.recovery_delay_p50_pkts,
        r.recovery_delay_p99_pkts,
        r.recovery_delay_max_pkts,
        r.recovery_delay_p50_ms,
        r.recovery_delay_p99_ms,
        r.recovery_delay_max_ms,
        r.recovery_latency_p99_ms,
        r.decoder_symbol_ops,
        r.feedback_sent,
        r.feedback_lost,
        r.double_deliveries,
        r.corrupt_recoveries,
    )
}

fn by_label<'a>(
    points: &'a [Point],
    reports: &'a [Report],
) -> Vec<(&'a str, Vec<(&'a Point, &'a Report)>)> {
    let mut out: Vec<(&str, Vec<(&Point, &Report)>)> = Vec::new();
    for (pt, r) in points.iter().zip(reports) {
        match out.iter_mut().find(|(l, _)| *l == pt.label) {
            Some((_, v)) => v.push((pt, r)),
            None => out.push((&pt.label, vec![(pt, r)])),
        }
    }
    out
}

/// The figure of a sweep (SVG).
pub fn figure(sweep: Sweep, points: &[Point], reports: &[Report]) -> String {
    let groups = by_label(points, reports);
    let pct = |x: f64| x * 100.0;
    match sweep {
        Sweep::Fig10 => {
            let series = |f: &dyn Fn(&Report) -> f64| {
                groups
                    .iter()
                    .map(|(l, v)| Series {
                        name: l.to_string(),
                        points: v.iter().map(|(p, r)| (pct(p.p), f(r))).collect(),
                    })
                    .collect()
            };
            plot::render(
                "Fig. 10 - uniform loss",
                &[
                    Panel {
                        title: "Overhead".into(),
                        x_label: "uniform loss (%)".into(),
                        y_label: "repairs / sources (%)".into(),
                        series: series(&|r| pct(r.overhead)),
                        steps: false,
                        y_log_min: None,
                    },
                    Panel {
                        title: "Recovered".into(),
                        x_label: "uniform loss (%)".into(),
                        y_label: "recovered / lost (%)".into(),
                        series: series(&|r| pct(r.recovered_ratio)),
                        steps: false,
                        y_log_min: None,
                    },
                ],
            )
        }
        Sweep::Fig11a | Sweep::Fig11b => {
            let series = |f: &dyn Fn(&Report) -> f64| {
                groups
                    .iter()
                    .map(|(l, v)| Series {
                        name: l.to_string(),
                        points: plot::cdf(&v.iter().map(|(_, r)| f(r)).collect::<Vec<_>>()),
                    })
                    .collect()
            };
            let title = if sweep == Sweep::Fig11a {
                "Fig. 11a - Gilbert-Elliott, Latin hypercube p in [1e-4, 1e-2], r in [0.1, 0.5]"
            } else {
                "Fig. 11b - Gilbert-Elliott p = 0.00151, r = 1/3 (seeds)"
            };
            plot::render(
                title,
                &[
                    Panel {
                        title: "Overhead (CDF)".into(),
                        x_label: "repairs / sources (%)".into(),
                        y_label: "CDF".into(),
                        series: series(&|r| pct(r.overhead)),
                        steps: true,
                        y_log_min: None,
                    },
                    Panel {
                        title: "Recovered (CDF)".into(),
                        x_label: "recovered / lost (%)".into(),
                        y_label: "CDF".into(),
                        series: series(&|r| pct(r.recovered_ratio)),
                        steps: true,
                        y_log_min: None,
                    },
                ],
            )
        }
        Sweep::Sparse => String::new(),
    }
}

/// Binomial standard error of a recovered ratio measured over `lost` losses.
fn ratio_se(r: &Report) -> f64 {
    let q = r.recovered_ratio.clamp(0.0, 1.0);
    // At q = 1 the binomial SE is 0; use the rule of three (95 % bound 3/n) as the noise floor.
    ((q * (1.0 - q)) / r.lost.max(1) as f64)
        .sqrt()
        .max(1.5 / r.lost.max(1) as f64)
}

/// Markdown summary of a sweep: per-scheme table and, for the §VIII sweeps, whether ours
/// dominates every HIRT / Maelstrom point within 2 standard errors.
pub fn markdown(sweep: Sweep, points: &[Point], reports: &[Report]) -> String {
    let mut s = String::new();
    let groups = by_label(points, reports);
    match sweep {
        Sweep::Fig10 => {
            let _ = write!(s, "| loss |");
            for (l, _) in &groups {
                let _ = write!(s, " {l} ovh | {l} rec |");
            }
            s.push('\n');
            let _ = write!(s, "|---|");
            for _ in &groups {
                s.push_str("---|---|");
            }
            s.push('\n');
            let rows = groups.first().map_or(0, |g| g.1.len());
            for i in 0..rows {
                let _ = write!(s, "| {:.1}% |", groups[0].1[i].0.p * 100.0);
                for (_, v) in &groups {
                    let r = v[i].1;
                    let _ = write!(
                        s,
                        " {:.2}% | {:.3}% |",
                        r.overhead * 100.0,
                        r.recovered_ratio * 100.0
                    );
                }
                s.push('\n');
            }
        }
        Sweep::Fig11a | Sweep::Fig11b => {
            s.push_str("| scheme | overhead mean | overhead p10/p50/p90 | recovered mean | recovered p10/p50/p90 | residual loss mean | points |\n|---|---|---|---|---|---|---|\n");
            for (l, v) in &groups {
                let mut o: Vec<f64> = v.iter().map(|(_, r)| r.overhead * 100.0).collect();
                let mut q: Vec<f64> = v.iter().map(|(_, r)| r.recovered_ratio * 100.0).collect();
                let res: f64 = v.iter().map(|(_, r)| r.residual_loss).sum::<f64>() / v.len() as f64;
                o.sort_by(f64::total_cmp);
                q.sort_by(f64::total_cmp);
                let pc = |x: &[f64], f: f64| x[((x.len() - 1) as f64 * f).round() as usize];
                let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
                let _ = writeln!(
                    s,
                    "| {l} | {:.2}% | {:.2} / {:.2} / {:.2} | {:.2}% | {:.2} / {:.2} / {:.2} | {:.2e} | {} |",
                    mean(&o), pc(&o, 0.1), pc(&o, 0.5), pc(&o, 0.9), mean(&q), pc(&q, 0.1), pc(&q, 0.5), pc(&q, 0.9), res, v.len()
                );
            }
        }
        Sweep::Sparse => {
            // The bound is on the time from the original's send to its recovery
            // (`recovery_latency_*`); `recovery_delay_*` is the extra delay over the original's
            // arrival, shown for reference.
            s.push_str("| scheme | seed | lost | recovered | overhead | latency p99 ms (from send) | latency max ms | delay over arrival p50 / p99 / max ms | p99 <= bound |\n|---|---|---|---|---|---|---|---|---|\n");
            for (l, v) in &groups {
                for (pt, r) in v {
                    let bound = sparse_bound_ms(&pt.scenario);
                    let _ = writeln!(
                        s,
                        "| {l} | {} | {} | {} ({:.2}%) | {:.1}% | {:.2} | {:.2} | {:.2} / {:.2} / {:.2} | {} |",
                        r.seed,
                        r.lost,
                        r.recovered,
                        r.recovered_ratio * 100.0,
                        r.overhead * 100.0,
                        r.recovery_latency_p99_ms,
                        r.recovery_latency_max_ms,
                        r.recovery_delay_p50_ms,
                        r.recovery_delay_p99_ms,
                        r.recovery_delay_max_ms,
                        match bound {
                            Some(b) if r.recovery_latency_p99_ms <= b => format!("yes ({b:.0} ms)"),
                            Some(b) => format!("**no** ({b:.0} ms)"),
                            None => "-".into(),
                        }
                    );
                }
            }
            if let Some(pt) = points.first() {
                let _ = writeln!(
                    s,
                    "\nRepair delay {}, time-driven re-sends {} (`--repair-retries`); bound = 2 x repair_delay + one-way delay.",
                    pt.scenario
                        .repair_delay
                        .map_or("off".into(), |d| format!("{} ms", d.as_secs_f64() * 1e3)),
                    pt.scenario.repair_retries
                );
            }
        }
    }
    if sweep != Sweep::Sparse {
        let d = dominance(points, reports);
        let _ = writeln!(
            s,
            "\nDominance of ours over HIRT and every Maelstrom config, per design point (recovered ratio >= other - 2 SE, overhead <= other + 0.05 pp): {} of {} comparisons hold.",
            d.held, d.total
        );
        for v in d.violations.iter().take(20) {
            let _ = writeln!(s, "- {v}");
        }
    }
    s
}

/// The sparse-traffic bound on the recovery latency (from the send time):
/// 2 x repair_delay + one-way delay, in ms; `None` without time-driven repair.
pub fn sparse_bound_ms(sc: &Scenario) -> Option<f64> {
    sc.repair_delay
        .map(|d| (2 * d + sc.delay).as_secs_f64() * 1e3)
}

/// Outcome of the dominance check.
#[derive(Debug, Default)]
pub struct Dominance {
    /// Comparisons made.
    pub total: usize,
    /// Comparisons where ours dominated within noise.
    pub held: usize,
    /// Human-readable description of every failure.
    pub violations: Vec<String>,
}

/// Compares ours with HIRT and every Maelstrom config at each design point. Recovered ratios
/// are compared within 2 binomial standard errors (of both), overheads within 0.05 percentage
/// points (overhead is a count of what the encoder sent: its noise is the loss pattern's).
pub fn dominance(points: &[Point], reports: &[Report]) -> Dominance {
    let mut d = Dominance::default();
    let find = |label: &str, index: usize| {
        points
            .iter()
            .zip(reports)
            .find(|(p, _)| p.label == label && p.index == index)
            .map(|(_, r)| r)
    };
    let max_index = points.iter().map(|p| p.index).max().unwrap_or(0);
    for i in 0..=max_index {
        let Some(ours) = find("ours", i) else {
            continue;
        };
        for other in ["HIRT", "M:1-20:20", "M:1-20-40:20", "M:1-20-40:8"] {
            let Some(o) = find(other, i) else { continue };
            d.total += 1;
            let tol = 2.0 * (ratio_se(ours).powi(2) + ratio_se(o).powi(2)).sqrt();
            let rec_ok = ours.recovered_ratio >= o.recovered_ratio - tol;
            let ovh_ok = ours.overhead <= o.overhead + 0.0005;
            if rec_ok && ovh_ok {
                d.held += 1;
            } else {
                d.violations.push(format!(
                    "point {i} ({}, seed {}): ours rec {:.4}% ovh {:.3}% vs {other} rec {:.4}% ovh {:.3}% (tol {:.4} pp)",
                    ours.loss, ours.seed, ours.recovered_ratio * 100.0, ours.overhead * 100.0,
                    o.recovered_ratio * 100.0, o.overhead * 100.0, tol * 100.0
                ));
            }
        }
    }
    d
}

/// Runs a sweep and writes `<name>.csv`, `<name>.svg` (not for sparse) and `<name>.md` into
/// `out`. Returns the markdown summary.
pub fn run_sweep(sweep: Sweep, o: &PlanOptions, jobs: usize, out: &Path) -> anyhow::Result<String> {
    let points = plan(sweep, o);
    let reports = run_points(&points, jobs)?;
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join(format!("{}.csv", sweep.name())),
        csv(&points, &reports),
    )?;
    let svg = figure(sweep, &points, &reports);
    if !svg.is_empty() {
        std::fs::write(out.join(format!("{}.svg", sweep.name())), svg)?;
    }
    let md = markdown(sweep, &points, &reports);
    std::fs::write(out.join(format!("{}.md", sweep.name())), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin_hypercube_is_stratified_and_seeded() {
        let pts = latin_hypercube(100, 7);
        for dim in 0..2 {
            let mut seen = [false; 100];
            for &(u, v) in &pts {
                let x = if dim == 0 { u } else { v };
                assert!((0.0..1.0).contains(&x));
                seen[(x * 100.0) as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "one point per stratum");
        }
        assert_eq!(pts, latin_hypercube(100, 7));
        assert_ne!(pts, latin_hypercube(100, 8));
    }

    #[test]
    fn plans_have_every_scheme_per_point() {
        let o = PlanOptions {
            packets: 10,
            lhs_points: 5,
            seeds: 3,
            seed: 1,
            base: Scenario::default(),
        };
        assert_eq!(plan(Sweep::Fig10, &o).len(), 11 * SCHEMES.len());
        assert_eq!(plan(Sweep::Fig11a, &o).len(), 5 * SCHEMES.len());
        assert_eq!(plan(Sweep::Fig11b, &o).len(), 3 * SCHEMES.len());
        for p in plan(Sweep::Fig11a, &o) {
            assert!((0.0001..=0.01).contains(&p.p) && (0.1..=0.5).contains(&p.r));
        }
    }
}
