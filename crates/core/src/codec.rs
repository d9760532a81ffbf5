//! The codes of `hirt_fec`, held in enums so the core can call their concrete reconfiguration
//! methods (`set_window`, `set_block`) besides the `FecEncoder` / `FecDecoder` traits.

use hirt_fec::block_xor::{BlockXorDecoder, BlockXorEncoder, MAX_BLOCK};
use hirt_fec::layered::{LayeredDecoder, LayeredEncoder};
use hirt_fec::rs::{RsDecoder, RsEncoder};
use hirt_fec::{
    DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, RlcConfig, RlcDecoder, RlcEncoder,
    SourceOutcome,
};

use crate::config::SchemeConfig;

/// Encoder side of a stream's code.
#[derive(Debug)]
pub(crate) enum EncCodec {
    /// RLC over GF(2^8) or GF(2) (XOR).
    Rlc(RlcEncoder),
    /// rQUIC block XOR.
    BlockXor(BlockXorEncoder),
    /// Maelstrom layered interleaving, and its r.
    Layered(LayeredEncoder, u16),
    /// Reed-Solomon, and its k.
    Rs(RsEncoder, u16),
    /// No code.
    None,
}

impl EncCodec {
    /// The scheme's encoder. The configuration parser keeps every value inside the ranges the
    /// constructors accept; values are clamped again here so a hand-built config cannot panic.
    pub(crate) fn new(scheme: &SchemeConfig) -> Self {
        match scheme {
            SchemeConfig::Rlc { window, dt } => EncCodec::Rlc(RlcEncoder::new(RlcConfig {
                dt: (*dt).min(15),
                ..RlcConfig::rlc(*window)
            })),
            SchemeConfig::Xor { window } => EncCodec::Rlc(RlcEncoder::new(RlcConfig::xor(*window))),
            SchemeConfig::BlockXor { r } => {
                EncCodec::BlockXor(BlockXorEncoder::new((*r).clamp(1, MAX_BLOCK)))
            }
            SchemeConfig::Layered { r, interleaves } => {
                let (r, il) = layered_params(*r, interleaves);
                EncCodec::Layered(LayeredEncoder::new(r, &il), r)
            }
            SchemeConfig::Rs { k, m } => {
                let k = (*k).clamp(1, 128);
                EncCodec::Rs(RsEncoder::new(k, (*m).clamp(1, 128)), k)
            }
            SchemeConfig::None => EncCodec::None,
        }
    }

    fn as_dyn(&mut self) -> Option<&mut dyn FecEncoder> {
        match self {
            EncCodec::Rlc(c) => Some(c),
            EncCodec::BlockXor(c) => Some(c),
            EncCodec::Layered(c, _) => Some(c),
            EncCodec::Rs(c, _) => Some(c),
            EncCodec::None => None,
        }
    }

    /// Adds a source; block codes emit their repairs through `out`.
    pub(crate) fn push_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        out: &mut dyn FnMut(RepairInfo, &[u8]),
    ) {
        if let Some(c) = self.as_dyn() {
            c.push_source(esi, data, out);
        }
    }

    /// One repair over what is protected now; false if nothing is.
    pub(crate) fn repair_now(&mut self, out: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        self.as_dyn().is_some_and(|c| c.repair_now(out))
    }

    /// A repair over the window that ends just before `end`, and starts no earlier than
    /// `start` if given (sliding RLC); other codes make their usual repair.
    pub(crate) fn repair_until(
        &mut self,
        start: Option<Esi>,
        end: Esi,
        out: &mut dyn FnMut(RepairInfo, &[u8]),
    ) -> bool {
        match (self, start) {
            (EncCodec::Rlc(c), Some(start)) => c.repair_between(start, end, out),
            (EncCodec::Rlc(c), None) => c.repair_until(end, out),
            (other, _) => other.repair_now(out),
        }
    }

    /// Whether a repair over a single source carries it (sliding RLC whose coefficients are
    /// never zero, density threshold 15): an answer to one loss can then cover that loss
    /// alone.
    pub(crate) fn repairs_one_source(&self) -> bool {
        matches!(self, EncCodec::Rlc(c) if c.density_threshold() == 15)
    }

    /// Sources a repair sent now would newly protect.
    pub(crate) fn unprotected(&self) -> usize {
        match self {
            EncCodec::Rlc(c) => c.unprotected(),
            EncCodec::BlockXor(c) => c.unprotected(),
            EncCodec::Layered(c, _) => c.unprotected(),
            EncCodec::Rs(c, _) => c.unprotected(),
            EncCodec::None => 0,
        }
    }

    /// Symbol operations one repair costs now (for overload accounting).
    pub(crate) fn repair_cost(&self) -> u64 {
        match self {
            EncCodec::Rlc(c) => c.window_len() as u64,
            other => u64::from(other.window()),
        }
    }

    /// Applies a controller's window (sliding codes) or block size (block XOR).
    pub(crate) fn set_window(&mut self, w: u16) {
        match self {
            EncCodec::Rlc(c) => c.set_window(w),
            EncCodec::BlockXor(c) => c.set_block(w.clamp(1, MAX_BLOCK)),
            EncCodec::Layered(..) | EncCodec::Rs(..) | EncCodec::None => {}
        }
    }

    /// Lets repairs between explicit bounds cover up to `n` sources (sliding RLC; see
    /// `RlcEncoder::allow_wide_repairs`); other codes ignore it.
    pub(crate) fn allow_wide_repairs(&mut self, n: u16) {
        if let EncCodec::Rlc(c) = self {
            c.allow_wide_repairs(n);
        }
    }

    /// Most sources a repair between explicit bounds may cover beyond the window (0: none was
    /// allowed; see [`Self::allow_wide_repairs`]).
    pub(crate) fn wide_repairs(&self) -> u32 {
        match self {
            EncCodec::Rlc(c) => c.wide_repairs() as u32,
            _ => 0,
        }
    }

    /// Keeps at least `n` sources for repairs over windows that end in the past (sliding RLC;
    /// see `RlcEncoder::set_history`); other codes keep what they keep.
    pub(crate) fn set_history(&mut self, n: u32) {
        if let EncCodec::Rlc(c) = self {
            c.set_history(n as usize);
        }
    }

    /// Sources kept: how far behind the newest a repair's window may start.
    pub(crate) fn history(&self) -> u32 {
        match self {
            EncCodec::Rlc(c) => c.history() as u32,
            other => u32::from(other.window()),
        }
    }

    /// Window / block in use.
    pub(crate) fn window(&self) -> u16 {
        match self {
            EncCodec::Rlc(c) => c.window() as u16,
            EncCodec::BlockXor(c) => c.block(),
            EncCodec::Layered(_, r) => *r,
            EncCodec::Rs(_, k) => *k,
            EncCodec::None => 0,
        }
    }
}

fn layered_params(r: u16, interleaves: &[u16]) -> (u16, Vec<u16>) {
    use hirt_fec::layered::{MAX_INTERLEAVE, MAX_R};
    let mut il: Vec<u16> = interleaves
        .iter()
        .map(|i| (*i).clamp(1, MAX_INTERLEAVE))
        .collect();
    if il.is_empty() {
        il.push(1);
    }
    (r.clamp(1, MAX_R), il)
}

/// Decoder side of a stream's code.
#[derive(Debug)]
pub(crate) enum DecCodec {
    /// RLC / XOR.
    Rlc(RlcDecoder),
    /// Block XOR.
    BlockXor(BlockXorDecoder),
    /// Layered interleaving.
    Layered(LayeredDecoder),
    /// Reed-Solomon.
    Rs(RsDecoder),
    /// No code.
    None,
}

impl DecCodec {
    /// The decoder of `scheme`; a sliding-window one keeps `repair_lag` more sources (see
    /// [`crate::DecoderConfig::repair_lag`]).
    pub(crate) fn new(scheme: &SchemeConfig, repair_lag: u32) -> Self {
        match scheme {
            SchemeConfig::Rlc { window, dt } => DecCodec::Rlc(RlcDecoder::with_repair_lag(
                RlcConfig {
                    dt: (*dt).min(15),
                    ..RlcConfig::rlc(*window)
                },
                repair_lag,
            )),
            SchemeConfig::Xor { window } => DecCodec::Rlc(RlcDecoder::with_repair_lag(
                RlcConfig::xor(*window),
                repair_lag,
            )),
            SchemeConfig::BlockXor { .. } => DecCodec::BlockXor(BlockXorDecoder::new(
                scheme.max_window().clamp(1, MAX_BLOCK),
            )),
            SchemeConfig::Layered { r, interleaves } => {
                let (r, il) = layered_params(*r, interleaves);
                DecCodec::Layered(LayeredDecoder::new(r, &il))
            }
            SchemeConfig::Rs { k, m } => {
                DecCodec::Rs(RsDecoder::new((*k).clamp(1, 128), (*m).clamp(1, 128)))
            }
            SchemeConfig::None => DecCodec::None,
        }
    }

    /// Accepts repairs over up to `nss` sources (sliding RLC; see
    /// `RlcDecoder::accept_repairs_up_to`); other codes ignore it.
    pub(crate) fn accept_repairs_up_to(&mut self, nss: u16) {
        if let DecCodec::Rlc(c) = self {
            c.accept_repairs_up_to(nss);
        }
    }

    /// Grows a sliding-window decoder's span, if repair lag `limit` allows, so that source
    /// `esi` and the window before it stay in it while the head moves on by as much again
    /// (the lag doubles as `esi` falls behind, so growing costs amortized copies). Returns the
    /// new lag.
    pub(crate) fn keep_in_reach(&mut self, esi: Esi, limit: u32) -> Option<u32> {
        let DecCodec::Rlc(c) = self else {
            return None;
        };
        let behind = c.behind(esi)?;
        let window = u32::from(c.config().window);
        let needed = behind.saturating_add(2 * window);
        if needed < c.span() / 2 {
            return None;
        }
        let lag = needed.saturating_mul(2).min(limit);
        c.grow_repair_lag(lag).then_some(lag)
    }

    /// Grows a sliding-window decoder's span so that a repair whose window begins at `first`
    /// (refused: behind the span) would be taken, if repair lag `limit` suffices for it.
    /// Returns the new lag.
    pub(crate) fn grow_to_reach(&mut self, first: Esi, limit: u32) -> Option<u32> {
        let DecCodec::Rlc(c) = self else {
            return None;
        };
        let behind = c.behind(first)?;
        let window = c.config().window;
        if RlcDecoder::span_with_repair_lag(window, limit) <= behind {
            return None; // farther back than the limit reaches: not worth the memory
        }
        let lag = behind.min(limit);
        c.grow_repair_lag(lag).then_some(lag)
    }

    fn as_dyn(&mut self) -> Option<&mut dyn FecDecoder> {
        match self {
            DecCodec::Rlc(c) => Some(c),
            DecCodec::BlockXor(c) => Some(c),
            DecCodec::Layered(c) => Some(c),
            DecCodec::Rs(c) => Some(c),
            DecCodec::None => None,
        }
    }

    pub(crate) fn on_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError> {
        match self.as_dyn() {
            Some(c) => c.on_source(esi, data, recovered),
            None => Ok(SourceOutcome::New),
        }
    }

    pub(crate) fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        match self.as_dyn() {
            Some(c) => c.on_repair(info, payload, recovered),
            None => Err(DecodeError::WrongScheme),
        }
    }

    pub(crate) fn symbol_ops(&self) -> u64 {
        match self {
            DecCodec::Rlc(c) => c.symbol_ops(),
            DecCodec::BlockXor(c) => c.symbol_ops(),
            DecCodec::Layered(c) => c.symbol_ops(),
            DecCodec::Rs(c) => c.symbol_ops(),
            DecCodec::None => 0,
        }
    }

    /// Symbol and equation buffers of a sliding-window code (block codes are not counted).
    pub(crate) fn buffer_bytes(&self) -> hirt_fec::rlc::BufferBytes {
        match self {
            DecCodec::Rlc(c) => c.buffer_bytes(),
            _ => hirt_fec::rlc::BufferBytes::default(),
        }
    }
}
