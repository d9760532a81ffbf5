//! How long the decoder took to recover each loss, measured from the moment it first knew of
//! it: the arrival of the first later packet (a later source, or a repair whose window covers
//! the loss). Where packets follow each other closely that is within a packet gap of when the
//! original would have arrived; it is the one time the decoder can observe without a clock
//! shared with the encoder.
//!
//! The missing ESIs are kept as runs (the ESIs a packet skipped, all noticed at its arrival)
//! in a ring of [`RUNS`]: O(1) per packet whatever the gap, O([`RUNS`]) per recovery (the
//! newest run first), no allocation after the first [`RUNS`] runs.

use std::time::Instant;

use hirt_fec::Esi;

/// Gap runs remembered. A loss recovered after more than this many later gaps has no notice
/// time left: its delay is counted as unknown.
const RUNS: usize = 256;

/// A first packet with an ESI below this is taken as the stream's start at ESI 0 (half the
/// loss tracker's default history, as it does).
const STREAM_START_SPAN: Esi = 4096;

/// ESIs `first .. first + len` went missing at `at`.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: Esi,
    len: u32,
    at: Instant,
}

/// When the decoder first knew each missing source of a stream was missing.
#[derive(Debug, Default)]
pub(crate) struct RecoveryClock {
    /// One past the highest ESI any packet showed (`None` before the first).
    top: Option<Esi>,
    runs: Vec<Run>,
    /// Slot the next run goes to, once the ring is full.
    next: usize,
}

impl RecoveryClock {
    /// A packet arrived at `now` that shows ESIs up to `end` (exclusive) exist: a source
    /// (`arrived` = its ESI, `end` = ESI + 1) or a repair (`arrived` = `None`, `end` = one past
    /// its window). ESIs past the previous top that did not arrive are missing from now.
    pub(crate) fn on_packet(&mut self, end: Esi, arrived: Option<Esi>, now: Instant) {
        // A stream's first packet near ESI 0: the stream began at 0 (our encoders number from
        // 0, and the loss tracker assumes the same), so the ESIs before it are missing too.
        // Further on, what came before the first packet is unknown: no notice time for it.
        let top = match self.top {
            Some(top) => top,
            None if end <= STREAM_START_SPAN => 0,
            None => {
                self.top = Some(end);
                return;
            }
        };
        let ahead = end.wrapping_sub(top) as i32;
        if ahead <= 0 {
            return;
        }
        let mut len = ahead as u32;
        if arrived == Some(end.wrapping_sub(1)) {
            len -= 1;
        }
        if len > 0 {
            self.push(Run {
                first: top,
                len,
                at: now,
            });
        }
        self.top = Some(end);
    }

    fn push(&mut self, run: Run) {
        if self.runs.len() < RUNS {
            self.runs.push(run);
        } else {
            self.runs[self.next] = run;
            self.next = (self.next + 1) % RUNS;
        }
    }

    /// When `esi` was first known to be missing, if that is still remembered.
    pub(crate) fn noticed(&self, esi: Esi) -> Option<Instant> {
        let n = self.runs.len();
        // Newest first: a recovery is most often of a recent loss.
        let newest = if n < RUNS { n } else { self.next + RUNS };
        (1..=n)
            .map(|k| &self.runs[(newest - k) % n.max(1)])
            .find(|r| esi.wrapping_sub(r.first) < r.len)
            .map(|r| r.at)
    }

    /// Forgets everything (the stream restarted: its ESIs began again).
    pub(crate) fn reset(&mut self) {
        self.top = None;
        self.runs.clear();
        self.next = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[allow(clippy::disallowed_methods)]
    fn start() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_gap_is_noticed_when_the_next_source_arrives() {
        let t0 = start();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = RecoveryClock::default();
        c.on_packet(1, Some(0), ms(0));
        c.on_packet(2, Some(1), ms(1));
        // 2 and 3 lost; 4 arrives at 5 ms.
        c.on_packet(5, Some(4), ms(5));
        assert_eq!(c.noticed(2), Some(ms(5)));
        assert_eq!(c.noticed(3), Some(ms(5)));
        assert_eq!(c.noticed(4), None, "4 arrived");
        assert_eq!(c.noticed(1), None);
        // A reordered older source moves nothing.
        c.on_packet(4, Some(3), ms(6));
        assert_eq!(c.noticed(3), Some(ms(5)));
    }

    #[test]
    fn losses_before_the_first_packet_of_a_stream_count_from_its_start() {
        let t0 = start();
        let mut c = RecoveryClock::default();
        // Sources 0 and 1 lost, 2 is the first to arrive.
        c.on_packet(3, Some(2), t0);
        assert_eq!(c.noticed(0), Some(t0));
        assert_eq!(c.noticed(1), Some(t0));
        assert_eq!(c.noticed(2), None);
        // Far from the start (a decoder that came up late), nothing before is known.
        let mut c = RecoveryClock::default();
        c.on_packet(100_001, Some(100_000), t0);
        assert_eq!(c.noticed(99_999), None);
    }

    #[test]
    fn a_repair_past_the_newest_source_notices_the_tail() {
        let t0 = start();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = RecoveryClock::default();
        c.on_packet(10, Some(9), ms(0));
        // Sources 10 and 11 lost at the end of a burst; a repair over 0..=11 arrives at 2 ms.
        c.on_packet(12, None, ms(2));
        assert_eq!(c.noticed(10), Some(ms(2)));
        assert_eq!(c.noticed(11), Some(ms(2)));
        assert_eq!(c.noticed(12), None);
    }

    #[test]
    fn esis_wrap_and_old_runs_are_forgotten() {
        let t0 = start();
        let mut c = RecoveryClock::default();
        c.on_packet(u32::MAX - 1, Some(u32::MAX - 2), t0);
        // u32::MAX - 1, u32::MAX, 0 lost; 1 arrives.
        c.on_packet(2, Some(1), t0 + Duration::from_millis(3));
        for e in [u32::MAX - 1, u32::MAX, 0] {
            assert_eq!(c.noticed(e), Some(t0 + Duration::from_millis(3)), "{e}");
        }
        assert_eq!(c.noticed(1), None);
        // RUNS more gaps push the first one out of the ring.
        let mut esi = 2u32;
        for i in 0..RUNS as u64 {
            esi += 2;
            c.on_packet(esi, Some(esi - 1), t0 + Duration::from_millis(10 + i));
        }
        assert_eq!(c.noticed(0), None);
        assert_eq!(
            c.noticed(esi - 2),
            Some(t0 + Duration::from_millis(9 + RUNS as u64))
        );
        c.reset();
        assert_eq!(c.noticed(esi - 2), None);
    }
}
