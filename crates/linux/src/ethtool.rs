//! Switching off a device's offloads (legacy ethtool ioctls: the `ethtool` tool may not be
//! installed).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Switches off checksum offload, TSO, GSO and GRO on `ifname` in the calling thread's namespace,
/// so that what the device sends is what a wire would carry: MTU-sized packets with complete
/// checksums. Whoever reads its frames without the kernel's metadata needs that: the lab's link
/// emulator (one loss decision per packet) and hirt's AF_XDP path (a frame from a local sender
/// over a veth otherwise carries only the pseudo-header part of its UDP/TCP checksum).
pub fn disable_offloads(ifname: &str) -> io::Result<()> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    for cmd in [
        ETHTOOL_SGRO,
        ETHTOOL_SGSO,
        ETHTOOL_STSO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
    ] {
        let mut val = EthtoolValue { cmd, data: 0 };
        // SAFETY: ifreq is plain old data; zeroed is a valid value.
        let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
        let name = ifname.as_bytes();
        if name.len() >= ifr.ifr_name.len() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        for (d, s) in ifr.ifr_name.iter_mut().zip(name) {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
        // SAFETY: `ifr` points at `val`, which outlives the call; SIOCETHTOOL reads/writes only
        // the ethtool_value struct.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            // Some features cannot be changed on some devices: that is fine as long as the
            // checksum one (the last, and the one that matters) succeeds.
            if cmd == ETHTOOL_STXCSUM {
                return Err(err);
            }
        }
    }
    Ok(())
}
