//! Zero-copy wire formats for hirt.
//!
//! Layers, bottom up:
//! - [`ipv6`]: the fixed IPv6 header (RFC 8200 §3);
//! - [`srh`]: the Segment Routing Header (RFC 8754 §2, routing type 4), its segment list, the TLV
//!   area read through [`srh::TlvIter`], Pad1/PadN and the RFC 8754 HMAC TLV;
//! - [`tlv`]: hirt's own TLVs carried in the SRH TLV area (source, repair, feedback, auth), with
//!   configurable type values ([`tlv::TlvTypes`]);
//! - [`srv6`]: allocation-free packet surgery the SRv6 dataplane calls per packet (insert/remove
//!   a TLV, advance the segment, build repair/feedback packets, decapsulate, sign/verify);
//! - [`udp`]: the plaintext framing of the UDP tunnel (the dataplane wraps it in an AEAD).
//!
//! Every format follows the same contract (smoltcp style): `Packet::new_unchecked` wraps any
//! buffer, `Packet::new_checked` / `check_len` validate lengths once, and after a successful
//! `check_len` no accessor panics. Untrusted input only enters through `new_checked` or a `Repr`'s
//! `parse`. Multi-byte fields are big-endian. Layouts are drawn in each module and in
//! `docs/wire.md`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ipv6;
pub mod replay;
pub mod srh;
pub mod srv6;
pub mod tlv;
pub mod udp;

use core::fmt;

/// Parsing failed: the buffer is truncated or a field holds a value the format forbids.
///
/// One unit error on purpose: a parser of untrusted bytes has nothing more useful to say, and the
/// caller's only action is to drop and count the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("truncated or malformed packet")
    }
}

impl std::error::Error for Error {}

/// Result of a parse.
pub type Result<T> = core::result::Result<T, Error>;

pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use replay::ReplayWindow;
pub use srh::{HmacTlv, SrhPacket, SrhRepr, Tlv, TlvIter};
pub use srv6::{Auth, AuthError, BuildError, Inner, Srv6Builder, Srv6Header, Srv6Layout};
pub use tlv::{
    AuthRepr, AuthTlv, FeedbackRepr, FeedbackTlv, HirtTlvs, RepairRepr, RepairTlv, SourceRepr,
    SourceTlv, TlvTypes,
};
pub use udp::{UdpKind, UdpPacket, UdpRepr};

/// Reads a big-endian u16 at `at`; callers have checked the length.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at`; callers have checked the length.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a big-endian u64 at `at`; callers have checked the length.
#[inline]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}
