//! `hirt bench ...`: the flags of the benchmarks, mapped onto the configuration types of
//! `hirt-bench`.

use clap::{Args, Subcommand, ValueEnum};
use hirt_bench::codec::CodecBenchConfig;
use hirt_bench::dataplane::{Dataplane, DataplaneConfig};
use hirt_bench::udp::UdpBenchConfig;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// GF(2^8) kernels and codecs, side by side with ISA-L.
    Codec(CodecBenchArgs),
    /// The SRv6 dataplane over veth namespaces (AF_XDP or TUN).
    Dataplane(DataplaneBenchArgs),
    /// TCP goodput through the UDP tunnel, and Gbit/s per hirt core.
    Udp(UdpBenchArgs),
    /// Two SRv6 encoder/decoder pairs behind ECMP kept by `hirt health`: encoders killed with
    /// SIGKILL, the time until their flows arrive through the other pair.
    Scaleout(ScaleoutBenchArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Codec(a) => hirt_bench::codec::run(a.into()),
        BenchCommand::Dataplane(a) => hirt_bench::dataplane::run(a.into()),
        BenchCommand::Udp(a) => hirt_bench::udp::run(a.into()),
        BenchCommand::Scaleout(a) => {
            let json = a.json;
            let report = hirt_bench::scaleout::run(&a.into_config()?)?;
            hirt_bench::scaleout::print(&report, json)
        }
    }
}

/// Arguments of `hirt bench scaleout`.
#[derive(Debug, Clone, Args)]
pub struct ScaleoutBenchArgs {
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Encoder kills, alternating between the two pairs.
    #[arg(long, default_value_t = 50)]
    pub events: usize,
    /// UDP flows (one source port each).
    #[arg(long, default_value_t = 32)]
    pub flows: usize,
    /// Milliseconds between two datagrams of a flow.
    #[arg(long, default_value_t = 2.0)]
    pub period_ms: f64,
    /// `hirt health --interval-ms`.
    #[arg(long, default_value_t = 50.0)]
    pub interval_ms: f64,
    /// `hirt health --timeout-ms`.
    #[arg(long, default_value_t = 25.0)]
    pub timeout_ms: f64,
    /// `hirt health --fall`.
    #[arg(long, default_value_t = 3)]
    pub fall: u32,
    /// `hirt health --rise`.
    #[arg(long, default_value_t = 3)]
    pub rise: u32,
    /// Milliseconds both pairs carry flows before each kill.
    #[arg(long, default_value_t = 300)]
    pub settle_ms: u64,
    /// `hirt srv6 --fec` of the pairs.
    #[arg(long, default_value = "ours")]
    pub fec: String,
    /// Directory for the logs of the hirt processes (default: the temporary directory).
    #[arg(long)]
    pub log_dir: Option<std::path::PathBuf>,
    /// TCP connections through the tunnel beside the UDP flows (1000 bytes every
    /// --period-ms each), every byte checked.
    #[arg(long, default_value_t = 4)]
    pub tcp: usize,
    /// How an encoder is stopped: `kill` (SIGKILL) or `term` (SIGTERM, a clean stop).
    #[arg(long, value_enum, default_value_t = StopArg::Kill)]
    pub stop: StopArg,
}

/// How `hirt bench scaleout` stops an encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StopArg {
    /// SIGKILL: nothing is cleaned up.
    Kill,
    /// SIGTERM: hirt removes its routes and exits.
    Term,
}

impl ScaleoutBenchArgs {
    /// The configuration; the hirt processes are this binary.
    pub fn into_config(self) -> anyhow::Result<hirt_bench::scaleout::ScaleoutConfig> {
        Ok(hirt_bench::scaleout::ScaleoutConfig {
            program: std::env::current_exe()?,
            events: self.events,
            flows: self.flows,
            period_ms: self.period_ms,
            interval_ms: self.interval_ms,
            timeout_ms: self.timeout_ms,
            fall: self.fall,
            rise: self.rise,
            settle_ms: self.settle_ms,
            fec: self.fec,
            log_dir: self.log_dir,
            tcp: self.tcp,
            stop: match self.stop {
                StopArg::Kill => hirt_bench::scaleout::StopBy::Kill,
                StopArg::Term => hirt_bench::scaleout::StopBy::Term,
            },
        })
    }
}

/// Arguments of `hirt bench codec`.
#[derive(Debug, Clone, Args)]
pub struct CodecBenchArgs {
    /// Print the results as JSON (ending with a `summary` object) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A short run (under 10 s): fewer batches per figure, so noisier numbers.
    #[arg(long)]
    pub quick: bool,
}

impl From<CodecBenchArgs> for CodecBenchConfig {
    fn from(a: CodecBenchArgs) -> Self {
        CodecBenchConfig {
            json: a.json,
            quick: a.quick,
        }
    }
}

/// Arguments of `hirt bench dataplane`.
#[derive(Debug, Clone, Args)]
pub struct DataplaneBenchArgs {
    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds per offered load of the throughput sweep.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Size of the inner IPv6 packets.
    #[arg(long, default_value_t = 1280)]
    pub packet_size: usize,
    /// Sliding window of the FEC runs.
    #[arg(long, default_value_t = 200)]
    pub window: u16,
    /// FEC mode of the FEC runs. At W = 200 the `ours` controller needs a surplus of 2% over the
    /// loss rate to recover >= 99.9% of 3% random losses (its default surplus, tuned for long
    /// windows, leaves ~1% unrecovered: `hirt sim --loss uniform:0.03 --scheme ours:w=200`).
    #[arg(long, default_value = "ours:base=0.02")]
    pub fec: String,
    /// Rounds of the throughput sweeps: every configuration is swept this many times, the
    /// configurations interleaved, and its best round is its capacity (other processes on the
    /// machine can only lower a capacity).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Loss of the lossy run.
    #[arg(long, default_value_t = 0.03)]
    pub loss: f64,
    /// First offered load of the throughput sweep (packets/s; doubled until < 99% arrive, then
    /// bisected).
    #[arg(long, default_value_t = 10_000)]
    pub sweep_start: u64,
    /// Highest offered load of the sweep.
    #[arg(long, default_value_t = 1_280_000)]
    pub sweep_max: u64,
    /// Paced rate of the latency runs (packets per second).
    #[arg(long, default_value_t = 100_000)]
    pub latency_pps: u64,
    /// Further paced loads (packets per second, comma-separated) at which to measure latency,
    /// kernel and hirt FEC each: where the added latency stays within the goal. Default in a
    /// full run: 20000,40000,60000,80000; with `--latency-only`: none.
    #[arg(long, value_delimiter = ',')]
    pub latency_curve: Option<Vec<u64>>,
    /// Seconds per latency run (the first 0.2 s are warm-up and not counted).
    #[arg(long, default_value_t = 2.0)]
    pub latency_duration: f64,
    /// Pin the bench's own sender and receiver threads to this CPU (the hirt workers and the
    /// kernel then tend to run on the others).
    #[arg(long)]
    pub pin_traffic: Option<usize>,
    /// Overload threshold of the hirt instances (`hirt srv6 --overload-threshold`; 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// Authenticate source packets in the FEC runs (`--hmac-key` + `--auth-sources`), to
    /// measure what it costs.
    #[arg(long)]
    pub auth_sources: bool,
    /// Seconds of the goal check (FEC at `--loss`, offered 0.85 x the no-FEC capacity).
    #[arg(long, default_value_t = 2.0)]
    pub goal_duration: f64,
    /// Time-driven repair delay of the hirt instances in ms (`hirt srv6 --repair-delay-ms`;
    /// default: hirt's, 0 = off).
    #[arg(long)]
    pub repair_delay_ms: Option<f64>,
    /// Recovery deadline of the hirt instances (`hirt srv6 --deadline`: `auto`, `2rtt`,
    /// `30ms`, `off`; default: hirt's).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Only the latency runs, at `--latency-pps` (no throughput sweeps, no goal check).
    #[arg(long)]
    pub latency_only: bool,
    /// Only the throughput goal check, `--rounds` tries at this offered load (packets/s) with
    /// FEC at `--loss` (no sweeps, no latency runs).
    #[arg(long)]
    pub goal_only_pps: Option<u64>,
    /// How the hirt nodes take and send packets.
    /// `kernel-sources` (default): both nodes run `hirt srv6 --xdp ... --kernel-sources` (the
    /// encoder's XDP program tags the sources and the kernel forwards them; the decoder's
    /// kernel End.DT6 delivers them; hirt reads copies, codes and recovers); their programs are
    /// attached in generic mode, cheaper on veth.
    /// `xdp`: the AF_XDP fast path (`hirt srv6 --xdp` on their links), every packet through
    /// hirt.
    /// With both, the path gets a plain router between encoder and decoder that carries the
    /// loss rule (hirt's own transmissions skip its node's netfilter hooks), in every
    /// configuration of the run, so kernel forwarding crosses the same hops, and the sender's
    /// link has its offloads off (an XDP frame carries no checksum metadata).
    /// `tun`: SIDs routed to TUN devices, encoder and decoder linked directly.
    #[arg(long, value_enum, default_value_t = DataplaneArg::KernelSources)]
    pub dataplane: DataplaneArg,
    /// The same as `--dataplane kernel-sources`.
    #[arg(long, hide = true)]
    pub kernel_sources: bool,
}

/// The hirt nodes' packet I/O in `hirt bench dataplane`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataplaneArg {
    /// AF_XDP sockets for hirt's packets, the sources forwarded and delivered by the kernel
    /// (`hirt srv6 --xdp ... --kernel-sources`).
    KernelSources,
    /// AF_XDP sockets (`hirt srv6 --xdp`).
    Xdp,
    /// TUN devices.
    Tun,
}

impl From<DataplaneArg> for Dataplane {
    fn from(d: DataplaneArg) -> Self {
        match d {
            DataplaneArg::KernelSources => Dataplane::KernelSources,
            DataplaneArg::Xdp => Dataplane::Xdp,
            DataplaneArg::Tun => Dataplane::Tun,
        }
    }
}

impl From<DataplaneBenchArgs> for DataplaneConfig {
    fn from(a: DataplaneBenchArgs) -> Self {
        DataplaneConfig {
            json: a.json,
            duration: a.duration,
            packet_size: a.packet_size,
            window: a.window,
            fec: a.fec,
            rounds: a.rounds,
            loss: a.loss,
            sweep_start: a.sweep_start,
            sweep_max: a.sweep_max,
            latency_pps: a.latency_pps,
            latency_curve: a.latency_curve,
            latency_duration: a.latency_duration,
            pin_traffic: a.pin_traffic,
            overload_threshold: a.overload_threshold,
            auth_sources: a.auth_sources,
            goal_duration: a.goal_duration,
            repair_delay_ms: a.repair_delay_ms,
            deadline: a.deadline,
            latency_only: a.latency_only,
            goal_only_pps: a.goal_only_pps,
            dataplane: if a.kernel_sources {
                Dataplane::KernelSources
            } else {
                a.dataplane.into()
            },
        }
    }
}

/// Arguments of `hirt bench udp`.
#[derive(Debug, Clone, Args)]
pub struct UdpBenchArgs {
    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Parallel TCP connections.
    #[arg(long, default_value_t = 8)]
    pub flows: usize,
    /// Worker threads of each peer (`hirt udp --threads`).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Random loss per datagram on the underlay, both ways (0 = none).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Runs per configuration; the best counts (other processes only ever slow a run down).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// FEC mode of the tunnel (`hirt udp --fec`).
    #[arg(long, default_value = "ours")]
    pub fec: String,
    /// Overload threshold of the peers (`hirt udp --overload-threshold`; 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// Repair lag of the peers' decoders (`hirt udp --repair-lag`; default: hirt's).
    #[arg(long)]
    pub repair_lag: Option<u32>,
}

impl From<UdpBenchArgs> for UdpBenchConfig {
    fn from(a: UdpBenchArgs) -> Self {
        UdpBenchConfig {
            json: a.json,
            duration: a.duration,
            flows: a.flows,
            threads: a.threads,
            loss: a.loss,
            rounds: a.rounds,
            fec: a.fec,
            overload_threshold: a.overload_threshold,
            repair_lag: a.repair_lag,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        bench: BenchCommand,
    }

    fn parse(args: &[&str]) -> BenchCommand {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap()
            .bench
    }

    #[test]
    fn flag_defaults_are_the_config_defaults() {
        let BenchCommand::Dataplane(a) = parse(&["dataplane"]) else {
            panic!("dataplane")
        };
        assert_eq!(DataplaneConfig::from(a), DataplaneConfig::default());
        let BenchCommand::Udp(a) = parse(&["udp"]) else {
            panic!("udp")
        };
        assert_eq!(UdpBenchConfig::from(a), UdpBenchConfig::default());
        let BenchCommand::Codec(a) = parse(&["codec"]) else {
            panic!("codec")
        };
        assert_eq!(CodecBenchConfig::from(a), CodecBenchConfig::default());
    }

    #[test]
    fn flags_map_onto_the_config() {
        let BenchCommand::Dataplane(a) = parse(&[
            "dataplane",
            "--dataplane",
            "tun",
            "--latency-curve",
            "1000,2000",
            "--rounds",
            "1",
        ]) else {
            panic!("dataplane")
        };
        let c = DataplaneConfig::from(a);
        assert_eq!(c.dataplane, Dataplane::Tun);
        assert_eq!(c.latency_curve, Some(vec![1000, 2000]));
        assert_eq!(c.rounds, 1);
        let BenchCommand::Dataplane(a) =
            parse(&["dataplane", "--dataplane", "tun", "--kernel-sources"])
        else {
            panic!("dataplane")
        };
        assert_eq!(DataplaneConfig::from(a).dataplane, Dataplane::KernelSources);
    }
}
