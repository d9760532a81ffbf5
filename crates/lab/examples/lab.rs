//! `hirt lab` without the rest of the workspace (for developing the lab), configured by TOML (a
//! file, or the text itself; the keys are `hirt lab`'s flags in snake case, see `LabConfig`):
//! `cargo run --release -p hirt-lab --example lab -- 'profile = "wan1"
//! workload = ["bulk"]'`.

fn main() -> anyhow::Result<()> {
    let arg = std::env::args().nth(1).unwrap_or_default();
    let text = match std::fs::read_to_string(&arg) {
        Ok(file) => file,
        Err(_) => arg,
    };
    let config: hirt_lab::config::LabConfig = toml::from_str(&text)?;
    hirt_lab::run::run_lab(config)
}
