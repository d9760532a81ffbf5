//! The per-path state machine: up / suspect / down / recovering, driven by good and bad samples
//! (one per feedback interval) with hysteresis in both directions.

use serde::Serialize;

/// Health of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathState {
    /// Carries traffic.
    Up,
    /// A bad sample arrived (silence or heavy loss): policies avoid it while another path is up;
    /// `up_after` good samples in a row bring it back, `down_after` bad ones take it down.
    Suspect,
    /// Out of use: only probes cross it.
    Down,
    /// Probes came back after `down`: `up_after` good samples in a row make it `up`, one bad one
    /// takes it `down` again.
    Recovering,
}

impl PathState {
    /// The state's name as logs and metrics print it.
    pub fn as_str(self) -> &'static str {
        match self {
            PathState::Up => "up",
            PathState::Suspect => "suspect",
            PathState::Down => "down",
            PathState::Recovering => "recovering",
        }
    }

    /// Whether policies may put traffic on it when an `up` path is lacking.
    pub fn is_fallback(self) -> bool {
        matches!(self, PathState::Suspect | PathState::Recovering)
    }
}

/// One observation of a path's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// Progress confirmed and loss under the threshold.
    Good,
    /// Silence past the threshold, or loss above it.
    Bad,
}

/// The state machine of one path.
#[derive(Clone, Debug)]
pub struct Health {
    state: PathState,
    good_run: u32,
    bad_run: u32,
    up_after: u32,
    down_after: u32,
}

impl Health {
    /// A path that starts `up`.
    pub fn new(up_after: u32, down_after: u32) -> Self {
        Self {
            state: PathState::Up,
            good_run: 0,
            bad_run: 0,
            up_after: up_after.max(1),
            down_after: down_after.max(1),
        }
    }

    /// The current state.
    pub fn state(&self) -> PathState {
        self.state
    }

    /// Changes the thresholds (a live configuration change); the runs so far are kept.
    pub fn set_thresholds(&mut self, up_after: u32, down_after: u32) {
        self.up_after = up_after.max(1);
        self.down_after = down_after.max(1);
    }

    /// Takes one sample; returns the new state when it changed.
    pub fn on_sample(&mut self, s: Sample) -> Option<PathState> {
        match s {
            Sample::Good => {
                self.good_run = self.good_run.saturating_add(1);
                self.bad_run = 0;
            }
            Sample::Bad => {
                self.bad_run = self.bad_run.saturating_add(1);
                self.good_run = 0;
            }
        }
        let next = match (self.state, s) {
            (PathState::Up, Sample::Bad) => PathState::Suspect,
            (PathState::Suspect, Sample::Bad) if self.bad_run >= self.down_after => PathState::Down,
            (PathState::Suspect | PathState::Recovering, Sample::Good)
                if self.good_run >= self.up_after =>
            {
                PathState::Up
            }
            (PathState::Down, Sample::Good) if self.up_after <= 1 => PathState::Up,
            (PathState::Down, Sample::Good) => PathState::Recovering,
            (PathState::Recovering, Sample::Bad) => PathState::Down,
            (s, _) => s,
        };
        (next != self.state).then(|| {
            self.state = next;
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn run(h: &mut Health, samples: &[Sample]) -> Vec<PathState> {
        samples.iter().filter_map(|s| h.on_sample(*s)).collect()
    }

    #[test]
    fn full_cycle() {
        use Sample::*;
        let mut h = Health::new(3, 3);
        assert_eq!(
            run(&mut h, &[Bad, Bad, Bad]),
            [PathState::Suspect, PathState::Down]
        );
        assert_eq!(run(&mut h, &[Good]), [PathState::Recovering]);
        assert_eq!(run(&mut h, &[Bad]), [PathState::Down]);
        assert_eq!(
            run(&mut h, &[Good, Good, Good]),
            [PathState::Recovering, PathState::Up]
        );
        // A single bad sample only makes it suspect; three good ones restore it.
        assert_eq!(
            run(&mut h, &[Bad, Good, Good, Good]),
            [PathState::Suspect, PathState::Up]
        );
    }

    proptest! {
        /// Alternating samples (a flapping path) change the state at most twice, whatever the
        /// phase and length, when `up_after` and `down_after` are >= 2: the path settles.
        #[test]
        fn alternating_samples_do_not_flap(
            up_after in 2u32..6,
            down_after in 2u32..6,
            start_bad in any::<bool>(),
            len in 4usize..400,
        ) {
            let mut h = Health::new(up_after, down_after);
            let samples: Vec<Sample> = (0..len)
                .map(|i| if (i % 2 == 0) == start_bad { Sample::Bad } else { Sample::Good })
                .collect();
            let changes = run(&mut h, &samples);
            prop_assert!(changes.len() <= 2, "{changes:?}");
            prop_assert_ne!(h.state(), PathState::Up);
        }

        /// Any sample sequence: every return to `up` follows `up_after` good samples in a row,
        /// and every `down` follows `down_after` bad samples in a row (or a bad one while
        /// recovering), so the state can change at most once per run of the threshold length.
        #[test]
        fn transitions_need_runs(
            up_after in 1u32..6,
            down_after in 1u32..6,
            bits in proptest::collection::vec(any::<bool>(), 1..500),
        ) {
            let mut h = Health::new(up_after, down_after);
            let (mut good, mut bad) = (0u32, 0u32);
            for b in bits {
                let s = if b { Sample::Good } else { Sample::Bad };
                if b { good += 1; bad = 0 } else { bad += 1; good = 0 }
                let before = h.state();
                if let Some(next) = h.on_sample(s) {
                    match next {
                        PathState::Up => prop_assert!(good >= up_after, "up after {good} good"),
                        PathState::Down => prop_assert!(
                            bad >= down_after || before == PathState::Recovering,
                            "down after {bad} bad from {before:?}"
                        ),
                        PathState::Suspect => prop_assert_eq!(before, PathState::Up),
                        PathState::Recovering => prop_assert_eq!(before, PathState::Down),
                    }
                }
            }
        }
    }
}
