//! The XDP program of [`SidFilter`]: eBPF instructions assembled at run time and the `bpf(2)`
//! calls that create its XSKMAP, load it and attach it through a BPF link.
//!
//! There is no C compiler in the build, and the program is short and fixed apart from the
//! SIDs, so it is written here instruction by instruction; the SIDs become immediates.

use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::Xsk;

// bpf(2) commands (enum bpf_cmd).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;

const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
pub(super) const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: BPF_XDP.
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;
/// `src_reg` of a `BPF_LD_IMM64` whose immediate is a map file descriptor.
pub(super) const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `bpf_redirect_map(map, key, flags)`.
pub(super) const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `bpf_ringbuf_reserve(ringbuf, size, flags)`: a record of `size` bytes, or NULL.
pub(super) const BPF_FUNC_RINGBUF_RESERVE: i32 = 131;
/// `bpf_ringbuf_submit(record, flags)`.
pub(super) const BPF_FUNC_RINGBUF_SUBMIT: i32 = 132;
/// `bpf_ringbuf_discard(record, flags)`.
pub(super) const BPF_FUNC_RINGBUF_DISCARD: i32 = 133;
/// `bpf_ringbuf_query(ring, flags)`.
pub(super) const BPF_FUNC_RINGBUF_QUERY: i32 = 134;
/// `bpf_map_lookup_elem(map, key)`: a pointer to the value, or NULL.
pub(super) const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
/// `bpf_xdp_adjust_head(ctx, delta)`: moves the start of the packet (0 or a negative errno).
pub(super) const BPF_FUNC_XDP_ADJUST_HEAD: i32 = 44;
/// `bpf_xdp_load_bytes(ctx, offset, buf, len)`: copies packet bytes (0 or a negative errno).
pub(super) const BPF_FUNC_XDP_LOAD_BYTES: i32 = 189;
/// `enum xdp_action`.
pub(super) const XDP_DROP: i32 = 1;
pub(super) const XDP_PASS: i32 = 2;
/// `bpf_ringbuf_submit` flag: do not wake the reader (it polls on its own schedule).
const BPF_RB_NO_WAKEUP: i32 = 1;
/// `bpf_ringbuf_submit` flag: wake the reader whatever its position.
const BPF_RB_FORCE_WAKEUP: i32 = 2;
/// `bpf_ringbuf_query` flag: bytes not yet consumed.
const BPF_RB_AVAIL_DATA: i32 = 0;

// Opcodes: class | operation | source, from linux/bpf_common.h and linux/bpf.h.
/// `BPF_LDX | BPF_MEM | BPF_W`: `dst = *(u32 *)(src + off)`.
pub(super) const LDX_W: u8 = 0x61;
/// `BPF_LDX | BPF_MEM | BPF_H`: `dst = *(u16 *)(src + off)`.
pub(super) const LDX_H: u8 = 0x69;
/// `BPF_LDX | BPF_MEM | BPF_B`: `dst = *(u8 *)(src + off)`.
pub(super) const LDX_B: u8 = 0x71;
/// `BPF_LD | BPF_DW | BPF_IMM`: 64-bit immediate, two instruction slots.
pub(super) const LD_IMM64: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_X`: `dst = src`.
pub(super) const MOV64_X: u8 = 0xbf;
/// `BPF_ALU64 | BPF_MOV | BPF_K`: `dst = imm`.
pub(super) const MOV64_K: u8 = 0xb7;
/// `BPF_ALU64 | BPF_ADD | BPF_K`: `dst += imm`.
pub(super) const ADD64_K: u8 = 0x07;
/// `BPF_ALU | BPF_AND | BPF_K`: `w_dst &= imm` (upper half zeroed).
pub(super) const AND32_K: u8 = 0x54;
/// `BPF_STX | BPF_MEM | BPF_W`: `*(u32 *)(dst + off) = src`.
pub(super) const STX_W: u8 = 0x63;
/// `BPF_ALU64 | BPF_ADD | BPF_X`: `dst += src`.
pub(super) const ADD64_X: u8 = 0x0f;
/// `BPF_ALU64 | BPF_SUB | BPF_X`: `dst -= src`.
pub(super) const SUB64_X: u8 = 0x1f;
/// `BPF_JMP | BPF_JEQ | BPF_K`: `if dst == imm goto +off` (64 bits).
pub(super) const JEQ_K: u8 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K`: `if dst > imm goto +off` (unsigned, 64 bits).
pub(super) const JGT_K: u8 = 0x25;
/// `BPF_JMP | BPF_JLT | BPF_K`: `if dst < imm goto +off` (unsigned, 64 bits).
pub(super) const JLT_K: u8 = 0xa5;
/// `BPF_LDX | BPF_MEM | BPF_DW`: `dst = *(u64 *)(src + off)`.
pub(super) const LDX_DW: u8 = 0x79;
/// `BPF_STX | BPF_MEM | BPF_DW`: `*(u64 *)(dst + off) = src`.
pub(super) const STX_DW: u8 = 0x7b;
/// `BPF_STX | BPF_MEM | BPF_H`: `*(u16 *)(dst + off) = src`.
pub(super) const STX_H: u8 = 0x6b;
/// `BPF_STX | BPF_MEM | BPF_B`: `*(u8 *)(dst + off) = src`.
pub(super) const STX_B: u8 = 0x73;
/// `BPF_STX | BPF_ATOMIC | BPF_W` with `imm` = `BPF_ADD | BPF_FETCH`:
/// `src = atomic_fetch_add((u32 *)(dst + off), src)`.
pub(super) const ATOMIC_W: u8 = 0xc3;
/// `BPF_STX | BPF_ATOMIC | BPF_DW`: an atomic operation on `*(u64 *)(dst + off)` (imm says which).
pub(super) const ATOMIC_DW: u8 = 0xdb;
const BPF_ADD_FETCH: i32 = 0x01;
/// Atomic operation `BPF_ADD` (no fetch).
const BPF_ADD: i32 = 0x00;
/// `BPF_ALU | BPF_END | BPF_TO_BE`: `dst = htobe<imm>(dst)`.
pub(super) const END_TO_BE: u8 = 0xdc;
/// `BPF_ALU64 | BPF_RSH | BPF_K`: `dst >>= imm`.
pub(super) const RSH64_K: u8 = 0x77;
/// `BPF_ALU64 | BPF_LSH | BPF_K`: `dst <<= imm`.
pub(super) const LSH64_K: u8 = 0x67;
/// `BPF_JMP | BPF_JNE | BPF_K`: `if dst != imm goto +off` (64 bits).
pub(super) const JNE_K: u8 = 0x55;
/// `BPF_JMP | BPF_JLE | BPF_X`: `if dst <= src goto +off` (unsigned, 64 bits).
pub(super) const JLE_X: u8 = 0xbd;
/// `BPF_JMP | BPF_JNE | BPF_X`: `if dst != src goto +off`.
pub(super) const JNE_X: u8 = 0x5d;
/// `BPF_JMP | BPF_JLE | BPF_K`: `if dst <= imm goto +off` (unsigned).
pub(super) const JLE_K: u8 = 0xb5;
/// `BPF_ALU64 | BPF_OR | BPF_X`: `dst |= src`.
pub(super) const OR64_X: u8 = 0x4f;
/// `BPF_JMP | BPF_JA`: `goto +off`.
pub(super) const JA: u8 = 0x05;
/// `BPF_JMP | BPF_JGT | BPF_X`: `if dst > src goto +off` (unsigned, 64 bits).
pub(super) const JGT_X: u8 = 0x2d;
/// `BPF_JMP32 | BPF_JNE | BPF_K`: `if (u32)dst != (u32)imm goto +off`. 32 bits wide, so an
/// immediate with its top bit set is not sign-extended against a zero-extended load.
pub(super) const JNE32_K: u8 = 0x56;
/// `BPF_JMP | BPF_CALL`: helper `imm`.
pub(super) const CALL: u8 = 0x85;
/// `BPF_JMP | BPF_EXIT`: return `r0`.
pub(super) const EXIT: u8 = 0x95;

pub(super) const R0: u8 = 0;
pub(super) const R1: u8 = 1;
pub(super) const R2: u8 = 2;
pub(super) const R3: u8 = 3;
pub(super) const R4: u8 = 4;
pub(super) const R5: u8 = 5;
pub(super) const R6: u8 = 6;
pub(super) const R7: u8 = 7;
pub(super) const R8: u8 = 8;
pub(super) const R9: u8 = 9;
pub(super) const R10: u8 = 10;

/// At most this many SIDs per program.
pub const MAX_SIDS: usize = 4;

/// `struct xdp_md` field offsets.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;
/// Ethernet header + IPv6 header: what the program reads.
const ETH_IPV6_LEN: i32 = 14 + 40;
const ETHERTYPE_OFF: i16 = 12;
const IPV6_OFF: i16 = 14;
/// IPv6 destination address offset in the frame.
const DA_OFF: i16 = IPV6_OFF + 24;

/// One eBPF instruction (`struct bpf_insn`), as the kernel reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Insn {
    pub code: u8,
    /// `dst_reg:4, src_reg:4` bit-fields.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        // The bit-fields `dst_reg:4; src_reg:4` are allocated from the low end on little-endian
        // targets and from the high end on big-endian ones.
        let regs = if cfg!(target_endian = "little") {
            (src << 4) | (dst & 0xf)
        } else {
            (dst << 4) | (src & 0xf)
        };
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }

    #[cfg(test)]
    pub const fn dst(self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs & 0xf
        } else {
            self.regs >> 4
        }
    }

    #[cfg(test)]
    pub const fn src(self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs >> 4
        } else {
            self.regs & 0xf
        }
    }

    /// The eight bytes the kernel reads (in this host's byte order).
    #[cfg(test)]
    pub fn to_bytes(self) -> [u8; 8] {
        let off = self.off.to_ne_bytes();
        let imm = self.imm.to_ne_bytes();
        [
            self.code, self.regs, off[0], off[1], imm[0], imm[1], imm[2], imm[3],
        ]
    }
}

pub(super) const fn mov64_reg(dst: u8, src: u8) -> Insn {
    Insn::new(MOV64_X, dst, src, 0, 0)
}

pub(super) const fn mov64_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(MOV64_K, dst, 0, 0, imm)
}

pub(super) const fn add64_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(ADD64_K, dst, 0, 0, imm)
}

pub(super) const fn and32_imm(dst: u8, imm: i32) -> Insn {
    Insn::new(AND32_K, dst, 0, 0, imm)
}

/// `*(size *)(dst + off) = src`, `size` [`STX_W`].
pub(super) const fn stx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    Insn::new(size, dst, src, off, 0)
}

/// `dst = *(size *)(src + off)`, `size` one of [`LDX_W`], [`LDX_H`], [`LDX_B`].
pub(super) const fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    Insn::new(size, dst, src, off, 0)
}

/// `dst = map` for the map behind `fd` (two slots).
pub(super) const fn ld_map_fd(dst: u8, fd: RawFd) -> [Insn; 2] {
    [
        Insn::new(LD_IMM64, dst, BPF_PSEUDO_MAP_FD, 0, fd),
        Insn::new(0, 0, 0, 0, 0),
    ]
}

pub(super) const fn call(helper: i32) -> Insn {
    Insn::new(CALL, 0, 0, 0, helper)
}

pub(super) const fn exit() -> Insn {
    Insn::new(EXIT, 0, 0, 0, 0)
}

/// A jump target of [`Asm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Label(usize);

/// Collects instructions and resolves forward jumps.
#[derive(Debug, Default)]
struct Asm {
    insns: Vec<Insn>,
    /// Where each label was bound.
    labels: Vec<Option<usize>>,
    /// Jumps to patch: (instruction index, label).
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    fn emit(&mut self, insns: &[Insn]) {
        self.insns.extend_from_slice(insns);
    }

    /// A jump (`code` with `dst`, `src`, `imm`) to `target`.
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, target: Label) {
        self.fixups.push((self.insns.len(), target));
        self.insns.push(Insn::new(code, dst, src, 0, imm));
    }

    fn finish(mut self) -> Vec<Insn> {
        for &(at, label) in &self.fixups {
            let to = self.labels[label.0].expect("jump to an unbound label");
            let off = to as isize - (at as isize + 1);
            self.insns[at].off = i16::try_from(off).expect("jump too far");
        }
        self.insns
    }
}

/// The filter program for `sids` (1..=[`MAX_SIDS`]) with the XSKMAP `map_fd`:
///
/// ```text
/// r6 = ctx; r2 = data; r3 = data_end
/// if data + 54 > data_end: PASS
/// if ethertype != IPv6 (VLAN tags included): PASS
/// if version != 6: PASS
/// r4, r5, r7, r8 = the destination address as four u32 words
/// if it equals no SID: PASS
/// return bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS)
/// ```
#[cfg(test)]
pub(super) fn program(sids: &[Ipv6Addr], map_fd: RawFd) -> Vec<Insn> {
    program_with(sids, map_fd, None, None)
}

/// Sources for the encoder SID that the program tags itself and the kernel forwards, while
/// hirt reads a copy to code repairs from.
///
/// For a frame to `sid` with an SRH of at most 8 segments, no TLV yet, Segments Left >= 1 and
/// `dec_sid` among the segments still to visit, of at most [`TAP_MAX_PACKET`] bytes, the
/// program copies the IPv6 packet as it arrived into the ring buffer behind `ring_fd` (record:
/// its length and its ESI as u32, then the packet), takes the ESI from the counter in
/// `esi_map_fd` (an array map of one u32), does the End behaviour (Segments Left - 1, the next
/// segment as destination), inserts the 8-byte source TLV (`source_tlv`, `stream`, the ESI)
/// after the segments, exactly as hirt's own path does, and passes the frame to the kernel,
/// which forwards it. Feedback (Segments Left 0) goes to the AF_XDP socket; other frames to
/// the SID go to the kernel (its End route forwards them unprotected). A frame whose copy
/// cannot be made is passed unprotected; one that cannot be grown after its ESI was taken is
/// dropped (its copy is in the ring: the decoder recovers it).
#[derive(Clone, Copy, Debug)]
pub struct SourceTag {
    /// The encoder SID.
    pub sid: Ipv6Addr,
    /// The decoder SID.
    pub dec_sid: Ipv6Addr,
    /// Type of the source TLV.
    pub source_tlv: u8,
    /// Stream id written into the TLV.
    pub stream: u16,
    /// The ring buffer map.
    pub ring_fd: RawFd,
    /// The ESI counter (`BPF_MAP_TYPE_ARRAY`, one u32).
    pub esi_map_fd: RawFd,
    /// Where the program counts the sources it passes on untagged ([`create_untagged`]).
    pub untagged_map_fd: RawFd,
}

/// Why the tag program passed a frame for its SID on untagged, the key of its counter in the
/// map of [`create_untagged`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untagged {
    /// It came in on a receive queue other than 0.
    OtherQueue = 0,
    /// It is longer than [`TAP_MAX_PACKET`].
    TooLong = 1,
    /// The ring buffer had no room.
    RingFull = 2,
}

/// The counters of [`Untagged`]: an array map of three u64, zeroed.
pub(super) fn create_untagged() -> io::Result<OwnedFd> {
    create_map(BPF_MAP_TYPE_ARRAY, 4, 8, 3, b"hirt_untagged")
}

/// `map[key]` of an array map of u64.
pub(super) fn map_lookup_u64(map: RawFd, key: u32) -> io::Result<u64> {
    let mut value = 0u64;
    let mut attr = Attr::new();
    attr.u32(0, map as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &mut value as *mut u64 as u64);
    // SAFETY: key and value live on this stack frame and have the sizes the map was made with
    // (the callers pass maps of u32 keys and u64 values).
    unsafe { sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }?;
    Ok(value)
}

/// An array map of one u32 (the ESI counter of a [`SourceTag`]), zeroed.
pub(super) fn create_counter() -> io::Result<OwnedFd> {
    create_map(BPF_MAP_TYPE_ARRAY, 4, 4, 1, b"hirt_esi")
}

/// Checks shared by the tap and the tag (r2 = data, r3 = data_end, r6 = ctx): the frame came
/// in on receive queue 0 (else to `other_queue`) and carries an SRH of type 4 whose fixed part
/// is in bounds (else to `not_srh`). Clobbers r4.
fn emit_srh_checks(a: &mut Asm, other_queue: Label, not_srh: Label) {
    const SRH: i16 = IPV6_OFF + 40;
    a.emit(&[ldx(LDX_W, R4, R6, MD_RX_QUEUE_INDEX)]);
    a.jump(JNE_K, R4, 0, 0, other_queue);
    a.emit(&[ldx(LDX_B, R4, R2, IPV6_OFF + 6)]);
    a.jump(JNE_K, R4, 0, 43, not_srh);
    a.emit(&[mov64_reg(R4, R2), add64_imm(R4, i32::from(SRH) + 8)]);
    a.jump(JGT_X, R4, R3, 0, not_srh);
    a.emit(&[ldx(LDX_B, R4, R2, SRH + 2)]);
    a.jump(JNE_K, R4, 0, 4, not_srh);
}

/// Copies the IPv6 packet (r2 = data, r3 = data_end, r6 = ctx) into a new record of the ring
/// `ring_fd`: r7 = its length (more than [`TAP_MAX_PACKET`]: to `too_long`), r8 = the record
/// (no room: to `no_room`), its first u32 the length, the packet from byte 8; r0 is the
/// result of `bpf_xdp_load_bytes` (0: copied), and the caller submits or discards r8.
/// Clobbers r1-r5.
fn emit_ring_copy(a: &mut Asm, ring_fd: RawFd, too_long: Label, no_room: Label) {
    a.emit(&[
        mov64_reg(R7, R3),
        Insn::new(SUB64_X, R7, R2, 0, 0),
        add64_imm(R7, -i32::from(IPV6_OFF)),
    ]);
    a.jump(JGT_K, R7, 0, TAP_MAX_PACKET, too_long);
    // A lower bound for the verifier: the callers' checks already imply an SRH with a segment.
    a.jump(JLT_K, R7, 0, 40 + 8 + 16, too_long);
    a.emit(&ld_map_fd(R1, ring_fd));
    a.emit(&[
        mov64_imm(R2, TAP_RECORD),
        mov64_imm(R3, 0),
        call(BPF_FUNC_RINGBUF_RESERVE),
    ]);
    a.jump(JEQ_K, R0, 0, 0, no_room);
    a.emit(&[
        mov64_reg(R8, R0),
        stx(STX_W, R8, R7, 0),
        mov64_reg(R1, R6),
        mov64_imm(R2, i32::from(IPV6_OFF)),
        mov64_reg(R3, R8),
        add64_imm(R3, 8),
        mov64_reg(R4, R7),
        call(BPF_FUNC_XDP_LOAD_BYTES),
    ]);
}

/// The tagging path of [`SourceTag`] at label `at` (registers as [`program_with`] leaves them
/// when the destination matched: r2 = data, r3 = data_end, r6 = ctx).
fn emit_tag(a: &mut Asm, t: &SourceTag, at: Label, matched: Label, pass: Label, drop: Label) {
    const SRH: i16 = IPV6_OFF + 40;
    const SEGS: i32 = SRH as i32 + 8;
    a.bind(at);
    let other_queue = a.label();
    let too_long = a.label();
    let no_room = a.label();
    // Only frames of receive queue 0 are tagged: one NAPI context at a time, so the ESIs reach
    // the ring in order. The kernel's End forwards the others unprotected.
    emit_srh_checks(a, other_queue, matched);
    // r9 = Segments Left; 0 is feedback (or not ours): the socket.
    a.emit(&[ldx(LDX_B, R9, R2, SRH + 3)]);
    a.jump(JEQ_K, R9, 0, 0, matched);
    a.emit(&[ldx(LDX_B, R5, R2, SRH + 4)]);
    a.jump(JGT_K, R5, 0, 7, pass);
    // Hdr Ext Len must be exactly the segments: no TLV yet.
    a.emit(&[
        ldx(LDX_B, R4, R2, SRH + 1),
        mov64_reg(R8, R5),
        add64_imm(R8, 1),
        Insn::new(LSH64_K, R8, 0, 0, 1),
    ]);
    a.jump(JNE_X, R4, R8, 0, pass);
    a.jump(JGT_K, R9, 0, 8, pass);
    a.emit(&[add64_imm(R9, -1)]);
    // The decoder SID among segments 0..=r9 (those still to visit).
    let found = a.label();
    let octets = t.dec_sid.octets();
    for k in 0..8i32 {
        if k > 0 {
            a.jump(JLT_K, R9, 0, k, pass);
        }
        let off = SEGS + 16 * k;
        a.emit(&[mov64_reg(R4, R2), add64_imm(R4, off + 16)]);
        a.jump(JGT_X, R4, R3, 0, pass);
        let regs = [R4, R5, R7, R8];
        for (i, &r) in regs.iter().enumerate() {
            a.emit(&[ldx(LDX_W, r, R2, (off + 4 * i as i32) as i16)]);
        }
        let next = a.label();
        for (i, &r) in regs.iter().enumerate() {
            let w = &octets[4 * i..4 * i + 4];
            let imm = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as i32;
            a.jump(JNE32_K, r, 0, imm, next);
        }
        a.jump(JA, 0, 0, 0, found);
        a.bind(next);
    }
    a.jump(JA, 0, 0, 0, pass);
    a.bind(found);
    emit_ring_copy(a, t.ring_fd, too_long, no_room);
    let copied = a.label();
    a.jump(JEQ_K, R0, 0, 0, copied);
    a.emit(&[
        mov64_reg(R1, R8),
        mov64_imm(R2, 0),
        call(BPF_FUNC_RINGBUF_DISCARD),
    ]);
    a.jump(JA, 0, 0, 0, pass);
    a.bind(copied);
    a.emit(&[mov64_imm(R1, 0), stx(STX_W, R10, R1, -4)]);
    a.emit(&ld_map_fd(R1, t.esi_map_fd));
    a.emit(&[
        mov64_reg(R2, R10),
        add64_imm(R2, -4),
        call(BPF_FUNC_MAP_LOOKUP_ELEM),
    ]);
    let have = a.label();
    a.jump(JNE_K, R0, 0, 0, have);
    a.emit(&[
        mov64_reg(R1, R8),
        mov64_imm(R2, 0),
        call(BPF_FUNC_RINGBUF_DISCARD),
    ]);
    a.jump(JA, 0, 0, 0, pass);
    a.bind(have);
    a.emit(&[
        mov64_imm(R1, 1),
        Insn::new(ATOMIC_W, R0, R1, 0, BPF_ADD_FETCH),
        stx(STX_W, R8, R1, 4),
        // The ESI is taken: from here on the record is submitted whatever happens.
        ldx(LDX_W, R2, R6, MD_DATA),
        ldx(LDX_W, R3, R6, MD_DATA_END),
        mov64_reg(R4, R2),
        add64_imm(R4, SEGS),
    ]);
    let fail = a.label();
    a.jump(JGT_X, R4, R3, 0, fail);
    // End: Segments Left - 1, destination = segment[Segments Left].
    a.emit(&[
        stx(STX_B, R2, R9, SRH + 3),
        mov64_reg(R4, R9),
        Insn::new(LSH64_K, R4, 0, 0, 4),
        Insn::new(ADD64_X, R4, R2, 0, 0),
        mov64_reg(R5, R4),
        add64_imm(R5, SEGS + 16),
    ]);
    a.jump(JGT_X, R5, R3, 0, fail);
    a.emit(&[
        ldx(LDX_DW, R5, R4, SEGS as i16),
        stx(STX_DW, R2, R5, DA_OFF),
        ldx(LDX_DW, R5, R4, SEGS as i16 + 8),
        stx(STX_DW, R2, R5, DA_OFF + 8),
        // r7 = header length: Ethernet, IPv6, the SRH (Hdr Ext Len <= 16, checked above).
        ldx(LDX_B, R7, R2, SRH + 1),
    ]);
    a.jump(JGT_K, R7, 0, 16, fail);
    a.emit(&[
        Insn::new(LSH64_K, R7, 0, 0, 3),
        add64_imm(R7, SEGS),
        // Room for the TLV in front; the headers move into it.
        mov64_reg(R1, R6),
        mov64_imm(R2, -(SOURCE_TLV as i32)),
        call(BPF_FUNC_XDP_ADJUST_HEAD),
    ]);
    a.jump(JNE_K, R0, 0, 0, fail);
    a.emit(&[ldx(LDX_W, R2, R6, MD_DATA), ldx(LDX_W, R3, R6, MD_DATA_END)]);
    // Headers: 8-byte words while at least 6 bytes remain after them (the length is 6 mod 8).
    let tail = a.label();
    for w in 0..23i32 {
        if w >= 9 {
            a.jump(JLE_K, R7, 0, 8 * w + 6, tail);
        }
        a.emit(&[mov64_reg(R4, R2), add64_imm(R4, 8 * w + 16)]);
        a.jump(JGT_X, R4, R3, 0, fail);
        a.emit(&[
            ldx(LDX_DW, R4, R2, (8 * w + 8) as i16),
            stx(STX_DW, R2, R4, (8 * w) as i16),
        ]);
    }
    a.bind(tail);
    // r4 = where the last 6 header bytes go (header length - 6; the verifier wants
    // non-negative offsets from a pointer with a variable part).
    a.emit(&[
        add64_imm(R7, -6),
        mov64_reg(R4, R2),
        Insn::new(ADD64_X, R4, R7, 0, 0),
        mov64_reg(R5, R4),
        add64_imm(R5, 6 + SOURCE_TLV as i32),
    ]);
    a.jump(JGT_X, R5, R3, 0, fail);
    let st = t.stream.to_be_bytes();
    let head = u32::from_ne_bytes([t.source_tlv, (SOURCE_TLV - 2) as u8, st[0], st[1]]) as i32;
    a.emit(&[
        ldx(LDX_W, R5, R4, 8),
        stx(STX_W, R4, R5, 0),
        ldx(LDX_H, R5, R4, 12),
        stx(STX_H, R4, R5, 4),
        // The TLV right after the headers.
        mov64_imm(R5, head),
        stx(STX_W, R4, R5, 6),
        ldx(LDX_W, R5, R8, 4),
        Insn::new(END_TO_BE, R5, 0, 0, 32),
        stx(STX_W, R4, R5, 10),
        mov64_reg(R4, R2),
        add64_imm(R4, SEGS + 8),
    ]);
    a.jump(JGT_X, R4, R3, 0, fail);
    a.emit(&[
        // Hdr Ext Len + 1, Payload Length + 8 (big-endian).
        ldx(LDX_B, R5, R2, SRH + 1),
        add64_imm(R5, 1),
        stx(STX_B, R2, R5, SRH + 1),
        ldx(LDX_B, R4, R2, IPV6_OFF + 4),
        Insn::new(LSH64_K, R4, 0, 0, 8),
        ldx(LDX_B, R5, R2, IPV6_OFF + 5),
        Insn::new(OR64_X, R4, R5, 0, 0),
        add64_imm(R4, SOURCE_TLV as i32),
        stx(STX_B, R2, R4, IPV6_OFF + 5),
        Insn::new(RSH64_K, R4, 0, 0, 8),
        stx(STX_B, R2, R4, IPV6_OFF + 4),
    ]);
    // Wake hirt when this record leaves it exactly WAKE_BEHIND records behind (the records
    // have one size, so the ring's unread bytes count them), so that it codes repairs within
    // about that many sources of their arrival. Once per fall behind: a reader that is awake
    // and keeping up is not woken, and one already woken is not woken again.
    a.emit(&ld_map_fd(R1, t.ring_fd));
    a.emit(&[
        mov64_imm(R2, BPF_RB_AVAIL_DATA),
        call(BPF_FUNC_RINGBUF_QUERY),
    ]);
    let quiet = a.label();
    let submit = a.label();
    a.jump(JNE_K, R0, 0, WAKE_BEHIND * RING_RECORD_BYTES, quiet);
    a.emit(&[mov64_imm(R2, BPF_RB_FORCE_WAKEUP)]);
    a.jump(JA, 0, 0, 0, submit);
    a.bind(quiet);
    a.emit(&[mov64_imm(R2, BPF_RB_NO_WAKEUP)]);
    a.bind(submit);
    a.emit(&[mov64_reg(R1, R8), call(BPF_FUNC_RINGBUF_SUBMIT)]);
    a.jump(JA, 0, 0, 0, pass);
    a.bind(fail);
    a.emit(&[
        mov64_reg(R1, R8),
        mov64_imm(R2, BPF_RB_NO_WAKEUP),
        call(BPF_FUNC_RINGBUF_SUBMIT),
    ]);
    a.jump(JA, 0, 0, 0, drop);
    // Passed on untagged: counted, then to the kernel.
    for (label, why) in [
        (other_queue, Untagged::OtherQueue),
        (too_long, Untagged::TooLong),
        (no_room, Untagged::RingFull),
    ] {
        a.bind(label);
        emit_count(a, t.untagged_map_fd, why as i32, pass);
    }
}

/// `map[key] += 1` (an array map of u64, atomically), then to `then`. Clobbers r0-r5 and the
/// stack word at r10 - 8.
fn emit_count(a: &mut Asm, map_fd: RawFd, key: i32, then: Label) {
    a.emit(&[mov64_imm(R1, key), stx(STX_W, R10, R1, -8)]);
    a.emit(&ld_map_fd(R1, map_fd));
    a.emit(&[
        mov64_reg(R2, R10),
        add64_imm(R2, -8),
        call(BPF_FUNC_MAP_LOOKUP_ELEM),
    ]);
    a.jump(JEQ_K, R0, 0, 0, then);
    a.emit(&[mov64_imm(R1, 1), Insn::new(ATOMIC_DW, R0, R1, 0, BPF_ADD)]);
    a.jump(JA, 0, 0, 0, then);
}

/// Bytes of the source TLV.
const SOURCE_TLV: usize = 8;
/// The tag program wakes hirt when it is this many records behind: repairs are coded within
/// ~64 sources (0.6 ms at 100 kpps; below ~32 kpps the worker's 2 ms timer comes first), at
/// most one wake-up per 64 sources. Each wake-up is paid by the context that forwards the
/// packet; 16 carried 100 kpps less reliably in a short A/B (docs/dataplane.md, Session 8).
pub const WAKE_BEHIND: i32 = 64;

/// The largest IPv6 packet a [`SourceTap`] copies; longer ones go to the socket.
pub const TAP_MAX_PACKET: i32 = 2040;
/// Bytes of a ring record: the packet length (u32), 4 unused bytes, the packet.
pub const TAP_RECORD: i32 = 8 + TAP_MAX_PACKET;
/// What one record takes in the ring: its 8-byte header and [`TAP_RECORD`], 8-byte aligned.
pub const RING_RECORD_BYTES: i32 = (8 + TAP_RECORD + 7) & !7;

/// Sources for one SID that the kernel delivers itself while hirt reads a copy.
///
/// For a frame to `sid` whose SRH has Segments Left 0 and whose first TLV is of type
/// `source_tlv`, the program copies the IPv6 packet into the ring buffer behind `ring_fd`
/// (record: length as u32, 4 unused bytes, the packet) and passes the frame on to the kernel,
/// whose own route for the SID (End.DT6) decapsulates and delivers it. Anything else to the SID
/// (repairs, feedback, a packet of more than [`TAP_MAX_PACKET`] bytes) goes to the AF_XDP
/// socket as before. A source that finds the ring full is dropped, so that the decoder counts
/// it lost and recovers it, rather than delivering it once through the kernel and again when it
/// recovers what it never saw.
#[derive(Clone, Copy, Debug)]
pub struct SourceTap {
    /// The decoder SID.
    pub sid: Ipv6Addr,
    /// Type of the source TLV.
    pub source_tlv: u8,
    /// The ring buffer map.
    pub ring_fd: RawFd,
}

/// [`program`], with the copy-and-pass path of `tap` for its SID (which must be in `sids`):
///
/// ```text
/// ... as in `program`, and when the destination is tap.sid:
/// if next header != 43 or the SRH is out of bounds, not type 4, or SL != 0: redirect
/// tlv = data + 14 + 40 + 8 + 16 x (last entry + 1)   (last entry <= 7, else redirect)
/// if the SRH has no TLV area, or *tlv != tap.source_tlv: redirect
/// len = data_end - data - 14; if len > TAP_MAX_PACKET: redirect
/// rec = bpf_ringbuf_reserve(ring, TAP_RECORD, 0); if !rec: DROP
/// rec.len = len; bpf_xdp_load_bytes(ctx, 14, rec + 8, len)   (failure: rec.len = 0, DROP)
/// bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP); PASS
/// ```
pub(super) fn program_with(
    sids: &[Ipv6Addr],
    map_fd: RawFd,
    tap: Option<&SourceTap>,
    tag: Option<&SourceTag>,
) -> Vec<Insn> {
    assert!((1..=MAX_SIDS).contains(&sids.len()), "1..=4 SIDs");
    let mut a = Asm::default();
    let pass = a.label();
    let matched = a.label();
    let tapped = a.label();
    let tagging = a.label();
    a.emit(&[
        mov64_reg(R6, R1),
        ldx(LDX_W, R2, R1, MD_DATA),
        ldx(LDX_W, R3, R1, MD_DATA_END),
        // The verifier wants the end of the access compared with data_end.
        mov64_reg(R4, R2),
        add64_imm(R4, ETH_IPV6_LEN),
    ]);
    a.jump(JGT_X, R4, R3, 0, pass);
    a.emit(&[ldx(LDX_H, R4, R2, ETHERTYPE_OFF)]);
    // Packet bytes 0x86 0xdd read by a native-endian u16 load.
    let ipv6 = i32::from(u16::from_ne_bytes([0x86, 0xdd]));
    a.jump(JNE32_K, R4, 0, ipv6, pass);
    a.emit(&[ldx(LDX_B, R4, R2, IPV6_OFF), and32_imm(R4, 0xf0)]);
    a.jump(JNE32_K, R4, 0, 0x60, pass);
    let words = [R4, R5, R7, R8];
    for (i, &reg) in words.iter().enumerate() {
        a.emit(&[ldx(LDX_W, reg, R2, DA_OFF + 4 * i as i16)]);
    }
    for (n, sid) in sids.iter().enumerate() {
        let last = n + 1 == sids.len();
        let next = if last { pass } else { a.label() };
        let octets = sid.octets();
        for (i, &reg) in words.iter().enumerate() {
            let w = &octets[4 * i..4 * i + 4];
            let imm = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as i32;
            a.jump(JNE32_K, reg, 0, imm, next);
        }
        let to = if tap.is_some_and(|t| t.sid == *sid) {
            tapped
        } else if tag.is_some_and(|t| t.sid == *sid) {
            tagging
        } else {
            matched
        };
        // With a tap or tag their code sits between the last SID and `matched`: always jump.
        if !last || tap.is_some() || tag.is_some() {
            a.jump(JA, 0, 0, 0, to);
        }
        if !last {
            a.bind(next);
        }
    }
    let drop = a.label();
    if let Some(t) = tag {
        emit_tag(&mut a, t, tagging, matched, pass, drop);
    }
    if let Some(t) = tap {
        a.bind(tapped);
        const SRH: i16 = IPV6_OFF + 40;
        // Only receive queue 0 has the socket whose frames are ordered with the ring's records.
        // Elsewhere the kernel would deliver a source hirt never sees and then hirt would
        // recover it too: drop it instead (FEC recovers it once).
        emit_srh_checks(&mut a, drop, matched);
        a.emit(&[ldx(LDX_B, R4, R2, SRH + 3)]);
        a.jump(JNE_K, R4, 0, 0, matched);
        // r5 = offset of the first TLV: the SRH's fixed part and its segments.
        a.emit(&[ldx(LDX_B, R5, R2, SRH + 4)]);
        a.jump(JGT_K, R5, 0, 7, matched);
        a.emit(&[
            add64_imm(R5, 1),
            Insn::new(LSH64_K, R5, 0, 0, 4),
            add64_imm(R5, i32::from(SRH) + 8),
            // r4 = end of the SRH: (Hdr Ext Len + 1) x 8 after its start.
            ldx(LDX_B, R4, R2, SRH + 1),
            add64_imm(R4, 1),
            Insn::new(LSH64_K, R4, 0, 0, 3),
            add64_imm(R4, i32::from(SRH)),
        ]);
        a.jump(JLE_X, R4, R5, 0, matched);
        a.emit(&[
            mov64_reg(R7, R2),
            Insn::new(ADD64_X, R7, R5, 0, 0),
            mov64_reg(R8, R7),
            add64_imm(R8, 1),
        ]);
        a.jump(JGT_X, R8, R3, 0, matched);
        a.emit(&[ldx(LDX_B, R4, R7, 0)]);
        a.jump(JNE_K, R4, 0, i32::from(t.source_tlv), matched);
        emit_ring_copy(&mut a, t.ring_fd, matched, drop);
        let copied = a.label();
        a.jump(JEQ_K, R0, 0, 0, copied);
        a.emit(&[
            mov64_imm(R1, 0),
            stx(STX_W, R8, R1, 0),
            mov64_reg(R1, R8),
            mov64_imm(R2, BPF_RB_NO_WAKEUP),
            call(BPF_FUNC_RINGBUF_SUBMIT),
        ]);
        a.jump(JA, 0, 0, 0, drop);
        a.bind(copied);
        a.emit(&[
            mov64_reg(R1, R8),
            mov64_imm(R2, BPF_RB_NO_WAKEUP),
            call(BPF_FUNC_RINGBUF_SUBMIT),
        ]);
        a.jump(JA, 0, 0, 0, pass);
    }
    if tap.is_some() || tag.is_some() {
        a.bind(drop);
        a.emit(&[mov64_imm(R0, XDP_DROP), exit()]);
    }
    a.bind(matched);
    a.emit(&[ldx(LDX_W, R2, R6, MD_RX_QUEUE_INDEX)]);
    a.emit(&ld_map_fd(R1, map_fd));
    a.emit(&[
        // The action when the queue has no socket in the map.
        mov64_imm(R3, XDP_PASS),
        call(BPF_FUNC_REDIRECT_MAP),
        exit(),
    ]);
    a.bind(pass);
    a.emit(&[mov64_imm(R0, XDP_PASS), exit()]);
    a.finish()
}

/// `union bpf_attr`, zeroed, filled field by field at the offsets of linux/bpf.h.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }

    fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn bytes(&mut self, off: usize, v: &[u8]) -> &mut Attr {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }
}

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
///
/// Every pointer stored in `attr` must be valid for what `cmd` does with it (read or written)
/// for the length stored next to it.
unsafe fn sys_bpf(cmd: libc::c_int, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, writable 128-byte buffer and we pass its exact size; the
    // pointers inside it are the caller's responsibility (see above).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// A file descriptor returned by `bpf(2)`.
fn bpf_fd(cmd: libc::c_int, attr: &mut Attr) -> io::Result<OwnedFd> {
    // SAFETY: callers only store pointers to buffers that outlive this call (see each caller).
    let fd = unsafe { sys_bpf(cmd, attr)? };
    // SAFETY: on success these commands return a new file descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A map of `map_type` (`name`: at most 15 bytes).
pub(super) fn create_map(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &[u8],
) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, map_type)
        .u32(4, key_size)
        .u32(8, value_size)
        .u32(12, max_entries)
        .bytes(28, &name[..name.len().min(15)]); // map_name[16]
    bpf_fd(BPF_MAP_CREATE, &mut attr)
        .map_err(|e| context(e, format_args!("BPF_MAP_CREATE (type {map_type})")))
}

/// An XSKMAP with `entries` slots (key: queue, value: AF_XDP socket fd).
pub(super) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    create_map(BPF_MAP_TYPE_XSKMAP, 4, 4, entries, b"hirt_xsks")
}

/// Loads `insns` as an XDP program. On failure the error message carries the verifier log.
pub(super) fn load_xdp(insns: &[Insn]) -> io::Result<OwnedFd> {
    const LICENSE: &[u8] = b"GPL\0";
    let attempt = |log: &mut [u8]| {
        let mut attr = Attr::new();
        attr.u32(0, BPF_PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, LICENSE.as_ptr() as u64)
            .u32(24, u32::from(!log.is_empty())) // log_level
            .u32(28, log.len() as u32)
            .u64(32, log.as_mut_ptr() as u64)
            .bytes(48, b"hirt_sids") // prog_name[16]
            .u32(68, BPF_XDP); // expected_attach_type
        loop {
            // SAFETY: insns (insn_cnt entries), the NUL-terminated license and the log buffer
            // (log_size bytes, written by the kernel) all outlive the call.
            match unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr) } {
                // SAFETY: a new program fd that nobody else owns.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
                // The verifier may be interrupted; libbpf retries too.
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) => return Err(e),
            }
        }
    };
    let err = match attempt(&mut []) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    // Load again with a log to say why.
    let mut log = vec![0u8; 1 << 20];
    match attempt(&mut log) {
        Ok(fd) => Ok(fd),
        Err(_) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            Err(io::Error::new(
                err.kind(),
                format!(
                    "BPF_PROG_LOAD (XDP): {err}; verifier log:\n{}",
                    text.trim_end()
                ),
            ))
        }
    }
}

/// Attaches `prog` to `ifindex` through a BPF link (`flags`: the XDP mode).
fn link_create(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, flags);
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

/// `map[key] = value`.
fn map_update(map: &OwnedFd, key: u32, value: u32) -> io::Result<()> {
    let mut attr = Attr::new();
    attr.u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64); // flags (24): BPF_ANY
                                               // SAFETY: key and value are u32s on this stack frame, the sizes the map was created with.
    unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(|_| ())
}

/// How the program got attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`), before any socket buffer exists.
    Native,
    /// On the socket buffer (`XDP_FLAGS_SKB_MODE`), for drivers without XDP support.
    Generic,
}

impl AttachMode {
    /// The modes to try for `auto` (native, then generic), `native` or `generic`.
    pub fn parse_list(s: &str) -> Option<&'static [AttachMode]> {
        match s {
            "auto" => Some(&BOTH_MODES),
            "native" => Some(&[AttachMode::Native]),
            "generic" => Some(&[AttachMode::Generic]),
            _ => None,
        }
    }

    fn flags(self) -> u32 {
        match self {
            AttachMode::Native => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

/// An XDP program on one device that hands IPv6 packets addressed to our SIDs to AF_XDP
/// sockets (one per receive queue) and passes everything else to the kernel. Detached on drop.
#[derive(Debug)]
pub struct SidFilter {
    /// Closing the link detaches the program (declared first: dropped first).
    _link: OwnedFd,
    map: OwnedFd,
    ifindex: u32,
    queues: u32,
    mode: AttachMode,
}

/// Native first, generic if the driver refuses.
pub const BOTH_MODES: [AttachMode; 2] = [AttachMode::Native, AttachMode::Generic];

impl SidFilter {
    /// Builds the program for `sids` (1..=4 addresses), creates its XSKMAP with `queues` entries,
    /// loads it and attaches it to `ifindex`: native (driver) mode first, generic (skb) mode if
    /// the driver refuses. The attachment is a BPF link, so closing it (drop, or the process
    /// dying) detaches the program. Fails with [`io::ErrorKind::AlreadyExists`] if the device
    /// already has an XDP program. `ifindex` is looked up in the calling thread's network
    /// namespace.
    pub fn attach(ifindex: u32, sids: &[Ipv6Addr], queues: u32) -> io::Result<SidFilter> {
        SidFilter::attach_as(ifindex, sids, queues, &BOTH_MODES, None, None)
    }

    /// [`SidFilter::attach`] with a [`SourceTap`] and/or a [`SourceTag`] (their SIDs must be
    /// among `sids`), trying the attach `modes` in order.
    pub fn attach_with(
        ifindex: u32,
        sids: &[Ipv6Addr],
        queues: u32,
        tap: Option<&SourceTap>,
        tag: Option<&SourceTag>,
        modes: &[AttachMode],
    ) -> io::Result<SidFilter> {
        let known = |s: &Ipv6Addr| sids.contains(s);
        if !tap.is_none_or(|t| known(&t.sid)) || !tag.is_none_or(|t| known(&t.sid)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "XDP source tap or tag: its SID is not one of the filter's",
            ));
        }
        SidFilter::attach_as(ifindex, sids, queues, modes, tap, tag)
    }

    /// [`SidFilter::attach`] trying the `modes` in order.
    pub(super) fn attach_as(
        ifindex: u32,
        sids: &[Ipv6Addr],
        queues: u32,
        modes: &[AttachMode],
        tap: Option<&SourceTap>,
        tag: Option<&SourceTag>,
    ) -> io::Result<SidFilter> {
        if sids.is_empty() || sids.len() > MAX_SIDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("XDP SID filter: 1 to {MAX_SIDS} SIDs, not {}", sids.len()),
            ));
        }
        if queues == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "XDP SID filter: at least one queue",
            ));
        }
        let map = create_xskmap(queues)?;
        let prog = load_xdp(&program_with(sids, map.as_raw_fd(), tap, tag))?;
        let mut refused = Vec::new();
        for &mode in modes {
            match link_create(&prog, ifindex, mode.flags()) {
                Ok(link) => {
                    return Ok(SidFilter {
                        _link: link,
                        map,
                        ifindex,
                        queues,
                        mode,
                    })
                }
                // EBUSY: a link or program in this mode; EEXIST: one in the other mode.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "ifindex {ifindex} already has an XDP program attached \
                             ({mode:?} mode attach: {e}); detach it first \
                             (ip link set dev DEV xdp off)"
                        ),
                    ));
                }
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                    return Err(context(e, format_args!("XDP attach to ifindex {ifindex}")));
                }
                Err(e) => refused.push(format!("{mode:?}: {e}")),
            }
        }
        Err(io::Error::other(format!(
            "XDP attach to ifindex {ifindex} refused ({})",
            refused.join("; ")
        )))
    }

    /// Steers queue `queue`'s matching packets to `xsk`, which must be bound to this device and
    /// queue.
    pub fn register(&self, queue: u32, xsk: &Xsk) -> io::Result<()> {
        if queue >= self.queues || xsk.ifindex() != self.ifindex || xsk.queue() != queue {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "XSKMAP of ifindex {} ({} queues): cannot put a socket bound to ifindex {} \
                     queue {} at queue {queue}",
                    self.ifindex,
                    self.queues,
                    xsk.ifindex(),
                    xsk.queue()
                ),
            ));
        }
        map_update(&self.map, queue, xsk.as_raw_fd() as u32)
            .map_err(|e| context(e, format_args!("XSKMAP update (queue {queue})")))
    }

    /// How the program got attached.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }
}
