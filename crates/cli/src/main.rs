//! `hirt`: one binary for the tunnel, the lab, the simulator and the benchmarks.
//!
//! With no arguments it runs `hirt demo`: a short Starlink-like lab comparing 10 kB HTTP requests
//! without and with FEC.

use clap::{Parser, Subcommand};
use hirt_cli::cmd;

#[derive(Debug, Parser)]
#[command(
    name = "hirt",
    version,
    about = "High-speed robust tunnel: adaptive FEC for lossy links"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Short Starlink-like lab: 10 kB HTTP without vs with FEC (the default).
    Demo(hirt_lab::cli::DemoArgs),
    /// End-to-end lab in network namespaces with the userspace link emulator.
    Lab(hirt_lab::cli::LabArgs),
    /// Deterministic simulation of one scenario or a sweep.
    Sim(hirt_sim::cli::SimArgs),
    /// Run hirt as an SRv6 network function (encoder and/or decoder SIDs).
    Srv6(cmd::srv6::Srv6Args),
    /// Run hirt as a UDP tunnel between two peers (tinyfecVPN-like).
    Udp(cmd::udp::UdpArgs),
    /// Show the counters of a running instance.
    Status(cmd::status::StatusArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// FEC diagnostics.
    #[command(subcommand)]
    Fec(cmd::fec::FecCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// GF(2^8) kernels and codecs, side by side with ISA-L.
    Codec(hirt_bench::codec::CodecBenchArgs),
    /// The SRv6 dataplane over veth namespaces (AF_XDP or TUN).
    Dataplane(hirt_linux::bench::DataplaneBenchArgs),
    /// TCP goodput through the UDP tunnel, and Gbit/s per hirt core.
    Udp(hirt_linux::bench_udp::UdpBenchArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HIRT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        None => hirt_lab::cli::run_demo(hirt_lab::cli::DemoArgs::default_demo()),
        Some(Command::Demo(args)) => hirt_lab::cli::run_demo(args),
        Some(Command::Lab(args)) => hirt_lab::cli::run_lab(args),
        Some(Command::Sim(args)) => hirt_sim::cli::run(args),
        Some(Command::Srv6(args)) => cmd::srv6::run(args),
        Some(Command::Udp(args)) => cmd::udp::run(args),
        Some(Command::Status(args)) => cmd::status::run(args),
        Some(Command::Bench(BenchCommand::Codec(args))) => hirt_bench::codec::run(args),
        Some(Command::Bench(BenchCommand::Dataplane(args))) => hirt_linux::bench::run(args),
        Some(Command::Bench(BenchCommand::Udp(args))) => hirt_linux::bench_udp::run(args),
        Some(Command::Fec(cmd)) => cmd::fec::run(cmd),
    }
}
