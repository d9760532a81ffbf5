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
use std::os::fd::RawFd;

use crate::batch::{from_storage, storage_len, to_storage, BATCH, SLOT};

/// Control buffer per message: room for a TOS / TCLASS cmsg and a `UDP_SEGMENT` / `UDP_GRO`
/// cmsg (24 bytes each) and a receive timestamp (32 bytes), 8-aligned.
const CTRL_WORDS: usize = 12;

/// `SOL_UDP` options (linux/udp.h), defined here because not every libc target exports them.
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Largest coalesced receive (UDP GRO): the largest UDP payload.
const GRO_SLOT: usize = 65_535;
/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on older kernels).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one GSO send (a UDP length is 16 bits; leave room for headers).
const GSO_MAX_BYTES: usize = 65_000;

/// One received datagram: where it lies in which buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    buf: usize,
    off: usize,
    len: usize,
}

/// Datagram buffers with addresses and a TOS byte each.
///
/// **Segmentation offload.** On send, consecutive datagrams to the same address with the same
/// TOS and the same length (the last of a run may be shorter) go out as one `sendmmsg` message
/// with a `UDP_SEGMENT` cmsg (UDP GSO, Linux >= 4.18): the kernel carries the run through its
/// UDP/IP stack once and cuts it into datagrams at the device (or the NIC does), which is most
/// of the cost of sending. A bulk flow's datagrams all have the same length (full-size inner
/// packets plus a fixed overhead), so runs are long. If the kernel refuses a GSO message (`EIO`:
/// the route's device cannot offload checksums, as on a veth with `tx off`), the batch is sent
/// without GSO from then on; a refused run is resent datagram by datagram.
/// On receive ([`TosBatch::receiver`] with [`enable_gro`]), the kernel may hand over a run of
/// datagrams of one sender as one buffer with a `UDP_GRO` cmsg giving the segment size; the
/// batch splits it again, so callers always see datagrams.
pub struct TosBatch {
    bufs: Vec<Vec<u8>>,
    lens: [usize; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    tos: [u8; BATCH],
    /// Kernel receive timestamps (CLOCK_REALTIME ns; 0 = none), see [`enable_rx_timestamps`].
    stamps: [u64; BATCH],
    ctrl: [[u64; CTRL_WORDS]; BATCH],
    count: usize,
    /// Received datagrams (more than `count` when GRO coalesced some).
    segs: Vec<Segment>,
    /// Send runs of equal datagrams with UDP GSO.
    gso: bool,
}

impl std::fmt::Debug for TosBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TosBatch")
            .field("count", &self.count)
            .field("gso", &self.gso)
            .finish()
    }
}

impl Default for TosBatch {
    fn default() -> Self {
        TosBatch::with_slot(SLOT)
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

/// Asks the kernel to timestamp received datagrams when they enter the stack
/// (`SO_TIMESTAMPNS`, CLOCK_REALTIME), read with [`TosBatch::rx_timestamp`]. Returns whether
/// it accepted.
pub fn enable_rx_timestamps(fd: RawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        ) == 0
    }
}

/// Lets the kernel coalesce received datagrams (UDP GRO, Linux >= 5.0). Only for a socket read
/// through a [`TosBatch::receiver`], whose buffers hold a coalesced run. Returns whether the
/// kernel accepted it.
pub fn enable_gro(fd: RawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int.
    unsafe {
        libc::setsockopt(
            fd,
            SOL_UDP,
            UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        ) == 0
    }
}
/// Makes an `SO_REUSEPORT` group of `n` bound sockets (of which `sock` is one) hand each
/// datagram to socket `sender mod n`, `sender` being the sending worker's index in the top 6
/// bits of the AEAD counter (byte 1 of the UDP payload, see `udp`): an eBPF program,
/// [`crate::xdp::steer_by_sender`] (docs/bpf.md).
pub fn steer_by_sender(sock: &UdpSocket, n: usize) -> io::Result<()> {
    crate::xdp::steer_by_sender(sock, n)
}

impl TosBatch {
    fn with_slot(slot: usize) -> TosBatch {
        TosBatch {
            bufs: (0..BATCH)
                .map(|_| hirt_os::heap::committed_buffer(slot))
                .collect(),
            lens: [0; BATCH],
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
            addrs: unsafe { MaybeUninit::zeroed().assume_init() },
            tos: [0; BATCH],
            stamps: [0; BATCH],
            ctrl: [[0; CTRL_WORDS]; BATCH],
            count: 0,
            segs: Vec::with_capacity(BATCH * GSO_MAX_SEGMENTS),
            gso: true,
        }
    }

    /// A batch to receive with, its buffers large enough for coalesced (GRO) runs.
    pub fn receiver() -> TosBatch {
        TosBatch::with_slot(GRO_SLOT)
    }

    /// Sends datagram by datagram, never with UDP GSO (the bench's sender: its pacing is the
    /// point).
    pub fn without_gso(mut self) -> TosBatch {
        self.gso = false;
        self
    }

    /// Whether runs are still sent with UDP GSO (false once the kernel refused it).
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Number of datagrams held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last [`TosBatch::recv`]: its bytes (mutable, for in-place
    /// decryption), source and outer TOS / traffic class (0 when the kernel did not report it).
    pub fn get_mut(&mut self, i: usize) -> (&mut [u8], Option<SocketAddr>, u8) {
        let s = self.segs[i];
        let a = from_storage(&self.addrs[s.buf]);
        (
            &mut self.bufs[s.buf][s.off..s.off + s.len],
            a,
            self.tos[s.buf],
        )
    }

    /// The kernel's receive timestamp of datagram `i` of the last [`TosBatch::recv`]
    /// (CLOCK_REALTIME ns), if timestamps are on ([`enable_rx_timestamps`]).
    pub fn rx_timestamp(&self, i: usize) -> Option<u64> {
        Some(self.stamps[self.segs[i].buf]).filter(|&t| t != 0)
    }

    /// Appends a datagram to send with the given TOS byte (DSCP << 2 | ECN). Returns false when
    /// full or too long.
    pub fn push(&mut self, data: &[u8], to: SocketAddr, tos: u8) -> bool {
        if self.count == BATCH || data.len() > SLOT || data.len() > self.bufs[0].len() {
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

    /// How many datagrams from `i` on can go as one GSO run: same address and TOS, the same
    /// length except that the last may be shorter, within the kernel's limits.
    fn run_len(&self, i: usize) -> usize {
        let size = self.lens[i];
        let (mut n, mut bytes) = (1, size);
        while i + n < self.count
            && n < GSO_MAX_SEGMENTS
            && bytes + self.lens[i + n] <= GSO_MAX_BYTES
            && self.lens[i + n] <= size
            && self.tos[i + n] == self.tos[i]
            && same_addr(&self.addrs[i + n], &self.addrs[i])
        {
            bytes += self.lens[i + n];
            n += 1;
            if self.lens[i + n - 1] < size {
                break;
            }
        }
        n
    }

    /// Sends every datagram held (after a refused datagram, goes on with the rest), then clears.
    /// Returns how many were handed to the kernel.
    pub fn send(&mut self, fd: RawFd) -> usize {
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        for (i, v) in iov.iter_mut().enumerate().take(self.count) {
            v.iov_base = self.bufs[i].as_mut_ptr().cast();
            v.iov_len = self.lens[i];
        }
        // SAFETY: mmsghdr is plain data; zero is a valid initial value we then fill in.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        // First datagram and datagram count of each message.
        let mut first = [0usize; BATCH];
        let mut segs = [0usize; BATCH];
        let mut done = 0;
        let mut sent = 0;
        while done < self.count {
            // (Re)build the messages for what is left; a message is one datagram or a GSO run.
            let mut nmsg = 0;
            let mut i = done;
            while i < self.count {
                let n = if self.gso { self.run_len(i) } else { 1 };
                first[nmsg] = i;
                segs[nmsg] = n;
                let h = &mut msgs[nmsg].msg_hdr;
                *h = self.header(i, n, &mut iov);
                nmsg += 1;
                i += n;
            }
            // SAFETY: the headers point at live buffers (`bufs`, `addrs`, `ctrl`, `iov`) of the
            // stated lengths, which outlive the call.
            let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), nmsg as u32, 0) };
            if r > 0 {
                let m = r as usize;
                let n = first[m - 1] + segs[m - 1] - done;
                done += n;
                sent += n;
                continue;
            }
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if segs[0] > 1 {
                // The kernel refused the GSO run (EIO: no checksum offload on this route;
                // EINVAL: a segment larger than the path MTU allows). Send it datagram by
                // datagram; stop using GSO if it cannot work on this socket.
                if err.raw_os_error() == Some(libc::EIO) {
                    self.gso = false;
                }
                let n = segs[0];
                for k in 0..n {
                    let h = self.header(done + k, 1, &mut iov);
                    // SAFETY: as above, for one message.
                    if unsafe { libc::sendmsg(fd, &h, 0) } >= 0 {
                        sent += 1;
                    }
                }
                done += n;
                continue;
            }
            // Skip the datagram that failed (e.g. no route) and go on with the rest.
            done += 1;
        }
        self.count = 0;
        sent
    }

    /// The message header for datagrams `i..i + n` (`n` > 1: a GSO run of `lens[i]`-byte
    /// segments), with its TOS and segment-size cmsgs in `ctrl[i]`.
    fn header(&mut self, i: usize, n: usize, iov: &mut [libc::iovec; BATCH]) -> libc::msghdr {
        // SAFETY: msghdr is plain data; zero is a valid initial value we then fill in.
        let mut h: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = n as _;
        h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = storage_len(&self.addrs[i]);
        let mut cmsgs: [(libc::c_int, libc::c_int, u32, usize); 2] = [(0, 0, 0, 0); 2];
        let mut k = 0;
        if self.tos[i] != 0 {
            let (level, ty) = if is_v4(&self.addrs[i]) {
                (libc::IPPROTO_IP, libc::IP_TOS)
            } else {
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
            };
            cmsgs[k] = (level, ty, u32::from(self.tos[i]), 4);
            k += 1;
        }
        if n > 1 {
            cmsgs[k] = (SOL_UDP, UDP_SEGMENT, self.lens[i] as u32, 2);
            k += 1;
        }
        if k == 0 {
            return h;
        }
        h.msg_control = self.ctrl[i].as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure size computation.
        h.msg_controllen = cmsgs[..k]
            .iter()
            .map(|c| unsafe { libc::CMSG_SPACE(c.3 as u32) } as usize)
            .sum();
        // SAFETY: msg_control points at `ctrl[i]` (64 bytes, 8-aligned), which holds at most two
        // cmsgs of CMSG_SPACE(4) = 24 bytes each: CMSG_FIRSTHDR/NXTHDR return headers inside it
        // (non-null because msg_controllen covers them), and CMSG_DATA plus the value's size
        // stays inside each.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h);
            for &(level, ty, val, size) in &cmsgs[..k] {
                (*c).cmsg_level = level;
                (*c).cmsg_type = ty;
                (*c).cmsg_len = libc::CMSG_LEN(size as u32) as _;
                if size == 2 {
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), val as u16);
                } else {
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val as _);
                }
                c = libc::CMSG_NXTHDR(&h, c);
            }
        }
        h
    }

    /// Receives up to [`BATCH`] messages without blocking and splits coalesced (GRO) ones.
    /// Returns how many datagrams (0: none queued); [`TosBatch::messages`] tells how many
    /// messages they came in.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let slot = self.bufs[0].len();
        let mut iov: [libc::iovec; BATCH] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: plain data, filled below.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
        for i in 0..BATCH {
            iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            iov[i].iov_len = slot;
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
        self.segs.clear();
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
            let len = if truncated { 0 } else { m.msg_len as usize };
            self.lens[i] = len;
            let (tos, gro, stamp) = received_cmsgs(&m.msg_hdr);
            self.tos[i] = tos;
            self.stamps[i] = stamp;
            split_segments(i, len, gro, &mut self.segs);
        }
        self.count = n;
        Ok(self.segs.len())
    }

    /// Messages the last [`TosBatch::recv`] got (a full batch: more are likely queued).
    pub fn messages(&self) -> usize {
        self.count
    }
}

/// Appends the datagrams of message `buf` (`len` bytes; `gro`: the segment size of a
/// coalesced run, 0 if none). A truncated or empty message yields one empty datagram, which
/// callers drop as malformed.
fn split_segments(buf: usize, len: usize, gro: usize, out: &mut Vec<Segment>) {
    let size = if gro == 0 { len.max(1) } else { gro };
    let mut off = 0;
    loop {
        let l = size.min(len - off);
        out.push(Segment { buf, off, len: l });
        off += l;
        if off >= len {
            break;
        }
    }
}

fn same_addr(a: &libc::sockaddr_storage, b: &libc::sockaddr_storage) -> bool {
    let n = storage_len(a) as usize;
    // SAFETY: both are sockaddr_storage (128 bytes); `n` is at most the size of sockaddr_in6.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts((a as *const libc::sockaddr_storage).cast::<u8>(), n),
            std::slice::from_raw_parts((b as *const libc::sockaddr_storage).cast::<u8>(), n),
        )
    };
    a.ss_family == b.ss_family && x == y
}

fn is_v4(s: &libc::sockaddr_storage) -> bool {
    match from_storage(s) {
        Some(SocketAddr::V4(_)) => true,
        Some(SocketAddr::V6(a)) => a.ip().to_ipv4_mapped().is_some(),
        None => false,
    }
}

/// The TOS / traffic class (0 if none), the GRO segment size (0 if none) and the receive
/// timestamp (CLOCK_REALTIME ns, 0 if none) of a received message.
fn received_cmsgs(h: &libc::msghdr) -> (u8, usize, u64) {
    let (mut tos, mut gro, mut stamp) = (0, 0, 0);
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
                (SOL_UDP, UDP_GRO) if data_len >= 4 => {
                    gro = std::ptr::read_unaligned(d.cast::<libc::c_int>()).max(0) as usize
                }
                (SOL_UDP, UDP_GRO) if data_len >= 2 => {
                    gro = usize::from(std::ptr::read_unaligned(d.cast::<u16>()))
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)
                    if data_len >= std::mem::size_of::<libc::timespec>() =>
                {
                    let ts = std::ptr::read_unaligned(d.cast::<libc::timespec>());
                    stamp = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (tos, gro, stamp)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

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
    /// any source port (loading the selector needs root).
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn reuseport_group_steers_by_sender_index() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
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

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Runs of one address, TOS and length go together; a shorter datagram ends a run; any
    /// change of address or TOS starts a new one.
    #[test]
    fn gso_runs_group_equal_datagrams() {
        let mut b = TosBatch::default();
        for (len, port, tos) in [
            (100, 1, 0),
            (100, 1, 0),
            (60, 1, 0),
            (100, 1, 0),
            (100, 2, 0),
            (100, 2, 4),
            (100, 2, 4),
            (120, 2, 4),
        ] {
            assert!(b.push(&vec![7u8; len], addr(port), tos));
        }
        let mut runs = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let n = b.run_len(i);
            runs.push(n);
            i += n;
        }
        assert_eq!(runs, [3, 1, 1, 2, 1]);
    }

    #[test]
    fn coalesced_messages_split_into_datagrams() {
        let mut v = Vec::new();
        split_segments(3, 250, 100, &mut v);
        split_segments(4, 80, 0, &mut v);
        split_segments(5, 0, 0, &mut v);
        let got: Vec<_> = v.iter().map(|s| (s.buf, s.off, s.len)).collect();
        assert_eq!(
            got,
            [
                (3, 0, 100),
                (3, 100, 100),
                (3, 200, 50),
                (4, 0, 80),
                (5, 0, 0)
            ]
        );
    }

    fn gso_roundtrip(sender: &socket2::Socket) -> (Vec<(Vec<u8>, u8)>, usize, bool) {
        let b = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        b.bind(&addr(0).into()).unwrap();
        enable_recv_tos(&b, true);
        assert!(enable_gro(b.as_raw_fd()));
        let to = b.local_addr().unwrap().as_socket().unwrap();
        let mut out = TosBatch::default();
        for i in 0..BATCH {
            let len = if i == 20 { 500 } else { 1200 };
            let tos = if i >= 25 { 0x28 } else { 0 };
            assert!(out.push(&vec![i as u8; len], to, tos));
        }
        assert_eq!(out.send(sender.as_raw_fd()), BATCH);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut inb = TosBatch::receiver();
        let mut got = Vec::new();
        let mut messages = 0;
        loop {
            let n = inb.recv(b.as_raw_fd()).unwrap();
            if n == 0 {
                break;
            }
            messages += inb.messages();
            for i in 0..n {
                let (d, _, tos) = inb.get_mut(i);
                got.push((d.to_vec(), tos));
            }
        }
        (got, messages, out.gso())
    }

    fn expected() -> Vec<(Vec<u8>, u8)> {
        (0..BATCH)
            .map(|i| {
                let len = if i == 20 { 500 } else { 1200 };
                (vec![i as u8; len], if i >= 25 { 0x28 } else { 0 })
            })
            .collect()
    }

    /// Over loopback (checksum offload, so the kernel takes UDP GSO): 32 datagrams leave in
    /// three GSO messages and arrive coalesced (fewer messages than datagrams), split back into
    /// the same datagrams, in order, each with its TOS.
    #[test]
    fn gso_send_and_gro_receive_keep_every_datagram() {
        let a = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        a.bind(&addr(0).into()).unwrap();
        let (got, messages, gso) = gso_roundtrip(&a);
        assert_eq!(got, expected());
        assert!(gso);
        assert!(
            messages < BATCH,
            "{messages} messages: nothing was coalesced"
        );
    }

    /// A socket that refuses UDP GSO (`SO_NO_CHECK`: EINVAL) still gets every datagram out, one
    /// by one.
    #[test]
    fn refused_gso_runs_are_sent_one_by_one() {
        let a = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        a.bind(&addr(0).into()).unwrap();
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads one c_int.
        let rc = unsafe {
            libc::setsockopt(
                a.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&on as *const libc::c_int).cast(),
                4,
            )
        };
        assert_eq!(rc, 0);
        let (got, messages, _) = gso_roundtrip(&a);
        assert_eq!(got, expected());
        assert_eq!(messages, BATCH, "sent without GSO, nothing to coalesce");
    }

    /// With timestamps on, each datagram carries the time the kernel received it, between the
    /// send and the read; without, none.
    #[test]
    fn receive_timestamps_come_from_the_kernel() {
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        };
        for on in [true, false] {
            let (a, b) = pair(true);
            if on {
                assert!(enable_rx_timestamps(b.as_raw_fd()));
            }
            let to = b.local_addr().unwrap().as_socket().unwrap();
            let before = now();
            let mut out = TosBatch::default();
            out.push(&[1u8; 40], to, 0);
            assert_eq!(out.send(a.as_raw_fd()), 1);
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut inb = TosBatch::default();
            assert_eq!(inb.recv(b.as_raw_fd()).unwrap(), 1);
            let after = now();
            match inb.rx_timestamp(0) {
                Some(t) => assert!(on && (before..=after).contains(&t), "{before} {t} {after}"),
                None => assert!(!on),
            }
        }
    }
}
