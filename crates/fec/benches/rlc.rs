//! RLC encoder / decoder throughput: 1280 B source packets, W = 200, 1/3/5% uniform loss, a
//! repair rate 1.2x the loss (one repair per 83/28/17 sources), and the cost of one repair for
//! W = 20, 200, 1000. Wall-clock: on a loaded machine prefer `examples/rlc_speed.rs`, which counts
//! CPU time.
//!
//! `cargo bench -p hirt-fec --bench rlc` (CPU-time figures in docs/results/2026-codec-core.md).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hirt_fec::rlc::{RlcConfig, RlcDecoder, RlcEncoder};
use hirt_fec::{Esi, FecDecoder, FecEncoder, RepairInfo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LEN: usize = 1280;
const N: usize = 20_000;

/// Sources per repair for a repair rate 1.2x the loss rate.
fn repair_every(loss: f64) -> usize {
    (1.0 / (1.2 * loss)).round() as usize
}

fn packets() -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    (0..64)
        .map(|_| (0..LEN).map(|_| rng.gen()).collect())
        .collect()
}

enum Ev {
    Src(Esi, usize),
    Rep(RepairInfo, Vec<u8>),
}

/// The received stream at `loss` uniform loss (sources and repairs alike).
fn stream(w: u16, loss: f64, pk: &[Vec<u8>]) -> Vec<Ev> {
    let every = repair_every(loss);
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut enc = RlcEncoder::new(RlcConfig::rlc(w));
    let mut out = Vec::new();
    for i in 0..N {
        enc.push_source(i as Esi, &pk[i % pk.len()], &mut |_, _| {});
        if !rng.gen_bool(loss) {
            out.push(Ev::Src(i as Esi, i % pk.len()));
        }
        if i % every == every - 1 {
            enc.repair_now(&mut |info, p| {
                if !rng.gen_bool(loss) {
                    out.push(Ev::Rep(info, p.to_vec()));
                }
            });
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let pk = packets();

    let mut g = c.benchmark_group("rlc_encode_w200_1280B");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    let every = repair_every(0.03);
    g.bench_function("sources_plus_3.6pct_repairs", |b| {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(200));
        let mut esi: Esi = 0;
        b.iter(|| {
            for i in 0..N {
                enc.push_source(esi, &pk[i % pk.len()], &mut |_, _| {});
                esi = esi.wrapping_add(1);
                if i % every == every - 1 {
                    enc.repair_now(&mut |_, p| {
                        black_box(p);
                    });
                }
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("rlc_decode_w200_1280B");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for loss in [0.01, 0.03, 0.05] {
        let evs = stream(200, loss, &pk);
        g.bench_function(BenchmarkId::from_parameter(format!("loss{}", loss)), |b| {
            b.iter(|| {
                let mut dec = RlcDecoder::new(RlcConfig::rlc(200));
                let mut rec = 0usize;
                for ev in &evs {
                    match ev {
                        Ev::Src(e, k) => {
                            dec.on_source(*e, &pk[*k], &mut |_, _| rec += 1).unwrap();
                        }
                        Ev::Rep(i, p) => dec.on_repair(i, p, &mut |_, _| rec += 1).unwrap(),
                    }
                }
                black_box(rec)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("rlc_repair_1280B");
    for w in [20u16, 200, 1000] {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(w));
        for i in 0..w as usize {
            enc.push_source(i as Esi, &pk[i % pk.len()], &mut |_, _| {});
        }
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(w), |b| {
            b.iter(|| {
                enc.repair_now(&mut |_, p| {
                    black_box(p);
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
