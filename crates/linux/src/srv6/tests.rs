//! Encoder and decoder nodes back to back in memory: losses, recovery, bit-exact rebuild,
//! intermediate End SIDs that change HL/TC/SL/DA, authentication.

use std::time::Duration;

use hirt_wire::srv6::{Srv6Builder, Srv6Header};

use super::*;

const ENC: &str = "fc00:e::1";
const DEC: &str = "fc00:d::1";
const MID: &str = "fc00:b::1";
const FINAL: &str = "fc00:f::1";

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn inner(i: u32) -> Vec<u8> {
    // IPv6/UDP-ish inner packet with a unique, variable-length payload.
    let plen = 8 + 20 + (i as usize * 37) % 900;
    let mut p = vec![0u8; 40 + plen];
    p[0] = 0x60;
    p[1] = 0x01; // ECT-capable bits are set below for CE tests
    p[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 63;
    p[8..24].copy_from_slice(&a("2001:db8::1").octets());
    p[24..40].copy_from_slice(&a("2001:db8::2").octets());
    for (k, b) in p[48..].iter_mut().enumerate() {
        *b = (i as usize * 31 + k) as u8;
    }
    p[48..52].copy_from_slice(&i.to_be_bytes());
    p
}

/// What Linux H.Encaps would send to the encoder SID.
fn encapsulated(segs: &[Ipv6Addr], i: u32) -> Vec<u8> {
    encapsulate(segs, &inner(i))
}

fn encapsulate(segs: &[Ipv6Addr], inner: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; BUF_LEN];
    let h = Srv6Header {
        src: a("2001:db8:ff::1"),
        segments: segs,
        segments_left: (segs.len() - 1) as u8,
        hop_limit: 63,
        traffic_class: 0x28,
        flow_label: 0x12345,
        next_header: 41,
        tag: 0,
    };
    let b = Srv6Builder::new(&mut buf, &h).unwrap();
    let n = b.finish(inner, None).unwrap();
    buf.truncate(n);
    buf
}

fn cfg(enc: bool, dec: bool, behavior: Behavior, auth: Option<AuthKey>) -> NodeConfig {
    NodeConfig {
        enc_sid: enc.then(|| a(ENC)),
        dec_sid: dec.then(|| a(DEC)),
        peer_dec_sid: a(DEC),
        peer_enc_sid: a(ENC),
        behavior,
        stream: 0,
        fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).unwrap(),
        tlv: TlvTypes::default(),
        auth,
        ecn_ce: false,
        repair_tclass: 0xb8,
        seed: 7,
        coder: CoderSettings {
            overload_threshold: 1.0,
            ..CoderSettings::default()
        },
        paths: vec![Srv6PathConfig::default()],
        path_cfg: PathManagerConfig::default(),
    }
}

struct Pair {
    enc: Srv6Node,
    dec: Srv6Node,
    em: std::sync::Arc<Metrics>,
    dm: std::sync::Arc<Metrics>,
}

fn pair(behavior: Behavior, auth: Option<AuthKey>) -> Pair {
    let em = Metrics::new(1, "enc");
    let dm = Metrics::new(1, "dec");
    Pair {
        enc: Srv6Node::new(cfg(true, false, behavior, auth.clone()), em.clone()).unwrap(),
        dec: Srv6Node::new(cfg(false, true, behavior, auth), dm.clone()).unwrap(),
        em,
        dm,
    }
}

fn da(p: &[u8]) -> Ipv6Addr {
    let mut d = [0u8; 16];
    d.copy_from_slice(&p[24..40]);
    Ipv6Addr::from(d)
}

/// A router in the tunnel: HL - 1, ECN bits changed; an End SID also advances the segment.
fn transit(p: &mut Vec<u8>) {
    p[7] -= 1;
    p[1] |= 0x10; // ECN ECT(1)
    if da(p) == a(MID) {
        let n = p.len();
        p.resize(BUF_LEN, 0);
        hirt_wire::srv6::advance_segment(p, n).unwrap();
        p.truncate(n);
    }
}

/// Runs `n` packets through; `lose(i, kind)` decides which tunnel packets are lost
/// (kind: 's' source, 'r' repair). Returns (delivered decap packets, delivered End packets).
fn run(
    p: &mut Pair,
    segs: &[Ipv6Addr],
    n: u32,
    lose: impl Fn(u32, char) -> bool,
    mut tamper: impl FnMut(&mut Vec<u8>) -> Vec<Vec<u8>>,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut now = Instant::now();
    let mut to_dec: Vec<Vec<u8>> = Vec::new();
    let mut to_enc: Vec<Vec<u8>> = Vec::new();
    let mut decap = Vec::new();
    let mut end = Vec::new();
    let (mut si, mut ri) = (0u32, 0u32);
    let mut buf = vec![0u8; BUF_LEN];
    for i in 0..n + 20 {
        if i < n {
            let pkt = encapsulated(segs, i);
            buf[..pkt.len()].copy_from_slice(&pkt);
            let mut out = Vec::new();
            p.enc
                .handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
                    let (e, b) = (t.dest, t.bytes);
                    out.push((e, b.to_vec()))
                })
                .unwrap();
            for (e, mut b) in out {
                assert_eq!(e, Egress::Kernel);
                let is_repair = b.len() > 40
                    && HirtTlvs::parse(
                        &b[Srv6Layout::parse(&b).unwrap().tlv_range()],
                        &TlvTypes::default(),
                    )
                    .unwrap()
                    .repair
                    .is_some();
                let lost = if is_repair {
                    ri += 1;
                    lose(ri - 1, 'r')
                } else {
                    si += 1;
                    lose(si - 1, 's')
                };
                if !lost {
                    transit(&mut b);
                    let extra = tamper(&mut b);
                    to_dec.push(b);
                    to_dec.extend(extra);
                }
            }
        } else {
            now += Duration::from_millis(50);
            let mut out = Vec::new();
            p.enc.handle_timeout(now, &mut |t: Transmit<'_, Egress>| {
                let (_, b) = (t.dest, t.bytes);
                out.push(b.to_vec())
            });
            for mut b in out {
                transit(&mut b);
                to_dec.push(b);
            }
        }
        for pkt in to_dec.drain(..) {
            buf[..pkt.len()].copy_from_slice(&pkt);
            let mut out = Vec::new();
            let _ = p
                .dec
                .handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
                    let (e, b) = (t.dest, t.bytes);
                    out.push((e, b.to_vec()))
                });
            for (e, b) in out {
                match e {
                    Egress::Decap => decap.push(b),
                    Egress::Kernel if da(&b) == a(ENC) => to_enc.push(b),
                    Egress::Kernel => end.push(b),
                }
            }
        }
        for pkt in to_enc.drain(..) {
            buf[..pkt.len()].copy_from_slice(&pkt);
            let _ = p
                .enc
                .handle_packet(&mut buf, pkt.len(), now, &mut |_: Transmit<'_, Egress>| {});
        }
        now += Duration::from_micros(100);
    }
    (decap, end)
}

fn check_exactly_once(delivered: &[Vec<u8>], n: u32, f: impl Fn(u32) -> Vec<u8>) {
    let mut seen = vec![0u32; n as usize];
    for d in delivered {
        let idx = (0..n)
            .find(|&i| f(i) == *d)
            .expect("delivered packet is bit-exact some original");
        seen[idx as usize] += 1;
    }
    for (i, c) in seen.iter().enumerate() {
        assert_eq!(*c, 1, "packet {i} delivered {c} times");
    }
}

#[test]
fn dt6_recovers_losses_bit_exact_and_exactly_once() {
    let mut p = pair(Behavior::Dt6, None);
    let segs = [a(DEC), a(ENC)];
    let (decap, end) = run(
        &mut p,
        &segs,
        200,
        |i, k| k == 's' && i % 13 == 5,
        |_| vec![],
    );
    assert!(end.is_empty());
    check_exactly_once(&decap, 200, inner);
    let rec =
        p.dm.stream(0)
            .recovered
            .load(std::sync::atomic::Ordering::Relaxed);
    assert!(rec >= 10, "recovered {rec}");
    assert!(
        p.em.stream(0)
            .repairs_sent
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert!(
        p.em.stream(0)
            .feedback_in
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "feedback reached the encoder"
    );
}

#[test]
fn end_behavior_rebuilds_the_outer_packet_through_a_middle_sid() {
    let mut p = pair(Behavior::End, None);
    let segs = [a(FINAL), a(DEC), a(MID), a(ENC)];
    let (decap, end) = run(
        &mut p,
        &segs,
        120,
        |i, k| k == 's' && i % 11 == 3,
        |_| vec![],
    );
    assert!(decap.is_empty());
    // Reference: the packet as it arrives at FINAL when nothing is lost.
    let mut q = pair(Behavior::End, None);
    let (_, reference) = run(&mut q, &segs, 120, |_, _| false, |_| vec![]);
    assert_eq!(reference.len(), 120);
    assert_eq!(end.len(), 120);
    for r in &reference {
        assert_eq!(da(r), a(FINAL));
        assert_eq!(
            end.iter().filter(|e| *e == r).count(),
            1,
            "recovered packets are bit-exact"
        );
    }
    assert!(
        p.dm.stream(0)
            .recovered
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
}

#[test]
fn forged_and_replayed_repairs_change_nothing() {
    let key = AuthKey {
        key_id: 9,
        key: b"k3y".to_vec(),
        rfc8754: false,
        sources: false,
    };
    let mut p = pair(Behavior::Dt6, Some(key.clone()));
    let segs = [a(DEC), a(ENC)];
    let (decap, _) = run(
        &mut p,
        &segs,
        150,
        |i, k| k == 's' && i % 10 == 4,
        |b| {
            let l = Srv6Layout::parse(b).unwrap();
            let t = HirtTlvs::parse(&b[l.tlv_range()], &TlvTypes::default()).unwrap();
            if t.repair.is_none() {
                return vec![];
            }
            // A replay of the genuine repair, and a forgery with a flipped payload byte.
            let replay = b.clone();
            let mut forged = b.clone();
            let last = forged.len() - 1;
            forged[last] ^= 0xff;
            vec![replay, forged]
        },
    );
    check_exactly_once(&decap, 150, inner);
    let c = p.dm.stream(0);
    assert!(c.auth_failures.load(std::sync::atomic::Ordering::Relaxed) > 10);
    assert!(c.recovered.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // A node with another key refuses everything.
    let mut other = pair(Behavior::Dt6, Some(key.clone()));
    other.dec = Srv6Node::new(
        cfg(
            false,
            true,
            Behavior::Dt6,
            Some(AuthKey {
                key: b"other".to_vec(),
                ..key
            }),
        ),
        other.dm.clone(),
    )
    .unwrap();
    let (decap2, _) = run(
        &mut other,
        &segs,
        50,
        |i, k| k == 's' && i % 10 == 4,
        |_| vec![],
    );
    assert_eq!(decap2.len(), 45, "nothing recovered with a wrong key");
}

#[test]
fn garbage_never_panics_and_is_counted() {
    let mut p = pair(Behavior::Dt6, None);
    let mut buf = vec![0u8; BUF_LEN];
    let good = encapsulated(&[a(DEC), a(ENC)], 1);
    let now = Instant::now();
    for len in 0..good.len() {
        buf[..len].copy_from_slice(&good[..len]);
        let _ = p
            .enc
            .handle_packet(&mut buf, len, now, &mut |_: Transmit<'_, Egress>| {});
        buf[..len].copy_from_slice(&good[..len]);
        if len >= 40 {
            buf[24..40].copy_from_slice(&a(DEC).octets());
        }
        let _ = p
            .dec
            .handle_packet(&mut buf, len, now, &mut |_: Transmit<'_, Egress>| {});
    }
    assert!(
        p.em.global
            .malformed
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
}

#[test]
fn ce_marking_only_touches_ect_packets() {
    let mut v6 = inner(1);
    v6[1] = 0x10; // ECT(1) in the low bits of TC
    mark_ce(&mut v6);
    assert_eq!(traffic_class(&v6) & 3, 3);
    let mut not_ect = inner(1);
    not_ect[1] = 0;
    mark_ce(&mut not_ect);
    assert_eq!(traffic_class(&not_ect) & 3, 0);
}

#[test]
fn behavior_parsing() {
    assert_eq!("dt6".parse::<Behavior>().unwrap(), Behavior::Dt6);
    assert_eq!(
        "dx6:2001:db8::9".parse::<Behavior>().unwrap(),
        Behavior::Dx6(a("2001:db8::9"))
    );
    assert!("dx6:nope".parse::<Behavior>().is_err());
    assert!("x".parse::<Behavior>().is_err());
}

#[test]
fn decoder_workers_steer_by_stream_through_shared_state() {
    // Two encoder workers (streams 0 and 1) and two decoder workers; the "kernel" hands every
    // tunnel packet to a decoder worker at random, not the one owning its stream.
    let em = Metrics::new(2, "enc");
    let dm = Metrics::new(2, "dec");
    let ecfg = cfg(true, false, Behavior::Dt6, None);
    let dcfg = cfg(false, true, Behavior::Dt6, None);
    let es = Shared::new(&ecfg, 2, 2);
    let ds = Shared::new(&dcfg, 2, 2);
    let mut encs: Vec<Srv6Node> = (0..2)
        .map(|i| {
            Srv6Node::with_shared(
                NodeConfig {
                    stream: i,
                    ..ecfg.clone()
                },
                em.clone(),
                es.clone(),
            )
        })
        .collect();
    let mut decs: Vec<Srv6Node> = (0..2)
        .map(|i| {
            Srv6Node::with_shared(
                NodeConfig {
                    stream: i,
                    ..dcfg.clone()
                },
                dm.clone(),
                ds.clone(),
            )
        })
        .collect();
    let segs = [a(DEC), a(ENC)];
    let now = Instant::now();
    let mut buf = vec![0u8; BUF_LEN];
    let mut delivered = Vec::new();
    let mut k = 0u32;
    for i in 0..400u32 {
        let pkt = encapsulated(&segs, i);
        buf[..pkt.len()].copy_from_slice(&pkt);
        let mut out = Vec::new();
        encs[(i % 2) as usize]
            .handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
                let (_, b) = (t.dest, t.bytes);
                out.push(b.to_vec())
            })
            .unwrap();
        for b in out {
            k += 1;
            if k % 17 == 5 {
                continue; // lost
            }
            buf[..b.len()].copy_from_slice(&b);
            let w = (k.wrapping_mul(2654435761) >> 7) as usize % 2;
            let _ =
                decs[w].handle_packet(&mut buf, b.len(), now, &mut |t: Transmit<'_, Egress>| {
                    let (e, d) = (t.dest, t.bytes);
                    if e == Egress::Decap {
                        delivered.push(d.to_vec())
                    }
                });
        }
    }
    // Flush: time-driven repairs of both encoder workers.
    let later = now + Duration::from_millis(200);
    for e in encs.iter_mut() {
        let mut out = Vec::new();
        e.handle_timeout(later, &mut |t: Transmit<'_, Egress>| {
            let (_, b) = (t.dest, t.bytes);
            out.push(b.to_vec())
        });
        for b in out {
            buf[..b.len()].copy_from_slice(&b);
            let _ =
                decs[0].handle_packet(&mut buf, b.len(), later, &mut |t: Transmit<'_, Egress>| {
                    let (e, d) = (t.dest, t.bytes);
                    if e == Egress::Decap {
                        delivered.push(d.to_vec())
                    }
                });
        }
    }
    check_exactly_once(&delivered, 400, inner);
    let rec: u64 = dm
        .streams
        .iter()
        .map(|s| s.recovered.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    assert!(rec > 10, "recovered {rec}");
    assert!(dm
        .streams
        .iter()
        .all(|s| s.recovered.load(std::sync::atomic::Ordering::Relaxed) > 0));
}

#[test]
fn authenticated_sources_recover_and_forged_sources_are_dropped() {
    let key = AuthKey {
        key_id: 3,
        key: b"source key".to_vec(),
        rfc8754: true,
        sources: true,
    };
    let mut p = pair(Behavior::Dt6, Some(key.clone()));
    let segs = [a(DEC), a(ENC)];
    let mut genuine = 0u64;
    let (decap, _) = run(
        &mut p,
        &segs,
        150,
        |i, k| k == 's' && i % 10 == 4,
        |b| {
            let l = Srv6Layout::parse(b).unwrap();
            let t = HirtTlvs::parse(&b[l.tlv_range()], &TlvTypes::default()).unwrap();
            if t.source.is_none() {
                return vec![];
            }
            assert!(t.auth.is_some(), "sources carry the auth TLV");
            assert!(t.hmac.is_none(), "but never the RFC 8754 HMAC TLV");
            genuine += 1;
            // A replay, a forged payload, a source whose auth TLV was stripped (what an
            // attacker without the key sends), and unprotected traffic to the decoder SID.
            let replay = b.clone();
            let mut forged = b.clone();
            let last = forged.len() - 1;
            forged[last] ^= 0x5a;
            let mut stripped = b.clone();
            stripped.resize(BUF_LEN, 0);
            let n = wsrv6::remove_tlv(&mut stripped, b.len(), TlvTypes::default().auth)
                .unwrap()
                .unwrap();
            stripped.truncate(n);
            let mut bare = stripped.clone();
            bare.resize(BUF_LEN, 0);
            let n = wsrv6::remove_tlv(&mut bare, n, TlvTypes::default().source)
                .unwrap()
                .unwrap();
            bare.truncate(n);
            vec![replay, forged, stripped, bare]
        },
    );
    // Only genuine packets, each exactly once: the symbols (made before the TLVs went in) match.
    check_exactly_once(&decap, 150, inner);
    let rel = std::sync::atomic::Ordering::Relaxed;
    let c = p.dm.stream(0);
    assert!(c.recovered.load(rel) > 0, "losses recovered with auth TLVs");
    let failures = c.auth_failures.load(rel) + p.dm.global.auth_failures.load(rel);
    assert_eq!(
        failures,
        4 * genuine,
        "every forged/replayed/bare source counted"
    );
    assert_eq!(p.dm.global.unprotected.load(rel), 0);

    // Without the flag the same forgeries would have been delivered: the check is the flag's.
    let open = AuthKey {
        sources: false,
        ..key.clone()
    };
    let mut q = pair(Behavior::Dt6, Some(open));
    let mut forged_delivered = 0;
    let mut buf = vec![0u8; BUF_LEN];
    let now = Instant::now();
    let pkt = encapsulated(&segs, 1);
    buf[..pkt.len()].copy_from_slice(&pkt);
    let mut out = Vec::new();
    q.enc
        .handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
            let (_, b) = (t.dest, t.bytes);
            out.push(b.to_vec())
        })
        .unwrap();
    let src = out.remove(0);
    buf[..src.len()].copy_from_slice(&src);
    let _ = q
        .dec
        .handle_packet(&mut buf, src.len(), now, &mut |t: Transmit<'_, Egress>| {
            let (e, _) = (t.dest, t.bytes);
            forged_delivered += (e == Egress::Decap) as u32
        });
    assert_eq!(
        forged_delivered, 1,
        "no auth TLV on sources without the flag"
    );

    // A decoder that requires it drops what that encoder sends.
    let mut r = pair(Behavior::Dt6, Some(key));
    buf[..src.len()].copy_from_slice(&src);
    let mut delivered = 0;
    let res = r
        .dec
        .handle_packet(&mut buf, src.len(), now, &mut |_: Transmit<'_, Egress>| {
            delivered += 1
        });
    assert_eq!(res, Err(Drop::Auth));
    assert_eq!(delivered, 0);
    assert_eq!(r.dm.stream(0).auth_failures.load(rel), 1);
}

#[test]
fn kernel_link_local_traffic_is_not_counted_as_malformed() {
    let mut p = pair(Behavior::Dt6, None);
    let mut buf = vec![0u8; BUF_LEN];
    let now = Instant::now();
    // An MLDv2 report as the kernel writes it on a fresh device: hop-by-hop, to ff02::16.
    let mut mld = vec![0u8; 76];
    mld[0] = 0x60;
    mld[4..6].copy_from_slice(&36u16.to_be_bytes());
    mld[6] = 0; // hop-by-hop
    mld[7] = 1;
    mld[24..40].copy_from_slice(&a("ff02::16").octets());
    mld[40] = 58;
    mld[48] = 143;
    // An IPv4 packet and a router solicitation to ff02::2.
    let mut v4 = vec![0u8; 40];
    v4[0] = 0x45;
    let mut rs = vec![0u8; 48];
    rs[0] = 0x60;
    rs[6] = 58;
    rs[24..40].copy_from_slice(&a("ff02::2").octets());
    rs[40] = 133;
    // An ICMPv6 Packet Too Big about one of our repairs, addressed to our SID.
    let mut ptb = vec![0u8; 48];
    ptb[0] = 0x60;
    ptb[6] = 58;
    ptb[24..40].copy_from_slice(&a(DEC).octets());
    ptb[40] = 2;
    for pkt in [&mld, &v4, &rs, &ptb] {
        buf[..pkt.len()].copy_from_slice(pkt);
        let r = p
            .dec
            .handle_packet(&mut buf, pkt.len(), now, &mut |_: Transmit<'_, Egress>| {
                panic!("nothing is emitted")
            });
        assert_eq!(r, Err(Drop::NotOurs));
    }
    let rel = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(p.dm.global.malformed.load(rel), 0);
    assert_eq!(p.dm.global.not_ours.load(rel), 4);
    // A truncated packet to our SID still is malformed.
    let good = encapsulated(&[a(DEC), a(ENC)], 1);
    buf[..50].copy_from_slice(&good[..50]);
    buf[24..40].copy_from_slice(&a(DEC).octets());
    let _ = p
        .dec
        .handle_packet(&mut buf, 50, now, &mut |_: Transmit<'_, Egress>| {});
    assert_eq!(p.dm.global.malformed.load(rel), 1);
}

#[test]
fn a_saturated_worker_skips_repairs_but_forwards_every_source() {
    let rel = std::sync::atomic::Ordering::Relaxed;
    let em = Metrics::new(1, "enc");
    let mut c = cfg(true, false, Behavior::Dt6, None);
    c.coder.overload_threshold = 0.9;
    let mut enc = Srv6Node::new(c, em.clone()).unwrap();
    let segs = [a(DEC), a(ENC)];
    let mut buf = vec![0u8; BUF_LEN];
    let now = Instant::now();
    let mut send = |enc: &mut Srv6Node, from: u32, n: u32| {
        let (mut sources, mut repairs) = (0, 0);
        for i in from..from + n {
            let pkt = encapsulated(&segs, i);
            buf[..pkt.len()].copy_from_slice(&pkt);
            enc.handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
                let (_, b) = (t.dest, t.bytes);
                let l = Srv6Layout::parse(b).unwrap();
                let t = HirtTlvs::parse(&b[l.tlv_range()], &TlvTypes::default()).unwrap();
                if t.repair.is_some() {
                    repairs += 1
                } else {
                    sources += 1
                }
            })
            .unwrap();
        }
        (sources, repairs)
    };
    // Fully busy (load 1.0 > 0.9): skip probability 1, every source still forwarded.
    enc.coder().set_cpu_load(1.0);
    assert_eq!(em.stream(0).worker_load_ppm.load(rel), 1_000_000);
    let (s, r) = send(&mut enc, 0, 100);
    assert_eq!((s, r), (100, 0));
    enc.coder().publish_stats();
    assert!(em.stream(0).overload_skips.load(rel) >= 20, "skips counted");
    // Below the threshold: repairs again (fixed step 4 -> ~25 per 100 sources).
    enc.coder().set_cpu_load(0.5);
    let (s, r) = send(&mut enc, 100, 100);
    assert_eq!(s, 100);
    assert!(r >= 20, "repairs {r}");
    // Threshold 1.0 switches it off even at full load.
    let mut c = cfg(true, false, Behavior::Dt6, None);
    c.coder.overload_threshold = 1.0;
    let mut off = Srv6Node::new(c, Metrics::new(1, "enc")).unwrap();
    off.coder().set_cpu_load(1.0);
    let (_, r) = send(&mut off, 0, 100);
    assert!(r >= 20, "repairs {r}");
}

#[test]
fn a_saturated_decoder_leaves_repairs_unsolved() {
    let rel = std::sync::atomic::Ordering::Relaxed;
    let mut p = pair(Behavior::Dt6, None);
    let mut c = cfg(false, true, Behavior::Dt6, None);
    c.coder.overload_threshold = 0.5;
    p.dec = Srv6Node::new(c, p.dm.clone()).unwrap();
    p.dec.coder().set_cpu_load(1.0);
    let segs = [a(DEC), a(ENC)];
    let (decap, _) = run(
        &mut p,
        &segs,
        100,
        |i, k| k == 's' && i % 10 == 4,
        |_| vec![],
    );
    assert_eq!(decap.len(), 90, "sources delivered, nothing recovered");
    p.dec.coder().publish_stats();
    assert_eq!(p.dm.stream(0).recovered.load(rel), 0);
    assert!(p.dm.stream(0).overload_skips.load(rel) > 0);
}

/// Cost of `--auth-sources` per packet through an encoder and a decoder node (no I/O), printed
/// for docs/results/2026-dataplane-srv6.md: `cargo test -p hirt-linux --release --lib auth_sources_cost --
/// --ignored --nocapture`. Asserts nothing about time.
#[test]
#[ignore]
fn auth_sources_cost() {
    let segs = [a(DEC), a(ENC)];
    let pkts: Vec<Vec<u8>> = (0..64).map(|i| encapsulated(&segs, 1000 + i)).collect();
    for sources in [false, true] {
        let key = AuthKey {
            key_id: 1,
            key: b"0123456789abcdef0123456789abcdef".to_vec(),
            rfc8754: false,
            sources,
        };
        let mut c = cfg(true, false, Behavior::Dt6, Some(key.clone()));
        c.fec = FecMode::parse_with_window("none", 16).unwrap();
        let mut enc = Srv6Node::new(c, Metrics::new(1, "e")).unwrap();
        let mut c = cfg(false, true, Behavior::Dt6, Some(key));
        c.fec = FecMode::parse_with_window("none", 16).unwrap();
        let mut dec = Srv6Node::new(c, Metrics::new(1, "d")).unwrap();
        let mut buf = vec![0u8; BUF_LEN];
        let mut mid = vec![0u8; BUF_LEN];
        let now = Instant::now();
        let n = 100_000;
        let (mut bytes, mut delivered) = (0usize, 0usize);
        let t = std::time::Instant::now();
        for i in 0..n {
            let p = &pkts[i % pkts.len()];
            buf[..p.len()].copy_from_slice(p);
            let mut m = 0;
            let _ = enc.handle_packet(&mut buf, p.len(), now, &mut |t: Transmit<'_, Egress>| {
                let (_, b) = (t.dest, t.bytes);
                mid[..b.len()].copy_from_slice(b);
                m = b.len();
            });
            bytes += p.len();
            let _ = dec.handle_packet(&mut mid, m, now, &mut |t: Transmit<'_, Egress>| {
                let (e, _) = (t.dest, t.bytes);
                delivered += (e == Egress::Decap) as usize
            });
        }
        let dt = t.elapsed();
        assert_eq!(delivered, n);
        eprintln!(
            "auth_sources={sources}: {:.2} us per packet (encoder + decoder), mean {} B",
            dt.as_secs_f64() * 1e6 / n as f64,
            bytes / n
        );
    }
}

const MID2: &str = "fc00:c::1";

/// Routes what a node emits through a network of End SIDs (MID on path 0, MID2 on path 1):
/// every packet to a middle SID is advanced until it reaches ENC or DEC. `dead`: path 0's
/// router drops everything (a silent outage). Returns (to the decoder, to the encoder).
fn network(pkts: Vec<Vec<u8>>, dead: bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut to_dec, mut to_enc) = (Vec::new(), Vec::new());
    for mut p in pkts {
        loop {
            let d = da(&p);
            if d == a(MID) && dead {
                break;
            }
            if d == a(MID) || d == a(MID2) {
                let n = p.len();
                p.resize(BUF_LEN, 0);
                hirt_wire::srv6::advance_segment(&mut p, n).unwrap();
                p.truncate(n);
                continue;
            }
            if d == a(DEC) {
                to_dec.push(p);
            } else if d == a(ENC) {
                to_enc.push(p);
            }
            break;
        }
    }
    (to_dec, to_enc)
}

fn feed(node: &mut Srv6Node, pkts: Vec<Vec<u8>>, now: Instant) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut buf = vec![0u8; BUF_LEN];
    let (mut kernel, mut decap) = (Vec::new(), Vec::new());
    for p in pkts {
        buf[..p.len()].copy_from_slice(&p);
        let _ = node.handle_packet(
            &mut buf,
            p.len(),
            now,
            &mut |t: Transmit<'_, Egress>| match t.dest {
                Egress::Kernel => kernel.push(t.bytes.to_vec()),
                Egress::Decap => decap.push(t.bytes.to_vec()),
            },
        );
    }
    (kernel, decap)
}

/// Two segment lists (through MID, through MID2), failover: sources, repairs and probes take
/// their path's middle SID, the decoder answers probes back through it, and when path 0 goes
/// silent the encoder moves to path 1, where every later source arrives bit-exact. The path
/// id is authenticated: a probe whose path id was changed in transit is dropped.
#[test]
fn two_segment_lists_fail_over_on_silence() {
    let key = AuthKey {
        key_id: 1,
        key: b"paths".to_vec(),
        rfc8754: false,
        sources: false,
    };
    let mut ecfg = cfg(true, false, Behavior::Dt6, Some(key.clone()));
    ecfg.paths = vec![
        "sids=fc00:b::1".parse().unwrap(),
        "sids=fc00:c::1".parse().unwrap(),
    ];
    let em = Metrics::new(2, "enc");
    let dm = Metrics::new(1, "dec");
    let mut enc = Srv6Node::new(ecfg, em.clone()).unwrap();
    let mut dec = Srv6Node::new(cfg(false, true, Behavior::Dt6, Some(key)), dm.clone()).unwrap();
    let segs = [a(DEC), a(ENC)];
    let mut now = Instant::now();
    let mut dead = false;
    let mut delivered_after_switch = 0;
    let mut sent_after_switch = 0;
    let mut first_mid2_source = None;
    let mut replies_via = [0u32; 2];
    for i in 0..400u32 {
        if i == 200 {
            dead = true;
        }
        let mut out = Vec::new();
        let pkt = encapsulated(&segs, i);
        let (k, _) = feed(&mut enc, vec![pkt], now);
        for p in &k {
            let l = Srv6Layout::parse(p).unwrap();
            let t = HirtTlvs::parse(&p[l.tlv_range()], &TlvTypes::default()).unwrap();
            if t.source.is_some() {
                let d = da(p);
                assert!(
                    d == a(MID) || d == a(MID2),
                    "a source leaves to a middle SID"
                );
                if d == a(MID2) && first_mid2_source.is_none() {
                    first_mid2_source = Some(i);
                }
                if first_mid2_source.is_some() {
                    sent_after_switch += 1;
                }
            }
        }
        out.extend(k);
        if i % 5 == 0 {
            now += Duration::from_millis(5);
            let mut t = Vec::new();
            enc.handle_timeout(now, &mut |x: Transmit<'_, Egress>| t.push(x.bytes.to_vec()));
            out.extend(t);
        }
        let (to_dec, _) = network(out, dead);
        let mut back = Vec::new();
        for p in to_dec {
            let (k, decap) = feed(&mut dec, vec![p], now);
            back.extend(k);
            for d in decap {
                let id = u32::from_be_bytes([d[48], d[49], d[50], d[51]]);
                assert_eq!(d, inner(id), "bit-exact");
                if first_mid2_source.is_some_and(|f| id >= f) {
                    delivered_after_switch += 1;
                }
            }
        }
        dec.handle_timeout(now, &mut |x: Transmit<'_, Egress>| {
            back.push(x.bytes.to_vec())
        });
        for p in &back {
            let l = Srv6Layout::parse(p).unwrap();
            let t = HirtTlvs::parse(&p[l.tlv_range()], &TlvTypes::default()).unwrap();
            if let Some((_, f)) = t
                .feedback
                .filter(|(_, f)| f.kind == FEEDBACK_KIND_PROBE_REPLY)
            {
                // Back through the probe's middle SID.
                let want = if f.path_id == 0 { a(MID) } else { a(MID2) };
                assert_eq!(da(p), want, "reply of path {}", f.path_id);
                replies_via[usize::from(f.path_id)] += 1;
            }
        }
        let (_, to_enc) = network(back, dead);
        feed(&mut enc, to_enc, now);
        now += Duration::from_millis(1);
    }
    assert!(replies_via[0] > 0 && replies_via[1] > 0, "{replies_via:?}");
    let sw = first_mid2_source.expect("sources moved to path 1");
    assert!(sw >= 200, "no switch before the outage ({sw})");
    assert_eq!(
        delivered_after_switch, sent_after_switch,
        "every later source arrives"
    );
    let st = em.paths_status();
    assert_eq!(st.preferred, Some(1), "{st:?}");
    assert!(
        st.events.iter().any(|e| e.starts_with("switch 0 -> 1")),
        "{:?}",
        st.events
    );
    assert!(
        st.paths[1].delivery_bps > 0.0,
        "path 1 was measured: {st:?}"
    );
    assert_eq!(st.paths[0].state, "down", "{st:?}");
    // A probe whose path id is changed in transit fails authentication.
    let mut probe = Vec::new();
    enc.handle_timeout(now + Duration::from_secs(1), &mut |x: Transmit<
        '_,
        Egress,
    >| {
        probe.push(x.bytes.to_vec())
    });
    let (mut to_dec, _) = network(probe, false);
    let p = to_dec
        .iter_mut()
        .find(|p| {
            let l = Srv6Layout::parse(p).unwrap();
            HirtTlvs::parse(&p[l.tlv_range()], &TlvTypes::default())
                .unwrap()
                .feedback
                .is_some()
        })
        .expect("a probe");
    let l = Srv6Layout::parse(p).unwrap();
    let t = HirtTlvs::parse(&p[l.tlv_range()], &TlvTypes::default()).unwrap();
    let (off, _) = t.feedback.unwrap();
    p[l.tlv_offset + off + 4] ^= 1;
    let before = dm
        .stream(0)
        .auth_failures
        .load(std::sync::atomic::Ordering::Relaxed);
    let (k, _) = feed(&mut dec, vec![p.clone()], now);
    assert!(k.is_empty(), "no reply to a forged path id");
    assert!(
        dm.stream(0)
            .auth_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            > before
    );
}

#[test]
fn in_order_release_holds_the_flow_of_the_hole_by_the_inner_five_tuple() {
    // Packets 0-9 and 20-23 of one UDP flow, 10-19 of another; packet 7 is lost and the
    // repairs before packet 19 too, so the hole stays open while the other flow goes by: the
    // flow hash must read the inner packet behind the SRH whose TLVs the decoder removed.
    let mut dcfg = cfg(false, true, Behavior::Dt6, None);
    dcfg.coder.in_order = Some(Duration::from_millis(30));
    let dm = Metrics::new(1, "dec");
    let mut dec = Srv6Node::new(dcfg, dm.clone()).unwrap();
    let mut enc = Srv6Node::new(
        cfg(true, false, Behavior::Dt6, None),
        Metrics::new(1, "enc"),
    )
    .unwrap();
    let packet = |i: u32| {
        let mut p = inner(i);
        let port: u16 = if (10..20).contains(&i) { 2000 } else { 1000 };
        p[40..42].copy_from_slice(&port.to_be_bytes());
        p
    };
    let segs = [a(DEC), a(ENC)];
    let now = Instant::now();
    let mut buf = vec![0u8; BUF_LEN];
    let mut delivered = Vec::new();
    for i in 0..24u32 {
        let pkt = encapsulate(&segs, &packet(i));
        buf[..pkt.len()].copy_from_slice(&pkt);
        let mut out = Vec::new();
        enc.handle_packet(&mut buf, pkt.len(), now, &mut |t: Transmit<'_, Egress>| {
            out.push(t.bytes.to_vec())
        })
        .unwrap();
        for (k, mut b) in out.into_iter().enumerate() {
            let source = k == 0;
            if (source && i == 7) || (!source && i < 19) {
                continue;
            }
            transit(&mut b);
            buf[..b.len()].copy_from_slice(&b);
            let _ = dec.handle_packet(&mut buf, b.len(), now, &mut |t: Transmit<'_, Egress>| {
                if t.dest == Egress::Decap {
                    delivered.push(u32::from_be_bytes(t.bytes[48..52].try_into().unwrap()));
                }
            });
        }
    }
    let seven = delivered.iter().position(|&i| i == 7).expect("7 recovered");
    let (before, after) = delivered.split_at(seven);
    assert_eq!(
        before,
        (0..7).chain(10..20).collect::<Vec<_>>(),
        "{delivered:?}"
    );
    assert_eq!(after, [7, 8, 9, 20, 21, 22, 23], "{delivered:?}");
    dec.coder().publish_stats();
    let passed = dm
        .stream(0)
        .order_passed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(passed, 10);
}
