//! Multi-path SRv6 mode end to end in network namespaces (root; skipped otherwise):
//!
//! ```text
//!                      +-- m1 [End fc00:b::1] --+
//!  client --> enc [hirt encoder, 2 paths]       dec [hirt decoder, End.DX6] --> server
//!                      +-- m2 [End fc00:c::1] --+
//! ```
//!
//! The encoder has `--path sids=fc00:b::1 --path sids=fc00:c::1` and the failover policy:
//! sources cross m1 while it works. Then m1 dies silently (nft drops everything it receives:
//! no ICMP, nothing comes back). Checked: the encoder's path manager switches to path 1 at the
//! first silence sample of path 0 (event order: path 0 `up -> suspect (silence)`, then
//! `switch 0 -> 1`, before path 0 is declared down), and every datagram sent after the switch
//! reaches the server exactly once.
//!
//! With `--repair-path diverse` and 3% loss on m1's link to the decoder: the sources cross m1,
//! their repairs m2, and every datagram reaches the server exactly once.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hirt_linux::config::Srv6Config;
use hirt_linux::metrics::Metrics;
use hirt_linux::netns::{self, veth, Hook, NetNs};
use hirt_linux::srv6_run::{self, Srv6Handle};

const ENC: &str = "fc00:e::1";
const MID1: &str = "fc00:b::1";
const MID2: &str = "fc00:c::1";
const DEC: &str = "fc00:d::1";
const SERVER: &str = "2001:db8:9::2";

struct Topo {
    c: NetNs,
    e: NetNs,
    m1: NetNs,
    _m2: NetNs,
    d: NetNs,
    s: NetNs,
}

fn topo(base: &str) -> Topo {
    let mk = |r: &str| NetNs::new(&format!("{base}{r}")).unwrap();
    let (c, e, m1, m2, d, s) = (mk("c"), mk("e"), mk("1"), mk("2"), mk("d"), mk("s"));
    let n = |x: &str| format!("{base}{x}");
    let links: [(&NetNs, &str, &str, &NetNs, &str, &str); 6] = [
        (&c, "ce", "2001:db8:1::1/64", &e, "ec", "2001:db8:1::2/64"),
        (
            &e,
            "e1",
            "2001:db8:21::1/64",
            &m1,
            "1e",
            "2001:db8:21::2/64",
        ),
        (
            &m1,
            "1d",
            "2001:db8:31::1/64",
            &d,
            "d1",
            "2001:db8:31::2/64",
        ),
        (
            &e,
            "e2",
            "2001:db8:22::1/64",
            &m2,
            "2e",
            "2001:db8:22::2/64",
        ),
        (
            &m2,
            "2d",
            "2001:db8:32::1/64",
            &d,
            "d2",
            "2001:db8:32::2/64",
        ),
        (&d, "ds", "2001:db8:9::1/64", &s, "sd", "2001:db8:9::2/64"),
    ];
    for (a, ai, aa, b, bi, ba) in links {
        veth(a, &n(ai), b, &n(bi)).unwrap();
        for (ns, dev, addr) in [(a, n(ai), aa), (b, n(bi), ba)] {
            ns.ip(&["link", "set", &dev, "mtu", "1600"]).unwrap();
            ns.ip(&["-6", "addr", "add", addr, "dev", &dev, "nodad"])
                .unwrap();
        }
    }
    for ns in [&e, &m1, &m2, &d] {
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.seg6_enabled", "1").unwrap();
    }
    for (ns, devs) in [(&m1, ["1e", "1d"]), (&m2, ["2e", "2d"])] {
        for dev in devs {
            ns.sysctl(&format!("net.ipv6.conf.{}.seg6_enabled", n(dev)), "1")
                .unwrap();
        }
    }
    let r = |ns: &NetNs, args: &str| {
        let a: Vec<&str> = args.split_whitespace().collect();
        ns.ip(&a).unwrap();
    };
    r(&c, "-6 route add fc00::/16 via 2001:db8:1::2");
    r(
        &c,
        &format!(
            "-6 route add 2001:db8:9::/64 encap seg6 mode encap segs {ENC},{DEC} dev {}",
            n("ce")
        ),
    );
    r(&e, "-6 route add fc00:b::/64 via 2001:db8:21::2");
    r(&e, "-6 route add fc00:c::/64 via 2001:db8:22::2");
    r(&e, "-6 route add fc00:d::/64 via 2001:db8:21::2");
    for (m, sid, dev, up, down) in [
        (&m1, MID1, n("1e"), "2001:db8:21::1", "2001:db8:31::2"),
        (&m2, MID2, n("2e"), "2001:db8:22::1", "2001:db8:32::2"),
    ] {
        r(
            m,
            &format!("-6 route add {sid}/128 encap seg6local action End dev {dev}"),
        );
        r(m, &format!("-6 route add fc00:d::/64 via {down}"));
        r(m, &format!("-6 route add fc00:e::/64 via {up}"));
    }
    r(&d, "-6 route add fc00:b::/64 via 2001:db8:31::1");
    r(&d, "-6 route add fc00:c::/64 via 2001:db8:32::1");
    // FEC feedback takes the decoder's route to the encoder SID (here: through m2); probe
    // replies take the reverse of their probe's path.
    r(&d, "-6 route add fc00:e::/64 via 2001:db8:32::1");
    r(&s, "-6 route add default via 2001:db8:9::1");
    Topo {
        c,
        e,
        m1,
        _m2: m2,
        d,
        s,
    }
}

fn config(role: &str, base: &str, paths: bool) -> Srv6Config {
    config_with(
        role,
        base,
        paths,
        hirt_core::path::PathManagerConfig::default(),
    )
}

fn config_with(
    role: &str,
    base: &str,
    paths: bool,
    manager: hirt_core::path::PathManagerConfig,
) -> Srv6Config {
    Srv6Config {
        role: role.parse().unwrap(),
        enc_sid: Some(ENC.parse().unwrap()),
        dec_sid: Some(DEC.parse().unwrap()),
        behavior: format!("dx6:{SERVER}").parse().unwrap(),
        dev: "hirt0".into(),
        fec: "fixed:w=32,step=4".into(),
        hmac_key: Some("paths-secret".into()),
        overload_threshold: 1.0,
        control: Some(std::env::temp_dir().join(format!("{base}{role}.sock"))),
        path: if paths {
            vec![
                format!("sids={MID1}").parse().unwrap(),
                format!("sids={MID2}").parse().unwrap(),
            ]
        } else {
            Vec::new()
        },
        paths: manager,
        ..Default::default()
    }
}

fn start_in(ns: &NetNs, cfg: Srv6Config) -> Srv6Handle {
    ns.spawn(move || srv6_run::start(cfg).map_err(std::io::Error::other))
        .join()
        .unwrap()
        .unwrap()
}

/// Polls `cond` every 20 ms, giving up after `limit` (bounds the test, measures nothing).
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

fn both_paths_answered(m: &Metrics) -> bool {
    let st = m.paths_status();
    st.paths.len() == 2
        && st
            .paths
            .iter()
            .all(|p| p.state == "up" && p.delivery_bps > 0.0)
}

/// The server: records every datagram's index (its first 4 bytes) until `stop`.
#[allow(clippy::type_complexity)]
fn receiver(
    s: &NetNs,
) -> (
    Arc<Mutex<Vec<u32>>>,
    Arc<AtomicBool>,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    let got = Arc::new(Mutex::new(Vec::<u32>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let rx = {
        let (got, stop) = (got.clone(), stop.clone());
        s.spawn(move || {
            let sock = UdpSocket::bind("[::]:9000")?;
            sock.set_read_timeout(Some(Duration::from_millis(100)))?;
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    if n >= 4 {
                        let i = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                        got.lock().unwrap().push(i);
                    }
                }
            }
            Ok(())
        })
    };
    (got, stop, rx)
}

#[test]
fn a_silent_middle_node_fails_over_to_the_other_segment_list() {
    if !netns::available() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = netns::unique_name("hp");
    let t = topo(&base);
    let enc = start_in(&t.e, config("encoder", &base, true));
    let _dec = start_in(&t.d, config("decoder", &base, false));
    let em = enc.metrics.clone();
    // The server records every datagram's index.
    let (got, stop, rx) = receiver(&t.s);
    let sent = Arc::new(AtomicU32::new(0));
    let sending = Arc::new(AtomicBool::new(true));
    let tx = {
        let (sent, sending) = (sent.clone(), sending.clone());
        t.c.spawn(move || {
            let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
            while sending.load(Ordering::SeqCst) {
                let i = sent.load(Ordering::SeqCst);
                let mut p = vec![0u8; 200 + (i as usize * 7) % 700];
                p[..4].copy_from_slice(&i.to_be_bytes());
                sock.send_to(&p, format!("[{SERVER}]:9000"))?;
                sent.store(i + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        })
    };
    assert!(
        wait_for(Duration::from_secs(10), || got.lock().unwrap().len() > 100),
        "datagrams flow over path 0"
    );
    assert!(
        wait_for(Duration::from_secs(10), || both_paths_answered(&em)),
        "both paths probed and answered: {:?}",
        em.paths_status()
    );
    assert_eq!(em.paths_status().preferred, Some(0));
    // m1 dies silently: everything it receives is dropped, nothing is answered.
    let table = format!("{base}t");
    t.m1.exec(&["nft", "add", "table", "inet", &table]).unwrap();
    t.m1.exec(&[
        "nft",
        "add",
        "chain",
        "inet",
        &table,
        "pre",
        "{ type filter hook prerouting priority -300; policy drop; }",
    ])
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || em.paths_status().preferred
            == Some(1)),
        "traffic moved to path 1: {:?}",
        em.paths_status()
    );
    let after = sent.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(600));
    sending.store(false, Ordering::SeqCst);
    tx.join().unwrap().unwrap();
    let last = sent.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    rx.join().unwrap().unwrap();
    let events = em.paths_status().events;
    let at = |what: &str| events.iter().position(|e| e.starts_with(what));
    let suspect = at("path 0 up -> suspect (silence)").expect("silence seen");
    let switch = at("switch 0 -> 1").expect("switched");
    assert!(suspect < switch, "{events:?}");
    if let Some(down) = at("path 0 suspect -> down") {
        assert!(
            switch < down,
            "moved before path 0 was declared down: {events:?}"
        );
    }
    let mut got = got.lock().unwrap().clone();
    got.retain(|&i| i >= after && i < last);
    got.sort_unstable();
    let want: Vec<u32> = (after..last).collect();
    assert_eq!(got, want, "every datagram after the switch exactly once");
    assert!(last - after > 100);
    drop(enc);
}

#[test]
fn diverse_repairs_cross_the_other_segment_list_and_recover() {
    if !netns::available() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = netns::unique_name("hq");
    let t = topo(&base);
    // 3% of what m1 forwards towards the decoder is lost.
    t.m1.random_loss(
        Hook::Forward,
        &format!("oifname \"{base}1d\" ip6 daddr fc00:d::/64"),
        0.03,
        "m1_loss",
    )
    .unwrap();
    let manager = hirt_core::path::PathManagerConfig {
        repair_path: hirt_core::path::RepairPath::Diverse,
        // Loss on path 0 must not count as a bad sample here: it is what the repairs recover.
        loss_threshold: 0.9,
        // The test is about repairs over a steady path, not about silence: a margin of three
        // intervals (docs/paths.md: what a busy host that should not fail over on its own
        // scheduling sets) keeps a loaded test machine from moving traffic now and then.
        silence_intervals: 3.0,
        ..Default::default()
    };
    let enc = start_in(&t.e, config_with("encoder", &base, true, manager));
    let _dec = start_in(&t.d, config("decoder", &base, false));
    let em = enc.metrics.clone();
    let (got, stop, rx) = receiver(&t.s);
    // Both paths measured first: until then repairs go with their sources.
    let warm = t.c.spawn(|| {
        let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
        for _ in 0..200 {
            sock.send_to(&u32::MAX.to_be_bytes(), format!("[{SERVER}]:9000"))?;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    });
    assert!(
        wait_for(Duration::from_secs(10), || both_paths_answered(&em)),
        "both paths probed and answered: {:?}",
        em.paths_status()
    );
    warm.join().unwrap().unwrap();
    let n = 1500u32;
    t.c.spawn(move || {
        let sock = UdpSocket::bind("[2001:db8:1::1]:0")?;
        for i in 0..n {
            let mut p = vec![0u8; 200 + (i as usize * 7) % 700];
            p[..4].copy_from_slice(&i.to_be_bytes());
            sock.send_to(&p, format!("[{SERVER}]:9000"))?;
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    })
    .join()
    .unwrap()
    .unwrap();
    wait_for(Duration::from_secs(5), || {
        got.lock().unwrap().iter().filter(|&&i| i < n).count() >= n as usize
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    rx.join().unwrap().unwrap();
    let st = em.paths_status();
    if st.events.iter().any(|e| e.starts_with("switch")) {
        // A host stalled past the margin (both paths went silent at once): traffic moved, and
        // every datagram must still arrive once.
        eprintln!("the encoder moved traffic: {:?}", st.events);
    } else {
        assert_eq!(st.preferred, Some(0), "{st:?}");
    }
    assert!(st.paths[1].repairs > 0, "repairs crossed path 1: {st:?}");
    assert!(t.m1.counter("m1_loss").unwrap() > 0, "path 0 lost packets");
    let mut got = got.lock().unwrap().clone();
    got.retain(|&i| i < n);
    got.sort_unstable();
    let want: Vec<u32> = (0..n).collect();
    assert_eq!(got, want, "every datagram exactly once");
    drop(enc);
}
