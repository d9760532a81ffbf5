#![no_main]
//! Feeds the block decoders (block XOR, layered interleaving, Reed-Solomon) an arbitrary
//! sequence of source and repair symbols. Properties: no panic, every ESI delivered at most
//! once, and valid repairs produced by the matching encoder mixed into the stream.
//!
//! Input: byte 0 picks the code and its parameters; then records:
//! `0 | esi_delta u8 | len u8 | data`  (source, ESI = last + delta - 8)
//! `1 | scheme | first_delta u8 | nss u16 | stride u16 | key u16 | dt | plen u16 | payload` (repair)
//! `2 | n u8` (encode n sources with the real encoder and deliver all but the ones whose bit is
//! set in the next byte).

use std::collections::HashSet;

use hirt_fec::block_xor::{BlockXorDecoder, BlockXorEncoder};
use hirt_fec::layered::{LayeredDecoder, LayeredEncoder};
use hirt_fec::rs::{RsDecoder, RsEncoder};
use hirt_fec::{Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome};
use libfuzzer_sys::fuzz_target;

struct Cur<'a>(&'a [u8]);

impl Cur<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cur(data);
    let Some(sel) = c.u8() else { return };
    let (mut enc, mut dec): (Box<dyn FecEncoder>, Box<dyn FecDecoder>) = match sel % 3 {
        0 => {
            let r = 1 + (sel as u16 >> 2) % 16;
            (
                Box::new(BlockXorEncoder::new(r)),
                Box::new(BlockXorDecoder::new(16)),
            )
        }
        1 => {
            let r = 2 + (sel as u16 >> 2) % 6;
            let il = [1, 3 + (sel as u16 >> 5)];
            (
                Box::new(LayeredEncoder::new(r, &il)),
                Box::new(LayeredDecoder::new(r, &il)),
            )
        }
        _ => {
            let k = 1 + (sel as u16 >> 2) % 8;
            let m = 1 + (sel as u16 >> 5) % 4;
            (
                Box::new(RsEncoder::new(k, m)),
                Box::new(RsDecoder::new(k, m)),
            )
        }
    };
    let mut delivered: HashSet<Esi> = HashSet::new();
    let mut last: Esi = 0;
    let mut next_enc: Esi = 0;
    let check = |e: Esi, set: &mut HashSet<Esi>| assert!(set.insert(e), "ESI {e} delivered twice");
    while let Some(op) = c.u8() {
        let mut rec = Vec::new();
        match op % 3 {
            0 => {
                let Some(d) = c.u8() else { return };
                let Some(len) = c.u8() else { return };
                let esi = last.wrapping_add(d as u32).wrapping_sub(8);
                let bytes = c.take(len as usize).to_vec();
                if let Ok(SourceOutcome::New) = dec.on_source(esi, &bytes, &mut |e, _| rec.push(e))
                {
                    // A forged repair may have "recovered" garbage for this ESI earlier; then
                    // the decoder must say Duplicate, never New.
                    check(esi, &mut delivered);
                }
                last = esi;
            }
            1 => {
                let (Some(s), Some(fd), Some(nss), Some(stride), Some(key), Some(dt), Some(pl)) =
                    (c.u8(), c.u8(), c.u16(), c.u16(), c.u16(), c.u8(), c.u16())
                else {
                    return;
                };
                let info = RepairInfo {
                    scheme: SchemeId::from_u8(s % 8),
                    first_esi: last.wrapping_add(fd as u32).wrapping_sub(128),
                    nss: nss % 64,
                    stride: stride % 32,
                    repair_key: key % 8,
                    dt: dt % 17,
                };
                let p = c.take(pl as usize % 600).to_vec();
                let _ = dec.on_repair(&info, &p, &mut |e, _| rec.push(e));
            }
            _ => {
                let Some(n) = c.u8() else { return };
                let Some(mask) = c.u8() else { return };
                let mut evs: Vec<(Option<RepairInfo>, Esi, Vec<u8>)> = Vec::new();
                for i in 0..(n % 16) as u32 {
                    let esi = next_enc;
                    next_enc = next_enc.wrapping_add(1);
                    let bytes = vec![i as u8; (i as usize * 13) % 50];
                    if mask & (1 << (i % 8)) == 0 {
                        evs.push((None, esi, bytes.clone()));
                    }
                    enc.push_source(esi, &bytes, &mut |info, p| {
                        evs.push((Some(info), 0, p.to_vec()))
                    });
                }
                enc.repair_now(&mut |info, p| evs.push((Some(info), 0, p.to_vec())));
                for (info, esi, b) in evs {
                    match info {
                        None => {
                            if let Ok(SourceOutcome::New) =
                                dec.on_source(esi, &b, &mut |e, _| rec.push(e))
                            {
                                check(esi, &mut delivered);
                            }
                        }
                        Some(info) => {
                            let _ = dec.on_repair(&info, &b, &mut |e, _| rec.push(e));
                        }
                    }
                }
                last = next_enc;
            }
        }
        for e in rec {
            check(e, &mut delivered);
        }
    }
});
