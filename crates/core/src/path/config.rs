//! Configuration of the [`PathManager`](super::PathManager): data (serde, kebab-case keys, unknown
//! keys refused) checked by [`PathManagerConfig::validate`]. In a TOML file it is a `[paths]`
//! table with a `[paths.policy]` sub-table; `docs/paths.md` lists every key.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::PathId;

/// How many ESIs a repair may trail the newest source by, by default, at a decoder that can
/// receive over several paths ([`crate::DecoderConfig::with_repair_lag`]). Repairs that take
/// another path than their sources (`repair-path = diverse`, or sources moved by the policy)
/// arrive behind them by the paths' delay difference, and a busy receiver reading one path
/// before the other adds to it. With a window of 32 the decoder otherwise keeps 64 sources:
/// diverse repairs 10 ms behind their sources at 10 kpps recovered 40 of 5930 losses (`hirt sim
/// --path delay=0.1ms,loss=uniform:0.03 --path delay=10ms --repair-path diverse --scheme
/// fixed:w=32,step=4`), all of them with this lag. 1024 ESIs are ~100 ms at 10 kpps; with
/// W = 200 the decoder keeps 2048 sources instead of 512.
pub const MULTIPATH_REPAIR_LAG: u32 = 1024;

/// Why a path configuration was refused.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PathConfigError {
    /// A numeric key is outside its range.
    #[error("`{key}` = {value} is out of range ({range})")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// What was given.
        value: f64,
        /// The accepted range, in words.
        range: &'static str,
    },
    /// A keyword is not known.
    #[error("unknown {what} `{given}` (expected one of: {expected})")]
    UnknownKeyword {
        /// What kind of keyword.
        what: &'static str,
        /// What was given.
        given: String,
        /// The accepted keywords.
        expected: &'static str,
    },
    /// The manager needs at least one path, and at most 255 distinct ones.
    #[error("a path manager needs 1..=255 distinct path ids, got {0}")]
    PathCount(usize),
    /// A path id appears twice.
    #[error("path {0} is given twice")]
    DuplicatePath(PathId),
    /// A configuration key names a path the manager does not have.
    #[error("`{key}` names path {path}, which is not configured")]
    UnknownPath {
        /// The key.
        key: &'static str,
        /// The path id.
        path: PathId,
    },
}

/// An enum configured by keyword: serde and `FromStr` use the same names.
macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident ($what:literal) { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "&'static str")]
        pub enum $name {
            $($(#[$vm])* $v),+
        }

        impl $name {
            /// Every keyword, for messages.
            pub const KEYWORDS: &'static str = concat!($($s, " "),+);

            /// The keyword.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s),+
                }
            }
        }

        impl From<$name> for &'static str {
            fn from(v: $name) -> &'static str {
                v.as_str()
            }
        }

        impl FromStr for $name {
            type Err = PathConfigError;

            fn from_str(s: &str) -> Result<Self, PathConfigError> {
                match s.trim() {
                    $($s => Ok($name::$v),)+
                    other => Err(PathConfigError::UnknownKeyword {
                        what: $what,
                        given: other.to_string(),
                        expected: Self::KEYWORDS.trim_end(),
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = PathConfigError;

            fn try_from(s: String) -> Result<Self, PathConfigError> {
                s.parse()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

keyword_enum!(
    /// Which rule puts flows on paths.
    PolicyKind ("policy") {
        /// Active/backup: every flow on the first usable path of the preference order.
        Failover = "failover",
        /// TPC's EXP3 (Algorithm 1) over the usable paths, rewarded by `SRTT_max - SRTT`.
        LowestDelay = "lowest-delay",
        /// The usable path with the lowest smoothed RTT (baseline).
        Greedy = "greedy",
        /// Uniformly random over the usable paths (baseline).
        Random = "random",
        /// Flows spread over the usable paths in proportion to capacity (`capacity-bps`) times
        /// `min SRTT / SRTT`; under `new-flow`, new flows are dealt in turn in that proportion
        /// (smooth weighted round robin), so a few bulk flows already split evenly.
        Bond = "bond",
    }
);

keyword_enum!(
    /// How a flow (a 5-tuple hash) gets its path under `lowest-delay`, `random` and `bond`.
    FlowAssign ("flow assignment") {
        /// A new flow draws its path once and keeps it until it idles out (`flow-idle-ms`):
        /// one EXP3 step per new flow, as TPC does per connection.
        NewFlow = "new-flow",
        /// The path is a function of the flow hash and the current path probabilities (no
        /// per-flow state); EXP3 takes one step per feedback interval. A flow moves only when
        /// the probabilities shift across its hash.
        Hash = "hash",
    }
);

keyword_enum!(
    /// Unit of the EXP3 reward `SRTT_max - SRTT`.
    Exp3Reward ("EXP3 reward") {
        /// Divided by `SRTT_max`: in [0, 1], the range EXP3's analysis assumes.
        Normalized = "normalized",
        /// In milliseconds, as TPC computes it (large rewards move weights in one step).
        Milliseconds = "ms",
    }
);

keyword_enum!(
    /// What EXP3 learns from (`lowest-delay`).
    Exp3Feedback ("EXP3 feedback") {
        /// The drawn path's reward only, divided by its probability: the bandit EXP3 of TPC,
        /// where an endpoint learns a path's delay only by sending a connection over it.
        Chosen = "chosen",
        /// Every path's reward at each of its RTT samples, with probability 1: the tunnel
        /// probes every path, so it knows each one's delay without drawing it (exponential
        /// weights with full information; Gamma still sets the exploration of new flows).
        EveryPath = "every-path",
    }
);

keyword_enum!(
    /// Which path a repair takes.
    RepairPath ("repair path") {
        /// The path of the sources it protects.
        Same = "same",
        /// Another usable path (the lowest-delay one) when there is one, so that an outage or
        /// burst on the sources' path is recovered from repairs that crossed elsewhere.
        Diverse = "diverse",
    }
);

/// The path-choice policy; changeable on a running manager
/// ([`PathManager::set_policy`](super::PathManager::set_policy)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct PolicyConfig {
    /// The rule (failover).
    pub kind: PolicyKind,
    /// Failover preference order, most preferred first; paths not listed follow by id
    /// (empty: by id).
    pub order: Vec<PathId>,
    /// Failover: move back to a more preferred path once it is up again (true). Its return to
    /// `up` already needs `up-after` good intervals in a row.
    pub fail_back: bool,
    /// EXP3 exploration Γ in (0, 1] (0.1).
    pub gamma: f64,
    /// Unit of the EXP3 reward (normalized).
    pub reward: Exp3Reward,
    /// Largest EXP3 weight after normalisation; the smallest is 1 (10000, TPC's).
    pub max_weight: f64,
    /// How flows get their path (new-flow).
    pub assign: FlowAssign,
    /// What EXP3 learns from (chosen).
    pub feedback: Exp3Feedback,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            kind: PolicyKind::Failover,
            order: Vec::new(),
            fail_back: true,
            gamma: 0.1,
            reward: Exp3Reward::Normalized,
            max_weight: 10_000.0,
            assign: FlowAssign::NewFlow,
            feedback: Exp3Feedback::Chosen,
        }
    }
}

impl PolicyConfig {
    /// The policy `kind` with every other key at its default.
    pub fn of(kind: PolicyKind) -> Self {
        Self {
            kind,
            ..Self::default()
        }
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), PathConfigError> {
        if !(self.gamma > 0.0 && self.gamma <= 1.0) {
            return Err(PathConfigError::OutOfRange {
                key: "gamma",
                value: self.gamma,
                range: "0 < gamma <= 1",
            });
        }
        if !(self.max_weight >= 2.0 && self.max_weight <= 1e12) {
            return Err(PathConfigError::OutOfRange {
                key: "max-weight",
                value: self.max_weight,
                range: "2..=1e12",
            });
        }
        Ok(())
    }
}

/// Everything a [`PathManager`](super::PathManager) is configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct PathManagerConfig {
    /// The interval at which the far end reports on each path, in ms (50: the decoder's
    /// default feedback interval). Every count below is in these intervals.
    pub feedback_interval_ms: f64,
    /// A path turns `suspect` (one bad sample) when nothing it carried has been confirmed for
    /// its smoothed RTT plus this many intervals (1.25), and no report on it has arrived for
    /// this many intervals (so that a queue filling under load, whose reports keep coming
    /// late, is not an outage).
    /// The normal worst case is RTT + 1 interval, so 1.25 moves traffic quickly but takes one
    /// lost report for a bad sample.
    pub silence_intervals: f64,
    /// An interval whose loss ratio exceeds this is a bad sample (0.5).
    pub loss_threshold: f64,
    /// Bad samples in a row that take a `suspect` path `down` (3).
    pub down_after: u32,
    /// Good samples in a row that bring a `suspect` or `recovering` path back `up` (3): the
    /// hysteresis that keeps a flapping path from making traffic flap.
    pub up_after: u32,
    /// Probes on a path that carries no traffic (backup, down, idle), every this many ms
    /// (50; 0 = no probes).
    pub probe_interval_ms: f64,
    /// A flow unseen this long is forgotten (`new-flow` assignment), in ms (10000).
    pub flow_idle_ms: f64,
    /// Most flows remembered; beyond it the least recently seen is forgotten (65536).
    pub max_flows: usize,
    /// Path capacities in bit/s for `bond`, by path id (missing: the mean of the given ones;
    /// none given: all alike).
    pub capacity_bps: Vec<(PathId, u64)>,
    /// The policy.
    pub policy: PolicyConfig,
    /// Which path repairs take (same).
    pub repair_path: RepairPath,
    /// Added to the hold of a repair that takes a faster path than its sources
    /// ([`PathManager::repair_hold`](super::PathManager::repair_hold)), in ms (2): room for
    /// jitter.
    pub repair_hold_margin_ms: f64,
}

impl Default for PathManagerConfig {
    fn default() -> Self {
        Self {
            feedback_interval_ms: 50.0,
            silence_intervals: 1.25,
            loss_threshold: 0.5,
            down_after: 3,
            up_after: 3,
            probe_interval_ms: 50.0,
            flow_idle_ms: 10_000.0,
            max_flows: 65_536,
            capacity_bps: Vec::new(),
            policy: PolicyConfig::default(),
            repair_path: RepairPath::Same,
            repair_hold_margin_ms: 2.0,
        }
    }
}

fn range(
    key: &'static str,
    value: f64,
    ok: bool,
    range: &'static str,
) -> Result<(), PathConfigError> {
    if ok {
        Ok(())
    } else {
        Err(PathConfigError::OutOfRange { key, value, range })
    }
}

impl PathManagerConfig {
    /// Checks ranges (paths are checked when the manager is built).
    pub fn validate(&self) -> Result<(), PathConfigError> {
        let f = self.feedback_interval_ms;
        range(
            "feedback-interval-ms",
            f,
            (1.0..=10_000.0).contains(&f),
            "1..=10000",
        )?;
        let s = self.silence_intervals;
        range(
            "silence-intervals",
            s,
            (0.5..=100.0).contains(&s),
            "0.5..=100",
        )?;
        let l = self.loss_threshold;
        range("loss-threshold", l, l > 0.0 && l <= 1.0, "0 < x <= 1")?;
        let d = f64::from(self.down_after);
        range("down-after", d, (1.0..=1000.0).contains(&d), "1..=1000")?;
        let u = f64::from(self.up_after);
        range("up-after", u, (1.0..=1000.0).contains(&u), "1..=1000")?;
        let p = self.probe_interval_ms;
        range(
            "probe-interval-ms",
            p,
            p == 0.0 || (1.0..=60_000.0).contains(&p),
            "0 or 1..=60000",
        )?;
        let i = self.flow_idle_ms;
        range(
            "flow-idle-ms",
            i,
            (1.0..=3_600_000.0).contains(&i),
            "1..=3600000",
        )?;
        let m = self.max_flows as f64;
        range(
            "max-flows",
            m,
            (1.0..=16_777_216.0).contains(&m),
            "1..=16777216",
        )?;
        let h = self.repair_hold_margin_ms;
        range(
            "repair-hold-margin-ms",
            h,
            (0.0..=10_000.0).contains(&h),
            "0..=10000",
        )?;
        self.policy.validate()
    }

    /// The feedback interval.
    pub fn feedback_interval(&self) -> Duration {
        Duration::from_secs_f64(self.feedback_interval_ms / 1000.0)
    }

    /// The probe interval (`None`: no probes).
    pub fn probe_interval(&self) -> Option<Duration> {
        (self.probe_interval_ms > 0.0)
            .then(|| Duration::from_secs_f64(self.probe_interval_ms / 1000.0))
    }

    /// How long a flow is remembered.
    pub fn flow_idle(&self) -> Duration {
        Duration::from_secs_f64(self.flow_idle_ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip_and_unknown_keys() {
        let text = r#"
            feedback-interval-ms = 20
            repair-path = "diverse"
            [policy]
            kind = "lowest-delay"
            gamma = 0.01
            reward = "ms"
            assign = "hash"
        "#;
        let c: PathManagerConfig = toml::from_str(text).unwrap();
        assert_eq!(c.policy.kind, PolicyKind::LowestDelay);
        assert_eq!(c.policy.reward, Exp3Reward::Milliseconds);
        assert_eq!(c.policy.assign, FlowAssign::Hash);
        assert_eq!(c.repair_path, RepairPath::Diverse);
        assert_eq!(c.feedback_interval(), Duration::from_millis(20));
        c.validate().unwrap();
        let back: PathManagerConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(toml::from_str::<PathManagerConfig>("feedback-intervall-ms = 20").is_err());
        let e = toml::from_str::<PathManagerConfig>("[policy]\nkind = \"fastest\"").unwrap_err();
        assert!(e.to_string().contains("unknown policy `fastest`"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = PathManagerConfig::default();
        c.validate().unwrap();
        c.policy.gamma = 0.0;
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("gamma"), "{e}");
        let c = PathManagerConfig {
            loss_threshold: 1.5,
            ..PathManagerConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("loss-threshold"));
        assert_eq!("bond".parse::<PolicyKind>(), Ok(PolicyKind::Bond));
        assert!("diverse ".parse::<RepairPath>().is_ok());
    }
}
