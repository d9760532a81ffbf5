pub mod bench;
pub mod fec;
pub mod sim;
