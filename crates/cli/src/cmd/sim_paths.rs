//! `hirt sim --path ...`: the multi-path flags of `hirt sim` (several paths, a path policy,
//! outages and delay changes), mapped onto `hirt_sim::multipath::MultipathCommand`.

use clap::Args;

/// Multi-path flags of `hirt sim`.
#[derive(Debug, Args)]
pub struct PathArgs {
    /// A path (repeat for several; ids 0, 1, ... in order):
    /// `delay=25ms,rdelay=..,jitter=..,rate=50mbit,loss=ge:p=..,r=..,outage=10s+2s,delay-change=10s:50ms`
    /// (outage and delay-change repeatable). With it, `hirt sim` runs the multi-path simulator
    /// with `--scheme`, `--window`, `--rate`, `--packets`, `--size`, `--repair-delay`,
    /// `--repair-retries`, `--seed` and `--json`.
    #[arg(long = "path", value_name = "SPEC")]
    pub paths: Vec<String>,
    /// Path policy: failover | lowest-delay | greedy | random | bond.
    #[arg(long, default_value = "failover")]
    pub policy: String,
    /// Which path repairs take: same | diverse.
    #[arg(long, default_value = "same")]
    pub repair_path: String,
    /// EXP3 exploration Gamma (lowest-delay).
    #[arg(long, default_value_t = 0.1)]
    pub gamma: f64,
    /// EXP3 reward unit: normalized | ms (TPC's).
    #[arg(long, default_value = "normalized")]
    pub exp3_reward: String,
    /// Interval of the per-path reports.
    #[arg(long, default_value = "50ms")]
    pub path_feedback_interval: String,
    /// Run the path-awareness measurements (failover, delay inversion, diverse repairs) over
    /// `--runs` seeds, writing SVG CDFs and summary.json under `--out`.
    #[arg(long)]
    pub path_experiments: bool,
    /// Seeds per configuration of `--path-experiments`.
    #[arg(long, default_value_t = 50)]
    pub runs: u64,
    /// Sources a repair may trail the decoder's newest source by, beyond its window, from the
    /// start (default: 1024 with several paths, else 0); the decoder grows it by itself up to
    /// this or 1024, as on the dataplanes.
    #[arg(long, value_name = "N")]
    pub repair_lag: Option<u32>,
}

impl PathArgs {
    /// Whether the multi-path simulator runs instead of the single-path one.
    pub fn active(&self) -> bool {
        !self.paths.is_empty() || self.path_experiments
    }
}

/// Runs the multi-path simulator or its measurements from the flags.
pub fn run(a: &super::sim::SimArgs) -> anyhow::Result<()> {
    let p = &a.multipath;
    if p.path_experiments {
        let jobs = a
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        print!(
            "{}",
            hirt_sim::paths_experiments::run_all(p.runs, jobs, &a.out)?
        );
        return Ok(());
    }
    hirt_sim::multipath::MultipathCommand {
        paths: p.paths.clone(),
        policy: p.policy.clone(),
        repair_path: p.repair_path.clone(),
        gamma: p.gamma,
        reward: p.exp3_reward.clone(),
        feedback_interval: p.path_feedback_interval.clone(),
        scheme: a.scheme.clone(),
        window: a.window,
        rate: a.rate.clone(),
        packets: a.packets,
        size: a.size.clone(),
        repair_delay: a.repair_delay.clone(),
        repair_retries: a.repair_retries,
        repair_lag: p.repair_lag,
        seed: a.seed,
        json: a.json,
    }
    .run()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::sim::SimArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn path_flags_map_onto_the_multipath_scenario() {
        let a = Cli::parse_from(["sim"]).sim;
        assert!(!a.multipath.active());
        let a = Cli::parse_from([
            "sim",
            "--path",
            "delay=5ms,outage=1s+200ms",
            "--path",
            "delay=50ms,delay-change=1s:5ms",
            "--policy",
            "lowest-delay",
            "--repair-path",
            "diverse",
            "--gamma",
            "0.01",
            "--packets",
            "2000",
            "--rate",
            "1000pps",
            "--size",
            "100",
        ])
        .sim;
        assert!(a.multipath.active());
        let p = &a.multipath;
        assert_eq!((p.paths.len(), p.policy.as_str()), (2, "lowest-delay"));
        assert_eq!(p.gamma, 0.01);
        let bad = Cli::parse_from(["sim", "--path", "delay=5ms", "--policy", "fastest"]).sim;
        assert!(run(&bad).unwrap_err().to_string().contains("--policy"));
        run(&a).unwrap();
    }
}
