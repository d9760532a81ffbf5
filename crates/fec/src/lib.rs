//! Erasure codes for hirt, all behind the [`FecEncoder`] / [`FecDecoder`] traits.
//!
//! - [`rlc`]: RFC 8681 sliding-window Random Linear Code (FEC Encoding ID 10) over GF(2^8), and
//!   XOR as its m=1 / DT=15 special case;
//! - [`block_xor`]: rQUIC-style block XOR, one repair per block of R sources;
//! - [`layered`]: Maelstrom layered interleaving (r, c, I);
//! - [`rs`]: systematic block Reed-Solomon (k, m).
//!
//! Source symbols are variable-length byte strings (up to [`MAX_SYMBOL_LEN`]). Every code protects
//! the length too ([`symbol`]): a recovered symbol comes back with its exact length.
//!
//! All of this is sans-IO and deterministic: no clock, no sockets, no unseeded randomness.
#![deny(unsafe_code)]

pub mod block_xor;
pub mod coefficients;
pub mod layered;
pub mod rlc;
pub mod rs;
pub mod scheme;
pub mod symbol;
pub mod tinymt;

pub use coefficients::Field;
pub use rlc::{RlcConfig, RlcDecoder, RlcEncoder};
pub use scheme::{DecodeError, Esi, FecDecoder, FecEncoder, RepairInfo, SchemeId, SourceOutcome};

/// Largest source symbol (a jumbo frame).
pub const MAX_SYMBOL_LEN: usize = 9216;
