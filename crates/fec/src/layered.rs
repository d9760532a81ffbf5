//! Maelstrom layered interleaving (Balakrishnan et al., "Maelstrom: Transparent Error Correction
//! for Communication Between Data Centers", §IV): an (r, c) code made of c layers of (r, 1) XOR
//! codes with interleaves I = (i0 .. i(c-1)).
//!
//! Encoder: layer j keeps i_j *repair bins*; source ESI e goes to bin `e mod i_j` of every
//! layer. A bin XORs the (length-protected) sources it collects and *fires* a repair after r of
//! them: the XOR of sources `first_esi + k * i_j`, k < r (RepairInfo `stride = i_j`, `nss = r`),
//! which is the recipe list of the paper. Each source is thus in c XORs at different interleaves:
//! the i = 1 layer repairs singleton losses fast, the wider layers catch bursts.
//!
//! Decoder: a peeling decoder ([`XorPeeler`], shared with block XOR). A repair whose recipe
//! has one unknown source recovers it at once; one with several unknowns is stored (after
//! XORing out the sources already known), and every later source arrival or recovery is XORed
//! into the stored repairs that contain it, so a repair that drops to one unknown recovers it,
//! which may in turn unlock other repairs (recursive recovery across layers). Memory is bounded:
//! a ring of received symbols covering a few recipe spans, and a capped table of stored repairs;
//! both forget what falls behind the newest ESI.
//!
//! Not implemented from the paper: staggered bin start and delayed XOR sending (rate shaping on
//! the sender; neither changes what the decoder can recover).

use crate::scheme::{
    DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome,
};
use crate::symbol::{decode_len, LEN_FIELD, MAX_PROTECTED_LEN};
use crate::MAX_SYMBOL_LEN;

/// Largest `r` (sources per XOR) accepted.
pub const MAX_R: u16 = 255;
/// Largest interleave accepted.
pub const MAX_INTERLEAVE: u16 = 1024;

/// XORs the protected form of `data` (`[len u16 BE][data]`) into `acc`, growing `acc` with
/// zeros if needed (capacity is reused across blocks, so this allocates only while warming up).
pub(crate) fn xor_protected(acc: &mut Vec<u8>, data: &[u8]) {
    let need = LEN_FIELD + data.len();
    if acc.len() < need {
        acc.resize(need, 0);
    }
    let l = (data.len() as u16).to_be_bytes();
    acc[0] ^= l[0];
    acc[1] ^= l[1];
    hirt_gf::xor(&mut acc[LEN_FIELD..need], data);
}

/// One layer's repair bin.
#[derive(Debug, Clone, Default)]
struct Bin {
    first: Esi,
    count: u16,
    acc: Vec<u8>,
}

/// Layered interleaving encoder.
#[derive(Debug, Clone)]
pub struct LayeredEncoder {
    r: u16,
    interleaves: Vec<u16>,
    /// `bins[j]` has `interleaves[j]` bins.
    bins: Vec<Vec<Bin>>,
}

impl LayeredEncoder {
    /// An (r, c) encoder with `interleaves.len() = c` layers. Panics (a configuration error) if
    /// `r` is 0 or above [`MAX_R`], no layer is given, or an interleave is 0 or above
    /// [`MAX_INTERLEAVE`].
    pub fn new(r: u16, interleaves: &[u16]) -> Self {
        validate_config(r, interleaves);
        LayeredEncoder {
            r,
            interleaves: interleaves.to_vec(),
            bins: interleaves
                .iter()
                .map(|&i| vec![Bin::default(); i as usize])
                .collect(),
        }
    }

    fn fire(bin: &mut Bin, stride: u16, repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        let info = RepairInfo {
            scheme: SchemeId::Layered,
            first_esi: bin.first,
            nss: bin.count,
            stride,
            repair_key: 0,
            dt: 15,
        };
        repairs(info, &bin.acc);
        bin.count = 0;
        bin.acc.clear();
    }
}

pub(crate) fn validate_config(r: u16, interleaves: &[u16]) {
    assert!((1..=MAX_R).contains(&r), "r must be in 1..={MAX_R}");
    assert!(!interleaves.is_empty(), "at least one layer");
    assert!(
        interleaves.iter().all(|i| (1..=MAX_INTERLEAVE).contains(i)),
        "interleaves must be in 1..={MAX_INTERLEAVE}"
    );
}

impl FecEncoder for LayeredEncoder {
    fn push_source(&mut self, esi: Esi, data: &[u8], repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        for (j, layer) in self.bins.iter_mut().enumerate() {
            let stride = self.interleaves[j];
            let bin = &mut layer[(esi % stride as u32) as usize];
            // A bin holds consecutive members of its residue class; a gap (the caller skipped
            // ESIs, or the 32-bit wrap broke the residues) flushes what the bin had.
            if bin.count > 0 && bin.first.wrapping_add(bin.count as u32 * stride as u32) != esi {
                Self::fire(bin, stride, repairs);
            }
            if bin.count == 0 {
                bin.first = esi;
            }
            xor_protected(&mut bin.acc, data);
            bin.count += 1;
            if bin.count >= self.r {
                Self::fire(bin, stride, repairs);
            }
        }
    }

    /// Flushes the partial bins of the first layer (usually i0 = 1, one bin), so sparse traffic
    /// gets a repair without waiting for r sources.
    fn repair_now(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        let stride = self.interleaves[0];
        let mut any = false;
        for bin in self.bins[0].iter_mut().filter(|b| b.count > 0) {
            Self::fire(bin, stride, repairs);
            any = true;
        }
        any
    }

    fn unprotected(&self) -> usize {
        self.bins[0].iter().map(|b| b.count as usize).sum()
    }
}

/// Ring of known (received or recovered) source symbols, in protected form, indexed by ESI.
/// Holds the `cap` ESIs up to the newest; older ones are forgotten.
#[derive(Debug, Clone)]
pub(crate) struct SymbolStore {
    slots: Vec<Slot>,
    mask: u32,
    newest: Option<Esi>,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    esi: Esi,
    valid: bool,
    data: Vec<u8>,
}

/// Where an ESI lies relative to the store's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pos {
    /// Within the window (may or may not be known).
    In,
    /// Newer than the newest ESI seen.
    Ahead,
    /// Forgotten.
    Behind,
}

impl SymbolStore {
    /// A store of `cap` slots (rounded up to a power of two).
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.next_power_of_two().max(2);
        SymbolStore {
            slots: vec![Slot::default(); cap],
            mask: cap as u32 - 1,
            newest: None,
        }
    }

    pub(crate) fn cap(&self) -> u32 {
        self.mask + 1
    }

    pub(crate) fn newest(&self) -> Option<Esi> {
        self.newest
    }

    pub(crate) fn pos(&self, esi: Esi) -> Pos {
        match self.newest {
            None => Pos::Ahead,
            Some(n) => {
                let back = n.wrapping_sub(esi);
                if back < self.cap() {
                    Pos::In
                } else if back >= 1 << 31 {
                    Pos::Ahead
                } else {
                    Pos::Behind
                }
            }
        }
    }

    /// The protected symbol of `esi`, if known.
    pub(crate) fn get(&self, esi: Esi) -> Option<&[u8]> {
        if self.pos(esi) != Pos::In {
            return None;
        }
        let s = &self.slots[(esi & self.mask) as usize];
        (s.valid && s.esi == esi).then_some(&s.data[..])
    }

    /// Stores `esi` (the caller checked it is not known and not behind); `fill` writes the
    /// protected form into the (cleared, capacity-reusing) slot buffer. Returns true when the
    /// window slid (the newest ESI advanced).
    pub(crate) fn insert(&mut self, esi: Esi, fill: impl FnOnce(&mut Vec<u8>)) -> bool {
        let slid = self.pos(esi) == Pos::Ahead;
        if slid {
            self.newest = Some(esi);
        }
        let s = &mut self.slots[(esi & self.mask) as usize];
        s.esi = esi;
        s.valid = true;
        s.data.clear();
        fill(&mut s.data);
        slid
    }
}

/// A stored repair that still has several unknown sources.
#[derive(Debug, Clone, Default)]
struct Pending {
    first: Esi,
    nss: u16,
    stride: u16,
    /// Recipe positions (k in `first + k * stride`) still unknown.
    unknown: Vec<u16>,
    /// The repair payload with every known source XORed out.
    acc: Vec<u8>,
}

impl Pending {
    fn position(&self, esi: Esi) -> Option<u16> {
        let d = esi.wrapping_sub(self.first);
        let s = self.stride as u32;
        (d.is_multiple_of(s) && d / s < self.nss as u32).then_some((d / s) as u16)
    }

    fn esi(&self, k: u16) -> Esi {
        self.first.wrapping_add(k as u32 * self.stride as u32)
    }
}

/// The peeling decoder for XOR repairs with recipe `first + k * stride`, k < nss. Shared by
/// [`LayeredDecoder`] and [`crate::block_xor::BlockXorDecoder`].
#[derive(Debug, Clone)]
pub(crate) struct XorPeeler {
    store: SymbolStore,
    pending: Vec<Pending>,
    free: Vec<Pending>,
    max_pending: usize,
    work: Vec<Esi>,
    ops: u64,
}

impl XorPeeler {
    pub(crate) fn new(cap: usize, max_pending: usize) -> Self {
        XorPeeler {
            store: SymbolStore::new(cap),
            pending: Vec::new(),
            free: Vec::new(),
            max_pending,
            work: Vec::new(),
            ops: 0,
        }
    }

    pub(crate) fn window(&self) -> u32 {
        self.store.cap()
    }

    pub(crate) fn ops(&self) -> u64 {
        self.ops
    }

    /// Number of stored repairs (tests check the memory bound).
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn on_source(
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
        self.learn(esi, |buf| {
            buf.extend_from_slice(&(data.len() as u16).to_be_bytes());
            buf.extend_from_slice(data);
        });
        self.cascade(recovered);
        Ok(SourceOutcome::New)
    }

    /// Checks a repair's shape against this decoder's limits; no state change.
    pub(crate) fn check_repair(
        &self,
        info: &RepairInfo,
        payload: &[u8],
        scheme: SchemeId,
        max_nss: u16,
        max_stride: u16,
    ) -> Result<(), DecodeError> {
        if info.scheme != scheme {
            return Err(DecodeError::WrongScheme);
        }
        if info.nss == 0 || info.nss > max_nss {
            return Err(DecodeError::InvalidNss);
        }
        if info.stride == 0 || info.stride > max_stride || info.dt != 15 || info.repair_key != 0 {
            return Err(DecodeError::InvalidParameters);
        }
        if payload.len() > MAX_PROTECTED_LEN {
            return Err(DecodeError::SymbolTooLong);
        }
        if payload.len() < LEN_FIELD {
            return Err(DecodeError::BadLength);
        }
        let span = (info.nss as u32 - 1) * info.stride as u32;
        let cap = self.store.cap();
        if span >= cap / 2 {
            return Err(DecodeError::OutOfRange);
        }
        // The recipe must lie in the window around the newest ESI: not forgotten, not far in
        // the future (so a forged repair cannot make the decoder forget what it tracks).
        if let Some(n) = self.store.newest() {
            let behind_first = n.wrapping_sub(info.first_esi);
            let ahead_last = info.first_esi.wrapping_add(span).wrapping_sub(n);
            if (behind_first < 1 << 31 && behind_first >= cap)
                || (ahead_last < 1 << 31 && ahead_last >= cap / 2)
            {
                return Err(DecodeError::OutOfRange);
            }
        }
        Ok(())
    }

    /// Takes a repair already checked by [`Self::check_repair`].
    pub(crate) fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        let mut p = self.free.pop().unwrap_or_default();
        p.first = info.first_esi;
        p.nss = info.nss;
        p.stride = info.stride;
        p.unknown.clear();
        p.acc.clear();
        p.acc.extend_from_slice(payload);
        for k in 0..info.nss {
            match self.store.get(p.esi(k)) {
                Some(s) => {
                    if s.len() > p.acc.len() {
                        // A known source longer than the repair: inconsistent repair.
                        self.free.push(p);
                        return Err(DecodeError::BadLength);
                    }
                    hirt_gf::xor(&mut p.acc[..s.len()], s);
                    self.ops += 1;
                }
                None => p.unknown.push(k),
            }
        }
        match p.unknown.len() {
            0 => self.free.push(p),
            1 => {
                let esi = p.esi(p.unknown[0]);
                let res = decode_len(&p.acc);
                match res {
                    Some(len) if self.store.pos(esi) != Pos::Behind => {
                        let data = &p.acc[LEN_FIELD..LEN_FIELD + len];
                        recovered(esi, data);
                        self.learn(esi, |b| b.extend_from_slice(&p.acc[..LEN_FIELD + len]));
                        self.free.push(p);
                        self.cascade(recovered);
                    }
                    Some(_) => self.free.push(p),
                    None => {
                        self.free.push(p);
                        return Err(DecodeError::BadLength);
                    }
                }
            }
            _ => {
                if self.pending.len() >= self.max_pending {
                    // Bounded memory: forget the oldest stored repair.
                    let old = self.pending.remove(0);
                    self.free.push(old);
                }
                self.pending.push(p);
            }
        }
        Ok(())
    }

    /// Stores a newly known symbol and queues it for the cascade.
    fn learn(&mut self, esi: Esi, fill: impl FnOnce(&mut Vec<u8>)) {
        if self.store.insert(esi, fill) {
            // The window slid: drop stored repairs whose oldest source was forgotten.
            let store = &self.store;
            let mut i = 0;
            while i < self.pending.len() {
                if store.pos(self.pending[i].first) == Pos::Behind {
                    let p = self.pending.swap_remove(i);
                    self.free.push(p);
                } else {
                    i += 1;
                }
            }
        }
        self.work.push(esi);
    }

    /// XORs newly known symbols into the stored repairs that contain them; repairs that drop
    /// to one unknown recover it, which continues the cascade.
    fn cascade(&mut self, recovered: &mut dyn FnMut(Esi, &[u8])) {
        while let Some(esi) = self.work.pop() {
            let mut i = 0;
            while i < self.pending.len() {
                let p = &mut self.pending[i];
                let Some(k) = p.position(esi) else {
                    i += 1;
                    continue;
                };
                let Some(at) = p.unknown.iter().position(|&u| u == k) else {
                    i += 1;
                    continue;
                };
                let Some(s) = self.store.get(esi) else {
                    i += 1;
                    continue;
                };
                if s.len() > p.acc.len() {
                    let p = self.pending.swap_remove(i);
                    self.free.push(p);
                    continue;
                }
                hirt_gf::xor(&mut p.acc[..s.len()], s);
                self.ops += 1;
                p.unknown.swap_remove(at);
                if p.unknown.len() > 1 {
                    i += 1;
                    continue;
                }
                let p = self.pending.swap_remove(i);
                if let Some(&k) = p.unknown.first() {
                    let target = p.esi(k);
                    if self.store.get(target).is_none() && self.store.pos(target) != Pos::Behind {
                        if let Some(len) = decode_len(&p.acc) {
                            recovered(target, &p.acc[LEN_FIELD..LEN_FIELD + len]);
                            let bytes = &p.acc[..LEN_FIELD + len];
                            self.learn(target, |b| b.extend_from_slice(bytes));
                        }
                    }
                }
                self.free.push(p);
            }
        }
    }
}

/// Layered interleaving decoder.
#[derive(Debug, Clone)]
pub struct LayeredDecoder {
    r: u16,
    max_stride: u16,
    peel: XorPeeler,
}

impl LayeredDecoder {
    /// A decoder for the (r, c = interleaves.len()) code with these interleaves. Panics on the
    /// same configuration errors as [`LayeredEncoder::new`]. It keeps the last
    /// `4 * r * max(I)` (rounded up to a power of two, at least 256) source symbols and at most
    /// `4 * sum(I) + 64` stored repairs.
    pub fn new(r: u16, interleaves: &[u16]) -> Self {
        validate_config(r, interleaves);
        let max_stride = *interleaves.iter().max().expect("at least one layer");
        let cap = (4 * r as usize * max_stride as usize).max(256);
        let max_pending = 4 * interleaves.iter().map(|&i| i as usize).sum::<usize>() + 64;
        LayeredDecoder {
            r,
            max_stride,
            peel: XorPeeler::new(cap, max_pending),
        }
    }

    /// How many source symbols behind the newest ESI are still tracked.
    pub fn window(&self) -> u32 {
        self.peel.window()
    }
}

impl FecDecoder for LayeredDecoder {
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
        self.peel
            .check_repair(info, payload, SchemeId::Layered, self.r, self.max_stride)?;
        self.peel.on_repair(info, payload, recovered)
    }

    fn symbol_ops(&self) -> u64 {
        self.peel.ops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(esi: Esi) -> Vec<u8> {
        let len = 1 + (esi as usize * 7) % 40;
        (0..len)
            .map(|i| (esi as u8).wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    #[test]
    fn encoder_emits_recipes() {
        let mut e = LayeredEncoder::new(3, &[1, 4]);
        let mut got = Vec::new();
        for esi in 0..12 {
            e.push_source(esi, &sym(esi), &mut |i, _| {
                got.push((i.first_esi, i.nss, i.stride))
            });
        }
        // Layer 0: every 3 consecutive; layer 1: bins 0..3 fire at esi 8, 9, 10, 11.
        assert_eq!(
            got,
            vec![
                (0, 3, 1),
                (3, 3, 1),
                (6, 3, 1),
                (0, 3, 4),
                (1, 3, 4),
                (2, 3, 4),
                (9, 3, 1),
                (3, 3, 4)
            ]
        );
        assert_eq!(e.unprotected(), 0);
        e.push_source(12, &sym(12), &mut |_, _| {});
        assert_eq!(e.unprotected(), 1);
        let mut n = 0;
        assert!(e.repair_now(&mut |i, _| {
            assert_eq!((i.first_esi, i.nss, i.stride), (12, 1, 1));
            n += 1;
        }));
        assert_eq!(n, 1);
        assert!(!e.repair_now(&mut |_, _| {}));
    }

    #[test]
    fn cross_layer_recursive_recovery() {
        // r = 2, I = (1, 2): sources 0..4, repairs {0,1} {2,3} {0,2} {1,3}. All repairs arrive
        // first, then source 2 alone: {0,2} gives 0, {2,3} gives 3, then {0,1} or {1,3} gives 1
        // (a recovery unlocking another).
        let mut e = LayeredEncoder::new(2, &[1, 2]);
        let mut reps = Vec::new();
        for esi in 0..4 {
            e.push_source(esi, &sym(esi), &mut |i, p| reps.push((i, p.to_vec())));
        }
        let mut d = LayeredDecoder::new(2, &[1, 2]);
        let mut rec = Vec::new();
        for (i, p) in &reps {
            d.on_repair(i, p, &mut |e, b| rec.push((e, b.to_vec())))
                .unwrap();
        }
        assert!(rec.is_empty());
        d.on_source(2, &sym(2), &mut |e, b| rec.push((e, b.to_vec())))
            .unwrap();
        rec.sort();
        assert_eq!(rec, vec![(0, sym(0)), (1, sym(1)), (3, sym(3))]);
        assert_eq!(
            d.on_source(3, &sym(3), &mut |_, _| {}),
            Ok(SourceOutcome::Duplicate)
        );
        assert_eq!(
            d.on_source(0, &sym(0), &mut |_, _| {}),
            Ok(SourceOutcome::Duplicate)
        );
    }

    #[test]
    fn bad_repairs_rejected() {
        let mut d = LayeredDecoder::new(4, &[1, 5]);
        let ok = RepairInfo {
            scheme: SchemeId::Layered,
            first_esi: 0,
            nss: 4,
            stride: 5,
            repair_key: 0,
            dt: 15,
        };
        let cb = &mut |_: Esi, _: &[u8]| panic!("nothing to recover");
        assert_eq!(
            d.on_repair(&RepairInfo { nss: 0, ..ok }, &[0; 4], cb),
            Err(DecodeError::InvalidNss)
        );
        assert_eq!(
            d.on_repair(&RepairInfo { nss: 5, ..ok }, &[0; 4], cb),
            Err(DecodeError::InvalidNss)
        );
        assert_eq!(
            d.on_repair(&RepairInfo { stride: 6, ..ok }, &[0; 4], cb),
            Err(DecodeError::InvalidParameters)
        );
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    scheme: SchemeId::Rlc,
                    ..ok
                },
                &[0; 4],
                cb
            ),
            Err(DecodeError::WrongScheme)
        );
        assert_eq!(d.on_repair(&ok, &[0; 1], cb), Err(DecodeError::BadLength));
        assert_eq!(
            d.on_repair(&ok, &vec![0; MAX_PROTECTED_LEN + 1], cb),
            Err(DecodeError::SymbolTooLong)
        );
        d.on_source(100_000, &[1, 2, 3], cb).unwrap();
        assert_eq!(
            d.on_repair(&RepairInfo { first_esi: 5, ..ok }, &[0; 8], cb),
            Err(DecodeError::OutOfRange)
        );
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    first_esi: 3_000_000,
                    ..ok
                },
                &[0; 8],
                cb
            ),
            Err(DecodeError::OutOfRange)
        );
        // A known source longer than the repair payload.
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    first_esi: 100_000,
                    nss: 1,
                    ..ok
                },
                &[0; 3],
                cb
            ),
            Err(DecodeError::BadLength)
        );
        // Recovered length field inconsistent.
        let mut rec = 0;
        assert_eq!(
            d.on_repair(
                &RepairInfo {
                    first_esi: 100_001,
                    nss: 1,
                    ..ok
                },
                &[0xff, 0xff, 0],
                &mut |_, _| rec += 1
            ),
            Err(DecodeError::BadLength)
        );
        assert_eq!(rec, 0);
    }

    #[test]
    fn memory_is_bounded() {
        let mut d = LayeredDecoder::new(4, &[1, 3]);
        let info = |first| RepairInfo {
            scheme: SchemeId::Layered,
            first_esi: first,
            nss: 4,
            stride: 3,
            repair_key: 0,
            dt: 15,
        };
        for f in 0..10_000u32 {
            d.on_source(f, &[1], &mut |_, _| {}).unwrap();
            // Repairs over sources never sent: all unknown, stored until evicted.
            let _ = d.on_repair(&info(f + 1), &[0; 16], &mut |_, _| {});
        }
        assert!(d.peel.pending_len() <= 4 * 4 + 64);
    }
}
