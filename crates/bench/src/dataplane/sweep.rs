//! The offered loads of a throughput sweep.

/// The offered loads of a throughput sweep: doubling from `start` until a load fails (fewer
/// than 99% arrive) or `max` is passed, then `BISECT` loads bisecting between the highest load
/// that passed and the lowest that failed, so the capacity is found to 1/16 of a doubling step
/// rather than to 2x.
#[derive(Debug)]
pub struct Sweep {
    start: u64,
    max: u64,
    passed: u64,
    failed: Option<u64>,
    bisect_left: usize,
}

pub const BISECT: usize = 4;

impl Sweep {
    pub fn new(start: u64, max: u64) -> Sweep {
        Sweep {
            start: start.max(1),
            max,
            passed: 0,
            failed: None,
            bisect_left: BISECT,
        }
    }

    pub fn first(&self) -> u64 {
        self.start
    }

    /// Records the outcome of load `rate`; returns the next load, or `None` when done.
    pub fn after(&mut self, rate: u64, passed: bool) -> Option<u64> {
        if passed {
            self.passed = self.passed.max(rate);
        } else {
            self.failed = Some(self.failed.map_or(rate, |f| f.min(rate)));
        }
        let next = match self.failed {
            None => Some(rate * 2).filter(|&r| r <= self.max),
            Some(_) if self.bisect_left == 0 => None,
            Some(f) => {
                self.bisect_left -= 1;
                Some((self.passed + f) / 2)
            }
        };
        // Nothing left between the bounds.
        next.filter(|&r| r > self.passed && self.failed.is_none_or(|f| r < f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(start: u64, max: u64, capacity: u64) -> Vec<u64> {
        let mut s = Sweep::new(start, max);
        let mut r = Some(s.first());
        let mut v = Vec::new();
        while let Some(x) = r {
            v.push(x);
            r = s.after(x, x <= capacity);
        }
        v
    }

    #[test]
    fn sweep_doubles_then_bisects() {
        assert_eq!(
            loads(10_000, 1_280_000, 90_000),
            [10_000, 20_000, 40_000, 80_000, 160_000, 120_000, 100_000, 90_000, 95_000]
        );
        // Never fails: stops at the maximum.
        assert_eq!(loads(10, 80, 1_000), [10, 20, 40, 80]);
        // The first load fails: bisects below it.
        assert_eq!(loads(100, 1_000, 10), [100, 50, 25, 12, 6]);
        // Bisection stops when the bounds meet.
        assert_eq!(loads(1, 100, 1), [1, 2]);
    }
}
