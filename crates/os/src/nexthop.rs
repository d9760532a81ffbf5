//! Link-layer next hops for the packets hirt transmits itself (the AF_XDP path, [`crate::xdp`])
//! instead of handing them to the kernel's forwarding: the kernel's own route and neighbour
//! tables answer, so routing stays the operator's (`ip -6 route`), and the answers are cached
//! because a netlink round trip costs more than forwarding a packet.
//!
//! A destination without a usable answer (a local address, no route, a neighbour not yet
//! resolved) gets `None` and its packets go through the kernel, which also resolves the
//! neighbour; the negative answer is kept only briefly so the fast path takes over soon after.

use std::collections::HashMap;
use std::io;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use crate::netlink::Netlink;

/// Where to send a packet on the link: device, Ethernet addresses, the device's MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Hop {
    /// Output interface index.
    pub ifindex: u32,
    /// Source MAC (the output interface's address).
    pub src: [u8; 6],
    /// Destination MAC (the next hop's).
    pub dst: [u8; 6],
    /// MTU of the output interface (largest IPv6 packet it takes).
    pub mtu: u32,
}

impl L2Hop {
    /// Writes the 14-byte Ethernet header for an IPv6 packet into `frame`.
    pub fn write_ethernet(&self, frame: &mut [u8]) {
        frame[0..6].copy_from_slice(&self.dst);
        frame[6..12].copy_from_slice(&self.src);
        frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    }
}

/// How long a resolved next hop is trusted (routes and neighbours change rarely; a changed
/// neighbour is picked up within this time).
const POSITIVE_TTL: Duration = Duration::from_secs(1);
/// How long an unresolved destination stays on the kernel's path before asking again.
const NEGATIVE_TTL: Duration = Duration::from_millis(50);
/// Entries kept at most (decapsulated traffic may go to many destinations).
const MAX_ENTRIES: usize = 4096;
/// Kernel queries per second at most: each costs a netlink round trip in the worker, so traffic
/// to ever new destinations (a scan through a decapsulating node) must not turn the fast path
/// into a stream of queries. Beyond it, packets take the kernel's path.
const QUERIES_PER_SECOND: u32 = 2000;

/// Cached answers of the kernel's route and neighbour tables.
#[derive(Debug)]
pub struct NextHops {
    nl: Netlink,
    hops: HashMap<Ipv6Addr, (Option<L2Hop>, Instant)>,
    /// The last answer: a tunnel node sends nearly everything to one next segment, so most
    /// packets are answered without hashing.
    last: Option<(Ipv6Addr, Option<L2Hop>, Instant)>,
    /// Queries left in the current second, and when it ends.
    queries_left: u32,
    budget_until: Option<Instant>,
}

impl NextHops {
    /// Opens a netlink socket in the calling thread's network namespace.
    pub fn new() -> io::Result<NextHops> {
        Ok(NextHops {
            nl: Netlink::open()?,
            hops: HashMap::new(),
            last: None,
            queries_left: QUERIES_PER_SECOND,
            budget_until: None,
        })
    }

    /// The next hop for `dst`, or `None` when the kernel should forward it.
    pub fn lookup(&mut self, dst: Ipv6Addr, now: Instant) -> Option<L2Hop> {
        if let Some((d, hop, until)) = self.last {
            if d == dst && until > now {
                return hop;
            }
        }
        if let Some(&(hop, until)) = self.hops.get(&dst) {
            if until > now {
                self.last = Some((dst, hop, until));
                return hop;
            }
        }
        if self.budget_until.is_none_or(|t| now >= t) {
            self.budget_until = Some(now + Duration::from_secs(1));
            self.queries_left = QUERIES_PER_SECOND;
        }
        if self.queries_left == 0 {
            return None;
        }
        self.queries_left -= 1;
        let hop = self.resolve(dst).unwrap_or_else(|e| {
            tracing::debug!("next hop of {dst}: {e}");
            None
        });
        if self.hops.len() >= MAX_ENTRIES {
            self.hops.clear();
        }
        let ttl = if hop.is_some() {
            POSITIVE_TTL
        } else {
            NEGATIVE_TTL
        };
        self.hops.insert(dst, (hop, now + ttl));
        self.last = Some((dst, hop, now + ttl));
        hop
    }

    fn resolve(&mut self, dst: Ipv6Addr) -> io::Result<Option<L2Hop>> {
        let Some(route) = self.nl.route_get(dst)? else {
            return Ok(None);
        };
        let Some(dst_mac) = self.nl.neighbour(route.oif, route.gateway.unwrap_or(dst))? else {
            return Ok(None);
        };
        let Some((src, mtu)) = link_info(route.oif)? else {
            return Ok(None);
        };
        Ok(Some(L2Hop {
            ifindex: route.oif,
            src,
            dst: dst_mac,
            mtu,
        }))
    }
}

/// MAC address and MTU of an Ethernet interface (`None` for other link types).
pub fn link_info(ifindex: u32) -> io::Result<Option<([u8; 6], u32)>> {
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into ifr_name, which is that long.
    if unsafe { libc::if_indextoname(ifindex, req.ifr_name.as_mut_ptr()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain socket(2) call; the descriptor is wrapped at once.
    let raw = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    // SAFETY: SIOCGIFHWADDR reads the name from and writes the address into `req`.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled ifru_hwaddr.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    if hw.sa_family != libc::ARPHRD_ETHER {
        return Ok(None);
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    // SAFETY: SIOCGIFMTU reads the name from and writes the MTU into `req`.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(Some((mac, mtu.max(0) as u32)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{self, NetNs};

    #[test]
    fn ethernet_header_bytes() {
        let hop = L2Hop {
            ifindex: 3,
            src: [0x02, 0, 0, 0, 0, 0x01],
            dst: [0x02, 0, 0, 0, 0, 0x02],
            mtu: 1500,
        };
        let mut f = [0u8; 14];
        hop.write_ethernet(&mut f);
        assert_eq!(
            f,
            [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd],
            "dst, src, ethertype IPv6"
        );
    }

    /// The kernel's answers in a namespace: a gateway route, an on-link destination, a local
    /// address (kernel path), no route, and a neighbour not resolved yet.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn resolves_routes_and_neighbours_like_ip_route_get() {
        if !netns::available() {
            eprintln!("skipping: needs root and ip netns");
            return;
        }
        let a = NetNs::new(&netns::unique_name("nha")).unwrap();
        let b = NetNs::new(&netns::unique_name("nhb")).unwrap();
        let (ia, ib) = (netns::unique_name("nv"), netns::unique_name("nv"));
        netns::veth(&a, &ia, &b, &ib).unwrap();
        a.ip(&[
            "-6",
            "addr",
            "add",
            "2001:db8:55::1/64",
            "dev",
            &ia,
            "nodad",
        ])
        .unwrap();
        b.ip(&[
            "-6",
            "addr",
            "add",
            "2001:db8:55::2/64",
            "dev",
            &ib,
            "nodad",
        ])
        .unwrap();
        a.ip(&["link", "set", &ia, "mtu", "1400"]).unwrap();
        a.ip(&[
            "-6",
            "route",
            "add",
            "fc00:55::/64",
            "via",
            "2001:db8:55::2",
        ])
        .unwrap();
        a.ip(&[
            "-6",
            "neigh",
            "replace",
            "2001:db8:55::2",
            "lladdr",
            "02:00:00:00:55:02",
            "dev",
            &ia,
        ])
        .unwrap();
        let link = a.ip(&["-o", "link", "show", "dev", &ia]).unwrap();
        let link = String::from_utf8_lossy(&link.stdout).to_string();
        let ia2 = ia.clone();
        let got = a
            .spawn(move || {
                let idx = crate::netlink::if_index(&ia2)?;
                let mut hops = NextHops::new()?;
                let now = Instant::now();
                let via = hops.lookup("fc00:55::9".parse().unwrap(), now);
                let onlink = hops.lookup("2001:db8:55::2".parse().unwrap(), now);
                let local = hops.lookup("2001:db8:55::1".parse().unwrap(), now);
                let none = hops.lookup("2001:db8:99::1".parse().unwrap(), now);
                let unresolved = hops.lookup("2001:db8:55::7".parse().unwrap(), now);
                Ok((idx, via, onlink, local, none, unresolved))
            })
            .join()
            .unwrap()
            .unwrap();
        let (idx, via, onlink, local, none, unresolved) = got;
        let via = via.expect("gateway route resolves");
        assert_eq!(via.ifindex, idx);
        assert_eq!(via.dst, [2, 0, 0, 0, 0x55, 2]);
        assert_eq!(via.mtu, 1400);
        let mac = via
            .src
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        assert!(link.contains(&mac), "{mac} is the device's address: {link}");
        assert_eq!(onlink, Some(via), "on-link neighbour, same MAC");
        assert_eq!(local, None, "a local address stays with the kernel");
        assert_eq!(none, None, "no route");
        assert_eq!(unresolved, None, "no neighbour entry yet");
    }

    /// Past the query budget, new destinations go to the kernel without a query; cached ones
    /// still resolve, and the budget comes back the next second.
    #[test]
    fn queries_are_rate_limited() {
        let mut hops = NextHops::new().unwrap();
        let t = Instant::now();
        for i in 0..QUERIES_PER_SECOND {
            let dst = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, (i >> 16) as u16, i as u16);
            hops.lookup(dst, t);
        }
        assert_eq!(hops.queries_left, 0);
        let fresh: Ipv6Addr = "2001:db8:78::1".parse().unwrap();
        assert_eq!(
            hops.lookup(fresh, t),
            None,
            "over budget: the kernel's path"
        );
        assert!(!hops.hops.contains_key(&fresh), "not queried, not cached");
        hops.lookup(fresh, t + Duration::from_secs(1));
        assert!(hops.hops.contains_key(&fresh), "queried in the next second");
    }
}
