//! `hirt sim`: the flags, mapped onto `hirt_sim::SimConfig`.

use std::path::PathBuf;

use clap::Args;
use hirt_sim::SimConfig;

/// Arguments of `hirt sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Several paths (`--path`, `--policy`, ...).
    #[command(flatten)]
    pub multipath: super::sim_paths::PathArgs,
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
    /// ECN at the bottleneck: mark CE the packets that find more than this many packets
    /// queued (the decoder passes the marks on to the encoder); off if absent.
    #[arg(long, value_name = "PACKETS")]
    pub ecn_mark_above: Option<usize>,
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
    /// Sources in flows: `N:RUN` gives runs of RUN consecutive sources, each of one of N flows
    /// drawn at random (several connections sharing the tunnel), or `off`. The report adds
    /// `flow_reordered`.
    #[arg(long, default_value = "off")]
    pub flows: String,
    /// What a hole holds back under --in-order: `flow` (the flows suspected of a packet in it)
    /// or `stream` (every later source).
    #[arg(long, default_value = "flow")]
    pub in_order_scope: String,
    /// Unmeasured source packets sent after the measured ones, so the last measured losses get
    /// the repairs a long-lived tunnel would send after them.
    #[arg(long, default_value_t = 5_000)]
    pub tail: u64,
    /// Master seed (every point of a sweep records its own).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Recovery deadline: `30ms`, `2rtt` (a multiple of the RTT), `auto` (two RTTs, at least 10 ms) or `off`.
    /// Reports recoveries in time and late, and the overhead bound; `ours` derives its window
    /// and repairs from it (`--window` then caps the window).
    #[arg(long, default_value = "off")]
    pub deadline: String,
    /// How far back `ours`'s answers to loss reports reach (deadline past the RTT): `path`
    /// (what the rate and RTT need, kept from the start), `grown` (the window's span, grown by
    /// the decoder when an answer reaches past it) or `window` (the window's span only, as the
    /// dataplanes keep).
    #[arg(long, default_value = "path")]
    pub answer_reach: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the report as CSV (header + row).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Run an experiment instead: fig10 | fig11a | fig11b | sparse | all | deadline (recovered
    /// in time vs overhead at 0.5/1/2 RTT, with the bound).
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

impl From<SimArgs> for SimConfig {
    fn from(a: SimArgs) -> Self {
        SimConfig {
            loss: a.loss,
            feedback_loss: a.feedback_loss,
            scheme: a.scheme,
            window: a.window,
            packets: a.packets,
            rate: a.rate,
            traffic: a.traffic,
            size: a.size,
            delay: a.delay,
            jitter: a.jitter,
            link_rate: a.link_rate,
            queue: a.queue,
            ecn_mark_above: a.ecn_mark_above,
            reorder: a.reorder,
            reorder_delay: a.reorder_delay,
            repair_delay: a.repair_delay,
            repair_retries: a.repair_retries,
            in_order: a.in_order,
            flows: a.flows,
            in_order_scope: a.in_order_scope,
            tail: a.tail,
            seed: a.seed,
            deadline: a.deadline,
            answer_reach: a.answer_reach,
            json: a.json,
            csv: a.csv,
            sweep: a.sweep,
            full: a.full,
            points: a.points,
            seeds: a.seeds,
            out: a.out,
            jobs: a.jobs,
        }
    }
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    if args.multipath.active() {
        return super::sim_paths::run(&args);
    }
    hirt_sim::command::run(args.into())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn flag_defaults_are_the_config_defaults() {
        let a = Cli::parse_from(["sim"]).sim;
        assert_eq!(SimConfig::from(a), SimConfig::default());
        let a = Cli::parse_from(["sim", "--loss", "uniform:0.03", "--window", "200"]).sim;
        let c = SimConfig::from(a);
        assert_eq!((c.loss.as_str(), c.window), ("uniform:0.03", Some(200)));
        let a = Cli::parse_from(["sim", "--deadline", "2rtt"]).sim;
        assert_eq!(SimConfig::from(a).deadline, "2rtt");
    }
}
