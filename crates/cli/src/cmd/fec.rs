//! `hirt fec ...`: diagnostics for interop with other RFC 8681 implementations.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum FecCommand {
    /// Print the RFC 8681 coding coefficients for a repair key as JSON (in progress).
    Coefficients {},
}

pub fn run(cmd: FecCommand) -> anyhow::Result<()> {
    match cmd {
        FecCommand::Coefficients {} => anyhow::bail!("not implemented yet"),
    }
}
