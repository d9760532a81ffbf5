//! The UDP-mode handshake on untrusted bytes (Noise IKpsk2, `hirt_linux::udp::handshake`):
//! - selector 0: raw bytes as a datagram to the server and to a client awaiting a response;
//! - selector 1: a real initiation with the fuzzer's bytes XORed into its Noise message and a
//!   valid mac1 (so the bytes reach the Noise layer past the cheap filter), to the server;
//! - selector 2: the same for the server's response, to the client that sent the initiation;
//! - selector 3: a run of datagrams from several sources (the rate limiter and the replay
//!   cache), each prefixed by a u8 length.
//!
//! Nothing may panic; nothing but a real exchange may yield a session.
#![no_main]

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hirt_linux::udp::handshake::{seal_mac1, Handshake, HandshakeConfig};
use hirt_linux::udp::keys::StaticKeys;
use libfuzzer_sys::fuzz_target;

/// The client's and the server's static keys and public keys, derived once (scalar
/// multiplications dominate an iteration otherwise).
fn keys() -> &'static (StaticKeys, StaticKeys, [u8; 32], [u8; 32]) {
    static KEYS: OnceLock<(StaticKeys, StaticKeys, [u8; 32], [u8; 32])> = OnceLock::new();
    KEYS.get_or_init(|| {
        let (c, s) = (
            StaticKeys::well_known(b"fuzz", false),
            StaticKeys::well_known(b"fuzz", true),
        );
        let (cp, sp) = (c.public(), s.public());
        (c, s, cp, sp)
    })
}

fn pair() -> (Handshake, Handshake) {
    let cfg = HandshakeConfig {
        retry: Duration::ZERO,
        ..HandshakeConfig::default()
    };
    let (c, s, _, _) = keys();
    (
        Handshake::new(c.clone(), true, cfg.clone()),
        Handshake::new(s.clone(), false, cfg),
    )
}

fn xor_into(msg: &mut [u8], bytes: &[u8]) {
    // Type byte and mac1 stay; the Noise message in between takes the fuzzer's bytes.
    let end = msg.len().saturating_sub(16);
    for (m, b) in msg[1..end].iter_mut().zip(bytes) {
        *m ^= b;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let (mut client, mut server) = pair();
    let (_, _, client_pub, server_pub) = keys();
    let (client_pub, server_pub) = (*client_pub, *server_pub);
    match sel % 4 {
        0 => {
            let _ = server.handle(rest, ip, now);
            let _ = client.poll_initiation(now, None);
            let _ = client.handle(rest, ip, now);
            assert!(client.sending().is_none());
        }
        1 => {
            let mut init = client.poll_initiation(now, None).unwrap();
            xor_into(&mut init, rest);
            seal_mac1(&mut init, &server_pub);
            let r = server.handle(&init, ip, now);
            if rest.iter().take(init.len() - 17).any(|&b| b != 0) {
                assert!(r.is_err(), "a changed initiation was accepted");
            }
        }
        2 => {
            let init = client.poll_initiation(now, None).unwrap();
            let Ok(Some(mut resp)) = server.handle(&init, ip, now) else {
                return;
            };
            xor_into(&mut resp, rest);
            seal_mac1(&mut resp, &client_pub);
            let r = client.handle(&resp, ip, now);
            if rest.iter().take(resp.len() - 17).any(|&b| b != 0) {
                assert!(r.is_err(), "a changed response was accepted");
            }
        }
        _ => {
            let mut rest = rest;
            let mut t = now;
            while let Some((&n, tail)) = rest.split_first() {
                let n = (n as usize).min(tail.len());
                let (msg, tail) = tail.split_at(n);
                rest = tail;
                let src = IpAddr::from([192, 0, 2, msg.first().copied().unwrap_or(0) & 7]);
                let mut m = msg.to_vec();
                if m.len() > 16 && m[0] == 3 {
                    seal_mac1(&mut m, &server_pub);
                }
                let _ = server.handle(&m, src, t);
                t += Duration::from_millis(u64::from(n as u8 & 15));
            }
            assert!(
                server.sending().is_none(),
                "a session without its confirmation"
            );
        }
    }
});
