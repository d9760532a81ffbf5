//! Batched UDP I/O for the UDP tunnel with a traffic class per datagram.
//!
//! `recvmmsg` / `sendmmsg`, [`BATCH`] datagrams per system call, buffers allocated once, plus
//! one control message per datagram (none when the TOS is 0):
//! - on send, an `IP_TOS` (IPv4 or v4-mapped destination) / `IPV6_TCLASS` cmsg, so repairs and
//!   feedback carry `--repair-dscp` while sources carry the inner packet's DSCP and ECN on the
//!   same socket (a socket-wide `IP_TOS` would mark every datagram alike);
//! - on receive, the outer TOS / traffic class (`IP_RECVTOS` / `IPV6_RECVTCLASS`, enabled by
//!   [`enable_recv_tos`]), so a congestion mark (ECN CE) on the outer header reaches the inner
//!   packet (RFC 6040).

use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use crate::batch::{from_storage, storage_len, to_storage, BATCH, SLOT};

/// Control buffer per datagram: room for a TOS and a TCLASS cmsg (24 bytes each), 8-aligned.
const CTRL_WORDS: usize = 8;

/// Datagram buffers with addresses and a TOS byte each.
pub struct TosBatch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    tos: [u8; BATCH],
    ctrl: [[u64; CTRL_WORDS]; BATCH],
    count: usize,
}

impl std::fmt::Debug for TosBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TosBatch")
            .field("count", &self.count)
            .finish()
    }
}

impl Default for TosBatch {
    fn default() -> Self {
        TosBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; SLOT]).collect(),
            lens: [0; BATCH],
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
            addrs: unsafe { MaybeUninit::zeroed().assume_init() },
            tos: [0; BATCH],
            ctrl: [[0; CTRL_WORDS]; BATCH],
            count: 0,
        }
    }
}

/// Asks the kernel to report the TOS / traffic class of received datagrams (both options on an
/// IPv6 socket, which also receives v4-mapped IPv4 datagrams). Failures are ignored: without
/// them every datagram reads as TOS 0 (no ECN propagation, nothing else changes).
pub fn enable_recv_tos(sock: &socket2::Socket, v4: bool) {
    let _ = sock.set_recv_tos_v4(true);
    if !v4 {
        let _ = sock.set_recv_tclass_v6(true);
    }
}

/// Makes an `SO_REUSEPORT` group of `n` bound sockets (of which `sock` is one) hand each
/// datagram to socket `sender mod n`, `sender` being the sending worker's index in the top 6
/// bits of the AEAD counter (byte 1 of the UDP payload, see `udp`). Client worker `t` then
/// always reaches server worker `t mod n`, whatever the kernel's 4-tuple hash would have chosen
/// (with 2 workers the hash puts both client ports on one socket half the time). A classic BPF
/// program of four instructions; the kernel falls back to its hash for a datagram shorter
/// than 2 bytes (the load fails: the program returns 0, socket 0) or if attaching fails.
pub fn steer_by_sender(sock: &UdpSocket, n: usize) -> io::Result<()> {
    // linux/filter.h: BPF_LD|BPF_B|BPF_ABS, BPF_ALU|BPF_RSH|BPF_K, BPF_ALU|BPF_MOD|BPF_K,
    // BPF_RET|BPF_A. The program sees the datagram from the UDP payload on.
    let op = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut prog = [
        op(0x30, 1),
        op(0x74, 2),
        op(0x94, n.max(1) as u32),
        op(0x16, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: setsockopt reads a sock_fprog that points at `prog` (4 instructions), both alive
    // for the duration of the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl TosBatch {
    /// Number of datagrams held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` (received): its bytes (mutable, for in-place decryption), source and outer
    /// TOS / traffic class (0 when the kernel did not report it).
    pub fn get_mut(&mut self, i: usize) -> (&mut [u8], Option<SocketAddr>, u8) {
        let a = from_storage(&self.addrs[i]);
        (&mut self.bufs[i][..self.lens[i]], a, self.tos[i])
    }

    /// Appends a datagram to send with the given TOS byte (DSCP << 2 | ECN). Returns false when
    /// full or too long.
    pub fn push(&mut self, data: &[u8], to: SocketAddr, tos: u8) -> bool {
        if self.count == BATCH || data.len() > SLOT {
            return false;
        }
        let i = self.count;
        self.bufs[i][..data.len()].copy_from_slice(data);
        self.lens[i] = data.len();
        self.tos[i] = tos;
        to_storage(to, &mut self.addrs[i]);
        self.count += 1;
        true
    }

    /// Sends every datagram held (after a refused datagram, goes on with the rest), then clears.
    /// Returns how many were handed to the kernel.
    pub fn send(&mut self, fd: RawFd) -> usize {
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: mmsghdr is plain data; zero is a valid initial value we then fill in.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        for i in 0..self.count {
            iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = self.lens[i];
            let h = &mut msgs[i].msg_hdr;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = storage_len(&self.addrs[i]);
            if self.tos[i] != 0 {
                let v4 = is_v4(&self.addrs[i]);
                let (level, ty) = if v4 {
                    (libc::IPPROTO_IP, libc::IP_TOS)
                } else {
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                };
                let val = libc::c_int::from(self.tos[i]);
                h.msg_control = self.ctrl[i].as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE is a pure size computation.
                h.msg_controllen =
                    unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize };
                // SAFETY: msg_control points at `ctrl[i]` (64 bytes, 8-aligned), which holds one
                // cmsghdr (16 bytes) plus an int: CMSG_FIRSTHDR returns its start (non-null
                // because msg_controllen >= sizeof(cmsghdr)), and CMSG_DATA stays inside it.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val);
                }
            }
        }
        let mut done = 0;
        let mut sent = 0;
        while done < self.count {
            // SAFETY: the headers point at live buffers (`bufs`, `addrs`, `ctrl`, `iov`) of the
            // stated lengths, which outlive the call.
            let n = unsafe {
                libc::sendmmsg(fd, msgs[done..].as_mut_ptr(), (self.count - done) as u32, 0)
            };
            if n <= 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Skip the datagram that failed (e.g. no route) and go on with the rest.
                done += 1;
                continue;
            }
            done += n as usize;
            sent += n as usize;
        }
        self.count = 0;
        sent
    }

    /// Receives up to [`BATCH`] datagrams without blocking. Returns how many (0: none queued).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: plain data, filled below.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        for i in 0..BATCH {
            iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = SLOT;
            let h = &mut msgs[i].msg_hdr;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = CTRL_WORDS * 8;
        }
        // SAFETY: every msghdr points at live buffers (`bufs`, `addrs`, `ctrl`, `iov`) that
        // outlive the call; the kernel writes at most the stated lengths into them.
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
        for (i, m) in msgs.iter().enumerate().take(n) {
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = if truncated { 0 } else { m.msg_len as usize };
            self.tos[i] = received_tos(&m.msg_hdr);
        }
        self.count = n;
        Ok(n)
    }
}

fn is_v4(s: &libc::sockaddr_storage) -> bool {
    match from_storage(s) {
        Some(SocketAddr::V4(_)) => true,
        Some(SocketAddr::V6(a)) => a.ip().to_ipv4_mapped().is_some(),
        None => false,
    }
}

/// The TOS / traffic class cmsg of a received message (0 if none).
fn received_tos(h: &libc::msghdr) -> u8 {
    let mut tos = 0;
    // SAFETY: `h` was filled by recvmmsg: msg_control/msg_controllen describe the control data
    // the kernel wrote into our buffer; CMSG_FIRSTHDR/NXTHDR stay within it, and each data read
    // is bounded by the cmsg's own length check below.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data_len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
            let d = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_TOS) if data_len >= 1 => tos = *d,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data_len >= 4 => {
                    tos = std::ptr::read_unaligned(d.cast::<libc::c_int>()) as u8
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    tos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(v4: bool) -> (socket2::Socket, socket2::Socket) {
        let (dom, addr): (_, SocketAddr) = if v4 {
            (socket2::Domain::IPV4, "127.0.0.1:0".parse().unwrap())
        } else {
            (socket2::Domain::IPV6, "[::1]:0".parse().unwrap())
        };
        let mk = || {
            let s = socket2::Socket::new(dom, socket2::Type::DGRAM, None).unwrap();
            s.bind(&addr.into()).unwrap();
            s
        };
        (mk(), mk())
    }

    /// Every datagram of one `sendmmsg` carries its own TOS, read back from the receiver's cmsg.
    #[test]
    fn per_datagram_tos_over_loopback() {
        for v4 in [true, false] {
            let (a, b) = pair(v4);
            enable_recv_tos(&b, v4);
            let to = b.local_addr().unwrap().as_socket().unwrap();
            let tos = [0u8, 0x28, 0xb8, 0x01, 0x02, 0x2b];
            let mut out = TosBatch::default();
            for (i, &t) in tos.iter().enumerate() {
                assert!(out.push(&[i as u8; 60], to, t));
            }
            assert_eq!(out.send(a.as_raw_fd()), tos.len());
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut inb = TosBatch::default();
            let n = inb.recv(b.as_raw_fd()).unwrap();
            assert_eq!(n, tos.len(), "v4={v4}");
            for (i, &t) in tos.iter().enumerate() {
                let (d, from, got) = inb.get_mut(i);
                assert_eq!(d, &[i as u8; 60][..]);
                assert_eq!(from, a.local_addr().unwrap().as_socket());
                assert_eq!(got, t, "datagram {i} v4={v4}");
            }
        }
    }

    /// Datagrams whose AEAD counter names sender `t` reach socket `t mod 2` of the group, from
    /// any source port.
    #[test]
    fn reuseport_group_steers_by_sender_index() {
        let a = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        a.set_reuse_port(true).unwrap();
        a.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let addr = a.local_addr().unwrap().as_socket().unwrap();
        let b = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        b.set_reuse_port(true).unwrap();
        b.bind(&addr.into()).unwrap();
        let (a, b): (UdpSocket, UdpSocket) = (a.into(), b.into());
        steer_by_sender(&a, 2).unwrap();
        for s in [&a, &b] {
            s.set_nonblocking(true).unwrap();
        }
        let mut sent = [0usize; 2];
        for port in 0..8 {
            let c = UdpSocket::bind("127.0.0.1:0").unwrap();
            for sender in 0..5u8 {
                c.send_to(&[0x01, sender << 2, 0xaa, port], addr).unwrap();
                sent[usize::from(sender % 2)] += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        for (i, s) in [&a, &b].into_iter().enumerate() {
            let mut n = 0;
            let mut buf = [0u8; 16];
            while let Ok(len) = s.recv(&mut buf) {
                assert_eq!(len, 4);
                assert_eq!(
                    usize::from(buf[1] >> 2) % 2,
                    i,
                    "sender {} on socket {i}",
                    buf[1] >> 2
                );
                n += 1;
            }
            assert_eq!(n, sent[i], "socket {i}");
        }
    }
}
