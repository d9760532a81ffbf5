//! What a paced stream costs and how late it arrives through `hirt udp` between two namespaces
//! (RTT ~0.1 ms, root; skipped otherwise), 3% random loss each way on the underlay:
//! - the default command delivers a 2,000 pps stream of 1,200-byte datagrams (nothing twice, at
//!   most 4 of 20,000 missing), at an overhead below 15%;
//! - a pinned block code (`-f 20:10`) costs its ratio m/k whatever the traffic rate;
//! - a sparse flow's overhead stays within what its repair timer allows.
//!
//! Delays are printed, not checked: `docs/results/` has the figures over repeated runs.

mod common;
use common::big_rcvbuf;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hirt_linux::config::{UdpConfig, UdpRole};
use hirt_linux::metrics::{Metrics, StreamCounters};
use hirt_linux::netns::{self, NetNs};
use hirt_linux::udp;

/// A counter summed over every stream.
fn sum(m: &Metrics, f: impl Fn(&StreamCounters) -> &AtomicU64) -> u64 {
    m.streams.iter().map(|s| f(s).load(Ordering::Relaxed)).sum()
}

/// What one paced stream through the tunnel saw.
struct StreamRun {
    sent: u32,
    /// Times each datagram id arrived.
    seen: Vec<u32>,
    /// One-way delays of the arrivals, sorted, in ms.
    owd_ms: Vec<f64>,
    sources: u64,
    repairs: u64,
    link_losses: u64,
    /// The client encoder's repairs that answered loss reports, and its congestion signals
    /// (each pauses the answers).
    answers: u64,
    congestion_signals: u64,
    /// The server decoder's loss reports and unrecoverable losses.
    loss_reports: u64,
    unrecoverable: u64,
    /// The server decoder's recoveries, those later than its recovery deadline, and the 99th
    /// percentile of the time from the packet that showed a loss to its recovery.
    recovered: u64,
    recovered_late: u64,
    recovery_delay_p99_us: u64,
}

impl StreamRun {
    fn overhead(&self) -> f64 {
        self.repairs as f64 / self.sources.max(1) as f64
    }

    fn not_once(&self) -> Vec<u32> {
        (0..self.sent)
            .filter(|&i| self.seen[i as usize] != 1)
            .collect()
    }

    fn quantile(&self, p: f64) -> f64 {
        let n = self.owd_ms.len();
        self.owd_ms[((n as f64 * p) as usize).min(n - 1)]
    }

    fn print(&self, what: &str) {
        eprintln!(
            "{what}: delivered {} of {}, link losses {}; overhead {:.1}% ({} repairs / {} sources); \
             one-way delay min {:.3} p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms",
            self.seen.iter().filter(|&&c| c > 0).count(),
            self.sent,
            self.link_losses,
            100.0 * self.overhead(),
            self.repairs,
            self.sources,
            self.quantile(0.0),
            self.quantile(0.5),
            self.quantile(0.99),
            self.quantile(0.999),
            self.quantile(1.0),
        );
        if std::env::var_os("HIRT_E2E_HISTOGRAM").is_some() {
            // Arrivals later than 0.3 ms (recoveries, mostly) per quarter of a millisecond.
            let mut buckets = [0u32; 24];
            for &d in self.owd_ms.iter().filter(|&&d| d > 0.3) {
                buckets[((d / 0.25) as usize).min(23)] += 1;
            }
            eprintln!("  delays > 0.3 ms per 0.25 ms: {buckets:?}");
        }
        eprintln!(
            "  loss reports {}, answers {}, congestion signals {}, unrecoverable {}; \
             recovered {} ({} late), recovery delay p99 {:.2} ms",
            self.loss_reports,
            self.answers,
            self.congestion_signals,
            self.unrecoverable,
            self.recovered,
            self.recovered_late,
            self.recovery_delay_p99_us as f64 / 1e3,
        );
    }
}

/// `n` datagrams of `size` bytes at `pps` from the client's to the server's end of a tunnel
/// whose ends run the default command changed by `tweak`, with `loss` on the underlay each
/// way. `subnet` keeps parallel tests apart.
fn paced_stream(
    subnet: &str,
    tweak: impl Fn(&mut UdpConfig),
    pps: u32,
    n: u32,
    size: usize,
    loss: f64,
) -> StreamRun {
    let base = netns::unique_name("hb");
    let u = netns::Underlay::new(&base, subnet).unwrap();
    u.like_a_wire().unwrap();
    u.lose(4096, loss).unwrap();
    let (c, s) = (&u.client, &u.server);
    let tag = base.clone();
    let config = |server: bool| {
        let k = udp::keys::StaticKeys::well_known(tag.as_bytes(), server);
        let private = std::env::temp_dir().join(format!("{tag}-{server}.key"));
        udp::keys::write_secret_file(&private, &udp::keys::encode(&k.private)).unwrap();
        let mut a = UdpConfig {
            role: Some(if server {
                UdpRole::Server
            } else {
                UdpRole::Client
            }),
            listen: server.then(|| "0.0.0.0:4096".into()),
            remote: (!server).then(|| format!("{subnet}.1:4096")),
            private_key_file: Some(private),
            peer_public_key: Some(udp::keys::encode(&k.peer_public)),
            dev: "hb0".into(),
            control: Some(std::env::temp_dir().join(format!("{tag}-{server}.sock"))),
            ..Default::default()
        };
        tweak(&mut a);
        a
    };
    let start = |ns: &NetNs, a: UdpConfig| {
        ns.spawn(move || udp::start(a).map_err(std::io::Error::other))
            .join()
            .unwrap()
            .unwrap()
    };
    let server = start(s, config(true));
    let client = start(c, config(false));
    let t0 = Instant::now();
    let rx = s.spawn(move || {
        let sock = UdpSocket::bind("10.77.0.1:9011")?;
        big_rcvbuf(&sock);
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(len) = sock.recv(&mut buf) {
            let at = t0.elapsed().as_nanos() as u64;
            if len == size {
                let id = u32::from_be_bytes(buf[..4].try_into().unwrap());
                let sent = u64::from_be_bytes(buf[4..12].try_into().unwrap());
                got.push((id, at.saturating_sub(sent)));
            }
        }
        Ok(got)
    });
    // The handshake crosses the lossy link too (a lost message is sent again): the stream
    // starts once the client holds a session.
    let up = Instant::now();
    while client.metrics.global.sessions.load(Ordering::Relaxed) == 0 {
        assert!(up.elapsed() < Duration::from_secs(20), "no session");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let gap = Duration::from_secs(1) / pps;
    let tx = c.spawn(move || {
        let sock = UdpSocket::bind("10.77.0.2:0")?;
        let start = Instant::now();
        let mut p = vec![0xa5u8; size];
        for i in 0..n {
            // The send schedule, not a timing check.
            if let Some(wait) = (start + gap * i).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            p[..4].copy_from_slice(&i.to_be_bytes());
            p[4..12].copy_from_slice(&(t0.elapsed().as_nanos() as u64).to_be_bytes());
            sock.send_to(&p, "10.77.0.1:9011")?;
        }
        Ok(())
    });
    tx.join().unwrap().unwrap();
    let got = rx.join().unwrap().unwrap();
    let cm = &client.metrics;
    let mut run = StreamRun {
        sent: n,
        seen: vec![0; n as usize],
        owd_ms: got.iter().map(|&(_, d)| d as f64 / 1e6).collect(),
        sources: sum(cm, |x| &x.enc_packets_in),
        repairs: sum(cm, |x| &x.repairs_sent),
        link_losses: u.lost().unwrap(),
        answers: sum(cm, |x| &x.repairs_report),
        congestion_signals: sum(cm, |x| &x.congestion_signals),
        loss_reports: sum(&server.metrics, |x| &x.loss_reports),
        unrecoverable: sum(&server.metrics, |x| &x.unrecoverable),
        recovered: sum(&server.metrics, |x| &x.recovered),
        recovered_late: sum(&server.metrics, |x| &x.recovered_late),
        recovery_delay_p99_us: server
            .metrics
            .streams
            .iter()
            .map(|x| x.recovery_delay_p99_us.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0),
    };
    for &(id, _) in &got {
        if let Some(c) = run.seen.get_mut(id as usize) {
            *c += 1;
        }
    }
    run.owd_ms.sort_by(f64::total_cmp);
    client.stop();
    server.stop();
    run
}

/// The default command with 3% random loss each way and a 2,000 pps stream of 1,200-byte
/// datagrams: nothing delivered twice, at most 4 of 20,000 missing, overhead below 15%.
/// `HIRT_E2E_DEADLINE` sets `--deadline` at both ends instead (a measurement knob).
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn default_command_three_percent_each_way() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let deadline = std::env::var("HIRT_E2E_DEADLINE").ok();
    // Measurement knobs too: another rate (`HIRT_E2E_PPS`), for 10 s.
    let pps: u32 = std::env::var("HIRT_E2E_PPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let run = paced_stream(
        "192.168.79",
        |a| {
            if deadline.is_some() {
                a.deadline = deadline.clone();
            }
        },
        pps,
        pps * 10,
        1200,
        0.03,
    );
    run.print(&format!("default command, {pps} pps, 3% each way"));
    // About 630 expected (3% of ~21,000 datagrams, both ways): the loss rule is in place.
    assert!(run.link_losses > 400, "the link lost {}", run.link_losses);
    // Nothing twice; at most 4 of 20,000 missing: every one is delivered in the runs of
    // docs/results/2026-11-26-udp-budget.md; the margin keeps a loaded CI machine's
    // rare miss from failing the suite.
    // Without FEC about 600 would be missing.
    let twice: Vec<u32> = (0..run.sent)
        .filter(|&i| run.seen[i as usize] > 1)
        .collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    let missing = run.not_once();
    assert!(missing.len() <= 4, "not delivered: {missing:?}");
    assert!(run.overhead() < 0.15, "overhead {:.3}", run.overhead());
    // The decoder's own account: its recoveries come within the deadline (`auto`: 10 ms on
    // this path), a few at most late on a loaded machine.
    if deadline.is_none() {
        assert!(run.recovered > 300, "recovered {}", run.recovered);
        assert!(
            run.recovered_late * 100 <= run.recovered,
            "{} of {} recoveries late",
            run.recovered_late,
            run.recovered
        );
        assert!(
            run.recovery_delay_p99_us < 10_000,
            "recovery delay p99 {} us",
            run.recovery_delay_p99_us
        );
    }
}

/// `-f 20:10` sends 10 repairs per 20 sources, within 5% of that ratio, at 200, 2,000 and
/// 10,000 pps: the time-driven repair of a partial block sends the code's ratio for the sources
/// it holds, not a full block's worth.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn a_block_code_costs_its_ratio_at_every_rate() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    for (i, (pps, n)) in [(200u32, 2_000u32), (2_000, 10_000), (10_000, 30_000)]
        .into_iter()
        .enumerate()
    {
        let run = paced_stream(
            &format!("192.168.{}", 81 + i),
            |a| a.rs = Some("20:10".into()),
            pps,
            n,
            1200,
            0.0,
        );
        run.print(&format!("-f 20:10, {pps} pps"));
        assert!(
            run.not_once().is_empty(),
            "{pps} pps: not delivered exactly once"
        );
        let ratio = run.overhead() / 0.5;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{pps} pps: overhead {:.3}, {ratio:.3} of 10/20",
            run.overhead()
        );
    }
}

/// A sparse flow (20 datagrams per second, no loss): each datagram is followed by its
/// time-driven repair and that repair's re-sends, `1 + repair_retries` repairs per source at
/// most (2 with the defaults), and no more.
#[test]
#[cfg_attr(not(hirt_root), ignore = "needs root")]
fn a_sparse_flow_costs_at_most_its_timer_repairs() {
    if !netns::available() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let run = paced_stream("192.168.85", |_| {}, 20, 100, 200, 0.0);
    run.print("default command, sparse flow of 20 pps");
    assert!(run.not_once().is_empty(), "not delivered exactly once");
    let bound = 1.0 + f64::from(UdpConfig::default().repair_retries);
    assert!(
        run.overhead() <= bound,
        "{} repairs for {} sources, more than {bound} each",
        run.repairs,
        run.sources
    );
}
