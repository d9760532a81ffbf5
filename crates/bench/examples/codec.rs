//! `cargo run --release -p hirt-bench --example codec -- [--json] [--quick]`: the same as
//! `hirt bench codec`, without building the whole CLI (handy under valgrind).

use hirt_bench::codec::{run, CodecBenchConfig};

fn main() -> anyhow::Result<()> {
    let mut config = CodecBenchConfig::default();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => config.json = true,
            "--quick" => config.quick = true,
            other => anyhow::bail!("unknown argument {other:?} (expected --json, --quick)"),
        }
    }
    run(config)
}
