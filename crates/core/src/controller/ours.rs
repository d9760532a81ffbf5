//! "Ours": a repair-rate controller that aims at a residual-loss target directly.
//!
//! HIRT (§IV-B) sends `mu + sigma` repairs per window, where mu and sigma are fast EWMAs of the
//! losses per window: the estimate is noisy (each sample is one window of ~200 sources), the
//! ceiling in `step = ceil(W / (mu + sigma))` rounds the rate down in steps, and nothing tells the
//! encoder whether the redundancy actually sufficed. Ours is meant to run with a long RLC window
//! (the simulator uses W = 2400, see `docs/simulator.md` for why) and differs in these ways:
//!
//! 1. **Long-memory, burst-aware loss model.** The link loss ratio `p` and the mean burst length
//!    `b` are estimated from exponentially decayed counts (half-life `half_life` sources, starting
//!    from a 5 % prior so the first RTT is protected), not from one window at a time. Losses in a
//!    window of `W` sources are a compound process with variance about `W p (2b - 1)` (geometric
//!    bursts), so the rate is `p + base + z * sqrt(p (2b - 1) / W)` repairs per source. Longer
//!    bursts automatically get more margin; `base` is the surplus the decoder needs to drain the
//!    random walk of losses minus repairs.
//! 2. **Closed loop on the residual loss.** The decoder reports the sources that left the
//!    recovery horizon unrecovered. `z` is an integrator: each unrecovered loss raises it by
//!    `gain`, each lost source (recovered or not) lowers it by `gain * target`, so it settles
//!    where the residual ratio (unrecovered / lost) equals `target`, within `[z_min, z_max]`.
//! 3. **Deficit repayment.** From the per-period counters the controller tracks the unknowns the
//!    decoder holds and the losses not matched by received repairs. A deficit beyond what the
//!    repairs in flight will cover, or a decoder system left open for more than W/3 sources (it is
//!    short of a few equations and its oldest unknowns are about to leave the window), is paid at
//!    once with extra repairs, then the controller waits an RTT plus the payment. With W much
//!    larger than the RTT in sources, those repairs still cover the losses in question.
//! 4. **Evenly spread, exact rate.** A fractional credit accumulates `rate` per source and a
//!    repair goes out each time it crosses 1: no rounding of the step, repairs evenly spaced.
//!    Time-driven repairs consume credit too, so they do not add to the overhead.
//! 5. **Bounded.** Rate plus repayment never exceed `max` repairs per source (default 0.3):
//!    losses that come from congestion or from an overloaded router inside the tunnel would
//!    otherwise raise the rate without bound and feed the overload (HIRT §V's vicious circle).
//!    The dataplane also skips repairs when its CPU is overloaded (`Encoder::set_cpu_load`).
//! 6. **Comes down when losses stop**, at the pace of the half-life, to a floor of `floor`
//!    repairs per source (default one per two windows), so a lone loss on a clean link is still
//!    recovered.
//!
//! **With a recovery deadline** D (`EncoderConfig::deadline`), the window follows the sources
//! sent in one deadline (a repair sent later than D after a loss is useless, and a shorter
//! window is cheaper and recovers sooner; always within the scheme's window) and the strategy
//! depends on D against the round trip:
//!
//! - **D > RTT + detection** (and the decoder still holds the sources of an answer's window
//!   when its spares arrive, see `Ours::answer_window`): *loss-triggered*, window `pps x D`
//!   (shorter if that is what fits). The decoder reports the ESIs it is missing; the encoder answers each once
//!   per RTT with one repair (`Encoder` does that, capped by a budget). A repair that answers a
//!   report is lost with the link's loss probability, and a second round trip would come too
//!   late for D < 2.5 RTT, so a small proactive rate `spare + 2 p^2` keeps spare equations
//!   in the window for those: the steady overhead is about `p/(1-p) + spare + 2 p^2`.
//! - **otherwise**: *proactive*: the rate formula above over `W = pps x D / 2` (a
//!   sliding-window system takes up to a window to close, so half the deadline is left for
//!   that), so the margin follows the loss count half a deadline holds (its variance from the
//!   measured bursts); the repairs span from half the deadline (independent losses) to all of
//!   it (bursts of 3 and longer, or deadlines that hold at most two loss events), see
//!   `Ours::proactive_share`;
//!   deficit repayment only when D exceeds 1.5 RTT (e.g. the window is capped below a round
//!   trip of sources at high rates), since it arrives a round trip after the report.
//!
//! Dense traffic: when the next scheduled repair is at most `max_delay` away, the time-driven
//! repair is told to wait for it (1.25 x the repair interval) instead of adding repairs; sparse
//! traffic keeps the configured repair delay.

use std::str::FromStr;
use std::time::{Duration, Instant};

use super::{Controller, FeedbackContext, QueueYield, RepairTrigger};
use crate::config::{kv_pairs, parse_num, ConfigError};
use crate::feedback::Feedback;

/// Weight of the prior in the loss estimate, in sources.
const PRIOR_SEEN: f64 = 100.0;
/// Losses of the prior (5 %).
const PRIOR_LOST: f64 = 5.0;
/// Shortest window an answer to a loss report is given when the decoder's reach leaves less
/// than the deadline's sources (below it, repairs are proactive).
const MIN_ANSWER_WINDOW: f64 = 512.0;
/// Headroom on how far behind the newest source an answer's spares reach (answer spacing,
/// jitter, the rate estimate).
const ANSWER_REACH_MARGIN: f64 = 1.1;

/// Loss events (bursts) a proactive window may hold before the share of the deadline it spans
/// stops growing with sparser losses (`Ours::proactive_share`).
const SPAN_LOSS_EVENTS: f64 = 2.0;
/// Shortest time the first sample of the source rate spans: feedback messages can come a
/// fraction of a millisecond apart (a loss report right after a periodic one, two delivered
/// together), and the sources one of them classifies over so short a time say little about
/// the rate (at 100 kpps the first message gave 3.8 times the rate, which the smoothing of
/// later messages carried for several more). Later samples are single messages, smoothed;
/// without a deadline the first is one too.
const RATE_SAMPLE_MIN: Duration = Duration::from_millis(10);
/// Smallest extra repair rate (per source) at which a deficit is paid back.
const DEBT_SPEED: f64 = 0.05;

/// Parameters of our controller.
#[derive(Clone, Debug, PartialEq)]
pub struct OursParams {
    /// Initial safety margin, in standard deviations of the losses per window.
    pub z: f64,
    /// Smallest margin the residual loop may reach.
    pub z_min: f64,
    /// Largest margin the residual loop may reach.
    pub z_max: f64,
    /// Target residual ratio: unrecovered / lost.
    pub target: f64,
    /// Integrator gain: margin added per unrecovered loss.
    pub gain: f64,
    /// Half-life of the loss statistics, in sources.
    pub half_life: f64,
    /// Smallest repair rate (repairs per source); 0 = one repair per two windows.
    pub floor: f64,
    /// Longest wait the time-driven repair is stretched to with dense traffic.
    pub max_delay: Duration,
    /// Constant part of the margin (repairs per source): the decoder also needs a surplus to
    /// drain the deficits that the random walk of losses minus repairs builds up.
    pub base: f64,
    /// Unmatched losses tolerated at the decoder before extra repairs are sent.
    pub slack: f64,
    /// Most repairs per source, repayment included.
    pub max: f64,
    /// With a deadline that leaves time for loss reports: proactive repairs per source kept on
    /// top of the answers to reports (spare equations for answers that get lost).
    pub spare: f64,
    /// When the rate-driven and time-driven repairs give way to a queue on the path
    /// (`yield=off|overflow|queue`, see `QueueYield`).
    pub queue_yield: QueueYield,
    /// With a deadline too short for loss reports: the proactive window as a share of the
    /// sources one deadline holds; `None` = from the measured mean loss burst (see
    /// `Ours::proactive_share`).
    pub deadline_share: Option<f64>,
}

impl Default for OursParams {
    fn default() -> Self {
        OursParams {
            z: 0.8,
            z_min: 0.6,
            z_max: 3.0,
            target: 0.001,
            gain: 0.01,
            half_life: 20_000.0,
            floor: 0.0,
            max_delay: Duration::from_millis(20),
            slack: 2.0,
            base: 0.001,
            max: 0.3,
            spare: 0.0,
            queue_yield: QueueYield::Overflow,
            deadline_share: None,
        }
    }
}

/// Parses `z=..,zmin=..,zmax=..,target=..,gain=..,half=..,floor=..,slack=..,base=..,max=..,
/// maxdelay_ms=..,spare=..,share=..,yield=off|overflow|queue` (each optional).
impl FromStr for OursParams {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut p = OursParams::default();
        for (k, v) in kv_pairs(s) {
            match k {
                "z" => p.z = parse_num(k, v, 0.0, 20.0)?,
                "zmin" => p.z_min = parse_num(k, v, 0.0, 20.0)?,
                "zmax" => p.z_max = parse_num(k, v, 0.0, 20.0)?,
                "target" => p.target = parse_num(k, v, 0.0, 1.0)?,
                "gain" => p.gain = parse_num(k, v, 0.0, 10.0)?,
                "half" => p.half_life = parse_num(k, v, 1.0, 1e9)?,
                "floor" => p.floor = parse_num(k, v, 0.0, 1.0)?,
                "slack" => p.slack = parse_num(k, v, 0.0, 1e6)?,
                "base" => p.base = parse_num(k, v, 0.0, 1.0)?,
                "max" => p.max = parse_num(k, v, 0.0, 1.0)?,
                "spare" => p.spare = parse_num(k, v, 0.0, 1.0)?,
                "share" => p.deadline_share = Some(parse_num(k, v, 0.05, 1.0)?),
                "yield" => {
                    p.queue_yield = match v {
                        "off" => QueueYield::Off,
                        "overflow" => QueueYield::Overflow,
                        "queue" => QueueYield::Queue,
                        _ => {
                            return Err(ConfigError::InvalidValue {
                                key: k.into(),
                                value: v.into(),
                            })
                        }
                    }
                }
                "maxdelay_ms" => {
                    p.max_delay =
                        Duration::from_secs_f64(parse_num::<f64>(k, v, 0.0, 10_000.0)? / 1e3)
                }
                _ => return Err(ConfigError::UnknownParameter(k.into())),
            }
        }
        if p.z_min > p.z_max {
            return Err(ConfigError::InvalidValue {
                key: "zmin".into(),
                value: s.into(),
            });
        }
        p.z = p.z.clamp(p.z_min, p.z_max);
        Ok(p)
    }
}

/// Our controller.
#[derive(Clone, Debug)]
pub struct Ours {
    p: OursParams,
    window: f64,
    /// Decayed counts: sources seen, sources lost, bursts ended, sources in those bursts.
    seen: f64,
    lost: f64,
    bursts: f64,
    burst_sum: f64,
    /// Current margin (integrator state).
    z: f64,
    rate: f64,
    credit: f64,
    /// Source rate estimate (sources per second) from feedback arrival times: the last
    /// message's time (and the sources counted since the first, until the first estimate),
    /// the smoothed rate.
    rate_sample: Option<(Instant, f64)>,
    pps: f64,
    /// Lost sources the decoder still holds unrecovered (declared lost, neither recovered nor
    /// given up), summed from the per-period counters.
    pending: f64,
    /// Losses not yet matched by received repairs while the decoder holds unknowns (a Lindley
    /// recursion: `max(0, deficit + lost - repairs)`, reset when nothing is pending). Unlike
    /// `pending` it does not count unknowns whose equations already arrived.
    deficit: f64,
    /// Sources over which the decoder has held unknowns without interruption: a long open
    /// "cycle" means its system is short of a few equations, and the oldest unknowns are about
    /// to leave the window of the repairs that can still cover them.
    open_for: f64,
    /// Extra repairs still to send to pay off a deficit the decoder reported.
    debt: f64,
    /// Sources to wait before a new deficit report is acted on (the last payment is in flight).
    hold: f64,
    /// With a deadline: the window it implies (`None` without a deadline or before the source
    /// rate is known), and whether loss reports are answered (the deadline exceeds a round trip).
    deadline_window: Option<u16>,
    window_wanted: Option<u32>,
    reactive: bool,
    /// The deadline leaves a loss report its round trip whatever the path
    /// (`Controller::expect_loss_reports`).
    expects_reports: bool,
    /// Until a repair measured the RTT, where answers stand in for the controller's repairs:
    /// the sources so far and the count at which the next probe repair goes (doubling).
    probe: Option<(u64, u64)>,
    /// With loss reports: the sources the encoder keeps for the answers (`answer_window`).
    history: Option<u32>,
}

impl Ours {
    /// A controller for a window of `window` sources.
    pub fn new(p: OursParams, window: u16) -> Self {
        let window = f64::from(window.max(1));
        let z = p.z;
        let mut c = Ours {
            p,
            window,
            seen: PRIOR_SEEN,
            lost: PRIOR_LOST,
            bursts: 0.0,
            burst_sum: 0.0,
            z,
            rate: 0.0,
            credit: 0.0,
            rate_sample: None,
            pps: 0.0,
            pending: 0.0,
            deficit: 0.0,
            open_for: 0.0,
            debt: 0.0,
            hold: 0.0,
            deadline_window: None,
            window_wanted: None,
            reactive: false,
            expects_reports: false,
            probe: None,
            history: None,
        };
        c.recompute();
        c
    }

    fn floor(&self) -> f64 {
        if self.p.floor > 0.0 {
            self.p.floor
        } else {
            0.5 / self.window
        }
    }

    /// Current estimates: (loss ratio, mean burst length, margin z).
    pub fn estimate(&self) -> (f64, f64, f64) {
        (self.loss(), self.burst(), self.z)
    }

    /// Loss ratio. The decayed counts start from a prior of `PRIOR_LOST` losses in
    /// `PRIOR_SEEN` sources (5 %): before the first feedback (one RTT, when a deficit of repairs
    /// is cheapest to avoid) the controller protects against ~5 % loss; the prior then decays
    /// like any other observation.
    fn loss(&self) -> f64 {
        self.lost / self.seen
    }

    fn burst(&self) -> f64 {
        (self.burst_sum + 1.0) / (self.bursts + 1.0)
    }

    /// Window and strategy for a deadline `d` (see the module docs).
    fn follow_deadline(&mut self, d: std::time::Duration, ctx: &FeedbackContext) {
        if self.pps <= 0.0 {
            // Before the source rate is known (the first feedback): answer loss reports when the
            // deadline leaves a round trip and the report spacing, so that the first losses of
            // a stream are repaired too; the window stays the scheme's until then.
            let rtt = ctx.rtt.unwrap_or(crate::config::INITIAL_RTT).as_secs_f64();
            self.reactive = rtt + 0.001 < d.as_secs_f64();
            return;
        }
        let max = f64::from(ctx.max_window.max(1));
        let wanted = (self.pps * d.as_secs_f64()).round();
        self.window_wanted = Some(wanted.min(f64::from(u32::MAX)) as u32);
        let full = wanted.clamp(32.0, max);
        // Detection: the reorder tolerance (3 sources) and the report gap (1 ms).
        let detect = 4.0 / self.pps + 0.001;
        // The RTT is measured on repairs: where answers stand in for them from the start
        // (`expect_loss_reports`), the first answers measure it.
        let answered = match ctx.rtt {
            Some(rtt) => self.answer_window(rtt.as_secs_f64() + detect, d, full, ctx.reach),
            None => self.expects_reports.then_some((full, None)),
        };
        self.reactive = answered.is_some();
        self.history = answered.and_then(|(_, history)| history);
        // Proactive: the margin counts the losses half a deadline of sources holds (a loss is
        // recovered once the repairs sent after it outnumber the losses among the sources they
        // cover, and half the deadline is left for that), and the repairs span what the
        // measured bursts call for (`proactive_share`).
        if let Some((w, _)) = answered {
            self.window = w;
            self.deadline_window = Some(w as u16);
        } else {
            self.window = (full / 2.0).round().max(32.0).min(max);
            let coded = (full * self.proactive_share(full))
                .round()
                .max(32.0)
                .min(max);
            self.deadline_window = Some(coded as u16);
        }
    }

    /// With loss reports: the window of the answers and the sources the encoder must keep for
    /// them, or `None` if the deadline does not leave a round trip (`round`, detection
    /// included) or the decoder cannot hold a loss that long. Where the window `full` holds a
    /// round trip of sources, the code's own memory is enough (no history asked for). Otherwise: an
    /// answer's window ends at the newest loss it answers, which the encoder hears of a round
    /// trip after sending it; the spares behind the answers follow half the remaining time
    /// later (`Encoder`), and the decoder must still hold the first source of their window
    /// then: `reach` (in sources behind the newest) bounds how far back that is. The window
    /// is then `full`, shortened to fit, but not below `MIN_ANSWER_WINDOW` (or `full` if less).
    fn answer_window(
        &self,
        round: f64,
        d: Duration,
        full: f64,
        reach: u32,
    ) -> Option<(f64, Option<u32>)> {
        let d = d.as_secs_f64();
        if round >= d {
            return None;
        }
        if round * self.pps < full {
            // The window holds a loss a round trip later: what the code keeps is enough.
            return Some((full, None));
        }
        let behind = (ANSWER_REACH_MARGIN * self.pps * (round + (d - round) / 2.0)).ceil();
        let w = full.min(f64::from(reach) - behind);
        (w >= full.min(MIN_ANSWER_WINDOW)).then_some((w, Some((behind + w) as u32)))
    }

    /// The share of a deadline's `sources` the proactive repairs span. A loss is recovered once
    /// the repairs sent after it outnumber the losses among the sources they cover. A burst of
    /// b losses needs about b repairs after it, which a window of the whole deadline still
    /// holds and half of it may not: the share grows with the measured mean burst, from half
    /// the deadline (independent losses) to all of it (bursts of 3 and longer). Where a
    /// deadline holds few loss events, a shorter window only leaves out repairs: the share
    /// grows too until the window holds about two events (a burst counts once)
    /// (docs/results/2026-11-27-short-deadline.md, docs/results/2026-11-28-proactive-span.md).
    fn proactive_share(&self, sources: f64) -> f64 {
        self.p.deadline_share.unwrap_or_else(|| {
            let burst = self.burst();
            let events = self.loss() * sources / burst;
            (0.25 + 0.25 * burst)
                .max(SPAN_LOSS_EVENTS / events)
                .clamp(0.5, 1.0)
        })
    }

    fn recompute(&mut self) {
        let p = self.loss();
        if self.reactive {
            self.rate = self.p.spare.min(self.p.max);
            return;
        }
        let dispersion = (2.0 * self.burst() - 1.0).max(1.0);
        let need = p + self.p.base + self.z * (p * dispersion / self.window).sqrt();
        self.rate = need
            .max(self.floor())
            .min(self.p.max.max(self.floor()))
            .min(1.0);
    }
}

impl Controller for Ours {
    fn name(&self) -> &'static str {
        "ours"
    }

    fn on_source(&mut self) -> u32 {
        self.hold = (self.hold - 1.0).max(0.0);
        let headroom = (self.p.max - self.rate).max(0.0);
        let pay = self.debt.min(self.rate.max(DEBT_SPEED)).min(headroom);
        self.debt -= pay;
        self.credit += self.rate + pay;
        if let Some((seen, next)) = &mut self.probe {
            *seen += 1;
            if *seen >= *next {
                *next *= 2;
                self.credit += 1.0;
            }
        }
        if self.credit >= 1.0 {
            let n = self.credit.floor();
            // The repair(s) asked for here are accounted in on_repair.
            n as u32
        } else {
            0
        }
    }

    fn on_repair(&mut self, trigger: RepairTrigger) {
        // Every repair but an answer to a loss report uses one unit of credit; a time-driven
        // repair may borrow up to one unit ahead.
        if trigger != RepairTrigger::LossReport {
            self.credit = (self.credit - 1.0).max(-1.0);
        }
    }

    fn window(&self) -> Option<u16> {
        self.deadline_window
    }

    fn deadline_window_wanted(&self) -> Option<u32> {
        self.window_wanted
    }

    fn history_wanted(&self) -> Option<u32> {
        self.history
    }

    fn answers_loss_reports(&self) -> bool {
        self.reactive
    }

    /// Before the first feedback the prior (5 % loss) would otherwise set a proactive rate
    /// for the whole first round trip, which the answers to its loss reports, a round trip
    /// later and still in time, make unneeded: at 100 kpps over 600 ms that was 3400 repairs
    /// per stream. The RTT is measured on repairs, and answers computed without it are sized
    /// for the initial RTT: a repair after sources 1, 2, 4, 8, ... lets the first feedback
    /// measure it (about 17 repairs for a round trip of 100000 sources).
    fn expect_loss_reports(&mut self) {
        self.expects_reports = true;
        if self.pps <= 0.0 {
            self.probe = Some((0, 1));
            self.reactive = true;
            self.recompute();
        }
    }

    fn queue_yield(&self) -> QueueYield {
        self.p.queue_yield
    }

    fn loss_estimate(&self) -> (f64, f64) {
        (self.loss(), self.burst())
    }

    fn on_feedback(&mut self, fb: &Feedback, ctx: &FeedbackContext) {
        if ctx.rtt.is_some() {
            self.probe = None;
        }
        let n = f64::from(fb.received) + f64::from(fb.lost);
        if n > 0.0 {
            let decay = 0.5f64.powf(n / self.p.half_life);
            self.seen = self.seen * decay + n;
            self.lost = self.lost * decay + f64::from(fb.lost);
            self.bursts = self.bursts * decay + f64::from(fb.bursts);
            self.burst_sum = self.burst_sum * decay + f64::from(fb.burst_sum);
            match &mut self.rate_sample {
                // The first estimate, which the smoothing would carry for a while, where it
                // decides whether loss reports are answered (a deadline).
                Some((since, count)) if self.pps == 0.0 && ctx.deadline.is_some() => {
                    *count += n;
                    let dt = ctx.now.saturating_duration_since(*since);
                    if dt >= RATE_SAMPLE_MIN {
                        self.pps = *count / dt.as_secs_f64();
                        self.rate_sample = Some((ctx.now, 0.0));
                    }
                }
                Some((since, _)) => {
                    let dt = ctx.now.saturating_duration_since(*since).as_secs_f64();
                    if dt > 0.0 {
                        let inst = n / dt;
                        self.pps = if self.pps == 0.0 {
                            inst
                        } else {
                            0.8 * self.pps + 0.2 * inst
                        };
                    }
                    self.rate_sample = Some((ctx.now, 0.0));
                }
                // The first message's sources came before it: its time starts the sample.
                None => self.rate_sample = Some((ctx.now, 0.0)),
            }
        }
        if let Some(d) = ctx.deadline {
            self.follow_deadline(d, ctx);
        }
        // Deficit repayment: losses the decoder holds beyond the repairs it received, and beyond
        // what the repairs in flight will cover, are paid back at once (spread over the next
        // sources). The window is long enough (W = 2400 sources vs. an RTT of ~500 at 10 kpps)
        // that repairs sent now still cover them.
        self.pending =
            (self.pending + f64::from(fb.lost) - f64::from(fb.recovered) - f64::from(fb.residual))
                .max(0.0);
        self.deficit = if self.pending == 0.0 {
            0.0
        } else {
            (self.deficit + f64::from(fb.lost) - f64::from(fb.repairs)).max(0.0)
        };
        self.open_for = if self.pending == 0.0 {
            0.0
        } else {
            self.open_for + n
        };
        // Repayment comes a round trip after the losses: with a deadline, only when that is
        // still in time and loss reports do not do its work already.
        let repay = match (ctx.deadline, ctx.rtt) {
            (None, _) => true,
            (Some(d), Some(rtt)) => !self.reactive && d.as_secs_f64() > 1.5 * rtt.as_secs_f64(),
            (Some(_), None) => false,
        };
        if self.hold <= 0.0 && repay {
            let p = self.loss();
            let rtt_pkts = ctx.rtt.map_or(0.0, |r| r.as_secs_f64() * self.pps);
            let surplus = ((self.rate * (1.0 - p) - p) * rtt_pkts).max(0.0);
            let unmatched = self.deficit.min(self.pending) - surplus;
            let excess = if self.open_for > self.window / 3.0 {
                // Close the cycle: the unmatched losses plus a few spare equations.
                unmatched.max(0.0) + self.p.slack
            } else {
                unmatched - self.p.slack
            };
            if excess > 0.0 {
                // A debt larger than a window's worth at the cap could not be paid within the
                // window anyway.
                self.debt = (self.debt + excess).min(self.p.max * self.window);
                self.hold = rtt_pkts + self.debt / self.rate.max(DEBT_SPEED);
            }
        }
        // Integrator on the residual ratio.
        let residual = fb.residual.saturating_sub(ctx.own_residual);
        let err = f64::from(residual) - self.p.target * f64::from(fb.lost);
        self.z = (self.z + self.p.gain * err).clamp(self.p.z_min, self.p.z_max);
        self.recompute();
    }

    fn rate(&self) -> f64 {
        self.rate
    }

    fn repair_delay(&self) -> Option<Duration> {
        if self.pps <= 0.0 || self.rate <= 0.0 {
            return None;
        }
        let interval = 1.25 / (self.rate * self.pps);
        (interval <= self.p.max_delay.as_secs_f64()).then(|| Duration::from_secs_f64(interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(ms: u64) -> FeedbackContext {
        FeedbackContext {
            now: crate::test_util::t0() + Duration::from_millis(ms),
            rtt: None,
            window: 200,
            max_window: 200,
            reach: 200,
            own_residual: 0,
            deadline: None,
        }
    }

    fn drive(c: &mut Ours, n: usize) -> u32 {
        let mut sent = 0;
        for _ in 0..n {
            for _ in 0..c.on_source() {
                c.on_repair(RepairTrigger::Controller);
                sent += 1;
            }
        }
        sent
    }

    /// A period of `n` sources with `lost` losses in bursts of `burst`, all recovered.
    fn period(n: u32, lost: u32, burst: u32) -> Feedback {
        Feedback {
            received: n - lost,
            lost,
            recovered: lost,
            repairs: lost + 1,
            bursts: lost.div_ceil(burst.max(1)),
            burst_sum: lost,
            ..Feedback::default()
        }
    }

    #[test]
    fn protects_against_the_prior_before_any_feedback() {
        let mut c = Ours::new(OursParams::default(), 200);
        // 5 % + 0.1 % + 0.8 * sqrt(0.05 / 200) = 6.36 %, spread evenly.
        assert!((c.rate() - 0.0636).abs() < 1e-3, "{}", c.rate());
        assert_eq!(drive(&mut c, 1000), (c.rate() * 1000.0) as u32);
    }

    #[test]
    fn rate_follows_loss_with_margin_and_bursts() {
        let fixed_z = OursParams {
            z: 0.5,
            z_min: 0.5,
            gain: 0.0,
            base: 0.0,
            ..OursParams::default()
        };
        let mut c = Ours::new(fixed_z.clone(), 200);
        for i in 0..200 {
            c.on_feedback(&period(200, 6, 1), &ctx(i * 20));
        }
        let (p, b, z) = c.estimate();
        assert!(
            (p - 0.03).abs() < 1e-4 && (b - 1.0).abs() < 0.01 && z == 0.5,
            "{p} {b} {z}"
        );
        // 0.03 + 0.5 * sqrt(0.03 * 1 / 200) = 0.03612
        assert!((c.rate() - 0.03612).abs() < 1e-4, "{}", c.rate());
        let uniform = c.rate();
        // Same loss ratio in bursts of 3: more margin.
        let mut c = Ours::new(fixed_z, 200);
        for i in 0..200 {
            c.on_feedback(&period(200, 6, 3), &ctx(i * 20));
        }
        assert!(c.rate() > uniform * 1.1, "{} vs {uniform}", c.rate());
        // rate * n repairs, evenly (to float rounding).
        let r = c.rate();
        let n = drive(&mut c, 100_000);
        assert!(n.abs_diff((r * 100_000.0) as u32) <= 1, "{n} vs {r}");
    }

    #[test]
    fn residual_loss_raises_the_margin_and_clean_periods_lower_it() {
        let mut c = Ours::new(OursParams::default(), 200);
        let fb = Feedback {
            recovered: 8,
            residual: 2,
            ..period(200, 10, 1)
        };
        c.on_feedback(&fb, &ctx(0));
        let z0 = c.estimate().2;
        assert!((z0 - (0.8 + 0.01 * (2.0 - 0.01))).abs() < 1e-9, "{z0}");
        let before = c.rate();
        for i in 1..100 {
            c.on_feedback(&fb, &ctx(i * 20));
        }
        assert!(c.rate() > before && c.estimate().2 <= 3.0);
        for i in 100..40_000 {
            c.on_feedback(&period(200, 10, 1), &ctx(i * 20));
        }
        assert_eq!(c.estimate().2, 0.6);
    }

    #[test]
    fn comes_down_when_losses_stop() {
        let mut c = Ours::new(OursParams::default(), 200);
        for i in 0..100 {
            c.on_feedback(&period(200, 10, 1), &ctx(i * 20));
        }
        let high = c.rate();
        for i in 100..1100 {
            c.on_feedback(&period(200, 0, 1), &ctx(i * 20));
        }
        // Down to the floor, one repair per two windows.
        assert!(high > 0.05 && c.rate() == 0.0025, "{high} -> {}", c.rate());
    }

    #[test]
    fn a_deficit_at_the_decoder_is_paid_back_once() {
        let mut c = Ours::new(OursParams::default(), 200);
        for i in 0..100 {
            c.on_feedback(&period(200, 2, 1), &ctx(i * 20));
        }
        let base = drive(&mut c.clone(), 1000);
        // 30 losses, 5 repairs received, nothing recovered: 25 unmatched. The decoder's system
        // has been open for a whole period (> W / 3 sources), so 2 spare equations are added.
        let bad = Feedback {
            recovered: 0,
            repairs: 5,
            ..period(200, 30, 1)
        };
        c.on_feedback(&bad, &ctx(2000));
        let mut paid = c.clone();
        let extra = drive(&mut paid, 1000) - base;
        // 27 paid back, plus the higher regular rate the 30 losses bring.
        assert!((27..=33).contains(&extra), "{extra}");
        // The same report again while the payment is in flight adds nothing.
        c.on_feedback(
            &Feedback {
                lost: 0,
                received: 200,
                repairs: 2,
                ..bad
            },
            &ctx(2020),
        );
        assert_eq!(drive(&mut c, 1000) - base, extra);
    }

    #[test]
    fn timer_repairs_use_credit() {
        let mut c = Ours::new(
            OursParams {
                floor: 0.125,
                ..OursParams::default()
            },
            200,
        );
        c.on_repair(RepairTrigger::Timer);
        // Borrowed one repair: the next 15 sources send none, then one per 8.
        assert_eq!(drive(&mut c, 15), 0);
        assert_eq!(drive(&mut c, 1), 1);
    }

    #[test]
    fn stretches_the_repair_timer_only_with_dense_traffic() {
        let mut c = Ours::new(OursParams::default(), 200);
        let fb = period(200, 2, 1);
        // 200 sources every 20 ms: 10 kpps.
        for i in 0..50 {
            c.on_feedback(&fb, &ctx(i * 20));
        }
        let d = c.repair_delay().expect("dense");
        assert!(
            d > Duration::from_millis(2) && d < Duration::from_millis(20),
            "{d:?}"
        );
        // 200 sources every 2 s: 100 pps -> configured delay.
        let mut c = Ours::new(OursParams::default(), 200);
        for i in 0..50 {
            c.on_feedback(&fb, &ctx(i * 2000));
        }
        assert_eq!(c.repair_delay(), None);
    }

    #[test]
    fn rate_and_repayment_stay_under_the_cap() {
        // Losses of an overloaded router: 60 % of every period lost and never recovered.
        let mut c = Ours::new(OursParams::default(), 200);
        for i in 0..200 {
            let fb = Feedback {
                received: 80,
                lost: 120,
                residual: 120,
                bursts: 10,
                burst_sum: 120,
                ..Feedback::default()
            };
            c.on_feedback(&fb, &ctx(i * 20));
        }
        assert!((c.rate() - 0.3).abs() < 1e-9, "{}", c.rate());
        let n = drive(&mut c, 10_000);
        assert!(n <= 3_001, "{n} repairs for 10000 sources");

        let p: OursParams = "max=0.6".parse().unwrap();
        let mut c = Ours::new(p, 200);
        for i in 0..200 {
            c.on_feedback(&period(200, 80, 1), &ctx(i * 20));
        }
        assert!(c.rate() > 0.4 && c.rate() <= 0.6, "{}", c.rate());
    }

    #[test]
    fn a_short_deadline_window_spans_more_of_it_for_bursts_and_sparse_losses() {
        // 10 kpps (200 sources every 20 ms), RTT 50 ms, deadline 25 ms: proactive, and a
        // deadline holds 250 sources.
        let short = |ms| FeedbackContext {
            rtt: Some(Duration::from_millis(50)),
            max_window: 4095,
            deadline: Some(Duration::from_millis(25)),
            ..ctx(ms)
        };
        let window_after = |p: OursParams, lost, burst| {
            let mut c = Ours::new(p, 4095);
            for i in 0..400 {
                c.on_feedback(&period(200, lost, burst), &short(i * 20));
            }
            assert!(!c.answers_loss_reports());
            c.window().unwrap()
        };
        // 3 % loss (a deadline holds 7.5 losses): independent losses, half the deadline;
        // bursts of 2, three quarters; of 3 on, all of it.
        assert_eq!(window_after(OursParams::default(), 6, 1), 125);
        // (The burst estimate's prior of one burst of one keeps it a little under 2.)
        let w = window_after(OursParams::default(), 6, 2);
        assert!((180..=188).contains(&w), "{w}");
        assert_eq!(window_after(OursParams::default(), 6, 3), 250);
        assert_eq!(window_after(OursParams::default(), 6, 6), 250);
        // Sparse independent losses: 0.5 % (1.25 per deadline), all of it; 1 % (2.5), the
        // share that holds two of them (0.8).
        assert_eq!(window_after(OursParams::default(), 1, 1), 250);
        let w = window_after(OursParams::default(), 2, 1);
        assert!((198..=202).contains(&w), "{w}");
        // An explicit share wins.
        let p: OursParams = "share=0.5".parse().unwrap();
        assert_eq!(p.deadline_share, Some(0.5));
        assert_eq!(window_after(p.clone(), 6, 6), 125);
        assert_eq!(window_after(p, 1, 1), 125);
        assert!("share=0".parse::<OursParams>().is_err());
        assert!("share=1.5".parse::<OursParams>().is_err());
    }

    #[test]
    fn answers_reach_back_a_round_trip_of_sources_beyond_the_window() {
        // 100 kpps (2000 sources every 20 ms), RTT 50 ms, deadline 100 ms: a deadline holds
        // 10000 sources, the window 4095, a round trip ~5000.
        let at = |rtt_ms, reach| {
            move |ms| FeedbackContext {
                rtt: Some(Duration::from_millis(rtt_ms)),
                max_window: 4095,
                reach,
                deadline: Some(Duration::from_millis(2 * rtt_ms)),
                ..ctx(ms)
            }
        };
        let run = |rtt_ms, reach| {
            let mut c = Ours::new(OursParams::default(), 4095);
            let cx = at(rtt_ms, reach);
            for i in 0..100 {
                c.on_feedback(&period(2000, 20, 1), &cx(i * 20));
            }
            (c.answers_loss_reports(), c.window(), c.history_wanted())
        };
        // The decoder keeps 16384 sources: answers over the whole window, the encoder keeps
        // 1.1 x 100k x (50 + 1.04 + 24.5) ms + 4095 sources.
        let (reactive, w, history) = run(50, 16384);
        assert!(reactive);
        assert_eq!(w, Some(4095));
        let h = history.unwrap();
        assert!((12_400..=12_500).contains(&h), "{h}");
        // A decoder that keeps 10000: the window shrinks to what fits.
        let (reactive, w, _) = run(50, 10_000);
        assert!(reactive);
        let w = w.unwrap();
        assert!((1_600..=1_700).contains(&w), "{w}");
        // 8192: not even 512 sources fit after the round trip: proactive.
        let (reactive, _, history) = run(50, 8192);
        assert!(!reactive);
        assert_eq!(history, None);
        // A 600 ms round trip is 60000 sources: proactive.
        assert!(!run(600, 16384).0);
    }

    #[test]
    fn feedback_messages_close_together_do_not_inflate_the_rate() {
        // 100 kpps over a 600 ms round trip with a decoder that holds 131072 sources: loss
        // reports can be answered. The first two messages come 0.1 ms apart (a report right
        // after the first periodic message) with 100 sources each, then one every 2 ms with
        // 200: a rate read from the second message alone would be 1 Mpps, too many sources
        // for the decoder to hold a round trip.
        let mut c = Ours::new(OursParams::default(), 200);
        let mut at = vec![(0u64, 100u32), (100, 100)];
        at.extend((1..100u64).map(|i| (i * 2000, 200)));
        for (us, n) in at {
            let cx = FeedbackContext {
                now: crate::test_util::t0() + Duration::from_micros(us),
                rtt: Some(Duration::from_millis(600)),
                reach: 131_072,
                deadline: Some(Duration::from_millis(1200)),
                ..ctx(0)
            };
            c.on_feedback(&period(n, 2, 1), &cx);
            assert!(c.answers_loss_reports(), "at {us} us");
        }
        assert!((90_000.0..=115_000.0).contains(&c.pps), "{}", c.pps);
    }

    #[test]
    fn expected_loss_reports_are_answered_before_a_repair_measured_the_rtt() {
        // The RTT is measured on repairs; a stream whose answers stand in for them from the
        // start measures it with its first answers, so an unknown RTT must not stop them.
        let reactive = |expect: bool| {
            let mut c = Ours::new(OursParams::default(), 200);
            if expect {
                c.expect_loss_reports();
                assert!(c.answers_loss_reports());
                assert_eq!(c.rate(), 0.0);
            }
            for i in 0..20 {
                let cx = FeedbackContext {
                    deadline: Some(Duration::from_millis(200)),
                    reach: 131_072,
                    ..ctx(i * 5)
                };
                c.on_feedback(&period(500, 1, 1), &cx);
            }
            c.answers_loss_reports()
        };
        assert!(reactive(true));
        assert!(!reactive(false));
    }

    #[test]
    fn parses_params() {
        let p: OursParams = "z=2,target=0.01,maxdelay_ms=10".parse().unwrap();
        assert_eq!(
            (p.z, p.target, p.max_delay),
            (2.0, 0.01, Duration::from_millis(10))
        );
        assert!("zmin=3,zmax=2".parse::<OursParams>().is_err());
        assert!("bogus=1".parse::<OursParams>().is_err());
        assert_eq!("".parse::<OursParams>().unwrap(), OursParams::default());
        assert_eq!(
            Ours::new(OursParams::default(), 200).queue_yield(),
            QueueYield::Overflow
        );
        for (v, y) in [("off", QueueYield::Off), ("queue", QueueYield::Queue)] {
            let p: OursParams = format!("yield={v}").parse().unwrap();
            assert_eq!(Ours::new(p, 200).queue_yield(), y);
        }
        assert!("yield=1".parse::<OursParams>().is_err());
    }
}
