//! The `hirt` command line: clap flags that map onto the configuration types of the libraries
//! (e.g. [`hirt_linux::config::Srv6Config`]) and dispatch to them. Nothing below this crate
//! knows about flags.

pub mod cmd;
