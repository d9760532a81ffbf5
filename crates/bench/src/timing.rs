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

/// The scheduler's view of this thread (`/proc/thread-self/schedstat`, Linux): nanoseconds on
/// a CPU and nanoseconds runnable but waiting for one. Tells whether a run was disturbed.
#[derive(Clone, Copy, Debug)]
pub struct SchedStat {
    run_ns: u64,
    wait_ns: u64,
    at: Instant,
}

/// Share of a wall-time interval spent on a CPU and waiting in the run queue.
#[derive(Clone, Copy, Debug)]
pub struct Contention {
    /// On a CPU / wall time (1.0 on an idle machine for a single-threaded benchmark).
    pub cpu_share: f64,
    /// Runnable but not running / wall time.
    pub wait_share: f64,
}

impl SchedStat {
    /// Reads the counters; `None` where `/proc` does not provide them.
    pub fn read() -> Option<SchedStat> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let mut it = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        Some(SchedStat {
            run_ns: it.next()??,
            wait_ns: it.next()??,
            at: Instant::now(),
        })
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &SchedStat) -> Contention {
        let wall = self.at.duration_since(earlier.at).as_nanos().max(1) as f64;
        Contention {
            cpu_share: self.run_ns.saturating_sub(earlier.run_ns) as f64 / wall,
            wait_share: self.wait_ns.saturating_sub(earlier.wait_ns) as f64 / wall,
        }
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

    #[test]
    fn schedstat_sees_a_busy_loop() {
        let (Some(a), t) = (SchedStat::read(), Instant::now()) else {
            return; // not Linux
        };
        let mut x = 1u64;
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(3));
        }
        let c = SchedStat::read().expect("readable once").since(&a);
        assert!(c.cpu_share > 0.0 && c.cpu_share <= 1.2, "{c:?}");
        assert!(c.wait_share >= 0.0);
    }
}
