//! Deterministic discrete-event simulator (in progress).
pub mod cli;
