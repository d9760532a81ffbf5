//! x86-64 region kernels: SSSE3, AVX2 and AVX-512BW split-nibble `pshufb`, and AVX-512 +
//! GFNI `gf2p8affineqb`.
//!
//! The algorithms are written once, generically over [`Vector`], and instantiated per ISA inside
//! `#[target_feature]` entry points. Every generic function and trait method is
//! `#[inline(always)]`, so the whole body (intrinsics included) is inlined into the entry point
//! and compiled with its features — the same pattern as `memchr`'s vector code.
//!
//! Entry points are `unsafe`: the caller must have checked that the CPU supports the features,
//! and that `dst.len() >= src.len()` (and `>= s.len()` for every multi-source input). The safe
//! wrappers in `lib.rs` do both.
#![allow(unsafe_code)]

mod generic;
mod vectors;

pub(crate) use vectors::{Avx2, Avx512, Gfni, Ssse3};

/// Generates the `unsafe` entry points for one ISA.
macro_rules! entry_points {
    ($module:ident, $vector:ty, $features:literal) => {
        pub(crate) mod $module {
            use super::generic;

            /// `dst[..src.len()] ^= c * src`.
            ///
            /// # Safety
            /// The CPU supports the module's features and `dst.len() >= src.len()`.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
                debug_assert!(dst.len() >= src.len());
                match c {
                    0 => return,
                    // SAFETY: same contract as ours.
                    1 => return unsafe { xor(dst, src) },
                    _ => {}
                }
                // SAFETY: lengths checked by the caller (contract above); features enabled.
                unsafe { generic::mul_add::<$vector>(dst.as_mut_ptr(), src.as_ptr(), src.len(), c) }
            }

            /// `dst[..src.len()] = c * src`.
            ///
            /// # Safety
            /// The CPU supports the module's features and `dst.len() >= src.len()`.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn mul(dst: &mut [u8], src: &[u8], c: u8) {
                debug_assert!(dst.len() >= src.len());
                if c < 2 {
                    return crate::mul_trivial(dst, src, c);
                }
                // SAFETY: as above.
                unsafe { generic::mul::<$vector>(dst.as_mut_ptr(), src.as_ptr(), src.len(), c) }
            }

            /// `buf = c * buf`.
            ///
            /// # Safety
            /// The CPU supports the module's features.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn scale(buf: &mut [u8], c: u8) {
                match c {
                    0 => return buf.fill(0),
                    1 => return,
                    _ => {}
                }
                let p = buf.as_mut_ptr();
                // SAFETY: in place; every vector is loaded before the same bytes are stored.
                unsafe { generic::mul::<$vector>(p, p, buf.len(), c) }
            }

            /// `dst[..src.len()] ^= src`.
            ///
            /// # Safety
            /// The CPU supports the module's features and `dst.len() >= src.len()`.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn xor(dst: &mut [u8], src: &[u8]) {
                debug_assert!(dst.len() >= src.len());
                // SAFETY: as above.
                unsafe { generic::xor::<$vector>(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
            }

            /// `dst ^= sum(coefs[i] * srcs[i])`.
            ///
            /// # Safety
            /// The CPU supports the module's features, `srcs.len() == coefs.len()` and every
            /// source is at most `dst.len()` long.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn mul_add_many(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
                debug_assert_eq!(srcs.len(), coefs.len());
                // SAFETY: as above.
                unsafe {
                    generic::mul_add_many::<$vector, _>(dst, srcs.len(), |i| (srcs[i], coefs[i]))
                }
            }

            /// `dst ^= sum of term(i).1 * term(i).0` for `i < terms`.
            ///
            /// # Safety
            /// The CPU supports the module's features and every source is at most `dst.len()`
            /// long.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn mul_add_terms<'a, F: Fn(usize) -> (&'a [u8], u8)>(
                dst: &mut [u8],
                terms: usize,
                term: F,
            ) {
                // SAFETY: as above.
                unsafe { generic::mul_add_many::<$vector, F>(dst, terms, term) }
            }
        }
    };
}

entry_points!(ssse3, crate::x86::Ssse3, "ssse3");
entry_points!(avx2, crate::x86::Avx2, "avx2");
entry_points!(avx512, crate::x86::Avx512, "avx512f,avx512bw");
entry_points!(gfni, crate::x86::Gfni, "avx512f,avx512bw,gfni");

/// Runtime CPU checks, one per kernel.
pub(crate) fn has_ssse3() -> bool {
    std::arch::is_x86_feature_detected!("ssse3")
}

/// See [`has_ssse3`].
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// See [`has_ssse3`].
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

/// See [`has_ssse3`].
pub(crate) fn has_gfni() -> bool {
    has_avx512() && std::arch::is_x86_feature_detected!("gfni")
}
