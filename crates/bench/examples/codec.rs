//! `cargo run --release -p hirt-bench --example codec -- [--json] [--quick]`: the same as
//! `hirt bench codec`, without building the whole CLI (handy under valgrind).

use clap::Parser;
use hirt_bench::codec::{run, CodecBenchArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CodecBenchArgs,
}

fn main() -> anyhow::Result<()> {
    run(Cli::parse().args)
}
