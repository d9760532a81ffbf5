//! AF_XDP fast path for the SRv6 SIDs hirt owns.
//!
//! A TUN device costs two copies and a trip through the routing code per packet. With XDP the
//! driver hands packets to a tiny eBPF program before the kernel allocates anything: packets
//! addressed to one of our SIDs go straight to an AF_XDP socket of the receive queue
//! ([`SidFilter`], [`Xsk`]); everything else (neighbour discovery, management traffic, the
//! host's own flows) is passed on to the kernel untouched.
//!
//! No C compiler or libbpf is needed: the program is a few dozen eBPF instructions assembled at
//! run time (with the SIDs baked in as immediates) and loaded, like its XSKMAP
//! and the attachment, with the raw `bpf(2)` syscall. The program is attached through a BPF
//! link, so it goes away when the [`SidFilter`] is dropped or the process dies. [`Xsk`] runs the
//! socket in copy mode, which works on every driver (veth included).
//!
//! Needs `CAP_NET_ADMIN` and `CAP_BPF` (root); the UMEM is locked memory (`CAP_IPC_LOCK` or
//! `RLIMIT_MEMLOCK` large enough).

mod bpf;
mod ring;
mod xsk;

pub use bpf::{
    AttachMode, SidFilter, SourceTag, SourceTap, Untagged, MAX_SIDS, TAP_MAX_PACKET, TAP_RECORD,
};
pub use ring::RingBuf;

/// A zeroed ESI counter for a [`SourceTag`] (an array map of one u32).
pub fn esi_counter() -> std::io::Result<std::os::fd::OwnedFd> {
    bpf::create_counter()
}

/// Zeroed counters of the sources a [`SourceTag`] passes on untagged, by [`Untagged`] reason.
pub fn untagged_counters() -> std::io::Result<std::os::fd::OwnedFd> {
    bpf::create_untagged()
}

/// The count of `why` in counters made by [`untagged_counters`].
pub fn untagged(counters: std::os::fd::RawFd, why: Untagged) -> std::io::Result<u64> {
    bpf::map_lookup_u64(counters, why as u32)
}
pub use xsk::{Xsk, XskStats, FRAMES, FRAME_SIZE};

#[cfg(test)]
mod tests;
