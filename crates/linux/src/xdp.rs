//! AF_XDP fast path for the SRv6 SIDs hirt owns.
//!
//! A TUN device costs two copies and a trip through the routing code per packet. With XDP the
//! driver hands packets to a tiny eBPF program before the kernel allocates anything: packets
//! addressed to one of our SIDs go straight to an AF_XDP socket of the receive queue
//! ([`SidFilter`], [`Xsk`]); everything else (neighbour discovery, management traffic, the
//! host's own flows) is passed on to the kernel untouched.
//!
//! The program is C (`crates/linux/bpf/sid_filter.bpf.c`), compiled by clang into an object
//! that is committed and embedded (docs/bpf.md says why and how to rebuild it), and loaded and
//! attached with aya; the SIDs are read-only globals set before load. The attachment is a BPF
//! link, so the program goes away when the [`SidFilter`] is dropped or the process dies. [`Xsk`]
//! runs the socket in copy mode, which works on every driver (veth included).
//!
//! Needs `CAP_NET_ADMIN` and `CAP_BPF` (root); the UMEM is locked memory (`CAP_IPC_LOCK` or
//! `RLIMIT_MEMLOCK` large enough).
//!
//! The other BPF program loaded here is the UDP mode's `SO_REUSEPORT` selector
//! ([`steer_by_sender`], `crates/linux/bpf/reuseport_steer.bpf.c`), which shares the toolchain
//! and the loader.

mod bpf;
mod reuseport;
mod ring;
mod xsk;

pub use bpf::{
    untagged, AttachMode, SidFilter, SourceTag, SourceTap, Untagged, XdpProgram, BOTH_MODES,
    MAX_DEVICES, MAX_SIDS, RING_RECORD_BYTES, TAP_MAX_PACKET, TAP_RECORD, WAKE_BEHIND,
};
pub use reuseport::steer_by_sender;
pub use ring::RingBuf;
pub use xsk::{Xsk, XskStats, FRAMES, FRAME_SIZE};

#[cfg(test)]
mod tests;
