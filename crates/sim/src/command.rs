//! `hirt sim`: one scenario, or a sweep of the HIRT §VIII experiments, from a [`SimConfig`].
//!
//! ```text
//! hirt sim --loss uniform:0.03 --scheme ours --packets 1000000 --rate 10000pps --delay 25ms --seed 1 --json
//! hirt sim --sweep fig10 --out docs/figures            # quick (1e5 packets/point)
//! hirt sim --sweep all --full --out docs/figures       # 1e6 packets/point, 100 LHS points
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use hirt_channel::{LossSpec, QueueLimit};
use serde::{Deserialize, Serialize};

use crate::experiments::{self, PlanOptions, Sweep};
use crate::traffic::{parse_duration, parse_rate, Pattern, SizeMix};
use crate::Scenario;

/// Configuration of `hirt sim` (the CLI's flags map one to one onto its fields; the strings
/// use the flags' syntax).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Forward loss model: none | uniform:P | ge:p=..,r=..[,k=..,h=..] | burst:len=B,every=N |
    /// trace:FILE.
    pub loss: String,
    /// Reverse-link (feedback) loss model, same syntax.
    pub feedback_loss: String,
    /// FEC mode (see hirt_core::FecMode).
    pub scheme: String,
    /// Sliding window of RLC modes that give no w= (`None`: the mode's default).
    pub window: Option<u16>,
    /// Source packets (per point for sweeps; `None`: 1e6 for one run, 1e5 per sweep point
    /// unless `full`).
    pub packets: Option<u64>,
    /// Source rate, e.g. 10000pps.
    pub rate: String,
    /// Arrival process: cbr | poisson | onoff:on=100ms,off=400ms.
    pub traffic: String,
    /// Packet sizes in bytes: 32 | imix | 40x7,576x4,1500x1.
    pub size: String,
    /// One-way delay of both links.
    pub delay: String,
    /// Jitter (uniform +-), FIFO order kept.
    pub jitter: String,
    /// Forward bottleneck rate in bit/s; unlimited if `None`.
    pub link_rate: Option<u64>,
    /// Drop-tail queue in front of the bottleneck: packets (e.g. 1000) or bytes (e.g. 64000B).
    pub queue: String,
    /// ECN: mark CE the packets that find more than this many queued at the bottleneck.
    pub ecn_mark_above: Option<usize>,
    /// Fraction of forward packets held back (reordered).
    pub reorder: f64,
    /// Extra delay of a reordered packet.
    pub reorder_delay: String,
    /// Time-driven repair delay, or `off`.
    pub repair_delay: String,
    /// Time-driven re-sends after a timer repair (0 = one timer repair).
    pub repair_retries: u8,
    /// In-order release at the decoder: hold time (e.g. `30ms`), or `off`.
    pub in_order: String,
    /// Sources in flows: `N:RUN` (runs of RUN sources, each of one of N flows), or `off`.
    pub flows: String,
    /// What a hole holds back under in-order release: `flow` or `stream`.
    pub in_order_scope: String,
    /// Unmeasured source packets sent after the measured ones.
    pub tail: u64,
    /// Master seed (every point of a sweep records its own).
    pub seed: u64,
    /// Recovery deadline: `30ms`, `2rtt` (multiple of the RTT), `auto` (two RTTs, at least 10 ms), or `off`.
    pub deadline: String,
    /// How far back answers to loss reports reach: path | grown | window
    /// (`crate::AnswerReach`).
    pub answer_reach: String,
    /// Print the report as JSON.
    pub json: bool,
    /// Print the report as CSV (header + row).
    pub csv: bool,
    /// Run an experiment instead: fig10 | fig11a | fig11b | sparse | all | deadline
    /// (comma-separated; `all` is the HIRT §VIII sweeps).
    pub sweep: Option<String>,
    /// Full size sweeps: 1e6 packets per point, 100 Latin-hypercube points, 10 Fig. 11b seeds.
    pub full: bool,
    /// Fig. 11a design points (`None`: 100 with `full`, 20 otherwise).
    pub points: Option<usize>,
    /// Fig. 11b seeds (`None`: 10 with `full`, 4 otherwise).
    pub seeds: Option<u64>,
    /// Where sweeps write CSV, SVG and markdown.
    pub out: PathBuf,
    /// Worker threads for sweeps (`None`: all cores).
    pub jobs: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            loss: "none".into(),
            feedback_loss: "none".into(),
            scheme: "ours".into(),
            window: None,
            packets: None,
            rate: "10000pps".into(),
            traffic: "cbr".into(),
            size: "32".into(),
            delay: "25ms".into(),
            jitter: "0ms".into(),
            link_rate: None,
            queue: "10000".into(),
            ecn_mark_above: None,
            reorder: 0.0,
            reorder_delay: "2ms".into(),
            repair_delay: "5ms".into(),
            repair_retries: 1,
            in_order: "off".into(),
            flows: "off".into(),
            in_order_scope: "flow".into(),
            tail: 5_000,
            seed: 1,
            deadline: "off".into(),
            answer_reach: "path".into(),
            json: false,
            csv: false,
            sweep: None,
            full: false,
            points: None,
            seeds: None,
            out: PathBuf::from("docs/figures"),
            jobs: None,
        }
    }
}

impl SimConfig {
    /// The scenario of a single run (and the base of every sweep point): parses every field,
    /// failing with the name of the one that does not parse.
    pub fn scenario(&self) -> anyhow::Result<Scenario> {
        scenario(self)
    }

    /// The sweeps to run (`None`: one run). The deadline experiment is asked for separately
    /// ([`Self::deadline_sweep`]).
    pub fn sweeps(&self) -> anyhow::Result<Option<Vec<Sweep>>> {
        let Some(sweep) = &self.sweep else {
            return Ok(None);
        };
        if sweep == "all" {
            return Ok(Some(Sweep::ALL.to_vec()));
        }
        let v = sweep
            .split(',')
            .filter(|s| *s != DEADLINE_SWEEP)
            .map(|s| s.parse::<Sweep>())
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)
            .context("--sweep")?;
        Ok(Some(v))
    }

    /// Whether `--sweep` names the deadline experiment (`deadline`).
    pub fn deadline_sweep(&self) -> bool {
        self.sweep
            .as_deref()
            .is_some_and(|s| s.split(',').any(|w| w == DEADLINE_SWEEP))
    }

    /// Checks the whole configuration: every field parses, and the output choices agree.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !(self.json && self.csv),
            "choose JSON or CSV output, not both"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.reorder),
            "--reorder must be in [0, 1], not {}",
            self.reorder
        );
        self.scenario()?;
        self.sweeps()?;
        Ok(())
    }
}

/// `--sweep` name of the recovery-deadline experiment ([`crate::deadline_sweep`]).
pub const DEADLINE_SWEEP: &str = "deadline";

fn scenario(a: &SimConfig) -> anyhow::Result<Scenario> {
    let queue = match a.queue.trim().strip_suffix('B') {
        Some(b) => QueueLimit::Bytes(b.trim().parse().context("--queue")?),
        None => QueueLimit::Packets(a.queue.trim().parse().context("--queue")?),
    };
    let repair_delay = match a.repair_delay.trim() {
        "off" | "none" => None,
        s => Some(parse_duration(s).map_err(anyhow::Error::msg)?),
    };
    let reorder_delay: Duration = parse_duration(&a.reorder_delay).map_err(anyhow::Error::msg)?;
    let in_order = match a.in_order.trim() {
        "off" | "none" | "0" => None,
        s => Some(parse_duration(s).map_err(anyhow::Error::msg)?),
    };
    let flows = match a.flows.trim() {
        "off" | "none" | "" => None,
        f => {
            let (n, run) = f.split_once(':').unwrap_or((f, "1"));
            let n: u32 = n.parse().context("--flows N:RUN")?;
            let run: u32 = run.parse().context("--flows N:RUN")?;
            anyhow::ensure!(n > 0 && run > 0, "--flows N:RUN: both above 0");
            Some((n, run))
        }
    };
    Ok(Scenario {
        scheme: a.scheme.clone(),
        window: a.window,
        loss: a.loss.parse::<LossSpec>().context("--loss")?,
        feedback_loss: a
            .feedback_loss
            .parse::<LossSpec>()
            .context("--feedback-loss")?,
        packets: a.packets.unwrap_or(1_000_000),
        rate_pps: parse_rate(&a.rate).map_err(anyhow::Error::msg)?,
        pattern: a.traffic.parse::<Pattern>().map_err(anyhow::Error::msg)?,
        sizes: a.size.parse::<SizeMix>().map_err(anyhow::Error::msg)?,
        delay: parse_duration(&a.delay).map_err(anyhow::Error::msg)?,
        jitter: parse_duration(&a.jitter).map_err(anyhow::Error::msg)?,
        link_rate_bps: a.link_rate,
        queue,
        ecn_mark_above: a.ecn_mark_above,
        reorder: (a.reorder.clamp(0.0, 1.0), reorder_delay),
        repair_delay,
        repair_retries: a.repair_retries,
        in_order,
        flows,
        in_order_scope: a
            .in_order_scope
            .trim()
            .parse()
            .map_err(|e: hirt_core::ConfigError| anyhow::anyhow!("--in-order-scope: {e}"))?,
        seed: a.seed,
        tail: a.tail,
        deadline: match a.deadline.trim() {
            "off" | "none" | "" => None,
            d => Some(
                d.parse::<hirt_core::Deadline>()
                    .map_err(|e| anyhow::anyhow!("--deadline {d}: {e}"))?,
            ),
        },
        answer_reach: a
            .answer_reach
            .parse()
            .map_err(|e| anyhow::anyhow!("--answer-reach {e}"))?,
    })
}

/// Runs `hirt sim`: one scenario, or the sweeps; prints the report on stdout.
pub fn run(args: SimConfig) -> anyhow::Result<()> {
    args.validate()?;
    let base = scenario(&args)?;
    let Some(sweeps) = args.sweeps()? else {
        let r = crate::run(&base)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else if args.csv {
            println!(
                "{}",
                experiments::CSV_HEADER.trim_start_matches("sweep,label,index,")
            );
            println!("{}", experiments::csv_row(&base, &r));
        } else {
            println!(
                "{} over {}: {} sources, {} lost, {} recovered ({:.4}%), residual loss {:.2e}, overhead {:.3}% ({:.3}% bytes), recovery delay p50/p99/max {:.2}/{:.2}/{:.2} ms (from send: p99 {:.2} ms)",
                r.scheme, r.loss, r.sources, r.lost, r.recovered, r.recovered_ratio * 100.0,
                r.residual_loss, r.overhead * 100.0, r.overhead_bytes * 100.0,
                r.recovery_delay_p50_ms, r.recovery_delay_p99_ms, r.recovery_delay_max_ms,
                r.recovery_latency_p99_ms
            );
            if base.deadline.is_some() {
                println!(
                    "deadline {:.1} ms: {} recovered in time ({:.4}%), {} late; overhead bound {:.3}% (99.9% in time), {:.3}% (this run's share): overhead / bound {:.2}",
                    r.deadline_ms, r.recovered_in_time, r.recovered_in_time_ratio * 100.0,
                    r.late_recoveries, r.bound_overhead * 100.0,
                    r.bound_overhead_achieved * 100.0, r.overhead_to_bound
                );
            }
        }
        return Ok(());
    };
    let o = PlanOptions {
        packets: args
            .packets
            .unwrap_or(if args.full { 1_000_000 } else { 100_000 }),
        lhs_points: args.points.unwrap_or(if args.full { 100 } else { 20 }),
        seeds: args.seeds.unwrap_or(if args.full { 10 } else { 4 }),
        seed: args.seed,
        base,
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if args.deadline_sweep() {
        let t0 = std::time::Instant::now();
        let md = crate::deadline_sweep::run(&o, jobs, &args.out)?;
        println!(
            "## deadline ({} packets/run, {} seeds, {:.1} s wall)\n{md}",
            o.packets,
            o.seeds,
            t0.elapsed().as_secs_f64()
        );
    }
    for s in sweeps {
        let t0 = std::time::Instant::now();
        let md = experiments::run_sweep(s, &o, jobs, &args.out)?;
        println!(
            "## {} ({} packets/point, {:.1} s wall)\n\n{md}",
            s.name(),
            o.packets,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_valid_and_errors_name_the_field() {
        SimConfig::default().validate().unwrap();
        let bad = |f: fn(&mut SimConfig)| {
            let mut c = SimConfig::default();
            f(&mut c);
            format!("{:#}", c.validate().unwrap_err())
        };
        assert!(bad(|c| c.loss = "lots".into()).contains("--loss"));
        assert!(bad(|c| c.queue = "many".into()).contains("--queue"));
        assert!(bad(|c| c.sweep = Some("fig99".into())).contains("--sweep"));
        assert!(bad(|c| c.deadline = "soon".into()).contains("--deadline"));
        assert!(bad(|c| {
            c.json = true;
            c.csv = true
        })
        .contains("not both"));
    }

    #[test]
    fn reads_from_toml() {
        let c: SimConfig = toml::from_str("loss = \"uniform:0.03\"\nwindow = 200\n").unwrap();
        assert_eq!(c.loss, "uniform:0.03");
        assert_eq!(c.window, Some(200));
        assert_eq!(c.scheme, "ours");
        assert!(toml::from_str::<SimConfig>("lose = 1").is_err());
    }
}
