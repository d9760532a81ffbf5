//! The soak's traffic: a paced, checked datagram stream in each direction and a paced TCP
//! stream whose every byte is compared, each end in its namespace.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stream::{self, Arrival, Checker};
use crate::netns;
use crate::workload;

/// Bytes of every datagram of the checked streams.
pub const DATAGRAM: usize = 1000;
/// Period of the TCP stream's byte pattern (prime, below the pattern's length).
const TCP_PERIOD: u64 = 1_000_003;

/// What a datagram sender did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent {
    /// Datagrams handed to the kernel (sequence numbers `0..sent`).
    pub sent: u64,
    /// Sends the kernel refused (no route while a tunnel end restarts, ...).
    pub refused: u64,
}

/// What a datagram receiver saw.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// The checker with every sequence number that arrived.
    pub checker: Checker,
    /// One-way delay of every fresh datagram, microseconds.
    pub delays_us: Vec<u32>,
}

/// Sends stream `id` from `from` to `to` inside `ns` at `pps` datagrams per second until
/// `stop`; sequence number `k` leaves at `k / pps` after `epoch`.
pub fn send_datagrams(
    ns: &str,
    id: u32,
    from: IpAddr,
    to: SocketAddr,
    pps: u32,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<Sent>> {
    netns::in_ns(ns, move || {
        let sock = UdpSocket::bind(SocketAddr::new(from, 0))?;
        let mut buf = vec![0u8; DATAGRAM];
        let mut out = Sent::default();
        let period_ns = 1_000_000_000 / u64::from(pps.max(1));
        while !stop.load(Ordering::Relaxed) {
            let due = epoch + Duration::from_nanos(out.sent * period_ns);
            let now = Instant::now();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(50)));
                continue;
            }
            let sent_ns = epoch.elapsed().as_nanos() as u64;
            stream::fill(&mut buf, id, out.sent, sent_ns);
            if sock.send_to(&buf, to).is_err() {
                out.refused += 1;
            }
            out.sent += 1;
        }
        Ok(out)
    })
}

/// Receives and checks stream `id` on `at` inside `ns` until `stop`.
pub fn receive_datagrams(
    ns: &str,
    id: u32,
    at: SocketAddr,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<Received>>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = netns::in_ns(ns, move || {
        let sock = UdpSocket::bind(at)?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let _ = ready_tx.send(());
        let mut r = Received {
            checker: Checker::new(id),
            delays_us: Vec::new(),
        };
        let mut buf = vec![0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok(n) = sock.recv(&mut buf) else {
                continue;
            };
            let now_ns = epoch.elapsed().as_nanos() as u64;
            if let Arrival::Fresh { sent_ns, .. } = r.checker.check(&buf[..n]) {
                let d = now_ns.saturating_sub(sent_ns) / 1000;
                r.delays_us.push(d.min(u64::from(u32::MAX)) as u32);
            }
        }
        Ok(r)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow::anyhow!("the soak's receiver in {at} did not start"))?;
    Ok(h)
}

/// Counts of the TCP stream.
#[derive(Debug, Default)]
pub struct TcpCounts {
    /// Bytes received and equal to what was sent.
    pub bytes_ok: AtomicU64,
    /// Bytes received that differ.
    pub corrupt: AtomicU64,
    /// Connections accepted (1 if the first one survived every fault).
    pub connections: AtomicU64,
}

fn tcp_byte(i: u64) -> u8 {
    workload::pattern()[(i % TCP_PERIOD) as usize]
}

/// Serves the TCP stream on `at` in `ns`: reads every connection to its end, comparing bytes.
pub fn tcp_sink(
    ns: &str,
    at: SocketAddr,
    counts: Arc<TcpCounts>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = netns::in_ns(ns, move || {
        let l = TcpListener::bind(at)?;
        l.set_nonblocking(true)?;
        let _ = ready_tx.send(());
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut c, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            counts.connections.fetch_add(1, Ordering::Relaxed);
            c.set_nonblocking(false)?;
            c.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut i = 0u64;
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let bad = buf[..n]
                            .iter()
                            .enumerate()
                            .filter(|(k, b)| **b != tcp_byte(i + *k as u64))
                            .count() as u64;
                        i += n as u64;
                        counts.bytes_ok.fetch_add(n as u64 - bad, Ordering::Relaxed);
                        counts.corrupt.fetch_add(bad, Ordering::Relaxed);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        }
        Ok(())
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow::anyhow!("the soak's TCP sink on {at} did not start"))?;
    Ok(h)
}

/// Sends the TCP stream from `from` to `to` in `ns` at `bytes_per_s`, reconnecting (after a
/// second) whenever the connection fails.
pub fn tcp_source(
    ns: &str,
    from: IpAddr,
    to: SocketAddr,
    bytes_per_s: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<u64>> {
    netns::in_ns(ns, move || {
        let mut failures = 0u64;
        let chunk = 4096u64;
        while !stop.load(Ordering::Relaxed) {
            let c = socket2::Socket::new(
                socket2::Domain::for_address(to),
                socket2::Type::STREAM,
                None,
            )
            .and_then(|s| {
                s.bind(&SocketAddr::new(from, 0).into())?;
                s.connect_timeout(&to.into(), Duration::from_secs(5))?;
                Ok(TcpStream::from(s))
            });
            let Ok(mut c) = c else {
                failures += 1;
                std::thread::sleep(Duration::from_secs(1));
                continue;
            };
            c.set_write_timeout(Some(Duration::from_millis(200)))?;
            let start = Instant::now();
            let mut i = 0u64;
            let mut buf = vec![0u8; chunk as usize];
            'conn: while !stop.load(Ordering::Relaxed) {
                let due = start + Duration::from_nanos(i * 1_000_000_000 / bytes_per_s.max(1));
                let now = Instant::now();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(50)));
                    continue;
                }
                for (k, b) in buf.iter_mut().enumerate() {
                    *b = tcp_byte(i + k as u64);
                }
                let mut off = 0;
                while off < buf.len() {
                    if stop.load(Ordering::Relaxed) {
                        break 'conn;
                    }
                    match c.write(&buf[off..]) {
                        Ok(n) => off += n,
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => {
                            failures += 1;
                            break 'conn;
                        }
                    }
                }
                i += chunk;
            }
        }
        Ok(failures)
    })
}
