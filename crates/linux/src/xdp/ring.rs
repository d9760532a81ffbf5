//! A BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`) read from user space.
//!
//! eBPF programs reserve a record, fill it and submit it; we read the records in the order
//! they were reserved. The layout is the kernel's (kernel/bpf/ringbuf.c, libbpf's ringbuf.c):
//! page 0 of the map's file holds the consumer position, which we write; page 1 the producer
//! position, which the kernel writes; the data pages follow and are mapped twice in a row, so
//! a record that wraps around the end reads as one slice. Each record starts with an 8-byte
//! header: the length (bit 31: still being written, bit 30: discarded) and a page offset we do
//! not need; records are 8-byte aligned.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::xsk::Mmap;

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HDR_LEN: usize = 8;

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// A ring buffer map and our mapping of it.
#[derive(Debug)]
pub struct RingBuf {
    fd: OwnedFd,
    consumer: Mmap,
    /// The producer page followed by the data pages, twice.
    producer: Mmap,
    mask: usize,
    page: usize,
}

// SAFETY: the mappings belong to this value; the kernel is the only other party, and it
// synchronises through the positions with acquire/release as below.
unsafe impl Send for RingBuf {}

impl RingBuf {
    /// Maps the ring buffer map `fd` of `size` bytes (its `max_entries`).
    pub(super) fn from_map(fd: OwnedFd, size: u32) -> io::Result<RingBuf> {
        let page = page_size();
        let bytes = size as usize;
        if !bytes.is_power_of_two() || !bytes.is_multiple_of(page) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring buffer size must be a power of two and a multiple of the page size",
            ));
        }
        let consumer = Mmap::new(page, libc::MAP_SHARED, fd.as_raw_fd(), 0)?;
        let producer = Mmap::new_read_only(
            page + 2 * bytes,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            page as libc::off_t,
        )?;
        Ok(RingBuf {
            fd,
            consumer,
            producer,
            mask: bytes - 1,
            page,
        })
    }

    /// The map's file descriptor, for `poll` (readable when a
    /// record is waiting).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the consumer page, 8-aligned (page-aligned mapping).
        unsafe { &*self.consumer.ptr.cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, in the producer page.
        unsafe { &*self.producer.ptr.cast::<AtomicU64>() }
    }

    /// Whether a submitted or discarded record is waiting.
    pub fn pending(&self) -> bool {
        self.consumer_pos().load(Ordering::Relaxed) < self.producer_pos().load(Ordering::Acquire)
    }

    /// Hands each submitted record to `f`, in order, at most `max`, and frees them; stops at a
    /// record that is still being written. Returns the records handed over.
    pub fn consume(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let mut cons = self.consumer_pos().load(Ordering::Relaxed);
        let prod = self.producer_pos().load(Ordering::Acquire);
        let mut n = 0;
        while cons < prod && n < max {
            let at = cons as usize & self.mask;
            // SAFETY: the header of the record at `cons`, inside the first copy of the data
            // pages (at < size), 8-aligned; the kernel publishes it with a release store.
            let hdr = unsafe { &*self.producer.ptr.add(self.page + at).cast::<AtomicU32>() };
            let len = hdr.load(Ordering::Acquire);
            if len & BUSY_BIT != 0 {
                break;
            }
            let body = (len & !(BUSY_BIT | DISCARD_BIT)) as usize;
            if len & DISCARD_BIT == 0 && body <= self.mask + 1 - HDR_LEN {
                // SAFETY: the body follows the header; the data pages are mapped twice, so
                // `at + 8 + body` <= 2 x size stays inside the mapping even when it wraps.
                let data = unsafe {
                    std::slice::from_raw_parts(
                        self.producer.ptr.add(self.page + at + HDR_LEN),
                        body,
                    )
                };
                f(data);
                n += 1;
            }
            cons += (HDR_LEN + body).div_ceil(8) as u64 * 8;
            // Free it before the next: the kernel can reuse the space at once.
            self.consumer_pos().store(cons, Ordering::Release);
        }
        n
    }
}
