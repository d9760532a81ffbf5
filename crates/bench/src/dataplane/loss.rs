//! Random loss on a namespace's path with nftables (Debian's firewall, package `nftables`):
//! a table of its own with one base chain whose single rule drops a random share of the
//! matching packets and counts them.
//!
//! ```text
//! table ip6 hirt_loss {
//!     chain loss {
//!         type filter hook forward priority 0; policy accept;
//!         oifname "hbx1me" ip6 daddr fc00::/16 numgen random mod 1000000 < 30000 counter drop
//!     }
//! }
//! ```
//!
//! `numgen random mod 1000000` draws a uniform integer below one million per packet, so the
//! rule drops with probability `threshold / 1e6`: loss rates to a millionth.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use hirt_linux::netns::NetNs;

/// Resolution of the drop probability: `numgen random mod SCALE`.
pub const SCALE: u32 = 1_000_000;

/// Where in the namespace's stack the rule sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Packets the namespace routes on (a router's loss).
    Forward,
    /// Packets delivered to the namespace's own sockets.
    Input,
}

/// A random-loss rule: its table, hook, match and probability.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomLoss {
    /// nftables family of the table: `ip`, `ip6` or `inet`.
    pub family: &'static str,
    /// Name of the table the rule lives in (owned by this rule: removed whole).
    pub table: String,
    /// Hook of the chain.
    pub hook: Hook,
    /// nftables match expressions the packet must meet (e.g. `oifname "veth0"`,
    /// `ip6 daddr fc00::/16`, `udp dport 4098`); empty: every packet.
    pub matches: Vec<String>,
    /// Drop probability in [0, 1].
    pub probability: f64,
}

impl RandomLoss {
    /// Loss of the SRv6 packets (destination in `fc00::/16`) that `ns` forwards out of `dev`.
    pub fn forwarded_srv6(dev: &str, probability: f64) -> RandomLoss {
        RandomLoss {
            family: "ip6",
            table: "hirt_loss".into(),
            hook: Hook::Forward,
            matches: vec![format!("oifname \"{dev}\""), "ip6 daddr fc00::/16".into()],
            probability,
        }
    }

    /// Loss of the UDP datagrams delivered to a local socket whose `direction` port
    /// (`dport` or `sport`) is `port`.
    pub fn udp_input(direction: &str, port: u16, probability: f64) -> RandomLoss {
        RandomLoss {
            family: "inet",
            table: "hirt_loss".into(),
            hook: Hook::Input,
            matches: vec![format!("udp {direction} {port}")],
            probability,
        }
    }

    /// The threshold below which `numgen random mod SCALE` drops.
    pub fn threshold(&self) -> u32 {
        (self.probability.clamp(0.0, 1.0) * SCALE as f64).round() as u32
    }

    /// The ruleset, in `nft -f` syntax (adding the table; removing it takes it whole).
    pub fn ruleset(&self) -> String {
        let hook = match self.hook {
            Hook::Forward => "forward",
            Hook::Input => "input",
        };
        let mut rule: Vec<String> = self.matches.clone();
        rule.push(format!(
            "numgen random mod {SCALE} < {} counter drop",
            self.threshold()
        ));
        format!(
            "table {family} {table} {{\n    chain loss {{\n        type filter hook {hook} priority 0; policy accept;\n        {rule}\n    }}\n}}\n",
            family = self.family,
            table = self.table,
            rule = rule.join(" "),
        )
    }

    /// Installs the rule in `ns`, in place of an earlier one of the same table (`nft -f` would
    /// add a second rule to an existing chain, doubling the loss).
    pub fn install(&self, ns: &NetNs) -> anyhow::Result<()> {
        self.remove(ns);
        nft(ns, &["-f", "-"], Some(&self.ruleset()))
            .with_context(|| format!("installing the loss rule in {}", ns.name()))?;
        Ok(())
    }

    /// Removes the rule's table from `ns` (nothing if it is not there).
    pub fn remove(&self, ns: &NetNs) {
        let _ = nft(ns, &["delete", "table", self.family, &self.table], None);
    }

    /// Packets the rule has dropped in `ns` so far.
    pub fn drops(&self, ns: &NetNs) -> anyhow::Result<u64> {
        let out = nft(ns, &["-j", "list", "table", self.family, &self.table], None)?;
        dropped_packets(&out).context("no counter in `nft -j list table` output")
    }
}

/// The packets counted by the `counter` statements of an `nft -j list` output.
pub fn dropped_packets(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let rules = v["nftables"]
        .as_array()?
        .iter()
        .filter_map(|o| o.get("rule"));
    let mut found = false;
    let mut packets = 0;
    for rule in rules {
        for stmt in rule["expr"].as_array().into_iter().flatten() {
            if let Some(n) = stmt.get("counter").and_then(|c| c["packets"].as_u64()) {
                found = true;
                packets += n;
            }
        }
    }
    found.then_some(packets)
}

/// Whether `nft` runs here.
pub fn nft_available() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `nft ARGS` inside `ns` with `stdin` on its standard input; returns its stdout.
fn nft(ns: &NetNs, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    if !nft_available() {
        bail!("the loss rule needs nft: apt-get install nftables");
    }
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), "nft"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting nft")?;
    if let Some(mut w) = child.stdin.take() {
        w.write_all(stdin.unwrap_or("").as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use hirt_linux::netns::{self, veth};

    use super::*;

    #[test]
    fn ruleset_text() {
        let r = RandomLoss::forwarded_srv6("hbme", 0.03);
        assert_eq!(r.threshold(), 30_000);
        assert_eq!(
            r.ruleset(),
            "table ip6 hirt_loss {\n    chain loss {\n        type filter hook forward priority 0; \
             policy accept;\n        oifname \"hbme\" ip6 daddr fc00::/16 numgen random mod \
             1000000 < 30000 counter drop\n    }\n}\n"
        );
        let u = RandomLoss::udp_input("sport", 4098, 0.001);
        assert!(u.ruleset().starts_with("table inet hirt_loss {"));
        assert!(u
            .ruleset()
            .contains("type filter hook input priority 0; policy accept;\n        udp sport 4098 numgen random mod 1000000 < 1000 counter drop"));
        assert_eq!(RandomLoss::udp_input("dport", 1, 1.5).threshold(), SCALE);
        assert_eq!(RandomLoss::udp_input("dport", 1, 0.0).threshold(), 0);
    }

    #[test]
    fn counter_of_nft_json() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip6", "name": "hirt_loss", "handle": 1}},
            {"chain": {"family": "ip6", "table": "hirt_loss", "name": "loss", "handle": 1}},
            {"rule": {"family": "ip6", "table": "hirt_loss", "chain": "loss", "handle": 2,
              "expr": [{"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 1000000,
              "offset": 0}}, "right": 30000}}, {"counter": {"packets": 417, "bytes": 560000}},
              {"drop": null}]}}]}"#;
        assert_eq!(dropped_packets(json), Some(417));
        assert_eq!(dropped_packets(r#"{"nftables": []}"#), None);
        assert_eq!(dropped_packets("not json"), None);
    }

    /// A router namespace between a sender and a receiver drops 10% of the forwarded UDP
    /// datagrams: the rule's counter against the datagrams sent, the receiver's count against
    /// what the rule let through.
    #[test]
    fn drops_the_configured_share_of_forwarded_packets() {
        if !netns::available() {
            println!("skipped: needs root");
            return;
        }
        if !nft_available() {
            println!("skipped: needs nft (apt-get install nftables)");
            return;
        }
        let base = netns::unique_name("hl");
        let mk = |r: &str| NetNs::new(&format!("{base}{r}")).unwrap();
        let (c, m, s) = (mk("c"), mk("m"), mk("s"));
        let (cm, mc, ms, sm) = (
            format!("{base}cm"),
            format!("{base}mc"),
            format!("{base}ms"),
            format!("{base}sm"),
        );
        veth(&c, &cm, &m, &mc).unwrap();
        veth(&m, &ms, &s, &sm).unwrap();
        let addr = |ns: &NetNs, dev: &str, a: &str| {
            ns.ip(&["-6", "addr", "add", a, "dev", dev, "nodad"])
                .unwrap();
        };
        addr(&c, &cm, "2001:db8:1::2/64");
        addr(&m, &mc, "2001:db8:1::1/64");
        addr(&m, &ms, "fc00:1::1/64");
        addr(&s, &sm, "fc00:1::2/64");
        m.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        c.ip(&["-6", "route", "add", "default", "via", "2001:db8:1::1"])
            .unwrap();
        s.ip(&["-6", "route", "add", "default", "via", "fc00:1::1"])
            .unwrap();
        let rule = RandomLoss::forwarded_srv6(&ms, 0.1);
        rule.install(&m).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(AtomicU64::new(0));
        let (st, g) = (stop.clone(), got.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = s.spawn(move || {
            let sock = UdpSocket::bind("[fc00:1::2]:9000")?;
            crate::os::force_receive_buffer(sock.as_raw_fd(), 8 << 20);
            sock.set_read_timeout(Some(Duration::from_millis(100)))?;
            let _ = ready_tx.send(());
            let mut buf = [0u8; 64];
            while !st.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() && buf[0] == 1 {
                    g.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        ready_rx.recv().unwrap();
        // Neighbour discovery first (its packets are not UDP, but a datagram queued behind an
        // unresolved neighbour can be dropped): warm-up datagrams until one arrives.
        let sent = c
            .spawn(move || {
                let sock = UdpSocket::bind("[2001:db8:1::2]:0")?;
                for _ in 0..50 {
                    sock.send_to(&[0u8; 16], "[fc00:1::2]:9000")?;
                    std::thread::sleep(Duration::from_millis(20));
                }
                let n = 20_000u64;
                for i in 0..n {
                    sock.send_to(&[1u8; 16], "[fc00:1::2]:9000")?;
                    // Paced, so that no queue on the way drops what the rule let through.
                    if i % 10 == 9 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Ok(n)
            })
            .join()
            .unwrap()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        sink.join().unwrap().unwrap();
        let got = got.load(Ordering::Relaxed);
        let dropped = rule.drops(&m).unwrap();
        // The rule sees every forwarded datagram, the 50 warm-up ones too; what it passes may
        // still meet a veth's queue, so the receiver's count only bounds it.
        let share = dropped as f64 / (sent + 50) as f64;
        assert!(
            (0.08..0.12).contains(&share),
            "dropped share {share}: counter {dropped}, sent {sent}, received {got}"
        );
        assert!(
            got > 0 && got + dropped <= sent + 50,
            "counter {dropped}, sent {sent}, received {got}"
        );
        rule.remove(&m);
        assert!(rule.drops(&m).is_err(), "the table is gone");
    }
}
