//! Results: percentiles, the "without vs with FEC" table, JSON and SVG CDF plots (drawn by
//! `hirt_sim::plot`: the CDF and the tail as a log-scale CCDF, like HIRT Figs. 7-9).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::workload::Samples;

/// Summary of one run of one workload.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Requests completed and verified.
    pub requests: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Responses with a wrong byte.
    pub corrupt: u64,
    /// Median completion time, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
    /// Verified application bytes per second, Mbit/s.
    pub goodput_mbps: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Summary {
    /// Summarizes samples (sorts their latencies in place).
    pub fn of(s: &mut Samples) -> Summary {
        let goodput_mbps = if s.elapsed.is_zero() {
            0.0
        } else {
            s.bytes as f64 * 8.0 / s.elapsed.as_secs_f64() / 1e6
        };
        if let Some(t) = s.tool {
            return Summary {
                requests: t.requests,
                errors: s.errors,
                corrupt: s.corrupt,
                p50_ms: t.p50_ms,
                p90_ms: t.p90_ms,
                p99_ms: t.p99_ms,
                p999_ms: t.p999_ms,
                mean_ms: t.mean_ms,
                max_ms: t.max_ms,
                goodput_mbps,
            };
        }
        s.latencies_us.sort_unstable();
        let l = &s.latencies_us;
        let ms = |v: u64| v as f64 / 1000.0;
        Summary {
            requests: l.len() as u64,
            errors: s.errors,
            corrupt: s.corrupt,
            p50_ms: ms(percentile(l, 0.50)),
            p90_ms: ms(percentile(l, 0.90)),
            p99_ms: ms(percentile(l, 0.99)),
            p999_ms: ms(percentile(l, 0.999)),
            mean_ms: if l.is_empty() {
                0.0
            } else {
                ms(l.iter().sum::<u64>()) / l.len() as f64
            },
            max_ms: ms(l.last().copied().unwrap_or(0)),
            goodput_mbps,
        }
    }
}

/// FEC counters of the tunnel during the FEC run (summed over both ends and directions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FecStats {
    /// Source packets protected.
    pub sources: u64,
    /// Repair packets sent.
    pub repairs: u64,
    /// Lost source packets recovered by the decoders.
    pub recovered: u64,
    /// Of those, recovered later than the tunnel's recovery deadline after the decoder knew
    /// of the loss (0 without a deadline).
    pub recovered_late: u64,
    /// The larger of the two decoders' 99th percentile of the time from the first packet that
    /// showed a loss to its recovery, ms (quarter-octave buckets, read as their upper bound).
    pub recovery_delay_p99_ms: f64,
    /// The longest such time at either decoder, ms.
    pub recovery_delay_max_ms: f64,
    /// Losses the decoders could not recover.
    pub unrecoverable: u64,
    /// Originals dropped because they arrived after their recovery.
    pub duplicates: u64,
    /// Sources the decoders held for in-order release (behind a loss).
    pub held: u64,
    /// Holes in-order release stopped waiting for (delivered out of order if recovered later).
    pub order_skipped: u64,
    /// Sources delivered past a hole because their flow was not suspected of a packet in it.
    pub order_passed: u64,
    /// Sources the encoders dropped before coding: queue management on the path's queueing
    /// delay (`--aqm-target-ms`).
    pub aqm_drops: u64,
    /// ECN-capable sources the same queue management marked CE instead of dropping.
    pub aqm_marks: u64,
    /// Bytes of source and repair packets sent (tunnel payload, both ends).
    pub source_bytes: u64,
    pub repair_bytes: u64,
    /// Repair packets / source packets.
    pub overhead: f64,
    /// Where the figures came from.
    pub source: String,
}

impl FecStats {
    /// Repair bytes / source bytes: what the repairs cost the link's capacity.
    pub fn overhead_bytes(&self) -> f64 {
        if self.source_bytes > 0 {
            self.repair_bytes as f64 / self.source_bytes as f64
        } else {
            0.0
        }
    }
}

/// Emulator counters of one run (both directions summed).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkStats {
    /// Packets offered to the link.
    pub packets: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped by the queue.
    pub queue_drops: u64,
    /// Marked CE by the queue (`--ecn-mark-above`).
    pub ce_marked: u64,
    /// The emulator's own losses (should be 0).
    pub own_losses: u64,
    /// Kernel counters of the end hosts during the run (drops inside the hosts, TCP
    /// retransmissions).
    pub host: crate::host::HostCounters,
}

/// One workload: baseline vs FEC (and optionally lossless).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Workload name (e.g. `http-tcp-10kB`).
    pub workload: String,
    /// Run over the same link without loss (reference), when asked.
    pub lossless: Option<Summary>,
    /// Without FEC.
    pub baseline: Summary,
    /// With FEC.
    pub fec: Option<Summary>,
    /// Tunnel counters of the FEC run.
    pub fec_stats: Option<FecStats>,
    /// Emulator and host counters, lossless run.
    pub lossless_link: Option<LinkStats>,
    /// Emulator and host counters, baseline run.
    pub baseline_link: LinkStats,
    /// Emulator counters, FEC run.
    pub fec_link: Option<LinkStats>,
    /// Notes (tool used, what was skipped).
    pub notes: Vec<String>,
}

impl Comparison {
    /// The largest p99 ratio any tunnel could show in this run: the no-FEC p99 over the p99 of
    /// the same workload on the same link without loss. A tunnel that recovers every loss at
    /// once still pays the end hosts' own tail (scheduling, the transport's pacing and timers),
    /// which the lossless run measures. `None` without a lossless run with latencies.
    pub fn p99_ratio_bound(&self) -> Option<f64> {
        let l = self.lossless.as_ref().filter(|l| l.p99_ms > 0.0)?;
        Some(self.baseline.p99_ms / l.p99_ms)
    }

    /// The JSON summary object (flat keys first, details after).
    pub fn json(&self) -> serde_json::Value {
        let f = self.fec.clone().unwrap_or_default();
        let fs = self.fec_stats.clone().unwrap_or_default();
        serde_json::json!({
            "workload": self.workload,
            "baseline_p50_ms": self.baseline.p50_ms,
            "baseline_p99_ms": self.baseline.p99_ms,
            "baseline_p999_ms": self.baseline.p999_ms,
            "baseline_mean_ms": self.baseline.mean_ms,
            "baseline_goodput_mbps": self.baseline.goodput_mbps,
            "fec_p50_ms": f.p50_ms,
            "fec_p99_ms": f.p99_ms,
            "fec_p999_ms": f.p999_ms,
            "fec_mean_ms": f.mean_ms,
            "fec_goodput_mbps": f.goodput_mbps,
            "lossless_goodput_mbps": self.lossless.as_ref().map(|l| l.goodput_mbps),
            "lossless_mean_ms": self.lossless.as_ref().map(|l| l.mean_ms),
            "lossless_p50_ms": self.lossless.as_ref().map(|l| l.p50_ms),
            "lossless_p99_ms": self.lossless.as_ref().map(|l| l.p99_ms),
            "p99_ratio_bound": self.p99_ratio_bound(),
            "recovered": fs.recovered,
            "recovered_late": fs.recovered_late,
            "recovery_delay_p99_ms": fs.recovery_delay_p99_ms,
            "unrecoverable": fs.unrecoverable,
            "duplicates": fs.duplicates,
            "held": fs.held,
            "order_skipped": fs.order_skipped,
            "order_passed": fs.order_passed,
            "aqm_drops": fs.aqm_drops,
            "aqm_marks": fs.aqm_marks,
            "overhead": fs.overhead,
            "overhead_bytes": fs.overhead_bytes(),
            "p99_ratio": if f.p99_ms > 0.0 { self.baseline.p99_ms / f.p99_ms } else { 0.0 },
            "p50_reduction": if self.baseline.p50_ms > 0.0 { 1.0 - f.p50_ms / self.baseline.p50_ms } else { 0.0 },
            "details": self,
        })
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== {} ==", self.workload);
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "run",
            "requests",
            "errors",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "mean ms",
            "Mbit/s"
        );
        let row = |out: &mut String, name: &str, s: &Summary| {
            let _ = writeln!(
                out,
                "{:<10} {:>8} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.2}",
                name,
                s.requests,
                s.errors,
                s.p50_ms,
                s.p90_ms,
                s.p99_ms,
                s.p999_ms,
                s.mean_ms,
                s.goodput_mbps
            );
        };
        if let Some(l) = &self.lossless {
            row(&mut out, "lossless", l);
        }
        let b = &self.baseline;
        if b.requests > 0 || b.errors > 0 || b.goodput_mbps > 0.0 || self.fec.is_none() {
            row(&mut out, "no FEC", &self.baseline);
        }
        if let Some(f) = &self.fec {
            row(&mut out, "FEC", f);
        }
        let link_row = |out: &mut String, name: &str, l: &LinkStats| {
            let _ = writeln!(
                out,
                "link, {name} {} pkts, {} lost by the model, {} queue drops, {} CE marks, {} emulator losses",
                l.packets, l.lost, l.queue_drops, l.ce_marked, l.own_losses
            );
            let h = &l.host;
            let _ = writeln!(
                out,
                "hosts, {name} {} drops inside the hosts ({} UDP rcvbuf, {} UDP sndbuf, {} backlog, interfaces {:?}); TCP: {} retransmitted segments, {} RTOs, {} loss probes, {} undone reductions, {} reorderings",
                h.host_drops(),
                h.udp_rcvbuf_errors,
                h.udp_sndbuf_errors,
                h.backlog_drops,
                h.if_drops,
                h.tcp_retrans_segs,
                h.tcp_timeouts,
                h.tcp_loss_probes,
                h.tcp_undos,
                h.tcp_reorder_seen
            );
        };
        if let Some(ll) = &self.lossless_link {
            link_row(&mut out, "lossless:", ll);
        }
        link_row(&mut out, "no FEC:  ", &self.baseline_link);
        if let Some(fl) = &self.fec_link {
            link_row(&mut out, "FEC:     ", fl);
        }
        if let Some(fs) = &self.fec_stats {
            let _ = writeln!(
                out,
                "FEC: overhead {:.2}% ({} repairs / {} sources; {:.2}% of bytes), recovered {} ({} late; delay p99 {:.1} ms, max {:.1} ms), unrecoverable {}, duplicates {}, held in order {} (holes given up {}, passed by other flows {}) [{}]",
                fs.overhead * 100.0,
                fs.repairs,
                fs.sources,
                fs.overhead_bytes() * 100.0,
                fs.recovered,
                fs.recovered_late,
                fs.recovery_delay_p99_ms,
                fs.recovery_delay_max_ms,
                fs.unrecoverable,
                fs.duplicates,
                fs.held,
                fs.order_skipped,
                fs.order_passed,
                fs.source
            );
            if fs.aqm_drops + fs.aqm_marks > 0 {
                let _ = writeln!(
                    out,
                    "FEC: queue management on the path (--aqm-target-ms) dropped {} sources and \
                     marked {} CE",
                    fs.aqm_drops, fs.aqm_marks
                );
            }
        }
        if let (Some(f), b) = (&self.fec, &self.baseline) {
            if f.goodput_mbps > 0.0 && b.goodput_mbps > 0.0 {
                let lossless = self.lossless.as_ref().map_or(String::new(), |l| {
                    format!(
                        ", {:.1}% of lossless",
                        f.goodput_mbps / l.goodput_mbps.max(1e-9) * 100.0
                    )
                });
                let _ = writeln!(
                    out,
                    "goodput: {:.2}x the no-FEC run{lossless}",
                    f.goodput_mbps / b.goodput_mbps
                );
            }
            if f.p99_ms > 0.0 && b.p50_ms > 0.0 {
                let bound = self.p99_ratio_bound().map_or(String::new(), |r| {
                    format!(" (the lossless run's p99 allows at most {r:.2}x)")
                });
                let _ = writeln!(
                    out,
                    "p99: {:.2}x lower with FEC{bound}; p50: {:+.1}%; mean: {:+.1}%",
                    b.p99_ms / f.p99_ms,
                    (f.p50_ms / b.p50_ms - 1.0) * 100.0,
                    (f.mean_ms / b.mean_ms - 1.0) * 100.0
                );
            }
        }
        if let (None, Some(r)) = (&self.fec, self.p99_ratio_bound()) {
            let _ = writeln!(
                out,
                "p99: {r:.2}x the lossless run's, the most a tunnel could take off"
            );
        }
        for (name, s) in [("no FEC", Some(&self.baseline)), ("FEC", self.fec.as_ref())] {
            if let Some(s) = s.filter(|s| s.corrupt > 0) {
                let _ = writeln!(
                    out,
                    "WRONG BYTES: {} responses of the {name} run did not match",
                    s.corrupt
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}

/// Points of one panel kept at most per series: the body of a CDF is thinned to this many, the
/// CCDF's last percent (the tail the lab is about) is kept whole.
const PLOT_POINTS: usize = 600;

/// Writes `<dir>/<name>.svg` with [`hirt_sim::plot`]: the CDF and the CCDF on a log scale (down
/// to 1e-4) of each labelled series (latencies in microseconds, sorted), in milliseconds.
pub fn write_cdf_svg(
    dir: &Path,
    name: &str,
    title: &str,
    series: &[(&str, &[u64])],
) -> std::io::Result<()> {
    use hirt_sim::plot::{self, Panel, Series};
    std::fs::create_dir_all(dir)?;
    let mut cdfs = Vec::new();
    let mut ccdfs = Vec::new();
    for (label, data) in series.iter().filter(|(_, d)| !d.is_empty()) {
        let ms: Vec<f64> = data.iter().map(|&us| us as f64 / 1000.0).collect();
        let step = (ms.len() / PLOT_POINTS).max(1);
        let tail = ms.len() - ms.len() / 100;
        let thin = |points: Vec<(f64, f64)>, keep_tail: bool| -> Vec<(f64, f64)> {
            let last = points.len() - 1;
            points
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % step == 0 || *i == last || (keep_tail && *i >= tail))
                .map(|(_, p)| p)
                .collect()
        };
        cdfs.push(Series {
            name: label.to_string(),
            points: thin(plot::cdf(&ms), false),
        });
        ccdfs.push(Series {
            name: label.to_string(),
            points: thin(plot::ccdf(&ms), true),
        });
    }
    let panel = |title: &str, y_label: &str, series, y_log_min| Panel {
        title: title.into(),
        x_label: "completion time (ms)".into(),
        y_label: y_label.into(),
        series,
        steps: true,
        y_log_min,
    };
    let svg = plot::render(
        title,
        &[
            panel("CDF", "CDF", cdfs, None),
            panel("tail", "1 - CDF (log)", ccdfs, Some(1e-4)),
        ],
    );
    std::fs::write(dir.join(format!("{name}.svg")), svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 0.5), 500);
        assert_eq!(percentile(&v, 0.99), 990);
        assert_eq!(percentile(&v, 0.999), 999);
        assert_eq!(percentile(&v, 1.0), 1000);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn tool_stats_and_goodput_only_runs_are_reported() {
        use crate::workload::ToolStats;
        use std::time::Duration;
        let mut wrk = Samples {
            bytes: 1_000_000,
            elapsed: Duration::from_secs(1),
            tool: Some(ToolStats {
                requests: 7,
                p50_ms: 52.4,
                p99_ms: 112.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let w = Summary::of(&mut wrk);
        assert_eq!((w.requests, w.p50_ms, w.p99_ms), (7, 52.4, 112.0));
        assert_eq!(w.goodput_mbps, 8.0);
        // iperf3: goodput only. The no-FEC row and the goodput ratios are still printed.
        let gp = |mbps: u64| {
            Summary::of(&mut Samples {
                bytes: mbps * 125_000,
                elapsed: Duration::from_secs(1),
                ..Default::default()
            })
        };
        let c = Comparison {
            workload: "iperf3-cubic".into(),
            lossless: Some(gp(100)),
            baseline: gp(2),
            fec: Some(gp(90)),
            fec_stats: None,
            lossless_link: None,
            baseline_link: LinkStats::default(),
            fec_link: None,
            notes: vec![],
        };
        let t = c.table();
        assert!(t.contains("no FEC "), "{t}");
        assert!(
            t.contains("goodput: 45.00x the no-FEC run, 90.0% of lossless"),
            "{t}"
        );
    }

    #[test]
    fn the_lossless_run_bounds_the_p99_ratio() {
        let run = |ms: &[u64]| {
            Summary::of(&mut Samples {
                latencies_us: ms.iter().map(|m| m * 1000).collect(),
                ..Default::default()
            })
        };
        // p99 by nearest rank of 100 samples: the 99th.
        let mut slow = vec![50u64; 98];
        slow.extend([240, 300]);
        let mut fast = vec![50u64; 98];
        fast.extend([60, 61]);
        let mut c = Comparison {
            workload: "x".into(),
            lossless: Some(run(&fast)),
            baseline: run(&slow),
            fec: Some(run(&[50, 80])),
            fec_stats: None,
            lossless_link: None,
            baseline_link: LinkStats::default(),
            fec_link: None,
            notes: vec![],
        };
        assert_eq!(c.p99_ratio_bound(), Some(4.0));
        let j = c.json();
        assert_eq!(j["lossless_p99_ms"], 60.0);
        assert_eq!(j["p99_ratio_bound"], 4.0);
        let t = c.table();
        assert!(
            t.contains("p99: 3.00x lower with FEC (the lossless run's p99 allows at most 4.00x)"),
            "{t}"
        );
        c.fec = None;
        let t = c.table();
        assert!(
            t.contains("p99: 4.00x the lossless run's, the most a tunnel could take off"),
            "{t}"
        );
        c.lossless = None;
        assert_eq!(c.p99_ratio_bound(), None);
        assert!(c.json()["p99_ratio_bound"].is_null());
    }

    #[test]
    fn json_has_the_summary_keys() {
        let mut s = Samples {
            latencies_us: vec![1000, 2000, 3000],
            bytes: 30,
            ..Default::default()
        };
        let b = Summary::of(&mut s);
        let c = Comparison {
            workload: "x".into(),
            lossless: None,
            baseline: b.clone(),
            fec: Some(b),
            fec_stats: Some(FecStats::default()),
            lossless_link: None,
            baseline_link: LinkStats::default(),
            fec_link: None,
            notes: vec![],
        };
        let j = c.json();
        for k in [
            "baseline_p99_ms",
            "fec_p99_ms",
            "baseline_p50_ms",
            "fec_p50_ms",
            "recovered",
            "recovered_late",
            "recovery_delay_p99_ms",
            "unrecoverable",
            "overhead",
        ] {
            assert!(j.get(k).is_some(), "{k}");
        }
        assert_eq!(j["baseline_p50_ms"], 2.0);
        let dir = std::env::temp_dir().join(format!("hirt-lab-svg-{}", std::process::id()));
        write_cdf_svg(&dir, "t", "t", &[("a", &s.latencies_us)]).unwrap();
        let svg = std::fs::read_to_string(dir.join("t.svg")).unwrap();
        assert_eq!(
            svg.matches("<path").count(),
            2,
            "one CDF and one CCDF curve"
        );
        assert!(svg.contains(">1e-4</text>") && svg.contains(">completion time (ms)</text>"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
