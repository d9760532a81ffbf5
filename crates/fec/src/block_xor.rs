//! rQUIC-style block XOR (Michel et al., "Adaptive FEC for QUIC", §III): the source stream is cut
//! into blocks of R consecutive symbols and each block gets one repair, the XOR of its
//! (length-protected) symbols. Any single loss per block is recovered. R can change at run time
//! ([`BlockXorEncoder::set_block`]); the change applies at the next block boundary, so a block's
//! repair always covers exactly the block announced in its header (`first_esi`, `nss`).
//!
//! The decoder is the peeling decoder of [`crate::layered`] with stride 1: a repair that arrives
//! before a block's sources is kept until they arrive.

use crate::layered::{xor_protected, XorPeeler};
use crate::scheme::{
    DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome,
};

/// Largest block accepted.
pub const MAX_BLOCK: u16 = 1024;

/// Block XOR encoder.
#[derive(Debug, Clone)]
pub struct BlockXorEncoder {
    r: u16,
    next_r: u16,
    first: Esi,
    count: u16,
    acc: Vec<u8>,
}

impl BlockXorEncoder {
    /// One repair per `r` sources. Panics (configuration error) unless `1 <= r <= MAX_BLOCK`.
    pub fn new(r: u16) -> Self {
        assert!(
            (1..=MAX_BLOCK).contains(&r),
            "block size must be in 1..={MAX_BLOCK}"
        );
        BlockXorEncoder {
            r,
            next_r: r,
            first: 0,
            count: 0,
            acc: Vec::new(),
        }
    }

    /// Changes R; takes effect when the current block is complete (or flushed). Panics unless
    /// `1 <= r <= MAX_BLOCK`.
    pub fn set_block(&mut self, r: u16) {
        assert!(
            (1..=MAX_BLOCK).contains(&r),
            "block size must be in 1..={MAX_BLOCK}"
        );
        self.next_r = r;
        if self.count == 0 {
            self.r = r;
        }
    }

    /// The block size in use for the current block.
    pub fn block(&self) -> u16 {
        self.r
    }

    fn flush(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        let info = RepairInfo {
            scheme: SchemeId::BlockXor,
            first_esi: self.first,
            nss: self.count,
            stride: 1,
            repair_key: 0,
            dt: 15,
        };
        repairs(info, &self.acc);
        self.count = 0;
        self.acc.clear();
        self.r = self.next_r;
    }
}

impl FecEncoder for BlockXorEncoder {
    fn push_source(&mut self, esi: Esi, data: &[u8], repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        if self.count > 0 && self.first.wrapping_add(self.count as u32) != esi {
            // Not consecutive: close the current block so its repair stays correct.
            self.flush(repairs);
        }
        if self.count == 0 {
            self.first = esi;
        }
        xor_protected(&mut self.acc, data);
        self.count += 1;
        if self.count >= self.r {
            self.flush(repairs);
        }
    }

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

/// Block XOR decoder.
#[derive(Debug, Clone)]
pub struct BlockXorDecoder {
    max_block: u16,
    peel: XorPeeler,
}

impl BlockXorDecoder {
    /// Accepts blocks of up to `max_block` sources; keeps the last `8 * max_block` (at least 256,
    /// power of two) source symbols and up to 64 incomplete blocks. Panics unless
    /// `1 <= max_block <= MAX_BLOCK`.
    pub fn new(max_block: u16) -> Self {
        assert!(
            (1..=MAX_BLOCK).contains(&max_block),
            "block size must be in 1..={MAX_BLOCK}"
        );
        BlockXorDecoder {
            max_block,
            peel: XorPeeler::new((8 * max_block as usize).max(256), 64),
        }
    }
}

impl FecDecoder for BlockXorDecoder {
    fn on_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError> {
        self.peel.on_source(esi, data, recovered)
    }

    fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        if info.scheme == SchemeId::BlockXor && info.stride != 1 {
            return Err(DecodeError::InvalidParameters);
        }
        self.peel
            .check_repair(info, payload, SchemeId::BlockXor, self.max_block, 1)?;
        self.peel.on_repair(info, payload, recovered)
    }

    fn symbol_ops(&self) -> u64 {
        self.peel.ops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_block_applies_at_boundary() {
        let mut e = BlockXorEncoder::new(3);
        let mut got = Vec::new();
        e.push_source(0, b"a", &mut |i, _| got.push((i.first_esi, i.nss)));
        e.set_block(2);
        assert_eq!(e.block(), 3);
        for esi in 1..7 {
            e.push_source(esi, b"b", &mut |i, _| got.push((i.first_esi, i.nss)));
        }
        assert_eq!(got, vec![(0, 3), (3, 2), (5, 2)]);
        e.push_source(7, b"c", &mut |_, _| {});
        assert_eq!(e.unprotected(), 1);
        assert!(e.repair_now(&mut |i, p| {
            assert_eq!((i.first_esi, i.nss), (7, 1));
            assert_eq!(p, &[0, 1, b'c']);
        }));
        assert!(!e.repair_now(&mut |_, _| {}));
    }

    #[test]
    fn repair_before_sources() {
        let mut e = BlockXorEncoder::new(4);
        let mut rep = None;
        let syms: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 10 + i]).collect();
        for (i, s) in syms.iter().enumerate() {
            e.push_source(i as u32, s, &mut |info, p| rep = Some((info, p.to_vec())));
        }
        let (info, p) = rep.unwrap();
        let mut d = BlockXorDecoder::new(8);
        let mut rec = Vec::new();
        d.on_repair(&info, &p, &mut |e, b| rec.push((e, b.to_vec())))
            .unwrap();
        for i in [0usize, 1, 3] {
            d.on_source(i as u32, &syms[i], &mut |e, b| rec.push((e, b.to_vec())))
                .unwrap();
        }
        assert_eq!(rec, vec![(2, syms[2].clone())]);
        let info2 = RepairInfo { stride: 2, ..info };
        assert_eq!(
            d.on_repair(&info2, &p, &mut |_, _| {}),
            Err(DecodeError::InvalidParameters)
        );
        let info3 = RepairInfo { nss: 9, ..info };
        assert_eq!(
            d.on_repair(&info3, &p, &mut |_, _| {}),
            Err(DecodeError::InvalidNss)
        );
    }
}
