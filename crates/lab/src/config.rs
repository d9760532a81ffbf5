//! What a lab runs: [`LabConfig`] (`hirt lab`) and [`DemoConfig`] (`hirt demo`), with their
//! validation and the parsers of the units their flags and files use.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::emu::core::QueueLimit;
use crate::tunnel::TunnelMode;

/// Link profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// 50 ms RTT, Gilbert-Elliott p=0.00151 r=1/3 (about 0.45% loss, bursts up to ~9), 100 Mbit/s.
    Starlink,
    /// 40 ms RTT, 5 ms jitter, Gilbert-Elliott about 1% loss in short bursts, 50 Mbit/s.
    Lte,
    /// 50 ms one-way, uniform 0.1% loss, 100 Mbit/s (use `--loss uniform:0.01` for 1%).
    Wan,
    /// 50 ms one-way, uniform 1% loss, 100 Mbit/s (Maelstrom's bulk setting).
    Wan1,
    /// 10 ms one-way, bursty Gilbert-Elliott about 2.4% loss, 10 Mbit/s: small IoT messages
    /// (SRv6-FEC's MQTT setting, whose link had no rate limit; at 1 Mbit/s, `--rate 1mbit`, the
    /// MQTT load alone fills 58% of the link and the tunnel's headers and repairs saturate it).
    Iot,
    /// No impairment at all (emulator still in the path).
    Clean,
    /// Two uplinks between the same hosts: path 0 Starlink-like, path 1 LTE-like (the
    /// scenarios of several paths; a single-path run uses path 0's links).
    Dual,
}

/// A scenario run instead of the workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Silent outages of the active path of a two-path tunnel (UDP or SRv6): failover time
    /// (`hirt_lab::outage`).
    Outage,
    /// Delay inversions of two paths (10 / 100 ms RTT): EXP3 convergence and request times
    /// against random path choice (`hirt_lab::inversion`).
    Inversion,
    /// TCP bulk over two equal paths, bonded against one path (`hirt_lab::bond`).
    Bond,
}

impl Scenario {
    /// The scenario's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Outage => "outage",
            Scenario::Inversion => "inversion",
            Scenario::Bond => "bond",
        }
    }
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 7] = [
        Profile::Starlink,
        Profile::Lte,
        Profile::Wan,
        Profile::Wan1,
        Profile::Iot,
        Profile::Clean,
        Profile::Dual,
    ];
}

/// Workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// HTTP/1.1 request/response over kernel TCP (built in).
    Http,
    /// Request/response over QUIC (quinn).
    Quic,
    /// TCP bulk goodput (built in).
    Bulk,
    /// NFS-like 4 kB block read/write RPC over TCP (built in; this kernel has no NFS).
    Rpc,
    /// MQTT QoS 1 publish latency against mosquitto (skipped when not installed).
    Mqtt,
    /// HTTP/1.1 driven by `wrk` against the built-in server (skipped when not installed).
    Wrk,
    /// TCP bulk goodput measured by `iperf3 -R` (skipped when not installed).
    Iperf3,
    /// HTTP/1.1 driven by `h2load --h1` against the built-in server (skipped when not installed).
    H2load,
}

/// Whether to run without FEC, with FEC, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FecRuns {
    /// Baseline (no FEC) then FEC over the same seed and loss process.
    Both,
    /// Baseline only.
    Off,
    /// FEC only.
    On,
}

/// Configuration of `hirt lab` (the CLI's flags map one to one onto its fields; in TOML or
/// JSON, durations, sizes and queue limits are written as the flags take them: `"20s"`,
/// `"256kB"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabConfig {
    /// Link profile.
    pub profile: Profile,
    /// Workloads to run (comma separated).
    pub workload: Vec<WorkloadKind>,
    /// Response size of the HTTP/QUIC workloads (e.g. 10k, 1M).
    pub size: usize,
    /// Parallel connections (HTTP, QUIC, RPC) or MQTT clients.
    pub connections: usize,
    /// Duration of each run (e.g. 20s).
    #[serde(with = "text::duration")]
    pub duration: Duration,
    /// Open a new TCP connection for every HTTP request (default: keep-alive).
    pub new_conn: bool,
    /// Congestion control of the TCP endpoints (cubic, bbr, reno).
    pub cc: String,
    /// Tunnel mode of the FEC run.
    pub tunnel: TunnelMode,
    /// Which runs.
    pub fec: FecRuns,
    /// Also run the workload over a lossless link (the reference of the bulk goal).
    pub lossless: bool,
    /// Extra arguments passed to both `hirt` tunnel ends (e.g. "--fec hirt"). Unless they set
    /// them, the lab adds `--window` (twice the link's bandwidth-delay product) and
    /// `--fec ours:base=0.01` (see `tunnel_args`).
    pub tunnel_args: Option<String>,
    /// Loss model override, both directions (`uniform:0.01`, `ge:p=..,r=..`, `trace:FILE`, ...).
    pub loss: Option<String>,
    /// One-way delay override (e.g. 25ms).
    #[serde(with = "text::opt_duration")]
    pub delay: Option<Duration>,
    /// Jitter override.
    #[serde(with = "text::opt_duration")]
    pub jitter: Option<Duration>,
    /// Rate override, both directions (e.g. 100mbit; 0 = unlimited).
    pub rate: Option<u64>,
    /// Drop-tail queue limit: packets (`1000`) or bytes (`256kB`).
    #[serde(with = "text::opt_queue")]
    pub queue: Option<QueueLimit>,
    /// Reordering probability (packets held `--reorder-extra` and overtaken).
    pub reorder: Option<f64>,
    /// Mark ECN-capable packets CE when they find more than this many packets queued (both
    /// directions; with a rate). None: no marking.
    pub ecn_mark_above: Option<usize>,
    /// The hosts' TCP asks for ECN (`net.ipv4.tcp_ecn=1`; implied by `ecn_mark_above`): the
    /// CE marks of the link or of the tunnel's queue management (`--aqm-target-ms`) reach the
    /// flows' congestion control, and the tunnel marks instead of dropping.
    #[serde(default)]
    pub hosts_ecn: bool,
    /// Seed of the link's randomness (both runs use it: same loss process).
    pub seed: u64,
    /// QUIC workload: packets of reordering before quinn declares a loss (RFC 9002: 3). Every
    /// declared loss is a congestion event, also for a packet the tunnel recovers a few ms late.
    pub quic_packet_threshold: u32,
    /// QUIC workload: reordering in time before quinn declares a loss, x RTT (RFC 9002: 1.125).
    pub quic_time_threshold: f32,
    /// QUIC workload over HTTP/3 (the `h3` crate, `GET /<size>/<id>`) instead of a bare request
    /// line per stream.
    pub http3: bool,
    /// Print the JSON summary on stdout instead of tables.
    pub json: bool,
    /// Results folder (JSON, tables, SVG CDFs).
    pub results: PathBuf,
    /// No progress bar.
    pub quiet: bool,
    /// Measure the emulator itself instead: how many Gbit/s of 1280-byte packets it forwards
    /// without losses of its own.
    pub bench_emulator: bool,
    /// Offered rate of `--bench-emulator`, Gbit/s.
    pub bench_gbps: f64,
    /// Run a soak of this length instead of the workloads: sustained checked traffic through
    /// the tunnel while faults are injected (see `hirt_lab::soak`).
    #[serde(with = "text::opt_duration")]
    pub soak: Option<Duration>,
    /// Time between two faults of the soak.
    #[serde(with = "text::duration")]
    pub fault_every: Duration,
    /// Datagrams per second of each of the soak's two checked streams.
    pub soak_pps: u32,
    /// Run this scenario instead of the workloads.
    pub scenario: Option<Scenario>,
    /// Events (outages) of the scenario.
    pub runs: usize,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            profile: Profile::Starlink,
            workload: vec![WorkloadKind::Http],
            size: 10_000,
            connections: 16,
            duration: Duration::from_secs(20),
            new_conn: false,
            cc: "cubic".into(),
            tunnel: TunnelMode::Udp,
            fec: FecRuns::Both,
            lossless: false,
            tunnel_args: None,
            loss: None,
            delay: None,
            jitter: None,
            rate: None,
            queue: None,
            reorder: None,
            ecn_mark_above: None,
            hosts_ecn: false,
            seed: 1,
            quic_packet_threshold: 3,
            quic_time_threshold: 1.125,
            http3: false,
            json: false,
            results: PathBuf::from("hirt-results"),
            quiet: false,
            bench_emulator: false,
            bench_gbps: 1.2,
            soak: None,
            fault_every: Duration::from_secs(120),
            soak_pps: 1000,
            scenario: None,
            runs: 50,
        }
    }
}

/// A lab configuration that cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabConfigError {
    /// No workload to run.
    #[error("no workload given")]
    NoWorkload,
    /// A count that must be positive is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// The run has no duration.
    #[error("the duration must be above zero")]
    Duration,
    /// A response size the workloads do not serve.
    #[error("sizes above 4 MB are not supported ({0} bytes)")]
    Size(usize),
    /// A probability outside [0, 1].
    #[error("{0} must be in [0, 1], not {1}")]
    Probability(&'static str, f64),
    /// A rate or threshold that must be a positive number.
    #[error("{0} must be a positive number, not {1}")]
    Positive(&'static str, f64),
    /// A loss model that does not parse.
    #[error("{0}")]
    Loss(String),
    /// Soak faults so close that the tunnel cannot recover in between.
    #[error("fault_every must be at least 10 s, not {0:?}")]
    FaultEvery(Duration),
}

impl LabConfig {
    /// Checks every field, the loss models included, before anything is built.
    pub fn validate(&self) -> Result<(), LabConfigError> {
        if self.workload.is_empty() {
            return Err(LabConfigError::NoWorkload);
        }
        if self.connections == 0 {
            return Err(LabConfigError::Zero("connections"));
        }
        if self.scenario.is_some() && self.runs == 0 {
            return Err(LabConfigError::Zero("runs"));
        }
        if self.soak_pps == 0 {
            return Err(LabConfigError::Zero("soak_pps"));
        }
        if self.soak.is_some() && self.fault_every < Duration::from_secs(10) {
            return Err(LabConfigError::FaultEvery(self.fault_every));
        }
        if self.quic_packet_threshold == 0 {
            return Err(LabConfigError::Zero("the QUIC packet threshold"));
        }
        if self.duration.is_zero() {
            return Err(LabConfigError::Duration);
        }
        if self.size > MAX_SIZE {
            return Err(LabConfigError::Size(self.size));
        }
        if let Some(p) = self.reorder.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(LabConfigError::Probability("reorder", p));
        }
        for (name, v) in [
            ("the QUIC time threshold", self.quic_time_threshold as f64),
            ("the emulator bench's rate", self.bench_gbps),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(LabConfigError::Positive(name, v));
            }
        }
        let (up, down) = crate::profile::links(self);
        for d in [up, down] {
            d.link_config()
                .map_err(|e| LabConfigError::Loss(format!("{e:#}")))?;
        }
        Ok(())
    }
}

/// Configuration of `hirt demo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Duration of each of the two runs.
    #[serde(with = "text::duration")]
    pub duration: Duration,
    /// Tunnel mode.
    pub tunnel: TunnelMode,
    /// Print JSON instead of the table.
    pub json: bool,
    /// Also run the workload over the same link without loss: its p99 is what a tunnel that
    /// recovered every loss at once would reach, so the demo shows how far it is from that.
    pub lossless: bool,
}

impl Default for DemoConfig {
    /// The demo that `hirt` with no arguments runs.
    fn default() -> Self {
        DemoConfig {
            duration: Duration::from_secs(25),
            tunnel: TunnelMode::Udp,
            json: false,
            lossless: true,
        }
    }
}

/// Largest response size of the workloads, bytes.
const MAX_SIZE: usize = 4_000_000;

/// Parses `25ms`, `2s`, `1.5s`, `500us`, `1m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?}")),
    };
    if !(0.0..1e7).contains(&secs) {
        return Err(format!("duration out of range: {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `10k`, `10kB`, `1M`, `1MB`, `4096` (k = 1000, as in "10 kB responses").
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().trim_end_matches(['B', 'b']);
    let (num, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000.0),
        Some('M' | 'm') => (&t[..t.len() - 1], 1_000_000.0),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let n = (v * mul) as usize;
    if n > MAX_SIZE {
        return Err("sizes above 4 MB are not supported".into());
    }
    Ok(n)
}

/// Parses `100mbit`, `1gbit`, `500kbit`, or bits per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.trim_end_matches("bps").trim_end_matches("bit");
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad rate {s:?}"))?;
    Ok((v * mul) as u64)
}

/// Parses a queue limit: `1000` (packets) or `256kB` / `65536B` (bytes).
pub fn parse_queue(s: &str) -> Result<QueueLimit, String> {
    let t = s.trim();
    if t.ends_with(['B', 'b']) {
        Ok(QueueLimit::Bytes(parse_size(t)?))
    } else {
        t.trim_end_matches('p')
            .parse()
            .map(QueueLimit::Packets)
            .map_err(|_| format!("bad queue limit {s:?}"))
    }
}

/// Serde as text in the flags' syntax: durations (`"20s"`) and queue limits (`"256kB"`).
mod text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::{parse_duration, parse_queue, QueueLimit};

    fn duration_text(d: &Duration) -> String {
        format!("{}s", d.as_secs_f64())
    }

    fn queue_text(q: &QueueLimit) -> String {
        match q {
            QueueLimit::Packets(n) => n.to_string(),
            QueueLimit::Bytes(n) => format!("{n}B"),
        }
    }

    pub mod duration {
        use super::*;

        pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&duration_text(d))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
        }
    }

    pub mod opt_duration {
        use super::*;

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&duration_text(d)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
                .transpose()
        }
    }

    pub mod opt_queue {
        use super::*;

        pub fn serialize<S: Serializer>(q: &Option<QueueLimit>, s: S) -> Result<S::Ok, S::Error> {
            match q {
                Some(q) => s.serialize_some(&queue_text(q)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<QueueLimit>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|t| parse_queue(&t).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("25ms").unwrap(), Duration::from_millis(25));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("3 parsecs").is_err());
        assert_eq!(parse_size("10k").unwrap(), 10_000);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_queue("1000").unwrap(), QueueLimit::Packets(1000));
        assert_eq!(parse_queue("256kB").unwrap(), QueueLimit::Bytes(256_000));
    }

    #[test]
    fn default_config_is_the_demo() {
        let a = LabConfig::default();
        assert_eq!(a.profile, Profile::Starlink);
        assert_eq!(a.workload, vec![WorkloadKind::Http]);
        assert_eq!(a.size, 10_000);
        a.validate().unwrap();
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |f: fn(&mut LabConfig)| {
            let mut c = LabConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(|c| c.workload.clear()).contains("workload"));
        assert!(bad(|c| c.connections = 0).contains("connections"));
        assert!(bad(|c| c.loss = Some("lots".into())).contains("loss model"));
        assert!(bad(|c| c.reorder = Some(2.0)).contains("reorder"));
        assert!(bad(|c| c.size = 5_000_000).contains("4 MB"));
    }

    #[test]
    fn round_trips_through_toml_in_the_flags_units() {
        let c: LabConfig = toml::from_str(
            "profile = \"wan1\"\nworkload = [\"bulk\", \"h2load\"]\nduration = \"6s\"\n\
             delay = \"10ms\"\nqueue = \"256kB\"\ntunnel = \"srv6\"\nfec = \"on\"\n",
        )
        .unwrap();
        assert_eq!(c.profile, Profile::Wan1);
        assert_eq!(c.workload, vec![WorkloadKind::Bulk, WorkloadKind::H2load]);
        assert_eq!(c.duration, Duration::from_secs(6));
        assert_eq!(c.delay, Some(Duration::from_millis(10)));
        assert_eq!(c.queue, Some(QueueLimit::Bytes(256_000)));
        assert_eq!(c.tunnel, TunnelMode::Srv6);
        assert_eq!(c.fec, FecRuns::On);
        let back: LabConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(toml::from_str::<LabConfig>("profil = \"wan\"").is_err());
    }
}
