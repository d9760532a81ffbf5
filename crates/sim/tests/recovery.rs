//! Fixed-seed simulations asserting recovery bounds. Small packet counts: each run takes well
//! under a second in the test profile.

use std::time::Duration;

use hirt_core::HoldScope;
use hirt_sim::traffic::Pattern;
use hirt_sim::{run, AnswerReach, Report, Scenario};

fn sim(scheme: &str, loss: &str, packets: u64, seed: u64) -> Report {
    let sc = Scenario {
        scheme: scheme.into(),
        loss: loss.parse().unwrap(),
        packets,
        seed,
        ..Scenario::default()
    };
    let r = run(&sc).unwrap();
    assert_eq!(r.double_deliveries, 0, "{scheme} {loss}: delivered twice");
    assert_eq!(
        r.corrupt_recoveries, 0,
        "{scheme} {loss}: recovered bytes differ"
    );
    assert_eq!(r.lost, r.recovered + r.unrecovered);
    r
}

#[test]
fn same_seed_same_json_other_seed_other_json() {
    let sc = Scenario {
        scheme: "ours".into(),
        loss: "ge:p=0.005,r=0.3".parse().unwrap(),
        feedback_loss: "uniform:0.1".parse().unwrap(),
        packets: 20_000,
        seed: 7,
        ..Scenario::default()
    };
    let a = serde_json::to_string(&run(&sc).unwrap()).unwrap();
    let b = serde_json::to_string(&run(&sc).unwrap()).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run(&Scenario { seed: 8, ..sc }).unwrap()).unwrap();
    assert_ne!(a, c);
    for key in [
        "\"lost\"",
        "\"recovered\"",
        "\"overhead\"",
        "\"recovered_ratio\"",
        "\"recovery_delay_p99_ms\"",
    ] {
        assert!(a.contains(key), "JSON lacks {key}");
    }
}

#[test]
fn no_loss_no_recovery_needed() {
    let r = sim("ours", "none", 20_000, 1);
    assert_eq!((r.lost, r.recovered, r.recovered_ratio), (0, 0, 1.0));
    assert_eq!(r.sources, 20_000);
}

#[test]
fn no_fec_recovers_nothing() {
    let r = sim("none", "uniform:0.02", 20_000, 1);
    assert_eq!((r.recovered, r.repairs), (0, 0));
    assert!((r.link_loss - 0.02).abs() < 0.005, "{}", r.link_loss);
}

#[test]
fn ours_uniform_3_percent() {
    let r = sim("ours", "uniform:0.03", 50_000, 3);
    assert!(r.recovered_ratio >= 0.99, "{r:?}");
    assert!(r.overhead <= 0.05, "{r:?}");
}

#[test]
fn ours_uniform_half_percent() {
    let r = sim("ours", "uniform:0.005", 50_000, 4);
    assert!(r.recovered_ratio >= 0.995, "{r:?}");
    assert!(r.overhead <= 0.015, "{r:?}");
}

#[test]
fn hirt_adapts_to_uniform_loss() {
    let r = sim("hirt", "uniform:0.01", 50_000, 5);
    assert!(r.recovered_ratio >= 0.95, "{r:?}");
    assert!(r.overhead > 0.01 && r.overhead < 0.05, "{r:?}");
}

#[test]
fn maelstrom_interleave_covers_bursts() {
    // Bursts of 20 are spread over the 20-interleave layer: one loss per XOR group.
    let r = sim(
        "maelstrom:r=8,i=1-20-40",
        "burst:len=20,every=2000",
        40_000,
        1,
    );
    assert!(r.recovered_ratio >= 0.9, "{r:?}");
    // Without the interleaves, a burst of 20 is beyond a single XOR layer.
    let flat = sim("maelstrom:r=8,i=1", "burst:len=20,every=2000", 40_000, 1);
    assert!(flat.recovered_ratio < 0.2, "{flat:?}");
}

#[test]
fn rquic_and_fixed_and_rs_recover_something() {
    // rQUIC's block XOR recovers one loss per block and steers to a 1 % residual: about half.
    for (scheme, min) in [
        ("rquic", 0.3),
        ("fixed:w=4,step=2", 0.5),
        ("rs:20:10", 0.95),
    ] {
        let r = sim(scheme, "uniform:0.02", 20_000, 2);
        assert!(r.recovered_ratio > min, "{scheme}: {r:?}");
        assert!(r.recovery_delay_p99_pkts < 1000.0, "{scheme}: {r:?}");
    }
}

#[test]
fn ours_survives_lossy_feedback() {
    let sc = Scenario {
        scheme: "ours".into(),
        loss: "uniform:0.02".parse().unwrap(),
        feedback_loss: "uniform:0.5".parse().unwrap(),
        packets: 30_000,
        seed: 9,
        ..Scenario::default()
    };
    let r = run(&sc).unwrap();
    assert!(r.feedback_lost > 0 && r.feedback_lost < r.feedback_sent);
    assert!(r.recovered_ratio >= 0.98, "{r:?}");
}

#[test]
fn sparse_traffic_recovery_latency_is_bounded() {
    let (repair_delay, owd) = (Duration::from_millis(5), Duration::from_millis(25));
    let sc = Scenario {
        scheme: "ours".into(),
        loss: "uniform:0.01".parse().unwrap(),
        pattern: Pattern::Poisson,
        rate_pps: 100.0,
        packets: 50_000,
        delay: owd,
        repair_delay: Some(repair_delay),
        seed: 11,
        ..Scenario::default()
    };
    let r = run(&sc).unwrap();
    assert!(r.recovered_ratio >= 0.97, "{r:?}");
    let bound = (2 * repair_delay + owd).as_secs_f64() * 1e3;
    // Extra delay over the original's arrival: well within the bound.
    assert!(
        r.recovery_delay_p99_ms <= bound,
        "p99 {} ms > {bound} ms",
        r.recovery_delay_p99_ms
    );
    // From the send time (the reading): the timer's re-send (`repair_retries`, default
    // 1) recovers a source whose first timer repair was lost at 2 x repair_delay.
    assert_eq!(sc.repair_retries, 1);
    assert!(
        r.recovery_latency_p99_ms <= bound,
        "p99 latency {} ms > {bound} ms",
        r.recovery_latency_p99_ms
    );
}

fn with_deadline(scheme: &str, loss: &str, deadline: &str, seed: u64) -> Report {
    let sc = Scenario {
        scheme: scheme.into(),
        loss: loss.parse().unwrap(),
        packets: 100_000,
        repair_delay: None,
        seed,
        deadline: Some(deadline.parse().unwrap()),
        ..Scenario::default()
    };
    hirt_sim::run(&sc).unwrap()
}

/// `ours` at a 2 RTT deadline on 3 % uniform loss, `packets` sources at `rate_pps` over a
/// one-way `delay_ms`, with `window` (or the default) and `answer_reach`.
fn ours_two_rtt(
    rate_pps: f64,
    delay_ms: u64,
    window: Option<u16>,
    answer_reach: AnswerReach,
    (packets, seed): (u64, u64),
) -> Report {
    hirt_sim::run(&Scenario {
        scheme: "ours".into(),
        window,
        loss: "uniform:0.03".parse().unwrap(),
        packets,
        repair_delay: None,
        seed,
        rate_pps,
        delay: Duration::from_millis(delay_ms),
        deadline: Some("2rtt".parse().unwrap()),
        answer_reach,
        ..Scenario::default()
    })
    .unwrap()
}

/// Whether `r` meets the 2 RTT targets: every recovery exact, >= 99.9 % in time, overhead at
/// most 1.2 p/(1-p) + 0.3 pp.
fn assert_meets_two_rtt_targets(r: &Report) {
    assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
    assert!(r.recovered_in_time_ratio >= 0.999, "{r:?}");
    let p = r.lost as f64 / r.sources as f64;
    assert!(r.overhead <= 1.2 * p / (1.0 - p) + 0.003, "{r:?}");
}

/// Deadline 2 RTT on 3 % uniform loss: loss-triggered repair recovers every loss in time, at
/// an overhead close to the bound p/(1-p), and the report carries the new keys.
#[test]
fn ours_with_a_deadline_recovers_in_time_near_the_bound() {
    let r = with_deadline("ours", "uniform:0.03", "2rtt", 1);
    assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
    assert!(r.recovered_in_time_ratio >= 0.999, "{r:?}");
    assert_eq!(r.late_recoveries, r.recovered - r.recovered_in_time);
    assert_eq!(r.deadline_ms, 100.0);
    let p = r.link_loss;
    assert!(
        (r.bound_overhead - 0.999 * p / (1.0 - p)).abs() < 1e-9,
        "{r:?}"
    );
    assert!(r.overhead <= 1.5 * p / (1.0 - p), "{r:?}");
    assert!(r.repairs_report > 0 && r.loss_reports > 0);
    let json = serde_json::to_string(&r).unwrap();
    for key in [
        "\"recovered_in_time_ratio\"",
        "\"late_recoveries\"",
        "\"bound_overhead\"",
    ] {
        assert!(json.contains(key), "{key}");
    }
}

/// 100 kpps at a 50 ms RTT: a round trip of sources (~5000) exceeds the largest window
/// (4095), yet the answers to loss reports still reach the losses (the encoder keeps a longer
/// history, the decoder a longer span): recovered in time like at 10 kpps, under the target's
/// overhead, where proactive repair recovered ~96 %.
#[test]
fn answers_reach_a_round_trip_of_sources_beyond_the_largest_window() {
    let r = ours_two_rtt(100_000.0, 25, None, AnswerReach::Path, (100_000, 3));
    assert!(r.repairs_report > 0 && r.loss_reports > 0, "{r:?}");
    assert_meets_two_rtt_targets(&r);
}

/// 100 kpps at a 600 ms RTT: a round trip is 60000 sources, fifteen largest windows. The
/// decoder's span and the encoder's history follow what the answers need
/// (`answer_reach_lag`, ~110000 sources), so loss reports are still answered: recovered in
/// time at about the loss rate in overhead, where proactive repair needed 1.9x the target.
#[test]
fn answers_reach_a_round_trip_of_sixty_thousand_sources() {
    let r = ours_two_rtt(100_000.0, 300, None, AnswerReach::Path, (300_000, 1));
    assert!(r.repairs_report > r.lost / 2, "{r:?}");
    assert_meets_two_rtt_targets(&r);
}

/// A window of 200 (the dataplanes' default) at 10 kpps over a 50 ms RTT: an answer reaches ~830 sources
/// back, past the window's span (512). Kept to that span, `ours` repairs proactively (96.8 % in
/// time at 5.9 % overhead); with the decoder growing its span as its reports ask
/// (`AnswerReach::Grown`), the loss reports are answered, and the spares of a round trip's
/// answers cover all of them (repairs wider than the window): 100 % in time at 3.9 %, within
/// the target (4.4 % with spares over one window each, 4.5 % before the span grew ahead).
#[test]
fn a_decoder_grows_its_span_for_answers_past_a_small_window() {
    let run = |reach| ours_two_rtt(10_000.0, 25, Some(200), reach, (100_000, 1));
    let small = run(AnswerReach::Window);
    let grown = run(AnswerReach::Grown);
    assert!(small.repairs_report < small.lost / 20, "{small:?}");
    assert!(grown.repairs_report > grown.lost / 2, "{grown:?}");
    assert_eq!((grown.double_deliveries, grown.corrupt_recoveries), (0, 0));
    assert!(small.recovered_in_time_ratio < 0.99, "{small:?}");
    assert!(grown.overhead < 0.8 * small.overhead, "{grown:?} {small:?}");
    assert_meets_two_rtt_targets(&grown);
}

/// A window of 200 at 100 kpps over a 50 ms RTT: a round trip is 25 windows of sources, so the
/// reports of one round trip name losses many windows apart. Each answer covers its own
/// report's losses, the spares of a batch of answers cover all of its losses (repairs up to
/// 4095 sources wide), and the decoder keeps named losses in its span from the first report:
/// 100 % in time at 3.4 %. With spares over one window each, 95.0 %; with every queued answer
/// and spare over the window of the newest report, 90.2 %.
#[test]
fn answers_and_spares_cover_their_own_window_of_losses() {
    let r = ours_two_rtt(100_000.0, 25, Some(200), AnswerReach::Grown, (100_000, 1));
    assert_meets_two_rtt_targets(&r);
}

/// The dataplanes' setting where a round trip is a small part of the deadline (`auto`:
/// 10 ms over a 0.2 ms RTT) at 60 kpps, window 200: the spares wait half the slack, longer
/// than 200 sources take to pass, so the encoder keeps the sources their batch needs. A lost
/// answer then still has a spare: every loss recovered, at about the 2 RTT overhead target.
/// (Keeping only the window: 1.1 % of the losses never recovered.)
#[test]
fn spares_reach_their_losses_where_the_deadline_spans_many_round_trips() {
    let r = hirt_sim::run(&Scenario {
        scheme: "ours".into(),
        window: Some(200),
        loss: "uniform:0.03".parse().unwrap(),
        packets: 200_000,
        repair_delay: None,
        seed: 1,
        rate_pps: 60_000.0,
        delay: Duration::from_micros(100),
        deadline: Some("auto".parse().unwrap()),
        answer_reach: AnswerReach::Grown,
        ..Scenario::default()
    })
    .unwrap();
    assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
    assert_eq!(r.recovered, r.lost, "{r:?}");
    let p = r.lost as f64 / r.sources as f64;
    assert!(r.overhead <= 1.2 * p / (1.0 - p) + 0.004, "{r:?}");
}

/// A deadline shorter than the RTT: recoveries after it count as late, the bound is the
/// proactive one (above p/(1-p)), and HIRT (no deadline mode) recovers the same as without it.
#[test]
fn short_deadlines_sort_recoveries_into_in_time_and_late() {
    let hirt = with_deadline("hirt", "uniform:0.03", "0.5rtt", 2);
    let plain = hirt_sim::run(&Scenario {
        scheme: "hirt".into(),
        loss: "uniform:0.03".parse().unwrap(),
        packets: 100_000,
        repair_delay: None,
        seed: 2,
        ..Scenario::default()
    })
    .unwrap();
    assert_eq!(hirt.recovered, plain.recovered);
    assert!(hirt.late_recoveries > 0 && hirt.recovered_in_time < hirt.recovered);
    let p = hirt.link_loss;
    assert!(hirt.bound_overhead > p / (1.0 - p), "{hirt:?}");
    assert_eq!(plain.recovered_in_time, plain.recovered);
    assert_eq!(plain.late_recoveries, 0);
}

/// A bottleneck just above the source rate (10 kpps x 32 B = 2.56 Mbit/s through 2.57 Mbit/s,
/// 100-packet queue) with 1 % random loss: the loss reports would make the answers fill the
/// queue (queue drops reported as losses, answered, dropping more); the queue signal (the
/// smoothed RTT above the base) pauses them, so the link loses no more than its random 1 %
/// and the repairs stay at what that loss needs. (Without the pause: 1.37 % link loss, 2.4 %
/// overhead, 80 % in time.)
#[test]
fn answers_pause_while_the_path_queues() {
    let r = hirt_sim::run(&Scenario {
        scheme: "ours".into(),
        loss: "uniform:0.01".parse().unwrap(),
        packets: 200_000,
        repair_delay: None,
        link_rate_bps: Some(2_570_000),
        queue: hirt_channel::QueueLimit::Packets(100),
        deadline: Some("2rtt".parse().unwrap()),
        ..Scenario::default()
    })
    .unwrap();
    assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
    assert!(r.link_loss < 0.0102, "queue drops: {r:?}");
    assert!(r.overhead < 1.5 * 0.01 / 0.99, "{r:?}");
    // Losses named while the answers pause are left to the transports (1.8 % of them here).
    assert!(r.recovered_ratio > 0.95, "{r:?}");
}

/// The same bottleneck without a deadline: the `ours` controller's own repairs (rate-driven and
/// time-driven) give way while the path queues (`yield=queue`), so they do not fill the queue;
/// with `yield=off` they keep going and the queue overflows. With the default (`overflow`) they
/// give way only once the queue drops more than the link's loss explains. The source (a
/// constant-rate stream, not a transport) does not back off, so the queue stays: what is shown
/// is that the repairs give way.
#[test]
fn proactive_repairs_yield_to_a_queue() {
    let run_with = |scheme: &str| {
        let r = hirt_sim::run(&Scenario {
            scheme: scheme.into(),
            loss: "uniform:0.01".parse().unwrap(),
            packets: 200_000,
            link_rate_bps: Some(2_570_000),
            queue: hirt_channel::QueueLimit::Packets(100),
            ..Scenario::default()
        })
        .unwrap();
        assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
        r
    };
    let yielding = run_with("ours:yield=queue");
    let default = run_with("ours");
    let pushing = run_with("ours:yield=off");
    eprintln!(
        "queue drops: yield=queue {}, default {}, yield=off {}",
        yielding.queue_drops, default.queue_drops, pushing.queue_drops
    );
    assert!(yielding.congestion_signals > 0, "{yielding:?}");
    // Measured: 19 queue drops against 106.
    assert!(
        3 * yielding.queue_drops < pushing.queue_drops,
        "queue drops: {} vs {}",
        yielding.queue_drops,
        pushing.queue_drops
    );
    assert!(default.queue_drops <= pushing.queue_drops, "{default:?}");
}

/// In-order release per flow holds fewer sources than per stream on a bursty link shared by 16
/// flows, and lets few of them overtake a source of their own flow.
#[test]
fn in_order_release_per_flow_holds_fewer_sources_than_per_stream() {
    let run_scope = |scope: HoldScope| {
        run(&Scenario {
            loss: "ge:p=0.00151,r=0.333".parse().unwrap(),
            packets: 100_000,
            rate_pps: 3_000.0,
            delay: Duration::from_millis(25),
            repair_delay: Some(Duration::from_millis(1)),
            repair_retries: 3,
            in_order: Some(Duration::from_millis(30)),
            flows: Some((16, 8)),
            in_order_scope: scope,
            ..Scenario::default()
        })
        .unwrap()
    };
    let (stream, flow) = (run_scope(HoldScope::Stream), run_scope(HoldScope::Flow));
    for r in [&stream, &flow] {
        assert_eq!((r.double_deliveries, r.corrupt_recoveries), (0, 0));
        assert_eq!(r.recovered, r.lost);
    }
    assert_eq!(stream.order_passed, 0);
    assert!(flow.order_passed > 0);
    assert!(
        flow.held * 4 < stream.held * 3,
        "held per flow {} vs per stream {}",
        flow.held,
        stream.held
    );
    assert!(
        flow.flow_reordered * 20 <= flow.lost,
        "reordered {} of {} losses",
        flow.flow_reordered,
        flow.lost
    );
}
