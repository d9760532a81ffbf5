//! Recovery deadline and loss-triggered repair through the public sans-IO API: the decoder's
//! loss reports make the encoder answer with repairs, the answers recover the losses, and a
//! report cannot make the encoder send more than it names, more than its budget, or anything
//! for sources it never sent.

use std::time::{Duration, Instant};

use hirt_core::{
    Deadline, Decoder, DecoderConfig, Encoder, EncoderConfig, EsiRange, FecMode, Feedback,
    LossReport, RepairInfo, Verdict, AUTO_DEADLINE_FLOOR, DEFAULT_LOSS_REPORT_GAP,
};

#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

fn payload(n: u32) -> Vec<u8> {
    (0..40).map(|i| (n as usize * 7 + i * 3) as u8).collect()
}

/// Source `n` is lost on the link: a fixed pattern of 3 % (and the repairs that follow
/// source 500 + 97 k).
fn lost(n: u32) -> bool {
    n % 33 == 7
}

struct Loop {
    enc: Encoder,
    dec: Decoder,
    now: Instant,
    /// Sources recovered, and how many of them within 5 ms of their loss.
    recovered: u32,
    recovered_soon: u32,
    reports: u32,
}

impl Loop {
    fn new() -> Self {
        Self::with_deadline(Duration::from_millis(50))
    }

    fn with_deadline(deadline: Duration) -> Self {
        let mode = FecMode::parse_with_window("ours", 1000).unwrap();
        let mut cfg = EncoderConfig::new(mode.clone());
        cfg.deadline = Some(Deadline::Fixed(deadline));
        cfg.repair_delay = None;
        let mut dcfg = DecoderConfig::new(mode.scheme.clone());
        dcfg.loss_report_gap = Some(DEFAULT_LOSS_REPORT_GAP);
        Loop {
            enc: Encoder::new(cfg, 1),
            dec: Decoder::new(dcfg, 2),
            now: t0(),
            recovered: 0,
            recovered_soon: 0,
            reports: 0,
        }
    }

    /// Sends sources `from..to`, one per ms, with no link delay and instant feedback.
    fn run(&mut self, from: u32, to: u32, lost_at: &mut Vec<(u32, Instant)>) {
        for n in from..to {
            self.now += Duration::from_millis(1);
            let now = self.now;
            if self.enc.poll_timeout().is_some_and(|t| t <= now) {
                self.enc.handle_timeout(now);
            }
            if self.dec.poll_timeout().is_some_and(|t| t <= now) {
                self.dec.handle_timeout(now);
            }
            let data = payload(n);
            let tag = self.enc.handle_source(0, &data, now);
            assert_eq!(tag.esi, n);
            if lost(n) {
                lost_at.push((n, now));
            } else {
                assert_eq!(self.dec.handle_source(0, n, &data, now), Verdict::Deliver);
            }
            self.exchange(lost_at);
        }
    }

    fn exchange(&mut self, lost_at: &[(u32, Instant)]) {
        let now = self.now;
        loop {
            let mut repairs = Vec::new();
            while let Some(r) = self.enc.poll_repair() {
                repairs.push((r.info, r.timestamp, r.payload.to_vec()));
            }
            let idle = repairs.is_empty();
            for (info, ts, p) in repairs {
                self.dec.handle_repair(0, &info, ts, &p, now).unwrap();
            }
            while let Some(r) = self.dec.poll_recovered() {
                assert_eq!(r.data, payload(r.esi), "bit-exact");
                self.recovered += 1;
                if let Some(&(_, at)) = lost_at.iter().find(|(e, _)| *e == r.esi) {
                    if now.saturating_duration_since(at) <= Duration::from_millis(5) {
                        self.recovered_soon += 1;
                    }
                }
            }
            let mut fbs = Vec::new();
            while let Some(fb) = self.dec.poll_feedback(now) {
                // Through the wire format.
                let fb = Feedback::decode(&fb.to_bytes()).unwrap();
                self.reports += u32::from(!fb.loss_report.is_empty());
                fbs.push(fb);
            }
            if idle && fbs.is_empty() {
                break;
            }
            for fb in fbs {
                self.enc.handle_feedback(&fb, now);
            }
        }
    }
}

#[test]
fn loss_reports_are_answered_and_recover_the_losses_at_once() {
    let mut l = Loop::new();
    let mut lost_at = Vec::new();
    l.run(0, 4000, &mut lost_at);
    let st = l.enc.stats(0).unwrap();
    let lost = lost_at.len() as u32;
    // Every loss recovered, nearly all within a few packets: the decoder reports a loss once 3
    // later sources arrived, and the answer is immediate on this zero-delay link.
    assert_eq!(l.dec.stats(0).unwrap().recovered, u64::from(l.recovered));
    assert!(l.recovered >= lost - 2, "{} of {lost}", l.recovered);
    assert!(
        l.recovered_soon >= lost * 95 / 100,
        "{} of {lost}",
        l.recovered_soon
    );
    assert!(l.reports > 0 && st.repairs_report > 0);
    // Once the controller runs on loss reports its own repairs stop: every repair answers a
    // report, one per loss plus the spares that back up answers (at 1000 pps and one loss per
    // 33 ms, about one spare per answer).
    assert!(st.repairs_controller < 10, "{st:?}");
    assert!(st.repairs <= 2 * u64::from(lost) + 10, "{st:?}");
    assert_eq!(st.window, 50, "the deadline's window: 50 ms at 1000 pps");
    assert_eq!((st.deadline_window_wanted, st.window_max), (50, 1000));
}

#[test]
fn a_deadline_longer_than_the_window_is_reported() {
    // 5 s at 1000 pps asks for 5000 sources; the code keeps 1000.
    let mut l = Loop::with_deadline(Duration::from_secs(5));
    let mut lost_at = Vec::new();
    l.run(0, 500, &mut lost_at);
    let st = l.enc.stats(0).unwrap();
    assert_eq!(st.window_max, 1000);
    assert!((4900..=5100).contains(&st.deadline_window_wanted), "{st:?}");
    assert!(st.window <= st.window_max);
}

#[test]
fn a_report_gets_at_most_what_it_names_once_per_rtt_and_nothing_for_unsent_sources() {
    let mut l = Loop::new();
    let mut lost_at = Vec::new();
    l.run(0, 2000, &mut lost_at);
    let before = l.enc.stats(0).unwrap();
    let next = l.enc.next_esi(0);
    let report = |ranges: &[(u32, u16)]| {
        let mut r = LossReport::default();
        for &(first, len) in ranges {
            assert!(r.push(EsiRange { first, len }));
        }
        Feedback {
            stream: 0,
            seq: 60_000,
            loss_report: r,
            ..Feedback::default()
        }
    };
    let repairs = |l: &mut Loop| {
        let mut n = 0;
        while l.enc.poll_repair().is_some() {
            n += 1;
        }
        n
    };
    repairs(&mut l);
    // Sources never sent (ahead of the encoder, or far behind it): nothing.
    let mut fb = report(&[(next, 100), (next + 5000, 10)]);
    l.enc.handle_feedback(&fb, l.now);
    assert_eq!(repairs(&mut l), 0);
    // 3 sources inside the window: at most 3 answers (paced: the first now).
    fb = report(&[(next - 10, 2), (next - 20, 1)]);
    fb.seq = 60_001;
    l.enc.handle_feedback(&fb, l.now);
    let mut answered = repairs(&mut l);
    // The answers are paced (200 us apart); the RTT is 0 here, so a name is answered again
    // after 1 ms: stay below.
    for _ in 0..4 {
        l.now += Duration::from_micros(200);
        l.enc.handle_timeout(l.now);
        answered += repairs(&mut l);
    }
    assert!((1..=3).contains(&answered), "{answered}");
    // The same report again within the RTT: nothing new.
    fb.seq = 60_002;
    l.enc.handle_feedback(&fb, l.now);
    assert_eq!(repairs(&mut l), 0);
    // Sources past their 50 ms deadline (60 to 80 sources old): no answer would arrive in time.
    fb = report(&[(next - 80, 20)]);
    fb.seq = 60_003;
    l.enc.handle_feedback(&fb, l.now);
    assert_eq!(repairs(&mut l), 0);
    // A report naming everything in reach: bounded by the budget (<= 256 repairs).
    let mut big = LossReport::default();
    for k in 0..16u32 {
        big.push(EsiRange {
            first: next - 1920 + k * 120,
            len: 120,
        });
    }
    fb = Feedback {
        loss_report: big,
        seq: 60_004,
        ..fb
    };
    l.enc.handle_feedback(&fb, l.now);
    let mut total = repairs(&mut l);
    for _ in 0..2000 {
        l.now += Duration::from_micros(200);
        l.enc.handle_timeout(l.now);
        total += repairs(&mut l);
    }
    // Only the sources within the deadline and the window (50) are answered, each once, plus
    // the spares that back those answers up (a few at 3 % loss), far below the 1920 named.
    assert!((40..=64).contains(&total), "{total}");
    let after = l.enc.stats(0).unwrap();
    assert!(after.report_withheld > before.report_withheld + 1000);
}

/// Feedback of stream 0 whose loss report names `(first, len)` ranges.
fn report_of(ranges: &[(u32, u16)]) -> Feedback {
    let mut loss_report = LossReport::default();
    for &(first, len) in ranges {
        assert!(loss_report.push(EsiRange { first, len }));
    }
    Feedback {
        stream: 0,
        seq: 60_000,
        loss_report,
        ..Feedback::default()
    }
}

/// A loss a report names once no repair could reach it before its deadline gets no answer
/// and is left out of the windows of the spares that follow: its unknown would otherwise hold
/// back the losses that are still in time. The loss still in time gets an answer over itself
/// alone.
#[test]
fn answers_leave_out_losses_past_their_deadline() {
    let mut l = Loop::new();
    let mut lost_at = Vec::new();
    l.run(0, 2000, &mut lost_at);
    while l.enc.poll_repair().is_some() {}
    let next = l.enc.next_esi(0);
    // One source a millisecond and a 50 ms deadline: `next - 52` is past it, `next - 5` not.
    let fb = report_of(&[(next - 52, 1), (next - 5, 1)]);
    l.enc.handle_feedback(&fb, l.now);
    let mut windows = Vec::new();
    for _ in 0..50 {
        while let Some(r) = l.enc.poll_repair() {
            windows.push((r.info.first_esi, r.info.nss));
        }
        l.now += Duration::from_millis(1);
        l.enc.handle_timeout(l.now);
    }
    assert_eq!(windows.first(), Some(&(next - 5, 1)), "{windows:?}");
    assert!(windows.len() > 1, "no spare: {windows:?}");
    for &(first, nss) in &windows[1..] {
        // The window of 50 ending after `next - 5` would start at `next - 54`.
        assert_eq!(first, next - 51, "{windows:?}");
        assert_eq!(first + u32::from(nss), next - 4, "{windows:?}");
    }
}

/// Each answer covers the one loss it answers: two answers of three that arrive recover two
/// losses, where answers over the whole window would share their three unknowns and recover
/// none until a third equation came.
#[test]
fn an_answer_covers_its_own_loss_so_a_lost_answer_costs_only_its_loss() {
    let mut l = Loop::new();
    l.run(0, 2000, &mut Vec::new());
    while l.enc.poll_repair().is_some() {}
    let next = l.enc.next_esi(0);
    let named = [next - 20, next - 15, next - 10];
    l.enc
        .handle_feedback(&report_of(&named.map(|e| (e, 1))), l.now);
    let mut answers = Vec::new();
    for _ in 0..10 {
        while let Some(r) = l.enc.poll_repair() {
            answers.push((r.info, r.timestamp, r.payload.to_vec()));
        }
        l.now += Duration::from_micros(500);
        l.enc.handle_timeout(l.now);
    }
    let windows: Vec<(u32, u16)> = answers.iter().map(|(i, ..)| (i.first_esi, i.nss)).collect();
    assert_eq!(windows, named.map(|e| (e, 1)));
    // A decoder that lost the three sources, and the answer to the first.
    let mode = FecMode::parse_with_window("ours", 1000).unwrap();
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 3);
    for n in (0..next).filter(|n| !named.contains(n)) {
        dec.handle_source(0, n, &payload(n), l.now);
    }
    for (info, ts, payload) in &answers[1..] {
        dec.handle_repair(0, info, *ts, payload, l.now).unwrap();
    }
    let mut recovered = Vec::new();
    while let Some(r) = dec.poll_recovered() {
        assert_eq!(r.data, payload(r.esi));
        recovered.push(r.esi);
    }
    assert_eq!(recovered, named[1..]);
}

#[test]
fn local_drops_are_not_answered() {
    let mut l = Loop::new();
    let mut lost_at = Vec::new();
    l.run(0, 2000, &mut lost_at);
    while l.enc.poll_repair().is_some() {}
    let next = l.enc.next_esi(0);
    // The decoder's host dropped 5 packets itself: the 5 named losses are set against them.
    let fb = Feedback {
        local_drops: 5,
        ..report_of(&[(next - 10, 5)])
    };
    l.enc.handle_feedback(&fb, l.now);
    let mut n = 0;
    for _ in 0..10 {
        while l.enc.poll_repair().is_some() {
            n += 1;
        }
        l.now += Duration::from_millis(1);
        l.enc.handle_timeout(l.now);
    }
    assert_eq!(n, 0);
}

/// Repairs per source of `mode` for `n` sources one `gap` apart with the default 5 ms repair
/// timer (no loss: the ratio does not depend on it).
fn block_overhead(mode: &str, n: u32, gap: Duration) -> f64 {
    block_overhead_with(mode, n, gap, None)
}

/// [`block_overhead`] with a recovery deadline.
fn block_overhead_with(mode: &str, n: u32, gap: Duration, deadline: Option<Deadline>) -> f64 {
    block_overhead_spaced(mode, n, |_| gap, deadline)
}

/// [`block_overhead_with`] with source `i` sent `gap(i)` after the one before it.
fn block_overhead_spaced(
    mode: &str,
    n: u32,
    gap: impl Fn(u32) -> Duration,
    deadline: Option<Deadline>,
) -> f64 {
    let mode: FecMode = mode.parse().unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.deadline = deadline;
    let mut enc = Encoder::new(cfg, 1);
    let mut now = t0();
    for i in 0..n {
        now += gap(i);
        // Timers fire when due, as a dataplane's would.
        while let Some(t) = enc.poll_timeout().filter(|&t| t <= now) {
            enc.handle_timeout(t);
            while enc.poll_repair().is_some() {}
        }
        enc.handle_source(0, &payload(i), now);
        while enc.poll_repair().is_some() {}
    }
    now += Duration::from_secs(1);
    while let Some(t) = enc.poll_timeout().filter(|&t| t <= now) {
        enc.handle_timeout(t);
        while enc.poll_repair().is_some() {}
    }
    let st = enc.stats(0).unwrap();
    st.repairs as f64 / st.sources as f64
}

/// A pinned k:m block code costs m/k whatever the rate: a time-driven flush of a partial block
/// sends the code's ratio for the sources in it (the fraction carried over; an isolated
/// source: ceil(m/k)), not all m repairs of a full block.
#[test]
fn a_pinned_block_code_costs_m_over_k_at_any_rate() {
    // 2000 pps (a block of 20 takes 10 ms, longer than the 5 ms timer).
    let dense = block_overhead("rs:20:10", 20_000, Duration::from_micros(500));
    assert!((dense - 0.5).abs() < 0.025, "{dense}");
    // 10 000, 3333, 1000 and 400 pps: full blocks, and partial ones of 15, 5 and 12 sources.
    for gap_us in [100, 300, 1000, 2500] {
        let r = block_overhead("rs:20:10", 20_000, Duration::from_micros(gap_us));
        assert!((r - 0.5).abs() < 0.025, "{gap_us} us: {r}");
    }
    // Sparse: every source flushed alone, with ceil(10 / 20) = 1 repair.
    let sparse = block_overhead("rs:20:10", 200, Duration::from_millis(20));
    assert!((sparse - 1.0).abs() < 1e-9, "{sparse}");
    let sparse = block_overhead("rs:4:4", 200, Duration::from_millis(20));
    assert!((sparse - 1.0).abs() < 1e-9, "{sparse}");
    let sparse = block_overhead("rs:2:6", 200, Duration::from_millis(20));
    assert!((sparse - 3.0).abs() < 1e-9, "{sparse}");
}

/// Full blocks between lone sources flushed by the timer: the lone source's rounded-up repair
/// (one, where its share is m/k = 1/2) is paid back by the next full block, so the code still
/// costs m/k. Forgiving it would cost 11 repairs per 21 sources (0.524).
#[test]
fn a_flushed_lone_source_is_paid_back_by_the_next_full_block() {
    // 20 sources 100 us apart fill a block; the 21st is followed by a 20 ms pause.
    let gap = |i: u32| {
        if i > 0 && i.is_multiple_of(21) {
            Duration::from_millis(20)
        } else {
            Duration::from_micros(100)
        }
    };
    for mode in ["rs:20:10", "rs:10:3"] {
        let (k, m) = if mode == "rs:20:10" {
            (20.0, 10.0)
        } else {
            (10.0, 3.0)
        };
        let r = block_overhead_spaced(mode, 21 * 200, gap, None);
        assert!((r / (m / k) - 1.0).abs() < 0.01, "{mode}: {r}");
    }
}

/// UDP mode's default deadline (`auto`: 10 ms on a short path) leaves a block code's flush
/// timer alone: at 2000
/// and 250 pps (a source every 4 ms: a 10 ms deadline would cut the timer to 3.3 ms and
/// flush each source alone) the blocks still fill.
#[test]
fn a_deadline_does_not_change_what_a_block_code_costs() {
    for gap_us in [500, 4000] {
        let r = block_overhead_with(
            "rs:20:10",
            4_000,
            Duration::from_micros(gap_us),
            Some(Deadline::Fixed(AUTO_DEADLINE_FLOOR)),
        );
        assert!((r - 0.5).abs() < 0.025, "{gap_us} us: {r}");
    }
}

#[test]
fn ce_marks_pause_the_answers_and_keep_the_losses_from_the_controller() {
    let mut l = Loop::new();
    let mut lost_at = Vec::new();
    l.run(0, 2000, &mut lost_at);
    while l.enc.poll_repair().is_some() {}
    let next = l.enc.next_esi(0);
    let before = l.enc.stats(0).unwrap();
    let mut r = LossReport::default();
    assert!(r.push(EsiRange {
        first: next - 10,
        len: 3
    }));
    let fb = Feedback {
        stream: 0,
        seq: 60_000,
        received: 90,
        lost: 10,
        ce_marks: 4,
        loss_report: r,
        ..Feedback::default()
    };
    l.enc.handle_feedback(&fb, l.now);
    let mut answered = 0;
    for _ in 0..5 {
        while l.enc.poll_repair().is_some() {
            answered += 1;
        }
        l.now += Duration::from_micros(200);
        l.enc.handle_timeout(l.now);
    }
    let after = l.enc.stats(0).unwrap();
    assert_eq!(answered, 0, "a CE-marked period gets no answers");
    assert_eq!(after.ce_signals, before.ce_signals + 1);
    assert_eq!(after.report_withheld, before.report_withheld + 3);
    assert_eq!(after.repairs_report, before.repairs_report);
}

#[test]
fn the_decoder_passes_ce_marks_on_once() {
    let mode = FecMode::parse_with_window("ours", 1000).unwrap();
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), 2);
    let now = t0();
    assert_eq!(dec.handle_source(0, 0, &payload(0), now), Verdict::Deliver);
    for _ in 0..300 {
        dec.note_ce(0);
    }
    // A stream the decoder does not track is ignored.
    dec.note_ce(9);
    let mut fbs = Vec::new();
    for n in 1..400u32 {
        let t = now + Duration::from_millis(u64::from(n));
        dec.handle_source(0, n, &payload(n), t);
        dec.handle_timeout(t);
        while let Some(fb) = dec.poll_feedback(t) {
            fbs.push(fb);
        }
    }
    assert!(fbs.len() >= 2, "{}", fbs.len());
    assert_eq!(fbs[0].ce_marks, 255, "saturates");
    assert!(fbs[1..].iter().all(|f| f.ce_marks == 0));
    assert_eq!(dec.stats(0).unwrap().ce_marks, 300);
}

/// Sources `0..n` every 0.5 ms from `enc` to `dec` over a zero-delay link with instant repairs
/// and feedback: source `k` is lost when `lost(k)`, a repair is dropped when `drop_repair()`
/// says so, `feedback` sees each feedback before the encoder takes it, and `recovered` gets
/// each recovered ESI with the time since it was sent.
fn every_half_ms(
    enc: &mut Encoder,
    dec: &mut Decoder,
    n: u32,
    lost: impl Fn(u32) -> bool,
    mut drop_repair: impl FnMut(&RepairInfo) -> bool,
    mut feedback: impl FnMut(&Feedback) -> bool,
    mut recovered: impl FnMut(u32, Duration),
) {
    let start = t0();
    let sent_at = |k: u32| start + Duration::from_micros(500) * (k + 1);
    for k in 0..n {
        let now = sent_at(k);
        if enc.poll_timeout().is_some_and(|t| t <= now) {
            enc.handle_timeout(now);
        }
        if dec.poll_timeout().is_some_and(|t| t <= now) {
            dec.handle_timeout(now);
        }
        let data = payload(k);
        enc.handle_source(0, &data, now);
        if !lost(k) {
            dec.handle_source(0, k, &data, now);
        }
        loop {
            let mut repairs = Vec::new();
            while let Some(r) = enc.poll_repair() {
                repairs.push((r.info, r.timestamp, r.payload.to_vec()));
            }
            let idle = repairs.is_empty();
            for (info, ts, p) in repairs {
                if !drop_repair(&info) {
                    dec.handle_repair(0, &info, ts, &p, now).unwrap();
                }
            }
            while let Some(r) = dec.poll_recovered() {
                recovered(r.esi, now.saturating_duration_since(sent_at(r.esi)));
            }
            let mut fbs = Vec::new();
            while let Some(fb) = dec.poll_feedback(now) {
                if feedback(&fb) {
                    fbs.push(fb);
                }
            }
            if idle && fbs.is_empty() {
                break;
            }
            for fb in fbs {
                enc.handle_feedback(&fb, now);
            }
        }
    }
}

/// A lost answer is asked for again after about two answer delays, not after the fixed
/// `loss_report_repeat` (10 ms): on a short path every loss is then recovered within a few
/// ms even when the first answer to a quarter of them is lost. Sources every 0.5 ms, zero
/// link delay, deadline 40 ms (its spares follow ~20 ms after an answer).
#[test]
fn a_lost_answer_is_asked_for_again_within_a_few_round_trips() {
    use std::cell::Cell;
    let mode = FecMode::parse_with_window("ours", 1000).unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.deadline = Some(Deadline::Fixed(Duration::from_millis(40)));
    cfg.repair_delay = None;
    let mut dcfg = DecoderConfig::new(mode.scheme.clone());
    dcfg.loss_report_gap = Some(DEFAULT_LOSS_REPORT_GAP);
    assert_eq!(dcfg.loss_report_repeat, Duration::from_millis(10));
    let (mut enc, mut dec) = (Encoder::new(cfg, 1), Decoder::new(dcfg, 2));
    let lost = |k: u32| k % 40 == 7;
    // Losses whose first answer the link drops: every fourth one.
    let drop_next = Cell::new(false);
    let armed_for = Cell::new(None);
    let mut delays = Vec::new();
    every_half_ms(
        &mut enc,
        &mut dec,
        20_000,
        lost,
        |_| drop_next.replace(false),
        |fb| {
            if let Some(r) = fb.loss_report.ranges().first() {
                let newest = r.first + u32::from(r.len) - 1;
                // From the 10th loss on: the first ones come before any answer delay is
                // measured (the repeat is then 10 ms).
                if newest % 160 == 7 && newest > 400 && armed_for.get() != Some(newest) {
                    armed_for.set(Some(newest));
                    drop_next.set(true);
                }
            }
            true
        },
        |esi, delay| {
            if lost(esi) {
                delays.push(delay);
            }
        },
    );
    let lost = (0..20_000).filter(|&k| lost(k)).count();
    assert!(
        delays.len() >= lost - 2,
        "{} of {lost} recovered",
        delays.len()
    );
    delays.sort();
    let worst = *delays.last().unwrap();
    assert!(
        worst <= Duration::from_millis(6),
        "slowest recovery {worst:?}"
    );
}

/// `ours` with a window of 200 and UDP mode's default deadline, and a decoder that reports
/// losses.
fn auto_deadline_pair() -> (Encoder, Decoder) {
    let mode = FecMode::parse_with_window("ours", 200).unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.deadline = Some(Deadline::Auto);
    let mut dcfg = DecoderConfig::new(mode.scheme);
    dcfg.loss_report_gap = Some(DEFAULT_LOSS_REPORT_GAP);
    (Encoder::new(cfg, 1), Decoder::new(dcfg, 2))
}

/// The first losses of a stream, before the encoder knows the source rate or the RTT, are
/// answered too: sources every 0.5 ms, zero link delay, UDP mode's default deadline, sources 7
/// and 8 lost.
#[test]
fn losses_at_the_start_of_a_stream_are_recovered() {
    let (mut enc, mut dec) = auto_deadline_pair();
    let mut got = Vec::new();
    every_half_ms(
        &mut enc,
        &mut dec,
        400,
        |k| k == 7 || k == 8,
        |_| false,
        |_| true,
        |esi, _| got.push(esi),
    );
    assert!(
        got.contains(&7) && got.contains(&8),
        "recovered {got:?}; {:?}",
        enc.stats(0)
    );
}

/// A loss report that is lost is repeated even when the only answer the decoder has seen so far
/// covered a window cut short by the start of the stream (the answer to a loss of ESI 0 spans
/// one source): that span is not how far back the encoder's repairs reach. Sources every 0.5
/// ms, zero link delay, UDP mode's default deadline; ESIs 0 and 38 lost, and the first
/// feedback that names 38.
#[test]
fn a_lost_report_is_repeated_after_an_answer_cut_short_by_the_stream_start() {
    let (mut enc, mut dec) = auto_deadline_pair();
    let mut first_answer_nss = None;
    let mut dropped = false;
    let mut recovered = Vec::new();
    every_half_ms(
        &mut enc,
        &mut dec,
        200,
        |k| k == 0 || k == 38,
        |info| {
            first_answer_nss.get_or_insert(info.nss);
            false
        },
        |fb| {
            let names_38 = fb
                .loss_report
                .ranges()
                .iter()
                .any(|r| (r.first..r.first + u32::from(r.len)).contains(&38));
            let drop = names_38 && !dropped;
            dropped |= drop;
            !drop
        },
        |esi, delay| recovered.push((esi, delay)),
    );
    assert_eq!(first_answer_nss, Some(1), "the answer to ESI 0");
    assert!(dropped, "a report named 38");
    let esis: Vec<u32> = recovered.iter().map(|r| r.0).collect();
    assert_eq!(esis, vec![0, 38], "{recovered:?}; {:?}", enc.stats(0));
    assert!(recovered[1].1 <= Duration::from_millis(15), "{recovered:?}");
}

/// Once an answer delay is measured, a gap is reported when a later source has waited a
/// quarter of it, not when `reorder_tolerance` (3) later sources came: at 2,000 pps those take
/// 1.5 ms, more than the round trip of a short path. Sources every 0.5 ms, zero link delay
/// (so the reorder window is zero), UDP mode's default deadline; ESIs 100 and 300 lost.
#[test]
fn a_gap_is_reported_at_the_next_source_once_the_answer_delay_is_known() {
    let (mut enc, mut dec) = auto_deadline_pair();
    let mut delays = Vec::new();
    every_half_ms(
        &mut enc,
        &mut dec,
        400,
        |k| k == 100 || k == 300,
        |_| false,
        |_| true,
        |esi, delay| delays.push((esi, delay)),
    );
    let of = |esi| delays.iter().find(|(e, _)| *e == esi).map(|(_, d)| *d);
    // Before any answer, three later sources declare the loss.
    assert_eq!(of(100), Some(Duration::from_micros(1500)), "{delays:?}");
    assert_eq!(of(300), Some(Duration::from_micros(500)), "{delays:?}");
}

/// Sources about one repair timer apart (200 pps against the 5 ms timer, gaps jittered by up
/// to +-4 ms): a flush that would send a repair its lone source has not earned waits one more
/// delay for the late next source, so the blocks flushed hold two sources or more and the code
/// costs m/k, not up to one repair per source.
#[test]
fn sources_a_timer_apart_cost_m_over_k() {
    for jitter_us in [0u32, 500, 2000, 4000] {
        let gap = |i: u32| {
            let x = (i.wrapping_mul(2_654_435_761) >> 8) % (2 * jitter_us + 1);
            Duration::from_micros(u64::from(5000 - jitter_us + x))
        };
        let r = block_overhead_spaced("rs:20:10", 4000, gap, None);
        assert!((r - 0.5).abs() < 0.025, "jitter {jitter_us} us: {r}");
    }
}

/// Feeds `enc` 3000 sources 100 us apart, then a report of ESI 10 lost, and runs its timers
/// for 50 ms: the repairs before the report, and how many after it cover ESI 10.
fn first_round_trip_then_report(enc: &mut Encoder) -> (u32, u32) {
    let mut now = t0();
    let mut before = 0;
    for n in 0..3000 {
        now += Duration::from_micros(100);
        enc.handle_source(0, &payload(n), now);
        while enc.poll_repair().is_some() {
            before += 1;
        }
    }
    enc.handle_feedback(&report_of(&[(10, 1)]), now);
    let mut covered = 0;
    for _ in 0..50 {
        while let Some(r) = enc.poll_repair() {
            let (first, nss) = (r.info.first_esi, u32::from(r.info.nss));
            covered += u32::from(first <= 10 && 10 < first + nss);
        }
        now += Duration::from_millis(1);
        enc.handle_timeout(now);
    }
    (before, covered)
}

/// A learning encoder (`EncoderConfig::learning_answer_reach`, window 16) cannot size its
/// history before feedback measures the path, yet the first loss report, a round trip after
/// the first sources, needs them: it keeps every source until then, so the report's answer
/// covers a loss 2990 sources back. Kept to its window's history, it could not.
#[test]
fn a_learning_encoder_keeps_the_first_round_trip_for_the_first_report() {
    let answer_covers = |learning: bool| {
        let mode = FecMode::parse_with_window("ours", 16).unwrap();
        let mut cfg = EncoderConfig::new(mode);
        if learning {
            cfg = cfg.learning_answer_reach();
        }
        cfg.deadline = Some(Deadline::Fixed(Duration::from_millis(600)));
        cfg.repair_delay = None;
        first_round_trip_then_report(&mut Encoder::new(cfg, 1)).1
    };
    assert!(answer_covers(true) >= 1);
    assert_eq!(answer_covers(false), 0);
}

/// A deadline of two RTTs leaves a loss report its round trip on any path: before the first
/// feedback the encoder sends only the probe repairs that measure the RTT (after sources 1, 2,
/// 4, ...: 12 for 3000 sources), not a whole round trip of repairs against the prior's 5 %
/// loss, and the first report is answered. A fixed deadline says nothing before the path is
/// measured.
#[test]
fn a_deadline_past_the_round_trip_leaves_the_first_round_trip_to_loss_reports() {
    let run = |deadline: Deadline| {
        let mode = FecMode::parse_with_window("ours", 200).unwrap();
        let mut cfg = EncoderConfig::new(mode).learning_answer_reach();
        cfg.deadline = Some(deadline);
        cfg.repair_delay = None;
        first_round_trip_then_report(&mut Encoder::new(cfg, 1))
    };
    let (before, covered) = run(Deadline::Rtt(2.0));
    assert_eq!(before, 12);
    assert!(covered >= 1, "{covered}");
    let (before, _) = run(Deadline::Fixed(Duration::from_millis(600)));
    assert!(before > 100, "{before}");
}
