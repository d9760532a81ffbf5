//! `hirt lab --scenario inversion --tunnel udp|srv6`: TPC's delay inversion (§IV-C) through a
//! two-path tunnel. Path 0 has a 10 ms RTT and path 1 a 100 ms RTT; every
//! [`INVERSION_EVERY`] ([`SLOW_INVERSION_EVERY`] for Gamma 0.01, whose exploration is ten times
//! rarer) the two swap (both directions of both emulators at once), `--runs` times. Meanwhile an HTTP client fetches 100 kB responses over 4 parallel connections, a new
//! connection per request (TPC's workload), through the tunnel.
//!
//! The same inversions run once per policy, each on a freshly started tunnel:
//! `lowest-delay` (EXP3 with TPC's reward in ms, one step per new flow) with Gamma 0.1 and 0.01,
//! the same with every path's probes feeding the weights (`feedback = every-path`, Gamma 0.1),
//! and `random` (uniform, the baseline). For EXP3 the client's and the server's published
//! weights are polled every 5 ms (published every 25 ms): the convergence time of an inversion
//! is from the swap until the path that became the faster holds 90% of the EXP3 weight of all
//! paths (TPC's criterion; the health states, which briefly take a path that went quiet out of
//! use, do not count); an inversion that does not converge before the next one counts as not converged
//! (infinite in the percentiles). Request completion times are compared between policies.
//!
//! The links have the profile's rate and queue and, unless `--loss` or `--jitter` are given,
//! no loss and no jitter (TPC's inversion has neither): the delays alone decide.
//!
//! Summary keys: `exp3_converge_p90_ms` (per variant: `{"0.1": .., "0.01": ..,
//! "0.1-every-path": ..}`),
//! `exp3_p50_ms` (request completion, Gamma 0.1), `random_p50_ms`, `runs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hirt_core::path::{Exp3Feedback, Exp3Reward, PathManagerConfig, PolicyConfig, PolicyKind};
use serde_json::{json, Map, Value};

use crate::config::LabConfig;
use crate::dual::{percentile, sorted, sources, wait_for, DualNet, DualTunnel, PathLinks};
use crate::netns;
use crate::profile::links;
use crate::workload::http::{self, HttpClient};

/// Time between two inversions.
pub const INVERSION_EVERY: Duration = Duration::from_secs(5);
/// Time between two inversions under EXP3 with Gamma 0.01: TPC reports about 5 s to converge,
/// and a new flow explores the other path ten times less often than with Gamma 0.1.
pub const SLOW_INVERSION_EVERY: Duration = Duration::from_secs(20);
/// One-way delay of the fast path (10 ms RTT).
const FAST: Duration = Duration::from_millis(5);
/// One-way delay of the slow path (100 ms RTT).
const SLOW: Duration = Duration::from_millis(50);
/// The EXP3 weight share that counts as converged (TPC: 90%).
const CONVERGED: f64 = 0.9;
/// TPC's workload: 100 kB responses over 4 parallel connections, a new one per request.
const RESPONSE: usize = 100_000;
const CONNECTIONS: usize = 4;

/// One policy the inversions run under.
struct Phase {
    name: &'static str,
    /// The key of its convergence figures (`None`: not EXP3).
    key: Option<&'static str>,
    policy: PolicyConfig,
    every: Duration,
}

fn phases() -> Vec<Phase> {
    let exp3 = |gamma, feedback| PolicyConfig {
        kind: PolicyKind::LowestDelay,
        gamma,
        reward: Exp3Reward::Milliseconds,
        feedback,
        ..PolicyConfig::default()
    };
    vec![
        Phase {
            name: "exp3-gamma-0.1",
            key: Some("0.1"),
            policy: exp3(0.1, Exp3Feedback::Chosen),
            every: INVERSION_EVERY,
        },
        Phase {
            name: "exp3-gamma-0.01",
            key: Some("0.01"),
            policy: exp3(0.01, Exp3Feedback::Chosen),
            every: SLOW_INVERSION_EVERY,
        },
        Phase {
            name: "exp3-gamma-0.1-every-path",
            key: Some("0.1-every-path"),
            policy: exp3(0.1, Exp3Feedback::EveryPath),
            every: INVERSION_EVERY,
        },
        Phase {
            name: "random",
            key: None,
            policy: PolicyConfig::of(PolicyKind::Random),
            every: INVERSION_EVERY,
        },
    ]
}

/// The links of path `k` at the start: path 0 fast, path 1 slow.
fn path_links(args: &LabConfig, k: u64) -> PathLinks {
    let (mut up, mut down) = links(args);
    for d in [&mut up, &mut down] {
        d.delay = if k == 0 { FAST } else { SLOW };
        if args.jitter.is_none() {
            d.jitter = Duration::ZERO;
        }
        if args.loss.is_none() {
            d.loss = "none".into();
        }
        d.seed = d.seed.wrapping_add(k * 1000);
    }
    (up, down)
}

/// Runs the scenario; the JSON summary.
pub fn inversion(args: &LabConfig) -> anyhow::Result<Value> {
    args.validate()?;
    let net = DualNet::build([&path_links(args, 0), &path_links(args, 1)])?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, cc) = (stop.clone(), args.cc.clone());
        netns::join(netns::in_ns(&net.topo.server, move || {
            http::serve(http::any(http::PORT), &cc, stop)
        }))?;
    }
    let mut report = Map::new();
    let mut converge_p90 = Map::new();
    let mut converge_p50 = Map::new();
    let mut server_p90 = Map::new();
    let mut requests = Map::new();
    let mut result = Ok(());
    for (i, phase) in phases().iter().enumerate() {
        match run_phase(args, &net, phase, i as u64) {
            Ok(r) => {
                if let Some(key) = phase.key {
                    let key = key.to_string();
                    converge_p90.insert(key.clone(), json!(finite(r.client_p(90.0))));
                    converge_p50.insert(key.clone(), json!(finite(r.client_p(50.0))));
                    server_p90.insert(key, json!(finite(r.server_p(90.0))));
                }
                requests.insert(phase.name.into(), r.json());
            }
            Err(e) => {
                result = Err(e.context(format!("phase {}", phase.name)));
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    result?;
    let p50 = |name: &str| {
        requests
            .get(name)
            .and_then(|r| r.get("request_p50_ms").cloned())
    };
    report.insert("scenario".into(), json!("inversion"));
    report.insert("runs".into(), json!(args.runs));
    report.insert(
        "inversion_every_ms".into(),
        json!(phases()
            .iter()
            .map(|p| (p.name.to_string(), json!(p.every.as_millis() as u64)))
            .collect::<Map<String, Value>>()),
    );
    report.insert(
        "rtt_ms".into(),
        json!([FAST.as_millis() as u64 * 2, SLOW.as_millis() as u64 * 2]),
    );
    report.insert("exp3_converge_p90_ms".into(), Value::Object(converge_p90));
    report.insert("exp3_converge_p50_ms".into(), Value::Object(converge_p50));
    report.insert(
        "server_exp3_converge_p90_ms".into(),
        Value::Object(server_p90),
    );
    report.insert("exp3_p50_ms".into(), json!(p50("exp3-gamma-0.1")));
    report.insert("random_p50_ms".into(), json!(p50("random")));
    report.insert("phases".into(), Value::Object(requests));
    report.insert(
        "profile".into(),
        json!(format!("{:?}", args.profile).to_lowercase()),
    );
    report.insert("tunnel".into(), json!(args.tunnel));
    report.insert("machine".into(), json!(crate::run::machine()));
    Ok(Value::Object(report))
}

/// `None` for an infinite percentile (more inversions than that did not converge).
fn finite(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
}

/// What one policy's inversions gave.
struct PhaseResult {
    /// Convergence time per inversion (infinite: not before the next one), client and server.
    client_ms: Vec<f64>,
    server_ms: Vec<f64>,
    requests_ms: Vec<f64>,
    errors: u64,
    corrupt: u64,
    /// The share of the client's sources on the faster path, per inversion period.
    fast_share: Vec<f64>,
    /// The client's EXP3 weight share and probability of the faster path at the end of each
    /// period.
    end_state: Vec<(f64, f64)>,
}

impl PhaseResult {
    fn client_p(&self, p: f64) -> Option<f64> {
        percentile(&sorted(&self.client_ms), p)
    }

    fn server_p(&self, p: f64) -> Option<f64> {
        percentile(&sorted(&self.server_ms), p)
    }

    fn json(&self) -> Value {
        let req = sorted(&self.requests_ms);
        let not_converged = |v: &[f64]| v.iter().filter(|x| !x.is_finite()).count();
        let finite_ms =
            |v: &[f64]| -> Vec<Option<f64>> { v.iter().map(|&x| finite(Some(x))).collect() };
        json!({
            "inversions": self.fast_share.len(),
            "requests": req.len(),
            "request_errors": self.errors,
            "request_corrupt": self.corrupt,
            "request_p50_ms": percentile(&req, 50.0),
            "request_p90_ms": percentile(&req, 90.0),
            "request_p99_ms": percentile(&req, 99.0),
            "request_mean_ms": (!req.is_empty()).then(|| req.iter().sum::<f64>() / req.len() as f64),
            "converge_p50_ms": finite(self.client_p(50.0)),
            "converge_p90_ms": finite(self.client_p(90.0)),
            "server_converge_p50_ms": finite(self.server_p(50.0)),
            "server_converge_p90_ms": finite(self.server_p(90.0)),
            "not_converged": not_converged(&self.client_ms),
            "server_not_converged": not_converged(&self.server_ms),
            "converge_ms": finite_ms(&self.client_ms),
            "server_converge_ms": finite_ms(&self.server_ms),
            "fast_path_share": self.fast_share,
            "fast_path_weight_at_end": self.end_state.iter().map(|e| e.0).collect::<Vec<_>>(),
            "fast_path_probability_at_end": self.end_state.iter().map(|e| e.1).collect::<Vec<_>>(),
            "request_ms": self.requests_ms,
        })
    }
}

/// The EXP3 weight share of `path` an end last published.
fn weight(s: &hirt_linux::metrics::PathsStatus, path: u8) -> f64 {
    s.paths
        .iter()
        .find(|p| p.path == path)
        .map_or(0.0, |p| p.exp3_weight)
}

fn run_phase(
    args: &LabConfig,
    net: &DualNet,
    phase: &Phase,
    index: u64,
) -> anyhow::Result<PhaseResult> {
    // Every phase starts with path 0 fast.
    net.emus[0].set_delays(FAST, FAST);
    net.emus[1].set_delays(SLOW, SLOW);
    let paths = PathManagerConfig {
        policy: phase.policy.clone(),
        ..Default::default()
    };
    let tunnel = DualTunnel::start(net, args.tunnel, args.seed.wrapping_add(index), paths)?;
    let r = measure_phase(args, net, phase, index, &tunnel);
    tunnel.stop();
    r
}

fn measure_phase(
    args: &LabConfig,
    net: &DualNet,
    phase: &Phase,
    index: u64,
    tunnel: &DualTunnel,
) -> anyhow::Result<PhaseResult> {
    tunnel.wait_paths_up(Duration::from_secs(20))?;
    let exp3 = phase.key.is_some();
    let every = phase.every;
    let total = every * (args.runs as u32 + 1);
    let client = HttpClient {
        server: std::net::SocketAddr::new(tunnel.server_addr(), http::PORT),
        bind: tunnel.client_addr(),
        connections: CONNECTIONS,
        size: RESPONSE,
        duration: total,
        new_conn: true,
        cc: args.cc.clone(),
        first_id: (index + 1) * 100_000_000,
    };
    let h = netns::in_ns(&net.topo.client, move || Ok(http::run(&client, &|_| {})));
    // Before the first inversion, EXP3 has learnt that path 0 is the fast one (up to one
    // period, then the inversions start regardless).
    let start = Instant::now();
    if exp3 {
        wait_for(every, || {
            weight(&tunnel.client_paths(), 0) >= CONVERGED
                && weight(&tunnel.server_paths(), 0) >= CONVERGED
        });
    }
    let mut next = start + every;
    let mut fast = 0u8;
    let mut client_ms = Vec::new();
    let mut server_ms = Vec::new();
    let mut fast_share = Vec::new();
    let mut end_state = Vec::new();
    for run in 0..args.runs {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        fast ^= 1;
        let (f, s) = (fast as usize, 1 - fast as usize);
        net.emus[f].set_delays(FAST, FAST);
        net.emus[s].set_delays(SLOW, SLOW);
        let inverted = Instant::now();
        next = inverted + every;
        let before = sources(&tunnel.client_paths());
        let (mut c, mut v) = (None, None);
        while Instant::now() < next {
            let now = Instant::now();
            if exp3 {
                let ms = (now - inverted).as_secs_f64() * 1e3;
                if c.is_none() && weight(&tunnel.client_paths(), fast) >= CONVERGED {
                    c = Some(ms);
                }
                if v.is_none() && weight(&tunnel.server_paths(), fast) >= CONVERGED {
                    v = Some(ms);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let end = tunnel.client_paths();
        let after = sources(&end);
        let prob = end
            .paths
            .iter()
            .find(|p| p.path == fast)
            .map_or(0.0, |p| p.probability);
        end_state.push((weight(&end, fast), prob));
        let sent = |k: usize| after[k].saturating_sub(before[k]) as f64;
        let all = sent(0) + sent(1);
        fast_share.push(if all > 0.0 { sent(f) / all } else { 0.0 });
        if exp3 {
            client_ms.push(c.unwrap_or(f64::INFINITY));
            server_ms.push(v.unwrap_or(f64::INFINITY));
        }
        if !args.quiet {
            let show = |x: Option<f64>| x.map_or("-".to_string(), |ms| format!("{ms:.0} ms"));
            eprintln!(
                "{} inversion {}/{}: converged client {} server {}, {:.0}% of sources on the fast path; \
                 at the end its weight {:.3}, probability {:.3}",
                phase.name,
                run + 1,
                args.runs,
                show(c),
                show(v),
                100.0 * fast_share.last().copied().unwrap_or(0.0),
                end_state.last().map_or(0.0, |e| e.0),
                end_state.last().map_or(0.0, |e| e.1),
            );
        }
    }
    let samples = netns::join(h)?;
    Ok(PhaseResult {
        client_ms,
        server_ms,
        requests_ms: samples
            .latencies_us
            .iter()
            .map(|&us| us as f64 / 1e3)
            .collect(),
        errors: samples.errors,
        corrupt: samples.corrupt,
        fast_share,
        end_state,
    })
}
