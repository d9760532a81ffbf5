//! TinyMT32, the pseudorandom generator RFC 8681 uses to derive coding coefficients from a
//! Repair_Key, exactly as specified in RFC 8682 (Figure 1, parameter set `mat1 = 0x8f7011ee`,
//! `mat2 = 0xfc78ff1f`, `tmat = 0x3793fdff`).
//!
//! Interoperability with other RFC 8681 implementations depends on every bit of this generator,
//! so it is a line-by-line transcription of the reference code; the known-answer test below
//! checks RFC 8682 Figure 2.

/// `TINYMT32_MAT1_PARAM` (RFC 8682 §2.1).
const MAT1: u32 = 0x8f70_11ee;
/// `TINYMT32_MAT2_PARAM`.
const MAT2: u32 = 0xfc78_ff1f;
/// `TINYMT32_TMAT_PARAM`.
const TMAT: u32 = 0x3793_fdff;
const SH0: u32 = 1;
const SH1: u32 = 10;
const SH8: u32 = 8;
const MASK: u32 = 0x7fff_ffff;
const MIN_LOOP: u32 = 8;
const PRE_LOOP: u32 = 8;

/// TinyMT32 state (127 bits of state in four words). Cheap to create: the RLC code makes one per
/// repair symbol, seeded with its Repair_Key.
#[derive(Clone, Debug)]
pub struct TinyMt32 {
    status: [u32; 4],
}

impl TinyMt32 {
    /// `tinymt32_init(s, seed)`.
    pub fn new(seed: u32) -> Self {
        let mut status = [seed, MAT1, MAT2, TMAT];
        for i in 1..MIN_LOOP {
            let prev = status[((i - 1) & 3) as usize];
            status[(i & 3) as usize] ^=
                i.wrapping_add(1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)));
        }
        // period_certification(): an all-zero state would stay zero forever.
        if status[0] & MASK == 0 && status[1] == 0 && status[2] == 0 && status[3] == 0 {
            status = [b'T' as u32, b'I' as u32, b'N' as u32, b'Y' as u32];
        }
        let mut s = TinyMt32 { status };
        for _ in 0..PRE_LOOP {
            s.next_state();
        }
        s
    }

    /// `tinymt32_next_state(s)`.
    #[inline]
    fn next_state(&mut self) {
        let st = &mut self.status;
        let mut y = st[3];
        let mut x = (st[0] & MASK) ^ st[1] ^ st[2];
        x ^= x << SH0;
        y ^= (y >> SH0) ^ x;
        st[0] = st[1];
        st[1] = st[2];
        st[2] = x ^ (y << SH1);
        st[3] = y;
        // `-((int32_t)(y & 1))` is all ones when the low bit is set.
        let m = (y & 1).wrapping_neg();
        st[1] ^= m & MAT1;
        st[2] ^= m & MAT2;
    }

    /// `tinymt32_temper(s)`.
    #[inline]
    fn temper(&self) -> u32 {
        let st = &self.status;
        let mut t0 = st[3];
        let t1 = st[0].wrapping_add(st[2] >> SH8);
        t0 ^= t1;
        t0 ^= (t1 & 1).wrapping_neg() & TMAT;
        t0
    }

    /// `tinymt32_generate_uint32(s)`: the next 32-bit output.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        self.next_state();
        self.temper()
    }

    /// `tinymt32_rand16(s)` of RFC 8681 §3.5: an integer in 0..=15 (the low 4 bits).
    #[inline]
    pub fn rand16(&mut self) -> u8 {
        (self.next_u32() & 0xf) as u8
    }

    /// `tinymt32_rand256(s)` of RFC 8681 §3.5: an integer in 0..=255 (the low 8 bits).
    #[inline]
    pub fn rand256(&mut self) -> u8 {
        (self.next_u32() & 0xff) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8682 Figure 2: the first 50 values of `tinymt32_generate_uint32()` for seed 1, read
    /// line by line (identical to the authors' `tinymt/check32.out.txt`).
    const RFC8682_FIG2: [u32; 50] = [
        2545341989, 981918433, 3715302833, 2387538352, 3591001365, //
        3820442102, 2114400566, 2196103051, 2783359912, 764534509, //
        643179475, 1822416315, 881558334, 4207026366, 3690273640, //
        3240535687, 2921447122, 3984931427, 4092394160, 44209675, //
        2188315343, 2908663843, 1834519336, 3774670961, 3019990707, //
        4065554902, 1239765502, 4035716197, 3412127188, 552822483, //
        161364450, 353727785, 140085994, 149132008, 2547770827, //
        4064042525, 4078297538, 2057335507, 622384752, 2041665899, //
        2193913817, 1080849512, 33160901, 662956935, 642999063, //
        3384709977, 1723175122, 3866752252, 521822317, 2292524454,
    ];

    /// RFC 8681 Appendix A, Figure 9: the first 50 values of `tinymt32_rand256()` for seed 1.
    /// (The low byte of each Figure 2 value, which is how RFC 8681 §3.5 defines
    /// `tinymt32_rand256`.)
    const RFC8681_FIG9_RAND256: [u8; 50] = [
        37, 225, 177, 176, 21, 246, 54, 139, 168, 237, //
        211, 187, 62, 190, 104, 135, 210, 99, 176, 11, //
        207, 35, 40, 113, 179, 214, 254, 101, 212, 211, //
        226, 41, 234, 232, 203, 29, 194, 211, 112, 107, //
        217, 104, 197, 135, 23, 89, 210, 252, 109, 166,
    ];

    /// RFC 8681 Appendix A, Figure 10: the first 50 values of `tinymt32_rand16()` for seed 1
    /// (low 4 bits of each Figure 2 value; see above).
    const RFC8681_FIG10_RAND16: [u8; 50] = [
        5, 1, 1, 0, 5, 6, 6, 11, 8, 13, //
        3, 11, 14, 14, 8, 7, 2, 3, 0, 11, //
        15, 3, 8, 1, 3, 6, 14, 5, 4, 3, //
        2, 9, 10, 8, 11, 13, 2, 3, 0, 11, //
        9, 8, 5, 7, 7, 9, 2, 12, 13, 6,
    ];

    #[test]
    fn rfc8682_figure2_seed1() {
        let mut s = TinyMt32::new(1);
        let got: Vec<u32> = (0..50).map(|_| s.next_u32()).collect();
        assert_eq!(got, RFC8682_FIG2);
    }

    #[test]
    fn rfc8681_appendix_a_rand256() {
        let mut s = TinyMt32::new(1);
        let got: Vec<u8> = (0..50).map(|_| s.rand256()).collect();
        assert_eq!(got, RFC8681_FIG9_RAND256);
    }

    #[test]
    fn rfc8681_appendix_a_rand16() {
        let mut s = TinyMt32::new(1);
        let got: Vec<u8> = (0..50).map(|_| s.rand16()).collect();
        assert_eq!(got, RFC8681_FIG10_RAND16);
    }

    #[test]
    fn masked_vectors_agree_with_figure2() {
        // Guards the two transcriptions above against typos.
        for i in 0..50 {
            assert_eq!(RFC8681_FIG9_RAND256[i] as u32, RFC8682_FIG2[i] & 0xff);
            assert_eq!(RFC8681_FIG10_RAND16[i] as u32, RFC8682_FIG2[i] & 0xf);
        }
    }

    #[test]
    fn seed_zero_is_allowed() {
        // RFC 8682 §2.1: value 0 is a valid seed; Repair_Key 0 is used by RLC.
        let mut a = TinyMt32::new(0);
        let mut b = TinyMt32::new(0);
        let x = a.next_u32();
        assert_eq!(x, b.next_u32());
        assert!((0..10).any(|_| a.next_u32() != x));
    }
}
