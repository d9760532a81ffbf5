//! TUN devices (`/dev/net/tun`, `IFF_TUN | IFF_NO_PI`), optionally multi-queue.
//!
//! hirt reads whole IPv6 packets from the kernel through a TUN device and writes the packets it
//! forwards back into it: the kernel routes the SIDs hirt owns to the device, and routes whatever
//! hirt writes as if it had arrived on that interface. With `IFF_MULTI_QUEUE` each queue is its
//! own file descriptor, so one thread per queue reads without any lock (HIRT Fig. 3).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `TUNSETOFFLOAD` bits: the device takes partial checksums and TSO (v4, v6, with ECN).
pub const TUN_F_CSUM: libc::c_uint = 0x01;
/// TSO for TCP over IPv4.
pub const TUN_F_TSO4: libc::c_uint = 0x02;
/// TSO for TCP over IPv6.
pub const TUN_F_TSO6: libc::c_uint = 0x04;
/// TSO for TCP with ECN (CWR on the first segment).
pub const TUN_F_TSO_ECN: libc::c_uint = 0x08;

/// One queue of a TUN device. Reads and writes are whole packets.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tun {
    /// Opens (creating if needed) the TUN device `name` in the calling thread's network namespace.
    /// With `multi_queue`, every call with the same name attaches one more queue.
    pub fn open(name: &str, multi_queue: bool) -> io::Result<Tun> {
        Tun::open_with(name, multi_queue, false)
    }

    /// Like [`Tun::open`]; with `vnet_hdr` every packet read or written starts with a
    /// `virtio_net_hdr` (`IFF_VNET_HDR`, see `udp::offload`). All queues of a device must agree.
    pub fn open_with(name: &str, multi_queue: bool, vnet_hdr: bool) -> io::Result<Tun> {
        if name.len() >= libc::IFNAMSIZ || name.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        let path = CString::new("/dev/net/tun").expect("no NUL");
        // SAFETY: `path` is a valid NUL-terminated string; open has no other preconditions.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly opened descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.flags = IFF_TUN
            | IFF_NO_PI
            | if multi_queue { IFF_MULTI_QUEUE } else { 0 }
            | if vnet_hdr { IFF_VNET_HDR } else { 0 };
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`-sized buffer, which `req` is (40 B).
        let rc =
            unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReqFlags) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun {
            fd,
            name: name.to_string(),
        })
    }

    /// Tells the kernel which offloads this queue's reader handles (`TUN_F_*`; needs a device
    /// opened with `vnet_hdr`): with TSO the kernel may hand over TCP packets of up to 64 KiB.
    pub fn set_offload(&self, flags: libc::c_uint) -> io::Result<()> {
        // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                TUNSETOFFLOAD as _,
                flags as libc::c_ulong,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Switches the descriptor to non-blocking mode (for poll-driven loops).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_raw_fd(), on)
    }

    /// Reads one packet into `buf`; returns its length.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Writes one packet.
    pub fn send(&self, pkt: &[u8]) -> io::Result<usize> {
        // SAFETY: `pkt` is valid for reads of `pkt.len()` bytes for the duration of the call.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Sets or clears `O_NONBLOCK` on a descriptor.
pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we hold; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if libc::fcntl(fd, libc::F_SETFL, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits until one of `fds` is readable or `timeout` passes (`ppoll`, nanosecond resolution).
/// Returns a bitmask of the readable entries (bit i for `fds[i]`, at most 8 entries).
pub fn poll_readable(fds: &[RawFd], timeout: std::time::Duration) -> io::Result<u64> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 8];
    let n = fds.len().min(pfds.len());
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfds` holds `n` initialised pollfd entries; `ts` outlives the call; no signal
    // mask is changed (null).
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    let mut mask = 0;
    for (i, p) in pfds[..n].iter().enumerate() {
        if p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
            mask |= 1 << i;
        }
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        assert!(Tun::open("", false).is_err());
        assert!(Tun::open("a-name-far-too-long-for-linux", false).is_err());
    }
}
