//! The `ours` controller's repairs give way to an overflowing queue on the path (the RTT above
//! its base and a period losing far more than the loss process explains), but not to a queue
//! that one of the ends builds for lack of CPU, and not with `yield=off`.

use std::time::{Duration, Instant};

use hirt_core::{Encoder, EncoderConfig, EncoderStats, FecMode, Feedback, TimestampEcho};

#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

/// 60 feedback periods of 50 sources, 50 ms each. From the third on, the RTT samples are 100 ms
/// above the first (a queue); from the 30th on, each period loses 20 of 70 sources and the
/// decoder reports `local_drops` of its own. The encoder's CPU load is `load`.
fn drive(fec: &str, local_drops: u32, load: f64) -> EncoderStats {
    let mode = FecMode::parse_with_window(fec, 1000).unwrap();
    let mut cfg = EncoderConfig::new(mode);
    cfg.repair_delay = None;
    let mut enc = Encoder::new(cfg, 1);
    enc.set_cpu_load(load);
    let start = t0();
    let mut now = start;
    let mut esi = 0u32;
    let mut first = None;
    for k in 0..60u32 {
        for _ in 0..50 {
            now += Duration::from_millis(1);
            enc.handle_source(0, &[k as u8; 100], now);
            while enc.poll_repair().is_some() {}
            esi += 1;
        }
        let first = *first.get_or_insert(now);
        // sample = (now - epoch) - hold = (first - epoch) + extra.
        let extra = Duration::from_millis(50 * u64::from(k.min(2)));
        let hold = now.duration_since(first).saturating_sub(extra);
        let overflow = k >= 30;
        let fb = Feedback {
            seq: k as u16,
            highest_esi: esi - 1,
            received: 50,
            lost: if overflow { 20 } else { 0 },
            local_drops: if overflow { local_drops } else { 0 },
            echo: Some(TimestampEcho {
                ts: 0,
                hold_us: hold.as_micros() as u32,
            }),
            ..Feedback::default()
        };
        enc.handle_feedback(&fb, now);
    }
    enc.stats(0).unwrap()
}

#[test]
fn repairs_give_way_to_an_overflowing_path_queue_only() {
    let path = drive("ours", 0, 0.0);
    assert!(path.queue_signals > 0, "{path:?}");
    assert!(path.queue_overflows > 0 && path.queue_skips > 0, "{path:?}");

    // The decoder's host drops packets: the queue is taken as its own.
    let host = drive("ours", 5, 0.0);
    assert!(host.queue_signals > 0, "{host:?}");
    assert_eq!((host.queue_overflows, host.queue_skips), (0, 0), "{host:?}");

    // The encoder is overloaded: overload control sheds repairs, the queue is not the path's.
    let busy = drive("ours", 0, 1.0);
    assert_eq!((busy.queue_overflows, busy.queue_skips), (0, 0), "{busy:?}");

    let off = drive("ours:yield=off", 0, 0.0);
    assert!(off.queue_signals > 0, "{off:?}");
    assert_eq!((off.queue_overflows, off.queue_skips), (0, 0), "{off:?}");
}
