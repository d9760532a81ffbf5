//! One lab session: the topology, the link emulator and the tunnel started per run, and the
//! comparison of a workload's runs without and with FEC.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::{FecRuns, LabConfig, WorkloadKind};
use crate::emu::core::DirectionConfig;
use crate::emu::{DirectionStats, Emulator};
use crate::host::HostCounters;
use crate::report::{self, Comparison, LinkStats, Summary};
use crate::topo::Topology;
use crate::tuning::tunnel_args;
use crate::tunnel::Tunnel;
use crate::workload::Samples;

/// One lab session: topology, servers, and the runs.
pub(crate) struct Lab<'a> {
    pub(crate) args: &'a LabConfig,
    pub(crate) topo: &'a Topology,
    pub(crate) up: DirectionConfig,
    pub(crate) down: DirectionConfig,
    /// Stops the workload servers when the session ends.
    pub(crate) stop: Arc<AtomicBool>,
    /// Number of the current run (request ids and MQTT topics differ between runs).
    pub(crate) run_id: u64,
    /// The results folder.
    pub(crate) dir: PathBuf,
    /// Workloads whose server runs.
    pub(crate) servers_started: Vec<WorkloadKind>,
    /// The QUIC server's certificate, for the clients.
    pub(crate) cert: Option<rustls::pki_types::CertificateDer<'static>>,
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
    pub(crate) fn new(
        args: &'a LabConfig,
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

    /// Runs workload `w` without and/or with FEC (as configured) and compares the runs.
    pub(crate) fn compare(&mut self, w: WorkloadKind) -> anyhow::Result<Comparison> {
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
}

fn link_stats(ab: &DirectionStats, ba: &DirectionStats) -> LinkStats {
    LinkStats {
        packets: ab.rx_packets + ba.rx_packets,
        bytes: ab.rx_bytes + ba.rx_bytes,
        lost: ab.lost + ba.lost,
        queue_drops: ab.queue_drops + ba.queue_drops,
        ce_marked: ab.ce_marked + ba.ce_marked,
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
