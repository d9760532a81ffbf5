use super::*;

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

// What Linux H.Encaps produces for `encap seg6 mode encap segs fc00::e,fc00::d`: outer IPv6
// from 2001:db8::1 to fc00::e, SRH NH 41, Hdr Ext Len 4, SL 1, Last Entry 1, segments
// [fc00::d, fc00::e] (reversed), no TLVs; inner packet: 4 bytes standing in for an IPv6 packet.
fn encapsulated() -> Vec<u8> {
    let mut v = vec![
        0x60, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x2b, 0x40, // payload 44 = 40 SRH + 4
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e, //
        0x29, 0x04, 0x04, 0x01, 0x01, 0x00, 0x00, 0x00, //
        0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0d, //
        0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e, //
    ];
    v.extend_from_slice(&[0x60, 0x11, 0x22, 0x33]);
    v
}

#[test]
fn layout() {
    let p = encapsulated();
    let l = Srv6Layout::parse(&p).unwrap();
    assert_eq!(l.srh_len, 40);
    assert_eq!(l.tlv_offset, 80);
    assert_eq!(l.payload_offset, 80);
    assert_eq!(l.packet_len, 84);
    assert_eq!((l.segments_left, l.last_entry, l.next_header), (1, 1, 41));
    let inner = decapsulate(&p).unwrap();
    assert_eq!(
        inner,
        Inner {
            next_header: 41,
            range: 80..84
        }
    );
}

#[test]
fn insert_advance_remove_roundtrip() {
    let orig = encapsulated();
    let mut buf = [0u8; 256];
    buf[..orig.len()].copy_from_slice(&orig);
    let types = TlvTypes::default();
    let n = insert_source_tlv(
        &mut buf,
        orig.len(),
        types.source,
        &SourceRepr { stream: 1, esi: 7 },
    )
    .unwrap();
    assert_eq!(n, orig.len() + 8);
    // Hand-checked: payload length 52, Hdr Ext Len 5, TLV bytes, inner packet moved.
    assert_eq!(&buf[4..6], &[0x00, 0x34]);
    assert_eq!(buf[41], 5);
    assert_eq!(&buf[80..88], &[124, 6, 0, 1, 0, 0, 0, 7]);
    assert_eq!(&buf[88..92], &[0x60, 0x11, 0x22, 0x33]);
    let l = Srv6Layout::parse(&buf[..n]).unwrap();
    let h = HirtTlvs::parse(&buf[l.tlv_range()], &types).unwrap();
    assert_eq!(h.source, Some((0, SourceRepr { stream: 1, esi: 7 })));

    let da = advance_segment(&mut buf, n).unwrap();
    assert_eq!(da, a("fc00::d"));
    assert_eq!(&buf[24..40], &a("fc00::d").octets());
    assert_eq!(buf[43], 0);
    assert_eq!(
        advance_segment(&mut buf, n),
        Err(BuildError::NoSegmentsLeft)
    );

    let m = remove_tlv(&mut buf, n, types.source).unwrap().unwrap();
    assert_eq!(m, orig.len());
    let mut want = orig.clone();
    want[24..40].copy_from_slice(&a("fc00::d").octets());
    want[43] = 0;
    assert_eq!(&buf[..m], &want[..]);
    assert_eq!(remove_tlv(&mut buf, m, types.source).unwrap(), None);
}

#[test]
fn insert_errors() {
    let orig = encapsulated();
    let mut buf = vec![0u8; orig.len() + 4];
    buf[..orig.len()].copy_from_slice(&orig);
    assert_eq!(
        insert_tlv(&mut buf, orig.len(), &[0u8; 8]),
        Err(BuildError::NoRoom)
    );
    assert_eq!(
        insert_tlv(&mut buf, orig.len(), &[4u8, 1, 0]),
        Err(BuildError::Unaligned)
    );
    assert_eq!(
        insert_tlv(&mut buf, 30, &[0u8; 8]),
        Err(BuildError::Malformed)
    );
    assert_eq!(
        insert_tlv(&mut buf, 999, &[0u8; 8]),
        Err(BuildError::Malformed)
    );
}

fn header(segs: &[Ipv6Addr]) -> Srv6Header<'_> {
    Srv6Header {
        src: a("2001:db8::1"),
        segments: segs,
        segments_left: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        next_header: crate::ipv6::NEXT_HEADER_NONE,
        tag: 0,
    }
}

#[test]
fn build_repair_packet() {
    let segs = [a("fc00::d")];
    let types = TlvTypes::default();
    let repair = RepairRepr {
        stream: 2,
        info: hirt_fec::RepairInfo {
            scheme: hirt_fec::SchemeId::Rlc,
            first_esi: 10,
            nss: 5,
            stride: 1,
            repair_key: 99,
            dt: 15,
        },
        timestamp: 1234,
        payload_len: 3,
    };
    let mut buf = [0u8; 256];
    let mut b = Srv6Builder::new(&mut buf, &header(&segs)).unwrap();
    b.push_repair(types.repair, &repair).unwrap();
    let n = b.finish(&[1, 2, 3], None).unwrap();
    // 40 IPv6 + 8 SRH + 16 segment + 24 repair TLV + 3 payload; no padding needed.
    assert_eq!(n, 91);
    let l = Srv6Layout::parse(&buf[..n]).unwrap();
    assert_eq!((l.srh_len, l.next_header, l.segments_left), (48, 59, 0));
    assert_eq!(&buf[24..40], &segs[0].octets());
    let h = HirtTlvs::parse(&buf[l.tlv_range()], &types).unwrap();
    assert_eq!(h.repair, Some((0, repair)));
    assert_eq!(&buf[l.payload_range()], &[1, 2, 3]);
}

#[test]
fn build_feedback_pads_with_padn() {
    let segs = [a("fc00::e"), a("fc00::9")];
    let types = TlvTypes::default();
    let fb = FeedbackRepr {
        stream: 1,
        path_id: 0,
        kind: crate::tlv::FEEDBACK_KIND_FEC,
        timestamp_echo: 5,
        body: &[7u8; 21],
    };
    let mut buf = [0u8; 512];
    let mut b = Srv6Builder::new(
        &mut buf,
        &Srv6Header {
            segments_left: 1,
            ..header(&segs)
        },
    )
    .unwrap();
    b.push_feedback(types.feedback, &fb).unwrap();
    // An odd raw TLV forces padding (5 bytes -> 3 bytes of PadN).
    b.push_tlv(&[0x70, 3, 9, 9, 9]).unwrap();
    let n = b.finish(&[], None).unwrap();
    let l = Srv6Layout::parse(&buf[..n]).unwrap();
    assert_eq!(l.srh_len % 8, 0);
    assert_eq!(&buf[24..40], &segs[1].octets(), "DA is segment[SL]");
    let srh = l.srh(&buf[..n]);
    let tl: Vec<_> = srh.tlv_iter().map(|t| t.unwrap()).collect();
    assert_eq!(tl.last().unwrap().kind, crate::srh::TLV_PADN);
    assert!(tl.iter().all(|t| t.kind != crate::srh::TLV_PAD1));
    let h = HirtTlvs::parse(&buf[l.tlv_range()], &types).unwrap();
    assert_eq!(h.feedback.unwrap().1, fb);
}

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

#[test]
fn auth_and_rfc_hmac_detect_tampering() {
    let segs = [a("fc00::d"), a("fc00::e")];
    let types = TlvTypes::default();
    let auth = Auth {
        tlv_type: types.auth,
        key_id: 7,
        key: KEY,
        seq: 42,
        rfc8754_hmac: true,
    };
    let mut buf = [0u8; 512];
    let mut b = Srv6Builder::new(
        &mut buf,
        &Srv6Header {
            segments_left: 1,
            ..header(&segs)
        },
    )
    .unwrap();
    b.push_source(types.source, &SourceRepr { stream: 1, esi: 3 })
        .unwrap();
    let n = b.finish(b"repair-bytes", Some(&auth)).unwrap();
    let pkt = &buf[..n];
    assert_eq!(pkt[45] & FLAG_HMAC, FLAG_HMAC);
    let lookup = |id: u32| (id == 7).then_some(KEY);
    assert_eq!(
        verify_auth(pkt, &types, lookup),
        Ok(AuthRepr { key_id: 7, seq: 42 })
    );
    assert_eq!(verify_rfc8754_hmac(pkt, lookup), Ok(7));
    assert_eq!(
        verify_auth(pkt, &types, |_| None),
        Err(AuthError::UnknownKey)
    );

    // Transit changes (SL, DA, hop limit, ECN) keep both valid.
    let mut t = pkt.to_vec();
    advance_segment(&mut t, n).unwrap();
    t[7] = 3;
    t[1] |= 0x30;
    assert!(verify_auth(&t, &types, lookup).is_ok());
    assert!(verify_rfc8754_hmac(&t, lookup).is_ok());

    // Any payload, TLV, segment or source change breaks the auth MAC.
    for at in [n - 1, 83, 100, 50, 10] {
        let mut t = pkt.to_vec();
        t[at] ^= 1;
        assert_eq!(
            verify_auth(&t, &types, lookup),
            Err(AuthError::BadMac),
            "byte {at}"
        );
    }
    // The RFC HMAC covers source and segments but not the payload.
    let mut t = pkt.to_vec();
    t[10] ^= 1;
    assert_eq!(verify_rfc8754_hmac(&t, lookup), Err(AuthError::BadMac));
    let mut t = pkt.to_vec();
    t[n - 1] ^= 1;
    assert!(verify_rfc8754_hmac(&t, lookup).is_ok());
}

#[test]
fn sign_existing_packet() {
    let orig = encapsulated();
    let types = TlvTypes::default();
    let mut buf = [0u8; 512];
    buf[..orig.len()].copy_from_slice(&orig);
    let n = insert_source_tlv(
        &mut buf,
        orig.len(),
        types.source,
        &SourceRepr { stream: 0, esi: 1 },
    )
    .unwrap();
    let auth = Auth {
        tlv_type: types.auth,
        key_id: 1,
        key: KEY,
        seq: 1,
        rfc8754_hmac: false,
    };
    let n = sign(&mut buf, n, &auth).unwrap();
    assert_eq!(n, orig.len() + 8 + 32);
    assert_eq!(
        buf[45] & FLAG_HMAC,
        0,
        "H flag only with a real RFC 8754 HMAC"
    );
    let lookup = |_| Some(KEY);
    assert_eq!(verify_auth(&buf[..n], &types, lookup).unwrap().seq, 1);
    assert_eq!(
        verify_rfc8754_hmac(&buf[..n], lookup),
        Err(AuthError::Missing)
    );
    // Removing the auth TLV gives back the unsigned packet.
    let m = remove_tlv(&mut buf, n, types.auth).unwrap().unwrap();
    assert_eq!(
        verify_auth(&buf[..m], &types, lookup),
        Err(AuthError::Missing)
    );
}

/// RFC 8754 HMAC known answer computed independently with Python's hmac module over the text
/// src(2001:db8::1) | last entry 0 | flags 0x08 | key id 7 | fc00::d, key "0123...cdef" x2.
#[test]
fn rfc8754_hmac_known_answer() {
    let segs = [a("fc00::d")];
    let types = TlvTypes::default();
    let auth = Auth {
        tlv_type: types.auth,
        key_id: 7,
        key: KEY,
        seq: 0,
        rfc8754_hmac: true,
    };
    let mut buf = [0u8; 256];
    let n = Srv6Builder::new(&mut buf, &header(&segs))
        .unwrap()
        .finish(&[], Some(&auth))
        .unwrap();
    let l = Srv6Layout::parse(&buf[..n]).unwrap();
    let h = HirtTlvs::parse(&buf[l.tlv_range()], &types).unwrap();
    let at = l.tlv_offset + h.hmac.unwrap();
    let t = HmacTlv::new_checked(&buf[at..l.payload_offset]).unwrap();
    assert_eq!(hex(t.hmac()), RFC_HMAC_KAT);
}

const RFC_HMAC_KAT: &str = "5cdacc013aeddd6c9c5dfd10adbcf0a79fd5f20b835c618de7728408d93ae105";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn malformed_inputs_never_panic() {
    let p = encapsulated();
    let mut x = 0x9e37_79b9u32;
    for _ in 0..2000 {
        let mut q = p.clone();
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let at = (x as usize) % q.len();
        q[at] = (x >> 8) as u8;
        let cut = (x >> 20) as usize % (q.len() + 1);
        let q = &q[..cut];
        let _ = Srv6Layout::parse(q);
        let _ = decapsulate(q);
        let _ = verify_auth(q, &TlvTypes::default(), |_| Some(KEY));
        let _ = verify_rfc8754_hmac(q, |_| Some(KEY));
        let mut buf = [0u8; 256];
        buf[..q.len()].copy_from_slice(q);
        let _ = insert_tlv(&mut buf, q.len(), &[0x7c, 6, 0, 0, 0, 0, 0, 0]);
        let _ = remove_tlv(&mut buf, q.len(), 0x7c);
        let _ = advance_segment(&mut buf, q.len());
    }
}

#[test]
fn insert_segments_steers_through_middle_sids() {
    // After the End at fc00::e: SL 0, DA fc00::d. Insert fc00::b (visit first) and fc00::c
    // (wire order [fc00::c, fc00::b]) at index 1, between the decoder and the encoder.
    let mut buf = vec![0u8; 256];
    let p = encapsulated();
    buf[..p.len()].copy_from_slice(&p);
    advance_segment(&mut buf, p.len()).unwrap();
    let n = insert_segments(&mut buf, p.len(), 1, &[a("fc00::c"), a("fc00::b")]).unwrap();
    assert_eq!(n, p.len() + 32);
    let want: Vec<u8> = [
        &[0x60u8, 0x00, 0x00, 0x00, 0x00, 0x4c, 0x2b, 0x40][..], // payload 76 = 72 SRH + 4
        &[
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
        ],
        &[0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b], // DA: first to visit
        &[0x29, 0x08, 0x04, 0x02, 0x03, 0x00, 0x00, 0x00],          // len 8, SL 2, Last Entry 3
        &[0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0d],
        &[0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c],
        &[0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b],
        &[0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e],
        &[0x60, 0x11, 0x22, 0x33],
    ]
    .concat();
    assert_eq!(&buf[..n], &want[..]);
    let l = Srv6Layout::parse(&buf[..n]).unwrap();
    assert_eq!(&buf[l.payload_range()], &[0x60, 0x11, 0x22, 0x33]);
    // Nothing to insert: unchanged.
    assert_eq!(insert_segments(&mut buf, n, 1, &[]), Ok(n));
    // Past the list, or no room.
    assert_eq!(
        insert_segments(&mut buf, n, 5, &[a("fc00::1")]),
        Err(BuildError::InvalidHeader)
    );
    let mut small = buf[..n].to_vec();
    assert_eq!(
        insert_segments(&mut small, n, 1, &[a("fc00::1")]),
        Err(BuildError::NoRoom)
    );
}
