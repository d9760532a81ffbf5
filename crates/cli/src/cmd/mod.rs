pub mod bench;
pub mod fec;
