//! `hirt lab` without the rest of the workspace (for developing the lab): same arguments.
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    lab: hirt_lab::cli::LabArgs,
}

fn main() -> anyhow::Result<()> {
    hirt_lab::cli::run_lab(Args::parse().lab)
}
