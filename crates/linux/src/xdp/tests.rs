//! Tests of the XDP program: each path run once on hand-made frames with `BPF_PROG_TEST_RUN`
//! (root, no namespaces), then the real thing between two network namespaces (root only;
//! skipped otherwise).

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::bpf::{prog_test_run, TestRun, BOTH_MODES};
use super::{
    AttachMode, RingBuf, SidFilter, SourceTag, SourceTap, Untagged, XdpProgram, Xsk, TAP_RECORD,
    WAKE_BEHIND,
};
use crate::checksum::{finish, fold, sum_words};
use crate::netns::{self, NetNs};

/// `enum xdp_action`.
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

/// Unfolded IPv6 pseudo-header sum of a UDP datagram of `len` bytes.
fn pseudo(src: &Ipv6Addr, dst: &Ipv6Addr, len: usize) -> u64 {
    sum_words(sum_words(0, &src.octets()), &dst.octets()) + len as u64 + 17
}

fn udp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, udp: &[u8]) -> u16 {
    finish(sum_words(pseudo(src, dst, udp.len()), udp))
}

/// The complement of the folded IPv6 pseudo-header sum (what `udp6_checksum` returns for an
/// empty datagram of length `len`).
fn pseudo_sum(src: &Ipv6Addr, dst: &Ipv6Addr, len: usize) -> u16 {
    !fold(pseudo(src, dst, len))
}

/// An Ethernet + IPv6 + UDP frame with a correct checksum.
fn udp6_frame(
    macs: ([u8; 6], [u8; 6]),
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
) -> Vec<u8> {
    let (SocketAddr::V6(src), SocketAddr::V6(dst)) = (src, dst) else {
        panic!("IPv6 only")
    };
    let udp_len = (8 + payload.len()) as u16;
    let mut udp = Vec::with_capacity(udp_len as usize);
    udp.extend(src.port().to_be_bytes());
    udp.extend(dst.port().to_be_bytes());
    udp.extend(udp_len.to_be_bytes());
    udp.extend([0, 0]);
    udp.extend(payload);
    let c = udp6_checksum(src.ip(), dst.ip(), &udp);
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(54 + udp.len());
    f.extend(macs.0);
    f.extend(macs.1);
    f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend(udp_len.to_be_bytes());
    f.extend([17, 64]);
    f.extend(src.ip().octets());
    f.extend(dst.ip().octets());
    f.extend(udp);
    f
}

fn to(dst: &str) -> Vec<u8> {
    let dst: Ipv6Addr = dst.parse().unwrap();
    udp6_frame(
        ([2; 6], [4; 6]),
        "[2001:db8::1]:1000".parse().unwrap(),
        SocketAddr::new(dst.into(), 9),
        b"x",
    )
}

#[test]
fn attach_checks_its_arguments() {
    let sid: Ipv6Addr = "fc00::1".parse().unwrap();
    for (sids, queues) in [(&[][..], 1), (&[sid; 5][..], 1), (&[sid][..], 0)] {
        let e = SidFilter::attach(1, sids, queues).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}

// ---- each path, with BPF_PROG_TEST_RUN (root) --------------------------------------------

fn not_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    eprintln!("skipped: needs root");
    true
}

/// Test runs deliver their frames on the loopback device, queue 0, which takes one AF_XDP
/// socket: the tests share one, bound for the whole test run (a socket stays bound while a
/// map still holds it), and take turns.
static LOOPBACK_SOCKET: OnceLock<Mutex<Xsk>> = OnceLock::new();

/// `program` serving the loopback device as if attached to it, with the AF_XDP socket on its
/// queue 0 (returned as the turn, which the caller holds while it runs frames).
fn on_loopback(program: &XdpProgram) -> MutexGuard<'static, Xsk> {
    let lo = crate::netlink::if_index("lo").unwrap();
    let socket =
        LOOPBACK_SOCKET.get_or_init(|| Mutex::new(Xsk::open(lo, 0).expect("AF_XDP socket on lo")));
    let turn = socket.lock().unwrap_or_else(PoisonError::into_inner);
    program.serve_unattached(lo, 0, 0, Some(&turn)).unwrap();
    turn
}

fn test_run(program: &XdpProgram, frame: &[u8]) -> TestRun {
    let fd = program.program_fd().unwrap();
    prog_test_run(fd.as_fd(), frame, None).unwrap()
}

/// The IPv6 packet `pkt` in an Ethernet frame.
fn eth(pkt: &[u8]) -> Vec<u8> {
    let mut f = vec![4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 0x86, 0xdd];
    f.extend_from_slice(pkt);
    f
}

/// The records waiting in `ring`.
fn records(ring: &mut RingBuf) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    ring.consume(usize::MAX, |r| out.push(r.to_vec()));
    out
}

/// A record's packet and the ESI in it.
fn record_packet(r: &[u8]) -> (&[u8], u32) {
    assert_eq!(r.len(), TAP_RECORD as usize);
    let len = u32::from_ne_bytes(r[..4].try_into().unwrap()) as usize;
    let esi = u32::from_ne_bytes(r[4..8].try_into().unwrap());
    (&r[8..8 + len], esi)
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn test_run_filter_redirects_sids_and_passes_the_rest() {
    if not_root() {
        return;
    }
    let sids: Vec<Ipv6Addr> = [
        "fc00:77::1",
        "fc00:77::2",
        "2001:db8:1:2:3:4:5:6",
        "ffff::fffe",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    for n in 1..=4 {
        let program = XdpProgram::load(&sids[..n], 1, None, None, 0).unwrap();
        // Before the device is served, and with an empty socket slot, a frame to a SID goes
        // to the kernel: bpf_redirect_map returns its fallback action, XDP_PASS.
        let hit = to(&sids[0].to_string());
        assert_eq!(test_run(&program, &hit).action, XDP_PASS, "no device");
        let lo = crate::netlink::if_index("lo").unwrap();
        program.serve_unattached(lo, 0, 0, None).unwrap();
        assert_eq!(test_run(&program, &hit).action, XDP_PASS, "empty slot");
        let _turn = on_loopback(&program);
        for (i, sid) in sids.iter().enumerate() {
            let want = if i < n { XDP_REDIRECT } else { XDP_PASS };
            let run = test_run(&program, &to(&sid.to_string()));
            assert_eq!(run.action, want, "{n} SIDs, {sid}");
            assert_eq!(run.data, to(&sid.to_string()), "the frame is left as it is");
        }
        for other in [
            "fc00:77::3",
            "fc00:78::1",
            "::1",
            "ffff::ffff",
            "7fff::fffe",
        ] {
            assert_eq!(test_run(&program, &to(other)).action, XDP_PASS, "{other}");
        }
    }
    let program = XdpProgram::load(&sids, 1, None, None, 0).unwrap();
    let _turn = on_loopback(&program);
    let hit = to("fc00:77::2");
    assert_eq!(test_run(&program, &hit).action, XDP_REDIRECT);
    // Too short for Ethernet + IPv6: passed without reading past the end.
    assert_eq!(test_run(&program, &hit[..53]).action, XDP_PASS);
    assert_eq!(test_run(&program, &hit[..54]).action, XDP_REDIRECT);
    assert_eq!(test_run(&program, &hit[..14]).action, XDP_PASS);
    // IPv4, or an 802.1Q tag in front of the IPv6 ethertype: passed.
    let mut v4 = hit.clone();
    v4[12..14].copy_from_slice(&[0x08, 0x00]);
    assert_eq!(test_run(&program, &v4).action, XDP_PASS);
    let mut vlan = hit[..12].to_vec();
    vlan.extend([0x81, 0x00, 0x00, 0x05]);
    vlan.extend(&hit[12..]);
    assert_eq!(test_run(&program, &vlan).action, XDP_PASS);
    // IPv6 ethertype but version 4 in the header.
    let mut bad = hit.clone();
    bad[14] = 0x45;
    assert_eq!(test_run(&program, &bad).action, XDP_PASS);
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn test_run_tap_copies_sources_and_redirects_the_rest() {
    if not_root() {
        return;
    }
    let tap = SourceTap {
        sid: SID,
        source_tlv: TAP_TLV,
    };
    // 4096 bytes: room for one record.
    let program = XdpProgram::load(&[SID], 1, Some(&tap), None, 4096).unwrap();
    let mut ring = program.ring().unwrap();
    let _turn = on_loopback(&program);
    // A source (Segments Left 0, the source TLV first), the largest the tap copies.
    let largest = srv6_to(SID, &[SID], 0, Some(TAP_TLV), 2040 - 112, 2);
    assert_eq!(largest.len(), 2040);
    for source in [srv6_packet(1, 0, Some(TAP_TLV), 1), largest] {
        let run = test_run(&program, &eth(&source));
        assert_eq!(run.action, XDP_PASS, "a source goes on to the kernel");
        assert_eq!(run.data, eth(&source), "unchanged");
        let got = records(&mut ring);
        assert_eq!(got.len(), 1, "one record per source");
        assert_eq!(record_packet(&got[0]).0, &source[..], "bit-exact");
    }
    // Another TLV type (a repair, say), no TLV, a segment still to go, one byte too long:
    // to the socket, not copied.
    let too_long = srv6_to(SID, &[SID], 0, Some(TAP_TLV), 2041 - 112, 3);
    for pkt in [
        srv6_packet(1, 0, Some(TAP_TLV + 1), 10),
        srv6_packet(1, 0, None, 11),
        srv6_packet(2, 1, Some(TAP_TLV), 12),
        too_long,
    ] {
        let run = test_run(&program, &eth(&pkt));
        assert_eq!(run.action, XDP_REDIRECT);
        assert_eq!(run.data, eth(&pkt));
    }
    assert!(records(&mut ring).is_empty(), "nothing copied");
    // The ring full: the source is dropped (the decoder recovers it once).
    let source = srv6_packet(1, 0, Some(TAP_TLV), 20);
    assert_eq!(test_run(&program, &eth(&source)).action, XDP_PASS);
    assert_eq!(test_run(&program, &eth(&source)).action, XDP_DROP);
    assert_eq!(records(&mut ring).len(), 1);
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn test_run_tag_tags_as_hirt_does_and_counts_what_it_does_not() {
    if not_root() {
        return;
    }
    let tag = SourceTag {
        sid: SID,
        dec_sid: DEC_SID,
        source_tlv: TAP_TLV,
        stream: 3,
    };
    let program = XdpProgram::load(&[SID], 1, None, Some(&tag), 1 << 20).unwrap();
    let mut ring = program.ring().unwrap();
    let counters = program.untagged_counters().unwrap();
    let count = |why| super::untagged(counters.as_raw_fd(), why).unwrap();
    let _turn = on_loopback(&program);
    let mid = Ipv6Addr::new(0xfc00, 0x78, 0, 0, 0, 0, 0, 9);
    let tagged: Vec<Vec<u8>> = vec![
        srv6_via(&[DEC_SID, SID], 1, None, 8, 0),
        srv6_via(&[DEC_SID, mid, SID], 2, None, 100, 1),
        // The decoder SID two segments ahead, and eight segments (the most the tag handles).
        srv6_via(&[DEC_SID, mid, mid, SID], 3, None, 8, 2),
        srv6_via(&[DEC_SID, mid, mid, mid, mid, mid, mid, SID], 7, None, 8, 3),
        // The largest: 2040 bytes.
        srv6_via(&[DEC_SID, mid, SID], 2, None, 2040 - 40 - 56 - 40, 4),
        srv6_via(&[DEC_SID, SID], 1, None, 0, 5),
    ];
    for (esi, pkt) in tagged.iter().enumerate() {
        let run = test_run(&program, &eth(pkt));
        assert_eq!(
            run.action, XDP_PASS,
            "source {esi}: to the kernel, which forwards it"
        );
        assert_eq!(
            run.data,
            eth(&tagged_at_node(pkt, esi as u32)),
            "source {esi}: bit-exact with hirt's own tagging"
        );
        let got = records(&mut ring);
        assert_eq!(got.len(), 1);
        assert_eq!(
            record_packet(&got[0]),
            (&pkt[..], esi as u32),
            "as it arrived"
        );
    }
    // Feedback (Segments Left 0) goes to the socket.
    let feedback = srv6_via(&[SID], 0, Some(TAP_TLV + 2), 8, 9);
    let run = test_run(&program, &eth(&feedback));
    assert_eq!((run.action, run.data), (XDP_REDIRECT, eth(&feedback)));
    // A TLV already, no decoder SID ahead, nine segments: to the kernel untouched, uncounted.
    let mut nine = vec![DEC_SID];
    nine.extend([mid; 7]);
    nine.push(SID);
    for pkt in [
        srv6_via(&[DEC_SID, SID], 1, Some(TAP_TLV + 3), 8, 10),
        srv6_via(&[mid, SID], 1, None, 8, 11),
        srv6_via(&[mid, SID, DEC_SID], 1, None, 8, 12),
        srv6_via(&nine, 8, None, 8, 13),
    ] {
        let run = test_run(&program, &eth(&pkt));
        assert_eq!((run.action, run.data), (XDP_PASS, eth(&pkt)));
    }
    // Too long to copy: passed on untagged and counted.
    let long = srv6_via(&[DEC_SID, SID], 1, None, 2100, 14);
    let run = test_run(&program, &eth(&long));
    assert_eq!((run.action, run.data), (XDP_PASS, eth(&long)));
    assert!(records(&mut ring).is_empty());
    assert_eq!(count(Untagged::TooLong), 1);
    assert_eq!(count(Untagged::RingFull), 0);
    assert_eq!(count(Untagged::OtherQueue), 0);

    // A ring with room for one record: the second source is passed on untagged, counted.
    let small = XdpProgram::load(&[SID], 1, None, Some(&tag), 4096).unwrap();
    let counters = small.untagged_counters().unwrap();
    drop(_turn);
    let _turn = on_loopback(&small);
    let pkt = &tagged[0];
    assert_eq!(
        test_run(&small, &eth(pkt)).data,
        eth(&tagged_at_node(pkt, 0))
    );
    let run = test_run(&small, &eth(pkt));
    assert_eq!((run.action, run.data), (XDP_PASS, eth(pkt)));
    let full = super::untagged(counters.as_raw_fd(), Untagged::RingFull).unwrap();
    assert_eq!(full, 1);
    // The ESI was not taken: the next source, once there is room, gets ESI 1.
    let mut ring = small.ring().unwrap();
    assert_eq!(records(&mut ring).len(), 1);
    assert_eq!(
        test_run(&small, &eth(pkt)).data,
        eth(&tagged_at_node(pkt, 1))
    );
}

/// Frames of receive queue 1 are not tagged (the tag keeps ESIs in ring order on queue 0) and
/// the tap drops them; run on a veth with two receive queues in a namespace.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn test_run_other_receive_queues() {
    if skip() {
        return;
    }
    let ns = NetNs::new(&netns::unique_name("xq")).unwrap();
    let dev = netns::unique_name("xqd");
    let peer = netns::unique_name("xqp");
    ns.ip(&[
        "link",
        "add",
        &dev,
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        &peer,
    ])
    .unwrap();
    let ifindex = ifindex(&ns, &dev);
    let tag = SourceTag {
        sid: SID,
        dec_sid: DEC_SID,
        source_tlv: TAP_TLV,
        stream: 3,
    };
    let tap = SourceTap {
        sid: DEC_SID,
        source_tlv: TAP_TLV,
    };
    let (tag_run, tap_run, other_queue) = ns
        .spawn(move || {
            let program = XdpProgram::load(&[SID, DEC_SID], 2, Some(&tap), Some(&tag), 1 << 20)?;
            let fd = program.program_fd()?;
            let source = eth(&srv6_via(&[DEC_SID, SID], 1, None, 8, 0));
            let tag_run = prog_test_run(fd.as_fd(), &source, Some((ifindex, 1)))?;
            let tapped = eth(&srv6_to(DEC_SID, &[DEC_SID], 0, Some(TAP_TLV), 8, 1));
            let tap_run = prog_test_run(fd.as_fd(), &tapped, Some((ifindex, 1)))?;
            let counters = program.untagged_counters()?;
            let other_queue = super::untagged(counters.as_raw_fd(), Untagged::OtherQueue)?;
            assert!(records(&mut program.ring()?).is_empty(), "nothing copied");
            Ok((tag_run, tap_run, other_queue))
        })
        .join()
        .unwrap()
        .unwrap();
    let source = eth(&srv6_via(&[DEC_SID, SID], 1, None, 8, 0));
    assert_eq!(
        (tag_run.action, tag_run.data),
        (XDP_PASS, source),
        "untagged"
    );
    assert_eq!(other_queue, 1, "counted");
    assert_eq!(
        tap_run.action, XDP_DROP,
        "the tap drops sources of other queues"
    );
}

/// A frame to a SID on receive queue q goes to the socket of queue q of its device, and to the
/// kernel when q is beyond the program's queues (never into another device's slots).
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn test_run_socket_slots_per_device_and_queue() {
    if skip() {
        return;
    }
    let ns = NetNs::new(&netns::unique_name("xs")).unwrap();
    let (dev, peer) = (netns::unique_name("xsd"), netns::unique_name("xsp"));
    ns.ip(&[
        "link",
        "add",
        &dev,
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        &peer,
        "numrxqueues",
        "2",
    ])
    .unwrap();
    ns.ip(&["link", "set", &dev, "up"]).unwrap();
    ns.ip(&["link", "set", &peer, "up"]).unwrap();
    let ifindex = ifindex(&ns, &dev);
    let actions = ns
        .spawn(move || {
            let lo = crate::netlink::if_index("lo")?;
            let hit = to(&SID.to_string());
            let xsk = Xsk::open(ifindex, 1)?;
            let run = |program: &XdpProgram| -> io::Result<u32> {
                let fd = program.program_fd()?;
                Ok(prog_test_run(fd.as_fd(), &hit, Some((ifindex, 1)))?.action)
            };
            // Two queues: queue 1 of the device has its own slot.
            let two = XdpProgram::load(&[SID], 2, None, None, 0)?;
            two.serve_unattached(ifindex, 0, 1, Some(&xsk))?;
            let own_slot = run(&two)?;
            // One queue: queue 1 would be slot 1, which is the next device's queue 0.
            let one = XdpProgram::load(&[SID], 1, None, None, 0)?;
            one.serve_unattached(lo, 1, 0, Some(&xsk))?;
            one.serve_unattached(ifindex, 0, 0, None)?;
            let beyond = run(&one)?;
            Ok((own_slot, beyond))
        })
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(actions, (XDP_REDIRECT, XDP_PASS));
}

// ---- in the kernel (root) ------------------------------------------------------------------

fn skip() -> bool {
    if netns::available() {
        return false;
    }
    eprintln!("skipped: needs root and iproute2");
    true
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_loads_the_largest_program() {
    if skip() {
        return;
    }
    let sids: Vec<Ipv6Addr> = (1..=4)
        .map(|i| Ipv6Addr::new(0xfc00, 0x77, 0, 0, 0, 0, 0xffff, i))
        .collect();
    let tap = SourceTap {
        sid: sids[3],
        source_tlv: TAP_TLV,
    };
    let tag = SourceTag {
        sid: sids[0],
        dec_sid: DEC_SID,
        source_tlv: TAP_TLV,
        stream: 3,
    };
    XdpProgram::load(&sids, 4, Some(&tap), Some(&tag), 1 << 20).unwrap();
    let e = XdpProgram::load(&sids, 4, Some(&tap), None, 3 << 12).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let stranger = SourceTap {
        sid: DEC_SID,
        source_tlv: TAP_TLV,
    };
    let e = XdpProgram::load(&sids, 4, Some(&stranger), None, 1 << 20).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

const SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0x77, 0, 0, 0, 0, 0, 1);
const A_IP: &str = "2001:db8:77::1";
const B_IP: &str = "2001:db8:77::2";

/// Namespaces A and B joined by a veth; A routes `fc00:77::/64` (the SID) via B.
struct Wire {
    a: NetNs,
    b: NetNs,
    a_if: String,
    b_if: String,
}

fn wire() -> io::Result<Wire> {
    let a = NetNs::new(&netns::unique_name("xa"))?;
    let b = NetNs::new(&netns::unique_name("xb"))?;
    let (a_if, b_if) = (netns::unique_name("xva"), netns::unique_name("xvb"));
    netns::veth(&a, &a_if, &b, &b_if)?;
    a.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{A_IP}/64"),
        "dev",
        &a_if,
        "nodad",
    ])?;
    b.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{B_IP}/64"),
        "dev",
        &b_if,
        "nodad",
    ])?;
    a.ip(&["-6", "route", "add", "fc00:77::/64", "via", B_IP])?;
    Ok(Wire { a, b, a_if, b_if })
}

/// `ip -o link show dev X` of `ns`.
fn link_show(ns: &NetNs, dev: &str) -> String {
    let out = ns.ip(&["-o", "link", "show", "dev", dev]).unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ifindex(ns: &NetNs, dev: &str) -> u32 {
    let line = link_show(ns, dev);
    line.split(':').next().unwrap().trim().parse().unwrap()
}

fn mac(ns: &NetNs, dev: &str) -> [u8; 6] {
    let line = link_show(ns, dev);
    let hex = line
        .split("link/ether ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let mut mac = [0u8; 6];
    for (b, h) in mac.iter_mut().zip(hex.split(':')) {
        *b = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}

/// In B: the filter for [`SID`] on B's veth (one queue, the given modes) and a registered
/// socket on queue 0.
fn filter_in_b(w: &Wire, modes: &'static [AttachMode]) -> (SidFilter, Xsk) {
    let ifindex = ifindex(&w.b, &w.b_if);
    w.b.spawn(move || {
        let filter = SidFilter::attach_as(ifindex, &[SID], 1, modes)?;
        let xsk = Xsk::open(ifindex, 0)?;
        filter.register(0, &xsk)?;
        Ok((filter, xsk))
    })
    .join()
    .unwrap()
    .unwrap()
}

fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
}

/// Waits (poll) for `want` frames on `xsk`, for at most `timeout`.
fn receive(xsk: &mut Xsk, want: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut frames = Vec::new();
    while frames.len() < want && Instant::now() < deadline {
        if readable(xsk.as_raw_fd(), 100) {
            xsk.recv(64, |f| frames.push(f.to_vec()));
        }
    }
    frames
}

fn receives_sid_traffic(modes: &'static [AttachMode], expect: AttachMode) {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    let (filter, mut xsk) = filter_in_b(&w, modes);
    eprintln!("attach mode on veth: {:?}", filter.mode());
    assert_eq!(filter.mode(), expect);
    assert_eq!(
        filter.register(1, &xsk).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    // A socket of B's kernel on a non-SID address.
    let kernel =
        w.b.spawn(|| {
            let s = UdpSocket::bind(format!("[{B_IP}]:7777"))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            Ok(s)
        })
        .join()
        .unwrap()
        .unwrap();
    // Neighbour discovery and ICMP go through the program to B's kernel.
    w.a.exec(&["ping", "-6", "-c", "1", "-W", "3", B_IP])
        .unwrap();
    const N: usize = 8;
    assert!(!readable(xsk.as_raw_fd(), 0));
    let sender = w.a.spawn(|| {
        // Sent while the test thread sleeps in poll().
        std::thread::sleep(Duration::from_millis(200));
        let s = UdpSocket::bind("[::]:0")?;
        for i in 0..N {
            s.send_to(format!("hirt-xdp-{i}").as_bytes(), (SID, 9))?;
        }
        s.send_to(b"kernel-path", format!("[{B_IP}]:7777"))?;
        Ok(())
    });
    let t = Instant::now();
    assert!(
        readable(xsk.as_raw_fd(), 5000),
        "poll(POLLIN) woken by frames"
    );
    eprintln!("poll woke after {:?}", t.elapsed());
    sender.join().unwrap().unwrap();

    let frames = receive(&mut xsk, N, Duration::from_secs(5));
    assert_eq!(frames.len(), N, "frames received on the AF_XDP socket");
    let mut payloads = BTreeSet::new();
    let (mut checksums_ok, mut checksums_partial) = (0, 0);
    for f in &frames {
        assert_eq!(f[12..14], [0x86, 0xdd], "ethertype");
        assert_eq!(f[14] >> 4, 6);
        assert_eq!(f[20], 17, "next header UDP");
        assert_eq!(f[38..54], SID.octets(), "destination address");
        assert_eq!(f[56..58], 9u16.to_be_bytes(), "UDP port");
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap());
        assert_eq!(src, A_IP.parse::<Ipv6Addr>().unwrap());
        let mut udp = f[54..].to_vec();
        let sum = u16::from_be_bytes([udp[6], udp[7]]);
        udp[6..8].copy_from_slice(&[0, 0]);
        let full = udp6_checksum(&src, &SID, &udp);
        checksums_ok += usize::from(full == sum);
        // CHECKSUM_PARTIAL: the field holds the pseudo-header sum, not yet complemented.
        let pseudo = !pseudo_sum(&src, &SID, udp.len());
        checksums_partial += usize::from(pseudo == sum);
        payloads.insert(String::from_utf8(f[62..].to_vec()).unwrap());
    }
    let want: BTreeSet<String> = (0..N).map(|i| format!("hirt-xdp-{i}")).collect();
    assert_eq!(payloads, want);
    // A veth carries the sender's CHECKSUM_PARTIAL packets as they are: XDP sees the
    // pseudo-header sum in the checksum field, not the final checksum.
    assert_eq!(checksums_ok + checksums_partial, N);
    eprintln!(
        "UDP checksums of {N} received frames: {checksums_ok} complete, \
         {checksums_partial} partial (pseudo-header only)"
    );

    let mut buf = [0u8; 64];
    let (n, _) = kernel.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"kernel-path");
    let stats = xsk.statistics().unwrap();
    eprintln!(
        "{stats:?}; need_wakeup (bound, fill, tx) = {:?}",
        xsk.wakeup_flags()
    );
    assert_eq!(stats.rx_dropped, 0);
    assert_eq!(stats.rx_ring_full, 0);
    // Nothing else waiting, and recv does not block.
    assert_eq!(xsk.recv(64, |_| panic!("unexpected frame")), 0);
}

#[test]
fn kernel_receives_sid_traffic_native() {
    receives_sid_traffic(
        &[AttachMode::Native, AttachMode::Generic],
        AttachMode::Native,
    );
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_receives_sid_traffic_generic() {
    receives_sid_traffic(&[AttachMode::Generic], AttachMode::Generic);
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_sends_frames() {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    let macs = (mac(&w.a, &w.a_if), mac(&w.b, &w.b_if));
    let (_filter, mut xsk) = filter_in_b(&w, &[AttachMode::Native, AttachMode::Generic]);
    let sock =
        w.a.spawn(|| {
            let s = UdpSocket::bind(format!("[{A_IP}]:9000"))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            Ok(s)
        })
        .join()
        .unwrap()
        .unwrap();
    let src: SocketAddr = format!("[{B_IP}]:4242").parse().unwrap();
    let dst = sock.local_addr().unwrap();

    let frame = udp6_frame(macs, src, dst, b"from-af-xdp");
    assert!(!xsk.send_with(super::xsk::FRAME_SIZE + 1, |_| panic!("called")));
    assert!(xsk.send_with(frame.len(), |buf| buf.copy_from_slice(&frame)));
    eprintln!("need_wakeup (bound, fill, tx) = {:?}", xsk.wakeup_flags());
    xsk.flush().unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"from-af-xdp");
    assert_eq!(from, src);

    // More than one sendto's worth (32 in copy mode) in one flush.
    const N: usize = 100;
    for i in 0..N {
        let f = udp6_frame(macs, src, dst, format!("burst-{i}").as_bytes());
        assert!(xsk.send_with(f.len(), |buf| buf.copy_from_slice(&f)));
    }
    xsk.flush().unwrap();
    let mut got = BTreeSet::new();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < N && Instant::now() < deadline {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                got.insert(String::from_utf8(buf[..n].to_vec()).unwrap());
            }
            Err(_) => xsk.flush().unwrap(),
        }
    }
    assert_eq!(got.len(), N);
    // Every TX frame comes back through the completion ring.
    let deadline = Instant::now() + Duration::from_secs(2);
    while xsk.tx_frames_free() < 2048 && Instant::now() < deadline {
        xsk.flush().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(xsk.tx_frames_free(), 2048);
    let stats = xsk.statistics().unwrap();
    eprintln!("{stats:?}");
    assert_eq!(stats.tx_invalid_descs, 0);
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_detaches_on_drop_and_refuses_a_second_program() {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    let ifindex = ifindex(&w.b, &w.b_if);
    assert!(!link_show(&w.b, &w.b_if).contains("xdp"));
    let (first, second, generic) =
        w.b.spawn(move || {
            let first = SidFilter::attach(ifindex, &[SID], 1)?;
            let second = SidFilter::attach(ifindex, &[SID], 1).map(|_| ());
            let generic =
                SidFilter::attach_as(ifindex, &[SID], 1, &[AttachMode::Generic]).map(|_| ());
            Ok((first, second, generic))
        })
        .join()
        .unwrap()
        .unwrap();
    let shown = link_show(&w.b, &w.b_if);
    assert!(shown.contains("xdp"), "{shown}");
    let e = second.unwrap_err();
    eprintln!("second attach: {e}");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    let e = generic.unwrap_err();
    eprintln!("second attach (generic while native): {e}");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);

    drop(first);
    let t = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(2);
    while link_show(&w.b, &w.b_if).contains("xdp") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let shown = link_show(&w.b, &w.b_if);
    assert!(!shown.contains("xdp"), "still attached after drop: {shown}");
    eprintln!("detached {:?} after drop", t.elapsed());
    // And it can be attached again.
    let again =
        w.b.spawn(move || SidFilter::attach(ifindex, &[SID], 1))
            .join()
            .unwrap()
            .unwrap();
    assert!(link_show(&w.b, &w.b_if).contains("xdp"));
    drop(again);
}

// ---- source tap ----------------------------------------------------------------------------

/// Type of the source TLV in the tap tests.
const TAP_TLV: u8 = 0x7a;

/// An SRv6 packet from A to [`SID`]: an SRH with `segs` segments (segment 0, the last one
/// the packet visits, is the SID; the others fc00:78::k), Segments Left `sl`, the 8-byte TLV
/// `tlv_type` if any, then an inner IPv6 header with an 8-byte payload carrying `i`.
fn srv6_packet(segs: usize, sl: u8, tlv_type: Option<u8>, i: u32) -> Vec<u8> {
    let list: Vec<Ipv6Addr> = (0..segs)
        .map(|k| match k {
            0 => SID,
            _ => Ipv6Addr::new(0xfc00, 0x78, 0, 0, 0, 0, 0, k as u16),
        })
        .collect();
    srv6_to(SID, &list, sl, tlv_type, 8, i)
}

/// Sends whole IPv6 packets (header included) from the calling thread's namespace.
fn send_raw(pkts: &[Vec<u8>]) -> io::Result<()> {
    // SAFETY: plain socket calls on a descriptor we own and close.
    unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_RAW);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        for p in pkts {
            let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
            sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sa.sin6_addr.s6_addr = SID.octets();
            let n = libc::sendto(
                fd,
                p.as_ptr().cast(),
                p.len(),
                0,
                (&sa as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            );
            if n < 0 {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
        }
        libc::close(fd);
    }
    Ok(())
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_taps_sources_and_redirects_the_rest() {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    let ifindex = ifindex(&w.b, &w.b_if);
    let (filter, mut xsk, mut ring) =
        w.b.spawn(move || {
            let tap = SourceTap {
                sid: SID,
                source_tlv: TAP_TLV,
            };
            let program = XdpProgram::load(&[SID], 1, Some(&tap), None, 1 << 20)?;
            let filter = program.attach(ifindex, &BOTH_MODES)?;
            let ring = program.ring()?;
            let xsk = Xsk::open(ifindex, 0)?;
            filter.register(0, &xsk)?;
            Ok((filter, xsk, ring))
        })
        .join()
        .unwrap()
        .unwrap();
    eprintln!("tap program attached in {:?} mode", filter.mode());
    // Neighbour discovery first, so that no packet below waits for it.
    w.a.exec(&["ping", "-6", "-c", "1", "-W", "3", B_IP])
        .unwrap();
    let tapped: Vec<Vec<u8>> = (0..5)
        .map(|i| srv6_packet(1, 0, Some(TAP_TLV), i))
        .collect();
    let others = vec![
        // Another TLV type (a repair, say), no TLV, and a segment still to go.
        srv6_packet(1, 0, Some(TAP_TLV + 1), 10),
        srv6_packet(1, 0, None, 11),
        srv6_packet(2, 1, Some(TAP_TLV), 12),
    ];
    let mut all = tapped.clone();
    all.extend(others.iter().cloned());
    w.a.spawn(move || send_raw(&all)).join().unwrap().unwrap();

    let frames = receive(&mut xsk, others.len(), Duration::from_secs(5));
    let got: Vec<Vec<u8>> = frames.iter().map(|f| f[14..].to_vec()).collect();
    assert_eq!(got, others, "what the tap does not take reaches the socket");
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while records.len() < tapped.len() && Instant::now() < deadline {
        ring.consume(usize::MAX, |r| records.push(r.to_vec()));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(records.len(), tapped.len(), "one record per tapped source");
    for (r, p) in records.iter().zip(&tapped) {
        let len = u32::from_ne_bytes(r[..4].try_into().unwrap()) as usize;
        assert_eq!(len, p.len());
        assert_eq!(r.len(), TAP_RECORD as usize);
        assert_eq!(
            &r[8..8 + len],
            &p[..],
            "the record holds the packet, bit-exact"
        );
    }
    assert!(!ring.pending());
    assert_eq!(ring.consume(usize::MAX, |_| panic!("unexpected record")), 0);
}

// ---- source tag ----------------------------------------------------------------------------

const DEC_SID: Ipv6Addr = Ipv6Addr::new(0xfc00, 0x79, 0, 0, 0, 0, 0, 1);

/// An SRv6 packet from A: `segs` (index 0 is the last segment), destination `segs[sl]`,
/// Segments Left `sl`, an 8-byte TLV of `tlv_type` if any, an inner IPv6 header and `extra`
/// bytes of payload carrying `i`.
fn srv6_via(segs: &[Ipv6Addr], sl: u8, tlv_type: Option<u8>, extra: usize, i: u32) -> Vec<u8> {
    srv6_to(segs[sl as usize], segs, sl, tlv_type, extra, i)
}

/// [`srv6_via`] to destination `da`. The TLV carries `i`.
fn srv6_to(
    da: Ipv6Addr,
    segs: &[Ipv6Addr],
    sl: u8,
    tlv_type: Option<u8>,
    extra: usize,
    i: u32,
) -> Vec<u8> {
    let src: Ipv6Addr = A_IP.parse().unwrap();
    let tlv_len = if tlv_type.is_some() { 8 } else { 0 };
    let srh_len = 8 + 16 * segs.len() + tlv_len;
    let inner_len = 40 + extra;
    let mut p = Vec::new();
    p.extend_from_slice(&[0x61, 0x23, 0x45, 0x67]);
    p.extend_from_slice(&((srh_len + inner_len) as u16).to_be_bytes());
    p.extend_from_slice(&[43, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&da.octets());
    // SRH: next header IPv6, Hdr Ext Len, type 4, SL, last entry, flags, tag.
    let last = (segs.len() - 1) as u8;
    p.extend_from_slice(&[41, (srh_len / 8 - 1) as u8, 4, sl, last, 0, 0, 0]);
    for s in segs {
        p.extend_from_slice(&s.octets());
    }
    if let Some(t) = tlv_type {
        p.extend_from_slice(&[t, 6, 0, 0]);
        p.extend_from_slice(&i.to_be_bytes());
    }
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(extra as u16).to_be_bytes());
    p.extend_from_slice(&[59, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0x79, 0, 0, 0, 0, 1).octets());
    p.extend((0..extra).map(|k| (i as usize * 7 + k) as u8));
    p
}

/// What hirt's own encoder path makes of `pkt` (End, then the source TLV), after one more
/// router (hop limit - 1).
fn tagged_by_hirt(pkt: &[u8], esi: u32) -> Vec<u8> {
    let mut buf = tagged_at_node(pkt, esi);
    buf[7] -= 1;
    buf
}

/// What hirt's own encoder path makes of `pkt` (End, then the source TLV of stream 3).
fn tagged_at_node(pkt: &[u8], esi: u32) -> Vec<u8> {
    use hirt_wire::srv6 as wsrv6;
    use hirt_wire::tlv::SourceRepr;
    let mut buf = pkt.to_vec();
    buf.resize(pkt.len() + 64, 0);
    wsrv6::advance_segment(&mut buf, pkt.len()).unwrap();
    let n = wsrv6::insert_source_tlv(&mut buf, pkt.len(), TAP_TLV, &SourceRepr { stream: 3, esi })
        .unwrap();
    buf.truncate(n);
    buf
}

/// The tag program on B's link for `SID` (and an AF_XDP socket on queue 0 if `socket`), B
/// forwarding what it passes on (to the decoder SID) back to A; neighbours resolved. Returns
/// its ring and its counters of untagged sources.
fn tag_on_b(
    w: &Wire,
    stream: u16,
    socket: bool,
) -> (SidFilter, Option<Xsk>, RingBuf, std::os::fd::OwnedFd) {
    let ifindex = ifindex(&w.b, &w.b_if);
    w.b.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    w.b.ip(&["-6", "route", "add", &format!("{DEC_SID}/128"), "via", A_IP])
        .unwrap();
    let attached =
        w.b.spawn(move || {
            let tag = SourceTag {
                sid: SID,
                dec_sid: DEC_SID,
                source_tlv: TAP_TLV,
                stream,
            };
            let program = XdpProgram::load(&[SID], 1, None, Some(&tag), 1 << 20)?;
            let filter = program.attach(ifindex, &BOTH_MODES)?;
            let ring = program.ring()?;
            let untagged = program.untagged_counters()?;
            let xsk = if socket {
                let xsk = Xsk::open(ifindex, 0)?;
                filter.register(0, &xsk)?;
                Some(xsk)
            } else {
                None
            };
            Ok((filter, xsk, ring, untagged))
        })
        .join()
        .unwrap()
        .unwrap();
    eprintln!("tag program attached in {:?} mode", attached.0.mode());
    w.a.exec(&["ping", "-6", "-c", "1", "-W", "3", B_IP])
        .unwrap();
    attached
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_tags_sources_as_hirt_does() {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    for (ns, dev) in [(&w.a, &w.a_if), (&w.b, &w.b_if)] {
        ns.ip(&["link", "set", dev, "mtu", "3000"]).unwrap();
    }
    w.b.ip(&["-6", "route", "add", "fc00:78::/32", "via", A_IP])
        .unwrap();
    let (_filter, xsk, mut ring, untagged) = tag_on_b(&w, 3, true);
    let mut xsk = xsk.expect("socket");
    let mid = Ipv6Addr::new(0xfc00, 0x78, 0, 0, 0, 0, 0, 9);
    // Two segments to go (SID then the decoder), three (a middle SID between), and sizes up to
    // the largest the program copies.
    let tagged: Vec<Vec<u8>> = vec![
        srv6_via(&[DEC_SID, SID], 1, None, 8, 0),
        srv6_via(&[DEC_SID, mid, SID], 2, None, 100, 1),
        srv6_via(&[DEC_SID, SID], 1, None, 1200, 2),
        // The largest: 2040 bytes (outer header, 3-segment SRH, inner header, payload).
        srv6_via(&[DEC_SID, mid, SID], 2, None, 2040 - 40 - 56 - 40, 3),
        srv6_via(&[DEC_SID, SID], 1, None, 0, 4),
    ];
    let feedback = srv6_via(&[SID], 0, Some(TAP_TLV + 2), 8, 5);
    let kernel_only = [
        // A TLV already, no decoder SID to visit, too long to copy.
        srv6_via(&[DEC_SID, SID], 1, Some(TAP_TLV + 3), 8, 6),
        srv6_via(&[mid, SID], 1, None, 8, 7),
        srv6_via(&[DEC_SID, SID], 1, None, 2100, 8),
    ];
    let mut all = tagged.clone();
    all.push(feedback.clone());
    all.extend(kernel_only.iter().cloned());
    // A packet socket on A's link sees what B sends back.
    let a_if = w.a_if.clone();
    let capture = w.a.spawn(move || {
        // SAFETY: a packet socket we own; recv into a stack buffer.
        unsafe {
            let proto = (libc::ETH_P_IPV6 as u16).to_be();
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto));
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = crate::netlink::if_index(&a_if)? as i32;
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            let tv = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            let mut got = Vec::new();
            let mut buf = vec![0u8; 4096];
            loop {
                let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
                if n <= 0 {
                    break;
                }
                let p = &buf[..n as usize];
                // Tagged packets go to the decoder SID or the middle one (fc00:78::/32).
                if p.len() >= 40
                    && (p[24..40] == DEC_SID.octets() || p[24..28] == [0xfc, 0, 0, 0x78])
                {
                    got.push(p.to_vec());
                }
            }
            libc::close(fd);
            Ok(got)
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    w.a.spawn(move || send_raw(&all)).join().unwrap().unwrap();

    let frames = receive(&mut xsk, 1, Duration::from_secs(5));
    assert_eq!(frames.len(), 1);
    assert_eq!(
        &frames[0][14..],
        &feedback[..],
        "Segments Left 0 goes to the socket"
    );
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while records.len() < tagged.len() && Instant::now() < deadline {
        ring.consume(usize::MAX, |r| records.push(r.to_vec()));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(records.len(), tagged.len(), "one record per tagged source");
    for (i, (r, p)) in records.iter().zip(&tagged).enumerate() {
        let len = u32::from_ne_bytes(r[..4].try_into().unwrap()) as usize;
        let esi = u32::from_ne_bytes(r[4..8].try_into().unwrap());
        assert_eq!(esi, i as u32, "ESIs in order from 0");
        assert_eq!(
            &r[8..8 + len],
            &p[..],
            "the record holds the packet as it arrived"
        );
    }
    let mut seen = capture.join().unwrap().unwrap();
    let want: Vec<Vec<u8>> = tagged
        .iter()
        .enumerate()
        .map(|(i, p)| tagged_by_hirt(p, i as u32))
        .collect();
    seen.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(
        seen.len(),
        want.len(),
        "tagged sources forwarded by B's kernel"
    );
    assert_eq!(seen, want_sorted, "bit-exact with hirt's own tagging");
    let count = |why| super::untagged(untagged.as_raw_fd(), why).unwrap();
    assert_eq!(count(Untagged::TooLong), 1, "the 2100-byte source");
    assert_eq!(count(Untagged::OtherQueue), 0);
    assert_eq!(count(Untagged::RingFull), 0);
}

/// The tag program wakes a reader waiting on the ring once it is `WAKE_BEHIND` records behind,
/// and not before: sources are forwarded by the kernel without hirt being woken for each.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn kernel_tag_wakes_hirt_when_it_falls_behind() {
    if skip() {
        return;
    }
    let w = wire().unwrap();
    let (_filter, _, ring, _untagged) = tag_on_b(&w, 0, false);
    let behind = WAKE_BEHIND as u32;
    let sources = |from: u32, to: u32| -> Vec<Vec<u8>> {
        (from..to)
            .map(|i| srv6_via(&[DEC_SID, SID], 1, None, 100, i))
            .collect()
    };
    let fd = ring.fd();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let ready = crate::tun::poll_readable(&[fd], Duration::from_secs(10));
        let _ = tx.send(());
        ready
    });
    std::thread::sleep(Duration::from_millis(200));
    let first = sources(0, behind - 1);
    w.a.spawn(move || send_raw(&first)).join().unwrap().unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "{} records behind: the reader sleeps on",
        behind - 1
    );
    assert!(ring.pending(), "the records are in the ring");
    let last = sources(behind - 1, behind);
    w.a.spawn(move || send_raw(&last)).join().unwrap().unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "{behind} records behind: the reader is woken"
    );
    assert_eq!(
        waiter.join().unwrap().unwrap() & 1,
        1,
        "the ring is readable"
    );
}
