//! Systematic block Reed-Solomon (k, m), like UDPspeeder's `-f k:m`: every block of k source
//! symbols gets m repair symbols, and any k of the k + m symbols recover the block (MDS).
//!
//! The code is a Cauchy matrix over GF(2^8) (polynomial 0x11D, the `hirt_gf` kernels): repair j
//! of a block is `sum_i C[j][i] * s_i` with `C[j][i] = 1 / (x_j + y_i)`, `x_j = j`,
//! `y_i = 0x80 | i` (j < 128, i < 128, so all x and y are distinct). Every square submatrix of
//! a Cauchy matrix is invertible, hence any e missing sources are solved by any e repairs, and a
//! *partial* block of k' < k sources (flushed by `repair_now` for sparse traffic) uses the
//! first k' columns of the same matrix. Symbols are length-protected and zero-padded to the
//! longest in the block ([`crate::symbol`]).
//!
//! Why not the `reed-solomon-erasure` crate: it needs equal-size shards and a codec object per
//! (k, m); flushing partial blocks would build a new one per k', and encoding incrementally (one
//! source at a time, no copy of the block kept) is not in its API. The Cauchy code is a few
//! dozen lines on our SIMD region kernels.
//!
//! Repair header use: `first_esi`, `nss` = sources in the block, `stride` = 1, `repair_key` =
//! repair index j, `dt` = 15.

use crate::layered::{Pos, SymbolStore};
use crate::scheme::{
    DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome,
};
use crate::symbol::{decode_len, LEN_FIELD, MAX_PROTECTED_LEN};
use crate::MAX_SYMBOL_LEN;

/// Largest k.
pub const MAX_K: u16 = 128;
/// Largest m.
pub const MAX_M: u16 = 128;

/// The Cauchy coefficient of repair `j` for source position `i`.
fn coef(j: u16, i: u16) -> u8 {
    hirt_gf::inv((j as u8) ^ (0x80 | i as u8))
}

fn check_config(k: u16, m: u16) {
    assert!((1..=MAX_K).contains(&k), "k must be in 1..={MAX_K}");
    assert!((1..=MAX_M).contains(&m), "m must be in 1..={MAX_M}");
}

/// `dst ^= c * protected(data)`, growing `dst` with zeros as needed.
fn mul_add_protected(dst: &mut Vec<u8>, data: &[u8], c: u8) {
    let need = LEN_FIELD + data.len();
    if dst.len() < need {
        dst.resize(need, 0);
    }
    let l = (data.len() as u16).to_be_bytes();
    dst[0] ^= hirt_gf::mul(c, l[0]);
    dst[1] ^= hirt_gf::mul(c, l[1]);
    hirt_gf::mul_add(&mut dst[LEN_FIELD..need], data, c);
}

/// Reed-Solomon encoder.
#[derive(Debug, Clone)]
pub struct RsEncoder {
    k: u16,
    first: Esi,
    count: u16,
    parity: Vec<Vec<u8>>,
}

impl RsEncoder {
    /// m repairs per k sources. Panics (configuration error) unless `1 <= k <= 128` and
    /// `1 <= m <= 128`.
    pub fn new(k: u16, m: u16) -> Self {
        check_config(k, m);
        RsEncoder {
            k,
            first: 0,
            count: 0,
            parity: vec![Vec::new(); m as usize],
        }
    }

    fn flush(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        let len = self.parity.iter().map(Vec::len).max().unwrap_or(0);
        for (j, p) in self.parity.iter_mut().enumerate() {
            p.resize(len, 0);
            let info = RepairInfo {
                scheme: SchemeId::ReedSolomon,
                first_esi: self.first,
                nss: self.count,
                stride: 1,
                repair_key: j as u16,
                dt: 15,
            };
            repairs(info, p);
            p.clear();
        }
        self.count = 0;
    }
}

impl FecEncoder for RsEncoder {
    fn push_source(&mut self, esi: Esi, data: &[u8], repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        if self.count > 0 && self.first.wrapping_add(self.count as u32) != esi {
            self.flush(repairs);
        }
        if self.count == 0 {
            self.first = esi;
        }
        for (j, p) in self.parity.iter_mut().enumerate() {
            mul_add_protected(p, data, coef(j as u16, self.count));
        }
        self.count += 1;
        if self.count >= self.k {
            self.flush(repairs);
        }
    }

    /// Flushes the partial block: emits all m repairs over the k' < k sources pushed so far.
    fn repair_now(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        if self.count == 0 {
            return false;
        }
        self.flush(repairs);
        true
    }

    fn unprotected(&self) -> usize {
        self.count as usize
    }
}

#[derive(Debug, Clone, Default)]
struct Block {
    first: Esi,
    nss: u16,
    len: usize,
    /// (repair index, payload)
    repairs: Vec<(u16, Vec<u8>)>,
}

/// Reed-Solomon decoder.
#[derive(Debug, Clone)]
pub struct RsDecoder {
    k: u16,
    m: u16,
    store: SymbolStore,
    blocks: Vec<Block>,
    free: Vec<Vec<u8>>,
    max_blocks: usize,
    scratch: Vec<Vec<u8>>,
    missing: Vec<u16>,
    /// `[A | I]` rows for the inversion, kept to avoid allocating per decoded block.
    mat: Vec<[u8; 2 * MAX_M as usize]>,
    ops: u64,
}

impl RsDecoder {
    /// Decoder for blocks of up to k sources with up to m repairs. Keeps the last `16 * k`
    /// (at least 256, power of two) source symbols and at most 32 incomplete blocks. Panics on
    /// the same configuration errors as [`RsEncoder::new`].
    pub fn new(k: u16, m: u16) -> Self {
        check_config(k, m);
        RsDecoder {
            k,
            m,
            store: SymbolStore::new((16 * k as usize).max(256)),
            blocks: Vec::new(),
            free: Vec::new(),
            max_blocks: 32,
            scratch: Vec::new(),
            missing: Vec::new(),
            mat: Vec::new(),
            ops: 0,
        }
    }

    fn check(&self, info: &RepairInfo, payload: &[u8]) -> Result<(), DecodeError> {
        if info.scheme != SchemeId::ReedSolomon {
            return Err(DecodeError::WrongScheme);
        }
        if info.nss == 0 || info.nss > self.k {
            return Err(DecodeError::InvalidNss);
        }
        if info.stride != 1 || info.dt != 15 || info.repair_key >= self.m {
            return Err(DecodeError::InvalidParameters);
        }
        if payload.len() > MAX_PROTECTED_LEN {
            return Err(DecodeError::SymbolTooLong);
        }
        if payload.len() < LEN_FIELD {
            return Err(DecodeError::BadLength);
        }
        if let Some(n) = self.store.newest() {
            let cap = self.store.cap();
            let behind_first = n.wrapping_sub(info.first_esi);
            let last = info.first_esi.wrapping_add(info.nss as u32 - 1);
            let ahead_last = last.wrapping_sub(n);
            if (behind_first < 1 << 31 && behind_first >= cap)
                || (ahead_last < 1 << 31 && ahead_last >= cap / 2)
            {
                return Err(DecodeError::OutOfRange);
            }
        }
        if let Some(b) = self.blocks.iter().find(|b| b.first == info.first_esi) {
            if b.nss != info.nss || b.len != payload.len() {
                // Conflicts with the block announced by earlier repairs.
                return Err(DecodeError::InvalidParameters);
            }
        }
        Ok(())
    }

    fn drop_block(&mut self, i: usize) {
        let b = self.blocks.remove(i);
        self.free.extend(b.repairs.into_iter().map(|(_, v)| v));
    }

    /// Decodes block `bi` if it has enough repairs; removes it when it is done or hopeless.
    fn try_decode(&mut self, bi: usize, recovered: &mut dyn FnMut(Esi, &[u8])) {
        let (first, nss, len) = {
            let b = &self.blocks[bi];
            (b.first, b.nss, b.len)
        };
        self.missing.clear();
        for i in 0..nss {
            let esi = first.wrapping_add(i as u32);
            if self.store.pos(esi) == Pos::Behind {
                return self.drop_block(bi);
            }
            if self.store.get(esi).is_none() {
                self.missing.push(i);
            }
        }
        let e = self.missing.len();
        if e == 0 {
            return self.drop_block(bi);
        }
        if e > self.blocks[bi].repairs.len() {
            return;
        }
        while self.scratch.len() < 2 * e {
            self.scratch.push(Vec::new());
        }
        let (rhs, out) = self.scratch[..2 * e].split_at_mut(e);
        let b = &self.blocks[bi];
        // Right-hand sides: the repairs with the known sources' contributions removed.
        for (a, r) in rhs.iter_mut().enumerate() {
            r.clear();
            r.extend_from_slice(&b.repairs[a].1);
        }
        for i in 0..nss {
            let Some(s) = self.store.get(first.wrapping_add(i as u32)) else {
                continue;
            };
            if s.len() > len {
                return self.drop_block(bi);
            }
            for (a, r) in rhs.iter_mut().enumerate() {
                hirt_gf::mul_add(&mut r[..s.len()], s, coef(b.repairs[a].0, i));
                self.ops += 1;
            }
        }
        // Invert the e x e Cauchy submatrix (rows: repairs used, columns: missing positions).
        let mat = &mut self.mat;
        mat.clear();
        mat.resize(e, [0u8; 2 * MAX_M as usize]);
        for (a, row) in mat.iter_mut().enumerate() {
            for (c, &mi) in self.missing.iter().enumerate() {
                row[c] = coef(b.repairs[a].0, mi);
            }
            row[e + a] = 1;
        }
        if !invert(mat, e) {
            return self.drop_block(bi);
        }
        for (c, o) in out.iter_mut().enumerate() {
            o.clear();
            o.resize(len, 0);
            for (a, r) in rhs.iter().enumerate() {
                hirt_gf::mul_add(o, r, mat[c][e + a]);
                self.ops += 1;
            }
        }
        for (c, o) in out.iter().enumerate() {
            let esi = first.wrapping_add(self.missing[c] as u32);
            if let Some(l) = decode_len(o) {
                recovered(esi, &o[LEN_FIELD..LEN_FIELD + l]);
                self.store
                    .insert(esi, |buf| buf.extend_from_slice(&o[..LEN_FIELD + l]));
            }
        }
        self.drop_block(bi);
    }

    fn prune(&mut self) {
        let mut i = 0;
        while i < self.blocks.len() {
            if self.store.pos(self.blocks[i].first) == Pos::Behind {
                self.drop_block(i);
            } else {
                i += 1;
            }
        }
    }
}

/// Gauss-Jordan on `[A | I]` (rows of width 2e): on success the right half holds A^-1.
fn invert(mat: &mut [[u8; 2 * MAX_M as usize]], e: usize) -> bool {
    for col in 0..e {
        let Some(p) = (col..e).find(|&r| mat[r][col] != 0) else {
            return false;
        };
        mat.swap(col, p);
        let iv = hirt_gf::inv(mat[col][col]);
        for x in mat[col][..2 * e].iter_mut() {
            *x = hirt_gf::mul(*x, iv);
        }
        for r in 0..e {
            let f = mat[r][col];
            if r != col && f != 0 {
                let pivot = mat[col];
                for (x, y) in mat[r][..2 * e].iter_mut().zip(&pivot[..2 * e]) {
                    *x ^= hirt_gf::mul(f, *y);
                }
            }
        }
    }
    true
}

impl FecDecoder for RsDecoder {
    fn on_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError> {
        if data.len() > MAX_SYMBOL_LEN {
            return Err(DecodeError::SymbolTooLong);
        }
        match self.store.pos(esi) {
            Pos::Behind => return Ok(SourceOutcome::Stale),
            Pos::In if self.store.get(esi).is_some() => return Ok(SourceOutcome::Duplicate),
            _ => {}
        }
        let slid = self.store.insert(esi, |b| {
            b.extend_from_slice(&(data.len() as u16).to_be_bytes());
            b.extend_from_slice(data);
        });
        if slid {
            self.prune();
        }
        if let Some(bi) = self
            .blocks
            .iter()
            .position(|b| esi.wrapping_sub(b.first) < b.nss as u32)
        {
            self.try_decode(bi, recovered);
        }
        Ok(SourceOutcome::New)
    }

    fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        self.check(info, payload)?;
        let bi = match self.blocks.iter().position(|b| b.first == info.first_esi) {
            Some(bi) => bi,
            None => {
                if self.blocks.len() >= self.max_blocks {
                    self.drop_block(0);
                }
                self.blocks.push(Block {
                    first: info.first_esi,
                    nss: info.nss,
                    len: payload.len(),
                    repairs: Vec::new(),
                });
                self.blocks.len() - 1
            }
        };
        let b = &mut self.blocks[bi];
        if b.repairs.iter().all(|(j, _)| *j != info.repair_key) {
            let mut v = self.free.pop().unwrap_or_default();
            v.clear();
            v.extend_from_slice(payload);
            b.repairs.push((info.repair_key, v));
        }
        self.try_decode(bi, recovered);
        Ok(())
    }

    fn symbol_ops(&self) -> u64 {
        self.ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_k_of_k_plus_m() {
        let (k, m) = (4u16, 3u16);
        let syms: Vec<Vec<u8>> = (0..k)
            .map(|i| vec![0x10 + i as u8; 5 + 3 * i as usize])
            .collect();
        let mut e = RsEncoder::new(k, m);
        let mut reps = Vec::new();
        for (i, s) in syms.iter().enumerate() {
            e.push_source(100 + i as u32, s, &mut |info, p| {
                reps.push((info, p.to_vec()))
            });
        }
        assert_eq!(reps.len(), m as usize);
        // Every subset of 3 lost sources, recovered with every choice of 3 repairs' order.
        for lost in 0..(1u32 << k) {
            if lost.count_ones() > m as u32 {
                continue;
            }
            let mut d = RsDecoder::new(k, m);
            let mut rec = Vec::new();
            for (i, s) in syms.iter().enumerate() {
                if lost & (1 << i) == 0 {
                    d.on_source(100 + i as u32, s, &mut |e, b| rec.push((e, b.to_vec())))
                        .unwrap();
                }
            }
            for (info, p) in reps.iter().rev() {
                d.on_repair(info, p, &mut |e, b| rec.push((e, b.to_vec())))
                    .unwrap();
            }
            rec.sort();
            let want: Vec<_> = (0..k)
                .filter(|i| lost & (1 << i) != 0)
                .map(|i| (100 + i as u32, syms[i as usize].clone()))
                .collect();
            assert_eq!(rec, want, "lost {lost:b}");
        }
    }

    #[test]
    fn partial_block_flush() {
        let mut e = RsEncoder::new(8, 2);
        let mut reps = Vec::new();
        e.push_source(0, b"hello", &mut |_, _| unreachable!());
        e.push_source(1, b"w", &mut |_, _| unreachable!());
        assert_eq!(e.unprotected(), 2);
        assert!(e.repair_now(&mut |i, p| reps.push((i, p.to_vec()))));
        assert_eq!(reps.len(), 2);
        assert_eq!((reps[0].0.nss, reps[1].0.repair_key), (2, 1));
        let mut d = RsDecoder::new(8, 2);
        let mut rec = Vec::new();
        for (i, p) in &reps {
            d.on_repair(i, p, &mut |e, b| rec.push((e, b.to_vec())))
                .unwrap();
        }
        assert_eq!(rec, vec![(0, b"hello".to_vec()), (1, b"w".to_vec())]);
    }

    #[test]
    fn malformed_repairs() {
        let mut d = RsDecoder::new(4, 2);
        let ok = RepairInfo {
            scheme: SchemeId::ReedSolomon,
            first_esi: 0,
            nss: 4,
            stride: 1,
            repair_key: 0,
            dt: 15,
        };
        let cb = &mut |_: Esi, _: &[u8]| {};
        assert_eq!(
            d.on_repair(&RepairInfo { nss: 5, ..ok }, &[0; 4], cb),
            Err(DecodeError::InvalidNss)
        );
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    repair_key: 2,
                    ..ok
                },
                &[0; 4],
                cb
            ),
            Err(DecodeError::InvalidParameters)
        );
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    scheme: SchemeId::Xor,
                    ..ok
                },
                &[0; 4],
                cb
            ),
            Err(DecodeError::WrongScheme)
        );
        d.on_repair(&ok, &[0; 4], cb).unwrap();
        // Same block, different payload length: conflicting.
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    repair_key: 1,
                    ..ok
                },
                &[0; 6],
                cb
            ),
            Err(DecodeError::InvalidParameters)
        );
    }
}
