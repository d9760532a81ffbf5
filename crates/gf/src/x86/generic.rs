//! The region algorithms, written once over [`Vector`]. Everything is `#[inline(always)]` so it
//! is compiled inside each ISA's `#[target_feature]` entry point.
//!
//! Shape of every loop: 4 registers per iteration (enough independent work to hide the shuffle /
//! affine latency), then single registers, then the tail: one masked register on AVX-512, a
//! table lookup per byte on SSSE3/AVX2 (cheaper than bouncing a few bytes through a stack
//! buffer, which only `mul_add_many`'s partial chunks still do). Loads and stores are unaligned:
//! packet buffers come at any offset, and on current cores an unaligned access that does not
//! split a cache line costs the same as an aligned one.

use super::vectors::Vector;
use crate::tables::MUL;

/// `dst[..n] ^= c * src[..n]`.
///
/// # Safety
/// `n` bytes readable at `src` and writable at `dst`; `dst` and `src` do not partially overlap;
/// the CPU has `V`'s features and the caller is compiled with them.
#[inline(always)]
pub(super) unsafe fn mul_add<V: Vector>(dst: *mut u8, src: *const u8, n: usize, c: u8) {
    let l = V::LANES;
    // SAFETY: every access below stays within [0, n) of both buffers (loop bounds).
    unsafe {
        let k = V::coef(c);
        let mut i = 0;
        while i + 4 * l <= n {
            let (s, d) = (src.add(i), dst.add(i));
            let d0 = V::load(s).mul_xor(k, V::load(d));
            let d1 = V::load(s.add(l)).mul_xor(k, V::load(d.add(l)));
            let d2 = V::load(s.add(2 * l)).mul_xor(k, V::load(d.add(2 * l)));
            let d3 = V::load(s.add(3 * l)).mul_xor(k, V::load(d.add(3 * l)));
            d0.store(d);
            d1.store(d.add(l));
            d2.store(d.add(2 * l));
            d3.store(d.add(3 * l));
            i += 4 * l;
        }
        while i + l <= n {
            V::load(src.add(i))
                .mul_xor(k, V::load(dst.add(i)))
                .store(dst.add(i));
            i += l;
        }
        if i < n {
            let r = n - i;
            if V::MASKED {
                V::load_partial(src.add(i), r)
                    .mul_xor(k, V::load_partial(dst.add(i), r))
                    .store_partial(dst.add(i), r);
            } else {
                let row = &MUL[c as usize];
                for j in i..n {
                    *dst.add(j) ^= row[*src.add(j) as usize];
                }
            }
        }
    }
}

/// `dst[..n] = c * src[..n]`; `dst == src` (in place) is allowed.
///
/// # Safety
/// As [`mul_add`], except that `dst` may equal `src`.
#[inline(always)]
pub(super) unsafe fn mul<V: Vector>(dst: *mut u8, src: *const u8, n: usize, c: u8) {
    let l = V::LANES;
    // SAFETY: every access stays within [0, n); each register is loaded before its bytes are
    // stored, so in-place operation is fine.
    unsafe {
        let k = V::coef(c);
        let mut i = 0;
        while i + 4 * l <= n {
            let (s, d) = (src.add(i), dst.add(i));
            let v0 = V::load(s).mul(k);
            let v1 = V::load(s.add(l)).mul(k);
            let v2 = V::load(s.add(2 * l)).mul(k);
            let v3 = V::load(s.add(3 * l)).mul(k);
            v0.store(d);
            v1.store(d.add(l));
            v2.store(d.add(2 * l));
            v3.store(d.add(3 * l));
            i += 4 * l;
        }
        while i + l <= n {
            V::load(src.add(i)).mul(k).store(dst.add(i));
            i += l;
        }
        if i < n {
            let r = n - i;
            if V::MASKED {
                V::load_partial(src.add(i), r)
                    .mul(k)
                    .store_partial(dst.add(i), r);
            } else {
                let row = &MUL[c as usize];
                for j in i..n {
                    *dst.add(j) = row[*src.add(j) as usize];
                }
            }
        }
    }
}

/// `dst[..n] ^= src[..n]`.
///
/// # Safety
/// As [`mul_add`].
#[inline(always)]
pub(super) unsafe fn xor<V: Vector>(dst: *mut u8, src: *const u8, n: usize) {
    let l = V::LANES;
    // SAFETY: every access stays within [0, n).
    unsafe {
        let mut i = 0;
        while i + 4 * l <= n {
            let (s, d) = (src.add(i), dst.add(i));
            let d0 = V::load(d).xor(V::load(s));
            let d1 = V::load(d.add(l)).xor(V::load(s.add(l)));
            let d2 = V::load(d.add(2 * l)).xor(V::load(s.add(2 * l)));
            let d3 = V::load(d.add(3 * l)).xor(V::load(s.add(3 * l)));
            d0.store(d);
            d1.store(d.add(l));
            d2.store(d.add(2 * l));
            d3.store(d.add(3 * l));
            i += 4 * l;
        }
        while i + l <= n {
            V::load(dst.add(i))
                .xor(V::load(src.add(i)))
                .store(dst.add(i));
            i += l;
        }
        if i < n {
            let r = n - i;
            if V::MASKED {
                V::load_partial(dst.add(i), r)
                    .xor(V::load_partial(src.add(i), r))
                    .store_partial(dst.add(i), r);
            } else {
                for j in i..n {
                    *dst.add(j) ^= *src.add(j);
                }
            }
        }
    }
}

/// Loads `min(avail, LANES)` bytes (`avail > 0`), zero-filling the rest.
///
/// # Safety
/// `min(avail, LANES)` bytes readable at `p`.
#[inline(always)]
unsafe fn load_upto<V: Vector>(p: *const u8, avail: usize) -> V {
    // SAFETY: forwarded.
    unsafe {
        if avail >= V::LANES {
            V::load(p)
        } else {
            V::load_partial(p, avail)
        }
    }
}

/// Stores `min(avail, LANES)` bytes (`avail > 0`).
///
/// # Safety
/// `min(avail, LANES)` bytes writable at `p`.
#[inline(always)]
unsafe fn store_upto<V: Vector>(v: V, p: *mut u8, avail: usize) {
    // SAFETY: forwarded.
    unsafe {
        if avail >= V::LANES {
            v.store(p)
        } else {
            v.store_partial(p, avail)
        }
    }
}

/// `dst ^= sum(coefs[i] * srcs[i])`, sources shorter than `dst` being zero-extended.
///
/// `dst` is walked in chunks of 4 registers: each chunk is loaded once, every source is
/// multiplied into it in registers, and it is stored once. Compared with one `mul_add` per
/// source, that halves the memory traffic (no reload/store of `dst` per source), which is what
/// makes the RLC encoder and decoder cheap for large windows.
///
/// Source `i` and its coefficient are `term(i)` for `i < terms`; `term` is called once per
/// source per chunk, so it must be cheap (an index computation) and return the same answer
/// every time.
///
/// # Safety
/// Every source `term(i).0` is at most `dst.len()` bytes; the CPU has `V`'s features and the
/// caller is compiled with them. (A source cannot overlap `dst`: it is a shared borrow.)
#[inline(always)]
pub(super) unsafe fn mul_add_many<'a, V: Vector, F: Fn(usize) -> (&'a [u8], u8)>(
    dst: &mut [u8],
    terms: usize,
    term: F,
) {
    let l = V::LANES;
    let chunk = 4 * l;
    let n = dst.len();
    let d = dst.as_mut_ptr();
    let mut off = 0;
    // SAFETY: the chunk spans [off, off + min(chunk, n - off)) of dst; a source is read only
    // within [off, s.len()), and s.len() <= n (caller).
    unsafe {
        while off < n {
            let w = n - off;
            let dp = d.add(off);
            let full = w >= chunk;
            let (mut a0, mut a1, mut a2, mut a3);
            if full {
                a0 = V::load(dp);
                a1 = V::load(dp.add(l));
                a2 = V::load(dp.add(2 * l));
                a3 = V::load(dp.add(3 * l));
            } else {
                // Registers past the end of dst stay zero and are never stored.
                a0 = load_upto::<V>(dp, w);
                a1 = if w > l {
                    load_upto::<V>(dp.add(l), w - l)
                } else {
                    a0.xor(a0)
                };
                a2 = if w > 2 * l {
                    load_upto::<V>(dp.add(2 * l), w - 2 * l)
                } else {
                    a0.xor(a0)
                };
                a3 = if w > 3 * l {
                    load_upto::<V>(dp.add(3 * l), w - 3 * l)
                } else {
                    a0.xor(a0)
                };
            }
            for i in 0..terms {
                let (s, c) = term(i);
                if c == 0 || s.len() <= off {
                    continue;
                }
                let k = V::coef(c);
                let sp = s.as_ptr().add(off);
                let avail = s.len() - off;
                if avail >= chunk {
                    a0 = V::load(sp).mul_xor(k, a0);
                    a1 = V::load(sp.add(l)).mul_xor(k, a1);
                    a2 = V::load(sp.add(2 * l)).mul_xor(k, a2);
                    a3 = V::load(sp.add(3 * l)).mul_xor(k, a3);
                } else {
                    a0 = load_upto::<V>(sp, avail).mul_xor(k, a0);
                    if avail > l {
                        a1 = load_upto::<V>(sp.add(l), avail - l).mul_xor(k, a1);
                    }
                    if avail > 2 * l {
                        a2 = load_upto::<V>(sp.add(2 * l), avail - 2 * l).mul_xor(k, a2);
                    }
                    if avail > 3 * l {
                        a3 = load_upto::<V>(sp.add(3 * l), avail - 3 * l).mul_xor(k, a3);
                    }
                }
            }
            if full {
                a0.store(dp);
                a1.store(dp.add(l));
                a2.store(dp.add(2 * l));
                a3.store(dp.add(3 * l));
            } else {
                store_upto(a0, dp, w);
                if w > l {
                    store_upto(a1, dp.add(l), w - l);
                }
                if w > 2 * l {
                    store_upto(a2, dp.add(2 * l), w - 2 * l);
                }
                if w > 3 * l {
                    store_upto(a3, dp.add(3 * l), w - 3 * l);
                }
            }
            off += chunk;
        }
    }
}
