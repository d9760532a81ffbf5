//! The lab topology: three namespaces in a line.
//!
//! ```text
//!  client ns (A)                 link ns (L)                  server ns (B)
//!  workload clients              userspace emulator           workload servers
//!  [ingress H.Encaps +           la <== AF_PACKET ==> lb      [hirt decoder/encoder]
//!   hirt encoder/decoder]
//!  a0 ----------------- veth --- la                lb --- veth ------------------ b0
//!  10.99.0.1 fd99::1                                                  10.99.0.2 fd99::2
//!  app: 10.78.1.1 fd78:1::1 (lo)                              app: 10.78.2.1 fd78:2::1 (lo)
//! ```
//!
//! The tunnel's roles are merged into the end namespaces (like HIRT's Fig. 6: server and encoder
//! share a machine, client and decoder another). The workloads always talk between the *app*
//! addresses; only the routes between them change: straight over the underlay (baseline, no FEC)
//! or into the tunnel (FEC). Both use a 1280-byte path MTU so that both runs send the same packets.
//! Neighbours are static (no ARP/ND through the lossy link); offloads are off on every veth so the
//! emulator sees wire-sized packets with complete checksums.

use std::net::IpAddr;

use anyhow::Context;

use crate::netns::{self, ip};

/// MAC of a0 (client side).
pub const MAC_A: &str = "02:68:6c:00:00:0a";
/// MAC of b0 (server side).
pub const MAC_B: &str = "02:68:6c:00:00:0b";
/// Underlay addresses.
pub const UNDER_A4: &str = "10.99.0.1";
/// Underlay address of the server side (IPv4).
pub const UNDER_B4: &str = "10.99.0.2";
/// Underlay address of the client side (IPv6).
pub const UNDER_A6: &str = "fd99::1";
/// Underlay address of the server side (IPv6).
pub const UNDER_B6: &str = "fd99::2";
/// Application addresses (on loopback).
pub const APP_A4: &str = "10.78.1.1";
/// Application address of the server (IPv4).
pub const APP_B4: &str = "10.78.2.1";
/// Application address of the client (IPv6).
pub const APP_A6: &str = "fd78:1::1";
/// Application address of the server (IPv6).
pub const APP_B6: &str = "fd78:2::1";
/// Path MTU of application traffic (leaves room for SRH or UDP encapsulation in 1500).
pub const APP_MTU: &str = "1280";

/// The namespaces of one lab.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Client side.
    pub client: String,
    /// Link emulator.
    pub link: String,
    /// Server side.
    pub server: String,
}

/// One underlay path between the client and the server: a veth from each end into the link
/// namespace, where an emulator joins `link_a` and `link_b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderlayPath {
    /// Path number (0: the topology's first path).
    pub index: u8,
    /// Client's device.
    pub client_dev: String,
    /// Link namespace's device towards the client.
    pub link_a: String,
    /// Link namespace's device towards the server.
    pub link_b: String,
    /// Server's device.
    pub server_dev: String,
    /// MAC of the client's device.
    pub client_mac: String,
    /// MAC of the server's device.
    pub server_mac: String,
    /// Client's IPv4 address on the path.
    pub client4: String,
    /// Server's IPv4 address on the path.
    pub server4: String,
    /// Client's IPv6 address on the path.
    pub client6: String,
    /// Server's IPv6 address on the path.
    pub server6: String,
}

impl UnderlayPath {
    /// Names and addresses of path `k`: path 0 is `a0`/`la`/`lb`/`b0` on 10.99.0.0/24 and
    /// fd99::/64; path k is `a<k>`/`la<k>`/`lb<k>`/`b<k>` on 10.99.k.0/24 and fd99:k::/64.
    pub fn of(k: u8) -> Self {
        let suffix = if k == 0 { String::new() } else { k.to_string() };
        UnderlayPath {
            index: k,
            client_dev: format!("a{k}"),
            link_a: format!("la{suffix}"),
            link_b: format!("lb{suffix}"),
            server_dev: format!("b{k}"),
            client_mac: format!("02:68:6c:00:{k:02x}:0a"),
            server_mac: format!("02:68:6c:00:{k:02x}:0b"),
            client4: format!("10.99.{k}.1"),
            server4: format!("10.99.{k}.2"),
            client6: if k == 0 {
                UNDER_A6.into()
            } else {
                format!("fd99:{k}::1")
            },
            server6: if k == 0 {
                UNDER_B6.into()
            } else {
                format!("fd99:{k}::2")
            },
        }
    }
}

impl Topology {
    /// Creates the namespaces, veths, addresses and static neighbours; application traffic is
    /// routed over the underlay (the baseline path).
    pub fn build() -> anyhow::Result<Self> {
        let t = Topology {
            client: netns::ns_name("cli"),
            link: netns::ns_name("link"),
            server: netns::ns_name("srv"),
        };
        netns::create(&t.client)?;
        netns::create(&t.link)?;
        netns::create(&t.server)?;
        for ns in [&t.client, &t.server] {
            netns::sysctl(ns, "net.ipv6.conf.all.accept_dad=0")?;
            netns::sysctl(ns, "net.ipv6.conf.default.accept_dad=0")?;
            netns::sysctl(ns, "net.ipv4.ip_forward=1")?;
            netns::sysctl(ns, "net.ipv6.conf.all.forwarding=1")?;
            netns::sysctl(ns, "net.ipv4.conf.all.rp_filter=0")?;
            netns::sysctl(ns, "net.ipv4.conf.default.rp_filter=0")?;
            let _ = netns::sysctl(ns, "net.ipv6.conf.all.seg6_enabled=1");
            let _ = netns::sysctl(ns, "net.ipv6.conf.default.seg6_enabled=1");
            // Keep socket buffers large enough for 1 MB responses over 100 ms RTT.
            let _ = netns::sysctl(ns, "net.ipv4.tcp_rmem=4096 131072 16777216");
            let _ = netns::sysctl(ns, "net.ipv4.tcp_wmem=4096 65536 16777216");
            let _ = netns::sysctl(ns, "net.ipv4.tcp_no_metrics_save=1");
        }
        // The link namespace only bridges frames: no IPv6 chatter from its own stack.
        netns::sysctl(&t.link, "net.ipv6.conf.all.disable_ipv6=1")?;
        netns::sysctl(&t.link, "net.ipv6.conf.default.disable_ipv6=1")?;
        t.wire_path(&UnderlayPath::of(0))?;
        for (ns, app4, app6) in [(&t.client, APP_A4, APP_A6), (&t.server, APP_B4, APP_B6)] {
            ip(ns, &["addr", "add", &format!("{app4}/32"), "dev", "lo"])?;
            ip(
                ns,
                &[
                    "-6",
                    "addr",
                    "add",
                    &format!("{app6}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ],
            )?;
        }
        t.route_plain()?;
        Ok(t)
    }

    /// Adds underlay path `k` (1, 2, ...) between the client and the server through the link
    /// namespace: its own veths, subnets and static neighbours, for a second uplink (a
    /// Starlink dish and an LTE modem between the same two hosts) with its own emulator.
    /// Application traffic keeps using path 0 until routed otherwise.
    pub fn add_path(&self, k: u8) -> anyhow::Result<UnderlayPath> {
        anyhow::ensure!(k >= 1, "path 0 is built with the topology");
        let p = UnderlayPath::of(k);
        self.wire_path(&p)?;
        Ok(p)
    }

    /// Creates the veths of `p`, switches their offloads off, brings them up, addresses the
    /// end devices and makes their neighbours static (no ARP/ND across the lossy link).
    fn wire_path(&self, p: &UnderlayPath) -> anyhow::Result<()> {
        for (ns, dev, mac, peer) in [
            (&self.client, &p.client_dev, &p.client_mac, &p.link_a),
            (&self.server, &p.server_dev, &p.server_mac, &p.link_b),
        ] {
            ip(
                ns,
                &[
                    "link", "add", dev, "address", mac, "type", "veth", "peer", "name", peer,
                    "netns", &self.link,
                ],
            )?;
        }
        for (ns, dev) in [
            (&self.client, &p.client_dev),
            (&self.link, &p.link_a),
            (&self.link, &p.link_b),
            (&self.server, &p.server_dev),
        ] {
            let d = dev.to_string();
            netns::join(netns::in_ns(ns, move || {
                hirt_linux::ethtool::disable_offloads(&d)
                    .with_context(|| format!("offloads of {d}"))
            }))?;
            ip(ns, &["link", "set", dev, "up"])?;
        }
        for (ns, dev, a4, a6, peer4, peer6, peer_mac) in [
            (
                &self.client,
                &p.client_dev,
                &p.client4,
                &p.client6,
                &p.server4,
                &p.server6,
                &p.server_mac,
            ),
            (
                &self.server,
                &p.server_dev,
                &p.server4,
                &p.server6,
                &p.client4,
                &p.client6,
                &p.client_mac,
            ),
        ] {
            ip(ns, &["addr", "add", &format!("{a4}/24"), "dev", dev])?;
            ip(
                ns,
                &[
                    "-6",
                    "addr",
                    "add",
                    &format!("{a6}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            )?;
            ip(
                ns,
                &[
                    "neigh",
                    "replace",
                    peer4,
                    "lladdr",
                    peer_mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )?;
            ip(
                ns,
                &[
                    "-6",
                    "neigh",
                    "replace",
                    peer6,
                    "lladdr",
                    peer_mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(())
    }

    /// Routes application traffic straight over the underlay (no tunnel, no FEC).
    pub fn route_plain(&self) -> anyhow::Result<()> {
        // Flush cached path MTUs / metrics between runs so that runs do not inherit each other's.
        for ns in [&self.client, &self.server] {
            let _ = ip(ns, &["route", "flush", "cache"]);
            let _ = ip(ns, &["-6", "route", "flush", "cache"]);
        }
        ip(
            &self.client,
            &[
                "route", "replace", APP_B4, "via", UNDER_B4, "src", APP_A4, "mtu", APP_MTU,
            ],
        )?;
        ip(
            &self.server,
            &[
                "route", "replace", APP_A4, "via", UNDER_A4, "src", APP_B4, "mtu", APP_MTU,
            ],
        )?;
        ip(
            &self.client,
            &[
                "-6", "route", "replace", APP_B6, "via", UNDER_B6, "src", APP_A6, "mtu", APP_MTU,
            ],
        )?;
        ip(
            &self.server,
            &[
                "-6", "route", "replace", APP_A6, "via", UNDER_A6, "src", APP_B6, "mtu", APP_MTU,
            ],
        )?;
        Ok(())
    }

    /// The server's application address for IPv4 or IPv6 workloads.
    pub fn server_app(v6: bool) -> IpAddr {
        if v6 {
            APP_B6.parse().expect("constant")
        } else {
            APP_B4.parse().expect("constant")
        }
    }

    /// The client's application address.
    pub fn client_app(v6: bool) -> IpAddr {
        if v6 {
            APP_A6.parse().expect("constant")
        } else {
            APP_A4.parse().expect("constant")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_zero_is_the_topology_s_first_path() {
        let p = UnderlayPath::of(0);
        assert_eq!(
            (
                p.client_dev.as_str(),
                p.link_a.as_str(),
                p.link_b.as_str(),
                p.server_dev.as_str()
            ),
            ("a0", "la", "lb", "b0")
        );
        assert_eq!(
            (p.client_mac.as_str(), p.server_mac.as_str()),
            (MAC_A, MAC_B)
        );
        assert_eq!(
            (p.client4.as_str(), p.server4.as_str()),
            (UNDER_A4, UNDER_B4)
        );
        assert_eq!(
            (p.client6.as_str(), p.server6.as_str()),
            (UNDER_A6, UNDER_B6)
        );
    }

    #[test]
    fn later_paths_have_their_own_names_and_subnets() {
        let p = UnderlayPath::of(1);
        assert_eq!(
            (
                p.client_dev.as_str(),
                p.link_a.as_str(),
                p.link_b.as_str(),
                p.server_dev.as_str()
            ),
            ("a1", "la1", "lb1", "b1")
        );
        assert_eq!(p.client_mac, "02:68:6c:00:01:0a");
        assert_eq!(
            (p.client4.as_str(), p.server6.as_str()),
            ("10.99.1.1", "fd99:1::2")
        );
        assert_eq!(UnderlayPath::of(12).server_mac, "02:68:6c:00:0c:0b");
    }
}
