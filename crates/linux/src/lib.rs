//! The Linux dataplane of hirt: the sans-IO core (`hirt-core`) driven by real packets.
//!
//! - [`srv6`] / [`srv6_run`]: hirt as an SRv6 network function (encoder and decoder SIDs routed
//!   to a TUN device; HIRT §III);
//! - [`udp`]: a FEC tunnel between two peers over UDP, every packet AEAD-authenticated
//!   ([`crypto`]);
//! - OS plumbing: [`tun`], [`netlink`] (routes and rules), [`netns`] (namespaces for tests and
//!   benchmarks), [`runtime`] (signals);
//! - operations: [`metrics`] (Prometheus), [`control`] (`hirt status`, live controller change),
//!   [`mss`] (TCP MSS clamp);
//! - [`bench`]: `hirt bench dataplane`; [`bench_udp`]: `hirt bench udp`.
//!
//! `unsafe` is confined to the OS interfaces (ioctl, setns, netlink, signal); every block has a
//! `// SAFETY:` comment.
pub mod batch;
pub mod bench;
pub mod bench_udp;
mod checksum;
pub mod config;
pub mod coder;
pub mod engine;
pub mod control;
pub mod crypto;
pub mod ecn;
pub mod ethtool;
pub mod metrics;
pub mod mss;
pub mod netlink;
pub mod netns;
pub mod nexthop;
pub mod runtime;
pub mod srv6;
pub mod srv6_run;
pub mod tun;
pub mod udp;
pub mod xdp;
