//! Property tests of the RLC / XOR decoder against an independent oracle.
//!
//! Each case builds a stream with the real encoder (random window, DT, field, variable symbol
//! lengths, ESIs that wrap), loses symbols (uniform or in bursts), reorders and duplicates some,
//! feeds the decoder, and checks:
//! - every recovered symbol is bit-exact, recovered once, and was not received before;
//! - **rank-optimality**: the set of recovered symbols equals the set of missing symbols that the
//!   received equations determine, computed by a plain dense Gauss-Jordan elimination over
//!   GF(2^8) written here (unit vector in the row space <=> a row of the RREF is that unit
//!   vector).
//!
//! Case counts: 6000 + 2000 (checked after every arrival) + 1500 + 1000 (long streams with
//! eviction) + 1000 (a span grown mid-stream) = 11500 per `cargo test`. Symbols are at most
//! 24 bytes so that takes seconds.

use std::collections::{HashMap, HashSet};

use hirt_fec::coefficients::generate_coding_coefficients;
use hirt_fec::rlc::{DecoderStats, Field, RlcConfig, RlcDecoder, RlcEncoder};
use hirt_fec::{Esi, FecDecoder, FecEncoder, RepairInfo, SourceOutcome};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
enum Ev {
    Src(Esi, Vec<u8>),
    Rep(RepairInfo, Vec<u8>),
}

#[derive(Clone, Copy, Debug)]
enum Loss {
    Uniform(f64),
    /// `count` bursts of up to `len` consecutive events.
    Burst {
        len: usize,
        count: usize,
    },
}

#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    window: u16,
    dt: u8,
    field: Field,
    n: usize,
    repair_p: f64,
    loss: Loss,
    reorder: usize,
    dup_p: f64,
    start: Esi,
    vary_window: bool,
}

fn case_strategy(max_n: usize, max_w: u16) -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        1..=max_w,
        prop_oneof![Just(15u8), 0..=15u8],
        prop_oneof![3 => Just(Field::Gf256), 1 => Just(Field::Gf2)],
        1..=max_n,
        0.05f64..0.8,
        prop_oneof![
            (0.0f64..0.5).prop_map(Loss::Uniform),
            (1usize..12, 1usize..4).prop_map(|(len, count)| Loss::Burst { len, count }),
        ],
        prop_oneof![Just(0usize), 1usize..8],
        prop_oneof![Just(0.0f64), 0.0f64..0.2],
        prop_oneof![any::<u32>(), Just(u32::MAX - 5)],
        any::<bool>(),
    )
        .prop_map(
            |(seed, window, dt, field, n, repair_p, loss, reorder, dup_p, start, vary_window)| {
                Case {
                    seed,
                    window,
                    dt,
                    field,
                    n,
                    repair_p,
                    loss,
                    reorder,
                    dup_p,
                    start,
                    vary_window,
                }
            },
        )
}

/// Source symbols (by ESI) and the received event sequence.
fn build(c: &Case) -> (HashMap<Esi, Vec<u8>>, Vec<Ev>) {
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed);
    let cfg = RlcConfig {
        window: c.window,
        dt: c.dt,
        field: c.field,
    };
    let mut enc = RlcEncoder::new(cfg);
    let mut sources = HashMap::new();
    let mut sent = Vec::new();
    for i in 0..c.n {
        let esi = c.start.wrapping_add(i as u32);
        let len = rng.gen_range(0..=24);
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        enc.push_source(esi, &data, &mut |_, _| unreachable!());
        sources.insert(esi, data.clone());
        sent.push(Ev::Src(esi, data));
        if c.vary_window && rng.gen_bool(0.2) {
            enc.set_window(rng.gen_range(1..=c.window));
        }
        while rng.gen_bool(c.repair_p) {
            enc.repair_now(&mut |info, p| sent.push(Ev::Rep(info, p.to_vec())));
        }
    }
    for _ in 0..rng.gen_range(0..3) {
        enc.repair_now(&mut |info, p| sent.push(Ev::Rep(info, p.to_vec())));
    }
    // Loss.
    let mut keep = vec![true; sent.len()];
    match c.loss {
        Loss::Uniform(p) => keep.iter_mut().for_each(|k| *k = !rng.gen_bool(p)),
        Loss::Burst { len, count } => {
            for _ in 0..count {
                let at = rng.gen_range(0..sent.len());
                let l = rng.gen_range(1..=len);
                keep[at..(at + l).min(sent.len())]
                    .iter_mut()
                    .for_each(|k| *k = false);
            }
        }
    }
    let mut recv: Vec<(f64, Ev)> = Vec::new();
    for (i, (e, k)) in sent.into_iter().zip(keep).enumerate() {
        if !k {
            continue;
        }
        let jitter = if c.reorder > 0 {
            rng.gen_range(0.0..c.reorder as f64)
        } else {
            0.0
        };
        if rng.gen_bool(c.dup_p) {
            recv.push((i as f64 + rng.gen_range(0.0..10.0), e.clone()));
        }
        recv.push((i as f64 + jitter, e));
    }
    recv.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    (sources, recv.into_iter().map(|x| x.1).collect())
}

/// Independent oracle: which missing sources do the received equations determine?
fn determined(received: &HashMap<Esi, Vec<u8>>, repairs: &[RepairInfo], m: u8) -> HashSet<Esi> {
    // Columns: the distinct unknown ESIs appearing in any repair window.
    let mut cols: Vec<Esi> = Vec::new();
    let mut col_of: HashMap<Esi, usize> = HashMap::new();
    let mut matrix: Vec<Vec<u8>> = Vec::new();
    let mut rows_sparse = Vec::new();
    for info in repairs {
        let mut cc = vec![0u8; info.nss as usize];
        generate_coding_coefficients(info.repair_key, &mut cc, info.dt, m).unwrap();
        let mut row = Vec::new();
        for (j, &c) in cc.iter().enumerate() {
            let e = info.first_esi.wrapping_add(j as u32);
            if c != 0 && !received.contains_key(&e) {
                let k = *col_of.entry(e).or_insert_with(|| {
                    cols.push(e);
                    cols.len() - 1
                });
                row.push((k, c));
            }
        }
        rows_sparse.push(row);
    }
    for row in rows_sparse {
        let mut dense = vec![0u8; cols.len()];
        for (k, c) in row {
            dense[k] ^= c;
        }
        matrix.push(dense);
    }
    // Gauss-Jordan.
    let mut rank = 0;
    for col in 0..cols.len() {
        let Some(p) = (rank..matrix.len()).find(|&r| matrix[r][col] != 0) else {
            continue;
        };
        matrix.swap(rank, p);
        let inv = hirt_gf::inv(matrix[rank][col]);
        for x in matrix[rank].iter_mut() {
            *x = hirt_gf::mul(*x, inv);
        }
        for r in 0..matrix.len() {
            if r != rank && matrix[r][col] != 0 {
                let f = matrix[r][col];
                let pivot_row = matrix[rank].clone();
                for (x, y) in matrix[r].iter_mut().zip(&pivot_row) {
                    *x ^= hirt_gf::mul(f, *y);
                }
            }
        }
        rank += 1;
    }
    let mut out = HashSet::new();
    for row in &matrix[..rank] {
        let nz: Vec<usize> = (0..cols.len()).filter(|&k| row[k] != 0).collect();
        if nz.len() == 1 {
            out.insert(cols[nz[0]]);
        }
    }
    out
}

struct Run {
    stats: DecoderStats,
    recovered: HashMap<Esi, Vec<u8>>,
    received: HashMap<Esi, Vec<u8>>,
    repairs: Vec<RepairInfo>,
}

/// Feeds the events; checks bit-exactness and single delivery on the way. With `check_each`,
/// also checks rank-optimality after every arrival (the "as soon as decodable" property).
fn run(c: &Case, check_each: bool) -> Result<Run, TestCaseError> {
    run_growing(c, check_each, None)
}

/// [`run`], with the decoder's span grown to repair lag `lag` before event `at` when `grow` is
/// `Some((at, lag))`.
fn run_growing(
    c: &Case,
    check_each: bool,
    grow: Option<(usize, u32)>,
) -> Result<Run, TestCaseError> {
    let (sources, events) = build(c);
    let cfg = RlcConfig {
        window: c.window,
        dt: c.dt,
        field: c.field,
    };
    let mut dec = RlcDecoder::new(cfg);
    let mut r = Run {
        stats: DecoderStats::default(),
        recovered: HashMap::new(),
        received: HashMap::new(),
        repairs: Vec::new(),
    };
    for (i, ev) in events.iter().enumerate() {
        if let Some((_, lag)) = grow.filter(|&(at, _)| at == i) {
            dec.grow_repair_lag(lag);
        }
        let mut got: Vec<(Esi, Vec<u8>)> = Vec::new();
        match ev {
            Ev::Src(esi, data) => {
                let out = dec
                    .on_source(*esi, data, &mut |e, d| got.push((e, d.to_vec())))
                    .unwrap();
                let dup = r.received.contains_key(esi) || r.recovered.contains_key(esi);
                prop_assert_eq!(
                    out,
                    if dup {
                        SourceOutcome::Duplicate
                    } else {
                        SourceOutcome::New
                    }
                );
                if !dup {
                    // Only sources that arrived before any recovery count as received for the
                    // oracle; a late copy of a recovered one adds no information.
                    r.received.insert(*esi, data.clone());
                }
            }
            Ev::Rep(info, p) => {
                dec.on_repair(info, p, &mut |e, d| got.push((e, d.to_vec())))
                    .unwrap();
                r.repairs.push(*info);
            }
        }
        for (e, d) in got {
            prop_assert!(
                !r.received.contains_key(&e),
                "recovered {} which was received",
                e
            );
            prop_assert_eq!(Some(&d), sources.get(&e), "bytes of {}", e);
            prop_assert!(r.recovered.insert(e, d).is_none(), "{} recovered twice", e);
        }
        if check_each {
            r.stats = dec.stats();
            check_optimal(c, &r)?;
        }
    }
    r.stats = dec.stats();
    Ok(r)
}

/// Recovered == determined. The one documented exception is an equation dropped for age (the
/// memory bound); then only recovered ⊆ determined can be asked.
fn check_optimal(c: &Case, r: &Run) -> Result<(), TestCaseError> {
    let want = determined(&r.received, &r.repairs, c.field.m());
    let got: HashSet<Esi> = r.recovered.keys().copied().collect();
    if r.stats.rows_aged_out == 0 {
        prop_assert_eq!(got, want);
    } else {
        prop_assert!(got.is_subset(&want));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6000, ..ProptestConfig::default() })]
    #[test]
    fn rank_optimal_and_bit_exact(c in case_strategy(48, 16)) {
        let r = run(&c, false)?;
        check_optimal(&c, &r)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn recovers_as_soon_as_determined(c in case_strategy(20, 8)) {
        run(&c, true)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
    #[test]
    fn larger_windows(c in case_strategy(60, 30)) {
        let r = run(&c, false)?;
        check_optimal(&c, &r)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
    /// Streams much longer than the tracked span: old symbols and equations are forgotten, yet
    /// decoding stays exact and rank-optimal (equations detached from forgotten pivots).
    #[test]
    fn long_streams_with_eviction(mut c in case_strategy(8, 12), n in 200usize..600) {
        c.n = n;
        c.reorder = c.reorder.min(3);
        let r = run(&c, false)?;
        check_optimal(&c, &r)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
    /// A span grown mid-stream (the decoder learning that repairs trail their sources) keeps
    /// every recovery exact and single, never recovers a received source, and loses nothing
    /// the equations determine but what the growth drops (detached equations).
    #[test]
    fn a_span_grown_mid_stream_stays_exact(
        mut c in case_strategy(8, 12),
        n in 100usize..400,
        at in 0usize..1000,
        lag in 0u32..300,
    ) {
        c.n = n;
        c.reorder = c.reorder.min(3);
        let r = run_growing(&c, false, Some((at, lag)))?;
        let want = determined(&r.received, &r.repairs, c.field.m());
        let got: HashSet<Esi> = r.recovered.keys().copied().collect();
        prop_assert!(got.is_subset(&want));
        if r.stats.rows_aged_out == 0 && r.stats.rows_evicted == 0 {
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn recovers_everything_at_moderate_loss() {
    // A sanity anchor for the properties above: at 5% loss with 20% repairs and W = 50, every
    // lost source is recovered (not a property of all seeds, but of this fixed one).
    let c = Case {
        seed: 7,
        window: 50,
        dt: 15,
        field: Field::Gf256,
        n: 1000,
        repair_p: 0.2,
        loss: Loss::Uniform(0.05),
        reorder: 0,
        dup_p: 0.0,
        start: u32::MAX - 100,
        vary_window: false,
    };
    let r = run(&c, false).unwrap();
    let lost = (0..1000u32)
        .filter(|i| !r.received.contains_key(&c.start.wrapping_add(*i)))
        .count();
    assert!(lost > 20);
    assert!(
        r.recovered.len() + 5 >= lost,
        "lost {lost}, recovered {}",
        r.recovered.len()
    );
}

#[test]
fn rank_optimal_on_long_streams_despite_eviction() {
    // Streams 10x longer than the tracked span, at loss rates near the repair rate (so many
    // equations stay pending and some are evicted): forgetting must not cost any symbol the
    // full system of equations determines, because no later repair reaches back that far.
    for (seed, window, loss, burst) in [
        (1, 100u16, 0.03, false),
        (2, 30, 0.08, false),
        (3, 64, 0.0, true),
    ] {
        let c = Case {
            seed,
            window,
            dt: if seed == 2 { 9 } else { 15 },
            field: Field::Gf256,
            n: 3000,
            repair_p: 0.04,
            loss: if burst {
                Loss::Burst { len: 12, count: 40 }
            } else {
                Loss::Uniform(loss)
            },
            reorder: 2,
            dup_p: 0.01,
            start: u32::MAX - 1000,
            vary_window: false,
        };
        let r = run(&c, false).unwrap();
        assert!(!r.recovered.is_empty());
        check_optimal(&c, &r).unwrap();
    }
}

#[test]
fn rank_optimal_at_bench_operating_point() {
    // The operating point of the `rlc_speed` figures (W = 200, 1% loss, repairs
    // at 1.2x the loss) with small symbols: the decoder recovers exactly what the oracle says is
    // determined, so a recovery ratio below 100% there is the code's, not the decoder's.
    let c = Case {
        seed: 11,
        window: 200,
        dt: 15,
        field: Field::Gf256,
        n: 20_000,
        repair_p: 0.012,
        loss: Loss::Uniform(0.01),
        reorder: 0,
        dup_p: 0.0,
        start: 0,
        vary_window: false,
    };
    let r = run(&c, false).unwrap();
    let lost = 20_000 - r.received.len();
    eprintln!("lost {lost}, recovered {}", r.recovered.len());
    check_optimal(&c, &r).unwrap();
}
