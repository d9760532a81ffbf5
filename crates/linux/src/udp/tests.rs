//! Two peers back to back in memory: both directions with losses, forged and replayed
//! datagrams, a client address change.

use super::*;

fn cfg(role: Role, secret: &[u8], encrypt: bool) -> PeerConfig {
    PeerConfig {
        role,
        secret: secret.to_vec(),
        encrypt,
        fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).unwrap(),
        stream: 0,
        mss_mtu: Some(1400),
        ecn_ce: false,
        keepalive: Duration::from_millis(500),
        remote: (role == Role::Client).then(|| "192.0.2.1:4096".parse().unwrap()),
        seed: 1,
    }
}

fn ip_packet(i: u32) -> Vec<u8> {
    let len = 28 + (i as usize * 13) % 500;
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[9] = 17;
    for (k, b) in p[20..].iter_mut().enumerate() {
        *b = (i as usize * 7 + k) as u8;
    }
    p[20..24].copy_from_slice(&i.to_be_bytes());
    p
}

type Wire = Vec<(Vec<u8>, SocketAddr)>;

struct Net {
    client: UdpPeer,
    server: UdpPeer,
    cm: Arc<Metrics>,
    sm: Arc<Metrics>,
    client_addr: SocketAddr,
    now: Instant,
}

fn net(secret_c: &[u8], secret_s: &[u8], encrypt: bool) -> Net {
    let now = Instant::now();
    let cm = Metrics::new(1, "c");
    let sm = Metrics::new(1, "s");
    Net {
        client: UdpPeer::new(cfg(Role::Client, secret_c, encrypt), cm.clone(), now),
        server: UdpPeer::new(cfg(Role::Server, secret_s, encrypt), sm.clone(), now),
        cm,
        sm,
        client_addr: "198.51.100.7:5555".parse().unwrap(),
        now,
    }
}

impl Net {
    /// Sends `n` packets from the client TUN; `lose(k)` drops the k-th datagram client->server;
    /// `extra` may add datagrams (replays, forgeries). Returns what the server TUN got.
    fn c2s(
        &mut self,
        range: std::ops::Range<u32>,
        lose: impl Fn(u32) -> bool,
        mut extra: impl FnMut(&[u8]) -> Wire,
    ) -> Vec<Vec<u8>> {
        let mut delivered = Vec::new();
        let mut k = 0;
        let mut buf = vec![0u8; BUF_LEN];
        for i in range.clone().chain(range.end..range.end + 4) {
            let mut wire: Wire = Vec::new();
            if i < range.end {
                let p = ip_packet(i);
                buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
                self.client
                    .handle_tun(&mut buf, p.len(), self.now, &mut |d, to| {
                        wire.push((d.to_vec(), to))
                    });
            } else {
                self.now += Duration::from_millis(100);
                self.client.handle_timeout(
                    self.now,
                    &mut |d, to| wire.push((d.to_vec(), to)),
                    &mut |_| {},
                );
            }
            let mut back: Wire = Vec::new();
            for (d, _) in wire {
                k += 1;
                if lose(k - 1) {
                    continue;
                }
                let mut all = vec![(d.clone(), self.client_addr)];
                all.extend(extra(&d));
                for (mut d, from) in all {
                    let _ = self.server.handle_udp(
                        &mut d,
                        from,
                        self.now,
                        &mut |d, to| back.push((d.to_vec(), to)),
                        &mut |p| delivered.push(p.to_vec()),
                    );
                }
            }
            for (mut d, _) in back {
                let _ = self.client.handle_udp(
                    &mut d,
                    "192.0.2.1:4096".parse().unwrap(),
                    self.now,
                    &mut |_, _| {},
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
        assert!(
            n.sm.stream(0)
                .recovered
                .load(std::sync::atomic::Ordering::Relaxed)
                > 10
        );
        assert!(
            n.cm.stream(0)
                .feedback_in
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0,
            "feedback came back"
        );
        assert_eq!(n.server.peer(), Some(n.client_addr));
    }
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
            attacker.handle_tun(&mut own, p.len(), Instant::now(), &mut |d, _| {
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
        n.server.peer(),
        Some(n.client_addr),
        "replays from elsewhere do not move the peer"
    );
    assert!(
        n.sm.global
            .auth_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 400
    );
}

#[test]
fn server_follows_a_client_address_change() {
    let mut n = net(b"key", b"key", true);
    let got = n.c2s(0..50, |_| false, |_| vec![]);
    exactly_once(&got, 0..50);
    n.client_addr = "198.51.100.99:7777".parse().unwrap();
    let got = n.c2s(50..100, |k| k == 5, |_| vec![]);
    exactly_once(&got, 50..100);
    assert_eq!(n.server.peer(), Some(n.client_addr));
    assert_eq!(
        n.sm.global
            .peer_address_changes
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn wrong_key_delivers_nothing() {
    let mut n = net(b"key", b"other", true);
    let got = n.c2s(0..20, |_| false, |_| vec![]);
    assert!(got.is_empty());
    assert_eq!(n.server.peer(), None);
}
