//! The bench's TCP load: parallel connections that send as fast as they can, and the bytes
//! their receivers count.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hirt_linux::netns::NetNs;

/// `flows` TCP connections from `c` to `addr` for `dur`; returns payload bytes received.
pub fn transfer(
    c: &NetNs,
    s: &NetNs,
    addr: &str,
    flows: usize,
    dur: Duration,
) -> anyhow::Result<u64> {
    let a = addr.to_string();
    let listener = s
        .spawn(move || TcpListener::bind(a))
        .join()
        .expect("join")?;
    let received = Arc::new(AtomicU64::new(0));
    let r2 = received.clone();
    let acceptor = std::thread::spawn(move || {
        let mut readers = Vec::new();
        for _ in 0..flows {
            let Ok((mut k, _)) = listener.accept() else {
                break;
            };
            let r = r2.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let _ = k.set_read_timeout(Some(Duration::from_secs(10)));
                while let Ok(n) = k.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    r.fetch_add(n as u64, Ordering::Relaxed);
                }
            }));
        }
        for r in readers {
            let _ = r.join();
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for _ in 0..flows {
        let (a, stop) = (addr.to_string(), stop.clone());
        senders.push(c.spawn(move || {
            let mut k = None;
            for _ in 0..100 {
                match TcpStream::connect(&a) {
                    Ok(x) => {
                        k = Some(x);
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            let mut k = k.ok_or_else(|| std::io::Error::other("no connection"))?;
            k.set_write_timeout(Some(Duration::from_secs(10)))?;
            let buf = vec![0x5au8; 256 << 10];
            while !stop.load(Ordering::Relaxed) {
                k.write_all(&buf)?;
            }
            k.shutdown(std::net::Shutdown::Write)
        }));
    }
    // Count from the moment data flows, so connection set-up is not timed.
    let t0 = Instant::now();
    while received.load(Ordering::Relaxed) == 0 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = received.load(Ordering::Relaxed);
    std::thread::sleep(dur);
    let bytes = received.load(Ordering::Relaxed) - start;
    stop.store(true, Ordering::Relaxed);
    for h in senders {
        h.join().expect("join").context("TCP sender")?;
    }
    let _ = acceptor.join();
    Ok(bytes)
}
