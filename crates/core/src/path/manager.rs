//! The sender's path manager: measurements, health, policies.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::config::{
    Exp3Feedback, Exp3Reward, FlowAssign, PathConfigError, PathManagerConfig, PolicyConfig,
    PolicyKind, RepairPath,
};
use super::exp3::Exp3;
use super::health::{Health, PathState, Sample};
use super::PathObservation;
use crate::PathId;

/// Why the manager changed a path's state or the path traffic prefers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchReason {
    /// Nothing sent on the path was confirmed for its RTT plus `silence-intervals`.
    Silence,
    /// A report's loss ratio exceeded `loss-threshold`.
    Loss,
    /// Good reports (or probe replies) arrived again.
    Recovered,
    /// The preferred path changed because a path changed state.
    PathState,
    /// The policy's measurements (RTT, EXP3 weights, capacity) prefer another path.
    Measurement,
    /// The policy was changed.
    PolicyChange,
}

/// Something operators want to see: logs name every switch and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathEvent {
    /// A path changed state.
    State {
        /// The path.
        path: PathId,
        /// Its previous state.
        from: PathState,
        /// Its new state.
        to: PathState,
        /// Why.
        reason: SwitchReason,
        /// When.
        at: Instant,
    },
    /// The path that carries most new traffic changed (failover: the active path).
    Switch {
        /// The previous one (`None` at start).
        from: Option<PathId>,
        /// The new one.
        to: PathId,
        /// Why.
        reason: SwitchReason,
        /// When.
        at: Instant,
    },
}

/// A probe to send on `path` (a small packet the far end counts and reports like any other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The path.
    pub path: PathId,
}

/// A path's measurements and counters (metrics, `hirt status`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathSnapshot {
    /// The path id.
    pub path: PathId,
    /// Its state.
    pub state: PathState,
    /// Smoothed RTT in ms (0 before the first sample).
    pub srtt_ms: f64,
    /// Smallest RTT seen, ms.
    pub min_rtt_ms: f64,
    /// Smoothed loss ratio of the reports.
    pub loss: f64,
    /// Smoothed delivery rate, bit/s.
    pub delivery_bps: f64,
    /// Sources sent on it.
    pub sources: u64,
    /// Repairs sent on it.
    pub repairs: u64,
    /// Probes sent on it.
    pub probes: u64,
    /// Bytes sent on it.
    pub bytes: u64,
    /// Its share of the sources sent so far.
    pub share: f64,
    /// Its EXP3 weight share (0 when the policy is not `lowest-delay`).
    pub exp3_weight_share: f64,
}

/// One pending EXP3 step: the arm drawn at `at` with probability `p` among `k` usable arms,
/// rewarded at the first RTT sample of a packet sent on that arm at or after `at`.
#[derive(Clone, Copy, Debug)]
struct Step {
    at: Instant,
    p: f64,
    k: usize,
}

/// Most EXP3 steps waiting for their reward per path; older ones are dropped unrewarded.
const MAX_PENDING_STEPS: usize = 4096;

/// Most coarse send times remembered per path for the silence rule.
const MAX_UNCONFIRMED: usize = 1024;

#[derive(Clone, Debug)]
struct PathEntry {
    id: PathId,
    health: Health,
    srtt: Option<Duration>,
    /// The newest RTT sample (with `min_rtt`, whether a queue stands on the path).
    latest_rtt: Option<Duration>,
    /// When the far end's latest report on the path arrived: a path whose reports keep
    /// coming, each late because a queue fills, is not silent.
    last_heard: Option<Instant>,
    min_rtt: Option<Duration>,
    loss: f64,
    delivery_bps: f64,
    capacity_bps: Option<u64>,
    /// Send time of the newest packet the far end confirmed.
    confirmed: Option<Instant>,
    /// Send times after `confirmed`, at most one per eighth of an interval (the oldest is what
    /// the silence rule measures from).
    unconfirmed: VecDeque<Instant>,
    /// Bad samples the current silence already produced.
    silence_bads: u32,
    last_sent: Option<Instant>,
    last_probe: Option<Instant>,
    sources: u64,
    repairs: u64,
    probes: u64,
    bytes: u64,
    steps: VecDeque<Step>,
    /// `bond`: the path's credit in the smooth weighted round robin that deals new flows.
    bond_credit: f64,
}

impl PathEntry {
    fn new(id: PathId, cfg: &PathManagerConfig) -> Self {
        Self {
            id,
            health: Health::new(cfg.up_after, cfg.down_after),
            srtt: None,
            latest_rtt: None,
            last_heard: None,
            min_rtt: None,
            loss: 0.0,
            delivery_bps: 0.0,
            capacity_bps: cfg
                .capacity_bps
                .iter()
                .find(|(p, _)| *p == id)
                .map(|(_, c)| *c),
            confirmed: None,
            unconfirmed: VecDeque::new(),
            silence_bads: 0,
            last_sent: None,
            last_probe: None,
            sources: 0,
            repairs: 0,
            probes: 0,
            bytes: 0,
            steps: VecDeque::new(),
            bond_credit: 0.0,
        }
    }

    fn state(&self) -> PathState {
        self.health.state()
    }

    fn srtt_or(&self, fallback: Duration) -> Duration {
        self.srtt.unwrap_or(fallback)
    }

    /// Whether a queue stands on the path: the newest RTT exceeds the smallest by more than
    /// half the smallest and a quarter of `interval`.
    fn queueing(&self, interval: Duration) -> bool {
        match (self.latest_rtt, self.min_rtt) {
            (Some(rtt), Some(min)) => rtt > min + (min / 2).max(interval / 4),
            _ => false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    path: usize,
    last_seen: Instant,
    /// `bond`: dealt while a path was out of use; dealt again once every path is back up,
    /// so that bulk flows which all began during a path's short `suspect` spell do not stay
    /// on one path for their whole life.
    provisional: bool,
}

/// The sender's view of every path and the policy that picks among them. See the module docs
/// for the call order.
#[derive(Debug)]
pub struct PathManager {
    cfg: PathManagerConfig,
    timers: Timers,
    paths: Vec<PathEntry>,
    exp3: Exp3,
    rng: ChaCha8Rng,
    flows: HashMap<u64, Flow>,
    /// Probabilities of the current policy over path indices (probabilistic policies).
    probs: Vec<f64>,
    /// Arm index of the path the policy prefers (failover's active path, greedy's best).
    preferred: Option<usize>,
    probes: VecDeque<Probe>,
    events: VecDeque<PathEvent>,
    switches: u64,
    next_step: Option<Instant>,
    dirty: bool,
    /// The first instant the manager was given (paths that never carried anything are probed
    /// from then on).
    epoch: Option<Instant>,
}

/// The configuration's durations, converted once: `poll_timeout` runs once per batch of packets
/// and needs them for every path.
#[derive(Clone, Copy, Debug)]
struct Timers {
    interval: Duration,
    /// `silence-intervals` feedback intervals.
    grace: Duration,
    probe_every: Option<Duration>,
}

impl Timers {
    fn of(cfg: &PathManagerConfig) -> Self {
        let interval = cfg.feedback_interval();
        Self {
            interval,
            grace: interval.mul_f64(cfg.silence_intervals),
            probe_every: cfg.probe_interval(),
        }
    }
}

impl PathManager {
    /// A manager over `paths` (ids in the caller's order; every path starts `up`), with a seed
    /// for its random draws.
    pub fn new(
        cfg: PathManagerConfig,
        paths: &[PathId],
        seed: u64,
    ) -> Result<Self, PathConfigError> {
        cfg.validate()?;
        if paths.is_empty() || paths.len() > 255 {
            return Err(PathConfigError::PathCount(paths.len()));
        }
        for (i, p) in paths.iter().enumerate() {
            if paths[..i].contains(p) {
                return Err(PathConfigError::DuplicatePath(*p));
            }
        }
        Self::check_policy_paths(&cfg.policy, paths)?;
        for (p, _) in &cfg.capacity_bps {
            if !paths.contains(p) {
                return Err(PathConfigError::UnknownPath {
                    key: "capacity-bps",
                    path: *p,
                });
            }
        }
        let entries = paths.iter().map(|&p| PathEntry::new(p, &cfg)).collect();
        let exp3 = Exp3::new(paths.len(), cfg.policy.gamma, cfg.policy.max_weight);
        let mut m = Self {
            timers: Timers::of(&cfg),
            cfg,
            paths: entries,
            exp3,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x9A7B_5E1E_C7ED_0001),
            flows: HashMap::new(),
            probs: Vec::new(),
            preferred: None,
            probes: VecDeque::new(),
            events: VecDeque::new(),
            switches: 0,
            next_step: None,
            dirty: true,
            epoch: None,
        };
        m.refresh(None, SwitchReason::PathState);
        Ok(m)
    }

    fn check_policy_paths(p: &PolicyConfig, paths: &[PathId]) -> Result<(), PathConfigError> {
        p.validate()?;
        for o in &p.order {
            if !paths.contains(o) {
                return Err(PathConfigError::UnknownPath {
                    key: "order",
                    path: *o,
                });
            }
        }
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> &PathManagerConfig {
        &self.cfg
    }

    /// Changes the policy on a running manager (control socket). Flows keep their paths until
    /// the new policy reassigns them: `new-flow` flows are forgotten so that each draws again
    /// under the new rule; EXP3 weights are kept.
    pub fn set_policy(
        &mut self,
        policy: PolicyConfig,
        now: Instant,
    ) -> Result<(), PathConfigError> {
        let ids: Vec<PathId> = self.paths.iter().map(|p| p.id).collect();
        Self::check_policy_paths(&policy, &ids)?;
        self.exp3.set_params(policy.gamma, policy.max_weight);
        self.cfg.policy = policy;
        self.flows.clear();
        self.next_step = None;
        self.dirty = true;
        self.tick(now);
        self.refresh(Some(now), SwitchReason::PolicyChange);
        Ok(())
    }

    /// Changes which path repairs take.
    pub fn set_repair_path(&mut self, repair_path: RepairPath) {
        self.cfg.repair_path = repair_path;
    }

    /// Path ids, in the order given to [`PathManager::new`].
    pub fn path_ids(&self) -> impl Iterator<Item = PathId> + '_ {
        self.paths.iter().map(|p| p.id)
    }

    fn index(&self, path: PathId) -> Option<usize> {
        self.paths.iter().position(|p| p.id == path)
    }

    /// The state of `path`.
    pub fn state(&self, path: PathId) -> Option<PathState> {
        self.index(path).map(|i| self.paths[i].state())
    }

    /// Smoothed RTT of `path`.
    pub fn srtt(&self, path: PathId) -> Option<Duration> {
        self.index(path).and_then(|i| self.paths[i].srtt)
    }

    /// The path the policy prefers now: failover's active path, greedy's lowest-delay one, or
    /// the most probable path of the probabilistic policies.
    pub fn preferred(&self) -> Option<PathId> {
        self.preferred.map(|i| self.paths[i].id)
    }

    /// Switches of the preferred path so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// EXP3 weight share of `path` among the usable paths (what TPC's convergence criterion
    /// measures: 90% of the weight sum on the best path).
    pub fn exp3_weight_share(&self, path: PathId) -> f64 {
        let usable = self.usable_mask();
        self.index(path)
            .map(|i| self.exp3.weight_share(i, |j| usable[j]))
            .unwrap_or(0.0)
    }

    /// EXP3 weight share of `path` among all paths, usable or not (TPC's convergence
    /// criterion on the weights alone, without the health state machine's help).
    pub fn exp3_raw_weight_share(&self, path: PathId) -> f64 {
        self.index(path)
            .map(|i| self.exp3.weight_share(i, |_| true))
            .unwrap_or(0.0)
    }

    /// The probability that the policy puts a new flow on `path` now (1 or 0 for failover and
    /// greedy).
    pub fn probability(&self, path: PathId) -> f64 {
        self.index(path)
            .and_then(|i| self.probs.get(i).copied())
            .unwrap_or(0.0)
    }

    /// Every path's measurements and counters.
    pub fn snapshot(&self) -> Vec<PathSnapshot> {
        let total: u64 = self.paths.iter().map(|p| p.sources).sum();
        let lowest = self.cfg.policy.kind == PolicyKind::LowestDelay;
        self.paths
            .iter()
            .map(|p| PathSnapshot {
                path: p.id,
                state: p.state(),
                srtt_ms: p.srtt.map_or(0.0, |d| d.as_secs_f64() * 1e3),
                min_rtt_ms: p.min_rtt.map_or(0.0, |d| d.as_secs_f64() * 1e3),
                loss: p.loss,
                delivery_bps: p.delivery_bps,
                sources: p.sources,
                repairs: p.repairs,
                probes: p.probes,
                bytes: p.bytes,
                share: if total > 0 {
                    p.sources as f64 / total as f64
                } else {
                    0.0
                },
                exp3_weight_share: if lowest {
                    self.exp3_weight_share(p.id)
                } else {
                    0.0
                },
            })
            .collect()
    }

    /// Paths policies may use: `up` ones; if none, `suspect`/`recovering` ones, those that
    /// answer before those gone silent; if none, all.
    fn usable_mask(&self) -> Vec<bool> {
        let up: Vec<bool> = self
            .paths
            .iter()
            .map(|p| p.state() == PathState::Up)
            .collect();
        if up.iter().any(|&u| u) {
            return up;
        }
        let fallback: Vec<bool> = self.paths.iter().map(|p| p.state().is_fallback()).collect();
        if fallback.iter().any(|&u| u) {
            // The active path's silence must not keep traffic on it while a backup, suspect
            // only for a reply it lost a moment ago, answers again.
            let answering: Vec<bool> = self
                .paths
                .iter()
                .zip(&fallback)
                .map(|(p, &f)| f && p.silence_bads == 0)
                .collect();
            if answering.iter().any(|&a| a) {
                return answering;
            }
            return fallback;
        }
        vec![true; self.paths.len()]
    }

    fn interval(&self) -> Duration {
        self.timers.interval
    }

    /// RTT assumed for a path before its first sample.
    fn initial_rtt(&self) -> Duration {
        2 * self.interval()
    }

    /// Failover order: configured paths first, then the rest by id.
    fn failover_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = self
            .cfg
            .policy
            .order
            .iter()
            .filter_map(|p| self.index(*p))
            .collect();
        let mut rest: Vec<usize> = (0..self.paths.len())
            .filter(|i| !order.contains(i))
            .collect();
        rest.sort_by_key(|&i| self.paths[i].id);
        order.extend(rest);
        order
    }

    /// Recomputes the preferred path and the probabilities after a change.
    fn refresh(&mut self, now: Option<Instant>, reason: SwitchReason) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let usable = self.usable_mask();
        let n = self.paths.len();
        let fallback_rtt = self.initial_rtt();
        let mut probs = vec![0.0; n];
        let preferred = match self.cfg.policy.kind {
            PolicyKind::Failover => {
                let order = self.failover_order();
                let current = self.preferred.filter(|&i| usable[i]);
                let first = order.iter().copied().find(|&i| usable[i]);
                let pick = match (current, first) {
                    (Some(c), Some(f)) if !self.cfg.policy.fail_back => {
                        // Stay on a usable active path when fail-back is off.
                        let _ = f;
                        Some(c)
                    }
                    (_, f) => f,
                };
                if let Some(i) = pick {
                    probs[i] = 1.0;
                }
                pick
            }
            PolicyKind::Greedy => {
                let best = (0..n)
                    .filter(|&i| usable[i])
                    .min_by_key(|&i| (self.paths[i].srtt_or(fallback_rtt), self.paths[i].id));
                if let Some(i) = best {
                    probs[i] = 1.0;
                }
                best
            }
            PolicyKind::Random => {
                let k = usable.iter().filter(|&&u| u).count().max(1);
                for i in 0..n {
                    probs[i] = if usable[i] { 1.0 / k as f64 } else { 0.0 };
                }
                (0..n).find(|&i| usable[i])
            }
            PolicyKind::LowestDelay => {
                self.exp3.probabilities(|i| usable[i], &mut probs);
                sticky_argmax(&probs, self.preferred)
            }
            PolicyKind::Bond => {
                let min_rtt = (0..n)
                    .filter(|&i| usable[i])
                    .map(|i| self.paths[i].srtt_or(fallback_rtt))
                    .min()
                    .unwrap_or(fallback_rtt)
                    .as_secs_f64()
                    .max(1e-6);
                // Capacity comes from `capacity-bps`; a path without one counts as the mean of
                // the configured ones (all alike when none is). A measured delivery rate is no
                // capacity estimate: it is what the policy chose to send, so a path given
                // little would keep getting little.
                let configured: Vec<f64> = (0..n)
                    .filter_map(|i| self.paths[i].capacity_bps.map(|c| c as f64))
                    .collect();
                let default = if configured.is_empty() {
                    1.0
                } else {
                    configured.iter().sum::<f64>() / configured.len() as f64
                };
                for i in 0..n {
                    if usable[i] {
                        let cap = match self.paths[i].capacity_bps {
                            Some(c) => c as f64,
                            None => default,
                        };
                        let rtt = self.paths[i].srtt_or(fallback_rtt).as_secs_f64();
                        probs[i] = cap * (min_rtt / rtt.max(1e-6));
                    }
                }
                let sum: f64 = probs.iter().sum();
                if sum > 0.0 {
                    probs.iter_mut().for_each(|p| *p /= sum);
                }
                sticky_argmax(&probs, self.preferred)
            }
        };
        self.probs = probs;
        if preferred != self.preferred {
            if let (Some(to), Some(at)) = (preferred, now) {
                self.switches += 1;
                self.events.push_back(PathEvent::Switch {
                    from: self.preferred.map(|i| self.paths[i].id),
                    to: self.paths[to].id,
                    reason,
                    at,
                });
            }
            self.preferred = preferred;
        }
    }

    /// Marks time passing: the first instant seen, and the EXP3 step clock of `hash`
    /// assignment.
    fn tick(&mut self, now: Instant) {
        self.epoch.get_or_insert(now);
        if self.cfg.policy.kind == PolicyKind::LowestDelay
            && self.cfg.policy.assign == FlowAssign::Hash
            && self.next_step.is_none()
        {
            self.next_step = Some(now);
        }
    }

    /// Draws a path index from the current probabilities (or takes the preferred one).
    fn draw(&mut self, u: Option<f64>, now: Instant) -> usize {
        let kind = self.cfg.policy.kind;
        let pick = match kind {
            PolicyKind::Failover | PolicyKind::Greedy => self.preferred,
            PolicyKind::Bond if u.is_none() => self.deal(),
            _ => {
                let u = u.unwrap_or_else(|| self.rng.gen::<f64>());
                Exp3::pick(&self.probs, u)
            }
        };
        let i = pick.unwrap_or(0);
        if kind == PolicyKind::LowestDelay && u.is_none() {
            self.push_step(i, now);
        }
        i
    }

    /// `bond`, one path per new flow: a smooth weighted round robin over the path
    /// probabilities (each path earns its probability per flow, the richest takes the flow
    /// and pays one), so even a handful of flows splits in proportion, where independent
    /// draws would often put most of a few bulk flows on one path.
    fn deal(&mut self) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, &p) in self.probs.iter().enumerate() {
            let Some(path) = self.paths.get_mut(i) else {
                break;
            };
            if p > 0.0 {
                path.bond_credit += p;
                if best.is_none_or(|(_, c)| path.bond_credit > c) {
                    best = Some((i, path.bond_credit));
                }
            } else {
                path.bond_credit = 0.0;
            }
        }
        let best = best.map(|(i, _)| i);
        let total: f64 = self.probs.iter().filter(|&&p| p > 0.0).sum();
        if let Some(b) = best {
            self.paths[b].bond_credit -= total;
        }
        best
    }

    fn push_step(&mut self, i: usize, now: Instant) {
        let k = self.probs.iter().filter(|&&p| p > 0.0).count();
        let steps = &mut self.paths[i].steps;
        if steps.len() >= MAX_PENDING_STEPS {
            steps.pop_front();
        }
        steps.push_back(Step {
            at: now,
            p: self.probs[i],
            k,
        });
    }

    fn record_send(&mut self, i: usize, len: usize, now: Instant) {
        let grain = self.interval() / 8;
        let p = &mut self.paths[i];
        p.bytes += len as u64;
        p.last_sent = Some(now);
        let push = match p.unconfirmed.back() {
            Some(&last) => now >= last + grain,
            None => true,
        };
        if push && p.unconfirmed.len() < MAX_UNCONFIRMED {
            p.unconfirmed.push_back(now);
        }
    }

    /// The path for the next source packet of the flow with 5-tuple hash `flow_hash` (`len`
    /// bytes); counts the send on it.
    pub fn path_for_flow(&mut self, flow_hash: u64, len: usize, now: Instant) -> PathId {
        self.tick(now);
        self.refresh(Some(now), SwitchReason::Measurement);
        let i = match self.cfg.policy.kind {
            PolicyKind::Failover | PolicyKind::Greedy => self.draw(None, now),
            _ => match self.cfg.policy.assign {
                FlowAssign::Hash => self.draw(Some(unit(flow_hash)), now),
                FlowAssign::NewFlow => self.flow_path(flow_hash, now),
            },
        };
        self.paths[i].sources += 1;
        self.record_send(i, len, now);
        self.paths[i].id
    }

    /// `new-flow`: the flow's remembered path while it is usable and the flow is active, else a
    /// fresh draw.
    fn flow_path(&mut self, flow_hash: u64, now: Instant) -> usize {
        let idle = self.cfg.flow_idle();
        if let Some(f) = self.flows.get_mut(&flow_hash) {
            let fresh = now.saturating_duration_since(f.last_seen) <= idle;
            if fresh && self.probs.get(f.path).is_some_and(|&p| p > 0.0) {
                f.last_seen = now;
                return f.path;
            }
        }
        if self.flows.len() >= self.cfg.max_flows && !self.flows.contains_key(&flow_hash) {
            self.flows
                .retain(|_, f| now.saturating_duration_since(f.last_seen) <= idle);
            if self.flows.len() >= self.cfg.max_flows {
                // Everything is active: forgetting all makes each flow draw once more, which
                // costs at most one reordering per flow; a bounded table matters more.
                self.flows.clear();
            }
        }
        let path = self.draw(None, now);
        let provisional = self.cfg.policy.kind == PolicyKind::Bond
            && self.paths.iter().any(|p| p.state() != PathState::Up);
        self.flows.insert(
            flow_hash,
            Flow {
                path,
                last_seen: now,
                provisional,
            },
        );
        path
    }

    /// The path for a repair protecting sources sent on `source_path` (`len` bytes); counts
    /// the send on it. `diverse`: the lowest-delay usable path other than `source_path` when
    /// there is one.
    pub fn path_for_repair(&mut self, source_path: PathId, len: usize, now: Instant) -> PathId {
        self.refresh(Some(now), SwitchReason::Measurement);
        let src = self.index(source_path);
        let i = match (self.cfg.repair_path, src) {
            (RepairPath::Same, Some(s)) => s,
            // Until both ends of the choice have an RTT, a repair's hold is unknown and it
            // could outrun its sources: it goes with them.
            (RepairPath::Diverse, Some(s)) if self.paths[s].srtt.is_none() => s,
            (RepairPath::Diverse, Some(s)) => {
                let usable = self.usable_mask();
                let fallback = self.initial_rtt();
                (0..self.paths.len())
                    .filter(|&i| i != s && usable[i] && self.paths[i].srtt.is_some())
                    .min_by_key(|&i| (self.paths[i].srtt_or(fallback), self.paths[i].id))
                    .unwrap_or(s)
            }
            (_, None) => self.preferred.unwrap_or(0),
        };
        self.paths[i].repairs += 1;
        self.record_send(i, len, now);
        self.paths[i].id
    }

    /// How long to hold a repair for sources on `source_path` before sending it on
    /// `repair_path`: half the SRTT difference when the repair path is the faster one (plus
    /// `repair-hold-margin-ms`), else zero. A repair that outruns the sources it covers makes
    /// the decoder solve for sources still in flight and count them lost; held this long, it
    /// arrives with them, and still crosses an outage of the source path.
    pub fn repair_hold(&self, source_path: PathId, repair_path: PathId) -> Duration {
        let (Some(s), Some(r)) = (self.index(source_path), self.index(repair_path)) else {
            return Duration::ZERO;
        };
        if s == r {
            return Duration::ZERO;
        }
        let fallback = self.initial_rtt();
        let diff = self.paths[s]
            .srtt_or(fallback)
            .saturating_sub(self.paths[r].srtt_or(fallback));
        if diff.is_zero() {
            Duration::ZERO
        } else {
            diff / 2 + Duration::from_secs_f64(self.cfg.repair_hold_margin_ms / 1000.0)
        }
    }

    /// A packet of `len` bytes the caller put on `path` itself (e.g. feedback riding the path).
    pub fn on_sent(&mut self, path: PathId, len: usize, now: Instant) {
        if let Some(i) = self.index(path) {
            self.record_send(i, len, now);
        }
    }

    /// Takes what the far end observed on a path: an RTT sample from the echo, loss and
    /// delivery counts. Unknown paths are ignored.
    pub fn handle_observation(&mut self, obs: &PathObservation, now: Instant) {
        self.tick(now);
        let Some(i) = self.index(obs.path) else {
            return;
        };
        let p = &mut self.paths[i];
        let mut progress = false;
        if let Some(sent) = obs.echo_sent_at {
            p.last_heard = Some(now);
            if p.confirmed.is_none_or(|c| sent > c) {
                progress = true;
                p.confirmed = Some(sent);
                while p.unconfirmed.front().is_some_and(|&t| t <= sent) {
                    p.unconfirmed.pop_front();
                }
                p.silence_bads = 0;
            }
            if let Some(rtt) = now
                .checked_duration_since(sent)
                .and_then(|d| d.checked_sub(obs.echo_held))
            {
                p.srtt = Some(match p.srtt {
                    None => rtt,
                    Some(s) => (s * 7 + rtt) / 8,
                });
                p.latest_rtt = Some(rtt);
                p.min_rtt = Some(p.min_rtt.map_or(rtt, |m| m.min(rtt)));
            }
        }
        let total = obs.received + obs.lost;
        let loss = if total > 0 {
            f64::from(obs.lost) / f64::from(total)
        } else {
            0.0
        };
        if total > 0 {
            p.loss = 0.875 * p.loss + 0.125 * loss;
        }
        if !obs.interval.is_zero() {
            let rate = obs.bytes as f64 * 8.0 / obs.interval.as_secs_f64();
            p.delivery_bps = if p.delivery_bps == 0.0 {
                rate
            } else {
                0.875 * p.delivery_bps + 0.125 * rate
            };
        }
        // Heavy loss behind a standing queue is congestion (a TCP slow start overshooting a
        // deep buffer drops half of a round trip's packets), which moving the traffic would
        // only carry to the other path; loss without a queue is the path failing.
        let queueing = self.paths[i].queueing(self.interval());
        let sample = if loss > self.cfg.loss_threshold && !queueing {
            Some((Sample::Bad, SwitchReason::Loss))
        } else if progress || obs.received > 0 {
            Some((Sample::Good, SwitchReason::Recovered))
        } else {
            None
        };
        if let Some((s, reason)) = sample {
            self.apply_sample(i, s, reason, now);
        }
        if obs.echo_sent_at.is_some() {
            self.reward(i);
        }
        if self.cfg.policy.kind != PolicyKind::Failover {
            // RTT and capacity feed greedy, EXP3 and bond.
            self.dirty = true;
        }
        self.refresh(Some(now), SwitchReason::Measurement);
    }

    fn apply_sample(&mut self, i: usize, s: Sample, reason: SwitchReason, now: Instant) {
        let from = self.paths[i].state();
        if let Some(to) = self.paths[i].health.on_sample(s) {
            self.events.push_back(PathEvent::State {
                path: self.paths[i].id,
                from,
                to,
                reason,
                at: now,
            });
            self.dirty = true;
            self.refresh(Some(now), SwitchReason::PathState);
            let all_up = self.paths.iter().all(|p| p.state() == PathState::Up);
            if to == PathState::Up && all_up && self.cfg.policy.kind == PolicyKind::Bond {
                self.flows.retain(|_, f| !f.provisional);
            }
        }
    }

    /// Credits pending EXP3 steps on path `i` whose decision precedes the newest confirmed
    /// packet: `u = SRTT_max - SRTT_i`, the maximum over every measured path.
    fn reward(&mut self, i: usize) {
        if self.cfg.policy.kind != PolicyKind::LowestDelay {
            self.paths[i].steps.clear();
            return;
        }
        let Some(confirmed) = self.paths[i].confirmed else {
            return;
        };
        let Some(srtt) = self.paths[i].srtt else {
            return;
        };
        let usable = self.usable_mask();
        if (0..self.paths.len()).any(|j| usable[j] && self.paths[j].srtt.is_none()) {
            // SRTT_max is not known yet: the steps wait rather than earn a zero reward.
            return;
        }
        // Over every measured path, usable or not: while a slow path is suspect, the fast
        // one still earns its lead over it.
        let max = self
            .paths
            .iter()
            .filter_map(|p| p.srtt)
            .max()
            .unwrap_or(srtt);
        let diff = max.saturating_sub(srtt).as_secs_f64();
        let u = match self.cfg.policy.reward {
            Exp3Reward::Normalized => {
                if max.is_zero() {
                    0.0
                } else {
                    diff / max.as_secs_f64()
                }
            }
            Exp3Reward::Milliseconds => diff * 1e3,
        };
        if self.cfg.policy.feedback == Exp3Feedback::EveryPath {
            // Probes measure every path: each sample rewards its own path, no draw needed.
            self.paths[i].steps.clear();
            let k = usable.iter().filter(|&&u| u).count().max(1);
            self.exp3.reward(i, 1.0, u, k);
            self.dirty = true;
            return;
        }
        while self.paths[i]
            .steps
            .front()
            .is_some_and(|s| s.at <= confirmed)
        {
            let Some(step) = self.paths[i].steps.pop_front() else {
                break;
            };
            self.exp3.reward(i, step.p, u, step.k);
            self.dirty = true;
        }
    }

    /// When [`PathManager::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = self.next_step;
        for (i, _) in self.paths.iter().enumerate() {
            for c in [self.silence_deadline(i), self.probe_due(i)]
                .into_iter()
                .flatten()
            {
                t = Some(t.map_or(c, |x| x.min(c)));
            }
        }
        t
    }

    /// The instant at which path `i`'s silence yields its next bad sample.
    fn silence_deadline(&self, i: usize) -> Option<Instant> {
        let p = &self.paths[i];
        let oldest = *p.unconfirmed.front()?;
        let interval = self.interval();
        let rtt = p.srtt_or(self.initial_rtt());
        let grace = self.timers.grace;
        let backoff = interval * p.silence_bads;
        // Both must hold: the oldest unconfirmed send is overdue, and the reports have stopped
        // for a grace. On an outage the second comes first (the last reports were already on
        // their way), so it costs no detection time; under a filling queue the reports keep
        // coming, late, and the path stays up.
        let overdue = oldest + rtt + grace + backoff;
        Some(match p.last_heard {
            Some(heard) => overdue.max(heard + grace + backoff),
            None => overdue,
        })
    }

    /// When path `i` needs its next probe: it carried nothing for a probe interval.
    fn probe_due(&self, i: usize) -> Option<Instant> {
        let every = self.timers.probe_every?;
        let p = &self.paths[i];
        let last = match (p.last_sent, p.last_probe) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).or(self.epoch)?,
        };
        Some(last + every)
    }

    /// Starts the manager's clock at `now`: idle paths are probed from a probe interval later
    /// on, before anything was sent. Without it the clock starts with the first send, so a
    /// tunnel that has not carried traffic yet knows nothing of its paths.
    pub fn start(&mut self, now: Instant) {
        self.tick(now);
    }

    /// Runs what fell due: silence samples, probes, EXP3 steps (`hash` assignment).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        for i in 0..self.paths.len() {
            while self.silence_deadline(i).is_some_and(|d| d <= now) {
                self.paths[i].silence_bads += 1;
                self.apply_sample(i, Sample::Bad, SwitchReason::Silence, now);
            }
            if self.probe_due(i).is_some_and(|d| d <= now) {
                self.paths[i].last_probe = Some(now);
                self.paths[i].probes += 1;
                let id = self.paths[i].id;
                self.record_send(i, 0, now);
                self.probes.push_back(Probe { path: id });
            }
        }
        if let Some(t) = self.next_step {
            if t <= now {
                if self.cfg.policy.kind == PolicyKind::LowestDelay
                    && self.cfg.policy.assign == FlowAssign::Hash
                {
                    self.refresh(Some(now), SwitchReason::Measurement);
                    let u = self.rng.gen::<f64>();
                    if let Some(i) = Exp3::pick(&self.probs, u) {
                        self.push_step(i, now);
                    }
                    self.next_step = Some(now + self.interval());
                } else {
                    self.next_step = None;
                }
            }
        }
        self.refresh(Some(now), SwitchReason::Measurement);
    }

    /// The next probe to send.
    pub fn poll_probe(&mut self) -> Option<Probe> {
        self.probes.pop_front()
    }

    /// The next event to log.
    pub fn poll_event(&mut self) -> Option<PathEvent> {
        self.events.pop_front()
    }
}

/// The most probable path, but the current one while its probability is within
/// [`PREFERRED_MARGIN`] of the largest: two paths of about equal share (bonding two equal links)
/// do not swap the preferred label, and log a switch, at every RTT sample.
fn sticky_argmax(probs: &[f64], current: Option<usize>) -> Option<usize> {
    let best = argmax(probs)?;
    match current {
        Some(c)
            if probs
                .get(c)
                .is_some_and(|&p| p > 0.0 && p * PREFERRED_MARGIN >= probs[best]) =>
        {
            Some(c)
        }
        _ => Some(best),
    }
}

/// How much more probable another path must be to become the preferred one (`lowest-delay`,
/// `bond`).
const PREFERRED_MARGIN: f64 = 1.25;

fn argmax(p: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in p.iter().enumerate() {
        if x > 0.0 && best.is_none_or(|b| x > p[b]) {
            best = Some(i);
        }
    }
    best
}

/// A flow hash as a number in [0, 1) (mixed first, so that nearby hashes spread).
fn unit(h: u64) -> f64 {
    let mut x = h ^ (h >> 33);
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Two paths with one-way delay `d(path, t_ms)` in both directions; `alive(path, t_ms)` says
    /// whether a packet (or report) sent at `t_ms` on the path gets through. One source per ms,
    /// a new flow every 10 ms; the far end reports every 20 ms per path. Returns the manager and each
    /// preferred-path switch (time, new path).
    fn drive(
        m: &mut PathManager,
        from_ms: u64,
        until_ms: u64,
        d: &dyn Fn(usize, u64) -> u64,
        alive: &dyn Fn(usize, u64) -> bool,
    ) -> Vec<(u64, PathId)> {
        drive_reporting(m, from_ms, until_ms, d, alive, 20)
    }

    /// [`drive`] with the far end reporting every `report_ms` per path.
    fn drive_reporting(
        m: &mut PathManager,
        from_ms: u64,
        until_ms: u64,
        d: &dyn Fn(usize, u64) -> u64,
        alive: &dyn Fn(usize, u64) -> bool,
        report_ms: u64,
    ) -> Vec<(u64, PathId)> {
        let t0 = crate::test_util::t0();
        let mut inflight: Vec<VecDeque<(u64, u64)>> = vec![VecDeque::new(), VecDeque::new()];
        let mut newest: Vec<Option<(u64, u64)>> = vec![None, None];
        let mut count = [0u32; 2];
        let mut reports: Vec<(u64, PathObservation)> = Vec::new();
        let mut switches = Vec::new();
        for t in from_ms..until_ms {
            let now = t0 + MS * t as u32;
            let mut sent: Vec<PathId> = vec![m.path_for_flow(t / 10, 100, now)];
            m.handle_timeout(now);
            while let Some(pr) = m.poll_probe() {
                sent.push(pr.path);
            }
            for p in sent {
                let i = p as usize;
                if alive(i, t) {
                    inflight[i].push_back((t, t + d(i, t)));
                }
            }
            for i in 0..2 {
                while inflight[i].front().is_some_and(|&(_, a)| a <= t) {
                    newest[i] = inflight[i].pop_front();
                    count[i] += 1;
                }
                if t % report_ms == 0 && count[i] > 0 {
                    if let (Some((s, a)), true) = (newest[i], alive(i, t)) {
                        let obs = PathObservation {
                            path: i as PathId,
                            echo_sent_at: Some(t0 + MS * s as u32),
                            echo_held: MS * (t - a) as u32,
                            received: count[i],
                            lost: 0,
                            bytes: 100 * u64::from(count[i]),
                            interval: MS * report_ms as u32,
                        };
                        reports.push((t + d(i, t), obs));
                    }
                    count[i] = 0;
                }
            }
            reports.sort_by_key(|r| r.0);
            while reports.first().is_some_and(|r| r.0 <= t) {
                let (_, obs) = reports.remove(0);
                m.handle_observation(&obs, now);
            }
            while let Some(e) = m.poll_event() {
                if let PathEvent::Switch { to, .. } = e {
                    switches.push((t, to));
                }
            }
        }
        switches
    }

    fn cfg(kind: PolicyKind) -> PathManagerConfig {
        PathManagerConfig {
            feedback_interval_ms: 20.0,
            probe_interval_ms: 20.0,
            policy: PolicyConfig::of(kind),
            ..PathManagerConfig::default()
        }
    }

    #[test]
    fn a_started_manager_probes_every_path_before_any_traffic() {
        let t0 = crate::test_util::t0();
        let every = cfg(PolicyKind::Failover).probe_interval().unwrap();
        let mut idle = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        assert_eq!(
            idle.poll_timeout(),
            None,
            "an idle manager without a clock waits"
        );
        let mut m = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        m.start(t0);
        assert_eq!(m.poll_timeout(), Some(t0 + every));
        m.handle_timeout(t0 + every);
        let mut probed: Vec<PathId> =
            std::iter::from_fn(|| m.poll_probe().map(|p| p.path)).collect();
        probed.sort_unstable();
        assert_eq!(probed, vec![0, 1]);
        idle.handle_timeout(t0 + every);
        assert!(idle.poll_probe().is_none());
    }

    #[test]
    fn failover_moves_within_three_intervals_and_fails_back_with_hysteresis() {
        let mut m = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        let d = |_: usize, _: u64| 5;
        // Path 0 is out from 1000 ms to 1500 ms.
        let alive = |p: usize, t: u64| p == 1 || !(1000..1500).contains(&t);
        let sw = drive(&mut m, 0, 3000, &d, &alive);
        assert_eq!(m.preferred(), Some(0));
        let (t_out, to) = sw[0];
        assert_eq!(to, 1);
        // Detection: oldest unconfirmed send + SRTT (10 ms) + 1.25 intervals (25 ms).
        assert!(
            (1000..1000 + 3 * 20).contains(&t_out),
            "switched at {t_out}"
        );
        let (t_back, to) = sw[1];
        assert_eq!((to, sw.len()), (0, 2), "{sw:?}");
        // Back only after `up-after` (3) good reports once path 0 works again.
        assert!(t_back >= 1500 + 2 * 20, "failed back at {t_back}");
        let snap = m.snapshot();
        assert!(snap[1].sources > 0 && snap[0].probes > 0 && snap[1].probes > 0);
    }

    #[test]
    fn a_silent_active_path_yields_to_a_suspect_one_that_answers() {
        let mut m = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        let d = |_: usize, _: u64| 5;
        // Path 1 (the backup) loses its probes and reports for 40 ms, enough for a silence
        // sample; it answers again from 1000 ms, when path 0 goes out for good.
        let alive = |p: usize, t: u64| {
            if p == 0 {
                t < 1000
            } else {
                !(960..1000).contains(&t)
            }
        };
        let sw = drive(&mut m, 0, 1500, &d, &alive);
        let (t_out, to) = *sw.first().expect("a switch");
        assert_eq!(to, 1, "{sw:?}");
        // As fast as with a backup that never faltered (path 0's silence sample), not once
        // path 1 is back `up` (3 good samples later).
        assert!(
            (1000..1000 + 2 * 20).contains(&t_out),
            "switched at {t_out}: {sw:?}"
        );
    }

    #[test]
    fn bond_deals_a_few_new_flows_in_proportion() {
        let mut c = cfg(PolicyKind::Bond);
        c.capacity_bps = vec![(0, 30_000_000), (1, 10_000_000)];
        let mut m = PathManager::new(c, &[0, 1], 1).unwrap();
        let now = crate::test_util::t0();
        for p in 0..2 {
            m.handle_observation(
                &PathObservation {
                    path: p,
                    echo_sent_at: Some(now),
                    echo_held: Duration::ZERO,
                    received: 1,
                    lost: 0,
                    bytes: 100,
                    interval: Duration::ZERO,
                },
                now + 10 * MS,
            );
        }
        let t = now + 10 * MS;
        assert!(
            (m.probability(0) - 0.75).abs() < 1e-9,
            "{}",
            m.probability(0)
        );
        let mut on = [0; 2];
        for flow in 0..8u64 {
            on[m.path_for_flow(flow, 100, t) as usize] += 1;
        }
        assert_eq!(on, [6, 2]);
        // A flow keeps its path.
        assert_eq!(m.path_for_flow(0, 100, t), m.path_for_flow(0, 100, t + MS));
    }

    #[test]
    fn bond_deals_again_the_flows_placed_while_a_path_was_out() {
        let mut m = PathManager::new(cfg(PolicyKind::Bond), &[0, 1], 1).unwrap();
        let t0 = crate::test_util::t0();
        let mut at = 0u32;
        let mut report = |m: &mut PathManager, path: PathId, lost: u32| {
            at += 10;
            let obs = PathObservation {
                path,
                echo_sent_at: Some(t0 + MS * at),
                echo_held: Duration::ZERO,
                received: 10,
                lost,
                bytes: 1000,
                interval: 20 * MS,
            };
            m.handle_observation(&obs, t0 + MS * (at + 10));
            t0 + MS * (at + 10)
        };
        for _ in 0..4 {
            report(&mut m, 0, 0);
            report(&mut m, 1, 0);
        }
        // Path 1 loses most of an interval at its base RTT: suspect, out of use.
        let now = report(&mut m, 1, 15);
        assert_eq!(m.state(1), Some(PathState::Suspect));
        let mut on = [0; 2];
        for flow in 0..8u64 {
            on[m.path_for_flow(flow, 100, now) as usize] += 1;
        }
        assert_eq!(on, [8, 0]);
        // Back up after `up-after` good reports: the same flows are dealt again, evenly.
        let mut now = now;
        for _ in 0..3 {
            now = report(&mut m, 1, 0);
        }
        assert_eq!(m.state(1), Some(PathState::Up));
        let mut on = [0; 2];
        for flow in 0..8u64 {
            on[m.path_for_flow(flow, 100, now) as usize] += 1;
        }
        assert_eq!(on, [4, 4]);
    }

    #[test]
    fn equal_bonded_paths_keep_their_preferred_label() {
        let mut m = PathManager::new(cfg(PolicyKind::Bond), &[0, 1], 1).unwrap();
        let t0 = crate::test_util::t0();
        // RTT samples of two equal paths that differ by noise: 50 or 52 ms, in turn.
        for k in 0..200u32 {
            let path = (k % 2) as PathId;
            let rtt = if (k / 2) % 2 == 0 { 50 } else { 52 };
            let sent = t0 + MS * (10 * k);
            let obs = PathObservation {
                path,
                echo_sent_at: Some(sent),
                echo_held: Duration::ZERO,
                received: 1,
                lost: 0,
                bytes: 100,
                interval: Duration::ZERO,
            };
            m.handle_observation(&obs, sent + MS * rtt);
        }
        assert!(m.switches() <= 1, "{} switches", m.switches());
        assert!((m.probability(0) - 0.5).abs() < 0.05);
    }

    #[test]
    fn heavy_loss_behind_a_queue_is_congestion_not_failure() {
        let mut m = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        let t0 = crate::test_util::t0();
        let report = |sent_ms: u32, lost: u32| PathObservation {
            path: 0,
            echo_sent_at: Some(t0 + MS * sent_ms),
            echo_held: Duration::ZERO,
            received: 10,
            lost,
            bytes: 1000,
            interval: 20 * MS,
        };
        let mut at = 0;
        let mut feed = |m: &mut PathManager, rtt: u32, lost: u32| {
            at += 20;
            // Sent at `at`, answered `rtt` later.
            m.handle_observation(&report(at, lost), t0 + MS * (at + rtt));
        };
        for _ in 0..5 {
            feed(&mut m, 10, 0);
        }
        assert_eq!(m.state(0), Some(PathState::Up));
        // 60% lost while the RTT is 300 ms over a 10 ms base: a full queue overflowing.
        for _ in 0..5 {
            feed(&mut m, 300, 15);
        }
        assert_eq!(m.state(0), Some(PathState::Up));
        // The same loss at the base RTT: the path is failing.
        for _ in 0..8 {
            feed(&mut m, 10, 0);
        }
        feed(&mut m, 10, 15);
        assert_eq!(m.state(0), Some(PathState::Suspect));
    }

    #[test]
    fn a_queue_filling_under_load_is_not_an_outage() {
        let mut m = PathManager::new(cfg(PolicyKind::Failover), &[0, 1], 1).unwrap();
        // Path 0's delay grows as a queue filled at twice the link rate does (the RTT grows
        // by 1 ms per ms) from 10 ms to 610 ms, then stays: everything still arrives. The far
        // end reports every half interval, as a UDP-mode end probes a busy path.
        let d = |p: usize, t: u64| match p {
            0 => 5 + t.clamp(1000, 1600).saturating_sub(1000) / 2,
            _ => 5,
        };
        // A real outage after the ramp is still seen within the RTT it has now.
        let alive = |p: usize, t: u64| p == 1 || t < 3500;
        let sw = drive_reporting(&mut m, 0, 5000, &d, &alive, 10);
        let (t_out, to) = sw[0];
        assert_eq!(to, 1);
        assert!(
            (3500..3500 + 610 + 3 * 20).contains(&t_out),
            "switched at {t_out}"
        );
    }

    #[test]
    fn greedy_and_exp3_follow_a_delay_inversion() {
        // Path 0 fast (5 ms one way) and path 1 slow (50 ms) until 2 s, then the other way round.
        let d = |p: usize, t: u64| if (p == 0) == (t < 2000) { 5 } else { 50 };
        let alive = |_: usize, _: u64| true;
        let mut g = PathManager::new(cfg(PolicyKind::Greedy), &[0, 1], 1).unwrap();
        drive(&mut g, 0, 2000, &d, &alive);
        assert_eq!(g.preferred(), Some(0));
        drive(&mut g, 2000, 4000, &d, &alive);
        assert_eq!(g.preferred(), Some(1));

        let mut c = cfg(PolicyKind::LowestDelay);
        c.policy.reward = Exp3Reward::Milliseconds;
        let mut e = PathManager::new(c, &[0, 1], 1).unwrap();
        drive(&mut e, 0, 2000, &d, &alive);
        assert!(e.exp3_weight_share(0) > 0.9, "{}", e.exp3_weight_share(0));
        drive(&mut e, 2000, 6000, &d, &alive);
        assert!(e.exp3_weight_share(1) > 0.9, "{}", e.exp3_weight_share(1));
        assert_eq!(e.preferred(), Some(1));

        // Every path's probes feed the weights: the swap is learnt within a few hundred ms
        // (the SRTTs crossing), not at the next exploratory draw.
        let mut c = cfg(PolicyKind::LowestDelay);
        c.policy.reward = Exp3Reward::Milliseconds;
        c.policy.feedback = Exp3Feedback::EveryPath;
        let mut f = PathManager::new(c, &[0, 1], 1).unwrap();
        drive(&mut f, 0, 2000, &d, &alive);
        assert!(
            f.exp3_raw_weight_share(0) > 0.9,
            "{}",
            f.exp3_raw_weight_share(0)
        );
        drive(&mut f, 2000, 2400, &d, &alive);
        assert!(
            f.exp3_raw_weight_share(1) > 0.9,
            "{}",
            f.exp3_raw_weight_share(1)
        );
    }

    #[test]
    fn policy_changes_live_and_repairs_go_diverse() {
        let t0 = crate::test_util::t0();
        let mut c = cfg(PolicyKind::Failover);
        c.repair_path = RepairPath::Diverse;
        let mut m = PathManager::new(c, &[3, 7], 1).unwrap();
        assert_eq!(m.path_for_flow(1, 100, t0), 3);
        // No RTT known yet: repairs go with their sources.
        assert_eq!(m.path_for_repair(3, 100, t0), 3);
        for (path, rtt) in [(3, 40), (7, 10)] {
            let obs = PathObservation {
                path,
                echo_sent_at: Some(t0),
                echo_held: Duration::ZERO,
                received: 1,
                lost: 0,
                bytes: 100,
                interval: Duration::ZERO,
            };
            m.handle_observation(&obs, t0 + MS * rtt);
        }
        let t0 = t0 + MS * 40;
        assert_eq!(m.path_for_repair(3, 100, t0), 7);
        // Half the RTT difference plus the 2 ms margin; none the other way round.
        assert_eq!(m.repair_hold(3, 7), MS * 17);
        assert_eq!(m.repair_hold(7, 3), Duration::ZERO);
        assert_eq!(m.path_for_repair(7, 100, t0), 3);
        m.set_repair_path(RepairPath::Same);
        assert_eq!(m.path_for_repair(3, 100, t0), 3);
        let mut p = PolicyConfig::of(PolicyKind::Failover);
        p.order = vec![7, 3];
        m.set_policy(p, t0).unwrap();
        assert_eq!(m.path_for_flow(1, 100, t0), 7);
        assert!(matches!(
            m.poll_event(),
            Some(PathEvent::Switch {
                from: Some(3),
                to: 7,
                reason: SwitchReason::PolicyChange,
                ..
            })
        ));
        let mut bad = PolicyConfig::of(PolicyKind::Failover);
        bad.order = vec![9];
        assert!(m.set_policy(bad, t0).is_err());
        m.set_policy(PolicyConfig::of(PolicyKind::Random), t0)
            .unwrap();
        let on_3 = (0..1000u64)
            .filter(|f| m.path_for_flow(*f, 1, t0) == 3)
            .count();
        assert!((400..600).contains(&on_3), "{on_3}");
        // A flow keeps its path (new-flow assignment).
        let first = m.path_for_flow(5, 1, t0);
        assert!((0..50).all(|_| m.path_for_flow(5, 1, t0) == first));
    }

    proptest::proptest! {
        /// A path whose reports alternate between good and heavy loss (a flapping path) moves
        /// traffic at most once away from it and never back while it keeps flapping: with
        /// `up-after` >= 2, one good report between bad ones never restores it.
        #[test]
        fn alternating_reports_do_not_flap_traffic(
            up_after in 2u32..5,
            down_after in 1u32..5,
            start_bad in proptest::prelude::any::<bool>(),
            reports in 4usize..200,
        ) {
            let t0 = crate::test_util::t0();
            let mut c = cfg(PolicyKind::Failover);
            c.up_after = up_after;
            c.down_after = down_after;
            c.probe_interval_ms = 0.0;
            let mut m = PathManager::new(c, &[0, 1], 1).unwrap();
            let mut switches = Vec::new();
            for k in 0..reports {
                let now = t0 + MS * (20 * k as u32);
                let bad = (k % 2 == 0) == start_bad;
                for path in [0u8, 1] {
                    let obs = PathObservation {
                        path,
                        echo_sent_at: Some(now),
                        echo_held: Duration::ZERO,
                        received: if bad && path == 0 { 1 } else { 10 },
                        lost: if bad && path == 0 { 9 } else { 0 },
                        bytes: 1000,
                        interval: 20 * MS,
                    };
                    m.handle_observation(&obs, now);
                }
                while let Some(e) = m.poll_event() {
                    if let PathEvent::Switch { to, .. } = e {
                        switches.push(to);
                    }
                }
            }
            proptest::prop_assert!(switches.len() <= 1, "{:?}", switches);
            proptest::prop_assert!(switches.iter().all(|&p| p == 1), "{:?}", switches);
        }
    }

    #[test]
    fn rejects_bad_path_sets() {
        let c = PathManagerConfig::default();
        assert!(matches!(
            PathManager::new(c.clone(), &[], 0),
            Err(PathConfigError::PathCount(0))
        ));
        assert!(matches!(
            PathManager::new(c, &[1, 1], 0),
            Err(PathConfigError::DuplicatePath(1))
        ));
    }
}
