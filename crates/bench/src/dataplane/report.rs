//! What `hirt bench dataplane` reports: counters per offered load, throughput runs, latency
//! percentiles, the goal check, and the summary's derived figures.

use std::time::Duration;

use serde::Serialize;

use super::config::Dataplane;

/// Tunnel counters of one offered load.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LoadCounters {
    /// Losses the decoder declared.
    pub losses: u64,
    /// Of those, recovered.
    pub recovered: u64,
    /// Of those, recovered later than the recovery deadline (0 without one).
    pub recovered_late: u64,
    /// Repairs the encoder sent.
    pub repairs: u64,
    /// Repairs the decoder received (the rest were lost on the link or dropped on the way).
    pub repairs_received: u64,
    /// Repair bytes over source bytes.
    pub overhead: f64,
    /// Repairs or recoveries skipped by overload control (encoder + decoder).
    pub overload_skips: u64,
    /// Packets the emulated link dropped (the loss rule).
    pub link_drops: u64,
    /// Drops at the decoder's SID queue that it reported as its own (feedback).
    pub local_drops: u64,
    /// Repairs sent by the encoder's timer (sources unprotected for the repair delay).
    pub repairs_timer: u64,
    /// Loss reports the decoder sent (with a recovery deadline).
    pub loss_reports: u64,
    /// Repairs the encoder sent in answer to loss reports.
    pub repairs_report: u64,
    /// Feedback the encoder took as congestion on the path (CE marks, or a queue seen in the
    /// RTT); each pauses the answers for two smoothed RTTs.
    pub congestion_signals: u64,
    /// CPU time of the hirt threads of both nodes per delivered packet, in µs (scheduler run
    /// time, `/proc/self/task/*/schedstat`; it includes the kernel work those threads do, e.g.
    /// the next hop's receive path that a veth transmit runs in the sender's context).
    pub hirt_cpu_us_per_packet: f64,
    /// CPU time of the bench's sender and receiver and of the hirt threads (each with the
    /// kernel work done in its context, on veth nearly all forwarding) over the machine's CPU
    /// time while the load was offered. Queueing delay grows steeply as this approaches 1.
    pub cpu_share: f64,
}

/// One throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Configuration name.
    pub name: String,
    /// Capacity (Mpps) of every round of this configuration, in order; this run is the best.
    pub rounds_mpps: Vec<f64>,
    /// Every offered load tried: (packets/s, sent, received).
    pub offered: Vec<(u64, u64, u64)>,
    /// Tunnel counters of every offered load tried, in the same order. Shows what FEC does at
    /// and above capacity (queue drops look like tunnel losses to the decoder; overload control
    /// skips repairs there).
    pub offered_fec: Vec<LoadCounters>,
    /// Packets sent at the highest rate that delivered >= 99%.
    pub sent: u64,
    /// Packets received (unique) at that rate.
    pub received: u64,
    /// Million packets per second delivered at that rate (the capacity).
    pub mpps: f64,
    /// Gbit/s delivered (inner packet bytes).
    pub gbps: f64,
    /// Losses the decoder saw in the tunnel.
    pub losses: u64,
    /// Packets recovered.
    pub recovered: u64,
    /// Losses never recovered.
    pub unrecoverable: u64,
    /// recovered / losses (1.0 without losses).
    pub recovered_ratio: f64,
    /// Repair packets sent.
    pub repairs: u64,
    /// Repair bytes / source bytes.
    pub overhead: f64,
    /// [`LoadCounters::hirt_cpu_us_per_packet`] at that rate (0 for kernel forwarding).
    pub hirt_cpu_us_per_packet: f64,
    /// Inner bits delivered per ns of hirt CPU at that rate, both nodes' threads counted: the
    /// tunnel's Gbit/s per core (0 for kernel forwarding).
    pub gbps_per_hirt_core: f64,
}

/// Latency percentiles of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Configuration name.
    pub name: String,
    /// Offered load, packets/s.
    pub pps: u64,
    /// Samples.
    pub samples: usize,
    /// Median one-way latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// [`LoadCounters::hirt_cpu_us_per_packet`] (0 for kernel forwarding).
    pub hirt_cpu_us_per_packet: f64,
    /// [`LoadCounters::cpu_share`].
    pub cpu_share: f64,
    /// Packets received over packets due at `pps` for the run's duration: below 0.99 the chain
    /// (the bench's sender included: it runs the kernel's forwarding in its own context) did not
    /// carry the load, and the percentiles are those of a lower one.
    pub carried: f64,
}

/// The throughput goal checked directly: FEC at the lossy run's loss rate, offered
/// 0.85 x the measured no-FEC capacity for `--goal-duration` seconds.
#[derive(Debug, Clone, Serialize)]
pub struct GoalCheck {
    /// Offered load, packets/s.
    pub offered_pps: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets received (unique).
    pub received: u64,
    /// Packets the emulated link dropped (the loss rule's counter: sources and repairs).
    pub link_losses: u64,
    /// Source losses the decoder saw (ESI gaps: link drops of sources plus any queue drop
    /// between encoder and decoder).
    pub tunnel_losses: u64,
    /// Packets recovered.
    pub recovered: u64,
    /// recovered / tunnel_losses (1.0 without losses).
    pub recovered_ratio: f64,
    /// Of the recovered, those later than the recovery deadline (`--deadline`; 0 without one).
    pub recovered_late: u64,
    /// (recovered - recovered_late) / tunnel_losses (1.0 without losses).
    pub recovered_in_time_ratio: f64,
    /// received / sent: what the application saw.
    pub delivered_ratio: f64,
    /// Repair overhead (repair bytes / source bytes).
    pub overhead: f64,
    /// Repairs skipped by overload control (encoder) and repairs left unsolved (decoder).
    pub overload_skips: u64,
    /// Repairs the encoder sent.
    pub repairs_sent: u64,
    /// Repairs the decoder received.
    pub repairs_received: u64,
    /// Packets dropped in the nodes' queues (socket rings, ring buffers, TUN), as reported in
    /// the decoder's feedback.
    pub local_drops: u64,
    /// Loss reports the decoder sent (with a recovery deadline).
    pub loss_reports: u64,
    /// Repairs the encoder sent in answer to loss reports.
    pub repairs_report: u64,
    /// Feedback the encoder took as congestion on the path (each pauses the answers).
    pub congestion_signals: u64,
    /// Goal met: >= 99.9% of the tunnel losses recovered and >= 99.9% delivered.
    pub met: bool,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Inner packet size.
    pub packet_size: usize,
    /// FEC window.
    pub window: u16,
    /// FEC mode.
    pub fec: String,
    /// How the hirt nodes took and sent packets: `kernel-sources` (the sources through the
    /// kernel, hirt's packets through AF_XDP), `xdp` (everything through AF_XDP), both with a
    /// plain router between encoder and decoder, or `tun` (SIDs routed to TUN devices).
    pub dataplane: Dataplane,
    /// Whether the nodes ran with `--kernel-sources` (`dataplane` is `kernel-sources`).
    pub kernel_sources: bool,
    /// Throughput runs.
    pub runs: Vec<Run>,
    /// Latency runs.
    pub latency: Vec<Latency>,
    /// The throughput goal at 0.85 x the no-FEC capacity: the try that met it, else the last.
    pub goal_3pct: GoalCheck,
    /// Every try of the goal check (at most `--rounds`, until one meets it).
    pub goal_3pct_tries: Vec<GoalCheck>,
    /// Headline numbers.
    pub summary: serde_json::Value,
}

/// The `q` quantile of `v` (ns), in µs; NaN for no samples.
pub fn percentile(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i] as f64 / 1000.0
}

/// CPU share of the chain during one load: CPU time of the sender, the receiver and the hirt
/// threads (each with the kernel work done in its context: on veth nearly all forwarding)
/// over the machine's CPU time (wall time x CPUs).
pub fn cpu_share(thread_cpu_ns: u64, wall: Duration) -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine = wall.as_nanos() as f64 * cpus;
    if machine <= 0.0 {
        return 0.0;
    }
    thread_cpu_ns as f64 / machine
}

/// The latency goal: p99 added one-way latency at most this (µs).
pub const LATENCY_GOAL_P99_US: f64 = 200.0;
/// A latency run counts for the goal if at least this share of its load arrived.
pub const CARRIED: f64 = 0.99;

/// Latency hirt FEC adds over kernel forwarding at one load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AddedLatency {
    /// Offered load, packets/s.
    pub pps: u64,
    /// Median added one-way latency, µs.
    pub p50_us: f64,
    /// 99th percentile of the added one-way latency, µs.
    pub p99_us: f64,
    /// [`LoadCounters::cpu_share`]: kernel run, hirt run.
    pub cpu_share: (f64, f64),
    /// [`Latency::carried`] of the hirt run.
    pub carried: f64,
}

/// Pairs each hirt FEC latency with the kernel's at the same load (the order of
/// the latency runs: kernel, then hirt) and sorts by load.
pub fn added_latency(latency: &[Latency]) -> Vec<AddedLatency> {
    let mut v: Vec<AddedLatency> = latency
        .chunks_exact(2)
        .filter(|p| p[0].name == "kernel" && p[1].name == "hirt_fec" && p[0].pps == p[1].pps)
        .map(|p| AddedLatency {
            pps: p[0].pps,
            p50_us: p[1].p50_us - p[0].p50_us,
            p99_us: p[1].p99_us - p[0].p99_us,
            cpu_share: (p[0].cpu_share, p[1].cpu_share),
            carried: p[1].carried,
        })
        .collect();
    v.sort_by_key(|a| a.pps);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(name: &str, pps: u64, p50_us: f64, p99_us: f64, busy: f64) -> Latency {
        Latency {
            name: name.into(),
            pps,
            samples: 1,
            p50_us,
            p99_us,
            hirt_cpu_us_per_packet: 0.0,
            cpu_share: busy,
            carried: 1.0,
        }
    }

    #[test]
    fn added_latency_pairs_kernel_and_hirt_by_load() {
        let l = [
            lat("kernel", 100_000, 40.0, 100.0, 0.5),
            lat("hirt_fec", 100_000, 240.0, 2100.0, 0.9),
            lat("kernel", 20_000, 30.0, 60.0, 0.1),
            lat("hirt_fec", 20_000, 50.0, 160.0, 0.2),
        ];
        let a = added_latency(&l);
        assert_eq!(
            a,
            vec![
                AddedLatency {
                    pps: 20_000,
                    p50_us: 20.0,
                    p99_us: 100.0,
                    cpu_share: (0.1, 0.2),
                    carried: 1.0,
                },
                AddedLatency {
                    pps: 100_000,
                    p50_us: 200.0,
                    p99_us: 2000.0,
                    cpu_share: (0.5, 0.9),
                    carried: 1.0,
                },
            ]
        );
        // A pair out of order or of different loads is not a pair.
        assert!(added_latency(&l[1..3]).is_empty());
    }

    #[test]
    fn cpu_share_is_thread_time_over_machine_time() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let s = cpu_share(500_000_000, Duration::from_secs(1));
        assert!((s - 0.5 / cpus).abs() < 1e-12);
        assert_eq!(cpu_share(1, Duration::ZERO), 0.0);
    }
}
