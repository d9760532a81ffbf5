//! Queue management on the path: with `EncoderConfig::aqm` the encoder drops sources while the
//! RTT it measures stays a queue above its base, and only then; a dropped source takes no ESI.

use std::time::{Duration, Instant};

use hirt_core::{AqmConfig, Encoder, EncoderConfig, FecMode, Feedback, TimestampEcho};

#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

/// 40 feedback periods of 50 sources, one per ms. Periods 3-19 measure an RTT `queue_ms` above
/// the first ones. Returns, per period, the sources the encoder refused; the ESIs it used; and
/// the drops its statistics count.
fn drive(aqm: Option<AqmConfig>, queue_ms: u64) -> (Vec<u32>, u32, u64) {
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
            if enc.admits_source(0, now) {
                enc.handle_source(0, &[k as u8; 100], now);
                while enc.poll_repair().is_some() {}
            } else {
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
            received: 50 - n,
            echo: Some(TimestampEcho {
                ts: 0,
                hold_us: hold.as_micros() as u32,
            }),
            ..Feedback::default()
        };
        enc.handle_feedback(&fb, now);
    }
    (refused, enc.next_esi(0), enc.stats(0).unwrap().aqm_drops)
}

#[test]
fn sources_are_dropped_while_the_path_queues_and_only_then() {
    let (refused, esis, counted) = drive(Some(AqmConfig::default()), 30);
    let total: u32 = refused.iter().sum();
    // CoDel waits an interval (100 ms, two periods) above the target before the first drop,
    // then drops ever closer: 17 periods of queue give a handful of drops, not a flood.
    assert_eq!(refused[..5].iter().sum::<u32>(), 0, "{refused:?}");
    assert!((5..=40).contains(&total), "{refused:?}");
    // The queue is gone from period 20: at most the period whose sample still showed it.
    assert_eq!(refused[21..].iter().sum::<u32>(), 0, "{refused:?}");
    // A dropped source takes no ESI: the decoder sees no hole.
    assert_eq!(esis, 40 * 50 - total);
    assert_eq!(counted, u64::from(total));
}

#[test]
fn a_queue_under_the_target_or_no_aqm_drops_nothing() {
    let (refused, esis, _) = drive(Some(AqmConfig::default()), 3);
    assert_eq!(refused.iter().sum::<u32>(), 0, "{refused:?}");
    assert_eq!(esis, 2000);
    let (refused, _, _) = drive(None, 100);
    assert_eq!(refused.iter().sum::<u32>(), 0, "{refused:?}");
}
