//! The configuration of `hirt health`, as data: TOML keys spelled like the command-line flags
//! (`interval-ms`, `node`), checked once by [`HealthConfig::validate`], whose errors name the key
//! at fault.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::tracker::Thresholds;
use crate::config::{load_toml, ConfigError};

/// What `hirt health` checks and which route it keeps.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct HealthConfig {
    /// The prefix the nodes carry (`2001:db8:9::/64`): the multipath route hirt keeps.
    pub prefix: Option<String>,
    /// The routing table of that route.
    #[serde(default = "default_table")]
    pub table: u32,
    /// The encoder/decoder pairs, one next hop each.
    #[serde(default)]
    pub node: Vec<NodeSpec>,
    /// Time between two probe rounds.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: f64,
    /// How long a probe waits for its answer (at most the interval).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    /// Rounds without an answer before a node is taken out.
    #[serde(default = "default_fall")]
    pub fall: u32,
    /// Answered rounds in a row before a node that was out is put back.
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// Count a refused connection as one missed round like a timeout, instead of taking the
    /// node out at once.
    #[serde(default)]
    pub refused_is_miss: bool,
}

fn default_table() -> u32 {
    254
}
fn default_interval_ms() -> f64 {
    100.0
}
fn default_timeout_ms() -> f64 {
    50.0
}
fn default_fall() -> u32 {
    3
}
fn default_rise() -> u32 {
    3
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            prefix: None,
            table: default_table(),
            node: Vec::new(),
            interval_ms: default_interval_ms(),
            timeout_ms: default_timeout_ms(),
            fall: default_fall(),
            rise: default_rise(),
            refused_is_miss: false,
        }
    }
}

/// Longest interval accepted: a health check slower than this is not one.
const MAX_INTERVAL_MS: f64 = 60_000.0;

impl HealthConfig {
    /// Reads a TOML file (not yet validated).
    pub fn from_file(path: &Path) -> anyhow::Result<HealthConfig> {
        load_toml(path)
    }

    /// Checks every value; the error names the key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.prefix()?;
        if self.table == 0 {
            return Err(ConfigError::new("table", "0 is not a routing table"));
        }
        if self.node.is_empty() {
            return Err(ConfigError::new("node", "at least one node is needed"));
        }
        for (i, n) in self.node.iter().enumerate() {
            n.check()
                .map_err(|m| ConfigError::new("node", format!("node {i} (`{n}`): {m}")))?;
        }
        let interval = self.interval_ms;
        if !(interval > 0.0 && interval <= MAX_INTERVAL_MS) {
            return Err(ConfigError::new(
                "interval-ms",
                format!("{interval}: must be within (0, {MAX_INTERVAL_MS}]"),
            ));
        }
        let timeout = self.timeout_ms;
        if !(timeout > 0.0 && timeout <= interval) {
            return Err(ConfigError::new(
                "timeout-ms",
                format!("{timeout}: must be above 0 and at most interval-ms ({interval})"),
            ));
        }
        if self.fall == 0 {
            return Err(ConfigError::new("fall", "must be at least 1"));
        }
        if self.rise == 0 {
            return Err(ConfigError::new("rise", "must be at least 1"));
        }
        Ok(())
    }

    /// The prefix: address and length.
    pub fn prefix(&self) -> Result<(Ipv6Addr, u8), ConfigError> {
        let s = self
            .prefix
            .as_deref()
            .ok_or_else(|| ConfigError::new("prefix", "required (e.g. 2001:db8:9::/64)"))?;
        let bad = |m: &str| ConfigError::new("prefix", format!("`{s}`: {m}"));
        let (addr, len) = s.split_once('/').ok_or_else(|| bad("ADDR/LEN expected"))?;
        let addr: Ipv6Addr = addr.parse().map_err(|_| bad("not an IPv6 address"))?;
        let len: u8 = len.parse().map_err(|_| bad("bad prefix length"))?;
        if len > 128 {
            return Err(bad("prefix length above 128"));
        }
        Ok((addr, len))
    }

    /// Time between two probe rounds.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.interval_ms / 1e3)
    }

    /// How long a probe waits.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_ms / 1e3)
    }

    /// The state machine's thresholds.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            fall: self.fall,
            rise: self.rise,
            refused_is_down: !self.refused_is_miss,
        }
    }
}

/// One encoder/decoder pair: the next hop of the multipath route that steers flows to it, and
/// where to probe it. Written in `ip route` words, in configuration as on the command line:
/// `segs ENC_SID,DEC_SID via GATEWAY [dev DEV] probe ADDR:PORT[,ADDR:PORT...]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct NodeSpec {
    /// The segment list the ingress encapsulates with (the encoder SID first).
    pub segs: Vec<Ipv6Addr>,
    /// The next hop towards the encoder.
    pub via: Option<IpAddr>,
    /// The device towards the encoder.
    pub dev: Option<String>,
    /// The node's hirt metrics endpoints (`--metrics` of its encoder and decoder): the node is
    /// alive while all of them answer.
    pub probe: Vec<SocketAddr>,
}

impl NodeSpec {
    fn check(&self) -> Result<(), String> {
        if self.segs.is_empty() {
            return Err("no segments (segs ENC_SID,DEC_SID)".into());
        }
        if self.via.is_none() && self.dev.is_none() {
            return Err("needs `via GATEWAY` or `dev DEV`".into());
        }
        if self
            .dev
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.len() > 15)
        {
            return Err("a device name has 1 to 15 bytes".into());
        }
        if self.probe.is_empty() {
            return Err("no probe target (probe ADDR:PORT)".into());
        }
        Ok(())
    }
}

impl TryFrom<String> for NodeSpec {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl FromStr for NodeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut n = NodeSpec {
            segs: Vec::new(),
            via: None,
            dev: None,
            probe: Vec::new(),
        };
        let mut words = s.split_whitespace();
        while let Some(key) = words.next() {
            let value = words
                .next()
                .ok_or_else(|| format!("`{key}` without a value"))?;
            match key {
                "segs" => {
                    n.segs = value
                        .split(',')
                        .map(|a| {
                            a.parse()
                                .map_err(|_| format!("segs: `{a}` is no IPv6 address"))
                        })
                        .collect::<Result<_, _>>()?
                }
                "via" => {
                    n.via = Some(
                        value
                            .parse()
                            .map_err(|_| format!("via: `{value}` is no address"))?,
                    )
                }
                "dev" => n.dev = Some(value.to_string()),
                "probe" => {
                    n.probe = value
                        .split(',')
                        .map(|a| {
                            a.parse()
                                .map_err(|_| format!("probe: `{a}` is no ADDR:PORT ([v6]:port)"))
                        })
                        .collect::<Result<_, _>>()?
                }
                other => {
                    return Err(format!(
                        "unknown word `{other}` (segs, via, dev, probe expected)"
                    ))
                }
            }
        }
        n.check()?;
        Ok(n)
    }
}

impl fmt::Display for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |v: Vec<String>| v.join(",");
        write!(
            f,
            "segs {}",
            join(self.segs.iter().map(|a| a.to_string()).collect())
        )?;
        if let Some(v) = self.via {
            write!(f, " via {v}")?;
        }
        if let Some(d) = &self.dev {
            write!(f, " dev {d}")?;
        }
        write!(
            f,
            " probe {}",
            join(self.probe.iter().map(|a| a.to_string()).collect())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str =
        "segs fc00:e1::1,fc00:d1::1 via 2001:db8:11::2 dev ie1 probe [2001:db8:11::2]:9469,[2001:db8:21::2]:9469";

    #[test]
    fn node_words_round_trip() {
        let n: NodeSpec = NODE.parse().unwrap();
        assert_eq!(
            n.segs,
            vec![
                "fc00:e1::1".parse::<Ipv6Addr>().unwrap(),
                "fc00:d1::1".parse().unwrap()
            ]
        );
        assert_eq!(n.via, Some("2001:db8:11::2".parse().unwrap()));
        assert_eq!(n.dev.as_deref(), Some("ie1"));
        assert_eq!(n.probe.len(), 2);
        assert_eq!(n.to_string(), NODE);
        assert_eq!(n.to_string().parse::<NodeSpec>().unwrap(), n);
    }

    #[test]
    fn bad_nodes_say_what_is_wrong() {
        for (text, want) in [
            ("segs fc00::1 via fd00::2", "no probe target"),
            ("segs fc00::1 probe [fd00::2]:1", "via GATEWAY"),
            ("via fd00::2 probe [fd00::2]:1", "no segments"),
            ("segs fc00::1 via fd00::2 probe fd00::2", "no ADDR:PORT"),
            ("segs fc00::1 via", "without a value"),
            ("segs fc00::1 weight 2", "unknown word `weight`"),
            (
                "segs 10.0.0.1 via fd00::2 probe [fd00::2]:1",
                "no IPv6 address",
            ),
        ] {
            let e = text.parse::<NodeSpec>().unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn toml_keys_are_the_flag_names() {
        let c: HealthConfig = toml::from_str(&format!(
            "prefix = \"2001:db8:9::/64\"\ninterval-ms = 20\ntimeout-ms = 10\nfall = 2\n\
             rise = 5\nrefused-is-miss = true\nnode = [\"{NODE}\"]\n"
        ))
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.prefix().unwrap(), ("2001:db8:9::".parse().unwrap(), 64));
        assert_eq!(c.interval(), Duration::from_millis(20));
        assert_eq!(c.timeout(), Duration::from_millis(10));
        assert_eq!(
            c.thresholds(),
            Thresholds {
                fall: 2,
                rise: 5,
                refused_is_down: false
            }
        );
        assert_eq!(c.table, 254, "default");
        assert!(toml::from_str::<HealthConfig>("bogus = 1\n").is_err());
        let bad_node = "prefix = \"2001:db8:9::/64\"\nnode = [\"segs fc00::1\"]\n";
        assert!(toml::from_str::<HealthConfig>(bad_node).is_err());
    }

    #[test]
    fn the_example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hirt-health.toml");
        let c = HealthConfig::from_file(&path).unwrap();
        c.validate().unwrap();
        assert_eq!(c.node.len(), 2);
        assert_eq!(c.node[1].probe.len(), 2);
    }

    #[test]
    fn validation_names_the_key() {
        let good = HealthConfig {
            prefix: Some("2001:db8:9::/64".into()),
            node: vec![NODE.parse().unwrap()],
            ..Default::default()
        };
        good.validate().unwrap();
        let key = |c: HealthConfig| c.validate().unwrap_err().key;
        assert_eq!(
            key(HealthConfig {
                prefix: None,
                ..good.clone()
            }),
            "prefix"
        );
        assert_eq!(
            key(HealthConfig {
                prefix: Some("2001:db8:9::/129".into()),
                ..good.clone()
            }),
            "prefix"
        );
        assert_eq!(
            key(HealthConfig {
                node: vec![],
                ..good.clone()
            }),
            "node"
        );
        assert_eq!(
            key(HealthConfig {
                interval_ms: 0.0,
                ..good.clone()
            }),
            "interval-ms"
        );
        assert_eq!(
            key(HealthConfig {
                timeout_ms: 200.0,
                ..good.clone()
            }),
            "timeout-ms"
        );
        assert_eq!(
            key(HealthConfig {
                fall: 0,
                ..good.clone()
            }),
            "fall"
        );
        assert_eq!(key(HealthConfig { rise: 0, ..good }), "rise");
    }
}
