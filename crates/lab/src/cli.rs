//! `hirt lab` and `hirt demo`.

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct LabArgs {}

/// Runs the command (in progress).
pub fn run_lab(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// Runs the command (in progress).
pub fn run_demo(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

impl DemoArgs {
    /// The embedded default that `hirt` with no arguments runs.
    pub fn default_demo() -> Self {
        DemoArgs {}
    }
}
