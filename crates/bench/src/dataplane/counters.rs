//! The tunnel counters of the hirt nodes and the loss rule, read before and after each offered
//! load so that a run reports the numbers of its capacity load.

use std::sync::atomic::{AtomicU64, Ordering};

use hirt_linux::metrics::{Metrics, StreamCounters};

/// Counter values at one instant (or, from [`Snapshot::since`], their growth over a load).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Losses the decoder declared.
    pub losses: u64,
    /// Of those, recovered.
    pub recovered: u64,
    /// Of those, recovered later than the recovery deadline (0 without one).
    pub recovered_late: u64,
    /// Losses the decoder gave up on.
    pub unrecoverable: u64,
    /// Repairs the encoder sent.
    pub repairs: u64,
    /// Repair bytes the encoder sent.
    pub repair_bytes: u64,
    /// Source bytes the encoder sent.
    pub source_bytes: u64,
    /// Repairs or recoveries skipped by overload control (encoder + decoder).
    pub overload_skips: u64,
    /// Packets the loss rule dropped.
    pub link_drops: u64,
    /// Drops at the decoder's queues that it reported as its own.
    pub local_drops: u64,
    /// Repairs sent by the encoder's timer.
    pub repairs_timer: u64,
    /// CPU time of the hirt threads, ns.
    pub hirt_cpu_ns: u64,
    /// Repairs the decoder received.
    pub repairs_received: u64,
    /// Loss reports the decoder sent (with a recovery deadline).
    pub loss_reports: u64,
    /// Repairs the encoder sent in answer to them.
    pub repairs_report: u64,
    /// Feedback the encoder took as congestion (each pauses the answers).
    pub congestion_signals: u64,
}

impl Snapshot {
    /// Reads the encoder's and the decoder's counters (`None`: no hirt on the path), the loss
    /// rule's drops and the hirt threads' CPU time.
    pub fn read(nodes: Option<(&Metrics, &Metrics)>, link_drops: u64, hirt_cpu_ns: u64) -> Self {
        let Some((em, dm)) = nodes else {
            return Snapshot {
                link_drops,
                ..Snapshot::default()
            };
        };
        let sum = |m: &Metrics, f: fn(&StreamCounters) -> &AtomicU64| {
            m.streams
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        Snapshot {
            losses: sum(dm, |s| &s.losses),
            recovered: sum(dm, |s| &s.recovered),
            recovered_late: sum(dm, |s| &s.recovered_late),
            unrecoverable: sum(dm, |s| &s.unrecoverable),
            repairs: sum(em, |s| &s.repairs_sent),
            repair_bytes: sum(em, |s| &s.repair_bytes_sent),
            source_bytes: sum(em, |s| &s.source_bytes_sent),
            overload_skips: sum(em, |s| &s.overload_skips) + sum(dm, |s| &s.overload_skips),
            link_drops,
            local_drops: sum(dm, |s| &s.local_drops),
            repairs_timer: sum(em, |s| &s.repairs_timer),
            hirt_cpu_ns,
            repairs_received: sum(dm, |s| &s.repairs_received),
            loss_reports: sum(dm, |s| &s.loss_reports),
            repairs_report: sum(em, |s| &s.repairs_report),
            congestion_signals: sum(em, |s| &s.congestion_signals),
        }
    }

    /// The growth of every counter since `before`.
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        Snapshot {
            losses: self.losses.saturating_sub(before.losses),
            recovered: self.recovered.saturating_sub(before.recovered),
            recovered_late: self.recovered_late.saturating_sub(before.recovered_late),
            unrecoverable: self.unrecoverable.saturating_sub(before.unrecoverable),
            repairs: self.repairs.saturating_sub(before.repairs),
            repair_bytes: self.repair_bytes.saturating_sub(before.repair_bytes),
            source_bytes: self.source_bytes.saturating_sub(before.source_bytes),
            overload_skips: self.overload_skips.saturating_sub(before.overload_skips),
            link_drops: self.link_drops.saturating_sub(before.link_drops),
            local_drops: self.local_drops.saturating_sub(before.local_drops),
            repairs_timer: self.repairs_timer.saturating_sub(before.repairs_timer),
            hirt_cpu_ns: self.hirt_cpu_ns.saturating_sub(before.hirt_cpu_ns),
            repairs_received: self
                .repairs_received
                .saturating_sub(before.repairs_received),
            loss_reports: self.loss_reports.saturating_sub(before.loss_reports),
            repairs_report: self.repairs_report.saturating_sub(before.repairs_report),
            congestion_signals: self
                .congestion_signals
                .saturating_sub(before.congestion_signals),
        }
    }

    /// Repair bytes over source bytes.
    pub fn overhead(&self) -> f64 {
        self.repair_bytes as f64 / self.source_bytes.max(1) as f64
    }

    /// recovered / losses (1.0 without losses).
    pub fn recovered_ratio(&self) -> f64 {
        if self.losses > 0 {
            (self.recovered as f64 / self.losses as f64).min(1.0)
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_and_ratios() {
        let before = Snapshot {
            losses: 10,
            recovered: 9,
            repair_bytes: 100,
            source_bytes: 1000,
            link_drops: 5,
            ..Snapshot::default()
        };
        let after = Snapshot {
            losses: 30,
            recovered: 28,
            repair_bytes: 400,
            source_bytes: 11_000,
            link_drops: 25,
            ..Snapshot::default()
        };
        let d = after.since(&before);
        assert_eq!((d.losses, d.recovered, d.link_drops), (20, 19, 20));
        assert!((d.overhead() - 0.03).abs() < 1e-12);
        assert!((d.recovered_ratio() - 0.95).abs() < 1e-12);
        assert_eq!(Snapshot::default().recovered_ratio(), 1.0);
        assert_eq!(Snapshot::default().overhead(), 0.0);
        let none = Snapshot::read(None, 7, 99);
        assert_eq!((none.link_drops, none.hirt_cpu_ns, none.losses), (7, 0, 0));
    }
}
