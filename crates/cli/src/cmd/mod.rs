pub mod bench;
pub mod fec;
pub mod lab;
pub mod sim;
