//! Restarts in network namespaces (root; skipped otherwise): two `hirt udp` instances of this
//! build, the client restarted twice and the server once while traffic flows, rekeys every
//! second. A relay in the server's namespace records every datagram on the wire; afterwards
//! each recorded data datagram is opened with every session key the ends ever held (sampled
//! while they ran): no (key, counter) pair, so no AEAD nonce, appears twice, every key is
//! different, and the tunnel carried traffic again soon after each restart.
//!
//! AEAD counters and session keys depend on no clock (counters start at 0 per session, keys
//! come from fresh ephemeral keys of both ends), so the restarted client runs as it would with
//! its wall clock set back to the first run's: nothing in the key or nonce path reads it.

use std::collections::{BTreeSet, HashMap};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Mutex;

use super::*;
use crate::config::{UdpConfig, UdpRole};
use crate::netns::{self, Underlay};

/// Where the client sends: the relay in the server's namespace.
const RELAY: &str = "192.168.76.1:4100";
/// Where the relay forwards: the server, on the server's loopback.
const SERVER_AT: &str = "127.0.0.1:4096";

fn config(server: bool, tag: &str) -> UdpConfig {
    let k = keys::StaticKeys::well_known(tag.as_bytes(), server);
    let path = std::env::temp_dir().join(format!("{tag}-{server}.key"));
    keys::write_secret_file(&path, &keys::encode(&k.private)).unwrap();
    UdpConfig {
        role: Some(if server {
            UdpRole::Server
        } else {
            UdpRole::Client
        }),
        listen: server.then(|| "0.0.0.0:4096".into()),
        remote: (!server).then(|| RELAY.into()),
        private_key_file: Some(path),
        peer_public_key: Some(keys::encode(&k.peer_public)),
        fec: "fixed:w=16,step=4".into(),
        dev: "hr0".into(),
        tun_addr: Some(
            if server {
                "10.76.0.1/24"
            } else {
                "10.76.0.2/24"
            }
            .into(),
        ),
        keepalive_ms: 100,
        rekey_after_s: 1.0,
        overload_threshold: 1.0,
        control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
        ..Default::default()
    }
}

/// Keys seen in use: (key, phase) per end and direction, in order of first sight.
#[derive(Default)]
struct KeyLog {
    client_send: Vec<([u8; 32], u8)>,
    server_send: Vec<([u8; 32], u8)>,
}

fn note_keys(log: &Mutex<KeyLog>, shared: &Shared, client: bool) {
    let snap = shared.common.sessions.snapshot();
    if let Some((_, phase, key)) = snap.send {
        let mut l = log.lock().unwrap();
        let v = if client {
            &mut l.client_send
        } else {
            &mut l.server_send
        };
        if !v.iter().any(|(k, _)| *k == *key) {
            v.push((*key, phase));
        }
    }
}

/// The (key index, counter) of every recorded data datagram that opens under one of `keys`;
/// the number that open under none.
fn open_all(wire: &[Vec<u8>], keys: &[([u8; 32], u8)]) -> (Vec<(usize, u64)>, usize) {
    let openers: Vec<(u8, Opener)> = keys
        .iter()
        .map(|(k, p)| (*p, Opener::new(k, true, *p)))
        .collect();
    let mut opened = Vec::new();
    let mut strays = 0;
    for d in wire.iter().filter(|d| !handshake::is_handshake(d[0])) {
        let phase = crypto::phase_of(d[0]);
        let hit = openers.iter().enumerate().find_map(|(i, (p, o))| {
            let mut b = d.clone();
            (*p == phase)
                .then(|| o.open_unwindowed(&mut b, |_| true).ok())
                .flatten()
                .map(|(_, c)| (i, c))
        });
        match hit {
            Some(x) => opened.push(x),
            None => strays += 1,
        }
    }
    (opened, strays)
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn restarts_repeat_no_nonce_and_the_tunnel_comes_back() {
    if !netns::available() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = netns::unique_name("hr");
    let u = Underlay::new(&base, "192.168.76").unwrap();
    let (c, s) = (&u.client, &u.server);
    s.ip(&["link", "set", "lo", "up"]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Relay: client <-> RELAY <-> SERVER_AT, recording both directions.
    let to_server: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let to_client: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let relay = {
        let (stop, up, down) = (stop.clone(), to_server.clone(), to_client.clone());
        s.spawn(move || {
            let outer = UdpSocket::bind(RELAY)?;
            let inner = UdpSocket::bind("127.0.0.1:0")?;
            outer.set_nonblocking(true)?;
            inner.set_nonblocking(true)?;
            let mut client = None;
            let mut buf = vec![0u8; 65536];
            while !stop.load(SeqCst) {
                let mut idle = true;
                while let Ok((n, from)) = outer.recv_from(&mut buf) {
                    idle = false;
                    client = Some(from);
                    up.lock().unwrap().push(buf[..n].to_vec());
                    let _ = inner.send_to(&buf[..n], SERVER_AT);
                }
                while let Ok(n) = inner.recv(&mut buf) {
                    idle = false;
                    down.lock().unwrap().push(buf[..n].to_vec());
                    if let Some(to) = client {
                        let _ = outer.send_to(&buf[..n], to);
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            Ok(())
        })
    };
    // Traffic: numbered datagrams client -> server through the tunnel every 2 ms; the server
    // notes when each arrives.
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let receiver = {
        let (stop, arr) = (stop.clone(), arrivals.clone());
        s.spawn(move || {
            let sock = loop {
                match UdpSocket::bind("10.76.0.1:7000") {
                    Ok(s) => break s,
                    Err(_) if !stop.load(SeqCst) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => return Err(e),
                }
            };
            sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            let mut b = [0u8; 64];
            while !stop.load(SeqCst) {
                if sock.recv(&mut b).is_ok() {
                    arr.lock().unwrap().push(Instant::now());
                }
            }
            Ok(())
        })
    };
    let sender = {
        let stop = stop.clone();
        c.spawn(move || {
            let sock = UdpSocket::bind("0.0.0.0:0")?;
            let mut i = 0u32;
            while !stop.load(SeqCst) {
                let _ = sock.send_to(&i.to_be_bytes(), "10.76.0.1:7000");
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        })
    };
    let log: Arc<Mutex<KeyLog>> = Arc::default();
    let launch = |server: bool| -> UdpHandle {
        let ns = if server { s } else { c };
        // The stopped instance's socket is closed once its worker returned, but a process
        // another test forks at that moment holds it until its exec: the port is back within
        // milliseconds.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let cfg = config(server, &base);
            match ns
                .spawn(move || start(cfg).map_err(std::io::Error::other))
                .join()
                .unwrap()
            {
                Ok(h) => return h,
                Err(e)
                    if format!("{e:?}").contains("Address already in use")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("start: {e:?}"),
            }
        }
    };
    // Samples both ends' sending keys every 5 ms while `handle` runs.
    let watch = |h: &UdpHandle, client: bool| {
        let (shared, log, stop) = (h.shared(), log.clone(), Arc::new(AtomicBool::new(false)));
        let st = stop.clone();
        let t = std::thread::spawn(move || {
            while !st.load(SeqCst) {
                note_keys(&log, &shared, client);
                std::thread::sleep(Duration::from_millis(5));
            }
            note_keys(&log, &shared, client);
        });
        (stop, t)
    };
    let stop_watch = |(flag, t): (Arc<AtomicBool>, std::thread::JoinHandle<()>)| {
        flag.store(true, SeqCst);
        t.join().unwrap();
    };
    // Time from a restart to the first datagram through the tunnel after it.
    let back_after = |t0: Instant| -> Option<Duration> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(t) = arrivals.lock().unwrap().iter().find(|&&t| t > t0) {
                return Some(t.duration_since(t0));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    };

    let mut server = launch(true);
    let mut server_watch = watch(&server, false);
    let mut recoveries = Vec::new();
    for run in 0..3 {
        let t0 = Instant::now();
        let client = launch(false);
        let client_watch = watch(&client, true);
        let back = back_after(t0).expect("the tunnel carries traffic after the client's start");
        recoveries.push(("client start", run, back));
        // Long enough for rekeys (every second) under traffic.
        std::thread::sleep(Duration::from_millis(2500));
        if run == 1 {
            // The server restarts under the running client: the client hears nothing for
            // three keepalive intervals and starts a new handshake.
            stop_watch(server_watch);
            server.stop();
            let t0 = Instant::now();
            server = launch(true);
            server_watch = watch(&server, false);
            let back =
                back_after(t0).expect("the tunnel carries traffic after the server's restart");
            recoveries.push(("server restart", run, back));
            std::thread::sleep(Duration::from_millis(1500));
        }
        stop_watch(client_watch);
        client.stop();
    }
    stop_watch(server_watch);
    let stats = server.sessions().stats();
    server.stop();
    stop.store(true, SeqCst);
    for t in [relay, receiver, sender] {
        t.join().unwrap().unwrap();
    }

    let log = log.lock().unwrap();
    let up = to_server.lock().unwrap();
    let down = to_client.lock().unwrap();
    for (what, run, back) in &recoveries {
        eprintln!(
            "{what} (run {run}): tunnel back after {} ms",
            back.as_millis()
        );
    }
    // Client -> server: the traffic every 2 ms; server -> client: feedback and keepalives.
    for (dir, wire, keys, least) in [
        ("client->server", &*up, &log.client_send, 1000),
        ("server->client", &*down, &log.server_send, 100),
    ] {
        let (opened, strays) = open_all(wire, keys);
        let mut seen = HashMap::new();
        for &(k, counter) in &opened {
            *seen.entry((k, counter)).or_insert(0u32) += 1;
        }
        let reused = seen.values().filter(|&&n| n > 1).count();
        eprintln!(
            "{dir}: {} datagrams, {} opened under {} session keys, {strays} under none, {reused} \
             (key, nonce) pairs used twice",
            wire.len(),
            opened.len(),
            keys.len()
        );
        assert_eq!(reused, 0, "{dir}: a nonce repeated under a key");
        assert!(opened.len() > least, "{dir}: traffic flowed");
        let distinct: BTreeSet<[u8; 32]> = keys.iter().map(|(k, _)| *k).collect();
        assert_eq!(distinct.len(), keys.len());
    }
    // Three client runs of ~2.5 s with a rekey every second, and the server's restart.
    assert!(
        log.client_send.len() >= 6,
        "rekeys: {} client keys",
        log.client_send.len()
    );
    assert!(stats.sessions >= 1);
    for (what, run, back) in &recoveries {
        assert!(
            *back < Duration::from_secs(1),
            "{what} (run {run}): tunnel back after {back:?}"
        );
    }
    // Keys of both directions are never the same.
    for (k, _) in &log.client_send {
        assert!(!log.server_send.iter().any(|(s, _)| s == k));
    }
}
