//! A minimal rtnetlink client over a raw `NETLINK_ROUTE` socket: set a link up / its MTU, add an
//! address, add/delete routes and policy rules. This is all hirt needs to own its SIDs (routes to
//! its TUN device) and to act as End.DX6 (a rule sending what it decapsulates to a table whose
//! default route is the configured next hop). Each request waits for the kernel's ACK so errors
//! are reported where they happen.

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_GETNEIGH: u16 = 30;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_REPLACE: u16 = 0x100;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
const RTA_ENCAP_TYPE: u16 = 21;
const RTA_ENCAP: u16 = 22;
const NLA_F_NESTED: u16 = 0x8000;
const LWTUNNEL_ENCAP_SEG6_LOCAL: u16 = 7;
const SEG6_LOCAL_ACTION: u16 = 1;
const SEG6_LOCAL_TABLE: u16 = 3;
const SEG6_LOCAL_ACTION_END: u32 = 1;
const SEG6_LOCAL_ACTION_END_DT6: u32 = 7;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const IFLA_MTU: u16 = 4;
const IFLA_TXQLEN: u16 = 13;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;

const RTPROT_STATIC: u8 = 4;
const RTN_UNICAST: u8 = 1;
const FR_ACT_TO_TBL: u8 = 1;

/// A route: destination prefix, optional gateway, output interface index, table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination address.
    pub dst: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// Next hop, if any (on-link otherwise).
    pub gateway: Option<IpAddr>,
    /// Output interface index (0: let the kernel find it from the gateway).
    pub oif: u32,
    /// Routing table (254 = main).
    pub table: u32,
    /// The kernel's own SRv6 behaviour for this SID (`encap seg6local action ...`).
    pub seg6local: Option<Seg6Local>,
}

/// A kernel SRv6 behaviour for a SID route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg6Local {
    /// End: the next segment.
    End,
    /// End.DT6: decapsulate and look the inner destination up in this table.
    EndDt6(u32),
}

/// Where the kernel sends packets to a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteTo {
    /// Output interface index.
    pub oif: u32,
    /// Next hop, or `None` when the destination is on-link.
    pub gateway: Option<Ipv6Addr>,
}

/// A policy rule: packets that arrived on `iif` are looked up in `table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Address family (`libc::AF_INET6` or `AF_INET`).
    pub family: u8,
    /// Input interface name.
    pub iif: String,
    /// Table to look up.
    pub table: u32,
    /// Rule priority.
    pub priority: u32,
}

/// A NETLINK_ROUTE socket.
#[derive(Debug)]
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// The interface index of `name` in the calling thread's namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(idx)
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        // SAFETY: plain socket(2) call.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Netlink {
            fd,
            seq: 1,
            buf: Vec::with_capacity(256),
        })
    }

    /// Sets a link up, optionally with an MTU.
    pub fn link_up(&mut self, index: u32, mtu: Option<u32>) -> io::Result<()> {
        self.link_up_qlen(index, mtu, None)
    }

    /// Sets a link up, optionally with an MTU and a transmit queue length (for a TUN device:
    /// how many packets the kernel queues towards hirt before dropping).
    pub fn link_up_qlen(
        &mut self,
        index: u32,
        mtu: Option<u32>,
        txqlen: Option<u32>,
    ) -> io::Result<()> {
        self.begin(RTM_NEWLINK, 0);
        self.buf.push(libc::AF_UNSPEC as u8);
        self.buf.push(0);
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(index as i32).to_ne_bytes());
        self.buf
            .extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        self.buf
            .extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        if let Some(mtu) = mtu {
            self.attr(IFLA_MTU, &mtu.to_ne_bytes());
        }
        if let Some(q) = txqlen {
            self.attr(IFLA_TXQLEN, &q.to_ne_bytes());
        }
        self.finish()
    }

    /// Sets the link's IPv6 address generation mode to none (`ip link set DEV addrgenmode
    /// none`): no link-local address, hence no router solicitation, DAD or solicited-node MLD
    /// on it. Call before the link goes up. (Added for the SRv6 SID device.)
    pub fn link_addr_gen_mode_none(&mut self, index: u32) -> io::Result<()> {
        const IFLA_AF_SPEC: u16 = 26;
        const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
        const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
        self.begin(RTM_NEWLINK, 0);
        self.buf.push(libc::AF_UNSPEC as u8);
        self.buf.push(0);
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(index as i32).to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        // IFLA_AF_SPEC { AF_INET6 { IFLA_INET6_ADDR_GEN_MODE: u8 } }, each attribute padded to 4.
        let mut inet6 = Vec::with_capacity(12);
        inet6.extend_from_slice(&12u16.to_ne_bytes());
        inet6.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        inet6.extend_from_slice(&5u16.to_ne_bytes());
        inet6.extend_from_slice(&IFLA_INET6_ADDR_GEN_MODE.to_ne_bytes());
        inet6.extend_from_slice(&[IN6_ADDR_GEN_MODE_NONE, 0, 0, 0]);
        self.attr(IFLA_AF_SPEC, &inet6);
        self.finish()
    }

    /// Adds an address to an interface.
    pub fn add_addr(&mut self, index: u32, addr: IpAddr, prefix_len: u8) -> io::Result<()> {
        self.begin(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
        self.buf.push(family(&addr));
        self.buf.push(prefix_len);
        // IFA_F_NODAD: usable at once (a TUN has no neighbours to collide with).
        self.buf.push(0x02);
        self.buf.push(0);
        self.buf.extend_from_slice(&index.to_ne_bytes());
        let bytes = ip_bytes(&addr);
        self.attr(IFA_LOCAL, &bytes);
        self.attr(IFA_ADDRESS, &bytes);
        self.finish()
    }

    /// Adds (`replace`: or replaces) a route.
    pub fn add_route(&mut self, r: &Route, replace: bool) -> io::Result<()> {
        let flags = NLM_F_CREATE | if replace { NLM_F_REPLACE } else { NLM_F_EXCL };
        self.route(RTM_NEWROUTE, flags, r)
    }

    /// Deletes a route.
    pub fn del_route(&mut self, r: &Route) -> io::Result<()> {
        self.route(RTM_DELROUTE, 0, r)
    }

    /// Adds a policy rule.
    pub fn add_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.rule(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, r)
    }

    /// Deletes a policy rule.
    pub fn del_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.rule(RTM_DELRULE, 0, r)
    }

    /// The kernel's route to `dst` (`ip -6 route get`): output interface and gateway, or `None`
    /// when the destination is not reached through a unicast route (a local address, an
    /// unreachable or blackhole route).
    pub fn route_get(&mut self, dst: Ipv6Addr) -> io::Result<Option<RouteTo>> {
        self.begin(RTM_GETROUTE, 0);
        self.buf
            .extend_from_slice(&[libc::AF_INET6 as u8, 128, 0, 0, 0, 0, 0, 0]);
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.attr(RTA_DST, &dst.octets());
        let mut reply = Vec::new();
        match self.transact(Some(&mut reply)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENETUNREACH) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EHOSTUNREACH) => return Ok(None),
            Err(e) => return Err(e),
        }
        // nlmsghdr (16) + rtmsg (12): rtm_type is the rtmsg's last byte.
        if reply.len() < 28 || reply[16 + 7] != RTN_UNICAST {
            return Ok(None);
        }
        let mut to = RouteTo {
            oif: 0,
            gateway: None,
        };
        for (ty, data) in attrs(&reply[28..]) {
            match ty {
                RTA_OIF if data.len() == 4 => {
                    to.oif = u32::from_ne_bytes(data.try_into().expect("4"))
                }
                RTA_GATEWAY if data.len() == 16 => {
                    to.gateway = Some(Ipv6Addr::from(<[u8; 16]>::try_from(data).expect("16")))
                }
                _ => {}
            }
        }
        Ok((to.oif != 0).then_some(to))
    }

    /// The link-layer address of neighbour `addr` on interface `oif` if the kernel has a usable
    /// entry for it (reachable, stale, delay, probe, permanent): `ip -6 neigh get`.
    pub fn neighbour(&mut self, oif: u32, addr: Ipv6Addr) -> io::Result<Option<[u8; 6]>> {
        const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;
        self.begin(RTM_GETNEIGH, 0);
        // ndmsg: family, pad, pad16, ifindex, state, flags, type.
        self.buf.extend_from_slice(&[libc::AF_INET6 as u8, 0, 0, 0]);
        self.buf.extend_from_slice(&(oif as i32).to_ne_bytes());
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
        self.attr(NDA_DST, &addr.octets());
        let mut reply = Vec::new();
        match self.transact(Some(&mut reply)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        }
        if reply.len() < 28 {
            return Ok(None);
        }
        let state = u16::from_ne_bytes(reply[24..26].try_into().expect("2"));
        if state & NUD_USABLE == 0 {
            return Ok(None);
        }
        let mac = attrs(&reply[28..])
            .find(|(ty, d)| *ty == NDA_LLADDR && d.len() == 6)
            .map(|(_, d)| <[u8; 6]>::try_from(d).expect("6"));
        Ok(mac)
    }

    fn route(&mut self, ty: u16, flags: u16, r: &Route) -> io::Result<()> {
        self.begin(ty, flags);
        let scope = if r.gateway.is_none() && matches!(r.dst, IpAddr::V4(_)) {
            253
        } else {
            0
        };
        self.buf.extend_from_slice(&[
            family(&r.dst),
            r.prefix_len,
            0,
            0,
            if r.table < 256 { r.table as u8 } else { 252 },
            RTPROT_STATIC,
            scope,
            RTN_UNICAST,
        ]);
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.attr(RTA_DST, &ip_bytes(&r.dst));
        if r.oif != 0 {
            self.attr(RTA_OIF, &r.oif.to_ne_bytes());
        }
        if let Some(gw) = r.gateway {
            self.attr(RTA_GATEWAY, &ip_bytes(&gw));
        }
        self.attr(RTA_TABLE, &r.table.to_ne_bytes());
        if let Some(b) = r.seg6local {
            self.attr(RTA_ENCAP_TYPE, &LWTUNNEL_ENCAP_SEG6_LOCAL.to_ne_bytes());
            let nested = match b {
                Seg6Local::End => nla(SEG6_LOCAL_ACTION, &SEG6_LOCAL_ACTION_END.to_ne_bytes()),
                Seg6Local::EndDt6(t) => {
                    let mut n = nla(SEG6_LOCAL_ACTION, &SEG6_LOCAL_ACTION_END_DT6.to_ne_bytes());
                    n.extend(nla(SEG6_LOCAL_TABLE, &t.to_ne_bytes()));
                    n
                }
            };
            self.attr(RTA_ENCAP | NLA_F_NESTED, &nested);
        }
        self.finish()
    }

    fn rule(&mut self, ty: u16, flags: u16, r: &Rule) -> io::Result<()> {
        self.begin(ty, flags);
        let table8 = if r.table < 256 { r.table as u8 } else { 252 };
        self.buf
            .extend_from_slice(&[r.family, 0, 0, 0, table8, 0, 0, FR_ACT_TO_TBL]);
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        let mut name = r.iif.as_bytes().to_vec();
        name.push(0);
        self.attr(FRA_IIFNAME, &name);
        self.attr(FRA_TABLE, &r.table.to_ne_bytes());
        self.attr(FRA_PRIORITY, &r.priority.to_ne_bytes());
        self.finish()
    }

    fn begin(&mut self, ty: u16, flags: u16) {
        self.seq = self.seq.wrapping_add(1);
        self.buf.clear();
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf
            .extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
    }

    fn attr(&mut self, ty: u16, data: &[u8]) {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        self.transact(None)
    }

    /// Sends the request in `buf`, waits for the kernel's ACK or error; a reply message with our
    /// sequence number (the answer to a GET) is copied into `reply`, from its header on.
    fn transact(&mut self, mut reply: Option<&mut Vec<u8>>) -> io::Result<()> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        // SAFETY: a zeroed sockaddr_nl (pid 0 = the kernel) is a valid destination.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `buf` and `sa` are valid for the given lengths during the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                self.buf.as_ptr().cast(),
                self.buf.len(),
                0,
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut resp = [0u8; 4096];
        loop {
            // SAFETY: `resp` is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), resp.as_mut_ptr().cast(), resp.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            let mut off = 0;
            while off + 16 <= n {
                let mlen = u32::from_ne_bytes(resp[off..off + 4].try_into().expect("4")) as usize;
                let mty = u16::from_ne_bytes(resp[off + 4..off + 6].try_into().expect("2"));
                let mseq = u32::from_ne_bytes(resp[off + 8..off + 12].try_into().expect("4"));
                if mlen < 16 || off + mlen > n {
                    return Err(io::Error::other("malformed netlink reply"));
                }
                if mty != NLMSG_ERROR && mseq == self.seq {
                    if let Some(r) = reply.as_deref_mut() {
                        r.clear();
                        r.extend_from_slice(&resp[off..off + mlen]);
                    }
                }
                if mty == NLMSG_ERROR && mseq == self.seq && mlen >= 20 {
                    let err = i32::from_ne_bytes(resp[off + 16..off + 20].try_into().expect("4"));
                    return if err == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-err))
                    };
                }
                off += (mlen + 3) & !3;
            }
        }
    }
}

/// The netlink attributes (type, payload) in `b`; stops at the first malformed one.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        b = &b[((len + 3) & !3).min(b.len())..];
        Some((ty, data))
    })
}

/// One netlink attribute (header, data, padding to 4 bytes), for nesting.
fn nla(ty: u16, data: &[u8]) -> Vec<u8> {
    let len = 4 + data.len();
    let mut v = Vec::with_capacity(len.div_ceil(4) * 4);
    v.extend_from_slice(&(len as u16).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(data);
    v.resize(len.div_ceil(4) * 4, 0);
    v
}

fn family(a: &IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn ip_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// Routes and rules this process installed, removed again on [`Installed::remove_all`] or drop
/// (clean shutdown, SIGINT/SIGTERM).
///
/// A netlink socket opened when the first route is installed is kept for the removal: it is
/// bound to that network namespace, so removal works from any thread (a test or the bench may
/// stop an instance from outside its namespace) and never touches another namespace.
#[derive(Debug, Default)]
pub struct Installed {
    routes: Vec<Route>,
    rules: Vec<Rule>,
    nl: Option<Netlink>,
}

impl Installed {
    /// Installs a route (replacing an existing one) and remembers it.
    pub fn route(&mut self, nl: &mut Netlink, r: Route) -> io::Result<()> {
        if self.nl.is_none() {
            self.nl = Some(Netlink::open()?);
        }
        nl.add_route(&r, true)?;
        self.routes.push(r);
        Ok(())
    }

    /// Installs a rule and remembers it.
    pub fn rule(&mut self, nl: &mut Netlink, r: Rule) -> io::Result<()> {
        if self.nl.is_none() {
            self.nl = Some(Netlink::open()?);
        }
        nl.add_rule(&r)?;
        self.rules.push(r);
        Ok(())
    }

    /// Removes everything installed, newest first.
    pub fn remove_all(&mut self) {
        if self.routes.is_empty() && self.rules.is_empty() {
            return;
        }
        if let Some(nl) = self.nl.as_mut() {
            while let Some(r) = self.rules.pop() {
                if let Err(e) = nl.del_rule(&r) {
                    tracing::warn!("removing rule {r:?}: {e}");
                }
            }
            while let Some(r) = self.routes.pop() {
                if let Err(e) = nl.del_route(&r) {
                    tracing::warn!("removing route {r:?}: {e}");
                }
            }
        }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.remove_all();
    }
}
