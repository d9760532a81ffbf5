//! Losses inside the hosts of a lab run: the kernel counters of the two end namespaces.
//!
//! The emulator counts what its loss model and its queue drop. A packet can also be lost before
//! or after the link, inside the end hosts — a full UDP socket buffer of the tunnel
//! (`Udp: RcvbufErrors`), a full TUN or veth queue (interface `drop` counters), a full per-CPU
//! backlog (`/proc/net/softnet_stat`). Such a loss is invisible to the emulator, and to the FEC
//! decoder it is just a loss (a tunnel packet dropped before the encoder's socket sent it is not
//! even that: it never existed). These counters tell the two apart, so that a lab result says
//! where its unrecoverable losses came from. They are read before and after each run (with
//! `ip netns exec NS cat /proc/net/...`: /proc/net follows the reader's namespace) and reported
//! as differences.

use std::collections::BTreeMap;
use std::process::Command;

use serde::Serialize;

/// Kernel counters of the end namespaces, summed (a difference between two snapshots once
/// [`HostCounters::since`] was applied).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostCounters {
    /// UDP datagrams dropped because a socket's receive buffer was full (`Udp: RcvbufErrors`).
    pub udp_rcvbuf_errors: u64,
    /// UDP datagrams not sent because a socket's send buffer was full (`Udp: SndbufErrors`).
    pub udp_sndbuf_errors: u64,
    /// Packets dropped by interfaces of the end namespaces (rx + tx `drop` of `/proc/net/dev`:
    /// TUN queue overflow, veth drops), per interface.
    pub if_drops: BTreeMap<String, u64>,
    /// Per-CPU backlog drops (`/proc/net/softnet_stat`, column 2: the whole machine, all
    /// namespaces).
    pub backlog_drops: u64,
    /// TCP segments retransmitted by the end hosts (`Tcp: RetransSegs`).
    pub tcp_retrans_segs: u64,
    /// TCP retransmission timeouts (`TcpExt: TCPTimeouts`).
    pub tcp_timeouts: u64,
    /// TCP tail loss probes (`TcpExt: TCPLossProbes`).
    pub tcp_loss_probes: u64,
    /// Congestion-window reductions TCP undid after finding its retransmission spurious
    /// (`TcpExt: TCPDSACKUndo + TCPFullUndo + TCPPartialUndo + TCPLossUndo`): packets the
    /// tunnel recovered after TCP had already retransmitted them.
    pub tcp_undos: u64,
    /// Reordering TCP detected (`TcpExt: TCPSACKReorder + TCPTSReorder`).
    pub tcp_reorder_seen: u64,
}

impl HostCounters {
    /// Reads the counters of `namespaces` now (missing files or fields count as 0: a
    /// diagnostic must not fail a run).
    pub fn snapshot(namespaces: &[&str]) -> HostCounters {
        let mut c = HostCounters {
            backlog_drops: backlog_drops(
                &std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default(),
            ),
            ..Default::default()
        };
        for ns in namespaces {
            let read = |f: &str| {
                Command::new("ip")
                    .args(["netns", "exec", ns, "cat", f])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            let snmp = parse_snmp(&read("/proc/net/snmp"));
            let netstat = parse_snmp(&read("/proc/net/netstat"));
            let g = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
            c.udp_rcvbuf_errors += g(&snmp, "Udp:RcvbufErrors") + g(&snmp, "Udp6:RcvbufErrors");
            c.udp_sndbuf_errors += g(&snmp, "Udp:SndbufErrors") + g(&snmp, "Udp6:SndbufErrors");
            c.tcp_retrans_segs += g(&snmp, "Tcp:RetransSegs");
            c.tcp_timeouts += g(&netstat, "TcpExt:TCPTimeouts");
            c.tcp_loss_probes += g(&netstat, "TcpExt:TCPLossProbes");
            c.tcp_undos += [
                "TCPDSACKUndo",
                "TCPFullUndo",
                "TCPPartialUndo",
                "TCPLossUndo",
            ]
            .iter()
            .map(|k| g(&netstat, &format!("TcpExt:{k}")))
            .sum::<u64>();
            c.tcp_reorder_seen +=
                g(&netstat, "TcpExt:TCPSACKReorder") + g(&netstat, "TcpExt:TCPTSReorder");
            for (dev, d) in parse_dev_drops(&read("/proc/net/dev")) {
                *c.if_drops.entry(format!("{ns}/{dev}")).or_default() += d;
            }
        }
        c
    }

    /// The counts between `before` and `self` (interfaces absent from `before` count from 0).
    pub fn since(&self, before: &HostCounters) -> HostCounters {
        HostCounters {
            udp_rcvbuf_errors: self
                .udp_rcvbuf_errors
                .saturating_sub(before.udp_rcvbuf_errors),
            udp_sndbuf_errors: self
                .udp_sndbuf_errors
                .saturating_sub(before.udp_sndbuf_errors),
            if_drops: self
                .if_drops
                .iter()
                .map(|(k, v)| {
                    let b = before.if_drops.get(k).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(b))
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
            backlog_drops: self.backlog_drops.saturating_sub(before.backlog_drops),
            tcp_retrans_segs: self
                .tcp_retrans_segs
                .saturating_sub(before.tcp_retrans_segs),
            tcp_timeouts: self.tcp_timeouts.saturating_sub(before.tcp_timeouts),
            tcp_loss_probes: self.tcp_loss_probes.saturating_sub(before.tcp_loss_probes),
            tcp_undos: self.tcp_undos.saturating_sub(before.tcp_undos),
            tcp_reorder_seen: self
                .tcp_reorder_seen
                .saturating_sub(before.tcp_reorder_seen),
        }
    }

    /// Packets lost inside the hosts (socket buffers, interface queues, backlogs).
    pub fn host_drops(&self) -> u64 {
        self.udp_rcvbuf_errors
            + self.udp_sndbuf_errors
            + self.if_drops.values().sum::<u64>()
            + self.backlog_drops
    }
}

/// `Proto: Name Name ...` / `Proto: value value ...` line pairs (`/proc/net/snmp`,
/// `/proc/net/netstat`) as `Proto:Name -> value`.
fn parse_snmp(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let mut n = names.split_whitespace();
        let mut v = values.split_whitespace();
        let (Some(proto), Some(proto2)) = (n.next(), v.next()) else {
            continue;
        };
        if proto != proto2 {
            continue;
        }
        for (name, value) in n.zip(v) {
            if let Ok(x) = value.parse::<u64>() {
                out.insert(format!("{proto}{name}"), x);
            }
        }
    }
    out
}

/// Per interface, rx drop + tx drop from `/proc/net/dev`.
fn parse_dev_drops(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (dev, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // rx: bytes packets errs drop ...; tx (from field 8): bytes packets errs drop ...
            Some((dev.trim().to_string(), f.get(3)? + f.get(11)?))
        })
        .collect()
}

/// Sum of the `dropped` column (second, hex) of `/proc/net/softnet_stat`.
fn backlog_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|x| u64::from_str_radix(x, 16).ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_files() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 100 0 7 90 5 2\n";
        let m = parse_snmp(snmp);
        assert_eq!(m["Udp:RcvbufErrors"], 5);
        assert_eq!(m["Udp:SndbufErrors"], 2);
        assert_eq!(m["Ip:DefaultTTL"], 64);
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n\
                   hirt0: 10 1 0 3 0 0 0 0 20 2 0 4 0 0 0 0\n    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(
            parse_dev_drops(dev),
            vec![("hirt0".to_string(), 7), ("lo".to_string(), 0)]
        );
        let softnet = "0000a000 00000010 00000000\n0000b000 00000001 00000000\n";
        assert_eq!(backlog_drops(softnet), 17);
    }

    #[test]
    fn differences_count_new_interfaces_from_zero() {
        let before = HostCounters {
            udp_rcvbuf_errors: 3,
            if_drops: [("a/a0".to_string(), 2)].into(),
            ..Default::default()
        };
        let after = HostCounters {
            udp_rcvbuf_errors: 10,
            if_drops: [("a/a0".to_string(), 2), ("a/hirt0".to_string(), 4)].into(),
            ..Default::default()
        };
        let d = after.since(&before);
        assert_eq!(d.udp_rcvbuf_errors, 7);
        assert_eq!(d.if_drops, [("a/hirt0".to_string(), 4)].into());
        assert_eq!(d.host_drops(), 11);
    }
}
