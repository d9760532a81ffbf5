//! What the process holds on its heap, and handing freed memory back to the kernel.
//!
//! A long-running tunnel must show that its memory is bounded. The resident set alone cannot:
//! glibc's allocator keeps pages that a burst of buffered packets touched, even after they are
//! freed, so the resident set follows the largest backlog seen, not what is held now.
//! [`CountingAllocator`], installed as the binary's global allocator, keeps the bytes held on
//! the heap ([`live_bytes`]) and the most ever held ([`peak_bytes`]); [`release_free_memory`]
//! returns the allocator's free pages to the kernel, so the resident set tracks what is held.
//! The dataplane allocates nothing per packet, so the counting costs nothing on the hot path.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes it hands out.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator;

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` with the caller's layout and pointer unchanged;
// the counters are only bookkeeping beside it.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

/// Bytes held on the heap now; `None` when [`CountingAllocator`] is not the global allocator.
pub fn live_bytes() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| LIVE.load(Ordering::Relaxed) as u64)
}

/// The most bytes ever held on the heap at once; `None` as for [`live_bytes`].
pub fn peak_bytes() -> Option<u64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| PEAK.load(Ordering::Relaxed) as u64)
}

/// A zeroed buffer of `len` bytes whose pages are all in memory now. A large zeroed
/// allocation comes from fresh pages that the kernel maps only when first written; a receive
/// buffer that the kernel fills further under a burst (64 KiB GRO super-datagrams) would then
/// grow the resident set at the first big burst, hours into a run. Committed up front, the
/// buffer's memory is what the process holds from its first second.
pub fn committed_buffer(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    for page in buf.chunks_mut(4096) {
        // A volatile write cannot be elided even though the byte is already zero.
        // SAFETY: `page` is a non-empty, valid, exclusively borrowed slice.
        unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
    }
    buf
}

/// Returns the allocator's free memory to the kernel (glibc `malloc_trim`: free pages
/// anywhere in the heap, not only at its top). It walks the free lists, so call it seldom
/// (seconds apart) and off the packet path.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only inspects and releases the allocator's own free chunks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_it_hands_out_and_takes_back() {
        let a = CountingAllocator;
        let before = LIVE.load(Ordering::Relaxed);
        let layout = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: a non-zero layout; the block is freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(LIVE.load(Ordering::Relaxed), before + 4096);
            let q = a.realloc(p, layout, 8192);
            assert!(!q.is_null());
            assert_eq!(LIVE.load(Ordering::Relaxed), before + 8192);
            assert!(PEAK.load(Ordering::Relaxed) >= before + 8192);
            a.dealloc(q, Layout::from_size_align(8192, 8).unwrap());
        }
        assert_eq!(LIVE.load(Ordering::Relaxed), before);
        assert!(live_bytes().is_some() && peak_bytes().is_some());
        release_free_memory();
    }

    #[test]
    fn committed_buffers_are_zeroed_and_sized() {
        for len in [0, 1, 4095, 4096, 70_000] {
            let b = committed_buffer(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
        }
    }
}
