//! Switching off a device's offloads and counting its receive queues (legacy ethtool ioctls:
//! the `ethtool` tool may not be installed).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_GDRVINFO: u32 = 0x03;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ethtool_channels` of linux/ethtool.h.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `struct ethtool_drvinfo` of linux/ethtool.h.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    counts: [u32; 5],
}

/// A datagram socket to send ethtool ioctls through (in the calling thread's namespace).
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `SIOCETHTOOL` on `ifname` with the command struct `data` (which starts with its `cmd`).
fn ethtool<T>(sock: &OwnedFd, ifname: &str, data: &mut T) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
    let name = ifname.as_bytes();
    if name.len() >= ifr.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (data as *mut T).cast();
    // SAFETY: `ifr` points at `data`, which outlives the call; the callers pass the struct the
    // command reads and writes.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Switches off checksum offload, TSO, GSO and GRO on `ifname` in the calling thread's namespace,
/// so that what the device sends is what a wire would carry: MTU-sized packets with complete
/// checksums. Whoever reads its frames without the kernel's metadata needs that: the lab's link
/// emulator (one loss decision per packet) and hirt's AF_XDP path (a frame from a local sender
/// over a veth otherwise carries only the pseudo-header part of its UDP/TCP checksum).
pub fn disable_offloads(ifname: &str) -> io::Result<()> {
    let sock = ioctl_socket()?;
    for cmd in [
        ETHTOOL_SGRO,
        ETHTOOL_SGSO,
        ETHTOOL_STSO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
    ] {
        let mut val = EthtoolValue { cmd, data: 0 };
        // Some features cannot be changed on some devices: that is fine as long as the
        // checksum one (the last, and the one that matters) succeeds.
        if let Err(err) = ethtool(&sock, ifname, &mut val) {
            if cmd == ETHTOOL_STXCSUM {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// The receive queues `ifname` uses (its receive-only and combined channels), in the calling
/// thread's namespace. An error if the driver does not report its channels.
pub fn rx_queues(ifname: &str) -> io::Result<u32> {
    let sock = ioctl_socket()?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    ethtool(&sock, ifname, &mut ch)?;
    Ok(ch.rx_count + ch.combined_count)
}

/// The name of `ifname`'s driver (e.g. `veth`), in the calling thread's namespace.
pub fn driver(ifname: &str) -> io::Result<String> {
    let sock = ioctl_socket()?;
    // SAFETY: plain old data; zeroed is a valid value.
    let mut info: EthtoolDrvinfo = unsafe { mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    ethtool(&sock, ifname, &mut info)?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use crate::netns::{self, NetNs};

    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn rx_queues_and_driver_of_a_veth() {
        if !netns::available() {
            eprintln!("skipped: needs root and iproute2");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("het")).unwrap();
        ns.ip(&[
            "link",
            "add",
            "q4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            "q1",
        ])
        .unwrap();
        let (peer, four) = ns
            .spawn(|| Ok((super::rx_queues("q1")?, super::rx_queues("q4")?)))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(four, 4);
        // The peer gets the kernel's default (one per possible CPU on recent kernels).
        assert!(peer >= 1);
        let drv = ns.spawn(|| super::driver("q4")).join().unwrap().unwrap();
        assert_eq!(drv, "veth");
        assert!(ns
            .spawn(|| super::rx_queues("nope"))
            .join()
            .unwrap()
            .is_err());
    }
}
