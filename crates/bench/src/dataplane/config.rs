//! What `hirt bench dataplane` measures: loads, durations, FEC mode, the nodes' packet I/O.

use serde::{Deserialize, Serialize};

/// Configuration of `hirt bench dataplane` (the CLI's flags map one to one onto its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Print the full result as JSON (else the summary).
    pub json: bool,
    /// Seconds per offered load of the throughput sweep.
    pub duration: f64,
    /// Size of the inner IPv6 packets.
    pub packet_size: usize,
    /// Sliding window of the FEC runs.
    pub window: u16,
    /// FEC mode of the FEC runs (`hirt srv6 --fec`).
    pub fec: String,
    /// Rounds of the throughput sweeps; each configuration reports its best round.
    pub rounds: usize,
    /// Loss of the lossy run (0..1).
    pub loss: f64,
    /// First offered load of the sweep, packets/s.
    pub sweep_start: u64,
    /// Highest offered load of the sweep, packets/s.
    pub sweep_max: u64,
    /// Paced rate of the latency runs, packets/s.
    pub latency_pps: u64,
    /// Further loads of the latency runs, packets/s. `None`: 20k, 40k, 60k, 80k in a full run,
    /// none with `latency_only`.
    pub latency_curve: Option<Vec<u64>>,
    /// Seconds per latency run (the first 0.2 s are warm-up).
    pub latency_duration: f64,
    /// CPU of the bench's own sender and receiver threads.
    pub pin_traffic: Option<usize>,
    /// Overload threshold of the hirt instances (1 = off; `None`: hirt's default).
    pub overload_threshold: Option<f64>,
    /// Authenticate source packets in the FEC runs.
    pub auth_sources: bool,
    /// Seconds of the goal check.
    pub goal_duration: f64,
    /// Time-driven repair delay of the hirt instances, ms (`None`: hirt's default; 0 = off).
    pub repair_delay_ms: Option<f64>,
    /// Recovery deadline of the hirt instances (`hirt srv6 --deadline`; `None`: hirt's
    /// default, `off`: none).
    pub deadline: Option<String>,
    /// Only the latency runs.
    pub latency_only: bool,
    /// Only the throughput goal check, at this offered load (packets/s).
    pub goal_only_pps: Option<u64>,
    /// How the hirt nodes take and send packets.
    pub dataplane: Dataplane,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            json: false,
            duration: 1.0,
            packet_size: 1280,
            window: 200,
            fec: "ours:base=0.02".into(),
            rounds: 2,
            loss: 0.03,
            sweep_start: 10_000,
            sweep_max: 1_280_000,
            latency_pps: 100_000,
            latency_curve: None,
            latency_duration: 2.0,
            pin_traffic: None,
            overload_threshold: None,
            auth_sources: false,
            goal_duration: 2.0,
            repair_delay_ms: None,
            deadline: None,
            latency_only: false,
            goal_only_pps: None,
            dataplane: Dataplane::KernelSources,
        }
    }
}

/// A configuration `hirt bench dataplane` cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A duration is not a positive number of seconds.
    #[error("{0} must be a positive number of seconds, not {1}")]
    Duration(&'static str, f64),
    /// The loss rate is outside [0, 1).
    #[error("loss must be in [0, 1), not {0}")]
    Loss(f64),
    /// The packet does not hold the bench's 24-byte payload header after IPv6 and UDP headers.
    #[error("packet size must be at least 72 bytes (IPv6 + UDP + 24 bytes), not {0}")]
    PacketSize(usize),
    /// A paced load of zero packets/s.
    #[error("{0} must be at least 1 packet/s")]
    Rate(&'static str),
}

impl DataplaneConfig {
    /// Checks every field; the bench runs only a configuration that passes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("duration", self.duration),
            ("latency duration", self.latency_duration),
            ("goal duration", self.goal_duration),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ConfigError::Duration(name, v));
            }
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(ConfigError::Loss(self.loss));
        }
        if self.packet_size < 72 {
            return Err(ConfigError::PacketSize(self.packet_size));
        }
        if self.latency_pps == 0 || self.latency_curve.iter().flatten().any(|&r| r == 0) {
            return Err(ConfigError::Rate("a latency load"));
        }
        if self.goal_only_pps == Some(0) {
            return Err(ConfigError::Rate("the goal check's load"));
        }
        Ok(())
    }
}

/// The hirt nodes' packet I/O in `hirt bench dataplane`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dataplane {
    /// AF_XDP sockets for hirt's packets, the sources forwarded and delivered by the kernel
    /// (`hirt srv6 --xdp ... --kernel-sources`).
    #[serde(rename = "kernel-sources")]
    KernelSources,
    /// AF_XDP sockets (`hirt srv6 --xdp`).
    #[serde(rename = "xdp")]
    Xdp,
    /// TUN devices.
    #[serde(rename = "tun")]
    Tun,
}

impl Dataplane {
    /// Whether the nodes use AF_XDP (and the path has a middle router).
    pub fn xdp(self) -> bool {
        self != Dataplane::Tun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_valid_and_bad_values_are_named() {
        DataplaneConfig::default().validate().unwrap();
        let bad = |f: fn(&mut DataplaneConfig)| {
            let mut c = DataplaneConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(|c| c.duration = 0.0).contains("duration"));
        assert!(bad(|c| c.loss = 1.0).contains("loss"));
        assert!(bad(|c| c.packet_size = 40).contains("packet size"));
        assert!(bad(|c| c.latency_curve = Some(vec![0])).contains("latency"));
    }

    #[test]
    fn reads_from_toml_like_data() {
        let c: DataplaneConfig =
            serde_json::from_str(r#"{"dataplane": "tun", "rounds": 1, "latency_curve": [20000]}"#)
                .unwrap();
        assert_eq!(c.dataplane, Dataplane::Tun);
        assert_eq!(c.rounds, 1);
        assert_eq!(c.latency_curve, Some(vec![20_000]));
        assert_eq!(c.window, 200);
        assert!(serde_json::from_str::<DataplaneConfig>(r#"{"windw": 3}"#).is_err());
    }
}
