//! The paths of an SRv6 tunnel: one segment list per path from the encoder SID to the decoder
//! SID, the middle SIDs in the order they are visited (`[[path]]` tables, flag `--path`).

use std::net::Ipv6Addr;
use std::str::FromStr;

use serde::Deserialize;

use super::{ensure, ConfigError, MAX_PATHS};

/// Most middle SIDs of one path.
pub const MAX_PATH_SIDS: usize = 8;

/// One path of an SRv6 tunnel. Its id is its position in the list (0, 1, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Srv6PathConfig {
    /// The SIDs the path visits between the encoder SID and the decoder SID, in order (End
    /// SIDs of the path's routers); empty: the route the ingress's packets follow anyway.
    pub sids: Vec<Ipv6Addr>,
}

impl FromStr for Srv6PathConfig {
    type Err = String;

    /// `sids=SID[+SID...]`, or `direct` (no middle SID).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "direct" {
            return Ok(Srv6PathConfig::default());
        }
        let Some(list) = s.strip_prefix("sids=") else {
            return Err(format!(
                "`{s}`: expected sids=SID[+SID...] (the middle SIDs in order) or direct"
            ));
        };
        let sids = list
            .split('+')
            .map(str::trim)
            .map(|a| a.parse().map_err(|_| format!("`{a}` is not an IPv6 SID")))
            .collect::<Result<Vec<Ipv6Addr>, String>>()?;
        Ok(Srv6PathConfig { sids })
    }
}

impl Srv6PathConfig {
    /// The segment list of an internal packet (repair, probe) on this path, wire order: the
    /// decoder SID last to visit (index 0), the first middle SID at the top.
    pub fn internal_segments(&self, dec_sid: Ipv6Addr) -> Vec<Ipv6Addr> {
        std::iter::once(dec_sid)
            .chain(self.sids.iter().rev().copied())
            .collect()
    }

    /// The middle SIDs in wire order (inserted as they are into a source's segment list).
    pub fn wire_sids(&self) -> Vec<Ipv6Addr> {
        self.sids.iter().rev().copied().collect()
    }

    /// `a > b > dec`: the path as `hirt status` shows it.
    pub fn describe(&self, dec_sid: Ipv6Addr) -> String {
        self.sids
            .iter()
            .chain(std::iter::once(&dec_sid))
            .map(Ipv6Addr::to_string)
            .collect::<Vec<_>>()
            .join(" > ")
    }
}

/// Checks a path list: at most [`MAX_PATHS`] paths of at most [`MAX_PATH_SIDS`] middle SIDs,
/// none of them ours.
pub(super) fn check_paths(
    paths: &[Srv6PathConfig],
    enc_sid: Option<Ipv6Addr>,
    dec_sid: Option<Ipv6Addr>,
) -> Result<(), ConfigError> {
    ensure(paths.len() <= MAX_PATHS, "path", || {
        format!("{} paths: at most {MAX_PATHS}", paths.len())
    })?;
    for (i, p) in paths.iter().enumerate() {
        ensure(p.sids.len() <= MAX_PATH_SIDS, "path", || {
            format!("path {i}: at most {MAX_PATH_SIDS} middle SIDs")
        })?;
        ensure(
            p.sids
                .iter()
                .all(|s| Some(*s) != enc_sid && Some(*s) != dec_sid),
            "path",
            || format!("path {i}: the encoder and decoder SIDs are not middle SIDs"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_flag_syntax() {
        let p: Srv6PathConfig = "sids=fc00:b::1+fc00:c::1".parse().unwrap();
        let (b, c, d): (Ipv6Addr, Ipv6Addr, Ipv6Addr) = (
            "fc00:b::1".parse().unwrap(),
            "fc00:c::1".parse().unwrap(),
            "fc00:d::1".parse().unwrap(),
        );
        assert_eq!(p.sids, vec![b, c]);
        assert_eq!(p.internal_segments(d), vec![d, c, b]);
        assert_eq!(p.wire_sids(), vec![c, b]);
        assert_eq!(p.describe(d), "fc00:b::1 > fc00:c::1 > fc00:d::1");
        assert_eq!(
            "direct".parse::<Srv6PathConfig>().unwrap(),
            Srv6PathConfig::default()
        );
        assert!("fc00:b::1"
            .parse::<Srv6PathConfig>()
            .unwrap_err()
            .contains("expected sids="));
        assert!("sids=fc00:b::1+nope"
            .parse::<Srv6PathConfig>()
            .unwrap_err()
            .contains("not an IPv6"));
    }
}
