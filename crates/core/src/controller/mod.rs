//! Repair-rate controllers: when a stream's encoder emits repairs, and how large its window or
//! block is, given the decoder's feedback.
//!
//! Each controller is a small sans-IO unit behind [`Controller`]: the encoder calls
//! [`Controller::on_source`] once per source (the answer is how many repairs to emit now),
//! [`Controller::on_repair`] for every repair that went out whatever triggered it, and
//! [`Controller::on_feedback`] for each feedback of its stream. A lost feedback only means the
//! controller keeps its last estimate.

use std::fmt;
use std::time::{Duration, Instant};

use crate::config::ControllerConfig;
use crate::feedback::Feedback;

pub mod fixed;
pub mod hirt;
pub mod none;
pub mod ours;
pub mod rquic;

/// What made a repair go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairTrigger {
    /// The controller asked for it in [`Controller::on_source`].
    Controller,
    /// Time-driven: sources were unprotected for `repair_delay`.
    Timer,
    /// A block code emitted it on its own (block complete).
    Code,
    /// It answers a loss report of the decoder (loss-triggered repair).
    LossReport,
}

/// What the encoder tells a controller with each feedback.
#[derive(Clone, Copy, Debug)]
pub struct FeedbackContext {
    /// Time of arrival of the feedback.
    pub now: Instant,
    /// Smoothed RTT of the stream, once measured.
    pub rtt: Option<Duration>,
    /// Window (sliding codes) or block size (block XOR) in use.
    pub window: u16,
    /// Largest window / block the configured scheme allows.
    pub max_window: u16,
    /// How far behind the newest source (in sources) a repair's window may start and still be
    /// of use: what the encoder can keep and a decoder that sends loss reports still holds
    /// (see `DecoderConfig::with_loss_reports`).
    pub reach: u32,
    /// Of the feedback's `residual`, how much this encoder's own overload control may have
    /// caused (repairs it skipped, each of which could have recovered one loss): a sign of
    /// overload, not of a repair rate too low for the link, so residual-loss loops should not
    /// raise the rate for it (HIRT §V: reacting to overload with more repairs feeds it).
    pub own_residual: u32,
    /// The stream's recovery deadline, resolved against its RTT (`None`: no deadline).
    pub deadline: Option<Duration>,
}

/// A repair-rate controller. Deterministic: no clock, no unseeded randomness.
pub trait Controller: fmt::Debug + Send {
    /// Short name for stats and metrics.
    fn name(&self) -> &'static str;

    /// A source symbol entered the code; returns how many repairs to emit now (sliding codes).
    fn on_source(&mut self) -> u32;

    /// A repair went out (any trigger). Step-based controllers restart their count here, so a
    /// time-driven repair stands in for the next scheduled one.
    fn on_repair(&mut self, _trigger: RepairTrigger) {}

    /// Feedback for this stream arrived.
    fn on_feedback(&mut self, fb: &Feedback, ctx: &FeedbackContext);

    /// Window (sliding codes) or block size (block XOR) the code should use now; `None` leaves
    /// it unchanged. Clamped by the encoder to the scheme's maximum.
    fn window(&self) -> Option<u16> {
        None
    }

    /// Sources the recovery deadline asks the code to keep, before the largest window caps
    /// it (`None` without a deadline mode).
    fn deadline_window_wanted(&self) -> Option<u32> {
        None
    }

    /// Sources the encoder should keep so that answers to loss reports (and their spares) can
    /// still cover the losses they name (`None`: the window's worth is enough).
    fn history_wanted(&self) -> Option<u32> {
        None
    }

    /// Repairs per source currently aimed at (reported in stats and metrics).
    fn rate(&self) -> f64;

    /// Overrides the configured time-driven repair delay (`None` = use the configuration).
    fn repair_delay(&self) -> Option<Duration> {
        None
    }

    /// Whether the encoder should answer the decoder's loss reports with repairs now (the
    /// recovery deadline leaves time for a round trip). Controllers without a deadline mode
    /// never do.
    fn answers_loss_reports(&self) -> bool {
        false
    }

    /// The stream's deadline leaves a loss report its round trip whatever the path
    /// (`Deadline::leaves_round_trip`) and the decoder holds what answers need: until feedback
    /// measures the path, answers to loss reports may stand in for the controller's own
    /// repairs. Controllers without a deadline mode ignore it.
    fn expect_loss_reports(&mut self) {}

    /// When the controller's own repairs (rate-driven and time-driven) stop, like the answers
    /// to loss reports, because the encoder sees a queue on the path (the losses of those
    /// periods then stay out of its estimate). The baselines (HIRT, rQUIC, fixed rates) keep
    /// their papers' behaviour: never.
    fn queue_yield(&self) -> QueueYield {
        QueueYield::Off
    }

    /// The link's loss ratio and mean loss burst length as the controller estimates them
    /// (`(0, 1)` if it keeps no estimate): the encoder sizes the spare repairs behind its
    /// answers to loss reports with them.
    fn loss_estimate(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
}

/// When a controller's own repairs give way to a queue on the path. A queue's drops are the
/// signal that makes the transports carried slow down: repairing them lets those transports
/// fill the queue further, and the repairs themselves add to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueYield {
    /// Never.
    Off,
    /// When the path queues (RTT above its base) and a feedback period loses more than the
    /// link's loss process explains: the queue overflows. A queue that holds without
    /// overflowing is left alone, so the transports are not handed the link's random losses
    /// as congestion (a single bulk CUBIC flow over 1 % random loss keeps its throughput).
    #[default]
    Overflow,
    /// Whenever the path queues: the transports see the link's random losses while a queue
    /// stands, which keeps many flows from filling the queue (the 16-connection lab runs) but
    /// costs a single bulk flow over heavy random loss much of its throughput.
    Queue,
}

/// Builds the controller a configuration names, for a scheme whose window/block is `window`.
pub fn build(cfg: &ControllerConfig, window: u16) -> Box<dyn Controller> {
    match cfg {
        ControllerConfig::Ours(p) => Box::new(ours::Ours::new(p.clone(), window)),
        ControllerConfig::Hirt(p) => Box::new(hirt::Hirt::new(*p, window)),
        ControllerConfig::Rquic(p) => Box::new(rquic::Rquic::new(*p)),
        ControllerConfig::Fixed { step } => Box::new(fixed::Fixed::new(*step)),
        ControllerConfig::None => Box::new(none::NoController),
    }
}
