//! `hirt sim`.

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct SimArgs {}

/// Runs the command (in progress).
pub fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
