//! Process-level plumbing shared by both modes: shutdown on SIGINT/SIGTERM, worker loop timing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static SHUTDOWN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    SHUTDOWN.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM handlers that request a clean shutdown (routes removed, sockets
/// closed). Idempotent.
pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Whether a shutdown was requested (signal or [`request_shutdown`]).
#[inline]
pub fn shutdown_requested() -> bool {
    SHUTDOWN.load(Ordering::Relaxed)
}

/// Requests a shutdown of every worker in the process.
pub fn request_shutdown() {
    SHUTDOWN.store(true, Ordering::SeqCst);
}

/// A per-instance stop flag (tests run several instances in one process).
#[derive(Debug, Default)]
pub struct StopFlag(AtomicBool);

impl StopFlag {
    /// Asks the instance's workers to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether this instance or the process should stop.
    #[inline]
    pub fn stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed) || shutdown_requested()
    }
}

/// How long to wait for packets until `deadline` (at most `cap`; zero when it is due). The wait
/// goes to `ppoll` with nanosecond resolution: sub-millisecond timers (e.g. timer repairs 0.25
/// ms apart) fire on time instead of rounded up to `poll`'s milliseconds.
pub fn poll_wait(now: Instant, deadline: Option<Instant>, cap: Duration) -> Duration {
    deadline
        .map(|t| t.saturating_duration_since(now))
        .unwrap_or(cap)
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_wait_is_exact_and_capped() {
        let now = Instant::now();
        let cap = Duration::from_millis(100);
        let us = Duration::from_micros;
        assert_eq!(poll_wait(now, None, cap), cap);
        assert_eq!(poll_wait(now, Some(now + us(250)), cap), us(250));
        assert_eq!(poll_wait(now, Some(now), cap), Duration::ZERO);
        assert_eq!(
            poll_wait(now + Duration::from_secs(1), Some(now), cap),
            Duration::ZERO
        );
        assert_eq!(poll_wait(now, Some(now + Duration::from_secs(5)), cap), cap);
    }
}
