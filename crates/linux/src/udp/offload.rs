//! TUN segmentation offloads for UDP mode (`IFF_VNET_HDR` + `TUNSETOFFLOAD`), as wireguard-go
//! does: the kernel's TCP hands the TUN device packets of up to 64 KiB (TSO), and takes
//! coalesced runs of segments back (GRO), so the local stack crosses the TUN once per run
//! instead of once per packet. The tunnel itself still protects and carries ordinary
//! MTU-sized packets: [`split`] cuts a TSO packet into the segments the kernel would have
//! sent, and [`Coalescer`] merges consecutive segments of one TCP flow, after decoding, into
//! one write.
//!
//! Every packet read or written through such a device starts with a `virtio_net_hdr` (10
//! bytes, host byte order):
//!
//! ```text
//!  0       1       2               4               6               8              10
//! +-------+-------+---------------+---------------+---------------+---------------+
//! | flags |gso_typ|    hdr_len    |   gso_size    |  csum_start   |  csum_offset  |
//! +-------+-------+---------------+---------------+---------------+---------------+
//! ```
//!
//! `flags` bit 0 (`NEEDS_CSUM`): the L4 checksum holds only the pseudo-header sum; the sum from
//! `csum_start` to the end goes to `csum_start + csum_offset`. `gso_type` 1 = TCPv4, 4 =
//! TCPv6 (bit 7: ECN), 0 = none.

use crate::checksum::{finish, fold, sum_words};

/// Bytes of the `virtio_net_hdr` in front of every packet.
pub const VNET_HDR_LEN: usize = 10;
/// Largest packet a TUN device with TSO hands over (IPv4 total length / IPv6 payload length).
pub const MAX_SUPER: usize = 65_535 + 40;

const F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;
const PROTO_TCP: u8 = 6;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_CWR: u8 = 0x80;

/// Why a packet read from the device could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadError {
    /// Shorter than its headers say, or not IPv4/IPv6 + TCP where TSO says so.
    Malformed,
}

/// The fields of a `virtio_net_hdr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// Bit 0: `NEEDS_CSUM`.
    pub flags: u8,
    /// 0 none, 1 TCPv4, 4 TCPv6; bit 7 ECN.
    pub gso_type: u8,
    /// Length of the headers (IP + TCP) of a GSO packet.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts.
    pub csum_start: u16,
    /// Where the checksum lies, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header at the start of `b` (at least [`VNET_HDR_LEN`] bytes).
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// Writes the header into `b[..VNET_HDR_LEN]`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }
}

/// The IP header facts the offloads need.
#[derive(Clone, Copy, Debug)]
struct Ip {
    v4: bool,
    /// IP header length (IPv6: 40, no extension headers).
    hl: usize,
}

fn parse_ip(p: &[u8]) -> Option<Ip> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 => {
            let hl = usize::from(p[0] & 0x0f) * 4;
            (hl >= 20 && p.len() >= hl).then_some(Ip { v4: true, hl })
        }
        6 if p.len() >= 40 => Some(Ip { v4: false, hl: 40 }),
        _ => None,
    }
}

fn l4_proto(p: &[u8], ip: Ip) -> u8 {
    if ip.v4 {
        p[9]
    } else {
        p[6]
    }
}

/// Pseudo-header sum of a TCP segment of `l4_len` bytes.
fn pseudo_sum(p: &[u8], ip: Ip, l4_len: usize) -> u64 {
    let addrs = if ip.v4 { &p[12..20] } else { &p[8..40] };
    sum_words(0, addrs) + u64::from(PROTO_TCP) + l4_len as u64
}

fn set_ip_len(p: &mut [u8], ip: Ip, total: usize) {
    if ip.v4 {
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[10..12].copy_from_slice(&[0, 0]);
        let c = finish(sum_words(0, &p[..ip.hl]));
        p[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    }
}

/// Fills in the TCP checksum of the segment `p` (IP header + TCP header + payload).
fn tcp_checksum(p: &mut [u8], ip: Ip) {
    let l4 = ip.hl;
    p[l4 + 16..l4 + 18].copy_from_slice(&[0, 0]);
    let c = finish(sum_words(pseudo_sum(p, ip, p.len() - l4), &p[l4..]));
    p[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
}

/// Completes a partial checksum (`NEEDS_CSUM`): the field at `start + offset` holds the
/// pseudo-header sum; the sum over `start..` goes there.
fn complete_checksum(p: &mut [u8], start: usize, offset: usize) -> Result<(), OffloadError> {
    let at = start + offset;
    if at + 2 > p.len() {
        return Err(OffloadError::Malformed);
    }
    let c = finish(sum_words(0, &p[start..]));
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Turns what a TUN read returned (`virtio_net_hdr` + packet, in `read`) into the packets the
/// kernel would have sent without offloads, each built in `out[at..]` and handed to `each`
/// (with `out` whole, so the caller keeps its headroom in front) with its length. A TSO packet becomes its segments (IP length, IPv4 id and checksum, TCP sequence
/// number, flags and checksum per segment); a packet with a partial checksum gets it
/// completed. Returns how many packets were handed over.
pub fn split(
    read: &mut [u8],
    out: &mut [u8],
    at: usize,
    mut each: impl FnMut(&mut [u8], usize),
) -> Result<usize, OffloadError> {
    if at > out.len() {
        return Err(OffloadError::Malformed);
    }
    let hdr = VnetHdr::parse(read).ok_or(OffloadError::Malformed)?;
    let pkt = &mut read[VNET_HDR_LEN..];
    let gso = hdr.gso_type & !GSO_ECN;
    if gso == GSO_NONE {
        if hdr.flags & F_NEEDS_CSUM != 0 {
            complete_checksum(
                pkt,
                usize::from(hdr.csum_start),
                usize::from(hdr.csum_offset),
            )?;
        }
        let n = pkt.len();
        if at + n > out.len() {
            return Err(OffloadError::Malformed);
        }
        out[at..at + n].copy_from_slice(pkt);
        each(out, n);
        return Ok(1);
    }
    if gso != GSO_TCPV4 && gso != GSO_TCPV6 {
        return Err(OffloadError::Malformed);
    }
    let ip = parse_ip(pkt).ok_or(OffloadError::Malformed)?;
    if ip.v4 != (gso == GSO_TCPV4) || l4_proto(pkt, ip) != PROTO_TCP || pkt.len() < ip.hl + 20 {
        return Err(OffloadError::Malformed);
    }
    let thl = usize::from(pkt[ip.hl + 12] >> 4) * 4;
    let hl = ip.hl + thl;
    let mss = usize::from(hdr.gso_size);
    if thl < 20 || pkt.len() < hl || mss == 0 || at + hl + mss > out.len() {
        return Err(OffloadError::Malformed);
    }
    let payload = pkt.len() - hl;
    let seq0 = u32::from_be_bytes(pkt[ip.hl + 4..ip.hl + 8].try_into().expect("4"));
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    let flags0 = pkt[ip.hl + 13];
    let count = payload.div_ceil(mss).max(1);
    for i in 0..count {
        let off = i * mss;
        let len = mss.min(payload - off);
        let seg = &mut out[at..at + hl + len];
        seg[..hl].copy_from_slice(&pkt[..hl]);
        seg[hl..].copy_from_slice(&pkt[hl + off..hl + off + len]);
        if ip.v4 {
            seg[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
        }
        set_ip_len(seg, ip, hl + len);
        let seq = seq0.wrapping_add(off as u32);
        seg[ip.hl + 4..ip.hl + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i + 1 < count {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            flags &= !TCP_CWR;
        }
        seg[ip.hl + 13] = flags;
        tcp_checksum(seg, ip);
        each(out, hl + len);
    }
    Ok(count)
}

/// Merges consecutive in-order segments of one TCP flow into one TSO packet for the TUN
/// device (the kernel's GRO, done before the write). Other packets pass through unchanged,
/// after a `virtio_net_hdr` of zeros. Order is kept: a packet that does not extend the run
/// being built first writes that run.
pub struct Coalescer {
    /// `virtio_net_hdr` + the run: the first segment's headers, then every payload.
    buf: Vec<u8>,
    /// Bytes of `buf` in use (0: no run).
    len: usize,
    ip: Option<Ip>,
    /// IP + TCP header length of the run.
    hl: usize,
    /// Payload bytes of the first segment (the segment size).
    mss: usize,
    segments: usize,
    next_seq: u32,
    /// The run cannot grow (a short segment or PSH ended it).
    closed: bool,
    /// Runs of several segments written since the last [`Coalescer::take_merged`].
    merged: u64,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("len", &self.len)
            .field("segments", &self.segments)
            .finish()
    }
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            buf: hirt_os::heap::committed_buffer(VNET_HDR_LEN + MAX_SUPER),
            len: 0,
            ip: None,
            hl: 0,
            mss: 0,
            segments: 0,
            next_seq: 0,
            closed: false,
            merged: 0,
        }
    }
}

/// A TCP segment that may start or join a run: IPv4 without options or fragmentation, or IPv6
/// without extension headers; only ACK (and PSH) set; some payload.
fn mergeable(p: &[u8]) -> Option<(Ip, usize)> {
    let ip = parse_ip(p)?;
    if l4_proto(p, ip) != PROTO_TCP || p.len() < ip.hl + 20 {
        return None;
    }
    if ip.v4 {
        let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
        let frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff;
        if ip.hl != 20 || frag != 0 || total != p.len() {
            return None;
        }
    } else if usize::from(u16::from_be_bytes([p[4], p[5]])) + 40 != p.len() {
        return None;
    }
    let thl = usize::from(p[ip.hl + 12] >> 4) * 4;
    let hl = ip.hl + thl;
    if thl < 20 || p.len() <= hl || p[ip.hl + 13] & !(TCP_ACK | TCP_PSH) != 0 {
        return None;
    }
    Some((ip, hl))
}

impl Coalescer {
    /// Hands `pkt` (a whole IP packet) on: it joins the run being built, or the run is written
    /// (through `write`, with its `virtio_net_hdr`) and `pkt` starts the next one (or, if it
    /// cannot be merged, is written at once).
    pub fn push(&mut self, pkt: &[u8], write: &mut impl FnMut(&[u8])) {
        let Some((ip, hl)) = mergeable(pkt) else {
            self.flush(write);
            self.write_plain(pkt, write);
            return;
        };
        if self.extends(pkt, ip, hl) {
            let payload = &pkt[hl..];
            let at = self.len;
            self.buf[at..at + payload.len()].copy_from_slice(payload);
            self.len += payload.len();
            self.segments += 1;
            self.next_seq = self.next_seq.wrapping_add(payload.len() as u32);
            let o = VNET_HDR_LEN + ip.hl + 13;
            self.buf[o] |= pkt[ip.hl + 13] & TCP_PSH;
            self.closed = payload.len() < self.mss || pkt[ip.hl + 13] & TCP_PSH != 0;
            return;
        }
        self.flush(write);
        let n = pkt.len();
        self.buf[VNET_HDR_LEN..VNET_HDR_LEN + n].copy_from_slice(pkt);
        self.len = VNET_HDR_LEN + n;
        self.ip = Some(ip);
        self.hl = hl;
        self.mss = n - hl;
        self.segments = 1;
        let seq = u32::from_be_bytes(pkt[ip.hl + 4..ip.hl + 8].try_into().expect("4"));
        self.next_seq = seq.wrapping_add(self.mss as u32);
        self.closed = pkt[ip.hl + 13] & TCP_PSH != 0;
    }

    fn extends(&self, pkt: &[u8], ip: Ip, hl: usize) -> bool {
        let Some(cur) = self.ip else { return false };
        if self.closed || cur.v4 != ip.v4 || hl != self.hl {
            return false;
        }
        let payload = pkt.len() - hl;
        if payload > self.mss || self.len + payload > self.buf.len() {
            return false;
        }
        let run = &self.buf[VNET_HDR_LEN..];
        // Same flow and the same header fields a receiver would look at: IPv4 TOS, TTL,
        // protocol, addresses / IPv6 traffic class, flow label, hop limit, addresses; then
        // ports, the next sequence number, ack, flags (PSH apart), window and options.
        let same_ip = if ip.v4 {
            pkt[1] == run[1]
                && pkt[6] & 0x40 == run[6] & 0x40
                && pkt[8..10] == run[8..10]
                && pkt[12..20] == run[12..20]
        } else {
            pkt[..4] == run[..4] && pkt[6..40] == run[6..40]
        };
        let t = ip.hl;
        let seq = u32::from_be_bytes(pkt[t + 4..t + 8].try_into().expect("4"));
        same_ip
            && pkt[t..t + 4] == run[t..t + 4]
            && seq == self.next_seq
            && pkt[t + 8..t + 12] == run[t + 8..t + 12]
            && pkt[t + 13] & !TCP_PSH == run[t + 13] & !TCP_PSH
            && pkt[t + 14..t + 16] == run[t + 14..t + 16]
            && pkt[t + 20..hl] == run[t + 20..hl]
    }

    /// Writes the run being built, if any: one segment as it came (zero `virtio_net_hdr`);
    /// several as one TSO packet (IP length, a partial TCP checksum, `NEEDS_CSUM`).
    pub fn flush(&mut self, write: &mut impl FnMut(&[u8])) {
        let Some(ip) = self.ip.take() else { return };
        let len = self.len;
        self.len = 0;
        let mut hdr = VnetHdr::default();
        if self.segments > 1 {
            self.merged += 1;
            let p = &mut self.buf[VNET_HDR_LEN..len];
            set_ip_len(p, ip, len - VNET_HDR_LEN);
            let l4_len = p.len() - ip.hl;
            // The checksum field holds the pseudo-header sum; the kernel (or the segmenting
            // device) adds the rest.
            let c = fold(pseudo_sum(p, ip, l4_len));
            p[ip.hl + 16..ip.hl + 18].copy_from_slice(&c.to_be_bytes());
            hdr = VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: if ip.v4 { GSO_TCPV4 } else { GSO_TCPV6 },
                hdr_len: self.hl as u16,
                gso_size: self.mss as u16,
                csum_start: ip.hl as u16,
                csum_offset: 16,
            };
        }
        hdr.emit(&mut self.buf[..VNET_HDR_LEN]);
        write(&self.buf[..len]);
    }

    /// How many runs of several segments were written since the last call.
    pub fn take_merged(&mut self) -> u64 {
        std::mem::take(&mut self.merged)
    }

    fn write_plain(&mut self, pkt: &[u8], write: &mut impl FnMut(&[u8])) {
        let n = pkt.len();
        if VNET_HDR_LEN + n > self.buf.len() {
            return;
        }
        self.buf[..VNET_HDR_LEN].fill(0);
        self.buf[VNET_HDR_LEN..VNET_HDR_LEN + n].copy_from_slice(pkt);
        write(&self.buf[..VNET_HDR_LEN + n]);
    }
}

#[cfg(test)]
mod tests;
