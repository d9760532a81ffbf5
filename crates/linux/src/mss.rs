//! TCP MSS clamping for packets crossing the UDP tunnel.
//!
//! The tunnel adds outer IP + UDP + AEAD + framing, so the TUN MTU is smaller than the path MTU.
//! Hosts behind the tunnel may not learn that (PMTUD blackholes are common), so, like
//! `iptables ... -j TCPMSS --clamp-mss-to-pmtu`, hirt lowers the MSS option of every TCP SYN it
//! carries (both directions) to `tun_mtu - 40` (IPv4) / `tun_mtu - 60` (IPv6) and patches the TCP
//! checksum incrementally (RFC 1624). Everything else passes untouched; malformed packets are left
//! alone (never panics).

/// Clamps the MSS option of a TCP SYN in `pkt` (an IPv4 or IPv6 packet) to what fits `mtu`.
/// Returns true when the packet was changed.
pub fn clamp(pkt: &mut [u8], mtu: u16) -> bool {
    let Some(&first) = pkt.first() else {
        return false;
    };
    let (l4, max_mss) = match first >> 4 {
        4 => {
            if pkt.len() < 20 || pkt[9] != 6 {
                return false;
            }
            // Only first fragments carry the TCP header.
            if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff != 0 {
                return false;
            }
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            (ihl, mtu.saturating_sub(40))
        }
        // Only a TCP header right after the fixed header (no extension headers) is clamped.
        6 if pkt.len() >= 40 && pkt[6] == 6 => (40, mtu.saturating_sub(60)),
        _ => return false,
    };
    if pkt.len() < l4 + 20 {
        return false;
    }
    let tcp = &mut pkt[l4..];
    let flags = tcp[13];
    if flags & 0x02 == 0 {
        return false;
    }
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || doff > tcp.len() {
        return false;
    }
    let mut i = 20;
    while i < doff {
        match tcp[i] {
            0 => break,
            1 => i += 1,
            kind => {
                if i + 1 >= doff {
                    break;
                }
                let len = usize::from(tcp[i + 1]);
                if len < 2 || i + len > doff {
                    break;
                }
                if kind == 2 && len == 4 {
                    let old = u16::from_be_bytes([tcp[i + 2], tcp[i + 3]]);
                    if old <= max_mss {
                        return false;
                    }
                    tcp[i + 2..i + 4].copy_from_slice(&max_mss.to_be_bytes());
                    let ck = u16::from_be_bytes([tcp[16], tcp[17]]);
                    let ck = checksum_update(ck, old, max_mss);
                    tcp[16..18].copy_from_slice(&ck.to_be_bytes());
                    return true;
                }
                i += len;
            }
        }
    }
    false
}

/// RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
fn checksum_update(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Full one's-complement checksum over the IPv4 pseudo header + TCP segment.
    fn tcp4_checksum(pkt: &[u8]) -> u16 {
        let ihl = usize::from(pkt[0] & 0x0f) * 4;
        let tcp = &pkt[ihl..];
        let mut sum: u32 = 0;
        let mut add = |b: &[u8]| {
            for c in b.chunks(2) {
                let w = if c.len() == 2 {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    u16::from(c[0]) << 8
                };
                sum += u32::from(w);
            }
        };
        add(&pkt[12..20]);
        add(&[0, 6]);
        add(&(tcp.len() as u16).to_be_bytes());
        add(tcp);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn syn4(mss: u16) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 44, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
            0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xff, 0xff, 0, 0, 0,
            0, // TCP
            2, 4, 0, 0, // MSS option
        ];
        p[42..44].copy_from_slice(&mss.to_be_bytes());
        p[36..38].copy_from_slice(&[0, 0]);
        let ck = tcp4_checksum(&p);
        p[36..38].copy_from_slice(&ck.to_be_bytes());
        p
    }

    #[test]
    fn clamps_ipv4_syn_and_keeps_checksum_valid() {
        let mut p = syn4(1460);
        assert!(clamp(&mut p, 1400));
        assert_eq!(u16::from_be_bytes([p[42], p[43]]), 1360);
        assert_eq!(tcp4_checksum(&p), 0, "checksum must still verify");
        // Already small enough: untouched.
        let mut q = syn4(1200);
        let before = q.clone();
        assert!(!clamp(&mut q, 1400));
        assert_eq!(q, before);
    }

    #[test]
    fn ignores_non_syn_and_garbage() {
        let mut p = syn4(1460);
        p[33] = 0x10; // ACK only
        assert!(!clamp(&mut p, 1400));
        for len in 0..44 {
            let mut t = syn4(1460)[..len].to_vec();
            let _ = clamp(&mut t, 1400);
        }
        let mut bad = syn4(1460);
        bad[41] = 200; // option length past the header
        assert!(!clamp(&mut bad, 1400));
    }

    #[test]
    fn clamps_ipv6_syn() {
        let mut p = vec![0u8; 40 + 24];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&24u16.to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[40 + 12] = 0x60;
        p[40 + 13] = 0x02;
        p[60..64].copy_from_slice(&[2, 4, 0x05, 0xa0]);
        assert!(clamp(&mut p, 1400));
        assert_eq!(u16::from_be_bytes([p[62], p[63]]), 1340);
    }
}
