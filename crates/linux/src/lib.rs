//! The Linux dataplane of hirt: the sans-IO core (`hirt-core`) driven by real packets.
//!
//! One engine, two transports:
//!
//! - [`engine`]: what both modes share, once: the coder slots of an instance (one encoder and
//!   decoder slot per worker, steered by stream id), each worker's timers, load meter
//!   ([`engine::load`]), controller changes and stats publication, the control socket and
//!   metrics endpoint, the worker threads, and the [`engine::Transmit`] values a mode's state
//!   machine hands its driver to send;
//! - the transports: [`srv6`] (state machine: what happens to a packet at our SIDs, HIRT §III)
//!   with its runtime [`srv6_run`] (TUN and AF_XDP I/O, routes, XDP programs), and [`udp`]
//!   (state machine and runtime of the tunnel over UDP, every datagram AEAD-authenticated by
//!   [`crypto`]);
//! - [`config`]: each mode's configuration as data ([`config::Srv6Config`],
//!   [`config::UdpConfig`]: serde, TOML, `validate()`); the command line maps its flags onto
//!   them, nothing here knows about flags;
//! - packet helpers: [`ecn`] (RFC 6040), [`mss`] (TCP MSS clamp), [`batch`] (`sendmmsg`);
//! - OS plumbing, from `hirt-os` and re-exported here: [`tun`], [`netlink`] (routes and rules),
//!   [`netns`] (namespaces for tests and benchmarks), [`runtime`] (signals); BPF programs and
//!   AF_XDP sockets: [`xdp`];
//! - operations: [`metrics`] (Prometheus, JSON), [`control`] (`hirt status`, live controller
//!   change);
//! - scale-out: [`health`] (`hirt health`: the ingress keeps a multipath route over several
//!   encoder/decoder pairs to those that answer, docs/scale-out.md);
//!
//! Modules depend downwards only: the transports use the engine, the engine uses neither.
//!
//! `unsafe` is confined to the OS interfaces (ioctl, setns, netlink, signal); every block has a
//! `// SAFETY:` comment.
pub mod batch;
mod checksum;
pub mod config;
pub mod control;
pub mod crypto;
pub mod ecn;
pub mod engine;
pub mod health;
pub mod metrics;
pub mod mss;
pub mod srv6;
pub mod srv6_run;
pub mod udp;
pub mod xdp;

/// The OS plumbing of `hirt-os`, also reachable as `crate::netlink`, `hirt_linux::netns` and so on.
pub use hirt_os::{ethtool, netlink, netns, nexthop, runtime, tun};
