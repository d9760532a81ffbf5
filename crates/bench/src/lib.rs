//! `hirt bench codec`: GF(2^8) kernel and RLC codec throughput, side by side with Intel ISA-L.
//!
//! `unsafe` lives only in the private `isal` module (calling ISA-L through `dlopen`).
#![deny(unsafe_code)]

pub mod codec;
mod isal;
pub mod rlc_bench;
pub mod timing;
