//! The Linux dataplane of hirt: the sans-IO core (`hirt-core`) driven by real packets.
//!
//! - [`srv6`] / [`srv6_run`]: hirt as an SRv6 network function (encoder and decoder SIDs routed
//!   to a TUN device; HIRT §III);
//! - [`udp`]: a FEC tunnel between two peers over UDP, every packet AEAD-authenticated
//!   ([`crypto`]);
//! - OS plumbing, from `hirt-os` and re-exported here: [`tun`], [`netlink`] (routes and rules),
//!   [`netns`] (namespaces for tests and benchmarks), [`runtime`] (signals);
//! - operations: [`metrics`] (Prometheus), [`control`] (`hirt status`, live controller change),
//!   [`mss`] (TCP MSS clamp);
//!
//! `unsafe` is confined to the OS interfaces (ioctl, setns, netlink, signal); every block has a
//! `// SAFETY:` comment.
pub mod batch;
mod checksum;
pub mod cli;
pub mod coder;
pub mod control;
pub mod crypto;
pub mod metrics;
pub mod mss;
pub mod srv6;
pub mod srv6_run;
pub mod udp;
pub mod xdp;

/// The OS plumbing of `hirt-os`, also reachable as `crate::netlink`, `hirt_linux::netns` and so on.
pub use hirt_os::{ethtool, netlink, netns, nexthop, runtime, tun};
