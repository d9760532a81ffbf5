//! An rtnetlink client on `netlink-packet-route` messages over a synchronous `netlink-sys`
//! socket: set a link up / its MTU, add an address, add/delete/list routes (plain, SRv6 `seg6`
//! encapsulation, `seg6local` behaviours End, End.DX6, End.DT6, multipath routes whose next hops
//! each carry their own `seg6` encapsulation), add/delete policy rules, ask the
//! kernel's route and neighbour tables. This is what hirt needs to own its SIDs (routes to its
//! TUN device) and to act as End.DX6 (a rule sending what it decapsulates to a table whose
//! default route is the configured next hop).
//!
//! Each request waits for the kernel's ACK, so an error is reported where it happens, with the
//! request it answers and the kernel's own explanation when it gives one (extended ACK).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr};

use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla, NLA_F_NESTED,
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute, LinkFlags, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteLwEnCapType, RouteLwTunnelEncap, RouteMessage, RouteNextHop,
    RouteProtocol, RouteScope, RouteSeg6IpTunnel, RouteSeg6LocalTunnel, RouteType, Seg6Header,
    Seg6LocalAction, Seg6Mode,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// `rtm_table` of a route or rule whose table id does not fit a byte (the id is in the
/// `RTA_TABLE` / `FRA_TABLE` attribute).
const RT_TABLE_COMPAT: u8 = 252;
/// `NLM_F_ACK_TLVS` on an error message: extended ACK attributes follow the echoed header.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the kernel's error text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Length of a netlink message header.
const NLMSG_HDRLEN: usize = 16;
/// `SEG6_LOCAL_BPF`, the End.BPF program attribute `netlink-packet-route` does not model:
/// nested `SEG6_LOCAL_BPF_PROG` (descriptor) and `SEG6_LOCAL_BPF_PROG_NAME`.
const SEG6_LOCAL_BPF: u16 = 8;
const SEG6_LOCAL_BPF_PROG: u16 = 1;
const SEG6_LOCAL_BPF_PROG_NAME: u16 = 2;
/// `SEG6_IPTUNNEL_SRH`: the `seg6` encapsulation's one attribute (mode and routing header).
const SEG6_IPTUNNEL_SRH: u16 = 1;
/// The name End.BPF programs are installed under (the kernel shows it in `ip route`).
const END_BPF_NAME: &str = "hirt";

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
    /// End.DX6: decapsulate and send the inner packet to this IPv6 next hop.
    EndDx6(Ipv6Addr),
    /// End.DT6: decapsulate and look the inner destination up in this table.
    EndDt6(u32),
    /// End.BPF: run this loaded `BPF_PROG_TYPE_LWT_SEG6LOCAL` program (by descriptor; the
    /// kernel keeps its own reference). Listed routes show it as no behaviour: the kernel
    /// names the program by id, not by descriptor.
    EndBpf {
        /// The program's file descriptor.
        prog_fd: i32,
    },
}

/// SRv6 encapsulation of the packets a route matches (`encap seg6 mode encap|inline segs ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seg6Encap {
    /// The segment list, first segment first (as `ip route` takes it).
    pub segments: Vec<Ipv6Addr>,
    /// Insert the routing header into the packet (`inline`) instead of an outer IPv6 header.
    pub inline: bool,
}

/// One next hop of a multipath route that encapsulates in SRv6 (`nexthop encap seg6 mode encap
/// segs S1,S2 via GW dev DEV` in `ip route` words): the kernel picks one per flow by hash
/// (`net.ipv6.fib_multipath_hash_policy`) and encapsulates with its segment list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seg6NextHop {
    /// The segment list, first segment first.
    pub segments: Vec<Ipv6Addr>,
    /// Next hop on the link (the kernel routes the encapsulated packet by its new destination,
    /// the first segment; the next hop names the path in the route).
    pub gateway: Option<IpAddr>,
    /// Output interface index (0: the kernel finds it from the gateway).
    pub oif: u32,
}

/// A route as the kernel lists it: the fields [`Route`] describes, plus its SRv6 encapsulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRoute {
    /// Destination, gateway, device, table, `seg6local` behaviour.
    pub route: Route,
    /// The `seg6` encapsulation, if any.
    pub seg6: Option<Seg6Encap>,
    /// The next hops of a multipath route (empty for a single-path one), each with its own
    /// encapsulation.
    pub multipath: Vec<Seg6NextHop>,
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

/// The kernel refused a request: what was asked, the error number, and the kernel's own
/// explanation when it sent one. Carried inside the [`io::Error`] the requests return (see
/// [`errno`]).
#[derive(Debug)]
pub struct NetlinkError {
    /// The request, in `ip` words (e.g. `add route fc00::1/128 table 254`).
    pub request: String,
    /// The positive error number (`libc::EEXIST`, ...).
    pub errno: i32,
    /// The kernel's extended ACK message, if any.
    pub message: Option<String>,
}

impl fmt::Display for NetlinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let os = io::Error::from_raw_os_error(self.errno);
        write!(f, "{}: {os}", self.request)?;
        if let Some(m) = &self.message {
            write!(f, " ({m})")?;
        }
        Ok(())
    }
}

impl std::error::Error for NetlinkError {}

/// The error number of a failed request (a [`NetlinkError`] or a plain OS error).
pub fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<NetlinkError>())
            .map(|n| n.errno)
    })
}

/// A NETLINK_ROUTE socket.
pub struct Netlink {
    sock: Socket,
    seq: u32,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl fmt::Debug for Netlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Netlink").field("seq", &self.seq).finish()
    }
}

/// The interface index of `name` in the calling thread's namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {name}: {e}")));
    }
    Ok(idx)
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        // Errors echo only the request's header, followed by the kernel's explanation.
        sock.set_cap_ack(true)?;
        sock.set_ext_ack(true)?;
        Ok(Netlink {
            sock,
            seq: 1,
            tx: Vec::with_capacity(256),
            rx: vec![0; 64 * 1024],
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
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        m.attributes.extend(mtu.map(LinkAttribute::Mtu));
        m.attributes.extend(txqlen.map(LinkAttribute::TxQueueLen));
        self.ack(RouteNetlinkMessage::NewLink(m), 0, || {
            format!("set link {index} up (mtu {mtu:?}, txqlen {txqlen:?})")
        })
    }

    /// Sets the link's IPv6 address generation mode to none (`ip link set DEV addrgenmode
    /// none`): no link-local address, hence no router solicitation, DAD or solicited-node MLD
    /// on it. Call before the link goes up.
    pub fn link_addr_gen_mode_none(&mut self, index: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes
            .push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
                vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
            )]));
        self.ack(RouteNetlinkMessage::NewLink(m), 0, || {
            format!("set link {index} addrgenmode none")
        })
    }

    /// Adds an address to an interface (replacing it if present).
    pub fn add_addr(&mut self, index: u32, addr: IpAddr, prefix_len: u8) -> io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = family(&addr);
        m.header.prefix_len = prefix_len;
        // Usable at once: a TUN has no neighbours to collide with.
        m.header.flags = AddressHeaderFlags::Nodad;
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(addr));
        m.attributes.push(AddressAttribute::Address(addr));
        self.ack(
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("add address {addr}/{prefix_len} to link {index}"),
        )
    }

    /// Adds (`replace`: or replaces) a route.
    pub fn add_route(&mut self, r: &Route, replace: bool) -> io::Result<()> {
        self.new_route(route_message(r, None), replace, || describe("add", r, None))
    }

    /// Adds (`replace`: or replaces) a route whose packets the kernel encapsulates in SRv6
    /// (`ip -6 route add DST encap seg6 mode encap segs S1,S2 dev DEV`).
    pub fn add_seg6_route(&mut self, r: &Route, seg6: &Seg6Encap, replace: bool) -> io::Result<()> {
        self.new_route(route_message(r, Some(seg6)), replace, || {
            describe("add", r, Some(seg6))
        })
    }

    fn new_route(
        &mut self,
        m: RouteMessage,
        replace: bool,
        what: impl Fn() -> String,
    ) -> io::Result<()> {
        let flags = NLM_F_CREATE | if replace { NLM_F_REPLACE } else { NLM_F_EXCL };
        self.ack(RouteNetlinkMessage::NewRoute(m), flags, what)
    }

    /// Installs `dst/prefix_len` in `table` as a multipath route over `hops`, each of which
    /// encapsulates in SRv6 with its own segment list, replacing whatever route the kernel had
    /// for that prefix in one step (`ip -6 route replace DST nexthop encap seg6 ... nexthop
    /// ...`): flows of next hops that stay keep flowing while the set changes.
    pub fn replace_seg6_multipath(
        &mut self,
        dst: IpAddr,
        prefix_len: u8,
        table: u32,
        hops: &[Seg6NextHop],
    ) -> io::Result<()> {
        if hops.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a multipath route needs at least one next hop",
            ));
        }
        let r = Route {
            dst,
            prefix_len,
            gateway: None,
            oif: 0,
            table,
            seg6local: None,
        };
        let mut m = route_message(&r, None);
        m.attributes.push(RouteAttribute::MultiPath(
            hops.iter().map(seg6_next_hop).collect(),
        ));
        self.new_route(m, true, || {
            let segs: Vec<_> = hops.iter().map(|h| &h.segments).collect();
            format!("{} over next hops {segs:?}", describe("replace", &r, None))
        })
    }

    /// Deletes a route (any encapsulation: destination and table identify it).
    pub fn del_route(&mut self, r: &Route) -> io::Result<()> {
        self.ack(
            RouteNetlinkMessage::DelRoute(route_message(r, None)),
            0,
            || describe("delete", r, None),
        )
    }

    /// The routes of `table` in address family `family` (`libc::AF_INET6` or `AF_INET`), as
    /// `ip route show table TABLE` lists them (unicast routes only).
    pub fn routes(&mut self, family: u8, table: u32) -> io::Result<Vec<ListedRoute>> {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::from(family);
        let replies = self.dump(RouteNetlinkMessage::GetRoute(m), || {
            format!("list routes of family {family}")
        })?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewRoute(m) => listed_route(&m),
                _ => None,
            })
            .filter(|l| l.route.table == table)
            .collect())
    }

    /// Adds a policy rule.
    pub fn add_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.ack(
            RouteNetlinkMessage::NewRule(rule_message(r)),
            NLM_F_CREATE | NLM_F_EXCL,
            || {
                format!(
                    "add rule iif {} lookup {} pref {}",
                    r.iif, r.table, r.priority
                )
            },
        )
    }

    /// Deletes a policy rule.
    pub fn del_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.ack(RouteNetlinkMessage::DelRule(rule_message(r)), 0, || {
            format!(
                "delete rule iif {} lookup {} pref {}",
                r.iif, r.table, r.priority
            )
        })
    }

    /// The kernel's route to `dst` (`ip -6 route get`): output interface and gateway, or `None`
    /// when the destination is not reached through a unicast route (a local address, an
    /// unreachable or blackhole route).
    pub fn route_get(&mut self, dst: Ipv6Addr) -> io::Result<Option<RouteTo>> {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet6;
        m.header.destination_prefix_length = 128;
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet6(dst)));
        let reply = match self.request(RouteNetlinkMessage::GetRoute(m), 0, || {
            format!("get route to {dst}")
        }) {
            Ok(r) => r,
            Err(e) if matches!(errno(&e), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let Some(RouteNetlinkMessage::NewRoute(r)) = reply else {
            return Ok(None);
        };
        if r.header.kind != RouteType::Unicast {
            return Ok(None);
        }
        let mut to = RouteTo {
            oif: 0,
            gateway: None,
        };
        for a in &r.attributes {
            match a {
                RouteAttribute::Oif(i) => to.oif = *i,
                RouteAttribute::Gateway(RouteAddress::Inet6(g)) => to.gateway = Some(*g),
                _ => {}
            }
        }
        Ok((to.oif != 0).then_some(to))
    }

    /// The link-layer address of neighbour `addr` on interface `oif` if the kernel has a usable
    /// entry for it (reachable, stale, delay, probe, permanent): `ip -6 neigh get`.
    pub fn neighbour(&mut self, oif: u32, addr: Ipv6Addr) -> io::Result<Option<[u8; 6]>> {
        let mut m = NeighbourMessage::default();
        m.header.family = AddressFamily::Inet6;
        m.header.ifindex = oif;
        m.attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::Inet6(
                addr,
            )));
        let reply = match self.request(RouteNetlinkMessage::GetNeighbour(m), 0, || {
            format!("get neighbour {addr} on link {oif}")
        }) {
            Ok(r) => r,
            Err(e) if errno(&e) == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(RouteNetlinkMessage::NewNeighbour(n)) = reply else {
            return Ok(None);
        };
        let usable = matches!(
            n.header.state,
            NeighbourState::Reachable
                | NeighbourState::Stale
                | NeighbourState::Delay
                | NeighbourState::Probe
                | NeighbourState::Permanent
        );
        if !usable {
            return Ok(None);
        }
        Ok(n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::LinkLayerAddress(mac) => <[u8; 6]>::try_from(&mac[..]).ok(),
            _ => None,
        }))
    }

    /// Sends a request and waits for its ACK.
    fn ack(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: impl Fn() -> String,
    ) -> io::Result<()> {
        self.request(msg, flags, what).map(|_| ())
    }

    /// Sends a request and waits for the kernel's ACK or error; returns the reply message with
    /// our sequence number, if any (the answer to a GET).
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: impl Fn() -> String,
    ) -> io::Result<Option<RouteNetlinkMessage>> {
        let mut replies = Vec::new();
        self.exchange(msg, flags, &mut replies, what)?;
        Ok(replies.pop())
    }

    /// Sends a dump request; returns every message of the multipart answer.
    fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
        what: impl Fn() -> String,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let mut replies = Vec::new();
        self.exchange(msg, NLM_F_DUMP, &mut replies, what)?;
        Ok(replies)
    }

    fn exchange(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        replies: &mut Vec<RouteNetlinkMessage>,
        what: impl Fn() -> String,
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        self.tx.clear();
        self.tx.resize(packet.buffer_len(), 0);
        packet.serialize(&mut self.tx);
        self.sock.send_to(&self.tx, &SocketAddr::new(0, 0), 0)?;
        loop {
            let n = self.sock.recv(&mut &mut self.rx[..], 0)?;
            let mut data = &self.rx[..n.min(self.rx.len())];
            while data.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
                if len < NLMSG_HDRLEN || len > data.len() {
                    return Err(io::Error::other(format!("{}: malformed reply", what())));
                }
                let this = &data[..len];
                data = &data[len.next_multiple_of(4).min(data.len())..];
                let seq = u32::from_ne_bytes([this[8], this[9], this[10], this[11]]);
                if seq != self.seq {
                    continue;
                }
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(this)
                    .map_err(|e| io::Error::other(format!("{}: bad reply: {e}", what())))?;
                let reply_flags = reply.header.flags;
                match reply.payload {
                    NetlinkPayload::Error(e) => {
                        let Some(code) = e.code else {
                            return Ok(());
                        };
                        let message = (reply_flags & NLM_F_ACK_TLVS != 0)
                            .then(|| ext_ack_message(e.header.get(NLMSG_HDRLEN..).unwrap_or(&[])))
                            .flatten();
                        let errno = -code.get();
                        let err = NetlinkError {
                            request: what(),
                            errno,
                            message,
                        };
                        return Err(io::Error::new(
                            io::Error::from_raw_os_error(errno).kind(),
                            err,
                        ));
                    }
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    _ => {}
                }
            }
        }
    }
}

/// The text of the `NLMSGERR_ATTR_MSG` attribute among the extended ACK attributes in `b`.
fn ext_ack_message(mut b: &[u8]) -> Option<String> {
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &b[4..len];
            let text = text.split(|&c| c == 0).next().unwrap_or(text);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    None
}

fn family(a: &IpAddr) -> AddressFamily {
    match a {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// A route in `ip route` words, for error messages.
fn describe(verb: &str, r: &Route, seg6: Option<&Seg6Encap>) -> String {
    let mut s = format!("{verb} route {}/{}", r.dst, r.prefix_len);
    if let Some(g) = r.gateway {
        s += &format!(" via {g}");
    }
    if r.oif != 0 {
        s += &format!(" dev #{}", r.oif);
    }
    s += &format!(" table {}", r.table);
    if let Some(b) = r.seg6local {
        s += &format!(" encap seg6local {b:?}");
    }
    if let Some(e) = seg6 {
        s += &format!(" encap seg6 segs {:?}", e.segments);
    }
    s
}

fn route_message(r: &Route, seg6: Option<&Seg6Encap>) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(&r.dst);
    m.header.destination_prefix_length = r.prefix_len;
    m.header.table = u8::try_from(r.table).unwrap_or(RT_TABLE_COMPAT);
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = if r.gateway.is_none() && r.dst.is_ipv4() {
        RouteScope::Link
    } else {
        RouteScope::Universe
    };
    m.header.kind = RouteType::Unicast;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(r.dst)));
    if r.oif != 0 {
        m.attributes.push(RouteAttribute::Oif(r.oif));
    }
    if let Some(gw) = r.gateway {
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    m.attributes.push(RouteAttribute::Table(r.table));
    if let Some(b) = r.seg6local {
        let mut encap = Vec::with_capacity(2);
        let action = match b {
            Seg6Local::End => Seg6LocalAction::End,
            Seg6Local::EndDx6(nh) => {
                encap.push(RouteSeg6LocalTunnel::Nh6(nh));
                Seg6LocalAction::EndDx6
            }
            Seg6Local::EndDt6(t) => {
                encap.push(RouteSeg6LocalTunnel::Table(t));
                Seg6LocalAction::EndDt6
            }
            Seg6Local::EndBpf { prog_fd } => {
                encap.push(RouteSeg6LocalTunnel::Other(end_bpf_attribute(prog_fd)));
                Seg6LocalAction::EndBpf
            }
        };
        encap.insert(0, RouteSeg6LocalTunnel::Action(action));
        m.attributes
            .push(RouteAttribute::EncapType(RouteLwEnCapType::Seg6Local));
        m.attributes.push(RouteAttribute::Encap(
            encap
                .into_iter()
                .map(RouteLwTunnelEncap::Seg6Local)
                .collect(),
        ));
    }
    if let Some(e) = seg6 {
        let mut srh = Seg6Header::default();
        srh.mode = if e.inline {
            Seg6Mode::Inline
        } else {
            Seg6Mode::Encap
        };
        srh.segments = e.segments.clone();
        m.attributes
            .push(RouteAttribute::EncapType(RouteLwEnCapType::Seg6));
        m.attributes
            .push(RouteAttribute::Encap(vec![RouteLwTunnelEncap::Seg6(
                RouteSeg6IpTunnel::Seg6(srh),
            )]));
    }
    m
}

/// The nested `SEG6_LOCAL_BPF` attribute of an End.BPF route, built from the crate's generic
/// attributes.
fn end_bpf_attribute(prog_fd: i32) -> DefaultNla {
    let mut name = END_BPF_NAME.as_bytes().to_vec();
    name.push(0);
    let inner = [
        DefaultNla::new(SEG6_LOCAL_BPF_PROG, prog_fd.to_ne_bytes().to_vec()),
        DefaultNla::new(SEG6_LOCAL_BPF_PROG_NAME, name),
    ];
    let mut value = vec![0; inner.as_slice().buffer_len()];
    inner.as_slice().emit(&mut value);
    DefaultNla::new(SEG6_LOCAL_BPF | NLA_F_NESTED, value)
}

/// A listed unicast route as hirt describes routes, or `None` for other kinds (local,
/// multicast, unreachable...).
fn listed_route(m: &RouteMessage) -> Option<ListedRoute> {
    if m.header.kind != RouteType::Unicast {
        return None;
    }
    let v6 = m.header.address_family == AddressFamily::Inet6;
    let mut route = Route {
        dst: if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        },
        prefix_len: m.header.destination_prefix_length,
        gateway: None,
        oif: 0,
        table: u32::from(m.header.table),
        seg6local: None,
    };
    let mut seg6 = None;
    let mut multipath = Vec::new();
    let mut action = None;
    let (mut nh6, mut table) = (None, None);
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => route.dst = ip(d)?,
            RouteAttribute::Gateway(g) => route.gateway = ip(g),
            RouteAttribute::Oif(i) => route.oif = *i,
            RouteAttribute::Table(t) => route.table = *t,
            RouteAttribute::MultiPath(hops) => multipath = hops.iter().map(listed_hop).collect(),
            RouteAttribute::Encap(encap) => {
                for e in encap {
                    match e {
                        RouteLwTunnelEncap::Seg6Local(RouteSeg6LocalTunnel::Action(a)) => {
                            action = Some(*a)
                        }
                        RouteLwTunnelEncap::Seg6Local(RouteSeg6LocalTunnel::Nh6(n)) => {
                            nh6 = Some(*n)
                        }
                        RouteLwTunnelEncap::Seg6Local(RouteSeg6LocalTunnel::Table(t)) => {
                            table = Some(*t)
                        }
                        RouteLwTunnelEncap::Seg6(RouteSeg6IpTunnel::Seg6(h)) => {
                            seg6 = Some(Seg6Encap {
                                segments: h.segments.clone(),
                                inline: h.mode == Seg6Mode::Inline,
                            })
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    route.seg6local = match (action, nh6, table) {
        (Some(Seg6LocalAction::End), _, _) => Some(Seg6Local::End),
        (Some(Seg6LocalAction::EndDx6), Some(nh), _) => Some(Seg6Local::EndDx6(nh)),
        (Some(Seg6LocalAction::EndDt6), _, Some(t)) => Some(Seg6Local::EndDt6(t)),
        _ => None,
    };
    Some(ListedRoute {
        route,
        seg6,
        multipath,
    })
}

/// A next hop of a listed multipath route as hirt describes them (segments empty when it does
/// not encapsulate).
fn listed_hop(h: &RouteNextHop) -> Seg6NextHop {
    let mut hop = Seg6NextHop {
        segments: Vec::new(),
        gateway: None,
        oif: h.interface_index,
    };
    for a in &h.attributes {
        match a {
            RouteAttribute::Gateway(g) => hop.gateway = ip(g),
            RouteAttribute::Encap(encap) => {
                for e in encap {
                    match e {
                        RouteLwTunnelEncap::Seg6(RouteSeg6IpTunnel::Seg6(srh)) => {
                            hop.segments = srh.segments.clone()
                        }
                        // Inside RTA_MULTIPATH the crate does not know the encapsulation
                        // type (it is given per next hop) and leaves the attribute raw.
                        RouteLwTunnelEncap::Other(nla) if nla.kind() == SEG6_IPTUNNEL_SRH => {
                            let mut value = vec![0; nla.value_len()];
                            nla.emit_value(&mut value);
                            hop.segments = seg6_iptunnel_segments(&value).unwrap_or_default()
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    hop
}

/// The segment list, first segment first, of a raw `struct seg6_iptunnel_encap` (a 32-bit mode,
/// then the routing header, whose list holds the last segment first).
fn seg6_iptunnel_segments(value: &[u8]) -> Option<Vec<Ipv6Addr>> {
    let srh = value.get(4..)?;
    let last_entry = usize::from(*srh.get(4)?);
    (0..=last_entry)
        .rev()
        .map(|i| {
            let at = 8 + 16 * i;
            let b: [u8; 16] = srh.get(at..at + 16)?.try_into().ok()?;
            Some(Ipv6Addr::from(b))
        })
        .collect()
}

/// One `rtnexthop` of a multipath route: gateway, device, `seg6` encapsulation (mode encap).
fn seg6_next_hop(h: &Seg6NextHop) -> RouteNextHop {
    let mut srh = Seg6Header::default();
    srh.mode = Seg6Mode::Encap;
    srh.segments = h.segments.clone();
    let mut hop = RouteNextHop::default();
    hop.interface_index = h.oif;
    hop.attributes.extend(
        h.gateway
            .map(|g| RouteAttribute::Gateway(RouteAddress::from(g))),
    );
    hop.attributes
        .push(RouteAttribute::EncapType(RouteLwEnCapType::Seg6));
    hop.attributes
        .push(RouteAttribute::Encap(vec![RouteLwTunnelEncap::Seg6(
            RouteSeg6IpTunnel::Seg6(srh),
        )]));
    hop
}

fn ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn rule_message(r: &Rule) -> RuleMessage {
    let mut m = RuleMessage::default();
    m.header.family = AddressFamily::from(r.family);
    m.header.table = u8::try_from(r.table).unwrap_or(RT_TABLE_COMPAT);
    m.header.action = RuleAction::ToTable;
    m.attributes.push(RuleAttribute::Iifname(r.iif.clone()));
    m.attributes.push(RuleAttribute::Table(r.table));
    m.attributes.push(RuleAttribute::Priority(r.priority));
    m
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

    /// Installs a rule and remembers it. The same rule already present is taken over: an
    /// instance killed with SIGKILL leaves its rules behind (its routes go with its device), and
    /// the instance restarted in its place owns them from then on.
    pub fn rule(&mut self, nl: &mut Netlink, r: Rule) -> io::Result<()> {
        if self.nl.is_none() {
            self.nl = Some(Netlink::open()?);
        }
        match nl.add_rule(&r) {
            Ok(()) => {}
            Err(e) if errno(&e) == Some(libc::EEXIST) => {
                tracing::info!("taking over the rule iif {} lookup {}", r.iif, r.table);
            }
            Err(e) => return Err(e),
        }
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
                    tracing::warn!("removing rule: {e}");
                }
            }
            while let Some(r) = self.routes.pop() {
                if let Err(e) = nl.del_route(&r) {
                    tracing::warn!("removing route: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{self, NetNs};

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn route(dst: &str, prefix_len: u8, oif: u32, seg6local: Option<Seg6Local>) -> Route {
        Route {
            dst: IpAddr::V6(v6(dst)),
            prefix_len,
            gateway: None,
            oif,
            table: 254,
            seg6local,
        }
    }

    /// Plain, `seg6` and `seg6local` (End, End.DX6, End.DT6) routes installed through netlink
    /// read back the same through netlink and through `ip -6 route show`, and go away again.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn seg6_routes_match_ip_route() {
        if !netns::available() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("hnl")).unwrap();
        veth_pair_up(&ns);
        ns.ip(&["-6", "addr", "add", "fd00::1/64", "dev", "d0", "nodad"])
            .unwrap();
        let listed = ns
            .spawn(|| {
                let oif = if_index("d0")?;
                let mut nl = Netlink::open()?;
                let mut plain = route("fc00:1::", 64, oif, None);
                plain.gateway = Some(IpAddr::V6(v6("fd00::2")));
                let encap = route("fc00:2::", 64, oif, None);
                let segs = Seg6Encap {
                    segments: vec![v6("fc00:a::1"), v6("fc00:b::1")],
                    inline: false,
                };
                let behaviours = [
                    route("fc00:3::1", 128, oif, Some(Seg6Local::End)),
                    route(
                        "fc00:3::2",
                        128,
                        oif,
                        Some(Seg6Local::EndDx6(v6("fd00::2"))),
                    ),
                    route("fc00:3::3", 128, oif, Some(Seg6Local::EndDt6(100))),
                ];
                nl.add_route(&plain, false)?;
                nl.add_seg6_route(&encap, &segs, false)?;
                for r in &behaviours {
                    nl.add_route(r, false)?;
                }
                let shown = ip_route_show()?;
                let listed = nl.routes(libc::AF_INET6 as u8, 254)?;
                let find = |r: &Route| {
                    listed
                        .iter()
                        .find(|l| l.route.dst == r.dst && l.route.prefix_len == r.prefix_len)
                        .cloned()
                };
                assert_eq!(find(&plain).map(|l| l.route), Some(plain.clone()));
                assert_eq!(
                    find(&encap),
                    Some(ListedRoute {
                        route: encap.clone(),
                        seg6: Some(segs.clone()),
                        multipath: Vec::new(),
                    })
                );
                for r in &behaviours {
                    assert_eq!(find(r).map(|l| l.route).as_ref(), Some(r));
                }
                nl.del_route(&plain)?;
                nl.del_route(&encap)?;
                for r in &behaviours {
                    nl.del_route(r)?;
                }
                Ok((shown, ip_route_show()?))
            })
            .join()
            .unwrap();
        let (shown, after) = listed.unwrap();
        for want in [
            "fc00:1::/64 via fd00::2 dev d0 proto static",
            "fc00:2::/64  encap seg6 mode encap segs 2 [ fc00:a::1 fc00:b::1 ] dev d0 proto static",
            "fc00:3::1  encap seg6local action End dev d0 proto static",
            "fc00:3::2  encap seg6local action End.DX6 nh6 fd00::2 dev d0 proto static",
            "fc00:3::3  encap seg6local action End.DT6 table 100 dev d0 proto static",
        ] {
            assert!(shown.contains(want), "{want:?} not in\n{shown}");
        }
        assert!(!after.contains("fc00:"), "routes left behind:\n{after}");
    }

    /// A multipath route whose next hops each encapsulate with their own segment list is
    /// installed, shrunk to one next hop and grown back by replacing it, reads back through
    /// netlink as it was written, and shows in `ip -6 route` as `ip` would have made it.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn seg6_multipath_route_is_replaced_in_place() {
        if !netns::available() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("hnm")).unwrap();
        veth_pair_up(&ns);
        ns.ip(&["link", "add", "e0", "type", "veth", "peer", "name", "e1"])
            .unwrap();
        ns.ip(&["link", "set", "e0", "up"]).unwrap();
        ns.ip(&["link", "set", "e1", "up"]).unwrap();
        ns.ip(&["-6", "addr", "add", "fd00::1/64", "dev", "d0", "nodad"])
            .unwrap();
        ns.ip(&["-6", "addr", "add", "fd01::1/64", "dev", "e0", "nodad"])
            .unwrap();
        let (shown_two, shown_one, listed_two, listed_one) = ns
            .spawn(|| {
                let hops = [
                    Seg6NextHop {
                        segments: vec![v6("fc00:e1::1"), v6("fc00:d1::1")],
                        gateway: Some(IpAddr::V6(v6("fd00::2"))),
                        oif: if_index("d0")?,
                    },
                    Seg6NextHop {
                        segments: vec![v6("fc00:e2::1"), v6("fc00:d2::1")],
                        gateway: Some(IpAddr::V6(v6("fd01::2"))),
                        oif: if_index("e0")?,
                    },
                ];
                let dst = IpAddr::V6(v6("2001:db8:9::"));
                let mut nl = Netlink::open()?;
                let find = |nl: &mut Netlink| -> io::Result<Option<ListedRoute>> {
                    Ok(nl
                        .routes(libc::AF_INET6 as u8, 254)?
                        .into_iter()
                        .find(|l| l.route.dst == dst))
                };
                nl.replace_seg6_multipath(dst, 64, 254, &hops)?;
                let (shown_two, listed_two) = (ip_route_show()?, find(&mut nl)?);
                nl.replace_seg6_multipath(dst, 64, 254, &hops[1..])?;
                let (shown_one, listed_one) = (ip_route_show()?, find(&mut nl)?);
                nl.replace_seg6_multipath(dst, 64, 254, &hops)?;
                assert_eq!(find(&mut nl)?.map(|l| l.multipath), Some(hops.to_vec()));
                assert!(nl.replace_seg6_multipath(dst, 64, 254, &[]).is_err());
                Ok((shown_two, shown_one, listed_two, listed_one))
            })
            .join()
            .unwrap()
            .unwrap();
        let listed_two = listed_two.expect("the multipath route is listed");
        assert_eq!(listed_two.multipath.len(), 2, "{listed_two:?}");
        assert_eq!(
            listed_two.multipath[0].segments,
            vec![v6("fc00:e1::1"), v6("fc00:d1::1")]
        );
        for want in [
            "nexthop  encap seg6 mode encap segs 2 [ fc00:e1::1 fc00:d1::1 ] via fd00::2 dev d0 weight 1",
            "nexthop  encap seg6 mode encap segs 2 [ fc00:e2::1 fc00:d2::1 ] via fd01::2 dev e0 weight 1",
        ] {
            assert!(shown_two.contains(want), "{want:?} not in\n{shown_two}");
        }
        // One next hop left: the kernel keeps it as a plain route with that encapsulation.
        let one = listed_one.expect("still routed");
        assert_eq!(
            one.seg6.map(|e| e.segments),
            Some(vec![v6("fc00:e2::1"), v6("fc00:d2::1")]),
            "{shown_one}"
        );
        assert!(!shown_one.contains("fc00:e1::1"), "{shown_one}");
    }

    /// A rule left behind by an instance that could not clean up (SIGKILL) is taken over by the
    /// next one, which removes it when it stops.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn installed_rules_take_over_a_stale_one() {
        if !netns::available() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("hnr")).unwrap();
        let rules = ns
            .spawn(|| {
                let rule = Rule {
                    family: libc::AF_INET6 as u8,
                    iif: "hirt0x".into(),
                    table: 4869,
                    priority: 1000,
                };
                let mut nl = Netlink::open()?;
                nl.add_rule(&rule)?;
                let mut installed = Installed::default();
                installed.rule(&mut nl, rule.clone())?;
                drop(installed);
                let out = std::process::Command::new("ip")
                    .args(["-6", "rule", "show"])
                    .output()?;
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .join()
            .unwrap()
            .unwrap();
        assert!(!rules.contains("hirt0x"), "removed on stop:\n{rules}");
    }

    /// A link `d0` that is up (its peer `d1` up too, so it has a carrier).
    fn veth_pair_up(ns: &NetNs) {
        ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
            .unwrap();
        ns.ip(&["link", "set", "d0", "up"]).unwrap();
        ns.ip(&["link", "set", "d1", "up"]).unwrap();
    }

    /// Loads the smallest `BPF_PROG_TYPE_LWT_SEG6LOCAL` program (`return BPF_OK`).
    fn load_seg6local_prog() -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        const BPF_PROG_LOAD: libc::c_long = 5;
        const BPF_PROG_TYPE_LWT_SEG6LOCAL: u32 = 19;
        // r0 = 0 (BPF_OK); exit.
        let insns: [u64; 2] = [
            u64::from_le_bytes([0xb7, 0, 0, 0, 0, 0, 0, 0]),
            u64::from_le_bytes([0x95, 0, 0, 0, 0, 0, 0, 0]),
        ];
        let license = b"GPL\0";
        // bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns, license (the rest zero).
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&BPF_PROG_TYPE_LWT_SEG6LOCAL.to_ne_bytes());
        attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
        attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
        // SAFETY: `attr` is a valid bpf_attr for BPF_PROG_LOAD whose pointers (instructions,
        // license) outlive the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_LOAD,
                attr.as_mut_ptr(),
                attr.len() as u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
    }

    /// End.BPF, whose program attribute is built from generic attributes, installs a route the
    /// kernel shows as `ip` does.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn end_bpf_route_matches_ip_route() {
        use std::os::fd::AsRawFd;
        if !netns::available() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("hnb")).unwrap();
        veth_pair_up(&ns);
        let shown = ns
            .spawn(|| {
                let prog = load_seg6local_prog()?;
                let mut nl = Netlink::open()?;
                let r = route(
                    "fc00:4::1",
                    128,
                    if_index("d0")?,
                    Some(Seg6Local::EndBpf {
                        prog_fd: prog.as_raw_fd(),
                    }),
                );
                nl.add_route(&r, false)?;
                let shown = ip_route_show()?;
                nl.del_route(&r)?;
                Ok(shown)
            })
            .join()
            .unwrap()
            .unwrap();
        assert!(
            shown.contains("fc00:4::1  encap seg6local action End.BPF endpoint hirt"),
            "{shown}"
        );
    }

    fn ip_route_show() -> io::Result<String> {
        let out = std::process::Command::new("ip")
            .args(["-6", "route", "show"])
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A refused request says what was asked and why, and keeps its error number.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn kernel_errors_name_the_request() {
        if !netns::available() {
            eprintln!("skipped: needs root");
            return;
        }
        let ns = NetNs::new(&netns::unique_name("hne")).unwrap();
        veth_pair_up(&ns);
        ns.spawn(|| {
            let oif = if_index("d0")?;
            let mut nl = Netlink::open()?;
            let r = route("fc00:5::", 64, oif, None);
            nl.add_route(&r, false)?;
            let e = nl.add_route(&r, false).unwrap_err();
            assert_eq!(errno(&e), Some(libc::EEXIST), "{e}");
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
            let text = e.to_string();
            assert!(
                text.starts_with("add route fc00:5::/64 dev #") && text.contains("File exists"),
                "{text}"
            );
            nl.add_route(&r, true)?;
            let e = nl
                .add_route(&route("fc00:6::", 64, 9999, None), false)
                .unwrap_err();
            assert_eq!(errno(&e), Some(libc::ENODEV), "{e}");
            let e = nl.link_up(oif, Some(10)).unwrap_err();
            assert_eq!(errno(&e), Some(libc::EINVAL), "{e}");
            let Some(n) = e.get_ref().and_then(|i| i.downcast_ref::<NetlinkError>()) else {
                panic!("not a NetlinkError: {e:?}");
            };
            assert!(
                n.message.as_deref().is_some_and(|m| m.contains("mtu")),
                "the kernel's extended ACK explains an MTU it refuses: {e}"
            );
            nl.del_route(&r)?;
            let e = nl.del_route(&r).unwrap_err();
            assert_eq!(errno(&e), Some(libc::ESRCH), "{e}");
            Ok(())
        })
        .join()
        .unwrap()
        .unwrap();
    }

    #[test]
    fn ext_ack_message_is_found_among_attributes() {
        let mut b = Vec::new();
        // NLMSGERR_ATTR_OFFS (2) first, then the message with its NUL and padding.
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&20u32.to_ne_bytes());
        b.extend_from_slice(&10u16.to_ne_bytes());
        b.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        b.extend_from_slice(b"bad\0\0\0\0\0");
        assert_eq!(ext_ack_message(&b).as_deref(), Some("bad"));
        assert_eq!(ext_ack_message(&b[..8]), None);
        assert_eq!(ext_ack_message(&[1, 0]), None);
    }
}
