//! `hirt status`: the counters of a running instance, read from its control socket.

use std::path::PathBuf;

/// `hirt status`: print the counters of a running instance.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The instance's control socket (default: the only /run/hirt-*.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Change the encoder's controller live (e.g. `fixed:step=10`, `ours`, `hirt`).
    #[arg(long)]
    pub set_controller: Option<String>,
    /// Change the path policy of a multi-path UDP tunnel live (`failover`, `lowest-delay`,
    /// `greedy`, `random`, `bond`).
    #[arg(long, value_name = "KIND")]
    pub set_path_policy: Option<String>,
    /// Change where repairs go on a multi-path UDP tunnel live (`same` or `diverse`).
    #[arg(long, value_name = "same|diverse")]
    pub set_repair_path: Option<String>,
}

/// Runs `hirt status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let path = match args.control {
        Some(p) => p,
        None => {
            let mut found: Vec<PathBuf> = std::fs::read_dir("/run")?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    n.starts_with("hirt-") && n.ends_with(".sock")
                })
                .collect();
            match found.len() {
                1 => found.remove(0),
                0 => anyhow::bail!("no /run/hirt-*.sock found: pass --control"),
                _ => anyhow::bail!("several instances ({found:?}): pass --control"),
            }
        }
    };
    use std::fmt::Write as _;
    let mut out = String::new();
    let changes = [
        ("controller", args.set_controller),
        ("path-policy", args.set_path_policy),
        ("repair-path", args.set_repair_path),
    ];
    if changes.iter().any(|(_, v)| v.is_some()) {
        for (what, v) in changes {
            if let Some(v) = v {
                let r = hirt_linux::control::request(&path, &format!("set {what} {v}"))?;
                let _ = writeln!(out, "{r}");
            }
        }
        return print_out(&out);
    }
    let r = hirt_linux::control::request(&path, "status")?;
    if args.json {
        let _ = writeln!(out, "{r}");
        return print_out(&out);
    }
    let v: serde_json::Value = serde_json::from_str(&r)?;
    let st = &v["status"];
    let _ = writeln!(
        out,
        "mode: {}   controller: {}",
        st["mode"].as_str().unwrap_or("?"),
        v["controller"]
    );
    if let Some(g) = st["global"].as_object() {
        for (k, val) in g {
            let _ = writeln!(out, "  {k:<24} {val}");
        }
    }
    if let Some(p) = st.get("paths").filter(|p| !p.is_null()) {
        let _ = writeln!(
            out,
            "paths: policy {}   repair path {}   preferred {}",
            p["policy"].as_str().unwrap_or("?"),
            p["repair_path"].as_str().unwrap_or("?"),
            p["preferred"]
        );
        let _ = writeln!(
            out,
            "  {:<4} {:<22} {:<10} {:>9} {:>7} {:>7} {:>10} {:>9} {:>8}",
            "path", "remote", "state", "srtt_ms", "loss", "share", "sources", "repairs", "probes"
        );
        for q in p["paths"].as_array().into_iter().flatten() {
            let f = |k: &str| q[k].as_f64().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "  {:<4} {:<22} {:<10} {:>9.2} {:>7.4} {:>7.3} {:>10} {:>9} {:>8}",
                q["path"],
                q["remote"].as_str().unwrap_or(""),
                q["state"].as_str().unwrap_or("?"),
                f("srtt_ms"),
                f("loss"),
                f("share"),
                q["sources"],
                q["repairs"],
                q["probes"]
            );
        }
        for e in p["events"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  event: {}", e.as_str().unwrap_or("?"));
        }
    }
    if let Some(streams) = st["streams"].as_array() {
        for (i, s) in streams.iter().enumerate() {
            let _ = writeln!(out, "stream {i}:");
            if let Some(o) = s.as_object() {
                for (k, val) in o {
                    let _ = writeln!(out, "  {k:<24} {val}");
                }
            }
        }
    }
    print_out(&out)
}

/// Writes `s` to stdout. A closed pipe (`hirt status | head`) is not an error: the reader has
/// what it wanted, and `println!` would panic on EPIPE (Rust ignores SIGPIPE).
fn print_out(s: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    match o.write_all(s.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
