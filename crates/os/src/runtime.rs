//! Process-level plumbing shared by both modes and the lab: shutdown on SIGINT/SIGTERM (through
//! `signal-hook`), worker loop timing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Once};
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM (through `signal-hook`) or [`request_shutdown`].
static SHUTDOWN: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));
static INSTALL: Once = Once::new();

/// Installs SIGINT/SIGTERM handlers that request a clean shutdown (routes removed, sockets
/// closed). Idempotent.
pub fn install_signal_handlers() {
    INSTALL.call_once(|| {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&SHUTDOWN)) {
                tracing::warn!("cannot handle signal {sig}: {e}");
            }
        }
    });
}

/// Runs `f` on a thread of its own when the process gets SIGINT or SIGTERM (a lab tears its
/// namespaces down there, then exits). Handlers installed by [`install_signal_handlers`] still
/// run too.
pub fn on_termination(f: impl FnOnce(i32) + Send + 'static) -> std::io::Result<()> {
    let mut signals = termination_signals()?;
    std::thread::Builder::new()
        .name("on-termination".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                f(sig);
            }
        })?;
    Ok(())
}

/// Installs SIGINT/SIGTERM handlers that drain before the shutdown: at the first signal,
/// `first` runs (it tells the outside that this process is going, e.g. closes the endpoint a
/// health check watches), then the process goes on working for `drain`, then the shutdown is
/// requested as by [`install_signal_handlers`]. A second signal requests it at once.
pub fn install_draining_signal_handlers(
    drain: Duration,
    first: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    let mut signals = termination_signals()?;
    std::thread::Builder::new()
        .name("drain".into())
        .spawn(move || {
            let mut pending = signals.forever();
            if pending.next().is_none() {
                return;
            }
            tracing::info!("stopping: draining for {drain:?} first (a second signal stops now)");
            first();
            std::thread::spawn(move || {
                std::thread::sleep(drain);
                request_shutdown();
            });
            if pending.next().is_some() {
                request_shutdown();
            }
        })?;
    Ok(())
}

/// SIGINT and SIGTERM, delivered to an iterator instead of their default action.
fn termination_signals() -> std::io::Result<signal_hook::iterator::Signals> {
    signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
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

    /// A SIGTERM sets the shutdown flag and reaches an [`on_termination`] callback (the test
    /// process survives: signal-hook's handlers replace the default action).
    #[test]
    fn sigterm_requests_shutdown() {
        install_signal_handlers();
        let (tx, rx) = std::sync::mpsc::channel();
        on_termination(move |sig| tx.send(sig).unwrap()).unwrap();
        let stop = StopFlag::default();
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM).unwrap();
        let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(got, signal_hook::consts::SIGTERM);
        assert!(shutdown_requested());
        assert!(stop.stopped());
    }
}
