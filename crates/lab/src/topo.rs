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
        ip(
            &t.client,
            &[
                "link", "add", "a0", "address", MAC_A, "type", "veth", "peer", "name", "la",
                "netns", &t.link,
            ],
        )?;
        ip(
            &t.server,
            &[
                "link", "add", "b0", "address", MAC_B, "type", "veth", "peer", "name", "lb",
                "netns", &t.link,
            ],
        )?;
        for (ns, dev) in [
            (&t.client, "a0"),
            (&t.link, "la"),
            (&t.link, "lb"),
            (&t.server, "b0"),
        ] {
            let d = dev.to_string();
            netns::join(netns::in_ns(ns, move || {
                hirt_linux::ethtool::disable_offloads(&d)
                    .with_context(|| format!("offloads of {d}"))
            }))?;
            ip(ns, &["link", "set", dev, "up"])?;
        }
        for (ns, dev, a4, a6, app4, app6, peer4, peer6, peer_mac) in [
            (
                &t.client, "a0", UNDER_A4, UNDER_A6, APP_A4, APP_A6, UNDER_B4, UNDER_B6, MAC_B,
            ),
            (
                &t.server, "b0", UNDER_B4, UNDER_B6, APP_B4, APP_B6, UNDER_A4, UNDER_A6, MAC_A,
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
        t.route_plain()?;
        Ok(t)
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
