//! The health decision, sans-IO: probe results (with an injected `Instant`) in, node state
//! changes and the next-hop set of the route out. No sockets, clocks or threads here.

use std::fmt;
use std::time::Instant;

/// What one probe round found out about a node (the worst of its targets').
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeResult {
    /// Every target answered.
    Answered,
    /// A target did not answer within the timeout (host, link or process stuck).
    NoAnswer,
    /// A target's host refused the connection: it is up, but nothing listens (the hirt
    /// process is gone).
    Refused,
}

impl ProbeResult {
    /// The result of a node whose targets gave `results`: the worst of them (refused before
    /// unanswered before answered); answered when there is none.
    pub fn worst(results: impl IntoIterator<Item = ProbeResult>) -> ProbeResult {
        results.into_iter().max().unwrap_or(ProbeResult::Answered)
    }
}

/// A node's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Not probed yet.
    Unknown,
    /// In the route.
    Up,
    /// Out of the route.
    Down,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Unknown => "unknown",
            NodeState::Up => "up",
            NodeState::Down => "down",
        })
    }
}

/// When a node changes state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Rounds in a row without an answer that take an up node out.
    pub fall: u32,
    /// Answered rounds in a row that put a down node back (hysteresis: a node that flaps stays
    /// out).
    pub rise: u32,
    /// A refused connection takes an up node out at once: the process is gone, waiting for
    /// more rounds would only lose more of its flows.
    pub refused_is_down: bool,
}

/// A node changed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The node (index in the configuration).
    pub node: usize,
    /// Its state before.
    pub from: NodeState,
    /// Its state now.
    pub to: NodeState,
    /// The result that decided it.
    pub result: ProbeResult,
    /// Rounds in a row with that result (answered or not) that led here.
    pub streak: u32,
    /// When.
    pub at: Instant,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.result {
            ProbeResult::Answered => format!("{} probe rounds answered", self.streak),
            ProbeResult::NoAnswer => format!("{} probe rounds unanswered", self.streak),
            ProbeResult::Refused => "connection refused (hirt not running)".into(),
        };
        write!(
            f,
            "node {}: {} -> {} ({why})",
            self.node, self.from, self.to
        )
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    state: NodeState,
    /// Unanswered rounds in a row (while up).
    misses: u32,
    /// Answered rounds in a row (while down).
    answers: u32,
}

/// Every node's state, and the next hops the route should have.
#[derive(Clone, Debug)]
pub struct Checker {
    nodes: Vec<Node>,
    thresholds: Thresholds,
}

/// The next hops the route should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSet {
    /// Nodes (indices) to install, in configuration order.
    pub nodes: Vec<usize>,
    /// No node is up: every probed node is installed (traffic for the prefix has nowhere
    /// better to go, and a removed route would let it take a less specific one, unprotected).
    pub all_down: bool,
}

impl RouteSet {
    /// The next hops in the order to install them after `installed`: the nodes already in the
    /// route first (in their installed order), then the new ones. The kernel replaces an IPv6
    /// multipath route one next hop at a time (the first replaces the old route, the others
    /// are appended), and a lookup between two steps sees only the first ones: with the
    /// installed nodes first, that partial route sends every flow to a node that was already
    /// carrying traffic, never to one that is only now coming up.
    pub fn install_order(&self, installed: &[usize]) -> Vec<usize> {
        let kept = installed.iter().copied().filter(|n| self.nodes.contains(n));
        let new = self
            .nodes
            .iter()
            .copied()
            .filter(|n| !installed.contains(n));
        kept.chain(new).collect()
    }

    /// Whether `installed` holds exactly these nodes (in any order).
    pub fn is_installed(&self, installed: &[usize]) -> bool {
        installed.len() == self.nodes.len() && self.nodes.iter().all(|n| installed.contains(n))
    }
}

impl Checker {
    /// `nodes` nodes, none probed yet.
    pub fn new(nodes: usize, thresholds: Thresholds) -> Checker {
        Checker {
            nodes: vec![
                Node {
                    state: NodeState::Unknown,
                    misses: 0,
                    answers: 0,
                };
                nodes
            ],
            thresholds,
        }
    }

    /// The state of `node`.
    pub fn state(&self, node: usize) -> NodeState {
        self.nodes.get(node).map_or(NodeState::Unknown, |n| n.state)
    }

    /// Feeds one probe round's result for `node`; returns the state change it caused.
    pub fn observe(
        &mut self,
        node: usize,
        result: ProbeResult,
        now: Instant,
    ) -> Option<Transition> {
        let t = self.thresholds;
        let n = self.nodes.get_mut(node)?;
        let from = n.state;
        let (to, streak) = match (n.state, result) {
            // The first result decides: there is no earlier state to flap from.
            (NodeState::Unknown, ProbeResult::Answered) => (NodeState::Up, 1),
            (NodeState::Unknown, _) => (NodeState::Down, 1),
            (NodeState::Up, ProbeResult::Answered) => {
                n.misses = 0;
                (NodeState::Up, 0)
            }
            (NodeState::Up, ProbeResult::Refused) if t.refused_is_down => (NodeState::Down, 1),
            (NodeState::Up, _) => {
                n.misses += 1;
                if n.misses >= t.fall {
                    (NodeState::Down, n.misses)
                } else {
                    (NodeState::Up, 0)
                }
            }
            (NodeState::Down, ProbeResult::Answered) => {
                n.answers += 1;
                if n.answers >= t.rise {
                    (NodeState::Up, n.answers)
                } else {
                    (NodeState::Down, 0)
                }
            }
            (NodeState::Down, _) => {
                n.answers = 0;
                (NodeState::Down, 0)
            }
        };
        if to == from {
            return None;
        }
        n.state = to;
        n.misses = 0;
        n.answers = 0;
        Some(Transition {
            node,
            from,
            to,
            result,
            streak,
            at: now,
        })
    }

    /// The next hops the route should have: the up nodes; every probed node when none is up;
    /// `None` before any node was probed.
    pub fn route_set(&self) -> Option<RouteSet> {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == NodeState::Up)
            .collect();
        if !up.is_empty() {
            return Some(RouteSet {
                nodes: up,
                all_down: false,
            });
        }
        let probed: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state != NodeState::Unknown)
            .collect();
        (!probed.is_empty()).then_some(RouteSet {
            nodes: probed,
            all_down: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use ProbeResult::{Answered, NoAnswer, Refused};

    const T: Thresholds = Thresholds {
        fall: 3,
        rise: 2,
        refused_is_down: true,
    };

    /// Feeds `results` to node 0 one round apart; returns the round index of every transition.
    fn feed(c: &mut Checker, results: &[ProbeResult]) -> Vec<(usize, NodeState)> {
        let t0 = Instant::now();
        results
            .iter()
            .enumerate()
            .filter_map(|(i, &r)| {
                c.observe(0, r, t0 + Duration::from_millis(100 * i as u64))
                    .map(|tr| (i, tr.to))
            })
            .collect()
    }

    #[test]
    fn first_result_decides_then_fall_misses_take_a_node_out() {
        let mut c = Checker::new(1, T);
        assert_eq!(c.route_set(), None, "nothing probed: nothing to install");
        let got = feed(
            &mut c,
            &[
                Answered, NoAnswer, NoAnswer, Answered, NoAnswer, NoAnswer, NoAnswer,
            ],
        );
        // An answer in between resets the count: out at the third miss in a row.
        assert_eq!(got, vec![(0, NodeState::Up), (6, NodeState::Down)]);
    }

    #[test]
    fn refused_takes_a_node_out_at_once_unless_configured_as_a_miss() {
        let mut c = Checker::new(1, T);
        assert_eq!(
            feed(&mut c, &[Answered, Refused]),
            vec![(0, NodeState::Up), (1, NodeState::Down)]
        );
        let mut c = Checker::new(
            1,
            Thresholds {
                refused_is_down: false,
                ..T
            },
        );
        assert_eq!(
            feed(&mut c, &[Answered, Refused, Refused, Refused]),
            vec![(0, NodeState::Up), (3, NodeState::Down)]
        );
    }

    #[test]
    fn a_flapping_node_stays_out_until_rise_answers_in_a_row() {
        let mut c = Checker::new(1, T);
        let got = feed(
            &mut c,
            &[
                Refused, Answered, NoAnswer, Answered, Refused, Answered, Answered, Answered,
            ],
        );
        assert_eq!(got, vec![(0, NodeState::Down), (6, NodeState::Up)]);
        let tr = c.observe(0, Refused, Instant::now()).unwrap();
        assert_eq!(
            (tr.from, tr.to, tr.result),
            (NodeState::Up, NodeState::Down, Refused)
        );
        assert!(tr.to_string().contains("refused"), "{tr}");
    }

    #[test]
    fn the_route_holds_the_up_nodes_or_every_probed_one() {
        let mut c = Checker::new(3, T);
        let now = Instant::now();
        c.observe(0, Answered, now);
        assert_eq!(
            c.route_set(),
            Some(RouteSet {
                nodes: vec![0],
                all_down: false
            })
        );
        c.observe(1, Answered, now);
        c.observe(2, NoAnswer, now);
        assert_eq!(c.route_set().unwrap().nodes, vec![0, 1]);
        c.observe(0, Refused, now);
        assert_eq!(c.route_set().unwrap().nodes, vec![1]);
        c.observe(1, Refused, now);
        assert_eq!(
            c.route_set(),
            Some(RouteSet {
                nodes: vec![0, 1, 2],
                all_down: true
            })
        );
        assert_eq!(c.state(2), NodeState::Down);
        assert_eq!(c.state(9), NodeState::Unknown);
        assert!(c.observe(9, Answered, now).is_none(), "no such node");
    }

    #[test]
    fn nodes_already_installed_come_first() {
        let set = |nodes: &[usize]| RouteSet {
            nodes: nodes.to_vec(),
            all_down: false,
        };
        // Node 0 comes back beside node 1: 1 stays first, so a lookup between the kernel's
        // replace of the first hop and the append of the second still finds node 1.
        assert_eq!(set(&[0, 1]).install_order(&[1]), vec![1, 0]);
        assert_eq!(set(&[0, 1, 2]).install_order(&[2, 0]), vec![2, 0, 1]);
        assert_eq!(set(&[1]).install_order(&[0, 1]), vec![1]);
        assert_eq!(set(&[0, 2]).install_order(&[]), vec![0, 2]);
        assert_eq!(set(&[2]).install_order(&[0, 1]), vec![2]);
        assert!(set(&[0, 1]).is_installed(&[1, 0]));
        assert!(!set(&[0, 1]).is_installed(&[1]));
        assert!(!set(&[0]).is_installed(&[0, 1]));
        assert!(!set(&[0]).is_installed(&[]));
    }

    #[test]
    fn a_node_is_as_healthy_as_its_worst_target() {
        assert_eq!(ProbeResult::worst([Answered, Answered]), Answered);
        assert_eq!(ProbeResult::worst([Answered, NoAnswer]), NoAnswer);
        assert_eq!(ProbeResult::worst([NoAnswer, Refused, Answered]), Refused);
        assert_eq!(ProbeResult::worst([]), Answered);
    }
}
