//! Encoder + decoder loops through the public sans-IO API, with seeded losses: recovery,
//! exactly-once bit-exact delivery, time-driven repair, feedback, streams, overload.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hirt_core::{
    Deadline, Decoder, DecoderConfig, Encoder, EncoderConfig, FecMode, Feedback, HoldScope,
    SourceNeed, StreamId, Verdict,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

/// A source payload unique to (stream, n), of varying length.
fn payload(stream: StreamId, n: u32) -> Vec<u8> {
    let len = 20 + (n as usize * 7) % 200;
    (0..len)
        .map(|i| (n as usize * 31 + i * 13 + stream as usize * 101) as u8)
        .collect()
}

/// What the receiving side saw.
#[derive(Default)]
struct Sink {
    delivered: HashMap<(StreamId, u32), Vec<u8>>,
    recovered: u64,
    duplicates_delivered: u64,
}

impl Sink {
    fn deliver(&mut self, stream: StreamId, esi: u32, data: &[u8]) {
        if self
            .delivered
            .insert((stream, esi), data.to_vec())
            .is_some()
        {
            self.duplicates_delivered += 1;
        }
    }
}

/// The result of a run.
struct Run {
    sources: u64,
    lost: u64,
    sink: Sink,
    enc: Encoder,
    dec: Decoder,
    feedback: u64,
}

/// Runs `n` sources per stream at 1 packet / `gap` through a link losing each source and
/// repair with probability `p` (seeded), with zero link delay and instant feedback (unless
/// `drop_feedback`). Every delivered packet is checked bit-exact.
fn run(
    mode: &str,
    streams: &[StreamId],
    n: u32,
    p: f64,
    gap: Duration,
    seed: u64,
    drop_feedback: bool,
) -> Run {
    run_with(
        mode,
        streams,
        n,
        p,
        gap,
        seed,
        drop_feedback,
        Some(Duration::from_millis(5)),
    )
}

#[allow(clippy::too_many_arguments)]
fn run_with(
    mode: &str,
    streams: &[StreamId],
    n: u32,
    p: f64,
    gap: Duration,
    seed: u64,
    drop_feedback: bool,
    repair_delay: Option<Duration>,
) -> Run {
    let mode: FecMode = mode.parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.repair_delay = repair_delay;
    let mut enc = Encoder::new(cfg, seed);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sink = Sink::default();
    let (mut sources, mut lost, mut feedback) = (0, 0, 0);
    let base = t0();
    let mut now = base;
    let mut originals: HashMap<(StreamId, u32), Vec<u8>> = HashMap::new();
    for k in 0..n {
        for &st in streams {
            now += gap;
            // Timers first.
            if let Some(t) = enc.poll_timeout() {
                if t <= now {
                    enc.handle_timeout(now);
                }
            }
            if let Some(t) = dec.poll_timeout() {
                if t <= now {
                    dec.handle_timeout(now);
                }
            }
            let data = payload(st, k);
            let tag = enc.handle_source(st, &data, now);
            assert_eq!(tag.stream, st);
            assert_eq!(tag.esi, k, "ESIs are consecutive per stream");
            originals.insert((st, tag.esi), data.clone());
            sources += 1;
            if rng.gen_bool(p) {
                lost += 1;
            } else if dec.handle_source(st, tag.esi, &data, now) == Verdict::Deliver {
                sink.deliver(st, tag.esi, &data);
            }
            let mut repairs = Vec::new();
            while let Some(r) = enc.poll_repair() {
                repairs.push((r.stream, r.info, r.timestamp, r.payload.to_vec()));
            }
            for (rs, info, ts, pl) in repairs {
                if !rng.gen_bool(p) {
                    dec.handle_repair(rs, &info, ts, &pl, now).unwrap();
                }
            }
            while let Some(r) = dec.poll_recovered() {
                assert_eq!(
                    Some(&r.data.to_vec()),
                    originals.get(&(r.stream, r.esi)),
                    "bit-exact"
                );
                sink.recovered += 1;
                let (s, e, d) = (r.stream, r.esi, r.data.to_vec());
                sink.deliver(s, e, &d);
            }
            while let Some(fb) = dec.poll_feedback(now) {
                feedback += 1;
                let bytes = fb.to_bytes();
                let fb = Feedback::decode(&bytes).unwrap();
                if !drop_feedback {
                    enc.handle_feedback(&fb, now + Duration::from_micros(100));
                }
            }
        }
    }
    for ((s, e), d) in &sink.delivered {
        assert_eq!(Some(d), originals.get(&(*s, *e)));
    }
    Run {
        sources,
        lost,
        sink,
        enc,
        dec,
        feedback,
    }
}

fn recovered_ratio(r: &Run) -> f64 {
    r.sink.recovered as f64 / r.lost.max(1) as f64
}

#[test]
fn fixed_rlc_recovers_uniform_losses() {
    let r = run(
        "fixed:w=50,step=5",
        &[0],
        5000,
        0.03,
        Duration::from_micros(100),
        1,
        false,
    );
    assert_eq!(r.sink.duplicates_delivered, 0);
    assert!(r.lost > 100);
    assert!(
        recovered_ratio(&r) > 0.97,
        "recovered {} of {}",
        r.sink.recovered,
        r.lost
    );
    let st = r.enc.stats(0).unwrap();
    // One repair per 5 sources (the 100 us gap never lets the 5 ms timer fire).
    assert_eq!(st.repairs, 1000);
    assert_eq!(st.repairs_timer, 0);
    let ds = r.dec.stats(0).unwrap();
    assert_eq!(ds.recovered, r.sink.recovered);
    assert_eq!(ds.delivered + ds.recovered, r.sink.delivered.len() as u64);
    // Unrecovered = residual, once far enough behind (all but the last window's).
    assert!(ds.residual <= r.lost - r.sink.recovered);
}

#[test]
fn every_scheme_delivers_exactly_once_and_bit_exact() {
    for mode in [
        "hirt",
        "ours",
        "rquic",
        "xor:w=16,step=4",
        "maelstrom:r=8,i=1-4",
        "rs:10:3",
        "blockxor:r=6",
        "none",
    ] {
        let r = run(mode, &[0], 3000, 0.02, Duration::from_micros(100), 7, false);
        assert_eq!(r.sink.duplicates_delivered, 0, "{mode}");
        assert_eq!(
            r.sink.delivered.len() as u64 + (r.lost - r.sink.recovered),
            r.sources,
            "{mode}"
        );
        if mode != "none" {
            assert!(r.sink.recovered > 0, "{mode} recovered nothing");
        }
    }
}

#[test]
fn hirt_adapts_its_step_to_the_loss() {
    let r = run(
        "hirt:w=100",
        &[0],
        20_000,
        0.05,
        Duration::from_micros(100),
        3,
        false,
    );
    let st = r.enc.stats(0).unwrap();
    assert!(st.feedback > 100);
    // ~5 losses per window of 100 -> step around 100 / (5 + sigma) < 20.
    assert!(st.rate > 0.05, "rate {}", st.rate);
    assert!(recovered_ratio(&r) > 0.7, "{}", recovered_ratio(&r));
    // Residual as reported = what the sink never got (but for the last horizon's worth).
    let ds = r.dec.stats(0).unwrap();
    let unrecovered = r.lost - r.sink.recovered;
    assert!(
        ds.residual <= unrecovered && ds.residual + 20 >= unrecovered,
        "{ds:?} {unrecovered}"
    );
}

#[test]
fn lost_feedback_never_stalls_the_encoder() {
    let r = run_with(
        "hirt:w=100",
        &[0],
        2000,
        0.05,
        Duration::from_micros(100),
        3,
        true,
        None,
    );
    let st = r.enc.stats(0).unwrap();
    assert_eq!(st.feedback, 0);
    assert!(r.feedback > 0);
    // Initial step = W: repairs keep flowing.
    assert_eq!(st.repairs, 20);
    // With the repair timer on, the same run also sends time-driven repairs (every 50 sources
    // at this rate: 5 ms).
    let r = run(
        "hirt:w=100",
        &[0],
        2000,
        0.05,
        Duration::from_micros(100),
        3,
        true,
    );
    assert_eq!(r.enc.stats(0).unwrap().repairs_timer, 39);
}

#[test]
fn streams_are_independent() {
    let r = run(
        "fixed:w=20,step=4",
        &[1, 9],
        2000,
        0.03,
        Duration::from_micros(100),
        11,
        false,
    );
    for s in [1, 9] {
        let es = r.enc.stats(s).unwrap();
        assert_eq!(es.sources, 2000);
        assert_eq!(es.repairs, 500);
        assert!(r.dec.stats(s).unwrap().recovered > 0);
    }
    assert!(r.enc.stats(0).is_none());
    assert_eq!(r.sink.duplicates_delivered, 0);
}

#[test]
fn time_driven_repair_bounds_recovery_delay() {
    // Sparse traffic: one packet every 20 ms, every third source lost; repair_delay 5 ms,
    // one-way delay 0. Each loss must be recovered by the timer repair 5 ms later.
    let mode: FecMode = "hirt:w=200".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.repair_delay = Some(Duration::from_millis(5));
    // One timer repair per idle period here; re-sends are tested below.
    cfg.repair_retries = 0;
    let mut enc = Encoder::new(cfg, 1);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let base = t0();
    let mut worst = Duration::ZERO;
    for k in 0..30u32 {
        let sent = base + Duration::from_millis(20 * u64::from(k));
        let data = payload(0, k);
        let tag = enc.handle_source(0, &data, sent);
        while enc.poll_repair().is_some() {} // the controller's own repairs: not needed here
        let lost = k % 3 == 1;
        if !lost {
            assert_eq!(dec.handle_source(0, tag.esi, &data, sent), Verdict::Deliver);
        }
        let due = enc
            .poll_timeout()
            .expect("an unprotected source arms the timer");
        assert_eq!(due, sent + Duration::from_millis(5));
        enc.handle_timeout(due);
        assert!(enc.poll_timeout().is_none());
        let mut got = false;
        while let Some(r) = enc.poll_repair() {
            let (s, info, ts, pl) = (r.stream, r.info, r.timestamp, r.payload.to_vec());
            dec.handle_repair(s, &info, ts, &pl, due).unwrap();
            while let Some(rec) = dec.poll_recovered() {
                assert_eq!(rec.esi, tag.esi);
                assert_eq!(rec.data, &data[..]);
                worst = worst.max(due - sent);
                got = true;
            }
        }
        assert_eq!(got, lost, "source {k}");
    }
    assert_eq!(worst, Duration::from_millis(5));
    assert_eq!(enc.stats(0).unwrap().repairs_timer, 30);
}

#[test]
fn recovery_delays_count_from_the_packet_that_showed_the_loss() {
    // Sources every 20 ms, source 1 lost and the timer repair after it too: the decoder
    // learns of the loss when source 2 arrives (40 ms), and the timer repair after source 2
    // (45 ms) recovers it: 5 ms. Against a 3 ms deadline that is late, against 10 ms (or an
    // RTT-relative one resolved with the RTT the driver gives) it is in time.
    let ms = Duration::from_millis;
    for (deadline, rtt, late) in [
        (Deadline::Fixed(ms(3)), None, 1),
        (Deadline::Fixed(ms(10)), None, 0),
        (Deadline::Rtt(2.0), Some(ms(2)), 1),
        (Deadline::Rtt(2.0), Some(ms(3)), 0),
    ] {
        let mode: FecMode = "hirt:w=200".parse().unwrap();
        let mut cfg = EncoderConfig::new(mode.clone());
        cfg.repair_delay = Some(ms(5));
        cfg.repair_retries = 0;
        let mut enc = Encoder::new(cfg, 1);
        let mut dcfg = DecoderConfig::new(mode.scheme);
        dcfg.recovery_deadline = Some(deadline);
        let mut dec = Decoder::new(dcfg, 1);
        let base = t0();
        let mut recovered = Vec::new();
        for k in 0..3u32 {
            let sent = base + ms(20) * k;
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, sent);
            if k != 1 {
                dec.handle_source(0, tag.esi, &data, sent);
            }
            if let Some(rtt) = rtt {
                dec.set_rtt(0, rtt);
            }
            let due = enc.poll_timeout().unwrap();
            enc.handle_timeout(due);
            recovered.extend(deliver_repairs(&mut enc, &mut dec, due, k == 1));
        }
        assert_eq!(recovered, vec![1]);
        let st = dec.stats(0).unwrap();
        assert_eq!(st.recovery_delays.count(), 1);
        assert_eq!(st.recovery_delays.max, ms(5));
        assert_eq!(st.recovery_delays.unknown, 0);
        assert_eq!(st.recovered_late, late, "{deadline:?} rtt {rtt:?}");
    }
}

/// Drains the encoder's repairs into the decoder at `now` (or drops them); returns the ESIs
/// recovered.
fn deliver_repairs(enc: &mut Encoder, dec: &mut Decoder, now: Instant, drop: bool) -> Vec<u32> {
    let mut got = Vec::new();
    while let Some(r) = enc.poll_repair() {
        if drop {
            continue;
        }
        let (s, info, ts, pl) = (r.stream, r.info, r.timestamp, r.payload.to_vec());
        dec.handle_repair(s, &info, ts, &pl, now).unwrap();
        while let Some(rec) = dec.poll_recovered() {
            got.push(rec.esi);
        }
    }
    got
}

#[test]
fn lost_timer_repair_is_resent_after_another_repair_delay() {
    // One sparse source, lost; the first time-driven repair (5 ms) is lost too. The re-send at
    // 2 x repair_delay recovers it without waiting for another source. With
    // `repair_retries = 0` nothing more is sent until the next source.
    let d = Duration::from_millis(5);
    for retries in [0u8, 1, 2] {
        let mode: FecMode = "hirt:w=200".parse().unwrap();
        let mut cfg = EncoderConfig::new(mode.clone());
        cfg.repair_delay = Some(d);
        cfg.repair_retries = retries;
        let mut enc = Encoder::new(cfg, 1);
        let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
        let base = t0();
        // A received source first, so the lost one is not the decoder's first.
        let first = payload(0, 0);
        let tag = enc.handle_source(0, &first, base);
        assert_eq!(
            dec.handle_source(0, tag.esi, &first, base),
            Verdict::Deliver
        );
        let due = enc.poll_timeout().unwrap();
        enc.handle_timeout(due);
        assert!(deliver_repairs(&mut enc, &mut dec, due, false).is_empty());
        // Nothing may be pending from the first source's series once it has run out.
        let mut now = due;
        while let Some(t) = enc.poll_timeout() {
            enc.handle_timeout(t);
            deliver_repairs(&mut enc, &mut dec, t, false);
            now = t;
        }
        assert_eq!(now, base + d * (1 + u32::from(retries)));

        let sent = base + Duration::from_millis(100);
        let data = payload(0, 1);
        let lost = enc.handle_source(0, &data, sent);
        assert!(deliver_repairs(&mut enc, &mut dec, sent, false).is_empty());
        let due = enc
            .poll_timeout()
            .expect("unprotected source arms the timer");
        assert_eq!(due, sent + d);
        enc.handle_timeout(due);
        assert!(deliver_repairs(&mut enc, &mut dec, due, true).is_empty()); // lost
        let stats = enc.stats(0).unwrap();
        if retries == 0 {
            assert_eq!(enc.poll_timeout(), None, "waits for the next source");
            continue;
        }
        let again = enc.poll_timeout().expect("re-send armed");
        assert_eq!(again, sent + 2 * d);
        enc.handle_timeout(again);
        assert_eq!(
            deliver_repairs(&mut enc, &mut dec, again, false),
            vec![lost.esi]
        );
        assert_eq!(enc.stats(0).unwrap().repairs_timer, stats.repairs_timer + 1);
        // The series continues only as far as configured.
        let mut extra = 0;
        while let Some(t) = enc.poll_timeout() {
            enc.handle_timeout(t);
            deliver_repairs(&mut enc, &mut dec, t, false);
            extra += 1;
        }
        assert_eq!(extra, retries - 1);
    }
}

#[test]
fn timer_resend_covers_a_new_source_and_yields_to_other_repairs() {
    let d = Duration::from_millis(5);
    let mode: FecMode = "hirt:w=200".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.repair_delay = Some(d);
    let mut enc = Encoder::new(cfg, 1);
    let base = t0();
    enc.handle_source(0, &payload(0, 0), base);
    while enc.poll_repair().is_some() {}
    enc.handle_timeout(base + d);
    while enc.poll_repair().is_some() {}
    // A new source 2 ms later: the pending re-send (base + 10 ms) is earlier than its own timer
    // (base + 12 ms) and protects it too, so only one repair follows.
    enc.handle_source(0, &payload(0, 1), base + Duration::from_millis(7));
    while enc.poll_repair().is_some() {}
    assert_eq!(enc.poll_timeout(), Some(base + 2 * d));
    enc.handle_timeout(base + 2 * d);
    assert_eq!(enc.stats(0).unwrap().repairs_timer, 2);
    assert_eq!(
        enc.poll_timeout(),
        None,
        "re-sends used up, nothing unprotected"
    );

    // Any other repair cancels the pending re-send: fixed step 2 repairs every second source.
    let mode: FecMode = "fixed:w=8,step=2".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.repair_delay = Some(d);
    let mut enc = Encoder::new(cfg, 1);
    enc.handle_source(0, &payload(0, 0), base);
    assert!(enc.poll_repair().is_none());
    enc.handle_timeout(base + d);
    assert!(enc.poll_repair().is_some());
    assert_eq!(enc.poll_timeout(), Some(base + 2 * d), "re-send armed");
    enc.handle_source(0, &payload(0, 1), base + Duration::from_millis(6));
    assert!(enc.poll_repair().is_none());
    assert_eq!(
        enc.poll_timeout(),
        Some(base + 2 * d),
        "kept for the new source"
    );
    let step_at = base + Duration::from_millis(7);
    enc.handle_source(0, &payload(0, 2), step_at);
    assert!(enc.poll_repair().is_some(), "the controller's step");
    assert_eq!(
        enc.poll_timeout(),
        Some(step_at + d),
        "the controller's repair replaced the re-send and starts a series of its own"
    );
    let st = enc.stats(0).unwrap();
    assert_eq!((st.repairs_timer, st.repairs_controller), (1, 1));
    // Each repair moves that series on: dense traffic never sends it.
    let mut t = step_at;
    for n in 3..40 {
        t += Duration::from_micros(500);
        enc.handle_source(0, &payload(0, n), t);
        while enc.poll_repair().is_some() {}
        let due = enc.poll_timeout().unwrap();
        assert!(due > t, "nothing due while sources come every 0.5 ms");
    }
    assert_eq!(enc.stats(0).unwrap().repairs_timer, 1);
}

/// A repair that comes with the newest source is followed, if the traffic pauses there, by the
/// re-send a timer repair would get: two losses just before the pause are recovered without
/// waiting for more traffic. Every sliding controller, fixed step included.
#[test]
fn a_pause_after_a_rate_driven_repair_still_gets_a_resend() {
    for mode in ["fixed:w=32,step=4", "hirt:w=32", "ours:w=32"] {
        let mode: FecMode = mode.parse().unwrap();
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
        let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), 1);
        let mut t = t0();
        // Sources every 0.1 ms, each received once the next two came (so the two before the
        // last are lost), every repair lost, until one comes with a repair after 40 sources.
        let mut held: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut n = 0u32;
        let last_repairs = loop {
            t += Duration::from_micros(100);
            let data = payload(0, n);
            let tag = enc.handle_source(0, &data, t);
            let mut repairs = Vec::new();
            while let Some(r) = enc.poll_repair() {
                repairs.push((r.stream, r.info, r.timestamp, r.payload.to_vec()));
            }
            if n >= 40 && !repairs.is_empty() {
                assert_eq!(dec.handle_source(0, tag.esi, &data, t), Verdict::Deliver);
                break repairs;
            }
            held.push((tag.esi, data));
            if held.len() > 2 {
                let (esi, data) = held.remove(0);
                assert_eq!(dec.handle_source(0, esi, &data, t), Verdict::Deliver);
            }
            n += 1;
            assert!(n < 10_000, "{mode:?}: no repair with a source");
        };
        let mut recovered = Vec::new();
        for (s, info, ts, pl) in last_repairs {
            dec.handle_repair(s, &info, ts, &pl, t).unwrap();
            while let Some(rec) = dec.poll_recovered() {
                recovered.push(rec.esi);
            }
        }
        assert!(recovered.is_empty(), "{mode:?}: one repair, two losses");
        // The pause: only the time-driven repairs.
        while let Some(due) = enc.poll_timeout() {
            assert!(due <= t + Duration::from_millis(100), "{mode:?}");
            enc.handle_timeout(due);
            recovered.extend(deliver_repairs(&mut enc, &mut dec, due, false));
        }
        recovered.sort_unstable();
        let lost: Vec<u32> = held.iter().map(|(e, _)| *e).collect();
        assert_eq!(recovered, lost, "{mode:?}");
    }
}

#[test]
fn duplicates_and_late_originals_are_dropped() {
    let mode: FecMode = "fixed:w=8,step=4".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let now = t0();
    let mut pkts = Vec::new();
    for k in 0..4u32 {
        let d = payload(0, k);
        let tag = enc.handle_source(0, &d, now);
        pkts.push((tag.esi, d));
    }
    let r = enc.poll_repair().expect("step 4");
    let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
    // Deliver 0, 0 again (duplicate), 1, 3; lose 2; recover it; then 2 arrives late.
    assert_eq!(
        dec.handle_source(0, pkts[0].0, &pkts[0].1, now),
        Verdict::Deliver
    );
    assert_eq!(
        dec.handle_source(0, pkts[0].0, &pkts[0].1, now),
        Verdict::Duplicate
    );
    assert_eq!(
        dec.handle_source(0, pkts[1].0, &pkts[1].1, now),
        Verdict::Deliver
    );
    assert_eq!(
        dec.handle_source(0, pkts[3].0, &pkts[3].1, now),
        Verdict::Deliver
    );
    dec.handle_repair(0, &info, ts, &pl, now).unwrap();
    let rec = dec.poll_recovered().unwrap();
    assert_eq!((rec.esi, rec.data), (2, &pkts[2].1[..]));
    assert!(dec.poll_recovered().is_none());
    assert_eq!(
        dec.handle_source(0, pkts[2].0, &pkts[2].1, now),
        Verdict::Duplicate
    );
    // The same repair again recovers nothing new.
    dec.handle_repair(0, &info, ts, &pl, now).unwrap();
    assert!(dec.poll_recovered().is_none());
    let st = dec.stats(0).unwrap();
    assert_eq!(
        (st.delivered, st.recovered, st.duplicates, st.late),
        (3, 1, 2, 1)
    );
}

#[test]
fn feedback_echo_measures_rtt() {
    let mode: FecMode = "fixed:w=8,step=2".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
    let mut dcfg = DecoderConfig::new(mode.scheme);
    dcfg.feedback_period = 4;
    let mut dec = Decoder::new(dcfg, 1);
    let base = t0();
    let one_way = Duration::from_millis(25);
    let mut fbs = 0;
    for k in 0..40u32 {
        let sent = base + Duration::from_millis(u64::from(k));
        let d = payload(0, k);
        let tag = enc.handle_source(0, &d, sent);
        dec.handle_source(0, tag.esi, &d, sent + one_way);
        let mut reps = Vec::new();
        while let Some(r) = enc.poll_repair() {
            reps.push((r.info, r.timestamp, r.payload.to_vec()));
        }
        for (info, ts, pl) in reps {
            dec.handle_repair(0, &info, ts, &pl, sent + one_way)
                .unwrap();
        }
        // The decoder holds the feedback 3 ms before sending it.
        let fb_at = sent + one_way + Duration::from_millis(3);
        while let Some(fb) = dec.poll_feedback(fb_at) {
            fbs += 1;
            enc.handle_feedback(&fb, fb_at + one_way);
        }
    }
    assert!(fbs >= 8);
    assert_eq!(enc.stats(0).unwrap().rtt, Some(2 * one_way));
}

#[test]
fn overload_skips_repairs_but_never_sources() {
    let mode: FecMode = "fixed:w=100,step=2".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.work_budget = Some(500);
    cfg.budget_period = Duration::from_millis(1);
    let mut dcfg = DecoderConfig::new(mode.scheme);
    dcfg.work_budget = Some(50);
    let mut enc = Encoder::new(cfg, 5);
    let mut dec = Decoder::new(dcfg, 5);
    let base = t0();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut delivered = 0;
    let mut skipped_dec = 0;
    for k in 0..4000u32 {
        // 100 sources per ms: far over budget.
        let now = base + Duration::from_micros(10 * u64::from(k));
        let d = payload(0, k);
        let tag = enc.handle_source(0, &d, now);
        if rng.gen_bool(0.05) {
            // lost
        } else if dec.handle_source(0, tag.esi, &d, now) == Verdict::Deliver {
            delivered += 1;
        }
        let mut reps = Vec::new();
        while let Some(r) = enc.poll_repair() {
            reps.push((r.info, r.timestamp, r.payload.to_vec()));
        }
        for (info, ts, pl) in reps {
            dec.handle_repair(0, &info, ts, &pl, now).unwrap();
        }
        while dec.poll_recovered().is_some() {}
        skipped_dec = dec.stats(0).unwrap().overload_skips;
    }
    let es = enc.stats(0).unwrap();
    assert_eq!(es.sources, 4000);
    assert!(es.overload_skips > 0 && es.repairs > 0, "{es:?}");
    assert_eq!(es.repairs + es.overload_skips, 2000);
    assert!(skipped_dec > 0);
    // Every source that crossed the link was delivered.
    assert_eq!(delivered, dec.stats(0).unwrap().delivered);
}

#[test]
fn injected_cpu_load_skips_repairs_and_solving_above_the_threshold() {
    let mode: FecMode = "fixed:w=100,step=4".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 9);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 9);
    let base = t0();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut phase = |enc: &mut Encoder, dec: &mut Decoder, from: u32, to: u32| {
        let mut delivered = 0u64;
        for k in from..to {
            let now = base + Duration::from_micros(100 * u64::from(k));
            let d = payload(0, k);
            let tag = enc.handle_source(0, &d, now);
            if !rng.gen_bool(0.05) && dec.handle_source(0, tag.esi, &d, now) == Verdict::Deliver {
                delivered += 1;
            }
            let mut reps = Vec::new();
            while let Some(r) = enc.poll_repair() {
                reps.push((r.info, r.timestamp, r.payload.to_vec()));
            }
            for (info, ts, pl) in reps {
                dec.handle_repair(0, &info, ts, &pl, now).unwrap();
            }
            while dec.poll_recovered().is_some() {}
        }
        delivered
    };
    // Busy but under the threshold (0.9 by default): nothing is skipped.
    enc.set_cpu_load(0.85);
    dec.set_cpu_load(0.85);
    let mut delivered = phase(&mut enc, &mut dec, 0, 2000);
    assert_eq!(enc.stats(0).unwrap().overload_skips, 0);
    assert_eq!(dec.stats(0).unwrap().overload_skips, 0);
    assert_eq!(enc.stats(0).unwrap().repairs, 500);
    // 95 % busy: half of the repairs are skipped at each end, sources still all go through.
    enc.set_cpu_load(0.95);
    dec.set_cpu_load(0.95);
    delivered += phase(&mut enc, &mut dec, 2000, 6000);
    let es = enc.stats(0).unwrap();
    assert_eq!(es.sources, 6000);
    assert_eq!(es.repairs + es.overload_skips, 1500);
    assert!((400..600).contains(&es.overload_skips), "{es:?}");
    assert!(dec.stats(0).unwrap().overload_skips > 100);
    assert_eq!(delivered, dec.stats(0).unwrap().delivered);
    // Load gone: no more skips.
    enc.set_cpu_load(0.1);
    let before = enc.stats(0).unwrap().overload_skips;
    phase(&mut enc, &mut dec, 6000, 7000);
    assert_eq!(enc.stats(0).unwrap().overload_skips, before);
}

#[test]
fn same_seed_same_run() {
    let a = run(
        "hirt:w=50",
        &[0, 1],
        2000,
        0.04,
        Duration::from_micros(50),
        42,
        false,
    );
    let b = run(
        "hirt:w=50",
        &[0, 1],
        2000,
        0.04,
        Duration::from_micros(50),
        42,
        false,
    );
    for s in [0, 1] {
        assert_eq!(a.enc.stats(s), b.enc.stats(s));
        assert_eq!(a.dec.stats(s), b.dec.stats(s));
    }
}

#[test]
fn controller_can_be_changed_live() {
    let mode: FecMode = "fixed:w=20,step=10".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.repair_delay = None;
    let mut enc = Encoder::new(cfg, 1);
    let now = t0();
    let count = |enc: &mut Encoder, n: u32| {
        let mut r = 0;
        for k in 0..n {
            enc.handle_source(0, &payload(0, k), now);
            while enc.poll_repair().is_some() {
                r += 1;
            }
        }
        r
    };
    assert_eq!(count(&mut enc, 100), 10);
    enc.set_controller(&"fixed:step=2".parse().unwrap());
    assert_eq!(count(&mut enc, 100), 50);
    assert_eq!(enc.stats(0).unwrap().rate, 0.5);
    assert_eq!(enc.controller_name(0), Some("fixed"));
}

#[test]
fn sparse_traffic_gets_time_driven_feedback() {
    let mode: FecMode = "hirt".parse().unwrap();
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let base = t0();
    assert_eq!(dec.poll_timeout(), None, "idle: no feedback timer");
    for k in 0..3u32 {
        let at = base + Duration::from_millis(10 * u64::from(k));
        dec.handle_source(0, k * 2, &payload(0, k), at); // every other ESI lost
    }
    assert!(
        dec.poll_feedback(base).is_none(),
        "period (200 ESIs) not complete"
    );
    let due = dec.poll_timeout().unwrap();
    assert_eq!(due, base + Duration::from_millis(50));
    dec.handle_timeout(due);
    let fb = dec.poll_feedback(due).unwrap();
    assert_eq!((fb.received, fb.lost, fb.seq, fb.highest_esi), (3, 1, 0, 4));
    assert!(dec.poll_feedback(due).is_none());
    assert_eq!(dec.poll_timeout(), None);
}

#[test]
fn refused_repairs_change_nothing_and_streams_are_bounded() {
    let mode: FecMode = "fixed:w=8,step=4".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
    let mut dcfg = DecoderConfig::new(mode.scheme);
    dcfg.max_streams = 1;
    let mut dec = Decoder::new(dcfg, 1);
    let now = t0();
    for k in 0..4u32 {
        let tag = enc.handle_source(0, &payload(0, k), now);
        if k != 2 {
            dec.handle_source(0, tag.esi, &payload(0, k), now);
        }
    }
    let r = enc.poll_repair().unwrap();
    let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
    let before = dec.stats(0).unwrap();
    let mut bad = info;
    bad.nss = 0;
    assert!(dec.handle_repair(0, &bad, ts, &pl, now).is_err());
    let mut bad = info;
    bad.scheme = hirt_core::SchemeId::ReedSolomon;
    assert!(dec.handle_repair(0, &bad, ts, &pl, now).is_err());
    let after = dec.stats(0).unwrap();
    assert_eq!(after.repairs_invalid, 2);
    assert_eq!(
        (after.lost, after.recovered),
        (before.lost, before.recovered)
    );
    assert!(dec.poll_recovered().is_none());
    // The genuine repair still recovers ESI 2.
    dec.handle_repair(0, &info, ts, &pl, now).unwrap();
    assert_eq!(dec.poll_recovered().map(|r| r.esi), Some(2));
    // A second stream exceeds max_streams: delivered unprotected, counted.
    assert_eq!(dec.handle_source(5, 0, b"x", now), Verdict::Deliver);
    assert_eq!(dec.handle_source(5, 0, b"x", now), Verdict::Deliver);
    assert_eq!(dec.untracked(), 2);
    assert!(dec.stats(5).is_none());
}

#[test]
fn rquic_steers_the_block_by_residual_loss() {
    // Clean link: the block grows (r_init 10 -> r_max 255).
    let r = run(
        "rquic",
        &[0],
        20_000,
        0.0,
        Duration::from_micros(100),
        2,
        false,
    );
    assert_eq!(
        r.enc.stats(0).unwrap().window,
        255,
        "{:?} {:?}",
        r.enc.stats(0),
        r.dec.stats(0)
    );
    // 5 % loss: residual above 1 % keeps shrinking the block.
    let r = run(
        "rquic",
        &[0],
        20_000,
        0.05,
        Duration::from_micros(100),
        2,
        false,
    );
    let st = r.enc.stats(0).unwrap();
    assert!(st.window < 10, "{st:?}");
    assert!(recovered_ratio(&r) > 0.5, "{}", recovered_ratio(&r));
}

/// One packet on the simulated link.
#[derive(Clone)]
enum Pkt {
    Source(StreamId, u32, Vec<u8>),
    Repair(StreamId, hirt_core::RepairInfo, u32, Vec<u8>),
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever the link does (loss, reordering within a few packets, duplication), every
    /// source is delivered at most once, bit-exact, and everything that crossed is delivered.
    #[test]
    fn exactly_once_under_loss_reorder_and_duplication(
        mode_i in 0usize..6,
        seed in 0u64..1_000_000,
        p in 0.0f64..0.2,
        reorder in 0.0f64..0.3,
        dup in 0.0f64..0.1,
        n in 1u32..300,
    ) {
        let mode = ["hirt:w=32", "fixed:w=16,step=3", "rquic", "maelstrom:r=4,i=1-5", "rs:6:2",
            "xor:w=8,step=2"][mode_i];
        let mode: FecMode = mode.parse().unwrap();
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), seed);
        let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let now = t0();
        let mut wire: Vec<Pkt> = Vec::new();
        for k in 0..n {
            let d = payload(0, k);
            let tag = enc.handle_source(0, &d, now);
            wire.push(Pkt::Source(0, tag.esi, d));
            while let Some(r) = enc.poll_repair() {
                wire.push(Pkt::Repair(r.stream, r.info, r.timestamp, r.payload.to_vec()));
            }
        }
        enc.handle_timeout(now + Duration::from_secs(1));
        while let Some(r) = enc.poll_repair() {
            wire.push(Pkt::Repair(r.stream, r.info, r.timestamp, r.payload.to_vec()));
        }
        // The link: drop, duplicate, swap neighbours (reordering up to a few positions).
        let mut link: Vec<Pkt> = Vec::new();
        for pkt in wire {
            if rng.gen_bool(p) {
                continue;
            }
            if rng.gen_bool(dup) {
                link.push(pkt.clone());
            }
            link.push(pkt);
        }
        for i in 1..link.len() {
            if rng.gen_bool(reorder) {
                let j = i.saturating_sub(rng.gen_range(1..4));
                link.swap(i, j);
            }
        }
        let mut delivered: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut crossed = std::collections::HashSet::new();
        for pkt in link {
            match pkt {
                Pkt::Source(s, e, d) => {
                    crossed.insert(e);
                    if dec.handle_source(s, e, &d, now) == Verdict::Deliver {
                        proptest::prop_assert!(delivered.insert(e, d).is_none(), "twice: {}", e);
                    }
                }
                Pkt::Repair(s, info, ts, pl) => {
                    dec.handle_repair(s, &info, ts, &pl, now).unwrap();
                }
            }
            while let Some(r) = dec.poll_recovered() {
                proptest::prop_assert_eq!(r.data, &payload(0, r.esi)[..]);
                proptest::prop_assert!(delivered.insert(r.esi, r.data.to_vec()).is_none());
            }
        }
        for e in crossed {
            proptest::prop_assert!(delivered.contains_key(&e), "{} crossed but not delivered", e);
        }
        for (e, d) in &delivered {
            proptest::prop_assert_eq!(d, &payload(0, *e));
        }
    }
}

#[test]
fn fixed_block_schemes_send_their_nominal_overhead() {
    // No timer: only the codes' own repairs. Maelstrom (r, c layers): c repairs per r sources;
    // RS k:m: m per k; block XOR r: 1 per r; fixed RLC step s: 1 per s.
    for (mode, n, want) in [
        ("maelstrom:r=20,i=1-20-40", 8000, 8000 / 20 * 3),
        ("rs:20:10", 2000, 1000),
        ("blockxor:r=8", 800, 100),
        ("fixed:w=50,step=25", 1000, 40),
        ("xor:w=10", 1000, 0),
        ("none", 1000, 0),
    ] {
        let r = run_with(
            mode,
            &[0],
            n,
            0.0,
            Duration::from_micros(100),
            1,
            false,
            None,
        );
        let st = r.enc.stats(0).unwrap();
        // Layered bins fill at different times: at most one partial bin per bin is pending.
        let slack = if mode.starts_with("maelstrom") { 61 } else { 0 };
        assert!(
            st.repairs <= want && st.repairs + slack >= want,
            "{mode}: {} vs {want}",
            st.repairs
        );
    }
}

#[test]
fn huge_delays_do_not_overflow() {
    let mode: FecMode = "hirt".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.repair_delay = Some(Duration::MAX);
    let mut enc = Encoder::new(cfg, 1);
    let mut dcfg = DecoderConfig::new(mode.scheme);
    dcfg.feedback_interval = Some(Duration::MAX);
    let mut dec = Decoder::new(dcfg, 1);
    let now = t0();
    let tag = enc.handle_source(0, b"abc", now);
    dec.handle_source(0, tag.esi, b"abc", now);
    assert_eq!(enc.poll_timeout(), None);
    assert_eq!(dec.poll_timeout(), None);
    enc.handle_timeout(now + Duration::from_secs(3600));
    dec.handle_timeout(now + Duration::from_secs(3600));
    assert!(enc.poll_repair().is_none());
    assert!(dec.poll_feedback(now).is_none());
}

/// In-order release: with random losses on sources and repairs, every source that arrived and
/// every recovered one is delivered exactly once, bit-exact, in ESI order per stream; held
/// originals come back with their `meta`.
#[test]
fn in_order_release_delivers_each_stream_in_esi_order_exactly_once() {
    let mode: FecMode = "ours:w=200".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 7);
    let mut dcfg = DecoderConfig::new(mode.scheme.clone());
    dcfg.in_order = Some(Duration::from_secs(1));
    let mut dec = Decoder::new(dcfg, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let streams: [StreamId; 2] = [0, 3];
    let mut order: HashMap<StreamId, Vec<u32>> = HashMap::new();
    let mut arrived = 0u64;
    let base = t0();
    let mut now = base;
    let check = |order: &mut HashMap<StreamId, Vec<u32>>, st: StreamId, esi: u32, d: &[u8]| {
        assert_eq!(d, &payload(st, esi)[..], "bit-exact");
        order.entry(st).or_default().push(esi);
    };
    let n = 20_000;
    for k in 0..n {
        for &st in &streams {
            now += Duration::from_micros(10);
            if enc.poll_timeout().is_some_and(|t| t <= now) {
                enc.handle_timeout(now);
            }
            if dec.poll_timeout().is_some_and(|t| t <= now) {
                dec.handle_timeout(now);
            }
            let data = payload(st, k);
            let tag = enc.handle_source(st, &data, now);
            if !rng.gen_bool(0.03) {
                arrived += 1;
                match dec.handle_source_with(st, tag.esi, &data, tag.esi ^ 0xabcd, now) {
                    Verdict::Deliver => check(&mut order, st, tag.esi, &data),
                    Verdict::Hold => {}
                    Verdict::Duplicate => panic!("no duplicates sent"),
                }
            }
            let mut repairs = Vec::new();
            while let Some(r) = enc.poll_repair() {
                repairs.push((r.stream, r.info, r.timestamp, r.payload.to_vec()));
            }
            for (rs, info, ts, pl) in repairs {
                if !rng.gen_bool(0.03) {
                    dec.handle_repair(rs, &info, ts, &pl, now).unwrap();
                }
            }
            while let Some(r) = dec.poll_recovered() {
                if r.original {
                    assert_eq!(r.meta, r.esi ^ 0xabcd);
                }
                let (s, e, d) = (r.stream, r.esi, r.data.to_vec());
                check(&mut order, s, e, &d);
            }
            while let Some(fb) = dec.poll_feedback(now) {
                enc.handle_feedback(&fb, now + Duration::from_micros(100));
            }
        }
    }
    // The end of the hold releases whatever still waits.
    now += Duration::from_secs(2);
    dec.handle_timeout(now);
    while let Some(r) = dec.poll_recovered() {
        let (s, e, d) = (r.stream, r.esi, r.data.to_vec());
        check(&mut order, s, e, &d);
    }
    let mut delivered = 0u64;
    let (mut held, mut recovered) = (0, 0);
    for st in streams {
        let seq = &order[&st];
        let bad: Vec<_> = seq.windows(2).filter(|w| w[0] >= w[1]).take(5).collect();
        assert!(
            bad.is_empty(),
            "stream {st}: ESIs delivered in order, each once: {bad:?} of {}",
            seq.len()
        );
        delivered += seq.len() as u64;
        let s = dec.stats(st).unwrap();
        held += s.held;
        recovered += s.recovered;
        assert_eq!(s.delivered + s.recovered, seq.len() as u64);
    }
    assert_eq!(delivered, arrived + recovered);
    assert!(recovered > 500, "recovered {recovered}");
    assert!(
        held > recovered,
        "sources behind each loss were held: {held}"
    );
}

/// A hole nothing can fill is given up after the hold time; what waited behind it goes then,
/// in order, and a late original of the hole still goes through.
#[test]
fn in_order_release_gives_a_hole_up_after_the_hold_time() {
    let mode: FecMode = "ours:w=200".parse().unwrap();
    let mut dcfg = DecoderConfig::new(mode.scheme.clone());
    let hold = Duration::from_millis(2);
    dcfg.in_order = Some(hold);
    let mut dec = Decoder::new(dcfg, 1);
    let base = t0();
    let at = |k: u32| base + Duration::from_micros(100 * u64::from(k));
    let mut out = Vec::new();
    for k in 0..10u32 {
        if k == 5 {
            continue;
        }
        let v = dec.handle_source_with(0, k, &payload(0, k), k, at(k));
        if k < 5 {
            assert_eq!(v, Verdict::Deliver);
            out.push(k);
        } else {
            assert_eq!(v, Verdict::Hold);
        }
        while let Some(r) = dec.poll_recovered() {
            out.push(r.esi);
        }
    }
    assert_eq!(out, [0, 1, 2, 3, 4]);
    // Source 6, the first held, arrived at at(6).
    let deadline = dec.poll_timeout().unwrap();
    assert!(deadline <= at(6) + hold, "{:?}", deadline - at(6));
    dec.handle_timeout(deadline - Duration::from_micros(1));
    assert!(dec.poll_recovered().is_none());
    dec.handle_timeout(deadline);
    while let Some(r) = dec.poll_recovered() {
        assert!(r.original);
        assert_eq!(r.meta, r.esi);
        assert_eq!(r.data, &payload(0, r.esi)[..]);
        out.push(r.esi);
    }
    assert_eq!(out, [0, 1, 2, 3, 4, 6, 7, 8, 9]);
    assert_eq!(dec.stats(0).unwrap().order_skipped, 1);
    assert_eq!(
        dec.handle_source(0, 5, &payload(0, 5), deadline),
        Verdict::Deliver
    );
    assert_eq!(
        dec.handle_source(0, 10, &payload(0, 10), deadline),
        Verdict::Deliver
    );
}

/// An encoder that restarts (its ESIs begin again at 0) is followed at once when its first
/// source arrives and the stream was more than 1024 ESIs past it; otherwise (a short old run,
/// or the first source lost) after a few dozen refused sources. Whether the old ESIs are still
/// in the decoder's history (duplicates) or long gone (stale), with in-order release on or off.
#[test]
fn a_restarted_encoder_is_followed_from_its_first_source() {
    let cases = [
        // (sources before the restart, in-order release, first source lost, first delivered)
        (1_000u32, false, false, 31),
        (2_000, false, false, 0),
        (2_000, true, false, 0),
        (100_000, false, false, 0),
        (100_000, true, false, 0),
        (100_000, false, true, 32),
    ];
    for (before, in_order, first_lost, first_delivered) in cases {
        let mode: FecMode = "ours:w=200".parse().unwrap();
        let mut cfg = DecoderConfig::new(mode.scheme.clone());
        if in_order {
            cfg.in_order = Some(Duration::from_millis(30));
        }
        let mut dec = Decoder::new(cfg, 1);
        let base = t0();
        let mut now = base;
        for esi in 0..before {
            now += Duration::from_micros(10);
            assert_eq!(
                dec.handle_source(0, esi, &payload(0, esi), now),
                Verdict::Deliver
            );
        }
        // The encoder restarts: ESIs from 0 again, new contents.
        let mut delivered = Vec::new();
        for esi in u32::from(first_lost)..200u32 {
            now += Duration::from_micros(10);
            let data = payload(1, esi);
            match dec.handle_source(0, esi, &data, now) {
                Verdict::Deliver => delivered.push(esi),
                Verdict::Hold => {}
                Verdict::Duplicate => assert!(delivered.is_empty(), "refused after the restart"),
            }
            while let Some(r) = dec.poll_recovered() {
                assert_eq!(r.data, &payload(1, r.esi)[..]);
                delivered.push(r.esi);
            }
        }
        let case = format!("before {before}, in order {in_order}, first lost {first_lost}");
        let st = dec.stats(0).unwrap();
        assert_eq!(st.restarts, 1, "{case}");
        // The source that restarted the stream was delivered itself, and every one after it.
        assert_eq!(
            delivered,
            (first_delivered..200).collect::<Vec<_>>(),
            "{case}"
        );
    }
}

/// A duplicate of source 0 that arrives soon after it (a network that duplicates packets) is
/// refused and does not restart the stream.
#[test]
fn an_early_duplicate_of_the_first_source_is_not_a_restart() {
    let mode: FecMode = "ours:w=200".parse().unwrap();
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let now = t0();
    for esi in 0..1000u32 {
        assert_eq!(
            dec.handle_source(0, esi, &payload(0, esi), now),
            Verdict::Deliver
        );
    }
    assert_eq!(
        dec.handle_source(0, 0, &payload(0, 0), now),
        Verdict::Duplicate
    );
    assert_eq!(
        dec.handle_source(0, 1000, &payload(0, 1000), now),
        Verdict::Deliver
    );
    assert_eq!(dec.stats(0).unwrap().restarts, 0);
}

/// Originals that arrive after their recovery, as over a path slower than the repairs', come
/// in runs far longer than the restart run: they are refused as late, never taken for a
/// restarted encoder, so nothing is delivered twice.
#[test]
fn a_long_run_of_late_originals_does_not_restart_the_stream() {
    let mode: FecMode = "fixed:w=8,step=2".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let now = t0();
    let mut late = Vec::new();
    for k in 0..200u32 {
        let d = payload(0, k);
        let tag = enc.handle_source(0, &d, now);
        if k % 2 == 0 {
            assert_eq!(dec.handle_source(0, tag.esi, &d, now), Verdict::Deliver);
        } else {
            late.push((tag.esi, d));
        }
        let recovered = deliver_repairs(&mut enc, &mut dec, now, false);
        if k % 2 == 1 {
            assert_eq!(
                recovered,
                [k],
                "source {k} recovered by the repair after it"
            );
        }
    }
    for (esi, d) in &late {
        assert_eq!(
            dec.handle_source(0, *esi, d, now),
            Verdict::Duplicate,
            "esi {esi}"
        );
    }
    let st = dec.stats(0).unwrap();
    assert_eq!((st.restarts, st.late, st.recovered), (0, 100, 100));
    let d = payload(0, 200);
    let tag = enc.handle_source(0, &d, now);
    assert_eq!(dec.handle_source(0, tag.esi, &d, now), Verdict::Deliver);
}

/// `repair_retry_gap`: the re-sends of a time-driven repair follow each other that far apart
/// instead of one repair delay.
#[test]
fn timer_resends_use_the_retry_gap() {
    let d = Duration::from_millis(1);
    let gap = Duration::from_micros(250);
    let mode: FecMode = "hirt:w=200".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.repair_delay = Some(d);
    cfg.repair_retries = 3;
    cfg.repair_retry_gap = Some(gap);
    let mut enc = Encoder::new(cfg, 1);
    let base = t0();
    enc.handle_source(0, &payload(0, 0), base);
    while enc.poll_repair().is_some() {}
    let mut fired = Vec::new();
    while let Some(t) = enc.poll_timeout() {
        enc.handle_timeout(t);
        while enc.poll_repair().is_some() {}
        fired.push(t - base);
    }
    assert_eq!(fired, [d, d + gap, d + 2 * gap, d + 3 * gap]);
    assert_eq!(enc.stats(0).unwrap().repairs_timer, 4);
}

/// An overloaded encoder (load above the threshold) sends no time-driven repairs and starts
/// no re-send series; once the load falls they come back.
#[test]
fn overloaded_encoders_send_no_timer_repairs() {
    let d = Duration::from_millis(1);
    let mode: FecMode = "hirt:w=200".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.repair_delay = Some(d);
    cfg.repair_retries = 3;
    let mut enc = Encoder::new(cfg, 1);
    let base = t0();
    enc.set_cpu_load(1.0);
    enc.handle_source(0, &payload(0, 0), base);
    while enc.poll_repair().is_some() {}
    let mut fired = 0;
    while let Some(t) = enc.poll_timeout() {
        enc.handle_timeout(t);
        while enc.poll_repair().is_some() {
            fired += 1;
        }
    }
    let st = enc.stats(0).unwrap();
    assert_eq!((fired, st.repairs_timer, st.timer_skips), (0, 0, 1));
    enc.set_cpu_load(0.0);
    enc.handle_source(0, &payload(0, 1), base + 10 * d);
    while let Some(t) = enc.poll_timeout() {
        enc.handle_timeout(t);
        while enc.poll_repair().is_some() {
            fired += 1;
        }
    }
    assert_eq!(fired, 4, "a timer repair and its three re-sends");
}

/// Losses the decoder reports as its own (`Decoder::add_local_drops`, e.g. its device queue
/// overflowed) travel in feedback and are taken out of what the encoder's controller sees, so
/// they do not raise the repair rate the way the same losses on the link do (HIRT's vicious
/// circle). Losses are recovered either way.
#[test]
fn local_drops_do_not_raise_the_repair_rate() {
    // `lag`: drops are reported in batches every 300 sources (30 ms), after the decoder has
    // already declared the losses they caused, as a driver sampling its counters does.
    let rate_with = |report: bool, lag: bool| -> (f64, u64, u64) {
        let mode: FecMode = "ours".parse().unwrap();
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 7);
        let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), 7);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut now = t0();
        let mut drops = 0u64;
        let mut unreported = 0u32;
        for k in 0..30_000u32 {
            now += Duration::from_micros(100);
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, now);
            if report && (!lag || k % 300 == 299) {
                dec.add_local_drops(std::mem::take(&mut unreported));
            }
            if rng.gen_bool(0.05) {
                drops += 1;
                unreported += 1;
            } else {
                let _ = dec.handle_source(0, tag.esi, &data, now);
            }
            while let Some(r) = enc.poll_repair() {
                let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
                dec.handle_repair(0, &info, ts, &pl, now).unwrap();
            }
            while dec.poll_recovered().is_some() {}
            while let Some(fb) = dec.poll_feedback(now) {
                let fb = Feedback::decode(&fb.to_bytes()).unwrap();
                enc.handle_feedback(&fb, now);
            }
        }
        let es = enc.stats(0).unwrap();
        // All but those after the last feedback arrived.
        let want = if report { drops } else { 0 };
        assert!(
            es.peer_local_drops <= want && es.peer_local_drops + 200 >= want,
            "{} of {want} local drops reported",
            es.peer_local_drops
        );
        (es.rate, drops, dec.stats(0).unwrap().recovered)
    };
    let (link_rate, drops, rec_link) = rate_with(false, false);
    assert!(link_rate > 0.05, "5% link loss: repair rate {link_rate}");
    assert!(rec_link > drops * 9 / 10, "{rec_link} of {drops}");
    for lag in [false, true] {
        let (local_rate, _, rec_local) = rate_with(true, lag);
        assert!(
            local_rate < link_rate / 2.0,
            "local drops (lag {lag}): repair rate {local_rate} vs {link_rate} for link losses"
        );
        assert!(rec_local > 0);
    }
}

/// Repairs that overload control skipped leave losses unrecovered; the residual-loss loop must
/// not read those as a link that needs more repairs, or one overload episode keeps the rate
/// raised long after it (the controller's margin comes down ~1000x slower than it goes up).
#[test]
fn repairs_skipped_under_overload_do_not_raise_the_repair_rate() {
    let mode: FecMode = "ours:w=200,base=0.02".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 7);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), 7);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut now = t0();
    let mut run = |enc: &mut Encoder, dec: &mut Decoder, n: u32, from: u32| {
        for k in from..from + n {
            now += Duration::from_micros(10);
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, now);
            if !rng.gen_bool(0.03) {
                let _ = dec.handle_source(0, tag.esi, &data, now);
            }
            while let Some(r) = enc.poll_repair() {
                let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
                if !rng.gen_bool(0.03) {
                    dec.handle_repair(0, &info, ts, &pl, now).unwrap();
                }
            }
            while dec.poll_recovered().is_some() {}
            while let Some(fb) = dec.poll_feedback(now) {
                let fb = Feedback::decode(&fb.to_bytes()).unwrap();
                enc.handle_feedback(&fb, now);
            }
        }
        enc.stats(0).unwrap().rate
    };
    let before = run(&mut enc, &mut dec, 40_000, 0);
    enc.set_cpu_load(0.97);
    run(&mut enc, &mut dec, 5_000, 40_000);
    let skips = enc.stats(0).unwrap().overload_skips;
    let unrecovered = dec.stats(0).unwrap().residual;
    enc.set_cpu_load(0.0);
    let after = run(&mut enc, &mut dec, 20_000, 45_000);
    assert!(
        skips > 100 && unrecovered > 20,
        "{skips} skips, {unrecovered} unrecovered"
    );
    assert!(
        after < before * 1.1,
        "rate {before:.4} before the overload, {after:.4} after ({skips} skips, {unrecovered} unrecovered)"
    );
}

#[test]
fn repair_lag_lets_a_late_repair_recover() {
    // W = 32: source 5 is lost; the repair over sources 0..32 reaches the decoder only after
    // it has seen 64 more sources. The default decoder (S = 64) has forgotten the window by
    // then; one configured with a repair lag of 100 sources still recovers it, bit-exact.
    let mode: FecMode = "fixed:w=32,step=32".parse().unwrap();
    let run = |dec_cfg: DecoderConfig| -> Vec<(u32, Vec<u8>)> {
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
        let mut dec = Decoder::new(dec_cfg, 1);
        let now = t0();
        let mut late = None;
        for k in 0..32 + 64 {
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, now);
            if k != 5 {
                dec.handle_source(0, tag.esi, &data, now);
            }
            while let Some(r) = enc.poll_repair() {
                if late.is_none() && r.info.first_esi == 0 {
                    late = Some((r.info, r.timestamp, r.payload.to_vec()));
                }
            }
        }
        let (info, ts, pl) = late.expect("a repair over the first window");
        let _ = dec.handle_repair(0, &info, ts, &pl, now);
        let mut got = Vec::new();
        while let Some(rec) = dec.poll_recovered() {
            got.push((rec.esi, rec.data.to_vec()));
        }
        got
    };
    assert!(run(DecoderConfig::new(mode.scheme.clone())).is_empty());
    let lagged = DecoderConfig::new(mode.scheme.clone()).with_repair_lag(100);
    assert_eq!(run(lagged), vec![(5, payload(0, 5))]);
}

#[test]
fn a_decoder_learns_how_far_its_repairs_trail_their_sources() {
    // `fixed:w=32,step=4`, 3% of the sources lost, every repair delayed by 200 sources (a
    // slower path), as a decoder SID behind several segment lists sees them. Told nothing,
    // the decoder (S = 64) refuses all but the last; with a repair lag it may grow to, it refuses the
    // first ones, grows, and recovers the rest, bit-exact.
    let mode: FecMode = "fixed:w=32,step=4".parse().unwrap();
    let run = |dec_cfg: DecoderConfig| {
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
        let mut dec = Decoder::new(dec_cfg, 1);
        let now = t0();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut delayed = std::collections::VecDeque::new();
        let (mut lost, mut got) = (Vec::new(), Vec::new());
        for k in 0..4000u32 {
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, now);
            if rng.gen_bool(0.03) {
                lost.push(tag.esi);
            } else {
                dec.handle_source(0, tag.esi, &data, now);
            }
            while let Some(r) = enc.poll_repair() {
                delayed.push_back((k + 200, r.info, r.timestamp, r.payload.to_vec()));
            }
            while delayed.front().is_some_and(|d| d.0 <= k) {
                let (_, info, ts, pl) = delayed.pop_front().unwrap();
                let _ = dec.handle_repair(0, &info, ts, &pl, now);
            }
            while let Some(rec) = dec.poll_recovered() {
                assert_eq!(rec.data, &payload(0, rec.esi)[..]);
                got.push(rec.esi);
            }
        }
        for (_, info, ts, pl) in delayed {
            let _ = dec.handle_repair(0, &info, ts, &pl, now);
        }
        while let Some(rec) = dec.poll_recovered() {
            assert_eq!(rec.data, &payload(0, rec.esi)[..]);
            got.push(rec.esi);
        }
        let st = dec.stats(0).unwrap();
        (lost, got, st)
    };
    let fixed = DecoderConfig::new(mode.scheme.clone());
    let (lost, got, st) = run(fixed.clone());
    assert!(lost.len() > 80, "{}", lost.len());
    // Only repairs flushed after the last source (no longer behind) are taken.
    assert!(got.iter().all(|&e| e >= 3700), "{got:?}");
    assert_eq!((st.repairs_behind, st.repair_lag), (0, 0));

    let learning = DecoderConfig {
        repair_lag_limit: 1024,
        ..fixed
    };
    let (lost, got, st) = run(learning);
    let missed: Vec<_> = lost.iter().filter(|e| !got.contains(e)).collect();
    // Only the losses whose repairs were refused before the span grew stay lost.
    assert!(missed.iter().all(|&&e| e < 300), "{missed:?}");
    assert!(
        got.len() + 10 >= lost.len(),
        "{} of {}",
        got.len(),
        lost.len()
    );
    // The first late repair sets the lag; those over sources the span had forgotten before
    // it grew are refused too, until the grown span's base passes them (~500 sources).
    assert!((200..=232).contains(&st.repair_lag), "{st:?}");
    assert!((1..=500 / 4).contains(&st.repairs_behind), "{st:?}");
    assert_eq!(st.residual, missed.len() as u64);
}

#[test]
fn a_learning_decoder_keeps_a_named_loss_in_reach_for_an_answer_a_long_round_trip_later() {
    // `fixed:w=32,step=4` (the decoder's span: 64 sources), ESI 50 lost at 10 kpps and named
    // in a loss report; the repair that covers it arrives 3000 sources later, as an answer
    // over a 300 ms round trip would. A decoder that learns its reach keeps the sources the
    // answer needs from the report on; one with a fixed span has forgotten them.
    let mode: FecMode = "fixed:w=32,step=4".parse().unwrap();
    let run = |dec_cfg: DecoderConfig| {
        let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
        let mut dec = Decoder::new(dec_cfg, 1);
        let mut now = t0();
        let mut answer = None;
        let mut named = false;
        for k in 0..3100u32 {
            now += Duration::from_micros(100);
            let data = payload(0, k);
            let tag = enc.handle_source(0, &data, now);
            if tag.esi != 50 {
                dec.handle_source(0, tag.esi, &data, now);
            }
            while let Some(r) = enc.poll_repair() {
                let covers =
                    r.info.first_esi <= 50 && 50 < r.info.first_esi + u32::from(r.info.nss);
                if answer.is_none() && covers {
                    answer = Some((r.info, r.timestamp, r.payload.to_vec()));
                }
            }
            while let Some(fb) = dec.poll_feedback(now) {
                named |= fb
                    .loss_report
                    .ranges()
                    .iter()
                    .any(|r| r.first <= 50 && 50 < r.first + u32::from(r.len));
            }
        }
        assert!(named, "the loss was reported");
        let (info, ts, pl) = answer.expect("a repair over the loss");
        let _ = dec.handle_repair(0, &info, ts, &pl, now);
        let mut got = Vec::new();
        while let Some(rec) = dec.poll_recovered() {
            got.push((rec.esi, rec.data.to_vec()));
        }
        (got, dec.stats(0).unwrap())
    };
    let reports = DecoderConfig {
        loss_report_gap: Some(Duration::from_millis(1)),
        ..DecoderConfig::new(mode.scheme.clone())
    };
    let (got, _) = run(reports.clone());
    assert!(got.is_empty(), "{got:?}");
    let (got, st) = run(reports.learning_answer_reach());
    assert_eq!(got, vec![(50, payload(0, 50))]);
    assert!(st.repair_lag >= 3000, "{st:?}");
}

/// With flows named, a hole holds the flow that lost a packet; another flow's sources that
/// arrive meanwhile go at once, and the held ones follow the recovered source in order.
#[test]
fn in_order_release_holds_the_flow_of_the_hole_and_lets_other_flows_pass() {
    let mode: FecMode = "fixed:w=50,step=20".parse().unwrap();
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 3);
    let mut dcfg = DecoderConfig::new(mode.scheme.clone());
    dcfg.in_order = Some(Duration::from_millis(30));
    let mut dec = Decoder::new(dcfg.clone(), 3);
    let (a, b) = (0xaaaa_u64, 0xbbbb_u64);
    let now = t0();
    let mut out = Vec::new();
    let mut verdicts = Vec::new();
    // ESIs 0-9 of flow a (7 lost), 10-19 of flow b; the repair after 20 sources recovers 7.
    for k in 0..20u32 {
        let flow = if k < 10 { a } else { b };
        let data = payload(0, k);
        let tag = enc.handle_source(0, &data, now);
        if k != 7 {
            let v = dec.handle_source_in_flow(0, tag.esi, &data, 0, flow, now);
            if v == Verdict::Deliver {
                out.push(k);
            }
            verdicts.push((k, v));
        }
    }
    assert_eq!(
        out,
        (0..7).chain(10..20).collect::<Vec<_>>(),
        "{verdicts:?}"
    );
    let r = enc.poll_repair().expect("a repair after 20 sources");
    let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
    dec.handle_repair(0, &info, ts, &pl, now).unwrap();
    while let Some(r) = dec.poll_recovered() {
        out.push(r.esi);
    }
    assert_eq!(out[17..], [7, 8, 9]);
    let s = dec.stats(0).unwrap();
    assert_eq!((s.order_passed, s.recovered), (10, 1));

    // Scoped to the stream, flow b waits too.
    dcfg.in_order_scope = HoldScope::Stream;
    let mut dec = Decoder::new(dcfg, 3);
    for k in (0..20u32).filter(|&k| k != 7) {
        let flow = if k < 10 { a } else { b };
        let v = dec.handle_source_in_flow(0, k, &payload(0, k), 0, flow, now);
        assert_eq!(v == Verdict::Deliver, k < 7, "{k}");
    }
}

#[test]
fn superseded_sources_do_not_start_the_repair_timer_but_are_covered_by_its_repairs() {
    let mode: FecMode = "fixed:w=50,step=1000".parse().unwrap();
    let mut cfg = EncoderConfig::new(mode.clone());
    cfg.repair_delay = Some(Duration::from_millis(1));
    cfg.repair_retries = 0;
    let mut enc = Encoder::new(cfg, 1);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme), 1);
    let base = t0();
    let at = |us: u64| base + Duration::from_micros(us);
    // A run of pure ACKs: no timer, no repair.
    for k in 0..5u32 {
        let tag = enc.handle_source_needing(
            0,
            &payload(0, k),
            SourceNeed::Superseded,
            at(100 * u64::from(k)),
        );
        if k != 2 {
            dec.handle_source(0, tag.esi, &payload(0, k), at(100 * u64::from(k)));
        }
    }
    assert_eq!(enc.poll_timeout(), None);
    enc.handle_timeout(at(10_000));
    assert!(enc.poll_repair().is_none());
    // A timely source starts it; its repair covers the ACKs before it, and recovers the lost one.
    let tag = enc.handle_source_needing(0, &payload(0, 5), SourceNeed::Timely, at(10_000));
    dec.handle_source(0, tag.esi, &payload(0, 5), at(10_000));
    assert_eq!(enc.poll_timeout(), Some(at(11_000)));
    enc.handle_timeout(at(11_000));
    let r = enc.poll_repair().expect("the timer repair");
    let (info, ts, pl) = (r.info, r.timestamp, r.payload.to_vec());
    assert_eq!((info.first_esi, info.nss), (0, 6));
    dec.handle_repair(0, &info, ts, &pl, at(11_000)).unwrap();
    let rec = dec.poll_recovered().expect("the lost ACK");
    assert_eq!((rec.esi, rec.data), (2, &payload(0, 2)[..]));
    assert_eq!(enc.stats(0).unwrap().repairs_timer, 1);
}
