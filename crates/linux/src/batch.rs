//! Sizes and socket-address conversions shared by the batched UDP I/O
//! ([`crate::udp::io::TosBatch`]: `recvmmsg` / `sendmmsg`, one system call moves up to
//! [`BATCH`] datagrams, buffers allocated once, nothing allocated per packet).

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Largest datagram handled (bigger ones are truncated and dropped as malformed).
pub const SLOT: usize = 9216 + 128;

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

    use crate::udp::io::TosBatch;

    #[test]
    fn send_and_receive_a_batch_over_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let to = b.local_addr().unwrap();
        let mut out = TosBatch::default();
        for i in 0..5u8 {
            assert!(out.push(&[i; 100], to, 0));
        }
        assert_eq!(out.send(a.as_raw_fd()), 5);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut inb = TosBatch::default();
        let n = inb.recv(b.as_raw_fd()).unwrap();
        assert_eq!(n, 5);
        for i in 0..n {
            let (d, from, _) = inb.get_mut(i);
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
