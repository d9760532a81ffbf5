#![no_main]
//! Untrusted IPv6+SRH packets through every hirt-wire SRv6 parser and editor. Properties: no
//! panic; an edit that succeeds leaves a packet that parses again; remove undoes insert.

use hirt_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use hirt_wire::srh::{SrhPacket, SrhRepr};
use hirt_wire::srv6::{self, Srv6Layout};
use hirt_wire::{HirtTlvs, TlvTypes};
use libfuzzer_sys::fuzz_target;

const KEY: &[u8] = b"fuzz-key";

fuzz_target!(|data: &[u8]| {
    let types = TlvTypes::default();
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = Ipv6Repr::parse(&p);
    }
    if let Ok(s) = SrhPacket::new_checked(data) {
        if let Ok(r) = SrhRepr::parse(&s) {
            let _ = HirtTlvs::parse(r.tlvs, &types);
        }
    }
    let _ = srv6::decapsulate(data);
    let _ = srv6::verify_auth(data, &types, |_| Some(KEY));
    let _ = srv6::verify_rfc8754_hmac(data, |_| Some(KEY));
    let Ok(l) = Srv6Layout::parse(data) else {
        return;
    };
    let _ = HirtTlvs::parse(&data[l.tlv_range()], &types);

    let mut buf = vec![0u8; data.len() + 128];
    buf[..data.len()].copy_from_slice(data);
    let src = hirt_wire::SourceRepr { stream: 1, esi: 2 };
    if let Ok(n) = srv6::insert_source_tlv(&mut buf, data.len(), types.source, &src) {
        let l2 = Srv6Layout::parse(&buf[..n]).expect("inserted packet must parse");
        assert_eq!(l2.packet_len, l.packet_len + 8);
        // Only a lone source TLV of ours is removed again byte-exactly.
        let had = HirtTlvs::parse(&data[l.tlv_range()], &types).map(|h| h.source.is_none());
        if had == Ok(true) && data.len() == l.packet_len {
            let m = srv6::remove_tlv(&mut buf, n, types.source)
                .unwrap()
                .unwrap();
            assert_eq!(&buf[..m], data);
        }
    }
    let mut b2 = buf.clone();
    if srv6::advance_segment(&mut b2, data.len()).is_ok() {
        Srv6Layout::parse(&b2[..data.len()]).expect("advanced packet must parse");
    }
    let auth = srv6::Auth {
        tlv_type: types.auth,
        key_id: 1,
        key: KEY,
        seq: 9,
        rfc8754_hmac: true,
    };
    let mut b3 = vec![0u8; data.len() + 128];
    b3[..data.len()].copy_from_slice(data);
    if let Ok(n) = srv6::sign(&mut b3, data.len(), &auth) {
        // With no auth/HMAC TLV of its own, a signed packet verifies with both MACs.
        let fresh = HirtTlvs::parse(&data[l.tlv_range()], &types)
            .map(|h| h.auth.is_none() && h.hmac.is_none());
        if fresh == Ok(true) {
            assert!(srv6::verify_auth(&b3[..n], &types, |_| Some(KEY)).is_ok());
            assert!(srv6::verify_rfc8754_hmac(&b3[..n], |_| Some(KEY)).is_ok());
        }
    }
});
