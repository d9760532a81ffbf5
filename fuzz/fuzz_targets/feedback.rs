//! Feedback bodies come from the network: `Feedback::decode` must never panic, and whatever it
//! accepts must re-encode to the same bytes it read (the layout has no slack besides the
//! reserved byte and flag bits, which are ignored; a local drops field of 0 is left out) and
//! decode again to the same value; the zero-copy `FeedbackView` reads the same fields. Accepted
//! feedback is also fed to encoders (one with a recovery deadline, which answers loss reports),
//! which must not panic on any counter values or report ranges, nor answer a report with more
//! repairs than it names.
#![no_main]

use std::time::{Duration, Instant};

use hirt_core::{Deadline, Encoder, EncoderConfig, FecMode, Feedback, FeedbackView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(fb) = Feedback::decode(data) else {
        return;
    };
    let bytes = fb.to_bytes();
    assert_eq!(Feedback::decode(&bytes), Ok(fb));
    assert_eq!(bytes[0], data[0]);
    assert_eq!(&bytes[2..5], &data[2..5]);
    assert_eq!(&bytes[6..56], &data[6..56]);
    let view = FeedbackView::new(data).unwrap();
    assert_eq!(view.to_feedback(), fb);
    assert_eq!(view.loss_ranges().count(), fb.loss_report.ranges().len());

    #[allow(clippy::disallowed_methods)]
    let now = Instant::now();
    for (mode, deadline) in [
        ("hirt:w=16", None),
        ("ours:w=16", None),
        ("rquic", None),
        (
            "ours:w=64",
            Some(Deadline::Fixed(Duration::from_millis(50))),
        ),
    ] {
        let mode: FecMode = mode.parse().unwrap();
        let mut cfg = EncoderConfig::new(mode);
        cfg.deadline = deadline;
        let mut enc = Encoder::new(cfg, 1);
        enc.handle_source(fb.stream, b"x", now);
        enc.handle_feedback(&fb, now + Duration::from_millis(1));
        let answered = enc.stats(fb.stream).map_or(0, |s| s.repairs_report);
        assert!(answered <= u64::from(fb.loss_report.missing()));
        for i in 0..40u32 {
            enc.handle_source(fb.stream, &i.to_be_bytes(), now + Duration::from_millis(2));
            while enc.poll_repair().is_some() {}
        }
    }
});
