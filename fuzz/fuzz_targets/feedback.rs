//! Feedback bodies come from the network: `Feedback::decode` must never panic, and whatever it
//! accepts must re-encode to the same bytes it read (the layout has no slack besides the
//! reserved byte and flag bits, which are ignored; a local drops field of 0 is left out) and
//! decode again to the same value. Accepted
//! feedback is also fed to an encoder, which must not panic on any counter values.
#![no_main]

use std::time::{Duration, Instant};

use hirt_core::{Encoder, EncoderConfig, FecMode, Feedback};
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

    #[allow(clippy::disallowed_methods)]
    let now = Instant::now();
    for mode in ["hirt:w=16", "ours:w=16", "rquic"] {
        let mode: FecMode = mode.parse().unwrap();
        let mut enc = Encoder::new(EncoderConfig::new(mode), 1);
        enc.handle_source(fb.stream, b"x", now);
        enc.handle_feedback(&fb, now + Duration::from_millis(1));
        for i in 0..40u32 {
            enc.handle_source(fb.stream, &i.to_be_bytes(), now + Duration::from_millis(2));
            while enc.poll_repair().is_some() {}
        }
    }
});
