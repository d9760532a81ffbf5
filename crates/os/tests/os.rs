//! TUN, rtnetlink and namespace plumbing against a real kernel (root; skipped otherwise).

use std::net::{IpAddr, Ipv6Addr, UdpSocket};

use hirt_os::netlink::{if_index, Netlink, Route, Rule};
use hirt_os::netns::{self, NetNs};
use hirt_os::tun::Tun;

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn tun_routes_and_rules_in_a_namespace() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let ns = NetNs::new(&netns::unique_name("hos")).unwrap();
    let ns_name = ns.name().to_string();
    let h = ns.spawn(move || {
        let tun = Tun::open("hrt0", false)?;
        let idx = if_index("hrt0")?;
        let mut nl = Netlink::open()?;
        nl.link_up(idx, Some(1400))?;
        nl.add_addr(idx, "fd00::2".parse().unwrap(), 64)?;
        let sid: Ipv6Addr = "fc00::1".parse().unwrap();
        let route = Route {
            dst: IpAddr::V6(sid),
            prefix_len: 128,
            gateway: None,
            oif: idx,
            table: 254,
            seg6local: None,
        };
        nl.add_route(&route, false)?;
        let sock = UdpSocket::bind("[fd00::2]:0")?;
        sock.send_to(b"to the sid", "[fc00::1]:9")?;
        let mut buf = [0u8; 2048];
        // Skip what the kernel sends on link up (router solicitations, MLD reports).
        let mut n = tun.recv(&mut buf)?;
        while buf[6] != 17 {
            n = tun.recv(&mut buf)?;
        }
        assert!(n >= 40 + 8 + 10, "short packet {n}");
        assert_eq!(buf[0] >> 4, 6);
        assert_eq!(&buf[24..40], &sid.octets());
        assert_eq!(&buf[n - 10..n], b"to the sid");
        let rule = Rule {
            family: libc::AF_INET6 as u8,
            iif: "hrt0".into(),
            table: 100,
            priority: 1000,
        };
        nl.add_rule(&rule)?;
        let shown = std::process::Command::new("ip")
            .args(["-6", "rule"])
            .output()?;
        let shown = String::from_utf8_lossy(&shown.stdout).to_string();
        assert!(shown.contains("iif hrt0 lookup 100"), "{shown}");
        // (/sys belongs to the mount namespace, not the network one: ask ip instead.)
        let link = std::process::Command::new("ip")
            .args(["-o", "link", "show", "hrt0"])
            .output()?;
        let link = String::from_utf8_lossy(&link.stdout).to_string();
        assert!(link.contains("mtu 1400") && link.contains(",UP"), "{link}");
        nl.del_rule(&rule)?;
        nl.del_route(&route)?;
        let err = sock.send_to(b"x", "[fc00::1]:9").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{err}");
        Ok(())
    });
    h.join().unwrap().unwrap();
    let shown = ns.ip(&["-6", "rule"]).unwrap();
    assert!(!String::from_utf8_lossy(&shown.stdout).contains("lookup 100"));
    drop(ns);
    assert!(!std::path::Path::new(&format!("/var/run/netns/{ns_name}")).exists());
}

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn sid_device_gets_no_link_local_address() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let ns = NetNs::new(&netns::unique_name("hll")).unwrap();
    ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    let h = ns.spawn(move || {
        let with = Tun::open("hll0", false)?;
        let without = Tun::open("hll1", false)?;
        let mut nl = Netlink::open()?;
        nl.link_addr_gen_mode_none(if_index("hll1")?)?;
        nl.link_up(if_index("hll0")?, None)?;
        nl.link_up(if_index("hll1")?, None)?;
        let show = |dev: &str| -> std::io::Result<String> {
            let o = std::process::Command::new("ip")
                .args(["-6", "addr", "show", "dev", dev])
                .output()?;
            Ok(String::from_utf8_lossy(&o.stdout).to_string())
        };
        // A default device gets one on this kernel (and then sends MLD reports from it); ours
        // does not.
        if !show("hll0")?.contains("fe80") {
            eprintln!("this kernel gives TUN devices no link-local address anyway");
        }
        assert!(!show("hll1")?.contains("inet6"), "{}", show("hll1")?);
        drop((with, without));
        Ok(())
    });
    h.join().unwrap().unwrap();
}
