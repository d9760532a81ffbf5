//! `hirt lab` and `hirt demo`: the flags, mapped onto `hirt_lab::config::{LabConfig,
//! DemoConfig}`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use hirt_lab::config::{
    parse_duration, parse_queue, parse_rate, parse_size, DemoConfig, FecRuns, LabConfig, Profile,
    Scenario, WorkloadKind,
};
use hirt_lab::emu::core::QueueLimit;
use hirt_lab::flood::{FloodConfig, FloodKind};
use hirt_lab::tunnel::TunnelMode;

/// Link profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
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
    /// Two uplinks between the same hosts: path 0 Starlink-like, path 1 LTE-like (for the
    /// scenarios of two paths; a single-path run uses path 0's links).
    Dual,
}

/// Scenarios run instead of the workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioArg {
    /// Silent outages of the active path of a two-path tunnel (`--runs` of them): failover
    /// time, JSON with `failover_p50_ms`, `failover_p99_ms`, `feedback_interval_ms`, `runs`.
    Outage,
    /// Delay inversions of two paths (10 / 100 ms RTT, `--runs` of them, 5 s apart; 20 s under
    /// Gamma 0.01) under EXP3 (Gamma 0.1 and 0.01, and Gamma 0.1 fed by every path's probes)
    /// and random path choice, with 100 kB HTTP requests over 4 new connections at a time:
    /// JSON with `exp3_converge_p90_ms`, `exp3_p50_ms`, `random_p50_ms`.
    Inversion,
    /// TCP bulk (8 connections) over two equal paths, bonded and on one path, `--runs` rounds:
    /// JSON with `bond_over_single`.
    Bond,
}

/// Workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FecRunsArg {
    /// Baseline (no FEC) then FEC over the same seed and loss process.
    Both,
    /// Baseline only.
    Off,
    /// FEC only.
    On,
}

/// Tunnel mode of the FEC run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TunnelArg {
    /// SRv6: kernel H.Encaps at the ingress, hirt encoder and decoder SIDs (IPv6 workloads).
    Srv6,
    /// UDP tunnel between two TUN interfaces (IPv4 workloads).
    Udp,
}

/// Arguments of `hirt lab`.
#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// Link profile.
    #[arg(long, value_enum, default_value = "starlink")]
    pub profile: ProfileArg,
    /// Workloads to run (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "http")]
    pub workload: Vec<WorkloadArg>,
    /// Response size of the HTTP/QUIC workloads (e.g. 10k, 1M).
    #[arg(long, default_value = "10k", value_parser = parse_size)]
    pub size: usize,
    /// Parallel connections (HTTP, QUIC, RPC) or MQTT clients.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Duration of each run (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Open a new TCP connection for every HTTP request (default: keep-alive).
    #[arg(long)]
    pub new_conn: bool,
    /// Congestion control of the TCP endpoints (cubic, bbr, reno).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    /// Tunnel mode of the FEC run.
    #[arg(long, value_enum, default_value = "udp")]
    pub tunnel: TunnelArg,
    /// Which runs.
    #[arg(long, value_enum, default_value = "both")]
    pub fec: FecRunsArg,
    /// Also run the workload over a lossless link (the reference of the bulk goal).
    #[arg(long)]
    pub lossless: bool,
    /// Extra arguments passed to both `hirt` tunnel ends (e.g. "--fec hirt"). Unless they set
    /// them, the lab adds `--window` (twice the link's bandwidth-delay product) and
    /// `--fec ours:base=0.01` (see `tunnel_args`).
    #[arg(long, allow_hyphen_values = true)]
    pub tunnel_args: Option<String>,
    /// Loss model override, both directions (`uniform:0.01`, `ge:p=..,r=..`, `trace:FILE`, ...).
    #[arg(long)]
    pub loss: Option<String>,
    /// One-way delay override (e.g. 25ms).
    #[arg(long, value_parser = parse_duration)]
    pub delay: Option<Duration>,
    /// Jitter override.
    #[arg(long, value_parser = parse_duration)]
    pub jitter: Option<Duration>,
    /// Rate override, both directions (e.g. 100mbit; 0 = unlimited).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// Drop-tail queue limit: packets (`1000`) or bytes (`256kB`).
    #[arg(long, value_parser = parse_queue)]
    pub queue: Option<QueueLimit>,
    /// Reordering probability (packets held `--reorder-extra` and overtaken).
    #[arg(long)]
    pub reorder: Option<f64>,
    /// Mark ECN-capable packets CE (RFC 3168) when they find more than this many packets
    /// queued at the link's rate limit, like an AQM (both directions; default: no marking).
    #[arg(long)]
    pub ecn_mark_above: Option<usize>,
    /// The hosts' TCP asks for ECN (`net.ipv4.tcp_ecn=1`), so the tunnel's queue management
    /// (`--aqm-target-ms`) marks their packets CE instead of dropping them (implied by
    /// `--ecn-mark-above`).
    #[arg(long)]
    pub hosts_ecn: bool,
    /// Seed of the link's randomness (both runs use it: same loss process).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// QUIC workload: packets of reordering before quinn declares a loss (RFC 9002: 3). Every
    /// declared loss is a congestion event, also for a packet the tunnel recovers a few ms late.
    #[arg(long, default_value_t = 3)]
    pub quic_packet_threshold: u32,
    /// QUIC workload: reordering in time before quinn declares a loss, x RTT (RFC 9002: 1.125).
    #[arg(long, default_value_t = 1.125)]
    pub quic_time_threshold: f32,
    /// QUIC workload over HTTP/3 (the `h3` crate, `GET /<size>/<id>`) instead of a bare request
    /// line per stream.
    #[arg(long)]
    pub http3: bool,
    /// Print the JSON summary on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Results folder (JSON, tables, SVG CDFs).
    #[arg(long, default_value = "hirt-results")]
    pub results: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Measure the emulator itself instead: how many Gbit/s of 1280-byte packets it forwards
    /// without losses of its own.
    #[arg(long)]
    pub bench_emulator: bool,
    /// Offered rate of `--bench-emulator`, Gbit/s.
    #[arg(long, default_value_t = 1.2)]
    pub bench_gbps: f64,
    /// Soak instead of workloads, for this long (e.g. 1h): checked datagram streams both ways
    /// and a TCP stream through the tunnel (`--tunnel`), 3% loss each way unless `--loss`, while
    /// either end is killed with SIGKILL and started again, the link flaps and (UDP) the
    /// client's address changes, one fault every `--fault-every`. Prints a JSON report and
    /// fails if a byte was corrupt, a datagram duplicated, a fault not recovered or a hirt
    /// process's memory grew by 5% or more.
    #[arg(long, value_parser = parse_duration)]
    pub soak: Option<Duration>,
    /// Time between two faults of `--soak`.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub fault_every: Duration,
    /// Datagrams per second of each of the soak's two checked streams (1000-byte datagrams).
    #[arg(long, default_value_t = 1000)]
    pub soak_pps: u32,
    /// Run a scenario of two paths instead of the workloads (`--tunnel udp` or `srv6`;
    /// `outage` usually with `--profile dual`; prints JSON).
    #[arg(long, value_enum)]
    pub scenario: Option<ScenarioArg>,
    /// Events of `--scenario` (outages, inversions, bonding rounds).
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Flood the UDP tunnel server's port with this many junk datagrams per second, from a
    /// namespace of its own, while a paced checked stream and a TCP bulk stream run through the
    /// tunnel: a `--duration` window without flood, then one with it (`--tunnel udp`).
    #[arg(long)]
    pub flood: Option<u64>,
    /// What `--flood` sends.
    #[arg(long, value_enum, default_value = "mix")]
    pub flood_kind: FloodKindArg,
    /// Datagrams per second of `--flood`'s paced stream (1000 bytes each).
    #[arg(long, default_value_t = 2000)]
    pub flood_paced_pps: u32,
    /// No TCP bulk stream beside `--flood`'s paced stream.
    #[arg(long)]
    pub flood_no_tcp: bool,
}

/// Junk of `hirt lab --flood`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloodKindArg {
    /// Random bytes.
    Random,
    /// Valid mode or handshake type bytes, then garbage.
    HirtLooking,
    /// Datagrams recorded from the session, sent again.
    Replay,
    /// Recorded datagrams cut short.
    Truncated,
    /// The four in turn.
    Mix,
}

impl From<FloodKindArg> for FloodKind {
    fn from(v: FloodKindArg) -> Self {
        match v {
            FloodKindArg::Random => FloodKind::Random,
            FloodKindArg::HirtLooking => FloodKind::HirtLooking,
            FloodKindArg::Replay => FloodKind::Replay,
            FloodKindArg::Truncated => FloodKind::Truncated,
            FloodKindArg::Mix => FloodKind::Mix,
        }
    }
}

/// Arguments of `hirt demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Duration of each of the two runs.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Tunnel mode.
    #[arg(long, value_enum, default_value = "udp")]
    pub tunnel: TunnelArg,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Skip the reference run over the same link without loss.
    #[arg(long)]
    pub no_lossless: bool,
}

impl From<ProfileArg> for Profile {
    fn from(v: ProfileArg) -> Self {
        match v {
            ProfileArg::Starlink => Profile::Starlink,
            ProfileArg::Lte => Profile::Lte,
            ProfileArg::Wan => Profile::Wan,
            ProfileArg::Wan1 => Profile::Wan1,
            ProfileArg::Iot => Profile::Iot,
            ProfileArg::Clean => Profile::Clean,
            ProfileArg::Dual => Profile::Dual,
        }
    }
}

impl From<WorkloadArg> for WorkloadKind {
    fn from(v: WorkloadArg) -> Self {
        match v {
            WorkloadArg::Http => WorkloadKind::Http,
            WorkloadArg::Quic => WorkloadKind::Quic,
            WorkloadArg::Bulk => WorkloadKind::Bulk,
            WorkloadArg::Rpc => WorkloadKind::Rpc,
            WorkloadArg::Mqtt => WorkloadKind::Mqtt,
            WorkloadArg::Wrk => WorkloadKind::Wrk,
            WorkloadArg::Iperf3 => WorkloadKind::Iperf3,
            WorkloadArg::H2load => WorkloadKind::H2load,
        }
    }
}

impl From<FecRunsArg> for FecRuns {
    fn from(v: FecRunsArg) -> Self {
        match v {
            FecRunsArg::Both => FecRuns::Both,
            FecRunsArg::Off => FecRuns::Off,
            FecRunsArg::On => FecRuns::On,
        }
    }
}

impl From<TunnelArg> for TunnelMode {
    fn from(v: TunnelArg) -> Self {
        match v {
            TunnelArg::Srv6 => TunnelMode::Srv6,
            TunnelArg::Udp => TunnelMode::Udp,
        }
    }
}

impl From<LabArgs> for LabConfig {
    fn from(a: LabArgs) -> Self {
        LabConfig {
            profile: a.profile.into(),
            workload: a.workload.into_iter().map(Into::into).collect(),
            size: a.size,
            connections: a.connections,
            duration: a.duration,
            new_conn: a.new_conn,
            cc: a.cc,
            tunnel: a.tunnel.into(),
            fec: a.fec.into(),
            lossless: a.lossless,
            tunnel_args: a.tunnel_args,
            loss: a.loss,
            delay: a.delay,
            jitter: a.jitter,
            rate: a.rate,
            queue: a.queue,
            reorder: a.reorder,
            ecn_mark_above: a.ecn_mark_above,
            hosts_ecn: a.hosts_ecn,
            seed: a.seed,
            quic_packet_threshold: a.quic_packet_threshold,
            quic_time_threshold: a.quic_time_threshold,
            http3: a.http3,
            json: a.json,
            results: a.results,
            quiet: a.quiet,
            bench_emulator: a.bench_emulator,
            bench_gbps: a.bench_gbps,
            soak: a.soak,
            fault_every: a.fault_every,
            soak_pps: a.soak_pps,
            scenario: a.scenario.map(|s| match s {
                ScenarioArg::Outage => Scenario::Outage,
                ScenarioArg::Inversion => Scenario::Inversion,
                ScenarioArg::Bond => Scenario::Bond,
            }),
            runs: a.runs,
        }
    }
}

impl From<DemoArgs> for DemoConfig {
    fn from(a: DemoArgs) -> Self {
        DemoConfig {
            duration: a.duration,
            tunnel: a.tunnel.into(),
            json: a.json,
            lossless: !a.no_lossless,
        }
    }
}

impl LabArgs {
    /// What `--flood` and its companions ask for (None without `--flood`).
    fn flood_config(&self) -> Option<FloodConfig> {
        Some(FloodConfig {
            rate_pps: self.flood?,
            kind: self.flood_kind.into(),
            paced_pps: self.flood_paced_pps,
            tcp: !self.flood_no_tcp,
        })
    }
}

pub fn run_lab(args: LabArgs) -> anyhow::Result<()> {
    if let Some(flood) = args.flood_config() {
        return hirt_lab::flood::run(&args.into(), &flood);
    }
    hirt_lab::run::run_lab(args.into())
}

pub fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    hirt_lab::run::run_demo(args.into())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Lab {
        #[command(flatten)]
        lab: LabArgs,
    }

    #[derive(Parser)]
    struct Demo {
        #[command(flatten)]
        demo: DemoArgs,
    }

    #[test]
    fn flag_defaults_are_the_config_defaults() {
        assert_eq!(
            LabConfig::from(Lab::parse_from(["lab"]).lab),
            LabConfig::default()
        );
        assert_eq!(
            DemoConfig::from(Demo::parse_from(["demo"]).demo),
            DemoConfig::default()
        );
    }

    #[test]
    fn flags_map_onto_the_config() {
        let c = LabConfig::from(
            Lab::parse_from([
                "lab",
                "--profile",
                "wan1",
                "--workload",
                "bulk,h2load",
                "--tunnel",
                "srv6",
                "--fec",
                "on",
                "--queue",
                "256kB",
                "--duration",
                "6s",
                "--tunnel-args",
                "--fec hirt",
            ])
            .lab,
        );
        assert_eq!(c.profile, Profile::Wan1);
        assert_eq!(c.workload, vec![WorkloadKind::Bulk, WorkloadKind::H2load]);
        assert_eq!(c.tunnel, TunnelMode::Srv6);
        assert_eq!(c.fec, FecRuns::On);
        assert_eq!(c.queue, Some(QueueLimit::Bytes(256_000)));
        assert_eq!(c.duration, Duration::from_secs(6));
        assert_eq!(c.tunnel_args.as_deref(), Some("--fec hirt"));
    }

    #[test]
    fn flood_flags_map_onto_the_flood_config() {
        assert_eq!(Lab::parse_from(["lab"]).lab.flood_config(), None);
        let f = Lab::parse_from([
            "lab",
            "--flood",
            "50000",
            "--flood-kind",
            "hirt-looking",
            "--flood-no-tcp",
            "--flood-paced-pps",
            "500",
        ])
        .lab
        .flood_config();
        assert_eq!(
            f,
            Some(FloodConfig {
                rate_pps: 50_000,
                kind: FloodKind::HirtLooking,
                paced_pps: 500,
                tcp: false,
            })
        );
    }
}
