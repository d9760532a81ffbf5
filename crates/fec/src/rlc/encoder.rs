//! The sliding-window encoder.

use super::RlcConfig;
use crate::coefficients::generate_coding_coefficients;
use crate::symbol::{encode_into, MAX_PROTECTED_LEN};
use crate::{Esi, FecEncoder, RepairInfo, MAX_SYMBOL_LEN};

/// Most symbols [`RlcEncoder::set_history`] keeps: as far back as the answers to loss reports
/// reach with the most repair lag a decoder allows (`RlcDecoder::with_repair_lag`,
/// `MAX_REPAIR_LAG`). Kept only when a stream's round trip of sources asks for it.
pub const MAX_HISTORY: usize = 1 << 17;

/// RFC 8681 sliding-window encoder: keeps the last W source symbols and makes repair symbols over
/// them on demand.
///
/// The tunnel core pushes source symbols with consecutive ESIs; a gap (or a symbol longer than
/// [`MAX_SYMBOL_LEN`], which cannot be protected) restarts the window, because a repair must
/// cover consecutive ESIs. Memory: `cfg.window` slots (or the longer history asked for with
/// [`RlcEncoder::set_history`]), each grown once to the longest symbol it has held, plus one
/// repair buffer; nothing is allocated per packet after warm-up.
#[derive(Debug)]
pub struct RlcEncoder {
    cfg: RlcConfig,
    /// Current window W (1..=cfg.window).
    window: usize,
    /// Most symbols a repair between explicit bounds ([`Self::repair_between`]) may cover:
    /// the current window (0), or more after [`Self::allow_wide_repairs`].
    wide: usize,
    /// Ring of protected symbols `[len][data]` (the history: at least `cfg.window` long); slot
    /// of the next symbol is `next_slot`.
    slots: Vec<Vec<u8>>,
    next_slot: usize,
    /// Number of valid symbols in the ring (<= slots.len()).
    count: usize,
    /// ESI the next pushed symbol should have.
    next_esi: Esi,
    /// Symbols pushed since the last repair.
    unprotected: usize,
    repair_key: u16,
    coefs: Vec<u8>,
    repair: Vec<u8>,
}

impl RlcEncoder {
    /// An encoder for `cfg` (window clamped to 1..=4095, DT to 0..=15), current window = max.
    pub fn new(cfg: RlcConfig) -> Self {
        let cfg = cfg.sanitized();
        let cap = cfg.window as usize;
        RlcEncoder {
            cfg,
            window: cap,
            wide: 0,
            slots: (0..cap).map(|_| Vec::new()).collect(),
            next_slot: 0,
            count: 0,
            next_esi: 0,
            unprotected: 0,
            repair_key: 0,
            coefs: vec![0; cap],
            repair: Vec::with_capacity(MAX_PROTECTED_LEN),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &RlcConfig {
        &self.cfg
    }

    /// Changes the coding window W used by the next repairs (clamped to 1..=configured max).
    /// The last `cfg.window` symbols are always kept, so growing it again takes effect at once.
    pub fn set_window(&mut self, w: u16) {
        self.window = (w as usize).clamp(1, usize::from(self.cfg.window));
    }

    /// Lets a repair between explicit bounds ([`Self::repair_between`]) cover up to `n`
    /// symbols (at least the configured window, at most 4095): a spare backing up answers to
    /// loss reports spread over more than a window. The decoder must accept such repairs
    /// ([`crate::rlc::RlcDecoder::accept_repairs_up_to`]); each costs `n` multiply-adds per
    /// byte. Allocates once.
    pub fn allow_wide_repairs(&mut self, n: u16) {
        self.wide = usize::from(n.clamp(self.cfg.window, super::MAX_WINDOW));
        if self.coefs.len() < self.wide {
            self.coefs.resize(self.wide, 0);
        }
    }

    /// What [`Self::allow_wide_repairs`] allowed: 0 if nothing beyond the current window.
    pub fn wide_repairs(&self) -> usize {
        self.wide
    }

    /// Keeps the last `n` symbols (at most [`MAX_HISTORY`], at least the configured window),
    /// so that [`Self::repair_until`] can make a repair over a window that ends that far back:
    /// an answer to a loss report reaches a round trip behind the newest symbol, which at high
    /// rates or long round trips is more than the largest window. The history only grows; the
    /// symbols kept so far stay. Allocates (once per growth), not per packet.
    pub fn set_history(&mut self, n: usize) {
        let n = n.min(MAX_HISTORY);
        let cap = self.slots.len();
        if n <= cap {
            return;
        }
        // Oldest kept symbol first, the newest at `cap - 1`; the new slots follow.
        self.slots.rotate_left(self.next_slot);
        self.slots.resize_with(n, Vec::new);
        self.next_slot = cap;
    }

    /// Symbols kept: the farthest back a repair's window may reach.
    pub fn history(&self) -> usize {
        self.slots.len()
    }

    /// The density threshold DT of the coding coefficients (15: none is zero).
    pub fn density_threshold(&self) -> u8 {
        self.cfg.dt
    }

    /// The current window W.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Number of source symbols a repair made now would cover (min(W, symbols pushed)).
    pub fn window_len(&self) -> usize {
        self.count.min(self.window)
    }

    /// The Repair_Key the next repair will carry.
    pub fn next_repair_key(&self) -> u16 {
        self.repair_key
    }

    fn restart(&mut self) {
        self.count = 0;
        self.unprotected = 0;
    }

    /// Builds the repair over the current window into `self.repair`; returns its header.
    fn build_repair(&mut self) -> Option<RepairInfo> {
        self.build_repair_until(0, self.window_len())
    }

    /// Makes a repair over the (up to) W symbols that end just before `end` instead of the
    /// newest ones: a repair that answers a report of missing symbols need not cover the ones
    /// sent after them (which may be lost too, unreported yet). `false` if `end` is not after
    /// a kept symbol. The symbols after `end` stay unprotected.
    pub fn repair_until(&mut self, end: Esi, repairs: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        self.repair_between(end.wrapping_sub(self.window as u32), end, repairs)
    }

    /// Like [`Self::repair_until`], over no symbol before `start` either: a window that need
    /// not reach back to symbols no repair can help any more (past their deadline) leaves
    /// their unknowns out of the equation. `false` if no kept symbol is in `start..end`.
    pub fn repair_between(
        &mut self,
        start: Esi,
        end: Esi,
        repairs: &mut dyn FnMut(RepairInfo, &[u8]),
    ) -> bool {
        let skip = self.next_esi.wrapping_sub(end) as usize;
        let span = end.wrapping_sub(start);
        if skip >= self.count || span == 0 || span > u32::MAX / 2 {
            return false;
        }
        let n = (self.count - skip)
            .min(self.window.max(self.wide))
            .min(span as usize);
        let unprotected = self.unprotected;
        let built = self.build_repair_until(skip, n);
        self.unprotected = if skip == 0 { 0 } else { unprotected };
        match built {
            Some(info) => {
                repairs(info, &self.repair);
                true
            }
            None => false,
        }
    }

    /// Builds a repair over the `n` symbols before the newest `skip` ones.
    fn build_repair_until(&mut self, skip: usize, n: usize) -> Option<RepairInfo> {
        if n == 0 || skip + n > self.count {
            return None;
        }
        let cap = self.slots.len();
        let first_slot = (self.next_slot + 2 * cap - n - skip) % cap;
        let coefs = &mut self.coefs[..n];
        // Cannot fail: DT and m were sanitized in `new`.
        generate_coding_coefficients(self.repair_key, coefs, self.cfg.dt, self.cfg.field.m())
            .ok()?;
        let mut len = 0;
        for j in 0..n {
            len = len.max(self.slots[(first_slot + j) % cap].len());
        }
        self.repair.clear();
        self.repair.resize(len, 0);
        // One pass over the repair for the whole window: each chunk of it stays in registers
        // while every source is multiplied in (see `hirt_gf::Kernel::mul_add_terms`).
        let slots = &self.slots;
        hirt_gf::active().mul_add_terms(&mut self.repair, n, |j| {
            let mut i = first_slot + j;
            if i >= cap {
                i -= cap;
            }
            (&slots[i][..], coefs[j])
        });
        let info = RepairInfo {
            scheme: self.cfg.scheme(),
            first_esi: self.next_esi.wrapping_sub((n + skip) as u32),
            nss: n as u16,
            stride: 1,
            repair_key: self.repair_key,
            dt: self.cfg.dt,
        };
        self.repair_key = self.repair_key.wrapping_add(1);
        self.unprotected = 0;
        Some(info)
    }
}

impl FecEncoder for RlcEncoder {
    /// Adds a source symbol to the window (sliding out the oldest). Never emits repairs itself:
    /// the controller decides when ([`FecEncoder::repair_now`]).
    fn push_source(&mut self, esi: Esi, data: &[u8], _repairs: &mut dyn FnMut(RepairInfo, &[u8])) {
        if data.len() > MAX_SYMBOL_LEN {
            // Cannot be protected: restart after it so no repair claims to cover it.
            self.restart();
            self.next_esi = esi.wrapping_add(1);
            return;
        }
        if self.count > 0 && esi != self.next_esi {
            self.restart();
        }
        encode_into(&mut self.slots[self.next_slot], data);
        self.next_slot = (self.next_slot + 1) % self.slots.len();
        self.count = (self.count + 1).min(self.slots.len());
        self.unprotected += 1;
        self.next_esi = esi.wrapping_add(1);
    }

    fn repair_now(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        match self.build_repair() {
            Some(info) => {
                repairs(info, &self.repair);
                true
            }
            None => false,
        }
    }

    fn unprotected(&self) -> usize {
        self.unprotected.min(self.window_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rlc::Field;
    use crate::SchemeId;

    fn repair(enc: &mut RlcEncoder) -> Option<(RepairInfo, Vec<u8>)> {
        let mut out = None;
        enc.repair_now(&mut |i, p| out = Some((i, p.to_vec())));
        out
    }

    #[test]
    fn repair_until_covers_the_symbols_before_the_end() {
        // Keeps 5 symbols, repairs over 3.
        let mut enc = RlcEncoder::new(RlcConfig::xor(5));
        enc.set_window(3);
        let mut none = |_: RepairInfo, _: &[u8]| {};
        for (esi, b) in (10..15).zip([1u8, 2, 4, 8, 16]) {
            enc.push_source(esi, &[b], &mut none);
        }
        let mut out = None;
        // End 14: the 3 symbols 11, 12, 13 (XOR of [0,1,b]: length prefix 0x0001).
        assert!(enc.repair_until(14, &mut |i, p| out = Some((i, p.to_vec()))));
        let (info, p) = out.take().unwrap();
        assert_eq!((info.first_esi, info.nss), (11, 3));
        // Three length prefixes 0x0001 XOR to 0x0001.
        assert_eq!(p, vec![0, 1, 2 ^ 4 ^ 8]);
        // The newer symbols stay unprotected; before 12 only 10 and 11 are kept.
        assert_eq!(enc.unprotected(), 3);
        assert!(enc.repair_until(12, &mut |i, _| out = Some((i, vec![]))));
        assert_eq!(
            (out.as_ref().unwrap().0.first_esi, out.unwrap().0.nss),
            (10, 2)
        );
        // Not after a kept symbol.
        assert!(!enc.repair_until(10, &mut |_, _| panic!()));
        assert!(!enc.repair_until(20, &mut |_, _| panic!()));
        // End = next: the usual repair.
        let mut out = None;
        assert!(enc.repair_until(15, &mut |i, _| out = Some(i)));
        assert_eq!((out.unwrap().first_esi, out.unwrap().nss), (12, 3));
        assert_eq!(enc.unprotected(), 0);
    }

    #[test]
    fn repair_between_leaves_out_the_symbols_before_its_start() {
        let mut enc = RlcEncoder::new(RlcConfig::xor(5));
        enc.set_window(4);
        let mut none = |_: RepairInfo, _: &[u8]| {};
        for (esi, b) in (10..15).zip([1u8, 2, 4, 8, 16]) {
            enc.push_source(esi, &[b], &mut none);
        }
        let mut out = None;
        // 12..14: two symbols, though the window would take four.
        assert!(enc.repair_between(12, 14, &mut |i, p| out = Some((i, p.to_vec()))));
        let (info, p) = out.take().unwrap();
        assert_eq!((info.first_esi, info.nss), (12, 2));
        assert_eq!(p, vec![0, 0, 4 ^ 8]);
        // A start before the window's: the window still caps it (11..15).
        assert!(enc.repair_between(0, 15, &mut |i, _| out = Some((i, vec![]))));
        assert_eq!(out.take().map(|(i, _)| (i.first_esi, i.nss)), Some((11, 4)));
        // Empty or reversed ranges make nothing.
        assert!(!enc.repair_between(14, 14, &mut |_, _| panic!()));
        assert!(!enc.repair_between(15, 14, &mut |_, _| panic!()));
    }

    #[test]
    fn a_longer_history_keeps_symbols_beyond_the_window() {
        let mut enc = RlcEncoder::new(RlcConfig::xor(3));
        let mut none = |_: RepairInfo, _: &[u8]| {};
        for esi in 0..5u32 {
            enc.push_source(esi, &[1 << esi], &mut none);
        }
        // Only the last 3 are kept: a window ending before 2 is out of reach.
        assert!(!enc.repair_until(2, &mut |_, _| panic!()));
        // Grown after the ring wrapped: the 3 kept symbols (2, 3, 4) stay in order.
        enc.set_history(8);
        assert_eq!(enc.history(), 8);
        for esi in 5..10u32 {
            enc.push_source(esi, &[1 << (esi % 8)], &mut none);
        }
        // 8 kept (2..=9): a window of 3 ending before 5 covers 2, 3, 4.
        let mut out = None;
        assert!(enc.repair_until(5, &mut |i, p| out = Some((i, p.to_vec()))));
        let (info, p) = out.unwrap();
        assert_eq!((info.first_esi, info.nss), (2, 3));
        assert_eq!(p, vec![0, 1, 4 ^ 8 ^ 16]);
        // The window stays capped by the configuration, the history by MAX_HISTORY.
        enc.set_window(100);
        assert_eq!(enc.window(), 3);
        assert!(!enc.repair_until(2, &mut |_, _| panic!()));
        enc.set_history(usize::MAX);
        assert_eq!(enc.history(), MAX_HISTORY);
        // Shrinking is ignored.
        enc.set_history(4);
        assert_eq!(enc.history(), MAX_HISTORY);
        let mut out = None;
        assert!(enc.repair_until(10, &mut |i, _| out = Some(i)));
        assert_eq!((out.unwrap().first_esi, out.unwrap().nss), (7, 3));
    }

    #[test]
    fn xor_repair_is_xor_of_padded_window() {
        let mut enc = RlcEncoder::new(RlcConfig::xor(3));
        let mut none = |_: RepairInfo, _: &[u8]| panic!("no repair from push");
        enc.push_source(10, &[1, 2, 3], &mut none);
        enc.push_source(11, &[4], &mut none);
        enc.push_source(12, &[], &mut none);
        enc.push_source(13, &[8, 8], &mut none);
        let (info, p) = repair(&mut enc).unwrap();
        assert_eq!(info.scheme, SchemeId::Xor);
        assert_eq!(
            (info.first_esi, info.nss, info.repair_key, info.dt),
            (11, 3, 0, 15)
        );
        // [0,1,4] ^ [0,0] ^ [0,2,8,8]
        assert_eq!(p, vec![0, 1 ^ 2, 4 ^ 8, 8]);
        assert_eq!(repair(&mut enc).unwrap().0.repair_key, 1);
    }

    #[test]
    fn rlc_repair_matches_coefficients() {
        let cfg = RlcConfig {
            window: 4,
            dt: 15,
            field: Field::Gf256,
        };
        let mut enc = RlcEncoder::new(cfg);
        let mut none = |_: RepairInfo, _: &[u8]| {};
        let syms: [&[u8]; 3] = [&[5, 6], &[7], &[9, 9, 9]];
        for (i, s) in syms.iter().enumerate() {
            enc.push_source((u32::MAX - 1).wrapping_add(i as u32), s, &mut none);
            // wraps
        }
        let (info, p) = repair(&mut enc).unwrap();
        assert_eq!((info.first_esi, info.nss), (u32::MAX - 1, 3));
        let mut cc = [0u8; 3];
        generate_coding_coefficients(0, &mut cc, 15, 8).unwrap();
        let mut want = vec![0u8; 5];
        for (s, c) in syms.iter().zip(cc) {
            let mut prot = Vec::new();
            encode_into(&mut prot, s);
            for (w, b) in want.iter_mut().zip(&prot) {
                *w ^= hirt_gf::mul(c, *b);
            }
        }
        assert_eq!(p, want);
    }

    #[test]
    fn window_slides_and_can_shrink() {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(5));
        let mut none = |_: RepairInfo, _: &[u8]| {};
        assert!(!enc.repair_now(&mut none));
        for esi in 0..8 {
            enc.push_source(esi, &[esi as u8], &mut none);
        }
        assert_eq!(enc.window_len(), 5);
        assert_eq!(enc.unprotected(), 5);
        enc.set_window(2);
        let (info, _) = repair(&mut enc).unwrap();
        assert_eq!((info.first_esi, info.nss), (6, 2));
        assert_eq!(enc.unprotected(), 0);
        enc.set_window(100);
        assert_eq!(enc.window_len(), 5);
    }

    #[test]
    fn gap_restarts_window() {
        let mut enc = RlcEncoder::new(RlcConfig::rlc(5));
        let mut none = |_: RepairInfo, _: &[u8]| {};
        enc.push_source(0, &[1], &mut none);
        enc.push_source(1, &[1], &mut none);
        enc.push_source(7, &[1], &mut none);
        let (info, _) = repair(&mut enc).unwrap();
        assert_eq!((info.first_esi, info.nss), (7, 1));
        enc.push_source(8, &vec![0u8; MAX_SYMBOL_LEN + 1], &mut none);
        assert!(!enc.repair_now(&mut none));
    }
}
