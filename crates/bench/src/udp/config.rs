//! What `hirt bench udp` measures: duration, flows, threads, loss, FEC mode.

use serde::{Deserialize, Serialize};

/// Configuration of `hirt bench udp` (the CLI's flags map one to one onto its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpBenchConfig {
    /// Print the full result as JSON (else the summary).
    pub json: bool,
    /// Seconds per run.
    pub duration: f64,
    /// Parallel TCP connections.
    pub flows: usize,
    /// Worker threads of each peer (`hirt udp --threads`).
    pub threads: usize,
    /// Random loss per datagram on the underlay, both ways (0 = none).
    pub loss: f64,
    /// Runs per configuration; the best counts.
    pub rounds: usize,
    /// FEC mode of the tunnel (`hirt udp --fec`).
    pub fec: String,
    /// Overload threshold of the peers (1 = off; `None`: hirt's default).
    pub overload_threshold: Option<f64>,
    /// Repair lag of the peers' decoders (`hirt udp --repair-lag`; `None`: hirt's default).
    pub repair_lag: Option<u32>,
}

impl Default for UdpBenchConfig {
    fn default() -> Self {
        UdpBenchConfig {
            json: false,
            duration: 5.0,
            flows: 8,
            threads: 1,
            loss: 0.0,
            rounds: 2,
            fec: "ours".into(),
            overload_threshold: None,
            repair_lag: None,
        }
    }
}

/// A configuration `hirt bench udp` cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UdpBenchConfigError {
    /// The duration is not a positive number of seconds.
    #[error("duration must be a positive number of seconds, not {0}")]
    Duration(f64),
    /// The loss rate is outside [0, 1).
    #[error("loss must be in [0, 1), not {0}")]
    Loss(f64),
    /// No TCP flow or no worker thread.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

impl UdpBenchConfig {
    /// Checks every field; the bench runs only a configuration that passes.
    pub fn validate(&self) -> Result<(), UdpBenchConfigError> {
        if !(self.duration.is_finite() && self.duration > 0.0) {
            return Err(UdpBenchConfigError::Duration(self.duration));
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(UdpBenchConfigError::Loss(self.loss));
        }
        if self.flows == 0 {
            return Err(UdpBenchConfigError::Zero("flows"));
        }
        if self.threads == 0 {
            return Err(UdpBenchConfigError::Zero("threads"));
        }
        Ok(())
    }
}
