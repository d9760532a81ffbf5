//! `hirt bench codec`.
pub mod codec;
