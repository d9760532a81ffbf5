//! `hirt lab --soak DURATION`: the tunnel under sustained traffic and repeated faults.
//!
//! The lab topology (client, emulated link, server) carries, through the tunnel, a checked
//! datagram stream in each direction ([`stream`]) and a paced TCP stream whose bytes are all
//! compared, over a link with 3% random loss each way (or `--loss`). Every `--fault-every`
//! one fault is injected, in turn:
//! - `kill-client` / `kill-server`: SIGKILL of that end's hirt processes (a crash: no clean-up),
//!   then, a second later, the same command started again;
//! - `link-flap`: both sides of the emulated link lose carrier for two seconds;
//! - `client-address` (UDP mode): the client's underlay address changes, as behind a NAT
//!   rebinding or a new DHCP lease; the server must follow it.
//!
//! For each fault the report gives the interruption the streams saw and how long after the end
//! of the fault delivery resumed; over the whole run: corrupt and duplicated datagrams (must be
//! 0), losses outside the faults, and the memory and descriptors of every hirt process.

mod analysis;
mod monitor;
pub mod stream;
mod traffic;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::config::LabConfig;
use crate::emu::Emulator;
use crate::netns::{self, ip};
use crate::profile::links;
use crate::topo::{self, Topology};
use crate::tuning::tunnel_args;
use crate::tunnel::{Side, Tunnel, TunnelMode};

pub use analysis::{FaultOutcome, SoakReport};

/// Loss of each direction unless `--loss` says otherwise.
pub const DEFAULT_LOSS: &str = "uniform:0.03";
/// How long a killed end stays down before it is started again.
const DOWN_AFTER_KILL: Duration = Duration::from_secs(1);
/// How long a link flap keeps the carrier down.
const FLAP: Duration = Duration::from_secs(2);
/// Memory and descriptors are sampled this often.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The client's second underlay address (the address-change fault alternates between the two).
const CLIENT_OTHER_4: &str = "10.99.0.11";
/// Port of the client-to-server datagram stream; the reverse stream uses the next one, TCP the
/// one after.
const PORT: u16 = 5301;
/// Rate of the TCP stream.
const TCP_BYTES_PER_S: u64 = 250_000;

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL of the client end's hirt processes, started again after a second.
    KillClient,
    /// SIGKILL of the server end's hirt processes, started again after a second.
    KillServer,
    /// Both sides of the link lose carrier for two seconds.
    LinkFlap,
    /// The client's underlay address changes (UDP mode).
    ClientAddress,
}

impl Fault {
    /// The faults of `mode`, in the order they are injected (then again from the start). An
    /// SRv6 tunnel is addressed by its SIDs, not by the underlay address of its client, so the
    /// address change applies to UDP mode only.
    pub fn cycle(mode: TunnelMode) -> &'static [Fault] {
        match mode {
            TunnelMode::Udp => &[
                Fault::KillClient,
                Fault::LinkFlap,
                Fault::KillServer,
                Fault::ClientAddress,
            ],
            TunnelMode::Srv6 => &[Fault::KillClient, Fault::LinkFlap, Fault::KillServer],
        }
    }
}

/// Runs the soak described by `args` (its `soak` duration must be set) and returns its report.
pub fn soak(args: &LabConfig) -> anyhow::Result<SoakReport> {
    let length = args.soak.context("no soak duration")?;
    if !crate::sys::is_root() {
        bail!("hirt lab --soak builds network namespaces and needs root (run it with sudo)");
    }
    let mut args = args.clone();
    if args.loss.is_none() {
        args.loss = Some(DEFAULT_LOSS.into());
    }
    args.validate()?;
    let (up, down) = links(&args);
    netns::install_signal_handler();
    netns::remove_stale();
    let _teardown = netns::Teardown;
    let topo = Topology::build().context("building the lab topology")?;
    let emu = Emulator::start(Some(&topo.link), "la", "lb", &up, &down)
        .context("starting the link emulator")?;
    let extra = tunnel_args(args.tunnel_args.as_deref(), &up, &down, false);
    let mut tunnel = Tunnel::start(&topo, args.tunnel, Some(&extra), args.seed)?;
    std::thread::sleep(Duration::from_millis(500));

    let v6 = args.tunnel.v6();
    let (client_app, server_app) = (Topology::client_app(v6), Topology::server_app(v6));
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let rx_up = traffic::receive_datagrams(
        &topo.server,
        1,
        SocketAddr::new(server_app, PORT),
        epoch,
        stop.clone(),
    )?;
    let rx_down = traffic::receive_datagrams(
        &topo.client,
        2,
        SocketAddr::new(client_app, PORT + 1),
        epoch,
        stop.clone(),
    )?;
    let tcp_counts = Arc::new(traffic::TcpCounts::default());
    let tcp_sink = traffic::tcp_sink(
        &topo.server,
        SocketAddr::new(server_app, PORT + 2),
        tcp_counts.clone(),
        stop.clone(),
    )?;
    let send_stop = Arc::new(AtomicBool::new(false));
    let pps = args.soak_pps;
    let tx_up = traffic::send_datagrams(
        &topo.client,
        1,
        client_app,
        SocketAddr::new(server_app, PORT),
        pps,
        epoch,
        send_stop.clone(),
    );
    let tx_down = traffic::send_datagrams(
        &topo.server,
        2,
        server_app,
        SocketAddr::new(client_app, PORT + 1),
        pps,
        epoch,
        send_stop.clone(),
    );
    let tcp_source = traffic::tcp_source(
        &topo.client,
        client_app,
        SocketAddr::new(server_app, PORT + 2),
        TCP_BYTES_PER_S,
        send_stop.clone(),
    );

    let mut monitor = monitor::Monitor::default();
    let mut faults = Vec::new();
    let cycle = Fault::cycle(args.tunnel);
    let mut next_fault = args.fault_every;
    let mut next_sample = Duration::ZERO;
    let mut client_moved = false;
    let quiet = args.quiet || args.json;
    while epoch.elapsed() < length {
        let now = epoch.elapsed();
        if now >= next_sample {
            for side in [Side::Client, Side::Server] {
                for pid in tunnel.pids(side) {
                    monitor.sample(pid, side, now, || tunnel.heap_live_bytes(pid));
                }
            }
            next_sample += SAMPLE_EVERY;
        }
        // No fault in the last interval: the run ends with time to see the last one recover.
        if now >= next_fault && now + args.fault_every / 2 < length {
            let fault = cycle[faults.len() % cycle.len()];
            let start = epoch.elapsed();
            let result = inject(fault, &mut tunnel, &topo, &mut client_moved);
            let end = epoch.elapsed();
            if !quiet {
                eprintln!(
                    "soak {:>6.1}s: {fault:?} ({:.2} s){}",
                    start.as_secs_f64(),
                    (end - start).as_secs_f64(),
                    match &result {
                        Ok(()) => String::new(),
                        Err(e) => format!(": {e:#}"),
                    }
                );
            }
            faults.push(analysis::Injected {
                fault,
                start,
                end,
                error: result.err().map(|e| format!("{e:#}")),
            });
            next_fault += args.fault_every;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let duration = epoch.elapsed();
    send_stop.store(true, Ordering::Relaxed);
    let sent_up = netns::join(tx_up)?;
    let sent_down = netns::join(tx_down)?;
    let tcp_failures = netns::join(tcp_source)?;
    // What is in flight arrives (or is recovered) within a few round trips.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let got_up = netns::join(rx_up)?;
    let got_down = netns::join(rx_down)?;
    netns::join(tcp_sink)?;
    let fec = tunnel.stats();
    drop(tunnel);
    let (ab, ba) = emu.stop();
    Ok(analysis::report(analysis::Inputs {
        mode: args.tunnel,
        duration,
        pps,
        fault_every: args.fault_every,
        loss: args.loss.clone().unwrap_or_default(),
        faults,
        streams: [
            ("client-to-server", sent_up, got_up),
            ("server-to-client", sent_down, got_down),
        ],
        tcp: &tcp_counts,
        tcp_failures,
        monitor,
        fec,
        link_lost: ab.lost + ba.lost,
    }))
}

/// Injects `fault` and returns when it is over (the killed end started again, the link up).
fn inject(
    fault: Fault,
    tunnel: &mut Tunnel,
    topo: &Topology,
    client_moved: &mut bool,
) -> anyhow::Result<()> {
    match fault {
        Fault::KillClient | Fault::KillServer => {
            let side = if fault == Fault::KillClient {
                Side::Client
            } else {
                Side::Server
            };
            tunnel.kill(side);
            std::thread::sleep(DOWN_AFTER_KILL);
            tunnel.start_again(side)
        }
        Fault::LinkFlap => {
            for dev in ["la", "lb"] {
                ip(&topo.link, &["link", "set", dev, "down"])?;
            }
            std::thread::sleep(FLAP);
            for dev in ["la", "lb"] {
                ip(&topo.link, &["link", "set", dev, "up"])?;
            }
            Ok(())
        }
        Fault::ClientAddress => {
            let (old, new) = if *client_moved {
                (CLIENT_OTHER_4, topo::UNDER_A4)
            } else {
                (topo::UNDER_A4, CLIENT_OTHER_4)
            };
            move_client(topo, old, new)?;
            *client_moved = !*client_moved;
            Ok(())
        }
    }
}

/// Moves the client's IPv4 underlay address from `old` to `new` (the server side learns the
/// new neighbour statically: the lab has no ARP across the emulated link).
fn move_client(topo: &Topology, old: &str, new: &str) -> anyhow::Result<()> {
    netns::sysctl(&topo.client, "net.ipv4.conf.a0.promote_secondaries=1")?;
    ip(
        &topo.server,
        &[
            "neigh",
            "replace",
            new,
            "lladdr",
            topo::MAC_A,
            "dev",
            "b0",
            "nud",
            "permanent",
        ],
    )?;
    ip(
        &topo.client,
        &["addr", "add", &format!("{new}/24"), "dev", "a0"],
    )?;
    ip(
        &topo.client,
        &["addr", "del", &format!("{old}/24"), "dev", "a0"],
    )?;
    // The underlay route's preferred source follows the address that is left.
    let _ = ip(
        &topo.client,
        &["route", "replace", "10.99.0.0/24", "dev", "a0", "src", new],
    );
    Ok(())
}
