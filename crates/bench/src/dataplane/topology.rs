//! The bench's path: namespaces, veths, addresses and routes.
//!
//! ```text
//!  xdp: sender c --> encoder e [hirt] --> router m (loss) --> decoder d [hirt] --> receiver s
//!  tun: sender c --> encoder e [hirt] --(loss)--> decoder d [hirt] --> receiver s
//! ```

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hirt_linux::netns::{self, veth, NetNs};

/// The encoder's SID.
pub const ENC: &str = "fc00:e::1";
/// The decoder's SID.
pub const DEC: &str = "fc00:d::1";
/// The receiver's address.
pub const DST: &str = "2001:db8:9::2";

/// The bench's namespaces and links: sender `c`, encoder `e`, decoder `d`, receiver `s`.
pub struct Topo {
    pub c: NetNs,
    pub e: NetNs,
    pub d: NetNs,
    pub s: NetNs,
    /// The plain router between encoder and decoder (`--xdp` runs).
    pub m: Option<NetNs>,
    /// The encoder's links (from the sender, towards the decoder) and the decoder's (from the
    /// encoder's side, towards the receiver).
    pub e_devs: [String; 2],
    pub d_devs: [String; 2],
    /// Where the loss rule goes: packets the lossy namespace forwards out of this device.
    pub lossy_dev: String,
}

impl Topo {
    /// The namespace that carries the loss rule: the middle router, else the encoder.
    pub fn lossy_ns(&self) -> &NetNs {
        self.m.as_ref().unwrap_or(&self.e)
    }
}

impl Topo {
    /// Routes the sender's traffic to the receiver by kernel forwarding (`through_hirt` false)
    /// or into the SRv6 tunnel: H.Encaps at the sender towards the encoder and decoder SIDs.
    pub fn steer(&self, through_hirt: bool) -> anyhow::Result<()> {
        let _ = self.c.ip(&["-6", "route", "del", "2001:db8:9::/64"]);
        if !through_hirt {
            self.c.ip(&[
                "-6",
                "route",
                "add",
                "2001:db8:9::/64",
                "via",
                "2001:db8:1::2",
            ])?;
            self.e.ip(&[
                "-6",
                "route",
                "replace",
                "2001:db8:9::/64",
                "via",
                "2001:db8:2::2",
            ])?;
        } else {
            let dev = self.c.ip(&["-o", "link", "show"])?;
            let dev = String::from_utf8_lossy(&dev.stdout)
                .lines()
                .filter_map(|l| l.split(": ").nth(1))
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
                .find(|n| n != "lo")
                .context("sender device")?;
            self.c.ip(&[
                "-6",
                "route",
                "add",
                "2001:db8:9::/64",
                "encap",
                "seg6",
                "mode",
                "encap",
                "segs",
                &format!("{ENC},{DEC}"),
                "dev",
                &dev,
            ])?;
            self.c.ip(&[
                "-6",
                "route",
                "replace",
                "fc00::/16",
                "via",
                "2001:db8:1::2",
            ])?;
            let _ = self.e.ip(&["-6", "route", "del", "2001:db8:9::/64"]);
        }
        Ok(())
    }

    /// Sends until a packet reaches the receiver (up to 15 s).
    pub fn warm_up(&self) -> anyhow::Result<()> {
        // Warm-up until a packet arrives: neighbour discovery right after the namespaces are made
        // can lose its first solicitation and stall a hop for a second.
        let warm_rx = self.s.spawn(|| {
            let s = UdpSocket::bind(format!("[{DST}]:9001"))?;
            s.set_read_timeout(Some(Duration::from_secs(15)))?;
            s.recv(&mut [0u8; 64]).map(|_| ())
        });
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let warm_tx = self.c.spawn(move || {
            let s = UdpSocket::bind("[2001:db8:1::1]:0")?;
            for _ in 0..300 {
                if d2.load(Ordering::SeqCst) {
                    break;
                }
                s.send_to(&[0u8; 16], format!("[{DST}]:9001"))?;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        });
        warm_rx
            .join()
            .expect("join")
            .context("nothing crossed the path during warm-up")?;
        done.store(true, Ordering::SeqCst);
        let _ = warm_tx.join();
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }
}

/// Builds the path; `middle`: with a plain router between encoder and decoder.
pub fn topo(middle: bool) -> anyhow::Result<Topo> {
    let base = netns::unique_name("hb");
    let mk = |r: &str| NetNs::new(&format!("{base}{r}"));
    let (c, e, d, s) = (mk("c")?, mk("e")?, mk("d")?, mk("s")?);
    let m = if middle { Some(mk("m")?) } else { None };
    let v: Vec<String> = ["ce", "ec", "ed", "de", "ds", "sd", "em", "me"]
        .iter()
        .map(|x| format!("{base}{x}"))
        .collect();
    veth(&c, &v[0], &e, &v[1])?;
    veth(&d, &v[4], &s, &v[5])?;
    let addr = |ns: &NetNs, dev: &str, a: &str| {
        ns.ip(&["-6", "addr", "add", a, "dev", dev, "nodad"])
            .map(|_| ())
    };
    let r = |ns: &NetNs, args: &str| {
        let a: Vec<&str> = args.split_whitespace().collect();
        ns.ip(&a).map(|_| ())
    };
    // encoder 2001:db8:2::1 -- [middle 2001:db8:2::2 | 2001:db8:3::1] -- 2001:db8:3::2 decoder,
    // or encoder 2001:db8:2::1 -- 2001:db8:2::2 decoder.
    let (e_peer, d_addr, d_peer) = match &m {
        Some(m) => {
            veth(&e, &v[2], m, &v[7])?;
            veth(m, &v[6], &d, &v[3])?;
            addr(m, &v[7], "2001:db8:2::2/64")?;
            addr(m, &v[6], "2001:db8:3::1/64")?;
            m.sysctl("net.ipv6.conf.all.forwarding", "1")?;
            for dev in [&v[6], &v[7]] {
                m.ip(&["link", "set", dev, "mtu", "1600"])?;
            }
            r(m, "-6 route add 2001:db8:1::/64 via 2001:db8:2::1")?;
            r(m, "-6 route add fc00:e::/64 via 2001:db8:2::1")?;
            r(m, "-6 route add default via 2001:db8:3::2")?;
            ("2001:db8:2::2", "2001:db8:3::2/64", "2001:db8:3::1")
        }
        None => {
            veth(&e, &v[2], &d, &v[3])?;
            ("2001:db8:2::2", "2001:db8:2::2/64", "2001:db8:2::1")
        }
    };
    e.ip(&["link", "set", &v[2], "mtu", "1600"])?;
    d.ip(&["link", "set", &v[3], "mtu", "1600"])?;
    addr(&c, &v[0], "2001:db8:1::1/64")?;
    addr(&e, &v[1], "2001:db8:1::2/64")?;
    addr(&e, &v[2], "2001:db8:2::1/64")?;
    addr(&d, &v[3], d_addr)?;
    addr(&d, &v[4], "2001:db8:9::1/64")?;
    addr(&s, &v[5], "2001:db8:9::2/64")?;
    for ns in [&e, &d] {
        ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    }
    r(&c, "-6 route add default via 2001:db8:1::2")?;
    // The ingress's H.Encaps takes its outer source from here; without it the kernel selects
    // a source address for every packet (~4% of the chain's CPU on this path).
    r(&c, "sr tunsrc set 2001:db8:1::1")?;
    r(&e, &format!("-6 route add default via {e_peer}"))?;
    r(&d, &format!("-6 route add 2001:db8:1::/64 via {d_peer}"))?;
    r(&d, &format!("-6 route add fc00:e::/64 via {d_peer}"))?;
    r(&s, "-6 route add default via 2001:db8:9::1")?;
    // Static neighbours would avoid ND delays; one warm-up packet does it as well.
    if middle {
        // Frames the AF_XDP path reads carry no checksum metadata: the sender's must be complete.
        c.disable_offloads(&v[0])?;
    }
    let lossy_dev = if middle { v[6].clone() } else { v[2].clone() };
    Ok(Topo {
        c,
        e,
        d,
        s,
        m,
        e_devs: [v[1].clone(), v[2].clone()],
        d_devs: [v[3].clone(), v[4].clone()],
        lossy_dev,
    })
}

/// Whether this host can run the AF_XDP dataplane: an XDP program and a socket on a veth in a
/// scratch namespace.
pub fn probe_xdp() -> anyhow::Result<()> {
    let a = NetNs::new(&netns::unique_name("hxa"))?;
    let b = NetNs::new(&netns::unique_name("hxb"))?;
    let (ia, ib) = (netns::unique_name("hx"), netns::unique_name("hx"));
    veth(&a, &ia, &b, &ib)?;
    a.spawn(move || {
        let idx = hirt_linux::netlink::if_index(&ia)?;
        let filter = hirt_linux::xdp::SidFilter::attach(idx, &[ENC.parse().expect("sid")], 1)?;
        let sock = hirt_linux::xdp::Xsk::open(idx, 0)?;
        filter.register(0, &sock)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("probe thread panicked"))??;
    Ok(())
}
