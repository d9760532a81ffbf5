//! `hirt sim` without building the whole `hirt` binary (handy while other crates are mid-edit),
//! configured by TOML (a file, or the text itself; the keys are `hirt sim`'s flags in snake
//! case, see `SimConfig`):
//! `cargo run --release -p hirt-sim --example sim -- 'loss = "uniform:0.03"'`.

fn main() -> anyhow::Result<()> {
    let arg = std::env::args().nth(1).unwrap_or_default();
    let text = match std::fs::read_to_string(&arg) {
        Ok(file) => file,
        Err(_) => arg,
    };
    let config: hirt_sim::SimConfig = toml::from_str(&text)?;
    hirt_sim::command::run(config)
}
