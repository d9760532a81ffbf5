//! SRv6 mode end to end in network namespaces (root; skipped otherwise):
//!
//! ```text
//!  client --(H.Encaps segs ENC,MID,DEC)--> enc [hirt encoder] --3% loss--> mid [seg6local End]
//!         --> dec [hirt decoder, End.DX6] --> server
//! ```
//!
//! N UDP datagrams with unique payloads each arrive exactly once and bit-exact, some were
//! recovered, no packet with a routing header (repair/feedback/source) reaches the server's link,
//! a TCP transfer completes with a matching digest, the kernel End SID in the middle forwards our
//! packets (it validates the SRH), and tshark decodes them as SRH.

mod common;
use common::big_rcvbuf;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hirt_linux::config::Srv6Config;
use hirt_linux::netns::{self, veth, Hook, NetNs};
use hirt_linux::srv6_run;
use sha2::{Digest, Sha256};

const ENC: &str = "fc00:e::1";
const MID: &str = "fc00:b::1";
const DEC: &str = "fc00:d::1";
const SERVER: &str = "2001:db8:9::2";

static WARM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn warm_done() -> bool {
    WARM.load(Ordering::SeqCst)
}

struct Topo {
    c: NetNs,
    e: NetNs,
    m: NetNs,
    d: NetNs,
    s: NetNs,
    /// veth names: (c-e, e-c, e-m, m-e, m-d, d-m, d-s, s-d)
    v: [String; 8],
}

fn topo() -> Topo {
    let base = netns::unique_name("h6");
    let mk = |r: &str| NetNs::new(&format!("{base}{r}")).unwrap();
    let (c, e, m, d, s) = (mk("c"), mk("e"), mk("m"), mk("d"), mk("s"));
    let v: [String; 8] =
        ["ce", "ec", "em", "me", "md", "dm", "ds", "sd"].map(|x| format!("{base}{x}"));
    veth(&c, &v[0], &e, &v[1]).unwrap();
    veth(&e, &v[2], &m, &v[3]).unwrap();
    veth(&m, &v[4], &d, &v[5]).unwrap();
    veth(&d, &v[6], &s, &v[7]).unwrap();
    for (ns, dev) in [(&e, &v[2]), (&m, &v[3]), (&m, &v[4]), (&d, &v[5])] {
        ns.ip(&["link", "set", dev, "mtu", "1600"]).unwrap();
    }
    let addr = |ns: &NetNs, dev: &str, a: &str| {
        ns.ip(&["-6", "addr", "add", a, "dev", dev, "nodad"])
            .unwrap();
    };
    addr(&c, &v[0], "2001:db8:1::1/64");
    addr(&e, &v[1], "2001:db8:1::2/64");
    addr(&e, &v[2], "2001:db8:2::1/64");
    addr(&m, &v[3], "2001:db8:2::2/64");
    addr(&m, &v[4], "2001:db8:3::1/64");
    addr(&d, &v[5], "2001:db8:3::2/64");
    addr(&d, &v[6], "2001:db8:9::1/64");
    addr(&s, &v[7], "2001:db8:9::2/64");
    for ns in [&e, &m, &d] {
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.seg6_enabled", "1").unwrap();
    }
    m.sysctl(&format!("net.ipv6.conf.{}.seg6_enabled", v[3]), "1")
        .unwrap();
    let r = |ns: &NetNs, args: &str| {
        let a: Vec<&str> = args.split_whitespace().collect();
        ns.ip(&a).unwrap();
    };
    r(&c, "-6 route add fc00::/16 via 2001:db8:1::2");
    r(
        &c,
        &format!(
            "-6 route add 2001:db8:9::/64 encap seg6 mode encap segs {ENC},{MID},{DEC} dev {}",
            v[0]
        ),
    );
    r(&c, "-6 route add default via 2001:db8:1::2");
    r(&e, "-6 route add fc00:b::/64 via 2001:db8:2::2");
    r(&e, "-6 route add fc00:d::/64 via 2001:db8:2::2");
    r(&e, "-6 route add default via 2001:db8:2::2");
    r(
        &m,
        &format!(
            "-6 route add {MID}/128 encap seg6local action End dev {}",
            v[3]
        ),
    );
    r(&m, "-6 route add fc00:d::/64 via 2001:db8:3::2");
    r(&m, "-6 route add fc00:e::/64 via 2001:db8:2::1");
    r(&m, "-6 route add 2001:db8:1::/64 via 2001:db8:2::1");
    r(&m, "-6 route add 2001:db8:9::/64 via 2001:db8:3::2");
    r(&d, "-6 route add default via 2001:db8:3::1");
    r(&s, "-6 route add default via 2001:db8:9::1");
    Topo { c, e, m, d, s, v }
}

fn payload(i: u32) -> Vec<u8> {
    let len = 64 + (i as usize * 7919) % 1200;
    let mut x = i.wrapping_mul(0x9e37_79b9) | 1;
    let mut p: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    p[..4].copy_from_slice(&i.to_be_bytes());
    p
}

fn args(role: &str, control: &str) -> Srv6Config {
    Srv6Config {
        role: role.parse().unwrap(),
        enc_sid: Some(ENC.parse().unwrap()),
        dec_sid: Some(DEC.parse().unwrap()),
        behavior: format!("dx6:{SERVER}").parse().unwrap(),
        dev: "hirt0".into(),
        fec: "fixed:w=32,step=4".into(),
        hmac_key: Some("e2e-secret".into()),
        // Sources authenticated too: forged ones would be dropped (unit-tested), and the
        // kernel's End SID in the middle must accept the extra TLV.
        auth_sources: true,
        // Overload control off: on a busy CI machine a descheduled worker looks saturated and
        // would skip repairs, which this test (every datagram exactly once) must not depend
        // on. Overload control is tested in `srv6::tests`.
        overload_threshold: 1.0,
        // In-order release on: exactly-once delivery must hold with it too.
        in_order_ms: 30.0,
        control: Some(std::env::temp_dir().join(control)),
        ..Default::default()
    }
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn srv6_tunnel_through_namespaces() {
    tunnel(false, false);
}

/// The same with the AF_XDP fast path on both nodes: the encoder takes sources from the
/// client's link and sends to the middle node itself, the decoder (End.DT6) takes sources and
/// repairs from its link and sends feedback and decapsulated packets itself.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn srv6_tunnel_with_af_xdp() {
    tunnel(true, false);
}

/// AF_XDP on both nodes with `--kernel-sources`: the encoder's XDP program tags the sources and
/// the kernel forwards them; the decoder's sources are delivered by the kernel's own End.DT6.
/// Both hirt nodes read copies from a BPF ring buffer (to code repairs, to recover).
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn srv6_tunnel_with_kernel_sources() {
    tunnel(true, true);
}

fn tunnel(xdp: bool, kernel_sources: bool) {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let t = topo();
    if xdp {
        // The encoder reads the client's frames without the kernel's checksum metadata: a local
        // sender's must be complete, as a NIC's are.
        t.c.disable_offloads(&t.v[0]).unwrap();
    }
    // 3% random loss on everything the encoder's side sends into the tunnel (sources and
    // repairs), in the middle node: the AF_XDP path skips the encoder node's netfilter hooks.
    t.m.random_loss(
        Hook::Forward,
        &format!(
            "iifname \"{}\" oifname \"{}\" ip6 daddr fc00::/16",
            t.v[3], t.v[4]
        ),
        0.03,
        "link_loss",
    )
    .unwrap();
    // Counts packets with a routing header (type 4) arriving at the server: must stay 0. (In
    // the server's namespace: the decoder's AF_XDP transmissions skip its own hooks.)
    t.s.count(
        Hook::Prerouting,
        &format!("iifname \"{}\" rt type 4", t.v[7]),
        "srh_in",
    )
    .unwrap();
    let tag = t.e.name().to_string();
    let enc = {
        let mut a = args("encoder", &format!("{tag}-enc.sock"));
        if xdp {
            a.xdp = vec![t.v[1].clone(), t.v[2].clone()];
        }
        if kernel_sources {
            // The XDP program tags the sources and the kernel forwards them; it cannot sign
            // them (repairs and feedback keep their HMAC).
            a.kernel_sources = true;
            a.auth_sources = false;
            a.in_order_ms = 0.0;
        }
        t.e.spawn(move || srv6_run::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let dec = {
        let mut a = args("decoder", &format!("{tag}-dec.sock"));
        if xdp {
            // End.DT6: decapsulated packets are routed in the main table, so they leave by
            // the decoder's own socket on the server's link too.
            a.xdp = vec![t.v[5].clone(), t.v[6].clone()];
            a.behavior = hirt_linux::srv6::Behavior::Dt6;
        }
        if kernel_sources {
            // The kernel delivers the sources: nothing to hold back for in-order release.
            a.kernel_sources = true;
            a.in_order_ms = 0.0;
            a.auth_sources = false;
        }
        t.d.spawn(move || srv6_run::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    // Where warm-up datagrams are seen, should none get through: sent by the client, into the
    // encoder's node, out of the decoder's node, into the server's.
    let seen = [
        (
            &t.c,
            Hook::Output,
            "udp dport 7002".to_string(),
            "warm_sent",
        ),
        (
            &t.e,
            Hook::Prerouting,
            format!("iifname \"{}\" ip6 daddr {ENC}", t.v[1]),
            "warm_at_encoder",
        ),
        (
            &t.d,
            Hook::Prerouting,
            "udp dport 7002".to_string(),
            "warm_decoded",
        ),
        (
            &t.s,
            Hook::Prerouting,
            "udp dport 7002".to_string(),
            "warm_at_server",
        ),
    ];
    for (ns, hook, rule, name) in &seen {
        ns.count(*hook, rule, name).unwrap();
    }
    // tshark on the middle-to-decoder link.
    let pcap = std::env::temp_dir().join(format!("{tag}.pcap"));
    let tshark = Command::new("ip")
        .args(["netns", "exec", t.m.name(), "tshark", "-q", "-i", &t.v[4]])
        .args(["-f", "ip6 proto 43", "-c", "20", "-a", "duration:30", "-w"])
        .arg(&pcap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok();
    // tshark creates the file once it captures; give it a moment to start (it is slow to).
    for _ in 0..100 {
        if tshark.is_none() || pcap.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Warm the path up (neighbour discovery on every hop, TUN queues) until a datagram makes it
    // through the tunnel, so a slow start on a loaded machine is not counted as loss.
    let warm_rx = t.s.spawn(|| {
        let sock = UdpSocket::bind(format!("[{SERVER}]:7002"))?;
        sock.set_read_timeout(Some(Duration::from_secs(30)))?;
        sock.recv(&mut [0u8; 64]).map(|_| ())
    });
    // A send that fails while a hop still resolves its neighbour is tried again; the errors
    // are reported if nothing gets through.
    let warm_tx = t.c.spawn(move || {
        let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
        let mut errors = Vec::new();
        for _ in 0..500 {
            if let Err(e) = sock.send_to(b"warm-up", format!("[{SERVER}]:7002")) {
                errors.push(e.to_string());
            }
            std::thread::sleep(Duration::from_millis(50));
            if warm_done() {
                break;
            }
        }
        Ok(errors)
    });
    let warmed = warm_rx.join().unwrap();
    WARM.store(true, Ordering::SeqCst);
    let send_errors = warm_tx.join().unwrap().unwrap();
    if let Err(e) = warmed {
        let counts: Vec<_> = seen
            .iter()
            .map(|(ns, _, _, name)| (*name, ns.counter(name)))
            .collect();
        let show = |ns: &NetNs, what: &str| {
            ns.ip(&["-6", what])
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| e.to_string())
        };
        eprintln!(
            "encoder node routes:\n{}\nclient neighbours:\n{}\nclient routes:\n{}",
            show(&t.e, "route"),
            show(&t.c, "neigh"),
            show(&t.c, "route")
        );
        panic!(
            "no datagram made it through the tunnel: {e}; send errors {send_errors:?}; \
             {counts:?}; link loss {:?}; encoder {:?}; decoder {:?}",
            t.m.counter("link_loss"),
            enc.metrics.snapshot(),
            dec.metrics.snapshot()
        );
    }
    std::thread::sleep(Duration::from_millis(300));

    const N: u32 = 3000;
    const TAIL: u32 = 200;
    let server = t.s.spawn(move || {
        let sock = UdpSocket::bind(format!("[{SERVER}]:7000"))?;
        big_rcvbuf(&sock);
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = sock.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        Ok(got)
    });
    std::thread::sleep(Duration::from_millis(200));
    t.c.spawn(move || {
        let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
        for i in 0..N + TAIL {
            sock.send_to(&payload(i), format!("[{SERVER}]:7000"))?;
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    })
    .join()
    .unwrap()
    .unwrap();
    let got = server.join().unwrap().unwrap();
    let mut seen = vec![0u32; (N + TAIL) as usize];
    for g in &got {
        assert!(g.len() >= 4);
        let i = u32::from_be_bytes(g[..4].try_into().unwrap());
        assert!(i < N + TAIL, "unknown datagram");
        assert_eq!(*g, payload(i), "datagram {i} is not bit-exact");
        seen[i as usize] += 1;
    }
    let missing: Vec<u32> = (0..N).filter(|&i| seen[i as usize] == 0).collect();
    let dups: Vec<u32> = (0..N + TAIL).filter(|&i| seen[i as usize] > 1).collect();
    let recovered: u64 = dec
        .metrics
        .streams
        .iter()
        .map(|s| s.recovered.load(Ordering::Relaxed))
        .sum();
    let repairs: u64 = enc
        .metrics
        .streams
        .iter()
        .map(|s| s.repairs_sent.load(Ordering::Relaxed))
        .sum();
    let feedback: u64 = enc
        .metrics
        .streams
        .iter()
        .map(|s| s.feedback_in.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "delivered {} recovered {recovered} repairs {repairs} feedback {feedback} missing {} dups {}",
        got.len(),
        missing.len(),
        dups.len()
    );
    eprintln!("decoder: {:?}", dec.metrics.snapshot());
    eprintln!("encoder: {:?}", enc.metrics.snapshot());
    assert!(
        dups.is_empty(),
        "{} duplicates, first {:?}",
        dups.len(),
        &dups[..dups.len().min(20)]
    );
    assert!(
        missing.is_empty(),
        "{} missing, first {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert!(recovered > 0, "nothing recovered: is the loss rule active?");
    let held: u64 = dec
        .metrics
        .streams
        .iter()
        .map(|s| s.held.load(Ordering::Relaxed))
        .sum();
    if kernel_sources {
        let delivered: u64 = dec
            .metrics
            .streams
            .iter()
            .map(|s| s.delivered_by_kernel.load(Ordering::Relaxed))
            .sum();
        assert!(
            delivered > N as u64 / 2,
            "sources delivered by the kernel's End.DT6: {delivered}"
        );
    } else {
        assert!(
            held > 0,
            "sources behind losses were held for in-order release"
        );
    }
    assert!(feedback > 0, "feedback reached the encoder");
    if xdp {
        let g = |m: &hirt_linux::metrics::Metrics, f: &str| m.global.snapshot()[f];
        if kernel_sources {
            let coded: u64 = enc
                .metrics
                .streams
                .iter()
                .map(|s| s.enc_packets_in.load(Ordering::Relaxed))
                .sum();
            assert!(
                coded >= N as u64,
                "sources tagged by the XDP program, coded from their copies: {coded}"
            );
            assert!(
                g(&enc.metrics, "xdp_received") < N as u64 / 2,
                "only feedback by AF_XDP"
            );
        } else {
            assert!(
                g(&enc.metrics, "xdp_received") > N as u64 / 2,
                "sources by AF_XDP"
            );
            assert!(g(&enc.metrics, "xdp_sent") > N as u64 / 2, "sent by AF_XDP");
        }
        if !kernel_sources {
            assert!(
                g(&dec.metrics, "xdp_received") > N as u64 / 2,
                "AF_XDP at the decoder"
            );
            assert!(
                g(&dec.metrics, "xdp_sent") > N as u64 / 2,
                "feedback and decapsulated packets sent by AF_XDP"
            );
        } else {
            assert!(g(&dec.metrics, "xdp_received") > 0, "repairs by AF_XDP");
        }
    }

    // TCP through the tunnel.
    let srv = t.s.spawn(|| {
        let l = TcpListener::bind(format!("[{SERVER}]:7001"))?;
        let (mut c, _) = l.accept()?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = c.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(h.finalize().to_vec())
    });
    std::thread::sleep(Duration::from_millis(200));
    let sent =
        t.c.spawn(|| {
            let mut c = TcpStream::connect(format!("[{SERVER}]:7001"))?;
            c.set_write_timeout(Some(Duration::from_secs(20)))?;
            let mut h = Sha256::new();
            for i in 0..256u32 {
                let chunk: Vec<u8> = payload(i).into_iter().cycle().take(8192).collect();
                h.update(&chunk);
                c.write_all(&chunk)?;
            }
            c.shutdown(std::net::Shutdown::Write)?;
            Ok(h.finalize().to_vec())
        })
        .join()
        .unwrap()
        .unwrap();
    let received = srv.join().unwrap().unwrap();
    assert_eq!(sent, received, "TCP digest mismatch");

    // The kernel End SID forwarded our sources; nothing with an SRH reached the server link.
    let pkts = t.s.counter("srh_in").unwrap();
    assert_eq!(pkts, 0, "packets with an SRH reached the server link");
    let auth_failures = dec.metrics.streams[0].auth_failures.load(Ordering::Relaxed);
    assert_eq!(auth_failures, 0);
    assert_eq!(dec.metrics.global.auth_failures.load(Ordering::Relaxed), 0);
    // The kernel's own traffic on the SID devices (MLD reports) is not "malformed".
    for m in [&enc.metrics, &dec.metrics] {
        assert_eq!(
            m.global.malformed.load(Ordering::Relaxed),
            0,
            "{:?}",
            m.snapshot()
        );
    }

    if let Some(mut ts) = tshark {
        let _ = ts.wait();
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .arg("-V")
            .output();
        let _ = std::fs::remove_file(&pcap);
        match out {
            Ok(o) if o.status.success() && !o.stdout.is_empty() => {
                let text = String::from_utf8_lossy(&o.stdout);
                assert!(
                    text.contains("Segment Routing"),
                    "tshark did not decode an SRH"
                );
                assert!(text.contains("fc00:d::1"), "segment list not decoded");
            }
            _ => eprintln!("tshark not usable here; skipping the decode check"),
        }
    }
    enc.stop();
    dec.stop();
    // Routes were removed on stop.
    let routes = t.e.ip(&["-6", "route", "show"]).unwrap();
    assert!(
        !String::from_utf8_lossy(&routes.stdout).contains(ENC),
        "SID route left behind"
    );
}
