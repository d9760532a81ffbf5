//! The fixed IPv6 header (RFC 8200 §3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +                     Source Address (128 bits)                 +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +                  Destination Address (128 bits)               +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use std::net::Ipv6Addr;

use crate::{be16, Error, Result};

/// IPv6 Next Header value of the Routing header (RFC 8200 §4.4).
pub const NEXT_HEADER_ROUTING: u8 = 43;
/// IPv6 Next Header value of an encapsulated IPv6 packet.
pub const NEXT_HEADER_IPV6: u8 = 41;
/// IPv6 Next Header value of an encapsulated IPv4 packet.
pub const NEXT_HEADER_IPV4: u8 = 4;
/// IPv6 Next Header value "No Next Header" (RFC 8200 §4.7): what follows is opaque. hirt's repair
/// and feedback packets use it, so no router tries to parse a repair symbol as a header.
pub const NEXT_HEADER_NONE: u8 = 59;

mod field {
    use core::ops::Range;
    pub const VER_TC_FL: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST.end;

/// A read/write view of an IPv6 header over a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`Self::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer and checks its length: the entry point for untrusted bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the fixed header and the payload it announces fit in the buffer. After this
    /// succeeds no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            return Err(Error);
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (6 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP + ECN).
    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FL];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x000f_ffff
    }

    /// Payload length: everything after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        // Reachable before check_len passes (check_len calls it), so guard the read.
        let b = self.buffer.as_ref();
        if b.len() < field::PAYLOAD_LEN.end {
            return u16::MAX;
        }
        be16(b, field::PAYLOAD_LEN.start)
    }

    /// Next header (43 when an SRH follows).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST])
    }

    /// The payload as announced by the payload length (trailing bytes beyond it are ignored).
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version to 6, keeping traffic class and flow label.
    pub fn set_version(&mut self, v: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0x0f) | (v << 4);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buffer.as_mut();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }

    /// Sets the 20-bit flow label (upper bits ignored).
    pub fn set_flow_label(&mut self, fl: u32) {
        let b = self.buffer.as_mut();
        b[1] = (b[1] & 0xf0) | ((fl >> 16) as u8 & 0x0f);
        b[2] = (fl >> 8) as u8;
        b[3] = fl as u8;
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hl: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hl;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

pub(crate) fn addr(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[..16]);
    Ipv6Addr::from(o)
}

/// The high-level form of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length (bytes after the fixed header).
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses a checked view; rejects versions other than 6.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error);
        }
        Ok(Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// Header length emitted by [`Self::emit`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of the view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.buffer.as_mut()[0] = 0x60;
        p.set_traffic_class(self.traffic_class);
        p.set_flow_label(self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hand-assembled: version 6, TC 0xb8 (EF), flow label 0x12345, payload 4, NH 59 (none),
    // hop limit 64, 2001:db8::1 -> 2001:db8::2, payload de ad be ef.
    static PACKET: [u8; 44] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x04, 0x3b, 0x40, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0xde, 0xad, 0xbe, 0xef,
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: "2001:db8::1".parse().unwrap(),
            dst_addr: "2001:db8::2".parse().unwrap(),
            next_header: NEXT_HEADER_NONE,
            payload_len: 4,
            hop_limit: 64,
            traffic_class: 0xb8,
            flow_label: 0x12345,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 59);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 44];
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_version(6);
        p.set_traffic_class(0xb8);
        p.set_flow_label(0x12345);
        p.set_payload_len(4);
        p.set_next_header(59);
        p.set_hop_limit(64);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8::2".parse().unwrap());
        p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn parse() {
        let p = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 44];
        let r = repr();
        r.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
        buf[40..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, PACKET);
        assert_eq!(r.buffer_len(), 40);
    }

    #[test]
    fn truncated_and_bad_version() {
        assert_eq!(Ipv6Packet::new_checked(&PACKET[..39]).unwrap_err(), Error);
        // Payload length announces more than the buffer holds.
        assert!(Ipv6Packet::new_checked(&PACKET[..43]).is_err());
        let mut b = PACKET;
        b[0] = 0x4b;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert!(Ipv6Repr::parse(&p).is_err());
    }
}
