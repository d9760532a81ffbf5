//! RFC 8681 §3.6 `generate_coding_coefficients()`: the coding coefficients of a repair symbol,
//! derived from its 16-bit Repair_Key, the density threshold DT and the field size m.
//!
//! Both ends run this function, so the coefficients never travel on the wire. It follows the
//! RFC's C code step by step, including how many PRNG draws each branch consumes; a different
//! draw pattern would give other implementations different coefficients.
//!
//! Zero coefficients with m = 8: the RFC does not map a drawn 0 to 1, it *draws again*
//! (`do { c = rand256() } while (c == 0)`), so that with DT = 15 every source symbol is included
//! and with DT < 15 the density is exactly (DT+1)/16.

use thiserror::Error;

use crate::tinymt::TinyMt32;

/// The finite field of a sliding-window code (RFC 8681 §3.2: m = 1 or m = 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// GF(2^8) with polynomial x^8+x^4+x^3+x^2+1 (m = 8): FEC Encoding ID 10.
    Gf256,
    /// GF(2) (m = 1): coefficients 0 or 1, i.e. XOR codes. FEC Encoding ID 9.
    Gf2,
}

impl Field {
    /// The RFC's `m` parameter.
    pub fn m(self) -> u8 {
        match self {
            Field::Gf256 => 8,
            Field::Gf2 => 1,
        }
    }

    /// The field for an `m` value, if the RFC defines it.
    pub fn from_m(m: u8) -> Option<Self> {
        match m {
            8 => Some(Field::Gf256),
            1 => Some(Field::Gf2),
            _ => None,
        }
    }
}

/// Why coefficients could not be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum CoefficientError {
    /// DT must lie in 0..=15.
    #[error("density threshold DT must be 0..=15")]
    BadDt,
    /// m must be 1 or 8.
    #[error("field size m must be 1 or 8")]
    BadM,
}

/// Fills `cc` (one entry per source symbol of the window, `cc_nb = cc.len()`) with the coding
/// coefficients for `repair_key`, density threshold `dt` and field size `m`, as RFC 8681 §3.6.
pub fn generate_coding_coefficients(
    repair_key: u16,
    cc: &mut [u8],
    dt: u8,
    m: u8,
) -> Result<(), CoefficientError> {
    if dt > 15 {
        return Err(CoefficientError::BadDt);
    }
    match m {
        1 => {
            if dt == 15 {
                // All coefficients are 1.
                cc.fill(1);
            } else {
                let mut s = TinyMt32::new(repair_key as u32);
                for c in cc.iter_mut() {
                    *c = u8::from(s.rand16() <= dt);
                }
            }
        }
        8 => {
            let mut s = TinyMt32::new(repair_key as u32);
            if dt == 15 {
                // Coefficient 0 is avoided so that every source symbol is included.
                for c in cc.iter_mut() {
                    *c = nonzero_rand256(&mut s);
                }
            } else {
                for c in cc.iter_mut() {
                    *c = if s.rand16() <= dt {
                        nonzero_rand256(&mut s)
                    } else {
                        0
                    };
                }
            }
        }
        _ => return Err(CoefficientError::BadM),
    }
    Ok(())
}

/// `do { c = tinymt32_rand256(s) } while (c == 0)`.
#[inline]
fn nonzero_rand256(s: &mut TinyMt32) -> u8 {
    loop {
        let c = s.rand256();
        if c != 0 {
            return c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent transcription of the RFC's C code over raw 32-bit outputs, so the
    /// branch structure of `generate_coding_coefficients` is checked against a second reading.
    fn reference(key: u16, n: usize, dt: u8, m: u8) -> Vec<u8> {
        let mut s = TinyMt32::new(key as u32);
        let mut out = vec![0u8; n];
        for c in out.iter_mut() {
            if m == 1 && dt == 15 {
                *c = 1;
                continue;
            }
            let include = dt == 15 || (s.next_u32() & 0xf) as u8 <= dt;
            if !include {
                *c = 0;
            } else if m == 1 {
                *c = 1;
            } else {
                loop {
                    let v = (s.next_u32() & 0xff) as u8;
                    if v != 0 {
                        *c = v;
                        break;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn dense_m8_key1_is_rand256_without_zeros() {
        // With DT = 15, m = 8 the coefficients are the rand256 sequence of RFC 8681 Figure 9
        // (seed 1) with zeros skipped; Figure 9's first ten values contain no zero.
        let mut cc = [0u8; 10];
        generate_coding_coefficients(1, &mut cc, 15, 8).unwrap();
        assert_eq!(cc, [37, 225, 177, 176, 21, 246, 54, 139, 168, 237]);
    }

    #[test]
    fn sparse_m1_key1_follows_rand16() {
        // RFC 8681 Figure 10 (rand16, seed 1) starts 5, 1, 1, 0, 5, 6, 6, 11, 8, 13:
        // with DT = 5 a coefficient is 1 iff the draw is <= 5.
        let mut cc = [9u8; 10];
        generate_coding_coefficients(1, &mut cc, 5, 1).unwrap();
        assert_eq!(cc, [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn sparse_m8_key1_interleaves_draws() {
        // DT = 0: rand16 draw 5 > 0 -> 0; draw 1 > 0 -> 0; draw 1 -> 0; draw 0 <= 0 -> next
        // rand256 draw (value 21, the 5th output) ...
        let mut cc = [0u8; 4];
        generate_coding_coefficients(1, &mut cc, 0, 8).unwrap();
        assert_eq!(cc, [0, 0, 0, 21]);
    }

    #[test]
    fn all_dt_and_m_match_reference() {
        for m in [1u8, 8] {
            for dt in 0..=15u8 {
                for key in [0u16, 1, 2, 77, 0xffff] {
                    let mut cc = vec![0u8; 300];
                    generate_coding_coefficients(key, &mut cc, dt, m).unwrap();
                    assert_eq!(cc, reference(key, 300, dt, m), "key {key} dt {dt} m {m}");
                    if dt == 15 {
                        assert!(cc.iter().all(|&c| c != 0));
                    }
                    if m == 1 {
                        assert!(cc.iter().all(|&c| c <= 1));
                    }
                }
            }
        }
    }

    #[test]
    fn density_is_close_to_dt() {
        for dt in [0u8, 3, 7, 11] {
            let mut cc = vec![0u8; 16_000];
            generate_coding_coefficients(1234, &mut cc, dt, 8).unwrap();
            let nz = cc.iter().filter(|&&c| c != 0).count() as f64 / cc.len() as f64;
            let want = (dt as f64 + 1.0) / 16.0;
            assert!((nz - want).abs() < 0.02, "dt {dt}: density {nz} vs {want}");
        }
    }

    #[test]
    fn bad_parameters() {
        let mut cc = [0u8; 4];
        assert_eq!(
            generate_coding_coefficients(1, &mut cc, 16, 8),
            Err(CoefficientError::BadDt)
        );
        assert_eq!(
            generate_coding_coefficients(1, &mut cc, 15, 4),
            Err(CoefficientError::BadM)
        );
    }
}
