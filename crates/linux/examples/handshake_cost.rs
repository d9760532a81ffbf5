//! CPU cost of the UDP-mode handshake and of what an attacker's datagrams cost the server
//! (single core, no sockets): a full initiation (the Diffie-Hellmans and the response), an
//! initiation refused by mac1, one refused by the token buckets, and a data-looking datagram
//! under a key phase in use (one AEAD verification) or not in use.
//!
//!     cargo run -p hirt-linux --release --example handshake_cost

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hirt_linux::engine::Transmit;
use hirt_linux::metrics::Metrics;
use hirt_linux::udp::handshake::{Handshake, HandshakeConfig, RateLimits};
use hirt_linux::udp::keys::StaticKeys;

fn per_op(n: u32, mut f: impl FnMut(u32)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let unlimited = HandshakeConfig {
        retry: Duration::ZERO,
        limits: RateLimits {
            per_source: 1e12,
            per_source_burst: 1e12,
            global: 1e12,
            global_burst: 1e12,
        },
        ..HandshakeConfig::default()
    };
    let client_keys = StaticKeys::well_known(b"cost", false);
    let server_keys = StaticKeys::well_known(b"cost", true);
    let mut client = Handshake::new(client_keys, true, unlimited.clone());
    let now = Instant::now();
    let n = 2000;
    let inits: Vec<Vec<u8>> = (0..n)
        .map(|_| client.poll_initiation(now, None).expect("due"))
        .collect();
    let ip = |i: u32| IpAddr::from((0xc633_6400u32 + (i % 250)).to_be_bytes());
    let mut server = Handshake::new(server_keys.clone(), false, unlimited.clone());
    let full = per_op(n, |i| {
        server
            .handle(&inits[i as usize], ip(i), now)
            .expect("a valid initiation");
    });
    let mut server = Handshake::new(server_keys.clone(), false, unlimited);
    let mut bad = inits[0].clone();
    bad[50] ^= 1;
    let mac = per_op(200_000, |i| {
        let _ = server.handle(&bad, ip(i), now);
    });
    let mut server = Handshake::new(server_keys.clone(), false, HandshakeConfig::default());
    // Empty the buckets of source 0 and the global one.
    for init in &inits[..100] {
        let _ = server.handle(init, ip(0), now);
    }
    let limited = per_op(200_000, |i| {
        let _ = server.handle(&inits[(i % n) as usize], ip(0), now);
    });

    // Data-looking junk at a server worker with a session in phase 0.
    let cfg = hirt_linux::udp::PeerConfig {
        role: hirt_linux::udp::Role::Server,
        keys: server_keys,
        handshake: HandshakeConfig::default(),
        encrypt: true,
        fec: hirt_core::FecMode::parse_with_window("fixed:w=16,step=4", 16).expect("a mode"),
        stream: 0,
        mss_mtu: None,
        ecn_ce: false,
        repair_dscp: 0,
        keepalive: Duration::from_secs(1),
        remote: None,
        seed: 1,
        coder: hirt_linux::config::CoderSettings::default(),
    };
    let mut peer = hirt_linux::udp::UdpPeer::new(cfg, Metrics::new(1, "cost"), now);
    peer.sessions()
        .with(|hs| hs.install_session(0, [1; 32], [2; 32], now));
    let from: SocketAddr = "198.51.100.7:5555".parse().expect("an address");
    let mut junk = |phase: u8, len: usize| {
        let mut d = vec![0x5au8; len];
        d[0] = 0x01 | (phase << 4);
        per_op(200_000, |i| {
            d[1..9].copy_from_slice(&u64::from(i).to_be_bytes());
            let _ = peer.handle_udp(
                &mut d,
                from,
                0,
                now,
                &mut |_: Transmit<'_, SocketAddr>| {},
                &mut |_| {},
            );
        })
    };
    let aead_small = junk(0, 64);
    let aead_big = junk(0, 1400);
    let no_key = junk(2, 1400);
    println!("| what the server does | µs per datagram |");
    println!("|---|---:|");
    println!("| valid initiation: Noise read + response (5 X25519) | {full:.1} |");
    println!("| initiation with a bad mac1 (one BLAKE2s) | {mac:.3} |");
    println!("| valid-mac1 initiation over the token buckets | {limited:.3} |");
    println!("| data-looking junk, phase in use, 64 bytes (AEAD verify fails) | {aead_small:.3} |");
    println!("| data-looking junk, phase in use, 1400 bytes (AEAD verify fails) | {aead_big:.3} |");
    println!("| data-looking junk, phase not in use, 1400 bytes | {no_key:.3} |");
}
