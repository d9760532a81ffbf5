//! `hirt health`: the ingress side of a scale-out deployment (docs/scale-out.md).
//!
//! Several hirt encoder/decoder pairs share one tunnel's load: the ingress router holds one
//! multipath route for the protected prefix whose next hops each encapsulate (`seg6`) towards
//! another pair's encoder and decoder SIDs, and the kernel spreads flows over them by hash. This
//! module keeps that route's next-hop set to the pairs that are alive:
//!
//! - [`config`]: what to check, as data ([`HealthConfig`]: prefix, nodes, interval, thresholds),
//!   validated once; the command line maps its flags onto it;
//! - [`tracker`]: the decision, sans-IO: per node a state machine fed with probe results and an
//!   injected `Instant` (down after `fall` missed probes, or at once when a probe is refused; up
//!   again after `rise` answered ones), and the set of next hops the route should have;
//! - [`probe`]: one probe, `GET /metrics` to a node's hirt metrics endpoint: answered by the hirt
//!   process itself, so a process killed with SIGKILL is told apart from a slow one (its port is
//!   closed: the node's kernel refuses the connection at once) as well as a dead host (no answer);
//! - [`run`](run()): the loop: a probe round every interval, every target in parallel; the route
//!   replaced in one netlink request whenever the set changes, the next hops already in it
//!   first (the kernel applies a multipath replace one next hop at a time); between rounds, a
//!   watch per target of an up node (a connection the hirt process holds open until it ends),
//!   whose end counts as a refused probe at once.

pub mod config;
pub mod probe;
mod runner;
pub mod tracker;

pub use config::{HealthConfig, NodeSpec};
pub use runner::{run, run_until};
pub use tracker::{Checker, NodeState, ProbeResult, Thresholds, Transition};
