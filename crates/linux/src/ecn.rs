//! The ECN field of IP packets (RFC 3168) as tunnels handle it (RFC 6040): read the TOS,
//! mark CE, decapsulate the outer ECN onto the inner packet. IPv4 header checksums are patched
//! incrementally (RFC 1624).

/// RFC 6040 decapsulation (normal mode) of the outer ECN field into the inner packet: CE is
/// copied onto an ECN-capable inner packet, ECT(1) over ECT(0) is copied; CE over Not-ECT means
/// the packet must be dropped (returns false). Other combinations leave the inner packet as is.
pub fn decap_ecn(outer_tos: u8, inner: &mut [u8]) -> bool {
    let (outer, ecn) = (outer_tos & 3, inner_tos(inner) & 3);
    match (outer, ecn) {
        (3, 0) => false,
        (3, 1 | 2) => {
            set_ecn(inner, 3);
            true
        }
        (1, 2) => {
            set_ecn(inner, 1);
            true
        }
        _ => true,
    }
}

/// The TOS (IPv4) / traffic class (IPv6) byte of an IP packet; 0 for anything else.
pub fn inner_tos(pkt: &[u8]) -> u8 {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => pkt[1],
        Some(6) if pkt.len() >= 40 => (pkt[0] << 4) | (pkt[1] >> 4),
        _ => 0,
    }
}

/// Sets the ECN field of an IP packet (IPv4: header checksum patched, RFC 1624).
pub fn set_ecn(pkt: &mut [u8], ecn: u8) {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let old = u16::from_be_bytes([pkt[0], pkt[1]]);
            pkt[1] = (pkt[1] & !3) | (ecn & 3);
            let new = u16::from_be_bytes([pkt[0], pkt[1]]);
            let ck = u16::from_be_bytes([pkt[10], pkt[11]]);
            let mut sum = u32::from(!ck) + u32::from(!old) + u32::from(new);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            pkt[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        Some(6) if pkt.len() >= 40 => {
            // Traffic class = low nibble of byte 0 . high nibble of byte 1; ECN is its low two
            // bits, i.e. bits 5-4 of byte 1.
            pkt[1] = (pkt[1] & 0xcf) | ((ecn & 3) << 4);
        }
        _ => {}
    }
}

/// Sets ECN-CE on an IPv4/IPv6 packet whose ECN field says ECT(0)/ECT(1) (a recovered packet,
/// marked so the transport sees the loss).
pub fn mark_ce(pkt: &mut [u8]) {
    if matches!(inner_tos(pkt) & 3, 1 | 2) {
        set_ecn(pkt, 3);
    }
}
