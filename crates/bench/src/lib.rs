//! hirt's benchmarks, below the CLI (`hirt bench ...`):
//!
//! - [`codec`]: GF(2^8) kernel and RLC codec throughput, side by side with Intel ISA-L;
//! - [`dataplane`]: forwarding rate and added latency of the SRv6 dataplane over veth
//!   namespaces (root);
//! - [`udp`]: TCP goodput through the UDP tunnel and its CPU cost (root);
//! - [`scaleout`]: two SRv6 encoder/decoder pairs behind the ingress's ECMP, kept by `hirt
//!   health`; how long a killed encoder's flows take to move to the other pair (root).
//!
//! Each bench takes a plain configuration value; the clap flags that fill it live in the CLI
//! crate. `unsafe` lives only in the private `isal` module (calling ISA-L through `dlopen`) and
//! in the private `os` module (the namespace benches' clocks, pinning and socket options).
#![deny(unsafe_code)]

pub mod codec;
pub mod dataplane;
mod isal;
mod os;
pub mod rlc_bench;
pub mod scaleout;
pub mod timing;
pub mod udp;
