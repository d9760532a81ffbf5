//! No controller: block codes emit their own repairs (fixed k:m, Maelstrom), sliding codes only
//! send time-driven repairs, `none` sends nothing.

use super::{Controller, FeedbackContext};
use crate::feedback::Feedback;

/// Never asks for a repair and ignores feedback.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoController;

impl Controller for NoController {
    fn name(&self) -> &'static str {
        "none"
    }

    fn on_source(&mut self) -> u32 {
        0
    }

    fn on_feedback(&mut self, _fb: &Feedback, _ctx: &FeedbackContext) {}

    fn rate(&self) -> f64 {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_repairs() {
        let mut c = NoController;
        assert_eq!((0..1000).map(|_| c.on_source()).sum::<u32>(), 0);
        assert_eq!(c.window(), None);
    }
}
