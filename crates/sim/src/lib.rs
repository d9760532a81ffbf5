//! Deterministic discrete-event simulator of the hirt tunnel and its baselines (`hirt sim`).
//!
//! A run ([`scenario::run`]) wires elements together: a traffic [`traffic::Source`], the
//! hirt-core `Encoder`, a forward [`hirt_channel::Link`] (loss model, queue, rate, delay,
//! reordering), the hirt-core `Decoder`, and a reverse link carrying feedback (lossy too). The
//! core is driven only through its public sans-IO API, on a virtual clock. Experiments
//! ([`experiments`]) sweep runs in parallel and draw the HIRT §VIII figures ([`plot`]).
#![deny(unsafe_code)]

pub mod bound;
pub mod command;
pub mod deadline_sweep;
mod events;
pub mod experiments;
pub mod multipath;
pub mod paths_experiments;
pub mod plot;
pub mod scenario;
pub mod traffic;

pub use command::SimConfig;
pub use scenario::{run, AnswerReach, Report, Scenario};
