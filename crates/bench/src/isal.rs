//! Intel ISA-L's GF(2^8) kernels, loaded at run time from `libisal.so.2` so that the `hirt`
//! binary does not link it (Debian `libisal2`, pulled in by `libisal-dev`).
//!
//! ISA-L uses the same field polynomial as RFC 8681 (0x11D), so its output must equal ours
//! byte for byte; [`Isal::mad`] is checked against our kernels before it is timed.
#![allow(unsafe_code)]

use std::ffi::c_int;

use libloading::Library;

/// `void gf_vect_mul_init(unsigned char c, unsigned char *gftbl)`: 32-byte nibble tables.
type MulInit = unsafe extern "C" fn(c: u8, gftbl: *mut u8);
/// `void gf_vect_mad(int len, int vec, int vec_i, unsigned char *gftbls, unsigned char *src,
/// unsigned char *dest)`: `dest ^= gftbls[vec_i] * src`.
type Mad = unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut u8, *mut u8);
/// `void ec_init_tables(int k, int rows, unsigned char *a, unsigned char *gftbls)`.
type InitTables = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut u8);
/// `void gf_vect_dot_prod(int len, int vlen, unsigned char *gftbls, unsigned char **src,
/// unsigned char *dest)`: `dest = sum gftbls[i] * src[i]`.
type DotProd = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut *mut u8, *mut u8);

/// Smallest region ISA-L's AVX-512 kernels accept.
pub const MIN_LEN: usize = 64;

/// The loaded library and the entry points we time.
pub struct Isal {
    _lib: Library,
    mul_init: MulInit,
    init_tables: InitTables,
    dot_prod: DotProd,
    /// `gf_vect_mad` (ISA-L's own dispatcher) and each ISA variant this CPU can run.
    mads: Vec<(&'static str, Mad)>,
}

impl Isal {
    /// Loads `libisal.so.2` (or `libisal.so`); `Err` with the reason if it is not installed or
    /// lacks a symbol.
    pub fn load() -> Result<Isal, String> {
        // SAFETY: loading a shared library runs its initialisers; ISA-L's only set up its
        // dispatch pointers.
        let lib = unsafe { Library::new("libisal.so.2").or_else(|_| Library::new("libisal.so")) }
            .map_err(|e| format!("libisal.so.2 not found ({e})"))?;
        // SAFETY: the types above match the C prototypes in ISA-L's `erasure_code.h`; the
        // function pointers do not outlive `_lib`, which `Isal` owns.
        unsafe {
            let mul_init = *lib
                .get::<MulInit>(b"gf_vect_mul_init\0")
                .map_err(|e| e.to_string())?;
            let init_tables = *lib
                .get::<InitTables>(b"ec_init_tables\0")
                .map_err(|e| e.to_string())?;
            let dot_prod = *lib
                .get::<DotProd>(b"gf_vect_dot_prod\0")
                .map_err(|e| e.to_string())?;
            let mut mads = vec![(
                "isal",
                *lib.get::<Mad>(b"gf_vect_mad\0")
                    .map_err(|e| e.to_string())?,
            )];
            let variants: [(&str, &[u8], bool); 4] = [
                (
                    "isal_sse",
                    b"gf_vect_mad_sse\0",
                    std::arch::is_x86_feature_detected!("ssse3"),
                ),
                (
                    "isal_avx",
                    b"gf_vect_mad_avx\0",
                    std::arch::is_x86_feature_detected!("avx"),
                ),
                (
                    "isal_avx2",
                    b"gf_vect_mad_avx2\0",
                    std::arch::is_x86_feature_detected!("avx2"),
                ),
                (
                    "isal_avx512",
                    b"gf_vect_mad_avx512\0",
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512bw"),
                ),
            ];
            for (name, sym, ok) in variants {
                if let (true, Ok(f)) = (ok, lib.get::<Mad>(sym)) {
                    mads.push((name, *f));
                }
            }
            Ok(Isal {
                _lib: lib,
                mul_init,
                init_tables,
                dot_prod,
                mads,
            })
        }
    }

    /// Names of the `gf_vect_mad` variants, ISA-L's dispatcher first.
    pub fn mad_variants(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.mads.iter().map(|m| m.0)
    }

    /// The 32-byte table ISA-L multiplies by `c` with.
    pub fn table(&self, c: u8) -> [u8; 32] {
        let mut t = [0u8; 32];
        // SAFETY: gf_vect_mul_init writes exactly 32 bytes.
        unsafe { (self.mul_init)(c, t.as_mut_ptr()) };
        t
    }

    /// `dst ^= c * src` with variant `variant` (an index into [`Isal::mad_variants`]), `table`
    /// from [`Isal::table`]. Panics unless `dst.len() == src.len()` and the length is in
    /// `MIN_LEN..=i32::MAX`.
    pub fn mad(&self, variant: usize, table: &mut [u8; 32], src: &[u8], dst: &mut [u8]) {
        assert!(dst.len() == src.len() && src.len() >= MIN_LEN && src.len() <= c_int::MAX as usize);
        let f = self.mads[variant].1;
        // SAFETY: lengths checked above; ISA-L reads `len` bytes of src and the 32-byte table,
        // and reads/writes `len` bytes of dest. It does not write through `src` (the prototype
        // lacks `const`).
        unsafe {
            f(
                src.len() as c_int,
                1,
                0,
                table.as_mut_ptr(),
                src.as_ptr() as *mut u8,
                dst.as_mut_ptr(),
            )
        }
    }

    /// Tables for [`Isal::dot_prod`] over coefficients `coefs`.
    pub fn dot_tables(&self, coefs: &[u8]) -> Vec<u8> {
        let mut a = coefs.to_vec();
        let mut t = vec![0u8; 32 * coefs.len()];
        // SAFETY: k = coefs.len(), rows = 1: reads k coefficients, writes 32 * k bytes.
        unsafe { (self.init_tables)(coefs.len() as c_int, 1, a.as_mut_ptr(), t.as_mut_ptr()) };
        t
    }

    /// `dst = sum coefs[i] * srcs[i]` (ISA-L's encoder inner loop, i.e. one RLC repair).
    /// `ptrs` is caller-provided scratch (so timing excludes the allocation); every source
    /// must be `dst.len()` long. Panics otherwise.
    pub fn dot_prod(
        &self,
        tables: &mut [u8],
        srcs: &[&[u8]],
        ptrs: &mut Vec<*mut u8>,
        dst: &mut [u8],
    ) {
        assert!(srcs.iter().all(|s| s.len() == dst.len()) && tables.len() == 32 * srcs.len());
        assert!(dst.len() >= MIN_LEN && dst.len() <= c_int::MAX as usize && !srcs.is_empty());
        ptrs.clear();
        ptrs.extend(srcs.iter().map(|s| s.as_ptr() as *mut u8));
        // SAFETY: all lengths checked above; ISA-L only reads the sources.
        unsafe {
            (self.dot_prod)(
                dst.len() as c_int,
                srcs.len() as c_int,
                tables.as_mut_ptr(),
                ptrs.as_mut_ptr(),
                dst.as_mut_ptr(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ISA-L is an independent implementation of the same field: its bytes must equal ours.
    /// (Skipped, with a note, where libisal is not installed; CI installs it.)
    #[test]
    fn isal_agrees_with_hirt_gf() {
        let isal = match Isal::load() {
            Ok(i) => i,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let mut x = 0x1234_5678u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let variants = isal.mad_variants().count();
        for round in 0..200 {
            let len = MIN_LEN + next() as usize % 3000;
            let c = if round < 2 { round as u8 } else { next() as u8 };
            let src: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let dst: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut want = dst.clone();
            hirt_gf::scalar::mul_add(&mut want, &src, c);
            let mut table = isal.table(c);
            for v in 0..variants {
                let mut got = dst.clone();
                isal.mad(v, &mut table, &src, &mut got);
                assert_eq!(got, want, "variant {v} len {len} c {c:#x}");
            }
            let srcs: Vec<Vec<u8>> = (0..1 + round % 7)
                .map(|_| (0..len).map(|_| next() as u8).collect())
                .collect();
            let views: Vec<&[u8]> = srcs.iter().map(|s| &s[..]).collect();
            let coefs: Vec<u8> = views.iter().map(|_| next() as u8).collect();
            let mut want = vec![0u8; len];
            hirt_gf::mul_add_many(&mut want, &views, &coefs);
            let mut got = dst.clone();
            let mut tables = isal.dot_tables(&coefs);
            isal.dot_prod(&mut tables, &views, &mut Vec::new(), &mut got);
            assert_eq!(got, want, "dot_prod len {len}");
        }
    }
}
