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
//! |    path id    |   reserved    |        sequence number        |  4
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
//! +---------------------------------------------------------------+ 68
//! ```
//! flags: bit 0 (0x01) = the timestamp echo and hold time are valid; bit 1 (0x02) = the local
//! drops field follows. Other bits are reserved (sent 0, ignored). Reserved bytes are sent 0
//! and ignored. [`Feedback::decode`] accepts a longer buffer (later versions may append fields)
//! and never panics; a body without flag 0x02 is 64 bytes, and a decoder that does not know the
//! flag reads a longer body as its first 64 bytes, so peers of different versions interoperate.
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
/// Length of a body without the local drops field.
const BASE_LEN: usize = 64;

/// Why a feedback body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FeedbackError {
    /// Shorter than [`Feedback::MAX_LEN`].
    #[error("feedback truncated")]
    Truncated,
    /// A version this build does not read.
    #[error("unknown feedback version {0}")]
    Version(u8),
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
    /// Packets the decoder's host dropped before the decoder read them, in the period (its
    /// device queue or socket buffer; every stream of that decoder reports them). 0 = none or
    /// not measured.
    pub local_drops: u32,
}

impl Feedback {
    /// Largest encoded size in bytes (64 without local drops, 68 with).
    pub const MAX_LEN: usize = 68;

    /// Bytes [`Feedback::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        if self.local_drops > 0 {
            Self::MAX_LEN
        } else {
            BASE_LEN
        }
    }

    /// Writes the encoding (64 bytes, 68 with local drops) into the front of `buf`; returns the
    /// bytes written, or `None` if `buf` is too short.
    pub fn encode(&self, buf: &mut [u8]) -> Option<usize> {
        let len = self.encoded_len();
        let out = buf.get_mut(..len)?;
        let (mut flags, echo) = match self.echo {
            Some(e) => (FLAG_TS, e),
            None => (0, TimestampEcho::default()),
        };
        if self.local_drops > 0 {
            flags |= FLAG_LOCAL_DROPS;
            out[64..68].copy_from_slice(&self.local_drops.to_be_bytes());
        }
        out[0] = VERSION;
        out[1] = flags;
        out[2..4].copy_from_slice(&self.stream.to_be_bytes());
        out[4] = self.path;
        out[5] = 0;
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
        let b: &[u8; BASE_LEN] = buf
            .get(..BASE_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(FeedbackError::Truncated)?;
        if b[0] != VERSION {
            return Err(FeedbackError::Version(b[0]));
        }
        let local_drops = if b[1] & FLAG_LOCAL_DROPS != 0 {
            let d = buf.get(64..68).ok_or(FeedbackError::Truncated)?;
            u32::from_be_bytes([d[0], d[1], d[2], d[3]])
        } else {
            0
        };
        let u16_at = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        Ok(Feedback {
            stream: u16_at(2),
            path: b[4],
            seq: u16_at(6),
            highest_esi: u32_at(8),
            received: u32_at(12),
            lost: u32_at(16),
            recovered: u32_at(20),
            residual: u32_at(24),
            repairs: u32_at(28),
            windows: u16_at(32),
            window_loss_max: u16_at(34),
            loss_sum: u32_at(36),
            loss_sq_sum: u32_at(40),
            bursts: u32_at(44),
            burst_sum: u32_at(48),
            burst_max: u16_at(52),
            loss_window: u16_at(54),
            echo: (b[1] & FLAG_TS != 0).then(|| TimestampEcho {
                ts: u32_at(56),
                hold_us: u32_at(60),
            }),
            local_drops,
        })
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
            local_drops: 0,
        }
    }

    /// Hand-checked against the layout diagram in the module docs.
    const SAMPLE_BYTES: [u8; 64] = [
        0x01, 0x01, 0x01, 0x02, // version, flags (ts valid), stream
        0x03, 0x00, 0x04, 0x05, // path, reserved, seq
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
        fn decode_never_panics_and_reencodes(data in proptest::collection::vec(0u8.., 0..100)) {
            if let Ok(fb) = Feedback::decode(&data) {
                let again = Feedback::decode(&fb.to_bytes()).unwrap();
                proptest::prop_assert_eq!(again, fb);
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
