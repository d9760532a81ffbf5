//! Peers back to back in memory, each with one or more workers: both directions with losses,
//! datagrams of one stream landing on another stream's worker, replays across workers, forged
//! datagrams, a client address change, the traffic class of every datagram, ECN decapsulation,
//! the handshake: a restarted client, rekeys by packet count.

use std::sync::atomic::Ordering::Relaxed;

use hirt_wire::udp::UdpKind;

use crate::ecn::set_ecn;

use super::*;

const SERVER: &str = "192.0.2.1:4096";

/// A peer whose static keys derive from `label` (both ends of one label match).
fn cfg(role: Role, label: &[u8], encrypt: bool) -> PeerConfig {
    PeerConfig {
        role,
        keys: keys::StaticKeys::well_known(label, role == Role::Server),
        handshake: handshake::HandshakeConfig::default(),
        encrypt,
        fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).unwrap(),
        stream: 0,
        mss_mtu: Some(1400),
        ecn_ce: false,
        repair_dscp: 10,
        keepalive: Duration::from_millis(500),
        remote: (role == Role::Client).then(|| SERVER.parse().unwrap()),
        seed: 1,
        coder: CoderSettings {
            overload_threshold: 1.0,
            ..CoderSettings::default()
        },
    }
}

/// An IPv4/UDP packet numbered `i` (bytes 20..24), with a valid header checksum and TOS `tos`.
fn ip_packet_tos(i: u32, tos: u8) -> Vec<u8> {
    let len = 28 + (i as usize * 13) % 500;
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[1] = tos;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    for (k, b) in p[20..].iter_mut().enumerate() {
        *b = (i as usize * 7 + k) as u8;
    }
    p[20..24].copy_from_slice(&i.to_be_bytes());
    let ck = ipv4_checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p
}

fn ip_packet(i: u32) -> Vec<u8> {
    ip_packet_tos(i, 0)
}

/// The Internet checksum of an IPv4 header (0 when the header's own checksum is right).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// (bytes, destination, tos)
type Wire = Vec<(Vec<u8>, SocketAddr, u8)>;

/// One peer: its workers (sharing one [`Shared`]) and their metrics.
struct Side {
    workers: Vec<UdpPeer>,
    m: Arc<Metrics>,
}

/// Runs the handshake between client worker 0 (at `from`) and server worker `sw`: the
/// initiation, the response, the client's confirming keepalive. Returns whether the server
/// sends under the new session afterwards.
fn connect(client: &mut UdpPeer, server: &mut UdpPeer, from: SocketAddr, now: Instant) -> bool {
    let mut to_server: Vec<Vec<u8>> = Vec::new();
    client.handle_timeout(
        now,
        &mut |tr: Transmit<'_, SocketAddr>| to_server.push(tr.bytes.to_vec()),
        &mut |_| {},
    );
    for _ in 0..2 {
        let mut to_client: Vec<Vec<u8>> = Vec::new();
        for mut d in to_server.drain(..) {
            let _ = server.handle_udp(
                &mut d,
                from,
                0,
                now,
                &mut |tr: Transmit<'_, SocketAddr>| to_client.push(tr.bytes.to_vec()),
                &mut |_| {},
            );
        }
        for mut d in to_client {
            let _ = client.handle_udp(
                &mut d,
                SERVER.parse().unwrap(),
                0,
                now,
                &mut |tr: Transmit<'_, SocketAddr>| to_server.push(tr.bytes.to_vec()),
                &mut |_| {},
            );
        }
    }
    server.sessions().with(|hs| hs.sending().is_some())
        && client.sessions().with(|hs| hs.sending().is_some())
}

fn side(c: PeerConfig, n: usize, now: Instant) -> Side {
    let m = Metrics::new(n.max(2), "t");
    let shared = Shared::new(&c, n);
    let workers = (0..n)
        .map(|i| {
            let c = PeerConfig {
                stream: i as StreamId,
                ..c.clone()
            };
            UdpPeer::with_shared(c, m.clone(), shared.clone(), now)
        })
        .collect();
    Side { workers, m }
}

struct Net {
    client: Side,
    server: Side,
    /// Source address of each client worker's socket.
    client_addrs: Vec<SocketAddr>,
    /// Hand each datagram to server worker `k % N` (k: datagram number) instead of the worker
    /// its source port hashes to: one stream's sources and repairs reach different workers.
    spread: bool,
    /// Every address the server sent to.
    server_sent_to: std::collections::BTreeSet<SocketAddr>,
    now: Instant,
}

fn net_n(secret_c: &[u8], secret_s: &[u8], encrypt: bool, nc: usize, ns: usize) -> Net {
    let now = Instant::now();
    let mut n = Net {
        client: side(cfg(Role::Client, secret_c, encrypt), nc, now),
        server: side(cfg(Role::Server, secret_s, encrypt), ns, now),
        client_addrs: (0..nc)
            .map(|i| SocketAddr::new("198.51.100.7".parse().unwrap(), 5555 + i as u16))
            .collect(),
        spread: false,
        server_sent_to: Default::default(),
        now,
    };
    n.connect();
    n
}

fn net(secret_c: &[u8], secret_s: &[u8], encrypt: bool) -> Net {
    net_n(secret_c, secret_s, encrypt, 1, 1)
}

fn count(c: &AtomicU64) -> u64 {
    c.load(Relaxed)
}

impl Net {
    /// The handshake between client worker 0 and the server worker its port hashes to.
    fn connect(&mut self) -> bool {
        let sw = self.server_worker(0);
        connect(
            &mut self.client.workers[0],
            &mut self.server.workers[sw],
            self.client_addrs[0],
            self.now,
        )
    }

    /// The server worker whose socket a client worker's port hashes to: `t + 1` (mod N), so a
    /// stream is decoded by another stream's worker whenever there are two.
    fn server_worker(&self, t: usize) -> usize {
        (t + 1) % self.server.workers.len()
    }

    /// Sends packets `range` from the client TUN (packet `i` read by client worker `i % N`, as
    /// a multi-queue TUN spreads flows); `lose(k)` drops the k-th datagram client->server;
    /// `extra` may add datagrams (replays, forgeries). Returns what the server TUN got.
    fn c2s(
        &mut self,
        range: std::ops::Range<u32>,
        lose: impl Fn(u32) -> bool,
        mut extra: impl FnMut(&[u8]) -> Vec<(Vec<u8>, SocketAddr)>,
    ) -> Vec<Vec<u8>> {
        let mut delivered = Vec::new();
        let mut k = 0;
        let mut buf = vec![0u8; BUF_LEN];
        let nc = self.client.workers.len();
        for i in range.clone().chain(range.end..range.end + 4) {
            // (bytes, sending client worker)
            let mut wire: Vec<(Vec<u8>, usize)> = Vec::new();
            if i < range.end {
                let t = i as usize % nc;
                let p = ip_packet(i);
                buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
                self.client.workers[t].handle_tun(
                    &mut buf,
                    p.len(),
                    self.now,
                    &mut |tr: Transmit<'_, SocketAddr>| {
                        let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
                        wire.push((d.to_vec(), t))
                    },
                );
            } else {
                self.now += Duration::from_millis(100);
                for (t, w) in self.client.workers.iter_mut().enumerate() {
                    w.handle_timeout(
                        self.now,
                        &mut |tr: Transmit<'_, SocketAddr>| {
                            let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
                            wire.push((d.to_vec(), t))
                        },
                        &mut |_| {},
                    );
                }
            }
            let mut back: Wire = Vec::new();
            for (d, t) in wire {
                k += 1;
                if lose(k - 1) {
                    continue;
                }
                let sw = if self.spread {
                    k as usize % self.server.workers.len()
                } else {
                    self.server_worker(t)
                };
                let mut all = vec![(d.clone(), self.client_addrs[t])];
                all.extend(extra(&d));
                for (mut d, from) in all {
                    let _ = self.server.workers[sw].handle_udp(
                        &mut d,
                        from,
                        0,
                        self.now,
                        &mut |tr: Transmit<'_, SocketAddr>| {
                            let (d, to, tos) = (tr.bytes, tr.dest, tr.tos);
                            back.push((d.to_vec(), to, tos))
                        },
                        &mut |p| delivered.push(p.to_vec()),
                    );
                }
            }
            for (mut d, to, _) in back {
                self.server_sent_to.insert(to);
                // The datagram reaches the client worker that owns the destination port.
                let cw = self.client_addrs.iter().position(|a| *a == to).unwrap_or(0);
                let _ = self.client.workers[cw].handle_udp(
                    &mut d,
                    SERVER.parse().unwrap(),
                    0,
                    self.now,
                    &mut |_: Transmit<'_, SocketAddr>| {},
                    &mut |_| {},
                );
            }
            self.now += Duration::from_micros(200);
        }
        delivered
    }
}

fn exactly_once(delivered: &[Vec<u8>], range: std::ops::Range<u32>) {
    let mut seen = std::collections::HashMap::new();
    for d in delivered {
        let i = u32::from_be_bytes(d[20..24].try_into().unwrap());
        assert_eq!(*d, ip_packet(i), "bit-exact");
        *seen.entry(i).or_insert(0) += 1;
    }
    for i in range {
        assert_eq!(seen.get(&i).copied(), Some(1), "packet {i}");
    }
}

#[test]
fn both_modes_recover_losses_exactly_once() {
    for encrypt in [true, false] {
        let mut n = net(b"key", b"key", encrypt);
        let got = n.c2s(0..300, |k| k % 9 == 4, |_| vec![]);
        exactly_once(&got, 0..300);
        assert!(count(&n.server.m.stream(0).recovered) > 10);
        assert!(
            count(&n.client.m.stream(0).feedback_in) > 0,
            "feedback came back"
        );
        assert_eq!(n.server.workers[0].peer(n.now), Some(n.client_addrs[0]));
    }
}

/// Two encoder streams on the client, datagrams of each stream received by the *other* stream's
/// server worker, or spread over all server workers (and worker counts that differ between the
/// peers): every packet exactly once, bit-exact, losses recovered on every stream, feedback back
/// to every encoder.
#[test]
fn streams_are_decoded_by_whichever_worker_receives_them() {
    for (nc, ns, spread) in [
        (2, 2, false),
        (2, 2, true),
        (2, 1, false),
        (1, 2, true),
        (3, 2, true),
    ] {
        let mut n = net_n(b"key", b"key", true, nc, ns);
        n.spread = spread;
        // ~7% loss, hashed so that no stream escapes it by aliasing with the interleaving.
        let got = n.c2s(
            0..600,
            |k| k.wrapping_mul(2_654_435_761) % 100 < 7,
            |_| vec![],
        );
        exactly_once(&got, 0..600);
        assert_eq!(got.len(), 600, "{nc}x{ns}");
        for s in 0..nc as u16 {
            assert!(
                count(&n.server.m.stream(s).recovered) > 5,
                "{nc}x{ns}: stream {s} recovered"
            );
            assert!(
                count(&n.client.m.stream(s).feedback_in) > 0,
                "{nc}x{ns}: feedback for stream {s}"
            );
        }
        // Each server worker answers the client port its socket heard.
        for t in (0..nc).filter(|_| !spread) {
            let sw = n.server_worker(t);
            if (0..nc).filter(|&u| n.server_worker(u) == sw).count() == 1 {
                assert_eq!(n.server.workers[sw].peer(n.now), Some(n.client_addrs[t]));
            }
        }
    }
}

/// A datagram accepted by one worker is a replay at every other worker; several workers
/// sealing for one direction never reuse a counter (the AEAD nonce).
#[test]
fn replays_across_workers_are_rejected_and_counters_are_unique() {
    let now = Instant::now();
    let mut client = side(cfg(Role::Client, b"key", true), 2, now);
    let mut server = side(cfg(Role::Server, b"key", true), 2, now);
    let from: SocketAddr = "198.51.100.7:5555".parse().unwrap();
    assert!(connect(
        &mut client.workers[0],
        &mut server.workers[0],
        from,
        now
    ));
    let evil: SocketAddr = "203.0.113.66:666".parse().unwrap();
    let mut wire = Vec::new();
    let mut buf = vec![0u8; BUF_LEN];
    for i in 0..2000u32 {
        let p = ip_packet(i);
        buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
        client.workers[i as usize % 2].handle_tun(&mut buf, p.len(), now, &mut |tr: Transmit<
            '_,
            SocketAddr,
        >| {
            let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
            wire.push(d.to_vec())
        });
    }
    let mut counters: Vec<u64> = wire
        .iter()
        .map(|d| u64::from_be_bytes(d[1..HEADER_LEN].try_into().unwrap()))
        .collect();
    counters.sort_unstable();
    counters.dedup();
    assert_eq!(
        counters.len(),
        wire.len(),
        "a counter (nonce) was used twice"
    );

    let mut delivered = 0;
    for (j, d) in wire.iter().take(50).enumerate() {
        let mut a = d.clone();
        let r = server.workers[j % 2].handle_udp(
            &mut a,
            from,
            0,
            now,
            &mut |_: Transmit<'_, SocketAddr>| {},
            &mut |_| delivered += 1,
        );
        assert_ne!(r, Err(UdpDrop::Auth));
        let mut b = d.clone();
        let r = server.workers[(j + 1) % 2].handle_udp(
            &mut b,
            evil,
            0,
            now,
            &mut |_: Transmit<'_, SocketAddr>| {},
            &mut |_| delivered += 1,
        );
        assert_eq!(r, Err(UdpDrop::Auth), "replay to the other worker");
    }
    assert_eq!(count(&server.m.global.auth_failures), 50);
    for w in &server.workers {
        assert_eq!(w.peer(now), Some(from), "a replay moved the peer address");
    }
    assert!(delivered >= 40);

    // Two workers on two threads race every datagram: each is accepted exactly once.
    let rest: Arc<Vec<Vec<u8>>> = Arc::new(wire[50..].to_vec());
    let before = count(&server.m.global.auth_failures);
    let handles: Vec<_> = server
        .workers
        .drain(..)
        .map(|mut w| {
            let rest = rest.clone();
            std::thread::spawn(move || {
                let mut ok = 0;
                for d in rest.iter() {
                    let mut d = d.clone();
                    if w.handle_udp(
                        &mut d,
                        from,
                        0,
                        now,
                        &mut |_: Transmit<'_, SocketAddr>| {},
                        &mut |_| {},
                    ) != Err(UdpDrop::Auth)
                    {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        ok,
        rest.len(),
        "each datagram accepted by exactly one worker"
    );
    assert_eq!(
        count(&server.m.global.auth_failures) - before,
        rest.len() as u64
    );
}

/// One replay window per sending worker: datagrams of one client worker that arrive after
/// more than a window's worth (2048) of the other worker's datagrams are still accepted (their
/// sockets and receiving workers run independently), and each is still accepted only once.
#[test]
fn a_lagging_sender_is_not_taken_for_a_replay() {
    let now = Instant::now();
    let mut client = side(cfg(Role::Client, b"key", true), 2, now);
    let mut server = side(cfg(Role::Server, b"key", true), 2, now);
    let from: SocketAddr = "198.51.100.7:5555".parse().unwrap();
    assert!(connect(
        &mut client.workers[0],
        &mut server.workers[0],
        from,
        now
    ));
    let mut buf = vec![0u8; BUF_LEN];
    let mut per_worker: [Vec<Vec<u8>>; 2] = Default::default();
    for i in 0..6000u32 {
        // Worker 0 seals 100 datagrams first, then worker 1 seals 5900.
        let t = usize::from(i >= 100);
        let p = ip_packet(i);
        buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
        client.workers[t].handle_tun(&mut buf, p.len(), now, &mut |tr: Transmit<
            '_,
            SocketAddr,
        >| {
            let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
            per_worker[t].push(d.to_vec())
        });
    }
    // Worker 1's datagrams (more than 2048) arrive first, then worker 0's, then all again.
    let mut delivered = Vec::new();
    let order: Vec<&Vec<u8>> = per_worker[1].iter().chain(&per_worker[0]).collect();
    for (k, d) in order.iter().chain(order.iter()).enumerate() {
        let mut d = d.to_vec();
        let _ = server.workers[k % 2].handle_udp(
            &mut d,
            from,
            0,
            now,
            &mut |_: Transmit<'_, SocketAddr>| {},
            &mut |p| delivered.push(p.to_vec()),
        );
    }
    assert_eq!(
        count(&server.m.global.auth_failures),
        order.len() as u64,
        "only the second copies are replays"
    );
    exactly_once(&delivered, 0..6000);
}

#[test]
fn forged_and_replayed_datagrams_change_nothing() {
    let mut n = net(b"key", b"key", true);
    let mut attacker = UdpPeer::new(
        cfg(Role::Client, b"wrong key", true),
        Metrics::new(1, "x"),
        n.now,
    );
    let evil: SocketAddr = "203.0.113.66:666".parse().unwrap();
    let mut j = 0u32;
    let got = n.c2s(
        0..200,
        |k| k % 10 == 3,
        |d| {
            j += 1;
            let mut forged = d.to_vec();
            let l = forged.len();
            forged[l / 2] ^= 1;
            let mut own = vec![0u8; BUF_LEN];
            let p = ip_packet(100_000 + j);
            own[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
            let mut out = Vec::new();
            attacker.handle_tun(&mut own, p.len(), Instant::now(), &mut |tr: Transmit<
                '_,
                SocketAddr,
            >| {
                let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
                out.push((d.to_vec(), evil))
            });
            let mut v = vec![(d.to_vec(), evil), (forged, evil)];
            v.extend(out);
            v
        },
    );
    exactly_once(&got, 0..200);
    assert_eq!(got.len(), 200, "nothing else was delivered");
    assert_eq!(
        n.server.workers[0].peer(n.now),
        Some(n.client_addrs[0]),
        "replays from elsewhere do not move the peer"
    );
    assert!(count(&n.server.m.global.auth_failures) >= 400);
}

#[test]
fn server_follows_a_client_address_change() {
    for (nc, ns) in [(1, 1), (2, 2)] {
        let mut n = net_n(b"key", b"key", true, nc, ns);
        let got = n.c2s(0..50, |_| false, |_| vec![]);
        exactly_once(&got, 0..50);
        let changes = count(&n.server.m.global.peer_address_changes);
        assert_eq!(changes, nc as u64 - 1, "one port per client worker");
        for (t, a) in n.client_addrs.iter_mut().enumerate() {
            *a = SocketAddr::new("198.51.100.99".parse().unwrap(), 7777 + t as u16);
        }
        let got = n.c2s(50..100, |k| k == 5, |_| vec![]);
        exactly_once(&got, 50..100);
        for t in 0..nc {
            let sw = n.server_worker(t);
            assert_eq!(n.server.workers[sw].peer(n.now), Some(n.client_addrs[t]));
        }
        assert_eq!(
            count(&n.server.m.global.peer_address_changes) - changes,
            nc as u64
        );
    }
}

/// A server worker whose socket has heard nothing answers the newest address any worker
/// heard; when a new peer address appears on another socket (the client moved and its port now
/// hashes elsewhere), a worker stops using the address it learned before at once, and uses its
/// own learned address again as soon as its socket hears it; a silent socket's address expires
/// after three keepalive intervals.
#[test]
fn a_silent_socket_falls_back_to_the_newest_address() {
    let mut n = net_n(b"key", b"key", true, 1, 2);
    n.c2s(0..10, |_| false, |_| vec![]);
    let old = n.client_addrs[0];
    // Client worker 0 hashes to server worker 1; worker 0 heard nothing.
    assert_eq!(n.server.workers[1].peer(n.now), Some(old));
    assert_eq!(n.server.workers[0].peer(n.now), Some(old), "newest");
    let deliver_from = |n: &mut Net, w: usize, from: SocketAddr| {
        let mut buf = vec![0u8; BUF_LEN];
        let p = ip_packet(77);
        buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
        let mut wire = Vec::new();
        n.client.workers[0].handle_tun(&mut buf, p.len(), n.now, &mut |tr: Transmit<
            '_,
            SocketAddr,
        >| {
            let (d, _, _) = (tr.bytes, tr.dest, tr.tos);
            wire.push(d.to_vec())
        });
        for mut d in wire {
            let _ = n.server.workers[w].handle_udp(
                &mut d,
                from,
                0,
                n.now,
                &mut |_: Transmit<'_, SocketAddr>| {},
                &mut |_| {},
            );
        }
    };
    // The new address reaches worker 0: worker 1 drops its old address at once.
    let new: SocketAddr = "198.51.100.99:9999".parse().unwrap();
    deliver_from(&mut n, 0, new);
    assert_eq!(n.server.workers[0].peer(n.now), Some(new));
    assert_eq!(
        n.server.workers[1].peer(n.now),
        Some(new),
        "old address not used"
    );
    // A second client port on worker 1: worker 1 uses its own again, worker 0 keeps its own.
    let other: SocketAddr = "198.51.100.99:9998".parse().unwrap();
    deliver_from(&mut n, 1, other);
    deliver_from(&mut n, 0, new);
    assert_eq!(n.server.workers[1].peer(n.now), Some(other));
    assert_eq!(n.server.workers[0].peer(n.now), Some(new));
    // Worker 1's socket goes silent: after three keepalive intervals it answers the newest.
    for _ in 0..2 {
        n.now += Duration::from_millis(800);
        deliver_from(&mut n, 0, new);
    }
    assert_eq!(n.server.workers[1].peer(n.now), Some(new));
    assert_eq!(count(&n.server.m.global.peer_address_changes), 2);
}

/// Two client ports on one server socket: the server worker keeps answering one of them (the
/// one learned last when a new address appeared), so its stream reaches the client in order
/// through one port instead of alternating with every datagram.
#[test]
fn a_socket_hearing_two_client_ports_answers_one() {
    let mut n = net_n(b"key", b"key", true, 2, 1);
    n.c2s(0..100, |_| false, |_| vec![]);
    n.server_sent_to.clear();
    n.c2s(100..300, |k| k % 13 == 5, |_| vec![]);
    assert_eq!(n.server_sent_to.len(), 1, "{:?}", n.server_sent_to);
    assert_eq!(n.server.workers[0].peer(n.now), Some(n.client_addrs[1]));
}

#[test]
fn wrong_key_delivers_nothing() {
    let mut n = net(b"key", b"other", true);
    let got = n.c2s(0..20, |_| false, |_| vec![]);
    assert!(got.is_empty());
    assert_eq!(n.server.workers[0].peer(n.now), None);
}

/// Opens a captured datagram with the receiver's session keys and names its frame type.
fn kind_of(d: &[u8], receiver: &UdpPeer) -> UdpKind {
    let phase = crypto::phase_of(d[0]);
    let snap = receiver.sessions().snapshot();
    let (_, _, key) = snap.recv[phase as usize].as_ref().expect("a session");
    let mut o = Opener::new(key, true, phase);
    let mut d = d.to_vec();
    let (r, _) = o.open(&mut d).expect("our own datagram opens");
    UdpPacket::new_checked(&d[r]).unwrap().kind()
}

/// Sources carry the inner packet's DSCP and ECN, repairs / feedback / keepalives the
/// configured repair DSCP (Not-ECT), per datagram.
#[test]
fn every_datagram_gets_its_own_traffic_class() {
    let now = Instant::now();
    let mut client = UdpPeer::new(cfg(Role::Client, b"key", true), Metrics::new(1, "c"), now);
    let mut server = UdpPeer::new(
        PeerConfig {
            repair_dscp: 46,
            ..cfg(Role::Server, b"key", true)
        },
        Metrics::new(1, "s"),
        now,
    );
    let from: SocketAddr = "198.51.100.7:5555".parse().unwrap();
    assert!(connect(&mut client, &mut server, from, now));
    let inner = [0x00u8, 0xb8, 0x01, 0x02, 0x2b];
    let mut seen = std::collections::HashMap::<UdpKind, Vec<u8>>::new();
    let mut buf = vec![0u8; BUF_LEN];
    let mut t = now;
    let mut back: Wire = Vec::new();
    for i in 0..200u32 {
        let want = inner[i as usize % inner.len()];
        let p = ip_packet_tos(i, want);
        buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
        let mut wire: Wire = Vec::new();
        client.handle_tun(&mut buf, p.len(), t, &mut |tr: Transmit<'_, SocketAddr>| {
            let (d, to, tos) = (tr.bytes, tr.dest, tr.tos);
            wire.push((d.to_vec(), to, tos))
        });
        for (mut d, _, tos) in wire {
            let kind = kind_of(&d, &server);
            if kind == UdpKind::Source {
                assert_eq!(tos, want, "source {i} carries the inner TOS");
            }
            seen.entry(kind).or_default().push(tos);
            let _ = server.handle_udp(
                &mut d,
                from,
                0,
                t,
                &mut |tr: Transmit<'_, SocketAddr>| {
                    let (d, to, tos) = (tr.bytes, tr.dest, tr.tos);
                    back.push((d.to_vec(), to, tos))
                },
                &mut |_| {},
            );
        }
        t += Duration::from_millis(1);
    }
    t += Duration::from_secs(1);
    client.handle_timeout(
        t,
        &mut |tr: Transmit<'_, SocketAddr>| {
            let (d, _, tos) = (tr.bytes, tr.dest, tr.tos);
            seen.entry(kind_of(d, &server)).or_default().push(tos)
        },
        &mut |_| {},
    );
    server.handle_timeout(
        t,
        &mut |tr: Transmit<'_, SocketAddr>| {
            let (d, to, tos) = (tr.bytes, tr.dest, tr.tos);
            back.push((d.to_vec(), to, tos))
        },
        &mut |_| {},
    );
    let reps = &seen[&UdpKind::Repair];
    assert!(
        reps.len() > 10 && reps.iter().all(|&x| x == 10 << 2),
        "repairs: {reps:?}"
    );
    let ka = &seen[&UdpKind::Keepalive];
    assert!(!ka.is_empty() && ka.iter().all(|&x| x == 10 << 2));
    let fb: Vec<u8> = back
        .iter()
        .filter(|(d, _, _)| kind_of(d, &client) == UdpKind::Feedback)
        .map(|x| x.2)
        .collect();
    assert!(
        !fb.is_empty() && fb.iter().all(|&x| x == 46 << 2),
        "feedback: {fb:?}"
    );
    assert!(back.iter().all(|(_, to, _)| *to == from));
}

#[test]
fn ecn_decapsulation_follows_rfc6040() {
    // (outer ECN, inner ECN) -> inner ECN after, or None: dropped.
    let table = [
        (0, 0, Some(0)),
        (0, 2, Some(2)),
        (2, 2, Some(2)),
        (1, 2, Some(1)),
        (1, 1, Some(1)),
        (2, 1, Some(1)),
        (3, 0, None),
        (3, 1, Some(3)),
        (3, 2, Some(3)),
        (3, 3, Some(3)),
        (1, 0, Some(0)),
    ];
    for (outer, inner, want) in table {
        let mut p4 = ip_packet_tos(5, 0xb8 | inner);
        let ok = decap_ecn(0x28 | outer, &mut p4);
        assert_eq!(ok, want.is_some(), "v4 {outer} {inner}");
        if let Some(w) = want {
            assert_eq!(p4[1], 0xb8 | w, "v4 {outer} {inner}: DSCP kept, ECN set");
            assert_eq!(ipv4_checksum(&p4[..20]), 0, "v4 checksum still valid");
            let orig = ip_packet_tos(5, 0xb8 | inner);
            assert_eq!(
                (&p4[2..10], &p4[12..]),
                (&orig[2..10], &orig[12..]),
                "rest unchanged"
            );
        }
        let mut p6 = vec![0u8; 60];
        let tc = 0xb8 | inner;
        p6[0] = 0x60 | (tc >> 4);
        p6[1] = (tc << 4) | 0x0a;
        p6[2] = 0xbc;
        let ok = decap_ecn(outer, &mut p6);
        assert_eq!(ok, want.is_some(), "v6 {outer} {inner}");
        if let Some(w) = want {
            assert_eq!(inner_tos(&p6), 0xb8 | w, "v6 {outer} {inner}");
            assert_eq!((p6[1] & 0x0f, p6[2]), (0x0a, 0xbc), "flow label kept");
        }
    }
}

/// Through a peer: an outer CE reaches an ECT inner packet; a CE-marked Not-ECT one is dropped
/// and not resurrected by a repair afterwards; the decoder still recovers bit-exact (its
/// symbols are the packets as sent).
#[test]
fn outer_ce_reaches_the_inner_packet() {
    let now = Instant::now();
    let mut client = UdpPeer::new(cfg(Role::Client, b"key", true), Metrics::new(1, "c"), now);
    let mut server = UdpPeer::new(cfg(Role::Server, b"key", true), Metrics::new(1, "s"), now);
    let from: SocketAddr = "198.51.100.7:5555".parse().unwrap();
    assert!(connect(&mut client, &mut server, from, now));
    let mut buf = vec![0u8; BUF_LEN];
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut drops = 0;
    for i in 0..64u32 {
        // Even packets ECT(0), odd ones Not-ECT; every datagram arrives CE-marked except the
        // lost ones (i % 8 == 6: recovered, never marked).
        let p = ip_packet_tos(i, if i % 2 == 0 { 0x02 } else { 0 });
        buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
        let mut wire: Vec<(Vec<u8>, u8)> = Vec::new();
        client.handle_tun(&mut buf, p.len(), now, &mut |tr: Transmit<
            '_,
            SocketAddr,
        >| {
            let (d, _, tos) = (tr.bytes, tr.dest, tr.tos);
            wire.push((d.to_vec(), tos))
        });
        for (j, (mut d, tos)) in wire.into_iter().enumerate() {
            if j == 0 && i % 8 == 6 {
                continue;
            }
            let r = server.handle_udp(
                &mut d,
                from,
                tos | 3,
                now,
                &mut |_: Transmit<'_, SocketAddr>| {},
                &mut |p| got.push(p.to_vec()),
            );
            if r == Err(UdpDrop::CeOnNotEct) {
                drops += 1;
            }
        }
    }
    let lost = (0..64).filter(|i| i % 8 == 6).count();
    assert_eq!(drops, 32, "every Not-ECT source dropped");
    assert!(lost > 0);
    assert_eq!(got.len(), 32, "ECT sources, the lost ones recovered");
    for g in &got {
        let i = u32::from_be_bytes(g[20..24].try_into().unwrap());
        assert_eq!(i % 2, 0, "no Not-ECT packet delivered: {i}");
        let mut want = ip_packet_tos(i, 0x02);
        if i % 8 != 6 {
            set_ecn(&mut want, 3);
        }
        assert_eq!(*g, want, "packet {i}");
    }
}

/// A client that restarts numbers its sources from 0 again: the server's decoder refuses the
/// first few dozen as duplicates of the old run, then starts the stream afresh and delivers the
/// rest (before, it dropped every one of them).
#[test]
fn a_restarted_client_is_followed() {
    let mut n = net(b"key", b"key", true);
    let got = n.c2s(0..300, |_| false, |_| vec![]);
    exactly_once(&got, 0..300);
    // Fresh client state: new encoder (ESIs from 0), a new session (counters from 0).
    n.client = side(cfg(Role::Client, b"key", true), 1, n.now);
    assert!(n.connect());
    let got = n.c2s(300..500, |_| false, |_| vec![]);
    let ids: std::collections::BTreeSet<u32> = got
        .iter()
        .map(|d| u32::from_be_bytes(d[20..24].try_into().unwrap()))
        .collect();
    assert!(
        (340..500).all(|i| ids.contains(&i)),
        "delivered after the restart: {} of 200",
        ids.len()
    );
    n.server.workers[0].coder().publish_stats();
    assert_eq!(count(&n.server.m.stream(0).decoder_restarts), 1);
}

/// A client that restarts after more than 1024 sources: its first source restarts the server's
/// stream, and every datagram after the restart is delivered.
#[test]
fn a_client_restarted_after_a_long_run_loses_nothing() {
    let mut n = net(b"key", b"key", true);
    let got = n.c2s(0..2000, |_| false, |_| vec![]);
    exactly_once(&got, 0..2000);
    n.client = side(cfg(Role::Client, b"key", true), 1, n.now);
    assert!(n.connect());
    let got = n.c2s(2000..2200, |_| false, |_| vec![]);
    exactly_once(&got, 2000..2200);
    n.server.workers[0].coder().publish_stats();
    assert_eq!(count(&n.server.m.stream(0).decoder_restarts), 1);
}

/// One client and one server worker with the given configurations, after their handshake.
fn net_cfg(c: PeerConfig, s: PeerConfig) -> Net {
    let now = Instant::now();
    let mut n = Net {
        client: side(c, 1, now),
        server: side(s, 1, now),
        client_addrs: vec!["198.51.100.7:5555".parse().unwrap()],
        spread: false,
        server_sent_to: Default::default(),
        now,
    };
    assert!(n.connect());
    n
}

/// Rekeys by packet count, asked for by the client's own count or by the server's flag: new
/// sessions come up while traffic flows (the old one carries it until then) and every packet
/// is still delivered exactly once.
#[test]
fn rekeys_by_packet_count_lose_nothing() {
    let limit = |role: Role, packets: u64| PeerConfig {
        handshake: handshake::HandshakeConfig {
            rekey_packets: packets,
            ..Default::default()
        },
        ..cfg(role, b"key", true)
    };
    for (c, s) in [
        (limit(Role::Client, 100), limit(Role::Server, 1 << 40)),
        (limit(Role::Client, 1 << 40), limit(Role::Server, 3)),
    ] {
        let mut n = net_cfg(c, s);
        let first = n.client.workers[0]
            .sessions()
            .with(|hs| hs.sending().unwrap().id);
        for r in 0..3u32 {
            let range = r * 300..(r + 1) * 300;
            let got = n.c2s(range.clone(), |k| k % 11 == 7, |_| vec![]);
            exactly_once(&got, range);
        }
        let stats = n.client.workers[0].sessions().stats();
        assert!(stats.sessions >= 3, "client sessions: {stats:?}");
        assert!(count(&n.server.m.global.sessions) >= 2);
        let last = n.client.workers[0]
            .sessions()
            .with(|hs| hs.sending().unwrap().id);
        assert_ne!(first, last);
    }
}
