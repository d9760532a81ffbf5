//! The few system calls the lab needs that std does not offer (namespaces are `hirt_os::netns`):
//! AF_PACKET raw sockets with batched I/O, switching off veth offloads, timer slack.
//!
//! Every `unsafe` block of the crate lives here, each with its `// SAFETY:` line.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Lowers the calling thread's timer slack to 1 ns so that the emulator's sleeps end on time
/// (the default 50 us slack would add jitter to every delayed packet).
pub fn set_timer_slack_min() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and only affects this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Gives the calling thread real-time priority (SCHED_FIFO `prio`), like the softirq a kernel
/// emulator would run in: a link must not stall because the endpoints it connects are busy.
/// Returns false when not permitted (the emulator then runs at normal priority).
pub fn set_realtime(prio: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: `p` is a valid sched_param; pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}

/// Interface index of `ifname` in the calling thread's namespace.
pub fn if_index(ifname: &str) -> io::Result<i32> {
    let c = CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(idx as i32)
}

/// An AF_PACKET raw socket bound to one interface, non-blocking.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

impl PacketSocket {
    /// Opens a socket on `ifname`. With `rx`, it receives every frame arriving on the interface
    /// (promiscuous, outgoing frames ignored); without, it receives nothing and only transmits
    /// (bypassing the qdisc: the emulator is the queue).
    pub fn open(ifname: &str, rx: bool) -> io::Result<Self> {
        let ifindex = if_index(ifname)?;
        let proto = if rx {
            (libc::ETH_P_ALL as u16).to_be() as i32
        } else {
            0
        };
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let sock = PacketSocket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        if rx {
            sock.setsockopt(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
            sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20)?;
            // SAFETY: packet_mreq is plain old data; zeroed is valid.
            let mut mreq: libc::packet_mreq = unsafe { mem::zeroed() };
            mreq.mr_ifindex = ifindex;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            // SAFETY: `mreq` is a valid packet_mreq and its size is passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_PACKET,
                    libc::PACKET_ADD_MEMBERSHIP,
                    (&mreq as *const libc::packet_mreq).cast(),
                    mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        } else {
            sock.setsockopt(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
            sock.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20)?;
        }
        // SAFETY: sockaddr_ll is plain old data; zeroed is valid.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto as u16;
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and its size is passed.
        let rc = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if rx {
            // Drop what arrived between socket() and bind() on other interfaces.
            let mut buf = [0u8; 64];
            // SAFETY: `buf` is valid for 64 bytes.
            while unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) }
                >= 0
            {}
        }
        Ok(sock)
    }

    fn setsockopt(&self, level: i32, opt: i32, val: i32) -> io::Result<()> {
        // SAFETY: `val` is a valid c_int and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                opt,
                (&val as *const i32).cast(),
                mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped because this socket's receive buffer was full, since the last
    /// call (PACKET_STATISTICS resets on read).
    pub fn take_drops(&self) -> u64 {
        // SAFETY: tpacket_stats is plain old data; zeroed is valid.
        let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for the call and `len` is its size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return 0;
        }
        u64::from(st.tp_drops)
    }

    /// Raw descriptor (for polling).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Preallocated batch of message headers for `recvmmsg`/`sendmmsg`: no allocation per packet.
pub struct Batch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the raw pointers inside point to buffers owned by the thread using the batch; a batch
// is moved into its thread once and never shared.
unsafe impl Send for Batch {}

/// Outcome of one frame of a receive batch.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes of the frame.
    pub len: usize,
    /// The frame was larger than the buffer and was cut.
    pub truncated: bool,
}

impl Batch {
    /// A batch of up to `n` messages.
    pub fn new(n: usize) -> Self {
        // SAFETY: mmsghdr and iovec are plain old data; zeroed is valid.
        let hdrs = vec![unsafe { mem::zeroed::<libc::mmsghdr>() }; n];
        let iovs = vec![
            libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0
            };
            n
        ];
        Batch { hdrs, iovs }
    }

    /// Capacity in messages.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Points message `i` at `buf` (receive buffer or frame to send).
    pub fn set(&mut self, i: usize, buf: &mut [u8]) {
        self.iovs[i] = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let h = &mut self.hdrs[i];
        h.msg_hdr.msg_iov = &mut self.iovs[i];
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_name = std::ptr::null_mut();
        h.msg_hdr.msg_namelen = 0;
        h.msg_hdr.msg_flags = 0;
        h.msg_len = 0;
    }

    /// Receives up to `n` frames (the first `n` messages must have been `set` with buffers that
    /// are still alive). Returns how many arrived; 0 when none is pending.
    pub fn recv(&mut self, fd: RawFd, n: usize, out: &mut [Received]) -> io::Result<usize> {
        let n = n.min(self.hdrs.len());
        // SAFETY: the first `n` headers point at live iovecs/buffers set by `set`.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(err);
        }
        let rc = rc as usize;
        for (o, h) in out.iter_mut().zip(&self.hdrs).take(rc) {
            *o = Received {
                len: h.msg_len as usize,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            };
        }
        Ok(rc)
    }

    /// Sends messages `from..n` (set beforehand). Returns how many were sent.
    pub fn send(&mut self, fd: RawFd, from: usize, n: usize) -> io::Result<usize> {
        if from >= n {
            return Ok(0);
        }
        // SAFETY: headers `from..n` point at live iovecs/buffers set by `set`.
        let rc =
            unsafe { libc::sendmmsg(fd, self.hdrs[from..].as_mut_ptr(), (n - from) as u32, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc as usize)
    }
}

/// Waits until `fd` is readable or `timeout` passes (nanosecond resolution, unlike `poll`).
pub fn wait_readable(fd: RawFd, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` and `ts` are valid for the call; a null sigmask keeps the current one.
    unsafe {
        libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
    }
}

/// CPU time consumed by the calling thread.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writing.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

pub use hirt_os::netns::is_root;
