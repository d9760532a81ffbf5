//! End-to-end lab tests (root; skipped with a note otherwise): real namespaces, the userspace
//! emulator, the hirt UDP tunnel, kernel TCP. Kept short (about 2.5 min in all, most of it the two soaks).
//!
//! 1. The emulator in namespaces: every frame it is offered is either dropped by the model or
//!    delivered (no losses of its own), and the measured loss rate matches the model within 5%.
//! 2. A short lab: HTTP over a lossy link without and with FEC; every response byte verified,
//!    the tunnel recovers losses, and teardown leaves no namespace behind.
//! 3. A short soak in each mode (`hirt lab --soak`): faults injected, nothing corrupt or
//!    duplicated, every fault recovered.
//!
//! The binary doubles as the `hirt` dataplane: the lab starts `current_exe() udp ...` children.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hirt_lab::config::{FecRuns, LabConfig, Profile, WorkloadKind};
use hirt_lab::emu::core::DirectionConfig;
use hirt_lab::emu::Emulator;
use hirt_lab::netns;
use hirt_lab::topo::Topology;
use hirt_lab::tunnel::TunnelMode;

/// The `hirt udp` / `hirt srv6` command lines the lab starts: the CLI's flags, mapped onto the
/// dataplane's configuration.
#[derive(Parser)]
enum Dataplane {
    Udp(hirt_cli::cmd::udp::UdpArgs),
    Srv6(hirt_cli::cmd::srv6::Srv6Args),
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if matches!(argv.get(1).map(String::as_str), Some("udp" | "srv6")) {
        let r = match Dataplane::parse_from(
            std::iter::once("hirt".to_string()).chain(argv[1..].iter().cloned()),
        ) {
            Dataplane::Udp(a) => a.into_config().and_then(hirt_linux::udp::run),
            Dataplane::Srv6(a) => a.into_config().and_then(hirt_linux::srv6_run::run),
        };
        if let Err(e) = r {
            eprintln!("dataplane: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    // `cargo test -- --list` and filters: this harness runs all its tests.
    if argv.iter().any(|a| a == "--list") {
        println!(
            "emulator_in_namespaces: test\nshort_lab_recovers_and_cleans_up: test\n\
             failing_dataplane_still_cleans_up: test\nshort_soak_survives_faults_udp: test\n\
             short_soak_survives_faults_srv6: test\ntwo_underlay_paths: test\n\
             srv6_two_path_tunnel_fails_over: test"
        );
        return;
    }
    let tests = [
        (
            "emulator_in_namespaces",
            emulator_in_namespaces as fn() -> anyhow::Result<()>,
        ),
        (
            "short_lab_recovers_and_cleans_up",
            short_lab_recovers_and_cleans_up,
        ),
        (
            "failing_dataplane_still_cleans_up",
            failing_dataplane_still_cleans_up,
        ),
        ("two_underlay_paths", two_underlay_paths),
        (
            "srv6_two_path_tunnel_fails_over",
            srv6_two_path_tunnel_fails_over,
        ),
        (
            "short_soak_survives_faults_udp",
            short_soak_survives_faults_udp,
        ),
        (
            "short_soak_survives_faults_srv6",
            short_soak_survives_faults_srv6,
        ),
    ];
    // Reported like libtest's summary, so a run without root shows its tests as ignored.
    if !hirt_lab::sys::is_root() {
        for (name, _) in &tests {
            println!("test {name} ... ignored, needs root (network namespaces)");
        }
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} ignored",
            tests.len()
        );
        return;
    }
    let (mut passed, mut failed) = (0, 0);
    for (name, t) in tests {
        let start = std::time::Instant::now();
        let r = std::panic::catch_unwind(t);
        // Whatever happened, nothing of ours may remain.
        netns::cleanup_all();
        let leftovers = ours();
        match r {
            Ok(Ok(())) if leftovers.is_empty() => {
                println!("test {name} ... ok ({:.1}s)", start.elapsed().as_secs_f64());
                passed += 1;
            }
            Ok(Ok(())) => {
                println!("test {name} ... FAILED: namespaces left behind: {leftovers:?}");
                failed += 1;
            }
            Ok(Err(e)) => {
                println!("test {name} ... FAILED: {e:#}");
                failed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED (panicked)");
                failed += 1;
            }
        }
    }
    let verdict = if failed > 0 { "FAILED" } else { "ok" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Namespaces this process created that still exist.
fn ours() -> Vec<String> {
    let me = format!("{}{}-", netns::PREFIX, std::process::id());
    netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&me))
        .collect()
}

fn emulator_in_namespaces() -> anyhow::Result<()> {
    let _td = netns::Teardown;
    let topo = Topology::build()?;
    let lossy = DirectionConfig {
        loss: "uniform:0.1".into(),
        seed: 5,
        ..Default::default()
    };
    let clean = DirectionConfig::default();
    let emu = Emulator::start(Some(&topo.link), "la", "lb", &lossy, &clean)?;
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let (st, g) = (stop.clone(), got.clone());
    let sink = netns::in_ns(&topo.server, move || {
        hirt_lab::workload::bulk::udp_sink(st, g)
    });
    std::thread::sleep(Duration::from_millis(200));
    // 20k packets at 100 Mbit/s: far below the emulator's capacity.
    let (sent, _) = netns::join(netns::in_ns(&topo.client, || {
        hirt_lab::workload::bulk::udp_blast(0.1, Duration::from_millis(2048))
    }))?;
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    netns::join(sink)?;
    let (ab, _) = emu.stop();
    let got = got.load(Ordering::Relaxed);
    anyhow::ensure!(sent > 10_000, "sent only {sent}");
    anyhow::ensure!(ab.own_losses() == 0, "emulator lost frames itself: {ab:?}");
    // Every frame offered was either dropped by the model or forwarded; every UDP datagram
    // forwarded arrived (the emulator also forwards a few non-UDP frames, hence <=).
    anyhow::ensure!(ab.rx_packets == ab.lost + ab.tx_packets, "{ab:?}");
    anyhow::ensure!(
        got <= ab.tx_packets && ab.tx_packets - got < 50,
        "got {got}, {ab:?}"
    );
    let rate = ab.lost as f64 / ab.rx_packets as f64;
    anyhow::ensure!(
        (rate - 0.1).abs() <= 0.005,
        "measured loss {rate}, configured 0.1"
    );
    Ok(())
}

fn short_lab_recovers_and_cleans_up() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("hirt-lab-test-{}", std::process::id()));
    let args = LabConfig {
        profile: Profile::Wan,
        workload: vec![WorkloadKind::Http],
        size: 10_000,
        connections: 8,
        duration: Duration::from_secs(6),
        fec: FecRuns::Both,
        tunnel: TunnelMode::Udp,
        loss: Some("uniform:0.02".into()),
        delay: Some(Duration::from_millis(10)),
        results: dir.clone(),
        quiet: true,
        ..LabConfig::default()
    };
    let report = hirt_lab::run::lab(&args)?;
    let _ = std::fs::remove_dir_all(&dir);
    let c = report
        .comparisons
        .first()
        .ok_or_else(|| anyhow::anyhow!("no result"))?;
    let fec = c
        .fec
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("FEC run missing: {:?}", c.notes))?;
    let stats = c
        .fec_stats
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no FEC counters"))?;
    anyhow::ensure!(
        c.baseline.requests > 50 && fec.requests > 50,
        "too few requests"
    );
    // Every response byte was compared with the pattern: no corrupt response, no failure.
    anyhow::ensure!(
        c.baseline.corrupt == 0 && fec.corrupt == 0,
        "corrupt responses"
    );
    anyhow::ensure!(c.baseline.errors == 0 && fec.errors == 0, "failed requests");
    anyhow::ensure!(
        c.fec_link.as_ref().is_some_and(|l| l.lost > 0),
        "the link lost nothing"
    );
    anyhow::ensure!(
        stats.recovered > 0,
        "the tunnel recovered nothing: {stats:?}"
    );
    anyhow::ensure!(report.json["summary"]["fec_p99_ms"].is_number());
    Ok(())
}

/// A dataplane that exits at once: the FEC run fails with a note, the lab goes on and tears
/// everything down (the harness checks that no namespace is left).
fn failing_dataplane_still_cleans_up() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("hirt-lab-test-fail-{}", std::process::id()));
    std::env::set_var("HIRT_BIN", "/bin/false");
    let args = LabConfig {
        profile: Profile::Clean,
        workload: vec![WorkloadKind::Http],
        connections: 2,
        duration: Duration::from_millis(500),
        fec: FecRuns::On,
        results: dir.clone(),
        quiet: true,
        ..LabConfig::default()
    };
    let r = hirt_lab::run::lab(&args);
    std::env::remove_var("HIRT_BIN");
    let _ = std::fs::remove_dir_all(&dir);
    let report = r?;
    let c = report
        .comparisons
        .first()
        .ok_or_else(|| anyhow::anyhow!("no result"))?;
    anyhow::ensure!(c.fec.is_none(), "a FEC run without a dataplane");
    anyhow::ensure!(
        c.notes.iter().any(|n| n.contains("FEC run failed")),
        "{:?}",
        c.notes
    );
    Ok(())
}

/// A short soak: either end killed with SIGKILL and restarted, a link flap and (UDP) a client
/// address change, 3% loss each way; nothing corrupt or duplicated, every fault recovered, the
/// losses outside the faults few, the TCP stream's connection alive throughout.
fn short_soak(tunnel: TunnelMode) -> anyhow::Result<()> {
    let args = LabConfig {
        profile: Profile::Wan,
        tunnel,
        delay: Some(Duration::from_millis(10)),
        soak: Some(Duration::from_secs(45)),
        fault_every: Duration::from_secs(10),
        quiet: true,
        ..LabConfig::default()
    };
    let r = hirt_lab::soak::soak(&args)?;
    let faults: Vec<_> = r.faults.iter().map(|f| f.fault).collect();
    let expected = hirt_lab::soak::Fault::cycle(tunnel);
    anyhow::ensure!(
        faults.len() >= 3
            && faults
                .iter()
                .zip(expected.iter().cycle())
                .all(|(a, b)| a == b),
        "faults injected: {faults:?} in {:.1} s: {:#?}",
        r.duration_s,
        r.faults
    );
    anyhow::ensure!(r.checks.ok, "soak checks: {:?}\n{:#?}", r.checks, r.faults);
    for s in &r.streams {
        anyhow::ensure!(s.delivered > 0 && s.lost_in_faults > 0, "stream {s:?}");
        anyhow::ensure!(s.lost_outside_ratio < 0.002, "unrecovered losses: {s:?}");
    }
    anyhow::ensure!(
        r.tcp.connections == 1 && r.tcp.corrupt == 0 && r.tcp.bytes_ok > 1_000_000,
        "TCP stream: {:?}",
        r.tcp
    );
    Ok(())
}

fn short_soak_survives_faults_udp() -> anyhow::Result<()> {
    short_soak(TunnelMode::Udp)
}

fn short_soak_survives_faults_srv6() -> anyhow::Result<()> {
    short_soak(TunnelMode::Srv6)
}

/// `hirt lab --profile dual --scenario outage --tunnel srv6 --runs 2`: the SRv6 tunnel with a
/// segment list per underlay path moves to path 1 at both silent outages of path 0, and HTTP
/// across outages stalls less through it than through the single-path tunnel, every connection
/// alive and nothing corrupt.
fn srv6_two_path_tunnel_fails_over() -> anyhow::Result<()> {
    let results = std::env::temp_dir().join(format!("hirt-lab-e2e-{}", std::process::id()));
    let args = LabConfig {
        profile: Profile::Dual,
        tunnel: TunnelMode::Srv6,
        runs: 2,
        quiet: true,
        results: results.clone(),
        ..LabConfig::default()
    };
    let r = hirt_lab::outage::outage(&args);
    let _ = std::fs::remove_dir_all(&results);
    let r = r?;
    anyhow::ensure!(
        r["runs"] == 2 && r["failed"] == 0 && r["tunnel"] == "srv6",
        "outages: {r}"
    );
    let http = &r["http"];
    for way in ["no-fec", "fec-single-path", "fec-failover"] {
        let w = &http[way];
        anyhow::ensure!(
            w["connections_survived"] == true && w["corrupt"] == 0 && w["failed_requests"] == 0,
            "{way}: {w}"
        );
    }
    let stalls = |way: &str| http[way]["over_1s"].as_u64().unwrap_or(u64::MAX);
    anyhow::ensure!(
        stalls("fec-failover") < stalls("fec-single-path"),
        "requests over 1 s: failover {} vs single path {}",
        stalls("fec-failover"),
        stalls("fec-single-path")
    );
    Ok(())
}

/// A second underlay path with its own emulator: both paths carry traffic, each with its own
/// delay.
fn two_underlay_paths() -> anyhow::Result<()> {
    let topo = Topology::build()?;
    let second = topo.add_path(1)?;
    let with_delay = |ms| DirectionConfig {
        delay: Duration::from_millis(ms),
        ..Default::default()
    };
    let _e0 = Emulator::start(Some(&topo.link), "la", "lb", &with_delay(2), &with_delay(2))?;
    let _e1 = Emulator::start(
        Some(&topo.link),
        &second.link_a,
        &second.link_b,
        &with_delay(20),
        &with_delay(20),
    )?;
    let rtt = |to: &str| -> anyhow::Result<f64> {
        let out = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &topo.client,
                "ping",
                "-c",
                "3",
                "-i",
                "0.2",
                "-q",
                to,
            ])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        anyhow::ensure!(out.status.success(), "ping {to}: {text}");
        // rtt min/avg/max/mdev = a/b/c/d ms
        text.rsplit("= ")
            .next()
            .and_then(|v| v.split('/').next())
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no rtt in {text}"))
    };
    let (r0, r1) = (rtt(hirt_lab::topo::UNDER_B4)?, rtt(&second.server4)?);
    anyhow::ensure!(
        (4.0..15.0).contains(&r0),
        "path 0 RTT {r0} ms (4 ms emulated)"
    );
    anyhow::ensure!(
        (40.0..60.0).contains(&r1),
        "path 1 RTT {r1} ms (40 ms emulated)"
    );
    let r1v6 = rtt(&second.server6)?;
    anyhow::ensure!((40.0..60.0).contains(&r1v6), "path 1 IPv6 RTT {r1v6} ms");
    Ok(())
}
