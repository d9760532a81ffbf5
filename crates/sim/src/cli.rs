//! `hirt sim`: one scenario, or a sweep of the HIRT §VIII experiments.
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

use crate::experiments::{self, PlanOptions, Sweep};
use crate::traffic::{parse_duration, parse_rate, Pattern, SizeMix};
use crate::Scenario;

/// Arguments of `hirt sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Forward loss model: none | uniform:P | ge:p=..,r=..[,k=..,h=..] | burst:len=B,every=N |
    /// trace:FILE.
    #[arg(long, default_value = "none")]
    pub loss: String,
    /// Reverse-link (feedback) loss model, same syntax.
    #[arg(long, default_value = "none")]
    pub feedback_loss: String,
    /// FEC mode: ours | hirt | rquic | fixed:w=4,step=2 | maelstrom:r=20,i=1-20-40 | rs:20:10 |
    /// none (see hirt_core::FecMode).
    #[arg(long, default_value = "ours")]
    pub scheme: String,
    /// Sliding window of RLC modes that give no w= (default: 200, HIRT's; `ours`: 800).
    #[arg(long)]
    pub window: Option<u16>,
    /// Source packets (per point for sweeps; default 1e6 for one run, 1e5 per sweep point
    /// unless --full).
    #[arg(long)]
    pub packets: Option<u64>,
    /// Source rate, e.g. 10000pps.
    #[arg(long, default_value = "10000pps")]
    pub rate: String,
    /// Arrival process: cbr | poisson | onoff:on=100ms,off=400ms.
    #[arg(long, default_value = "cbr")]
    pub traffic: String,
    /// Packet sizes in bytes: 32 | imix | 40x7,576x4,1500x1.
    #[arg(long, default_value = "32")]
    pub size: String,
    /// One-way delay of both links.
    #[arg(long, default_value = "25ms")]
    pub delay: String,
    /// Jitter (uniform +-), FIFO order kept.
    #[arg(long, default_value = "0ms")]
    pub jitter: String,
    /// Forward bottleneck rate in bit/s (e.g. 100000000); unlimited if absent.
    #[arg(long)]
    pub link_rate: Option<u64>,
    /// Drop-tail queue in front of the bottleneck: packets (e.g. 1000) or bytes (e.g. 64000B).
    #[arg(long, default_value = "10000")]
    pub queue: String,
    /// Fraction of forward packets held back (reordered).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Extra delay of a reordered packet.
    #[arg(long, default_value = "2ms")]
    pub reorder_delay: String,
    /// Time-driven repair delay, or `off`.
    #[arg(long, default_value = "5ms")]
    pub repair_delay: String,
    /// Time-driven re-sends: after a timer repair, send up to this many more over the same
    /// window, `--repair-delay` apart, while no other repair goes out (0 = one timer repair).
    #[arg(long, default_value_t = 1)]
    pub repair_retries: u8,
    /// In-order release at the decoder: hold sources behind a missing one up to this long
    /// (e.g. `30ms`), or `off`.
    #[arg(long, default_value = "off")]
    pub in_order: String,
    /// Unmeasured source packets sent after the measured ones, so the last measured losses get
    /// the repairs a long-lived tunnel would send after them.
    #[arg(long, default_value_t = 5_000)]
    pub tail: u64,
    /// Master seed (every point of a sweep records its own).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the report as CSV (header + row).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Run an experiment instead: fig10 | fig11a | fig11b | sparse | all.
    #[arg(long)]
    pub sweep: Option<String>,
    /// Full size sweeps: 1e6 packets per point, 100 Latin-hypercube points, 10 Fig. 11b seeds.
    #[arg(long)]
    pub full: bool,
    /// Fig. 11a design points (default 100 with --full, 20 otherwise).
    #[arg(long)]
    pub points: Option<usize>,
    /// Fig. 11b seeds (default 10 with --full, 4 otherwise).
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Where sweeps write CSV, SVG and markdown.
    #[arg(long, default_value = "docs/figures")]
    pub out: PathBuf,
    /// Worker threads for sweeps (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
}

fn scenario(a: &SimArgs) -> anyhow::Result<Scenario> {
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
        reorder: (a.reorder.clamp(0.0, 1.0), reorder_delay),
        repair_delay,
        repair_retries: a.repair_retries,
        in_order,
        seed: a.seed,
        tail: a.tail,
    })
}

/// Runs the command.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let base = scenario(&args)?;
    let Some(sweep) = &args.sweep else {
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
        }
        return Ok(());
    };
    let sweeps: Vec<Sweep> = if sweep == "all" {
        Sweep::ALL.to_vec()
    } else {
        sweep
            .split(',')
            .map(|s| s.parse::<Sweep>())
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?
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
