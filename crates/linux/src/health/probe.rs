//! One probe: `GET /metrics` to a node's hirt metrics endpoint (`hirt srv6 --metrics ADDR:PORT`).
//!
//! Why this and not a ping to the SID: a ping is answered by the node's kernel, which outlives a
//! hirt process killed with SIGKILL; the SID is hirt's (routed to its TUN device) and answers no
//! echo. The metrics endpoint is served by the hirt process: while it runs, the status line comes
//! back within a round trip; once it is gone the node's kernel refuses the connection at once
//! (a reset to the SYN), so the checker learns of the death in one round instead of waiting out
//! `fall` timeouts; a dead host or link answers nothing. The endpoint already exists and needs
//! no new protocol; its cost is one short TCP connection per target and interval.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::tracker::ProbeResult;

/// Probes one target, waiting at most `timeout` in all.
pub fn probe(target: SocketAddr, timeout: Duration) -> ProbeResult {
    let deadline = Instant::now() + timeout;
    let mut conn = match TcpStream::connect_timeout(&target, timeout) {
        Ok(c) => c,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return ProbeResult::Refused,
        Err(_) => return ProbeResult::NoAnswer,
    };
    let left = |now: Instant| {
        deadline
            .saturating_duration_since(now)
            .max(Duration::from_micros(1))
    };
    let _ = conn.set_nodelay(true);
    if conn.set_write_timeout(Some(left(Instant::now()))).is_err()
        || conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").is_err()
    {
        return ProbeResult::NoAnswer;
    }
    // The status line is enough: `HTTP/1.0 200`.
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        let now = Instant::now();
        if now >= deadline || conn.set_read_timeout(Some(left(now))).is_err() {
            return ProbeResult::NoAnswer;
        }
        match conn.read(&mut head[got..]) {
            // Closed or reset before a status line: the host is up and the socket went away
            // under the request, as it does when the process dies with it in its backlog.
            Ok(0) if got == 0 => return ProbeResult::Refused,
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if got == 0 && e.kind() == ErrorKind::ConnectionReset => {
                return ProbeResult::Refused
            }
            Err(_) => return ProbeResult::NoAnswer,
        }
    }
    let status = &head[..got];
    if status.starts_with(b"HTTP/1.") && status.ends_with(b" 200") {
        ProbeResult::Answered
    } else {
        ProbeResult::NoAnswer
    }
}

/// Probes every target at once (a thread each), so a round lasts at most `timeout` however
/// many targets there are; results in the order of `targets`.
pub fn round(targets: &[SocketAddr], timeout: Duration) -> Vec<ProbeResult> {
    std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .iter()
            .map(|&t| s.spawn(move || probe(t, timeout)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(ProbeResult::NoAnswer))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{serve_prometheus, Metrics};
    use std::net::TcpListener;

    const T: Duration = Duration::from_millis(300);

    #[test]
    fn a_running_metrics_endpoint_answers() {
        let addr = serve_prometheus(
            "127.0.0.1:0".parse().unwrap(),
            Metrics::new(1, "srv6 encoder"),
        )
        .unwrap();
        assert_eq!(probe(addr, T), ProbeResult::Answered);
    }

    #[test]
    fn a_closed_port_is_refused_and_a_silent_one_unanswered() {
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert_eq!(probe(closed, T), ProbeResult::Refused);
        // Accepted by the kernel (backlog), never answered by a process.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let started = Instant::now();
        assert_eq!(
            probe(silent.local_addr().unwrap(), T),
            ProbeResult::NoAnswer
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the timeout ends the probe"
        );
    }

    #[test]
    fn a_connection_closed_before_the_answer_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            drop(c);
        });
        assert_eq!(probe(addr, T), ProbeResult::Refused);
        server.join().unwrap();
    }

    #[test]
    fn a_wrong_answer_is_no_answer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = [0u8; 64];
            let _ = c.read(&mut req);
            let _ = c.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n");
        });
        assert_eq!(probe(addr, T), ProbeResult::NoAnswer);
        server.join().unwrap();
    }

    #[test]
    fn a_round_keeps_the_order_of_its_targets() {
        let up = serve_prometheus("127.0.0.1:0".parse().unwrap(), Metrics::new(1, "x")).unwrap();
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert_eq!(
            round(&[closed, up, up], T),
            vec![
                ProbeResult::Refused,
                ProbeResult::Answered,
                ProbeResult::Answered
            ]
        );
    }
}
