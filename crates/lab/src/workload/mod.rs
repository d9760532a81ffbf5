//! Real-stack workloads. Each has a server (started once in the server namespace, serving both
//! runs) and a client (run in the client namespace for a fixed duration) that records one
//! completion time per request and verifies every response byte against a deterministic pattern.

pub mod bulk;
pub mod http;
pub mod mqtt;
pub mod quic;
pub mod rpc;
pub mod tools;

use std::sync::OnceLock;
use std::time::Duration;

/// What a client run measured.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Completion time of every finished request, microseconds.
    pub latencies_us: Vec<u64>,
    /// Application bytes received and verified.
    pub bytes: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Requests that failed (connection error, timeout, wrong byte).
    pub errors: u64,
    /// Responses with at least one wrong byte (subset of `errors`).
    pub corrupt: u64,
    /// A note for the report (e.g. which tool was used).
    pub note: Option<String>,
    /// Statistics of an external tool that reports no per-request times (then
    /// `latencies_us` is empty).
    pub tool: Option<ToolStats>,
}

/// Request statistics an external tool computed itself (wrk), in milliseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ToolStats {
    /// Requests completed.
    pub requests: u64,
    /// Median completion time.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Samples {
    /// Merges the samples of parallel clients.
    pub fn merge(parts: impl IntoIterator<Item = Samples>) -> Samples {
        let mut s = Samples::default();
        for p in parts {
            s.latencies_us.extend(p.latencies_us);
            s.bytes += p.bytes;
            s.elapsed = s.elapsed.max(p.elapsed);
            s.errors += p.errors;
            s.corrupt += p.corrupt;
            if s.note.is_none() {
                s.note = p.note;
            }
            if s.tool.is_none() {
                s.tool = p.tool;
            }
        }
        s
    }
}

/// Largest response any workload serves, plus room for the per-request offset.
const PATTERN_LEN: usize = (4 << 20) + 65536;

/// The deterministic byte pattern responses are cut from: response `id` of `n` bytes is
/// `pattern()[off(id)..off(id) + n]`, so each response differs and a byte from the wrong response
/// or offset is caught.
pub fn pattern() -> &'static [u8] {
    static P: OnceLock<Vec<u8>> = OnceLock::new();
    P.get_or_init(|| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..PATTERN_LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    })
}

/// Offset of response `id` in the pattern.
pub fn offset(id: u64) -> usize {
    ((id.wrapping_mul(2_654_435_761)) % 65_521) as usize
}

/// The expected bytes of response `id`, `n` bytes long (`n` at most 4 MiB).
pub fn expected(id: u64, n: usize) -> &'static [u8] {
    let o = offset(id);
    &pattern()[o..o + n.min(PATTERN_LEN - o)]
}
