//! The second part of `hirt lab --scenario outage`: HTTP over kernel TCP across silent outages
//! of path 0, three ways: without FEC (straight over path 0's underlay), through a single-path
//! tunnel (FEC, path 0 only) and through the two-path tunnel (FEC + failover). Each way runs
//! `--runs` (at most [`HTTP_OUTAGES`]) windows of [`WINDOW`]; in each, path 0 goes silent for [`OUTAGE`] (a
//! Starlink-like dropout) [`OUTAGE_AT`] into the window, while 4 keep-alive connections fetch
//! 10 kB responses back to back. Request completion times (CDFs written as SVG) and failed
//! requests tell whether the connections survived and how long requests stalled.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hirt_core::path::{PathManagerConfig, PolicyConfig, PolicyKind};
use serde_json::{json, Value};

use crate::config::LabConfig;
use crate::dual::{percentile, sorted, DualNet, DualTunnel};
use crate::netns;
use crate::outage::SilentDrop;
use crate::workload::http::{self, HttpClient};
use crate::workload::Samples;

/// Most outage windows per way (fewer when `--runs` is smaller).
pub const HTTP_OUTAGES: usize = 10;
/// Length of a window.
const WINDOW: Duration = Duration::from_secs(6);
/// When the outage begins in a window, and how long it lasts.
const OUTAGE_AT: Duration = Duration::from_secs(2);
const OUTAGE: Duration = Duration::from_secs(2);
const CONNECTIONS: usize = 4;
const RESPONSE: usize = 10_000;

/// The three ways compared.
#[derive(Clone, Copy)]
enum Way {
    NoFec,
    FecSinglePath,
    FecFailover,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::NoFec => "no-fec",
            Way::FecSinglePath => "fec-single-path",
            Way::FecFailover => "fec-failover",
        }
    }
}

/// Runs the three ways over `net`; the JSON part of the report (and the CDF plot in the
/// results folder).
pub fn http_across_outages(args: &LabConfig, net: &DualNet) -> anyhow::Result<Value> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, cc) = (stop.clone(), args.cc.clone());
        netns::join(netns::in_ns(&net.topo.server, move || {
            http::serve(http::any(http::PORT), &cc, stop)
        }))?;
    }
    let outage = SilentDrop::new(&net.topo, &net.paths[0])?;
    let mut out = serde_json::Map::new();
    let mut series: Vec<(&str, Vec<u64>)> = Vec::new();
    let mut result = Ok(());
    for (k, way) in [Way::NoFec, Way::FecSinglePath, Way::FecFailover]
        .into_iter()
        .enumerate()
    {
        match run_way(args, net, &outage, way, k as u64) {
            Ok(mut s) => {
                s.latencies_us.sort_unstable();
                let ms: Vec<f64> = s.latencies_us.iter().map(|&us| us as f64 / 1e3).collect();
                let ms = sorted(&ms);
                out.insert(
                    way.name().into(),
                    json!({
                        "requests": ms.len(),
                        "failed_requests": s.errors,
                        "corrupt": s.corrupt,
                        "connections_survived": s.errors == 0,
                        "request_p50_ms": percentile(&ms, 50.0),
                        "request_p90_ms": percentile(&ms, 90.0),
                        "request_p99_ms": percentile(&ms, 99.0),
                        "request_max_ms": ms.last(),
                        "over_1s": ms.iter().filter(|&&x| x > 1000.0).count(),
                    }),
                );
                series.push((way.name(), s.latencies_us));
            }
            Err(e) => {
                result = Err(e.context(format!("HTTP across outages, {}", way.name())));
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    result?;
    let plot: Vec<(&str, &[u64])> = series.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let svg = "outage-http-cdf";
    crate::report::write_cdf_svg(
        &args.results,
        svg,
        "10 kB HTTP requests across 2 s silent outages of path 0",
        &plot,
    )?;
    out.insert("outages_per_way".into(), json!(args.runs.min(HTTP_OUTAGES)));
    out.insert("outage_ms".into(), json!(OUTAGE.as_millis() as u64));
    out.insert(
        "cdf_svg".into(),
        json!(args
            .results
            .join(format!("{svg}.svg"))
            .display()
            .to_string()),
    );
    Ok(Value::Object(out))
}

fn run_way(
    args: &LabConfig,
    net: &DualNet,
    outage: &SilentDrop,
    way: Way,
    index: u64,
) -> anyhow::Result<Samples> {
    let p0 = &net.paths[0];
    let (tunnel, server, bind): (Option<DualTunnel>, IpAddr, IpAddr) = match way {
        Way::NoFec if args.tunnel.v6() => (None, p0.server6.parse()?, p0.client6.parse()?),
        Way::NoFec => (None, p0.server4.parse()?, p0.client4.parse()?),
        Way::FecSinglePath | Way::FecFailover => {
            let used = if matches!(way, Way::FecSinglePath) {
                1
            } else {
                2
            };
            let paths = PathManagerConfig {
                policy: PolicyConfig::of(PolicyKind::Failover),
                ..Default::default()
            };
            let t =
                DualTunnel::start_on(net, args.tunnel, args.seed.wrapping_add(index), paths, used)?;
            if let Err(e) = t.wait_up(Duration::from_secs(20), used) {
                t.stop();
                return Err(e);
            }
            let (server, bind) = (t.server_addr(), t.client_addr());
            (Some(t), server, bind)
        }
    };
    let windows = args.runs.min(HTTP_OUTAGES);
    let client = HttpClient {
        server: SocketAddr::new(server, http::PORT),
        bind,
        connections: CONNECTIONS,
        size: RESPONSE,
        duration: WINDOW * windows as u32,
        new_conn: false,
        cc: args.cc.clone(),
        first_id: (index + 1) * 100_000_000,
    };
    let h = netns::in_ns(&net.topo.client, move || Ok(http::run(&client, &|_| {})));
    let mut dropped = Ok(());
    for run in 0..windows {
        std::thread::sleep(OUTAGE_AT);
        dropped = outage.start();
        std::thread::sleep(OUTAGE);
        dropped = dropped.and(outage.stop());
        if dropped.is_err() {
            break;
        }
        std::thread::sleep(WINDOW - OUTAGE_AT - OUTAGE);
        if !args.quiet {
            eprintln!("{}: outage {}/{windows}", way.name(), run + 1);
        }
    }
    let samples = netns::join(h);
    if let Some(t) = tunnel {
        t.stop();
    }
    dropped?;
    samples
}
