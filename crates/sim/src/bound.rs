//! The limit: a lower bound on the repair overhead needed to recover a fraction `f` of a run's
//! losses within a recovery deadline, computed on the run's own loss trace.
//!
//! Every received repair adds one equation, so recovering `m` losses takes at least `m`
//! received repairs, and repairs cross the same lossy link as the sources (loss ratio `p`):
//!
//! - **Deadline of at least one RTT**: the encoder can learn which sources were lost and still
//!   get a repair to the decoder in time, so the bound is that of a sender that knows every
//!   source loss: `f x lost / (1 - p)` repairs, i.e. `f p / (1 - p)` per source.
//! - **Shorter deadline**: no report of a loss can reach the encoder in time, so repairs must
//!   be sent before the losses they recover are known. A repair helps only losses sent less than
//!   the deadline before it. The bound is that of a sender that knows the distribution of the
//!   losses per deadline window of this very trace (not where they fall): it sends `r` repairs
//!   per window, receives `r (1 - p)` of them, and recovers `min(L_j, r (1 - p))` of the
//!   `L_j` losses of window j; the smallest `r` with `sum_j min(L_j, r (1 - p)) >= f sum_j L_j`,
//!   divided by the sources per window, is the bound. It is a lower bound for schemes that do
//!   not learn within one deadline where the losses fall (every proactive code here), and at
//!   least the first bound.

/// A run's loss trace.
#[derive(Clone, Copy, Debug)]
pub struct LossTrace<'a> {
    /// Measured sources.
    pub sources: u64,
    /// Send time (ns) of every measured source the link lost, in order.
    pub lost_at_ns: &'a [u64],
    /// Recovery deadline (ns); `None`: unbounded.
    pub deadline_ns: Option<u64>,
    /// Round-trip time (ns).
    pub rtt_ns: u64,
    /// Send time (ns) of the last measured source (the first is sent at 0).
    pub duration_ns: u64,
}

/// Smallest overhead (repairs per source) that can recover `f` of the trace's losses in time.
pub fn overhead_bound(t: &LossTrace<'_>, f: f64) -> f64 {
    let lost = t.lost_at_ns.len() as f64;
    if t.sources == 0 || lost == 0.0 || f <= 0.0 {
        return 0.0;
    }
    let n = t.sources as f64;
    let p = (lost / n).min(0.999_999);
    let f = f.min(1.0);
    let reactive = f * lost / (1.0 - p) / n;
    let Some(d) = t.deadline_ns.filter(|&d| d < t.rtt_ns && d > 0) else {
        return reactive;
    };
    // Losses per deadline window (by send time), over every window of the run.
    let windows = (t.duration_ns / d) as usize + 1;
    let mut counts = vec![0u64; windows];
    for &at in t.lost_at_ns {
        counts[((at / d) as usize).min(windows - 1)] += 1;
    }
    let per_window = n / windows as f64;
    let need = f * lost;
    let recovered = |r: f64| -> f64 {
        let got = r * (1.0 - p);
        counts.iter().map(|&l| (l as f64).min(got)).sum()
    };
    // Bisection on the repairs per window.
    let (mut lo, mut hi) = (
        0.0f64,
        counts.iter().copied().max().unwrap_or(1) as f64 / (1.0 - p),
    );
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if recovered(mid) >= need {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (hi / per_window).max(reactive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_deadline_gives_p_over_1_minus_p() {
        // 30 losses in 1000 sources: p = 3 %.
        let lost: Vec<u64> = (0..30).map(|i| i * 33_000_000).collect();
        let t = LossTrace {
            sources: 1000,
            lost_at_ns: &lost,
            deadline_ns: Some(100_000_000),
            rtt_ns: 50_000_000,
            duration_ns: 999 * 33_000,
        };
        let b = overhead_bound(&t, 1.0);
        assert!((b - 0.03 / 0.97).abs() < 1e-12, "{b}");
        assert!((overhead_bound(&t, 0.5) - 0.5 * 0.03 / 0.97).abs() < 1e-12);
        assert_eq!(
            overhead_bound(
                &LossTrace {
                    lost_at_ns: &[],
                    ..t
                },
                1.0
            ),
            0.0
        );
    }

    #[test]
    fn short_deadline_pays_for_the_worst_windows() {
        // 1 ms windows of 100 sources; 10 windows with 1 loss and one with 10: to recover all,
        // every window needs 10 received repairs.
        let mut lost: Vec<u64> = (0..10).map(|i| i * 1_000_000 + 10).collect();
        lost.extend((0..10).map(|i| 10_000_000 + i));
        let t = LossTrace {
            sources: 1100,
            lost_at_ns: &lost,
            deadline_ns: Some(1_000_000),
            rtt_ns: 50_000_000,
            duration_ns: 10_999_000,
        };
        let p = 20.0 / 1100.0;
        let all = overhead_bound(&t, 1.0);
        let expect = 10.0 / (1.0 - p) / 100.0;
        assert!((all - expect).abs() / expect < 1e-6, "{all} vs {expect}");
        // Half the losses: x received repairs per window recover 10 x + x (x <= 1), so
        // x = 10/11 (repairs per window are a rate, not an integer).
        let half = overhead_bound(&t, 0.5);
        let expect = 10.0 / 11.0 / (1.0 - p) / 100.0;
        assert!((half - expect).abs() / half < 1e-6, "{half} vs {expect}");
        // Never below the reactive bound.
        assert!(half >= 0.5 * p / (1.0 - p));
    }
}
