//! How busy a worker is, for overload control (HIRT §V "Overloading detection").
//!
//! A worker alternates between waiting in `poll` for its TUN queue and working (reading,
//! coding, writing). Once per period (~10 ms) [`LoadMeter`] reports its load:
//!
//! - 1.0 if it never drained its queue in the whole period: every TUN read batch came back
//!   full, the worker is saturated;
//! - otherwise the CPU time the thread used over the period's wall time.
//!
//! Why CPU time and not "wall time not spent in `poll`": on a machine where the workers share
//! cores with other threads (the 2-core VM of docs/dataplane.md: sender, receiver, two hirt
//! nodes and the kernel's forwarding), a runnable worker is often descheduled, and counting
//! that as busy made overload control fire at a third of the capacity and skip most repairs
//! at 3% loss (see docs/dataplane.md, Measurements). Time descheduled is not work the worker
//! can shed by skipping repairs; a backlog that never drains is, and counts as 1.0.
//!
//! The reported load is an exponentially weighted average of the per-period values (weight
//! [`LOAD_EWMA`] for the newest): one period of 10 ms in which the worker happens to run flat
//! out (a backlog after being descheduled, a burst of decoding) must not make the core skip
//! repairs, which are not sent again; about 70 ms of saturation from a load of 0.2 takes it
//! past 0.9.
//!
//! Time and CPU time are passed in, so the meter is tested without clocks.

use std::time::{Duration, Instant};

/// Default measurement period.
pub const LOAD_PERIOD: Duration = Duration::from_millis(10);

/// Weight of the newest period in the reported (smoothed) load.
pub const LOAD_EWMA: f64 = 0.25;

/// Load accounting of one worker thread.
#[derive(Clone, Debug)]
pub struct LoadMeter {
    period: Duration,
    start: Instant,
    start_cpu: Duration,
    waited: bool,
    load: f64,
}

impl LoadMeter {
    /// A meter whose first period starts at `now`, when the thread had used `cpu`.
    pub fn new(now: Instant, cpu: Duration, period: Duration) -> LoadMeter {
        LoadMeter {
            period: period.max(Duration::from_micros(1)),
            start: now,
            start_cpu: cpu,
            waited: false,
            load: 0.0,
        }
    }

    /// Records that the worker drained its queue (a read batch ended before it was full: it
    /// goes on to wait in `poll`).
    pub fn drained(&mut self) {
        self.waited = true;
    }

    /// Whether the period is over (then call [`Self::close`]).
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.start) >= self.period
    }

    /// Closes the period at `now`, when the thread had used `cpu` in all, and starts the next.
    /// Returns the smoothed load (0.0..=1.0).
    pub fn close(&mut self, now: Instant, cpu: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.start);
        let used = cpu.saturating_sub(self.start_cpu);
        let period = if !self.waited {
            Some(1.0)
        } else if elapsed.is_zero() {
            None
        } else {
            Some((used.as_secs_f64() / elapsed.as_secs_f64()).clamp(0.0, 1.0))
        };
        if let Some(p) = period {
            self.load += LOAD_EWMA * (p - self.load);
        }
        self.start = now;
        self.start_cpu = cpu;
        self.waited = false;
        self.load
    }

    /// The smoothed load as of the last complete period (0 before the first).
    pub fn load(&self) -> f64 {
        self.load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A meter without smoothing memory: feeds the same period value until it converges.
    fn settle(m: &mut LoadMeter, t: &mut Instant, cpu: &mut Duration, busy_ms: u64) -> f64 {
        let mut l = 0.0;
        for _ in 0..200 {
            *t += ms(10);
            *cpu += ms(busy_ms);
            m.drained();
            l = m.close(*t, *cpu);
        }
        l
    }

    #[test]
    fn load_is_cpu_over_wall_smoothed() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(100), ms(10));
        assert!(!m.due(t0 + ms(9)));
        assert!(m.due(t0 + ms(10)));
        // One period: 3 ms of CPU in 10 ms -> a quarter of the way from 0 to 0.3.
        m.drained();
        let l = m.close(t0 + ms(10), ms(103));
        assert!((l - LOAD_EWMA * 0.3).abs() < 1e-9, "{l}");
        assert_eq!(l, m.load());
        let (mut t, mut cpu) = (t0 + ms(10), ms(103));
        let l = settle(&mut m, &mut t, &mut cpu, 3);
        assert!((l - 0.3).abs() < 1e-6, "{l}");
        let l = settle(&mut m, &mut t, &mut cpu, 9);
        assert!((l - 0.9).abs() < 1e-6, "{l}");
    }

    #[test]
    fn a_backlog_that_never_drains_is_saturation_but_one_spike_is_not() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, Duration::ZERO, ms(10));
        let (mut t, mut cpu) = (t0, Duration::ZERO);
        assert!(settle(&mut m, &mut t, &mut cpu, 2) < 0.21);
        // One period without draining (even with little CPU: descheduled): counts as 1.0,
        // but a single one stays well below a 0.9 threshold.
        t += ms(10);
        cpu += ms(1);
        let l = m.close(t, cpu);
        assert!((l - (0.2 + LOAD_EWMA * 0.8)).abs() < 1e-6, "{l}");
        assert!(l < 0.5);
        // Sustained: past 0.9 within ~70 ms.
        let mut n = 1;
        let mut l = l;
        while l <= 0.9 {
            t += ms(10);
            l = m.close(t, cpu);
            n += 1;
        }
        assert!((6..=9).contains(&n), "{n} periods");
    }

    #[test]
    fn odd_clocks_stay_in_range() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(50), ms(10));
        // CPU clock behind or ahead of wall time: clamped to 0..=1.
        for k in 1..50 {
            m.drained();
            let l = m.close(t0 + ms(10 * k), ms(40));
            assert!((0.0..=1.0).contains(&l));
        }
        assert_eq!(m.load(), 0.0);
        m.drained();
        let l = m.close(t0 + ms(600), ms(10_000));
        assert!((l - LOAD_EWMA).abs() < 1e-9, "{l}");
        // A zero-length period changes nothing.
        m.drained();
        assert_eq!(m.close(t0 + ms(600), ms(10_001)), l);
    }
}
