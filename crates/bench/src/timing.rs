//! Wall-clock measurement that survives a shared, busy machine.
//!
//! A measurement runs the operation in short batches (~`BATCH` long) until its time budget is
//! spent and keeps the fastest batch. A batch that was preempted or shared a core only gets
//! slower, never faster, so the minimum is the estimate of the uncontended cost (the approach of
//! Python's `timeit`). The median is kept too, to show how noisy the run was.

use std::time::{Duration, Instant};

/// Target length of one timed batch: short enough that many batches fit between two preemptions
/// of a busy 2-core machine, long enough that the clock reads cost nothing.
const BATCH: Duration = Duration::from_micros(300);

/// Result of one measurement, in seconds per call of the operation.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Fastest batch.
    pub best: f64,
    /// Median batch.
    pub median: f64,
    /// Calls timed in total.
    pub calls: u64,
}

/// Times `op` for about `budget` (at least 5 batches) and returns per-call seconds.
pub fn measure(budget: Duration, mut op: impl FnMut()) -> Sample {
    // Warm caches and branch predictors, and find how many calls fill a batch.
    let mut per_batch: u64 = 1;
    loop {
        let t = Instant::now();
        for _ in 0..per_batch {
            op();
        }
        let dt = t.elapsed();
        if dt >= BATCH || per_batch >= 1 << 30 {
            break;
        }
        let grow = (BATCH.as_secs_f64() / dt.as_secs_f64().max(1e-9)).clamp(1.5, 16.0);
        per_batch = ((per_batch as f64) * grow).ceil() as u64;
    }
    let mut times = Vec::with_capacity(1024);
    let start = Instant::now();
    while times.len() < 5 || start.elapsed() < budget {
        let t = Instant::now();
        for _ in 0..per_batch {
            op();
        }
        times.push(t.elapsed().as_secs_f64() / per_batch as f64);
    }
    times.sort_by(f64::total_cmp);
    Sample {
        best: times[0],
        median: times[times.len() / 2],
        calls: per_batch * times.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_is_at_most_median_and_positive() {
        let mut x = 0u64;
        let s = measure(Duration::from_millis(5), || {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        });
        assert!(s.best > 0.0 && s.best <= s.median);
        assert!(s.calls >= 5);
    }
}
