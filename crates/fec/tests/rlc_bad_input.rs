//! Malformed symbols are refused with a typed error and leave the decoder's state intact.

use hirt_fec::rlc::{RlcConfig, RlcDecoder, RlcEncoder};
use hirt_fec::MAX_SYMBOL_LEN;
use hirt_fec::{DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome};

fn noop() -> impl FnMut(Esi, &[u8]) {
    |_, _| {}
}

/// A decoder holding sources 100..110 except 103 and 107, and one repair over 100..110.
fn primed() -> (RlcDecoder, Vec<(RepairInfo, Vec<u8>)>) {
    let cfg = RlcConfig::rlc(16);
    let mut enc = RlcEncoder::new(cfg);
    let mut dec = RlcDecoder::new(cfg);
    let mut repairs = Vec::new();
    for esi in 100..110u32 {
        let data = vec![esi as u8; 10 + esi as usize % 5];
        enc.push_source(esi, &data, &mut |_, _| {});
        if esi != 103 && esi != 107 {
            dec.on_source(esi, &data, &mut noop()).unwrap();
        }
    }
    for _ in 0..3 {
        enc.repair_now(&mut |i, p| repairs.push((i, p.to_vec())));
    }
    (dec, repairs)
}

fn bad(info: RepairInfo, payload: &[u8], want: DecodeError) {
    let (mut dec, repairs) = primed();
    let before = (
        dec.pending_equations(),
        dec.unknown_symbols(),
        dec.stats(),
        dec.symbol_ops(),
    );
    assert_eq!(
        dec.on_repair(&info, payload, &mut noop()),
        Err(want),
        "{info:?}"
    );
    assert_eq!(
        (
            dec.pending_equations(),
            dec.unknown_symbols(),
            dec.stats(),
            dec.symbol_ops()
        ),
        before
    );
    // Still decodes afterwards: two good repairs recover 103 and 107 exactly.
    let mut got = Vec::new();
    for (i, p) in &repairs[..2] {
        dec.on_repair(i, p, &mut |e, d| got.push((e, d.to_vec())))
            .unwrap();
    }
    got.sort();
    assert_eq!(got, vec![(103, vec![103u8; 13]), (107, vec![107u8; 12])]);
}

#[test]
fn malformed_repairs_are_refused_without_side_effects() {
    let (_, repairs) = primed();
    let (good, payload) = repairs[0].clone();
    bad(
        RepairInfo { nss: 0, ..good },
        &payload,
        DecodeError::InvalidNss,
    );
    bad(
        RepairInfo { nss: 17, ..good },
        &payload,
        DecodeError::InvalidNss,
    );
    bad(
        RepairInfo { nss: 4096, ..good },
        &payload,
        DecodeError::InvalidNss,
    );
    bad(
        RepairInfo { dt: 16, ..good },
        &payload,
        DecodeError::InvalidParameters,
    );
    bad(
        RepairInfo { dt: 255, ..good },
        &payload,
        DecodeError::InvalidParameters,
    );
    bad(
        RepairInfo { stride: 2, ..good },
        &payload,
        DecodeError::InvalidParameters,
    );
    bad(
        RepairInfo {
            scheme: SchemeId::Xor,
            ..good
        },
        &payload,
        DecodeError::WrongScheme,
    );
    bad(
        RepairInfo {
            scheme: SchemeId::Unknown(9),
            ..good
        },
        &payload,
        DecodeError::WrongScheme,
    );
    bad(
        good,
        &vec![0u8; MAX_SYMBOL_LEN + 3],
        DecodeError::SymbolTooLong,
    );
    bad(good, &[], DecodeError::BadLength);
    bad(good, &[1], DecodeError::BadLength);
    // Shorter than a known source it covers: cannot come from a correct encoder.
    bad(good, &payload[..8], DecodeError::BadLength);
    // Far past, far future, and wrapped-around ESIs.
    bad(
        RepairInfo {
            first_esi: 0,
            ..good
        },
        &payload,
        DecodeError::OutOfRange,
    );
    bad(
        RepairInfo {
            first_esi: 100u32.wrapping_sub(1000),
            ..good
        },
        &payload,
        DecodeError::OutOfRange,
    );
    bad(
        RepairInfo {
            first_esi: 100_000,
            ..good
        },
        &payload,
        DecodeError::OutOfRange,
    );
    bad(
        RepairInfo {
            first_esi: 100 + (1 << 31),
            ..good
        },
        &payload,
        DecodeError::OutOfRange,
    );
    bad(
        RepairInfo {
            first_esi: u32::MAX - 3,
            ..good
        },
        &payload,
        DecodeError::OutOfRange,
    );
}

#[test]
fn oversized_source_is_refused() {
    let (mut dec, _) = primed();
    let u = dec.unknown_symbols();
    assert_eq!(
        dec.on_source(103, &vec![0; MAX_SYMBOL_LEN + 1], &mut noop()),
        Err(DecodeError::SymbolTooLong)
    );
    assert_eq!(dec.unknown_symbols(), u);
    assert_eq!(
        dec.on_source(103, &[0; MAX_SYMBOL_LEN], &mut noop()),
        Ok(SourceOutcome::New)
    );
}

#[test]
fn stale_and_duplicate_sources() {
    let (mut dec, _) = primed();
    assert_eq!(
        dec.on_source(101, &[1], &mut noop()),
        Ok(SourceOutcome::Duplicate)
    );
    assert_eq!(
        dec.on_source(100u32.wrapping_sub(1000), &[1], &mut noop()),
        Ok(SourceOutcome::Stale)
    );
    // A jump far ahead (a long outage) is accepted and restarts the span.
    assert_eq!(
        dec.on_source(1_000_000, &[1], &mut noop()),
        Ok(SourceOutcome::New)
    );
    assert_eq!(
        dec.on_source(105, &[1], &mut noop()),
        Ok(SourceOutcome::Stale)
    );
}

#[test]
fn forged_repair_cannot_deliver_garbage_lengths() {
    // A repair whose payload solves to a length field past its end is dropped, not delivered.
    let cfg = RlcConfig::xor(4);
    let mut dec = RlcDecoder::new(cfg);
    dec.on_source(0, &[1, 2], &mut noop()).unwrap();
    let info = RepairInfo {
        scheme: SchemeId::Xor,
        first_esi: 0,
        nss: 2,
        stride: 1,
        repair_key: 0,
        dt: 15,
    };
    // Known source 0 is [0,2,1,2]; solve gives ESI 1 = payload ^ that = [0xff, 0xff, ..].
    let mut delivered = false;
    dec.on_repair(&info, &[0xff, 0xfd, 1, 2], &mut |_, _| delivered = true)
        .unwrap();
    assert!(!delivered);
    assert_eq!(dec.stats().bad_recoveries, 1);
    assert_eq!(dec.pending_equations(), 0);
}

#[test]
fn memory_is_bounded_under_repair_flood() {
    // Many repairs over a window where everything is lost: at most one equation per unknown.
    let cfg = RlcConfig::rlc(50);
    let mut enc = RlcEncoder::new(cfg);
    let mut dec = RlcDecoder::new(cfg);
    for esi in 0..5000u32 {
        enc.push_source(esi, &[esi as u8; 20], &mut |_, _| {});
        if esi % 100 < 60 {
            continue; // lose a long burst
        }
        for _ in 0..3 {
            enc.repair_now(&mut |i, p| {
                dec.on_repair(&i, p, &mut noop()).unwrap();
            });
        }
        assert!(dec.pending_equations() <= dec.span() as usize);
    }
}
