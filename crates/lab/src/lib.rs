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
//! - [`config`]: what a lab runs ([`config::LabConfig`], [`config::DemoConfig`]), validated;
//! - [`profile`]: the link profiles; [`tuning`]: the tunnel arguments derived from the link;
//! - [`run`]: `hirt lab` and `hirt demo` (build, compare every workload without and with FEC,
//!   report, tear down), through a session (`session`) that runs each workload's server and
//!   client (`dispatch`); `emulator_bench`: `hirt lab --bench-emulator`;
//! - [`outage`]: `hirt lab --scenario outage --tunnel udp|srv6`: failover time of a two-path
//!   tunnel over silent outages of its active path, then HTTP across such outages without FEC,
//!   with FEC on one path and with FEC + failover ([`outage_http`]);
//! - [`inversion`]: `--scenario inversion`: EXP3 convergence and request times across delay
//!   inversions of two paths, against random path choice;
//! - [`bond`]: `--scenario bond`: TCP bulk goodput over two equal paths, bonded and on one;
//! - [`dual`]: the two-path network and tunnel these scenarios share ([`dual_srv6`]: the SRv6
//!   ends).
//!
//! The CLI crate maps its flags onto [`config::LabConfig`]; nothing here parses a command line.
#![deny(unsafe_code)]

pub mod bond;
pub mod config;
mod dispatch;
pub mod dual;
pub mod dual_srv6;
pub mod emu;
mod emulator_bench;
pub mod flood;
pub mod host;
pub mod inversion;
pub mod outage;
pub mod outage_http;
pub mod profile;
pub mod report;
pub mod run;
mod session;
pub mod soak;
pub mod sys;
pub mod topo;
pub mod tuning;
pub mod tunnel;
pub mod workload;

/// The namespaces, children and teardown of a lab: `hirt-os`'s one namespace module.
pub use hirt_os::netns;
