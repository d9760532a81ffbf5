//! Anti-replay windows for sequence numbers (RFC 6479 bitmap, as WireGuard): each sequence
//! number is accepted at most once, and nothing a window's length or more below the newest seen.
//! One implementation serves the SRv6 auth TLV sequence ([`ReplayWindow`], [`WINDOW`] long) and
//! the UDP tunnel's AEAD counter (a longer [`SlidingWindow`], see `hirt_linux::crypto`).
//!
//! The bitmap keeps one word more than the window: moving the top clears whole words, and the
//! extra word holds the bits of the oldest positions still inside the window while the word
//! they share with the newest positions is being reused.

/// How far behind the newest sequence number an SRv6 packet may arrive (reordering tolerance).
pub const WINDOW: u64 = 1024;

/// The SRv6 replay window: [`WINDOW`] sequence numbers.
pub type ReplayWindow = SlidingWindow<{ (WINDOW / 64) as usize + 1 }>;

/// A replay window over `(WORDS - 1) * 64` sequence numbers, as a bitmap of `WORDS` words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow<const WORDS: usize> {
    top: u64,
    seen_any: bool,
    bits: [u64; WORDS],
}

impl<const WORDS: usize> Default for SlidingWindow<WORDS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const WORDS: usize> SlidingWindow<WORDS> {
    /// How far behind the newest sequence number a packet may arrive.
    pub const LEN: u64 = (WORDS as u64 - 1) * 64;
    const BITS: u64 = WORDS as u64 * 64;

    /// An empty window: the first sequence number is accepted whatever its value.
    pub const fn new() -> Self {
        assert!(WORDS >= 2, "a window needs at least two words");
        SlidingWindow {
            top: 0,
            seen_any: false,
            bits: [0; WORDS],
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % Self::BITS;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether `seq` would be accepted, without recording it. Call before the (costly) MAC
    /// check, then [`Self::update`] after the MAC verified.
    pub fn check(&self, seq: u64) -> bool {
        if !self.seen_any || seq > self.top {
            return true;
        }
        if self.top - seq >= Self::LEN {
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
        if !self.seen_any {
            self.bits = [0; WORDS];
            self.seen_any = true;
            self.top = seq;
        } else if seq > self.top {
            let (from, to) = (self.top / 64, seq / 64);
            for word in from + 1..=to.min(from + WORDS as u64) {
                self.bits[(word % WORDS as u64) as usize] = 0;
            }
            self.top = seq;
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

    /// The UDP tunnel's window (`hirt_linux::crypto`): 1984 counters behind the top.
    #[test]
    fn udp_window_semantics() {
        let mut w = SlidingWindow::<32>::default();
        assert_eq!(SlidingWindow::<32>::LEN, 1984);
        for c in [10u64, 12, 11, 5000, 4000] {
            assert!(w.check(c), "{c}");
            w.update(c);
            assert!(!w.check(c));
        }
        assert!(!w.check(12), "far behind the top");
        assert!(w.check(4999));
        assert!(!w.check(5000 - 2000));
        assert!(w.check(5000 - 1983));
        assert!(!w.check(5000 - 1984));
        w.update(1 << 40);
        assert!(!w.check(5000));
        assert!(w.check((1 << 40) - 1));
    }

    /// Jumps of every size across word boundaries keep exactly the seen set inside the window.
    #[test]
    fn small_window_matches_naive_model_with_jumps() {
        use std::collections::BTreeSet;
        let mut w = SlidingWindow::<3>::new();
        let len = SlidingWindow::<3>::LEN;
        let mut seen = BTreeSet::new();
        let mut top = 0u64;
        let mut x = 0x9e37_79b9u64;
        let mut base = 1000u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            base += x % 5;
            let seq = (base + (x >> 8) % 300).saturating_sub(150);
            let want = (seen.is_empty() || seq > top || top - seq < len) && !seen.contains(&seq);
            assert_eq!(w.check(seq), want, "seq {seq} top {top}");
            assert_eq!(w.update(seq), want, "seq {seq} top {top}");
            if want {
                seen.insert(seq);
                top = top.max(seq);
            }
        }
    }
}
