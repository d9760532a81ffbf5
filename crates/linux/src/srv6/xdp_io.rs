//! The AF_XDP side of an SRv6 worker (`hirt srv6 --xdp DEV,...`).
//!
//! On each `--xdp` device an XDP program ([`crate::xdp::SidFilter`]) hands packets addressed to
//! our SIDs to the worker's AF_XDP socket on its queue, before the kernel allocates a socket
//! buffer, routes the packet or queues it on the TUN device. What the worker then forwards (a
//! tagged source, a repair, feedback, a decoded packet) leaves on the socket of the device the
//! kernel's route points to ([`crate::nexthop`]), with the hop limit decremented as the kernel's
//! forwarding would. Whatever hirt cannot send itself goes to the kernel through the SID device
//! as before, so the fast path never changes what is delivered, only how fast.

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::RawFd;
use std::time::Instant;

use crate::metrics::{add, Metrics};
use crate::nexthop::NextHops;
use crate::xdp::Xsk;

const ETH_LEN: usize = 14;

/// One worker's AF_XDP sockets (one per `--xdp` device, on the worker's queue) and its
/// next-hop cache.
pub struct XdpIo {
    socks: Vec<(u32, Xsk)>,
    hops: NextHops,
    unflushed: bool,
    /// Receive drops counted so far (see [`Self::new_drops`]).
    drops: u64,
}

impl std::fmt::Debug for XdpIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpIo")
            .field(
                "devices",
                &self.socks.iter().map(|s| s.0).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl XdpIo {
    /// Opens a socket on queue `queue` of each device (in the calling thread's namespace).
    pub fn open(ifindexes: &[u32], queue: u32) -> io::Result<XdpIo> {
        let mut socks = Vec::with_capacity(ifindexes.len());
        for &idx in ifindexes {
            socks.push((idx, Xsk::open(idx, queue)?));
        }
        Ok(XdpIo {
            socks,
            hops: NextHops::new()?,
            unflushed: false,
            drops: 0,
        })
    }

    /// The sockets, in device order, for [`crate::xdp::SidFilter::register`].
    pub fn sockets(&self) -> impl Iterator<Item = (u32, &Xsk)> {
        self.socks.iter().map(|(i, s)| (*i, s))
    }

    /// Descriptors to poll for received frames.
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.socks.iter().map(|(_, s)| s.as_raw_fd())
    }

    /// Number of sockets.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// Copies the IPv6 packet of the next frame received on socket `i` into `buf` and returns
    /// its length (0 for a frame too short to hold one), or `None` when there is none.
    pub fn recv(&mut self, i: usize, buf: &mut [u8]) -> Option<usize> {
        let mut len = None;
        self.socks[i].1.recv(1, |frame| {
            let n = frame.len().saturating_sub(ETH_LEN).min(buf.len());
            if frame.len() >= ETH_LEN {
                buf[..n].copy_from_slice(&frame[ETH_LEN..ETH_LEN + n]);
            }
            len = Some(n);
        });
        len
    }

    /// Sends `pkt` (an IPv6 packet hirt forwards) out of the device its route points to, if that
    /// is one of ours; `false` when the kernel must forward it instead.
    pub fn send(&mut self, pkt: &[u8], now: Instant, m: &Metrics) -> bool {
        if pkt.len() < 40 || pkt[0] >> 4 != 6 || pkt[7] <= 1 {
            // Too short to route, or the hop limit expires here: the kernel answers with an
            // ICMPv6 Time Exceeded.
            return self.to_kernel(m);
        }
        let da = Ipv6Addr::from(<[u8; 16]>::try_from(&pkt[24..40]).expect("16 bytes"));
        let Some(hop) = self.hops.lookup(da, now) else {
            return self.to_kernel(m);
        };
        if pkt.len() > hop.mtu as usize {
            // The kernel sends the Packet Too Big.
            return self.to_kernel(m);
        }
        let Some(sock) = self
            .socks
            .iter_mut()
            .find(|(i, _)| *i == hop.ifindex)
            .map(|(_, s)| s)
        else {
            return self.to_kernel(m);
        };
        let fill = |frame: &mut [u8]| {
            hop.write_ethernet(frame);
            frame[ETH_LEN..].copy_from_slice(pkt);
            frame[ETH_LEN + 7] -= 1;
        };
        let mut sent = sock.send_with(ETH_LEN + pkt.len(), fill);
        if !sent {
            // Ring full: let the kernel take what it has and retry once.
            let _ = sock.flush();
            sent = sock.send_with(ETH_LEN + pkt.len(), fill);
        }
        if !sent {
            return self.to_kernel(m);
        }
        self.unflushed = true;
        add(&m.global.xdp_sent, 1);
        true
    }

    fn to_kernel(&self, m: &Metrics) -> bool {
        add(&m.global.xdp_to_kernel, 1);
        false
    }

    /// Packets the kernel dropped on their way to our sockets since the last call (receive
    /// ring full, no free frame): the AF_XDP counterpart of drops at the SID device's queue,
    /// which drive overload control and the decoder's local-drop reports.
    pub fn new_drops(&mut self) -> u64 {
        let total: u64 = self
            .socks
            .iter()
            .filter_map(|(_, s)| s.statistics().ok())
            .map(|st| st.rx_dropped + st.rx_ring_full)
            .sum();
        total.saturating_sub(std::mem::replace(&mut self.drops, total))
    }

    /// Makes the kernel transmit what [`Self::send`] queued.
    pub fn flush(&mut self) {
        if !std::mem::take(&mut self.unflushed) {
            return;
        }
        for (_, s) in &mut self.socks {
            if let Err(e) = s.flush() {
                tracing::debug!("AF_XDP flush: {e}");
            }
        }
    }
}
