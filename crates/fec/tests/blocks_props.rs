//! Property tests for the block codes (block XOR, layered interleaving, Reed-Solomon): random
//! symbols, random losses of sources and repairs, local reordering. Every case checks that
//! (1) every ESI is delivered at most once and recovered bytes are bit-exact, and (2) the
//! decoder recovers exactly what the code allows, computed independently:
//! - XOR codes: a brute-force peeling over the final set of received equations;
//! - Reed-Solomon: a block is recovered iff its losses <= its received repairs.

use std::collections::{BTreeMap, BTreeSet};

use hirt_fec::block_xor::{BlockXorDecoder, BlockXorEncoder};
use hirt_fec::layered::{LayeredDecoder, LayeredEncoder};
use hirt_fec::rs::{RsDecoder, RsEncoder};
use hirt_fec::{Esi, FecDecoder, FecEncoder, RepairInfo, SourceOutcome};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
enum Ev {
    Src(Esi),
    Rep(RepairInfo, Vec<u8>),
}

fn symbols(rng: &mut ChaCha8Rng, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let len = if rng.gen_ratio(1, 20) {
                rng.gen_range(0..300)
            } else {
                rng.gen_range(0..40)
            };
            (0..len).map(|_| rng.gen()).collect()
        })
        .collect()
}

/// Drops events with probability `p` (sources and repairs alike) and swaps neighbours at
/// random (local reordering).
fn channel(rng: &mut ChaCha8Rng, evs: Vec<Ev>, p: f64) -> (Vec<Ev>, BTreeSet<Esi>) {
    let mut out: Vec<Ev> = evs.into_iter().filter(|_| !rng.gen_bool(p)).collect();
    for i in 1..out.len() {
        if rng.gen_bool(0.3) {
            out.swap(i - 1, i);
        }
    }
    let got = out
        .iter()
        .filter_map(|e| if let Ev::Src(s) = e { Some(*s) } else { None })
        .collect();
    (out, got)
}

/// Feeds the events; returns every delivered ESI with its bytes, checking delivery-once.
fn run(d: &mut dyn FecDecoder, evs: &[Ev], syms: &[Vec<u8>], base: Esi) -> BTreeMap<Esi, Vec<u8>> {
    let mut delivered = BTreeMap::new();
    for e in evs {
        let mut rec: Vec<(Esi, Vec<u8>)> = Vec::new();
        match e {
            Ev::Src(s) => {
                let i = s.wrapping_sub(base) as usize;
                let out = d
                    .on_source(*s, &syms[i], &mut |e, b| rec.push((e, b.to_vec())))
                    .unwrap();
                if out == SourceOutcome::New {
                    assert!(delivered.insert(*s, syms[i].clone()).is_none(), "{s} twice");
                } else {
                    assert_eq!(out, SourceOutcome::Duplicate);
                    assert!(delivered.contains_key(s));
                }
            }
            Ev::Rep(info, p) => d
                .on_repair(info, p, &mut |e, b| rec.push((e, b.to_vec())))
                .unwrap(),
        }
        for (e, b) in rec {
            let i = e.wrapping_sub(base) as usize;
            assert_eq!(b, syms[i], "recovered {e} differs");
            assert!(delivered.insert(e, b).is_none(), "{e} delivered twice");
        }
    }
    delivered
}

/// Independent brute-force peeling: repeatedly use any repair with exactly one unknown.
fn peel(known: &BTreeSet<Esi>, evs: &[Ev]) -> BTreeSet<Esi> {
    let mut k = known.clone();
    loop {
        let mut progress = false;
        for e in evs {
            if let Ev::Rep(info, _) = e {
                let unknown: Vec<Esi> = (0..info.nss as u32)
                    .map(|j| info.first_esi.wrapping_add(j * info.stride as u32))
                    .filter(|s| !k.contains(s))
                    .collect();
                if unknown.len() == 1 {
                    k.insert(unknown[0]);
                    progress = true;
                }
            }
        }
        if !progress {
            return k;
        }
    }
}

fn encode(enc: &mut dyn FecEncoder, syms: &[Vec<u8>], base: Esi, flush: &[bool]) -> Vec<Ev> {
    let mut evs = Vec::new();
    for (i, s) in syms.iter().enumerate() {
        if flush.get(i) == Some(&true) {
            enc.repair_now(&mut |info, p| evs.push(Ev::Rep(info, p.to_vec())));
        }
        let esi = base.wrapping_add(i as u32);
        evs.push(Ev::Src(esi));
        enc.push_source(esi, s, &mut |info, p| evs.push(Ev::Rep(info, p.to_vec())));
    }
    enc.repair_now(&mut |info, p| evs.push(Ev::Rep(info, p.to_vec())));
    evs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn block_xor_recovers_exactly_single_losses(seed: u64, base: u32, p in 0.0f64..0.4) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = rng.gen_range(1..120);
        let syms = symbols(&mut rng, n);
        let mut r = rng.gen_range(1..12u16);
        let mut enc = BlockXorEncoder::new(r);
        let mut changes = Vec::new();
        for i in 0..n {
            if rng.gen_ratio(1, 15) {
                r = rng.gen_range(1..12);
                changes.push((i, r));
            }
        }
        let evs = {
            let mut ci = 0;
            let mut evs = Vec::new();
            for (i, s) in syms.iter().enumerate() {
                while ci < changes.len() && changes[ci].0 == i {
                    enc.set_block(changes[ci].1);
                    ci += 1;
                }
                let esi = base.wrapping_add(i as u32);
                evs.push(Ev::Src(esi));
                enc.push_source(esi, s, &mut |info, pl| evs.push(Ev::Rep(info, pl.to_vec())));
            }
            enc.repair_now(&mut |info, pl| evs.push(Ev::Rep(info, pl.to_vec())));
            evs
        };
        // Blocks tile the ESI range without gaps or overlaps.
        let mut next = base;
        for e in &evs {
            if let Ev::Rep(info, _) = e {
                prop_assert_eq!(info.first_esi, next);
                next = next.wrapping_add(info.nss as u32);
            }
        }
        prop_assert_eq!(next, base.wrapping_add(n as u32));
        let (rx, got) = channel(&mut rng, evs, p);
        let mut d = BlockXorDecoder::new(16);
        let delivered = run(&mut d, &rx, &syms, base);
        let want = peel(&got, &rx);
        prop_assert_eq!(delivered.keys().copied().collect::<BTreeSet<_>>(), want);
    }

    #[test]
    fn layered_matches_brute_force_peeling(seed: u64, base: u32, p in 0.0f64..0.5) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = rng.gen_range(1..50);
        let syms = symbols(&mut rng, n);
        let r = rng.gen_range(2..6u16);
        let c = rng.gen_range(1..=3usize);
        let mut il = vec![1u16];
        while il.len() < c {
            let last = *il.last().unwrap();
            il.push(rng.gen_range(last + 1..last + 8));
        }
        let mut enc = LayeredEncoder::new(r, &il);
        // Sparse traffic: the controller sometimes asks for a repair mid-block (partial flush).
        // At most 5 flushes, so the stored repairs never exceed the decoder's cap
        // (4 * sum(I) + 64) and the comparison with unbounded peeling stays exact.
        let mut budget = 5;
        let flush: Vec<bool> = (0..n)
            .map(|_| {
                let f = budget > 0 && rng.gen_ratio(1, 12);
                budget -= f as i32;
                f
            })
            .collect();
        let evs = encode(&mut enc, &syms, base, &flush);
        let (rx, got) = channel(&mut rng, evs, p);
        let mut d = LayeredDecoder::new(r, &il);
        let delivered = run(&mut d, &rx, &syms, base);
        let want = peel(&got, &rx);
        prop_assert_eq!(delivered.keys().copied().collect::<BTreeSet<_>>(), want);
    }

    #[test]
    fn reed_solomon_recovers_every_block_with_at_most_m_losses(
        seed: u64, base: u32, p in 0.0f64..0.5,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = rng.gen_range(1..80);
        let syms = symbols(&mut rng, n);
        let k = rng.gen_range(1..10u16);
        let m = rng.gen_range(1..5u16);
        let mut enc = RsEncoder::new(k, m);
        // Sparse traffic: the controller sometimes asks for a repair mid-block (partial flush).
        let flush: Vec<bool> = (0..n).map(|_| rng.gen_ratio(1, 12)).collect();
        let evs = encode(&mut enc, &syms, base, &flush);
        let (rx, got) = channel(&mut rng, evs.clone(), p);
        let mut d = RsDecoder::new(k, m);
        let delivered = run(&mut d, &rx, &syms, base);
        // Expected: per block (from the emitted repairs), recovered iff losses <= repairs got.
        let mut want = got.clone();
        let mut blocks: BTreeMap<Esi, (u16, usize)> = BTreeMap::new();
        for e in &evs {
            if let Ev::Rep(info, _) = e {
                blocks.insert(info.first_esi, (info.nss, 0));
            }
        }
        for e in &rx {
            if let Ev::Rep(info, _) = e {
                blocks.get_mut(&info.first_esi).unwrap().1 += 1;
            }
        }
        for (first, (nss, reps)) in blocks {
            let members: Vec<Esi> = (0..nss as u32).map(|j| first.wrapping_add(j)).collect();
            let lost = members.iter().filter(|s| !got.contains(s)).count();
            if lost <= reps {
                want.extend(members);
            }
        }
        prop_assert_eq!(delivered.keys().copied().collect::<BTreeSet<_>>(), want);
    }
}

/// Fully lost blocks of exactly m sources come back through m repairs; m+1 losses do not.
#[test]
fn reed_solomon_boundary() {
    let (k, m) = (10u16, 4u16);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let syms = symbols(&mut rng, k as usize);
    let mut enc = RsEncoder::new(k, m);
    let evs = encode(&mut enc, &syms, 0, &[]);
    for losses in [m as usize, m as usize + 1] {
        let rx: Vec<Ev> = evs
            .iter()
            .filter(|e| !matches!(e, Ev::Src(s) if (*s as usize) < losses))
            .cloned()
            .collect();
        let mut d = RsDecoder::new(k, m);
        let delivered = run(&mut d, &rx, &syms, 0);
        assert_eq!(
            delivered.len(),
            if losses <= m as usize {
                k as usize
            } else {
                k as usize - losses
            }
        );
    }
}
