//! The hirt tunnel between the two end namespaces, run as child processes of this very binary
//! (`hirt udp` / `hirt srv6`, see `crates/linux`).

use clap::ValueEnum;

use crate::report::FecStats;
use crate::topo::Topology;

/// Tunnel mode of the FEC run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TunnelMode {
    /// SRv6: kernel H.Encaps at the ingress, hirt encoder and decoder SIDs.
    Srv6,
    /// UDP tunnel between two TUN interfaces.
    Udp,
}

/// A running tunnel; stopped (children killed, routes restored) on drop.
pub struct Tunnel {
    pids: Vec<u32>,
}

impl Tunnel {
    /// Starts both ends and routes application traffic into the tunnel.
    pub fn start(_topo: &Topology, mode: TunnelMode, _extra: Option<&str>) -> anyhow::Result<Tunnel> {
        anyhow::bail!("the {mode:?} dataplane is not wired yet")
    }

    /// FEC counters of both ends.
    pub fn stats(&self) -> FecStats {
        FecStats::default()
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        for p in &self.pids {
            crate::netns::stop(*p);
        }
    }
}
