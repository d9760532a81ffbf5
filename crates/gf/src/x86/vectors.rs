//! One [`Vector`] implementation per ISA. Each wraps a register and knows how to multiply it by
//! a prepared coefficient.

use core::arch::x86_64::*;

use crate::tables::{AFFINE, NIBBLE};

/// A SIMD register of `LANES` bytes and the GF(2^8) operations the region algorithms need.
///
/// All methods are `unsafe`: they may only run on a CPU with the implementation's features,
/// inside a function compiled with them (see the module docs of `x86`).
pub(crate) trait Vector: Copy {
    /// Bytes per register.
    const LANES: usize;
    /// Whether partial loads/stores are native masked accesses (AVX-512) rather than a bounce
    /// through a stack buffer; without them, region tails are done a byte at a time.
    const MASKED: bool;
    /// A coefficient prepared for [`Vector::mul`] (nibble tables or an affine matrix), set up
    /// once per region and source.
    type Coef: Copy;

    /// Prepares coefficient `c`.
    unsafe fn coef(c: u8) -> Self::Coef;
    /// Unaligned load of `LANES` bytes.
    unsafe fn load(p: *const u8) -> Self;
    /// Unaligned store of `LANES` bytes.
    unsafe fn store(self, p: *mut u8);
    /// Loads `n < LANES` bytes, zero-filling the rest; reads nothing past `p + n`.
    unsafe fn load_partial(p: *const u8, n: usize) -> Self;
    /// Stores the first `n < LANES` bytes; writes nothing past `p + n`.
    unsafe fn store_partial(self, p: *mut u8, n: usize);
    /// `self ^ other`.
    unsafe fn xor(self, other: Self) -> Self;
    /// `c * self`, bytewise in GF(2^8).
    unsafe fn mul(self, c: Self::Coef) -> Self;
    /// `acc ^ c * self`; overridden where a fused form exists (`vpternlogq`).
    #[inline(always)]
    unsafe fn mul_xor(self, c: Self::Coef, acc: Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { acc.xor(self.mul(c)) }
    }
}

/// Split-nibble tables for a coefficient and the 0x0f mask, in registers of type `R`.
#[derive(Clone, Copy)]
pub(crate) struct Nibbles<R> {
    lo: R,
    hi: R,
    mask: R,
}

/// SSSE3: 16-byte `pshufb`.
#[derive(Clone, Copy)]
pub(crate) struct Ssse3(__m128i);

impl Vector for Ssse3 {
    const LANES: usize = 16;
    const MASKED: bool = false;
    type Coef = Nibbles<__m128i>;

    #[inline(always)]
    unsafe fn coef(c: u8) -> Self::Coef {
        let t = &NIBBLE[c as usize];
        // SAFETY: `t` is 32 readable bytes; loadu has no alignment requirement.
        unsafe {
            Nibbles {
                lo: _mm_loadu_si128(t.as_ptr().cast()),
                hi: _mm_loadu_si128(t.as_ptr().add(16).cast()),
                mask: _mm_set1_epi8(0x0f),
            }
        }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees LANES readable bytes at p.
        unsafe { Ssse3(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees LANES writable bytes at p.
        unsafe { _mm_storeu_si128(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn load_partial(p: *const u8, n: usize) -> Self {
        let mut buf = [0u8; 16];
        // SAFETY: n < 16 readable bytes at p (caller); buf is a separate local.
        unsafe {
            core::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            Self::load(buf.as_ptr())
        }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut u8, n: usize) {
        let mut buf = [0u8; 16];
        // SAFETY: n < 16 writable bytes at p (caller); buf is a separate local.
        unsafe {
            self.store(buf.as_mut_ptr());
            core::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }
    #[inline(always)]
    unsafe fn xor(self, other: Self) -> Self {
        // SAFETY: SSE2 is baseline on x86-64.
        unsafe { Ssse3(_mm_xor_si128(self.0, other.0)) }
    }
    #[inline(always)]
    unsafe fn mul(self, c: Self::Coef) -> Self {
        // SAFETY: compiled with ssse3 (caller's contract).
        unsafe {
            let lo = _mm_and_si128(self.0, c.mask);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(self.0), c.mask);
            Ssse3(_mm_xor_si128(
                _mm_shuffle_epi8(c.lo, lo),
                _mm_shuffle_epi8(c.hi, hi),
            ))
        }
    }
}

/// AVX2: 32-byte `vpshufb` (the nibble tables are repeated in both 128-bit lanes).
#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256i);

impl Vector for Avx2 {
    const LANES: usize = 32;
    const MASKED: bool = false;
    type Coef = Nibbles<__m256i>;

    #[inline(always)]
    unsafe fn coef(c: u8) -> Self::Coef {
        let t = &NIBBLE[c as usize];
        // SAFETY: `t` is 32 readable bytes; compiled with avx2.
        unsafe {
            Nibbles {
                lo: _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())),
                hi: _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().add(16).cast())),
                mask: _mm256_set1_epi8(0x0f),
            }
        }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees LANES readable bytes at p.
        unsafe { Avx2(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees LANES writable bytes at p.
        unsafe { _mm256_storeu_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn load_partial(p: *const u8, n: usize) -> Self {
        let mut buf = [0u8; 32];
        // SAFETY: n < 32 readable bytes at p (caller); buf is a separate local.
        unsafe {
            core::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            Self::load(buf.as_ptr())
        }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut u8, n: usize) {
        let mut buf = [0u8; 32];
        // SAFETY: n < 32 writable bytes at p (caller); buf is a separate local.
        unsafe {
            self.store(buf.as_mut_ptr());
            core::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }
    #[inline(always)]
    unsafe fn xor(self, other: Self) -> Self {
        // SAFETY: compiled with avx2.
        unsafe { Avx2(_mm256_xor_si256(self.0, other.0)) }
    }
    #[inline(always)]
    unsafe fn mul(self, c: Self::Coef) -> Self {
        // SAFETY: compiled with avx2.
        unsafe {
            let lo = _mm256_and_si256(self.0, c.mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(self.0), c.mask);
            Avx2(_mm256_xor_si256(
                _mm256_shuffle_epi8(c.lo, lo),
                _mm256_shuffle_epi8(c.hi, hi),
            ))
        }
    }
}

/// Mask with the low `n` bits set (`n < 64`), for AVX-512 masked loads and stores.
#[inline(always)]
fn low_mask(n: usize) -> __mmask64 {
    (1u64 << n) - 1
}

/// AVX-512BW: 64-byte `vpshufb`, masked tails, `vpternlogq` for the three-way XOR.
#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512i);

impl Vector for Avx512 {
    const LANES: usize = 64;
    const MASKED: bool = true;
    type Coef = Nibbles<__m512i>;

    #[inline(always)]
    unsafe fn coef(c: u8) -> Self::Coef {
        let t = &NIBBLE[c as usize];
        // SAFETY: `t` is 32 readable bytes; compiled with avx512f.
        unsafe {
            Nibbles {
                lo: _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().cast())),
                hi: _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().add(16).cast())),
                mask: _mm512_set1_epi8(0x0f),
            }
        }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees LANES readable bytes at p.
        unsafe { Avx512(_mm512_loadu_si512(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees LANES writable bytes at p.
        unsafe { _mm512_storeu_si512(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn load_partial(p: *const u8, n: usize) -> Self {
        // SAFETY: masked-off bytes are neither read nor faulted on; compiled with avx512bw.
        unsafe { Avx512(_mm512_maskz_loadu_epi8(low_mask(n), p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut u8, n: usize) {
        // SAFETY: masked-off bytes are not written; compiled with avx512bw.
        unsafe { _mm512_mask_storeu_epi8(p.cast(), low_mask(n), self.0) }
    }
    #[inline(always)]
    unsafe fn xor(self, other: Self) -> Self {
        // SAFETY: compiled with avx512f.
        unsafe { Avx512(_mm512_xor_si512(self.0, other.0)) }
    }
    #[inline(always)]
    unsafe fn mul(self, c: Self::Coef) -> Self {
        // SAFETY: compiled with avx512bw.
        unsafe {
            let lo = _mm512_and_si512(self.0, c.mask);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(self.0), c.mask);
            Avx512(_mm512_xor_si512(
                _mm512_shuffle_epi8(c.lo, lo),
                _mm512_shuffle_epi8(c.hi, hi),
            ))
        }
    }
    #[inline(always)]
    unsafe fn mul_xor(self, c: Self::Coef, acc: Self) -> Self {
        // SAFETY: compiled with avx512bw. 0x96 is the truth table of a ^ b ^ c.
        unsafe {
            let lo = _mm512_and_si512(self.0, c.mask);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(self.0), c.mask);
            Avx512(_mm512_ternarylogic_epi64::<0x96>(
                acc.0,
                _mm512_shuffle_epi8(c.lo, lo),
                _mm512_shuffle_epi8(c.hi, hi),
            ))
        }
    }
}

/// AVX-512 + GFNI: one `vgf2p8affineqb` per 64 bytes, with the matrix for the 0x11D field.
#[derive(Clone, Copy)]
pub(crate) struct Gfni(__m512i);

impl Vector for Gfni {
    const LANES: usize = 64;
    const MASKED: bool = true;
    type Coef = __m512i;

    #[inline(always)]
    unsafe fn coef(c: u8) -> Self::Coef {
        // SAFETY: compiled with avx512f.
        unsafe { _mm512_set1_epi64(AFFINE[c as usize] as i64) }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: see Avx512.
        unsafe { Gfni(Avx512::load(p).0) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: see Avx512.
        unsafe { Avx512(self.0).store(p) }
    }
    #[inline(always)]
    unsafe fn load_partial(p: *const u8, n: usize) -> Self {
        // SAFETY: see Avx512.
        unsafe { Gfni(Avx512::load_partial(p, n).0) }
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut u8, n: usize) {
        // SAFETY: see Avx512.
        unsafe { Avx512(self.0).store_partial(p, n) }
    }
    #[inline(always)]
    unsafe fn xor(self, other: Self) -> Self {
        // SAFETY: compiled with avx512f.
        unsafe { Gfni(_mm512_xor_si512(self.0, other.0)) }
    }
    #[inline(always)]
    unsafe fn mul(self, c: Self::Coef) -> Self {
        // SAFETY: compiled with avx512f + gfni.
        unsafe { Gfni(_mm512_gf2p8affine_epi64_epi8::<0>(self.0, c)) }
    }
}
