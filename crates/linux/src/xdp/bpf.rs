//! Loads and attaches hirt's XDP program (`crates/linux/bpf/sid_filter.bpf.c`, see docs/bpf.md)
//! with aya.
//!
//! The object is built by `scripts/bpf-build.sh` and committed, so building hirt needs no C
//! compiler; it is embedded here. One loaded program serves every device it is attached to: the
//! ring buffer, the ESI counter and the counters of untagged sources are shared, and each device
//! has its own block of AF_XDP socket slots.

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};

use aya::maps::{Array, HashMap, Map, MapData, XskMap};
use aya::programs::xdp::XdpLink;
use aya::programs::{ProgramError, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

use super::ring::RingBuf;
use super::Xsk;

/// The compiled program (`scripts/bpf-build.sh`).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/sid_filter.bpf.o");
/// Its entry point (`SEC("xdp")` function).
const PROGRAM: &str = "hirt_sids";

/// At most this many SIDs per program (`MAX_SIDS` in the C).
pub const MAX_SIDS: usize = 4;
/// At most this many devices per loaded program (`MAX_DEVICES` in the C).
pub const MAX_DEVICES: u32 = 8;

/// The tag program wakes hirt when it is this many records behind (`WAKE_BEHIND` in
/// source_tag.h): repairs are coded within ~64 sources (0.6 ms at 100 kpps; below ~32 kpps
/// the worker's 2 ms timer comes first), at most one wake-up per 64 sources.
pub const WAKE_BEHIND: i32 = 64;
/// The largest IPv6 packet a [`SourceTap`] or [`SourceTag`] copies (`TAP_MAX_PACKET`).
pub const TAP_MAX_PACKET: i32 = 2040;
/// Bytes of a ring record (`struct ring_record`): the packet length (u32), the ESI a tag gave
/// it (u32; unused by the tap), the packet.
pub const TAP_RECORD: i32 = 8 + TAP_MAX_PACKET;
/// What one record takes in the ring: its 8-byte header and [`TAP_RECORD`], 8-byte aligned.
pub const RING_RECORD_BYTES: i32 = (8 + TAP_RECORD + 7) & !7;
/// The ring's size when neither a tap nor a tag uses it.
const IDLE_RING_BYTES: u32 = 4096;

/// Sources for the decoder SID that the kernel delivers itself while hirt reads a copy
/// (source_tap.h).
///
/// For a frame to `sid` whose SRH has Segments Left 0 and whose first TLV is of type
/// `source_tlv`, the program copies the IPv6 packet into the ring (record: length as u32, 4
/// unused bytes, the packet) and passes the frame on to the kernel, whose own route for the
/// SID (End.DT6) decapsulates and delivers it. Anything else to the SID (repairs, feedback, a
/// packet of more than [`TAP_MAX_PACKET`] bytes) goes to the AF_XDP socket. A source that finds
/// the ring full is dropped, so that the decoder counts it lost and recovers it, rather than
/// delivering it once through the kernel and again when it recovers what it never saw.
#[derive(Clone, Copy, Debug)]
pub struct SourceTap {
    /// The decoder SID.
    pub sid: Ipv6Addr,
    /// Type of the source TLV.
    pub source_tlv: u8,
}

/// Sources for the encoder SID that the program tags itself and the kernel forwards, while
/// hirt reads a copy to code repairs from (source_tag.h).
///
/// For a frame to `sid` with an SRH of at most 8 segments, no TLV yet, Segments Left >= 1 and
/// `dec_sid` among the segments still to visit, of at most [`TAP_MAX_PACKET`] bytes, the
/// program copies the IPv6 packet as it arrived into the ring (record: its length and its ESI
/// as u32, then the packet), takes the ESI from the program's counter, does the End behaviour
/// (Segments Left - 1, the next segment as destination), inserts the 8-byte source TLV
/// (`source_tlv`, `stream`, the ESI) after the segments, exactly as hirt's own path does, and
/// passes the frame to the kernel, which forwards it. Feedback (Segments Left 0) goes to the
/// AF_XDP socket; other frames to the SID go to the kernel (its End route forwards them
/// unprotected). A frame whose copy cannot be made is passed on untagged and counted
/// ([`Untagged`]); one that cannot be grown after its ESI was taken is dropped (its copy is in
/// the ring: the decoder recovers it). Only frames of receive queue 0 are tagged, so that the
/// ESIs reach the ring in order.
#[derive(Clone, Copy, Debug)]
pub struct SourceTag {
    /// The encoder SID.
    pub sid: Ipv6Addr,
    /// The decoder SID.
    pub dec_sid: Ipv6Addr,
    /// Type of the source TLV.
    pub source_tlv: u8,
    /// Stream id written into the TLV.
    pub stream: u16,
}

/// Why the tag program passed a frame for its SID on untagged: the key of its counter
/// (`enum untagged_reason` in source_tag.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untagged {
    /// It came in on a receive queue other than 0.
    OtherQueue = 0,
    /// It is longer than [`TAP_MAX_PACKET`].
    TooLong = 1,
    /// The ring buffer had no room.
    RingFull = 2,
}

/// How the program got attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`), before any socket buffer exists.
    Native,
    /// On the socket buffer (`XDP_FLAGS_SKB_MODE`), for drivers without XDP support.
    Generic,
}

/// Native first, generic if the driver refuses.
pub const BOTH_MODES: [AttachMode; 2] = [AttachMode::Native, AttachMode::Generic];

impl AttachMode {
    /// The modes to try for `auto` (native, then generic), `native` or `generic`.
    pub fn parse_list(s: &str) -> Option<&'static [AttachMode]> {
        match s {
            "auto" => Some(&BOTH_MODES),
            "native" => Some(&[AttachMode::Native]),
            "generic" => Some(&[AttachMode::Generic]),
            _ => None,
        }
    }

    fn xdp_mode(self) -> XdpMode {
        match self {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        }
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// The errno of the syscall behind an aya error, if one failed.
fn errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    std::iter::successors(Some(e), |e| e.source())
        .find_map(|e| e.downcast_ref::<io::Error>())
        .and_then(io::Error::raw_os_error)
}

/// An aya error as an `io::Error` of the kind of its errno, saying what failed and why.
pub(super) fn aya_error(
    what: impl std::fmt::Display,
    e: impl std::error::Error + 'static,
) -> io::Error {
    match errno(&e) {
        Some(n) => {
            let os = io::Error::from_raw_os_error(n);
            io::Error::new(os.kind(), format!("{what}: {e}: {os}"))
        }
        None => io::Error::other(format!("{what}: {e}")),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the devices of one loaded program share.
struct Shared {
    ebpf: Mutex<Ebpf>,
    /// Slot `device * queues + queue`: the AF_XDP socket.
    xsks: Mutex<XskMap<MapData>>,
    /// ifindex -> device number.
    devices: Mutex<HashMap<MapData, u32, u32>>,
    /// Which ifindex holds each device number.
    slots: Mutex<[Option<u32>; MAX_DEVICES as usize]>,
    queues: u32,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("queues", &self.queues)
            .field("devices", &*lock(&self.slots))
            .finish_non_exhaustive()
    }
}

/// hirt's XDP program, loaded once for any number of devices ([`XdpProgram::attach`]): packets
/// addressed to its SIDs go to the AF_XDP sockets of their device and receive queue, the
/// sources of an optional [`SourceTap`] and [`SourceTag`] are copied into its ring buffer, and
/// everything else goes on to the kernel.
#[derive(Debug, Clone)]
pub struct XdpProgram {
    shared: Arc<Shared>,
}

impl XdpProgram {
    /// Loads the program for `sids` (1..=[`MAX_SIDS`] addresses; the tap's and the tag's SIDs
    /// among them) with `queues` socket slots per device and, when a tap or a tag is given, a
    /// ring buffer of `ring_bytes` (a power of two and a multiple of the page size). On failure
    /// the error carries the verifier's log.
    pub fn load(
        sids: &[Ipv6Addr],
        queues: u32,
        tap: Option<&SourceTap>,
        tag: Option<&SourceTag>,
        ring_bytes: u32,
    ) -> io::Result<XdpProgram> {
        if sids.is_empty() || sids.len() > MAX_SIDS {
            return Err(invalid(format!(
                "XDP SID filter: 1 to {MAX_SIDS} SIDs, not {}",
                sids.len()
            )));
        }
        if queues == 0 || queues > u32::MAX / MAX_DEVICES {
            return Err(invalid(format!(
                "XDP SID filter: 1 to {} queues, not {queues}",
                u32::MAX / MAX_DEVICES
            )));
        }
        let known = |s: &Ipv6Addr| sids.contains(s);
        if !tap.is_none_or(|t| known(&t.sid)) || !tag.is_none_or(|t| known(&t.sid)) {
            return Err(invalid(
                "XDP source tap or tag: its SID is not one of the filter's",
            ));
        }
        let ring_bytes = if tap.is_some() || tag.is_some() {
            let page = super::ring::page_size();
            let bytes = ring_bytes as usize;
            if !bytes.is_power_of_two() || !bytes.is_multiple_of(page) {
                return Err(invalid(
                    "ring buffer size must be a power of two and a multiple of the page size",
                ));
            }
            ring_bytes
        } else {
            IDLE_RING_BYTES.max(super::ring::page_size() as u32)
        };
        let mut sid_table = [[0u8; 16]; MAX_SIDS];
        for (slot, sid) in sid_table.iter_mut().zip(sids) {
            *slot = sid.octets();
        }
        let sid_count = sids.len() as u32;
        let tap_on = u32::from(tap.is_some());
        let tap_sid = tap.map_or([0; 16], |t| t.sid.octets());
        let tap_tlv = tap.map_or(0, |t| t.source_tlv);
        let tag_on = u32::from(tag.is_some());
        let tag_sid = tag.map_or([0; 16], |t| t.sid.octets());
        let tag_dec_sid = tag.map_or([0; 16], |t| t.dec_sid.octets());
        let tag_tlv = tag.map_or(0, |t| t.source_tlv);
        let tag_stream = tag.map_or(0, |t| t.stream);
        let mut ebpf = EbpfLoader::new()
            .override_global("sids", &sid_table, true)
            .override_global("sid_count", &sid_count, true)
            .override_global("queues", &queues, true)
            .override_global("tap_on", &tap_on, true)
            .override_global("tap_sid", &tap_sid, true)
            .override_global("tap_tlv", &tap_tlv, true)
            .override_global("tag_on", &tag_on, true)
            .override_global("tag_sid", &tag_sid, true)
            .override_global("tag_dec_sid", &tag_dec_sid, true)
            .override_global("tag_tlv", &tag_tlv, true)
            .override_global("tag_stream", &tag_stream, true)
            .map_max_entries("xsks", queues * MAX_DEVICES)
            .map_max_entries("ring", ring_bytes)
            .load(OBJECT)
            .map_err(|e| aya_error("loading the XDP object", e))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| io::Error::other(format!("the XDP object has no program {PROGRAM}")))?
            .try_into()
            .map_err(|e| aya_error("XDP program", e))?;
        prog.load().map_err(|e| match e {
            ProgramError::LoadError {
                io_error,
                verifier_log,
            } => io::Error::new(
                io_error.kind(),
                format!("BPF_PROG_LOAD (XDP): {io_error}; verifier log:\n{verifier_log}"),
            ),
            e => aya_error("BPF_PROG_LOAD (XDP)", e),
        })?;
        let xsks =
            XskMap::try_from(take_map(&mut ebpf, "xsks")?).map_err(|e| aya_error("XSKMAP", e))?;
        let devices = HashMap::try_from(take_map(&mut ebpf, "devices")?)
            .map_err(|e| aya_error("device map", e))?;
        Ok(XdpProgram {
            shared: Arc::new(Shared {
                ebpf: Mutex::new(ebpf),
                xsks: Mutex::new(xsks),
                devices: Mutex::new(devices),
                slots: Mutex::new([None; MAX_DEVICES as usize]),
                queues,
            }),
        })
    }

    /// Attaches the program to `ifindex` (looked up in the calling thread's network namespace),
    /// trying the `modes` in order. The attachment is a BPF link, so dropping the returned
    /// [`SidFilter`] (or the process dying) detaches the program. Fails with
    /// [`io::ErrorKind::AlreadyExists`] if the device already has an XDP program.
    pub fn attach(&self, ifindex: u32, modes: &[AttachMode]) -> io::Result<SidFilter> {
        let device = {
            let mut slots = lock(&self.shared.slots);
            let free = slots
                .iter()
                .position(Option::is_none)
                .ok_or_else(|| invalid(format!("XDP program: at most {MAX_DEVICES} devices")))?;
            slots[free] = Some(ifindex);
            free as u32
        };
        let release = |e: io::Error| {
            lock(&self.shared.slots)[device as usize] = None;
            e
        };
        lock(&self.shared.devices)
            .insert(ifindex, device, 0)
            .map_err(|e| release(aya_error("device map update", e)))?;
        let attached = self.link(ifindex, modes);
        let (link, mode) = match attached {
            Ok(l) => l,
            Err(e) => {
                let _ = lock(&self.shared.devices).remove(&ifindex);
                return Err(release(e));
            }
        };
        Ok(SidFilter {
            link: Some(link),
            program: self.clone(),
            ifindex,
            device,
            mode,
        })
    }

    fn link(&self, ifindex: u32, modes: &[AttachMode]) -> io::Result<(XdpLink, AttachMode)> {
        let mut ebpf = lock(&self.shared.ebpf);
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| io::Error::other("the XDP program is gone"))?;
        let mut refused = Vec::new();
        for &mode in modes {
            let (e, errno) = match prog.attach_to_if_index(ifindex, mode.xdp_mode()) {
                Ok(id) => {
                    let link = prog.take_link(id).map_err(|e| aya_error("XDP link", e))?;
                    return Ok((link, mode));
                }
                Err(e) => {
                    let n = errno(&e);
                    (aya_error(format_args!("{mode:?}"), e), n)
                }
            };
            match errno {
                // EBUSY: a link or program in this mode; EEXIST: one in the other mode.
                Some(libc::EBUSY | libc::EEXIST) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "ifindex {ifindex} already has an XDP program attached \
                             ({mode:?} mode attach: {e}); detach it first \
                             (ip link set dev DEV xdp off)"
                        ),
                    ));
                }
                Some(libc::ENODEV) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("XDP attach to ifindex {ifindex}: {e}"),
                    ));
                }
                _ => refused.push(e.to_string()),
            }
        }
        Err(io::Error::other(format!(
            "XDP attach to ifindex {ifindex} refused ({})",
            refused.join("; ")
        )))
    }

    /// A reader of the ring buffer that the tap and the tag fill. One reader per program: the
    /// ring has one consumer position.
    pub fn ring(&self) -> io::Result<RingBuf> {
        let ebpf = lock(&self.shared.ebpf);
        let Some(Map::RingBuf(map)) = ebpf.map("ring") else {
            return Err(io::Error::other("the XDP object has no ring buffer"));
        };
        let size = map
            .info()
            .map_err(|e| aya_error("ring buffer", e))?
            .max_entries();
        RingBuf::from_map(map.fd().as_fd().try_clone_to_owned()?, size)
    }

    /// The counters of the sources the tag passed on untagged, for [`untagged`].
    pub fn untagged_counters(&self) -> io::Result<OwnedFd> {
        map_fd(&lock(&self.shared.ebpf), "untagged")
    }

    /// The counter the tag takes ESIs from: the next ESI is `[0]` (an array of one u32).
    pub fn esi_counter(&self) -> io::Result<OwnedFd> {
        map_fd(&lock(&self.shared.ebpf), "esi")
    }

    /// The program's file descriptor (for [`prog_test_run`]).
    #[cfg(test)]
    pub(super) fn program_fd(&self) -> io::Result<OwnedFd> {
        let ebpf = lock(&self.shared.ebpf);
        let prog: &Xdp = ebpf
            .program(PROGRAM)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| io::Error::other("the XDP program is gone"))?;
        let fd = prog.fd().map_err(|e| aya_error("XDP program", e))?;
        fd.as_fd().try_clone_to_owned()
    }

    /// Serves `ifindex` as device number `device` without attaching (for [`prog_test_run`]),
    /// with `xsk` in its slot of receive queue `queue` if given.
    #[cfg(test)]
    pub(super) fn serve_unattached(
        &self,
        ifindex: u32,
        device: u32,
        queue: u32,
        xsk: Option<&Xsk>,
    ) -> io::Result<()> {
        lock(&self.shared.slots)[device as usize] = Some(ifindex);
        lock(&self.shared.devices)
            .insert(ifindex, device, 0)
            .map_err(|e| aya_error("device map update", e))?;
        match xsk {
            Some(x) => self.set_socket(device, queue, x),
            None => Ok(()),
        }
    }

    /// Puts `xsk` into the socket slot of receive queue `queue` of device number `device`.
    fn set_socket(&self, device: u32, queue: u32, xsk: &Xsk) -> io::Result<()> {
        let slot = device * self.shared.queues + queue;
        lock(&self.shared.xsks)
            .set(slot, xsk.as_raw_fd(), 0)
            .map_err(|e| aya_error(format_args!("XSKMAP update (queue {queue})"), e))
    }
}

fn take_map(ebpf: &mut Ebpf, name: &str) -> io::Result<Map> {
    ebpf.take_map(name)
        .ok_or_else(|| io::Error::other(format!("the XDP object has no map {name}")))
}

fn map_fd(ebpf: &Ebpf, name: &str) -> io::Result<OwnedFd> {
    let map = ebpf
        .map(name)
        .ok_or_else(|| io::Error::other(format!("the XDP object has no map {name}")))?;
    let data = match map {
        Map::Array(d) | Map::HashMap(d) | Map::RingBuf(d) | Map::XskMap(d) => d,
        _ => return Err(io::Error::other(format!("map {name}: unexpected type"))),
    };
    data.fd().as_fd().try_clone_to_owned()
}

/// The count of `why` in the counters of [`XdpProgram::untagged_counters`].
pub fn untagged(counters: RawFd, why: Untagged) -> io::Result<u64> {
    // SAFETY: the caller passes an open map descriptor; it is only borrowed to duplicate it.
    let fd = unsafe { BorrowedFd::borrow_raw(counters) }.try_clone_to_owned()?;
    let map = MapData::from_fd(fd).map_err(|e| aya_error("untagged counters", e))?;
    let counters: Array<MapData, u64> =
        Array::try_from(Map::Array(map)).map_err(|e| aya_error("untagged counters", e))?;
    counters
        .get(&(why as u32), 0)
        .map_err(|e| aya_error("untagged counters", e))
}

/// hirt's XDP program attached to one device: packets addressed to our SIDs go to the AF_XDP
/// sockets of its receive queues ([`SidFilter::register`]), everything else to the kernel.
/// Detached on drop.
#[derive(Debug)]
pub struct SidFilter {
    /// Dropping the link detaches the program.
    link: Option<XdpLink>,
    program: XdpProgram,
    ifindex: u32,
    /// This device's number in the program's socket slots.
    device: u32,
    mode: AttachMode,
}

impl SidFilter {
    /// Loads a program for `sids` (1..=4 addresses) with `queues` socket slots and attaches it
    /// to `ifindex`: native (driver) mode first, generic (skb) mode if the driver refuses.
    /// Fails with [`io::ErrorKind::AlreadyExists`] if the device already has an XDP program.
    /// `ifindex` is looked up in the calling thread's network namespace.
    pub fn attach(ifindex: u32, sids: &[Ipv6Addr], queues: u32) -> io::Result<SidFilter> {
        SidFilter::attach_as(ifindex, sids, queues, &BOTH_MODES)
    }

    /// [`SidFilter::attach`] trying the `modes` in order.
    pub fn attach_as(
        ifindex: u32,
        sids: &[Ipv6Addr],
        queues: u32,
        modes: &[AttachMode],
    ) -> io::Result<SidFilter> {
        XdpProgram::load(sids, queues, None, None, 0)?.attach(ifindex, modes)
    }

    /// Steers queue `queue`'s matching packets to `xsk`, which must be bound to this device and
    /// queue.
    pub fn register(&self, queue: u32, xsk: &Xsk) -> io::Result<()> {
        let queues = self.program.shared.queues;
        if queue >= queues || xsk.ifindex() != self.ifindex || xsk.queue() != queue {
            return Err(invalid(format!(
                "XSKMAP of ifindex {} ({queues} queues): cannot put a socket bound to ifindex {} \
                 queue {} at queue {queue}",
                self.ifindex,
                xsk.ifindex(),
                xsk.queue()
            )));
        }
        self.program.set_socket(self.device, queue, xsk)
    }

    /// How the program got attached.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The program attached.
    pub fn program(&self) -> &XdpProgram {
        &self.program
    }
}

impl Drop for SidFilter {
    fn drop(&mut self) {
        drop(self.link.take());
        let _ = lock(&self.program.shared.devices).remove(&self.ifindex);
        for q in 0..self.program.shared.queues {
            let _ =
                lock(&self.program.shared.xsks).unset(self.device * self.program.shared.queues + q);
        }
        lock(&self.program.shared.slots)[self.device as usize] = None;
    }
}

/// What `BPF_PROG_TEST_RUN` reports for one run of an XDP program.
#[cfg(test)]
#[derive(Debug)]
pub(super) struct TestRun {
    /// The program's return value (the XDP action).
    pub action: u32,
    /// The packet as the program left it.
    pub data: Vec<u8>,
}

/// Runs the XDP program `prog` once on `data_in` with `BPF_PROG_TEST_RUN`. The frame arrives on
/// `rx` (ifindex and receive queue, in the calling thread's network namespace), by default on
/// the loopback device, queue 0. aya has no public call for it.
#[cfg(test)]
pub(super) fn prog_test_run(
    prog: BorrowedFd<'_>,
    data_in: &[u8],
    rx: Option<(u32, u32)>,
) -> io::Result<TestRun> {
    use std::os::fd::AsRawFd;
    /// `union bpf_attr` for `BPF_PROG_TEST_RUN` (linux/bpf.h, struct `test`), zero-padded to
    /// the size the kernel accepts.
    #[repr(C, align(8))]
    #[derive(Default)]
    struct TestAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        _pad: [u32; 13],
    }
    /// `struct xdp_md`, the context passed in.
    #[repr(C)]
    struct XdpMd {
        data: u32,
        data_end: u32,
        data_meta: u32,
        ingress_ifindex: u32,
        rx_queue_index: u32,
        egress_ifindex: u32,
    }
    const BPF_PROG_TEST_RUN: libc::c_int = 10;
    let ctx = rx.map(|(ifindex, queue)| XdpMd {
        data: 0,
        data_end: data_in.len() as u32,
        data_meta: 0,
        ingress_ifindex: ifindex,
        rx_queue_index: queue,
        egress_ifindex: 0,
    });
    // Room for what the program adds in front (XDP headroom is 256 bytes).
    let mut out = vec![0u8; data_in.len() + 256];
    let mut attr = TestAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: data_in.len() as u32,
        data_size_out: out.len() as u32,
        data_in: data_in.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..TestAttr::default()
    };
    if let Some(ctx) = &ctx {
        attr.ctx_size_in = std::mem::size_of::<XdpMd>() as u32;
        attr.ctx_in = ctx as *const XdpMd as u64;
    }
    // SAFETY: attr is a live, writable bpf_attr of the size passed; data_in (data_size_in
    // bytes, read), out (data_size_out bytes, written) and ctx (ctx_size_in bytes, read)
    // outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestAttr,
            std::mem::size_of::<TestAttr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    out.truncate(attr.data_size_out as usize);
    Ok(TestRun {
        action: attr.retval,
        data: out,
    })
}
