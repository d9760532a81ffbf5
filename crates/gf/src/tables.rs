//! Per-coefficient tables shared by the kernels, all built at compile time so that no kernel
//! pays a set-up cost per call (a 64-byte region is too short to amortise even 32 multiplies).
#![deny(unsafe_code)]

use crate::scalar::mul_const as mul;

/// `MUL[c][x] = c * x`: one 256-byte row per coefficient, used by the portable kernel and the
/// short tails of the SSSE3/AVX2 kernels (64 KiB; only the rows in use become cache-resident).
pub static MUL: [[u8; 256]; 256] = build_mul();

/// Split-nibble tables: `NIBBLE[c][x] = c * x` and `NIBBLE[c][16 + x] = c * (x << 4)` for
/// `x < 16`. Since multiplication by `c` is linear over GF(2), `c * b = lo[b & 15] ^ hi[b >> 4]`:
/// that is the `pshufb` kernel (ISA-L's and Plank's trick).
pub static NIBBLE: [[u8; 32]; 256] = build_nibble();

/// `gf2p8affineqb` matrices for multiplication by `c` modulo the RFC 8681 polynomial 0x11D.
/// The instruction computes output bit `i` of each byte as the parity of `x & A.byte[7 - i]`, so
/// byte `7 - i` of the matrix holds, in bit `j`, bit `i` of `c * 2^j`. (`gf2p8mulb` cannot be
/// used: its polynomial is fixed to AES's 0x11B.)
pub static AFFINE: [u64; 256] = build_affine();

const fn build_mul() -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 256 {
            t[c][x] = mul(c as u8, x as u8);
            x += 1;
        }
        c += 1;
    }
    t
}

const fn build_nibble() -> [[u8; 32]; 256] {
    let mut t = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c][x] = mul(c as u8, x as u8);
            t[c][16 + x] = mul(c as u8, (x << 4) as u8);
            x += 1;
        }
        c += 1;
    }
    t
}

const fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u8;
        let mut j = 0;
        while j < 8 {
            if (mul(c, 1 << j) >> i) & 1 != 0 {
                row |= 1 << j;
            }
            j += 1;
        }
        m |= (row as u64) << (8 * (7 - i));
        i += 1;
    }
    m
}

const fn build_affine() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = affine_matrix(c as u8);
        c += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies a `gf2p8affineqb` matrix in software, following the instruction's definition.
    fn affine_apply(m: u64, x: u8) -> u8 {
        let mut r = 0u8;
        for i in 0..8 {
            let row = (m >> (8 * (7 - i))) as u8;
            r |= (((row & x).count_ones() & 1) as u8) << i;
        }
        r
    }

    #[test]
    fn tables_agree_with_scalar_multiplication() {
        for c in 0..=255u8 {
            for x in 0..=255u8 {
                let want = mul(c, x);
                assert_eq!(MUL[c as usize][x as usize], want);
                let n = &NIBBLE[c as usize];
                assert_eq!(n[(x & 15) as usize] ^ n[16 + (x >> 4) as usize], want);
                assert_eq!(
                    affine_apply(AFFINE[c as usize], x),
                    want,
                    "c={c:#x} x={x:#x}"
                );
            }
        }
    }

    #[test]
    fn identity_matrix_is_the_gfni_identity() {
        // 0x0102040810204080 is the documented identity for gf2p8affineqb.
        assert_eq!(AFFINE[1], 0x0102_0408_1020_4080);
    }
}
