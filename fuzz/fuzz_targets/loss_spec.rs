//! The `--loss` parser: never panics, and whatever it accepts prints back to the same spec.
#![no_main]
use hirt_channel::LossSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = s.parse::<LossSpec>() else {
        return;
    };
    let again: LossSpec = spec.to_string().parse().expect("canonical form must parse");
    assert_eq!(again, spec);
    if !matches!(spec, LossSpec::Trace(_)) {
        let mut m = spec.build(1).expect("non-trace specs always build");
        for _ in 0..64 {
            let _ = m.lose();
        }
    }
});
