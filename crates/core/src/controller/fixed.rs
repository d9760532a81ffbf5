//! Fixed step (SRv6-FEC's `RLC_W_STEP`): one repair every `step` sources, whatever the feedback.

use super::{Controller, FeedbackContext, RepairTrigger};
use crate::feedback::Feedback;

/// One repair every `step` sources. Any repair (also a time-driven one) restarts the count.
#[derive(Clone, Copy, Debug)]
pub struct Fixed {
    step: u32,
    since: u32,
}

impl Fixed {
    /// `step` 0 is treated as 1.
    pub fn new(step: u16) -> Self {
        Fixed {
            step: u32::from(step.max(1)),
            since: 0,
        }
    }
}

impl Controller for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn on_source(&mut self) -> u32 {
        self.since += 1;
        u32::from(self.since >= self.step)
    }

    fn on_repair(&mut self, _trigger: RepairTrigger) {
        self.since = 0;
    }

    fn on_feedback(&mut self, _fb: &Feedback, _ctx: &FeedbackContext) {}

    fn rate(&self) -> f64 {
        1.0 / f64::from(self.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(c: &mut Fixed, n: usize) -> Vec<usize> {
        let mut at = Vec::new();
        for i in 0..n {
            for _ in 0..c.on_source() {
                c.on_repair(RepairTrigger::Controller);
                at.push(i);
            }
        }
        at
    }

    #[test]
    fn one_repair_every_step() {
        let mut c = Fixed::new(4);
        assert_eq!(drive(&mut c, 12), vec![3, 7, 11]);
        assert_eq!(c.rate(), 0.25);
    }

    #[test]
    fn timer_repair_restarts_the_count() {
        let mut c = Fixed::new(3);
        assert_eq!(c.on_source(), 0);
        assert_eq!(c.on_source(), 0);
        c.on_repair(RepairTrigger::Timer);
        assert_eq!(drive(&mut c, 6), vec![2, 5]);
    }

    #[test]
    fn step_zero_means_every_source() {
        let mut c = Fixed::new(0);
        assert_eq!(drive(&mut c, 3), vec![0, 1, 2]);
    }
}
