//! Anti-replay window for sequence numbers (RFC 6479 style, as WireGuard): accepts each
//! sequence number at most once, and nothing older than [`WINDOW`] below the newest seen.
//! Used for the SRv6 auth TLV sequence and the UDP tunnel's AEAD counter.

/// How far behind the newest sequence number a packet may arrive (reordering tolerance).
pub const WINDOW: u64 = 1024;

const WORDS: usize = (WINDOW / 64) as usize;

/// The window state: a bitmap of the last [`WINDOW`] sequence numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    top: u64,
    seen_any: bool,
    bits: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayWindow {
    /// An empty window: the first sequence number is accepted whatever its value.
    pub const fn new() -> Self {
        ReplayWindow {
            top: 0,
            seen_any: false,
            bits: [0; WORDS],
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = (seq % WINDOW) as usize;
        (i / 64, 1u64 << (i % 64))
    }

    /// Whether `seq` would be accepted, without recording it. Call before the (costly) MAC
    /// check, then [`Self::update`] after the MAC verified.
    pub fn check(&self, seq: u64) -> bool {
        if !self.seen_any || seq > self.top {
            return true;
        }
        if self.top - seq >= WINDOW {
            return false;
        }
        let (w, m) = Self::bit(seq);
        self.bits[w] & m == 0
    }

    /// Records `seq` if it is acceptable; returns whether it was.
    pub fn update(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if !self.seen_any || seq > self.top {
            let gap = if self.seen_any {
                seq - self.top
            } else {
                WINDOW
            };
            if gap >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for s in self.top + 1..=seq {
                    let (w, m) = Self::bit(s);
                    self.bits[w] &= !m;
                }
            }
            self.top = seq;
            self.seen_any = true;
        }
        let (w, m) = Self::bit(seq);
        self.bits[w] |= m;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_once_and_in_window() {
        let mut w = ReplayWindow::new();
        assert!(w.update(5));
        assert!(!w.update(5));
        assert!(w.update(3));
        assert!(!w.update(3));
        assert!(w.update(2000));
        assert!(!w.check(5), "too old");
        assert!(w.update(2000 - 1023));
        assert!(!w.update(2000 - 1024));
        assert!(w.update(1999));
        assert!(!w.update(1999));
        assert!(w.update(u64::MAX));
        assert!(!w.update(u64::MAX));
    }

    #[test]
    fn matches_naive_model() {
        use std::collections::BTreeSet;
        let mut w = ReplayWindow::new();
        let mut seen = BTreeSet::new();
        let mut top = 0u64;
        let mut x = 0x1234_5678u64;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seq = (i + (x % 1500)).saturating_sub(700);
            let want = (seen.is_empty() || seq > top || top - seq < WINDOW) && !seen.contains(&seq);
            assert_eq!(w.update(seq), want, "seq {seq} top {top}");
            if want {
                seen.insert(seq);
                top = top.max(seq);
            }
        }
    }
}
