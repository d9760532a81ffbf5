//! The legitimate traffic beside a flood: a paced datagram stream whose every datagram is
//! checked (the soak's format, [`crate::soak::stream`]) and a TCP bulk stream, both from the
//! client's application address to the server's, through the tunnel. Receivers keep running
//! totals that the flood samples at the edges of its measurement windows.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::netns;
use crate::soak::stream::{self, Arrival, Checker};

/// Bytes of every datagram of the paced stream.
pub const DATAGRAM: usize = 1000;
/// Stream id of the paced stream in its datagrams.
const STREAM_ID: u32 = 7;

/// Running totals of what arrived.
#[derive(Debug, Default)]
pub struct Totals {
    /// Paced stream: datagrams that arrived for the first time, intact.
    pub datagrams: AtomicU64,
    /// Paced stream: their bytes.
    pub datagram_bytes: AtomicU64,
    /// Paced stream: corrupt or duplicated datagrams.
    pub bad: AtomicU64,
    /// TCP stream: bytes received.
    pub tcp_bytes: AtomicU64,
}

/// Sends the paced stream from `from` to `to` inside `ns` at `pps` until `stop`.
pub fn send_paced(
    ns: &str,
    from: IpAddr,
    to: SocketAddr,
    pps: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<u64>> {
    netns::in_ns(ns, move || {
        let sock = UdpSocket::bind(SocketAddr::new(from, 0))?;
        let mut buf = vec![0u8; DATAGRAM];
        let epoch = Instant::now();
        let period_ns = 1_000_000_000 / u64::from(pps.max(1));
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let due = epoch + Duration::from_nanos(seq * period_ns);
            let now = Instant::now();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(20)));
                continue;
            }
            stream::fill(&mut buf, STREAM_ID, seq, epoch.elapsed().as_nanos() as u64);
            // A refused send is a datagram lost: the receiver's count shows it.
            let _ = sock.send_to(&buf, to);
            seq += 1;
        }
        Ok(seq)
    })
}

/// Receives and checks the paced stream on `at` inside `ns` until `stop`.
pub fn receive_paced(
    ns: &str,
    at: SocketAddr,
    totals: Arc<Totals>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = netns::in_ns(ns, move || {
        let sock = UdpSocket::bind(at)?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let _ = ready_tx.send(());
        let mut checker = Checker::new(STREAM_ID);
        let mut buf = vec![0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok(n) = sock.recv(&mut buf) else {
                continue;
            };
            match checker.check(&buf[..n]) {
                Arrival::Fresh { .. } => {
                    totals.datagrams.fetch_add(1, Ordering::Relaxed);
                    totals.datagram_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                _ => {
                    totals.bad.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow::anyhow!("the flood's receiver on {at} did not start"))?;
    Ok(h)
}

/// Serves the TCP stream on `at` in `ns`, counting the bytes of every connection.
pub fn tcp_sink(
    ns: &str,
    at: SocketAddr,
    totals: Arc<Totals>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = netns::in_ns(ns, move || {
        let l = TcpListener::bind(at)?;
        l.set_nonblocking(true)?;
        let _ = ready_tx.send(());
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut c, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            c.set_nonblocking(false)?;
            c.set_read_timeout(Some(Duration::from_millis(200)))?;
            while !stop.load(Ordering::Relaxed) {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        totals.tcp_bytes.fetch_add(n as u64, Ordering::Relaxed);
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
        .map_err(|_| anyhow::anyhow!("the flood's TCP sink on {at} did not start"))?;
    Ok(h)
}

/// Sends as fast as TCP allows from `from` to `to` in `ns` until `stop`, reconnecting after a
/// failure.
pub fn tcp_bulk(
    ns: &str,
    from: IpAddr,
    to: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    netns::in_ns(ns, move || {
        let buf = vec![0x5au8; 65536];
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
                std::thread::sleep(Duration::from_millis(500));
                continue;
            };
            c.set_write_timeout(Some(Duration::from_millis(200)))?;
            while !stop.load(Ordering::Relaxed) {
                match c.write(&buf) {
                    Ok(_) => {}
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
    })
}
