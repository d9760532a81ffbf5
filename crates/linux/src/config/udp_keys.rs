//! The keys and handshake timers of [`UdpConfig`]: which key source is configured (checked by
//! `validate()` without reading secrets), and loading them at start.

use std::time::Duration;

use super::{ensure, ConfigError, UdpConfig, UdpRole};
use crate::udp::handshake::HandshakeConfig;
use crate::udp::keys::{self, StaticKeys};

/// Where the static keys come from.
enum KeySource {
    /// `insecure`: publicly known keys.
    WellKnown,
    /// A passphrase (file or environment).
    Passphrase,
    /// Our private key (file or environment) and the peer's public key.
    KeyPair,
}

impl UdpConfig {
    fn key_source(&self) -> Result<KeySource, ConfigError> {
        let env = |v: &str| std::env::var_os(v).is_some();
        let passphrase = self.passphrase_file.is_some() || env(keys::ENV_PASSPHRASE);
        let private = self.private_key_file.is_some() || env(keys::ENV_PRIVATE_KEY);
        match (self.insecure, passphrase, private) {
            (true, false, false) => Ok(KeySource::WellKnown),
            (true, _, _) => Err(ConfigError::new(
                "insecure",
                "runs with publicly known keys: give no key with it",
            )),
            (false, true, true) => Err(ConfigError::new(
                "passphrase-file",
                "give a passphrase or a private key, not both",
            )),
            (false, true, false) => Ok(KeySource::Passphrase),
            (false, false, true) => {
                ensure(self.peer_public_key.is_some(), "peer-public-key", || {
                    "required with a private key (the other end's `hirt pubkey`)".into()
                })?;
                Ok(KeySource::KeyPair)
            }
            (false, false, false) => Err(ConfigError::new(
                "private-key-file",
                format!(
                    "required (with peer-public-key), or passphrase-file, or the environment \
                     variable {} or {}; `insecure` runs with publicly known keys",
                    keys::ENV_PRIVATE_KEY,
                    keys::ENV_PASSPHRASE
                ),
            )),
        }
    }

    /// Checks that one key source is configured and the timers are sane (reads no secret).
    pub(super) fn check_keys(&self) -> Result<(), ConfigError> {
        self.key_source()?;
        if let Some(p) = &self.peer_public_key {
            keys::decode_public(p, "peer-public-key")
                .map_err(|e| ConfigError::new("peer-public-key", e.to_string()))?;
        }
        ensure(
            self.rekey_after_s.is_finite() && self.rekey_after_s >= 1.0,
            "rekey-after-s",
            || format!("{}: must be at least 1", self.rekey_after_s),
        )?;
        ensure(self.rekey_after_packets >= 1, "rekey-after-packets", || {
            "must be at least 1".into()
        })?;
        Ok(())
    }

    /// Reads (or derives) the static keys: key files are refused unless only their owner may
    /// read them.
    pub fn static_keys(&self) -> Result<StaticKeys, ConfigError> {
        let server = self.role()? == UdpRole::Server;
        match self.key_source()? {
            KeySource::WellKnown => Ok(StaticKeys::well_known(b"insecure", server)),
            KeySource::Passphrase => {
                let p = keys::load_passphrase(self.passphrase_file.as_deref())
                    .map_err(|e| ConfigError::new("passphrase-file", e.to_string()))?
                    .ok_or_else(|| ConfigError::new("passphrase-file", "no passphrase"))?;
                Ok(StaticKeys::from_passphrase(&p, server))
            }
            KeySource::KeyPair => {
                let private =
                    keys::load_key(self.private_key_file.as_deref(), keys::ENV_PRIVATE_KEY)
                        .map_err(|e| ConfigError::new("private-key-file", e.to_string()))?
                        .ok_or_else(|| ConfigError::new("private-key-file", "no private key"))?;
                let peer = self.peer_public_key.as_deref().unwrap_or_default();
                let peer_public = keys::decode_public(peer, "peer-public-key")
                    .map_err(|e| ConfigError::new("peer-public-key", e.to_string()))?;
                let psk =
                    keys::load_key(self.preshared_key_file.as_deref(), keys::ENV_PRESHARED_KEY)
                        .map_err(|e| ConfigError::new("preshared-key-file", e.to_string()))?
                        .unwrap_or_default();
                Ok(StaticKeys::new(private, peer_public, psk))
            }
        }
    }

    /// Rekey timers: the configured ones; a client that heard nothing authenticated for three
    /// keepalive intervals starts a new handshake (the server restarted).
    pub fn handshake(&self) -> HandshakeConfig {
        let keepalive = Duration::from_millis(self.keepalive_ms);
        HandshakeConfig {
            rekey_after: Duration::from_secs_f64(self.rekey_after_s.max(1.0)),
            rekey_packets: self.rekey_after_packets.max(1),
            dead_after: (keepalive * 3).max(Duration::from_millis(300)),
            ..HandshakeConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> UdpConfig {
        UdpConfig {
            role: Some(UdpRole::Client),
            remote: Some("192.0.2.1:4096".into()),
            ..Default::default()
        }
    }

    #[test]
    fn keys_load_from_files_only_when_private() {
        let dir = std::env::temp_dir().join(format!("hirt-udp-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let private = dir.join("client.key");
        let k = keys::generate_private();
        keys::write_secret_file(&private, &keys::encode(&k)).unwrap();
        let peer = keys::encode(&keys::public_key(&keys::generate_private()));
        let c = UdpConfig {
            private_key_file: Some(private.clone()),
            peer_public_key: Some(peer),
            ..client()
        };
        c.validate().unwrap();
        let loaded = c.static_keys().unwrap();
        assert_eq!(*loaded.private, *k);
        assert_eq!(*loaded.psk, [0u8; 32], "no pre-shared key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = c.static_keys().unwrap_err().to_string();
        assert!(
            e.contains("private-key-file") && e.contains("chmod 600"),
            "{e}"
        );
        let no_peer = UdpConfig {
            peer_public_key: None,
            ..c.clone()
        };
        assert!(no_peer
            .validate()
            .unwrap_err()
            .to_string()
            .contains("peer-public-key"));
        let both = UdpConfig {
            passphrase_file: Some(private.clone()),
            ..c.clone()
        };
        assert!(both
            .validate()
            .unwrap_err()
            .to_string()
            .contains("not both"));
        let bad = UdpConfig {
            peer_public_key: Some("short".into()),
            ..c
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("peer-public-key"));
        // Passphrase mode: both ends derive each other's keys from one private file.
        let pass = dir.join("passphrase");
        keys::write_secret_file(&pass, "correct horse battery staple\n").unwrap();
        let end = |role| UdpConfig {
            role: Some(role),
            passphrase_file: Some(pass.clone()),
            ..client()
        };
        let (c, s) = (end(UdpRole::Client), end(UdpRole::Server));
        c.validate().unwrap();
        let (ck, sk) = (c.static_keys().unwrap(), s.static_keys().unwrap());
        assert_eq!(ck.peer_public, sk.public());
        assert_eq!(sk.peer_public, ck.public());
        std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = c.static_keys().unwrap_err().to_string();
        assert!(
            e.contains("passphrase-file") && e.contains("chmod 600"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
