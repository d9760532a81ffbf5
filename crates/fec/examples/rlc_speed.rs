//! RLC encoder / decoder speed in packets per **CPU-second** of the measuring thread, so the
//! figure stays meaningful on a shared, loaded machine (wall-clock benches there measure the
//! scheduler). Same workload as `benches/rlc.rs`: 1280 B sources, W = 200, uniform loss on
//! sources and repairs, a repair rate 1.2x the loss (one repair per `repair_every(loss)` sources:
//! 83, 28, 17 for 1%, 3%, 5%).
//!
//! `cargo run --release -p hirt-fec --example rlc_speed`

use hirt_fec::rlc::{RlcConfig, RlcDecoder, RlcEncoder};
use hirt_fec::{Esi, FecDecoder, FecEncoder, RepairInfo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LEN: usize = 1280;
const N: usize = 200_000;

/// Sources per repair for a repair rate 1.2x the loss rate.
fn repair_every(loss: f64) -> usize {
    (1.0 / (1.2 * loss)).round() as usize
}

/// CPU time consumed by this thread, in seconds.
fn cpu_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always available on
    // Linux.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

enum Ev {
    Src(Esi, usize),
    Rep(RepairInfo, Vec<u8>),
}

fn main() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let pk: Vec<Vec<u8>> = (0..256)
        .map(|_| (0..LEN).map(|_| rng.gen()).collect())
        .collect();
    println!("gf kernel: {:?}", hirt_gf::active());

    // Encoder: sources plus repairs for 3% loss.
    let every = repair_every(0.03);
    let mut enc = RlcEncoder::new(RlcConfig::rlc(200));
    let mut sink = 0u64;
    let t = cpu_now();
    for i in 0..N {
        enc.push_source(i as Esi, &pk[i % pk.len()], &mut |_, _| {});
        if i % every == every - 1 {
            enc.repair_now(&mut |_, p| sink += p[0] as u64);
        }
    }
    let dt = cpu_now() - t;
    println!(
        "encode W=200 1280B repair 1/{every}: {:.2} Mpps per CPU-s",
        N as f64 / dt / 1e6
    );

    for w in [20u16, 200, 1000] {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(w));
        for i in 0..w as usize {
            enc.push_source(i as Esi, &pk[i % pk.len()], &mut |_, _| {});
        }
        let reps = 200_000 / w as usize;
        let t = cpu_now();
        for _ in 0..reps {
            enc.repair_now(&mut |_, p| sink += p[0] as u64);
        }
        let dt = cpu_now() - t;
        println!("repair W={w} 1280B: {:.0} ns", dt / reps as f64 * 1e9);
    }

    for loss in [0.01, 0.03, 0.05] {
        let every = repair_every(loss);
        let mut enc = RlcEncoder::new(RlcConfig::rlc(200));
        let mut evs = Vec::new();
        for i in 0..N {
            enc.push_source(i as Esi, &pk[i % pk.len()], &mut |_, _| {});
            if !rng.gen_bool(loss) {
                evs.push(Ev::Src(i as Esi, i % pk.len()));
            }
            if i % every == every - 1 {
                enc.repair_now(&mut |info, p| {
                    if !rng.gen_bool(loss) {
                        evs.push(Ev::Rep(info, p.to_vec()));
                    }
                });
            }
        }
        let lost = N - evs.iter().filter(|e| matches!(e, Ev::Src(..))).count();
        let mut dec = RlcDecoder::new(RlcConfig::rlc(200));
        let mut rec = 0usize;
        let t = cpu_now();
        for ev in &evs {
            match ev {
                Ev::Src(e, k) => {
                    dec.on_source(*e, &pk[*k], &mut |_, _| rec += 1)
                        .expect("source");
                }
                Ev::Rep(i, p) => dec.on_repair(i, p, &mut |_, _| rec += 1).expect("repair"),
            }
        }
        let dt = cpu_now() - t;
        println!(
            "decode W=200 1280B loss {:.0}% repair 1/{every}: {:.2} Mpps per CPU-s (lost {lost}, recovered {rec}, \
             row ops {})",
            loss * 100.0,
            N as f64 / dt / 1e6,
            dec.symbol_ops()
        );
    }
    std::hint::black_box(sink);
}
