//! Queue management on the path: with `EncoderConfig::aqm` the encoder drops sources while the
//! RTT it measures stays a queue above its base, and only then; a dropped source takes no ESI,
//! and an ECN-capable one is marked CE instead of dropped.

use std::time::{Duration, Instant};

use hirt_core::{
    AqmConfig, Encoder, EncoderConfig, EncoderStats, FecMode, Feedback, SourceAdmission,
    SourceNeed, TimestampEcho,
};

#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

/// 40 feedback periods of 50 sources, one per ms. Periods 3-19 measure an RTT `queue_ms` above
/// the first ones; the sources are ECN-capable when `ecn`. Returns, per period, the sources the
/// encoder refused or marked; the ESIs it used; and its statistics.
fn drive(aqm: Option<AqmConfig>, queue_ms: u64, ecn: bool) -> (Vec<u32>, u32, EncoderStats) {
    drive_needing(aqm, queue_ms, ecn, SourceNeed::Timely)
}

/// [`drive`] with sources that need repairs as `need` says.
fn drive_needing(
    aqm: Option<AqmConfig>,
    queue_ms: u64,
    ecn: bool,
    need: SourceNeed,
) -> (Vec<u32>, u32, EncoderStats) {
    let mut cfg = EncoderConfig::new(FecMode::parse_with_window("ours", 200).unwrap());
    cfg.aqm = aqm;
    let mut enc = Encoder::new(cfg, 1);
    let mut now = t0();
    let mut first = None;
    let mut refused = Vec::new();
    for k in 0..40u32 {
        let mut n = 0;
        for _ in 0..50 {
            now += Duration::from_millis(1);
            let admission = enc.admit_source(0, need, ecn, now);
            if admission != SourceAdmission::Drop {
                enc.handle_source(0, &[k as u8; 100], now);
                while enc.poll_repair().is_some() {}
            }
            if admission != SourceAdmission::Send {
                n += 1;
            }
        }
        refused.push(n);
        let first = *first.get_or_insert(now);
        // sample = (now - epoch) - hold = (first - epoch) + extra.
        let extra = Duration::from_millis(if (3..20).contains(&k) { queue_ms } else { 0 });
        let hold = now.duration_since(first).saturating_sub(extra);
        let fb = Feedback {
            seq: k as u16,
            highest_esi: enc.next_esi(0).wrapping_sub(1),
            received: if ecn { 50 } else { 50 - n },
            echo: Some(TimestampEcho {
                ts: 0,
                hold_us: hold.as_micros() as u32,
            }),
            ..Feedback::default()
        };
        enc.handle_feedback(&fb, now);
    }
    (refused, enc.next_esi(0), enc.stats(0).unwrap())
}

#[test]
fn sources_are_dropped_while_the_path_queues_and_only_then() {
    let (refused, esis, stats) = drive(Some(AqmConfig::default()), 30, false);
    let total: u32 = refused.iter().sum();
    // CoDel waits an interval (100 ms, two periods) above the target before the first drop,
    // then drops ever closer: 17 periods of queue give a handful of drops, not a flood.
    assert_eq!(refused[..5].iter().sum::<u32>(), 0, "{refused:?}");
    assert!((5..=40).contains(&total), "{refused:?}");
    // The queue is gone from period 20: at most the period whose sample still showed it.
    assert_eq!(refused[21..].iter().sum::<u32>(), 0, "{refused:?}");
    // A dropped source takes no ESI: the decoder sees no hole.
    assert_eq!(esis, 40 * 50 - total);
    assert_eq!(stats.aqm_drops, u64::from(total));
    assert_eq!(stats.aqm_marks, 0);
}

#[test]
fn ecn_capable_sources_are_marked_on_the_same_schedule_and_all_sent() {
    let (dropped, _, _) = drive(Some(AqmConfig::default()), 30, false);
    let (marked, esis, stats) = drive(Some(AqmConfig::default()), 30, true);
    // CoDel's schedule does not depend on what a signal is: the marks fall where the drops did.
    assert_eq!(marked, dropped);
    assert!(marked.iter().sum::<u32>() >= 5, "{marked:?}");
    // Every source is coded and sent: nothing is lost to queue management.
    assert_eq!(esis, 40 * 50);
    assert_eq!(stats.aqm_marks, u64::from(marked.iter().sum::<u32>()));
    assert_eq!(stats.aqm_drops, 0);
}

#[test]
fn a_queue_under_the_target_or_no_aqm_drops_nothing() {
    let (refused, esis, _) = drive(Some(AqmConfig::default()), 3, false);
    assert_eq!(refused.iter().sum::<u32>(), 0, "{refused:?}");
    assert_eq!(esis, 2000);
    let (refused, _, _) = drive(None, 100, true);
    assert_eq!(refused.iter().sum::<u32>(), 0, "{refused:?}");
}

#[test]
fn superseded_sources_are_never_dropped_nor_marked() {
    // Pure TCP ACKs: losing one slows no sender, and the queue may be on the way back.
    for ecn in [false, true] {
        let (refused, esis, stats) =
            drive_needing(Some(AqmConfig::default()), 30, ecn, SourceNeed::Superseded);
        assert_eq!(refused.iter().sum::<u32>(), 0, "{refused:?}");
        assert_eq!(esis, 2000);
        assert_eq!((stats.aqm_drops, stats.aqm_marks), (0, 0));
    }
}

#[test]
fn a_queue_on_the_way_back_is_left_out() {
    // The RTT shows 30 ms of queue, all of it on the feedback's way back (the decoder beside
    // the encoder measured it): nothing is dropped. Measured as 10 ms only, the 20 ms left
    // still are a queue.
    let run = |back_ms: u64| {
        let mut cfg = EncoderConfig::new(FecMode::parse_with_window("ours", 200).unwrap());
        cfg.aqm = Some(AqmConfig::default());
        let mut enc = Encoder::new(cfg, 1);
        let mut now = t0();
        let mut first = None;
        let mut refused = 0;
        for k in 0..20u32 {
            for _ in 0..50 {
                now += Duration::from_millis(1);
                if enc.admit_source(0, SourceNeed::Timely, false, now) == SourceAdmission::Drop {
                    refused += 1;
                } else {
                    enc.handle_source(0, &[k as u8; 100], now);
                    while enc.poll_repair().is_some() {}
                }
            }
            let extra = Duration::from_millis(if k >= 3 { 30 } else { 0 });
            if k >= 3 {
                enc.set_return_queue(0, Some(Duration::from_millis(back_ms)));
            }
            let first = *first.get_or_insert(now);
            let hold = now.duration_since(first).saturating_sub(extra);
            let fb = Feedback {
                seq: k as u16,
                highest_esi: enc.next_esi(0).wrapping_sub(1),
                received: 50,
                echo: Some(TimestampEcho {
                    ts: 0,
                    hold_us: hold.as_micros() as u32,
                }),
                ..Feedback::default()
            };
            enc.handle_feedback(&fb, now);
        }
        refused
    };
    assert_eq!(run(30), 0);
    assert!(run(10) >= 5, "{}", run(10));
}
