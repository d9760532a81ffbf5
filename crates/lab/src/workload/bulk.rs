//! TCP bulk goodput (built in), and the UDP blaster/sink used to measure the emulator itself.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{expected, Samples};
use crate::workload::http::{tcp_connect, tcp_listen};

/// The bulk server's port.
pub const PORT: u16 = 5201;

/// Bytes of the pattern a bulk stream repeats (each chunk verified).
const CHUNK: usize = 1 << 20;

/// Starts the bulk server: every connection receives the pattern, chunk after chunk, until the
/// client closes it.
pub fn serve(addr: SocketAddr, cc: &str, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let l = tcp_listen(addr, cc).with_context(|| format!("listening on {addr}"))?;
    l.set_nonblocking(true)?;
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        // Long enough for any retransmission backoff: a timeout here would cut
                        // the transfer short on a lossy link.
                        let _ = s.set_write_timeout(Some(Duration::from_secs(60)));
                        let chunk = expected(0, CHUNK);
                        while !stop.load(Ordering::Relaxed) {
                            if s.write_all(chunk).is_err() {
                                break;
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Ok(())
}

/// Downloads for `duration` over one connection; goodput is what arrived and matched. The first
/// completion-time sample per 1 MB chunk is recorded as well (time to receive each chunk).
pub fn run(
    bind: IpAddr,
    server: SocketAddr,
    cc: &str,
    duration: Duration,
    progress: &dyn Fn(u64),
) -> Samples {
    let mut s = Samples::default();
    let start = Instant::now();
    let mut conn = match tcp_connect(bind, server, cc) {
        Ok(c) => c,
        Err(_) => {
            s.errors += 1;
            return s;
        }
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let pat = expected(0, CHUNK);
    let mut buf = vec![0u8; 256 * 1024];
    let mut pos = 0usize; // position inside the chunk
    let mut chunk_start = Instant::now();
    while start.elapsed() < duration {
        let n = match conn.read(&mut buf) {
            Ok(0) => {
                s.errors += 1;
                break;
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => {
                s.errors += 1;
                break;
            }
        };
        let mut off = 0;
        while off < n {
            let take = (n - off).min(CHUNK - pos);
            if buf[off..off + take] != pat[pos..pos + take] {
                s.corrupt += 1;
                s.errors += 1;
                return s;
            }
            off += take;
            pos += take;
            if pos == CHUNK {
                pos = 0;
                s.latencies_us
                    .push(chunk_start.elapsed().as_micros() as u64);
                chunk_start = Instant::now();
                progress(1);
            }
        }
        s.bytes += n as u64;
    }
    s.elapsed = start.elapsed();
    s
}

/// Receives UDP datagrams on port 9 until `stop`; counts them.
pub fn udp_sink(stop: Arc<AtomicBool>, count: Arc<AtomicU64>) -> anyhow::Result<()> {
    let s = UdpSocket::bind((crate::topo::UNDER_B4, 9))?;
    let s2 = socket2::SockRef::from(&s);
    let _ = s2.set_recv_buffer_size(32 << 20);
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if s.recv(&mut buf).is_ok() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Sends 1280-byte IPv4 packets (1252-byte UDP payloads) to the sink at `gbps` for `d`.
/// Returns (packets sent, elapsed).
pub fn udp_blast(gbps: f64, d: Duration) -> anyhow::Result<(u64, Duration)> {
    let s = UdpSocket::bind((crate::topo::UNDER_A4, 0))?;
    s.connect((crate::topo::UNDER_B4, 9))?;
    let s2 = socket2::SockRef::from(&s);
    let _ = s2.set_send_buffer_size(8 << 20);
    let mut payload = [0x5au8; 1252];
    let mut batch = crate::sys::Batch::new(32);
    for i in 0..32 {
        batch.set(i, &mut payload);
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
    let pps = gbps * 1e9 / (1280.0 * 8.0);
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < d {
        let due = (start.elapsed().as_secs_f64() * pps) as u64;
        if sent >= due {
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        let n = (due - sent).min(32) as usize;
        match batch.send(fd, 0, n) {
            Ok(k) => sent += k as u64,
            Err(_) => std::thread::yield_now(),
        }
    }
    Ok((sent, start.elapsed()))
}
