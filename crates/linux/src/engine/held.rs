//! Repairs held back before they leave on a path faster than the one their sources took
//! (`repair-path = diverse`, `PathManager::repair_hold`), in both modes. A repair that
//! outruns its sources makes the decoder take the sources still in flight for lost (a repair
//! past them declares them missing), report them and solve for them; held for half the RTT
//! difference it arrives with them and still crosses an outage of the sources' path.
//!
//! The packets are finished (sealed, authenticated) before they are held: the receiver's
//! replay window takes them out of order. Buffers are reused: after the first few holds
//! nothing is allocated per packet.

use std::collections::VecDeque;
use std::time::Instant;

/// Most repairs held at once per worker; past it a repair leaves at once (early rather than
/// lost or unbounded memory).
pub(crate) const HELD_MAX: usize = 128;

/// One held datagram: when it may leave, where to, with which TOS, and its length in the
/// buffer `slot`.
#[derive(Debug, Clone, Copy)]
struct Entry<D> {
    at: Instant,
    dest: D,
    tos: u8,
    slot: usize,
    len: usize,
}

/// The held repairs of one worker, released in the order they were held, each with where it
/// goes (`D`) and its outer TOS.
#[derive(Debug)]
pub(crate) struct HeldRepairs<D> {
    queue: VecDeque<Entry<D>>,
    bufs: Vec<Vec<u8>>,
    free: Vec<usize>,
}

impl<D> Default for HeldRepairs<D> {
    fn default() -> Self {
        HeldRepairs {
            queue: VecDeque::new(),
            bufs: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<D: Copy> HeldRepairs<D> {
    /// Holds `bytes` until `at`; `false` (and nothing kept) when [`HELD_MAX`] are held.
    pub(crate) fn hold(&mut self, at: Instant, dest: D, tos: u8, bytes: &[u8]) -> bool {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.bufs.len() < HELD_MAX => {
                self.bufs.push(Vec::new());
                self.bufs.len() - 1
            }
            None => return false,
        };
        let buf = &mut self.bufs[slot];
        buf.clear();
        buf.extend_from_slice(bytes);
        self.queue.push_back(Entry {
            at,
            dest,
            tos,
            slot,
            len: bytes.len(),
        });
        true
    }

    /// When the first held repair may leave.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.front().map(|e| e.at)
    }

    /// Hands every repair due at `now` to `send`, in the order they were held. A repair held
    /// behind a later-due one waits for it (holds on one pair of paths are all alike).
    pub(crate) fn release(&mut self, now: Instant, send: &mut impl FnMut(&[u8], D, u8)) {
        while let Some(e) = self.queue.front().copied() {
            if e.at > now {
                break;
            }
            self.queue.pop_front();
            send(&self.bufs[e.slot][..e.len], e.dest, e.tos);
            self.free.push(e.slot);
        }
    }

    /// Repairs held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::PathDest;
    use std::time::Duration;

    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    fn dest(path: u8) -> PathDest {
        PathDest {
            path,
            addr: "192.0.2.1:4096".parse().unwrap(),
        }
    }

    #[test]
    fn held_repairs_leave_when_due_in_order_with_their_bytes() {
        let t = t0();
        let mut h = HeldRepairs::default();
        assert_eq!(h.next(), None);
        let ms = Duration::from_millis;
        assert!(h.hold(t + ms(5), dest(1), 10, b"first"));
        assert!(h.hold(t + ms(6), dest(1), 12, b"second one"));
        assert_eq!(h.next(), Some(t + ms(5)));
        let release = |h: &mut HeldRepairs<PathDest>, at| {
            let mut sent: Vec<(Vec<u8>, u8, u8)> = Vec::new();
            h.release(at, &mut |b: &[u8], d: PathDest, tos: u8| {
                sent.push((b.to_vec(), d.path, tos))
            });
            sent
        };
        assert!(release(&mut h, t + ms(4)).is_empty());
        assert_eq!(release(&mut h, t + ms(5)), vec![(b"first".to_vec(), 1, 10)]);
        assert_eq!(
            release(&mut h, t + ms(9)),
            vec![(b"second one".to_vec(), 1, 12)]
        );
        assert_eq!(h.len(), 0);
        assert_eq!(h.next(), None);
    }

    #[test]
    fn the_hold_is_bounded_and_reuses_its_buffers() {
        let t = t0();
        let mut h = HeldRepairs::<PathDest>::default();
        for i in 0..HELD_MAX {
            assert!(h.hold(t, dest(0), 0, &[i as u8; 100]));
        }
        assert!(
            !h.hold(t, dest(0), 0, &[0; 100]),
            "full: the caller sends at once"
        );
        let mut n = 0;
        h.release(t, &mut |b: &[u8], _, _| {
            assert_eq!(b, &[n as u8; 100][..]);
            n += 1;
        });
        assert_eq!(n, HELD_MAX);
        // Reused: no new buffers past the bound.
        for _ in 0..3 {
            for _ in 0..HELD_MAX {
                assert!(h.hold(t, dest(0), 0, &[1; 50]));
            }
            h.release(t, &mut |_: &[u8], _, _| {});
        }
        assert_eq!(h.bufs.len(), HELD_MAX);
    }
}
