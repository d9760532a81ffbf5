//! Static keys of UDP mode: X25519 key pairs (base64, like WireGuard's `wg genkey`), an
//! optional pre-shared key, and a passphrase mode that derives both key pairs and the
//! pre-shared key through Argon2id. Secrets are read from files that only their owner may read,
//! or from environment variables; never from the command line (`/proc/PID/cmdline` and shell
//! history are readable by other users).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};
use zeroize::Zeroizing;

/// Bytes of a private, public or pre-shared key.
pub const KEY_LEN: usize = 32;

/// A 32-byte secret wiped from memory when dropped.
pub type Secret = Zeroizing<[u8; KEY_LEN]>;

/// Environment variable holding our private key (base64), read when no file is configured.
pub const ENV_PRIVATE_KEY: &str = "HIRT_PRIVATE_KEY";
/// Environment variable holding the pre-shared key (base64).
pub const ENV_PRESHARED_KEY: &str = "HIRT_PRESHARED_KEY";
/// Environment variable holding the passphrase of passphrase mode.
pub const ENV_PASSPHRASE: &str = "HIRT_PASSPHRASE";

/// Why a key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Group or others may read (or write) the file.
    #[error(
        "{path}: mode {mode:04o} lets other users read the key; run `chmod 600 {path}` \
         (hirt refuses keys that group or others can read)"
    )]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Not 32 bytes of base64.
    #[error("{what}: not a base64-encoded 32-byte key")]
    Malformed {
        /// The file or variable.
        what: String,
    },
    /// An empty passphrase.
    #[error("{what}: the passphrase is empty")]
    EmptyPassphrase {
        /// The file or variable.
        what: String,
    },
}

/// What a peer needs for the handshake: our private key, the peer's public key, the
/// pre-shared key (all zero when none is configured, as in WireGuard).
#[derive(Clone)]
pub struct StaticKeys {
    /// Our X25519 private key.
    pub private: Secret,
    /// The peer's X25519 public key.
    pub peer_public: [u8; KEY_LEN],
    /// The pre-shared key mixed into the handshake (IKpsk2).
    pub psk: Secret,
    /// Our public key, derived from `private` once: every handshake state needs it (its mac1
    /// key), and the scalar multiplication costs as much as a Diffie-Hellman.
    pub(crate) public: [u8; KEY_LEN],
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("public", &encode(&self.public()))
            .field("peer_public", &encode(&self.peer_public))
            .finish_non_exhaustive()
    }
}

impl StaticKeys {
    /// Our key pair from its private half, with the peer's public key and the pre-shared key.
    pub fn new(private: Secret, peer_public: [u8; KEY_LEN], psk: Secret) -> StaticKeys {
        StaticKeys {
            public: public_key(&private),
            private,
            peer_public,
            psk,
        }
    }

    /// Our public key.
    pub fn public(&self) -> [u8; KEY_LEN] {
        self.public
    }

    /// Both ends' keys derived from `passphrase` through Argon2id (64 MiB, 3 passes): the
    /// server's and the client's key pairs and the pre-shared key. `server` picks which pair
    /// is ours. The memory-hard KDF makes every guess of an offline attacker who recorded a
    /// handshake cost as much as one start of hirt.
    pub fn from_passphrase(passphrase: &[u8], server: bool) -> StaticKeys {
        let params = argon2::Params::new(64 * 1024, 3, 1, Some(3 * KEY_LEN))
            .expect("constant Argon2 parameters are valid");
        let kdf = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut okm = Zeroizing::new([0u8; 3 * KEY_LEN]);
        kdf.hash_password_into(passphrase, b"hirt-udp-passphrase-v2", &mut *okm)
            .expect("96 bytes of output and a 22-byte salt are within Argon2's limits");
        Self::from_material(&okm, server)
    }

    /// Fixed, publicly known keys: `--insecure` (anyone can inject packets) and tests that
    /// name a label instead of generating keys. Not for use on a network.
    pub fn well_known(label: &[u8], server: bool) -> StaticKeys {
        use sha2::Digest;
        let mut okm = Zeroizing::new([0u8; 3 * KEY_LEN]);
        for (i, part) in okm.chunks_mut(KEY_LEN).enumerate() {
            let mut h = sha2::Sha256::new();
            h.update(b"hirt-udp-well-known");
            h.update([i as u8]);
            h.update(label);
            part.copy_from_slice(&h.finalize());
        }
        Self::from_material(&okm, server)
    }

    fn from_material(okm: &[u8; 3 * KEY_LEN], server: bool) -> StaticKeys {
        let key = |i: usize| -> Secret {
            let mut k = Zeroizing::new([0u8; KEY_LEN]);
            k.copy_from_slice(&okm[i * KEY_LEN..(i + 1) * KEY_LEN]);
            k
        };
        let (server_private, client_private) = (key(0), key(1));
        let (ours, theirs) = if server {
            (server_private, client_private)
        } else {
            (client_private, server_private)
        };
        StaticKeys::new(ours, public_key(&theirs), key(2))
    }
}

/// The X25519 public key of `private`.
pub fn public_key(private: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    let mut dh = DefaultResolver
        .resolve_dh(&DHChoice::Curve25519)
        .expect("the default resolver has Curve25519");
    dh.set(private);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(dh.pubkey());
    out
}

/// A new random private key (from the operating system's generator).
pub fn generate_private() -> Secret {
    let mut dh = DefaultResolver
        .resolve_dh(&DHChoice::Curve25519)
        .expect("the default resolver has Curve25519");
    let mut rng = DefaultResolver
        .resolve_rng()
        .expect("the default resolver has an RNG");
    dh.generate(&mut *rng)
        .expect("the operating system's random generator works");
    let mut k = Zeroizing::new([0u8; KEY_LEN]);
    k.copy_from_slice(dh.privkey());
    k
}

/// Base64 of a key.
pub fn encode(key: &[u8; KEY_LEN]) -> String {
    BASE64.encode(key)
}

/// A base64 key (surrounding white space ignored); `what` names it in the error.
pub fn decode(text: &str, what: &str) -> Result<Secret, KeyError> {
    let malformed = || KeyError::Malformed { what: what.into() };
    let bytes = Zeroizing::new(BASE64.decode(text.trim()).map_err(|_| malformed())?);
    let mut k = Zeroizing::new([0u8; KEY_LEN]);
    if bytes.len() != KEY_LEN {
        return Err(malformed());
    }
    k.copy_from_slice(&bytes);
    Ok(k)
}

/// A public key given as base64 (not a secret: it may come from the command line).
pub fn decode_public(text: &str, what: &str) -> Result<[u8; KEY_LEN], KeyError> {
    Ok(*decode(text, what)?)
}

/// The contents of a secret file, refused unless only its owner may read or write it.
pub fn read_secret_file(path: &Path) -> Result<Zeroizing<String>, KeyError> {
    let shown = path.display().to_string();
    let io = |source| KeyError::Io {
        path: shown.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions { path: shown, mode });
    }
    std::fs::read_to_string(path)
        .map(Zeroizing::new)
        .map_err(io)
}

/// A base64 key from `file`, else from the environment variable `env`; `None` when neither
/// is set.
pub fn load_key(file: Option<&Path>, env: &str) -> Result<Option<Secret>, KeyError> {
    if let Some(f) = file {
        let text = read_secret_file(f)?;
        return decode(&text, &f.display().to_string()).map(Some);
    }
    match std::env::var(env) {
        Ok(v) => {
            let v = Zeroizing::new(v);
            decode(&v, env).map(Some)
        }
        Err(_) => Ok(None),
    }
}

/// A passphrase from `file` (its first line), else from the environment variable
/// [`ENV_PASSPHRASE`]; `None` when neither is set.
pub fn load_passphrase(file: Option<&Path>) -> Result<Option<Zeroizing<Vec<u8>>>, KeyError> {
    let (text, what) = match file {
        Some(f) => (read_secret_file(f)?, f.display().to_string()),
        None => match std::env::var(ENV_PASSPHRASE) {
            Ok(v) => (Zeroizing::new(v), ENV_PASSPHRASE.to_string()),
            Err(_) => return Ok(None),
        },
    };
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        return Err(KeyError::EmptyPassphrase { what });
    }
    Ok(Some(Zeroizing::new(line.as_bytes().to_vec())))
}

/// Writes `text` to a new file that only its owner may read (mode 0600), for tests and tools
/// that create key files.
pub fn write_secret_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())
}

/// Generates a private key into a new file at `path` (mode 0600) and returns its public key in
/// base64: what `umask 077; hirt genkey > path; hirt pubkey < path` does, for the lab, the
/// benches and tests.
pub fn write_new_private_key(path: &Path) -> std::io::Result<String> {
    let k = generate_private();
    write_secret_file(path, &encode(&k))?;
    Ok(encode(&public_key(&k)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_base64_and_match_rfc7748() {
        // RFC 7748 section 6.1: Alice's private and public key.
        let hex = |s: &str| -> [u8; 32] {
            std::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        };
        let private = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(public_key(&private), public);
        let text = encode(&private);
        assert_eq!(*decode(&format!(" {text}\n"), "t").unwrap(), private);
        assert!(decode("AAAA", "t").is_err());
        assert!(decode("not base64!", "t").is_err());
        let a = generate_private();
        let b = generate_private();
        assert_ne!(*a, *b);
    }

    #[test]
    fn key_files_readable_by_others_are_refused() {
        let dir = std::env::temp_dir().join(format!("hirt-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("private");
        let key = generate_private();
        write_secret_file(&path, &encode(&key)).unwrap();
        let got = load_key(Some(&path), "HIRT_TEST_UNSET").unwrap().unwrap();
        assert_eq!(*got, *key);
        for mode in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = load_key(Some(&path), "HIRT_TEST_UNSET").unwrap_err();
            assert!(matches!(e, KeyError::Permissions { .. }), "{mode:o}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        assert!(load_key(None, "HIRT_TEST_UNSET_VARIABLE")
            .unwrap()
            .is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn both_ends_derive_matching_keys() {
        for (s, c) in [
            (
                StaticKeys::well_known(b"x", true),
                StaticKeys::well_known(b"x", false),
            ),
            (
                StaticKeys::from_passphrase(b"correct horse", true),
                StaticKeys::from_passphrase(b"correct horse", false),
            ),
        ] {
            assert_eq!(s.peer_public, c.public());
            assert_eq!(c.peer_public, s.public());
            assert_eq!(*s.psk, *c.psk);
            assert_ne!(*s.private, *c.private);
        }
        let other = StaticKeys::from_passphrase(b"battery staple", true);
        assert_ne!(
            other.public(),
            StaticKeys::from_passphrase(b"correct horse", true).public()
        );
    }
}
