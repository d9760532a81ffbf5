//! The dataplane's receive paths on untrusted bytes:
//! - selector 0: a raw datagram at a UDP-mode server (AEAD open must refuse it without panicking);
//! - selector 1: frames sealed with the session's key (so the fuzzer reaches the frame parser,
//!   the address learning and the decoder), each prefixed by a u16 length;
//! - selector 2: a packet at an SRv6 node owning both SIDs (SRH/TLV parsing, TLV removal,
//!   repair/feedback handling, decapsulation), or as a `--kernel-sources` ring record: a source
//!   the XDP program tagged, or one the kernel delivered.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hirt_core::FecMode;
use hirt_linux::config::CoderSettings;
use hirt_linux::crypto::{Sealer, HEADER_LEN, OVERHEAD};
use hirt_linux::engine::Transmit;
use hirt_linux::metrics::Metrics;
use hirt_linux::srv6::{Behavior, Egress, NodeConfig, Srv6Node, BUF_LEN};
use hirt_linux::udp::handshake::HandshakeConfig;
use hirt_linux::udp::keys::StaticKeys;
use hirt_linux::udp::{PeerConfig, Role, UdpPeer};
use libfuzzer_sys::fuzz_target;

/// The server's static keys, derived once (the scalar multiplication would otherwise take a
/// tenth of an iteration).
fn keys() -> StaticKeys {
    static KEYS: OnceLock<StaticKeys> = OnceLock::new();
    KEYS.get_or_init(|| StaticKeys::well_known(b"fuzz", true))
        .clone()
}

fn server(now: Instant) -> UdpPeer {
    let cfg = PeerConfig {
        role: Role::Server,
        keys: keys(),
        handshake: HandshakeConfig::default(),
        encrypt: true,
        fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).unwrap(),
        stream: 0,
        mss_mtu: Some(1400),
        ecn_ce: true,
        repair_dscp: 10,
        keepalive: Duration::from_millis(100),
        remote: None,
        seed: 1,
        // In-order release on: the fuzzer reaches the hold/release paths too.
        coder: CoderSettings {
            overload_threshold: 1.0,
            in_order: Some(Duration::from_millis(30)),
            ..CoderSettings::default()
        },
    };
    let p = UdpPeer::new(cfg, Metrics::new(2, "fuzz"), now);
    // A session without the handshake's Diffie-Hellmans (fuzz target `handshake` covers those).
    p.sessions()
        .with(|hs| hs.install_session(1, SERVER_SEND, CLIENT_SEND, now));
    p
}

const CLIENT_SEND: [u8; 32] = [0xc1; 32];
const SERVER_SEND: [u8; 32] = [0x5e; 32];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let from: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    match sel % 3 {
        0 => {
            let mut p = server(now);
            let mut buf = rest.to_vec();
            let _ = p.handle_udp(
                &mut buf,
                from,
                0,
                now,
                &mut |_: Transmit<'_, SocketAddr>| {},
                &mut |_| {},
            );
        }
        1 => {
            let mut p = server(now);
            let mut sealer = Sealer::new(&CLIENT_SEND, true, 1, 1);
            let mut rest = rest;
            let mut t = now;
            while rest.len() >= 2 {
                let n = (u16::from_be_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
                let frame = &rest[2..2 + n];
                rest = &rest[2 + n..];
                let mut buf = vec![0u8; n + OVERHEAD];
                buf[HEADER_LEN..HEADER_LEN + n].copy_from_slice(frame);
                let len = sealer.seal(&mut buf, n);
                buf.truncate(len);
                t += Duration::from_millis(1);
                // The selector's high bits as the outer TOS (ECN decapsulation paths).
                let _ = p.handle_udp(
                    &mut buf,
                    from,
                    sel >> 2,
                    t,
                    &mut |_: Transmit<'_, SocketAddr>| {},
                    &mut |_| {},
                );
                p.handle_timeout(
                    t + Duration::from_millis(50),
                    &mut |_: Transmit<'_, SocketAddr>| {},
                    &mut |_| {},
                );
            }
        }
        _ => {
            let Some((&which, pkt)) = rest.split_first() else {
                return;
            };
            let enc: std::net::Ipv6Addr = "fc00:e::1".parse().unwrap();
            let dec: std::net::Ipv6Addr = "fc00:d::1".parse().unwrap();
            let cfg = NodeConfig {
                enc_sid: Some(enc),
                dec_sid: Some(dec),
                peer_dec_sid: dec,
                peer_enc_sid: enc,
                behavior: if which & 1 == 0 {
                    Behavior::End
                } else {
                    Behavior::Dt6
                },
                stream: 0,
                fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).unwrap(),
                tlv: Default::default(),
                auth: None,
                ecn_ce: true,
                repair_tclass: 0,
                seed: 1,
                coder: CoderSettings {
                    overload_threshold: 0.9,
                    in_order: Some(Duration::from_millis(30)),
                    ..CoderSettings::default()
                },
                paths: Vec::new(),
                path_cfg: Default::default(),
            };
            let Ok(mut node) = Srv6Node::new(cfg, Metrics::new(2, "fuzz")) else {
                return;
            };
            let mut buf = vec![0u8; BUF_LEN];
            let n = pkt.len().min(BUF_LEN);
            buf[..n].copy_from_slice(&pkt[..n]);
            if n >= 40 && which & 2 != 0 {
                let sid = if which & 4 == 0 { enc } else { dec };
                buf[24..40].copy_from_slice(&sid.octets());
            }
            let _ = match (which >> 3) & 3 {
                1 => node
                    .handle_tagged_source(&mut buf, n, 0, now, &mut |_: Transmit<'_, Egress>| {}),
                2 => node
                    .handle_delivered_source(&mut buf, n, now, &mut |_: Transmit<'_, Egress>| {}),
                _ => node.handle_packet(&mut buf, n, now, &mut |_: Transmit<'_, Egress>| {}),
            };
            node.handle_timeout(now + Duration::from_millis(100), &mut |_: Transmit<
                '_,
                Egress,
            >| {});
        }
    }
});
