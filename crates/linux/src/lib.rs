//! Linux dataplane (in progress).
pub mod bench;
pub mod cli;
