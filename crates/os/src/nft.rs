//! nftables rules in a namespace: random loss ([`NetNs::random_loss`]) and packet counts
//! ([`NetNs::count`]), each counted in a named counter ([`NetNs::counter`]) of a table
//! `inet hirt`.
//!
//! ```text
//! table inet hirt {
//!     counter c_link_loss { packets 417 bytes 560000 }
//!     chain forward {
//!         type filter hook forward priority 0; policy accept;
//!         oifname "hbx1me" ip6 daddr fc00::/16 numgen random mod 1000000 < 30000 counter name "c_link_loss" drop
//!     }
//! }
//! ```
//!
//! `numgen random mod 1000000` draws a uniform integer below one million per packet, so a rule
//! with threshold `T` drops with probability `T / 1e6`: loss rates to a millionth. A rule is
//! known by its counter: installing a loss again replaces the earlier rule (a second rule in the
//! chain would compound the loss), and the counter keeps its count across replacements and
//! [`NetNs::remove_rules`], so readings before and after a run subtract.
//!
//! nftables is Debian's firewall (package `nftables`); without the `nft` binary every call fails
//! with [`MISSING`].

use std::io;
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::netns::NetNs;

/// Where a rule sits in the kernel's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Every packet arriving, before routing (at raw priority, before conntrack).
    Prerouting,
    /// Packets for this namespace.
    Input,
    /// Packets routed through this namespace.
    Forward,
    /// Packets this namespace sends.
    Output,
}

impl Hook {
    /// The base chain of the hook and its priority.
    fn chain(self) -> (&'static str, i32) {
        match self {
            Hook::Prerouting => ("prerouting", -300),
            Hook::Input => ("input", 0),
            Hook::Forward => ("forward", 0),
            Hook::Output => ("output", 0),
        }
    }
}

/// The nftables table of the rules made here. Counter objects are named `c_<counter>` so that
/// no counter name collides with an nft keyword.
pub const TABLE: &str = "hirt";
/// `numgen random mod` of the loss rules: the drop probability's resolution is one in this.
pub const LOSS_SCALE: u32 = 1_000_000;
/// The error of every rule operation on a machine without `nft`.
pub const MISSING: &str = "nft is not installed: apt-get install nftables";

/// Whether the `nft` binary runs here (checked once per process).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        Command::new("nft")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Fails with [`MISSING`] when `nft` is not installed.
pub fn require() -> io::Result<()> {
    if available() {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::NotFound, MISSING))
    }
}

/// The threshold `T` of `numgen random mod LOSS_SCALE < T` for drop probability `p` (0..=1):
/// `p * LOSS_SCALE` rounded, so `T / LOSS_SCALE` is `p` to a millionth.
pub fn loss_threshold(p: f64) -> io::Result<u32> {
    if !(0.0..=1.0).contains(&p) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("loss probability {p} is not in 0..=1"),
        ));
    }
    Ok((p * f64::from(LOSS_SCALE)).round() as u32)
}

/// The `nft` command adding the rule that drops a share `p` of the packets matching `matches`
/// in `chain`, counted in `counter`; `None` when `p` is below half a millionth (no rule drops
/// nothing). A certain loss has no random match: nft refuses `< 1000000` in a `mod 1000000`
/// rule.
pub fn loss_rule(chain: &str, matches: &str, p: f64, counter: &str) -> io::Result<Option<String>> {
    let random = match loss_threshold(p)? {
        0 => return Ok(None),
        LOSS_SCALE.. => String::new(),
        below => format!("numgen random mod {LOSS_SCALE} < {below}"),
    };
    let words = [
        format!("add rule inet {TABLE} {chain}"),
        matches.trim().to_string(),
        random,
        format!("counter name c_{counter} drop"),
    ];
    let words: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| !w.is_empty())
        .collect();
    Ok(Some(words.join(" ")))
}

/// The packets of the counter object in `nft -j list counter` output.
pub fn counter_packets(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v["nftables"]
        .as_array()?
        .iter()
        .find_map(|o| o.get("counter")?.get("packets")?.as_u64())
}

/// The (chain, handle) of every rule counting into the counter object `counter` (its nft
/// name, `c_...`), in `nft -j list table` output.
pub fn rules_counting(json: &str, counter: &str) -> Vec<(String, u64)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let objects = v["nftables"].as_array().into_iter().flatten();
    objects
        .filter_map(|o| o.get("rule"))
        .filter(|rule| {
            rule["expr"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e.get("counter").and_then(|c| c.as_str()) == Some(counter))
        })
        .filter_map(|rule| {
            Some((
                rule["chain"].as_str()?.to_string(),
                rule["handle"].as_u64()?,
            ))
        })
        .collect()
}

impl NetNs {
    /// Runs `nft` inside the namespace with `command` (one nft command line).
    pub fn nft(&self, command: &str) -> io::Result<Output> {
        self.nft_args(&[command])
    }

    fn nft_args(&self, args: &[&str]) -> io::Result<Output> {
        require()?;
        let mut argv = vec!["nft"];
        argv.extend_from_slice(args);
        self.exec(&argv)
    }

    /// Makes the `inet hirt` table, the chain of `hook` and the named counter `counter`
    /// (each only if missing: an existing counter keeps its count); returns the chain's name.
    fn nft_prepare(&self, hook: Hook, counter: &str) -> io::Result<&'static str> {
        let (chain, priority) = hook.chain();
        self.nft(&format!("add table inet {TABLE}"))?;
        self.nft(&format!(
            "add chain inet {TABLE} {chain} {{ type filter hook {chain} priority {priority} ; policy accept ; }}"
        ))?;
        self.nft(&format!("add counter inet {TABLE} c_{counter}"))?;
        Ok(chain)
    }

    /// Drops a random share `p` (0..=1) of the packets matching `matches` (nft match words,
    /// e.g. `udp dport 4096` or `oifname "v4" ip6 daddr fc00::/16`) at `hook`; the named counter
    /// `counter` counts the packets dropped. Replaces the earlier rules of `counter` (with
    /// `p` = 0 none is left, and the counter stays as it is).
    pub fn random_loss(&self, hook: Hook, matches: &str, p: f64, counter: &str) -> io::Result<()> {
        let (chain, _) = hook.chain();
        let rule = loss_rule(chain, matches, p, counter)?;
        self.nft_prepare(hook, counter)?;
        self.remove_rules(counter)?;
        if let Some(rule) = rule {
            self.nft(&rule)?;
        }
        Ok(())
    }

    /// Drops a random share `p` of the IPv6 packets to `dst` (a prefix) that this namespace
    /// forwards out of `out_dev`, counted in `counter`: an emulated lossy link.
    pub fn random_loss_v6(
        &self,
        out_dev: &str,
        dst: &str,
        p: f64,
        counter: &str,
    ) -> io::Result<()> {
        self.random_loss(
            Hook::Forward,
            &format!("oifname \"{out_dev}\" ip6 daddr {dst}"),
            p,
            counter,
        )
    }

    /// Drops a random share `p` of the UDP datagrams delivered to this namespace whose
    /// `direction` port (`dport` or `sport`) is `port`, counted in `counter`.
    pub fn random_loss_udp(
        &self,
        direction: &str,
        port: u16,
        p: f64,
        counter: &str,
    ) -> io::Result<()> {
        self.random_loss(Hook::Input, &format!("udp {direction} {port}"), p, counter)
    }

    /// Counts the packets matching `matches` at `hook` in the named counter `counter`, letting
    /// them pass.
    pub fn count(&self, hook: Hook, matches: &str, counter: &str) -> io::Result<()> {
        let chain = self.nft_prepare(hook, counter)?;
        self.nft(&format!(
            "add rule inet {TABLE} {chain} {matches} counter name c_{counter}"
        ))?;
        Ok(())
    }

    /// Packets counted so far by the named counter `counter` (of [`NetNs::random_loss`] or
    /// [`NetNs::count`]).
    pub fn counter(&self, counter: &str) -> io::Result<u64> {
        let out = self.nft_args(&["-j", &format!("list counter inet {TABLE} c_{counter}")])?;
        let json = String::from_utf8_lossy(&out.stdout);
        counter_packets(&json).ok_or_else(|| {
            io::Error::other(format!("no packet count for counter {counter}: {json}"))
        })
    }

    /// Removes the rules counting into `counter` (loss or count: their packets pass again);
    /// the counter stays, with its count.
    pub fn remove_rules(&self, counter: &str) -> io::Result<()> {
        for (chain, handle) in self.rules_of(counter)? {
            self.nft(&format!("delete rule inet {TABLE} {chain} handle {handle}"))?;
        }
        Ok(())
    }

    /// The (chain, handle) of the rules counting into `counter`.
    fn rules_of(&self, counter: &str) -> io::Result<Vec<(String, u64)>> {
        self.nft(&format!("add table inet {TABLE}"))?;
        let out = self.nft_args(&["-j", &format!("list table inet {TABLE}")])?;
        Ok(rules_counting(
            &String::from_utf8_lossy(&out.stdout),
            &format!("c_{counter}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::netns::{available as netns_available, unique_name, veth};

    #[test]
    fn loss_rule_text() {
        assert_eq!(
            loss_rule(
                "forward",
                "oifname \"hbme\" ip6 daddr fc00::/16",
                0.03,
                "link_loss"
            )
            .unwrap()
            .unwrap(),
            "add rule inet hirt forward oifname \"hbme\" ip6 daddr fc00::/16 numgen random mod \
             1000000 < 30000 counter name c_link_loss drop"
        );
        assert_eq!(
            loss_rule("input", "udp sport 4098", 0.001, "x")
                .unwrap()
                .unwrap(),
            "add rule inet hirt input udp sport 4098 numgen random mod 1000000 < 1000 counter \
             name c_x drop"
        );
        // Certain loss: no random match (nft refuses `< 1000000` against `mod 1000000`).
        assert_eq!(
            loss_rule("input", "udp dport 1", 1.0, "x")
                .unwrap()
                .unwrap(),
            "add rule inet hirt input udp dport 1 counter name c_x drop"
        );
        assert_eq!(
            loss_rule("input", "", 1.0, "x").unwrap().unwrap(),
            "add rule inet hirt input counter name c_x drop"
        );
        assert_eq!(loss_rule("input", "udp dport 1", 0.0, "x").unwrap(), None);
        for bad in [1.5, -0.01, f64::NAN] {
            assert!(loss_rule("input", "", bad, "x").is_err(), "{bad}");
        }
    }

    #[test]
    fn loss_threshold_is_exact_to_a_millionth() {
        assert_eq!(loss_threshold(0.0).unwrap(), 0);
        assert_eq!(loss_threshold(1.0).unwrap(), LOSS_SCALE);
        assert_eq!(loss_threshold(0.03).unwrap(), 30_000);
        assert_eq!(loss_threshold(0.02).unwrap(), 20_000);
        assert_eq!(loss_threshold(0.000_001).unwrap(), 1);
        assert_eq!(loss_threshold(0.999_999).unwrap(), 999_999);
        // Every rate in millionths is its own threshold (no float truncation: 0.29 * 1e6 is
        // 289999.99...).
        for millionths in [1u32, 7, 290_000, 570_000, 999_999] {
            let p = f64::from(millionths) / 1e6;
            assert_eq!(loss_threshold(p).unwrap(), millionths, "{p}");
        }
    }

    /// Output of nft 1.0.6 for a loss rule and a count rule of other counters.
    const TABLE_JSON: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
        {"table": {"family": "inet", "name": "hirt", "handle": 1}},
        {"counter": {"family": "inet", "name": "c_x", "table": "hirt", "handle": 2, "packets": 0, "bytes": 0}},
        {"chain": {"family": "inet", "table": "hirt", "name": "forward", "handle": 1, "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
        {"rule": {"family": "inet", "table": "hirt", "chain": "forward", "handle": 3, "expr": [
            {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "v1"}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip6", "field": "daddr"}}, "right": {"prefix": {"addr": "fc00::", "len": 16}}}},
            {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 1000000, "offset": 0}}, "right": 30000}},
            {"counter": "c_x"}, {"drop": null}]}},
        {"rule": {"family": "inet", "table": "hirt", "chain": "prerouting", "handle": 7, "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 5}},
            {"counter": "c_y"}]}},
        {"rule": {"family": "inet", "table": "hirt", "chain": "input", "handle": 9, "expr": [
            {"counter": {"packets": 12, "bytes": 900}}, {"drop": null}]}}]}"#;

    #[test]
    fn rules_of_a_counter_in_nft_json() {
        assert_eq!(rules_counting(TABLE_JSON, "c_x"), [("forward".into(), 3)]);
        assert_eq!(
            rules_counting(TABLE_JSON, "c_y"),
            [("prerouting".into(), 7)]
        );
        assert!(rules_counting(TABLE_JSON, "c_z").is_empty());
        assert!(rules_counting(r#"{"nftables": []}"#, "c_x").is_empty());
        assert!(rules_counting("not json", "c_x").is_empty());
    }

    #[test]
    fn counter_packets_in_nft_json() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
            {"counter": {"family": "inet", "name": "c_x", "table": "hirt", "handle": 2, "packets": 417, "bytes": 560000}}]}"#;
        assert_eq!(counter_packets(json), Some(417));
        assert_eq!(counter_packets(r#"{"nftables": []}"#), None);
        assert_eq!(counter_packets("not json"), None);
    }

    #[test]
    fn missing_nft_is_one_line_with_the_package() {
        assert!(!MISSING.contains('\n') && MISSING.contains("apt-get install nftables"));
        if available() {
            assert!(require().is_ok());
        } else {
            let e = require().unwrap_err();
            assert_eq!(e.to_string(), MISSING);
        }
    }

    /// Whether the namespace tests can run here (root and `nft`); says why not.
    fn can_run() -> bool {
        if !netns_available() {
            println!("skipped: needs root");
            return false;
        }
        if !available() {
            println!("skipped: {MISSING}");
            return false;
        }
        true
    }

    /// A loss rule drops about its share and counts exactly what it drops; a counting rule
    /// counts what passes (ping from one namespace to another over a veth).
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn nft_loss_and_counters() {
        if !can_run() {
            return;
        }
        let a = NetNs::new(&unique_name("hfa")).unwrap();
        let b = NetNs::new(&unique_name("hfb")).unwrap();
        let (ia, ib) = (unique_name("fv"), unique_name("fv"));
        veth(&a, &ia, &b, &ib).unwrap();
        a.ip(&["addr", "add", "10.77.0.1/24", "dev", &ia]).unwrap();
        b.ip(&["addr", "add", "10.77.0.2/24", "dev", &ib]).unwrap();
        assert!(b
            .random_loss(Hook::Input, "icmp type echo-request", 1.5, "x")
            .is_err());
        b.random_loss(Hook::Input, "icmp type echo-request", 0.5, "loss")
            .unwrap();
        b.count(Hook::Prerouting, "icmp type echo-request", "srh")
            .unwrap();
        b.random_loss(Hook::Input, "icmp type echo-request", 0.0, "none")
            .unwrap();
        let sent = 200u64;
        let _ = a.exec(&[
            "ping",
            "-c",
            &sent.to_string(),
            "-i",
            "0.002",
            "-W",
            "1",
            "-q",
            "10.77.0.2",
        ]);
        let (lost, seen) = (b.counter("loss").unwrap(), b.counter("srh").unwrap());
        assert_eq!(seen, sent, "every request reaches the prerouting counter");
        assert!((50..=150).contains(&lost), "about half dropped: {lost}");
        assert_eq!(b.counter("none").unwrap(), 0, "p = 0 drops nothing");
        assert!(b.counter("missing").is_err());
    }

    /// The emulated lossy link of the dataplane bench: a router drops what it forwards to a
    /// prefix out of one device, and counts it.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn nft_loss_on_a_forwarded_link() {
        if !can_run() {
            return;
        }
        let a = NetNs::new(&unique_name("hfa")).unwrap();
        let r = NetNs::new(&unique_name("hfr")).unwrap();
        let b = NetNs::new(&unique_name("hfb")).unwrap();
        let names: Vec<String> = (0..4).map(|_| unique_name("fw")).collect();
        veth(&a, &names[0], &r, &names[1]).unwrap();
        veth(&r, &names[2], &b, &names[3]).unwrap();
        r.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        let addr = |ns: &NetNs, a: &str, dev: &str| {
            ns.ip(&["-6", "addr", "add", a, "dev", dev, "nodad"])
                .unwrap();
        };
        addr(&a, "fd77:1::1/64", &names[0]);
        addr(&r, "fd77:1::2/64", &names[1]);
        addr(&r, "fd77:2::2/64", &names[2]);
        addr(&b, "fd77:2::1/64", &names[3]);
        a.ip(&["-6", "route", "add", "default", "via", "fd77:1::2"])
            .unwrap();
        b.ip(&["-6", "route", "add", "default", "via", "fd77:2::2"])
            .unwrap();
        // The first packets wait for neighbour discovery on fresh links (up to about 2 s).
        a.exec(&["ping", "-6", "-c", "1", "-w", "10", "fd77:2::1"])
            .expect("the path works before the loss rule");
        r.random_loss_v6(&names[2], "fd77:2::/64", 1.0, "link_loss")
            .unwrap();
        let sent = 20u64;
        let lost = a.exec(&[
            "ping",
            "-6",
            "-c",
            &sent.to_string(),
            "-i",
            "0.01",
            "-W",
            "1",
            "-q",
            "fd77:2::1",
        ]);
        assert!(lost.is_err(), "no echo request gets through");
        assert_eq!(r.counter("link_loss").unwrap(), sent);
    }

    /// A router namespace between a sender and a receiver drops 10% of the forwarded UDP
    /// datagrams: the rule's counter against the datagrams sent, the receiver's count against
    /// what the rule let through. Installing the loss again replaces the rule (the share stays
    /// 10%) and the counter goes on from its count; without the rule nothing is dropped.
    #[test]
    #[cfg_attr(not(hirt_root), ignore = "needs root")]
    fn drops_the_configured_share_of_forwarded_packets() {
        if !can_run() {
            return;
        }
        let base = unique_name("hl");
        let mk = |r: &str| NetNs::new(&format!("{base}{r}")).unwrap();
        let (c, m, s) = (mk("c"), mk("m"), mk("s"));
        let [cm, mc, ms, sm] = ["cm", "mc", "ms", "sm"].map(|d| format!("{base}{d}"));
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
        m.random_loss_v6(&ms, "fc00::/16", 0.1, "link_loss")
            .unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(AtomicU64::new(0));
        let (st, g) = (stop.clone(), got.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = s.spawn(move || {
            let sock = UdpSocket::bind("[fc00:1::2]:9000")?;
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
        let send = |warm_up: u64, n: u64| {
            c.spawn(move || {
                let sock = UdpSocket::bind("[2001:db8:1::2]:0")?;
                // Neighbour discovery first (a datagram queued behind an unresolved
                // neighbour can be dropped).
                for _ in 0..warm_up {
                    sock.send_to(&[0u8; 16], "[fc00:1::2]:9000")?;
                    std::thread::sleep(Duration::from_millis(20));
                }
                for i in 0..n {
                    sock.send_to(&[1u8; 16], "[fc00:1::2]:9000")?;
                    // Paced, so that no queue on the way drops what the rule let through.
                    if i % 10 == 9 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Ok(())
            })
            .join()
            .unwrap()
            .unwrap();
        };
        let (warm_up, n) = (50u64, 10_000u64);
        send(warm_up, n);
        let dropped = m.counter("link_loss").unwrap();
        // The rule sees every forwarded datagram, the warm-up ones too.
        let share = dropped as f64 / (warm_up + n) as f64;
        assert!(
            (0.08..0.12).contains(&share),
            "dropped share {share}: counter {dropped}, sent {n}"
        );

        // Again: one rule, not two (the share would be 19%), counting on from `dropped`.
        m.random_loss_v6(&ms, "fc00::/16", 0.1, "link_loss")
            .unwrap();
        assert_eq!(m.rules_of("link_loss").unwrap().len(), 1);
        assert_eq!(m.counter("link_loss").unwrap(), dropped);
        send(0, n);
        let again = m.counter("link_loss").unwrap() - dropped;
        let share = again as f64 / n as f64;
        assert!(
            (0.08..0.12).contains(&share),
            "dropped share after re-install {share}: {again} of {n}"
        );

        // Without the rule: nothing more dropped, the count kept.
        m.remove_rules("link_loss").unwrap();
        assert!(m.rules_of("link_loss").unwrap().is_empty());
        let total = dropped + again;
        send(0, 1000);
        assert_eq!(m.counter("link_loss").unwrap(), total);

        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        sink.join().unwrap().unwrap();
        // What the rule let through may still meet a veth's queue, so the receiver's count
        // only bounds it.
        let got = got.load(Ordering::Relaxed);
        let sent = warm_up + 2 * n + 1000;
        assert!(
            got > 0 && got + total <= sent,
            "counter {total}, sent {sent}, received {got}"
        );
    }
}
