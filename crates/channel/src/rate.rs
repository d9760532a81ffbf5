//! Bottleneck rate with a drop-tail queue.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Capacity of the queue in front of the bottleneck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many packets waiting or in transmission.
    Packets(usize),
    /// At most this many bytes waiting or in transmission.
    Bytes(usize),
}

/// Serialises packets at `rate_bps`; a packet that does not fit in the queue is dropped (tail
/// drop). Time only advances through the `now` given to [`RateLimit::offer`].
#[derive(Clone, Debug)]
pub struct RateLimit {
    rate_bps: u64,
    limit: QueueLimit,
    /// Completion time and size of every packet not yet fully transmitted.
    inflight: VecDeque<(Instant, usize)>,
    bytes: usize,
    drops: u64,
}

impl RateLimit {
    /// A bottleneck of `rate_bps` bits per second (must be > 0).
    pub fn new(rate_bps: u64, limit: QueueLimit) -> Self {
        Self {
            rate_bps: rate_bps.max(1),
            limit,
            inflight: VecDeque::new(),
            bytes: 0,
            drops: 0,
        }
    }

    /// Offers a packet of `len` bytes at `now`. Returns when its last bit leaves the bottleneck,
    /// or `None` if the queue was full and it was dropped.
    pub fn offer(&mut self, now: Instant, len: usize) -> Option<Instant> {
        while let Some(&(done, l)) = self.inflight.front() {
            if done > now {
                break;
            }
            self.bytes -= l;
            self.inflight.pop_front();
        }
        let full = match self.limit {
            QueueLimit::Packets(n) => self.inflight.len() >= n,
            QueueLimit::Bytes(b) => self.bytes + len > b,
        };
        if full {
            self.drops += 1;
            return None;
        }
        let start = self.inflight.back().map_or(now, |&(done, _)| done.max(now));
        let tx = (len as u128 * 8 * 1_000_000_000).div_ceil(self.rate_bps as u128);
        let done = start + Duration::from_nanos(tx as u64);
        self.inflight.push_back((done, len));
        self.bytes += len;
        Some(done)
    }

    /// Packets dropped because the queue was full.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Packets currently queued or in transmission (as of the last `offer`).
    pub fn backlog_packets(&self) -> usize {
        self.inflight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_at_rate() {
        let t0 = crate::test_util::t0();
        // 8 Mbit/s: 1000 bytes take 1 ms.
        let mut r = RateLimit::new(8_000_000, QueueLimit::Packets(100));
        let a = r.offer(t0, 1000).unwrap();
        let b = r.offer(t0, 1000).unwrap();
        assert_eq!(a - t0, Duration::from_millis(1));
        assert_eq!(b - t0, Duration::from_millis(2));
        // After the link went idle, the next packet starts at once.
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(r.offer(t1, 500).unwrap() - t1, Duration::from_micros(500));
    }

    #[test]
    fn tail_drop_in_packets_and_bytes() {
        let t0 = crate::test_util::t0();
        let mut r = RateLimit::new(8_000, QueueLimit::Packets(3));
        assert_eq!((0..5).filter(|_| r.offer(t0, 100).is_some()).count(), 3);
        assert_eq!(r.drops(), 2);
        let mut r = RateLimit::new(8_000, QueueLimit::Bytes(250));
        assert!(r.offer(t0, 100).is_some());
        assert!(r.offer(t0, 100).is_some());
        assert!(r.offer(t0, 100).is_none());
        assert!(r.offer(t0, 50).is_some());
        // Once drained, room again.
        assert!(r.offer(t0 + Duration::from_secs(10), 250).is_some());
    }
}
