//! The path-awareness measurements without the CLI:
//! `cargo run --release -p hirt-sim --example paths_sim -- RUNS JOBS OUT_DIR`
//! (as `hirt sim --path-experiments --runs RUNS --jobs JOBS --out OUT_DIR`).

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let runs = args.next().map_or(Ok(50), |a| a.parse())?;
    let jobs = args.next().map_or(Ok(2), |a| a.parse())?;
    let out = args
        .next()
        .unwrap_or_else(|| "docs/figures/paths-sim".into());
    print!(
        "{}",
        hirt_sim::paths_experiments::run_all(runs, jobs, std::path::Path::new(&out))?
    );
    Ok(())
}
