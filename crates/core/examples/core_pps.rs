//! Rough throughput of the core (encoder + decoder, one stream, in one thread) with 1280 B
//! packets: `cargo run --release -p hirt-core --example core_pps -- [mode] [loss] [packets]`.
//! Includes the codec work (RLC W=200 by default), so it bounds what one core can push through
//! the tunnel logic before any I/O. Time is simulated at 1 us per packet (the core never reads
//! the clock); the wall clock is read here only to measure.

use std::time::{Duration, Instant};

use hirt_core::{Decoder, DecoderConfig, Encoder, EncoderConfig, FecMode, Verdict};

#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode_s = args.get(1).map_or("fixed:w=200,step=30", String::as_str);
    let loss: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.03);
    let n: u32 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mode: FecMode = mode_s.parse().expect("mode");
    let mut enc = Encoder::new(EncoderConfig::new(mode.clone()), 1);
    let mut dec = Decoder::new(DecoderConfig::new(mode.scheme.clone()), 1);
    let pkt: Vec<u8> = (0..1280u32).map(|i| i as u8).collect();
    // Deterministic loss pattern: a xorshift, so the measurement has no RNG crate cost.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lose = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 <= loss
    };
    let t0 = wall();
    let base = t0;
    let (mut delivered, mut recovered, mut repairs) = (0u64, 0u64, 0u64);
    let mut reps = Vec::new();
    for k in 0..n {
        let now = base + Duration::from_micros(u64::from(k));
        let tag = enc.handle_source(0, &pkt, now);
        if !lose() && dec.handle_source(0, tag.esi, &pkt, now) == Verdict::Deliver {
            delivered += 1;
        }
        while let Some(r) = enc.poll_repair() {
            reps.push((r.info, r.timestamp, r.payload.to_vec()));
        }
        for (info, ts, pl) in reps.drain(..) {
            repairs += 1;
            if !lose() {
                let _ = dec.handle_repair(0, &info, ts, &pl, now);
            }
        }
        while dec.poll_recovered().is_some() {
            recovered += 1;
        }
        while let Some(fb) = dec.poll_feedback(now) {
            enc.handle_feedback(&fb, now);
        }
        if enc.poll_timeout().is_some_and(|t| t <= now) {
            enc.handle_timeout(now);
        }
        if dec.poll_timeout().is_some_and(|t| t <= now) {
            dec.handle_timeout(now);
        }
    }
    let secs = wall().duration_since(t0).as_secs_f64();
    let lost = u64::from(n) - delivered;
    println!(
        "{{\"mode\":\"{mode_s}\",\"loss\":{loss},\"packets\":{n},\"mpps\":{:.3},\"repairs\":{repairs},\
         \"lost\":{lost},\"recovered\":{recovered}}}",
        f64::from(n) / secs / 1e6
    );
}
