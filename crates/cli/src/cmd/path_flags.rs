//! The path manager's flags, shared by the modes that have several paths per tunnel.

use hirt_core::path::PathManagerConfig;

/// `--path-policy`, `--repair-path`, `--path-probe-interval-ms`, `--path-feedback-interval-ms`
/// (the `[paths]` table's common keys, docs/paths.md).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct PathPolicyArgs {
    /// How sources use the paths: failover (default: the first usable path, back once it is
    /// up again), lowest-delay (EXP3), greedy (lowest RTT), random, bond.
    #[arg(long, value_name = "KIND")]
    pub path_policy: Option<String>,
    /// Where repairs go: same (the sources' path, default) or diverse (the lowest-delay
    /// other usable path).
    #[arg(long, value_name = "same|diverse")]
    pub repair_path: Option<String>,
    /// Probe an idle path every this many ms (default 50; 0: never).
    #[arg(long, value_name = "MS")]
    pub path_probe_interval_ms: Option<f64>,
    /// The path manager's interval in ms (default 50): a path is silent after its RTT plus
    /// 1.25 of these without a probe answered; busy paths are probed every half of one.
    #[arg(long, value_name = "MS")]
    pub path_feedback_interval_ms: Option<f64>,
}

impl PathPolicyArgs {
    /// Sets the keys given on the command line.
    pub fn apply(&self, c: &mut PathManagerConfig) -> anyhow::Result<()> {
        if let Some(k) = &self.path_policy {
            c.policy.kind = k
                .parse()
                .map_err(|e| anyhow::anyhow!("--path-policy: {e}"))?;
        }
        if let Some(r) = &self.repair_path {
            c.repair_path = r
                .parse()
                .map_err(|e| anyhow::anyhow!("--repair-path: {e}"))?;
        }
        if let Some(v) = self.path_probe_interval_ms {
            c.probe_interval_ms = v;
        }
        if let Some(v) = self.path_feedback_interval_ms {
            c.feedback_interval_ms = v;
        }
        Ok(())
    }
}
