//! How a variable-length source symbol is protected: `[len: u16 BE][data][zero padding]`, as
//! RFC 8681 §4.1's ADUI (without the optional flow id). A repair payload is as long as the longest
//! padded symbol it covers; recovering it yields the length, then the data.
//!
//! Why the length travels inside the code: source packets of one window differ in size, and a
//! repair must be as long as the longest of them. A recovered symbol is therefore padded; the
//! protected 2-byte length tells the decoder where the real data ends, so the tunnel delivers
//! the exact original packet.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Length             |  Data (Length bytes) ...      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//! |   ...                         |  zero padding to the repair's |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  payload length (implicit)    +
//! ```

use crate::MAX_SYMBOL_LEN;

/// Size of the protected length field.
pub const LEN_FIELD: usize = 2;

/// Largest protected (encoded) symbol, and so the largest repair payload: 9216 + 2 bytes.
pub const MAX_PROTECTED_LEN: usize = MAX_SYMBOL_LEN + LEN_FIELD;

/// Length of the protected form of a `data_len`-byte source symbol (before padding).
#[inline]
pub const fn protected_len(data_len: usize) -> usize {
    data_len + LEN_FIELD
}

/// Writes the protected form of `data` into `out` (cleared first; its capacity is reused, so
/// nothing is allocated once it has held a symbol this long). `data.len()` must be at most
/// [`MAX_SYMBOL_LEN`].
#[inline]
pub fn encode_into(out: &mut Vec<u8>, data: &[u8]) {
    debug_assert!(data.len() <= MAX_SYMBOL_LEN);
    out.clear();
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

/// Reads a recovered protected symbol (possibly followed by padding): returns the data length
/// if the length field fits in `buf` and within [`MAX_SYMBOL_LEN`], `None` if the symbol is
/// inconsistent (a corrupted or forged repair).
#[inline]
pub fn decode_len(buf: &[u8]) -> Option<usize> {
    let hdr: [u8; 2] = buf.get(..LEN_FIELD)?.try_into().ok()?;
    let len = u16::from_be_bytes(hdr) as usize;
    (len <= MAX_SYMBOL_LEN && LEN_FIELD + len <= buf.len()).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_padding() {
        let mut v = Vec::new();
        encode_into(&mut v, b"hello");
        assert_eq!(v, [0, 5, b'h', b'e', b'l', b'l', b'o']);
        v.resize(20, 0);
        assert_eq!(decode_len(&v), Some(5));
        assert_eq!(&v[LEN_FIELD..LEN_FIELD + 5], b"hello");
    }

    #[test]
    fn inconsistent_lengths() {
        assert_eq!(decode_len(&[]), None);
        assert_eq!(decode_len(&[0]), None);
        assert_eq!(decode_len(&[0, 3, 1, 2]), None);
        assert_eq!(decode_len(&[0, 0]), Some(0));
        let mut big = vec![0u8; MAX_PROTECTED_LEN + 10];
        big[..2].copy_from_slice(&((MAX_SYMBOL_LEN + 1) as u16).to_be_bytes());
        assert_eq!(decode_len(&big), None);
    }
}
