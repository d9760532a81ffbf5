//! Scalar GF(2^8) arithmetic with log/exp tables built at compile time. This is the reference
//! every SIMD kernel is tested against.
#![deny(unsafe_code)]

/// The RFC 8681 field polynomial x^8+x^4+x^3+x^2+1.
pub const POLYNOMIAL: u16 = 0x11D;

const fn build_tables() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    (exp, log)
}

const TABLES: ([u8; 512], [u8; 256]) = build_tables();
/// `exp[i] = alpha^i`, doubled so that `exp[log a + log b]` needs no reduction.
pub static EXP: [u8; 512] = TABLES.0;
/// `log[a]` for `a != 0`; `log[0]` is unused.
pub static LOG: [u8; 256] = TABLES.1;

/// a * b in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// a * b, usable in `const` items (the compile-time tables in `tables.rs`); the runtime
/// [`mul`] reads the same tables through statics.
pub const fn mul_const(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        TABLES.0[TABLES.1[a as usize] as usize + TABLES.1[b as usize] as usize]
    }
}

/// Multiplicative inverse; `inv(0)` is 0 (callers never divide by zero on purpose).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// a / b; `div(a, 0)` is 0.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + 255 - LOG[b as usize] as usize]
    }
}

/// `dst[..src.len()] ^= c * src`, byte by byte.
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    let dst = &mut dst[..src.len()];
    match c {
        0 => {}
        1 => xor(dst, src),
        _ => {
            let lc = LOG[c as usize] as usize;
            for (d, &s) in dst.iter_mut().zip(src) {
                if s != 0 {
                    *d ^= EXP[lc + LOG[s as usize] as usize];
                }
            }
        }
    }
}

/// `dst[..src.len()] = c * src`, byte by byte.
pub fn mul_region(dst: &mut [u8], src: &[u8], c: u8) {
    let dst = &mut dst[..src.len()];
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = mul(c, s);
    }
}

/// `dst[..src.len()] ^= src`.
pub fn xor(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    for (d, &s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

/// `buf *= c` in place.
pub fn scale(buf: &mut [u8], c: u8) {
    for b in buf.iter_mut() {
        *b = mul(c, *b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_cycle_has_order_255() {
        assert_eq!(EXP[0], 1);
        assert_eq!(EXP[8], 0x1D);
        assert_eq!(EXP[255], 1);
    }

    #[test]
    fn inverse_of_every_nonzero_element() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "a={a:#x}");
        }
    }
}
