//! The event queue both simulators run on: events ordered by virtual time, ties in the order
//! they were scheduled, and what became of each source packet.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// An event `ev` due at virtual time `t` (ns), scheduled `seq`-th.
pub(crate) struct Queued<E> {
    pub(crate) t: u64,
    pub(crate) seq: u64,
    pub(crate) ev: E,
}

impl<E> PartialEq for Queued<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl<E> Eq for Queued<E> {}
impl<E> PartialOrd for Queued<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Queued<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.t, self.seq).cmp(&(o.t, o.seq))
    }
}

/// Events popped earliest first.
pub(crate) type EventHeap<E> = BinaryHeap<Reverse<Queued<E>>>;

/// What became of a source packet so far.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    InFlight,
    Lost,
    Delivered,
    Recovered,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_in_scheduling_order() {
        let mut h: EventHeap<&str> = BinaryHeap::new();
        for (t, seq, ev) in [(5, 0, "c"), (1, 1, "a"), (5, 2, "d"), (1, 3, "b")] {
            h.push(Reverse(Queued { t, seq, ev }));
        }
        let order: Vec<_> = std::iter::from_fn(|| h.pop().map(|Reverse(q)| q.ev)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
    }
}
