//! Several paths between encoder and decoder: a sans-IO [`PathManager`] that measures each path
//! from feedback, keeps a state machine per path, and decides which path each flow, repair and
//! probe takes; and a [`PathMonitor`] for the receiving end that reports per path.
//!
//! # Call order (sender side)
//! 1. per packet: [`PathManager::path_for_flow`] (sources, by 5-tuple hash) or
//!    [`PathManager::path_for_repair`] (repairs); for a packet the caller routes itself,
//!    [`PathManager::on_sent`];
//! 2. per report from the far end: [`PathManager::handle_observation`] with a
//!    [`PathObservation`] (from a [`PathReport`], a probe reply, or hirt feedback that carries a
//!    path id);
//! 3. timer: [`PathManager::poll_timeout`] / [`PathManager::handle_timeout`];
//! 4. after any of them: [`PathManager::poll_probe`] until `None` (send each [`Probe`] on its
//!    path) and [`PathManager::poll_event`] until `None` (log or count each [`PathEvent`]).
//!
//! Receiving side: [`PathMonitor::on_packet`] per packet; [`PathMonitor::poll_report`] when
//! [`PathMonitor::poll_timeout`] is due; send each [`PathReport`] back.
//!
//! The manager holds no sockets and reads no clock: time is an injected `Instant`, randomness
//! (EXP3 and `random` draws) a caller seed. See `docs/paths.md`.

mod config;
mod exp3;
mod health;
mod manager;
mod monitor;

pub use config::{
    Exp3Feedback, Exp3Reward, FlowAssign, PathConfigError, PathManagerConfig, PolicyConfig,
    PolicyKind, RepairPath, MULTIPATH_REPAIR_LAG,
};
pub use exp3::Exp3;
pub use health::{Health, PathState, Sample};
pub use manager::{PathEvent, PathManager, PathSnapshot, Probe, SwitchReason};
pub use monitor::{PathMonitor, PathReport};

use std::time::{Duration, Instant};

use crate::PathId;

/// What the far end observed on one path, as the manager takes it. Independent of any wire
/// format: the simulator builds it from a [`PathReport`], a dataplane from its feedback (the
/// feedback's path id, timestamp echo and counts) or a probe reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathObservation {
    /// The path.
    pub path: PathId,
    /// When the echoed packet left this end (from its timestamp), if the report echoes one.
    pub echo_sent_at: Option<Instant>,
    /// How long the far end held it before replying (subtracted from the RTT sample).
    pub echo_held: Duration,
    /// Packets delivered in the interval the report covers.
    pub received: u32,
    /// Packets lost in that interval.
    pub lost: u32,
    /// Bytes delivered in that interval.
    pub bytes: u64,
    /// Length of that interval (`ZERO` for a probe reply: no rate sample).
    pub interval: Duration,
}

impl PathObservation {
    /// The observation a [`PathReport`] carries; `sent_at` maps its echoed stamp back to the
    /// send time.
    pub fn from_report(r: &PathReport, sent_at: Instant) -> Self {
        Self {
            path: r.path,
            echo_sent_at: Some(sent_at),
            echo_held: r.echo_held,
            received: r.received,
            lost: r.lost,
            bytes: r.bytes,
            interval: r.interval,
        }
    }
}
