//! GF(2^8) arithmetic over the RFC 8681 polynomial x^8+x^4+x^3+x^2+1 (0x11D), and region
//! kernels over packet buffers.
//!
//! Layering: this crate is the bottom of hirt. `hirt-fec` builds every code (RLC, XOR, layered
//! interleaving, Reed-Solomon) on the region operations below; nothing here knows about packets
//! or symbols.
//!
//! Region operations process `src.len()` bytes; `dst` must be at least that long (a programming
//! error, not a network input, so it panics). [`mul_add_many`] is the workhorse of the sliding
//! window codes: one pass over `dst` for a whole linear combination.
//!
//! Kernels ([`Kernel`]): AVX-512 + GFNI (`gf2p8affineqb` with a per-coefficient bit matrix for
//! 0x11D), AVX-512BW / AVX2 / SSSE3 split-nibble shuffles, and a portable table kernel. The
//! active kernel is chosen once at runtime from the CPU features;
//! `HIRT_GF_KERNEL=portable|ssse3|avx2|avx512|gfni` forces one (an unsupported choice falls back
//! to the best supported one). Every kernel produces identical bytes (property-tested against
//! the scalar reference in [`scalar`]).
//!
//! `unsafe` is confined to the SIMD kernels (`x86`) and to the dispatch calls into them below;
//! the scalar, portable and table modules deny it.

mod portable;
pub mod scalar;
mod tables;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::atomic::{AtomicU8, Ordering};

pub use scalar::{div, inv, mul};

/// A region kernel implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Table-driven scalar code; runs everywhere.
    Portable,
    /// SSSE3 `pshufb` split-nibble multiply, 16 bytes per instruction.
    Ssse3,
    /// AVX2 `vpshufb` split-nibble multiply, 32 bytes per instruction.
    Avx2,
    /// AVX-512BW `vpshufb` split-nibble multiply on zmm, 64 bytes per instruction.
    Avx512,
    /// AVX-512 + GFNI `vgf2p8affineqb`: one instruction per 64-byte multiply.
    Gfni,
}

impl Kernel {
    /// Every kernel this build knows, best last.
    pub const ALL: &'static [Kernel] = &[
        Kernel::Portable,
        Kernel::Ssse3,
        Kernel::Avx2,
        Kernel::Avx512,
        Kernel::Gfni,
    ];

    /// Short lowercase name, as accepted by `HIRT_GF_KERNEL`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
            Kernel::Gfni => "gfni",
        }
    }

    /// Parses a [`Kernel::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL
            .iter()
            .copied()
            .find(|k| k.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether this CPU can run the kernel. Detected once, then a single atomic load.
    pub fn is_supported(self) -> bool {
        state() & (1 << self.index()) != 0
    }

    /// The best kernel this CPU supports.
    pub fn best() -> Kernel {
        Kernel::ALL
            .iter()
            .rev()
            .copied()
            .find(|k| k.is_supported())
            .unwrap_or(Kernel::Portable)
    }

    fn index(self) -> u8 {
        self as u8
    }

    /// The kernel that actually runs for `self`: itself if supported, otherwise the best
    /// supported one. Keeps the safe API sound when a caller names a kernel this CPU lacks.
    #[inline]
    fn usable(self) -> Kernel {
        if self.is_supported() {
            self
        } else {
            Kernel::best()
        }
    }

    /// The entry points of the kernel that actually runs for `self`.
    #[inline]
    fn ops(self) -> &'static Ops {
        &OPS[self.usable().index() as usize]
    }

    /// `dst[..src.len()] ^= c * src`. Panics if `dst` is shorter than `src`.
    #[inline]
    pub fn mul_add(self, dst: &mut [u8], src: &[u8], c: u8) {
        assert!(dst.len() >= src.len(), "gf: dst shorter than src");
        // SAFETY: `ops` only hands out a kernel this CPU supports; lengths asserted above.
        unsafe { (self.ops().mul_add)(dst, src, c) }
    }

    /// `dst[..src.len()] = c * src`. Panics if `dst` is shorter than `src`.
    #[inline]
    pub fn mul(self, dst: &mut [u8], src: &[u8], c: u8) {
        assert!(dst.len() >= src.len(), "gf: dst shorter than src");
        // SAFETY: as in `mul_add`.
        unsafe { (self.ops().mul)(dst, src, c) }
    }

    /// `dst[..src.len()] ^= src`. Panics if `dst` is shorter than `src`.
    #[inline]
    pub fn xor(self, dst: &mut [u8], src: &[u8]) {
        assert!(dst.len() >= src.len(), "gf: dst shorter than src");
        // SAFETY: as in `mul_add`.
        unsafe { (self.ops().xor)(dst, src) }
    }

    /// `buf *= c` in place.
    #[inline]
    pub fn scale(self, buf: &mut [u8], c: u8) {
        // SAFETY: `ops` only hands out a kernel this CPU supports.
        unsafe { (self.ops().scale)(buf, c) }
    }

    /// `dst ^= sum(coefs[i] * srcs[i])` in one pass over `dst`; a source shorter than `dst`
    /// counts as zero-extended. Panics if `srcs` and `coefs` differ in length or a source is
    /// longer than `dst`.
    pub fn mul_add_many(self, dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
        assert_eq!(srcs.len(), coefs.len(), "gf: one coefficient per source");
        assert!(
            srcs.iter().all(|s| s.len() <= dst.len()),
            "gf: source longer than dst"
        );
        // SAFETY: as in `mul_add`; every source fits in `dst` (asserted above).
        unsafe { (self.ops().mul_add_many)(dst, srcs, coefs) }
    }

    /// [`Kernel::mul_add_many`] with the sources given by index: `dst ^= c_i * s_i` where
    /// `(s_i, c_i) = term(i)` for `i < terms`. For sources that do not sit in one slice (a ring
    /// of window slots, the known columns of a decoder): no list of references to build.
    /// `term` is called `terms` times up front (to check lengths) and then once per source per
    /// 256-byte chunk of `dst`, so it must be cheap (a compare-and-subtract ring index rather
    /// than a `%`) and return the same answer each time.
    /// Panics if a source is longer than `dst`.
    ///
    /// ```
    /// let slots = vec![vec![1u8; 100], vec![2u8; 100], vec![3u8; 60]];
    /// let coefs = [5u8, 0, 7];
    /// let mut repair = vec![0u8; 100];
    /// // Oldest slot first, in a ring that starts at slot 1.
    /// hirt_gf::active().mul_add_terms(&mut repair, 3, |j| {
    ///     let i = if 1 + j >= 3 { 1 + j - 3 } else { 1 + j };
    ///     (&slots[i][..], coefs[j])
    /// });
    /// ```
    #[inline]
    pub fn mul_add_terms<'a, F: Fn(usize) -> (&'a [u8], u8)>(
        self,
        dst: &mut [u8],
        terms: usize,
        term: F,
    ) {
        assert!(
            (0..terms).all(|i| term(i).0.len() <= dst.len()),
            "gf: source longer than dst"
        );
        match self.usable() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `usable` checked the CPU features; lengths asserted above.
            Kernel::Gfni => unsafe { x86::gfni::mul_add_terms(dst, terms, term) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Avx512 => unsafe { x86::avx512::mul_add_terms(dst, terms, term) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Avx2 => unsafe { x86::avx2::mul_add_terms(dst, terms, term) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Ssse3 => unsafe { x86::ssse3::mul_add_terms(dst, terms, term) },
            _ => portable::mul_add_terms(dst, terms, term),
        }
    }
}

/// One kernel's entry points. Dispatch is a table load and one indirect call, so a 64-byte
/// region pays ~1 ns for it. Each entry handles the coefficients 0 and 1 itself.
///
/// The functions are `unsafe`: the CPU must support the kernel (guaranteed by
/// [`Kernel::ops`]), `dst.len() >= src.len()`, and for `mul_add_many` one coefficient per
/// source, each source at most `dst.len()` long.
struct Ops {
    mul_add: unsafe fn(&mut [u8], &[u8], u8),
    mul: unsafe fn(&mut [u8], &[u8], u8),
    xor: unsafe fn(&mut [u8], &[u8]),
    scale: unsafe fn(&mut [u8], u8),
    mul_add_many: unsafe fn(&mut [u8], &[&[u8]], &[u8]),
}

const PORTABLE_OPS: Ops = Ops {
    mul_add: portable::mul_add,
    mul: portable::mul,
    xor: portable::xor,
    scale: portable::scale,
    mul_add_many: portable::mul_add_many,
};

#[cfg(target_arch = "x86_64")]
macro_rules! x86_ops {
    ($m:ident, $xor:path) => {
        Ops {
            mul_add: x86::$m::mul_add,
            mul: x86::$m::mul,
            xor: $xor,
            scale: x86::$m::scale,
            mul_add_many: x86::$m::mul_add_many,
        }
    };
}

/// Indexed by `Kernel as usize`, in [`Kernel::ALL`] order.
#[cfg(target_arch = "x86_64")]
static OPS: [Ops; 5] = [
    PORTABLE_OPS,
    x86_ops!(ssse3, x86::ssse3::xor),
    x86_ops!(avx2, x86::avx2::xor),
    x86_ops!(avx512, x86::avx512::xor),
    // GFNI adds nothing to XOR: reuse AVX-512's.
    x86_ops!(gfni, x86::avx512::xor),
];

/// Off x86-64 only the portable kernel exists ([`Kernel::is_supported`] is false for the rest).
#[cfg(not(target_arch = "x86_64"))]
static OPS: [Ops; 5] = [
    PORTABLE_OPS,
    PORTABLE_OPS,
    PORTABLE_OPS,
    PORTABLE_OPS,
    PORTABLE_OPS,
];

/// `dst = c * src` for `c` in {0, 1}: a fill or a copy, identical in every kernel.
#[inline]
pub(crate) fn mul_trivial(dst: &mut [u8], src: &[u8], c: u8) {
    if c == 0 {
        dst[..src.len()].fill(0)
    } else {
        dst[..src.len()].copy_from_slice(src)
    }
}

/// Bit `i` set: `Kernel::ALL[i]` is supported. Bits 5..8: index of the active kernel + 1
/// (0 = not yet initialised). Computed once; recomputing concurrently is harmless (same value).
static STATE: AtomicU8 = AtomicU8::new(0);

#[inline]
fn state() -> u8 {
    let s = STATE.load(Ordering::Relaxed);
    if s != 0 {
        s
    } else {
        init_state()
    }
}

#[cold]
fn init_state() -> u8 {
    let mut supported = 1u8 << Kernel::Portable.index();
    #[cfg(target_arch = "x86_64")]
    {
        for (k, yes) in [
            (Kernel::Ssse3, x86::has_ssse3()),
            (Kernel::Avx2, x86::has_avx2()),
            (Kernel::Avx512, x86::has_avx512()),
            (Kernel::Gfni, x86::has_gfni()),
        ] {
            if yes {
                supported |= 1 << k.index();
            }
        }
    }
    let forced = std::env::var("HIRT_GF_KERNEL").ok();
    let active = choose(supported, forced.as_deref());
    let s = supported | ((active.index() + 1) << 5);
    STATE.store(s, Ordering::Relaxed);
    s
}

/// The kernel to activate given the supported set (bit mask) and `HIRT_GF_KERNEL`: the forced
/// one if it is known and supported, otherwise the best supported one.
fn choose(supported: u8, forced: Option<&str>) -> Kernel {
    let ok = |k: Kernel| supported & (1 << k.index()) != 0;
    match forced.and_then(Kernel::from_name) {
        Some(k) if ok(k) => k,
        _ => Kernel::ALL
            .iter()
            .rev()
            .copied()
            .find(|&k| ok(k))
            .unwrap_or(Kernel::Portable),
    }
}

/// The kernel used by the free functions: the best supported one, or `HIRT_GF_KERNEL`.
#[inline]
pub fn active() -> Kernel {
    Kernel::ALL[((state() >> 5) - 1) as usize]
}

/// `dst[..src.len()] ^= c * src` with the active kernel.
#[inline]
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    active().mul_add(dst, src, c)
}

/// `dst[..src.len()] = c * src` with the active kernel.
#[inline]
pub fn mul_region(dst: &mut [u8], src: &[u8], c: u8) {
    active().mul(dst, src, c)
}

/// `dst[..src.len()] ^= src` with the active kernel.
#[inline]
pub fn xor(dst: &mut [u8], src: &[u8]) {
    active().xor(dst, src)
}

/// `buf *= c` in place with the active kernel.
#[inline]
pub fn scale(buf: &mut [u8], c: u8) {
    active().scale(buf, c)
}

/// `dst ^= sum(coefs[i] * srcs[i])` with the active kernel; see [`Kernel::mul_add_many`].
#[inline]
pub fn mul_add_many(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    active().mul_add_many(dst, srcs, coefs)
}

/// Indexed multi-source multiply-add with the active kernel; see [`Kernel::mul_add_terms`].
#[inline]
pub fn mul_add_terms<'a, F: Fn(usize) -> (&'a [u8], u8)>(dst: &mut [u8], terms: usize, term: F) {
    active().mul_add_terms(dst, terms, term)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .iter()
            .copied()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// Coefficients with the special cases 0 and 1 (and 2, the generator) over-represented.
    fn coef() -> impl Strategy<Value = u8> {
        prop_oneof![
            Just(0u8),
            Just(1u8),
            Just(2u8),
            any::<u8>(),
            any::<u8>(),
            any::<u8>()
        ]
    }

    /// A buffer of `len` random bytes starting `off` bytes into its allocation, so that kernels
    /// see every alignment.
    fn at_offset(bytes: &[u8], off: usize) -> Vec<u8> {
        let mut v = vec![0xa5u8; off];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn names_round_trip_and_portable_is_always_supported() {
        for &k in Kernel::ALL {
            assert_eq!(Kernel::from_name(k.name()), Some(k));
        }
        assert_eq!(Kernel::from_name("GFNI"), Some(Kernel::Gfni));
        assert_eq!(Kernel::from_name("neon"), None);
        assert!(Kernel::Portable.is_supported());
        assert!(active().is_supported());
        assert!(Kernel::best().is_supported());
    }

    #[test]
    fn forcing_a_kernel_falls_back_when_unsupported() {
        let all = 0b1_1111;
        assert_eq!(choose(all, None), Kernel::Gfni);
        assert_eq!(choose(all, Some("avx2")), Kernel::Avx2);
        assert_eq!(choose(all, Some(" Portable ")), Kernel::Portable);
        assert_eq!(choose(all, Some("bogus")), Kernel::Gfni);
        let no_avx512 = 0b0_0111;
        assert_eq!(choose(no_avx512, Some("gfni")), Kernel::Avx2);
        assert_eq!(choose(no_avx512, None), Kernel::Avx2);
        assert_eq!(choose(0b1, Some("ssse3")), Kernel::Portable);
    }

    /// Runs in a child process (see `environment_variable_forces_the_kernel`).
    #[test]
    #[ignore = "run by environment_variable_forces_the_kernel with HIRT_GF_KERNEL set"]
    fn active_kernel_matches_environment() {
        let want = std::env::var("HIRT_GF_KERNEL").expect("HIRT_GF_KERNEL set by the parent");
        let want = Kernel::from_name(&want).expect("known kernel");
        assert_eq!(
            active(),
            if want.is_supported() {
                want
            } else {
                Kernel::best()
            }
        );
    }

    #[test]
    fn environment_variable_forces_the_kernel() {
        let exe = std::env::current_exe().expect("test binary");
        for &k in Kernel::ALL {
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "tests::active_kernel_matches_environment",
                    "--ignored",
                ])
                .env("HIRT_GF_KERNEL", k.name())
                .output()
                .expect("run child");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{}: {text}", k.name());
            assert!(
                text.contains("1 passed"),
                "{}: child did not run the check: {text}",
                k.name()
            );
        }
    }

    #[test]
    fn every_coefficient_and_every_byte_on_every_kernel() {
        let src: Vec<u8> = (0..=255u8).chain(0..=255u8).rev().collect();
        let base: Vec<u8> = (0..src.len()).map(|i| (i * 7 + 3) as u8).collect();
        for k in supported() {
            for c in 0..=255u8 {
                let mut want = base.clone();
                scalar::mul_add(&mut want, &src, c);
                let mut got = base.clone();
                k.mul_add(&mut got, &src, c);
                assert_eq!(got, want, "{} mul_add c={c:#x}", k.name());

                let mut want = base.clone();
                scalar::mul_region(&mut want, &src, c);
                let mut got = base.clone();
                k.mul(&mut got, &src, c);
                assert_eq!(got, want, "{} mul c={c:#x}", k.name());

                let mut want = src.clone();
                scalar::scale(&mut want, c);
                let mut got = src.clone();
                k.scale(&mut got, c);
                assert_eq!(got, want, "{} scale c={c:#x}", k.name());
            }
        }
    }

    #[test]
    fn every_short_length_hits_the_tails() {
        let src: Vec<u8> = (0..600).map(|i| (i * 31 + 11) as u8).collect();
        for k in supported() {
            for len in 0..=520 {
                let mut want = vec![0x5au8; len + 3];
                let mut got = want.clone();
                scalar::mul_add(&mut want, &src[..len], 0x8e);
                k.mul_add(&mut got, &src[..len], 0x8e);
                assert_eq!(got, want, "{} len={len}", k.name());
            }
        }
    }

    #[test]
    #[should_panic(expected = "dst shorter than src")]
    fn short_dst_panics() {
        active().mul_add(&mut [0u8; 3], &[1u8; 4], 7);
    }

    #[test]
    #[should_panic(expected = "source longer than dst")]
    fn long_source_in_terms_panics() {
        active().mul_add_terms(&mut [0u8; 3], 1, |_| (&[1u8; 4][..], 7));
    }

    #[test]
    #[should_panic(expected = "source longer than dst")]
    fn long_source_in_many_panics() {
        active().mul_add_many(&mut [0u8; 3], &[&[1u8; 4]], &[7]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1500))]

        /// mul_add, mul, xor and scale on every supported kernel give the scalar reference's
        /// bytes, for lengths 0..9216, any dst/src alignment and any coefficient.
        #[test]
        fn kernels_match_scalar(
            src in proptest::collection::vec(any::<u8>(), 0..9216),
            dst_extra in proptest::collection::vec(any::<u8>(), 0..40),
            seed_byte in any::<u8>(),
            src_off in 0usize..64,
            dst_off in 0usize..64,
            c in coef(),
        ) {
            let n = src.len();
            let dst0: Vec<u8> =
                (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed_byte).chain(dst_extra).collect();
            let s = at_offset(&src, src_off);
            let s = &s[src_off..];

            let mut want_ma = dst0.clone();
            scalar::mul_add(&mut want_ma, &src, c);
            let mut want_mul = dst0.clone();
            scalar::mul_region(&mut want_mul, &src, c);
            let mut want_xor = dst0.clone();
            scalar::xor(&mut want_xor, &src);
            let mut want_scale = src.clone();
            scalar::scale(&mut want_scale, c);

            for k in supported() {
                let mut d = at_offset(&dst0, dst_off);
                k.mul_add(&mut d[dst_off..], s, c);
                prop_assert_eq!(&d[dst_off..], &want_ma[..], "{} mul_add", k.name());
                prop_assert!(d[..dst_off].iter().all(|&b| b == 0xa5), "{} wrote before dst", k.name());

                let mut d = at_offset(&dst0, dst_off);
                k.mul(&mut d[dst_off..], s, c);
                prop_assert_eq!(&d[dst_off..], &want_mul[..], "{} mul", k.name());

                let mut d = at_offset(&dst0, dst_off);
                k.xor(&mut d[dst_off..], s);
                prop_assert_eq!(&d[dst_off..], &want_xor[..], "{} xor", k.name());

                let mut b = at_offset(&src, dst_off);
                k.scale(&mut b[dst_off..], c);
                prop_assert_eq!(&b[dst_off..], &want_scale[..], "{} scale", k.name());
            }
        }

        /// mul_add_many equals a sum of scalar mul_adds, with sources of different lengths
        /// (zero-extended) at arbitrary alignments.
        #[test]
        fn mul_add_many_matches_scalar(
            dst0 in proptest::collection::vec(any::<u8>(), 0..9216),
            srcs in proptest::collection::vec(
                (any::<u64>(), 0usize..64, coef()), 0..24),
            fill in any::<u8>(),
        ) {
            let n = dst0.len();
            // Source i: a length in 0..=n, content from its seed, stored at offset `off`.
            let owned: Vec<(Vec<u8>, usize, u8)> = srcs
                .iter()
                .map(|&(seed, off, c)| {
                    let len = if n == 0 { 0 } else if seed % 3 == 0 { n } else { (seed as usize >> 8) % (n + 1) };
                    let bytes: Vec<u8> = (0..len)
                        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8) ^ fill)
                        .collect();
                    (at_offset(&bytes, off), off, c)
                })
                .collect();
            let views: Vec<&[u8]> = owned.iter().map(|(v, off, _)| &v[*off..]).collect();
            let coefs: Vec<u8> = owned.iter().map(|o| o.2).collect();

            let mut want = dst0.clone();
            for (s, &c) in views.iter().zip(&coefs) {
                scalar::mul_add(&mut want, s, c);
            }
            for k in supported() {
                let mut d = dst0.clone();
                k.mul_add_many(&mut d, &views, &coefs);
                prop_assert_eq!(&d, &want, "{} mul_add_many", k.name());
                // The same sum through the indexed form, walking the sources as a rotated ring.
                let m = views.len();
                let r = fill as usize;
                let mut d = dst0.clone();
                k.mul_add_terms(&mut d, m, |j| (views[(r + j) % m], coefs[(r + j) % m]));
                prop_assert_eq!(&d, &want, "{} mul_add_terms", k.name());
            }
        }
    }
}
