//! GF and codec benchmark.

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct CodecBenchArgs {}

/// Runs the command (in progress).
pub fn run(_args: CodecBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
