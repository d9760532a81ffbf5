//! The arguments the lab gives both tunnel ends, derived from the link: the window sized to the
//! bandwidth-delay product, the controller's surplus, in-order release, fast repairs, queue
//! management.

use crate::emu::core::DirectionConfig;

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

/// Queue management for the path in the request/response workloads (`--aqm-target-ms`): the
/// encoder drops a source now and then while the RTT it measures stays this far above the base
/// (CoDel on the measured queueing delay, docs/core.md). Without it, 16 CUBIC flows fetching
/// 1 MB through the tunnel fill the 1000-packet starlink queue, since the tunnel repairs the
/// random losses that kept them off it: 2.1k-3.7k queue drops per 40 s run and a p99 up to 15 %
/// above the run without the tunnel; with it, no queue drop and a p99 lower in 9 of 10 paired
/// runs. 15 ms: the delay is sampled once per feedback and carries the link's jitter (5 ms:
/// twice the drops, 82-84 Mbit/s instead of 86-88). Not for `bulk`: a single CUBIC flow over
/// the 100 ms `wan1` path needs more queue than that to fill the link (60 Mbit/s instead of
/// 80; docs/results/2026-11-29-lab-bounds.md).
pub const AQM_TARGET_MS: &str = "15";

/// The recovery deadline of the lab's tunnels (`--deadline`): off, so the controller's rate and
/// the repair timers above ([`OURS_BASE`], [`FAST_REPAIRS`]) alone protect the workloads, as
/// docs/lab.md measured them. `--tunnel-args "--deadline auto"` gives UDP mode's default.
pub const LAB_DEADLINE: &str = "off";

/// The arguments of both tunnel ends: the user's `--tunnel-args`, plus `--window` sized for the
/// link ([`tunnel_window`]) unless they choose the window or a block code themselves, plus
/// `--fec ours:base=`[`OURS_BASE`] unless they choose the FEC mode, plus in-order release
/// ([`IN_ORDER_MS`]) unless they set it, plus for request/response workloads (`latency`) fast
/// time-driven repairs ([`FAST_REPAIRS`], [`FAST_REPAIRS_STRETCH`]) unless they set the repair
/// timer and queue management ([`AQM_TARGET_MS`]) unless they set it, plus [`LAB_DEADLINE`]
/// unless they set a deadline.
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
    if latency && !has("--aqm-target-ms") {
        out.push(format!("--aqm-target-ms {AQM_TARGET_MS}"));
    }
    if !has("--in-order-ms") {
        out.push(format!("--in-order-ms {IN_ORDER_MS}"));
    }
    if !has("--deadline") {
        out.push(format!("--deadline {LAB_DEADLINE}"));
    }
    out.push(user.to_string());
    out.join(" ").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Profile;
    use crate::profile::profile_links;

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
            "--window 1900 --fec ours:base=0.01 --in-order-ms 30 --deadline off"
        );
        assert_eq!(
            tunnel_args(None, &u, &d, true),
            "--window 1900 --fec ours:base=0.01,maxdelay_ms=10 --repair-delay-ms 1 \
             --repair-retries 3 --aqm-target-ms 15 --in-order-ms 30 --deadline off"
        );
        assert_eq!(
            tunnel_args(Some("--fec hirt"), &u, &d, true),
            "--window 1900 --repair-delay-ms 1 --repair-retries 3 --aqm-target-ms 15 --in-order-ms 30 \
             --deadline off --fec hirt"
        );
        assert_eq!(
            tunnel_args(Some("--window 300 --in-order-ms 0"), &u, &d, false),
            "--fec ours:base=0.01 --deadline off --window 300 --in-order-ms 0"
        );
        assert_eq!(
            tunnel_args(Some("--repair-delay-ms 5"), &u, &d, true),
            "--window 1900 --fec ours:base=0.01 --aqm-target-ms 15 --in-order-ms 30 --deadline off \
             --repair-delay-ms 5"
        );
        assert_eq!(
            tunnel_args(Some("--fec fixed:w=50,step=5"), &u, &d, false),
            "--in-order-ms 30 --deadline off --fec fixed:w=50,step=5"
        );
        assert_eq!(
            tunnel_args(Some("-f 20:10"), &u, &d, false),
            "--in-order-ms 30 --deadline off -f 20:10"
        );
    }
}
