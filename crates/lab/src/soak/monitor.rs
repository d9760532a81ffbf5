//! Memory (resident set) and open descriptors of every hirt process over a soak.

use std::time::Duration;

use serde::Serialize;

use crate::tunnel::Side;

/// Samples taken this long after a process started are its baseline. By then the start-up
/// allocations, the rings and the decoder's window and pending repairs have reached their
/// steady size: at the soak's 1000 datagrams/s with 3% loss, the heap a process holds
/// (`heap_live_bytes`) climbs for its first 45-90 s and is flat after that.
pub const WARM_UP: Duration = Duration::from_secs(120);

/// The samples of one process.
#[derive(Debug, Clone, Serialize)]
pub struct Process {
    /// Which end.
    pub side: Side,
    /// Its process id.
    pub pid: u32,
    /// When it was first sampled, seconds into the soak.
    pub first_s: f64,
    /// When it was last sampled.
    pub last_s: f64,
    /// Resident set at the first sample after the warm-up, kB.
    pub rss_base_kb: Option<u64>,
    /// Resident set at the last sample, kB.
    pub rss_last_kb: u64,
    /// Largest resident set seen, kB.
    pub rss_max_kb: u64,
    /// Bytes held on the heap at the first sample after the warm-up, kB (what the
    /// allocator handed out and was not given back: the resident set without the pages the
    /// allocator keeps), when the process reports it.
    pub heap_base_kb: Option<u64>,
    /// Bytes held on the heap at the last sample that reported it, kB.
    pub heap_last_kb: Option<u64>,
    /// Most bytes held on the heap at a sample, kB.
    pub heap_max_kb: Option<u64>,
    /// Open descriptors at the first sample after the warm-up.
    pub fds_base: Option<u64>,
    /// Open descriptors at the last sample.
    pub fds_last: u64,
    /// Most open descriptors seen.
    pub fds_max: u64,
}

impl Process {
    /// Growth of the resident set from the baseline to the last sample, percent (`None` while
    /// the process has no baseline).
    pub fn rss_growth_pct(&self) -> Option<f64> {
        let base = self.rss_base_kb? as f64;
        Some((self.rss_last_kb as f64 - base) / base.max(1.0) * 100.0)
    }

    /// Growth of the bytes held on the heap from the baseline to the last sample, percent.
    pub fn heap_growth_pct(&self) -> Option<f64> {
        let base = self.heap_base_kb? as f64;
        Some((self.heap_last_kb? as f64 - base) / base.max(1.0) * 100.0)
    }

    /// How long the process was watched after its warm-up, seconds.
    pub fn watched_s(&self) -> f64 {
        (self.last_s - self.first_s - WARM_UP.as_secs_f64()).max(0.0)
    }
}

/// Every process seen.
#[derive(Debug, Default)]
pub struct Monitor {
    /// One entry per process id.
    pub processes: Vec<Process>,
}

impl Monitor {
    /// Samples process `pid` of `side` at `at` into the soak; a process that is gone is
    /// skipped.
    /// `heap_bytes` asks the process what it holds on its heap (its answer, if any); it is
    /// asked after the descriptors are counted, since answering opens one.
    pub fn sample(
        &mut self,
        pid: u32,
        side: Side,
        at: Duration,
        heap_bytes: impl FnOnce() -> Option<u64>,
    ) {
        let Some((rss, fds)) = read(pid) else {
            return;
        };
        let heap = heap_bytes().map(|b| b / 1024);
        let t = at.as_secs_f64();
        let p = match self.processes.iter_mut().find(|p| p.pid == pid) {
            Some(p) => p,
            None => {
                self.processes.push(Process {
                    side,
                    pid,
                    first_s: t,
                    last_s: t,
                    rss_base_kb: None,
                    rss_last_kb: rss,
                    rss_max_kb: rss,
                    heap_base_kb: None,
                    heap_last_kb: heap,
                    heap_max_kb: heap,
                    fds_base: None,
                    fds_last: fds,
                    fds_max: fds,
                });
                return;
            }
        };
        p.last_s = t;
        p.rss_last_kb = rss;
        p.rss_max_kb = p.rss_max_kb.max(rss);
        p.fds_last = fds;
        p.fds_max = p.fds_max.max(fds);
        if heap.is_some() {
            p.heap_last_kb = heap;
            p.heap_max_kb = p.heap_max_kb.max(heap);
        }
        if p.rss_base_kb.is_none() && t - p.first_s >= WARM_UP.as_secs_f64() {
            p.rss_base_kb = Some(rss);
            p.heap_base_kb = heap;
            p.fds_base = Some(fds);
        }
    }
}

/// Resident set (kB) and open descriptors of `pid`.
fn read(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((rss, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_after_warm_up_and_growth() {
        let mut m = Monitor::default();
        let me = std::process::id();
        m.sample(me, Side::Client, Duration::from_secs(0), || {
            Some(4096 * 1024)
        });
        m.sample(me, Side::Client, Duration::from_secs(10), || None);
        assert!(m.processes[0].rss_base_kb.is_none());
        assert!(m.processes[0].rss_growth_pct().is_none());
        m.sample(
            me,
            Side::Client,
            Duration::from_secs(WARM_UP.as_secs() + 1),
            || Some(4096 * 1024),
        );
        m.sample(
            me,
            Side::Client,
            Duration::from_secs(WARM_UP.as_secs() + 2),
            || Some(4096 * 1024 + 41 * 1024),
        );
        let p = &m.processes[0];
        assert!(p.rss_base_kb.is_some() && p.fds_base.is_some() && p.fds_last > 0);
        assert!(p.rss_growth_pct().is_some());
        assert_eq!(p.heap_base_kb, Some(4096));
        assert_eq!(p.heap_max_kb, Some(4137));
        assert!((p.heap_growth_pct().unwrap() - 1.0).abs() < 0.01);
        assert_eq!(p.watched_s(), 2.0);
        // A process that does not exist is not recorded.
        m.sample(u32::MAX - 1, Side::Server, Duration::from_secs(1), || None);
        assert_eq!(m.processes.len(), 1);
    }
}
