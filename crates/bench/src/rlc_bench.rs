//! RLC encoder/decoder figures: ns per repair symbol by window, and source packets per second
//! through the encoder and the decoder at 1 %, 3 % and 5 % uniform loss (W = 200, 1280 B,
//! repair rate = loss + 0.5 %, as HIRT's controller would send).
//!
//! The traffic is a deterministic trace: a seeded uniform loss pattern hits source and repair
//! packets alike, so every run (and every machine) codes exactly the same symbols. The trace is
//! timed in segments of 1024 source packets; it is replayed until the time budget is
//! spent, and each segment's fastest replay is kept (a preempted segment only gets slower). The
//! decoder's recovered bytes are checked against the originals in an untimed first pass.

use std::hint::black_box;
use std::time::{Duration, Instant};

use hirt_fec::{FecDecoder, FecEncoder, RepairInfo, RlcConfig, RlcDecoder, RlcEncoder};
use serde_json::{json, Value};

use crate::codec::Budget;
use crate::timing::measure;

/// Source packet size.
const LEN: usize = 1280;
/// Distinct payloads the trace cycles through (the codec does not care about content).
const POOL: usize = 509;
/// Source packets per timed segment (a power of two).
const SEGMENT: usize = 1024;
/// Seed of the loss pattern.
const SEED: u64 = 0x6869_7274_2d62_656e;
/// Windows for the per-repair cost.
const WINDOWS: [u16; 3] = [20, 200, 1000];
/// Loss rates for the throughput runs.
const LOSSES: [f64; 3] = [0.01, 0.03, 0.05];
/// Repair rate above the loss rate.
const MARGIN: f64 = 0.005;
/// Window of the throughput runs.
const W: u16 = 200;

/// RLC figures for the report.
pub struct RlcFigures {
    /// Encoder ns per repair symbol, per window.
    pub repair: Value,
    /// Encoder / decoder source packets per second, per loss rate.
    pub throughput: Value,
    /// Keys merged into the report's summary.
    pub summary: Value,
}

/// SplitMix64: a tiny seeded generator for the loss pattern (reproducible everywhere).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

fn payload_pool() -> Vec<Vec<u8>> {
    let mut rng = SplitMix(42);
    (0..POOL)
        .map(|_| (0..LEN).map(|_| rng.next() as u8).collect())
        .collect()
}

/// Measures the RLC codec.
pub fn run(budget: Budget, errors: &mut Vec<String>) -> RlcFigures {
    let pool = payload_pool();
    let mut repair = Vec::new();
    for &w in &WINDOWS {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(w));
        for esi in 0..w as u32 {
            enc.push_source(esi, &pool[esi as usize % POOL], &mut |_, _| {});
        }
        let s = measure(budget.gf, || {
            enc.repair_now(&mut |info, p| {
                black_box((info, p));
            });
        });
        repair.push(json!({
            "window": w,
            "bytes": LEN,
            "ns_per_repair": (s.best * 1e9).round(),
            "ns_per_repair_median": (s.median * 1e9).round(),
            "gbps": ((w as usize * LEN) as f64 / s.best / 1e9 * 100.0).round() / 100.0,
        }));
    }

    let mut throughput = Vec::new();
    let mut summary = json!({});
    for &loss in &LOSSES {
        let t = Trace::new(&pool, loss, budget.rlc_packets);
        let enc = t.time_encoder(&pool, budget);
        let (dec, check) = t.time_decoder(&pool, budget);
        if check.mismatched > 0 {
            errors.push(format!(
                "RLC decoder returned {} wrong symbols at loss {loss}",
                check.mismatched
            ));
        }
        let pct = (loss * 100.0).round() as u32;
        summary[format!("encode_mpps_{pct}pct")] = json!(round2(enc / 1e6));
        summary[format!("decode_mpps_{pct}pct")] = json!(round2(dec / 1e6));
        throughput.push(json!({
            "loss": loss,
            "repair_rate": round2((loss + MARGIN) * 1000.0) / 1000.0,
            "window": W,
            "bytes": LEN,
            "source_packets": t.packets,
            "repairs": t.repairs.len(),
            "lost_sources": check.lost,
            "recovered": check.recovered,
            "unrecovered": check.lost - check.recovered,
            "encode_pps": enc.round(),
            "decode_pps": dec.round(),
        }));
    }
    RlcFigures {
        repair: json!(repair),
        throughput: json!(throughput),
        summary,
    }
}

/// One untimed-budget replay of the W=200 trace at `loss` through encoder and decoder (for
/// profiling under valgrind: `cargo run --release -p hirt-bench --example rlc_profile`).
/// Returns (encoder pps, decoder pps, lost, recovered).
pub fn profile_once(loss: f64, packets: usize) -> (f64, f64, usize, usize) {
    let pool = payload_pool();
    let t = Trace::new(&pool, loss, packets);
    let budget = Budget {
        gf: Duration::ZERO,
        rlc: Duration::ZERO,
        rlc_packets: packets,
    };
    let enc = t.time_encoder(&pool, budget);
    let (dec, check) = t.time_decoder(&pool, budget);
    (enc, dec, check.lost, check.recovered)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// One packet of the trace as the decoder sees it.
enum Event {
    Source(u32),
    Repair(usize),
}

/// A deterministic encoder run and what survives the lossy link.
struct Trace {
    packets: usize,
    rate: f64,
    /// Repairs in emission order (header, payload).
    repairs: Vec<(RepairInfo, Vec<u8>)>,
    /// Received packets, in order, cut into segments of `SEGMENT` source packets.
    received: Vec<Vec<Event>>,
}

/// Result of the untimed decoder pass.
struct Check {
    lost: usize,
    recovered: usize,
    mismatched: usize,
}

impl Trace {
    fn new(pool: &[Vec<u8>], loss: f64, packets: usize) -> Trace {
        let rate = loss + MARGIN;
        let mut enc = RlcEncoder::new(RlcConfig::rlc(W));
        let mut rng = SplitMix(SEED ^ (loss * 1e6) as u64);
        let mut repairs = Vec::new();
        let mut received: Vec<Vec<Event>> = Vec::new();
        let mut credit = 0.0;
        for esi in 0..packets as u32 {
            if (esi as usize) & (SEGMENT - 1) == 0 {
                received.push(Vec::new());
            }
            let seg = received.last_mut().expect("pushed above");
            enc.push_source(esi, &pool[esi as usize % POOL], &mut |_, _| {});
            if !rng.chance(loss) {
                seg.push(Event::Source(esi));
            }
            credit += rate;
            while credit >= 1.0 {
                credit -= 1.0;
                enc.repair_now(&mut |info, p| repairs.push((info, p.to_vec())));
                if !rng.chance(loss) {
                    seg.push(Event::Repair(repairs.len() - 1));
                }
            }
        }
        Trace {
            packets,
            rate,
            repairs,
            received,
        }
    }

    /// Source packets per second through the encoder (copy into the window + repairs).
    fn time_encoder(&self, pool: &[Vec<u8>], budget: Budget) -> f64 {
        let segs = self.received.len();
        let mut best = vec![f64::INFINITY; segs];
        let start = Instant::now();
        let mut rounds = 0;
        while rounds < 3 || start.elapsed() < budget.rlc {
            let mut enc = RlcEncoder::new(RlcConfig::rlc(W));
            let mut credit = 0.0;
            for (s, b) in best.iter_mut().enumerate() {
                let t = Instant::now();
                let lo = s * SEGMENT;
                for esi in lo..(lo + SEGMENT).min(self.packets) {
                    enc.push_source(esi as u32, black_box(&pool[esi % POOL]), &mut |_, _| {});
                    credit += self.rate;
                    while credit >= 1.0 {
                        credit -= 1.0;
                        enc.repair_now(&mut |info, p| {
                            black_box((info, p));
                        });
                    }
                }
                *b = b.min(t.elapsed().as_secs_f64());
            }
            rounds += 1;
        }
        self.packets as f64 / best.iter().sum::<f64>()
    }

    /// Source packets per second through the decoder, and the correctness check.
    fn time_decoder(&self, pool: &[Vec<u8>], budget: Budget) -> (f64, Check) {
        // Untimed pass: every recovered symbol must equal the original.
        let mut dec = RlcDecoder::new(RlcConfig::rlc(W));
        let mut check = Check {
            lost: 0,
            recovered: 0,
            mismatched: 0,
        };
        let mut got = 0usize;
        for seg in &self.received {
            for ev in seg {
                let mut cb = |esi: u32, data: &[u8]| {
                    check.recovered += 1;
                    if data != &pool[esi as usize % POOL][..] {
                        check.mismatched += 1;
                    }
                };
                match *ev {
                    Event::Source(esi) => {
                        got += 1;
                        let _ = dec.on_source(esi, &pool[esi as usize % POOL], &mut cb);
                    }
                    Event::Repair(i) => {
                        let (info, p) = &self.repairs[i];
                        let _ = dec.on_repair(info, p, &mut cb);
                    }
                }
            }
        }
        check.lost = self.packets - got;

        let segs = self.received.len();
        let mut best = vec![f64::INFINITY; segs];
        let start = Instant::now();
        let mut rounds = 0;
        while rounds < 3 || start.elapsed() < budget.rlc {
            let mut dec = RlcDecoder::new(RlcConfig::rlc(W));
            for (seg, b) in self.received.iter().zip(best.iter_mut()) {
                let t = Instant::now();
                for ev in seg {
                    let mut cb = |esi: u32, data: &[u8]| {
                        black_box((esi, data));
                    };
                    let r = match *ev {
                        Event::Source(esi) => dec
                            .on_source(esi, black_box(&pool[esi as usize % POOL]), &mut cb)
                            .map(|_| ()),
                        Event::Repair(i) => {
                            let (info, p) = &self.repairs[i];
                            dec.on_repair(info, black_box(p), &mut cb)
                        }
                    };
                    black_box(r.is_ok());
                }
                *b = b.min(t.elapsed().as_secs_f64());
            }
            rounds += 1;
        }
        (self.packets as f64 / best.iter().sum::<f64>(), check)
    }
}

/// Prints the RLC tables.
pub fn print(r: &Value) {
    println!("\nRLC encoder, one repair symbol over W sources of {LEN} B");
    for f in r["rlc_encoder_repair"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        println!(
            "  W={:<5} {:>9} ns/repair  ({} GB/s of window)",
            f["window"], f["ns_per_repair"], f["gbps"]
        );
    }
    println!(
        "\nRLC throughput, W={W}, {LEN} B, repair rate = loss + {:.1}%",
        MARGIN * 100.0
    );
    println!(
        "  {:>5} {:>8} {:>12} {:>12} {:>7} {:>10} {:>11}",
        "loss", "repairs", "enc Mpps", "dec Mpps", "lost", "recovered", "unrecovered"
    );
    for f in r["rlc_throughput"].as_array().cloned().unwrap_or_default() {
        println!(
            "  {:>4.0}% {:>8} {:>12.2} {:>12.2} {:>7} {:>10} {:>11}",
            f["loss"].as_f64().unwrap_or(0.0) * 100.0,
            f["repairs"],
            f["encode_pps"].as_f64().unwrap_or(0.0) / 1e6,
            f["decode_pps"].as_f64().unwrap_or(0.0) / 1e6,
            f["lost_sources"],
            f["recovered"],
            f["unrecovered"],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_is_deterministic_and_decoder_output_is_exact() {
        let pool = payload_pool();
        let a = Trace::new(&pool, 0.03, 4 * SEGMENT);
        let b = Trace::new(&pool, 0.03, 4 * SEGMENT);
        assert_eq!(a.repairs.len(), b.repairs.len());
        assert_eq!(a.repairs.len(), (4 * SEGMENT) * 35 / 1000);
        let events = |t: &Trace| -> Vec<(bool, usize)> {
            t.received
                .iter()
                .flatten()
                .map(|e| match *e {
                    Event::Source(esi) => (true, esi as usize),
                    Event::Repair(i) => (false, i),
                })
                .collect()
        };
        assert_eq!(events(&a), events(&b));
        let budget = Budget {
            gf: std::time::Duration::ZERO,
            rlc: std::time::Duration::ZERO,
            rlc_packets: 0,
        };
        let (pps, check) = a.time_decoder(&pool, budget);
        assert!(pps > 0.0);
        assert!(check.lost > 0, "3% of 4096 packets lost");
        assert!(check.recovered > 0 && check.recovered <= check.lost);
        assert_eq!(check.mismatched, 0);
        assert!(a.time_encoder(&pool, budget) > 0.0);
    }
}
