//! The receiving end's half: counts what each path delivers and reports once per feedback
//! interval ([`PathReport`]), echoing the send stamp of the newest packet so the sender measures
//! the RTT. A path that delivers nothing sends no report: the sender's silence rule sees it.

use std::time::{Duration, Instant};

use crate::PathId;

/// What the far end says about one path for one interval (the sender turns it into a
/// [`PathObservation`](super::PathObservation)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathReport {
    /// The path.
    pub path: PathId,
    /// Packets (data, repairs, probes) it delivered in the interval.
    pub received: u32,
    /// Packets missing from its per-path sequence in the interval.
    pub lost: u32,
    /// Bytes it delivered.
    pub bytes: u64,
    /// Length of the interval the counts cover.
    pub interval: Duration,
    /// The sender's stamp on the newest packet (highest path sequence) delivered.
    pub echo_stamp: u64,
    /// How long that packet waited here before this report.
    pub echo_held: Duration,
}

#[derive(Clone, Debug)]
struct Counting {
    path: PathId,
    highest: Option<u32>,
    received: u32,
    lost: u32,
    bytes: u64,
    start: Option<Instant>,
    echo: Option<(u64, Instant)>,
}

/// Per-path delivery counters at the receiving end (sans-IO: packets and time are inputs).
#[derive(Clone, Debug)]
pub struct PathMonitor {
    interval: Duration,
    paths: Vec<Counting>,
}

impl PathMonitor {
    /// Reports every `interval` for each path that delivered something.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            paths: Vec::new(),
        }
    }

    fn entry(&mut self, path: PathId) -> &mut Counting {
        let i = match self.paths.iter().position(|c| c.path == path) {
            Some(i) => i,
            None => {
                self.paths.push(Counting {
                    path,
                    highest: None,
                    received: 0,
                    lost: 0,
                    bytes: 0,
                    start: None,
                    echo: None,
                });
                self.paths.len() - 1
            }
        };
        &mut self.paths[i]
    }

    /// A packet with per-path sequence `seq` and the sender's `stamp` arrived on `path`.
    pub fn on_packet(&mut self, path: PathId, seq: u32, stamp: u64, len: usize, now: Instant) {
        let c = self.entry(path);
        c.received = c.received.saturating_add(1);
        c.bytes += len as u64;
        c.start.get_or_insert(now);
        match c.highest {
            Some(h) if seq.wrapping_sub(h) as i32 > 0 => {
                c.lost = c.lost.saturating_add(seq.wrapping_sub(h) - 1);
                c.highest = Some(seq);
                c.echo = Some((stamp, now));
            }
            // A packet behind the highest filled a gap already counted (per-path reordering).
            Some(_) => c.lost = c.lost.saturating_sub(1),
            None => {
                c.highest = Some(seq);
                c.echo = Some((stamp, now));
            }
        }
    }

    /// The next report due at or before `now`, if any.
    pub fn poll_report(&mut self, now: Instant) -> Option<PathReport> {
        let interval = self.interval;
        let c = self
            .paths
            .iter_mut()
            .find(|c| c.start.is_some_and(|s| now >= s + interval))?;
        let start = c.start.take()?;
        let (stamp, at) = c.echo?;
        let r = PathReport {
            path: c.path,
            received: c.received,
            lost: c.lost,
            bytes: c.bytes,
            interval: now.saturating_duration_since(start),
            echo_stamp: stamp,
            echo_held: now.saturating_duration_since(at),
        };
        c.received = 0;
        c.lost = 0;
        c.bytes = 0;
        Some(r)
    }

    /// When the next report falls due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.paths
            .iter()
            .filter_map(|c| c.start.map(|s| s + self.interval))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_per_interval_with_gaps_and_echo() {
        let t0 = crate::test_util::t0();
        let ms = Duration::from_millis;
        let mut m = PathMonitor::new(ms(50));
        m.on_packet(1, 10, 100, 1000, t0);
        m.on_packet(1, 13, 103, 1000, t0 + ms(10));
        m.on_packet(1, 12, 102, 1000, t0 + ms(20));
        assert_eq!(m.poll_timeout(), Some(t0 + ms(50)));
        assert_eq!(m.poll_report(t0 + ms(49)), None);
        let r = m.poll_report(t0 + ms(50)).unwrap();
        assert_eq!((r.path, r.received, r.lost, r.bytes), (1, 3, 1, 3000));
        assert_eq!((r.echo_stamp, r.echo_held), (103, ms(40)));
        assert_eq!(m.poll_report(t0 + ms(200)), None, "silent path: no report");
        assert_eq!(m.poll_timeout(), None);
    }
}
