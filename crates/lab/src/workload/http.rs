//! HTTP/1.1 request/response over kernel TCP: a tiny server and a wrk-like client with N parallel
//! connections, a fixed response size, keep-alive or a new connection per request, congestion
//! control chosen with TCP_CONGESTION.
//!
//! Request: `GET /<size>/<id> HTTP/1.1`; the response body is [`super::expected`]`(id, size)`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};

use super::{expected, Samples};

/// Client parameters.
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// Server address.
    pub server: SocketAddr,
    /// Local address to bind (the client's application address).
    pub bind: IpAddr,
    /// Parallel connections.
    pub connections: usize,
    /// Response size in bytes.
    pub size: usize,
    /// Run time (in-flight requests finish after it).
    pub duration: Duration,
    /// Open a new connection for every request (completion time includes the handshake).
    pub new_conn: bool,
    /// Congestion control of the client's sockets.
    pub cc: String,
    /// Requests are numbered from this id (differs per run).
    pub first_id: u64,
}

/// The port of the lab's HTTP server.
pub const PORT: u16 = 8080;

/// Where clients reach the lab's HTTP server (the server's application address).
pub fn server_addr(v6: bool) -> SocketAddr {
    SocketAddr::new(crate::topo::Topology::server_app(v6), PORT)
}

/// Where servers listen: every address, IPv4 and IPv6.
pub fn any(port: u16) -> SocketAddr {
    SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port)
}

/// Starts the HTTP server on `addr` in the calling thread's namespace; it serves until `stop`.
/// The listening socket (and so every accepted connection) uses congestion control `cc`.
pub fn serve(addr: SocketAddr, cc: &str, stop: Arc<AtomicBool>) -> anyhow::Result<SocketAddr> {
    let l = tcp_listen(addr, cc).with_context(|| format!("listening on {addr} with {cc}"))?;
    let local = l.local_addr()?;
    l.set_nonblocking(true)?;
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let _ = handle(s, &stop);
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    Ok(local)
}

fn handle(s: TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        let req = line.trim_end().to_string();
        let mut close = false;
        // Headers until the blank line.
        loop {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if h.eq_ignore_ascii_case("connection: close") {
                close = true;
            }
        }
        let mut parts = req
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .trim_start_matches('/')
            .split('/');
        let size: usize = parts
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
            .min(4 << 20);
        let id: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nContent-Type: application/octet-stream\r\n{}\r\n",
            if close { "Connection: close\r\n" } else { "" }
        );
        w.write_all(head.as_bytes())?;
        w.write_all(expected(id, size))?;
        if close {
            return Ok(());
        }
    }
}

/// Runs the client; returns per-request completion times. Call from the client namespace.
pub fn run(c: &HttpClient, progress: &(dyn Fn(u64) + Sync)) -> Samples {
    let deadline = Instant::now() + c.duration;
    let start = Instant::now();
    let parts: Vec<Samples> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..c.connections)
            .map(|k| scope.spawn(move || connection(c, k as u64, deadline, progress)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut s = Samples::merge(parts);
    s.elapsed = start.elapsed();
    s
}

fn connect(c: &HttpClient) -> std::io::Result<TcpStream> {
    let sock = socket2_connect(c)?;
    sock.set_nodelay(true)?;
    // A request stuck longer than this counts as an error (the run would otherwise hang on a
    // dead connection).
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(sock)
}

/// Creates a socket bound to the client's application address with the chosen congestion
/// control, then connects (std has no bind-before-connect).
fn socket2_connect(c: &HttpClient) -> std::io::Result<TcpStream> {
    tcp_connect(c.bind, c.server, &c.cc)
}

/// Bind-then-connect TCP with a congestion control algorithm.
pub fn tcp_connect(bind: IpAddr, server: SocketAddr, cc: &str) -> std::io::Result<TcpStream> {
    let s = Socket::new(
        Domain::for_address(server),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_tcp_congestion(cc.as_bytes())?;
    s.bind(&SocketAddr::new(bind, 0).into())?;
    s.connect(&server.into())?;
    Ok(s.into())
}

/// A TCP listener with a congestion control algorithm (inherited by accepted connections).
pub fn tcp_listen(addr: SocketAddr, cc: &str) -> std::io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.set_tcp_congestion(cc.as_bytes())?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

fn connection(
    c: &HttpClient,
    k: u64,
    deadline: Instant,
    progress: &(dyn Fn(u64) + Sync),
) -> Samples {
    let mut s = Samples::default();
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut id = c.first_id + k * 1_000_000;
    let mut body = vec![0u8; c.size];
    let mut line = String::new();
    while Instant::now() < deadline {
        id += 1;
        let t0 = Instant::now();
        let result = (|| -> std::io::Result<bool> {
            if conn.is_none() || c.new_conn {
                conn = Some(BufReader::with_capacity(65536, connect(c)?));
            }
            let r = conn.as_mut().expect("set above");
            let req = format!(
                "GET /{}/{} HTTP/1.1\r\nHost: lab\r\n{}\r\n",
                c.size,
                id,
                if c.new_conn {
                    "Connection: close\r\n"
                } else {
                    ""
                }
            );
            r.get_mut().write_all(req.as_bytes())?;
            let mut len = None;
            loop {
                line.clear();
                if r.read_line(&mut line)? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                let h = line.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some(v) = h.strip_prefix("Content-Length: ") {
                    len = v.parse::<usize>().ok();
                }
            }
            if len != Some(c.size) {
                return Ok(false);
            }
            r.read_exact(&mut body)?;
            Ok(body == expected(id, c.size))
        })();
        match result {
            Ok(true) => {
                s.latencies_us.push(t0.elapsed().as_micros() as u64);
                s.bytes += c.size as u64;
                progress(1);
            }
            Ok(false) => {
                s.errors += 1;
                s.corrupt += 1;
                conn = None;
            }
            Err(_) => {
                s.errors += 1;
                conn = None;
            }
        }
        if c.new_conn {
            conn = None;
        }
    }
    s
}
