//! Allocation-free packet surgery for the SRv6 dataplane, on IPv6 packets whose first
//! extension header is the SRH (what Linux `seg6` H.Encaps and hirt itself produce):
//!
//! ```text
//! +-----------------+----------------------------------------+------------------------+
//! | IPv6 (40 bytes) | SRH: fixed 8 | segments 16*n | TLVs    | payload (inner packet, |
//! | NH = 43         |  NH = 41/4/59                           |  or repair symbol)     |
//! +-----------------+----------------------------------------+------------------------+
//! ```
//!
//! Every function takes the caller's buffer and the packet length in it, edits in place
//! (moving the payload with `copy_within` when the SRH grows or shrinks), fixes Hdr Ext Len and
//! the IPv6 Payload Length, and returns the new length. Nothing allocates.
//!
//! Authentication, two independent pieces:
//! - the RFC 8754 §2.1.2.1 HMAC TLV (type 5, flag H set), for interoperability: HMAC-SHA-256
//!   over source address, Last Entry, Flags, Key ID and the segment list. Note that a Linux node
//!   on the path validates it whenever the H flag is set and the HMAC TLV is present (even with
//!   `seg6_require_hmac = 0`) and drops the packet if it does not know the key id, so the key must
//!   then be configured there (`ip sr hmac set KEYID sha256`) or `seg6_require_hmac` set to -1;
//! - hirt's auth TLV ([`crate::tlv::AuthTlv`]): HMAC-SHA-256/128 over everything that is not
//!   changed in transit (see [`auth_mac`]), payload included, with a sequence number for replay
//!   protection. This is what makes forged or replayed repairs and feedback harmless.

use std::net::Ipv6Addr;
use std::ops::Range;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use crate::ipv6::{Ipv6Packet, HEADER_LEN, NEXT_HEADER_ROUTING};
use crate::srh::{
    self, padding_for, write_padn, HmacTlv, SrhPacket, TlvIter, FLAG_HMAC, HMAC_TLV_SIZE,
    MAX_SRH_LEN, ROUTING_TYPE_SRH,
};
use crate::tlv::{
    auth_mac_offset, AuthRepr, AuthTlv, FeedbackRepr, FeedbackTlv, HirtTlvs, RepairRepr,
    SourceRepr, TlvTypes, AUTH_MAC_LEN, AUTH_TLV_SIZE,
};
use crate::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

/// Why a packet could not be built or edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BuildError {
    /// The input is not a well-formed IPv6 packet with an SRH as first extension header.
    #[error("not a well-formed IPv6+SRH packet")]
    Malformed,
    /// The caller's buffer is too small for the result.
    #[error("buffer too small")]
    NoRoom,
    /// The SRH (2048 bytes) or the IPv6 payload (65535 bytes) would exceed its length field.
    #[error("header or payload too long")]
    TooLong,
    /// A TLV to insert or remove is not a multiple of 8 bytes, which would misalign the SRH.
    #[error("TLV length not a multiple of 8")]
    Unaligned,
    /// Segments Left is already 0.
    #[error("no segment left")]
    NoSegmentsLeft,
    /// Invalid header parameters (no segment, Segments Left past the list, more than 128).
    #[error("invalid header parameters")]
    InvalidHeader,
}

impl From<Error> for BuildError {
    fn from(_: Error) -> Self {
        BuildError::Malformed
    }
}

/// Why authentication failed. Every variant means: drop the packet and count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AuthError {
    /// The packet did not parse.
    #[error("malformed packet")]
    Malformed,
    /// The packet carries no auth (or no RFC 8754 HMAC) TLV.
    #[error("no authentication TLV")]
    Missing,
    /// The key id is not configured.
    #[error("unknown key id")]
    UnknownKey,
    /// The MAC does not match.
    #[error("bad MAC")]
    BadMac,
}

/// Where things are in an IPv6+SRH packet. Offsets are from the start of the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Srv6Layout {
    /// Offset of the SRH (always 40 here).
    pub srh_offset: usize,
    /// SRH length (multiple of 8).
    pub srh_len: usize,
    /// Offset of the TLV area.
    pub tlv_offset: usize,
    /// Offset of the payload after the SRH (= end of the TLV area).
    pub payload_offset: usize,
    /// Packet length according to the IPv6 Payload Length (trailing buffer bytes excluded).
    pub packet_len: usize,
    /// Segments Left.
    pub segments_left: u8,
    /// Last Entry.
    pub last_entry: u8,
    /// SRH Next Header (what the payload is).
    pub next_header: u8,
}

impl Srv6Layout {
    /// Parses and validates: IPv6 version 6, Next Header 43, routing type 4, SL <= Last Entry,
    /// a TLV area that walks cleanly. The entry point for untrusted packets.
    pub fn parse(pkt: &[u8]) -> Result<Self> {
        let ip = Ipv6Packet::new_checked(pkt)?;
        if ip.version() != 6 || ip.next_header() != NEXT_HEADER_ROUTING {
            return Err(Error);
        }
        let packet_len = HEADER_LEN + ip.payload_len() as usize;
        let srh = SrhPacket::new_checked(&pkt[HEADER_LEN..packet_len])?;
        if srh.routing_type() != ROUTING_TYPE_SRH || srh.segments_left() > srh.last_entry() {
            return Err(Error);
        }
        for t in srh.tlv_iter() {
            t?;
        }
        Ok(Srv6Layout {
            srh_offset: HEADER_LEN,
            srh_len: srh.header_len(),
            tlv_offset: HEADER_LEN + srh.tlv_offset(),
            payload_offset: HEADER_LEN + srh.header_len(),
            packet_len,
            segments_left: srh.segments_left(),
            last_entry: srh.last_entry(),
            next_header: srh.next_header(),
        })
    }

    /// The TLV area's range in the packet.
    pub fn tlv_range(&self) -> Range<usize> {
        self.tlv_offset..self.payload_offset
    }

    /// The payload's range in the packet.
    pub fn payload_range(&self) -> Range<usize> {
        self.payload_offset..self.packet_len
    }

    /// A view of the SRH of `pkt` (the packet this layout was parsed from).
    pub fn srh<'a>(&self, pkt: &'a [u8]) -> SrhPacket<&'a [u8]> {
        SrhPacket::new_unchecked(&pkt[self.srh_offset..self.payload_offset])
    }
}

fn set_lengths(buf: &mut [u8], srh_len: usize, packet_len: usize) {
    buf[HEADER_LEN + 1] = (srh_len / 8 - 1) as u8;
    Ipv6Packet::new_unchecked(&mut buf[..]).set_payload_len((packet_len - HEADER_LEN) as u16);
}

/// Inserts `tlv` (one or more whole TLVs, a multiple of 8 bytes) at the end of the SRH TLV area
/// of the packet `buf[..len]`. Returns the new packet length.
pub fn insert_tlv(
    buf: &mut [u8],
    len: usize,
    tlv: &[u8],
) -> core::result::Result<usize, BuildError> {
    let l = Srv6Layout::parse(buf.get(..len).ok_or(BuildError::Malformed)?)?;
    let n = tlv.len();
    if !n.is_multiple_of(8) {
        return Err(BuildError::Unaligned);
    }
    if l.srh_len + n > MAX_SRH_LEN || l.packet_len + n - HEADER_LEN > u16::MAX as usize {
        return Err(BuildError::TooLong);
    }
    if buf.len() < l.packet_len + n {
        return Err(BuildError::NoRoom);
    }
    buf.copy_within(l.payload_range(), l.payload_offset + n);
    buf[l.payload_offset..l.payload_offset + n].copy_from_slice(tlv);
    set_lengths(buf, l.srh_len + n, l.packet_len + n);
    Ok(l.packet_len + n)
}

/// Inserts a source TLV of type `kind` (see [`insert_tlv`]).
pub fn insert_source_tlv(
    buf: &mut [u8],
    len: usize,
    kind: u8,
    source: &SourceRepr,
) -> core::result::Result<usize, BuildError> {
    insert_tlv(buf, len, &source.to_bytes(kind))
}

/// Removes the first TLV of type `kind` from the packet `buf[..len]`. Returns the new length,
/// or `None` when there is no such TLV. The TLV must be a multiple of 8 bytes long.
pub fn remove_tlv(
    buf: &mut [u8],
    len: usize,
    kind: u8,
) -> core::result::Result<Option<usize>, BuildError> {
    let l = Srv6Layout::parse(buf.get(..len).ok_or(BuildError::Malformed)?)?;
    let found = TlvIter::new(&buf[l.tlv_range()])
        .filter_map(|t| t.ok())
        .find(|t| t.kind == kind)
        .map(|t| (t.offset, t.wire_len()));
    let Some((off, n)) = found else {
        return Ok(None);
    };
    if n % 8 != 0 {
        return Err(BuildError::Unaligned);
    }
    let at = l.tlv_offset + off;
    buf.copy_within(at + n..l.packet_len, at);
    set_lengths(buf, l.srh_len - n, l.packet_len - n);
    Ok(Some(l.packet_len - n))
}

/// SRv6 End behaviour on the header: Segments Left -= 1, DA = Segment List[Segments Left].
/// Returns the new destination. Hop limit is left to the caller (a forwarding decision).
pub fn advance_segment(buf: &mut [u8], len: usize) -> core::result::Result<Ipv6Addr, BuildError> {
    let l = Srv6Layout::parse(buf.get(..len).ok_or(BuildError::Malformed)?)?;
    if l.segments_left == 0 {
        return Err(BuildError::NoSegmentsLeft);
    }
    let sl = l.segments_left - 1;
    let mut srh = SrhPacket::new_unchecked(&mut buf[l.srh_offset..l.payload_offset]);
    srh.set_segments_left(sl);
    let da = srh.segment(sl as usize).ok_or(BuildError::Malformed)?;
    Ipv6Packet::new_unchecked(&mut buf[..]).set_dst_addr(da);
    Ok(da)
}

/// Inserts `sids` (wire order: the last one is visited first) into the segment list of the
/// packet `buf[..len]` at index `at`: the segments from `at` on move up by `sids.len()`, Last
/// Entry grows, Segments Left becomes `at + sids.len() - 1` and the destination the segment
/// there (the first inserted SID to visit). With `at` = Segments Left + 1 this steers a packet,
/// just after an End, through `sids` before its next segment. Returns the new length.
pub fn insert_segments(
    buf: &mut [u8],
    len: usize,
    at: usize,
    sids: &[Ipv6Addr],
) -> core::result::Result<usize, BuildError> {
    let l = Srv6Layout::parse(buf.get(..len).ok_or(BuildError::Malformed)?)?;
    if sids.is_empty() {
        return Ok(l.packet_len);
    }
    let count = usize::from(l.last_entry) + 1;
    let n = sids.len() * 16;
    if at > count || count + sids.len() > 128 {
        return Err(BuildError::InvalidHeader);
    }
    if l.srh_len + n > MAX_SRH_LEN || l.packet_len + n - HEADER_LEN > u16::MAX as usize {
        return Err(BuildError::TooLong);
    }
    if buf.len() < l.packet_len + n {
        return Err(BuildError::NoRoom);
    }
    let from = l.srh_offset + 8 + 16 * at;
    buf.copy_within(from..l.packet_len, from + n);
    for (i, sid) in sids.iter().enumerate() {
        buf[from + 16 * i..from + 16 * (i + 1)].copy_from_slice(&sid.octets());
    }
    set_lengths(buf, l.srh_len + n, l.packet_len + n);
    let sl = at + sids.len() - 1;
    let mut srh = SrhPacket::new_unchecked(&mut buf[l.srh_offset..l.payload_offset + n]);
    srh.set_last_entry((count + sids.len() - 1) as u8);
    srh.set_segments_left(sl as u8);
    Ipv6Packet::new_unchecked(&mut buf[..]).set_dst_addr(sids[sids.len() - 1]);
    Ok(l.packet_len + n)
}

/// The packet inside an IPv6+SRH encapsulation, for End.DX6 / End.DT6 / End.DX4 / End.DT4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inner {
    /// SRH Next Header: 41 (IPv6) or 4 (IPv4) for an encapsulated packet.
    pub next_header: u8,
    /// Where the inner packet is in the outer buffer.
    pub range: Range<usize>,
}

/// Decapsulates without copying: returns where the inner packet is. The caller checks
/// `next_header` (41/4) against the behaviour it runs.
pub fn decapsulate(pkt: &[u8]) -> Result<Inner> {
    let l = Srv6Layout::parse(pkt)?;
    Ok(Inner {
        next_header: l.next_header,
        range: l.payload_range(),
    })
}

/// The outer headers of a packet hirt builds (repair and feedback packets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Srv6Header<'a> {
    /// Source address.
    pub src: Ipv6Addr,
    /// Segment list in wire order: `segments[0]` is the final segment.
    pub segments: &'a [Ipv6Addr],
    /// Segments Left; the destination address is `segments[segments_left]`.
    pub segments_left: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (e.g. a DSCP for repair packets).
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// What follows the SRH (59, no next header, for repair/feedback payloads).
    pub next_header: u8,
    /// SRH tag.
    pub tag: u16,
}

/// Authentication to add when building or signing.
#[derive(Debug, Clone, Copy)]
pub struct Auth<'k> {
    /// Type of the auth TLV ([`TlvTypes::auth`]).
    pub tlv_type: u8,
    /// Key ID, carried in the TLV(s).
    pub key_id: u32,
    /// The shared key.
    pub key: &'k [u8],
    /// Sequence number: strictly increasing per sender and key.
    pub seq: u64,
    /// Also add a real RFC 8754 HMAC TLV and set the H flag (see the module docs about Linux).
    pub rfc8754_hmac: bool,
}

/// Builds an IPv6+SRH packet in a caller buffer: headers first, then TLVs, then the payload.
#[derive(Debug)]
pub struct Srv6Builder<'b> {
    buf: &'b mut [u8],
    tlv_start: usize,
    pos: usize,
}

impl<'b> Srv6Builder<'b> {
    /// Writes the IPv6 header and the SRH fixed part and segment list.
    pub fn new(buf: &'b mut [u8], h: &Srv6Header<'_>) -> core::result::Result<Self, BuildError> {
        let n = h.segments.len();
        if n == 0 || n > 128 || h.segments_left as usize >= n {
            return Err(BuildError::InvalidHeader);
        }
        let tlv_start = HEADER_LEN + srh::FIXED_LEN + 16 * n;
        if buf.len() < tlv_start {
            return Err(BuildError::NoRoom);
        }
        let mut ip = Ipv6Packet::new_unchecked(&mut buf[..HEADER_LEN]);
        ip.set_version(6);
        ip.set_traffic_class(h.traffic_class);
        ip.set_flow_label(h.flow_label);
        ip.set_next_header(NEXT_HEADER_ROUTING);
        ip.set_hop_limit(h.hop_limit);
        ip.set_src_addr(h.src);
        ip.set_dst_addr(h.segments[h.segments_left as usize]);
        let mut srh = SrhPacket::new_unchecked(&mut buf[HEADER_LEN..tlv_start]);
        srh.set_next_header(h.next_header);
        srh.set_routing_type(ROUTING_TYPE_SRH);
        srh.set_segments_left(h.segments_left);
        srh.set_last_entry((n - 1) as u8);
        srh.set_flags(0);
        srh.set_tag(h.tag);
        for (i, s) in h.segments.iter().enumerate() {
            srh.set_segment(i, *s);
        }
        Ok(Srv6Builder {
            buf,
            tlv_start,
            pos: tlv_start,
        })
    }

    fn room(&mut self, n: usize) -> core::result::Result<&mut [u8], BuildError> {
        if self.pos + n - (HEADER_LEN) > MAX_SRH_LEN {
            return Err(BuildError::TooLong);
        }
        let s = self
            .buf
            .get_mut(self.pos..self.pos + n)
            .ok_or(BuildError::NoRoom)?;
        self.pos += n;
        Ok(s)
    }

    /// Appends raw TLV bytes (well-formed TLVs; padding is added by `finish`).
    pub fn push_tlv(&mut self, tlv: &[u8]) -> core::result::Result<&mut Self, BuildError> {
        self.room(tlv.len())?.copy_from_slice(tlv);
        Ok(self)
    }

    /// Appends a source TLV.
    pub fn push_source(
        &mut self,
        kind: u8,
        r: &SourceRepr,
    ) -> core::result::Result<&mut Self, BuildError> {
        self.push_tlv(&r.to_bytes(kind))
    }

    /// Appends a repair TLV.
    pub fn push_repair(
        &mut self,
        kind: u8,
        r: &RepairRepr,
    ) -> core::result::Result<&mut Self, BuildError> {
        self.push_tlv(&r.to_bytes(kind))
    }

    /// Appends a feedback TLV (body at most `MAX_FEEDBACK_BODY` bytes).
    pub fn push_feedback(
        &mut self,
        kind: u8,
        r: &FeedbackRepr<'_>,
    ) -> core::result::Result<&mut Self, BuildError> {
        if r.body.len() > crate::tlv::MAX_FEEDBACK_BODY {
            return Err(BuildError::TooLong);
        }
        let s = self.room(r.buffer_len())?;
        r.emit(kind, &mut FeedbackTlv::new_unchecked(s));
        Ok(self)
    }

    /// Pads the TLV area with PadN, appends auth TLVs if asked, copies the payload, fixes the
    /// lengths and computes the MACs. Returns the packet length.
    pub fn finish(
        mut self,
        payload: &[u8],
        auth: Option<&Auth<'_>>,
    ) -> core::result::Result<usize, BuildError> {
        let mut auth_at = None;
        let mut hmac_at = None;
        if let Some(a) = auth {
            let at = self.pos;
            let s = self.room(AUTH_TLV_SIZE)?;
            AuthRepr {
                key_id: a.key_id,
                seq: a.seq,
            }
            .emit(a.tlv_type, &mut AuthTlv::new_unchecked(s));
            auth_at = Some(at);
            if a.rfc8754_hmac {
                let at = self.pos;
                let s = self.room(HMAC_TLV_SIZE)?;
                HmacTlv::new_unchecked(s).init(a.key_id);
                hmac_at = Some(at);
            }
        }
        let pad = padding_for(self.pos - self.tlv_start);
        write_padn(self.room(pad)?);
        let srh_len = self.pos - HEADER_LEN;
        let total = self.pos + payload.len();
        if total - HEADER_LEN > u16::MAX as usize {
            return Err(BuildError::TooLong);
        }
        self.buf
            .get_mut(self.pos..total)
            .ok_or(BuildError::NoRoom)?
            .copy_from_slice(payload);
        set_lengths(self.buf, srh_len, total);
        if let (Some(a), Some(at)) = (auth, hmac_at) {
            self.buf[HEADER_LEN + 5] |= FLAG_HMAC;
            let l = Srv6Layout::parse(&self.buf[..total])?;
            let mac = rfc8754_hmac(a.key, &self.buf[..total], &l, a.key_id);
            self.buf[at + 8..at + HMAC_TLV_SIZE].copy_from_slice(&mac);
        }
        if let (Some(a), Some(at)) = (auth, auth_at) {
            let l = Srv6Layout::parse(&self.buf[..total])?;
            let mac = auth_mac(a.key, &self.buf[..total], &l, at - l.tlv_offset);
            let m = auth_mac_offset(at);
            self.buf[m..m + AUTH_MAC_LEN].copy_from_slice(&mac[..AUTH_MAC_LEN]);
        }
        Ok(total)
    }
}

/// Adds authentication to an existing IPv6+SRH packet `buf[..len]` (e.g. a source packet after
/// its source TLV went in): inserts the auth TLV (and the RFC 8754 HMAC TLV if asked) and
/// computes the MACs. Returns the new length.
pub fn sign(buf: &mut [u8], len: usize, a: &Auth<'_>) -> core::result::Result<usize, BuildError> {
    let mut tlvs = [0u8; AUTH_TLV_SIZE + HMAC_TLV_SIZE];
    AuthRepr {
        key_id: a.key_id,
        seq: a.seq,
    }
    .emit(
        a.tlv_type,
        &mut AuthTlv::new_unchecked(&mut tlvs[..AUTH_TLV_SIZE]),
    );
    let n = if a.rfc8754_hmac {
        HmacTlv::new_unchecked(&mut tlvs[AUTH_TLV_SIZE..]).init(a.key_id);
        AUTH_TLV_SIZE + HMAC_TLV_SIZE
    } else {
        AUTH_TLV_SIZE
    };
    let old = Srv6Layout::parse(buf.get(..len).ok_or(BuildError::Malformed)?)?;
    let auth_at = old.payload_offset;
    let total = insert_tlv(buf, len, &tlvs[..n])?;
    if a.rfc8754_hmac {
        buf[HEADER_LEN + 5] |= FLAG_HMAC;
        let l = Srv6Layout::parse(&buf[..total])?;
        let mac = rfc8754_hmac(a.key, &buf[..total], &l, a.key_id);
        let at = auth_at + AUTH_TLV_SIZE;
        buf[at + 8..at + HMAC_TLV_SIZE].copy_from_slice(&mac);
    }
    let l = Srv6Layout::parse(&buf[..total])?;
    let mac = auth_mac(a.key, &buf[..total], &l, auth_at - l.tlv_offset);
    let m = auth_mac_offset(auth_at);
    buf[m..m + AUTH_MAC_LEN].copy_from_slice(&mac[..AUTH_MAC_LEN]);
    Ok(total)
}

/// RFC 8754 §2.1.2.1 HMAC-SHA-256 over: IPv6 source address, Last Entry, Flags, HMAC Key ID,
/// all segments. `pkt`/`l` are a parsed packet; the flags byte is taken as it is in the packet.
pub fn rfc8754_hmac(key: &[u8], pkt: &[u8], l: &Srv6Layout, key_id: u32) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(&pkt[8..24]);
    let srh = l.srh(pkt);
    m.update(&[srh.last_entry(), srh.flags()]);
    m.update(&key_id.to_be_bytes());
    m.update(srh.segments_raw());
    m.finalize().into_bytes().into()
}

/// hirt auth MAC (HMAC-SHA-256, first 16 bytes used) over what routers do not change: the
/// IPv6 source address; the SRH without Segments Left; the segment list; the TLV area with the
/// auth TLV's MAC field as zeros; the payload. Not covered: version, traffic class, flow label,
/// hop limit, destination address and Segments Left, which change legitimately in transit.
/// `auth_off` is the auth TLV's offset within the TLV area.
pub fn auth_mac(key: &[u8], pkt: &[u8], l: &Srv6Layout, auth_off: usize) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(b"hirt-auth-v1");
    m.update(&pkt[8..24]);
    let s = l.srh_offset;
    m.update(&pkt[s..s + 3]);
    m.update(&pkt[s + 4..l.tlv_offset]);
    let mac_at = auth_mac_offset(l.tlv_offset + auth_off);
    m.update(&pkt[l.tlv_offset..mac_at]);
    m.update(&[0u8; AUTH_MAC_LEN]);
    m.update(&pkt[mac_at + AUTH_MAC_LEN..l.packet_len]);
    m.finalize().into_bytes().into()
}

/// Verifies hirt's auth TLV of an untrusted packet with the key `lookup` returns for its key
/// id. On success returns the key id and sequence number; the caller checks the sequence
/// against its [`crate::ReplayWindow`].
pub fn verify_auth<'k>(
    pkt: &[u8],
    types: &TlvTypes,
    lookup: impl Fn(u32) -> Option<&'k [u8]>,
) -> core::result::Result<AuthRepr, AuthError> {
    let l = Srv6Layout::parse(pkt).map_err(|_| AuthError::Malformed)?;
    let h = HirtTlvs::parse(&pkt[l.tlv_range()], types).map_err(|_| AuthError::Malformed)?;
    let (off, a) = h.auth.ok_or(AuthError::Missing)?;
    let key = lookup(a.key_id).ok_or(AuthError::UnknownKey)?;
    let want = auth_mac(key, pkt, &l, off);
    let at = auth_mac_offset(l.tlv_offset + off);
    if !ct_eq(&want[..AUTH_MAC_LEN], &pkt[at..at + AUTH_MAC_LEN]) {
        return Err(AuthError::BadMac);
    }
    Ok(a)
}

/// Verifies the RFC 8754 HMAC TLV (which must be present and the H flag set). Returns the key id.
pub fn verify_rfc8754_hmac<'k>(
    pkt: &[u8],
    lookup: impl Fn(u32) -> Option<&'k [u8]>,
) -> core::result::Result<u32, AuthError> {
    let l = Srv6Layout::parse(pkt).map_err(|_| AuthError::Malformed)?;
    let srh = l.srh(pkt);
    let t = srh
        .tlv_iter()
        .filter_map(|t| t.ok())
        .find(|t| t.kind == srh::TLV_HMAC)
        .ok_or(AuthError::Missing)?;
    if srh.flags() & FLAG_HMAC == 0 {
        return Err(AuthError::Missing);
    }
    let at = l.tlv_offset + t.offset;
    let tlv = HmacTlv::new_checked(&pkt[at..l.payload_offset]).map_err(|_| AuthError::Malformed)?;
    let key = lookup(tlv.key_id()).ok_or(AuthError::UnknownKey)?;
    let want = rfc8754_hmac(key, pkt, &l, tlv.key_id());
    if !ct_eq(&want, tlv.hmac()) {
        return Err(AuthError::BadMac);
    }
    Ok(tlv.key_id())
}

/// Constant-time comparison of equal-length MACs.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
#[path = "srv6_tests.rs"]
mod tests;
