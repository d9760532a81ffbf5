//! The SRv6 ends of a two-path tunnel over a [`DualNet`] (`--tunnel srv6` of the scenarios of
//! several paths). Each end namespace runs an encoder (for what it sends) and a decoder (for
//! what it receives), as in the lab's single-path SRv6 tunnel ([`crate::tunnel`]), here in this
//! process (`hirt_linux::srv6_run::start`, `--threads 1`).
//!
//! An encoder's path `k` goes through a middle SID of the peer's namespace reached over underlay
//! path `k`: the client's encoder sends `SRH[DEC_B, fd00:b::f<k>]`, the server's
//! `SRH[DEC_A, fd00:a::f<k>]`. A middle SID is an End.T whose table (`200 + k`) holds the end's
//! own decoder SID and the peer's SIDs over path `k`: a source or a probe goes on to the decoder,
//! and a probe's reply (the probe's list reversed, `SRH[ENC, middle]`, written by the decoder
//! on its own host) goes back over the path it measures. FEC feedback takes the main table's
//! route to the peer's encoder SID: over path 1 when both paths are used (docs/paths.md: not
//! over the path most likely to fail, here the one the outage scenario silences), over path 0
//! in a single-path tunnel.
//!
//! ```text
//!  client ns                      path 0 (emulator)                      server ns
//!  ENC_A fd00:a::e  --SRH[DEC_B, fd00:b::f0]-->  End.T fd00:b::f0 (table 200) --> DEC_B fd00:b::d
//!  DEC_A fd00:a::d  <--  End.T fd00:a::f0 (table 200)  <--SRH[DEC_A, fd00:a::f0]--  ENC_B fd00:b::e
//!                                 path 1: f1, table 201
//! ```

use std::net::Ipv6Addr;

use anyhow::Context;
use hirt_core::path::PathManagerConfig;
use hirt_linux::config::{Srv6Config, Srv6PathConfig};
use hirt_linux::srv6_run::{self, Srv6Handle};

use crate::dual::DualNet;
use crate::netns::{self, ip};
use crate::topo::{self, UnderlayPath};
use crate::tunnel::{DEC_A, DEC_B, ENC_A, ENC_B};

/// Routing table of path `k`'s middle SID at each end.
const PATH_TABLE_BASE: u32 = 200;

/// One end namespace's view of the tunnel.
struct EndSpec<'a> {
    ns: &'a str,
    /// `a` (client) or `b` (server): names the TUN devices as the single-path tunnel does.
    side: char,
    enc: &'static str,
    dec: &'static str,
    peer_enc: &'static str,
    peer_dec: &'static str,
    /// The peer's SIDs (/64), routed over path 0 in the main table.
    peer_prefix: &'static str,
    /// The application address of the peer.
    peer_app: &'static str,
}

impl EndSpec<'_> {
    /// This end's middle SID of path `k` (visited by the peer's encoder).
    fn middle(&self, k: u8) -> String {
        format!("fd00:{}::f{k}", self.side)
    }

    /// The peer's middle SID of path `k` (visited by this end's encoder).
    fn peer_middle(&self, k: u8) -> String {
        let peer = if self.side == 'a' { 'b' } else { 'a' };
        format!("fd00:{peer}::f{k}")
    }

    /// (own address, peer's address) on underlay path `p`, seen from this end.
    fn addrs<'p>(&self, p: &'p UnderlayPath) -> (&'p str, &'p str) {
        if self.side == 'a' {
            (&p.client_dev, &p.server6)
        } else {
            (&p.server_dev, &p.client6)
        }
    }
}

/// The four instances of a two-path (or, with one path used, single-path) SRv6 tunnel.
pub struct Srv6Ends {
    /// The client's encoder (its path manager steers what the client sends).
    pub client_enc: Srv6Handle,
    /// The server's encoder.
    pub server_enc: Srv6Handle,
    decoders: Vec<Srv6Handle>,
    topo: topo::Topology,
}

impl Srv6Ends {
    /// Starts both ends over `net`: decoders first, then the middle SIDs, then the encoders
    /// (with one path per underlay path when `used` is 2, none when it is 1: path 0 by the
    /// main table), then the H.Encaps routes of the application addresses.
    pub fn start(
        net: &DualNet,
        seed: u64,
        paths: PathManagerConfig,
        used: usize,
    ) -> anyhow::Result<Self> {
        let topo = &net.topo;
        let ends = [
            EndSpec {
                ns: &topo.client,
                side: 'a',
                enc: ENC_A,
                dec: DEC_A,
                peer_enc: ENC_B,
                peer_dec: DEC_B,
                peer_prefix: "fd00:b::/64",
                peer_app: topo::APP_B6,
            },
            EndSpec {
                ns: &topo.server,
                side: 'b',
                enc: ENC_B,
                dec: DEC_B,
                peer_enc: ENC_A,
                peer_dec: DEC_A,
                peer_prefix: "fd00:a::/64",
                peer_app: topo::APP_A6,
            },
        ];
        let mut decoders = Vec::new();
        let mut encoders = Vec::new();
        let started = (|| -> anyhow::Result<()> {
            for e in &ends {
                let (_, peer0) = e.addrs(&net.paths[0]);
                route6(e.ns, &format!("{} via {peer0}", e.peer_prefix))?;
                decoders.push(start_in(e.ns, instance(e, "decoder", seed, &paths, 0))?);
            }
            if used > 1 {
                for e in &ends {
                    route_middles(e, &net.paths)?;
                    let (dev1, peer1) = e.addrs(&net.paths[1]);
                    route6(e.ns, &format!("{}/128 via {peer1} dev {dev1}", e.peer_enc))
                        .context("the route of FEC feedback")?;
                }
            } else {
                for e in &ends {
                    // A two-path tunnel started earlier may have left its feedback route.
                    let _ = ip(
                        e.ns,
                        &["-6", "route", "del", &format!("{}/128", e.peer_enc)],
                    );
                }
            }
            for e in &ends {
                encoders.push(start_in(e.ns, instance(e, "encoder", seed, &paths, used))?);
            }
            for e in &ends {
                // The encoder's device, not an underlay one: a silent outage drops what leaves
                // by the path's device, and the tunnel must not lose the application's packets
                // to it before they are encapsulated.
                route6(
                    e.ns,
                    &format!(
                        "{} encap seg6 mode encap segs {},{} dev hse{} mtu {}",
                        e.peer_app,
                        e.enc,
                        e.peer_dec,
                        e.side,
                        topo::APP_MTU
                    ),
                )
                .with_context(|| format!("H.Encaps route to {}", e.peer_app))?;
            }
            Ok(())
        })();
        if let Err(e) = started {
            for h in encoders.into_iter().chain(decoders) {
                h.stop();
            }
            let _ = topo.route_plain();
            return Err(e);
        }
        let mut encoders = encoders.into_iter();
        let (Some(client_enc), Some(server_enc)) = (encoders.next(), encoders.next()) else {
            unreachable!("both encoders started");
        };
        Ok(Srv6Ends {
            client_enc,
            server_enc,
            decoders,
            topo: topo.clone(),
        })
    }

    /// Stops the four instances and routes application traffic over the underlay again.
    pub fn stop(self) {
        self.client_enc.stop();
        self.server_enc.stop();
        for d in self.decoders {
            d.stop();
        }
        let _ = self.topo.route_plain();
    }
}

/// The configuration of one instance (`role` encoder or decoder) of end `e`.
fn instance(
    e: &EndSpec<'_>,
    role: &str,
    seed: u64,
    paths: &PathManagerConfig,
    used: usize,
) -> Srv6Config {
    let encoder = role == "encoder";
    let sid = |s: &str| s.parse::<Ipv6Addr>().ok();
    let (enc_sid, dec_sid, dev) = if encoder {
        (sid(e.enc), sid(e.peer_dec), format!("hse{}", e.side))
    } else {
        (sid(e.peer_enc), sid(e.dec), format!("hsd{}", e.side))
    };
    let control = if encoder {
        DualNet::control_socket(e.ns)
    } else {
        std::path::PathBuf::from(format!("/run/hirt-{}-decoder.sock", e.ns))
    };
    Srv6Config {
        role: role.parse().expect("a known role"),
        enc_sid,
        dec_sid,
        behavior: "dt6".parse().expect("a known behaviour"),
        dev,
        fec: "ours".into(),
        threads: 1,
        control: Some(control),
        seed: Some(seed),
        path: if encoder && used > 1 {
            (0..used as u8)
                .map(|k| Srv6PathConfig {
                    sids: vec![e.peer_middle(k).parse().expect("a valid SID")],
                })
                .collect()
        } else {
            Vec::new()
        },
        paths: paths.clone(),
        ..Default::default()
    }
}

/// Installs end `e`'s middle SIDs: path `k`'s End.T and its table (own decoder SID on the
/// decoder's device, the peer's SIDs over path `k`).
fn route_middles(e: &EndSpec<'_>, paths: &[UnderlayPath]) -> anyhow::Result<()> {
    for p in paths {
        let table = (PATH_TABLE_BASE + u32::from(p.index)).to_string();
        let (dev, peer) = e.addrs(p);
        ip(e.ns, &["-6", "route", "flush", "table", &table]).ok();
        route6(
            e.ns,
            &format!("{}/128 dev hsd{} table {table}", e.dec, e.side),
        )?;
        route6(
            e.ns,
            &format!("{} via {peer} dev {dev} table {table}", e.peer_prefix),
        )?;
        route6(
            e.ns,
            &format!(
                "{}/128 encap seg6local action End.T table {table} dev {dev}",
                e.middle(p.index)
            ),
        )
        .context("End.T route of a middle SID")?;
        // The peer's middle SID of this path is reached over this path.
        route6(
            e.ns,
            &format!("{}/128 via {peer} dev {dev}", e.peer_middle(p.index)),
        )?;
    }
    Ok(())
}

/// `ip -6 route replace SPEC` in namespace `ns` (`SPEC` split at spaces).
fn route6(ns: &str, spec: &str) -> anyhow::Result<()> {
    let mut args = vec!["-6", "route", "replace"];
    args.extend(spec.split_whitespace());
    ip(ns, &args)
}

fn start_in(ns: &str, cfg: Srv6Config) -> anyhow::Result<Srv6Handle> {
    let role = format!("{:?}", cfg.role);
    netns::join(netns::in_ns(ns, move || srv6_run::start(cfg)))
        .with_context(|| format!("starting the SRv6 {role} in {ns}"))
}
