//! hirt's TLVs inside the SRH TLV area (RFC 8754 §2.1).
//!
//! Each hirt TLV is a multiple of 8 bytes long, so adding or removing one keeps the SRH 8-byte
//! aligned with no padding at all; the RFC 8754 HMAC TLV (40 bytes) is too. Type values are
//! configurable ([`TlvTypes`]); the defaults come from the RFC 8754 §8.2 "Experimentation and
//! Test" ranges (124-126 for TLVs that do not change en route, 252-254 for the rest).
//!
//! Source TLV (8 bytes), added by the encoder to every protected packet:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Type (124)   |  Length (6)   |          Stream ID            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    ESI (source symbol number)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Repair TLV (24 bytes), on repair packets; the repair symbol is the packet's payload:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Type (125)   |  Length (22)  |          Stream ID            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Scheme     |      DT       |     NSS (sources covered)     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          First ESI                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Stride             |          Repair_Key           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Timestamp (sender clock, for RTT)             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Repair Payload Length     |       Reserved (0)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The exact length of every covered source symbol is protected inside the repair payload
//! (`hirt_fec::symbol`); Repair Payload Length lets the decoder reject a payload that was
//! truncated or padded in transit.
//!
//! Feedback TLV (12 + body bytes, zero-padded to a multiple of 8), on feedback packets:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Type (126)   |    Length     |          Stream ID            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Path ID    |  Body Length  |     Kind      | Reserved (0)  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Timestamp Echo                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! //   Body (hirt-core `Feedback::encode`, opaque here)  | 0 pad  //
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Kind ([`FEEDBACK_KIND_FEC`] = 0) says what the TLV carries. The same TLV carries the path
//! messages of a multi-path SRv6 tunnel, naming their path in Path ID:
//! - kind [`FEEDBACK_KIND_PROBE`] (encoder to decoder, over the path): Timestamp Echo holds the
//!   sender's timestamp, the body ([`ProbeBody`], 4 bytes) the packets sent on the path so far;
//! - kind [`FEEDBACK_KIND_PROBE_REPLY`] (decoder to encoder): Timestamp Echo echoes the probe's
//!   timestamp, the body ([`ProbeReplyBody`], 12 bytes) the probe's sent count and the packets
//!   and bytes the decoder received on the path so far.
//!
//! Auth TLV (32 bytes): hirt's own MAC over the whole packet except what routers change in
//! transit (see `srv6::auth_mac`). The RFC 8754 HMAC covers only the source address, Last Entry,
//! Flags, Key ID and segment list, so it cannot protect a repair payload or a feedback body; the
//! Auth TLV does, and its Sequence lets the receiver reject replays.
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Type (252)   |  Length (30)  |       Reserved (0)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           Key ID                              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      Sequence (64 bits)                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            MAC: HMAC-SHA-256 truncated to 16 octets           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use hirt_fec::{RepairInfo, SchemeId};

use crate::srh::{TlvIter, TLV_HMAC};
use crate::{be16, be32, be64, Error, Result};

/// The SRH TLV type values hirt uses. Both ends must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TlvTypes {
    /// Source TLV (default 124).
    pub source: u8,
    /// Repair TLV (default 125).
    pub repair: u8,
    /// Feedback TLV (default 126).
    pub feedback: u8,
    /// Auth TLV (default 252).
    pub auth: u8,
}

impl Default for TlvTypes {
    fn default() -> Self {
        TlvTypes {
            source: 124,
            repair: 125,
            feedback: 126,
            auth: 252,
        }
    }
}

/// Total size of a source TLV.
pub const SOURCE_TLV_SIZE: usize = 8;
/// Total size of a repair TLV.
pub const REPAIR_TLV_SIZE: usize = 24;
/// Fixed part of a feedback TLV (before the body).
pub const FEEDBACK_TLV_HEADER: usize = 12;
/// Largest feedback body that fits one TLV (total <= 256 bytes, a multiple of 8).
pub const MAX_FEEDBACK_BODY: usize = 256 - FEEDBACK_TLV_HEADER;
/// Total size of an auth TLV.
pub const AUTH_TLV_SIZE: usize = 32;
/// Bytes of the truncated HMAC-SHA-256 in the auth TLV.
pub const AUTH_MAC_LEN: usize = 16;

fn check_tlv(b: &[u8], kind: Option<u8>, size: usize) -> Result<()> {
    if b.len() < size || b[1] as usize + 2 != size || kind.is_some_and(|k| b[0] != k) {
        return Err(Error);
    }
    Ok(())
}

macro_rules! tlv_view {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer starting at the TLV's type byte, unchecked.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps and checks the length (the type byte is not checked: types are
            /// configurable, the caller matched it already).
            pub fn new_checked(buffer: T) -> Result<Self> {
                let t = Self::new_unchecked(buffer);
                t.check_len()?;
                Ok(t)
            }

            /// The type byte.
            pub fn kind(&self) -> u8 {
                self.buffer.as_ref()[0]
            }

            /// The length byte.
            pub fn length(&self) -> u8 {
                self.buffer.as_ref()[1]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Sets the type byte.
            pub fn set_kind(&mut self, v: u8) {
                self.buffer.as_mut()[0] = v;
            }

            /// Sets the length byte.
            pub fn set_length(&mut self, v: u8) {
                self.buffer.as_mut()[1] = v;
            }
        }
    };
}

mod sfield {
    pub const STREAM: usize = 2;
    pub const ESI: usize = 4;
}

tlv_view!(
    /// A view of the source TLV.
    SourceTlv
);

impl<T: AsRef<[u8]>> SourceTlv<T> {
    /// Checks that the buffer holds an 8-byte TLV with Length 6.
    pub fn check_len(&self) -> Result<()> {
        check_tlv(self.buffer.as_ref(), None, SOURCE_TLV_SIZE)
    }

    /// Stream ID.
    pub fn stream(&self) -> u16 {
        be16(self.buffer.as_ref(), sfield::STREAM)
    }

    /// ESI.
    pub fn esi(&self) -> u32 {
        be32(self.buffer.as_ref(), sfield::ESI)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SourceTlv<T> {
    /// Sets the stream ID.
    pub fn set_stream(&mut self, v: u16) {
        self.buffer.as_mut()[sfield::STREAM..sfield::STREAM + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the ESI.
    pub fn set_esi(&mut self, v: u32) {
        self.buffer.as_mut()[sfield::ESI..sfield::ESI + 4].copy_from_slice(&v.to_be_bytes());
    }
}

/// Source TLV contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceRepr {
    /// Stream ID.
    pub stream: u16,
    /// ESI of this source symbol.
    pub esi: u32,
}

impl SourceRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(t: &SourceTlv<T>) -> Result<Self> {
        t.check_len()?;
        Ok(SourceRepr {
            stream: t.stream(),
            esi: t.esi(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        SOURCE_TLV_SIZE
    }

    /// Writes the TLV with type `kind`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, kind: u8, t: &mut SourceTlv<T>) {
        t.set_kind(kind);
        t.set_length((SOURCE_TLV_SIZE - 2) as u8);
        t.set_stream(self.stream);
        t.set_esi(self.esi);
    }

    /// The TLV as bytes (a stack value, no allocation).
    pub fn to_bytes(&self, kind: u8) -> [u8; SOURCE_TLV_SIZE] {
        let mut b = [0u8; SOURCE_TLV_SIZE];
        self.emit(kind, &mut SourceTlv::new_unchecked(&mut b[..]));
        b
    }
}

mod rfield {
    pub const STREAM: usize = 2;
    pub const SCHEME: usize = 4;
    pub const DT: usize = 5;
    pub const NSS: usize = 6;
    pub const FIRST_ESI: usize = 8;
    pub const STRIDE: usize = 12;
    pub const REPAIR_KEY: usize = 14;
    pub const TIMESTAMP: usize = 16;
    pub const PAYLOAD_LEN: usize = 20;
    pub const RESERVED: usize = 22;
}

tlv_view!(
    /// A view of the repair TLV.
    RepairTlv
);

impl<T: AsRef<[u8]>> RepairTlv<T> {
    /// Checks that the buffer holds a 24-byte TLV with Length 22.
    pub fn check_len(&self) -> Result<()> {
        check_tlv(self.buffer.as_ref(), None, REPAIR_TLV_SIZE)
    }

    /// Stream ID.
    pub fn stream(&self) -> u16 {
        be16(self.buffer.as_ref(), rfield::STREAM)
    }

    /// FEC scheme.
    pub fn scheme(&self) -> SchemeId {
        SchemeId::from_u8(self.buffer.as_ref()[rfield::SCHEME])
    }

    /// Density threshold DT.
    pub fn dt(&self) -> u8 {
        self.buffer.as_ref()[rfield::DT]
    }

    /// Number of source symbols covered.
    pub fn nss(&self) -> u16 {
        be16(self.buffer.as_ref(), rfield::NSS)
    }

    /// ESI of the first covered source.
    pub fn first_esi(&self) -> u32 {
        be32(self.buffer.as_ref(), rfield::FIRST_ESI)
    }

    /// ESI distance between covered sources.
    pub fn stride(&self) -> u16 {
        be16(self.buffer.as_ref(), rfield::STRIDE)
    }

    /// Repair_Key.
    pub fn repair_key(&self) -> u16 {
        be16(self.buffer.as_ref(), rfield::REPAIR_KEY)
    }

    /// Sender timestamp (units chosen by the core; echoed in feedback for RTT).
    pub fn timestamp(&self) -> u32 {
        be32(self.buffer.as_ref(), rfield::TIMESTAMP)
    }

    /// Length of the repair payload that follows the headers.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), rfield::PAYLOAD_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RepairTlv<T> {
    fn put16(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    fn put32(&mut self, at: usize, v: u32) {
        self.buffer.as_mut()[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the stream ID.
    pub fn set_stream(&mut self, v: u16) {
        self.put16(rfield::STREAM, v)
    }

    /// Sets the scheme.
    pub fn set_scheme(&mut self, v: SchemeId) {
        self.buffer.as_mut()[rfield::SCHEME] = v.to_u8();
    }

    /// Sets DT.
    pub fn set_dt(&mut self, v: u8) {
        self.buffer.as_mut()[rfield::DT] = v;
    }

    /// Sets NSS.
    pub fn set_nss(&mut self, v: u16) {
        self.put16(rfield::NSS, v)
    }

    /// Sets the first ESI.
    pub fn set_first_esi(&mut self, v: u32) {
        self.put32(rfield::FIRST_ESI, v)
    }

    /// Sets the stride.
    pub fn set_stride(&mut self, v: u16) {
        self.put16(rfield::STRIDE, v)
    }

    /// Sets Repair_Key.
    pub fn set_repair_key(&mut self, v: u16) {
        self.put16(rfield::REPAIR_KEY, v)
    }

    /// Sets the timestamp.
    pub fn set_timestamp(&mut self, v: u32) {
        self.put32(rfield::TIMESTAMP, v)
    }

    /// Sets the repair payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.put16(rfield::PAYLOAD_LEN, v)
    }

    /// Zeroes the reserved field.
    pub fn clear_reserved(&mut self) {
        self.put16(rfield::RESERVED, 0)
    }
}

/// Repair TLV contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepairRepr {
    /// Stream ID.
    pub stream: u16,
    /// What the FEC decoder needs.
    pub info: RepairInfo,
    /// Sender timestamp.
    pub timestamp: u32,
    /// Length of the repair payload.
    pub payload_len: u16,
}

impl RepairRepr {
    /// Parses a checked view. Field values are not judged here (that is the decoder's job,
    /// which returns `DecodeError` for bad NSS/DT).
    pub fn parse<T: AsRef<[u8]>>(t: &RepairTlv<T>) -> Result<Self> {
        t.check_len()?;
        Ok(RepairRepr {
            stream: t.stream(),
            info: RepairInfo {
                scheme: t.scheme(),
                first_esi: t.first_esi(),
                nss: t.nss(),
                stride: t.stride(),
                repair_key: t.repair_key(),
                dt: t.dt(),
            },
            timestamp: t.timestamp(),
            payload_len: t.payload_len(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        REPAIR_TLV_SIZE
    }

    /// Writes the TLV with type `kind`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, kind: u8, t: &mut RepairTlv<T>) {
        t.set_kind(kind);
        t.set_length((REPAIR_TLV_SIZE - 2) as u8);
        t.set_stream(self.stream);
        t.set_scheme(self.info.scheme);
        t.set_dt(self.info.dt);
        t.set_nss(self.info.nss);
        t.set_first_esi(self.info.first_esi);
        t.set_stride(self.info.stride);
        t.set_repair_key(self.info.repair_key);
        t.set_timestamp(self.timestamp);
        t.set_payload_len(self.payload_len);
        t.clear_reserved();
    }

    /// The TLV as bytes (a stack value, no allocation).
    pub fn to_bytes(&self, kind: u8) -> [u8; REPAIR_TLV_SIZE] {
        let mut b = [0u8; REPAIR_TLV_SIZE];
        self.emit(kind, &mut RepairTlv::new_unchecked(&mut b[..]));
        b
    }
}

mod ffield {
    pub const STREAM: usize = 2;
    pub const PATH: usize = 4;
    pub const BODY_LEN: usize = 5;
    pub const KIND: usize = 6;
    pub const RESERVED: usize = 7;
    pub const TS_ECHO: usize = 8;
    pub const BODY: usize = 12;
}

tlv_view!(
    /// A view of the feedback TLV.
    FeedbackTlv
);

impl<T: AsRef<[u8]>> FeedbackTlv<T> {
    /// Checks: the TLV fits, is a multiple of 8 bytes, and holds its body.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FEEDBACK_TLV_HEADER {
            return Err(Error);
        }
        let total = b[1] as usize + 2;
        if !total.is_multiple_of(8)
            || b.len() < total
            || FEEDBACK_TLV_HEADER + b[ffield::BODY_LEN] as usize > total
        {
            return Err(Error);
        }
        Ok(())
    }

    /// Stream ID.
    pub fn stream(&self) -> u16 {
        be16(self.buffer.as_ref(), ffield::STREAM)
    }

    /// Path ID.
    pub fn path_id(&self) -> u8 {
        self.buffer.as_ref()[ffield::PATH]
    }

    /// What the TLV carries ([`FEEDBACK_KIND_FEC`], [`FEEDBACK_KIND_PROBE`],
    /// [`FEEDBACK_KIND_PROBE_REPLY`]).
    pub fn kind_field(&self) -> u8 {
        self.buffer.as_ref()[ffield::KIND]
    }

    /// Timestamp echo: the newest repair timestamp the decoder saw.
    pub fn timestamp_echo(&self) -> u32 {
        be32(self.buffer.as_ref(), ffield::TS_ECHO)
    }

    /// The opaque feedback body.
    pub fn body(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[ffield::BODY..ffield::BODY + b[ffield::BODY_LEN] as usize]
    }
}

/// Feedback TLV kind: FEC feedback (hirt-core `Feedback`).
pub const FEEDBACK_KIND_FEC: u8 = 0;
/// Feedback TLV kind: a path probe ([`ProbeBody`]).
pub const FEEDBACK_KIND_PROBE: u8 = 1;
/// Feedback TLV kind: the answer to a path probe ([`ProbeReplyBody`]).
pub const FEEDBACK_KIND_PROBE_REPLY: u8 = 2;

/// Feedback TLV contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FeedbackRepr<'a> {
    /// Stream ID.
    pub stream: u16,
    /// Path ID.
    pub path_id: u8,
    /// What the TLV carries ([`FEEDBACK_KIND_FEC`] for FEC feedback).
    pub kind: u8,
    /// Timestamp echo.
    pub timestamp_echo: u32,
    /// Body (at most [`MAX_FEEDBACK_BODY`] bytes).
    pub body: &'a [u8],
}

impl<'a> FeedbackRepr<'a> {
    /// Parses a checked view.
    pub fn parse(t: &FeedbackTlv<&'a [u8]>) -> Result<Self> {
        t.check_len()?;
        let b: &'a [u8] = t.buffer;
        Ok(FeedbackRepr {
            stream: t.stream(),
            path_id: t.path_id(),
            kind: t.kind_field(),
            timestamp_echo: t.timestamp_echo(),
            body: &b[ffield::BODY..ffield::BODY + b[ffield::BODY_LEN] as usize],
        })
    }

    /// Bytes [`Self::emit`] writes: header + body rounded up to a multiple of 8.
    pub const fn buffer_len(&self) -> usize {
        (FEEDBACK_TLV_HEADER + self.body.len()).div_ceil(8) * 8
    }

    /// Writes the TLV with type `kind`; the body must be at most [`MAX_FEEDBACK_BODY`] bytes
    /// (a programming error otherwise) and the buffer at least [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, kind: u8, t: &mut FeedbackTlv<T>) {
        assert!(
            self.body.len() <= MAX_FEEDBACK_BODY,
            "feedback body too long"
        );
        let total = self.buffer_len();
        let b = &mut t.buffer.as_mut()[..total];
        b[0] = kind;
        b[1] = (total - 2) as u8;
        b[ffield::STREAM..ffield::STREAM + 2].copy_from_slice(&self.stream.to_be_bytes());
        b[ffield::PATH] = self.path_id;
        b[ffield::BODY_LEN] = self.body.len() as u8;
        b[ffield::KIND] = self.kind;
        b[ffield::RESERVED] = 0;
        b[ffield::TS_ECHO..ffield::TS_ECHO + 4].copy_from_slice(&self.timestamp_echo.to_be_bytes());
        let end = ffield::BODY + self.body.len();
        b[ffield::BODY..end].copy_from_slice(self.body);
        b[end..].fill(0);
    }
}

mod pfield {
    pub const SENT: usize = 0;
    pub const RECEIVED: usize = 4;
    pub const RECEIVED_BYTES: usize = 8;
}

/// Bytes of a probe body.
pub const PROBE_BODY_LEN: usize = 4;
/// Bytes of a probe reply body.
pub const PROBE_REPLY_BODY_LEN: usize = 12;

/// A view of the body of a path probe (feedback TLV of kind [`FEEDBACK_KIND_PROBE`]):
///
/// ```text
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |            Sent: packets sent on the path so far (wrapping)   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeBody<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ProbeBody<T> {
    /// A view after checking the length (exactly [`PROBE_BODY_LEN`] bytes).
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() != PROBE_BODY_LEN {
            return Err(Error);
        }
        Ok(ProbeBody { buffer })
    }

    /// Packets sent on the path so far, the probe included.
    pub fn sent(&self) -> u32 {
        be32(self.buffer.as_ref(), pfield::SENT)
    }
}

impl ProbeBody<[u8; PROBE_BODY_LEN]> {
    /// The body with these fields.
    pub fn to_bytes(sent: u32) -> [u8; PROBE_BODY_LEN] {
        sent.to_be_bytes()
    }
}

/// A view of the body of a probe reply (feedback TLV of kind [`FEEDBACK_KIND_PROBE_REPLY`]):
///
/// ```text
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 Sent Echo: the probe's Sent                   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          Received: packets received on the path so far        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |       Received Bytes: bytes received on the path (wrapping)   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeReplyBody<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ProbeReplyBody<T> {
    /// A view after checking the length (exactly [`PROBE_REPLY_BODY_LEN`] bytes).
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() != PROBE_REPLY_BODY_LEN {
            return Err(Error);
        }
        Ok(ProbeReplyBody { buffer })
    }

    /// The probe's sent count.
    pub fn sent_echo(&self) -> u32 {
        be32(self.buffer.as_ref(), pfield::SENT)
    }

    /// Packets received on the path so far.
    pub fn received(&self) -> u32 {
        be32(self.buffer.as_ref(), pfield::RECEIVED)
    }

    /// Bytes received on the path so far (wrapping).
    pub fn received_bytes(&self) -> u32 {
        be32(self.buffer.as_ref(), pfield::RECEIVED_BYTES)
    }
}

impl ProbeReplyBody<[u8; PROBE_REPLY_BODY_LEN]> {
    /// The body with these fields.
    pub fn to_bytes(
        sent_echo: u32,
        received: u32,
        received_bytes: u32,
    ) -> [u8; PROBE_REPLY_BODY_LEN] {
        let mut b = [0u8; PROBE_REPLY_BODY_LEN];
        b[pfield::SENT..pfield::RECEIVED].copy_from_slice(&sent_echo.to_be_bytes());
        b[pfield::RECEIVED..pfield::RECEIVED_BYTES].copy_from_slice(&received.to_be_bytes());
        b[pfield::RECEIVED_BYTES..].copy_from_slice(&received_bytes.to_be_bytes());
        b
    }
}

mod afield {
    pub const RESERVED: usize = 2;
    pub const KEY_ID: usize = 4;
    pub const SEQ: usize = 8;
    pub const MAC: usize = 16;
}

tlv_view!(
    /// A view of the auth TLV.
    AuthTlv
);

impl<T: AsRef<[u8]>> AuthTlv<T> {
    /// Checks that the buffer holds a 32-byte TLV with Length 30.
    pub fn check_len(&self) -> Result<()> {
        check_tlv(self.buffer.as_ref(), None, AUTH_TLV_SIZE)
    }

    /// Key ID.
    pub fn key_id(&self) -> u32 {
        be32(self.buffer.as_ref(), afield::KEY_ID)
    }

    /// Sequence number (strictly increasing per sender and key; replay protection).
    pub fn seq(&self) -> u64 {
        be64(self.buffer.as_ref(), afield::SEQ)
    }

    /// The truncated MAC.
    pub fn mac(&self) -> &[u8] {
        &self.buffer.as_ref()[afield::MAC..AUTH_TLV_SIZE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AuthTlv<T> {
    /// The MAC field, mutable.
    pub fn mac_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[afield::MAC..AUTH_TLV_SIZE]
    }
}

/// Auth TLV contents (the MAC itself is computed over the packet, see `srv6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuthRepr {
    /// Key ID.
    pub key_id: u32,
    /// Sequence number.
    pub seq: u64,
}

impl AuthRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(t: &AuthTlv<T>) -> Result<Self> {
        t.check_len()?;
        Ok(AuthRepr {
            key_id: t.key_id(),
            seq: t.seq(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        AUTH_TLV_SIZE
    }

    /// Writes the TLV with type `kind` and a zero MAC.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, kind: u8, t: &mut AuthTlv<T>) {
        let b = &mut t.buffer.as_mut()[..AUTH_TLV_SIZE];
        b[0] = kind;
        b[1] = (AUTH_TLV_SIZE - 2) as u8;
        b[afield::RESERVED..afield::KEY_ID].fill(0);
        b[afield::KEY_ID..afield::SEQ].copy_from_slice(&self.key_id.to_be_bytes());
        b[afield::SEQ..afield::MAC].copy_from_slice(&self.seq.to_be_bytes());
        b[afield::MAC..].fill(0);
    }
}

/// Offset (within the TLV area) of the MAC field of an auth TLV starting at `tlv_offset`.
pub(crate) const fn auth_mac_offset(tlv_offset: usize) -> usize {
    tlv_offset + afield::MAC
}

/// Everything hirt finds in one SRH TLV area, in one pass. Unknown TLVs and padding are skipped;
/// a repeated hirt TLV type is malformed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HirtTlvs<'a> {
    /// The source TLV and its offset in the TLV area.
    pub source: Option<(usize, SourceRepr)>,
    /// The repair TLV and its offset.
    pub repair: Option<(usize, RepairRepr)>,
    /// The feedback TLV and its offset.
    pub feedback: Option<(usize, FeedbackRepr<'a>)>,
    /// The auth TLV and its offset.
    pub auth: Option<(usize, AuthRepr)>,
    /// Offset of the RFC 8754 HMAC TLV, if any.
    pub hmac: Option<usize>,
}

impl<'a> HirtTlvs<'a> {
    /// Parses a TLV area (e.g. `SrhPacket::tlvs()`).
    pub fn parse(tlvs: &'a [u8], types: &TlvTypes) -> Result<Self> {
        let mut out = HirtTlvs::default();
        for t in TlvIter::new(tlvs) {
            let t = t?;
            let raw = &tlvs[t.offset..t.offset + t.wire_len()];
            let k = t.kind;
            if k == TLV_HMAC {
                if out.hmac.replace(t.offset).is_some() {
                    return Err(Error);
                }
            } else if k == types.source {
                let r = SourceRepr::parse(&SourceTlv::new_checked(raw)?)?;
                if out.source.replace((t.offset, r)).is_some() {
                    return Err(Error);
                }
            } else if k == types.repair {
                let r = RepairRepr::parse(&RepairTlv::new_checked(raw)?)?;
                if out.repair.replace((t.offset, r)).is_some() {
                    return Err(Error);
                }
            } else if k == types.feedback {
                let r = FeedbackRepr::parse(&FeedbackTlv::new_checked(raw)?)?;
                if out.feedback.replace((t.offset, r)).is_some() {
                    return Err(Error);
                }
            } else if k == types.auth {
                let r = AuthRepr::parse(&AuthTlv::new_checked(raw)?)?;
                if out.auth.replace((t.offset, r)).is_some() {
                    return Err(Error);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SOURCE: [u8; 8] = [124, 6, 0x00, 0x07, 0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn source_four_ways() {
        let t = SourceTlv::new_checked(&SOURCE[..]).unwrap();
        assert_eq!(
            (t.kind(), t.length(), t.stream(), t.esi()),
            (124, 6, 7, 0xdeadbeef)
        );
        let r = SourceRepr::parse(&t).unwrap();
        assert_eq!(
            r,
            SourceRepr {
                stream: 7,
                esi: 0xdeadbeef
            }
        );
        let mut b = [0u8; 8];
        let mut v = SourceTlv::new_unchecked(&mut b[..]);
        v.set_kind(124);
        v.set_length(6);
        v.set_stream(7);
        v.set_esi(0xdeadbeef);
        assert_eq!(b, SOURCE);
        assert_eq!(r.to_bytes(124), SOURCE);
        assert!(SourceTlv::new_checked(&SOURCE[..7]).is_err());
        let mut bad = SOURCE;
        bad[1] = 5;
        assert!(SourceTlv::new_checked(&bad[..]).is_err());
    }

    static REPAIR: [u8; 24] = [
        125, 22, 0x00, 0x02, // type, len, stream 2
        0x05, 0x0f, 0x00, 0x04, // scheme RS, DT 15, NSS 4
        0x00, 0x00, 0x01, 0x00, // first ESI 256
        0x00, 0x01, 0x00, 0x03, // stride 1, repair key 3
        0x11, 0x22, 0x33, 0x44, // timestamp
        0x05, 0x02, 0x00, 0x00, // payload length 1282, reserved
    ];

    fn repair_repr() -> RepairRepr {
        RepairRepr {
            stream: 2,
            info: RepairInfo {
                scheme: SchemeId::ReedSolomon,
                first_esi: 256,
                nss: 4,
                stride: 1,
                repair_key: 3,
                dt: 15,
            },
            timestamp: 0x11223344,
            payload_len: 1282,
        }
    }

    #[test]
    fn repair_four_ways() {
        let t = RepairTlv::new_checked(&REPAIR[..]).unwrap();
        assert_eq!(t.stream(), 2);
        assert_eq!(t.scheme(), SchemeId::ReedSolomon);
        assert_eq!((t.dt(), t.nss(), t.first_esi()), (15, 4, 256));
        assert_eq!(
            (t.stride(), t.repair_key(), t.timestamp()),
            (1, 3, 0x11223344)
        );
        assert_eq!(t.payload_len(), 1282);
        assert_eq!(RepairRepr::parse(&t).unwrap(), repair_repr());
        let mut b = [0xffu8; 24];
        let mut v = RepairTlv::new_unchecked(&mut b[..]);
        v.set_kind(125);
        v.set_length(22);
        v.set_stream(2);
        v.set_scheme(SchemeId::ReedSolomon);
        v.set_dt(15);
        v.set_nss(4);
        v.set_first_esi(256);
        v.set_stride(1);
        v.set_repair_key(3);
        v.set_timestamp(0x11223344);
        v.set_payload_len(1282);
        v.clear_reserved();
        assert_eq!(b, REPAIR);
        assert_eq!(repair_repr().to_bytes(125), REPAIR);
    }

    static FEEDBACK: [u8; 16] = [
        126, 14, 0x00, 0x02, // type, len 14 (16 total), stream 2
        0x01, 0x03, 0x00, 0x00, // path 1, body len 3, reserved
        0xca, 0xfe, 0xba, 0xbe, // ts echo
        0xa1, 0xa2, 0xa3, 0x00, // body + 1 byte of zero padding
    ];

    #[test]
    fn feedback_four_ways() {
        let t = FeedbackTlv::new_checked(&FEEDBACK[..]).unwrap();
        assert_eq!(
            (t.stream(), t.path_id(), t.timestamp_echo()),
            (2, 1, 0xcafebabe)
        );
        assert_eq!(t.body(), &[0xa1, 0xa2, 0xa3]);
        let r = FeedbackRepr::parse(&t).unwrap();
        let want = FeedbackRepr {
            stream: 2,
            path_id: 1,
            kind: FEEDBACK_KIND_FEC,
            timestamp_echo: 0xcafebabe,
            body: &[0xa1, 0xa2, 0xa3],
        };
        assert_eq!(r, want);
        assert_eq!(want.buffer_len(), 16);
        let mut b = [0xffu8; 16];
        want.emit(126, &mut FeedbackTlv::new_unchecked(&mut b[..]));
        assert_eq!(b, FEEDBACK);
        // Body length past the TLV.
        let mut bad = FEEDBACK;
        bad[5] = 5;
        assert!(FeedbackTlv::new_checked(&bad[..]).is_err());
        // TLV not a multiple of 8.
        let mut bad = FEEDBACK;
        bad[1] = 13;
        assert!(FeedbackTlv::new_checked(&bad[..]).is_err());
    }

    /// A probe reply on path 3: kind 2 in byte 6, its 12-byte body.
    static PROBE_REPLY: [u8; 24] = [
        126, 22, 0x00, 0x03, // type, len 22 (24 total), stream 3
        0x03, 0x0c, 0x02, 0x00, // path 3, body len 12, kind 2 (probe reply), reserved
        0x00, 0x01, 0x02, 0x03, // ts echo
        0x00, 0x00, 0x00, 0x2a, // sent echo 42
        0x00, 0x00, 0x00, 0x28, // received 40
        0x00, 0x00, 0x10, 0x00, // received bytes 4096
    ];

    #[test]
    fn probe_and_reply_bodies_by_hand() {
        let t = FeedbackTlv::new_checked(&PROBE_REPLY[..]).unwrap();
        assert_eq!(
            (t.path_id(), t.kind_field(), t.timestamp_echo()),
            (3, FEEDBACK_KIND_PROBE_REPLY, 0x0001_0203)
        );
        let r = FeedbackRepr::parse(&t).unwrap();
        let body = ProbeReplyBody::new_checked(r.body).unwrap();
        assert_eq!(
            (body.sent_echo(), body.received(), body.received_bytes()),
            (42, 40, 4096)
        );
        let bytes = ProbeReplyBody::to_bytes(42, 40, 4096);
        assert_eq!(&bytes[..], &PROBE_REPLY[12..]);
        let want = FeedbackRepr {
            stream: 3,
            path_id: 3,
            kind: FEEDBACK_KIND_PROBE_REPLY,
            timestamp_echo: 0x0001_0203,
            body: &bytes,
        };
        assert_eq!(r, want);
        let mut b = [0xffu8; 24];
        want.emit(126, &mut FeedbackTlv::new_unchecked(&mut b[..]));
        assert_eq!(b, PROBE_REPLY);
        // A probe: kind 1, 4-byte body (padded to 16 bytes).
        let probe: [u8; 16] = [
            126, 14, 0, 0, 1, 4, 1, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7,
        ];
        let r = FeedbackRepr::parse(&FeedbackTlv::new_checked(&probe[..]).unwrap()).unwrap();
        assert_eq!((r.kind, r.path_id, r.timestamp_echo), (1, 1, 0xdeadbeef));
        assert_eq!(ProbeBody::new_checked(r.body).unwrap().sent(), 7);
        assert_eq!(ProbeBody::to_bytes(7), [0, 0, 0, 7]);
        assert!(ProbeBody::new_checked(&[0u8; 3][..]).is_err());
        assert!(ProbeReplyBody::new_checked(&[0u8; 11][..]).is_err());
    }

    static AUTH: [u8; 32] = [
        252, 30, 0, 0, 0x00, 0x00, 0x00, 0x09, // type, len, reserved, key id 9
        0, 0, 0, 0, 0, 0, 0x01, 0x02, // seq 0x102
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn auth_four_ways() {
        let t = AuthTlv::new_checked(&AUTH[..]).unwrap();
        assert_eq!((t.key_id(), t.seq()), (9, 0x102));
        assert_eq!(t.mac(), &[0u8; 16]);
        let r = AuthRepr::parse(&t).unwrap();
        assert_eq!(
            r,
            AuthRepr {
                key_id: 9,
                seq: 0x102
            }
        );
        let mut b = [0xffu8; 32];
        r.emit(252, &mut AuthTlv::new_unchecked(&mut b[..]));
        assert_eq!(b, AUTH);
    }

    #[test]
    fn hirt_tlvs_skips_unknown_and_rejects_duplicates() {
        let mut area = Vec::new();
        area.extend_from_slice(&[0x70, 0x02, 0xaa, 0xbb]); // unknown type 0x70
        area.extend_from_slice(&SOURCE);
        area.extend_from_slice(&REPAIR);
        area.extend_from_slice(&[0x04, 0x02, 0, 0]); // PadN
        let types = TlvTypes::default();
        let h = HirtTlvs::parse(&area, &types).unwrap();
        assert_eq!(
            h.source,
            Some((
                4,
                SourceRepr {
                    stream: 7,
                    esi: 0xdeadbeef
                }
            ))
        );
        assert_eq!(h.repair, Some((12, repair_repr())));
        assert!(h.feedback.is_none() && h.auth.is_none() && h.hmac.is_none());
        area.extend_from_slice(&SOURCE);
        assert!(HirtTlvs::parse(&area, &types).is_err());
        // Configurable types: with other values the same bytes are all unknown.
        let other = TlvTypes {
            source: 1,
            repair: 2,
            feedback: 3,
            auth: 6,
        };
        assert_eq!(HirtTlvs::parse(&area, &other).unwrap(), HirtTlvs::default());
    }
}
