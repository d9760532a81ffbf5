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
//! Time and CPU time are passed in, so the meter is tested without clocks.

use std::time::{Duration, Instant};

/// Default measurement period.
pub const LOAD_PERIOD: Duration = Duration::from_millis(10);

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
    /// Returns the period's load (0.0..=1.0).
    pub fn close(&mut self, now: Instant, cpu: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.start);
        let used = cpu.saturating_sub(self.start_cpu);
        self.load = if !self.waited {
            1.0
        } else if elapsed.is_zero() {
            self.load
        } else {
            (used.as_secs_f64() / elapsed.as_secs_f64()).clamp(0.0, 1.0)
        };
        self.start = now;
        self.start_cpu = cpu;
        self.waited = false;
        self.load
    }

    /// Load of the last complete period (0 before the first).
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

    #[test]
    fn load_is_cpu_over_wall_and_one_without_any_wait() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(100), ms(10));
        assert!(!m.due(t0 + ms(9)));
        assert!(m.due(t0 + ms(10)));
        // Waited at least once, used 3 ms of CPU in 10 ms (descheduled or blocked otherwise).
        m.drained();
        let l = m.close(t0 + ms(10), ms(103));
        assert!((l - 0.3).abs() < 1e-9, "{l}");
        assert!((m.load() - 0.3).abs() < 1e-9);
        // Never drained: a backlog all period long, saturated whatever the CPU share was.
        assert_eq!(m.close(t0 + ms(20), ms(105)), 1.0);
        // Blocked for a long wait, a little CPU.
        m.drained();
        let l = m.close(t0 + ms(120), ms(106));
        assert!((l - 0.01).abs() < 1e-9, "{l}");
    }

    #[test]
    fn odd_clocks_stay_in_range() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(50), ms(10));
        m.drained();
        // CPU clock behind (another thread's?) or ahead of wall time: clamped.
        assert_eq!(m.close(t0 + ms(10), ms(40)), 0.0);
        m.drained();
        assert_eq!(m.close(t0 + ms(20), ms(90)), 1.0);
        // Zero-length period keeps the last value.
        m.drained();
        assert_eq!(m.close(t0 + ms(20), ms(95)), 1.0);
    }
}
