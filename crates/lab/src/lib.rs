//! The lab (in progress).
pub mod cli;
