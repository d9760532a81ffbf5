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
use crate::metrics::WATCH_BODY;

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
    if is_ok_status(&head[..got]) {
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

/// Whether an answer begins with an HTTP/1.x status line of code 200 (`HTTP/1.0 200`).
fn is_ok_status(head: &[u8]) -> bool {
    head.starts_with(b"HTTP/1.") && head.get(8..12) == Some(&b" 200"[..])
}

/// Opens a watch on one target (`GET /watch`, see `crate::metrics::serve_prometheus`): a
/// connection the hirt process holds open, silent, until it ends. `None` if the target does not
/// answer with a watch within `timeout` (an endpoint that only serves metrics answers with those
/// and closes: no watch). The stream returned is non-blocking.
pub fn watch(target: SocketAddr, timeout: Duration) -> Option<TcpStream> {
    let deadline = Instant::now() + timeout;
    let mut conn = TcpStream::connect_timeout(&target, timeout).ok()?;
    let _ = conn.set_nodelay(true);
    conn.set_write_timeout(Some(timeout)).ok()?;
    conn.write_all(b"GET /watch HTTP/1.0\r\n\r\n").ok()?;
    let mut buf = [0u8; 256];
    let mut got = 0;
    loop {
        let head_end = buf[..got].windows(4).position(|w| w == b"\r\n\r\n");
        if let Some(end) = head_end {
            let body = &buf[end + 4..got];
            if body.len() >= WATCH_BODY.len() {
                if !is_ok_status(&buf[..end]) || body != WATCH_BODY {
                    return None;
                }
                conn.set_nonblocking(true).ok()?;
                return Some(conn);
            }
        }
        let now = Instant::now();
        if got == buf.len() || now >= deadline {
            return None;
        }
        conn.set_read_timeout(Some(deadline - now)).ok()?;
        match conn.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// [`watch`] on every target at once (a thread each); results in the order of `targets`.
pub fn watch_round(targets: &[SocketAddr], timeout: Duration) -> Vec<Option<TcpStream>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .iter()
            .map(|&t| s.spawn(move || watch(t, timeout)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    })
}

/// Whether a watch opened by [`watch`] has ended (the process closed it, the connection was
/// reset); `false` while it is open and silent.
pub fn watch_ended(conn: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            // Nothing is sent on a watch; whatever comes is read and dropped.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
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
    /// A fake endpoint that answers one connection with `reply`, then holds it for `hold`.
    fn answer_once(reply: &'static [u8], hold: Duration) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = [0u8; 256];
            let _ = c.read(&mut req);
            c.write_all(reply).unwrap();
            std::thread::sleep(hold);
        });
        addr
    }

    #[test]
    fn a_watch_stays_open_while_the_endpoint_runs() {
        let addr = serve_prometheus(
            "127.0.0.1:0".parse().unwrap(),
            Metrics::new(1, "srv6 encoder"),
        )
        .unwrap();
        let mut w = watch(addr, T).expect("the endpoint holds a watch");
        std::thread::sleep(Duration::from_millis(50));
        assert!(!watch_ended(&mut w));
        // Probes still work beside it.
        assert_eq!(probe(addr, T), ProbeResult::Answered);
        assert!(!watch_ended(&mut w));
    }

    /// The drain before a clean stop: the endpoint is closed while the process goes on. Its
    /// watches end and its probes are refused, as for a process that is gone.
    #[test]
    fn a_closed_endpoint_ends_its_watches_and_refuses_probes() {
        let addr = serve_prometheus(
            "127.0.0.1:0".parse().unwrap(),
            Metrics::new(1, "srv6 encoder"),
        )
        .unwrap();
        let mut w = watch(addr, T).expect("a watch");
        assert!(!watch_ended(&mut w));
        crate::metrics::close_endpoint(addr);
        let until = Instant::now() + T;
        while !watch_ended(&mut w) {
            assert!(Instant::now() < until, "the watch ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(probe(addr, T), ProbeResult::Refused);
        assert!(watch(addr, T).is_none());
    }

    #[test]
    fn a_watch_ends_when_the_endpoint_closes_it() {
        let addr = answer_once(
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nwatching\n",
            Duration::from_millis(100),
        );
        let mut w = watch(addr, T).expect("a watch");
        assert!(!watch_ended(&mut w), "open while the endpoint holds it");
        std::thread::sleep(Duration::from_millis(300));
        assert!(watch_ended(&mut w), "closed with the endpoint");
    }

    #[test]
    fn an_endpoint_that_only_serves_metrics_gives_no_watch() {
        let addr = answer_once(
            b"HTTP/1.0 200 OK\r\nContent-Length: 15\r\n\r\n# HELP x help\n",
            Duration::ZERO,
        );
        assert!(watch(addr, T).is_none());
        let addr = answer_once(b"HTTP/1.0 404 Not Found\r\n\r\nwatching\n", Duration::ZERO);
        assert!(watch(addr, T).is_none(), "a watch needs status 200");
    }
}
