//! Loads and attaches hirt's `SO_REUSEPORT` socket selector
//! (`crates/linux/bpf/reuseport_steer.bpf.c`, see docs/bpf.md) with aya.
//!
//! The object is built by `scripts/bpf-build.sh` and committed, like the XDP program's. The
//! program is a socket filter attached with `SO_ATTACH_REUSEPORT_EBPF`: the kernel runs it on
//! each datagram for the port's group, with the data at the UDP payload, and takes its return
//! value as the index of the socket that gets the datagram.

use std::io;
use std::net::UdpSocket;

use aya::programs::{ProgramError, ReusePortSocketFilter};
use aya::{Ebpf, EbpfLoader};

use super::bpf::aya_error;

static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/reuseport_steer.bpf.o");
const PROGRAM: &str = "hirt_reuseport_steer";

/// Loads the selector for a group of `n` sockets (`n` is clamped to 1..=`u32::MAX`). On
/// failure the error carries the verifier's log.
fn load(n: usize) -> io::Result<Ebpf> {
    let socks = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    let mut ebpf = EbpfLoader::new()
        .override_global("socks", &socks, true)
        .load(OBJECT)
        .map_err(|e| aya_error("loading the reuseport object", e))?;
    program(&mut ebpf)?.load().map_err(|e| match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => io::Error::new(
            io_error.kind(),
            format!(
                "BPF_PROG_LOAD (reuseport selector): {io_error}; verifier log:\n{verifier_log}"
            ),
        ),
        e => aya_error("BPF_PROG_LOAD (reuseport selector)", e),
    })?;
    Ok(ebpf)
}

fn program(ebpf: &mut Ebpf) -> io::Result<&mut ReusePortSocketFilter> {
    ebpf.program_mut(PROGRAM)
        .ok_or_else(|| io::Error::other(format!("the reuseport object has no program {PROGRAM}")))?
        .try_into()
        .map_err(|e| aya_error("reuseport selector", e))
}

/// Makes an `SO_REUSEPORT` group of `n` bound sockets (of which `sock` is one) hand each
/// datagram to socket `sender mod n`, `sender` being the sending worker's index in the top 6
/// bits of the AEAD counter (byte 1 of the UDP payload, see `udp`). Client worker `t` then
/// always reaches server worker `t mod n`, whatever the kernel's 4-tuple hash would have chosen
/// (with 2 workers the hash puts both client ports on one socket half the time). The kernel
/// falls back to its hash for a datagram shorter than 2 bytes (the program returns an index
/// out of range) or if attaching fails. Needs `CAP_BPF` (root) to load the program.
///
/// The group holds its own reference to the program, so the program stays attached after this
/// returns and the loader's descriptors are closed, until the last socket of the group closes.
pub fn steer_by_sender(sock: &UdpSocket, n: usize) -> io::Result<()> {
    let mut ebpf = load(n)?;
    program(&mut ebpf)?
        .attach(sock)
        .map_err(|e| aya_error("SO_ATTACH_REUSEPORT_EBPF", e))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::xdp::bpf::prog_test_run;

    fn not_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return false;
        }
        eprintln!("skipped: needs root");
        true
    }

    /// The selector of a group of `n`, run with `BPF_PROG_TEST_RUN`.
    struct Selector(Ebpf);

    impl Selector {
        fn new(n: usize) -> Selector {
            Selector(load(n).unwrap())
        }

        /// The socket index for `payload`. `BPF_PROG_TEST_RUN` takes an Ethernet frame and
        /// runs a socket filter with the data after the Ethernet header, where the kernel's
        /// reuseport code has it at the UDP payload. The EtherType is one the test run does
        /// not parse (IEEE local experimental), so that the payload may be of any length (with
        /// IPv4 it must hold an IPv4 header).
        fn select(&mut self, payload: &[u8]) -> u32 {
            const ETH_P_LOCAL_EXPERIMENTAL: u16 = 0x88b5;
            let prog = program(&mut self.0).unwrap();
            let fd = prog.fd().unwrap();
            let mut frame = vec![0u8; 12];
            frame.extend_from_slice(&ETH_P_LOCAL_EXPERIMENTAL.to_be_bytes());
            frame.extend_from_slice(payload);
            prog_test_run(fd.as_fd(), &frame, None).unwrap().action
        }
    }

    /// The index is the sender's index (top 6 bits of byte 1) modulo the group's size; the
    /// other bits and bytes do not matter.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn test_run_reuseport_steer_picks_sender_mod_n() {
        if not_root() {
            return;
        }
        for n in [1usize, 2, 3, 4, 7, 64] {
            let mut selector = Selector::new(n);
            for sender in 0..64u8 {
                for low_bits in [0u8, 3] {
                    let payload = [0x5a, sender << 2 | low_bits, 0xff, 0x00, 0x11];
                    assert_eq!(
                        selector.select(&payload),
                        u32::from(sender) % n as u32,
                        "n={n} sender={sender} low bits={low_bits}"
                    );
                }
            }
        }
        // Two bytes are enough.
        assert_eq!(Selector::new(4).select(&[0, 7 << 2]), 3);
        // A group size of 0 counts as 1.
        assert_eq!(Selector::new(0).select(&[0, 5 << 2]), 0);
    }

    /// A datagram shorter than 2 bytes gets an index out of range: the kernel picks the socket
    /// by its hash.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn test_run_reuseport_steer_leaves_short_datagrams_to_the_kernel() {
        if not_root() {
            return;
        }
        let mut selector = Selector::new(2);
        for payload in [&[][..], &[0x04][..]] {
            assert_eq!(
                selector.select(payload),
                u32::MAX,
                "{} bytes",
                payload.len()
            );
        }
    }

    /// In a real group, datagrams shorter than 2 bytes still reach one of the sockets.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn reuseport_group_delivers_short_datagrams() {
        if not_root() {
            return;
        }
        let bind = |addr: std::net::SocketAddr| {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&addr.into()).unwrap();
            UdpSocket::from(s)
        };
        let a = bind("127.0.0.1:0".parse().unwrap());
        let addr = a.local_addr().unwrap();
        let b = bind(addr);
        steer_by_sender(&a, 2).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        let short: [&[u8]; 2] = [&[], &[0x04]];
        for payload in short {
            client.send_to(payload, addr).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = Vec::new();
        for s in [&a, &b] {
            s.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 16];
            while let Ok(len) = s.recv(&mut buf) {
                got.push(buf[..len].to_vec());
            }
        }
        got.sort();
        assert_eq!(got, vec![vec![], vec![0x04]]);
    }
}
