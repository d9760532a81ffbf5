#![no_main]
use libfuzzer_sys::fuzz_target;

// Placeholder: replaced by the owner of this parser.
fuzz_target!(|_data: &[u8]| {});
