//! Request/response over QUIC with quinn (self-signed certificate from rcgen): N connections,
//! each sending requests one after another on new bidirectional streams (the QUIC analogue of
//! HTTP keep-alive). Request: `<size> <id>\n`; response: [`super::expected`]`(id, size)`.
//! With `http3`, the same over HTTP/3 (the `h3` crate on the same quinn connections, ALPN `h3`):
//! `GET /<size>/<id>`, the response body as above.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::{expected, Samples};

/// UDP port of the QUIC server.
pub const PORT: u16 = 4433;

/// A self-signed certificate for the lab server (DER), with its key.
pub fn certificate() -> anyhow::Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    let ck = rcgen::generate_simple_self_signed(vec!["hirt-lab".to_string()])?;
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    Ok((cert, key))
}

/// Loss detection of the QUIC endpoints (RFC 9002 §6.1), the same in every run of a lab.
///
/// quinn declares a packet lost once `packet_threshold` later packets are acknowledged or
/// `time_threshold` x RTT after it was sent, and every such loss is a congestion event (CUBIC:
/// window x 0.7); it never undoes one found spurious. A packet that the tunnel recovers a few
/// milliseconds late therefore still costs the connection its window: with 10 kB responses and
/// quinn's 12 kB initial window, the next response needs two round trips (docs/lab.md, QUIC).
/// Linux TCP (RACK, `min_rtt/4` reordering window, undo on DSACK) and picoquic, which HIRT
/// measured, tolerate that reordering; `--quic-packet-threshold` / `--quic-time-threshold` set
/// the equivalent here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossDetection {
    /// Reordering in packets before a packet is declared lost (RFC 9002: 3; at least 3).
    pub packet_threshold: u32,
    /// Reordering in time, as a multiple of the RTT (RFC 9002: 9/8; at least 1).
    pub time_threshold: f32,
}

impl Default for LossDetection {
    /// quinn's and RFC 9002's defaults.
    fn default() -> Self {
        LossDetection {
            packet_threshold: 3,
            time_threshold: 9.0 / 8.0,
        }
    }
}

fn transport(cc: &str, ld: LossDetection) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    match cc {
        "bbr" => t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default())),
        "reno" | "newreno" => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default()))
        }
        _ => t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default())),
    };
    // Packets fit the lab's 1280-byte path MTU in both runs.
    t.packet_threshold(ld.packet_threshold.max(3));
    t.time_threshold(ld.time_threshold.max(1.0));
    t.initial_mtu(1200);
    t.mtu_discovery_config(None);
    // No UDP GSO: the kernel drops GSO super-packets that a host sends into its own SRv6
    // H.Encaps route (the SRv6 lab ran 61 QUIC requests in 10 s with it; docs/lab.md).
    t.enable_segmentation_offload(false);
    t.max_concurrent_bidi_streams(1024u32.into());
    t.max_idle_timeout(Some(Duration::from_secs(30).try_into().expect("constant")));
    t.keep_alive_interval(Some(Duration::from_secs(5)));
    Arc::new(t)
}

/// What the QUIC server serves, and how.
#[derive(Debug)]
pub struct QuicServer {
    /// Listening address.
    pub addr: SocketAddr,
    /// Congestion control (cubic, bbr, reno).
    pub cc: String,
    /// Loss detection (the clients use the same).
    pub loss_detection: LossDetection,
    /// HTTP/3 instead of the bare request line.
    pub http3: bool,
    /// Its certificate and key.
    pub cert: CertificateDer<'static>,
    /// The certificate's key.
    pub key: PrivateKeyDer<'static>,
}

/// Runs the QUIC server until `stop` (blocks the calling thread: call it from a thread of its
/// own inside the server namespace); `ready` gets the setup's outcome.
pub fn serve(
    srv: QuicServer,
    stop: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let QuicServer {
        addr,
        cc,
        loss_detection: ld,
        http3,
        cert,
        key,
    } = srv;
    let cc = cc.as_str();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let setup = (|| -> anyhow::Result<quinn::Endpoint> {
            let mut sc = if http3 {
                let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)?;
                tls.alpn_protocols = vec![b"h3".to_vec()];
                quinn::ServerConfig::with_crypto(Arc::new(
                    quinn::crypto::rustls::QuicServerConfig::try_from(tls)?,
                ))
            } else {
                quinn::ServerConfig::with_single_cert(vec![cert], key)?
            };
            sc.transport_config(transport(cc, ld));
            Ok(quinn::Endpoint::server(sc, addr)?)
        })();
        let ep = match setup {
            Ok(ep) => {
                let _ = ready.send(Ok(()));
                ep
            }
            Err(e) => {
                let msg = format!("{e:#}");
                let _ = ready.send(Err(e));
                anyhow::bail!(msg);
            }
        };
        while !stop.load(Ordering::Relaxed) {
            let inc = tokio::time::timeout(Duration::from_millis(200), ep.accept()).await;
            let Ok(Some(inc)) = inc else { continue };
            tokio::spawn(async move {
                let Ok(conn) = inc.await else { return };
                if http3 {
                    return serve_h3(conn).await;
                }
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    tokio::spawn(async move {
                        let Ok(req) = recv.read_to_end(64).await else {
                            return;
                        };
                        let req = String::from_utf8_lossy(&req);
                        let mut it = req.split_whitespace();
                        let size: usize = it
                            .next()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0)
                            .min(4 << 20);
                        let id: u64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                        if send.write_all(expected(id, size)).await.is_ok() {
                            let _ = send.finish();
                            // Keep the stream until the peer has everything.
                            let _ = send.stopped().await;
                        }
                    });
                }
            });
        }
        ep.close(0u32.into(), b"bye");
        Ok(())
    })
}

/// `/<size>/<id>` (size capped at 4 MiB; 0 for anything else).
fn parse_path(path: &str) -> (usize, u64) {
    let mut it = path.trim_start_matches('/').split('/');
    let size = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let id = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    (usize::min(size, 4 << 20), id)
}

/// Serves HTTP/3 requests on one connection until it closes.
async fn serve_h3(conn: quinn::Connection) {
    let Ok(mut h3c) =
        h3::server::Connection::<_, bytes::Bytes>::new(h3_quinn::Connection::new(conn)).await
    else {
        return;
    };
    while let Ok(Some(resolver)) = h3c.accept().await {
        tokio::spawn(async move {
            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                return;
            };
            let (size, id) = parse_path(req.uri().path());
            let Ok(resp) = http::Response::builder()
                .status(200)
                .header("content-length", size)
                .body(())
            else {
                return;
            };
            if stream.send_response(resp).await.is_ok()
                && stream
                    .send_data(bytes::Bytes::from_static(expected(id, size)))
                    .await
                    .is_ok()
            {
                let _ = stream.finish().await;
            }
        });
    }
}

/// Client parameters.
#[derive(Debug, Clone)]
pub struct QuicClient {
    /// Server address.
    pub server: SocketAddr,
    /// Local address.
    pub bind: IpAddr,
    /// Parallel connections.
    pub connections: usize,
    /// Response size.
    pub size: usize,
    /// Run time.
    pub duration: Duration,
    /// Congestion control (cubic, bbr, reno).
    pub cc: String,
    /// First request id.
    pub first_id: u64,
    /// The server's certificate (trusted root).
    pub cert: CertificateDer<'static>,
    /// Loss detection (the server was started with the same).
    pub loss_detection: LossDetection,
    /// HTTP/3 instead of the bare request line (the server was started with the same).
    pub http3: bool,
}

/// Runs the client in the calling thread's namespace.
pub fn run(c: &QuicClient, progress: Arc<dyn Fn(u64) + Send + Sync>) -> anyhow::Result<Samples> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let c = c.clone();
    rt.block_on(async move {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(c.cert.clone())?;
        let crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut crypto = crypto;
        if c.http3 {
            crypto.alpn_protocols = vec![b"h3".to_vec()];
        }
        let mut cfg = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(crypto)?));
        cfg.transport_config(transport(&c.cc, c.loss_detection));
        let mut ep =
            quinn::Endpoint::client(SocketAddr::new(c.bind, 0)).context("QUIC client endpoint")?;
        ep.set_default_client_config(cfg);
        let start = Instant::now();
        let deadline = start + c.duration;
        let mut tasks = Vec::new();
        for k in 0..c.connections {
            let (ep, c, progress) = (ep.clone(), c.clone(), progress.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = Samples::default();
                let conn = match ep.connect(c.server, "hirt-lab") {
                    Ok(connecting) => match connecting.await {
                        Ok(conn) => conn,
                        Err(_) => {
                            s.errors += 1;
                            return s;
                        }
                    },
                    Err(_) => {
                        s.errors += 1;
                        return s;
                    }
                };
                let mut h3 = if c.http3 {
                    match h3::client::new(h3_quinn::Connection::new(conn.clone())).await {
                        Ok((mut driver, send)) => {
                            tokio::spawn(async move {
                                std::future::poll_fn(|cx| driver.poll_close(cx)).await
                            });
                            Some(send)
                        }
                        Err(_) => {
                            s.errors += 1;
                            return s;
                        }
                    }
                } else {
                    None
                };
                let mut id = c.first_id + k as u64 * 1_000_000;
                while Instant::now() < deadline {
                    id += 1;
                    let t0 = Instant::now();
                    let (conn, size) = (&conn, c.size);
                    let r = async {
                        if let Some(h3) = h3.as_mut() {
                            return h3_request(h3, size, id).await;
                        }
                        let (mut send, mut recv) = conn.open_bi().await?;
                        send.write_all(format!("{size} {id}\n").as_bytes()).await?;
                        send.finish()?;
                        let body = recv.read_to_end(size + 1).await?;
                        anyhow::Ok(body == expected(id, size))
                    };
                    match tokio::time::timeout(Duration::from_secs(30), r).await {
                        Ok(Ok(true)) => {
                            s.latencies_us.push(t0.elapsed().as_micros() as u64);
                            s.bytes += c.size as u64;
                            progress(1);
                        }
                        Ok(Ok(false)) => {
                            s.errors += 1;
                            s.corrupt += 1;
                        }
                        _ => {
                            s.errors += 1;
                            break;
                        }
                    }
                }
                conn.close(0u32.into(), b"done");
                s
            }));
        }
        let mut parts = Vec::new();
        for t in tasks {
            parts.push(t.await.unwrap_or_default());
        }
        ep.wait_idle().await;
        let mut s = Samples::merge(parts);
        s.elapsed = start.elapsed();
        Ok(s)
    })
}

/// One HTTP/3 request for response `id` of `size` bytes; whether the body matched.
async fn h3_request(
    h3: &mut h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
    size: usize,
    id: u64,
) -> anyhow::Result<bool> {
    use bytes::Buf;
    let req = http::Request::get(format!("https://hirt-lab/{size}/{id}")).body(())?;
    let mut stream = h3.send_request(req).await?;
    stream.finish().await?;
    let resp = stream.recv_response().await?;
    let mut body = Vec::with_capacity(size);
    while let Some(mut chunk) = stream.recv_data().await? {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            let n = part.len();
            body.extend_from_slice(part);
            chunk.advance(n);
        }
        if body.len() > size {
            break;
        }
    }
    Ok(resp.status() == http::StatusCode::OK && body == expected(id, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http3_paths_are_parsed() {
        assert_eq!(parse_path("/10240/7"), (10240, 7));
        assert_eq!(parse_path("/999999999/1"), (4 << 20, 1));
        assert_eq!(parse_path("/x"), (0, 0));
    }
}
