//! In-order release: a source that arrives behind a missing one waits (copied) until the missing
//! one arrives or is recovered, the code can no longer recover it, or a deadline passes.
//!
//! Why: the decoder recovers a lost source only once a repair after it arrived, so the sources
//! sent after the loss reach the receiver first. Transports read that as reordering: a QUIC
//! receiver acknowledges them at once and the sender declares the hole lost after three later
//! packets (RFC 9002 packet threshold) and cuts its window, although the tunnel delivers the
//! packet a few milliseconds later; TCP's SACK/RACK reacts likewise, only later. Holding the later
//! sources turns a recovered loss into a short delay of a few packets, which no transport treats
//! as congestion. The cost is that delay, bounded by the hold time, and one copy per held packet.
//!
//! Holding is per flow when the caller names each source's flow (a hash of its 5-tuple): a
//! source passes an open hole unless its flow is suspected of a packet in it. The decoder cannot
//! know the flow of a missing packet, so the suspects are the flows of the packet that showed
//! the hole and of the [`RECENT`] arrivals before it: a burst loss takes consecutive packets, and
//! a sender's packets leave in runs. A tunnel that carries many connections then delays, for one
//! loss, the connection that lost it (and its neighbours on the wire), not every packet behind it.
//! A flow wrongly let through sees what it would without the tunnel: reordering.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::Esi;

fn diff(a: Esi, b: Esi) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

/// Flows of the latest arrivals that a new hole makes suspects.
const RECENT: usize = 8;
/// Suspected flows tracked while holes are open; past it every flow is held until they close.
const SUSPECTS: usize = 32;

/// A packet waiting for its turn.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) esi: Esi,
    pub(crate) at: Instant,
    /// An original (true) or a recovered source.
    pub(crate) original: bool,
    /// Delivered already (its flow passed the hole): only its place in the order is kept.
    pub(crate) passed: bool,
    /// The caller's value for an original (e.g. the fields the symbol does not cover).
    pub(crate) meta: u32,
    pub(crate) data: Vec<u8>,
}

/// What to do with a source, in order or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Deliver it now: it is the next one, or it comes after a hole that was given up.
    Now,
    /// Hold it: a source before it is missing.
    Hold,
    /// Deliver it now although a source before it is missing: its flow is not suspected of a
    /// packet in the hole ([`Reorder::place_in_flow`] kept its place in the order).
    Pass,
}

/// The release state of one stream.
#[derive(Debug)]
pub(crate) struct Reorder {
    hold: Duration,
    max_held: usize,
    /// The next ESI in order; `None` before the first source.
    next: Option<Esi>,
    /// Waiting packets, sorted by ESI (all after `next`).
    held: VecDeque<Held>,
    /// Earliest arrival among `held`: the deadline is this plus `hold`.
    oldest: Option<Instant>,
    /// Missing ESIs given up (deadline, no more repairs can cover them, or too many held).
    pub(crate) skipped: u64,
    /// Sources delivered past an open hole ([`Place::Pass`]).
    pub(crate) passed: u64,
    /// The newest ESI placed: a source beyond the next one after it shows a new hole.
    top: Option<Esi>,
    /// Flows of the latest arrivals (0: none), a ring.
    recent: [u64; RECENT],
    recent_at: usize,
    /// Flows held while holes are open; `hold_all` once more than [`SUSPECTS`] were suspected.
    suspects: Vec<u64>,
    hold_all: bool,
}

impl Reorder {
    pub(crate) fn new(hold: Duration, max_held: usize) -> Self {
        Reorder {
            hold,
            max_held: max_held.max(1),
            next: None,
            held: VecDeque::new(),
            oldest: None,
            skipped: 0,
            passed: 0,
            top: None,
            recent: [0; RECENT],
            recent_at: 0,
            suspects: Vec::with_capacity(SUSPECTS),
            hold_all: false,
        }
    }

    /// Where source `esi` of flow `flow` goes (0: a flow not known, held behind any hole;
    /// `passes_holes`: never held, e.g. a pure TCP ACK, which the next ACK supersedes).
    /// [`Place::Pass`] is delivered by the caller like [`Place::Now`], without
    /// [`Reorder::release`]; its place in the order is kept here until the hole closes.
    pub(crate) fn place_in_flow(
        &mut self,
        esi: Esi,
        flow: u64,
        passes_holes: bool,
        now: Instant,
    ) -> Place {
        let new_hole = self.top.is_some_and(|t| diff(esi, t) > 1);
        let mut place = self.place(esi);
        if place == Place::Hold && new_hole {
            let recent = self.recent;
            for f in std::iter::once(flow).chain(recent) {
                self.suspect(f);
            }
        }
        let unsuspected = flow != 0 && !self.hold_all && !self.suspects.contains(&flow);
        if place == Place::Hold && (passes_holes || unsuspected) {
            self.passed += 1;
            self.hold(Held {
                esi,
                at: now,
                original: true,
                passed: true,
                meta: 0,
                data: Vec::new(),
            });
            place = Place::Pass;
        }
        self.recent[self.recent_at] = flow;
        self.recent_at = (self.recent_at + 1) % RECENT;
        place
    }

    fn suspect(&mut self, flow: u64) {
        if flow == 0 || self.hold_all || self.suspects.contains(&flow) {
            return;
        }
        if self.suspects.len() == SUSPECTS {
            self.hold_all = true;
        } else {
            self.suspects.push(flow);
        }
    }

    /// No hole is open any more: no flow is suspected.
    fn closed(&mut self) {
        if self.held.is_empty() {
            self.suspects.clear();
            self.hold_all = false;
        }
    }

    /// Where source `esi` goes. On [`Place::Now`] the caller delivers it and then calls
    /// [`Reorder::release`], which hands over whatever it unblocked.
    pub(crate) fn place(&mut self, esi: Esi) -> Place {
        if self.top.is_none_or(|t| diff(esi, t) > 0) {
            self.top = Some(esi);
        }
        let next = *self.next.get_or_insert(esi);
        match diff(esi, next) {
            d if d < 0 => Place::Now,
            0 => {
                self.next = Some(esi.wrapping_add(1));
                Place::Now
            }
            _ => Place::Hold,
        }
    }

    /// Stores a source [`Reorder::place`] told to hold (sorted insert: recovered sources may
    /// come in any order).
    /// Bytes of the packets held.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.iter().map(|h| h.data.capacity()).sum()
    }

    pub(crate) fn hold(&mut self, held: Held) {
        let next = self.next.unwrap_or(held.esi);
        let key = diff(held.esi, next);
        let at = self.held.partition_point(|h| diff(h.esi, next) < key);
        self.oldest = Some(self.oldest.map_or(held.at, |o| o.min(held.at)));
        self.held.insert(at, held);
    }

    /// Whether too many packets wait: the caller then gives the first hole up.
    pub(crate) fn full(&self) -> bool {
        self.held.len() >= self.max_held
    }

    /// Hands over, in order, the held packets that are next (not those that passed).
    pub(crate) fn release(&mut self, emit: &mut dyn FnMut(Held)) {
        let Some(mut next) = self.next else {
            return;
        };
        let mut any = false;
        while self.held.front().is_some_and(|h| h.esi == next) {
            let h = self.held.pop_front().expect("front");
            next = next.wrapping_add(1);
            any = true;
            if !h.passed {
                emit(h);
            }
        }
        self.next = Some(next);
        if any {
            self.oldest = self.held.iter().map(|h| h.at).min();
            self.closed();
        }
    }

    /// Gives up the missing ESIs before the first held packet, then releases.
    pub(crate) fn skip_hole(&mut self, emit: &mut dyn FnMut(Held)) {
        let (Some(next), Some(first)) = (self.next, self.held.front().map(|h| h.esi)) else {
            return;
        };
        self.skipped += diff(first, next).max(0) as u64;
        self.next = Some(first);
        self.release(emit);
    }

    /// ESIs before `first` are final (the code can no longer recover them): releases what
    /// waited behind them.
    pub(crate) fn skip_before(&mut self, first: Esi, emit: &mut dyn FnMut(Held)) {
        while let Some(next) = self.next {
            if diff(first, next) <= 0 {
                return;
            }
            match self.held.front() {
                Some(h) if diff(h.esi, first) < 0 => self.skip_hole(emit),
                _ => {
                    self.skipped += diff(first, next) as u64;
                    self.next = Some(first);
                    self.release(emit);
                    return;
                }
            }
        }
    }

    /// When the current hole is given up, if anything waits.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.oldest.and_then(|o| o.checked_add(self.hold))
    }

    /// Gives up holes whose deadline passed at `now`.
    pub(crate) fn expire(&mut self, now: Instant, emit: &mut dyn FnMut(Held)) {
        while self.deadline().is_some_and(|d| d <= now) {
            self.skip_hole(emit);
        }
    }

    /// Packets waiting (and places kept for those that passed).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::t0;

    fn held(esi: Esi, at: Instant) -> Held {
        Held {
            esi,
            at,
            original: true,
            passed: false,
            meta: esi,
            data: vec![esi as u8],
        }
    }

    fn collect(r: &mut Reorder, f: impl FnOnce(&mut Reorder, &mut dyn FnMut(Held))) -> Vec<Esi> {
        let mut out = Vec::new();
        f(r, &mut |h| out.push(h.esi));
        out
    }

    #[test]
    fn in_order_sources_pass_and_a_hole_holds_what_follows_until_it_is_filled() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 100);
        assert_eq!(r.place(10), Place::Now);
        assert_eq!(r.place(11), Place::Now);
        // 12 missing.
        for e in [13, 14] {
            assert_eq!(r.place(e), Place::Hold);
            r.hold(held(e, t));
        }
        assert_eq!(r.len(), 2);
        assert_eq!(r.deadline(), Some(t + Duration::from_millis(10)));
        // 12 recovered: it goes now, then 13 and 14.
        assert_eq!(r.place(12), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), vec![13, 14]);
        assert_eq!(r.place(15), Place::Now);
        assert_eq!(r.deadline(), None);
        assert_eq!(r.skipped, 0);
    }

    #[test]
    fn recovered_sources_out_of_order_are_sorted() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 100);
        r.place(0);
        for e in [4, 2, 3] {
            assert_eq!(r.place(e), Place::Hold);
            r.hold(held(e, t));
        }
        assert_eq!(r.place(1), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), vec![2, 3, 4]);
    }

    #[test]
    fn the_deadline_gives_a_hole_up_and_each_packet_waits_at_most_the_hold_time() {
        let t = t0();
        let ms = Duration::from_millis;
        let mut r = Reorder::new(ms(10), 100);
        r.place(0);
        // 1 missing; 2 held at t. 3 missing; 4 held at t + 6 ms.
        r.place(2);
        r.hold(held(2, t));
        r.place(4);
        r.hold(held(4, t + ms(6)));
        assert_eq!(
            collect(&mut r, |r, e| r.expire(t + ms(9), e)),
            Vec::<Esi>::new()
        );
        assert_eq!(collect(&mut r, |r, e| r.expire(t + ms(10), e)), vec![2]);
        assert_eq!(r.deadline(), Some(t + ms(16)));
        assert_eq!(collect(&mut r, |r, e| r.expire(t + ms(16), e)), vec![4]);
        assert_eq!(r.skipped, 2);
        // A late original of a given-up hole goes at once.
        assert_eq!(r.place(1), Place::Now);
        assert_eq!(r.place(5), Place::Now);
    }

    #[test]
    fn final_esis_release_what_waited_behind_them() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 100);
        r.place(100);
        for e in [102, 103, 106] {
            r.place(e);
            r.hold(held(e, t));
        }
        // ESIs before 105 are final: 101, 104 can no longer be recovered; 105 still can.
        assert_eq!(
            collect(&mut r, |r, e| r.skip_before(105, e)),
            vec![102, 103]
        );
        assert_eq!(r.skipped, 2);
        assert_eq!(r.place(105), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), vec![106]);
        // A window start at or before the next ESI changes nothing.
        assert!(collect(&mut r, |r, e| r.skip_before(90, e)).is_empty());
        assert_eq!(r.place(107), Place::Now);
    }

    #[test]
    fn esis_wrap() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 100);
        r.place(u32::MAX - 1);
        r.place(1);
        r.hold(held(1, t));
        r.place(0);
        r.hold(held(0, t));
        assert_eq!(r.place(u32::MAX), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), vec![0, 1]);
    }

    #[test]
    fn a_hole_holds_the_suspected_flows_and_lets_the_others_pass() {
        let t = t0();
        let (a, c, d) = (0xa, 0xc, 0xd);
        let mut r = Reorder::new(Duration::from_millis(10), 100);
        assert_eq!(r.place_in_flow(0, a, false, t), Place::Now);
        assert_eq!(r.place_in_flow(1, a, false, t), Place::Now);
        // 2 is missing; 3 shows the hole: its flow and the flows before it are suspects.
        assert_eq!(r.place_in_flow(3, a, false, t), Place::Hold);
        r.hold(held(3, t));
        assert_eq!(r.place_in_flow(4, c, false, t), Place::Pass);
        assert_eq!(r.place_in_flow(5, a, false, t), Place::Hold);
        r.hold(held(5, t));
        assert_eq!(r.passed, 1);
        // 2 recovered: the held ones of flow a follow it; c's already went.
        assert_eq!(r.place(2), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), vec![3, 5]);
        assert_eq!(r.len(), 0);
        // The hole closed: nothing is suspected until the next one, shown by c's 8 (7 lost):
        // c and the flows of the arrivals before it (a, c) wait, d passes.
        assert_eq!(r.place_in_flow(6, c, false, t), Place::Now);
        assert_eq!(r.place_in_flow(8, c, false, t), Place::Hold);
        r.hold(held(8, t));
        assert_eq!(r.place_in_flow(9, a, false, t), Place::Hold);
        r.hold(held(9, t));
        assert_eq!(r.place_in_flow(10, d, false, t), Place::Pass);
        // A flow no one named is always held.
        assert_eq!(r.place_in_flow(11, 0, false, t), Place::Hold);
        r.hold(held(11, t));
        // Given up at the deadline: what waited goes, what passed does not go twice.
        assert_eq!(
            collect(&mut r, |r, e| r.expire(t + Duration::from_millis(10), e)),
            vec![8, 9, 11]
        );
        assert_eq!((r.skipped, r.passed), (1, 2));
        assert_eq!(r.place_in_flow(12, d, false, t), Place::Now);
    }

    #[test]
    fn too_many_suspects_hold_every_flow_until_the_holes_close() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 1000);
        r.place_in_flow(0, 1, false, t);
        // Holes shown by SUSPECTS + 1 flows: 2, 4, 6, ... missing.
        let mut esi = 1;
        for flow in 1..=SUSPECTS as u64 + 1 {
            esi += 2;
            assert_eq!(r.place_in_flow(esi, flow, false, t), Place::Hold);
            r.hold(held(esi, t));
        }
        assert!(r.hold_all);
        assert_eq!(r.place_in_flow(esi + 1, 999, false, t), Place::Hold);
        r.hold(held(esi + 1, t));
        r.skip_before(esi + 2, &mut |_| {});
        assert_eq!(r.len(), 0);
        assert!(!r.hold_all && r.suspects.is_empty());
        assert_eq!(r.place_in_flow(esi + 2, 999, false, t), Place::Now);
    }

    proptest::proptest! {
        /// Whatever arrives, is recovered or is given up, in any flows: every source goes out
        /// exactly once, a passed one never a second time, and nothing stays once the holes
        /// are given up.
        #[test]
        fn every_source_goes_out_once(
            plan in proptest::collection::vec((0u8..10, 0u64..5, 0usize..20), 1..300),
            max_held in 1usize..64,
        ) {
            let t = t0();
            let mut r = Reorder::new(Duration::from_millis(10), max_held);
            let mut out: Vec<Esi> = Vec::new();
            // (esi, recover once this many later sources arrived)
            let mut pending: Vec<(Esi, usize)> = Vec::new();
            for (k, &(fate, flow, after)) in plan.iter().enumerate() {
                let esi = k as Esi;
                let now = t + Duration::from_micros(100 * k as u64);
                let mut emitted = Vec::new();
                r.expire(now, &mut |h| emitted.push(h));
                if r.full() {
                    r.skip_hole(&mut |h| emitted.push(h));
                }
                if fate >= 2 {
                    // fate 9: a source that passes any hole (a pure TCP ACK).
                    match r.place_in_flow(esi, flow, fate == 9, now) {
                        Place::Now => {
                            out.push(esi);
                            r.release(&mut |h| emitted.push(h));
                        }
                        Place::Pass => out.push(esi),
                        Place::Hold => r.hold(held(esi, now)),
                    }
                } else if fate == 1 {
                    pending.push((esi, k + after));
                }
                let (due, rest): (Vec<_>, Vec<_>) = pending.iter().partition(|p| p.1 <= k);
                pending = rest;
                for (e, _) in due {
                    match r.place(e) {
                        Place::Now | Place::Pass => {
                            out.push(e);
                            r.release(&mut |h| emitted.push(h));
                        }
                        Place::Hold => r.hold(held(e, now)),
                    }
                }
                for h in emitted {
                    proptest::prop_assert!(!h.passed);
                    out.push(h.esi);
                }
            }
            let mut emitted = Vec::new();
            r.expire(t + Duration::from_secs(10), &mut |h| emitted.push(h));
            for h in emitted {
                proptest::prop_assert!(!h.passed);
                out.push(h.esi);
            }
            proptest::prop_assert_eq!(r.len(), 0);
            proptest::prop_assert!(r.suspects.is_empty() && !r.hold_all);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            sorted.dedup();
            proptest::prop_assert_eq!(sorted.len(), out.len(), "a source went out twice");
            let expected = plan
                .iter()
                .enumerate()
                .filter(|(k, &(fate, _, after))| fate >= 2 || (fate == 1 && k + after < plan.len()))
                .count();
            proptest::prop_assert_eq!(out.len(), expected);
        }
    }

    #[test]
    fn a_source_that_passes_holes_keeps_its_place_in_a_suspected_or_unknown_flow() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 64);
        let a = 0xaaaa;
        assert_eq!(r.place_in_flow(0, a, false, t), Place::Now);
        // 1 is missing; 2 shows the hole and makes flow a a suspect.
        assert_eq!(r.place_in_flow(2, a, false, t), Place::Hold);
        r.hold(held(2, t));
        assert_eq!(r.place_in_flow(3, a, true, t), Place::Pass);
        assert_eq!(r.place_in_flow(4, 0, true, t), Place::Pass);
        assert_eq!(r.place_in_flow(5, a, false, t), Place::Hold);
        r.hold(held(5, t));
        assert_eq!(r.passed, 2);
        // 1 recovered: 2 and 5 go out in order, the places of 3 and 4 are dropped.
        assert_eq!(r.place(1), Place::Now);
        assert_eq!(collect(&mut r, |r, e| r.release(e)), [2, 5]);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn full_is_reported() {
        let t = t0();
        let mut r = Reorder::new(Duration::from_millis(10), 2);
        r.place(0);
        r.place(2);
        r.hold(held(2, t));
        assert!(!r.full());
        r.place(3);
        r.hold(held(3, t));
        assert!(r.full());
        assert_eq!(collect(&mut r, |r, e| r.skip_hole(e)), vec![2, 3]);
        assert!(!r.full());
    }
}
