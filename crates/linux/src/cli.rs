//! `hirt srv6`, `hirt udp`, `hirt status`.

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct Srv6Args {}

/// Runs the command (in progress).
pub fn run_srv6(_args: Srv6Args) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct UdpArgs {}

/// Runs the command (in progress).
pub fn run_udp(_args: UdpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

/// Arguments of the command (in progress).
#[derive(Debug, clap::Args)]
pub struct StatusArgs {}

/// Runs the command (in progress).
pub fn run_status(_args: StatusArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
