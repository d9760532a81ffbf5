//! The traits every code implements, and the repair description they share with the wire format.

use thiserror::Error;

/// Encoding Symbol ID: the 32-bit sequence number of a source symbol within one stream. Wraps.
pub type Esi = u32;

/// Which code produced a repair symbol. Unknown values are kept so the wire layer can report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemeId {
    /// RFC 8681 RLC over GF(2^8) (m = 8).
    Rlc,
    /// RFC 8681 RLC over GF(2) (m = 1): with DT = 15 this is plain XOR.
    Xor,
    /// rQUIC block XOR: one repair per block of `nss` consecutive sources.
    BlockXor,
    /// Maelstrom layered interleaving: XOR of `nss` sources spaced `stride` apart.
    Layered,
    /// Systematic Reed-Solomon over a block of `nss` sources; `repair_key` is the repair index.
    ReedSolomon,
    /// A code point this build does not know.
    Unknown(u8),
}

impl SchemeId {
    /// The on-the-wire code point.
    pub fn to_u8(self) -> u8 {
        match self {
            SchemeId::Rlc => 1,
            SchemeId::Xor => 2,
            SchemeId::BlockXor => 3,
            SchemeId::Layered => 4,
            SchemeId::ReedSolomon => 5,
            SchemeId::Unknown(v) => v,
        }
    }

    /// Parses a code point, keeping unknown values.
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => SchemeId::Rlc,
            2 => SchemeId::Xor,
            3 => SchemeId::BlockXor,
            4 => SchemeId::Layered,
            5 => SchemeId::ReedSolomon,
            v => SchemeId::Unknown(v),
        }
    }
}

/// Everything a decoder needs to know about a repair symbol besides its payload. This is what the
/// repair TLV / UDP repair header carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepairInfo {
    /// The code that produced it.
    pub scheme: SchemeId,
    /// ESI of the first source symbol covered.
    pub first_esi: Esi,
    /// Number of source symbols covered (RLC: NSS, the window; block codes: the block size k;
    /// layered: r).
    pub nss: u16,
    /// ESI distance between covered symbols: `first_esi + j * stride` for `j < nss`. Layered
    /// interleaving uses its interleave index; every other code uses 1.
    pub stride: u16,
    /// RLC: Repair_Key, the seed of the coding coefficients. Reed-Solomon: the repair index within
    /// the block. Others: 0.
    pub repair_key: u16,
    /// RLC density threshold DT (0..=15). 15 for XOR and the block codes.
    pub dt: u8,
}

/// What a decoder did with a source symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceOutcome {
    /// First time this ESI was seen: deliver it.
    New,
    /// Already received or already recovered: the caller must not deliver it again.
    Duplicate,
    /// So far in the past that the decoder no longer tracks it; the caller decides (the tunnel
    /// core keeps its own delivered-set to tell).
    Stale,
}

/// Why a symbol was refused. The decoder's state is unchanged whenever one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The symbol is longer than [`crate::MAX_SYMBOL_LEN`] (+ the protected length field).
    #[error("symbol too long")]
    SymbolTooLong,
    /// NSS is zero or larger than the configured window / block.
    #[error("invalid number of source symbols")]
    InvalidNss,
    /// DT out of 0..=15, or a field this scheme does not allow.
    #[error("invalid repair parameters")]
    InvalidParameters,
    /// The repair describes a different code than this decoder runs.
    #[error("wrong scheme for this decoder")]
    WrongScheme,
    /// The ESIs lie too far from what the decoder tracks (far past or far future).
    #[error("ESI out of range")]
    OutOfRange,
    /// A recovered symbol's protected length field is inconsistent (corrupted or forged repair).
    #[error("inconsistent recovered length")]
    BadLength,
}

/// Encoder side of a code. The tunnel core owns ESI numbering; it calls `push_source` with
/// consecutive ESIs.
pub trait FecEncoder {
    /// Adds a source symbol. Block codes emit the repairs a full block calls for through `repairs`.
    fn push_source(&mut self, esi: Esi, data: &[u8], repairs: &mut dyn FnMut(RepairInfo, &[u8]));

    /// Emits one repair over what is currently protected (sliding window: the current window;
    /// block codes: the partial block, so sparse traffic is not left unprotected). Returns false
    /// when there is nothing to protect.
    fn repair_now(&mut self, repairs: &mut dyn FnMut(RepairInfo, &[u8])) -> bool;

    /// Number of source symbols that a repair sent now would newly protect, i.e. sources pushed
    /// since the last repair covering them. Used for time-driven repair.
    fn unprotected(&self) -> usize;
}

/// Decoder side of a code.
pub trait FecDecoder {
    /// Takes a received source symbol. Symbols recovered thanks to it are passed to `recovered`
    /// (ESI and exact bytes) before this returns.
    fn on_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError>;

    /// Takes a repair symbol. Symbols it lets us recover are passed to `recovered` before this
    /// returns.
    fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError>;

    /// Symbol-sized row operations done so far (the decoder's work, for overload control and
    /// the simulator's cost report).
    fn symbol_ops(&self) -> u64;
}
