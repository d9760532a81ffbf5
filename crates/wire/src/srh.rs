//! The Segment Routing Header (RFC 8754 §2): an IPv6 Routing header of routing type 4.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Next Header   |  Hdr Ext Len  | Routing Type  | Segments Left |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Last Entry   |     Flags     |              Tag              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Segment List[0] (128-bit IPv6 address)             |
//! |                              ...                              |
//! |            Segment List[n] (128-bit IPv6 address)             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! //         Optional Type Length Value objects (variable)       //
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Hdr Ext Len counts 8-octet units after the first 8 octets, so the whole header (TLVs
//! included) is a multiple of 8 bytes. Segment List[0] is the *last* segment of the path; the
//! active segment is `Segment List[Segments Left]`.
//!
//! TLVs (RFC 8754 §2.1) are `Type (1) | Length (1) | Value (Length)`, except Pad1 (type 0), a
//! single byte. Linux (`seg6_validate_srh`) walks the TLV area as if every TLV had a length byte,
//! so it rejects a lone trailing Pad1: hirt never emits Pad1 and pads with PadN only.
//!
//! RFC 8754 HMAC TLV (§2.1.2):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type (5)  |  Length (38)  |D|        RESERVED             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      HMAC Key ID (4 octets)                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! |                 HMAC-SHA-256 (32 octets)                      |
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use std::net::Ipv6Addr;

use crate::ipv6::addr;
use crate::{be16, be32, Error, Result};

/// Routing type of the SRH.
pub const ROUTING_TYPE_SRH: u8 = 4;
/// TLV type Pad1 (a single zero byte, no length).
pub const TLV_PAD1: u8 = 0;
/// TLV type PadN.
pub const TLV_PADN: u8 = 4;
/// TLV type HMAC.
pub const TLV_HMAC: u8 = 5;
/// Length field of the HMAC TLV with HMAC-SHA-256 (2 reserved + 4 key id + 32 HMAC).
pub const HMAC_TLV_LEN: u8 = 38;
/// Total size of an HMAC-SHA-256 TLV.
pub const HMAC_TLV_SIZE: usize = 2 + HMAC_TLV_LEN as usize;
/// The "H" (HMAC) flag. RFC 8754 defines no flags, but the Linux kernel keeps the H bit of the
/// SRH drafts (`SR6_FLAG1_HMAC = 1 << 3`) and validates the HMAC TLV when it is set, so hirt
/// sets it only when the packet carries a real RFC 8754 §2.1.2.1 HMAC.
pub const FLAG_HMAC: u8 = 0x08;
/// Largest SRH: Hdr Ext Len is one octet.
pub const MAX_SRH_LEN: usize = 8 * 256;

mod field {
    pub const NEXT_HEADER: usize = 0;
    pub const HDR_EXT_LEN: usize = 1;
    pub const ROUTING_TYPE: usize = 2;
    pub const SEGMENTS_LEFT: usize = 3;
    pub const LAST_ENTRY: usize = 4;
    pub const FLAGS: usize = 5;
    pub const TAG: usize = 6;
    pub const SEGMENTS: usize = 8;
}

/// Length of the fixed part of the SRH, before the segment list.
pub const FIXED_LEN: usize = field::SEGMENTS;

/// A read/write view of an SRH over a buffer starting at the SRH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SrhPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        SrhPacket { buffer }
    }

    /// Wraps a buffer and checks its lengths: the entry point for untrusted bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header announced by Hdr Ext Len fits in the buffer and holds the segment
    /// list announced by Last Entry. After this succeeds no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN {
            return Err(Error);
        }
        let hl = self.header_len();
        if b.len() < hl || FIXED_LEN + 16 * (self.last_entry() as usize + 1) > hl {
            return Err(Error);
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Next header after the SRH.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hdr Ext Len (8-octet units after the first 8).
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::HDR_EXT_LEN]
    }

    /// The whole header length in bytes, `8 * (hdr_ext_len + 1)`.
    pub fn header_len(&self) -> usize {
        8 * (self.hdr_ext_len() as usize + 1)
    }

    /// Routing type (4 for an SRH).
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[field::ROUTING_TYPE]
    }

    /// Segments Left: index of the active segment.
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[field::SEGMENTS_LEFT]
    }

    /// Last Entry: index of the last element of the segment list (number of segments - 1).
    pub fn last_entry(&self) -> u8 {
        self.buffer.as_ref()[field::LAST_ENTRY]
    }

    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Tag.
    pub fn tag(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TAG)
    }

    /// Number of segments in the list.
    pub fn segment_count(&self) -> usize {
        self.last_entry() as usize + 1
    }

    /// `Segment List[i]`, or `None` past Last Entry.
    pub fn segment(&self, i: usize) -> Option<Ipv6Addr> {
        if i > self.last_entry() as usize {
            return None;
        }
        let at = field::SEGMENTS + 16 * i;
        Some(addr(&self.buffer.as_ref()[at..at + 16]))
    }

    /// The raw segment list, `16 * segment_count()` bytes.
    pub fn segments_raw(&self) -> &[u8] {
        &self.buffer.as_ref()[field::SEGMENTS..self.tlv_offset()]
    }

    /// Offset of the TLV area from the start of the SRH.
    pub fn tlv_offset(&self) -> usize {
        field::SEGMENTS + 16 * self.segment_count()
    }

    /// The TLV area (after the segment list, up to the header length).
    pub fn tlvs(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tlv_offset()..self.header_len()]
    }

    /// Iterates over the TLV area.
    pub fn tlv_iter(&self) -> TlvIter<'_> {
        TlvIter::new(self.tlvs())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SrhPacket<T> {
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    /// Sets Hdr Ext Len.
    pub fn set_hdr_ext_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HDR_EXT_LEN] = v;
    }

    /// Sets the routing type.
    pub fn set_routing_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::ROUTING_TYPE] = v;
    }

    /// Sets Segments Left.
    pub fn set_segments_left(&mut self, v: u8) {
        self.buffer.as_mut()[field::SEGMENTS_LEFT] = v;
    }

    /// Sets Last Entry.
    pub fn set_last_entry(&mut self, v: u8) {
        self.buffer.as_mut()[field::LAST_ENTRY] = v;
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the tag.
    pub fn set_tag(&mut self, v: u16) {
        self.buffer.as_mut()[field::TAG..field::TAG + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets `Segment List[i]`; `i` must be `<= last_entry` (a programming error otherwise).
    pub fn set_segment(&mut self, i: usize, a: Ipv6Addr) {
        assert!(
            i <= self.last_entry() as usize,
            "segment index past Last Entry"
        );
        let at = field::SEGMENTS + 16 * i;
        self.buffer.as_mut()[at..at + 16].copy_from_slice(&a.octets());
    }

    /// The TLV area, mutable.
    pub fn tlvs_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.tlv_offset(), self.header_len());
        &mut self.buffer.as_mut()[s..e]
    }
}

/// The high-level form of an SRH. Zero-copy: the segment list and TLV area borrow the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrhRepr<'a> {
    /// Next header after the SRH.
    pub next_header: u8,
    /// Segments Left.
    pub segments_left: u8,
    /// Flags.
    pub flags: u8,
    /// Tag.
    pub tag: u16,
    /// The segment list in wire order (`Segment List[0]` first), 16 bytes per segment.
    pub segments: &'a [u8],
    /// The TLV area, already padded to make the header a multiple of 8 bytes.
    pub tlvs: &'a [u8],
}

impl<'a> SrhRepr<'a> {
    /// Parses a view: checks lengths, routing type 4, Segments Left <= Last Entry, and that the
    /// TLV area is a well-formed TLV sequence.
    pub fn parse(p: &SrhPacket<&'a [u8]>) -> Result<Self> {
        p.check_len()?;
        if p.routing_type() != ROUTING_TYPE_SRH || p.segments_left() > p.last_entry() {
            return Err(Error);
        }
        for t in p.tlv_iter() {
            t?;
        }
        let b: &'a [u8] = p.buffer;
        let (s, t, e) = (field::SEGMENTS, p.tlv_offset(), p.header_len());
        Ok(SrhRepr {
            next_header: p.next_header(),
            segments_left: p.segments_left(),
            flags: p.flags(),
            tag: p.tag(),
            segments: &b[s..t],
            tlvs: &b[t..e],
        })
    }

    /// `Segment List[i]`.
    pub fn segment(&self, i: usize) -> Option<Ipv6Addr> {
        self.segments.get(16 * i..16 * i + 16).map(addr)
    }

    /// Bytes [`Self::emit`] writes. Valid reprs have `segments.len() % 16 == 0`, at least one
    /// segment, and `(segments.len() + tlvs.len()) % 8 == 0`.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN + self.segments.len() + self.tlvs.len()
    }

    /// Writes the SRH. The repr must be valid (see [`Self::buffer_len`]) and the buffer at least
    /// that long; both are programming errors, not network input.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SrhPacket<T>) {
        let len = self.buffer_len();
        assert!(
            self.segments.len().is_multiple_of(16)
                && !self.segments.is_empty()
                && len.is_multiple_of(8)
        );
        p.set_next_header(self.next_header);
        p.set_hdr_ext_len((len / 8 - 1) as u8);
        p.set_routing_type(ROUTING_TYPE_SRH);
        p.set_segments_left(self.segments_left);
        p.set_last_entry((self.segments.len() / 16 - 1) as u8);
        p.set_flags(self.flags);
        p.set_tag(self.tag);
        let b = p.buffer.as_mut();
        let t = FIXED_LEN + self.segments.len();
        b[FIXED_LEN..t].copy_from_slice(self.segments);
        b[t..len].copy_from_slice(self.tlvs);
    }
}

/// One TLV of the SRH TLV area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// Offset of the TLV's type byte within the TLV area.
    pub offset: usize,
    /// Type.
    pub kind: u8,
    /// Value (empty for Pad1).
    pub value: &'a [u8],
}

impl Tlv<'_> {
    /// Total bytes on the wire (1 for Pad1, else 2 + value length).
    pub fn wire_len(&self) -> usize {
        if self.kind == TLV_PAD1 {
            1
        } else {
            2 + self.value.len()
        }
    }
}

/// A cursor over a TLV area. Yields `Err(Error)` once, then stops, if a TLV runs past the end.
#[derive(Debug, Clone)]
pub struct TlvIter<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> TlvIter<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        TlvIter {
            data,
            pos: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<Tlv<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let offset = self.pos;
        let kind = self.data[offset];
        if kind == TLV_PAD1 {
            self.pos += 1;
            return Some(Ok(Tlv {
                offset,
                kind,
                value: &[],
            }));
        }
        let len = match self.data.get(offset + 1) {
            Some(&l) => l as usize,
            None => {
                self.failed = true;
                return Some(Err(Error));
            }
        };
        let end = offset + 2 + len;
        if end > self.data.len() {
            self.failed = true;
            return Some(Err(Error));
        }
        self.pos = end;
        Some(Ok(Tlv {
            offset,
            kind,
            value: &self.data[offset + 2..end],
        }))
    }
}

/// Writes padding of exactly `buf.len()` bytes using PadN only (never Pad1, see module docs).
/// `buf.len()` must be 0 or >= 2; lengths 2..=257 take one PadN, longer ones several.
pub fn write_padn(buf: &mut [u8]) {
    let mut rest = buf;
    while !rest.is_empty() {
        // Leave no single trailing byte: cap each PadN so the remainder is 0 or >= 2.
        let mut n = rest.len().min(257);
        if rest.len() - n == 1 {
            n -= 1;
        }
        assert!(n >= 2, "PadN cannot pad a single byte");
        rest[0] = TLV_PADN;
        rest[1] = (n - 2) as u8;
        rest[2..n].fill(0);
        rest = &mut rest[n..];
    }
}

/// Padding needed after `len` bytes of TLVs to reach a multiple of 8 without a lone byte:
/// 0, or 2..=9 (a one-byte gap is filled with a 9-byte PadN instead).
pub fn padding_for(len: usize) -> usize {
    match (8 - len % 8) % 8 {
        1 => 9,
        p => p,
    }
}

mod hfield {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const LENGTH: usize = 1;
    pub const D_RESERVED: Range<usize> = 2..4;
    pub const KEY_ID: Range<usize> = 4..8;
    pub const HMAC: Range<usize> = 8..40;
}

/// A view of an RFC 8754 HMAC TLV carrying HMAC-SHA-256 (the only size hirt emits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacTlv<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> HmacTlv<T> {
    /// Wraps a buffer starting at the TLV's type byte, unchecked.
    pub const fn new_unchecked(buffer: T) -> Self {
        HmacTlv { buffer }
    }

    /// Wraps and checks: type 5, length 38, 40 bytes present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// Checks the buffer holds a full 40-byte HMAC-SHA-256 TLV.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HMAC_TLV_SIZE
            || b[hfield::TYPE] != TLV_HMAC
            || b[hfield::LENGTH] != HMAC_TLV_LEN
        {
            return Err(Error);
        }
        Ok(())
    }

    /// The D flag: destination address verification disabled (RFC 8754 §2.1.2).
    pub fn d_flag(&self) -> bool {
        self.buffer.as_ref()[hfield::D_RESERVED.start] & 0x80 != 0
    }

    /// HMAC Key ID.
    pub fn key_id(&self) -> u32 {
        be32(self.buffer.as_ref(), hfield::KEY_ID.start)
    }

    /// The 32-byte HMAC.
    pub fn hmac(&self) -> &[u8] {
        &self.buffer.as_ref()[hfield::HMAC]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> HmacTlv<T> {
    /// Writes type, length, D flag clear, reserved zero, key id; the HMAC field is zeroed.
    pub fn init(&mut self, key_id: u32) {
        let b = self.buffer.as_mut();
        b[hfield::TYPE] = TLV_HMAC;
        b[hfield::LENGTH] = HMAC_TLV_LEN;
        b[hfield::D_RESERVED].fill(0);
        b[hfield::KEY_ID].copy_from_slice(&key_id.to_be_bytes());
        b[hfield::HMAC].fill(0);
    }

    /// The HMAC field, mutable.
    pub fn hmac_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[hfield::HMAC]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hand-assembled SRH: NH 41 (IPv6), Hdr Ext Len 5 (48 bytes), type 4, SL 1, Last Entry 1,
    // flags 0, tag 0x0102, segments [fc00::2, fc00::1], then an unknown TLV 0x7c len 4 and a
    // PadN of 2 bytes (8 bytes of TLVs).
    static SRH: [u8; 48] = [
        0x29, 0x05, 0x04, 0x01, 0x01, 0x00, 0x01, 0x02, //
        0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0xfc, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0x7c, 0x04, 0xaa, 0xbb, 0xcc, 0xdd, 0x04, 0x00,
    ];

    fn seg(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn deconstruct() {
        let p = SrhPacket::new_checked(&SRH[..]).unwrap();
        assert_eq!(p.next_header(), 41);
        assert_eq!(p.hdr_ext_len(), 5);
        assert_eq!(p.header_len(), 48);
        assert_eq!(p.routing_type(), 4);
        assert_eq!(p.segments_left(), 1);
        assert_eq!(p.last_entry(), 1);
        assert_eq!(p.flags(), 0);
        assert_eq!(p.tag(), 0x0102);
        assert_eq!(p.segment(0), Some(seg("fc00::2")));
        assert_eq!(p.segment(1), Some(seg("fc00::1")));
        assert_eq!(p.segment(2), None);
        let tlvs: Vec<_> = p.tlv_iter().map(|t| t.unwrap()).collect();
        assert_eq!(tlvs.len(), 2);
        assert_eq!(
            (tlvs[0].offset, tlvs[0].kind, tlvs[0].value),
            (0, 0x7c, &[0xaa, 0xbb, 0xcc, 0xdd][..])
        );
        assert_eq!(
            (tlvs[1].offset, tlvs[1].kind, tlvs[1].value.len()),
            (6, TLV_PADN, 0)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 48];
        let mut p = SrhPacket::new_unchecked(&mut buf[..]);
        p.set_next_header(41);
        p.set_hdr_ext_len(5);
        p.set_routing_type(4);
        p.set_segments_left(1);
        p.set_last_entry(1);
        p.set_flags(0);
        p.set_tag(0x0102);
        p.set_segment(0, seg("fc00::2"));
        p.set_segment(1, seg("fc00::1"));
        let t = p.tlvs_mut();
        t[..6].copy_from_slice(&[0x7c, 0x04, 0xaa, 0xbb, 0xcc, 0xdd]);
        write_padn(&mut t[6..]);
        assert_eq!(buf, SRH);
    }

    #[test]
    fn parse() {
        let p = SrhPacket::new_checked(&SRH[..]).unwrap();
        let r = SrhRepr::parse(&p).unwrap();
        assert_eq!(r.next_header, 41);
        assert_eq!(r.segments_left, 1);
        assert_eq!(r.tag, 0x0102);
        assert_eq!(r.segment(1), Some(seg("fc00::1")));
        assert_eq!(r.segments, &SRH[8..40]);
        assert_eq!(r.tlvs, &SRH[40..48]);
    }

    #[test]
    fn emit() {
        let r = SrhRepr {
            next_header: 41,
            segments_left: 1,
            flags: 0,
            tag: 0x0102,
            segments: &SRH[8..40],
            tlvs: &SRH[40..48],
        };
        assert_eq!(r.buffer_len(), 48);
        let mut buf = [0u8; 48];
        r.emit(&mut SrhPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, SRH);
    }

    #[test]
    fn malformed() {
        // Header longer than the buffer.
        assert!(SrhPacket::new_checked(&SRH[..40]).is_err());
        // Last Entry past the header.
        let mut b = SRH;
        b[4] = 2;
        assert!(SrhPacket::new_checked(&b[..]).is_err());
        // SL > Last Entry.
        let mut b = SRH;
        b[3] = 2;
        let p = SrhPacket::new_checked(&b[..]).unwrap();
        assert!(SrhRepr::parse(&p).is_err());
        // Wrong routing type.
        let mut b = SRH;
        b[2] = 3;
        let p = SrhPacket::new_checked(&b[..]).unwrap();
        assert!(SrhRepr::parse(&p).is_err());
        // TLV running past the end.
        let mut b = SRH;
        b[41] = 7;
        let p = SrhPacket::new_checked(&b[..]).unwrap();
        assert!(SrhRepr::parse(&p).is_err());
        assert_eq!(p.tlv_iter().filter(|t| t.is_err()).count(), 1);
    }

    #[test]
    fn pad1_and_padn() {
        let area = [0u8, 0x04, 0x01, 0x00, 0x00];
        let v: Vec<_> = TlvIter::new(&area).map(|t| t.unwrap()).collect();
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].kind, v[0].wire_len()), (TLV_PAD1, 1));
        assert_eq!((v[1].kind, v[1].offset, v[1].wire_len()), (TLV_PADN, 1, 3));
        assert_eq!((v[2].kind, v[2].offset), (TLV_PAD1, 4));
        for len in 0..64 {
            let p = padding_for(len);
            assert_eq!((len + p) % 8, 0);
            assert_ne!(p, 1);
            let mut buf = vec![0xffu8; p];
            write_padn(&mut buf);
            let tl: Vec<_> = TlvIter::new(&buf).map(|t| t.unwrap()).collect();
            assert!(tl.iter().all(|t| t.kind == TLV_PADN));
        }
        let mut big = vec![0xffu8; 600];
        write_padn(&mut big);
        assert!(TlvIter::new(&big).all(|t| t.unwrap().kind == TLV_PADN));
    }

    #[test]
    fn hmac_tlv() {
        let mut b = [0u8; 40];
        let mut t = HmacTlv::new_unchecked(&mut b[..]);
        t.init(0x0a0b0c0d);
        t.hmac_mut()[0] = 0x55;
        assert_eq!(&b[..8], &[5, 38, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d]);
        let t = HmacTlv::new_checked(&b[..]).unwrap();
        assert_eq!(t.key_id(), 0x0a0b0c0d);
        assert!(!t.d_flag());
        assert_eq!(t.hmac()[0], 0x55);
        assert!(HmacTlv::new_checked(&b[..39]).is_err());
    }
}
