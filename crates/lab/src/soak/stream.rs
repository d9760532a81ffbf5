//! The soak's checked datagram stream: every datagram carries its stream, its sequence number
//! and its send time, and a payload cut from the workloads' deterministic pattern, so the
//! receiver compares every byte, counts every duplicate and knows every loss.
//!
//! ```text
//!  0               4               8                              16                             24
//! +---------------+---------------+-------------------------------+------------------------------+
//! |  magic "hSK1" |   stream id   |        sequence number        |   send time, ns since start  |
//! +---------------+---------------+-------------------------------+------------------------------+
//! |  payload: workload::expected(seq, len - 24)                                                  |
//! ```
//!
//! The sender paces sequence number `k` at `k / rate` seconds after the start, so a sequence
//! number is also a point in time: that is how losses are placed against the faults.

use crate::workload;

/// Bytes before the payload.
pub const HEADER: usize = 24;
const MAGIC: [u8; 4] = *b"hSK1";

/// Writes datagram `seq` of `stream` into `buf` (its whole length).
///
/// # Panics
/// If `buf` is shorter than [`HEADER`] (the sender's own buffer).
pub fn fill(buf: &mut [u8], stream: u32, seq: u64, sent_ns: u64) {
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&stream.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
    buf[16..24].copy_from_slice(&sent_ns.to_be_bytes());
    let n = buf.len() - HEADER;
    buf[HEADER..].copy_from_slice(workload::expected(seq, n));
}

/// What the receiver made of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// First copy of `seq`, every byte as sent; `sent_ns` is its send time.
    Fresh {
        /// Sequence number.
        seq: u64,
        /// Send time, ns since the stream's start.
        sent_ns: u64,
    },
    /// A sequence number that was already delivered.
    Duplicate,
    /// A datagram of this stream whose bytes differ from what was sent (or too short to say).
    Corrupt,
    /// Not a datagram of this stream.
    Foreign,
}

/// Receiver-side state of one stream: which sequence numbers arrived, and the counts.
#[derive(Debug, Clone, Default)]
pub struct Checker {
    stream: u32,
    seen: Vec<u64>,
    /// Distinct datagrams delivered intact.
    pub delivered: u64,
    /// Payload bytes delivered and compared.
    pub bytes: u64,
    /// Datagrams delivered more than once.
    pub duplicates: u64,
    /// Datagrams of the stream with a wrong byte.
    pub corrupt: u64,
    /// Datagrams not of this stream.
    pub foreign: u64,
}

impl Checker {
    /// A checker for stream `stream`.
    pub fn new(stream: u32) -> Self {
        Checker {
            stream,
            ..Default::default()
        }
    }

    /// Checks one received datagram.
    pub fn check(&mut self, d: &[u8]) -> Arrival {
        let a = self.classify(d);
        match a {
            Arrival::Fresh { .. } => {
                self.delivered += 1;
                self.bytes += (d.len() - HEADER) as u64;
            }
            Arrival::Duplicate => self.duplicates += 1,
            Arrival::Corrupt => self.corrupt += 1,
            Arrival::Foreign => self.foreign += 1,
        }
        a
    }

    fn classify(&mut self, d: &[u8]) -> Arrival {
        if d.len() < 8 || d[..4] != MAGIC {
            return Arrival::Foreign;
        }
        if u32::from_be_bytes([d[4], d[5], d[6], d[7]]) != self.stream {
            return Arrival::Foreign;
        }
        let Some(head) = d.get(..HEADER) else {
            return Arrival::Corrupt;
        };
        let seq = u64::from_be_bytes(head[8..16].try_into().unwrap_or_default());
        let sent_ns = u64::from_be_bytes(head[16..24].try_into().unwrap_or_default());
        let payload = &d[HEADER..];
        // A sequence number beyond what a day of sending could reach is a flipped bit.
        if seq > 1 << 40 || payload != workload::expected(seq, payload.len()) {
            return Arrival::Corrupt;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            return Arrival::Duplicate;
        }
        self.seen[word] |= 1 << bit;
        Arrival::Fresh { seq, sent_ns }
    }

    /// Whether `seq` was delivered.
    pub fn has(&self, seq: u64) -> bool {
        self.seen
            .get((seq / 64) as usize)
            .is_some_and(|w| w & (1 << (seq % 64)) != 0)
    }

    /// Runs of consecutive sequence numbers in `from..to` that never arrived, as
    /// `(first, length)`.
    pub fn gaps(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut run: Option<(u64, u64)> = None;
        for s in from..to {
            if self.has(s) {
                if let Some(r) = run.take() {
                    out.push(r);
                }
            } else {
                match &mut run {
                    Some((_, n)) => *n += 1,
                    None => run = Some((s, 1)),
                }
            }
        }
        out.extend(run);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes() {
        let mut b = [0u8; 30];
        fill(&mut b, 7, 0x0102_0304_0506_0708, 0x1122_3344_5566_7788);
        assert_eq!(
            &b[..HEADER],
            &[
                b'h', b'S', b'K', b'1', 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44,
                0x55, 0x66, 0x77, 0x88
            ]
        );
        assert_eq!(&b[HEADER..], workload::expected(0x0102_0304_0506_0708, 6));
    }

    #[test]
    fn fresh_duplicate_corrupt_foreign() {
        let mut c = Checker::new(1);
        let mut d = vec![0u8; 200];
        fill(&mut d, 1, 5, 99);
        assert_eq!(
            c.check(&d),
            Arrival::Fresh {
                seq: 5,
                sent_ns: 99
            }
        );
        assert_eq!(c.check(&d), Arrival::Duplicate);
        let mut bad = d.clone();
        bad[150] ^= 1;
        assert_eq!(c.check(&bad), Arrival::Corrupt);
        // A flipped bit in the sequence number makes the payload wrong for it.
        let mut bad_seq = d.clone();
        bad_seq[15] ^= 2;
        assert_eq!(c.check(&bad_seq), Arrival::Corrupt);
        assert_eq!(c.check(&d[..20]), Arrival::Corrupt);
        let mut other = d.clone();
        fill(&mut other, 2, 5, 99);
        assert_eq!(c.check(&other), Arrival::Foreign);
        assert_eq!(c.check(b"junk"), Arrival::Foreign);
        assert_eq!(
            (c.delivered, c.duplicates, c.corrupt, c.foreign),
            (1, 1, 3, 2)
        );
        assert_eq!(c.bytes, 176);
    }

    #[test]
    fn gaps_are_runs_of_missing_numbers() {
        let mut c = Checker::new(0);
        let mut d = vec![0u8; 64];
        for s in [0u64, 1, 2, 5, 6, 9, 130] {
            fill(&mut d, 0, s, 0);
            c.check(&d);
        }
        assert_eq!(c.gaps(0, 12), vec![(3, 2), (7, 2), (10, 2)]);
        assert_eq!(c.gaps(100, 131), vec![(100, 30)]);
        assert_eq!(c.gaps(0, 3), vec![]);
        assert!(c.has(130) && !c.has(131) && !c.has(1 << 30));
    }
}
