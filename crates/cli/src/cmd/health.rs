//! `hirt health`: flags of the ingress-side health check, mapped onto [`HealthConfig`].

use std::path::PathBuf;

use hirt_linux::health::{HealthConfig, NodeSpec};

use super::apply_flags;

/// `hirt health`: keep a multipath route over several hirt encoder/decoder pairs to the pairs
/// that are alive (docs/scale-out.md). Run on the ingress router. Every flag may also come from
/// `--config FILE` (TOML, keys = long flag names, `node = ["...", ...]`, see
/// `examples/hirt-health.toml`); flags on the command line win.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct HealthArgs {
    /// TOML file with any of these flags (long names as keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The prefix the nodes carry, e.g. 2001:db8:9::/64: hirt keeps its route.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Routing table of the route (default 254, main).
    #[arg(long)]
    pub table: Option<u32>,
    /// One encoder/decoder pair, in `ip route` words: `segs ENC_SID,DEC_SID via GATEWAY [dev
    /// DEV] probe ADDR:PORT[,ADDR:PORT]` (the probe targets are the pair's hirt `--metrics`
    /// endpoints). Repeat per pair; replaces the nodes of --config.
    #[arg(long)]
    pub node: Vec<NodeSpec>,
    /// Milliseconds between probe rounds (default 100).
    #[arg(long)]
    pub interval_ms: Option<f64>,
    /// Milliseconds a probe waits for its answer, at most the interval (default 50).
    #[arg(long)]
    pub timeout_ms: Option<f64>,
    /// Unanswered rounds in a row that take a node out (default 3).
    #[arg(long)]
    pub fall: Option<u32>,
    /// Answered rounds in a row that put a node back (default 3).
    #[arg(long)]
    pub rise: Option<u32>,
    /// Count a refused connection (hirt not running on a live host) as one unanswered round
    /// instead of taking the node out at once.
    #[arg(long)]
    pub refused_is_miss: bool,
}

impl HealthArgs {
    /// The configuration: `--config` (or the defaults), then the flags given.
    pub fn into_config(self) -> anyhow::Result<HealthConfig> {
        let a = self;
        let mut c = match &a.config {
            Some(path) => HealthConfig::from_file(path)?,
            None => HealthConfig::default(),
        };
        if !a.node.is_empty() {
            c.node = a.node.clone();
        }
        apply_flags!(c, a;
            set: table, interval_ms, timeout_ms, fall, rise;
            some: prefix;
            flag: refused_is_miss);
        Ok(c)
    }
}

/// Runs `hirt health`.
pub fn run(args: HealthArgs) -> anyhow::Result<()> {
    hirt_linux::health::run(args.into_config()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: HealthArgs,
    }

    const NODE: &str = "segs fc00:e1::1,fc00:d1::1 via 2001:db8:11::2 probe [2001:db8:11::2]:9469";

    #[test]
    fn flags_parse_onto_the_config() {
        let cli = Cli::parse_from([
            "hirt",
            "--prefix",
            "2001:db8:9::/64",
            "--node",
            NODE,
            "--node",
            "segs fc00:e2::1,fc00:d2::1 dev ie2 probe [2001:db8:12::2]:9469",
            "--interval-ms",
            "50",
            "--timeout-ms",
            "20",
            "--fall",
            "2",
            "--refused-is-miss",
        ]);
        let c = cli.a.into_config().unwrap();
        c.validate().unwrap();
        assert_eq!(c.node.len(), 2);
        assert_eq!(c.node[1].dev.as_deref(), Some("ie2"));
        assert_eq!(
            (c.interval_ms, c.timeout_ms, c.fall, c.rise),
            (50.0, 20.0, 2, 3)
        );
        assert!(c.refused_is_miss);
        assert!(
            Cli::try_parse_from(["hirt", "--node", "segs fc00::1 via fd00::1"]).is_err(),
            "a node without a probe target is refused by the parser"
        );
    }

    #[test]
    fn config_file_fills_what_the_flags_leave_unset() {
        let path = std::env::temp_dir().join(format!("hirt-health-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            format!("prefix = \"2001:db8:9::/64\"\nrise = 5\nnode = [\"{NODE}\"]\n"),
        )
        .unwrap();
        let c = HealthArgs {
            config: Some(path.clone()),
            rise: Some(4),
            ..Default::default()
        }
        .into_config()
        .unwrap();
        let _ = std::fs::remove_file(&path);
        c.validate().unwrap();
        assert_eq!(c.rise, 4, "flag wins");
        assert_eq!(c.node.len(), 1, "nodes from the file");
        assert_eq!(c.interval_ms, 100.0, "default");
    }
}
