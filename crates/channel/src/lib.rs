//! (in progress)
#![deny(unsafe_code)]
