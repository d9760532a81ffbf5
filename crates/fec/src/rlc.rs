//! RFC 8681 Sliding Window Random Linear Codes (FEC Encoding ID 10 over GF(2^8), and ID 9 over
//! GF(2), which with DT = 15 is plain XOR).
//!
//! - [`RlcEncoder`] keeps the last `W` source symbols (the *coding window*) in a ring of
//!   preallocated slots and, when the controller asks ([`FecEncoder::repair_now`]), emits one
//!   repair symbol: the linear combination of the window with coefficients derived from an
//!   incrementing Repair_Key ([`crate::coefficients`]).
//! - [`RlcDecoder`] takes source and repair symbols in any order and runs an incremental
//!   Gauss-Jordan elimination: the received equations are kept in reduced row-echelon form over
//!   the unknown source symbols, so each arrival costs at most one row operation per stored
//!   equation, and a source symbol is delivered the moment the equations determine it
//!   (rank-optimal decoding). See `docs/fec.md` for the argument.
//!
//! Symbols are variable-length; their length is protected ([`crate::symbol`]).
//!
//! [`FecEncoder::repair_now`]: crate::FecEncoder::repair_now

mod decoder;
mod encoder;

pub use decoder::{BufferBytes, DecoderStats, RlcDecoder, MAX_REPAIR_LAG};
pub use encoder::{RlcEncoder, MAX_HISTORY};

pub use crate::coefficients::Field;
use crate::SchemeId;

/// Largest coding window the repair header can describe (NSS is a 12-bit field, RFC 8681 §4.1.3).
pub const MAX_WINDOW: u16 = 4095;

/// Parameters shared by both ends of an RLC / XOR stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RlcConfig {
    /// Largest coding window W (number of source symbols a repair may cover), 1..=4095. The
    /// encoder's current window can be lowered at run time ([`RlcEncoder::set_window`]); the
    /// decoder rejects repairs with NSS above this.
    pub window: u16,
    /// Density threshold DT, 0..=15: each coefficient is non-zero with probability (DT+1)/16.
    pub dt: u8,
    /// GF(2^8) (RLC) or GF(2) (XOR-family).
    pub field: Field,
}

impl RlcConfig {
    /// RLC over GF(2^8) with a dense code (DT = 15) and window `window`.
    pub fn rlc(window: u16) -> Self {
        RlcConfig {
            window,
            dt: 15,
            field: Field::Gf256,
        }
    }

    /// XOR: m = 1, DT = 15, i.e. every repair is the XOR of its whole window.
    pub fn xor(window: u16) -> Self {
        RlcConfig {
            window,
            dt: 15,
            field: Field::Gf2,
        }
    }

    /// The scheme announced in repair headers.
    pub fn scheme(&self) -> SchemeId {
        match self.field {
            Field::Gf256 => SchemeId::Rlc,
            Field::Gf2 => SchemeId::Xor,
        }
    }

    /// The window clamped to 1..=[`MAX_WINDOW`] and DT to 0..=15, so a bad configuration can
    /// never make either side emit or accept an invalid header.
    pub(crate) fn sanitized(mut self) -> Self {
        self.window = self.window.clamp(1, MAX_WINDOW);
        self.dt = self.dt.min(15);
        self
    }
}

impl Default for RlcConfig {
    /// W = 200 as in HIRT, dense RLC over GF(2^8).
    fn default() -> Self {
        RlcConfig::rlc(200)
    }
}
