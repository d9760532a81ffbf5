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
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: BPF_XDP.
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;
/// `src_reg` of a `BPF_LD_IMM64` whose immediate is a map file descriptor.
pub(super) const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `bpf_redirect_map(map, key, flags)`.
pub(super) const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `enum xdp_action`.
pub(super) const XDP_PASS: i32 = 2;

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
#[derive(Clone, Copy, Debug)]
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
pub(super) fn program(sids: &[Ipv6Addr], map_fd: RawFd) -> Vec<Insn> {
    assert!((1..=MAX_SIDS).contains(&sids.len()), "1..=4 SIDs");
    let mut a = Asm::default();
    let pass = a.label();
    let matched = a.label();
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
        if !last {
            a.jump(JA, 0, 0, 0, matched);
            a.bind(next);
        }
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

/// An XSKMAP with `entries` slots (key: queue, value: AF_XDP socket fd).
pub(super) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4) // key_size
        .u32(8, 4) // value_size
        .u32(12, entries)
        .bytes(28, b"hirt_xsks"); // map_name[16]
    bpf_fd(BPF_MAP_CREATE, &mut attr).map_err(|e| context(e, "BPF_MAP_CREATE (XSKMAP)"))
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

impl SidFilter {
    /// Builds the program for `sids` (1..=4 addresses), creates its XSKMAP with `queues` entries,
    /// loads it and attaches it to `ifindex`: native (driver) mode first, generic (skb) mode if
    /// the driver refuses. The attachment is a BPF link, so closing it (drop, or the process
    /// dying) detaches the program. Fails with [`io::ErrorKind::AlreadyExists`] if the device
    /// already has an XDP program. `ifindex` is looked up in the calling thread's network
    /// namespace.
    pub fn attach(ifindex: u32, sids: &[Ipv6Addr], queues: u32) -> io::Result<SidFilter> {
        SidFilter::attach_as(
            ifindex,
            sids,
            queues,
            &[AttachMode::Native, AttachMode::Generic],
        )
    }

    /// [`SidFilter::attach`] trying the `modes` in order.
    pub(super) fn attach_as(
        ifindex: u32,
        sids: &[Ipv6Addr],
        queues: u32,
        modes: &[AttachMode],
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
        let prog = load_xdp(&program(sids, map.as_raw_fd()))?;
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
