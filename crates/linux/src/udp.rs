//! UDP mode (in progress).

/// Runs `hirt udp`.
pub fn run(_args: crate::cli::UdpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
