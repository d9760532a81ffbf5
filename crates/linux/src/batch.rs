//! Batched UDP I/O with `recvmmsg` / `sendmmsg`: one system call moves up to [`BATCH`]
//! datagrams. Buffers are allocated once; nothing is allocated per packet.

use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Largest datagram handled (bigger ones are truncated and dropped as malformed).
pub const SLOT: usize = 9216 + 128;

/// A set of datagram buffers with addresses.
pub struct Batch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    count: usize,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("count", &self.count).finish()
    }
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            lens: [0; BATCH],
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
            addrs: unsafe { MaybeUninit::zeroed().assume_init() },
            count: 0,
        }
    }
}

impl Batch {
    /// Number of datagrams held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more datagrams fit.
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }

    /// Datagram `i` (received): its bytes (mutable, for in-place decryption) and source.
    pub fn get_mut(&mut self, i: usize) -> (&mut [u8], Option<SocketAddr>) {
        let a = from_storage(&self.addrs[i]);
        (&mut self.bufs[i][..self.lens[i]], a)
    }

    /// Appends a datagram to send (copied). Returns false when full or too long.
    pub fn push(&mut self, data: &[u8], to: SocketAddr) -> bool {
        if self.count == BATCH || data.len() > SLOT {
            return false;
        }
        let i = self.count;
        self.bufs[i][..data.len()].copy_from_slice(data);
        self.lens[i] = data.len();
        to_storage(to, &mut self.addrs[i]);
        self.count += 1;
        true
    }

    /// Forgets every datagram.
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Receives up to [`BATCH`] datagrams without blocking. Returns how many.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: mmsghdr is plain data; zero is a valid initial value we then fill in.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        for i in 0..BATCH {
            iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = SLOT;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        }
        // SAFETY: every msghdr points at live buffers (`bufs`, `addrs`, `iov`) that outlive the
        // call; the kernel writes at most `iov_len` / `msg_namelen` bytes into them.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            self.count = 0;
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        for i in 0..n {
            let truncated = msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = if truncated {
                0
            } else {
                msgs[i].msg_len as usize
            };
        }
        self.count = n;
        Ok(n)
    }

    /// Sends every datagram held (retrying the rest after a partial send), then clears.
    /// Returns how many were sent; datagrams the kernel refuses are dropped.
    pub fn send(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: plain data, filled below.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        for i in 0..self.count {
            iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = self.lens[i];
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msgs[i].msg_hdr.msg_namelen = storage_len(&self.addrs[i]);
        }
        let mut done = 0;
        while done < self.count {
            // SAFETY: the headers point at live buffers of the stated lengths.
            let n = unsafe {
                libc::sendmmsg(fd, msgs[done..].as_mut_ptr(), (self.count - done) as u32, 0)
            };
            if n <= 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Skip the datagram that failed (e.g. no route) and go on with the rest.
                done += 1;
                if done >= self.count {
                    break;
                }
                continue;
            }
            done += n as usize;
        }
        let sent = self.count;
        self.count = 0;
        Ok(sent)
    }
}

/// Length of the socket address held in `s` (for `msg_namelen`).
pub fn storage_len(s: &libc::sockaddr_storage) -> u32 {
    match s.ss_family as i32 {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>() as u32,
        _ => std::mem::size_of::<libc::sockaddr_in6>() as u32,
    }
}

/// Writes `a` into `s` as a `sockaddr_in` / `sockaddr_in6`.
pub fn to_storage(a: SocketAddr, s: &mut libc::sockaddr_storage) {
    match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin =
                unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = v.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(v.ip().octets()),
            };
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 =
                unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as u16;
            sin6.sin6_port = v.port().to_be();
            sin6.sin6_flowinfo = 0;
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: v.ip().octets(),
            };
            sin6.sin6_scope_id = v.scope_id();
        }
    }
}

/// The address in `s` (None for a family other than IPv4/IPv6).
pub fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                0,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn send_and_receive_a_batch_over_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let to = b.local_addr().unwrap();
        let mut out = Batch::default();
        for i in 0..5u8 {
            assert!(out.push(&[i; 100], to));
        }
        assert_eq!(out.send(a.as_raw_fd()).unwrap(), 5);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut inb = Batch::default();
        let n = inb.recv(b.as_raw_fd()).unwrap();
        assert_eq!(n, 5);
        for i in 0..n {
            let (d, from) = inb.get_mut(i);
            assert_eq!(d, &[i as u8; 100][..]);
            assert_eq!(from, Some(a.local_addr().unwrap()));
        }
        assert_eq!(
            inb.recv(b.as_raw_fd()).unwrap(),
            0,
            "nothing more, no blocking"
        );
    }
}
