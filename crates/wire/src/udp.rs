//! The UDP tunnel framing: the plaintext that the dataplane seals with its AEAD (the AEAD
//! header/nonce and tag wrap around it and are not part of this format).
//!
//! Common header (4 bytes), then a per-type header, then the payload up to the end of the
//! (decrypted) datagram:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  Type |    Path ID    |           Stream ID           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Path ID: the path (the sender's socket / underlay route) the datagram was sent on, 0 for a
//! tunnel with one path. It sits inside the AEAD like everything else, so a path's datagrams
//! cannot be forged or moved to another path's counters.
//!
//! Type 0, source (8-byte header):
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                              ESI                              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             inner IP packet (from the TUN device) ...         |
//!
//! Type 1, repair (20-byte header):
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Scheme     |      DT       |              NSS              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          First ESI                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Stride             |          Repair_Key           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          Timestamp                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             repair symbol (length-protected) ...              |
//!
//! Type 2, feedback (12-byte header):
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Path ID    |   Reserved    |           Reserved            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        Timestamp Echo                         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             feedback body (hirt-core Feedback::encode) ...    |
//!
//! Type 3, keepalive (8-byte header, Stream ID 0, no payload):
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          Timestamp                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Type 4, path probe (12-byte header, Stream ID 0, no payload): sent on one path, answered
//! at once on the same path.
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          Timestamp                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Sent (datagrams sent on the path, this one too)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Type 5, path probe reply (20-byte header, Stream ID 0, no payload): the probe's timestamp
//! and sent count echoed, and what the replier received on the path so far (all counts wrap).
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        Timestamp Echo                         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          Sent Echo                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Received (datagrams)                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Received (bytes)                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! No length fields: the datagram (after AEAD opening) delimits the payload, and the repair
//! symbol protects the source lengths itself.

use hirt_fec::{RepairInfo, SchemeId};

use crate::{be16, be32, Error, Result};

/// Framing version carried in every packet.
pub const VERSION: u8 = 1;
/// Common header length.
pub const COMMON_LEN: usize = 4;
/// Source header length.
pub const SOURCE_LEN: usize = 8;
/// Repair header length.
pub const REPAIR_LEN: usize = 20;
/// Feedback header length.
pub const FEEDBACK_LEN: usize = 12;
/// Keepalive length.
pub const KEEPALIVE_LEN: usize = 8;
/// Path probe length.
pub const PROBE_LEN: usize = 12;
/// Path probe reply length.
pub const PROBE_REPLY_LEN: usize = 20;

/// Packet type. Unknown values are kept (and rejected by [`UdpRepr::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpKind {
    /// A source packet: ESI + the original packet.
    Source,
    /// A repair symbol.
    Repair,
    /// Decoder-to-encoder feedback.
    Feedback,
    /// Keepalive (NAT binding, peer liveness, address learning).
    Keepalive,
    /// A path probe (per-path RTT, loss and liveness).
    Probe,
    /// The answer to a path probe.
    ProbeReply,
    /// A type this build does not know.
    Unknown(u8),
}

impl UdpKind {
    /// Wire value (4 bits).
    pub fn to_u8(self) -> u8 {
        match self {
            UdpKind::Source => 0,
            UdpKind::Repair => 1,
            UdpKind::Feedback => 2,
            UdpKind::Keepalive => 3,
            UdpKind::Probe => 4,
            UdpKind::ProbeReply => 5,
            UdpKind::Unknown(v) => v & 0x0f,
        }
    }

    /// Parses the 4-bit wire value.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => UdpKind::Source,
            1 => UdpKind::Repair,
            2 => UdpKind::Feedback,
            3 => UdpKind::Keepalive,
            4 => UdpKind::Probe,
            5 => UdpKind::ProbeReply,
            v => UdpKind::Unknown(v),
        }
    }

    /// Header length of this type (common header included).
    pub fn header_len(self) -> usize {
        match self {
            UdpKind::Source => SOURCE_LEN,
            UdpKind::Repair => REPAIR_LEN,
            UdpKind::Feedback => FEEDBACK_LEN,
            UdpKind::Keepalive => KEEPALIVE_LEN,
            UdpKind::Probe => PROBE_LEN,
            UdpKind::ProbeReply => PROBE_REPLY_LEN,
            UdpKind::Unknown(_) => COMMON_LEN,
        }
    }
}

mod field {
    pub const VER_TYPE: usize = 0;
    pub const PATH_ID: usize = 1;
    pub const STREAM: usize = 2;
    // Per-type fields, after the common header.
    pub const ESI: usize = 4;
    pub const SCHEME: usize = 4;
    pub const DT: usize = 5;
    pub const NSS: usize = 6;
    pub const FIRST_ESI: usize = 8;
    pub const STRIDE: usize = 12;
    pub const REPAIR_KEY: usize = 14;
    pub const REPAIR_TS: usize = 16;
    pub const PATH: usize = 4;
    pub const TS_ECHO: usize = 8;
    pub const KEEPALIVE_TS: usize = 4;
    pub const PROBE_TS: usize = 4;
    pub const PROBE_SENT: usize = 8;
    pub const REPLY_RECEIVED: usize = 12;
    pub const REPLY_BYTES: usize = 16;
}

/// A view of a (decrypted) tunnel packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer, unchecked.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps and checks: the entry point for untrusted bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header of the packet's type is present. After this succeeds no accessor
    /// panics (a per-type getter on a packet of another type reads meaningless bytes of the
    /// header or payload, but stays in bounds only if the buffer is long enough; use
    /// [`UdpRepr::parse`] for typed access).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < COMMON_LEN || b.len() < self.kind().header_len() {
            return Err(Error);
        }
        Ok(())
    }

    /// Version (1).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE] >> 4
    }

    /// Packet type.
    pub fn kind(&self) -> UdpKind {
        UdpKind::from_u8(self.buffer.as_ref()[field::VER_TYPE] & 0x0f)
    }

    /// Stream ID.
    pub fn stream(&self) -> u16 {
        be16(self.buffer.as_ref(), field::STREAM)
    }

    /// The path the datagram was sent on.
    pub fn path_id(&self) -> u8 {
        self.buffer.as_ref()[field::PATH_ID]
    }

    /// The payload after this type's header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.kind().header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the path the datagram is sent on (after [`UdpRepr::emit`] or
    /// [`UdpRepr::emit_header`], which write path 0). The buffer must hold the common header.
    pub fn set_path_id(&mut self, path: u8) {
        self.buffer.as_mut()[field::PATH_ID] = path;
    }
}

/// A tunnel packet in high-level form. Zero-copy: payloads borrow the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpRepr<'a> {
    /// Source packet.
    Source {
        /// Stream ID.
        stream: u16,
        /// ESI.
        esi: u32,
        /// The original packet.
        payload: &'a [u8],
    },
    /// Repair packet.
    Repair {
        /// Stream ID.
        stream: u16,
        /// Repair description.
        info: RepairInfo,
        /// Sender timestamp (echoed in feedback for RTT).
        timestamp: u32,
        /// Repair symbol.
        payload: &'a [u8],
    },
    /// Feedback packet.
    Feedback {
        /// Stream ID.
        stream: u16,
        /// Path ID.
        path_id: u8,
        /// Timestamp echo.
        timestamp_echo: u32,
        /// Opaque feedback body.
        body: &'a [u8],
    },
    /// Keepalive.
    Keepalive {
        /// Sender timestamp.
        timestamp: u32,
    },
    /// Path probe.
    Probe {
        /// Sender timestamp (echoed in the reply for the path's RTT).
        timestamp: u32,
        /// Datagrams the sender sent on the path, this one included (wrapping).
        sent: u32,
    },
    /// Path probe reply.
    ProbeReply {
        /// The probe's timestamp.
        timestamp_echo: u32,
        /// The probe's sent count.
        sent_echo: u32,
        /// Datagrams the replier received on the path, the probe included (wrapping).
        received: u32,
        /// Bytes the replier received on the path (wrapping).
        received_bytes: u32,
    },
}

impl<'a> UdpRepr<'a> {
    /// Parses a packet; rejects other versions and unknown types.
    pub fn parse(p: &UdpPacket<&'a [u8]>) -> Result<Self> {
        p.check_len()?;
        if p.version() != VERSION {
            return Err(Error);
        }
        let b: &'a [u8] = p.buffer;
        let stream = p.stream();
        Ok(match p.kind() {
            UdpKind::Source => UdpRepr::Source {
                stream,
                esi: be32(b, field::ESI),
                payload: &b[SOURCE_LEN..],
            },
            UdpKind::Repair => UdpRepr::Repair {
                stream,
                info: RepairInfo {
                    scheme: SchemeId::from_u8(b[field::SCHEME]),
                    dt: b[field::DT],
                    nss: be16(b, field::NSS),
                    first_esi: be32(b, field::FIRST_ESI),
                    stride: be16(b, field::STRIDE),
                    repair_key: be16(b, field::REPAIR_KEY),
                },
                timestamp: be32(b, field::REPAIR_TS),
                payload: &b[REPAIR_LEN..],
            },
            UdpKind::Feedback => UdpRepr::Feedback {
                stream,
                path_id: b[field::PATH],
                timestamp_echo: be32(b, field::TS_ECHO),
                body: &b[FEEDBACK_LEN..],
            },
            UdpKind::Keepalive => UdpRepr::Keepalive {
                timestamp: be32(b, field::KEEPALIVE_TS),
            },
            UdpKind::Probe => UdpRepr::Probe {
                timestamp: be32(b, field::PROBE_TS),
                sent: be32(b, field::PROBE_SENT),
            },
            UdpKind::ProbeReply => UdpRepr::ProbeReply {
                timestamp_echo: be32(b, field::PROBE_TS),
                sent_echo: be32(b, field::PROBE_SENT),
                received: be32(b, field::REPLY_RECEIVED),
                received_bytes: be32(b, field::REPLY_BYTES),
            },
            UdpKind::Unknown(_) => return Err(Error),
        })
    }

    /// The packet type.
    pub fn kind(&self) -> UdpKind {
        match self {
            UdpRepr::Source { .. } => UdpKind::Source,
            UdpRepr::Repair { .. } => UdpKind::Repair,
            UdpRepr::Feedback { .. } => UdpKind::Feedback,
            UdpRepr::Keepalive { .. } => UdpKind::Keepalive,
            UdpRepr::Probe { .. } => UdpKind::Probe,
            UdpRepr::ProbeReply { .. } => UdpKind::ProbeReply,
        }
    }

    /// Header bytes [`Self::emit_header`] writes.
    pub fn header_len(&self) -> usize {
        self.kind().header_len()
    }

    fn payload(&self) -> &'a [u8] {
        match *self {
            UdpRepr::Source { payload, .. } | UdpRepr::Repair { payload, .. } => payload,
            UdpRepr::Feedback { body, .. } => body,
            UdpRepr::Keepalive { .. } | UdpRepr::Probe { .. } | UdpRepr::ProbeReply { .. } => &[],
        }
    }

    /// Total bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload().len()
    }

    /// Writes only the header, so the caller can place the payload itself (e.g. read the TUN
    /// packet right after it) and avoid a copy. Returns the header length, or `Err` if `buf`
    /// is too short.
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.header_len();
        let b = buf.get_mut(..n).ok_or(Error)?;
        b.fill(0);
        b[field::VER_TYPE] = (VERSION << 4) | self.kind().to_u8();
        let put16 =
            |b: &mut [u8], at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_be_bytes());
        let put32 =
            |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        match *self {
            UdpRepr::Source { stream, esi, .. } => {
                put16(b, field::STREAM, stream);
                put32(b, field::ESI, esi);
            }
            UdpRepr::Repair {
                stream,
                info,
                timestamp,
                ..
            } => {
                put16(b, field::STREAM, stream);
                b[field::SCHEME] = info.scheme.to_u8();
                b[field::DT] = info.dt;
                put16(b, field::NSS, info.nss);
                put32(b, field::FIRST_ESI, info.first_esi);
                put16(b, field::STRIDE, info.stride);
                put16(b, field::REPAIR_KEY, info.repair_key);
                put32(b, field::REPAIR_TS, timestamp);
            }
            UdpRepr::Feedback {
                stream,
                path_id,
                timestamp_echo,
                ..
            } => {
                put16(b, field::STREAM, stream);
                b[field::PATH] = path_id;
                put32(b, field::TS_ECHO, timestamp_echo);
            }
            UdpRepr::Keepalive { timestamp } => put32(b, field::KEEPALIVE_TS, timestamp),
            UdpRepr::Probe { timestamp, sent } => {
                put32(b, field::PROBE_TS, timestamp);
                put32(b, field::PROBE_SENT, sent);
            }
            UdpRepr::ProbeReply {
                timestamp_echo,
                sent_echo,
                received,
                received_bytes,
            } => {
                put32(b, field::PROBE_TS, timestamp_echo);
                put32(b, field::PROBE_SENT, sent_echo);
                put32(b, field::REPLY_RECEIVED, received);
                put32(b, field::REPLY_BYTES, received_bytes);
            }
        }
        Ok(n)
    }

    /// Writes header and payload. Returns the length, or `Err` if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error);
        }
        let h = self.emit_header(buf)?;
        buf[h..total].copy_from_slice(self.payload());
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SOURCE: [u8; 11] = [
        0x10, 0x00, 0x00, 0x03, 0x00, 0x00, 0x01, 0x02, 0x45, 0x00, 0x01,
    ];
    static REPAIR: [u8; 22] = [
        0x11, 0x00, 0x00, 0x03, // v1 repair, stream 3
        0x01, 0x07, 0x00, 0xc8, // RLC, DT 7, NSS 200
        0xff, 0xff, 0xff, 0xf0, // first ESI
        0x00, 0x01, 0xbe, 0xef, // stride 1, key 0xbeef
        0x00, 0x00, 0x10, 0x00, // timestamp 4096
        0xaa, 0xbb, // payload
    ];
    static FEEDBACK: [u8; 14] = [
        0x12, 0x00, 0x00, 0x03, 0x02, 0, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x99, 0x98,
    ];
    static KEEPALIVE: [u8; 8] = [0x13, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef];
    static PROBE: [u8; 12] = [
        0x14, 0x00, 0x00, 0x00, // v1 probe, path 0, stream 0
        0x00, 0x01, 0x00, 0x02, // timestamp 65538
        0x00, 0x00, 0x00, 0x07, // sent 7
    ];
    static PROBE_REPLY: [u8; 20] = [
        0x15, 0x00, 0x00, 0x00, // v1 probe reply
        0x00, 0x01, 0x00, 0x02, // timestamp echo
        0x00, 0x00, 0x00, 0x07, // sent echo
        0x00, 0x00, 0x00, 0x05, // received 5
        0x00, 0x00, 0x10, 0x01, // 4097 bytes
    ];

    fn reprs() -> [(&'static [u8], UdpRepr<'static>); 6] {
        [
            (
                &SOURCE,
                UdpRepr::Source {
                    stream: 3,
                    esi: 0x102,
                    payload: &[0x45, 0x00, 0x01],
                },
            ),
            (
                &REPAIR,
                UdpRepr::Repair {
                    stream: 3,
                    info: RepairInfo {
                        scheme: SchemeId::Rlc,
                        first_esi: 0xffff_fff0,
                        nss: 200,
                        stride: 1,
                        repair_key: 0xbeef,
                        dt: 7,
                    },
                    timestamp: 4096,
                    payload: &[0xaa, 0xbb],
                },
            ),
            (
                &FEEDBACK,
                UdpRepr::Feedback {
                    stream: 3,
                    path_id: 2,
                    timestamp_echo: 0x01020304,
                    body: &[0x99, 0x98],
                },
            ),
            (
                &KEEPALIVE,
                UdpRepr::Keepalive {
                    timestamp: 0xdeadbeef,
                },
            ),
            (
                &PROBE,
                UdpRepr::Probe {
                    timestamp: 65538,
                    sent: 7,
                },
            ),
            (
                &PROBE_REPLY,
                UdpRepr::ProbeReply {
                    timestamp_echo: 65538,
                    sent_echo: 7,
                    received: 5,
                    received_bytes: 4097,
                },
            ),
        ]
    }

    #[test]
    fn deconstruct() {
        let p = UdpPacket::new_checked(&SOURCE[..]).unwrap();
        assert_eq!((p.version(), p.kind(), p.stream()), (1, UdpKind::Source, 3));
        assert_eq!(p.payload(), &[0x45, 0x00, 0x01]);
        let p = UdpPacket::new_checked(&REPAIR[..]).unwrap();
        assert_eq!(
            (p.kind(), p.payload()),
            (UdpKind::Repair, &[0xaa, 0xbb][..])
        );
        let p = UdpPacket::new_checked(&KEEPALIVE[..]).unwrap();
        assert_eq!((p.kind(), p.payload().len()), (UdpKind::Keepalive, 0));
    }

    #[test]
    fn parse_and_emit() {
        for (bytes, repr) in reprs() {
            let p = UdpPacket::new_checked(bytes).unwrap();
            assert_eq!(UdpRepr::parse(&p).unwrap(), repr);
            assert_eq!(repr.buffer_len(), bytes.len());
            let mut buf = [0xffu8; 64];
            let n = repr.emit(&mut buf).unwrap();
            assert_eq!(&buf[..n], bytes);
            assert!(repr.emit(&mut buf[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn path_id_is_the_common_headers_second_byte() {
        let mut b = SOURCE;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap().path_id(), 0);
        UdpPacket::new_unchecked(&mut b[..]).set_path_id(3);
        assert_eq!(b[1], 3);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.path_id(), 3);
        // The path id does not change what the frame says.
        assert_eq!(
            UdpRepr::parse(&p).unwrap(),
            UdpRepr::parse(&UdpPacket::new_checked(&SOURCE[..]).unwrap()).unwrap()
        );
    }

    #[test]
    fn short_probes_are_refused() {
        assert!(UdpPacket::new_checked(&PROBE[..11]).is_err());
        assert!(UdpPacket::new_checked(&PROBE_REPLY[..19]).is_err());
        // A probe header on a reply's type byte is too short for a reply.
        let mut b = PROBE;
        b[0] = 0x15;
        assert!(UdpPacket::new_checked(&b[..]).is_err());
    }

    #[test]
    fn construct_header_then_payload() {
        let mut buf = [0u8; 11];
        let r = UdpRepr::Source {
            stream: 3,
            esi: 0x102,
            payload: &[],
        };
        let h = r.emit_header(&mut buf).unwrap();
        buf[h..].copy_from_slice(&[0x45, 0x00, 0x01]);
        assert_eq!(buf, SOURCE);
    }

    #[test]
    fn malformed() {
        assert!(UdpPacket::new_checked(&REPAIR[..19]).is_err());
        assert!(UdpPacket::new_checked(&SOURCE[..3]).is_err());
        let mut b = SOURCE;
        b[0] = 0x20; // version 2
        assert!(UdpRepr::parse(&UdpPacket::new_checked(&b[..]).unwrap()).is_err());
        b[0] = 0x17; // unknown type 7
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.kind(), UdpKind::Unknown(7));
        assert!(UdpRepr::parse(&p).is_err());
    }
}
