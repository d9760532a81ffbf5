//! Decoder-to-encoder feedback: what the decoder observed on one stream during one period.
//!
//! One message per stream per period (every `feedback_period` sources, or after
//! `feedback_interval` with sparse traffic). It carries what HIRT's controller needs (losses per
//! window, their squares, windows seen), what residual-loss and burst-aware controllers need
//! (residual loss after recovery, burst lengths, received/lost/recovered counts), and a timestamp
//! echo with the time the decoder held it, so the encoder measures the RTT. A path id leaves room
//! for several SRv6 paths with their own RTT and loss.
//!
//! Every counter covers the period since the previous feedback of the stream, so a lost feedback
//! only loses one period of observations: the encoder keeps its last estimate and never waits
//! for feedback (HIRT §IV-A).
//!
//! # Layout (version 1, 64 bytes, big-endian)
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------+---------------+-------------------------------+
//! |  version = 1  |     flags     |           stream id           |  0
//! +---------------+---------------+-------------------------------+
//! |    path id    |   CE marks    |        sequence number        |  4
//! +---------------+---------------+-------------------------------+
//! |                      highest ESI seen                         |  8
//! +---------------------------------------------------------------+
//! |                  sources received (originals)                 | 12
//! +---------------------------------------------------------------+
//! |                  sources declared lost                        | 16
//! +---------------------------------------------------------------+
//! |                  sources recovered                            | 20
//! +---------------------------------------------------------------+
//! |         residual: lost sources given up unrecovered           | 24
//! +---------------------------------------------------------------+
//! |                  repairs received                             | 28
//! +-------------------------------+-------------------------------+
//! |     loss windows closed       |   most losses in one window   | 32
//! +-------------------------------+-------------------------------+
//! |               sum of losses over those windows                | 36
//! +---------------------------------------------------------------+
//! |           sum of squared losses over those windows            | 40
//! +---------------------------------------------------------------+
//! |                  loss bursts ended                            | 44
//! +---------------------------------------------------------------+
//! |             sources lost in those bursts                      | 48
//! +-------------------------------+-------------------------------+
//! |        longest burst          |   loss window size (HIRT n_f) | 52
//! +-------------------------------+-------------------------------+
//! |       timestamp echo (encoder clock, us, of latest repair)    | 56
//! +---------------------------------------------------------------+
//! |       hold time (us, from that repair's arrival to now)       | 60
//! +---------------------------------------------------------------+ 64
//! |   local drops (only with flag 0x02: then the body is 68 bytes)| 64
//! +---------------+---------------+-------------------------------+ 64 or 68 = L
//! |  ranges n     |   reserved    |           reserved            | L     (only with flag 0x04)
//! +---------------+---------------+-------------------------------+
//! |                  first missing ESI of range 1                 | L+4
//! +-------------------------------+-------------------------------+
//! |        length of range 1      |  first missing ESI of range 2 | L+8
//! +-------------------------------+-------------------------------+
//! |  ... (n ranges of 6 bytes, 1 <= n <= 16, each length >= 1)    |
//! +---------------------------------------------------------------+ L + 4 + 6n
//! ```
//! flags: bit 0 (0x01) = the timestamp echo and hold time are valid; bit 1 (0x02) = the local
//! drops field follows; bit 2 (0x04) = a loss report follows (after the local drops, if any).
//! Other bits are reserved (sent 0, ignored). Reserved bytes are sent 0 and ignored.
//! CE marks: the stream's packets (sources and repairs) that arrived with their outer header
//! marked CE (ECN "congestion experienced") in the period, saturating at 255; a peer that does
//! not count them sends 0 there.
//! [`Feedback::decode`] accepts a longer buffer (later versions may append fields) and never
//! panics; a body without flags 0x02 and 0x04 is 64 bytes, and a decoder that does not know a
//! flag reads a longer body as its first 64 (or 68) bytes, so peers of different versions
//! interoperate. [`FeedbackView`] reads the fields in place, after one check of every length.
//!
//! **Loss report** (loss-triggered repair): the ESIs the decoder has declared lost and not
//! recovered, as up to [`MAX_RANGES`] runs, newest first. The encoder answers with at most as
//! many repairs as the report names (and no more than its repair budget allows), so a report
//! cannot make the encoder send more than it asks for; it rides in the feedback body, which
//! every dataplane authenticates with the rest of the packet, so it cannot be forged either.
//!
//! **Local drops** are packets the decoder's own host dropped before the decoder could read
//! them (the queue of its SID or TUN device, its UDP receive buffer): they look exactly like
//! link losses, but more repairs make them worse, not better (HIRT §V, "Overloading
//! detection": the vicious circle). The encoder takes them out before its controller sees the
//! period ([`Feedback::link_only`]).

use thiserror::Error;

use crate::{Esi, PathId, StreamId};

/// The only version this build writes and reads.
pub const VERSION: u8 = 1;

/// Flag: `ts_echo` / `hold_us` are valid.
const FLAG_TS: u8 = 0x01;
/// Flag: the local drops field (bytes 64..68) is present.
const FLAG_LOCAL_DROPS: u8 = 0x02;
/// Flag: a loss report follows.
const FLAG_LOSS_REPORT: u8 = 0x04;
/// Length of a body without the local drops field.
const BASE_LEN: usize = 64;
/// Length of the local drops field.
const DROPS_LEN: usize = 4;
/// Length of the loss report's header (range count and reserved bytes).
const REPORT_HEADER_LEN: usize = 4;
/// Length of one range of a loss report (first ESI, length).
const RANGE_LEN: usize = 6;
/// Most ranges one loss report names.
pub const MAX_RANGES: usize = 16;

/// Why a feedback body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FeedbackError {
    /// Shorter than [`Feedback::MAX_LEN`].
    #[error("feedback truncated")]
    Truncated,
    /// A version this build does not read.
    #[error("unknown feedback version {0}")]
    Version(u8),
    /// A loss report with no range, more than [`MAX_RANGES`], or an empty range.
    #[error("malformed loss report")]
    LossReport,
}

/// A run of consecutive missing ESIs: `first`, `first + 1`, ..., `first + len - 1` (wrapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EsiRange {
    /// First missing ESI.
    pub first: Esi,
    /// How many (at least 1 on the wire).
    pub len: u16,
}

impl EsiRange {
    /// Whether `esi` lies in the range (serial arithmetic).
    pub fn contains(&self, esi: Esi) -> bool {
        esi.wrapping_sub(self.first) < u32::from(self.len)
    }
}

/// What a decoder reports missing: up to [`MAX_RANGES`] runs of ESIs it declared lost and has
/// not recovered. Empty = no report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LossReport {
    ranges: [EsiRange; MAX_RANGES],
    n: u8,
}

impl LossReport {
    /// Appends a range; `false` (and nothing changes) when full or when `len` is 0.
    pub fn push(&mut self, range: EsiRange) -> bool {
        if range.len == 0 || usize::from(self.n) >= MAX_RANGES {
            return false;
        }
        self.ranges[usize::from(self.n)] = range;
        self.n += 1;
        true
    }

    /// The ranges, in the order given.
    pub fn ranges(&self) -> &[EsiRange] {
        &self.ranges[..usize::from(self.n)]
    }

    /// No range.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// ESIs named (sum of the range lengths).
    pub fn missing(&self) -> u32 {
        self.ranges().iter().map(|r| u32::from(r.len)).sum()
    }

    fn encoded_len(&self) -> usize {
        if self.n == 0 {
            0
        } else {
            REPORT_HEADER_LEN + RANGE_LEN * usize::from(self.n)
        }
    }
}

/// A feedback body read in place: [`FeedbackView::new`] checks the version and every length
/// once; the accessors then read the fields from the caller's bytes without copying.
#[derive(Clone, Copy, Debug)]
pub struct FeedbackView<'a> {
    base: &'a [u8; BASE_LEN],
    drops: Option<&'a [u8; DROPS_LEN]>,
    ranges: &'a [u8],
}

impl<'a> FeedbackView<'a> {
    /// Checks `buf` (untrusted: never panics); trailing bytes are ignored.
    pub fn new(buf: &'a [u8]) -> Result<Self, FeedbackError> {
        let base: &[u8; BASE_LEN] = buf
            .get(..BASE_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(FeedbackError::Truncated)?;
        if base[0] != VERSION {
            return Err(FeedbackError::Version(base[0]));
        }
        let mut at = BASE_LEN;
        let drops = if base[1] & FLAG_LOCAL_DROPS != 0 {
            let d: &[u8; DROPS_LEN] = buf
                .get(at..at + DROPS_LEN)
                .and_then(|s| s.try_into().ok())
                .ok_or(FeedbackError::Truncated)?;
            at += DROPS_LEN;
            Some(d)
        } else {
            None
        };
        let ranges: &[u8] = if base[1] & FLAG_LOSS_REPORT != 0 {
            let n = usize::from(*buf.get(at).ok_or(FeedbackError::Truncated)?);
            if n == 0 || n > MAX_RANGES {
                return Err(FeedbackError::LossReport);
            }
            let start = at + REPORT_HEADER_LEN;
            let body = buf
                .get(start..start + n * RANGE_LEN)
                .ok_or(FeedbackError::Truncated)?;
            if body.chunks_exact(RANGE_LEN).any(|r| r[4] == 0 && r[5] == 0) {
                return Err(FeedbackError::LossReport);
            }
            body
        } else {
            &[]
        };
        Ok(FeedbackView {
            base,
            drops,
            ranges,
        })
    }

    fn u16_at(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.base[at], self.base[at + 1]])
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = self.base;
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The stream.
    pub fn stream(&self) -> StreamId {
        self.u16_at(2)
    }

    /// The feedback sequence number.
    pub fn seq(&self) -> u16 {
        self.u16_at(6)
    }

    /// Local drops (0 when the field is absent).
    pub fn local_drops(&self) -> u32 {
        self.drops.map_or(0, |d| u32::from_be_bytes(*d))
    }

    /// The loss report's ranges, in wire order (none without flag 0x04).
    pub fn loss_ranges(&self) -> impl Iterator<Item = EsiRange> + 'a {
        self.ranges.chunks_exact(RANGE_LEN).map(|r| EsiRange {
            first: u32::from_be_bytes([r[0], r[1], r[2], r[3]]),
            len: u16::from_be_bytes([r[4], r[5]]),
        })
    }

    /// Copies every field out.
    pub fn to_feedback(&self) -> Feedback {
        let b = self.base;
        let mut loss_report = LossReport::default();
        for r in self.loss_ranges() {
            loss_report.push(r);
        }
        Feedback {
            stream: self.stream(),
            path: b[4],
            seq: self.seq(),
            highest_esi: self.u32_at(8),
            received: self.u32_at(12),
            lost: self.u32_at(16),
            recovered: self.u32_at(20),
            residual: self.u32_at(24),
            repairs: self.u32_at(28),
            windows: self.u16_at(32),
            window_loss_max: self.u16_at(34),
            loss_sum: self.u32_at(36),
            loss_sq_sum: self.u32_at(40),
            bursts: self.u32_at(44),
            burst_sum: self.u32_at(48),
            burst_max: self.u16_at(52),
            loss_window: self.u16_at(54),
            echo: (b[1] & FLAG_TS != 0).then(|| TimestampEcho {
                ts: self.u32_at(56),
                hold_us: self.u32_at(60),
            }),
            ce_marks: b[5],
            local_drops: self.local_drops(),
            loss_report,
        }
    }
}

/// A timestamp echo: the encoder's send timestamp of the latest repair the decoder received, and
/// how long the decoder held it before sending this feedback. RTT = now - ts - hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TimestampEcho {
    /// The echoed repair timestamp (encoder clock, microseconds, wraps).
    pub ts: u32,
    /// Microseconds between that repair's arrival and this feedback's emission.
    pub hold_us: u32,
}

/// One stream's observations for one period. Counters are per period (not cumulative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Feedback {
    /// The stream.
    pub stream: StreamId,
    /// The path these observations are about (0 until multipath).
    pub path: PathId,
    /// Feedback sequence number of the stream (wraps); the encoder ignores old ones.
    pub seq: u16,
    /// Highest source ESI the decoder has seen (sources or repair coverage).
    pub highest_esi: Esi,
    /// Original source packets received (first time).
    pub received: u32,
    /// ESIs declared lost on the link (see the loss-detection rule in `docs/core.md`).
    pub lost: u32,
    /// Sources recovered by the code.
    pub recovered: u32,
    /// Lost sources that left the recovery horizon unrecovered: the residual loss.
    pub residual: u32,
    /// Repair packets received.
    pub repairs: u32,
    /// HIRT loss windows (of `loss_window` ESIs) closed in the period.
    pub windows: u16,
    /// Most losses seen in one of those windows.
    pub window_loss_max: u16,
    /// Sum over those windows of the losses per window.
    pub loss_sum: u32,
    /// Sum over those windows of the squared losses per window.
    pub loss_sq_sum: u32,
    /// Loss bursts (runs of consecutive lost ESIs) that ended in the period.
    pub bursts: u32,
    /// Lost ESIs in those bursts (mean burst length = `burst_sum / bursts`).
    pub burst_sum: u32,
    /// Longest of those bursts (saturating).
    pub burst_max: u16,
    /// HIRT's n_f: ESIs per loss window (what `windows` / `loss_sum` are counted over).
    pub loss_window: u16,
    /// Timestamp echo, if a repair with a timestamp arrived since the last feedback.
    pub echo: Option<TimestampEcho>,
    /// Packets of the stream that arrived marked CE in the period (saturating): a queue on the
    /// path marks instead of dropping, so the path is congested (see `Encoder`).
    pub ce_marks: u8,
    /// Packets the decoder's host dropped before the decoder read them, in the period (its
    /// device queue or socket buffer; every stream of that decoder reports them). 0 = none or
    /// not measured.
    pub local_drops: u32,
    /// ESIs declared lost and not recovered (loss-triggered repair; empty = no report).
    pub loss_report: LossReport,
}

impl Feedback {
    /// Largest encoded size in bytes (64, + 4 with local drops, + 4 + 6 per range with a loss
    /// report).
    pub const MAX_LEN: usize = BASE_LEN + DROPS_LEN + REPORT_HEADER_LEN + RANGE_LEN * MAX_RANGES;

    /// Bytes [`Feedback::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let drops = if self.local_drops > 0 { DROPS_LEN } else { 0 };
        BASE_LEN + drops + self.loss_report.encoded_len()
    }

    /// Writes the encoding (64 bytes, more with local drops or a loss report) into the front of
    /// `buf`; returns the bytes written, or `None` if `buf` is too short.
    pub fn encode(&self, buf: &mut [u8]) -> Option<usize> {
        let len = self.encoded_len();
        let out = buf.get_mut(..len)?;
        let (mut flags, echo) = match self.echo {
            Some(e) => (FLAG_TS, e),
            None => (0, TimestampEcho::default()),
        };
        let mut at = BASE_LEN;
        if self.local_drops > 0 {
            flags |= FLAG_LOCAL_DROPS;
            out[at..at + DROPS_LEN].copy_from_slice(&self.local_drops.to_be_bytes());
            at += DROPS_LEN;
        }
        if !self.loss_report.is_empty() {
            flags |= FLAG_LOSS_REPORT;
            out[at..at + REPORT_HEADER_LEN].copy_from_slice(&[self.loss_report.n, 0, 0, 0]);
            at += REPORT_HEADER_LEN;
            for r in self.loss_report.ranges() {
                out[at..at + 4].copy_from_slice(&r.first.to_be_bytes());
                out[at + 4..at + RANGE_LEN].copy_from_slice(&r.len.to_be_bytes());
                at += RANGE_LEN;
            }
        }
        out[0] = VERSION;
        out[1] = flags;
        out[2..4].copy_from_slice(&self.stream.to_be_bytes());
        out[4] = self.path;
        out[5] = self.ce_marks;
        out[6..8].copy_from_slice(&self.seq.to_be_bytes());
        let words: [(usize, u32); 13] = [
            (8, self.highest_esi),
            (12, self.received),
            (16, self.lost),
            (20, self.recovered),
            (24, self.residual),
            (28, self.repairs),
            (36, self.loss_sum),
            (40, self.loss_sq_sum),
            (44, self.bursts),
            (48, self.burst_sum),
            (56, echo.ts),
            (60, echo.hold_us),
            (
                32,
                (u32::from(self.windows) << 16) | u32::from(self.window_loss_max),
            ),
        ];
        for (at, v) in words {
            out[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        out[52..54].copy_from_slice(&self.burst_max.to_be_bytes());
        out[54..56].copy_from_slice(&self.loss_window.to_be_bytes());
        Some(len)
    }

    /// The encoding (convenience for tests and the simulator).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        // Cannot fail: the buffer is exactly as long as the encoding.
        let _ = self.encode(&mut b);
        b
    }

    /// Parses a feedback body. Untrusted input: never panics; trailing bytes are ignored.
    pub fn decode(buf: &[u8]) -> Result<Feedback, FeedbackError> {
        FeedbackView::new(buf).map(|v| v.to_feedback())
    }

    /// The period as the link saw it: the decoder's local drops taken out of its losses.
    /// Which lost packets were dropped locally is not known, so `lost` loses `local_drops`
    /// (never below 0) and the statistics made of losses (residual, window sums and maximum,
    /// bursts) are scaled by the share of losses that remains (squares by its square).
    /// Recoveries, repairs and the rest stay as they are.
    pub fn link_only(&self) -> Feedback {
        if self.local_drops == 0 || self.lost == 0 {
            return *self;
        }
        let link = self.lost.saturating_sub(self.local_drops);
        let f = f64::from(link) / f64::from(self.lost);
        let s32 = |x: u32, k: f64| (f64::from(x) * k).round() as u32;
        let s16 = |x: u16, k: f64| (f64::from(x) * k).round() as u16;
        Feedback {
            lost: link,
            residual: s32(self.residual, f).min(link),
            window_loss_max: s16(self.window_loss_max, f),
            loss_sum: s32(self.loss_sum, f),
            loss_sq_sum: s32(self.loss_sq_sum, f * f),
            bursts: s32(self.bursts, f),
            burst_sum: s32(self.burst_sum, f),
            burst_max: s16(self.burst_max, f),
            ..*self
        }
    }

    /// Residual loss ratio of the period: residual / (received + lost), 0 when nothing was seen.
    pub fn residual_ratio(&self) -> f64 {
        let seen = f64::from(self.received) + f64::from(self.lost);
        if seen == 0.0 {
            0.0
        } else {
            f64::from(self.residual) / seen
        }
    }

    /// Link loss ratio of the period: lost / (received + lost).
    pub fn loss_ratio(&self) -> f64 {
        let seen = f64::from(self.received) + f64::from(self.lost);
        if seen == 0.0 {
            0.0
        } else {
            f64::from(self.lost) / seen
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Feedback {
        Feedback {
            stream: 0x0102,
            path: 3,
            seq: 0x0405,
            highest_esi: 0x0607_0809,
            received: 197,
            lost: 6,
            recovered: 5,
            residual: 1,
            repairs: 9,
            windows: 1,
            window_loss_max: 6,
            loss_sum: 6,
            loss_sq_sum: 36,
            bursts: 2,
            burst_sum: 6,
            burst_max: 4,
            loss_window: 200,
            echo: Some(TimestampEcho {
                ts: 0xdead_beef,
                hold_us: 250,
            }),
            ce_marks: 0x11,
            local_drops: 0,
            loss_report: LossReport::default(),
        }
    }

    /// Hand-checked against the layout diagram in the module docs.
    const SAMPLE_BYTES: [u8; 64] = [
        0x01, 0x01, 0x01, 0x02, // version, flags (ts valid), stream
        0x03, 0x11, 0x04, 0x05, // path, CE marks 17, seq
        0x06, 0x07, 0x08, 0x09, // highest ESI
        0x00, 0x00, 0x00, 0xc5, // received 197
        0x00, 0x00, 0x00, 0x06, // lost 6
        0x00, 0x00, 0x00, 0x05, // recovered 5
        0x00, 0x00, 0x00, 0x01, // residual 1
        0x00, 0x00, 0x00, 0x09, // repairs 9
        0x00, 0x01, 0x00, 0x06, // windows 1, max loss 6
        0x00, 0x00, 0x00, 0x06, // loss sum 6
        0x00, 0x00, 0x00, 0x24, // loss squares 36
        0x00, 0x00, 0x00, 0x02, // bursts 2
        0x00, 0x00, 0x00, 0x06, // burst sum 6
        0x00, 0x04, 0x00, 0xc8, // longest burst 4, loss window 200
        0xde, 0xad, 0xbe, 0xef, // ts echo
        0x00, 0x00, 0x00, 0xfa, // hold 250 us
    ];

    #[test]
    fn emit_matches_hand_checked_bytes() {
        assert_eq!(sample().to_bytes(), SAMPLE_BYTES);
    }

    #[test]
    fn parse_hand_checked_bytes() {
        assert_eq!(Feedback::decode(&SAMPLE_BYTES), Ok(sample()));
    }

    #[test]
    fn no_echo_clears_flag_and_fields() {
        let fb = Feedback {
            echo: None,
            ..sample()
        };
        let b = fb.to_bytes();
        assert_eq!(b[1], 0);
        assert_eq!(&b[56..64], &[0; 8]);
        assert_eq!(Feedback::decode(&b).unwrap(), fb);
    }

    /// With local drops: flag 0x02 and four more bytes; the first 64 are those of the body
    /// without drops (but the flag), so a decoder that ignores the flag reads everything else.
    #[test]
    fn local_drops_append_a_field() {
        let fb = Feedback {
            local_drops: 0x0102_0304,
            ..sample()
        };
        let b = fb.to_bytes();
        assert_eq!(b.len(), 68);
        assert_eq!(b[1], 0x03);
        assert_eq!(&b[64..], &[0x01, 0x02, 0x03, 0x04]);
        assert_eq!(&b[2..64], &SAMPLE_BYTES[2..]);
        assert_eq!(Feedback::decode(&b), Ok(fb));
        // Flagged but cut short: refused, not misread.
        assert_eq!(Feedback::decode(&b[..66]), Err(FeedbackError::Truncated));
        // Without drops: the 64-byte body.
        assert_eq!(sample().to_bytes(), SAMPLE_BYTES);
    }

    fn report(ranges: &[(u32, u16)]) -> LossReport {
        let mut r = LossReport::default();
        for &(first, len) in ranges {
            assert!(r.push(EsiRange { first, len }));
        }
        r
    }

    /// A loss report after the local drops: flag 0x04, header (2 ranges), two 6-byte ranges.
    #[test]
    fn loss_report_follows_the_local_drops() {
        let fb = Feedback {
            local_drops: 7,
            loss_report: report(&[(0x0a0b_0c0d, 3), (0xffff_fffe, 0x0102)]),
            ..sample()
        };
        let b = fb.to_bytes();
        assert_eq!(b.len(), 64 + 4 + 4 + 12);
        assert_eq!(b[1], 0x07);
        assert_eq!(&b[2..64], &SAMPLE_BYTES[2..]);
        #[rustfmt::skip]
        let tail: [u8; 20] = [
            0x00, 0x00, 0x00, 0x07, // local drops 7
            0x02, 0x00, 0x00, 0x00, // 2 ranges, reserved
            0x0a, 0x0b, 0x0c, 0x0d, // range 1: first ESI
            0x00, 0x03,             //          length 3
            0xff, 0xff, 0xff, 0xfe, // range 2: first ESI
            0x01, 0x02,             //          length 258
        ];
        assert_eq!(&b[64..], &tail);
        assert_eq!(Feedback::decode(&b), Ok(fb));
        let v = FeedbackView::new(&b).unwrap();
        assert_eq!((v.stream(), v.seq(), v.local_drops()), (0x0102, 0x0405, 7));
        let ranges: Vec<EsiRange> = v.loss_ranges().collect();
        assert_eq!(ranges, fb.loss_report.ranges());
        assert_eq!(fb.loss_report.missing(), 3 + 258);
        // Wrapping range: 0xfffffffe, 0xffffffff, 0, 1, ...
        assert!(ranges[1].contains(0xffff_ffff) && ranges[1].contains(0));
        assert!(!ranges[1].contains(0x0101) && ranges[1].contains(0x00ff));
        // Every cut inside the report is refused as truncated.
        for n in 64..b.len() {
            assert_eq!(
                Feedback::decode(&b[..n]),
                Err(FeedbackError::Truncated),
                "{n}"
            );
        }
    }

    /// Without local drops the report starts at byte 64.
    #[test]
    fn loss_report_without_local_drops() {
        let fb = Feedback {
            loss_report: report(&[(5, 1)]),
            ..sample()
        };
        let b = fb.to_bytes();
        assert_eq!(b[1], 0x05);
        assert_eq!(&b[64..], &[1, 0, 0, 0, 0, 0, 0, 5, 0, 1]);
        assert_eq!(Feedback::decode(&b), Ok(fb));
    }

    #[test]
    fn malformed_loss_reports_are_refused() {
        let fb = Feedback {
            loss_report: report(&[(5, 1)]),
            ..sample()
        };
        let good = fb.to_bytes();
        // No range.
        let mut b = good.clone();
        b[64] = 0;
        assert_eq!(Feedback::decode(&b), Err(FeedbackError::LossReport));
        // More than MAX_RANGES (and enough bytes for them).
        let mut b = good.clone();
        b[64] = 17;
        b.resize(64 + 4 + 17 * 6, 1);
        assert_eq!(Feedback::decode(&b), Err(FeedbackError::LossReport));
        // An empty range.
        let mut b = good.clone();
        b[72..74].copy_from_slice(&[0, 0]);
        assert_eq!(Feedback::decode(&b), Err(FeedbackError::LossReport));
        // A full report fits MAX_LEN.
        let mut full = LossReport::default();
        for i in 0..MAX_RANGES as u32 {
            assert!(full.push(EsiRange {
                first: i * 10,
                len: 2
            }));
        }
        assert!(!full.push(EsiRange { first: 999, len: 1 }));
        assert!(!LossReport::default().push(EsiRange { first: 1, len: 0 }));
        let fb = Feedback {
            local_drops: 1,
            loss_report: full,
            ..sample()
        };
        assert_eq!(fb.encoded_len(), Feedback::MAX_LEN);
        let mut buf = [0u8; Feedback::MAX_LEN];
        assert_eq!(fb.encode(&mut buf), Some(Feedback::MAX_LEN));
        assert_eq!(Feedback::decode(&buf), Ok(fb));
    }

    #[test]
    fn link_only_takes_local_drops_out() {
        let fb = Feedback {
            lost: 20,
            residual: 10,
            window_loss_max: 8,
            loss_sum: 20,
            loss_sq_sum: 100,
            bursts: 4,
            burst_sum: 20,
            burst_max: 10,
            local_drops: 15,
            ..sample()
        };
        let l = fb.link_only();
        assert_eq!(
            (
                l.lost,
                l.residual,
                l.window_loss_max,
                l.loss_sum,
                l.loss_sq_sum
            ),
            (5, 3, 2, 5, 6)
        );
        assert_eq!((l.bursts, l.burst_sum, l.burst_max), (1, 5, 3));
        assert_eq!((l.received, l.recovered, l.repairs), (197, 5, 9));
        // More drops than losses: no loss left.
        let all = Feedback {
            local_drops: 50,
            ..fb
        }
        .link_only();
        assert_eq!((all.lost, all.residual, all.loss_sum), (0, 0, 0));
        // No drops: unchanged.
        assert_eq!(sample().link_only(), sample());
    }

    #[test]
    fn round_trip_with_trailing_bytes() {
        let mut buf = [0xffu8; 80];
        assert_eq!(sample().encode(&mut buf), Some(64));
        assert_eq!(Feedback::decode(&buf).unwrap(), sample());
    }

    #[test]
    fn refuses_short_and_unknown_version() {
        assert_eq!(sample().encode(&mut [0u8; 63]), None);
        for n in 0..64 {
            assert_eq!(
                Feedback::decode(&SAMPLE_BYTES[..n]),
                Err(FeedbackError::Truncated)
            );
        }
        let mut b = SAMPLE_BYTES;
        b[0] = 2;
        assert_eq!(Feedback::decode(&b), Err(FeedbackError::Version(2)));
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics_and_reencodes(data in proptest::collection::vec(0u8.., 0..200)) {
            if let Ok(fb) = Feedback::decode(&data) {
                let again = Feedback::decode(&fb.to_bytes()).unwrap();
                proptest::prop_assert_eq!(again, fb);
            }
        }

        /// Any feedback with any loss report round-trips, and a valid body with flag bits set
        /// at random is either read or refused, never misread past its end.
        #[test]
        fn loss_reports_round_trip(
            ranges in proptest::collection::vec((0u32.., 1u16..), 0..=MAX_RANGES),
            drops in 0u32..3,
        ) {
            let mut r = LossReport::default();
            for (first, len) in ranges {
                r.push(EsiRange { first, len });
            }
            let fb = Feedback { local_drops: drops, loss_report: r, ..sample() };
            let b = fb.to_bytes();
            proptest::prop_assert_eq!(b.len(), fb.encoded_len());
            proptest::prop_assert_eq!(Feedback::decode(&b), Ok(fb));
            for cut in 0..b.len() {
                proptest::prop_assert!(Feedback::decode(&b[..cut]).is_err());
            }
        }
    }

    #[test]
    fn ratios() {
        let fb = sample();
        assert!((fb.residual_ratio() - 1.0 / 203.0).abs() < 1e-12);
        assert!((fb.loss_ratio() - 6.0 / 203.0).abs() < 1e-12);
        assert_eq!(Feedback::default().residual_ratio(), 0.0);
    }
}
