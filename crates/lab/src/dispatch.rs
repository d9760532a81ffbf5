//! What each workload kind runs: its name in the results, its server in the server namespace
//! (built in, or an external tool when installed) and its client in the client namespace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::config::WorkloadKind;
use crate::netns;
use crate::session::Lab;
use crate::topo::Topology;
use crate::workload::{self, Samples};

impl Lab<'_> {
    /// The workload's name in tables, files and plots.
    pub(crate) fn name(&self, w: WorkloadKind) -> String {
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

    /// Starts the workload's server unless it runs already; `false` (with a note) when its
    /// tool is not installed.
    pub(crate) fn ensure_server(
        &mut self,
        w: WorkloadKind,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<bool> {
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

    /// Runs the workload's client for the configured duration.
    pub(crate) fn client(
        &mut self,
        w: WorkloadKind,
        done: Arc<AtomicU64>,
    ) -> anyhow::Result<Samples> {
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

fn human_size(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}MB", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}kB", n / 1000)
    } else {
        format!("{n}B")
    }
}
