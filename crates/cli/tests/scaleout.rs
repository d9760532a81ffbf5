//! Scale-out end to end (root; skipped otherwise): two hirt encoder/decoder pairs in network
//! namespaces behind the ingress's kernel ECMP route, kept by `hirt health` (the `hirt` binary
//! of this crate runs every node and the health check, so a kill ends a real process). 32 UDP
//! flows with sequence-numbered payloads; each pair's encoder is killed with SIGKILL twice and
//! started again (`hirt_bench::scaleout`, docs/scale-out.md).
//!
//! Four TCP connections run beside the UDP flows through the same route.
//!
//! Checked: flows landed on both pairs (per-pair delivery counts at the receiver, one socket per
//! link from a decoder); after every kill all the killed pair's flows arrive through the other
//! pair; every datagram received is byte-for-byte what was sent, none twice; the only losses
//! are the killed pair's flows between the kill and their move (none when a restarted encoder's
//! flows come back: its first source tells its decoder that it restarted); every TCP
//! connection survives the stops and delivers every byte written, in order and intact. Then the
//! same with SIGTERM: the encoders drain first, and nothing at all is lost.

use std::path::PathBuf;
use std::time::Duration;

use hirt_bench::scaleout::{self, ScaleoutConfig, StopBy};

#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn killed_encoders_flows_move_to_the_other_pair() {
    if !hirt_linux::netns::available() {
        eprintln!("skipped: needs root");
        return;
    }
    run_and_check(StopBy::Kill);
}

/// With SIGTERM the encoders drain first (`--drain-ms`, 100 by default with `--metrics`): they
/// close their metrics endpoint, whose watch tells `hirt health` at once, and go on forwarding
/// while the route changes. Nothing is lost.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn stopped_encoders_drain_and_lose_nothing() {
    if !hirt_linux::netns::available() {
        eprintln!("skipped: needs root");
        return;
    }
    let r = run_and_check(StopBy::Term);
    assert_eq!(r.lost_in_switch, 0, "a clean stop loses nothing");
    assert_eq!(r.received, r.sent);
}

/// One run at a time: each one's timing is measured, and two would share the two CPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One run with four stops of `stop`, and the checks common to both ways of stopping.
fn run_and_check(stop: StopBy) -> scaleout::ScaleoutReport {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = ScaleoutConfig {
        program: PathBuf::from(env!("CARGO_BIN_EXE_hirt")),
        events: 4,
        flows: 32,
        period_ms: 2.0,
        interval_ms: 50.0,
        timeout_ms: 25.0,
        fall: 3,
        rise: 3,
        settle_ms: 300,
        stop,
        ..Default::default()
    };
    let r = scaleout::run(&cfg).expect("scale-out run");
    scaleout::print(&r, false).unwrap();
    assert!(
        r.flows_per_node[0] > 0 && r.flows_per_node[1] > 0,
        "flows on both pairs: {:?}",
        r.flows_per_node
    );
    assert!(r.delivered_per_node.iter().all(|&n| n > 1000), "{r:?}");
    assert_eq!(r.events.len(), 4);
    for (i, e) in r.events.iter().enumerate() {
        assert!(
            e.flows_on_node > 0,
            "event {i}: the killed pair carried flows"
        );
        // Loose on purpose (a loaded machine): the figures are the bench's, this checks that
        // every flow moved, through the health check and not through a restart (which comes
        // after the move or after 5 s).
        let moved = e.all_moved_ms.expect("every flow of the killed pair moved");
        assert!(
            moved < Duration::from_secs(2).as_secs_f64() * 1e3,
            "event {i}: moved after {moved} ms"
        );
        assert!(
            e.rejoin_ms.is_some(),
            "event {i}: the restarted pair carried flows again"
        );
    }
    assert_eq!(r.corrupt, 0, "every byte as sent");
    assert_eq!(r.duplicates, 0, "nothing delivered twice");
    assert_eq!(
        r.lost_at_rejoin, 0,
        "a restarted encoder's first source restarts its decoder's stream: nothing lost"
    );
    assert_eq!(r.lost_elsewhere, 0, "losses only in switch windows");
    assert!(r.verified_bytes >= r.received * 200, "{r:?}");
    assert_eq!(r.tcp.len(), 4);
    for t in &r.tcp {
        assert_eq!(
            t.corrupt_at, None,
            "TCP connection {}: every byte as written",
            t.conn
        );
        assert!(
            t.sent > 0 && t.error.is_none(),
            "TCP connection {}: {t:?}",
            t.conn
        );
        assert_eq!(
            t.received, t.sent,
            "TCP connection {}: all delivered",
            t.conn
        );
    }
    r
}
