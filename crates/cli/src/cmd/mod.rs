pub mod fec;
