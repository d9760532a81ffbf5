//! The recovery-deadline experiment (`hirt sim --sweep deadline`): recovered in time against
//! overhead for every scheme of HIRT §VIII and the computed lower bound, at deadlines of 0.5, 1
//! and 2 RTT, on uniform loss (0.5, 1, 3, 5 %), the Fig. 11a Gilbert-Elliott design points and
//! the Starlink point. Every scheme sees the same loss realisation at a (point, seed): the
//! scenario seed depends only on them. `ours` also runs with a fixed margin `z` (`ours z=..`
//! rows) at 0.5 RTT, tracing its trade-off curve for the dominance check.

use std::fmt::Write;
use std::path::Path;

use hirt_channel::LossSpec;
use hirt_core::Deadline;

use crate::experiments::{latin_hypercube, run_points, PlanOptions, Point, Sweep, SCHEMES};
use crate::plot::{self, Panel, Series};
use crate::{Report, Scenario};

/// Deadlines of the experiment, in RTTs.
pub const DEADLINES: [f64; 3] = [0.5, 1.0, 2.0];
/// Fixed margins of the `ours z=..` curve at the shortest deadline.
pub const OURS_Z: [f64; 16] = [
    0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0,
];

/// One run of the experiment.
#[derive(Clone, Debug)]
pub struct Run {
    /// Loss point name (`uniform 3%`, `GE 7`, `starlink`).
    pub point: String,
    /// Index of the loss point.
    pub index: usize,
    /// Deadline in RTTs.
    pub deadline_rtt: f64,
    /// Seed index (0-based).
    pub seed_index: u64,
    /// Scheme label.
    pub label: String,
    /// What to run.
    pub scenario: Scenario,
}

/// The loss points: uniform, then the Fig. 11a design points, then Starlink.
pub fn loss_points(o: &PlanOptions) -> Vec<(String, LossSpec)> {
    let mut v: Vec<(String, LossSpec)> = [0.005, 0.01, 0.03, 0.05]
        .into_iter()
        .map(|p| (format!("uniform {}%", p * 100.0), LossSpec::Uniform { p }))
        .collect();
    for (i, (u, w)) in latin_hypercube(o.lhs_points, o.seed)
        .into_iter()
        .enumerate()
    {
        let p = 0.0001 + u * (0.01 - 0.0001);
        let r = 0.10 + w * (0.50 - 0.10);
        v.push((
            format!("GE {i}"),
            LossSpec::GilbertElliott {
                p,
                r,
                k: 1.0,
                h: 0.0,
            },
        ));
    }
    v.push((
        "starlink".into(),
        LossSpec::GilbertElliott {
            p: 0.00151,
            r: 1.0 / 3.0,
            k: 1.0,
            h: 0.0,
        },
    ));
    v
}

/// Every run: loss point x deadline x seed x scheme (plus the `ours z=..` curve at 0.5 RTT).
pub fn plan(o: &PlanOptions) -> Vec<Run> {
    let base = Scenario {
        packets: o.packets,
        repair_delay: None,
        ..o.base.clone()
    };
    let mut runs = Vec::new();
    for (index, (point, loss)) in loss_points(o).into_iter().enumerate() {
        for &k in &DEADLINES {
            for seed_index in 0..o.seeds.max(1) {
                let mut schemes: Vec<(String, String)> = SCHEMES
                    .iter()
                    .map(|(l, s)| (l.to_string(), s.to_string()))
                    .collect();
                if k == DEADLINES[0] {
                    schemes.extend(OURS_Z.iter().map(|z| {
                        (
                            format!("ours z={z}"),
                            format!("ours:z={z},zmin={z},zmax={z}"),
                        )
                    }));
                }
                for (label, scheme) in schemes {
                    runs.push(Run {
                        point: point.clone(),
                        index,
                        deadline_rtt: k,
                        seed_index,
                        label,
                        scenario: Scenario {
                            scheme,
                            loss: loss.clone(),
                            seed: o.seed + 1000 * seed_index + index as u64,
                            deadline: Some(Deadline::Rtt(k)),
                            ..base.clone()
                        },
                    });
                }
            }
        }
    }
    runs
}

fn min_med_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// Whether `a` (in time, overhead) is at least as good as `b` in both.
fn covers(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 >= b.0 && a.1 <= b.1
}

/// The in-time share a curve of (in time, overhead) points reaches at `overhead`: linear
/// between the two points around it, and at least that of any point that costs no more
/// (spending more than a point needs never has to recover less); `None` below the cheapest
/// point.
fn in_time_at(curve: &[(f64, f64)], overhead: f64) -> Option<f64> {
    let mut c: Vec<(f64, f64)> = curve.iter().map(|&(t, o)| (o, t)).collect();
    c.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let between = c
        .windows(2)
        .filter(|w| w[0].0 <= overhead && overhead <= w[1].0 && w[1].0 > w[0].0)
        .map(|w| {
            let ((o1, t1), (o2, t2)) = (w[0], w[1]);
            t1 + (t2 - t1) * (overhead - o1) / (o2 - o1)
        });
    let cheaper = c.iter().filter(|p| p.0 <= overhead).map(|p| p.1);
    between.chain(cheaper).reduce(f64::max)
}

/// Runs the experiment; writes `deadline.csv`, `deadline.md` and `deadline.svg` into `out`;
/// returns the markdown.
pub fn run(o: &PlanOptions, jobs: usize, out: &Path) -> anyhow::Result<String> {
    let runs = plan(o);
    let points: Vec<Point> = runs
        .iter()
        .map(|r| Point {
            sweep: Sweep::Fig10,
            label: r.label.clone(),
            p: 0.0,
            r: 0.0,
            index: r.index,
            scenario: r.scenario.clone(),
        })
        .collect();
    let reports = run_points(&points, jobs)?;
    std::fs::create_dir_all(out)?;
    let mut csv = String::from(
        "point,deadline_rtt,seed,label,scheme,loss,packets,lost,overhead,recovered_ratio,recovered_in_time_ratio,late_recoveries,bound_overhead,bound_overhead_achieved,overhead_to_bound,recovery_delay_p99_ms,repairs_report,loss_reports,double_deliveries,corrupt_recoveries\n",
    );
    for (run, r) in runs.iter().zip(&reports) {
        let _ = writeln!(
            csv,
            "{},{},{},{},\"{}\",\"{}\",{},{},{:.6},{:.6},{:.6},{},{:.6},{:.6},{:.4},{:.3},{},{},{},{}",
            run.point,
            run.deadline_rtt,
            run.scenario.seed,
            run.label,
            run.scenario.scheme,
            run.scenario.loss,
            run.scenario.packets,
            r.lost,
            r.overhead,
            r.recovered_ratio,
            r.recovered_in_time_ratio,
            r.late_recoveries,
            r.bound_overhead,
            r.bound_overhead_achieved,
            r.overhead_to_bound,
            r.recovery_delay_p99_ms,
            r.repairs_report,
            r.loss_reports,
            r.double_deliveries,
            r.corrupt_recoveries
        );
    }
    std::fs::write(out.join("deadline.csv"), csv)?;
    let md = markdown(&runs, &reports);
    std::fs::write(out.join("deadline.md"), &md)?;
    std::fs::write(out.join("deadline.svg"), figure(&runs, &reports))?;
    Ok(md)
}

/// Per (loss point, deadline, scheme): the runs of every seed.
fn groups<'a>(runs: &'a [Run], reports: &'a [Report]) -> Vec<(&'a Run, Vec<&'a Report>)> {
    let mut g: Vec<(&Run, Vec<&Report>)> = Vec::new();
    for (run, r) in runs.iter().zip(reports) {
        match g.iter_mut().find(|(k, _)| {
            k.index == run.index && k.deadline_rtt == run.deadline_rtt && k.label == run.label
        }) {
            Some((_, v)) => v.push(r),
            None => g.push((run, vec![r])),
        }
    }
    g
}

/// Median (in time, overhead) of a group.
fn median_point(v: &[&Report]) -> (f64, f64) {
    (
        min_med_max(v.iter().map(|r| r.recovered_in_time_ratio).collect()).1,
        min_med_max(v.iter().map(|r| r.overhead).collect()).1,
    )
}

/// Tables (min/median/max over seeds) and the checks of the done-when criteria.
pub fn markdown(runs: &[Run], reports: &[Report]) -> String {
    let g = groups(runs, reports);
    let mut s = String::new();
    let pct = |x: f64| x * 100.0;
    for &k in &DEADLINES {
        let _ = writeln!(
            s,
            "\n### Deadline {k} RTT\n\n| loss point | scheme | in time % min/med/max | overhead % min/med/max | bound % (99.9 %) | overhead / bound at its in-time share (med) | late (med) |\n|---|---|---|---|---|---|---|"
        );
        for (run, v) in g.iter().filter(|(r, _)| r.deadline_rtt == k) {
            let (a, b, c) = min_med_max(v.iter().map(|r| pct(r.recovered_in_time_ratio)).collect());
            let (d, e, f) = min_med_max(v.iter().map(|r| pct(r.overhead)).collect());
            let bound = min_med_max(v.iter().map(|r| pct(r.bound_overhead)).collect()).1;
            let ratio = min_med_max(v.iter().map(|r| r.overhead_to_bound).collect()).1;
            let late = min_med_max(v.iter().map(|r| r.late_recoveries as f64).collect()).1;
            let _ = writeln!(
                s,
                "| {} | {} | {a:.2} / {b:.2} / {c:.2} | {d:.3} / {e:.3} / {f:.3} | {bound:.3} | {ratio:.2} | {late:.0} |",
                run.point, run.label
            );
        }
    }
    // Done-when checks.
    let _ = writeln!(s, "\n### Checks\n");
    let mut fails_2 = Vec::new();
    for (run, v) in g
        .iter()
        .filter(|(r, _)| r.deadline_rtt == 2.0 && r.label == "ours")
    {
        for r in v {
            let p = r.lost as f64 / r.sources.max(1) as f64;
            let limit = 1.2 * p / (1.0 - p) + 0.003;
            if r.recovered_in_time_ratio < 0.999 || r.overhead > limit {
                fails_2.push(format!(
                    "{} seed {}: in time {:.3} %, overhead {:.3} % (limit {:.3} %)",
                    run.point,
                    r.seed,
                    pct(r.recovered_in_time_ratio),
                    pct(r.overhead),
                    pct(limit)
                ));
            }
        }
    }
    let total_2 = g
        .iter()
        .filter(|(r, _)| r.deadline_rtt == 2.0 && r.label == "ours")
        .map(|(_, v)| v.len())
        .sum::<usize>();
    let _ = writeln!(
        s,
        "- Deadline 2 RTT, ours: >= 99.9 % in time at overhead <= 1.2 p/(1-p) + 0.3 pp: {} of {total_2} runs fail{}",
        fails_2.len(),
        if fails_2.is_empty() { String::new() } else { format!(":\n  - {}", fails_2.join("\n  - ")) }
    );
    // Dominance at 0.5 RTT (medians over seeds): the default, and the ours curve.
    let mut default_ok = 0;
    let mut curve_ok = 0;
    let mut total = 0;
    let mut misses = Vec::new();
    let mut ahead_median = 0;
    let mut ahead_every_seed = 0;
    let mut behind = Vec::new();
    for (run, v) in g.iter().filter(|(r, _)| {
        r.deadline_rtt == DEADLINES[0] && (r.label == "HIRT" || r.label.starts_with("M:"))
    }) {
        total += 1;
        let name = format!("{} {}", run.point, run.label);
        let them = median_point(v);
        let ours_of = |label: &str| {
            g.iter()
                .find(|(r, _)| {
                    r.index == run.index && r.deadline_rtt == DEADLINES[0] && r.label == label
                })
                .map(|(_, v)| median_point(v))
        };
        let default = ours_of("ours");
        if default.is_some_and(|o| covers(o, them)) {
            default_ok += 1;
        }
        let mut curve = vec![default];
        curve.extend(OURS_Z.iter().map(|z| ours_of(&format!("ours z={z}"))));
        // The same comparison at equal overhead, seed by seed (every scheme saw the same
        // losses at a seed): the curve of the default and the fixed margins of that seed at
        // the rival's overhead.
        let ours_seeds: Vec<&Vec<&Report>> = g
            .iter()
            .filter(|(r, _)| {
                r.index == run.index
                    && r.deadline_rtt == DEADLINES[0]
                    && (r.label == "ours" || r.label.starts_with("ours z="))
            })
            .map(|(_, v)| v)
            .collect();
        let gaps: Vec<Option<f64>> = v
            .iter()
            .enumerate()
            .map(|(i, them)| {
                let curve: Vec<(f64, f64)> = ours_seeds
                    .iter()
                    .filter_map(|v| v.get(i))
                    .map(|r| (r.recovered_in_time_ratio, r.overhead))
                    .collect();
                in_time_at(&curve, them.overhead).map(|t| t - them.recovered_in_time_ratio)
            })
            .collect();
        if gaps.iter().all(|g| g.is_some_and(|g| g >= 0.0)) {
            ahead_every_seed += 1;
        }
        let known: Vec<f64> = gaps.iter().flatten().copied().collect();
        if known.len() == gaps.len() && min_med_max(known).1 >= 0.0 {
            ahead_median += 1;
        } else {
            behind.push(format!(
                "{name}: {} pp",
                gaps.iter()
                    .map(|g| g.map_or("below".into(), |g| format!("{:+.2}", pct(g))))
                    .collect::<Vec<_>>()
                    .join(" / ")
            ));
        }
        if curve.iter().flatten().any(|&o| covers(o, them)) {
            curve_ok += 1;
        } else {
            misses.push(format!(
                "{name}: {:.2} % in time at {:.2} %",
                pct(them.0),
                pct(them.1)
            ));
        }
    }
    let _ = writeln!(
        s,
        "- Deadline 0.5 RTT, (in time, overhead) medians: the default `ours` is at least as good in both as {default_ok} of {total} HIRT / Maelstrom points; `ours` or one of its fixed-margin points is, for {curve_ok} of {total}{}",
        if misses.is_empty() { String::new() } else { format!("; not covered:\n  - {}", misses.join("\n  - ")) }
    );
    let _ = writeln!(
        s,
        "- Deadline 0.5 RTT, at equal overhead (the curve of the default and the fixed margins of each seed, at the rival's overhead of that seed): `ours` recovers at least as much in time as {ahead_median} of {total} HIRT / Maelstrom points at the median over seeds, in every seed at {ahead_every_seed}{}",
        if behind.is_empty() { String::new() } else { format!("; behind, or below the curve's cheapest point (per seed):\n  - {}", behind.join("\n  - ")) }
    );
    s
}

/// One panel per deadline: median (overhead, in time) per loss point, one series per scheme,
/// plus the bound (at 99.9 %) as its own series.
pub fn figure(runs: &[Run], reports: &[Report]) -> String {
    let g = groups(runs, reports);
    let mut panels = Vec::new();
    for &k in &DEADLINES {
        let mut series: Vec<Series> = Vec::new();
        let mut bound = Series {
            name: "bound (99.9 %)".into(),
            points: Vec::new(),
        };
        for (run, v) in g.iter().filter(|(r, _)| r.deadline_rtt == k) {
            if run.label.starts_with("ours z=") {
                continue;
            }
            let (t, o) = median_point(v);
            let pt = (o * 100.0, t * 100.0);
            match series.iter_mut().find(|s| s.name == run.label) {
                Some(s) => s.points.push(pt),
                None => series.push(Series {
                    name: run.label.clone(),
                    points: vec![pt],
                }),
            }
            if run.label == "ours" {
                let b = min_med_max(v.iter().map(|r| r.bound_overhead).collect()).1;
                bound.points.push((b * 100.0, 99.9));
            }
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        bound.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(bound);
        panels.push(Panel {
            title: format!("Deadline {k} RTT: every loss point (median over seeds)"),
            x_label: "overhead: repairs / sources (%), log".into(),
            y_label: "recovered in time / lost (%)".into(),
            series: series
                .into_iter()
                .map(|s| Series {
                    points: s
                        .points
                        .into_iter()
                        .map(|(x, y)| (x.max(1e-3).log10(), y))
                        .collect(),
                    ..s
                })
                .collect(),
            steps: false,
            y_log_min: None,
        });
    }
    plot::render(
        "Recovered in time vs overhead (x: log10 of the overhead in %)",
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_is_read_between_its_points_at_an_overhead() {
        // (in time, overhead), unsorted: 40 % at 2 %, 20 % at 1 %, 60 % at 4 %.
        let curve = [(0.4, 0.02), (0.2, 0.01), (0.6, 0.04)];
        let at = |o| in_time_at(&curve, o);
        assert!((at(0.015).unwrap() - 0.3).abs() < 1e-12);
        assert!((at(0.03).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(at(0.02), Some(0.4));
        assert_eq!(at(0.005), None, "below the cheapest point");
        assert_eq!(
            at(0.05),
            Some(0.6),
            "beyond the dearest point: what it reaches"
        );
        // Two margins at the same overhead: the better one counts.
        assert_eq!(in_time_at(&[(0.3, 0.02), (0.5, 0.02)], 0.02), Some(0.5));
        // A cheaper point that recovers more than the segment above it.
        let dip = [(0.5, 0.01), (0.3, 0.02), (0.7, 0.04)];
        assert_eq!(in_time_at(&dip, 0.02), Some(0.5));
        assert!((in_time_at(&dip, 0.03).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn every_scheme_sees_the_same_seed_at_a_point() {
        let o = PlanOptions {
            packets: 10,
            lhs_points: 3,
            seeds: 2,
            seed: 1,
            base: Scenario::default(),
        };
        let runs = plan(&o);
        // 4 uniform + 3 GE + starlink = 8 points; 3 deadlines x 2 seeds x 6 schemes, + the z
        // variants at the first deadline.
        assert_eq!(runs.len(), 8 * (3 * 2 * 6 + 2 * OURS_Z.len()));
        for a in &runs {
            for b in &runs {
                if a.index == b.index && a.seed_index == b.seed_index {
                    assert_eq!(a.scenario.seed, b.scenario.seed);
                    assert_eq!(a.scenario.loss, b.scenario.loss);
                }
            }
        }
        assert!(covers((0.9, 0.02), (0.8, 0.03)) && !covers((0.9, 0.04), (0.8, 0.03)));
    }
}
