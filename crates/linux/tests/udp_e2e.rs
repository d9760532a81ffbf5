//! UDP mode end to end in network namespaces (root; skipped otherwise): client and server each
//! run `hirt udp` in-process, 3% random loss on the underlay both ways, traffic both ways
//! through the TUN devices, the client's underlay address changes mid-run, and garbage sent to
//! the server port is dropped and counted.

use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hirt_linux::cli::UdpArgs;
use hirt_linux::netns::{self, veth, NetNs};
use hirt_linux::udp;

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

fn args(server: bool, tag: &str) -> UdpArgs {
    UdpArgs {
        server,
        client: !server,
        listen: server.then(|| "0.0.0.0:4096".into()),
        remote: (!server).then(|| "192.168.77.1:4096".into()),
        key: Some("e2e shared secret".into()),
        fec: Some("fixed:w=32,step=4".into()),
        dev: Some("hu0".into()),
        keepalive_ms: Some(200),
        control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
        ..Default::default()
    }
}

#[test]
fn udp_tunnel_both_ways_with_address_change() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let base = netns::unique_name("hu");
    let c = NetNs::new(&format!("{base}c")).unwrap();
    let s = NetNs::new(&format!("{base}s")).unwrap();
    let (vc, vs) = (format!("{base}vc"), format!("{base}vs"));
    veth(&c, &vc, &s, &vs).unwrap();
    c.ip(&["addr", "add", "192.168.77.2/24", "dev", &vc])
        .unwrap();
    // Keep the new address when the old (primary) one is removed mid-run.
    c.sysctl("net.ipv4.conf.all.promote_secondaries", "1")
        .unwrap();
    c.sysctl(&format!("net.ipv4.conf.{vc}.promote_secondaries"), "1")
        .unwrap();
    s.ip(&["addr", "add", "192.168.77.1/24", "dev", &vs])
        .unwrap();
    for (ns, port) in [(&s, "--dport"), (&c, "--sport")] {
        ns.exec(&[
            "iptables",
            "-A",
            "INPUT",
            "-p",
            "udp",
            port,
            "4096",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.03",
            "-j",
            "DROP",
        ])
        .unwrap();
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
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(receive(&sock))
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
    c.spawn(move || {
        let sock = UdpSocket::bind("10.77.0.2:0")?;
        for i in 0..N {
            sock.send_to(&payload(i, 1), "10.77.0.1:9000")?;
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
    let rec_s = server.metrics.streams[0].recovered.load(Ordering::Relaxed);
    let rec_c = client.metrics.streams[0].recovered.load(Ordering::Relaxed);
    let changes = server
        .metrics
        .global
        .peer_address_changes
        .load(Ordering::Relaxed);
    let auth = server.metrics.global.auth_failures.load(Ordering::Relaxed);
    eprintln!(
        "server got {} (recovered {rec_s}), client got {} (recovered {rec_c}), address changes {changes}, auth failures {auth}",
        got_s.len(),
        got_c.len()
    );
    check(&got_s, N, 1);
    check(&got_c, N, 2);
    assert!(rec_s > 0 && rec_c > 0, "losses were recovered both ways");
    assert!(changes >= 1, "server followed the client's new address");
    // (The 3% loss rule also applies to the garbage.)
    assert!(auth >= 35, "garbage counted as auth failures");
    client.stop();
    server.stop();
}

/// A big receive buffer (root: beyond rmem_max), so a receiver thread starved of CPU on a busy
/// machine does not drop datagrams that the tunnel delivered.
fn big_rcvbuf(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let sz: libc::c_int = 16 << 20;
    // SAFETY: setsockopt with a c_int on a socket we own.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&sz as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
}
