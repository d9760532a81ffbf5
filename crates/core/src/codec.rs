//! The codes of `hirt_fec`, held in enums so the core can call their concrete reconfiguration
//! methods (`set_window`, `set_block`) besides the `FecEncoder` / `FecDecoder` traits.

use hirt_fec::{DecodeError, Esi, RepairInfo, SourceOutcome};

use crate::config::SchemeConfig;

/// Encoder side of a stream's code.
#[derive(Debug)]
pub(crate) enum EncCodec {
    /// No code.
    None,
}

impl EncCodec {
    pub(crate) fn new(scheme: &SchemeConfig) -> Self {
        match scheme {
            _ => EncCodec::None,
        }
    }

    /// Adds a source; block codes emit their repairs through `out`.
    pub(crate) fn push_source(&mut self, _esi: Esi, _data: &[u8], _out: &mut dyn FnMut(RepairInfo, &[u8])) {
        match self {
            EncCodec::None => {}
        }
    }

    /// One repair over what is protected now; false if nothing is.
    pub(crate) fn repair_now(&mut self, _out: &mut dyn FnMut(RepairInfo, &[u8])) -> bool {
        match self {
            EncCodec::None => false,
        }
    }

    /// Sources a repair sent now would newly protect.
    pub(crate) fn unprotected(&self) -> usize {
        match self {
            EncCodec::None => 0,
        }
    }

    /// Symbol operations one `repair_now` costs now (for overload accounting).
    pub(crate) fn repair_cost(&self) -> u64 {
        match self {
            EncCodec::None => 0,
        }
    }

    /// Applies a controller's window (sliding codes) or block size (block XOR).
    pub(crate) fn set_window(&mut self, _w: u16) {
        match self {
            EncCodec::None => {}
        }
    }

    /// Window / block in use.
    pub(crate) fn window(&self) -> u16 {
        match self {
            EncCodec::None => 0,
        }
    }
}

/// Decoder side of a stream's code.
#[derive(Debug)]
pub(crate) enum DecCodec {
    /// No code.
    None,
}

impl DecCodec {
    pub(crate) fn new(scheme: &SchemeConfig) -> Self {
        match scheme {
            _ => DecCodec::None,
        }
    }

    pub(crate) fn on_source(
        &mut self,
        _esi: Esi,
        _data: &[u8],
        _recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError> {
        match self {
            DecCodec::None => Ok(SourceOutcome::New),
        }
    }

    pub(crate) fn on_repair(
        &mut self,
        _info: &RepairInfo,
        _payload: &[u8],
        _recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        match self {
            DecCodec::None => Err(DecodeError::WrongScheme),
        }
    }

    pub(crate) fn symbol_ops(&self) -> u64 {
        match self {
            DecCodec::None => 0,
        }
    }
}
