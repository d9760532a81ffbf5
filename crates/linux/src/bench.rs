//! `hirt bench dataplane`.

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct DataplaneBenchArgs {}

/// Runs the command (in progress).
pub fn run(_args: DataplaneBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
