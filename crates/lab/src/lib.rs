//! The hirt lab: what a user runs first.
//!
//! - [`emu`]: a userspace link emulator (delay, jitter, rate, drop-tail queue, the shared loss
//!   models, reordering) forwarding between two veths with AF_PACKET sockets;
//! - [`netns`]: network namespaces and a teardown that runs on drop, on error and on Ctrl-C;
//! - [`topo`]: the lab topology (client, emulated link, server; the tunnel's roles merged into the
//!   two end namespaces);
//! - [`workload`]: real-stack workloads (HTTP/1.1 over kernel TCP, QUIC with quinn, TCP bulk,
//!   4 kB block RPC, MQTT via mosquitto) that record per-request completion times and verify every
//!   response byte;
//! - [`host`]: kernel counters of the end hosts (socket-buffer and queue drops, TCP
//!   retransmissions), so a run tells link losses from host losses;
//! - [`report`]: comparison tables, JSON and SVG CDF plots;
//! - [`cli`]: `hirt lab` and `hirt demo`.
#![deny(unsafe_code)]

pub mod cli;
pub mod emu;
pub mod host;
pub mod report;
pub mod sys;
pub mod topo;
pub mod tunnel;
pub mod workload;

/// The namespaces, children and teardown of a lab: `hirt-os`'s one namespace module.
pub use hirt_os::netns;
