//! Sans-IO link elements shared by the simulator (`hirt-sim`) and the real link emulator
//! (`hirt-lab`): loss models, delay with jitter, a rate limiter with a drop-tail queue, and
//! reordering.
//!
//! Every element is deterministic: randomness comes from a caller seed (ChaCha8), time is an
//! injected [`std::time::Instant`]. Nothing here reads a clock or touches a socket, so the same
//! element graph runs under the discrete-event simulator and in front of a real TUN device.
//!
//! Elements are small and composable (Click / neqo `test-fixture/src/sim` style); [`Link`] is the
//! usual composition: loss model, then queue and rate, then delay, then optional reordering.
#![deny(unsafe_code)]

pub mod delay;
pub mod link;
pub mod loss;
pub mod rate;
pub mod reorder;
pub mod schedule;

pub use delay::Delay;
pub use link::{Link, LinkConfig, LinkCounters};
pub use loss::{
    Burst, GilbertElliott, LossModel, LossSpec, NoLoss, ParseLossError, TraceLoss, Uniform,
};
pub use rate::{QueueLimit, RateLimit};
pub use reorder::Reorder;
pub use schedule::{LinkSchedule, ScheduledLink};

/// Builds the deterministic RNG every element uses from a caller seed and an element-specific
/// salt, so that two elements seeded alike still draw independent streams.
pub(crate) fn rng(seed: u64, salt: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::time::Instant;

    /// A base instant for tests (the only clock read in this crate, and only in tests).
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn t0() -> Instant {
        Instant::now()
    }
}
