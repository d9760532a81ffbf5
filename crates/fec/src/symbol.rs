//! How a variable-length source symbol is protected: `[len: u16 BE][data][zero padding]`, as
//! RFC 8681 §4.1's ADUI (without the optional flow id). A repair payload is as long as the longest
//! padded symbol it covers; recovering it yields the length, then the data.

// Implemented by the RLC work (issue #2).
