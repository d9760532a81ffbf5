//! An AF_XDP socket in copy mode with its own UMEM.
//!
//! The UMEM is one anonymous mapping of [`FRAMES`] frames of [`FRAME_SIZE`] bytes: the first
//! half circulates through the fill and RX rings, the second half through the TX and
//! completion rings (a free list of TX frames lives in a vector allocated once). The four rings
//! are shared with the kernel: single producer, single consumer, with the indices read with
//! Acquire and published with Release as in libbpf's `xsk.h`.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes per UMEM frame.
pub const FRAME_SIZE: usize = 4096;
/// UMEM frames.
pub const FRAMES: u32 = 4096;
/// Frames given to the kernel for receiving (the rest are for sending).
const FILL_FRAMES: u32 = FRAMES / 2;
const TX_FRAMES: u32 = FRAMES - FILL_FRAMES;
/// Entries of each ring: every frame of its half fits, so returning a frame never waits.
const RING_SIZE: u32 = 2048;
/// Bytes the kernel leaves free at the start of each frame (none: we never prepend).
const HEADROOM: u32 = 0;
/// The most frames a single `sendto` makes the kernel send in copy mode (`TX_BATCH_SIZE`):
/// it answers EAGAIN when more are left.
const KERNEL_TX_BATCH: u32 = 32;

const _: () = assert!(RING_SIZE.is_power_of_two() && RING_SIZE >= FILL_FRAMES);
const _: () = assert!(RING_SIZE >= TX_FRAMES && FRAME_SIZE.is_power_of_two());

/// A memory mapping, unmapped on drop.
#[derive(Debug)]
pub(super) struct Mmap {
    pub(super) ptr: *mut u8,
    len: usize,
}

impl Mmap {
    /// `mmap(NULL, len, RW, flags, fd, off)`.
    pub(super) fn new(
        len: usize,
        flags: libc::c_int,
        fd: RawFd,
        off: libc::off_t,
    ) -> io::Result<Mmap> {
        Mmap::with_prot(len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, off)
    }

    /// `mmap(NULL, len, READ, flags, fd, off)`.
    pub(super) fn new_read_only(
        len: usize,
        flags: libc::c_int,
        fd: RawFd,
        off: libc::off_t,
    ) -> io::Result<Mmap> {
        Mmap::with_prot(len, libc::PROT_READ, flags, fd, off)
    }

    fn with_prot(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: RawFd,
        off: libc::off_t,
    ) -> io::Result<Mmap> {
        // SAFETY: a fresh mapping at an address of the kernel's choosing; nothing else is
        // affected.
        let ptr = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd, off) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and nothing refers to it once we are dropped
        // (the rings and slices handed out borrow the owner of this mapping).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One of the four rings, mapped from the socket.
#[derive(Debug)]
struct Ring {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    /// The entries: `u64` frame addresses (fill, completion) or `xdp_desc` (RX, TX).
    desc: *mut u8,
    mask: u32,
    size: u32,
    /// Our view of the producer index (ours on fill/TX, the kernel's on RX/completion).
    cached_prod: u32,
    /// Our view of the consumer index; on fill/TX it is kept `size` ahead (libbpf's trick),
    /// so `cached_cons - cached_prod` is the number of free entries.
    cached_cons: u32,
    _map: Mmap,
}

impl Ring {
    /// Maps the ring at page offset `pgoff` of `fd` (laid out by `off`), `entry` bytes each.
    fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        entry: usize,
        pgoff: u64,
        producer_side: bool,
    ) -> io::Result<Ring> {
        let len = off.desc as usize + RING_SIZE as usize * entry;
        let map = Mmap::new(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            pgoff as libc::off_t,
        )?;
        // SAFETY: the kernel's offsets lie within the mapping it just gave us (`len` covers
        // the descriptors, the indices and flags come before them).
        let at = |o: u64| unsafe { map.ptr.add(o as usize) };
        let (producer, consumer, flags, desc) = (
            at(off.producer).cast::<AtomicU32>(),
            at(off.consumer).cast::<AtomicU32>(),
            at(off.flags).cast::<AtomicU32>(),
            at(off.desc),
        );
        let mut ring = Ring {
            producer,
            consumer,
            flags,
            desc,
            mask: RING_SIZE - 1,
            size: RING_SIZE,
            cached_prod: 0,
            cached_cons: 0,
            _map: map,
        };
        ring.cached_prod = ring.producer().load(Ordering::Acquire);
        ring.cached_cons = ring.consumer().load(Ordering::Acquire);
        if producer_side {
            ring.cached_cons = ring.cached_cons.wrapping_add(ring.size);
        }
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 in our live shared mapping, only ever accessed atomically.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.consumer }
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as in `producer`.
        let flags = unsafe { &*self.flags };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side: free entries, at least `want` if there are that many.
    fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Producer side: publishes the entries written up to `cached_prod`.
    fn submit(&self) {
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Consumer side: entries ready, at most `max`.
    fn ready(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            self.cached_prod = self.producer().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max)
    }

    /// Consumer side: hands the entries read up to `cached_cons` back.
    fn release(&self) {
        self.consumer().store(self.cached_cons, Ordering::Release);
    }

    /// The address entry `idx` of a fill or completion ring.
    fn addr(&self, idx: u32) -> *mut u64 {
        // SAFETY: `idx & mask` < RING_SIZE entries, all inside the mapping.
        unsafe { self.desc.cast::<u64>().add((idx & self.mask) as usize) }
    }

    /// The descriptor entry `idx` of an RX or TX ring.
    fn xdp_desc(&self, idx: u32) -> *mut libc::xdp_desc {
        // SAFETY: as in `addr`.
        unsafe {
            self.desc
                .cast::<libc::xdp_desc>()
                .add((idx & self.mask) as usize)
        }
    }
}

/// `XDP_STATISTICS` of an [`Xsk`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Received packets dropped (e.g. frame too small for the packet).
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring.
    pub tx_invalid_descs: u64,
    /// Packets dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Packets dropped because the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when woken up.
    pub tx_ring_empty_descs: u64,
}

/// An AF_XDP socket in copy mode with its own UMEM ([`FRAMES`] frames of [`FRAME_SIZE`] bytes,
/// half for the fill ring, half for TX), bound to one queue of one device.
#[derive(Debug)]
pub struct Xsk {
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    /// Closed after the rings are unmapped and before the UMEM is.
    fd: OwnedFd,
    umem: Mmap,
    /// TX frames (UMEM offsets) not in flight; capacity `TX_FRAMES`, never grows.
    tx_free: Vec<u64>,
    /// Bound with `XDP_USE_NEED_WAKEUP`: the rings' flags say when a syscall is needed.
    need_wakeup: bool,
    /// TX descriptors were queued that the kernel may not have been told about.
    tx_kick: bool,
    ifindex: u32,
    queue: u32,
}

// SAFETY: the raw pointers refer to mappings owned by this value (and shared only with the
// kernel); no thread-local state is involved, so another thread may own and use it.
unsafe impl Send for Xsk {}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live `T` and we pass its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(SOL_XDP, opt)` into `out`; returns the length the kernel wrote.
fn getsockopt<T>(fd: &OwnedFd, opt: libc::c_int, out: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `out` is a live, writable `T` of `len` bytes, and `len` a live socklen_t.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (out as *mut T).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

fn context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Xsk {
    /// Creates the socket and its UMEM, fills the fill ring and binds to (`ifindex`, `queue`)
    /// with `XDP_COPY | XDP_USE_NEED_WAKEUP` (plain `XDP_COPY` if the kernel refuses that).
    /// `ifindex` is looked up in the calling thread's network namespace.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        Xsk::create(ifindex, queue).map_err(|e| {
            context(
                e,
                format_args!("AF_XDP socket on ifindex {ifindex} queue {queue}"),
            )
        })
    }

    fn create(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        // SAFETY: socket(2) with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(context(io::Error::last_os_error(), "socket(AF_XDP)"));
        }
        // SAFETY: a new descriptor that nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Mmap::new(
            FRAMES as usize * FRAME_SIZE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
        .map_err(|e| context(e, "UMEM mmap"))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: HEADROOM,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| context(e, "XDP_UMEM_REG"))?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(&fd, opt, &RING_SIZE).map_err(|e| context(e, "XDP ring size"))?;
        }
        // SAFETY: a plain struct of integers, for which all zeroes is a valid value.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let len = getsockopt(&fd, libc::XDP_MMAP_OFFSETS, &mut off)
            .map_err(|e| context(e, "XDP_MMAP_OFFSETS"))?;
        if len != size_of::<libc::xdp_mmap_offsets>() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "kernel too old: XDP rings without flags (need_wakeup)",
            ));
        }
        let desc = size_of::<libc::xdp_desc>();
        let ring = |o, entry, pgoff, producer_side| {
            Ring::map(&fd, o, entry, pgoff, producer_side).map_err(|e| context(e, "ring mmap"))
        };
        let rx = ring(&off.rx, desc, libc::XDP_PGOFF_RX_RING as u64, false)?;
        let tx = ring(&off.tx, desc, libc::XDP_PGOFF_TX_RING as u64, true)?;
        let fill = ring(&off.fr, 8, libc::XDP_UMEM_PGOFF_FILL_RING, true)?;
        let comp = ring(&off.cr, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING, false)?;
        let mut tx_free = Vec::with_capacity(TX_FRAMES as usize);
        tx_free.extend(
            (FILL_FRAMES..FRAMES)
                .rev()
                .map(|f| u64::from(f) * FRAME_SIZE as u64),
        );
        let mut xsk = Xsk {
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            tx_free,
            need_wakeup: true,
            tx_kick: false,
            ifindex,
            queue,
        };
        // The kernel drops what arrives while the fill ring is empty: fill it before binding.
        let n = xsk.fill.free(FILL_FRAMES);
        debug_assert!(n >= FILL_FRAMES);
        for f in 0..FILL_FRAMES {
            // SAFETY: a slot of the fill ring that we own (it is free and not yet submitted).
            unsafe { *xsk.fill.addr(xsk.fill.cached_prod) = u64::from(f) * FRAME_SIZE as u64 };
            xsk.fill.cached_prod = xsk.fill.cached_prod.wrapping_add(1);
        }
        xsk.fill.submit();
        match xsk.bind(libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                xsk.bind(libc::XDP_COPY).map_err(|e2| {
                    context(e2, format_args!("bind (XDP_USE_NEED_WAKEUP refused: {e})"))
                })?;
                xsk.need_wakeup = false;
            }
            Err(e) => return Err(context(e, "bind")),
        }
        Ok(xsk)
    }

    fn bind(&self, flags: u16) -> io::Result<()> {
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: self.ifindex,
            sxdp_queue_id: self.queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a live sockaddr_xdp and we pass its exact size.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_xdp).cast(),
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The device the socket is bound to.
    pub(crate) fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The queue the socket is bound to.
    pub(crate) fn queue(&self) -> u32 {
        self.queue
    }

    /// Hands each received frame (Ethernet header first) to `f`, at most `max` frames, returns
    /// how many; their UMEM frames go straight back to the fill ring. Never blocks.
    pub fn recv(&mut self, max: usize, mut f: impl FnMut(&mut [u8])) -> usize {
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let mut n = self.rx.ready(max);
        if n > 0 {
            // Always true (the fill ring holds all receive frames); kept so frames are never
            // lost if that changes.
            n = n.min(self.fill.free(n));
        }
        for _ in 0..n {
            // SAFETY: an entry the kernel published (Acquire in `ready`) and we have not
            // released yet.
            let desc = unsafe { ptr::read(self.rx.xdp_desc(self.rx.cached_cons)) };
            self.rx.cached_cons = self.rx.cached_cons.wrapping_add(1);
            let (addr, len) = (desc.addr as usize, desc.len as usize);
            if addr
                .checked_add(len)
                .is_some_and(|end| end <= self.umem.len)
            {
                // SAFETY: within the UMEM; the frame is ours until it goes back to the fill
                // ring below, and nothing else refers to it meanwhile.
                let frame = unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr), len) };
                f(frame);
            }
            // SAFETY: a free fill slot we own until `submit`.
            unsafe { *self.fill.addr(self.fill.cached_prod) = (addr & !(FRAME_SIZE - 1)) as u64 };
            self.fill.cached_prod = self.fill.cached_prod.wrapping_add(1);
        }
        if n > 0 {
            self.rx.release();
            self.fill.submit();
        }
        if self.need_wakeup && self.fill.needs_wakeup() {
            // Zero-copy drivers sleep when the fill ring runs dry; a recvfrom wakes them.
            // SAFETY: a zero-length, non-blocking recvfrom with no buffers.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
        }
        n as usize
    }

    /// Queues one frame of `len` bytes (at most [`FRAME_SIZE`]), written by `fill` directly
    /// into a free UMEM frame. Returns false (and does not call `fill`) if no TX slot or frame
    /// is free even after reclaiming completions, or if `len` is too large. The kernel sends
    /// it on the next [`Xsk::flush`].
    pub fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        if len > FRAME_SIZE - HEADROOM as usize {
            return false;
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        if self.tx_free.is_empty() || self.tx.free(1) == 0 {
            return false;
        }
        let addr = self.tx_free.pop().expect("checked above");
        // SAFETY: a TX frame that is ours (on the free list, not in flight), inside the UMEM.
        let frame =
            unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), len) };
        fill(frame);
        let desc = libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        };
        // SAFETY: a free TX slot we own until `submit`.
        unsafe { ptr::write(self.tx.xdp_desc(self.tx.cached_prod), desc) };
        self.tx.cached_prod = self.tx.cached_prod.wrapping_add(1);
        self.tx.submit();
        self.tx_kick = true;
        true
    }

    /// Makes the kernel transmit what was queued (`sendto(MSG_DONTWAIT)` when the TX ring needs
    /// a wakeup, which copy mode always does; EAGAIN/EBUSY/ENOBUFS are not errors: what is
    /// left goes on the next flush) and reclaims completed TX frames.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.tx_kick && (!self.need_wakeup || self.tx.needs_wakeup()) {
            // In copy mode one sendto sends at most KERNEL_TX_BATCH frames and answers EAGAIN
            // if more are left; EBUSY when the device dropped one. Go on while it progresses.
            for _ in 0..RING_SIZE / KERNEL_TX_BATCH + 2 {
                let before = self.tx.consumer().load(Ordering::Acquire);
                // SAFETY: a zero-length, non-blocking sendto with no buffers.
                let rc = unsafe {
                    libc::sendto(
                        self.fd.as_raw_fd(),
                        ptr::null(),
                        0,
                        libc::MSG_DONTWAIT,
                        ptr::null(),
                        0,
                    )
                };
                let err = (rc < 0).then(io::Error::last_os_error);
                let after = self.tx.consumer().load(Ordering::Acquire);
                if after == self.tx.cached_prod {
                    self.tx_kick = false;
                    break;
                }
                if let Some(e) = err {
                    let retry = matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                    );
                    if !retry {
                        return Err(context(e, "AF_XDP sendto"));
                    }
                    if after == before {
                        break;
                    }
                }
            }
        } else {
            self.tx_kick = false;
        }
        self.reclaim();
        Ok(())
    }

    /// Moves completed TX frames back to the free list.
    fn reclaim(&mut self) {
        let n = self.comp.ready(RING_SIZE);
        for _ in 0..n {
            // SAFETY: an entry the kernel published and we have not released yet.
            let addr = unsafe { ptr::read(self.comp.addr(self.comp.cached_cons)) };
            self.comp.cached_cons = self.comp.cached_cons.wrapping_add(1);
            debug_assert!(self.tx_free.len() < self.tx_free.capacity());
            if self.tx_free.len() < self.tx_free.capacity() {
                self.tx_free.push(addr & !(FRAME_SIZE as u64 - 1));
            }
        }
        if n > 0 {
            self.comp.release();
        }
    }

    /// TX frames not in flight.
    #[cfg(test)]
    pub(crate) fn tx_frames_free(&self) -> usize {
        self.tx_free.len()
    }

    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP`, and the fill and TX rings'
    /// need-wakeup flags now.
    #[cfg(test)]
    pub(crate) fn wakeup_flags(&self) -> (bool, bool, bool) {
        (
            self.need_wakeup,
            self.fill.needs_wakeup(),
            self.tx.needs_wakeup(),
        )
    }

    /// For `poll()`: readable when the RX ring has frames.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `XDP_STATISTICS`.
    pub fn statistics(&self) -> io::Result<XskStats> {
        // SAFETY: a plain struct of integers, for which all zeroes is a valid value.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        getsockopt(&self.fd, libc::XDP_STATISTICS, &mut s)
            .map_err(|e| context(e, "XDP_STATISTICS"))?;
        // Older kernels write only the first three counters; the rest stay zero.
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }
}

impl AsFd for Xsk {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
