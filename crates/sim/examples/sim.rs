//! `hirt sim` without building the whole `hirt` binary (handy while other crates are mid-edit):
//! `cargo run --release -p hirt-sim --example sim -- --loss uniform:0.03 --scheme ours`.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: hirt_sim::cli::SimArgs,
}

fn main() -> anyhow::Result<()> {
    hirt_sim::cli::run(Cli::parse().args)
}
