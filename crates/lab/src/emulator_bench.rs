//! `hirt lab --bench-emulator`: how many Gbit/s of 1280-byte packets the userspace link
//! emulator forwards without losses of its own.

use std::time::Duration;

use anyhow::Context;

use crate::config::LabConfig;
use crate::emu::core::DirectionConfig;
use crate::emu::Emulator;
use crate::netns;
use crate::topo::Topology;
use crate::workload;

/// `--bench-emulator`: offers `bench_gbps` of 1280-byte UDP packets from the client namespace to
/// the server namespace through an unimpaired emulator, and counts what arrives.
pub(crate) fn bench_emulator(
    args: &LabConfig,
    topo: &Topology,
) -> anyhow::Result<serde_json::Value> {
    let none = DirectionConfig {
        seed: args.seed,
        ..Default::default()
    };
    let emu = Emulator::start(Some(&topo.link), "la", "lb", &none, &none)?;
    // What reaches the server's interface (kernel counter): the emulator's delivery, whatever
    // the receiving application manages to read on a busy machine.
    let rx_before = if_rx_packets(&topo.server, "b0")?;
    std::thread::sleep(Duration::from_millis(200));
    let d = args.duration.min(Duration::from_secs(10));
    let gbps = args.bench_gbps;
    let sent = netns::join(netns::in_ns(&topo.client, move || {
        // The sender must get the CPU to offer the load (below the emulator's priority).
        crate::sys::set_realtime(10);
        workload::bulk::udp_blast(gbps, d)
    }))?;
    std::thread::sleep(Duration::from_millis(300));
    let (ab, _) = emu.stop();
    let got = if_rx_packets(&topo.server, "b0")?.saturating_sub(rx_before);
    let secs = sent.1.as_secs_f64();
    let j = serde_json::json!({
        "offered_gbps": sent.0 as f64 * 1280.0 * 8.0 / secs / 1e9,
        "delivered_gbps": got as f64 * 1280.0 * 8.0 / secs / 1e9,
        "sent_packets": sent.0,
        "emulator_rx_packets": ab.rx_packets,
        "emulator_tx_packets": ab.tx_packets,
        "emulator_own_losses": ab.own_losses(),
        "emulator_socket_drops": ab.socket_drops,
        "emulator_cpu_seconds": ab.cpu_ns as f64 / 1e9,
        // What one core running the emulator thread forwards: packets per CPU-second.
        "emulator_gbps_per_core": ab.tx_packets as f64 * 1280.0 * 8.0 / (ab.cpu_ns.max(1) as f64 / 1e9) / 1e9,
        "received_packets": got,
        "lost_before_emulator": sent.0.saturating_sub(ab.rx_packets),
        "lost_in_emulator": ab.rx_packets.saturating_sub(ab.tx_packets),
        "lost_after_emulator": ab.tx_packets.saturating_sub(got),
        "packet_bytes": 1280,
        "seconds": secs,
        "machine": crate::run::machine(),
    });
    if !args.json {
        println!("{}", serde_json::to_string_pretty(&j)?);
    }
    Ok(j)
}

/// Packets received by interface `dev` of namespace `ns`.
fn if_rx_packets(ns: &str, dev: &str) -> anyhow::Result<u64> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", dev])
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("ip -j output")?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .context("no rx counter")
}
