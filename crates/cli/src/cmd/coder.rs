//! Flags that `hirt srv6` and `hirt udp` share: the code and its repairs, in-order release, and
//! the operations endpoints. Each maps onto the key of the same name in either mode's config.

use std::path::PathBuf;

/// How sources are protected and delivered (both modes).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct CoderArgs {
    /// FEC mode: ours (adaptive RLC, default), hirt, fixed:w=200,step=10, rs:k:m, none, ...
    #[arg(long)]
    pub fec: Option<String>,
    /// Pin a Reed-Solomon block code k:m (like tinyfecVPN -f 20:10), overrides --fec.
    #[arg(short = 'f', long = "rs")]
    pub rs: Option<String>,
    /// Sliding window when --fec does not give one (default 200).
    #[arg(long)]
    pub window: Option<u16>,
    /// Time-driven repair: a repair goes out when sources have been unprotected this long, in
    /// ms (sparse traffic; default 5, 0 = off).
    #[arg(long)]
    pub repair_delay_ms: Option<f64>,
    /// Re-sends of a time-driven repair, each one repair delay after the previous (default 1);
    /// a pause that begins on a rate-driven repair gets as many.
    #[arg(long)]
    pub repair_retries: Option<u8>,
    /// Gap between the re-sends of a time-driven repair, in ms (default: the repair delay).
    #[arg(long)]
    pub repair_retry_gap_ms: Option<f64>,
    /// Worker load (busy fraction, 0..1) above which repair generation and solving are
    /// randomly skipped (HIRT overload control; default 0.9, 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// In-order release at the decoder: sources behind a missing one wait until it is
    /// recovered, or at most this many ms, so transports see a recovered loss as a short delay
    /// instead of reordering (which makes QUIC and TCP cut their window). Pays off when repairs
    /// come soon after a loss (e.g. with `--repair-delay-ms 1`); 30 is a good hold. Default off
    /// (0): every packet is delivered at once, recovered ones out of order.
    #[arg(long)]
    pub in_order_ms: Option<f64>,
    /// What a missing source holds back under --in-order-ms: `flow` (default) holds the flows
    /// suspected of a packet in the hole (the one that showed it and the few before it) and lets
    /// other flows pass; `stream` holds every later packet.
    #[arg(long)]
    pub in_order_scope: Option<String>,
    /// Recovery deadline: `30ms`, `0.5s`, `2rtt` (multiples of the measured RTT), `auto` (two
    /// RTTs, at least 10 ms; UDP mode's default) or `off` (SRv6 mode's default). The `ours` controller sizes its window and
    /// repairs from it, and the decoder reports losses so that the encoder repairs them on
    /// demand. Give the same at both ends.
    #[arg(long)]
    pub deadline: Option<String>,
    /// Queue management for the path: CoDel's target queueing delay in ms, measured in the RTT
    /// (off by default; 5 is CoDel's). While the path's queue stays above it, sources are
    /// dropped before coding, one at a time, so the flows carried back off before the
    /// bottleneck's buffer overflows; a tunnel that repairs random losses otherwise lets
    /// loss-based TCP fill that buffer.
    #[arg(long)]
    pub aqm_target_ms: Option<f64>,
    /// Mark recovered packets ECN-CE (if ECN-capable).
    #[arg(long)]
    pub ecn_ce: bool,
}

/// How an instance is watched and seeded (both modes).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct OpsArgs {
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9469).
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Control socket for `hirt status` (default /run/hirt-<dev>.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Seed for the core's randomness (default from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Copies the shared flags given on the command line onto a mode's configuration (both
/// configs name these keys alike).
macro_rules! apply_shared_flags {
    ($cfg:ident, $coder:expr, $ops:expr) => {{
        let k = $coder;
        let o = $ops;
        $crate::cmd::apply_flags!($cfg, k;
            set: fec, window, repair_delay_ms, repair_retries, overload_threshold, in_order_ms;
            some: rs, repair_retry_gap_ms, deadline, in_order_scope, aqm_target_ms;
            flag: ecn_ce);
        $crate::cmd::apply_flags!($cfg, o; set: ; some: metrics, control, seed; flag: );
    }};
}
pub(crate) use apply_shared_flags;
