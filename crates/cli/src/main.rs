//! `hirt`: one binary for the tunnel, the lab, the simulator and the benchmarks.
//!
//! With no arguments it runs `hirt demo`: a short Starlink-like lab comparing 10 kB HTTP requests
//! without and with FEC.

use clap::{Parser, Subcommand};
use hirt_cli::cmd;

/// Counts the heap's bytes for `hirt status` and the soak's memory check.
#[global_allocator]
static ALLOCATOR: hirt_os::heap::CountingAllocator = hirt_os::heap::CountingAllocator;

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
    Demo(cmd::lab::DemoArgs),
    /// End-to-end lab in network namespaces with the userspace link emulator.
    Lab(cmd::lab::LabArgs),
    /// Deterministic simulation of one scenario or a sweep.
    Sim(cmd::sim::SimArgs),
    /// Run hirt as an SRv6 network function (encoder and/or decoder SIDs).
    Srv6(cmd::srv6::Srv6Args),
    /// Run hirt as a UDP tunnel between two peers (tinyfecVPN-like).
    Udp(cmd::udp::UdpArgs),
    /// Show the counters of a running instance.
    Status(cmd::status::StatusArgs),
    /// Ingress health check of a scale-out deployment: keep a multipath route over several
    /// encoder/decoder pairs to the pairs that are alive.
    Health(cmd::health::HealthArgs),
    /// Print a new private key for `hirt udp` (base64; `umask 077; hirt genkey > FILE`).
    Genkey,
    /// Read a private key on standard input, print its public key (base64).
    Pubkey,
    /// Benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// FEC diagnostics.
    #[command(subcommand)]
    Fec(cmd::fec::FecCommand),
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
        None => hirt_lab::run::run_demo(hirt_lab::config::DemoConfig::default()),
        Some(Command::Demo(args)) => cmd::lab::run_demo(args),
        Some(Command::Lab(args)) => cmd::lab::run_lab(args),
        Some(Command::Sim(args)) => cmd::sim::run(args),
        Some(Command::Srv6(args)) => cmd::srv6::run(args),
        Some(Command::Udp(args)) => cmd::udp::run(args),
        Some(Command::Status(args)) => cmd::status::run(args),
        Some(Command::Health(args)) => cmd::health::run(args),
        Some(Command::Genkey) => cmd::udp::genkey(),
        Some(Command::Pubkey) => cmd::udp::pubkey(),
        Some(Command::Bench(cmd)) => cmd::bench::run(cmd),
        Some(Command::Fec(cmd)) => cmd::fec::run(cmd),
    }
}
