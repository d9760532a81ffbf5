//! Per-stream delivery state and loss detection at the decoder.
//!
//! A ring of one status byte per ESI over the last `history` ESIs is the delivered-set (no source
//! is delivered twice, even after the code forgot it) and the source of the feedback counters.
//! Three cursors move forward through the ESI space (serial arithmetic, so 32-bit ESIs wrap):
//!
//! ```text
//!   finalized <= declared <= top
//!   [ ... finalized ... | ... declared, not final ... | ... seen, undecided ... | top
//!   < residual counted  > < lost/received counted    > < may still arrive        >
//! ```
//!
//! * `top`: one past the highest ESI known to exist (a source, a recovered source, or the last
//!   ESI covered by a repair — repairs are sent after the sources they cover, HIRT §V).
//! * **Loss rule** — `declared`: an ESI is classified once `reorder_tolerance` later ESIs exist,
//!   or as soon as a repair covering it (or a later ESI) arrives. It counts as lost on the link if
//!   its original has not arrived by then (even if it was already recovered). An original that
//!   arrives later is still delivered if it was not recovered; the loss stays counted.
//! * **Residual rule** — `finalized`: an ESI is final once it lies more than `horizon` (how far
//!   back the code's decoder can still solve, + tolerance) behind `top`. Lost and not recovered
//!   by then = residual loss.
//!
//! Work is O(1) amortized per ESI; a jump larger than twice the history (forged or after a long
//! outage) is counted in bulk, so no input costs more than O(history).

use hirt_fec::Esi;

const RECEIVED: u8 = 0x01;
const RECOVERED: u8 = 0x02;

/// Serial distance `a - b` in the 32-bit ESI space.
fn diff(a: Esi, b: Esi) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

/// Counters of a period (or cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) received: u32,
    pub(crate) lost: u32,
    pub(crate) recovered: u32,
    pub(crate) residual: u32,
    pub(crate) repairs: u32,
    /// ESIs classified (lost or received).
    pub(crate) classified: u32,
    pub(crate) windows: u16,
    pub(crate) window_loss_max: u16,
    pub(crate) loss_sum: u32,
    pub(crate) loss_sq_sum: u32,
    pub(crate) bursts: u32,
    pub(crate) burst_sum: u32,
    pub(crate) burst_max: u16,
}

/// What the tracker says about an arriving original.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// First copy: deliver.
    New,
    /// Already delivered as an original.
    Duplicate,
    /// Already delivered as a recovered packet.
    Late,
    /// Older than the history: delivery state unknown, dropped.
    Stale,
}

#[derive(Clone, Debug)]
pub(crate) struct LossTracker {
    ring: Vec<u8>,
    mask: u32,
    started: bool,
    /// The first ESI of the stream (valid once started).
    base: Esi,
    top: Esi,
    declared: Esi,
    finalized: Esi,
    tolerance: u32,
    horizon: u32,
    loss_window: u32,
    run: u32,
    win_pos: u32,
    win_losses: u32,
    /// Since the last feedback.
    pub(crate) period: Counts,
    /// Since the stream started (only `lost` and `residual` are read).
    pub(crate) total_lost: u64,
    pub(crate) total_residual: u64,
}

impl LossTracker {
    /// `horizon`: how far back the code may still recover a source.
    pub(crate) fn new(history: u32, horizon: u32, tolerance: u32, loss_window: u32) -> Self {
        let tolerance = tolerance.min(1 << 20);
        let horizon = horizon.min(1 << 20) + tolerance + 1;
        let size = history
            .max(horizon + 2)
            .clamp(64, 1 << 24)
            .next_power_of_two();
        LossTracker {
            ring: vec![0; size as usize],
            mask: size - 1,
            started: false,
            base: 0,
            top: 0,
            declared: 0,
            finalized: 0,
            tolerance,
            horizon,
            loss_window: loss_window.max(1),
            run: 0,
            win_pos: 0,
            win_losses: 0,
            period: Counts::default(),
            total_lost: 0,
            total_residual: 0,
        }
    }

    /// Changes the recovery horizon (e.g. to follow the block size of block XOR). Bounded by
    /// the history; a shorter horizon finalizes the ESIs it passes at the next input.
    pub(crate) fn set_horizon(&mut self, horizon: u32) {
        // The ring holds at least the initial horizon + 2, so the result stays >= tolerance + 1.
        self.horizon = horizon
            .saturating_add(self.tolerance + 1)
            .min(self.mask - 1);
    }

    /// Remembers at least `horizon` ESIs (plus the reorder tolerance) from now on, keeping
    /// what it knows of the last ones, then sets the horizon: for a code whose span grew
    /// (`Decoder`'s repair lag), so a longer horizon is not cut to the history it had.
    /// Allocates when it grows, a few times per stream at most.
    pub(crate) fn grow_to_horizon(&mut self, horizon: u32) {
        let want = (horizon.min(1 << 20) + self.tolerance + 3)
            .clamp(64, 1 << 24)
            .next_power_of_two();
        let old = self.mask + 1;
        if want > old {
            let mut ring = vec![0u8; want as usize];
            // ESIs older than the old history count as delivered: their state is forgotten, and
            // a late copy of one must stay a duplicate, as it was (stale) before.
            let oldest = self.top.wrapping_sub(want);
            for k in 0..want - old {
                ring[(oldest.wrapping_add(k) & (want - 1)) as usize] = RECEIVED;
            }
            let kept = self.top.wrapping_sub(old);
            for k in 0..old {
                let esi = kept.wrapping_add(k);
                ring[(esi & (want - 1)) as usize] = self.ring[(esi & self.mask) as usize];
            }
            self.ring = ring;
            self.mask = want - 1;
        }
        self.set_horizon(horizon);
    }

    fn size(&self) -> i64 {
        i64::from(self.mask) + 1
    }

    /// Highest ESI known to exist.
    pub(crate) fn highest(&self) -> Esi {
        self.top.wrapping_sub(1)
    }

    /// Whether an ESI not classified yet, other than the newest, is neither received nor
    /// recovered: a gap that `reorder_tolerance` later ESIs have not confirmed yet.
    /// O(tolerance).
    pub(crate) fn gap_pending(&self) -> bool {
        let pending = diff(self.top, self.declared).clamp(0, i64::from(self.tolerance) + 1) as u32;
        (2..=pending).any(|back| {
            let esi = self.top.wrapping_sub(back);
            self.ring[(esi & self.mask) as usize] & (RECEIVED | RECOVERED) == 0
        })
    }

    /// Classifies every ESI before `esi` now, whatever the reorder tolerance says (the decoder's
    /// time rule: a later ESI came long enough ago).
    pub(crate) fn declare_before(&mut self, esi: Esi) {
        if diff(esi, self.top) > 0 {
            return;
        }
        while diff(esi, self.declared) > 0 {
            self.classify();
        }
        self.settle();
    }

    /// How many ESIs `esi` lies behind the newest one seen (0 or less: it is the newest or
    /// beyond; 0 before any packet).
    pub(crate) fn behind_top(&self, esi: Esi) -> i64 {
        if !self.started {
            return 0;
        }
        diff(self.top, esi.wrapping_add(1))
    }

    /// ESIs before this one are final: delivered, or lost for good (the code can no longer
    /// recover them).
    pub(crate) fn finalized(&self) -> Esi {
        self.finalized
    }

    /// The stream's first ESI, once a packet started it.
    pub(crate) fn base(&self) -> Option<Esi> {
        self.started.then_some(self.base)
    }

    /// Fills `report` with the ESIs declared lost and neither received nor recovered among the
    /// last `lookback` declared ones (never before `finalized`), newest first, as runs; stops
    /// when the report is full. O(lookback).
    pub(crate) fn missing(&self, lookback: u32, report: &mut crate::feedback::LossReport) {
        let span = diff(self.declared, self.finalized).clamp(0, i64::from(lookback)) as u32;
        let mut run: Option<(Esi, u16)> = None; // (lowest ESI so far, length)
        for back in 1..=span {
            let esi = self.declared.wrapping_sub(back);
            let missing = self.ring[(esi & self.mask) as usize] & (RECEIVED | RECOVERED) == 0;
            run = match (run, missing) {
                (Some((_, len)), true) if len < u16::MAX => Some((esi, len + 1)),
                (Some((first, len)), true) => {
                    if !report.push(crate::feedback::EsiRange { first, len }) {
                        return;
                    }
                    Some((esi, 1))
                }
                (None, true) => Some((esi, 1)),
                (Some((first, len)), false) => {
                    if !report.push(crate::feedback::EsiRange { first, len }) {
                        return;
                    }
                    None
                }
                (None, false) => None,
            };
        }
        if let Some((first, len)) = run {
            report.push(crate::feedback::EsiRange { first, len });
        }
    }

    fn start(&mut self, esi: Esi) {
        // Our encoder numbers from 0: when the first ESI seen is near 0, the ones before it were
        // lost, not "before our time".
        let base = if i64::from(esi) < self.size() / 2 {
            0
        } else {
            esi
        };
        self.started = true;
        self.base = base;
        self.top = base;
        self.declared = base;
        self.finalized = base;
    }

    fn slot(&mut self, esi: Esi) -> &mut u8 {
        &mut self.ring[(esi & self.mask) as usize]
    }

    /// Whether `esi` is inside the history window `[top - size, top)`.
    fn in_history(&self, esi: Esi) -> bool {
        let d = diff(esi, self.top);
        d < 0 && -d <= self.size()
    }

    /// An original arrived.
    pub(crate) fn on_source(&mut self, esi: Esi) -> Arrival {
        if !self.started {
            self.start(esi);
        }
        if diff(esi, self.top) >= 0 {
            self.advance_to(esi.wrapping_add(1));
        } else if !self.in_history(esi) {
            return Arrival::Stale;
        }
        let s = self.slot(esi);
        if *s & RECEIVED != 0 {
            return Arrival::Duplicate;
        }
        if *s & RECOVERED != 0 {
            return Arrival::Late;
        }
        *s |= RECEIVED;
        self.period.received = self.period.received.saturating_add(1);
        self.settle();
        Arrival::New
    }

    /// The code recovered `esi`; returns whether to deliver it.
    pub(crate) fn on_recovered(&mut self, esi: Esi) -> bool {
        if !self.started {
            self.start(esi);
        }
        if diff(esi, self.top) >= 0 {
            self.advance_to(esi.wrapping_add(1));
        } else if !self.in_history(esi) {
            return false;
        }
        let s = self.slot(esi);
        if *s & (RECEIVED | RECOVERED) != 0 {
            return false;
        }
        *s |= RECOVERED;
        self.period.recovered = self.period.recovered.saturating_add(1);
        self.settle();
        true
    }

    /// A repair covering ESIs up to `last` arrived (and was not refused by the code).
    pub(crate) fn on_repair(&mut self, first: Esi, last: Esi) {
        self.period.repairs = self.period.repairs.saturating_add(1);
        if !self.started {
            self.start(first);
        }
        let end = last.wrapping_add(1);
        // Far future coverage is counted in bulk by advance_to; far past coverage says nothing.
        if diff(end, self.top) > 0 {
            self.advance_to(end);
        }
        while diff(end, self.declared) > 0 {
            self.classify();
        }
        self.settle();
    }

    fn advance_to(&mut self, new_top: Esi) {
        let mut d = diff(new_top, self.top);
        if d <= 0 {
            return;
        }
        if d > 2 * self.size() {
            // Bulk: settle everything held, then count the unseen middle as lost and residual.
            while self.declared != self.top {
                self.classify();
            }
            while self.finalized != self.top {
                self.finalize();
            }
            let skip = (d - self.size()) as u32;
            let p = &mut self.period;
            p.lost = p.lost.saturating_add(skip);
            p.residual = p.residual.saturating_add(skip);
            p.classified = p.classified.saturating_add(skip);
            self.total_lost += u64::from(skip);
            self.total_residual += u64::from(skip);
            self.run = self.run.saturating_add(skip);
            self.win_pos = 0;
            self.win_losses = 0;
            self.ring.fill(0);
            self.top = self.top.wrapping_add(skip);
            self.declared = self.top;
            self.finalized = self.top;
            d = self.size();
        }
        let arriving = new_top.wrapping_sub(1);
        for _ in 0..d {
            let top = self.top;
            *self.slot(top) = 0;
            self.top = top.wrapping_add(1);
            // The arriving ESI itself is classified by `settle`, after the caller marked it.
            while diff(self.top, self.declared) > i64::from(self.tolerance)
                && diff(arriving, self.declared) > 0
            {
                self.classify();
            }
            while diff(self.top, self.finalized) > i64::from(self.horizon)
                && diff(self.declared, self.finalized) > 0
            {
                self.finalize();
            }
        }
    }

    /// Classifies and finalizes what the cursors' rules allow now.
    fn settle(&mut self) {
        while diff(self.top, self.declared) > i64::from(self.tolerance) {
            self.classify();
        }
        while diff(self.top, self.finalized) > i64::from(self.horizon) {
            self.finalize();
        }
    }

    /// Classifies `declared` and moves it on.
    fn classify(&mut self) {
        let esi = self.declared;
        let lost = *self.slot(esi) & RECEIVED == 0;
        self.declared = esi.wrapping_add(1);
        let p = &mut self.period;
        p.classified = p.classified.saturating_add(1);
        if lost {
            p.lost = p.lost.saturating_add(1);
            self.total_lost += 1;
            self.run = self.run.saturating_add(1);
            self.win_losses += 1;
        } else if self.run > 0 {
            p.bursts = p.bursts.saturating_add(1);
            p.burst_sum = p.burst_sum.saturating_add(self.run);
            p.burst_max = p.burst_max.max(self.run.min(u32::from(u16::MAX)) as u16);
            self.run = 0;
        }
        self.win_pos += 1;
        if self.win_pos >= self.loss_window {
            let x = self.win_losses;
            p.windows = p.windows.saturating_add(1);
            p.window_loss_max = p.window_loss_max.max(x.min(u32::from(u16::MAX)) as u16);
            p.loss_sum = p.loss_sum.saturating_add(x);
            p.loss_sq_sum = p.loss_sq_sum.saturating_add(x.saturating_mul(x));
            self.win_pos = 0;
            self.win_losses = 0;
        }
    }

    /// Finalizes `finalized` and moves it on.
    fn finalize(&mut self) {
        let esi = self.finalized;
        if *self.slot(esi) & (RECEIVED | RECOVERED) == 0 {
            self.period.residual = self.period.residual.saturating_add(1);
            self.total_residual += 1;
        }
        self.finalized = esi.wrapping_add(1);
    }

    /// Takes the period's counters (for a feedback) and starts a new period.
    pub(crate) fn take_period(&mut self) -> Counts {
        std::mem::take(&mut self.period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> LossTracker {
        // history 64, horizon 8, tolerance 2, loss window 10
        LossTracker::new(64, 8, 2, 10)
    }

    #[test]
    fn in_order_no_loss() {
        let mut t = tracker();
        for e in 0..100 {
            assert_eq!(t.on_source(e), Arrival::New);
        }
        let p = t.take_period();
        assert_eq!((p.received, p.lost, p.residual), (100, 0, 0));
        assert_eq!(p.classified, 98); // tolerance 2
        assert_eq!(p.windows, 9);
        assert_eq!(p.loss_sum, 0);
    }

    #[test]
    fn missing_lists_declared_unrecovered_runs_newest_first() {
        let mut t = LossTracker::new(64, 40, 2, 10);
        // Received: all of 0..30 except 3, 4, 5 (recovered: 4), 10 and 20, 21.
        for e in (0..30).filter(|e| ![3, 4, 5, 10, 20, 21].contains(e)) {
            t.on_source(e);
        }
        t.on_recovered(4);
        let ranges = |t: &LossTracker, lookback| {
            let mut r = crate::feedback::LossReport::default();
            t.missing(lookback, &mut r);
            r.ranges()
                .iter()
                .map(|r| (r.first, r.len))
                .collect::<Vec<_>>()
        };
        // declared = 28 (tolerance 2 behind top 30).
        assert_eq!(ranges(&t, 100), vec![(20, 2), (10, 1), (5, 1), (3, 1)]);
        // Only the last 10 declared ESIs (18..28).
        assert_eq!(ranges(&t, 10), vec![(20, 2)]);
        // A recovery removes its ESI.
        t.on_recovered(20);
        assert_eq!(ranges(&t, 10), vec![(21, 1)]);
        // A full report stops at MAX_RANGES.
        let mut t = LossTracker::new(256, 200, 0, 10);
        for e in (0..100).step_by(2) {
            t.on_source(e);
        }
        let mut r = crate::feedback::LossReport::default();
        t.missing(200, &mut r);
        assert_eq!(r.ranges().len(), crate::feedback::MAX_RANGES);
        assert_eq!((r.ranges()[0].first, r.ranges()[0].len), (97, 1));
    }

    #[test]
    fn gap_declared_after_tolerance_and_residual_after_horizon() {
        let mut t = tracker();
        t.on_source(0);
        t.on_source(2); // 1 missing
        assert_eq!(t.period.lost, 0);
        t.on_source(3); // top=4: ESIs < 2 classified
        assert_eq!(t.period.lost, 1);
        assert_eq!(t.period.residual, 0);
        // horizon = 8 + 2 + 1 = 11: ESI 1 final once top > 12.
        for e in 4..12 {
            t.on_source(e);
        }
        assert_eq!(t.period.residual, 0);
        t.on_source(12);
        assert_eq!(t.period.residual, 1);
        assert_eq!(t.total_lost, 1);
    }

    #[test]
    fn reordering_within_tolerance_is_not_a_loss() {
        let mut t = tracker();
        for e in [0, 2, 1, 3, 5, 4, 6, 7, 8, 9] {
            assert_eq!(t.on_source(e), Arrival::New);
        }
        assert_eq!(t.period.lost, 0);
    }

    #[test]
    fn a_gap_is_pending_until_declared_before_the_esi_that_showed_it() {
        let mut t = tracker();
        for e in [0, 1, 2] {
            t.on_source(e);
        }
        assert!(!t.gap_pending());
        // ESI 3 missing; 4 arrived (one later ESI, tolerance 2).
        t.on_source(4);
        assert!(t.gap_pending());
        assert_eq!(t.total_lost, 0);
        t.declare_before(4);
        assert_eq!(t.total_lost, 1);
        assert!(!t.gap_pending());
        let mut r = crate::feedback::LossReport::default();
        t.missing(64, &mut r);
        assert_eq!(
            r.ranges(),
            &[crate::feedback::EsiRange { first: 3, len: 1 }]
        );
        // An ESI not seen yet is never declared; nor is the newest.
        t.declare_before(9);
        assert_eq!(t.total_lost, 1);
        // A late original of a declared loss is delivered; the loss stays counted.
        assert_eq!(t.on_source(3), Arrival::New);
        assert_eq!(t.total_lost, 1);
        assert!(!t.gap_pending());
    }

    #[test]
    fn repair_declares_at_once_and_recovery_is_not_residual() {
        let mut t = tracker();
        t.on_source(0);
        t.on_source(1);
        // 2 and 3 lost, a repair over 0..=3 arrives.
        t.on_repair(0, 3);
        assert_eq!(t.period.lost, 2);
        assert!(t.on_recovered(3));
        assert!(!t.on_recovered(3));
        assert_eq!(t.on_source(3), Arrival::Late);
        for e in 4..20 {
            t.on_source(e);
        }
        let p = t.take_period();
        assert_eq!((p.lost, p.recovered, p.residual, p.repairs), (2, 1, 1, 1));
        assert_eq!((p.bursts, p.burst_sum, p.burst_max), (1, 2, 2));
    }

    #[test]
    fn duplicates_and_stale() {
        let mut t = tracker();
        assert_eq!(t.on_source(5), Arrival::New);
        assert_eq!(t.on_source(5), Arrival::Duplicate);
        for e in 6..200 {
            t.on_source(e);
        }
        assert_eq!(t.on_source(100), Arrival::Stale); // history 64
        assert_eq!(t.on_source(199), Arrival::Duplicate);
        assert_eq!(t.on_source(150), Arrival::Duplicate);
        // first ESI seen was 5 (< size/2): 0..5 counted lost.
        assert_eq!(t.total_lost, 5);
    }

    #[test]
    fn loss_windows_and_squares() {
        let mut t = LossTracker::new(64, 8, 0, 10);
        // Window 0 (ESIs 0..10): 3 losses; window 1 (10..20): 1 loss.
        let lost = [1, 2, 3, 15];
        for e in 0..20 {
            if !lost.contains(&e) {
                t.on_source(e);
            }
        }
        let p = t.take_period();
        assert_eq!(
            (p.windows, p.loss_sum, p.loss_sq_sum, p.window_loss_max),
            (2, 4, 10, 3)
        );
        assert_eq!((p.bursts, p.burst_sum, p.burst_max), (2, 4, 3));
    }

    #[test]
    fn a_grown_history_keeps_what_it_knew_and_stays_a_duplicate_filter() {
        let mut t = LossTracker::new(64, 8, 2, 10);
        for e in (0..100).filter(|&e| e != 90) {
            t.on_source(e);
        }
        assert_eq!(t.on_source(20), Arrival::Stale, "history 64");
        t.grow_to_horizon(200);
        assert_eq!(t.size(), 256);
        // Older than the old history: forgotten, and a late copy is not delivered again.
        assert_eq!(t.on_source(20), Arrival::Duplicate);
        // Within it: as known before.
        assert_eq!(t.on_source(95), Arrival::Duplicate);
        assert_ne!(t.on_source(90), Arrival::Duplicate, "90 was missing");
        for e in 100..400 {
            t.on_source(e);
        }
        assert_eq!(
            t.on_source(200),
            Arrival::Duplicate,
            "now 256 ESIs are remembered"
        );
    }

    #[test]
    fn shorter_horizon_finalizes_sooner() {
        let mut t = LossTracker::new(64, 40, 2, 10);
        t.on_source(0);
        t.on_source(2);
        for e in 3..10 {
            t.on_source(e);
        }
        assert_eq!(t.total_residual, 0); // horizon 43
        t.set_horizon(4); // 4 + 2 + 1 = 7: ESI 1 is 8 behind top
        t.on_source(10);
        assert_eq!(t.total_residual, 1);
        t.set_horizon(u32::MAX); // clamped to the ring
        for e in 11..200 {
            t.on_source(e);
        }
        assert_eq!(t.total_residual, 1);
    }

    #[test]
    fn wraps_around_the_esi_space() {
        let mut t = tracker();
        let start = u32::MAX - 20;
        let mut e = start;
        for i in 0..60u32 {
            if i != 30 {
                assert_eq!(t.on_source(e), Arrival::New);
            }
            e = e.wrapping_add(1);
        }
        assert_eq!(t.total_lost, 1);
        assert_eq!(t.total_residual, 1);
        assert_eq!(t.on_source(start.wrapping_add(50)), Arrival::Duplicate);
    }

    #[test]
    fn huge_jump_is_bounded_and_counted() {
        let mut t = tracker();
        t.on_source(0);
        t.on_source(1 << 30);
        // Lost: every ESI in 1..2^30 except the last `tolerance` (2) - 1 not yet classified.
        assert_eq!(t.total_lost, (1 << 30) - 2);
        assert_eq!(t.on_source(0), Arrival::Stale); // far past now
        assert_eq!(t.total_lost, (1 << 30) - 2);
        assert_eq!(t.on_source(1 << 30), Arrival::Duplicate);
    }
}
