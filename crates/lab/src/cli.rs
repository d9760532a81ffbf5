//! `hirt lab` and `hirt demo`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::ValueEnum;

use crate::emu::core::{DirectionConfig, QueueLimit};
use crate::emu::{DirectionStats, Emulator};
use crate::host::HostCounters;
use crate::netns;
use crate::report::{self, Comparison, LinkStats, Summary};
use crate::topo::Topology;
use crate::tunnel::{Tunnel, TunnelMode};
use crate::workload::{self, Samples};

/// Link profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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
}

/// Workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FecRuns {
    /// Baseline (no FEC) then FEC over the same seed and loss process.
    Both,
    /// Baseline only.
    Off,
    /// FEC only.
    On,
}

/// Arguments of `hirt lab`.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// Link profile.
    #[arg(long, value_enum, default_value = "starlink")]
    pub profile: Profile,
    /// Workloads to run (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "http")]
    pub workload: Vec<WorkloadKind>,
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
    pub tunnel: TunnelMode,
    /// Which runs.
    #[arg(long, value_enum, default_value = "both")]
    pub fec: FecRuns,
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
}

impl Default for LabArgs {
    fn default() -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: LabArgs,
        }
        W::parse_from(["lab"]).a
    }
}

/// Arguments of `hirt demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Duration of each of the two runs.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Tunnel mode.
    #[arg(long, value_enum, default_value = "udp")]
    pub tunnel: TunnelMode,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl DemoArgs {
    /// The embedded default that `hirt` with no arguments runs.
    pub fn default_demo() -> Self {
        DemoArgs {
            duration: Duration::from_secs(25),
            tunnel: TunnelMode::Udp,
            json: false,
        }
    }
}

/// Runs `hirt demo`: a short starlink lab of 10 kB HTTP requests, without and with FEC.
pub fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    if !crate::sys::is_root() {
        bail!(
            "hirt demo builds network namespaces and needs root: run `sudo hirt` (or `sudo hirt demo`).\n\
             Without root, try `hirt sim --loss ge:p=0.00151,r=0.333` (the simulator needs no privileges)."
        );
    }
    if !args.json {
        println!(
            "hirt demo: a Starlink-like link (50 ms RTT, ~0.45% loss in bursts) emulated between two\n\
             network namespaces. A client fetches 10 kB over HTTP/1.1 (kernel TCP, 16 connections),\n\
             first straight over the lossy link, then through the hirt tunnel with FEC, with the same\n\
             loss process. Lost packets cost TCP a retransmission timeout or a fast-retransmit round\n\
             trip, which shows in the tail (p99) of request completion times; FEC repairs them inside\n\
             the tunnel. Each run takes {}s.\n",
            args.duration.as_secs()
        );
    }
    let lab = LabArgs {
        duration: args.duration,
        tunnel: args.tunnel,
        json: args.json,
        ..LabArgs::default()
    };
    run_lab(lab)
}

/// The link parameters of a profile, (uplink client->server, downlink server->client).
pub fn profile_links(p: Profile, seed: u64) -> (DirectionConfig, DirectionConfig) {
    let ms = Duration::from_millis;
    let mk = |delay, jitter, rate: u64, loss: &str, queue| DirectionConfig {
        delay,
        jitter,
        rate_bps: Some(rate),
        queue: QueueLimit::Packets(queue),
        loss: loss.into(),
        seed,
        ..Default::default()
    };
    let (up, down) = match p {
        Profile::Starlink => {
            let ge = "ge:p=0.00151,r=0.333";
            (
                mk(ms(25), ms(1), 100_000_000, ge, 1000),
                mk(ms(25), ms(1), 100_000_000, ge, 1000),
            )
        }
        Profile::Lte => {
            let ge = "ge:p=0.005,r=0.5";
            (
                mk(ms(20), ms(5), 20_000_000, ge, 500),
                mk(ms(20), ms(5), 50_000_000, ge, 1000),
            )
        }
        Profile::Wan => (
            mk(ms(50), ms(0), 100_000_000, "uniform:0.001", 2000),
            mk(ms(50), ms(0), 100_000_000, "uniform:0.001", 2000),
        ),
        Profile::Wan1 => (
            mk(ms(50), ms(0), 100_000_000, "uniform:0.01", 2000),
            mk(ms(50), ms(0), 100_000_000, "uniform:0.01", 2000),
        ),
        Profile::Iot => {
            let ge = "ge:p=0.01,r=0.4";
            (
                mk(ms(10), ms(1), 10_000_000, ge, 100),
                mk(ms(10), ms(1), 10_000_000, ge, 100),
            )
        }
        Profile::Clean => (
            mk(ms(0), ms(0), 0, "none", 1000),
            mk(ms(0), ms(0), 0, "none", 1000),
        ),
    };
    // Different seeds per direction, both derived from the lab seed.
    (
        DirectionConfig {
            seed: seed.wrapping_mul(2),
            ..up
        },
        DirectionConfig {
            seed: seed.wrapping_mul(2) + 1,
            ..down
        },
    )
}

fn links(args: &LabArgs) -> (DirectionConfig, DirectionConfig) {
    let (mut up, mut down) = profile_links(args.profile, args.seed);
    for d in [&mut up, &mut down] {
        if let Some(l) = &args.loss {
            d.loss = l.clone();
        }
        if let Some(v) = args.delay {
            d.delay = v;
        }
        if let Some(v) = args.jitter {
            d.jitter = v;
        }
        if let Some(v) = args.rate {
            d.rate_bps = (v > 0).then_some(v);
        }
        if let Some(v) = args.queue {
            d.queue = v;
        }
        if let Some(v) = args.reorder {
            d.reorder = v;
        }
    }
    (up, down)
}

/// Runs `hirt lab`.
pub fn run_lab(args: LabArgs) -> anyhow::Result<()> {
    let report = lab(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json)?);
    } else if let Some(dir) = &report.dir {
        println!("results (JSON, tables, CDF plots): {}", dir.display());
    }
    Ok(())
}

/// What a lab produced.
#[derive(Debug)]
pub struct LabReport {
    /// One comparison per workload.
    pub comparisons: Vec<Comparison>,
    /// The JSON written to `summary.json`.
    pub json: serde_json::Value,
    /// The results folder.
    pub dir: Option<PathBuf>,
}

/// Builds the lab, runs every workload without and with FEC, tears everything down (also on
/// error and Ctrl-C) and returns the results. Tables are printed unless `--json`.
pub fn lab(args: &LabArgs) -> anyhow::Result<LabReport> {
    if !crate::sys::is_root() {
        bail!("hirt lab builds network namespaces and needs root (run it with sudo)");
    }
    let (up, down) = links(args);
    // Parse the loss models now so that a typo fails before anything is built.
    up.link_config()?;
    down.link_config()?;
    netns::install_signal_handler();
    netns::remove_stale();
    let _teardown = netns::Teardown;
    let topo = Topology::build().context("building the lab topology")?;
    if args.bench_emulator {
        let json = bench_emulator(args, &topo)?;
        return Ok(LabReport {
            comparisons: Vec::new(),
            json,
            dir: None,
        });
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = args
        .results
        .join(format!("lab-{:?}-{stamp}-{}", args.profile, std::process::id()).to_lowercase());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut comparisons = Vec::new();
    let mut lab = Lab::new(args, &topo, up, down, dir.clone())?;
    for w in &args.workload {
        let c = lab.compare(*w)?;
        if !args.json {
            println!("{}", c.table());
        }
        std::fs::write(dir.join(format!("{}.txt", c.workload)), c.table())?;
        comparisons.push(c);
    }
    let json = serde_json::json!({
        "profile": format!("{:?}", args.profile).to_lowercase(),
        "seed": args.seed,
        "tunnel": format!("{:?}", args.tunnel).to_lowercase(),
        "uplink": format!("{:?}", lab.up),
        "downlink": format!("{:?}", lab.down),
        "machine": machine(),
        "summary": comparisons.first().map(Comparison::json),
        "workloads": comparisons.iter().map(Comparison::json).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    drop(lab);
    Ok(LabReport {
        comparisons,
        json,
        dir: Some(dir),
    })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{n} x {cpu}; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// One lab session: topology, servers, and the runs.
struct Lab<'a> {
    args: &'a LabArgs,
    topo: &'a Topology,
    up: DirectionConfig,
    down: DirectionConfig,
    stop: Arc<AtomicBool>,
    run_id: u64,
    dir: PathBuf,
    servers_started: Vec<WorkloadKind>,
    cert: Option<rustls::pki_types::CertificateDer<'static>>,
}

impl Drop for Lab<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Which path a run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunKind {
    Lossless,
    Baseline,
    Fec,
}

impl<'a> Lab<'a> {
    fn new(
        args: &'a LabArgs,
        topo: &'a Topology,
        up: DirectionConfig,
        down: DirectionConfig,
        dir: PathBuf,
    ) -> anyhow::Result<Self> {
        Ok(Lab {
            args,
            topo,
            up,
            down,
            stop: Arc::new(AtomicBool::new(false)),
            run_id: 0,
            dir,
            servers_started: Vec::new(),
            cert: None,
        })
    }

    fn name(&self, w: WorkloadKind) -> String {
        let size = human_size(self.args.size);
        match w {
            WorkloadKind::Http => format!(
                "http-tcp-{}-{size}{}",
                self.args.cc,
                if self.args.new_conn { "-newconn" } else { "" }
            ),
            WorkloadKind::Quic => {
                let ld = self.loss_detection();
                let proto = if self.args.http3 { "http3" } else { "http" };
                if ld == workload::quic::LossDetection::default() {
                    format!("{proto}-quic-{size}")
                } else {
                    format!(
                        "{proto}-quic-{size}-reorder-{}pkt-{}rtt",
                        ld.packet_threshold, ld.time_threshold
                    )
                }
            }
            WorkloadKind::Bulk => format!("bulk-tcp-{}", self.args.cc),
            WorkloadKind::Rpc => "rpc-4k".to_string(),
            WorkloadKind::Mqtt => "mqtt-qos1".to_string(),
            WorkloadKind::Wrk => format!("wrk-http-{}-{size}", self.args.cc),
            WorkloadKind::Iperf3 => format!("iperf3-{}", self.args.cc),
            WorkloadKind::H2load => format!("h2load-http1-{}-{size}", self.args.cc),
        }
    }

    fn loss_detection(&self) -> workload::quic::LossDetection {
        workload::quic::LossDetection {
            packet_threshold: self.args.quic_packet_threshold,
            time_threshold: self.args.quic_time_threshold,
        }
    }

    fn ensure_server(&mut self, w: WorkloadKind, notes: &mut Vec<String>) -> anyhow::Result<bool> {
        if self.servers_started.contains(&w) {
            return Ok(true);
        }
        let stop = self.stop.clone();
        let cc = self.args.cc.clone();
        let srv = self.topo.server.clone();
        let v6 = self.args.tunnel.v6();
        let ok = match w {
            WorkloadKind::Wrk | WorkloadKind::H2load => {
                let tool = http_tool(w).expect("an HTTP tool workload");
                match tool.find() {
                    None => {
                        notes.push(format!(
                            "{0} skipped: {0} is not installed (apt install {1})",
                            tool.name(),
                            tool.package()
                        ));
                        false
                    }
                    Some(_) => self.ensure_server(WorkloadKind::Http, notes)?,
                }
            }
            WorkloadKind::Iperf3 => match workload::tools::iperf3() {
                None => {
                    notes.push(
                        "iperf3 skipped: iperf3 is not installed (apt install iperf3)".into(),
                    );
                    false
                }
                Some(bin) => {
                    let log = self.dir.join("iperf3-server.log");
                    let port = workload::tools::IPERF3_PORT.to_string();
                    netns::spawn(
                        &srv,
                        &bin.display().to_string(),
                        &["-s".into(), "-p".into(), port],
                        &log,
                    )?;
                    let addr = std::net::SocketAddr::new(
                        Topology::server_app(v6),
                        workload::tools::IPERF3_PORT,
                    );
                    if !wait_listening(&srv, addr)? {
                        let l = std::fs::read_to_string(&log).unwrap_or_default();
                        bail!("iperf3 -s did not start: {}", l.trim());
                    }
                    true
                }
            },
            WorkloadKind::Http => {
                netns::join(netns::in_ns(&srv, move || {
                    workload::http::serve(workload::http::any(workload::http::PORT), &cc, stop)
                }))?;
                true
            }
            WorkloadKind::Bulk => {
                netns::join(netns::in_ns(&srv, move || {
                    workload::bulk::serve(workload::http::any(workload::bulk::PORT), &cc, stop)
                }))?;
                true
            }
            WorkloadKind::Rpc => {
                netns::join(netns::in_ns(&srv, move || {
                    workload::rpc::serve(workload::http::any(workload::rpc::PORT), &cc, stop)
                }))?;
                true
            }
            WorkloadKind::Quic => {
                let (cert, key) = workload::quic::certificate()?;
                let ld = self.loss_detection();
                let http3 = self.args.http3;
                self.cert = Some(cert.clone());
                let (tx, rx) = std::sync::mpsc::channel();
                // The server thread lives until `stop`; it is not joined.
                let _server = netns::in_ns(&srv, move || {
                    let srv = workload::quic::QuicServer {
                        addr: workload::http::any(workload::quic::PORT),
                        cc,
                        loss_detection: ld,
                        http3,
                        cert,
                        key,
                    };
                    workload::quic::serve(srv, stop, tx)
                });
                rx.recv().context("QUIC server thread")??;
                true
            }
            WorkloadKind::Mqtt => match workload::mqtt::mosquitto() {
                None => {
                    notes.push(
                        "MQTT skipped: mosquitto is not installed (apt install mosquitto)".into(),
                    );
                    false
                }
                Some(bin) => {
                    let conf = self.dir.join("mosquitto.conf");
                    std::fs::write(
                        &conf,
                        format!("listener {}\nallow_anonymous true\nset_tcp_nodelay true\nmax_inflight_messages 0\n", workload::mqtt::PORT),
                    )?;
                    let log = self.dir.join("mosquitto.log");
                    netns::spawn(
                        &srv,
                        bin,
                        &["-c".to_string(), conf.display().to_string()],
                        &log,
                    )?;
                    let addr =
                        std::net::SocketAddr::new(Topology::server_app(v6), workload::mqtt::PORT);
                    if !wait_listening(&srv, addr)? {
                        let l = std::fs::read_to_string(&log).unwrap_or_default();
                        bail!("mosquitto did not start: {}", l.trim());
                    }
                    true
                }
            },
        };
        if ok {
            self.servers_started.push(w);
        }
        Ok(ok)
    }

    fn compare(&mut self, w: WorkloadKind) -> anyhow::Result<Comparison> {
        let name = self.name(w);
        let mut notes = Vec::new();
        let mut c = Comparison {
            workload: name.clone(),
            lossless: None,
            baseline: Summary::default(),
            fec: None,
            fec_stats: None,
            lossless_link: None,
            baseline_link: LinkStats::default(),
            fec_link: None,
            notes: Vec::new(),
        };
        if !self.ensure_server(w, &mut notes)? {
            c.notes = notes;
            return Ok(c);
        }
        let mut series: Vec<(String, Vec<u64>)> = Vec::new();
        let mut kinds = Vec::new();
        if self.args.lossless {
            kinds.push(RunKind::Lossless);
        }
        if self.args.fec != FecRuns::On {
            kinds.push(RunKind::Baseline);
        }
        if self.args.fec != FecRuns::Off {
            kinds.push(RunKind::Fec);
        }
        for kind in kinds {
            let (mut samples, link, fec) = match self.one_run(w, kind, &name) {
                Ok(r) => r,
                Err(e) if kind == RunKind::Fec => {
                    notes.push(format!("FEC run failed: {e:#}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(n) = samples.note.take() {
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            let s = Summary::of(&mut samples);
            let label = match kind {
                RunKind::Lossless => "lossless",
                RunKind::Baseline => "no FEC",
                RunKind::Fec => "FEC",
            };
            // The raw completion times (sorted, one per line, ms), for plots of one's own.
            let raw: String = samples
                .latencies_us
                .iter()
                .map(|us| format!("{:.3}\n", *us as f64 / 1000.0))
                .collect();
            let file = format!("{name}-{}-ms.txt", label.replace(' ', "-").to_lowercase());
            let _ = std::fs::write(self.dir.join(file), raw);
            series.push((label.to_string(), samples.latencies_us));
            match kind {
                RunKind::Lossless => {
                    c.lossless = Some(s);
                    c.lossless_link = Some(link);
                }
                RunKind::Baseline => {
                    c.baseline = s;
                    c.baseline_link = link;
                }
                RunKind::Fec => {
                    c.fec = Some(s);
                    c.fec_link = Some(link);
                    c.fec_stats = fec;
                }
            }
        }
        c.notes = notes;
        let refs: Vec<(&str, &[u64])> = series
            .iter()
            .map(|(l, v)| (l.as_str(), v.as_slice()))
            .collect();
        let title = format!(
            "{name}, {:?} profile, seed {}",
            self.args.profile, self.args.seed
        );
        report::write_cdf_svg(&self.dir, &name, &title, &refs)?;
        Ok(c)
    }

    fn one_run(
        &mut self,
        w: WorkloadKind,
        kind: RunKind,
        name: &str,
    ) -> anyhow::Result<(Samples, LinkStats, Option<report::FecStats>)> {
        self.run_id += 1;
        let (mut up, mut down) = (self.up.clone(), self.down.clone());
        if kind == RunKind::Lossless {
            up.loss = "none".into();
            down.loss = "none".into();
        }
        let emu = Emulator::start(Some(&self.topo.link), "la", "lb", &up, &down)
            .context("starting the link emulator")?;
        let tunnel = if kind == RunKind::Fec {
            let latency = !matches!(w, WorkloadKind::Bulk | WorkloadKind::Iperf3);
            let extra = tunnel_args(
                self.args.tunnel_args.as_deref(),
                &self.up,
                &self.down,
                latency,
            );
            Some(Tunnel::start(
                self.topo,
                self.args.tunnel,
                Some(&extra),
                self.args.seed,
            )?)
        } else {
            self.topo.route_plain()?;
            None
        };
        // Let the path settle (tunnel handshake, first feedback).
        std::thread::sleep(Duration::from_millis(300));
        let label = match kind {
            RunKind::Lossless => "lossless",
            RunKind::Baseline => "no FEC  ",
            RunKind::Fec => "FEC     ",
        };
        let done = Arc::new(AtomicU64::new(0));
        let bar = progress(
            self.args.quiet || self.args.json,
            &format!("{name} {label}"),
            self.args.duration,
            done.clone(),
        );
        let ends = [self.topo.client.as_str(), self.topo.server.as_str()];
        let host_before = HostCounters::snapshot(&ends);
        let samples = self.client(w, done.clone());
        bar.finish_and_clear();
        // Before the tunnel goes: its TUN devices' counters go with them.
        let host = HostCounters::snapshot(&ends).since(&host_before);
        let samples = samples?;
        let fec = tunnel.as_ref().map(|t| t.stats());
        if let Some(t) = &tunnel {
            let raw: Vec<_> = t
                .raw_status()
                .into_iter()
                .map(|(c, r)| serde_json::json!({"control": c, "status": serde_json::from_str::<serde_json::Value>(&r).unwrap_or(serde_json::Value::String(r))}))
                .collect();
            let _ = std::fs::write(
                self.dir.join(format!("{name}-hirt-status.json")),
                serde_json::to_string_pretty(&raw).unwrap_or_default(),
            );
        }
        drop(tunnel);
        self.topo.route_plain()?;
        let (ab, ba) = emu.stop();
        let mut link = link_stats(&ab, &ba);
        link.host = host;
        Ok((samples, link, fec))
    }

    fn client(&mut self, w: WorkloadKind, done: Arc<AtomicU64>) -> anyhow::Result<Samples> {
        let a = self.args.clone();
        let first_id = self.run_id * 100_000_000;
        let v6 = self.args.tunnel.v6();
        let progress = move |n: u64| {
            done.fetch_add(n, Ordering::Relaxed);
        };
        let h = match w {
            WorkloadKind::Http => netns::in_ns(&self.topo.client, move || {
                let c = workload::http::HttpClient {
                    server: workload::http::server_addr(v6),
                    bind: Topology::client_app(v6),
                    connections: a.connections,
                    size: a.size,
                    duration: a.duration,
                    new_conn: a.new_conn,
                    cc: a.cc.clone(),
                    first_id,
                };
                Ok(workload::http::run(&c, &progress))
            }),
            WorkloadKind::Wrk | WorkloadKind::H2load => {
                let tool = http_tool(w).expect("an HTTP tool workload");
                let bin = tool
                    .find()
                    .with_context(|| format!("{} not installed", tool.name()))?;
                let dir = self.dir.clone();
                netns::in_ns(&self.topo.client, move || {
                    tool.run(
                        &bin,
                        workload::http::server_addr(v6),
                        a.connections,
                        a.size,
                        a.duration,
                        &dir,
                    )
                })
            }
            WorkloadKind::Iperf3 => {
                let bin = workload::tools::iperf3().context("iperf3 not installed")?;
                netns::in_ns(&self.topo.client, move || {
                    let server = std::net::SocketAddr::new(
                        Topology::server_app(v6),
                        workload::tools::IPERF3_PORT,
                    );
                    workload::tools::run_iperf3(&bin, server, &a.cc, a.duration)
                })
            }
            WorkloadKind::Bulk => netns::in_ns(&self.topo.client, move || {
                let server =
                    std::net::SocketAddr::new(Topology::server_app(v6), workload::bulk::PORT);
                Ok(workload::bulk::run(
                    Topology::client_app(v6),
                    server,
                    &a.cc,
                    a.duration,
                    &progress,
                ))
            }),
            WorkloadKind::Rpc => netns::in_ns(&self.topo.client, move || {
                let c = workload::rpc::RpcClient {
                    server: std::net::SocketAddr::new(
                        Topology::server_app(v6),
                        workload::rpc::PORT,
                    ),
                    bind: Topology::client_app(v6),
                    clients: a.connections,
                    duration: a.duration,
                    cc: a.cc.clone(),
                    seed: a.seed,
                };
                Ok(workload::rpc::run(&c, &progress))
            }),
            WorkloadKind::Mqtt => {
                let run = self.run_id;
                netns::in_ns(&self.topo.client, move || {
                    let c = workload::mqtt::MqttClient {
                        server: std::net::SocketAddr::new(
                            Topology::server_app(v6),
                            workload::mqtt::PORT,
                        ),
                        bind: Topology::client_app(v6),
                        clients: a.connections.min(10),
                        duration: a.duration,
                        interval: Duration::from_millis(10),
                        cc: a.cc.clone(),
                        run,
                    };
                    Ok(workload::mqtt::run(&c, &progress))
                })
            }
            WorkloadKind::Quic => {
                let cert = self.cert.clone().context("QUIC server not started")?;
                let ld = self.loss_detection();
                netns::in_ns(&self.topo.client, move || {
                    let c = workload::quic::QuicClient {
                        server: std::net::SocketAddr::new(
                            Topology::server_app(v6),
                            workload::quic::PORT,
                        ),
                        bind: Topology::client_app(v6),
                        connections: a.connections,
                        size: a.size,
                        duration: a.duration,
                        cc: a.cc.clone(),
                        first_id,
                        cert,
                        loss_detection: ld,
                        http3: a.http3,
                    };
                    workload::quic::run(&c, Arc::new(progress))
                })
            }
        };
        netns::join(h)
    }
}

/// Bytes of a full-size tunnel packet on the link: the 1280-byte path MTU of the application
/// routes plus the UDP tunnel's 61 bytes (docs/dataplane.md).
const TUNNEL_PACKET: u64 = 1341;

/// The sliding window the lab gives the tunnel: twice the link's bandwidth-delay product in
/// full-size packets, rounded up to a hundred, within [200, 2400] (200 is the dataplane's
/// default). The "ours" controller pays a deficit the decoder reports with repairs sent a round
/// trip later; they only help losses still inside the window, so the window must hold more than
/// a round trip of packets (CUBIC's queue adds to the round trip). At 9.3 kpps x 100 ms (`wan1`)
/// the default 200 covers a fifth of it: 38 unrecoverable losses in a 30 s bulk run where a
/// window of 1000 or 2000 had none (docs/lab.md). 2400 is the window the simulator validated.
pub fn tunnel_window(up: &DirectionConfig, down: &DirectionConfig) -> u16 {
    let rtt = (up.delay + down.delay).as_secs_f64();
    let rate = up.rate_bps.max(down.rate_bps).unwrap_or(0) as f64;
    let bdp = rate / (8.0 * TUNNEL_PACKET as f64) * rtt;
    let w = ((2.0 * bdp / 100.0).ceil() * 100.0).clamp(200.0, 2400.0);
    w as u16
}

/// Surplus repair rate (repairs per source) the lab gives the "ours" controller on top of the
/// loss rate (its `base`; the dataplane default is 0.001). TCP declares a loss that the tunnel
/// recovers more than RACK's reordering window (min_rtt / 4) after it happened lost and
/// retransmits it, and the window reduction is rarely undone (2-10 undos for 100-600 such
/// retransmissions measured in `wan1` bulk runs). A decoder short of equations waits for the
/// surplus to drain the deficit: with 0.001, half of the 30 s `wan1` bulk runs stayed at 34-42
/// Mbit/s with no unrecoverable loss but ~110 spurious retransmissions; with 0.01 four of four
/// ran at 85-87 Mbit/s, at 2.4-2.6% overhead (docs/lab.md).
pub const OURS_BASE: &str = "0.01";

/// Hold of the decoder's in-order release in the lab (`--in-order-ms`): a recovered loss reaches
/// the receiver as a short delay, not as reordering. Shorter holds gave up 40-55% of the holes in
/// the starlink QUIC runs and 30% in the wan1 bulk runs (recovery had not come yet); with 30 ms,
/// 0% and 8% (docs/lab.md).
pub const IN_ORDER_MS: &str = "30";

/// Time-driven repairs of request/response workloads: a repair 1 ms after a burst of sources
/// went unprotected, re-sent 3 times 1 ms apart while nothing else went out. A lost packet of a
/// 10 kB response is then recovered within a few ms instead of at the next rate-driven repair,
/// ~20 ms later on the starlink link, and the packets held behind it wait that long (docs/lab.md,
/// QUIC). With [`FAST_REPAIRS_STRETCH`] the controller still stretches the wait when its own
/// repairs come often enough.
pub const FAST_REPAIRS: &str = "--repair-delay-ms 1 --repair-retries 3";

/// The `ours` controller's `maxdelay_ms` with [`FAST_REPAIRS`]: when its next rate-driven repair
/// is at most 10 ms away, the timer waits for it (1.25 repair intervals) instead of adding repairs.
/// The 10 kB workloads (~2.5 kpps, a repair interval of ~20 ms) keep 1 ms timers; the 1 MB
/// workload (~8 kpps, ~6 ms) does not pay a timer repair every 1 ms: 11.8% overhead with
/// `maxdelay_ms=0`, 4716 queue drops (docs/lab.md).
pub const FAST_REPAIRS_STRETCH: &str = "10";

/// The arguments of both tunnel ends: the user's `--tunnel-args`, plus `--window` sized for the
/// link ([`tunnel_window`]) unless they choose the window or a block code themselves, plus
/// `--fec ours:base=`[`OURS_BASE`] unless they choose the FEC mode, plus in-order release
/// ([`IN_ORDER_MS`]) unless they set it, plus for request/response workloads (`latency`) fast
/// time-driven repairs ([`FAST_REPAIRS`], [`FAST_REPAIRS_STRETCH`]) unless they set the repair
/// timer.
pub fn tunnel_args(
    user: Option<&str>,
    up: &DirectionConfig,
    down: &DirectionConfig,
    latency: bool,
) -> String {
    let user = user.unwrap_or("").trim();
    let args: Vec<&str> = user.split_whitespace().collect();
    let has = |flag: &str| args.iter().any(|a| a.starts_with(flag));
    let block = |a: &&str| *a == "-f" || a.starts_with("--rs");
    let mut out = Vec::new();
    if !args
        .iter()
        .any(|a| block(a) || a.starts_with("--window") || a.contains("w="))
    {
        out.push(format!("--window {}", tunnel_window(up, down)));
    }
    let fast = latency && !has("--repair-delay-ms") && !has("--repair-retries");
    if !args.iter().any(|a| block(a) || a.starts_with("--fec")) {
        let stretch = if fast {
            format!(",maxdelay_ms={FAST_REPAIRS_STRETCH}")
        } else {
            String::new()
        };
        out.push(format!("--fec ours:base={OURS_BASE}{stretch}"));
    }
    if fast {
        out.push(FAST_REPAIRS.to_string());
    }
    if !has("--in-order-ms") {
        out.push(format!("--in-order-ms {IN_ORDER_MS}"));
    }
    out.push(user.to_string());
    out.join(" ").trim().to_string()
}

/// The external HTTP load generator a workload drives, if it is one of those.
fn http_tool(w: WorkloadKind) -> Option<workload::tools::HttpTool> {
    match w {
        WorkloadKind::Wrk => Some(workload::tools::HttpTool::Wrk),
        WorkloadKind::H2load => Some(workload::tools::HttpTool::H2load),
        _ => None,
    }
}

/// Waits (up to ~15 s) until something accepts TCP connections on `addr` inside namespace `ns`.
fn wait_listening(ns: &str, addr: std::net::SocketAddr) -> anyhow::Result<bool> {
    netns::join(netns::in_ns(ns, move || {
        for _ in 0..100 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(false)
    }))
}

fn link_stats(ab: &DirectionStats, ba: &DirectionStats) -> LinkStats {
    LinkStats {
        packets: ab.rx_packets + ba.rx_packets,
        bytes: ab.rx_bytes + ba.rx_bytes,
        lost: ab.lost + ba.lost,
        queue_drops: ab.queue_drops + ba.queue_drops,
        own_losses: ab.own_losses() + ba.own_losses(),
        host: HostCounters::default(),
    }
}

fn progress(hidden: bool, msg: &str, d: Duration, done: Arc<AtomicU64>) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(d.as_millis() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {elapsed}/{duration} {prefix}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(msg.to_string());
    let b = bar.clone();
    let start = Instant::now();
    std::thread::spawn(move || {
        while !b.is_finished() {
            b.set_position(start.elapsed().as_millis() as u64);
            b.set_prefix(format!("{} done", done.load(Ordering::Relaxed)));
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    bar
}

/// `--bench-emulator`: offers `bench_gbps` of 1280-byte UDP packets from the client namespace to
/// the server namespace through an unimpaired emulator, and counts what arrives.
fn bench_emulator(args: &LabArgs, topo: &Topology) -> anyhow::Result<serde_json::Value> {
    let none = DirectionConfig {
        seed: args.seed,
        ..Default::default()
    };
    let emu = Emulator::start(Some(&topo.link), "la", "lb", &none, &none)?;
    // What reaches the server's interface (kernel counter): the emulator's delivery, whatever
    // the receiving application manages to read on a busy machine.
    let rx_before = if_rx_packets(&topo.server, "b0")?;
    std::thread::sleep(Duration::from_millis(200));
    let d = args.duration.min(Duration::from_secs(10));
    let gbps = args.bench_gbps;
    let sent = netns::join(netns::in_ns(&topo.client, move || {
        // The sender must get the CPU to offer the load (below the emulator's priority).
        crate::sys::set_realtime(10);
        workload::bulk::udp_blast(gbps, d)
    }))?;
    std::thread::sleep(Duration::from_millis(300));
    let (ab, _) = emu.stop();
    let got = if_rx_packets(&topo.server, "b0")?.saturating_sub(rx_before);
    let secs = sent.1.as_secs_f64();
    let j = serde_json::json!({
        "offered_gbps": sent.0 as f64 * 1280.0 * 8.0 / secs / 1e9,
        "delivered_gbps": got as f64 * 1280.0 * 8.0 / secs / 1e9,
        "sent_packets": sent.0,
        "emulator_rx_packets": ab.rx_packets,
        "emulator_tx_packets": ab.tx_packets,
        "emulator_own_losses": ab.own_losses(),
        "emulator_socket_drops": ab.socket_drops,
        "emulator_cpu_seconds": ab.cpu_ns as f64 / 1e9,
        // What one core running the emulator thread forwards: packets per CPU-second.
        "emulator_gbps_per_core": ab.tx_packets as f64 * 1280.0 * 8.0 / (ab.cpu_ns.max(1) as f64 / 1e9) / 1e9,
        "received_packets": got,
        "lost_before_emulator": sent.0.saturating_sub(ab.rx_packets),
        "lost_in_emulator": ab.rx_packets.saturating_sub(ab.tx_packets),
        "lost_after_emulator": ab.tx_packets.saturating_sub(got),
        "packet_bytes": 1280,
        "seconds": secs,
        "machine": machine(),
    });
    if !args.json {
        println!("{}", serde_json::to_string_pretty(&j)?);
    }
    Ok(j)
}

/// Packets received by interface `dev` of namespace `ns`.
fn if_rx_packets(ns: &str, dev: &str) -> anyhow::Result<u64> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", dev])
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("ip -j output")?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .context("no rx counter")
}

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
    if n > 4_000_000 {
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

fn human_size(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}MB", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}kB", n / 1000)
    } else {
        format!("{n}B")
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
    fn profiles_parse_and_starlink_matches_the_paper() {
        for p in Profile::value_variants() {
            let (u, d) = profile_links(*p, 1);
            u.link_config().unwrap();
            d.link_config().unwrap();
            assert_ne!(u.seed, d.seed);
        }
        let (u, d) = profile_links(Profile::Starlink, 1);
        assert_eq!(u.delay + d.delay, Duration::from_millis(50));
        let spec: hirt_channel::LossSpec = u.loss.parse().unwrap();
        let loss = spec.expected_loss().unwrap();
        assert!((0.004..0.006).contains(&loss), "{loss}");
    }

    #[test]
    fn the_tunnel_window_follows_the_bandwidth_delay_product() {
        let w = |p| {
            let (u, d) = profile_links(p, 1);
            tunnel_window(&u, &d)
        };
        // 100 Mbit/s / 1341 B = 9321 pps; x 100 ms x 2 = 1864.
        assert_eq!(w(Profile::Wan1), 1900);
        assert_eq!(w(Profile::Starlink), 1000);
        assert_eq!(w(Profile::Iot), 200);
        assert_eq!(w(Profile::Clean), 200);
        let (u, d) = profile_links(Profile::Wan1, 1);
        assert_eq!(
            tunnel_args(None, &u, &d, false),
            "--window 1900 --fec ours:base=0.01 --in-order-ms 30"
        );
        assert_eq!(
            tunnel_args(None, &u, &d, true),
            "--window 1900 --fec ours:base=0.01,maxdelay_ms=10 --repair-delay-ms 1 \
             --repair-retries 3 --in-order-ms 30"
        );
        assert_eq!(
            tunnel_args(Some("--fec hirt"), &u, &d, true),
            "--window 1900 --repair-delay-ms 1 --repair-retries 3 --in-order-ms 30 --fec hirt"
        );
        assert_eq!(
            tunnel_args(Some("--window 300 --in-order-ms 0"), &u, &d, false),
            "--fec ours:base=0.01 --window 300 --in-order-ms 0"
        );
        assert_eq!(
            tunnel_args(Some("--repair-delay-ms 5"), &u, &d, true),
            "--window 1900 --fec ours:base=0.01 --in-order-ms 30 --repair-delay-ms 5"
        );
        assert_eq!(
            tunnel_args(Some("--fec fixed:w=50,step=5"), &u, &d, false),
            "--in-order-ms 30 --fec fixed:w=50,step=5"
        );
        assert_eq!(
            tunnel_args(Some("-f 20:10"), &u, &d, false),
            "--in-order-ms 30 -f 20:10"
        );
    }

    #[test]
    fn default_args_are_the_demo() {
        let a = LabArgs::default();
        assert_eq!(a.profile, Profile::Starlink);
        assert_eq!(a.workload, vec![WorkloadKind::Http]);
        assert_eq!(a.size, 10_000);
    }
}
