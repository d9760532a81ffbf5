//! The paths of a UDP-mode client: one (local address or interface, remote address) pair per
//! underlay path, e.g. a Starlink and an LTE uplink (`[[path]]` tables, flag `--path`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;

use serde::Deserialize;

use super::{ensure, ConfigError};

/// Most paths of one tunnel (one socket each at the client).
pub const MAX_PATHS: usize = 16;

/// One path of a UDP-mode client. Its id is its position in the list (0, 1, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct UdpPathConfig {
    /// Local address to send from, `IP` or `IP:PORT` (any address and port when unset).
    pub local: Option<String>,
    /// Interface to send through (`SO_BINDTODEVICE`), e.g. the LTE modem's.
    pub dev: Option<String>,
    /// The server's address on this path (the tunnel's `remote` when unset).
    pub remote: Option<String>,
}

impl FromStr for UdpPathConfig {
    type Err = String;

    /// `dev=IF,local=IP[:PORT],remote=HOST:PORT`, every key optional, in any order.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut p = UdpPathConfig::default();
        for kv in s.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("`{kv}`: expected KEY=VALUE (keys: dev, local, remote)"))?;
            let slot = match k.trim() {
                "dev" => &mut p.dev,
                "local" => &mut p.local,
                "remote" => &mut p.remote,
                other => return Err(format!("unknown path key `{other}` (dev, local, remote)")),
            };
            if slot.is_some() {
                return Err(format!("path key `{k}` given twice"));
            }
            *slot = Some(v.trim().to_string());
        }
        Ok(p)
    }
}

/// A path with its addresses resolved: what the client binds its socket of this path to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Address the path's socket binds.
    pub bind: SocketAddr,
    /// Interface the socket is bound to.
    pub dev: Option<String>,
    /// The server's address on this path.
    pub remote: SocketAddr,
}

fn resolve(what: &str, s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .map_err(|e| format!("{what} `{s}`: {e}"))?
        .next()
        .ok_or_else(|| format!("{what} `{s}` does not resolve"))
}

impl UdpPathConfig {
    /// The path's bind address, interface and server address; `default_remote` is the tunnel's
    /// `remote`.
    pub fn resolve(&self, default_remote: Option<&str>) -> Result<ResolvedPath, String> {
        let remote = match (self.remote.as_deref(), default_remote) {
            (Some(r), _) | (None, Some(r)) => resolve("remote", r)?,
            (None, None) => return Err("no remote= and no tunnel remote (-r)".into()),
        };
        let bind = match self.local.as_deref() {
            None if remote.is_ipv4() => SocketAddr::from(([0, 0, 0, 0], 0)),
            None => SocketAddr::from(([0u16; 8], 0)),
            Some(l) => match l.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, 0),
                Err(_) => resolve("local", l)?,
            },
        };
        if bind.is_ipv4() != remote.is_ipv4() {
            return Err(format!(
                "local {bind} and remote {remote} are of different address families"
            ));
        }
        if let Some(d) = &self.dev {
            if d.is_empty() || d.len() > 15 {
                return Err(format!("dev `{d}`: a device name has 1 to 15 bytes"));
            }
        }
        Ok(ResolvedPath {
            bind,
            dev: self.dev.clone(),
            remote,
        })
    }
}

/// Checks a client's path list: 1..=[`MAX_PATHS`] paths that resolve.
pub(super) fn check_paths(
    paths: &[UdpPathConfig],
    remote: Option<&str>,
) -> Result<(), ConfigError> {
    ensure(paths.len() <= MAX_PATHS, "path", || {
        format!("{} paths: at most {MAX_PATHS}", paths.len())
    })?;
    for (i, p) in paths.iter().enumerate() {
        p.resolve(remote)
            .map_err(|e| ConfigError::new("path", format!("path {i}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_flag_syntax() {
        let p: UdpPathConfig = "dev=eth1, local=10.0.1.2,remote=192.0.2.1:4096"
            .parse()
            .unwrap();
        assert_eq!(p.dev.as_deref(), Some("eth1"));
        assert_eq!(p.local.as_deref(), Some("10.0.1.2"));
        assert_eq!(p.remote.as_deref(), Some("192.0.2.1:4096"));
        let r = p.resolve(None).unwrap();
        assert_eq!(r.bind, "10.0.1.2:0".parse().unwrap());
        assert_eq!(r.remote, "192.0.2.1:4096".parse().unwrap());
        let p: UdpPathConfig = "dev=wwan0".parse().unwrap();
        let r = p.resolve(Some("192.0.2.9:1")).unwrap();
        assert_eq!(r.bind, "0.0.0.0:0".parse().unwrap());
        assert_eq!(r.remote, "192.0.2.9:1".parse().unwrap());
        assert!(p.resolve(None).unwrap_err().contains("no remote"));
        assert!("via=eth0"
            .parse::<UdpPathConfig>()
            .unwrap_err()
            .contains("unknown"));
        assert!("dev"
            .parse::<UdpPathConfig>()
            .unwrap_err()
            .contains("KEY=VALUE"));
        assert!("dev=a,dev=b"
            .parse::<UdpPathConfig>()
            .unwrap_err()
            .contains("twice"));
        let mixed: UdpPathConfig = "local=::1,remote=192.0.2.1:1".parse().unwrap();
        assert!(mixed.resolve(None).unwrap_err().contains("families"));
        let long: UdpPathConfig = "dev=abcdefghijklmnop".parse().unwrap();
        assert!(long.resolve(Some("192.0.2.1:1")).is_err());
    }
}
