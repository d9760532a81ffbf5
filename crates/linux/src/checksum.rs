//! The Internet checksum (RFC 1071) arithmetic shared by the TUN offloads (segment and IP
//! header checksums) and the tests that build frames by hand.

/// One's complement sum of `data` as big-endian 16-bit words, added to `sum` (unfolded).
pub(crate) fn sum_words(mut sum: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes(c.try_into().expect("8 bytes"));
        sum += (w >> 32) + (w & 0xffff_ffff);
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The final checksum (complemented; 0 becomes 0xffff, which means the same and is what UDP
/// needs).
pub(crate) fn finish(sum: u64) -> u16 {
    match !fold(sum) {
        0 => 0xffff,
        c => c,
    }
}
