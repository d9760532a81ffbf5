//! What a soak shows: per fault, the interruption the streams saw and when delivery resumed;
//! over the run, corrupt and duplicated datagrams, losses outside faults, memory and
//! descriptors.

use std::time::Duration;

use serde::Serialize;

use super::monitor::{Monitor, Process};
use super::traffic::{Received, Sent, TcpCounts};
use super::Fault;
use crate::report::{percentile, FecStats};
use crate::tunnel::TunnelMode;

/// Largest resident-set growth a long-lived hirt process may show.
pub const RSS_GROWTH_LIMIT_PCT: f64 = 5.0;
/// A process counts for the memory check once watched this long after its warm-up.
const WATCHED_AT_LEAST_S: f64 = 60.0;
/// The loss window of a fault starts this long before it (datagrams in flight when it hit).
const BEFORE_FAULT: Duration = Duration::from_millis(500);
/// A gap is the fault's only if it begins before the fault ended plus this: a gap that begins
/// later (a machine stall, a burst of link loss) is not the fault's doing.
const AFTER_FAULT: Duration = Duration::from_secs(5);

/// A fault as injected.
#[derive(Debug, Clone)]
pub struct Injected {
    /// Which fault.
    pub fault: Fault,
    /// When it started, since the soak's start.
    pub start: Duration,
    /// When it was over (the killed end started again and answering, the link up).
    pub end: Duration,
    /// Why injecting it failed, if it did.
    pub error: Option<String>,
}

/// One fault's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FaultOutcome {
    /// Which fault.
    pub fault: Fault,
    /// When it started, seconds into the soak.
    pub at_s: f64,
    /// How long injecting it took (down time of a killed end, flap time), seconds.
    pub took_s: f64,
    /// Why injecting it failed, if it did.
    pub error: Option<String>,
    /// Longest run of datagrams lost around the fault, in send time, ms (worse direction).
    pub outage_ms: f64,
    /// From the end of the fault to the send time of the first datagram delivered after that
    /// run, ms (worse direction; 0 when delivery never stopped past the fault's end).
    pub back_after_ms: f64,
    /// Whether both streams delivered again before the next fault.
    pub recovered: bool,
}

/// One datagram stream over the whole soak.
#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    /// Direction.
    pub name: &'static str,
    /// Datagrams sent.
    pub sent: u64,
    /// Sends the kernel refused (no route while an end restarted).
    pub refused: u64,
    /// Distinct datagrams delivered, every byte as sent.
    pub delivered: u64,
    /// Datagrams delivered more than once.
    pub duplicates: u64,
    /// Datagrams with a wrong byte.
    pub corrupt: u64,
    /// Datagrams lost in the interruptions of the faults.
    pub lost_in_faults: u64,
    /// Datagrams lost elsewhere (losses the FEC did not recover).
    pub lost_outside_faults: u64,
    /// `lost_outside_faults` over the datagrams sent outside the interruptions.
    pub lost_outside_ratio: f64,
    /// Median one-way delay, ms.
    pub delay_p50_ms: f64,
    /// 99th percentile one-way delay, ms.
    pub delay_p99_ms: f64,
}

/// The TCP stream.
#[derive(Debug, Clone, Serialize)]
pub struct TcpReport {
    /// Bytes received equal to what was sent.
    pub bytes_ok: u64,
    /// Bytes received that differ (must be 0).
    pub corrupt: u64,
    /// Connections the sink accepted (1: the first connection survived every fault).
    pub connections: u64,
    /// Connection attempts or connections that failed at the source.
    pub failures: u64,
}

/// A hirt process with its memory growth.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    /// The samples.
    #[serde(flatten)]
    pub process: Process,
    /// Resident-set growth from the warm-up to the end, percent.
    pub rss_growth_pct: Option<f64>,
    /// Growth of the bytes held on the heap from the warm-up to the end, percent.
    pub heap_growth_pct: Option<f64>,
    /// Seconds watched after the warm-up.
    pub watched_s: f64,
}

/// The pass/fail lines of a soak.
#[derive(Debug, Clone, Serialize)]
pub struct Checks {
    /// No datagram and no TCP byte delivered corrupt.
    pub no_corruption: bool,
    /// No datagram delivered twice.
    pub no_duplicates: bool,
    /// Every fault was injected and both streams delivered again after it.
    pub every_fault_recovered: bool,
    /// Every hirt process watched long enough grew its resident set by less than 5%.
    pub rss_flat: bool,
    /// No hirt process ended with more descriptors than at its warm-up.
    pub fds_flat: bool,
    /// All of the above.
    pub ok: bool,
}

/// The report of `hirt lab --soak`.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Tunnel mode.
    pub tunnel: TunnelMode,
    /// Seconds the traffic ran.
    pub duration_s: f64,
    /// Loss model of each direction.
    pub loss: String,
    /// Datagrams per second of each stream.
    pub pps_each_way: u32,
    /// Seconds between faults.
    pub fault_every_s: f64,
    /// Faults injected.
    pub faults_injected: usize,
    /// Median interruption, ms.
    pub outage_p50_ms: f64,
    /// 99th percentile interruption, ms.
    pub outage_p99_ms: f64,
    /// Median time from a fault's end to delivery, ms.
    pub back_after_p50_ms: f64,
    /// 99th percentile time from a fault's end to delivery, ms.
    pub back_after_p99_ms: f64,
    /// Largest time from a fault's end to delivery, ms.
    pub back_after_max_ms: f64,
    /// Largest resident-set growth of a process watched long enough, percent.
    pub rss_growth_max_pct: Option<f64>,
    /// Largest growth of the bytes held on the heap of a process watched long enough, percent.
    pub heap_growth_max_pct: Option<f64>,
    /// The pass/fail lines.
    pub checks: Checks,
    /// Every fault.
    pub faults: Vec<FaultOutcome>,
    /// The two datagram streams.
    pub streams: Vec<StreamReport>,
    /// The TCP stream.
    pub tcp: TcpReport,
    /// Every hirt process.
    pub processes: Vec<ProcessReport>,
    /// FEC counters of the processes running at the end (a restarted process starts at 0).
    pub fec: FecStats,
    /// Packets the link's loss model dropped, both directions.
    pub link_lost: u64,
}

/// What [`report`] summarizes.
pub struct Inputs<'a> {
    /// Tunnel mode.
    pub mode: TunnelMode,
    /// How long the traffic ran.
    pub duration: Duration,
    /// Datagrams per second of each stream.
    pub pps: u32,
    /// Time between faults.
    pub fault_every: Duration,
    /// Loss model.
    pub loss: String,
    /// The faults.
    pub faults: Vec<Injected>,
    /// Each stream: name, sender, receiver.
    pub streams: [(&'static str, Sent, Received); 2],
    /// The TCP stream's counts.
    pub tcp: &'a TcpCounts,
    /// Failures at the TCP source.
    pub tcp_failures: u64,
    /// Memory and descriptors.
    pub monitor: Monitor,
    /// FEC counters.
    pub fec: FecStats,
    /// Link losses.
    pub link_lost: u64,
}

/// The sequence number sent at `t` into a stream of `pps` datagrams per second.
fn seq_at(t: Duration, pps: u32) -> u64 {
    (t.as_nanos() * u128::from(pps) / 1_000_000_000) as u64
}

fn ms_of(seqs: u64, pps: u32) -> f64 {
    seqs as f64 * 1000.0 / f64::from(pps.max(1))
}

/// One fault seen by one stream: (interruption ms, back after ms, recovered, datagrams lost).
fn fault_in_stream(
    f: &Injected,
    next: Option<Duration>,
    rx: &Received,
    sent: u64,
    pps: u32,
) -> (f64, f64, bool, u64) {
    // The window ends as the next one starts: datagrams in flight when the next fault hits are
    // that fault's losses, not this one's.
    let from = seq_at(f.start.saturating_sub(BEFORE_FAULT), pps);
    let to = next.map_or(sent, |n| {
        seq_at(n.saturating_sub(BEFORE_FAULT), pps).min(sent)
    });
    let began_by = seq_at(f.end + AFTER_FAULT, pps);
    let gaps = rx.checker.gaps(from, to);
    let Some(&(first, len)) = gaps
        .iter()
        .filter(|(first, _)| *first <= began_by)
        .max_by_key(|(_, len)| *len)
    else {
        return (0.0, 0.0, true, 0);
    };
    let resumed = first + len;
    let recovered = resumed < to;
    let back = ms_of(resumed, pps) - f.end.as_secs_f64() * 1000.0;
    (ms_of(len, pps), back.max(0.0), recovered, len)
}

/// Summarizes a soak.
pub fn report(i: Inputs) -> SoakReport {
    let pps = i.pps;
    let mut outcomes: Vec<FaultOutcome> = i
        .faults
        .iter()
        .map(|f| FaultOutcome {
            fault: f.fault,
            at_s: f.start.as_secs_f64(),
            took_s: (f.end - f.start).as_secs_f64(),
            error: f.error.clone(),
            outage_ms: 0.0,
            back_after_ms: 0.0,
            recovered: f.error.is_none(),
        })
        .collect();
    let mut streams = Vec::new();
    let mut corrupt = i.tcp.corrupt.load(std::sync::atomic::Ordering::Relaxed);
    let mut duplicates = 0;
    for (name, sent, rx) in &i.streams {
        let mut in_faults = 0;
        for (k, f) in i.faults.iter().enumerate() {
            let next = i.faults.get(k + 1).map(|n| n.start);
            let (outage, back, recovered, lost) = fault_in_stream(f, next, rx, sent.sent, pps);
            let o = &mut outcomes[k];
            o.outage_ms = o.outage_ms.max(outage);
            o.back_after_ms = o.back_after_ms.max(back);
            o.recovered &= recovered;
            in_faults += lost;
        }
        let lost = sent.sent.saturating_sub(rx.checker.delivered);
        let outside = lost.saturating_sub(in_faults);
        let mut d: Vec<u64> = rx.delays_us.iter().map(|&x| u64::from(x)).collect();
        d.sort_unstable();
        corrupt += rx.checker.corrupt;
        duplicates += rx.checker.duplicates;
        streams.push(StreamReport {
            name,
            sent: sent.sent,
            refused: sent.refused,
            delivered: rx.checker.delivered,
            duplicates: rx.checker.duplicates,
            corrupt: rx.checker.corrupt,
            lost_in_faults: in_faults,
            lost_outside_faults: outside,
            lost_outside_ratio: outside as f64
                / (sent.sent.saturating_sub(in_faults)).max(1) as f64,
            delay_p50_ms: percentile(&d, 0.5) as f64 / 1000.0,
            delay_p99_ms: percentile(&d, 0.99) as f64 / 1000.0,
        });
    }
    let sorted = |f: fn(&FaultOutcome) -> f64| {
        let mut v: Vec<u64> = outcomes.iter().map(|o| (f(o) * 1000.0) as u64).collect();
        v.sort_unstable();
        v
    };
    let outage = sorted(|o| o.outage_ms);
    let back = sorted(|o| o.back_after_ms);
    let q = |v: &[u64], p: f64| percentile(v, p) as f64 / 1000.0;
    let processes: Vec<ProcessReport> = i
        .monitor
        .processes
        .iter()
        .map(|p| ProcessReport {
            rss_growth_pct: p.rss_growth_pct(),
            heap_growth_pct: p.heap_growth_pct(),
            watched_s: p.watched_s(),
            process: p.clone(),
        })
        .collect();
    let watched = processes
        .iter()
        .filter(|p| p.watched_s >= WATCHED_AT_LEAST_S);
    let rss_growth_max_pct = watched
        .clone()
        .filter_map(|p| p.rss_growth_pct)
        .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))));
    let heap_growth_max_pct = watched
        .clone()
        .filter_map(|p| p.heap_growth_pct)
        .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))));
    let fds_flat = processes
        .iter()
        .all(|p| p.process.fds_base.is_none_or(|b| p.process.fds_last <= b));
    let no_corruption = corrupt == 0;
    let no_duplicates = duplicates == 0;
    let every_fault_recovered = outcomes.iter().all(|o| o.recovered);
    let rss_flat = rss_growth_max_pct.is_none_or(|g| g < RSS_GROWTH_LIMIT_PCT);
    SoakReport {
        tunnel: i.mode,
        duration_s: i.duration.as_secs_f64(),
        loss: i.loss,
        pps_each_way: pps,
        fault_every_s: i.fault_every.as_secs_f64(),
        faults_injected: outcomes.len(),
        outage_p50_ms: q(&outage, 0.5),
        outage_p99_ms: q(&outage, 0.99),
        back_after_p50_ms: q(&back, 0.5),
        back_after_p99_ms: q(&back, 0.99),
        back_after_max_ms: q(&back, 1.0),
        rss_growth_max_pct,
        heap_growth_max_pct,
        checks: Checks {
            no_corruption,
            no_duplicates,
            every_fault_recovered,
            rss_flat,
            fds_flat,
            ok: no_corruption && no_duplicates && every_fault_recovered && rss_flat && fds_flat,
        },
        faults: outcomes,
        streams,
        tcp: TcpReport {
            bytes_ok: i.tcp.bytes_ok.load(std::sync::atomic::Ordering::Relaxed),
            corrupt: i.tcp.corrupt.load(std::sync::atomic::Ordering::Relaxed),
            connections: i.tcp.connections.load(std::sync::atomic::Ordering::Relaxed),
            failures: i.tcp_failures,
        },
        processes,
        fec: i.fec,
        link_lost: i.link_lost,
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream;
    use super::*;

    fn received(seqs: impl IntoIterator<Item = u64>) -> Received {
        let mut r = Received {
            checker: stream::Checker::new(1),
            delays_us: Vec::new(),
        };
        let mut d = vec![0u8; 64];
        for s in seqs {
            stream::fill(&mut d, 1, s, 0);
            r.checker.check(&d);
            r.delays_us.push(1000);
        }
        r
    }

    #[test]
    fn a_fault_is_the_longest_gap_around_it() {
        // 1000 pps, fault from 2.0 s to 3.0 s; datagrams 2100..2900 lost, one stray loss at 500.
        let rx = received((0..4000).filter(|s| !(2100..2900).contains(s) && *s != 500));
        let f = Injected {
            fault: Fault::KillClient,
            start: Duration::from_secs(2),
            end: Duration::from_secs(3),
            error: None,
        };
        let (outage, back, recovered, lost) = fault_in_stream(&f, None, &rx, 4000, 1000);
        assert_eq!((outage, back, recovered, lost), (800.0, 0.0, true, 800));
        // Delivery resumes only 250 ms after the fault's end.
        let rx = received((0..4000).filter(|s| !(2100..3250).contains(s)));
        let (_, back, recovered, _) = fault_in_stream(&f, None, &rx, 4000, 1000);
        assert_eq!((back, recovered), (250.0, true));
        // A fault that costs nothing (an address change followed seamlessly) is not charged
        // with the datagrams in flight when the next fault hits.
        let rx = received((0..4000).filter(|s| !(3990..4000).contains(s)));
        let next = Some(Duration::from_millis(3995));
        let (outage, back, recovered, lost) = fault_in_stream(&f, next, &rx, 4000, 1000);
        assert_eq!((outage, back, recovered, lost), (0.0, 0.0, true, 0));
        // Nothing after the fault arrives before the next one: not recovered.
        let rx = received(0..2100);
        let next = Some(Duration::from_secs(3) + Duration::from_millis(500));
        let (_, _, recovered, _) = fault_in_stream(&f, next, &rx, 4000, 1000);
        assert!(!recovered);
        // A longer gap that begins well after the fault (10.0-10.3 s) is not the fault's.
        let rx = received(
            (0..20_000).filter(|s| !(2100..2200).contains(s) && !(10_000..10_300).contains(s)),
        );
        let (outage, back, recovered, lost) = fault_in_stream(&f, None, &rx, 20_000, 1000);
        assert_eq!((outage, back, recovered, lost), (100.0, 0.0, true, 100));
    }

    #[test]
    fn report_counts_losses_inside_and_outside_faults() {
        let rx = received((0..4000).filter(|s| !(2100..2900).contains(s) && *s != 500));
        let rx2 = received(0..4000);
        let counts = TcpCounts::default();
        let r = report(Inputs {
            mode: TunnelMode::Udp,
            duration: Duration::from_secs(4),
            pps: 1000,
            fault_every: Duration::from_secs(2),
            loss: "uniform:0.03".into(),
            faults: vec![Injected {
                fault: Fault::LinkFlap,
                start: Duration::from_secs(2),
                end: Duration::from_secs(3),
                error: None,
            }],
            streams: [
                (
                    "up",
                    Sent {
                        sent: 4000,
                        refused: 0,
                    },
                    rx,
                ),
                (
                    "down",
                    Sent {
                        sent: 4000,
                        refused: 0,
                    },
                    rx2,
                ),
            ],
            tcp: &counts,
            tcp_failures: 0,
            monitor: Monitor::default(),
            fec: FecStats::default(),
            link_lost: 0,
        });
        assert_eq!(r.streams[0].lost_in_faults, 800);
        assert_eq!(r.streams[0].lost_outside_faults, 1);
        assert_eq!(r.streams[1].lost_in_faults, 0);
        assert_eq!(r.faults[0].outage_ms, 800.0);
        assert!(r.checks.ok);
        assert_eq!(r.outage_p99_ms, 800.0);
    }
}
