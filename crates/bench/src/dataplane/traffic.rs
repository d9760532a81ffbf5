//! The bench's traffic: a paced sender of numbered, timestamped UDP packets and a receiver
//! that counts unique arrivals and their one-way latency.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use hirt_linux::udp::io::TosBatch;

use super::topology::DST;
use crate::os::{self, mono_ns, real_ns};

/// Sends for `dur`, `pps` = 0 means as fast as possible. Every payload carries `run` (bytes
/// 16..24) so the receiver of one load ignores stragglers of the previous one. Returns packets
/// sent and the thread's CPU time (ns).
pub fn sender(
    payload_len: usize,
    dur: Duration,
    pps: u64,
    run: u64,
    cpu: Option<usize>,
) -> anyhow::Result<(u64, u64)> {
    os::pin(cpu);
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
        hirt_linux::batch::BATCH
    } else {
        (pps / 10_000).clamp(1, 32) as usize
    };
    // Sleep (not spin) until a burst is due: a spinning sender takes a whole core from the
    // dataplane on a small machine. A 1 ns timer slack keeps the wake-ups close to the due time.
    os::tight_timer_slack();
    let t0 = mono_ns();
    while start.elapsed() < dur {
        // `pps` = 0: no pacing.
        if let Some(offset) = (seq * 1_000_000_000).checked_div(pps) {
            let due = t0 + offset;
            if due > mono_ns() + 2_000 {
                os::sleep_until_mono(due);
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
    Ok((seq, os::thread_cpu_ns()))
}

/// Packets sent in the first part of a latency run that are not counted.
const LATENCY_WARMUP: Duration = Duration::from_millis(200);
/// How long the receiver sleeps when its socket is empty (see `receiver`).
const RECEIVER_NAP: Duration = Duration::from_micros(200);

/// Receives until `idle` passes without a packet. Returns (unique packets, latencies ns, the
/// thread's CPU time ns).
pub fn receiver(
    ready: std::sync::mpsc::Sender<()>,
    want_latency: bool,
    run: u64,
    cpu: Option<usize>,
) -> anyhow::Result<(u64, Vec<u64>, u64)> {
    os::pin(cpu);
    let sock = UdpSocket::bind(format!("[{DST}]:9000"))?;
    // Large receive buffer so the receiver is not the bottleneck.
    os::force_receive_buffer(sock.as_raw_fd(), 64 << 20);
    // Latency ends when the packet enters the receiver's stack (the kernel's receive
    // timestamp), not when this thread gets to read it: on a small machine the bench's own
    // receiver can wait for a CPU, and that is not the dataplane's delay.
    hirt_linux::udp::io::enable_rx_timestamps(sock.as_raw_fd());
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
    Ok((seen.len() as u64, lat, os::thread_cpu_ns()))
}
