//! Counters of a running instance, per stream, exported in the Prometheus exposition format
//! through `prometheus-client` (`--metrics ADDR`: `# HELP` and `# TYPE` lines, counters named
//! `_total`, a `stream` label per stream) and as JSON through the control socket
//! (`hirt status`). Whether a value is a counter or a gauge is declared beside it.
//!
//! Workers own their streams, so every counter has a single writer: relaxed atomic adds are
//! enough and cost no more than a plain increment on x86.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde::Serialize;

/// Whether a value only grows (a Prometheus counter, exposed as `<name>_total`) or goes up
/// and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
}

macro_rules! counters {
    ($(#[$m:meta])* $name:ident {
        $($(#[doc = $doc:literal])* $f:ident: $kind:ident),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name { $($(#[doc = $doc])* pub $f: AtomicU64,)* }

        impl $name {
            /// Name, help text and kind of every value, in field order.
            pub const FIELDS: &'static [(&'static str, &'static str, Kind)] =
                &[$((stringify!($f), concat!($($doc),*), Kind::$kind)),*];

            /// Every value, in the order of [`Self::FIELDS`].
            pub fn values(&self) -> Vec<u64> {
                vec![$(self.$f.load(Ordering::Relaxed)),*]
            }

            /// A plain copy of every counter.
            pub fn snapshot(&self) -> std::collections::BTreeMap<&'static str, u64> {
                let mut m = std::collections::BTreeMap::new();
                $(m.insert(stringify!($f), self.$f.load(Ordering::Relaxed));)*
                m
            }
        }
    };
}

counters!(
    /// Counters of one stream (one encoder/decoder pair, HIRT Fig. 3).
    StreamCounters {
        /// Source packets taken in by the encoder.
        enc_packets_in: Counter,
        /// Source packets the encoder forwarded (tagged).
        enc_packets_out: Counter,
        /// Repair packets sent.
        repairs_sent: Counter,
        /// Of those, repairs sent by the time-driven timer (sources left unprotected for the
        /// repair delay) rather than by the rate controller or the code (copied from the
        /// encoder's count).
        repairs_timer: Counter,
        /// Of those, repairs that answered the decoder's loss reports (with a recovery
        /// deadline; copied from the encoder's count).
        repairs_report: Counter,
        /// Repair bytes sent (payload).
        repair_bytes_sent: Counter,
        /// Source bytes sent (tagged packets).
        source_bytes_sent: Counter,
        /// Feedback packets taken by the encoder.
        feedback_in: Counter,
        /// Source packets received by the decoder.
        dec_packets_in: Counter,
        /// Packets the decoder delivered (received + recovered).
        dec_packets_out: Counter,
        /// Of the sources received, those the kernel delivered itself while the decoder only
        /// took a copy (SRv6 `--kernel-sources`).
        delivered_by_kernel: Counter,
        /// Repair packets received by the decoder.
        repairs_received: Counter,
        /// Repair packets that led to at least one recovery.
        repairs_used: Counter,
        /// Packets recovered.
        recovered: Counter,
        /// Of those, recovered later than the recovery deadline after the decoder knew of the
        /// loss (copied from the decoder; 0 without `--deadline`).
        recovered_late: Counter,
        /// Median time from the first packet that showed a loss to its recovery, microseconds
        /// (gauge, since the stream began; quarter-octave buckets read as their upper bound).
        recovery_delay_p50_us: Gauge,
        /// 99th percentile of that time, microseconds (gauge).
        recovery_delay_p99_us: Gauge,
        /// Longest such time, microseconds (gauge).
        recovery_delay_max_us: Gauge,
        /// Losses the decoder detected (ESI gaps).
        losses: Counter,
        /// Losses that were never recovered.
        unrecoverable: Counter,
        /// Duplicates suppressed.
        duplicates: Counter,
        /// Received sources held back by in-order release (behind a missing one).
        held: Counter,
        /// Missing sources that in-order release stopped waiting for.
        order_skipped: Counter,
        /// Sources in-order release let past a hole: their flow was not suspected of it.
        order_passed: Counter,
        /// Times the decoder followed a restarted encoder (its ESIs began again).
        decoder_restarts: Counter,
        /// Repairs the decoder refused because they came later than the sources it keeps
        /// (copied from the decoder); its span then grows, up to the repair-lag limit.
        repairs_behind: Counter,
        /// The repair lag the decoder grew to (gauge; 0 while it keeps the configured one).
        repair_lag_grown: Gauge,
        /// Feedback packets sent by the decoder.
        feedback_sent: Counter,
        /// Loss reports the decoder sent (with a recovery deadline; copied from its count).
        loss_reports: Counter,
        /// Sources that arrived with the outer header marked CE (copied from the decoder).
        ce_marks: Counter,
        /// Feedback the encoder took as congestion on the path: CE marks reported, or a queue
        /// seen in the RTT (copied from the encoder); each pauses loss-triggered repairs.
        congestion_signals: Counter,
        /// Rate-driven and time-driven repairs the encoder's controller did not send because
        /// the path's queue overflowed (`ours:yield`; copied from the encoder).
        queue_skips: Counter,
        /// Sources dropped before coding by queue management on the path's queueing delay
        /// (`--aqm-target-ms`; copied from the encoder).
        aqm_drops: Counter,
        /// ECN-capable sources marked CE instead of dropped by that queue management (copied
        /// from the encoder).
        aqm_marks: Counter,
        /// Sources the recovery deadline asks the code to keep at the measured rate (gauge; 0
        /// without a deadline). Above the largest window (`--window`, at most 4095) losses leave
        /// the window before their loss reports are answered: a longer window, a shorter
        /// deadline or a lower rate per stream is needed.
        deadline_window_wanted: Gauge,
        /// Packets this host dropped before the decoder read them (SID device queue in SRv6
        /// mode, the socket's receive buffer in UDP mode), reported in feedback so the encoder
        /// does not answer them with more repairs.
        local_drops: Counter,
        /// Repairs or recoveries skipped because of overload.
        overload_skips: Counter,
        /// Current repair ratio x 1e6 (controller state).
        controller_ratio_ppm: Gauge,
        /// Bytes of the decoder's source symbol columns for this stream (gauge).
        dec_columns_bytes: Gauge,
        /// Bytes of the decoder's equation rows for this stream (gauge).
        dec_rows_bytes: Gauge,
        /// Bytes of the packets in-order release holds for this stream (gauge).
        dec_held_bytes: Gauge,
        /// Bytes of the recycled and waiting output buffers of the decoder slot of the worker
        /// that owns this stream (gauge; shared by the slot's streams).
        dec_output_bytes: Gauge,
        /// Repair/feedback/tunnel packets dropped for failed authentication or replay.
        auth_failures: Counter,
        /// Load of the worker owning this stream (SRv6: worker i owns stream i), x 1e6: the
        /// fraction of the last ~10 ms it was not blocked waiting for packets (gauge; drives
        /// overload control).
        worker_load_ppm: Gauge,
    }
);

counters!(
    /// Counters not tied to a stream.
    GlobalCounters {
        /// Packets that could not be parsed and were dropped.
        malformed: Counter,
        /// Packets on the SID device not addressed to one of our SIDs (the kernel's own
        /// link-local traffic, e.g. MLD reports), dropped.
        not_ours: Counter,
        /// Packets forwarded without protection (not for our SIDs' segment lists).
        unprotected: Counter,
        /// Packets dropped because of authentication failure (before a stream is known).
        auth_failures: Counter,
        /// Packets dropped because a send failed.
        send_errors: Counter,
        /// Keepalives sent.
        keepalives_sent: Counter,
        /// Times the UDP server switched to a new peer address.
        peer_address_changes: Counter,
        /// UDP mode: handshake initiations sent (client).
        handshake_initiations: Counter,
        /// UDP mode: handshake responses sent (server).
        handshake_responses: Counter,
        /// UDP mode: sessions established (client: response read; server: confirmed).
        sessions: Counter,
        /// UDP mode: handshake initiations dropped by the per-source or global token bucket.
        handshake_rate_limited: Counter,
        /// UDP mode: handshake messages dropped otherwise (bad mac1, replayed, forged).
        handshake_dropped: Counter,
        /// UDP mode: packets from the TUN device dropped for want of a session.
        no_session: Counter,
        /// Packets handed to another worker (decoder steering by stream id).
        steered: Counter,
        /// TSO packets read from the TUN device and cut into segments (UDP mode offloads).
        tun_segmented: Counter,
        /// Writes to the TUN device that carried a coalesced run of segments (UDP mode
        /// offloads).
        tun_coalesced: Counter,
        /// Packets taken from AF_XDP sockets (SRv6 `--xdp`).
        xdp_received: Counter,
        /// Packets hirt transmitted itself on an AF_XDP socket (SRv6 `--xdp`).
        xdp_sent: Counter,
        /// Sources for the encoder SID that the `--kernel-sources` XDP program passed to the
        /// kernel's End untagged, so unprotected: they came in on a receive queue other than 0,
        /// were longer than it copies (2040 bytes), or found its ring buffer full.
        kernel_untagged: Counter,
        /// Bytes the process holds on its heap (when the binary counts them).
        heap_live_bytes: Gauge,
        /// The most bytes the process has held on its heap at once.
        heap_peak_bytes: Gauge,
        /// Packets of an `--xdp` instance that went through the kernel's forwarding instead:
        /// next hop not (yet) resolved or not on an `--xdp` device, too big for its MTU, hop
        /// limit expiring, or the socket's transmit ring full.
        xdp_to_kernel: Counter,
        /// UDP mode with several paths: times the path that carries new traffic changed.
        path_switches: Counter,
        /// UDP mode with several paths: path state changes (up, suspect, down, recovering).
        path_state_changes: Counter,
        /// UDP mode with several paths: path probes sent.
        path_probes_sent: Counter,
    }
);

/// One path of a multi-path UDP tunnel, as its worker last published it (`hirt status`,
/// Prometheus `hirt_path_*{path="<id>"}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PathStatus {
    /// Path id.
    pub path: u8,
    /// The peer's address on it.
    pub remote: String,
    /// `up`, `suspect`, `down` or `recovering`.
    pub state: String,
    /// Smoothed RTT, ms (0 before the first sample).
    pub srtt_ms: f64,
    /// Smoothed loss ratio.
    pub loss: f64,
    /// Delivery rate the far end reports, bit/s.
    pub delivery_bps: f64,
    /// Share of the sources sent on it so far.
    pub share: f64,
    /// Sources sent on it.
    pub sources: u64,
    /// Repairs sent on it.
    pub repairs: u64,
    /// Probes sent on it.
    pub probes: u64,
    /// Its share of the EXP3 weights of all paths, usable or not (`lowest-delay`; 0
    /// otherwise): the learnt preference alone, before the health states restrict it (TPC's
    /// convergence criterion).
    #[serde(default)]
    pub exp3_weight: f64,
    /// The probability that the policy puts a new flow on it now.
    #[serde(default)]
    pub probability: f64,
}

impl PathStatus {
    /// The state as a number (Prometheus gauge): 0 up, 1 suspect, 2 down, 3 recovering.
    pub fn state_code(&self) -> u64 {
        match self.state.as_str() {
            "up" => 0,
            "suspect" => 1,
            "down" => 2,
            _ => 3,
        }
    }
}

/// What a multi-path worker publishes: its policy and its paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PathsStatus {
    /// The policy (`failover`, `lowest-delay`, ...).
    pub policy: String,
    /// `same` or `diverse`.
    pub repair_path: String,
    /// The path new traffic prefers.
    pub preferred: Option<u8>,
    /// Every path.
    pub paths: Vec<PathStatus>,
    /// The latest switches and state changes, oldest first (`switch 0 -> 1 (path-state)`,
    /// `path 0 up -> suspect (silence)`).
    #[serde(default)]
    pub events: Vec<String>,
}

/// All counters of an instance.
#[derive(Debug)]
pub struct Metrics {
    /// Per stream, indexed by stream id.
    pub streams: Vec<StreamCounters>,
    /// Instance-wide.
    pub global: GlobalCounters,
    /// `srv6` or `udp`, and the role, for the status output.
    pub mode: String,
    /// UDP mode with several paths: the policy and every path (empty otherwise).
    pub paths: std::sync::Mutex<PathsStatus>,
}

/// A serialisable snapshot (what `hirt status` prints).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Instance mode.
    pub mode: String,
    /// Instance-wide counters.
    pub global: std::collections::BTreeMap<String, u64>,
    /// Per-stream counters.
    pub streams: Vec<std::collections::BTreeMap<String, u64>>,
    /// UDP mode with several paths: policy and paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathsStatus>,
}

impl Metrics {
    /// Counters for `streams` streams.
    pub fn new(streams: usize, mode: &str) -> Arc<Metrics> {
        Arc::new(Metrics {
            streams: (0..streams.max(1))
                .map(|_| StreamCounters::default())
                .collect(),
            global: GlobalCounters::default(),
            mode: mode.to_string(),
            paths: Default::default(),
        })
    }

    /// The counters of stream `s` (stream ids beyond the configured count share the last slot).
    #[inline]
    pub fn stream(&self, s: u16) -> &StreamCounters {
        let i = (s as usize).min(self.streams.len() - 1);
        &self.streams[i]
    }

    /// A copy of everything.
    pub fn snapshot(&self) -> Snapshot {
        let conv = |m: std::collections::BTreeMap<&'static str, u64>| {
            m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
        };
        Snapshot {
            mode: self.mode.clone(),
            global: conv(self.global.snapshot()),
            streams: self.streams.iter().map(|s| conv(s.snapshot())).collect(),
            paths: Some(self.paths_status()).filter(|p| !p.paths.is_empty()),
        }
    }

    /// The published path status (empty paths: a single-path tunnel).
    pub fn paths_status(&self) -> PathsStatus {
        self.paths.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Publishes the path status (a multi-path worker, a few times a second).
    pub fn publish_paths(&self, status: PathsStatus) {
        if let Ok(mut p) = self.paths.lock() {
            *p = status;
        }
    }

    /// The Prometheus exposition (OpenMetrics text): `hirt_<name>` for instance-wide values,
    /// `hirt_stream_<name>{stream="<id>"}` per stream; counters end in `_total`.
    pub fn prometheus(self: &Arc<Self>) -> String {
        let mut registry = Registry::with_prefix("hirt");
        registry.register_collector(Box::new(Exposition(self.clone())));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// Encodes [`Metrics`] at scrape time: the workers keep plain atomics, read only here.
#[derive(Debug)]
struct Exposition(Arc<Metrics>);

fn encode_value(kind: Kind, v: u64, enc: MetricEncoder<'_>) -> std::fmt::Result {
    match kind {
        Kind::Counter => ConstCounter::new(v).encode(enc),
        Kind::Gauge => ConstGauge::new(v).encode(enc),
    }
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let m = &self.0;
        for (&(name, help, kind), v) in GlobalCounters::FIELDS.iter().zip(m.global.values()) {
            let e = encoder.encode_descriptor(name, help.trim(), None, metric_type(kind))?;
            encode_value(kind, v, e)?;
        }
        let per_stream: Vec<Vec<u64>> = m.streams.iter().map(StreamCounters::values).collect();
        for (i, &(name, help, kind)) in StreamCounters::FIELDS.iter().enumerate() {
            let name = format!("stream_{name}");
            let mut family =
                encoder.encode_descriptor(&name, help.trim(), None, metric_type(kind))?;
            for (stream, values) in per_stream.iter().enumerate() {
                let labels = [("stream", stream.to_string())];
                encode_value(kind, values[i], family.encode_family(&labels)?)?;
            }
        }
        let paths = m.paths_status().paths;
        if paths.is_empty() {
            return Ok(());
        }
        type PathValue = fn(&PathStatus) -> u64;
        let per_path: [(&str, &str, Kind, PathValue); 9] = [
            (
                "path_state",
                "Path state: 0 up, 1 suspect, 2 down, 3 recovering.",
                Kind::Gauge,
                PathStatus::state_code,
            ),
            (
                "path_srtt_us",
                "Smoothed RTT of the path, microseconds.",
                Kind::Gauge,
                |p| (p.srtt_ms * 1e3) as u64,
            ),
            (
                "path_loss_ppm",
                "Smoothed loss ratio of the path, x 1e6.",
                Kind::Gauge,
                |p| (p.loss * 1e6) as u64,
            ),
            (
                "path_share_ppm",
                "Share of the sources sent on the path, x 1e6.",
                Kind::Gauge,
                |p| (p.share * 1e6) as u64,
            ),
            (
                "path_exp3_weight_ppm",
                "EXP3 weight share of the path among all paths (lowest-delay), x 1e6.",
                Kind::Gauge,
                |p| (p.exp3_weight * 1e6) as u64,
            ),
            (
                "path_probability_ppm",
                "Probability that the policy puts a new flow on the path, x 1e6.",
                Kind::Gauge,
                |p| (p.probability * 1e6) as u64,
            ),
            (
                "path_sources",
                "Sources sent on the path.",
                Kind::Counter,
                |p| p.sources,
            ),
            (
                "path_repairs",
                "Repairs sent on the path.",
                Kind::Counter,
                |p| p.repairs,
            ),
            (
                "path_probes",
                "Probes sent on the path.",
                Kind::Counter,
                |p| p.probes,
            ),
        ];
        for (name, help, kind, value) in per_path {
            let mut family = encoder.encode_descriptor(name, help, None, metric_type(kind))?;
            for p in &paths {
                let labels = [("path", p.path.to_string())];
                encode_value(kind, value(p), family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Adds `n` to a counter.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The body that opens an answer to `GET /watch` ([`serve_prometheus`]).
pub const WATCH_BODY: &[u8] = b"watching\n";

/// The whole answer to `GET /watch`, ending with [`WATCH_BODY`].
const WATCH_ANSWER: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nwatching\n";

/// Watch connections kept open at most; a new one past it closes the oldest.
const MAX_WATCHERS: usize = 256;

/// One endpoint served by [`serve_prometheus`], as [`close_endpoints`] reaches it.
struct Endpoint {
    listener: TcpListener,
    watchers: Mutex<VecDeque<TcpStream>>,
    closed: AtomicBool,
}

/// Every endpoint this process serves.
static ENDPOINTS: Mutex<Vec<Arc<Endpoint>>> = Mutex::new(Vec::new());

/// Serves `GET /metrics` (any path) on `addr` from a background thread. Returns the bound address.
///
/// `GET /watch` is answered with a status line, a blank line and [`WATCH_BODY`], and the
/// connection is then held open, silent, for as long as the process lives or until
/// [`close_endpoints`]: its kernel closes it when the process ends, however it ends (SIGKILL
/// included), so a watcher (`hirt health`) learns of the end within a round trip instead of at
/// its next probe.
pub fn serve_prometheus(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    let ep = Arc::new(Endpoint {
        listener,
        watchers: Mutex::new(VecDeque::new()),
        closed: AtomicBool::new(false),
    });
    ENDPOINTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(ep.clone());
    std::thread::Builder::new().name("hirt-metrics".into()).spawn(move || {
        for conn in ep.listener.incoming() {
            if ep.closed.load(Ordering::SeqCst) {
                break;
            }
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut req = [0u8; 1024];
            let n = conn.read(&mut req).unwrap_or(0);
            if req[..n].starts_with(b"GET /watch ") {
                if conn.write_all(WATCH_ANSWER).is_ok() {
                    let mut w = ep.watchers.lock().unwrap_or_else(|e| e.into_inner());
                    if ep.closed.load(Ordering::SeqCst) {
                        break;
                    }
                    if w.len() == MAX_WATCHERS {
                        w.pop_front();
                    }
                    w.push_back(conn);
                }
                continue;
            }
            let body = metrics.prometheus();
            let _ = write!(
                conn,
                "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{}",
                body.len(),
                body
            );
        }
    })?;
    Ok(local)
}

/// Closes every endpoint [`serve_prometheus`] serves in this process: their watches end and
/// new connections are refused, as if the process had gone, while it goes on forwarding (the
/// drain before a clean stop).
pub fn close_endpoints() {
    close_where(|_| true);
}

/// [`close_endpoints`] for the endpoint bound to `addr` only.
pub fn close_endpoint(addr: SocketAddr) {
    close_where(|ep| ep.listener.local_addr().ok() == Some(addr));
}

fn close_where(which: impl Fn(&Endpoint) -> bool) {
    let eps = ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner());
    for ep in eps.iter().filter(|ep| which(ep)) {
        let mut w = ep.watchers.lock().unwrap_or_else(|e| e.into_inner());
        ep.closed.store(true, Ordering::SeqCst);
        w.clear();
        // SAFETY: shutdown(2) on the listener's descriptor, which `ep` keeps open. A listening
        // socket shut down refuses new connections and wakes the thread blocked in accept.
        unsafe { libc::shutdown(ep.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_paths_reach_prometheus_and_the_snapshot() {
        let m = Metrics::new(1, "udp client");
        assert!(m.snapshot().paths.is_none());
        m.publish_paths(PathsStatus {
            policy: "failover".into(),
            repair_path: "same".into(),
            preferred: Some(1),
            events: vec!["switch 0 -> 1 (path-state)".into()],
            paths: vec![
                PathStatus {
                    path: 0,
                    state: "down".into(),
                    srtt_ms: 12.5,
                    sources: 9,
                    ..Default::default()
                },
                PathStatus {
                    path: 1,
                    state: "up".into(),
                    share: 0.25,
                    exp3_weight: 0.9,
                    probability: 0.5,
                    ..Default::default()
                },
            ],
        });
        let t = m.prometheus();
        assert!(t.contains("hirt_path_state{path=\"0\"} 2"), "{t}");
        assert!(t.contains("hirt_path_state{path=\"1\"} 0"), "{t}");
        assert!(t.contains("hirt_path_srtt_us{path=\"0\"} 12500"), "{t}");
        assert!(t.contains("hirt_path_share_ppm{path=\"1\"} 250000"), "{t}");
        assert!(
            t.contains("hirt_path_exp3_weight_ppm{path=\"1\"} 900000"),
            "{t}"
        );
        assert!(
            t.contains("hirt_path_probability_ppm{path=\"1\"} 500000"),
            "{t}"
        );
        assert!(t.contains("hirt_path_sources_total{path=\"0\"} 9"), "{t}");
        let snap = m.snapshot();
        assert_eq!(snap.paths.as_ref().map(|p| p.preferred), Some(Some(1)));
        let json = serde_json::to_string(&snap).unwrap();
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back.paths, snap.paths);
    }

    #[test]
    fn prometheus_text_has_per_stream_series() {
        let m = Metrics::new(2, "srv6");
        add(&m.stream(1).recovered, 7);
        add(&m.global.malformed, 3);
        m.stream(0)
            .worker_load_ppm
            .store(250_000, Ordering::Relaxed);
        let t = m.prometheus();
        assert!(!t.contains("hirt_path_state{"), "no paths, no path series");
        assert!(
            t.contains("hirt_stream_recovered_total{stream=\"1\"} 7"),
            "{t}"
        );
        assert!(t.contains("hirt_stream_recovered_total{stream=\"0\"} 0"));
        assert!(t.contains("hirt_malformed_total 3"));
        assert!(t.contains("# TYPE hirt_stream_recovered counter"));
        assert!(
            t.contains("# HELP hirt_stream_recovered Packets recovered."),
            "{t}"
        );
        assert!(t.contains("# TYPE hirt_stream_worker_load_ppm gauge"));
        assert!(t.contains("hirt_stream_worker_load_ppm{stream=\"0\"} 250000"));
        assert!(t.ends_with("# EOF\n"));
        let s = m.snapshot();
        assert_eq!(s.streams[1]["recovered"], 7);
        // Served over HTTP.
        let addr = serve_prometheus("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
        assert!(body.contains("hirt_stream_recovered_total{stream=\"1\"} 7"));
        // Out-of-range stream ids do not panic.
        add(&m.stream(900).losses, 1);
        assert_eq!(m.snapshot().streams[1]["losses"], 1);
    }
}
