//! What the scenarios of several paths share (`--scenario outage|inversion|bond`): two underlay
//! paths between the client and the server, each through its own emulator in the link
//! namespace, and a two-path tunnel whose ends run in this process (`--threads 1`):
//! - `--tunnel udp`: `hirt_linux::udp::start`, the client with one `--path` per underlay path;
//! - `--tunnel srv6`: an encoder and a decoder per end (`hirt_linux::srv6_run::start`), each
//!   encoder with one segment list per underlay path ([`crate::dual_srv6`]).
//!
//! The network ([`DualNet`]) lives for the whole scenario; a tunnel ([`DualTunnel`]) can be
//! started several times over it (one per policy compared), each with fresh keys.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hirt_core::path::PathManagerConfig;
use hirt_linux::config::{UdpConfig, UdpPathConfig, UdpRole};
use hirt_linux::metrics::{Metrics, PathsStatus};
use hirt_linux::udp::{self, UdpHandle};

use crate::dual_srv6::Srv6Ends;
use crate::emu::core::DirectionConfig;
use crate::emu::Emulator;
use crate::netns;
use crate::topo::{Topology, UnderlayPath};
use crate::tunnel::TunnelMode;

/// The server's address inside the tunnel.
pub const TUN_SERVER: &str = "10.98.0.1";
/// The client's address inside the tunnel.
pub const TUN_CLIENT: &str = "10.98.0.2";

/// The links of one underlay path: (client -> server, server -> client).
pub type PathLinks = (DirectionConfig, DirectionConfig);

/// The lab's namespaces with two underlay paths and their emulators. Tears down on drop.
pub struct DualNet {
    /// Client, link and server namespaces.
    pub topo: Topology,
    /// Underlay path 0 and 1.
    pub paths: [UnderlayPath; 2],
    /// The emulator of each path (uplink a->b, downlink b->a).
    pub emus: [Emulator; 2],
    _teardown: netns::Teardown,
}

impl DualNet {
    /// Builds the namespaces (root only), both paths and their emulators.
    pub fn build(links: [&PathLinks; 2]) -> anyhow::Result<Self> {
        if !crate::sys::is_root() {
            bail!("hirt lab builds network namespaces and needs root (run it with sudo)");
        }
        netns::install_signal_handler();
        netns::remove_stale();
        let teardown = netns::Teardown;
        let topo = Topology::build().context("building the lab topology")?;
        let p0 = UnderlayPath::of(0);
        let p1 = topo.add_path(1).context("adding underlay path 1")?;
        let emu = |p: &UnderlayPath, (up, down): &PathLinks| {
            Emulator::start(Some(&topo.link), &p.link_a, &p.link_b, up, down)
        };
        let emus = [emu(&p0, links[0])?, emu(&p1, links[1])?];
        Ok(DualNet {
            topo,
            paths: [p0, p1],
            emus,
            _teardown: teardown,
        })
    }

    /// The control socket of the tunnel end in namespace `ns`.
    pub fn control_socket(ns: &str) -> PathBuf {
        PathBuf::from(format!("/run/hirt-{ns}.sock"))
    }
}

/// Both ends of a two-path tunnel over a [`DualNet`].
pub struct DualTunnel {
    ends: Ends,
}

enum Ends {
    Udp {
        server: UdpHandle,
        client: UdpHandle,
        keys: [PathBuf; 2],
    },
    Srv6(Srv6Ends),
}

impl DualTunnel {
    /// Starts the server and the client in `mode` with path configuration `paths` on both ends.
    pub fn start(
        net: &DualNet,
        mode: TunnelMode,
        seed: u64,
        paths: PathManagerConfig,
    ) -> anyhow::Result<Self> {
        Self::start_on(net, mode, seed, paths, 2)
    }

    /// [`DualTunnel::start`] with the client on the first `used` underlay paths only (1: a
    /// single-path tunnel over path 0).
    pub fn start_on(
        net: &DualNet,
        mode: TunnelMode,
        seed: u64,
        paths: PathManagerConfig,
        used: usize,
    ) -> anyhow::Result<Self> {
        let ends = match mode {
            TunnelMode::Udp => start_udp(net, seed, paths, used)?,
            TunnelMode::Srv6 => Ends::Srv6(Srv6Ends::start(net, seed, paths, used)?),
        };
        Ok(DualTunnel { ends })
    }

    /// The counters of the client's sending end (its path manager's among them).
    pub fn client_metrics(&self) -> &Metrics {
        match &self.ends {
            Ends::Udp { client, .. } => &client.metrics,
            Ends::Srv6(s) => &s.client_enc.metrics,
        }
    }

    /// The counters of the server's sending end.
    pub fn server_metrics(&self) -> &Metrics {
        match &self.ends {
            Ends::Udp { server, .. } => &server.metrics,
            Ends::Srv6(s) => &s.server_enc.metrics,
        }
    }

    /// The server's address through the tunnel (what the client's workloads connect to).
    pub fn server_addr(&self) -> IpAddr {
        match self.ends {
            Ends::Udp { .. } => TUN_SERVER.parse().expect("a valid address"),
            Ends::Srv6(_) => Topology::server_app(true),
        }
    }

    /// The client's address through the tunnel (what its workloads bind to).
    pub fn client_addr(&self) -> IpAddr {
        match self.ends {
            Ends::Udp { .. } => TUN_CLIENT.parse().expect("a valid address"),
            Ends::Srv6(_) => Topology::client_app(true),
        }
    }

    /// The client's paths as it last published them.
    pub fn client_paths(&self) -> PathsStatus {
        self.client_metrics().paths_status()
    }

    /// The server's paths as it last published them.
    pub fn server_paths(&self) -> PathsStatus {
        self.server_metrics().paths_status()
    }

    /// Waits (up to `limit`) until the client has both paths up and measured.
    pub fn wait_paths_up(&self, limit: Duration) -> anyhow::Result<()> {
        self.wait_up(limit, 2)
    }

    /// Waits (up to `limit`) until the client has `n` paths up and measured; with one path,
    /// until the UDP session is up (a single-path tunnel has no path manager; an SRv6 one has
    /// no session and carries traffic once started).
    pub fn wait_up(&self, limit: Duration, n: usize) -> anyhow::Result<()> {
        if n < 2 {
            if let Ends::Udp { client, .. } = &self.ends {
                let sessions = client.sessions();
                if !wait_for(limit, || sessions.with(|h| h.sending().is_some())) {
                    bail!("the tunnel's session did not come up");
                }
            }
            return Ok(());
        }
        let ready = wait_for(limit, || {
            let s = self.client_paths();
            s.paths.len() == n && s.paths.iter().all(|p| p.srtt_ms > 0.0 && p.state == "up")
        });
        if !ready {
            bail!(
                "the tunnel's paths did not come up: {:?}",
                self.client_paths()
            );
        }
        Ok(())
    }

    /// Stops both ends (and removes the key files, or the SRv6 routes).
    pub fn stop(self) {
        match self.ends {
            Ends::Udp {
                server,
                client,
                keys,
            } => {
                client.stop();
                server.stop();
                remove_keys(&keys);
            }
            Ends::Srv6(s) => s.stop(),
        }
    }
}

/// The UDP ends: the server, and the client with one `--path` per underlay path used.
fn start_udp(
    net: &DualNet,
    seed: u64,
    paths: PathManagerConfig,
    used: usize,
) -> anyhow::Result<Ends> {
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let server_key = tmp.join(format!("hirt-dual-{pid}-server.key"));
    let client_key = tmp.join(format!("hirt-dual-{pid}-client.key"));
    let server_pub = udp::keys::write_new_private_key(&server_key)?;
    let client_pub = udp::keys::write_new_private_key(&client_key)?;
    let topo = &net.topo;
    let base = UdpConfig {
        fec: "ours".into(),
        dev: "hirt0".into(),
        threads: 1,
        keepalive_ms: 200,
        seed: Some(seed),
        paths,
        // The path scenarios measure the path manager under rate-driven repairs only.
        deadline: None,
        ..Default::default()
    };
    let server_cfg = UdpConfig {
        role: Some(UdpRole::Server),
        listen: Some("0.0.0.0:4096".into()),
        tun_addr: Some(format!("{TUN_SERVER}/24")),
        private_key_file: Some(server_key.clone()),
        peer_public_key: Some(client_pub),
        control: Some(DualNet::control_socket(&topo.server)),
        ..base.clone()
    };
    let client_cfg = UdpConfig {
        role: Some(UdpRole::Client),
        tun_addr: Some(format!("{TUN_CLIENT}/24")),
        private_key_file: Some(client_key.clone()),
        peer_public_key: Some(server_pub),
        control: Some(DualNet::control_socket(&topo.client)),
        path: net
            .paths
            .iter()
            .take(used)
            .map(|p| UdpPathConfig {
                local: Some(p.client4.clone()),
                dev: None,
                remote: Some(format!("{}:4096", p.server4)),
            })
            .collect(),
        ..base
    };
    let start = |ns: &str, cfg: UdpConfig| -> anyhow::Result<UdpHandle> {
        netns::join(netns::in_ns(ns, move || udp::start(cfg)))
    };
    let keys = [server_key, client_key];
    let started =
        start(&topo.server, server_cfg).and_then(|server| match start(&topo.client, client_cfg) {
            Ok(client) => Ok((server, client)),
            Err(e) => {
                server.stop();
                Err(e)
            }
        });
    match started {
        Ok((server, client)) => Ok(Ends::Udp {
            server,
            client,
            keys,
        }),
        Err(e) => {
            remove_keys(&keys);
            Err(e)
        }
    }
}

fn remove_keys(keys: &[PathBuf]) {
    for k in keys {
        let _ = std::fs::remove_file(k);
    }
}

/// Sources an end has sent on each of the two paths so far, from its published status.
pub fn sources(s: &PathsStatus) -> [u64; 2] {
    let mut n = [0; 2];
    for p in &s.paths {
        if let Some(slot) = n.get_mut(usize::from(p.path)) {
            *slot = p.sources;
        }
    }
    n
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// The `p`-th percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Sorted copy of `v`.
pub fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = sorted(&[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 90.0), Some(5.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
