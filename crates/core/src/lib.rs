//! The sans-IO tunnel core of hirt: what to do with each packet, and when.
//!
//! The codes in `hirt_fec` decide *what* can be recovered; this crate decides *when* repairs are
//! sent, how feedback flows, and what happens under reordering, overload and sparse traffic
//! (HIRT §IV-V). It holds no sockets, reads no clock and draws no unseeded randomness: time is an
//! injected [`std::time::Instant`], randomness a caller seed. The simulator (`hirt-sim`), the Linux
//! dataplane (`hirt-linux`) and the lab all drive the same [`Encoder`] and [`Decoder`].
//!
//! # Call order (quinn style: `handle_*` are inputs, `poll_*` outputs)
//!
//! Encoder side, per source packet:
//! 1. [`Encoder::handle_source`] -> [`SourceTag`]: forward the original bytes tagged with it;
//! 2. [`Encoder::poll_repair`] until `None`: send each [`Repair`];
//! 3. when feedback arrives: [`Encoder::handle_feedback`];
//! 4. arm a timer at [`Encoder::poll_timeout`]; when it fires call [`Encoder::handle_timeout`],
//!    then drain [`Encoder::poll_repair`] again.
//!
//! Decoder side:
//! 1. [`Decoder::handle_source`] -> [`Verdict`]: deliver at once on `Deliver`, drop on `Duplicate`;
//! 2. [`Decoder::handle_repair`];
//! 3. after either: [`Decoder::poll_recovered`] until `None` (deliver each [`Recovered`]), then
//!    [`Decoder::poll_feedback`] until `None` (send each [`Feedback`] to the encoder);
//! 4. timer: [`Decoder::poll_timeout`] / [`Decoder::handle_timeout`], then poll again.
//!
//! See `docs/core.md` for the feedback layout, the loss-detection rule and the controllers.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod aqm;
mod codec;
pub mod config;
pub mod controller;
mod decoder;
mod encoder;
pub mod feedback;
mod loss;
mod order;
mod overload;
pub mod path;
mod recovery_clock;
mod stats;
mod streams;
mod timestamp;

pub use aqm::AqmConfig;
pub use config::{
    answer_reach_lag, ConfigError, ControllerConfig, Deadline, DecoderConfig, EncoderConfig,
    FecMode, HoldScope, SchemeConfig, AUTO_DEADLINE_FLOOR, DEFAULT_LOSS_REPORT_GAP,
    DEFAULT_OVERLOAD_THRESHOLD, DEFAULT_REPAIR_DELAY, DEFAULT_REPAIR_RETRIES, DEFAULT_WINDOW,
    INITIAL_RTT, LEARNED_ANSWER_REACH_LIMIT, LOSS_REPORT_REPAIR_LAG,
};
pub use decoder::{Decoder, DecoderBuffers, Recovered, SourceFlow, Verdict};
pub use encoder::{Encoder, Repair, SourceAdmission, SourceNeed, SourceTag};
pub use feedback::{EsiRange, Feedback, FeedbackError, FeedbackView, LossReport, TimestampEcho};
pub use hirt_fec::{Esi, RepairInfo, SchemeId};
pub use stats::{DecoderStats, EncoderStats, RecoveryDelays};

/// Identifies one independent encoder/decoder pair inside the tunnel (HIRT Fig. 3): each stream
/// has its own ESI space, code state, controller and feedback.
pub type StreamId = u16;

/// Identifies one path (e.g. one SRv6 segment list) between encoder and decoder. The dataplanes
/// use path 0; feedback carries the id so that per-path RTT and loss need no format change.
pub type PathId = u8;

#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Instant;

    /// A base instant for tests (the only clock read in this crate, and only in tests).
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn t0() -> Instant {
        Instant::now()
    }
}
