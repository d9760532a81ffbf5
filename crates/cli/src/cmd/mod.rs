//! The subcommands whose flags map onto library types.

pub mod bench;
pub mod coder;
pub mod fec;
pub mod health;
pub mod lab;
pub mod path_flags;
pub mod sim;
pub mod sim_paths;
pub mod srv6;
pub mod status;
pub mod udp;

/// Copies the flags given on the command line onto a configuration: `set` for keys with a
/// default (`Option` flag, plain field), `some` for optional keys (`Option` flag and field),
/// `flag` for switches (a flag can turn a switch on, not off).
macro_rules! apply_flags {
    ($cfg:ident, $args:ident; set: $($s:ident),*; some: $($o:ident),*; flag: $($f:ident),* $(,)?) => {
        $( if let Some(v) = $args.$s { $cfg.$s = v; } )*
        $( if $args.$o.is_some() { $cfg.$o = $args.$o; } )*
        $( $cfg.$f |= $args.$f; )*
    };
}
pub(crate) use apply_flags;
