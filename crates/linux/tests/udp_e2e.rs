//! UDP mode end to end in network namespaces (root; skipped otherwise): client and server each
//! run `hirt udp --threads 2` in-process (two TUN queues, two sockets, two encoder streams per
//! peer), 3% random loss on the underlay both ways, traffic both ways through the TUN devices,
//! the client's underlay address changes mid-run, and garbage sent to the server port is
//! dropped and counted. On the wire (nft counters at the server's ingress) sources carry the
//! inner packets' DSCP and repairs/feedback/keepalives `--repair-dscp`; an ECN CE mark set on
//! the outer header (nft, like a congested router) reaches the inner packets. With a recovery
//! deadline, losses are reported by the decoder and repaired on demand. Behind a bottleneck,
//! queue management on the path marks ECN-capable flows CE and drops from the others.

mod common;
use common::big_rcvbuf;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hirt_linux::config::{UdpConfig, UdpRole};
use hirt_linux::metrics::{Metrics, StreamCounters};
use hirt_linux::netns::{self, NetNs};
use hirt_linux::udp;
use hirt_linux::udp::io::{enable_recv_tos, TosBatch};

/// DSCP of repairs, feedback and keepalives (AF11).
const REPAIR_DSCP: u8 = 10;
/// TOS of the client's data packets: DSCP EF (46), ECT(0).
const DATA_TOS: u8 = (46 << 2) | 0b10;

fn payload(i: u32, dir: u8) -> Vec<u8> {
    let len = 32 + (i as usize * 7919) % 1100;
    let mut p: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(2654435761)) as u8 ^ dir)
        .collect();
    p[..4].copy_from_slice(&i.to_be_bytes());
    p
}

fn receive(sock: &UdpSocket) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = sock.recv(&mut buf) {
        got.push(buf[..n].to_vec());
    }
    got
}

/// Like [`receive`], with each datagram's TOS (what the inner IP header carried), until
/// nothing arrived for `idle`.
fn receive_tos(sock: &UdpSocket, idle: Duration) -> Vec<(Vec<u8>, u8)> {
    use std::os::fd::AsRawFd;
    enable_recv_tos(&socket2::SockRef::from(sock), true);
    let mut got = Vec::new();
    let mut b = TosBatch::default();
    let mut last = std::time::Instant::now();
    while last.elapsed() < idle {
        let n = b.recv(sock.as_raw_fd()).unwrap_or(0);
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        last = std::time::Instant::now();
        for i in 0..n {
            let (d, _, tos) = b.get_mut(i);
            got.push((d.to_vec(), tos));
        }
    }
    got
}

/// `nft` counters of the chain, in rule order.
fn nft_counters(ns: &NetNs, table: &str) -> Vec<u64> {
    let out = ns.exec(&["nft", "list", "table", "inet", table]).unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "packets")?;
            w.get(i + 1)?.parse().ok()
        })
        .collect()
}

/// A counter summed over every stream.
fn sum(m: &Metrics, f: impl Fn(&StreamCounters) -> &AtomicU64) -> u64 {
    m.streams.iter().map(|s| f(s).load(Ordering::Relaxed)).sum()
}

/// Every datagram below `n` arrived exactly once.
fn check(got: &[Vec<u8>], n: u32, dir: u8) {
    let mut seen = vec![0u32; n as usize];
    for g in got {
        let i = u32::from_be_bytes(g[..4].try_into().unwrap());
        assert!(i < n, "unknown datagram");
        assert_eq!(*g, payload(i, dir), "datagram {i} not bit-exact");
        seen[i as usize] += 1;
    }
    let bad: Vec<usize> = (0..n as usize).filter(|&i| seen[i] != 1).collect();
    assert!(bad.is_empty(), "direction {dir}: not exactly once: {bad:?}");
}

fn role(server: bool) -> Option<UdpRole> {
    Some(if server {
        UdpRole::Server
    } else {
        UdpRole::Client
    })
}

/// Our private key file and the peer's public key: keys of the test named `tag` (a fixed
/// derivation from it, so both ends' calls agree), written mode 0600.
fn keys(server: bool, tag: &str) -> (std::path::PathBuf, String) {
    let k = udp::keys::StaticKeys::well_known(tag.as_bytes(), server);
    let path = std::env::temp_dir().join(format!("{tag}-{server}.key"));
    udp::keys::write_secret_file(&path, &udp::keys::encode(&k.private)).unwrap();
    (path, udp::keys::encode(&k.peer_public))
}

fn args(server: bool, tag: &str) -> UdpConfig {
    let (private, peer) = keys(server, tag);
    UdpConfig {
        role: role(server),
        listen: server.then(|| "0.0.0.0:4096".into()),
        remote: (!server).then(|| "192.168.77.1:4096".into()),
        private_key_file: Some(private),
        peer_public_key: Some(peer),
        fec: "fixed:w=32,step=4".into(),
        dev: "hu0".into(),
        keepalive_ms: 200,
        threads: 2,
        // Overload control off, as in srv6_e2e: a worker starved on a busy CI machine must not
        // skip repairs (it is covered by unit tests).
        overload_threshold: 1.0,
        // In-order release at the server's decoder only: both delivery paths are covered.
        in_order_ms: if server { 30.0 } else { 0.0 },
        repair_dscp: REPAIR_DSCP,
        control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
        ..Default::default()
    }
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn udp_tunnel_both_ways_with_address_change() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let base = netns::unique_name("hu");
    let u = netns::Underlay::new(&base, "192.168.77").unwrap();
    // Loss and nft counters per datagram, as on a wire (see `Underlay::like_a_wire`).
    u.like_a_wire().unwrap();
    let (c, s, vc) = (&u.client, &u.server, u.client_if.clone());
    // Keep the new address when the old (primary) one is removed mid-run.
    c.sysctl("net.ipv4.conf.all.promote_secondaries", "1")
        .unwrap();
    c.sysctl(&format!("net.ipv4.conf.{vc}.promote_secondaries"), "1")
        .unwrap();
    u.lose(4096, 0.03).unwrap();
    // Server ingress, before the loss rule: a congested router marks CE on every ECT(0)
    // datagram of the tunnel, then counters by DSCP (rule order = `nft_counters` order).
    let table = format!("{base}t");
    s.exec(&["nft", "add", "table", "inet", &table]).unwrap();
    s.exec(&[
        "nft",
        "add",
        "chain",
        "inet",
        &table,
        "pre",
        "{ type filter hook prerouting priority -300; }",
    ])
    .unwrap();
    let dscp = REPAIR_DSCP.to_string();
    for rule in [
        &[
            "udp", "dport", "4096", "ip", "ecn", "ect0", "ip", "ecn", "set", "ce", "counter",
        ][..],
        &["udp", "dport", "4096", "ip", "dscp", &dscp, "counter"],
        &["udp", "dport", "4096", "ip", "dscp", "46", "counter"],
        &["udp", "dport", "4096", "ip", "dscp", "0", "counter"],
        &["udp", "dport", "4096", "counter"],
    ] {
        let mut a = vec!["nft", "add", "rule", "inet", &table, "pre"];
        a.extend_from_slice(rule);
        s.exec(&a).unwrap();
    }
    let tag = base.clone();
    let server = {
        let a = args(true, &tag);
        s.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let client = {
        let a = args(false, &tag);
        c.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    // Warm up until a datagram crosses the tunnel (a loaded machine may start slowly).
    let warm_rx = s.spawn(|| {
        let sock = UdpSocket::bind("10.77.0.1:9002")?;
        sock.set_read_timeout(Some(Duration::from_secs(20)))?;
        sock.recv(&mut [0u8; 64]).map(|_| ())
    });
    let warm = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w2 = warm.clone();
    let warm_tx = c.spawn(move || {
        let sock = UdpSocket::bind("10.77.0.2:0")?;
        for _ in 0..400 {
            if w2.load(Ordering::SeqCst) {
                break;
            }
            sock.send_to(b"warm-up", "10.77.0.1:9002")?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    });
    warm_rx.join().unwrap().expect("nothing crossed the tunnel");
    warm.store(true, Ordering::SeqCst);
    warm_tx.join().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(200));

    const N: u32 = 1500;
    // Receivers on both tunnel ends.
    let s_rx = s.spawn(|| {
        let sock = UdpSocket::bind("10.77.0.1:9000")?;
        big_rcvbuf(&sock);
        Ok(receive_tos(&sock, Duration::from_secs(3)))
    });
    let c_rx = c.spawn(|| {
        let sock = UdpSocket::bind("10.77.0.2:9001")?;
        big_rcvbuf(&sock);
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(receive(&sock))
    });
    std::thread::sleep(Duration::from_millis(200));
    // The server pauses its half-way while the client changes address, so what it sends is not
    // addressed to a place that no longer exists (that loss would be a burst no code can fix).
    let (changed_tx, changed_rx) = std::sync::mpsc::channel::<()>();
    let s_tx = s.spawn(move || {
        let sock = UdpSocket::bind("10.77.0.1:0")?;
        for i in 0..N {
            if i == N / 2 {
                let _ = changed_rx.recv_timeout(Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(300));
            }
            sock.send_to(&payload(i, 2), "10.77.0.2:9001")?;
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    });
    let vc2 = vc.clone();
    let cname = c.name().to_string();
    let changes_before = server
        .metrics
        .global
        .peer_address_changes
        .load(Ordering::Relaxed);
    c.spawn(move || {
        // 16 flows (source ports): the client's multi-queue TUN spreads them over its queues,
        // so both client workers and encoder streams carry data.
        let mut socks = Vec::new();
        for _ in 0..16 {
            let sock = UdpSocket::bind("10.77.0.2:0")?;
            socket2::SockRef::from(&sock).set_tos_v4(u32::from(DATA_TOS))?;
            socks.push(sock);
        }
        for i in 0..N {
            socks[i as usize % socks.len()].send_to(&payload(i, 1), "10.77.0.1:9000")?;
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(1));
            }
            if i == N / 2 {
                // The client's underlay address changes (NAT rebinding, new network).
                let run = |a: &[&str]| {
                    std::process::Command::new("ip")
                        .args(["-n", &cname])
                        .args(a)
                        .output()
                        .map(|_| ())
                };
                run(&["addr", "add", "192.168.77.3/24", "dev", &vc2])?;
                run(&["addr", "del", "192.168.77.2/24", "dev", &vc2])?;
                let _ = changed_tx.send(());
            }
        }
        // Garbage at the server's port: dropped silently.
        let raw = UdpSocket::bind("0.0.0.0:0")?;
        for k in 0..50u8 {
            raw.send_to(&[k; 200], "192.168.77.1:4096")?;
        }
        Ok(())
    })
    .join()
    .unwrap()
    .unwrap();
    s_tx.join().unwrap().unwrap();
    let got_s = s_rx.join().unwrap().unwrap();
    let got_c = c_rx.join().unwrap().unwrap();
    // The client stops first, so its counters are final before the wire counters are read.
    let client_m = client.metrics.clone();
    let c_sources = sum(&client_m, |s| &s.enc_packets_out);
    client.stop();
    std::thread::sleep(Duration::from_millis(200));
    let c_marked = sum(&client_m, |s| &s.repairs_sent)
        + sum(&client_m, |s| &s.feedback_sent)
        + client_m.global.keepalives_sent.load(Ordering::Relaxed)
        + client_m
            .global
            .handshake_initiations
            .load(Ordering::Relaxed);
    let rec_s = sum(&server.metrics, |s| &s.recovered);
    let rec_c = sum(&client_m, |s| &s.recovered);
    let changes = server
        .metrics
        .global
        .peer_address_changes
        .load(Ordering::Relaxed);
    let auth = server.metrics.global.auth_failures.load(Ordering::Relaxed);
    let per_stream: Vec<(u64, u64)> = server
        .metrics
        .streams
        .iter()
        .map(|s| {
            (
                s.dec_packets_in.load(Ordering::Relaxed),
                s.recovered.load(Ordering::Relaxed),
            )
        })
        .collect();
    let wire = nft_counters(s, &table);
    eprintln!(
        "server got {} (recovered {rec_s}; per client stream received/recovered {per_stream:?}), \
         client got {} (recovered {rec_c}), address changes {changes}, auth failures {auth}; \
         at the server's ingress: CE set {}, DSCP {REPAIR_DSCP} {}, DSCP 46 {}, DSCP 0 {}, all {}; \
         client sent {c_sources} sources, {c_marked} repairs+feedback+keepalives+handshakes",
        got_s.len(),
        got_c.len(),
        wire[0],
        wire[1],
        wire[2],
        wire[3],
        wire[4],
    );
    let data: Vec<Vec<u8>> = got_s.iter().map(|(d, _)| d.clone()).collect();
    check(&data, N, 1);
    check(&got_c, N, 2);
    assert!(rec_s > 0 && rec_c > 0, "losses were recovered both ways");
    let held = sum(&server.metrics, |s| &s.held);
    assert!(
        held > 0,
        "the server held sources behind losses (in-order release)"
    );
    assert!(
        changes > changes_before,
        "server saw the client's new address"
    );
    // (The 3% loss rule also applies to the garbage.)
    assert!(auth >= 35, "garbage counted as auth failures");
    // Both client streams were used and decoded.
    assert!(per_stream.iter().all(|&(rx, _)| rx > 100), "{per_stream:?}");

    // DSCP per datagram: sources carry the inner DSCP (46), everything else REPAIR_DSCP.
    let [ce, d_repair, d_ef, d_zero, all] = wire[..] else {
        panic!("nft counters: {wire:?}");
    };
    assert_eq!(
        all,
        d_repair + d_ef + d_zero,
        "no datagram with another DSCP"
    );
    assert!(
        d_ef >= u64::from(N) && d_ef <= c_sources,
        "every data packet went out as EF"
    );
    assert!(d_repair > 100, "repairs carry the repair DSCP");
    assert!(
        d_repair <= c_marked && d_repair * 100 >= c_marked * 95,
        "repairs/feedback/keepalives sent {c_marked}, seen with DSCP {REPAIR_DSCP}: {d_repair}"
    );
    // ECN: the outer header of every data source was ECT(0) (inner copied, RFC 6040) and was
    // marked CE; the marks reach the inner packets (recovered ones keep their original ECT(0)).
    assert_eq!(ce, d_ef, "every EF datagram (the data sources) was ECT(0)");
    let marked = got_s.iter().filter(|(_, t)| *t == DATA_TOS | 3).count() as u64;
    let unmarked = got_s.iter().filter(|(_, t)| *t == DATA_TOS).count() as u64;
    assert_eq!(marked + unmarked, got_s.len() as u64, "inner DSCP kept");
    assert!(
        marked + rec_s >= u64::from(N) && unmarked <= rec_s,
        "CE reached the inner packets: {marked} marked, {unmarked} not"
    );
    server.stop();
}

/// A TCP connection to `to` through the tunnel, which may take a moment to carry its first
/// packet.
fn connect_through_tunnel(to: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    for _ in 0..100 {
        match std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(k) => return Ok(k),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Err(std::io::Error::other("no connection"))
}

/// TCP through the UDP tunnel with TUN offloads (the default), IPv4 one way and IPv6 the
/// other, 2% random loss per datagram on the underlay both ways: every byte arrives intact,
/// the senders' TUN devices handed hirt TSO packets that it cut into segments, and the
/// receivers wrote coalesced runs back.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn tcp_with_tun_offloads_both_ways() {
    use std::io::{Read, Write};
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let base = netns::unique_name("ht");
    let u = netns::Underlay::new(&base, "192.168.78").unwrap();
    // One frame per datagram, like a wire.
    u.like_a_wire().unwrap();
    u.lose(4097, 0.02).unwrap();
    let (c, s) = (&u.client, &u.server);
    let tag = base.clone();
    let mk = |server: bool| UdpConfig {
        role: role(server),
        listen: server.then(|| "0.0.0.0:4097".into()),
        remote: (!server).then(|| "192.168.78.1:4097".into()),
        private_key_file: Some(keys(server, &tag).0),
        peer_public_key: Some(keys(server, &tag).1),
        dev: "ht0".into(),
        tun_addr: Some(
            if server {
                "10.78.0.1/24"
            } else {
                "10.78.0.2/24"
            }
            .into(),
        ),
        tun_addr6: Some(if server { "fd78::1/64" } else { "fd78::2/64" }.into()),
        overload_threshold: 1.0,
        in_order_ms: 30.0,
        control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
        ..Default::default()
    };
    let a = mk(true);
    let server = s
        .spawn(move || udp::start(a).map_err(std::io::Error::other))
        .join()
        .unwrap()
        .unwrap();
    let a = mk(false);
    let client = c
        .spawn(move || udp::start(a).map_err(std::io::Error::other))
        .join()
        .unwrap()
        .unwrap();
    const LEN: usize = 6 << 20;
    let data = |seed: u8| -> Vec<u8> {
        (0..LEN)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[i & 3] ^ seed)
            .collect()
    };
    // Listeners first (server: IPv4; client: IPv6), then a connection each way.
    let s_listen = s
        .spawn(|| std::net::TcpListener::bind("10.78.0.1:7001"))
        .join()
        .unwrap()
        .unwrap();
    let c_listen = c
        .spawn(|| std::net::TcpListener::bind("[fd78::2]:7002"))
        .join()
        .unwrap()
        .unwrap();
    let recv = |l: std::net::TcpListener| {
        move || -> std::io::Result<Vec<u8>> {
            let (mut k, _) = l.accept()?;
            k.set_read_timeout(Some(Duration::from_secs(60)))?;
            let mut v = Vec::new();
            k.read_to_end(&mut v)?;
            Ok(v)
        }
    };
    let s_rx = std::thread::spawn(recv(s_listen));
    let c_rx = std::thread::spawn(recv(c_listen));
    let send = |to: &'static str, seed: u8| {
        let d = data(seed);
        move || -> std::io::Result<()> {
            let mut k = connect_through_tunnel(to.parse().unwrap())?;
            k.write_all(&d)?;
            k.shutdown(std::net::Shutdown::Write)
        }
    };
    let c_tx = c.spawn(send("10.78.0.1:7001", 1));
    let s_tx = s.spawn(send("[fd78::2]:7002", 2));
    c_tx.join().unwrap().unwrap();
    s_tx.join().unwrap().unwrap();
    let at_s = s_rx.join().unwrap().unwrap();
    let at_c = c_rx.join().unwrap().unwrap();
    let g = |m: &Metrics, f: fn(&hirt_linux::metrics::GlobalCounters) -> &AtomicU64| {
        f(&m.global).load(Ordering::Relaxed)
    };
    let (sm, cm) = (server.metrics.clone(), client.metrics.clone());
    eprintln!(
        "client: segmented {} coalesced {} recovered {}; server: segmented {} coalesced {} recovered {}",
        g(&cm, |x| &x.tun_segmented),
        g(&cm, |x| &x.tun_coalesced),
        sum(&cm, |x| &x.recovered),
        g(&sm, |x| &x.tun_segmented),
        g(&sm, |x| &x.tun_coalesced),
        sum(&sm, |x| &x.recovered),
    );
    assert!(
        at_s == data(1),
        "IPv4 client -> server: {} bytes, not the ones sent",
        at_s.len()
    );
    assert!(
        at_c == data(2),
        "IPv6 server -> client: {} bytes, not the ones sent",
        at_c.len()
    );
    for m in [&sm, &cm] {
        assert!(g(m, |x| &x.tun_segmented) > 0, "TSO packets were cut");
        assert!(g(m, |x| &x.tun_coalesced) > 0, "runs were coalesced");
        assert!(sum(m, |x| &x.recovered) > 0, "losses were recovered");
        assert_eq!(g(m, |x| &x.malformed), 0);
    }
    client.stop();
    server.stop();
}

/// With a recovery deadline longer than the round trip, the decoder reports losses and the
/// encoder repairs them on demand: 3% loss each way, a 2,000 pps stream of 1,200-byte
/// datagrams, (nearly) everything delivered, repairs answering loss reports, and an overhead
/// far below the fixed code's.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn deadline_repairs_reported_losses() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let base = netns::unique_name("hd");
    let u = netns::Underlay::new(&base, "192.168.78").unwrap();
    u.like_a_wire().unwrap();
    u.lose(4096, 0.03).unwrap();
    let (c, s) = (&u.client, &u.server);
    let tag = base.clone();
    let with_deadline = |server: bool| {
        let mut a = args(server, &tag);
        a.remote = (!server).then(|| "192.168.78.1:4096".into());
        a.fec = "ours".into();
        a.deadline = Some("20ms".into());
        a.in_order_ms = 0.0;
        a.threads = 1;
        a
    };
    let server = {
        let a = with_deadline(true);
        s.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let client = {
        let a = with_deadline(false);
        c.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let rx = s.spawn(|| {
        let sock = UdpSocket::bind("10.77.0.1:9010")?;
        big_rcvbuf(&sock);
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(receive(&sock))
    });
    std::thread::sleep(Duration::from_millis(300));
    const N: u32 = 6000;
    let tx = c.spawn(|| {
        let sock = UdpSocket::bind("10.77.0.2:0")?;
        let start = std::time::Instant::now();
        for i in 0..N {
            // Paced at 2,000 datagrams per second: the send schedule, not a timing check.
            let due = start + Duration::from_micros(500 * u64::from(i));
            if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(wait);
            }
            let mut p = payload(i, 3);
            p.resize(1200, 0xa5);
            sock.send_to(&p, "10.77.0.1:9010")?;
        }
        Ok(())
    });
    tx.join().unwrap().unwrap();
    let got = rx.join().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let ids: std::collections::BTreeSet<u32> = got
        .iter()
        .filter(|d| d.len() == 1200)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
        .collect();
    let (cm, sm) = (&client.metrics, &server.metrics);
    let sources = sum(cm, |x| &x.enc_packets_in);
    let repairs = sum(cm, |x| &x.repairs_sent);
    let answered = sum(cm, |x| &x.repairs_report);
    let reports = sum(sm, |x| &x.loss_reports);
    let recovered = sum(sm, |x| &x.recovered);
    let lost_on_link = u.lost().unwrap();
    eprintln!(
        "delivered {}/{N}, link losses {lost_on_link}, recovered {recovered}, sources \
         {sources}, repairs {repairs} ({answered} answering {reports} loss reports)",
        ids.len()
    );
    assert!(lost_on_link > 100, "the link lost {lost_on_link}");
    assert!(
        reports > 0 && answered > 0,
        "{reports} reports, {answered} answers"
    );
    assert!(recovered > 0);
    // The tail of the stream has no later source to reveal its losses: a lost last datagram
    // waits for the time-driven repair, which can be lost too. And a loss whose report or
    // answer is held up past the explicit 20 ms deadline (a stall of a loaded 2-vCPU machine,
    // with the suite's other tests beside it) gets no answer: its recovery would be worth
    // nothing. One suite run missed 7, in two runs of 3-4 losses; without FEC about 180 miss.
    // At most 0.2% may miss.
    let missing: Vec<u32> = (0..N).filter(|i| !ids.contains(i)).collect();
    assert!(missing.len() <= 12, "not delivered: {missing:?}");
    // Loss-triggered repair: well below the fixed code's 25% (fixed:w=32,step=4).
    assert!(
        (repairs as f64) < 0.15 * sources as f64,
        "{repairs} repairs for {sources} sources"
    );
    drop(client);
    drop(server);
}

/// `TcpExt` counter `name` of the namespace `ns` (`/proc/net/netstat` as its threads see it).
fn tcp_ext(ns: &NetNs, name: &'static str) -> u64 {
    let text = ns
        .spawn(|| std::fs::read_to_string("/proc/thread-self/net/netstat"))
        .join()
        .unwrap()
        .unwrap();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Queue management on the path (`--aqm-target-ms`), end to end: TCP uploads through the
/// tunnel fill a 20 Mbit/s bottleneck (a token bucket on the client's end of the underlay), so
/// the RTT the client's encoder measures rises far above its base. With ECN negotiated by the
/// hosts, the encoder marks the upload's segments CE instead of dropping them, and the
/// sender's TCP sees the marks come back; without ECN it drops segments. The server's encoder
/// carries only ACKs, and the queue in its RTT is its return path's (its feedback comes back
/// through it): it signals nothing. Every byte arrives both times.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn queue_management_marks_ecn_flows_and_drops_the_others() {
    use std::io::{Read, Write};
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let base = netns::unique_name("hq");
    let u = netns::Underlay::new(&base, "192.168.79").unwrap();
    u.like_a_wire().unwrap();
    let (c, s) = (&u.client, &u.server);
    c.sh(&format!(
        "tc qdisc add dev {} root tbf rate 20mbit burst 16kb latency 400ms",
        u.client_if
    ))
    .unwrap();
    let tag = base.clone();
    let mk = |server: bool| {
        let mut a = args(server, &tag);
        a.listen = server.then(|| "0.0.0.0:4098".into());
        a.remote = (!server).then(|| "192.168.79.1:4098".into());
        a.fec = "ours".into();
        a.threads = 1;
        a.in_order_ms = 0.0;
        a.aqm_target_ms = Some(10.0);
        a
    };
    let start = |ns: &NetNs, a: UdpConfig| {
        ns.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let server = start(s, mk(true));
    let client = start(c, mk(false));
    const LEN: usize = 6 << 20;
    let data: Vec<u8> = (0..LEN).map(|i| (i as u32 % 251) as u8).collect();
    let upload = |port: u16| -> Vec<u8> {
        let listener = s
            .spawn(move || std::net::TcpListener::bind(("10.77.0.1", port)))
            .join()
            .unwrap()
            .unwrap();
        let rx = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
            let (mut k, _) = listener.accept()?;
            k.set_read_timeout(Some(Duration::from_secs(60)))?;
            let mut v = Vec::new();
            k.read_to_end(&mut v)?;
            Ok(v)
        });
        let d = data.clone();
        c.spawn(move || -> std::io::Result<()> {
            let mut k = connect_through_tunnel(([10, 77, 0, 1], port).into())?;
            k.write_all(&d)?;
            k.shutdown(std::net::Shutdown::Write)
        })
        .join()
        .unwrap()
        .unwrap();
        rx.join().unwrap().unwrap()
    };
    let counts = |m: &Metrics| {
        // The workers publish their encoders' counters every 200 ms.
        std::thread::sleep(Duration::from_millis(500));
        (sum(m, |x| &x.aqm_marks), sum(m, |x| &x.aqm_drops))
    };

    // The client's TCP asks for ECN; the server's accepts it (the kernel's default).
    c.sysctl("net.ipv4.tcp_ecn", "1").unwrap();
    let got = upload(7201);
    let (marks, drops) = counts(&client.metrics);
    let delivered_ce = tcp_ext(c, "TCPDeliveredCE");
    eprintln!("ECN: {marks} marked, {drops} dropped; the sender saw {delivered_ce} delivered CE");
    assert!(
        got == data,
        "ECN upload: {} bytes, not the ones sent",
        got.len()
    );
    assert!(marks > 0, "the queue was never signalled");
    // Only segments that were not ECN-capable (retransmissions, the FIN) may be dropped.
    assert!(drops * 4 <= marks, "{marks} marked, {drops} dropped");
    assert!(delivered_ce > 0, "the marks did not reach the sender's TCP");

    c.sysctl("net.ipv4.tcp_ecn", "0").unwrap();
    let got = upload(7202);
    let (marks2, drops2) = counts(&client.metrics);
    eprintln!(
        "no ECN: {} marked, {} dropped",
        marks2 - marks,
        drops2 - drops
    );
    assert!(got == data, "upload without ECN: {} bytes", got.len());
    assert!(drops2 > drops, "no source was dropped without ECN");
    assert_eq!(
        marks2, marks,
        "a packet that was not ECN-capable was marked"
    );

    let (s_marks, s_drops) = counts(&server.metrics);
    assert!(
        s_marks + s_drops <= 2,
        "the server's encoder signalled its ACKs: {s_marks} marked, {s_drops} dropped"
    );
    client.stop();
    server.stop();
}
