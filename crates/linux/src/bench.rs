//! `hirt bench dataplane`: forwarding rate and added latency of the SRv6 dataplane over
//! veth namespaces (root), with the hirt nodes on AF_XDP (default) or TUN (`--dataplane tun`).
//!
//! ```text
//!  xdp: sender ns --veth--> encoder ns [hirt] --veth--> router ns (loss) --veth--> decoder ns [hirt] --veth--> receiver ns
//!  tun: sender ns --veth--> encoder ns [hirt] --veth (loss)--> decoder ns [hirt] --veth--> receiver ns
//! ```
//!
//! Configurations, each with fresh hirt instances: plain kernel forwarding (no encap, no hirt),
//! hirt with `--fec none` (tag/strip only), hirt FEC at 0% and at 3% random loss (ip6tables
//! statistic on the encoder->decoder path). For each, the sender offers paced 1280-byte IPv6
//! packets at 10k, 20k, 40k, ... packets/s (1 s each, `sendmmsg` bursts, sleeping between
//! bursts) until fewer than 99% arrive, then bisects four times between the last rate that
//! passed and the first that failed; the capacity is the best delivered rate of the loads that
//! passed (with FEC, recovered packets count as arrived; duplicates do not), and the tunnel
//! counters (losses, recovered, overhead) are those of that load. Blasting at full speed would
//! measure the sender and the receiver more than the dataplane on a small machine. The four
//! sweeps are repeated `--rounds` times, interleaved, and each configuration reports its best
//! round (other processes on the machine only ever lower a capacity). Then the
//! added one-way latency without loss, hirt FEC vs kernel forwarding, at a paced 100 kpps and,
//! when that is not well below capacity, also at half the FEC capacity: from the send time
//! carried in the payload to the kernel's receive timestamp (`SO_TIMESTAMPNS`, taken when the
//! packet enters the receiver's stack; all namespaces share CLOCK_REALTIME), so the bench's own
//! receiver waiting for a CPU is not counted as the dataplane's delay; packets of the first
//! 200 ms of a run are warm-up and not counted.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::config::{Srv6Config, XdpMode};
use crate::netns::{self, veth, NetNs};
use crate::srv6::Behavior;
use crate::srv6_run;
use crate::udp::io::TosBatch;

/// Arguments of `hirt bench dataplane`.
#[derive(Debug, Clone, clap::Args)]
pub struct DataplaneBenchArgs {
    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds per offered load of the throughput sweep.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Size of the inner IPv6 packets.
    #[arg(long, default_value_t = 1280)]
    pub packet_size: usize,
    /// Sliding window of the FEC runs.
    #[arg(long, default_value_t = 200)]
    pub window: u16,
    /// FEC mode of the FEC runs. At W = 200 the `ours` controller needs a surplus of 2% over the
    /// loss rate to recover >= 99.9% of 3% random losses (its default surplus, tuned for long
    /// windows, leaves ~1% unrecovered: `hirt sim --loss uniform:0.03 --scheme ours:w=200`).
    #[arg(long, default_value = "ours:base=0.02")]
    pub fec: String,
    /// Rounds of the throughput sweeps: every configuration is swept this many times, the
    /// configurations interleaved, and its best round is its capacity (other processes on the
    /// machine can only lower a capacity).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Loss of the lossy run.
    #[arg(long, default_value_t = 0.03)]
    pub loss: f64,
    /// First offered load of the throughput sweep (packets/s; doubled until < 99% arrive, then
    /// bisected).
    #[arg(long, default_value_t = 10_000)]
    pub sweep_start: u64,
    /// Highest offered load of the sweep.
    #[arg(long, default_value_t = 1_280_000)]
    pub sweep_max: u64,
    /// Paced rate of the latency runs (packets per second).
    #[arg(long, default_value_t = 100_000)]
    pub latency_pps: u64,
    /// Further paced loads (packets per second, comma-separated) at which to measure latency,
    /// kernel and hirt FEC each: where the added latency stays within the goal. Default in a
    /// full run: 20000,40000,60000,80000; with `--latency-only`: none.
    #[arg(long, value_delimiter = ',')]
    pub latency_curve: Option<Vec<u64>>,
    /// Seconds per latency run (the first 0.2 s are warm-up and not counted).
    #[arg(long, default_value_t = 2.0)]
    pub latency_duration: f64,
    /// Pin the bench's own sender and receiver threads to this CPU (the hirt workers and the
    /// kernel then tend to run on the others).
    #[arg(long)]
    pub pin_traffic: Option<usize>,
    /// Overload threshold of the hirt instances (`hirt srv6 --overload-threshold`; 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// Authenticate source packets in the FEC runs (`--hmac-key` + `--auth-sources`), to
    /// measure what it costs.
    #[arg(long)]
    pub auth_sources: bool,
    /// Seconds of the goal check (FEC at `--loss`, offered 0.85 x the no-FEC capacity).
    #[arg(long, default_value_t = 2.0)]
    pub goal_duration: f64,
    /// Time-driven repair delay of the hirt instances in ms (`hirt srv6 --repair-delay-ms`;
    /// default: hirt's, 0 = off).
    #[arg(long)]
    pub repair_delay_ms: Option<f64>,
    /// Only the latency runs, at `--latency-pps` (no throughput sweeps, no goal check).
    #[arg(long)]
    pub latency_only: bool,
    /// Only the throughput goal check, `--rounds` tries at this offered load (packets/s) with
    /// FEC at `--loss` (no sweeps, no latency runs).
    #[arg(long)]
    pub goal_only_pps: Option<u64>,
    /// How the hirt nodes take and send packets.
    /// `kernel-sources` (default): both nodes run `hirt srv6 --xdp ... --kernel-sources` (the
    /// encoder's XDP program tags the sources and the kernel forwards them; the decoder's
    /// kernel End.DT6 delivers them; hirt reads copies, codes and recovers); their programs are
    /// attached in generic mode, cheaper on veth.
    /// `xdp`: the AF_XDP fast path (`hirt srv6 --xdp` on their links), every packet through
    /// hirt.
    /// With both, the path gets a plain router between encoder and decoder that carries the
    /// loss rule (hirt's own transmissions skip its node's netfilter hooks), in every
    /// configuration of the run, so kernel forwarding crosses the same hops, and the sender's
    /// link has its offloads off (an XDP frame carries no checksum metadata).
    /// `tun`: SIDs routed to TUN devices, encoder and decoder linked directly.
    #[arg(long, value_enum, default_value_t = Dataplane::KernelSources)]
    pub dataplane: Dataplane,
    /// The same as `--dataplane kernel-sources` (kept for the commands of earlier sessions).
    #[arg(long, hide = true)]
    pub kernel_sources: bool,
}

/// The hirt nodes' packet I/O in `hirt bench dataplane`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Dataplane {
    /// AF_XDP sockets for hirt's packets, the sources forwarded and delivered by the kernel
    /// (`hirt srv6 --xdp ... --kernel-sources`).
    #[serde(rename = "kernel-sources")]
    KernelSources,
    /// AF_XDP sockets (`hirt srv6 --xdp`).
    #[serde(rename = "xdp")]
    Xdp,
    /// TUN devices.
    #[serde(rename = "tun")]
    Tun,
}

impl Dataplane {
    /// Whether the nodes use AF_XDP (and the path has a middle router).
    fn xdp(self) -> bool {
        self != Dataplane::Tun
    }
}

/// Tunnel counters of one offered load.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LoadCounters {
    /// Losses the decoder declared.
    pub losses: u64,
    /// Of those, recovered.
    pub recovered: u64,
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

/// The issue's throughput goal checked directly: FEC at the lossy run's loss rate, offered
/// 0.85 x the measured no-FEC capacity for `--goal-duration` seconds.
#[derive(Debug, Clone, Serialize)]
pub struct GoalCheck {
    /// Offered load, packets/s.
    pub offered_pps: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets received (unique).
    pub received: u64,
    /// Packets the emulated link dropped (ip6tables counter: sources and repairs).
    pub link_losses: u64,
    /// Source losses the decoder saw (ESI gaps: link drops of sources plus any queue drop
    /// between encoder and decoder).
    pub tunnel_losses: u64,
    /// Packets recovered.
    pub recovered: u64,
    /// recovered / tunnel_losses (1.0 without losses).
    pub recovered_ratio: f64,
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

const ENC: &str = "fc00:e::1";
const DEC: &str = "fc00:d::1";
const DST: &str = "2001:db8:9::2";

struct Topo {
    c: NetNs,
    e: NetNs,
    d: NetNs,
    s: NetNs,
    /// The plain router between encoder and decoder (`--xdp` runs).
    m: Option<NetNs>,
    /// The encoder's links (from the sender, towards the decoder) and the decoder's (from the
    /// encoder's side, towards the receiver).
    e_devs: [String; 2],
    d_devs: [String; 2],
    /// Where the loss rule goes: this namespace's FORWARD chain, out of this device.
    lossy_dev: String,
}

impl Topo {
    fn lossy_ns(&self) -> &NetNs {
        self.m.as_ref().unwrap_or(&self.e)
    }
}

fn topo(middle: bool) -> anyhow::Result<Topo> {
    let base = netns::unique_name("hb");
    let mk = |r: &str| NetNs::new(&format!("{base}{r}"));
    let (c, e, d, s) = (mk("c")?, mk("e")?, mk("d")?, mk("s")?);
    let m = if middle { Some(mk("m")?) } else { None };
    let v: Vec<String> = ["ce", "ec", "ed", "de", "ds", "sd", "em", "me"]
        .iter()
        .map(|x| format!("{base}{x}"))
        .collect();
    veth(&c, &v[0], &e, &v[1])?;
    veth(&d, &v[4], &s, &v[5])?;
    let addr = |ns: &NetNs, dev: &str, a: &str| {
        ns.ip(&["-6", "addr", "add", a, "dev", dev, "nodad"])
            .map(|_| ())
    };
    let r = |ns: &NetNs, args: &str| {
        let a: Vec<&str> = args.split_whitespace().collect();
        ns.ip(&a).map(|_| ())
    };
    // encoder 2001:db8:2::1 -- [middle 2001:db8:2::2 | 2001:db8:3::1] -- 2001:db8:3::2 decoder,
    // or encoder 2001:db8:2::1 -- 2001:db8:2::2 decoder.
    let (e_peer, d_addr, d_peer) = match &m {
        Some(m) => {
            veth(&e, &v[2], m, &v[7])?;
            veth(m, &v[6], &d, &v[3])?;
            addr(m, &v[7], "2001:db8:2::2/64")?;
            addr(m, &v[6], "2001:db8:3::1/64")?;
            m.sysctl("net.ipv6.conf.all.forwarding", "1")?;
            for dev in [&v[6], &v[7]] {
                m.ip(&["link", "set", dev, "mtu", "1600"])?;
            }
            r(m, "-6 route add 2001:db8:1::/64 via 2001:db8:2::1")?;
            r(m, "-6 route add fc00:e::/64 via 2001:db8:2::1")?;
            r(m, "-6 route add default via 2001:db8:3::2")?;
            ("2001:db8:2::2", "2001:db8:3::2/64", "2001:db8:3::1")
        }
        None => {
            veth(&e, &v[2], &d, &v[3])?;
            ("2001:db8:2::2", "2001:db8:2::2/64", "2001:db8:2::1")
        }
    };
    e.ip(&["link", "set", &v[2], "mtu", "1600"])?;
    d.ip(&["link", "set", &v[3], "mtu", "1600"])?;
    addr(&c, &v[0], "2001:db8:1::1/64")?;
    addr(&e, &v[1], "2001:db8:1::2/64")?;
    addr(&e, &v[2], "2001:db8:2::1/64")?;
    addr(&d, &v[3], d_addr)?;
    addr(&d, &v[4], "2001:db8:9::1/64")?;
    addr(&s, &v[5], "2001:db8:9::2/64")?;
    for ns in [&e, &d] {
        ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    }
    r(&c, "-6 route add default via 2001:db8:1::2")?;
    // The ingress's H.Encaps takes its outer source from here; without it the kernel selects
    // a source address for every packet (~4% of the chain's CPU on this path).
    r(&c, "sr tunsrc set 2001:db8:1::1")?;
    r(&e, &format!("-6 route add default via {e_peer}"))?;
    r(&d, &format!("-6 route add 2001:db8:1::/64 via {d_peer}"))?;
    r(&d, &format!("-6 route add fc00:e::/64 via {d_peer}"))?;
    r(&s, "-6 route add default via 2001:db8:9::1")?;
    // Static neighbours would avoid ND delays; one warm-up packet does it as well.
    if middle {
        // Frames the AF_XDP path reads carry no checksum metadata: the sender's must be complete.
        c.disable_offloads(&v[0])?;
    }
    let lossy_dev = if middle { v[6].clone() } else { v[2].clone() };
    Ok(Topo {
        c,
        e,
        d,
        s,
        m,
        e_devs: [v[1].clone(), v[2].clone()],
        d_devs: [v[3].clone(), v[4].clone()],
        lossy_dev,
    })
}

/// CLOCK_REALTIME in ns: the clock of the kernel's receive timestamps (`SO_TIMESTAMPNS`),
/// shared by every namespace.
fn real_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Pins the calling thread to `cpu` (best effort).
fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Sends for `dur`, `pps` = 0 means as fast as possible. Every payload carries `run` (bytes
/// 16..24) so the receiver of one load ignores stragglers of the previous one. Returns packets
/// sent and the thread's CPU time (ns).
fn sender(
    payload_len: usize,
    dur: Duration,
    pps: u64,
    run: u64,
    cpu: Option<usize>,
) -> anyhow::Result<(u64, u64)> {
    pin(cpu);
    let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
    let to: SocketAddr = format!("[{DST}]:9000").parse()?;
    // One datagram per message: the kernel drops UDP GSO runs that a host sends into its own
    // seg6 encap route, and the pacing is the point.
    let mut batch = TosBatch::default().without_gso();
    let mut p = vec![0u8; payload_len.max(24)];
    let start = Instant::now();
    let mut seq: u64 = 0;
    // Bursts of at most 32, at most ~10k bursts per second.
    let burst = if pps == 0 {
        crate::batch::BATCH
    } else {
        (pps / 10_000).clamp(1, 32) as usize
    };
    // Sleep (not spin) until a burst is due: a spinning sender takes a whole core from the
    // dataplane on a small machine. A 1 ns timer slack keeps the wake-ups close to the due time.
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let t0 = mono_ns();
    while start.elapsed() < dur {
        // `pps` = 0: no pacing.
        if let Some(offset) = (seq * 1_000_000_000).checked_div(pps) {
            let due = t0 + offset;
            if due > mono_ns() + 2_000 {
                let ts = libc::timespec {
                    tv_sec: (due / 1_000_000_000) as libc::time_t,
                    tv_nsec: (due % 1_000_000_000) as libc::c_long,
                };
                // SAFETY: clock_nanosleep reads the timespec we pass; no remainder with
                // TIMER_ABSTIME.
                unsafe {
                    libc::clock_nanosleep(
                        libc::CLOCK_MONOTONIC,
                        libc::TIMER_ABSTIME,
                        &ts,
                        std::ptr::null_mut(),
                    )
                };
            }
            while mono_ns() < due {
                std::hint::spin_loop();
            }
        }
        for _ in 0..burst {
            p[..8].copy_from_slice(&seq.to_be_bytes());
            p[8..16].copy_from_slice(&real_ns().to_be_bytes());
            p[16..24].copy_from_slice(&run.to_be_bytes());
            batch.push(&p, to, 0);
            seq += 1;
        }
        batch.send(sock.as_raw_fd());
    }
    Ok((seq, clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)))
}

/// Packets sent in the first part of a latency run that are not counted.
const LATENCY_WARMUP: Duration = Duration::from_millis(200);
/// How long the receiver sleeps when its socket is empty (see `receiver`).
const RECEIVER_NAP: Duration = Duration::from_micros(200);

/// Receives until `idle` passes without a packet. Returns (unique packets, latencies ns, the
/// thread's CPU time ns).
fn receiver(
    ready: std::sync::mpsc::Sender<()>,
    want_latency: bool,
    run: u64,
    cpu: Option<usize>,
) -> anyhow::Result<(u64, Vec<u64>, u64)> {
    pin(cpu);
    let sock = UdpSocket::bind(format!("[{DST}]:9000"))?;
    // Large receive buffer so the receiver is not the bottleneck.
    let sz: libc::c_int = 64 << 20;
    // SAFETY: setsockopt with a c_int on our socket.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&sz as *const libc::c_int).cast(),
            4,
        );
    }
    // Latency ends when the packet enters the receiver's stack (the kernel's receive
    // timestamp), not when this thread gets to read it: on a small machine the bench's own
    // receiver can wait for a CPU, and that is not the dataplane's delay.
    crate::udp::io::enable_rx_timestamps(sock.as_raw_fd());
    sock.set_nonblocking(true)?;
    let _ = ready.send(());
    let mut batch = TosBatch::default();
    let mut seen = std::collections::HashSet::new();
    let mut lat = Vec::new();
    let mut last = Instant::now();
    let mut started = false;
    loop {
        let n = batch.recv(sock.as_raw_fd())?;
        if n == 0 {
            let idle = if started {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(5)
            };
            if last.elapsed() > idle {
                break;
            }
            // Sleep rather than wait on the socket: a waiting reader makes every delivery wake
            // it, and that wake-up (an IPI, on a VM an exit) runs in the context that carries
            // the packet through the whole chain: a quarter of its CPU at 100 kpps. The
            // latency is the kernel's receive timestamp, so reading late changes no figure.
            std::thread::sleep(RECEIVER_NAP);
            continue;
        }
        started = true;
        last = Instant::now();
        let now = real_ns();
        for i in 0..n {
            let stamp = batch.rx_timestamp(i).unwrap_or(now);
            let (d, _, _) = batch.get_mut(i);
            if d.len() < 24 || d[16..24] != run.to_be_bytes() {
                continue;
            }
            let seq = u64::from_be_bytes(d[..8].try_into().expect("8"));
            if seen.insert(seq) && want_latency {
                let t = u64::from_be_bytes(d[8..16].try_into().expect("8"));
                lat.push((t, stamp.saturating_sub(t)));
            }
        }
    }
    // Warm-up: the first packets of a run meet threads the scheduler has not placed yet (new
    // hirt workers were started just before) and cold caches; for ~100 ms hirt's latency was
    // several times its steady value. Neither configuration counts them.
    let first = lat.iter().map(|&(t, _)| t).min().unwrap_or(0);
    let warm = first + LATENCY_WARMUP.as_nanos() as u64;
    let lat = lat
        .into_iter()
        .filter(|&(t, _)| t >= warm)
        .map(|(_, l)| l)
        .collect();
    Ok((
        seen.len() as u64,
        lat,
        clock_ns(libc::CLOCK_THREAD_CPUTIME_ID),
    ))
}

/// The offered loads of a throughput sweep: doubling from `start` until a load fails (fewer
/// than 99% arrive) or `max` is passed, then `BISECT` loads bisecting between the highest load
/// that passed and the lowest that failed, so the capacity is found to 1/16 of a doubling step
/// rather than to 2x.
#[derive(Debug)]
struct Sweep {
    start: u64,
    max: u64,
    passed: u64,
    failed: Option<u64>,
    bisect_left: usize,
}

const BISECT: usize = 4;

impl Sweep {
    fn new(start: u64, max: u64) -> Sweep {
        Sweep {
            start: start.max(1),
            max,
            passed: 0,
            failed: None,
            bisect_left: BISECT,
        }
    }

    fn first(&self) -> u64 {
        self.start
    }

    /// Records the outcome of load `rate`; returns the next load, or `None` when done.
    fn after(&mut self, rate: u64, passed: bool) -> Option<u64> {
        if passed {
            self.passed = self.passed.max(rate);
        } else {
            self.failed = Some(self.failed.map_or(rate, |f| f.min(rate)));
        }
        let next = match self.failed {
            None => Some(rate * 2).filter(|&r| r <= self.max),
            Some(_) if self.bisect_left == 0 => None,
            Some(f) => {
                self.bisect_left -= 1;
                Some((self.passed + f) / 2)
            }
        };
        // Nothing left between the bounds.
        next.filter(|&r| r > self.passed && self.failed.is_none_or(|f| r < f))
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Kernel,
    Hirt { fec: bool },
}

fn percentile(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i] as f64 / 1000.0
}

fn one_run(
    t: &Topo,
    args: &DataplaneBenchArgs,
    name: &str,
    mode: Mode,
    loss: f64,
    pps: u64,
    dur: Duration,
) -> anyhow::Result<(Run, Vec<u64>)> {
    // Steering at the sender.
    let _ = t.c.ip(&["-6", "route", "del", "2001:db8:9::/64"]);
    match mode {
        Mode::Kernel => {
            t.c.ip(&[
                "-6",
                "route",
                "add",
                "2001:db8:9::/64",
                "via",
                "2001:db8:1::2",
            ])?;
            t.e.ip(&[
                "-6",
                "route",
                "replace",
                "2001:db8:9::/64",
                "via",
                "2001:db8:2::2",
            ])?;
        }
        Mode::Hirt { .. } => {
            let dev = t.c.ip(&["-o", "link", "show"])?;
            let dev = String::from_utf8_lossy(&dev.stdout)
                .lines()
                .filter_map(|l| l.split(": ").nth(1))
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
                .find(|n| n != "lo")
                .context("sender device")?;
            t.c.ip(&[
                "-6",
                "route",
                "add",
                "2001:db8:9::/64",
                "encap",
                "seg6",
                "mode",
                "encap",
                "segs",
                &format!("{ENC},{DEC}"),
                "dev",
                &dev,
            ])?;
            t.c.ip(&[
                "-6",
                "route",
                "replace",
                "fc00::/16",
                "via",
                "2001:db8:1::2",
            ])?;
            let _ = t.e.ip(&["-6", "route", "del", "2001:db8:9::/64"]);
        }
    }
    if loss > 0.0 {
        t.lossy_ns().exec(&[
            "ip6tables",
            "-A",
            "FORWARD",
            "-o",
            &t.lossy_dev,
            "-d",
            "fc00::/16",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &format!("{loss}"),
            "-j",
            "DROP",
        ])?;
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
    // Warm-up until a packet arrives: neighbour discovery right after the namespaces are made
    // can lose its first solicitation and stall a hop for a second.
    let warm_rx = t.s.spawn(|| {
        let s = UdpSocket::bind(format!("[{DST}]:9001"))?;
        s.set_read_timeout(Some(Duration::from_secs(15)))?;
        s.recv(&mut [0u8; 64]).map(|_| ())
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let warm_tx = t.c.spawn(move || {
        let s = UdpSocket::bind("[2001:db8:1::1]:0")?;
        for _ in 0..300 {
            if d2.load(Ordering::SeqCst) {
                break;
            }
            s.send_to(&[0u8; 16], format!("[{DST}]:9001"))?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    });
    warm_rx
        .join()
        .expect("join")
        .context("nothing crossed the path during warm-up")?;
    done.store(true, Ordering::SeqCst);
    let _ = warm_tx.join();
    std::thread::sleep(Duration::from_millis(200));
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
    // Tunnel counters (losses, recovered, unrecoverable, repairs, repair bytes, source bytes,
    // overload skips, link drops), read before and after each load so a run reports the
    // numbers of its capacity load.
    let snap =
        || -> [u64; 12] {
            let link = if loss > 0.0 { link_drops(t) } else { 0 };
            let Some((enc, dec)) = handles.as_ref() else {
                return [0, 0, 0, 0, 0, 0, 0, link, 0, 0, 0, 0];
            };
            let sum = |m: &crate::metrics::Metrics,
                   f: fn(&crate::metrics::StreamCounters) -> &std::sync::atomic::AtomicU64| {
            m.streams.iter().map(|s| f(s).load(Ordering::Relaxed)).sum::<u64>()
        };
            let (em, dm) = (&enc.metrics, &dec.metrics);
            [
                sum(dm, |s| &s.losses),
                sum(dm, |s| &s.recovered),
                sum(dm, |s| &s.unrecoverable),
                sum(em, |s| &s.repairs_sent),
                sum(em, |s| &s.repair_bytes_sent),
                sum(em, |s| &s.source_bytes_sent),
                sum(em, |s| &s.overload_skips) + sum(dm, |s| &s.overload_skips),
                link,
                sum(dm, |s| &s.local_drops),
                sum(em, |s| &s.repairs_timer),
                hirt_cpu_ns(),
                sum(dm, |s| &s.repairs_received),
            ]
        };
    let mut lat_all: Vec<u64>;
    loop {
        let rate = next_rate;
        let before = snap();
        let run_id = mono_ns();
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
        let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        let overhead = d[4] as f64 / d[5].max(1) as f64;
        run.offered_fec.push(LoadCounters {
            losses: d[0],
            recovered: d[1],
            repairs: d[3],
            repairs_received: d[11],
            overhead,
            overload_skips: d[6],
            link_drops: d[7],
            local_drops: d[8],
            repairs_timer: d[9],
            hirt_cpu_us_per_packet: d[10] as f64 / 1000.0 / received.max(1) as f64,
            cpu_share: cpu_share(send_cpu + recv_cpu + d[10], dur),
        });
        // A load that passed with more delivered than any before is the capacity so far.
        if passed && received > run.received {
            run.losses = d[0];
            run.recovered = d[1];
            run.unrecoverable = d[2];
            run.repairs = d[3];
            run.overhead = overhead;
            run.recovered_ratio = if d[0] > 0 {
                (d[1] as f64 / d[0] as f64).min(1.0)
            } else {
                1.0
            };
            run.sent = sent;
            run.received = received;
            run.hirt_cpu_us_per_packet = d[10] as f64 / 1000.0 / received.max(1) as f64;
            run.gbps_per_hirt_core = if d[10] > 0 {
                (received * args.packet_size as u64 * 8) as f64 / d[10] as f64
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
    if loss > 0.0 {
        let _ = t.lossy_ns().exec(&["ip6tables", "-F", "FORWARD"]);
    }
    Ok((run, lat))
}

/// CPU share of the chain during one load: CPU time of the sender, the receiver and the hirt
/// threads (each with the kernel work done in its context: on veth nearly all forwarding)
/// over the machine's CPU time (wall time x CPUs).
fn cpu_share(thread_cpu_ns: u64, wall: Duration) -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine = wall.as_nanos() as f64 * cpus;
    if machine <= 0.0 {
        return 0.0;
    }
    thread_cpu_ns as f64 / machine
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

/// Packets dropped so far by the loss rule on the encoder's lossy link (ip6tables counter).
fn link_drops(t: &Topo) -> u64 {
    let Ok(out) = t
        .lossy_ns()
        .exec(&["ip6tables", "-w", "-L", "FORWARD", "-v", "-x", "-n"])
    else {
        return 0;
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DROP"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The goal check: one paced run of FEC at `args.loss` at `pps`.
fn goal_check(t: &Topo, args: &DataplaneBenchArgs, pps: u64) -> anyhow::Result<GoalCheck> {
    let dur = Duration::from_secs_f64(args.goal_duration);
    let mode = Mode::Hirt { fec: true };
    let (r, _) = one_run(t, args, "goal_3pct", mode, args.loss, pps, dur)?;
    let (_, sent, received) = r.offered[0];
    let LoadCounters {
        losses,
        recovered,
        overhead,
        overload_skips: skips,
        link_drops: link,
        repairs,
        repairs_received,
        local_drops,
        ..
    } = r.offered_fec[0];
    let recovered_ratio = if losses > 0 {
        (recovered as f64 / losses as f64).min(1.0)
    } else {
        1.0
    };
    let delivered_ratio = received as f64 / sent.max(1) as f64;
    Ok(GoalCheck {
        offered_pps: pps,
        sent,
        received,
        link_losses: link,
        tunnel_losses: losses,
        recovered,
        recovered_ratio,
        delivered_ratio,
        overhead,
        overload_skips: skips,
        repairs_sent: repairs,
        repairs_received,
        local_drops,
        met: recovered_ratio >= 0.999 && delivered_ratio >= 0.999,
    })
}

/// The issue's latency goal: p99 added one-way latency at most this (µs).
const LATENCY_GOAL_P99_US: f64 = 200.0;
/// A latency run counts for the goal if at least this share of its load arrived.
const CARRIED: f64 = 0.99;

/// Latency hirt FEC adds over kernel forwarding at one load.
#[derive(Debug, Clone, Serialize, PartialEq)]
struct AddedLatency {
    pps: u64,
    p50_us: f64,
    p99_us: f64,
    /// [`LoadCounters::cpu_share`]: kernel run, hirt run.
    cpu_share: (f64, f64),
    /// [`Latency::carried`] of the hirt run.
    carried: f64,
}

/// Pairs each hirt FEC latency with the kernel's at the same load (the order of
/// [`latency_pair`]: kernel, then hirt) and sorts by load.
fn added_latency(latency: &[Latency]) -> Vec<AddedLatency> {
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

/// One-way latency at a paced `rate` without loss: kernel forwarding, then hirt FEC.
fn latency_pair(
    t: &Topo,
    args: &DataplaneBenchArgs,
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

/// Whether this host can run the AF_XDP dataplane: an XDP program and a socket on a veth in a
/// scratch namespace.
fn probe_xdp() -> anyhow::Result<()> {
    let a = NetNs::new(&netns::unique_name("hxa"))?;
    let b = NetNs::new(&netns::unique_name("hxb"))?;
    let (ia, ib) = (netns::unique_name("hx"), netns::unique_name("hx"));
    veth(&a, &ia, &b, &ib)?;
    a.spawn(move || {
        let idx = crate::netlink::if_index(&ia)?;
        let filter = crate::xdp::SidFilter::attach(idx, &[ENC.parse().expect("sid")], 1)?;
        let sock = crate::xdp::Xsk::open(idx, 0)?;
        filter.register(0, &sock)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("probe thread panicked"))??;
    Ok(())
}

/// Runs `hirt bench dataplane`.
pub fn run(args: DataplaneBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        netns::available(),
        "hirt bench dataplane needs root and iproute2"
    );
    let mut args = args;
    if args.kernel_sources {
        args.dataplane = Dataplane::KernelSources;
    }
    if args.dataplane.xdp() {
        if let Err(e) = probe_xdp() {
            // Without CAP_BPF, locked memory or XDP support the TUN path still runs.
            eprintln!("AF_XDP not usable here ({e:#}); measuring the TUN dataplane instead");
            args.dataplane = Dataplane::Tun;
        }
    }
    let t = topo(args.dataplane.xdp())?;
    let dur = Duration::from_secs_f64(args.duration);
    let configs = [
        ("kernel", Mode::Kernel, 0.0),
        ("hirt_nofec", Mode::Hirt { fec: false }, 0.0),
        ("hirt_fec_0pct", Mode::Hirt { fec: true }, 0.0),
        ("hirt_fec_3pct", Mode::Hirt { fec: true }, args.loss),
    ];
    if let Some(pps) = args.goal_only_pps {
        let mut tries = Vec::new();
        for _ in 0..args.rounds.max(1) {
            tries.push(goal_check(&t, &args, pps)?);
        }
        println!("{}", serde_json::to_string_pretty(&tries)?);
        return Ok(());
    }
    if args.latency_only {
        let ldur = Duration::from_secs_f64(args.latency_duration);
        let mut latency = latency_pair(&t, &args, args.latency_pps, ldur)?;
        for &rate in args.latency_curve.iter().flatten() {
            latency.extend(latency_pair(&t, &args, rate, ldur)?);
        }
        println!("{}", serde_json::to_string_pretty(&latency)?);
        return Ok(());
    }
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for (name, mode, loss) in configs {
            let (r, _) = one_run(&t, &args, name, mode, loss, 0, dur)?;
            if !args.json {
                eprintln!(
                    "round {round} {name}: {:.3} Mpps {:.2} Gbps recovered {}/{}",
                    r.mpps, r.gbps, r.recovered, r.losses
                );
            }
            match runs.iter_mut().find(|b| b.name == name) {
                None => runs.push(Run {
                    rounds_mpps: vec![r.mpps],
                    ..r
                }),
                Some(best) => {
                    let mut rounds = std::mem::take(&mut best.rounds_mpps);
                    rounds.push(r.mpps);
                    if r.mpps > best.mpps {
                        *best = r;
                    }
                    best.rounds_mpps = rounds;
                }
            }
        }
    }
    let ldur = Duration::from_secs_f64(args.latency_duration);
    let by = |n: &str| runs.iter().find(|r| r.name == n).cloned().expect("run");
    // Latency means something only below capacity (above it, it is a queue filling): besides
    // the fixed rate, a curve of lower loads shows up to where the added latency stays small.
    let curve = args
        .latency_curve
        .clone()
        .unwrap_or_else(|| vec![20_000, 40_000, 60_000, 80_000]);
    let mut rates = vec![args.latency_pps];
    rates.extend(curve.iter().copied().filter(|&r| r != args.latency_pps));
    let mut latency = Vec::new();
    for &rate in &rates {
        latency.extend(latency_pair(&t, &args, rate, ldur)?);
    }
    let nofec = by("hirt_nofec");
    let fec3 = by("hirt_fec_3pct");
    let goal_pps = (nofec.mpps * 1e6 * 0.85).round() as u64;
    // Like the capacities, the goal check gets `--rounds` tries (stopping at the first that
    // meets it): a try that another process disturbed only fails it. Every try is reported.
    let mut goal_tries = Vec::new();
    for _ in 0..args.rounds.max(1) {
        let g = goal_check(&t, &args, goal_pps.max(1000))?;
        if !args.json {
            eprintln!("goal_3pct: {g:?}");
        }
        let met = g.met;
        goal_tries.push(g);
        if met {
            break;
        }
    }
    let goal = goal_tries.last().cloned().expect("at least one try");
    let added_p50 = latency[1].p50_us - latency[0].p50_us;
    let added_p99 = latency[1].p99_us - latency[0].p99_us;
    let mut summary = serde_json::json!({
        "fec_over_nofec_3pct": fec3.mpps / nofec.mpps.max(1e-9),
        // At the FEC 3% run's capacity load (the highest load where >= 99% arrived).
        "recovered_ratio_3pct": fec3.recovered_ratio,
        // The goal itself: FEC at 3% loss offered 0.85 x the no-FEC capacity.
        "goal_3pct_offered_pps": goal.offered_pps,
        "goal_3pct_recovered_ratio": goal.recovered_ratio,
        "goal_3pct_delivered_ratio": goal.delivered_ratio,
        "goal_3pct_met": goal.met,
        "goal_3pct_tries": goal_tries.len(),
        "latency_p50_us": added_p50,
        "latency_p99_us": added_p99,
        // Only if the load was carried: a chain that fell behind measured a lower load.
        "latency_p99_goal_met": added_p99 <= LATENCY_GOAL_P99_US && latency[1].carried >= CARRIED,
        "latency_pps": args.latency_pps,
        "kernel_mpps": by("kernel").mpps,
        "nofec_mpps": nofec.mpps,
        "nofec_gbps_per_hirt_core": nofec.gbps_per_hirt_core,
        "fec_3pct_gbps_per_hirt_core": fec3.gbps_per_hirt_core,
    });
    let added = added_latency(&latency);
    summary["latency_goal_max_pps"] = serde_json::json!(added
        .iter()
        .filter(|a| a.p99_us <= LATENCY_GOAL_P99_US && a.carried >= CARRIED)
        .map(|a| a.pps)
        .max());
    summary["latency_carried"] = serde_json::json!(latency[1].carried);
    summary["latency_cpu_share"] = serde_json::json!({
        "kernel": latency[0].cpu_share,
        "hirt_fec": latency[1].cpu_share,
    });
    summary["latency_curve"] = serde_json::to_value(&added)?;
    let report = Report {
        packet_size: args.packet_size,
        window: args.window,
        fec: args.fec.clone(),
        dataplane: args.dataplane,
        kernel_sources: args.dataplane == Dataplane::KernelSources,
        runs,
        latency,
        goal_3pct: goal,
        goal_3pct_tries: goal_tries,
        summary,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report.summary)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(start: u64, max: u64, capacity: u64) -> Vec<u64> {
        let mut s = Sweep::new(start, max);
        let mut r = Some(s.first());
        let mut v = Vec::new();
        while let Some(x) = r {
            v.push(x);
            r = s.after(x, x <= capacity);
        }
        v
    }

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

    #[test]
    fn sweep_doubles_then_bisects() {
        assert_eq!(
            loads(10_000, 1_280_000, 90_000),
            [10_000, 20_000, 40_000, 80_000, 160_000, 120_000, 100_000, 90_000, 95_000]
        );
        // Never fails: stops at the maximum.
        assert_eq!(loads(10, 80, 1_000), [10, 20, 40, 80]);
        // The first load fails: bisects below it.
        assert_eq!(loads(100, 1_000, 10), [100, 50, 25, 12, 6]);
        // Bisection stops when the bounds meet.
        assert_eq!(loads(1, 100, 1), [1, 2]);
    }
}
