//! Build script shared by the crates whose tests need root (network namespaces, BPF, netlink
//! changes): sets `cfg(hirt_root)` when the build runs as root, so that those tests carry
//! `#[cfg_attr(not(hirt_root), ignore = "needs root")]` and are reported as ignored, not as
//! passed, when another user runs `cargo test`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hirt_root)");
    println!("cargo::rerun-if-changed=../../build/root_cfg.rs");
    if effective_uid() == Some(0) {
        println!("cargo::rustc-cfg=hirt_root");
    }
}

/// The effective user id of this process, from `/proc/self/status` (`Uid: real effective ...`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
