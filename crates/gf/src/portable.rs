//! The portable kernel: one 256-byte multiplication row per coefficient, one lookup per byte.
//! About an order of magnitude slower than the SIMD kernels; it exists for non-x86 targets and
//! as a second, table-based reference in the tests.
#![deny(unsafe_code)]

use crate::tables::MUL;

/// `dst[..src.len()] ^= c * src`.
pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => return,
        1 => return xor(dst, src),
        _ => {}
    }
    let row = &MUL[c as usize];
    for (d, &s) in dst[..src.len()].iter_mut().zip(src) {
        *d ^= row[s as usize];
    }
}

/// `dst[..src.len()] = c * src`.
pub(crate) fn mul(dst: &mut [u8], src: &[u8], c: u8) {
    if c < 2 {
        return crate::mul_trivial(dst, src, c);
    }
    let row = &MUL[c as usize];
    for (d, &s) in dst[..src.len()].iter_mut().zip(src) {
        *d = row[s as usize];
    }
}

/// `buf = c * buf`.
pub(crate) fn scale(buf: &mut [u8], c: u8) {
    match c {
        0 => return buf.fill(0),
        1 => return,
        _ => {}
    }
    let row = &MUL[c as usize];
    for b in buf.iter_mut() {
        *b = row[*b as usize];
    }
}

/// `dst[..src.len()] ^= src`, eight bytes at a time (the compiler vectorises it further).
pub(crate) fn xor(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let v = u64::from_ne_bytes(d[..].try_into().unwrap_or([0; 8]))
            ^ u64::from_ne_bytes(s.try_into().unwrap_or([0; 8]));
        d.copy_from_slice(&v.to_ne_bytes());
    }
    for (d, &s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d ^= s;
    }
}

/// `dst ^= sum(coefs[i] * srcs[i])`.
pub(crate) fn mul_add_many(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    mul_add_terms(dst, srcs.len(), |i| (srcs[i], coefs[i]))
}

/// `dst ^= sum of term(i).1 * term(i).0`, in 1 KiB chunks of `dst` so the chunk stays in L1
/// while every source is added to it.
pub(crate) fn mul_add_terms<'a>(
    dst: &mut [u8],
    terms: usize,
    term: impl Fn(usize) -> (&'a [u8], u8),
) {
    const CHUNK: usize = 1024;
    for (ci, chunk) in dst.chunks_mut(CHUNK).enumerate() {
        let off = ci * CHUNK;
        for i in 0..terms {
            let (s, c) = term(i);
            if c == 0 || s.len() <= off {
                continue;
            }
            let end = s.len().min(off + CHUNK);
            mul_add(chunk, &s[off..end], c);
        }
    }
}
