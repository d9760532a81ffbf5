//! One measured configuration: hirt nodes started fresh on the path, the warm-up, the offered
//! loads, and the tunnel counters of each load.

use std::time::Duration;

use hirt_linux::config::{Srv6Config, XdpMode};
use hirt_linux::srv6::Behavior;
use hirt_linux::srv6_run;

use super::config::{Dataplane, DataplaneConfig};
use super::counters::Snapshot;
use super::report::{cpu_share, percentile, GoalCheck, Latency, LoadCounters, Run};
use super::sweep::Sweep;
use super::topology::{Topo, DEC, ENC};
use super::traffic::{receiver, sender};
use crate::os;

/// The nftables counter of the emulated link's random loss (SRv6 packets, destination in
/// `fc00::/16`, that the lossy namespace forwards out of its lossy device).
const LINK_LOSS: &str = "link_loss";

#[derive(Clone, Copy, PartialEq)]
/// What carries the packets between sender and receiver.
pub enum Mode {
    /// Kernel forwarding, no encapsulation.
    Kernel,
    /// The hirt encoder and decoder, with FEC or tag/strip only.
    Hirt {
        /// Whether the nodes code (else `--fec none`).
        fec: bool,
    },
}

/// One configuration on fresh hirt instances: the sweep of offered loads (`pps` = 0) or one
/// paced load `pps`. Returns the run and, for a paced load, the latency samples (ns).
pub fn one_run(
    t: &Topo,
    args: &DataplaneConfig,
    name: &str,
    mode: Mode,
    loss: f64,
    pps: u64,
    dur: Duration,
) -> anyhow::Result<(Run, Vec<u64>)> {
    t.steer(matches!(mode, Mode::Hirt { .. }))?;
    let lossy = loss > 0.0;
    if lossy {
        t.lossy_ns()
            .random_loss_v6(&t.lossy_dev, "fc00::/16", loss, LINK_LOSS)?;
    }
    let fec = match mode {
        Mode::Hirt { fec: true } => args.fec.clone(),
        _ => "none".to_string(),
    };
    let fec_on = matches!(mode, Mode::Hirt { fec: true });
    let mk = |role: &str| Srv6Config {
        xdp: if args.dataplane.xdp() {
            match role {
                "encoder" => t.e_devs.to_vec(),
                _ => t.d_devs.to_vec(),
            }
        } else {
            Vec::new()
        },
        kernel_sources: args.dataplane == Dataplane::KernelSources,
        // On veth, native XDP copies each frame into an XDP buffer and back into a socket
        // buffer for what it passes on: generic is cheaper for --kernel-sources.
        xdp_mode: if args.dataplane == Dataplane::KernelSources {
            XdpMode::Generic
        } else {
            XdpMode::Auto
        },
        hmac_key: (args.auth_sources && fec_on).then(|| "0x5eed5eed5eed5eed".into()),
        auth_sources: args.auth_sources && fec_on,
        overload_threshold: args
            .overload_threshold
            .unwrap_or(Srv6Config::default().overload_threshold),
        repair_delay_ms: args
            .repair_delay_ms
            .unwrap_or(Srv6Config::default().repair_delay_ms),
        deadline: args
            .deadline
            .clone()
            .or_else(|| Srv6Config::default().deadline),
        role: role.parse().expect("role"),
        enc_sid: Some(ENC.parse().expect("sid")),
        dec_sid: Some(DEC.parse().expect("sid")),
        behavior: Behavior::Dt6,
        dev: "hb0".into(),
        fec: fec.clone(),
        window: args.window,
        control: Some(std::env::temp_dir().join(format!("{}-{role}.sock", t.e.name()))),
        ..Default::default()
    };
    let handles = if matches!(mode, Mode::Hirt { .. }) {
        let a = mk("encoder");
        let enc =
            t.e.spawn(move || srv6_run::start(a).map_err(std::io::Error::other))
                .join()
                .expect("join")?;
        let a = mk("decoder");
        let dec =
            t.d.spawn(move || srv6_run::start(a).map_err(std::io::Error::other))
                .join()
                .expect("join")?;
        Some((enc, dec))
    } else {
        None
    };
    t.warm_up()?;
    // Offered loads: one paced rate for latency runs; otherwise the [`Sweep`].
    let mut sweep = Sweep::new(args.sweep_start, args.sweep_max);
    let mut next_rate = if pps > 0 { pps } else { sweep.first() };
    let mut run = Run {
        name: name.into(),
        rounds_mpps: Vec::new(),
        offered: Vec::new(),
        offered_fec: Vec::new(),
        sent: 0,
        received: 0,
        mpps: 0.0,
        gbps: 0.0,
        losses: 0,
        recovered: 0,
        unrecoverable: 0,
        recovered_ratio: 1.0,
        repairs: 0,
        overhead: 0.0,
        hirt_cpu_us_per_packet: 0.0,
        gbps_per_hirt_core: 0.0,
    };
    // Read before and after each load so a run reports the numbers of its capacity load.
    let snap = || {
        let link = if lossy {
            t.lossy_ns().counter(LINK_LOSS).unwrap_or(0)
        } else {
            0
        };
        let nodes = handles.as_ref().map(|(e, d)| (&*e.metrics, &*d.metrics));
        Snapshot::read(nodes, link, if nodes.is_some() { hirt_cpu_ns() } else { 0 })
    };
    let mut lat_all: Vec<u64>;
    loop {
        let rate = next_rate;
        let before = snap();
        let run_id = os::mono_ns();
        let cpu = args.pin_traffic;
        let (tx, rx) = std::sync::mpsc::channel();
        let want_lat = pps > 0;
        let recv =
            t.s.spawn(move || receiver(tx, want_lat, run_id, cpu).map_err(std::io::Error::other));
        let _ = rx.recv_timeout(Duration::from_secs(5));
        let plen = args.packet_size.saturating_sub(48).max(16);
        let (sent, send_cpu) =
            t.c.spawn(move || sender(plen, dur, rate, run_id, cpu).map_err(std::io::Error::other))
                .join()
                .expect("join")?;
        let (received, lat, recv_cpu) = recv.join().expect("join")?;
        lat_all = lat;
        let ratio = received as f64 / sent.max(1) as f64;
        if !args.json {
            eprintln!("  {name} offered {rate} pps: sent {sent} received {received} ({ratio:.4})");
        }
        run.offered.push((rate, sent, received));
        let passed = ratio >= 0.99;
        let next = if pps > 0 {
            None
        } else {
            sweep.after(rate, passed)
        };
        // Counters are published every 200 ms by the workers.
        if handles.is_some() {
            std::thread::sleep(Duration::from_millis(250));
        }
        let after = snap();
        let d = after.since(&before);
        let hirt_cpu_us_per_packet = d.hirt_cpu_ns as f64 / 1000.0 / received.max(1) as f64;
        run.offered_fec.push(LoadCounters {
            losses: d.losses,
            recovered: d.recovered,
            recovered_late: d.recovered_late,
            repairs: d.repairs,
            repairs_received: d.repairs_received,
            overhead: d.overhead(),
            overload_skips: d.overload_skips,
            link_drops: d.link_drops,
            local_drops: d.local_drops,
            repairs_timer: d.repairs_timer,
            loss_reports: d.loss_reports,
            repairs_report: d.repairs_report,
            congestion_signals: d.congestion_signals,
            hirt_cpu_us_per_packet,
            cpu_share: cpu_share(send_cpu + recv_cpu + d.hirt_cpu_ns, dur),
        });
        // A load that passed with more delivered than any before is the capacity so far.
        if passed && received > run.received {
            run.losses = d.losses;
            run.recovered = d.recovered;
            run.unrecoverable = d.unrecoverable;
            run.repairs = d.repairs;
            run.overhead = d.overhead();
            run.recovered_ratio = d.recovered_ratio();
            run.sent = sent;
            run.received = received;
            run.hirt_cpu_us_per_packet = hirt_cpu_us_per_packet;
            run.gbps_per_hirt_core = if d.hirt_cpu_ns > 0 {
                (received * args.packet_size as u64 * 8) as f64 / d.hirt_cpu_ns as f64
            } else {
                0.0
            };
            run.mpps = received as f64 / dur.as_secs_f64() / 1e6;
            run.gbps = received as f64 * args.packet_size as f64 * 8.0 / dur.as_secs_f64() / 1e9;
        }
        match next {
            Some(r) => next_rate = r,
            None => break,
        }
    }
    let lat = lat_all;
    if let Some((enc, dec)) = handles {
        enc.stop();
        dec.stop();
    }
    if lossy {
        t.lossy_ns().remove_rules(LINK_LOSS)?;
    }
    Ok((run, lat))
}

/// Run time so far of this process's hirt threads (workers and their samplers, named
/// `hirt-...`; the bench's own threads are named `hirt`), in ns.
fn hirt_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("hirt-"))
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The goal check: one paced run of FEC at `args.loss` at `pps`.
pub fn goal_check(t: &Topo, args: &DataplaneConfig, pps: u64) -> anyhow::Result<GoalCheck> {
    let dur = Duration::from_secs_f64(args.goal_duration);
    let mode = Mode::Hirt { fec: true };
    let (r, _) = one_run(t, args, "goal_3pct", mode, args.loss, pps, dur)?;
    let (_, sent, received) = r.offered[0];
    let LoadCounters {
        losses,
        recovered,
        recovered_late,
        overhead,
        overload_skips: skips,
        link_drops: link,
        repairs,
        repairs_received,
        local_drops,
        loss_reports,
        repairs_report,
        congestion_signals,
        ..
    } = r.offered_fec[0];
    let ratio = |n: u64| {
        if losses > 0 {
            (n as f64 / losses as f64).min(1.0)
        } else {
            1.0
        }
    };
    let recovered_ratio = ratio(recovered);
    let recovered_in_time_ratio = ratio(recovered.saturating_sub(recovered_late));
    let delivered_ratio = received as f64 / sent.max(1) as f64;
    Ok(GoalCheck {
        offered_pps: pps,
        sent,
        received,
        link_losses: link,
        tunnel_losses: losses,
        recovered,
        recovered_ratio,
        recovered_late,
        recovered_in_time_ratio,
        delivered_ratio,
        overhead,
        overload_skips: skips,
        repairs_sent: repairs,
        repairs_received,
        local_drops,
        loss_reports,
        repairs_report,
        congestion_signals,
        met: recovered_ratio >= 0.999 && delivered_ratio >= 0.999,
    })
}

/// One-way latency at a paced `rate` without loss: kernel forwarding, then hirt FEC.
pub fn latency_pair(
    t: &Topo,
    args: &DataplaneConfig,
    rate: u64,
    dur: Duration,
) -> anyhow::Result<Vec<Latency>> {
    let mut out = Vec::new();
    for (name, mode) in [
        ("kernel", Mode::Kernel),
        ("hirt_fec", Mode::Hirt { fec: true }),
    ] {
        let (run, mut lat) = one_run(t, args, name, mode, 0.0, rate, dur)?;
        let load = run.offered_fec.last().copied().unwrap_or_default();
        let received = run.offered.last().map_or(0, |o| o.2);
        out.push(Latency {
            name: name.into(),
            pps: rate,
            samples: lat.len(),
            p50_us: percentile(&mut lat, 0.5),
            p99_us: percentile(&mut lat, 0.99),
            hirt_cpu_us_per_packet: load.hirt_cpu_us_per_packet,
            cpu_share: load.cpu_share,
            carried: received as f64 / (rate as f64 * dur.as_secs_f64()).max(1.0),
        });
    }
    Ok(out)
}
