use super::*;

/// An IPv4 (or IPv6) TCP packet: ACK plus `flags`, `payload` bytes of `fill`, checksums set.
fn tcp(v4: bool, seq: u32, flags: u8, payload: &[u8], id: u16) -> Vec<u8> {
    let ipl = if v4 { 20 } else { 40 };
    // TCP header with 12 bytes of options (NOP, NOP, timestamps).
    let thl = 32;
    let mut p = vec![0u8; ipl + thl + payload.len()];
    if v4 {
        p[0] = 0x45;
        p[1] = 0x02; // ECT(0)
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = PROTO_TCP;
        p[12..16].copy_from_slice(&[10, 77, 0, 2]);
        p[16..20].copy_from_slice(&[10, 77, 0, 1]);
    } else {
        p[0] = 0x60;
        p[1] = 0x0a;
        p[2] = 0xbc;
        p[3] = 0xde;
        p[6] = PROTO_TCP;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 2;
        p[24] = 0xfd;
        p[39] = 1;
    }
    let t = ipl;
    p[t..t + 2].copy_from_slice(&40000u16.to_be_bytes());
    p[t + 2..t + 4].copy_from_slice(&5201u16.to_be_bytes());
    p[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
    p[t + 8..t + 12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    p[t + 12] = ((thl / 4) as u8) << 4;
    p[t + 13] = TCP_ACK | flags;
    p[t + 14..t + 16].copy_from_slice(&502u16.to_be_bytes());
    p[t + 20..t + 32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    p[ipl + thl..].copy_from_slice(payload);
    let ip = parse_ip(&p).unwrap();
    let n = p.len();
    set_ip_len(&mut p, ip, n);
    tcp_checksum(&mut p, ip);
    p
}

/// The checksums of `p` verify (IPv4 header; TCP with its pseudo header).
fn checksums_ok(p: &[u8]) -> bool {
    let ip = parse_ip(p).unwrap();
    let ip_ok = !ip.v4 || fold(sum_words(0, &p[..ip.hl])) == 0xffff;
    ip_ok && fold(sum_words(pseudo_sum(p, ip, p.len() - ip.hl), &p[ip.hl..])) == 0xffff
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The IPv4 header checksum of the usual worked example (RFC 1071 style, Wikipedia's
/// "IPv4 header checksum" packet): 0xb861.
#[test]
fn ipv4_header_checksum_matches_hand_checked_bytes() {
    let mut h = [
        0x45, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    set_ip_len(&mut h, Ip { v4: true, hl: 20 }, 0x73);
    assert_eq!(&h[2..4], &[0x00, 0x73]);
    assert_eq!(&h[10..12], &[0xb8, 0x61]);
}

#[test]
fn vnet_header_fields() {
    let h = VnetHdr {
        flags: 1,
        gso_type: 4,
        hdr_len: 72,
        gso_size: 1368,
        csum_start: 40,
        csum_offset: 16,
    };
    let mut b = [0u8; VNET_HDR_LEN];
    h.emit(&mut b);
    // Host byte order (little endian on x86-64).
    #[cfg(target_endian = "little")]
    assert_eq!(b, [1, 4, 72, 0, 0x58, 0x05, 40, 0, 16, 0]);
    assert_eq!(VnetHdr::parse(&b), Some(h));
    assert_eq!(VnetHdr::parse(&b[..9]), None);
}

/// A TSO packet from the kernel: headers of the first segment, `payload` bytes, IP length of
/// the whole, partial checksum.
fn tso(v4: bool, seq: u32, flags: u8, data: &[u8], mss: u16) -> Vec<u8> {
    let p = tcp(v4, seq, flags, data, 100);
    let ip = parse_ip(&p).unwrap();
    let mut out = vec![0u8; VNET_HDR_LEN];
    VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: if v4 { GSO_TCPV4 } else { GSO_TCPV6 },
        hdr_len: (ip.hl + 32) as u16,
        gso_size: mss,
        csum_start: ip.hl as u16,
        csum_offset: 16,
    }
    .emit(&mut out);
    out.extend_from_slice(&p);
    out
}

fn split_all(read: &mut [u8]) -> Vec<Vec<u8>> {
    let mut out = vec![0u8; 9216];
    let mut segs = Vec::new();
    split(read, &mut out, 5, |b, n| segs.push(b[5..5 + n].to_vec())).unwrap();
    segs
}

/// A TSO packet of 3.5 segments becomes the four packets TCP would have sent: sequence
/// numbers, lengths, IPv4 ids, FIN/PSH only on the last, CWR only on the first, every
/// checksum valid, the payload in order.
#[test]
fn tso_packets_split_into_segments() {
    for v4 in [true, false] {
        let data = payload(1000 * 3 + 500);
        let mut read = tso(v4, 4_294_966_000, TCP_PSH | TCP_FIN | TCP_CWR, &data, 1000);
        let segs = split_all(&mut read);
        assert_eq!(segs.len(), 4);
        let ipl = if v4 { 20 } else { 40 };
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let want = tcp(
                v4,
                4_294_966_000u32.wrapping_add(1000 * i as u32),
                match i {
                    0 => TCP_CWR,
                    3 => TCP_PSH | TCP_FIN,
                    _ => 0,
                },
                &data[1000 * i..(1000 * (i + 1)).min(data.len())],
                100 + i as u16,
            );
            assert_eq!(s, &want, "segment {i} v4={v4}");
            assert!(checksums_ok(s));
            joined.extend_from_slice(&s[ipl + 32..]);
        }
        assert_eq!(joined, data);
    }
}

/// A packet with a partial checksum (here UDP) gets it completed; one without passes as is.
#[test]
fn partial_checksums_are_completed() {
    // IPv4 UDP 10.0.0.1:1000 -> 10.0.0.2:2000, payload "abcdef".
    let mut p = vec![
        0x45, 0, 0, 34, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x03, 0xe8, 0x07,
        0xd0, 0, 14, 0, 0, b'a', b'b', b'c', b'd', b'e', b'f',
    ];
    let ip = Ip { v4: true, hl: 20 };
    set_ip_len(&mut p, ip, 34);
    // Full checksum, computed independently: pseudo header + UDP header + data.
    let full = finish(sum_words(sum_words(0, &p[12..20]) + 17 + 14, &p[20..]));
    // What the kernel hands over: the pseudo-header sum in the field.
    let pseudo = fold(sum_words(0, &p[12..20]) + 17 + 14);
    p[26..28].copy_from_slice(&pseudo.to_be_bytes());
    let mut read = vec![0u8; VNET_HDR_LEN];
    VnetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 20,
        csum_offset: 6,
        ..Default::default()
    }
    .emit(&mut read);
    read.extend_from_slice(&p);
    let segs = split_all(&mut read);
    assert_eq!(segs.len(), 1);
    assert_eq!(&segs[0][26..28], &full.to_be_bytes());
    let mut plain = vec![0u8; VNET_HDR_LEN];
    plain.extend_from_slice(&p);
    assert_eq!(split_all(&mut plain), vec![p.clone()]);
    // A checksum offset past the end is refused, not a panic.
    read[8] = 200;
    let mut out = vec![0u8; 100];
    assert_eq!(
        split(&mut read, &mut out, 0, |_, _| {}),
        Err(OffloadError::Malformed)
    );
}

fn coalesce(pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut c = Coalescer::default();
    let mut out = Vec::new();
    let mut w = |b: &[u8]| out.push(b.to_vec());
    for p in pkts {
        c.push(p, &mut w);
    }
    c.flush(&mut w);
    out
}

/// Segments that TSO made, coalesced again, give one TSO packet, and cutting that one (what
/// the kernel does with it) gives the same segments: nothing is lost or changed on the way.
#[test]
fn coalesced_runs_split_back_into_the_same_segments() {
    for v4 in [true, false] {
        let data = payload(1200 * 5 + 17);
        let mut read = tso(v4, 77, TCP_PSH, &data, 1200);
        let segs = split_all(&mut read);
        assert_eq!(segs.len(), 6);
        let written = coalesce(&segs);
        assert_eq!(written.len(), 1, "one write for the run");
        let h = VnetHdr::parse(&written[0]).unwrap();
        assert_eq!(h.gso_type, if v4 { GSO_TCPV4 } else { GSO_TCPV6 });
        assert_eq!(usize::from(h.gso_size), 1200);
        assert_eq!(h.flags, F_NEEDS_CSUM);
        let mut again = written[0].clone();
        let mut resplit = split_all(&mut again);
        // IPv4 ids: the kernel numbers the segments of a run from the first one's id, as TCP
        // did.
        assert_eq!(resplit.len(), segs.len());
        for (a, b) in resplit.iter_mut().zip(&segs) {
            assert_eq!(a, b);
        }
    }
}

/// Only consecutive segments of one flow merge; anything else ends the run, and order is
/// kept.
#[test]
fn coalescing_keeps_flows_order_and_gaps_apart() {
    let d = payload(1000);
    let a0 = tcp(true, 0, 0, &d, 1);
    let a1 = tcp(true, 1000, 0, &d, 2);
    let a2 = tcp(true, 2000, 0, &d, 3);
    let a4 = tcp(true, 4000, 0, &d, 4);
    let mut b0 = tcp(true, 0, 0, &d, 5);
    b0[20..22].copy_from_slice(&40001u16.to_be_bytes());
    tcp_checksum(&mut b0, Ip { v4: true, hl: 20 });
    let short = tcp(true, 3000, 0, &d[..400], 6);
    let syn = {
        let mut s = tcp(true, 9, 0, &[], 7);
        s[33] = 0x02;
        s
    };
    let mut ce = tcp(true, 3000, 0, &d, 8);
    ce[1] = 0x03;
    // a0 a1 a2 | b0 | a4 (gap) | syn | ce (other TOS)
    let w = coalesce(&[
        a0.clone(),
        a1,
        a2,
        b0.clone(),
        a4.clone(),
        syn.clone(),
        ce.clone(),
    ]);
    let segs: Vec<u16> = w
        .iter()
        .map(|b| {
            let h = VnetHdr::parse(b).unwrap();
            if h.gso_type == GSO_NONE {
                1
            } else {
                ((b.len() - VNET_HDR_LEN - 52) / usize::from(h.gso_size)) as u16
            }
        })
        .collect();
    assert_eq!(segs, [3, 1, 1, 1, 1]);
    assert_eq!(&w[1][VNET_HDR_LEN..], &b0[..]);
    assert_eq!(&w[2][VNET_HDR_LEN..], &a4[..]);
    assert_eq!(&w[3][VNET_HDR_LEN..], &syn[..]);
    assert_eq!(&w[4][VNET_HDR_LEN..], &ce[..]);
    // A short segment ends a run: what follows starts another.
    let a0 = tcp(true, 0, 0, &d, 1);
    let after = tcp(true, 3400, 0, &d, 7);
    let w = coalesce(&[
        a0,
        tcp(true, 1000, 0, &d, 2),
        tcp(true, 2000, 0, &d, 3),
        short.clone(),
        after,
    ]);
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].len(), VNET_HDR_LEN + 52 + 3400);
    assert!(checksums_ok(&w[1][VNET_HDR_LEN..]));
}

/// Whatever bytes a TUN read returns, `split` does not panic.
#[test]
fn split_never_panics_on_garbage() {
    let mut out = vec![0u8; 2000];
    let mut rng = 0x1234_5678_9abc_def0u64;
    for len in 0..400 {
        let mut b: Vec<u8> = (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        if len > 1 {
            b[1] = [0, 1, 4, 0x81, 3][len % 5];
        }
        let _ = split(&mut b, &mut out, 0, |_, _| {});
        let mut c = Coalescer::default();
        c.push(&b, &mut |_| {});
    }
}
