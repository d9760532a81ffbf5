//! The configuration of a dataplane instance, as data: [`Srv6Config`] (`hirt srv6`) and
//! [`UdpConfig`] (`hirt udp`).
//!
//! Both deserialize from TOML with keys spelled like the command-line flags (`enc-sid`,
//! `repair-delay-ms`; see `examples/hirt-srv6.toml` and `examples/hirt-udp.toml`), and both are
//! checked once by `validate()`, whose errors name the key at fault. The command line (crate
//! `hirt-cli`) maps its flags onto these types; the runtimes ([`crate::srv6_run::start`],
//! [`crate::udp::start`]) take them and call `validate()` themselves.

use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use hirt_core::FecMode;
use hirt_wire::tlv::TlvTypes;
use serde::Deserialize;

pub use coder::CoderSettings;

mod coder;
mod srv6_paths;
mod udp_keys;
mod udp_paths;

pub use srv6_paths::{Srv6PathConfig, MAX_PATH_SIDS};
pub use udp_paths::{ResolvedPath, UdpPathConfig, MAX_PATHS};

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// The key (TOML key and long flag name) at fault.
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key,
            message: message.into(),
        }
    }
}

/// Fails with `message` about `key` unless `ok`.
fn ensure(
    ok: bool,
    key: &'static str,
    message: impl FnOnce() -> String,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(key, message()))
    }
}

/// Most worker threads an instance runs (the UDP AEAD counter names the sender in 6 bits).
pub const MAX_THREADS: usize = 64;

/// Reads a TOML file into `T`.
pub fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path:?}"))?;
    toml::from_str(&text).with_context(|| format!("parsing {path:?}"))
}

fn default_window() -> u16 {
    hirt_core::DEFAULT_WINDOW
}
fn default_fec() -> String {
    "ours".into()
}
fn default_threads() -> usize {
    1
}
/// The recovery deadline of UDP mode: loss-triggered repair wherever the path leaves time for
/// it (see `hirt_core::Deadline::Auto`).
fn default_deadline() -> Option<String> {
    Some("auto".into())
}

fn default_repair_delay_ms() -> f64 {
    hirt_core::DEFAULT_REPAIR_DELAY.as_secs_f64() * 1e3
}
fn default_repair_retries() -> u8 {
    hirt_core::DEFAULT_REPAIR_RETRIES
}
fn default_overload_threshold() -> f64 {
    hirt_core::DEFAULT_OVERLOAD_THRESHOLD
}

/// The FEC mode of `fec` (or a pinned Reed-Solomon `rs = "k:m"`) with default window `window`.
fn fec_mode(fec: &str, rs: Option<&str>, window: u16) -> Result<FecMode, ConfigError> {
    let (key, s) = match rs {
        Some(km) => ("rs", format!("rs:{km}")),
        None => ("fec", fec.to_string()),
    };
    ensure(window > 0, "window", || "must be above 0".into())?;
    FecMode::parse_with_window(&s, window).map_err(|e| ConfigError::new(key, format!("`{s}`: {e}")))
}

fn check_threads(threads: usize) -> Result<(), ConfigError> {
    ensure((1..=MAX_THREADS).contains(&threads), "threads", || {
        format!("{threads}: must be within 1..={MAX_THREADS}")
    })
}

fn check_dscp(dscp: u8) -> Result<(), ConfigError> {
    ensure(dscp <= 63, "repair-dscp", || {
        format!("{dscp}: a DSCP is within 0..=63")
    })
}

/// Parses a key given as `0x<hex>` or as plain bytes.
pub fn parse_key(s: &str) -> Result<Vec<u8>, String> {
    match s.strip_prefix("0x") {
        Some(h) if h.len() % 2 != 0 => Err("odd-length hex key".into()),
        Some(h) => (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|e| format!("bad hex key: {e}")))
            .collect(),
        None => Ok(s.as_bytes().to_vec()),
    }
}

/// What the decoder SID does with a decoded packet (in configuration: `dt6`, `dx6:NEXTHOP`,
/// `end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Behavior {
    /// Decapsulate and route the inner packet (in the table given to the runtime).
    Dt6,
    /// Decapsulate and send the inner packet to a fixed next hop.
    Dx6(Ipv6Addr),
    /// Go to the next segment (SL = 0: decapsulate and route, see module docs).
    End,
}

impl TryFrom<String> for Behavior {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::str::FromStr for Behavior {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dt6" | "End.DT6" => Ok(Behavior::Dt6),
            "end" | "End" => Ok(Behavior::End),
            _ => match s
                .strip_prefix("dx6:")
                .or_else(|| s.strip_prefix("End.DX6:"))
            {
                Some(nh) => nh
                    .parse()
                    .map(Behavior::Dx6)
                    .map_err(|e| format!("next hop: {e}")),
                None => Err(format!("unknown behavior `{s}` (dt6, dx6:NEXTHOP, end)")),
            },
        }
    }
}

/// Key for the auth TLV on repair and feedback packets (and, with `sources`, source packets).
#[derive(Clone, Debug)]
pub struct AuthKey {
    /// Key id carried in the TLV.
    pub key_id: u32,
    /// The secret.
    pub key: Vec<u8>,
    /// Also add a real RFC 8754 HMAC TLV (H flag) to repair and feedback packets.
    pub rfc8754: bool,
    /// Authenticate source packets too (`--auth-sources`): the encoder adds the auth TLV to
    /// every source packet, the decoder drops and counts sources without a valid, fresh one
    /// (and unprotected packets to its SID), so nothing forged is delivered from the tunnel.
    /// Sources get hirt's auth TLV only, never the RFC 8754 HMAC TLV: that one would make
    /// every Linux SID on the path check it, and the ingress may already have added its own.
    pub sources: bool,
}

/// An enum configured by keyword: serde, `FromStr` and [`as_str`](Srv6Role::as_str) use the
/// same names.
macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
        #[serde(try_from = "String")]
        pub enum $name {
            $($(#[$vm])* $v),+
        }

        impl $name {
            /// The keyword.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(format!("must be one of {}, not `{s}`", [$($s),+].join(", "))),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }
    };
}

keyword_enum!(
    /// Which SIDs an SRv6 instance owns.
    #[derive(Default)]
    Srv6Role {
        /// The encoder SID only.
        Encoder = "encoder",
        /// The decoder SID only.
        Decoder = "decoder",
        /// Both ends of a tunnel in one process.
        #[default]
        Both = "both",
    }
);

impl Srv6Role {
    /// Whether the instance runs the encoder.
    pub fn encodes(self) -> bool {
        self != Srv6Role::Decoder
    }

    /// Whether the instance runs the decoder.
    pub fn decodes(self) -> bool {
        self != Srv6Role::Encoder
    }
}

keyword_enum!(
    /// How the `--xdp` program is attached.
    #[derive(Default)]
    XdpMode {
        /// Native, generic if the driver refuses.
        #[default]
        Auto = "auto",
        /// Native (driver) mode only.
        Native = "native",
        /// Generic (socket buffer) mode only.
        Generic = "generic",
    }
);

/// `hirt srv6`: the encoder and/or decoder SID of an SRv6 FEC tunnel. Field docs give the
/// default; `examples/hirt-srv6.toml` explains each key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Srv6Config {
    /// Which SIDs this instance owns (both).
    pub role: Srv6Role,
    /// The encoder SID (required): owned by an encoder, where a decoder sends feedback.
    pub enc_sid: Option<Ipv6Addr>,
    /// The decoder SID (required): owned by a decoder, where an encoder sends repairs.
    pub dec_sid: Option<Ipv6Addr>,
    /// What the decoder SID does after recovery (dt6).
    pub behavior: Behavior,
    /// Routing table for dt6 (main, 254) / the table hirt fills for dx6 (4869).
    pub table: Option<u32>,
    /// TUN device the SIDs are routed to (hirt0).
    pub dev: String,
    /// FEC mode (ours).
    pub fec: String,
    /// A pinned Reed-Solomon block code `k:m`, overriding `fec`.
    pub rs: Option<String>,
    /// Sliding window when `fec` gives none (200).
    pub window: u16,
    /// Worker threads / TUN queues / encoder streams (1).
    pub threads: usize,
    /// Key of the auth TLV on repair and feedback packets (`0x` hex, else the bytes).
    pub hmac_key: Option<String>,
    /// File whose first line is `hmac-key` (mode 0600), instead of the key itself.
    pub hmac_key_file: Option<PathBuf>,
    /// Key id carried in the auth TLV (1).
    pub key_id: u32,
    /// Also add an RFC 8754 HMAC TLV to repair and feedback packets.
    #[serde(rename = "rfc8754-hmac")]
    pub rfc8754_hmac: bool,
    /// Authenticate source packets too (needs `hmac-key`).
    pub auth_sources: bool,
    /// Time-driven repair delay in ms (5; 0 = off).
    pub repair_delay_ms: f64,
    /// Re-sends of a time-driven repair (1).
    pub repair_retries: u8,
    /// Gap between those re-sends in ms (the repair delay).
    pub repair_retry_gap_ms: Option<f64>,
    /// Worker load above which repairs and solving are randomly skipped (0.9; 1 = off).
    pub overload_threshold: f64,
    /// In-order release hold at the decoder in ms (0 = off).
    pub in_order_ms: f64,
    /// What a hole holds back under in-order release: `flow` (default: the flows suspected of
    /// a packet in it) or `stream` (every later packet).
    pub in_order_scope: Option<String>,
    /// Queue management for the path in ms (off by default): CoDel's target queueing delay,
    /// measured in the RTT; while the path's queue stays above it for 100 ms (or the base RTT),
    /// sources are dropped before coding, one at a time, so the flows carried slow down before
    /// the bottleneck's buffer overflows (`hirt_core::AqmConfig`; 5 is CoDel's target).
    pub aqm_target_ms: Option<f64>,
    /// Recovery deadline (`30ms`, `0.5s`, `2rtt`, `auto` = two RTTs and at least 10 ms, `off`;
    /// off by default in SRv6 mode: with `--kernel-sources` at 60 kpps and 3% loss, loss-triggered
    /// repair recovered 94% where the rate-driven controller recovers 99.9%): the `ours`
    /// controller sizes its window and repairs from it, and the decoder reports losses so the
    /// encoder repairs them on demand. Set it alike at both ends.
    pub deadline: Option<String>,
    /// Extra sources a repair may trail the newest by (0; 1024 with two or more `path`s, 2048
    /// with `kernel-sources`).
    pub repair_lag: Option<u32>,
    /// Do not install routes for the SIDs.
    pub no_routes: bool,
    /// On SIGINT/SIGTERM, how long to go on forwarding after closing the metrics endpoint (its
    /// watches end and its probes are refused, so `hirt health` moves the flows away) before
    /// stopping, in ms (100 with `metrics`, else 0).
    pub drain_ms: Option<u64>,
    /// Mark recovered packets ECN-CE (if ECN-capable).
    pub ecn_ce: bool,
    /// DSCP of repair and feedback packets (0).
    pub repair_dscp: u8,
    /// TLV type values `source,repair,feedback,auth` (124,125,126,252).
    pub tlv_types: Option<String>,
    /// Serve Prometheus metrics on this address.
    pub metrics: Option<SocketAddr>,
    /// Control socket for `hirt status` (`/run/hirt-<dev>.sock`).
    pub control: Option<PathBuf>,
    /// MTU of the TUN device (9000).
    pub mtu: u32,
    /// Seed for the core's randomness (from the clock).
    pub seed: Option<u64>,
    /// AF_XDP fast path on these devices.
    pub xdp: Vec<String>,
    /// With `xdp`: sources never cross user space (see the CLI help).
    pub kernel_sources: bool,
    /// How the XDP program is attached (auto).
    pub xdp_mode: XdpMode,
    /// The tunnel's paths from the encoder SID to the decoder SID, one `[[path]]` table each
    /// (`--path`); empty: one path, the route the ingress's packets follow. Path ids are list
    /// positions. Set on the encoder (the decoder answers probes on whatever path they took).
    pub path: Vec<Srv6PathConfig>,
    /// How the paths are used: policy, probes, repair path (`[paths]`, docs/paths.md).
    pub paths: hirt_core::path::PathManagerConfig,
}

impl Srv6Config {
    /// [`Self::drain_ms`] with its default: 100 ms when a metrics endpoint is served (a health
    /// check can watch it), none otherwise.
    pub fn drain(&self) -> std::time::Duration {
        let default = if self.metrics.is_some() { 100 } else { 0 };
        std::time::Duration::from_millis(self.drain_ms.unwrap_or(default))
    }
}

impl Default for Srv6Config {
    fn default() -> Self {
        Srv6Config {
            role: Srv6Role::Both,
            enc_sid: None,
            dec_sid: None,
            behavior: Behavior::Dt6,
            table: None,
            dev: "hirt0".into(),
            fec: default_fec(),
            rs: None,
            window: default_window(),
            threads: default_threads(),
            hmac_key: None,
            hmac_key_file: None,
            key_id: 1,
            rfc8754_hmac: false,
            auth_sources: false,
            repair_delay_ms: default_repair_delay_ms(),
            repair_retries: default_repair_retries(),
            repair_retry_gap_ms: None,
            overload_threshold: default_overload_threshold(),
            in_order_ms: 0.0,
            in_order_scope: None,
            aqm_target_ms: None,
            deadline: None,
            repair_lag: None,
            no_routes: false,
            drain_ms: None,
            ecn_ce: false,
            repair_dscp: 0,
            tlv_types: None,
            metrics: None,
            control: None,
            mtu: 9000,
            seed: None,
            xdp: Vec::new(),
            kernel_sources: false,
            xdp_mode: XdpMode::Auto,
            path: Vec::new(),
            paths: hirt_core::path::PathManagerConfig::default(),
        }
    }
}

/// How many ESIs a repair may trail the decoder's newest source with `kernel-sources`: the
/// kernel delivers sources as they come and the decoder takes their copies from its ring
/// whenever it runs, while a repair waits for the encoder to read its own ring, code it and
/// send it. On a busy machine the two ends can be milliseconds apart: 2048 ESIs is ~20 ms at
/// 100 kpps. With W = 200 the decoder then keeps 4096 sources instead of 512.
pub const KERNEL_SOURCES_REPAIR_LAG: u32 = 2048;

pub use hirt_core::path::MULTIPATH_REPAIR_LAG;

/// The `repair-lag` setting, or `default`; at most `hirt_fec::rlc::MAX_REPAIR_LAG`.
fn repair_lag(setting: Option<u32>, default: u32) -> Result<u32, ConfigError> {
    let Some(lag) = setting else {
        return Ok(default);
    };
    let max = hirt_fec::rlc::MAX_REPAIR_LAG;
    ensure(lag <= max, "repair-lag", || format!("{lag}: at most {max}"))?;
    Ok(lag)
}

impl Srv6Config {
    /// Reads a TOML file (not yet validated).
    pub fn from_file(path: &Path) -> anyhow::Result<Srv6Config> {
        load_toml(path)
    }

    /// Checks every value; the error names the key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.enc_sid()?;
        self.dec_sid()?;
        self.fec_mode()?;
        check_threads(self.threads)?;
        check_dscp(self.repair_dscp)?;
        ensure(!self.dev.is_empty() && self.dev.len() < 16, "dev", || {
            format!("`{}`: a device name has 1 to 15 bytes", self.dev)
        })?;
        self.tlv()?;
        self.auth()?;
        self.coder()?;
        if self.kernel_sources {
            let k = "kernel-sources";
            ensure(self.role != Srv6Role::Both, k, || {
                "is for an encoder or a decoder (role encoder|decoder)".into()
            })?;
            ensure(!self.xdp.is_empty(), k, || "needs xdp devices".into())?;
            ensure(self.threads == 1, k, || "needs threads = 1".into())?;
            ensure(
                self.role.encodes() || self.behavior == Behavior::Dt6,
                k,
                || "on a decoder is the End.DT6 behaviour (behavior dt6)".into(),
            )?;
            ensure(!self.auth_sources && self.in_order_ms == 0.0, k, || {
                "forwards sources before hirt sees them: not with auth-sources or in-order-ms"
                    .into()
            })?;
        }
        self.paths
            .validate()
            .map_err(|e| ConfigError::new("paths", e.to_string()))?;
        srv6_paths::check_paths(&self.path, self.enc_sid, self.dec_sid)?;
        if self.path.len() > 1 {
            ensure(self.threads == 1, "path", || {
                format!(
                    "{} paths need threads = 1 (probe replies reach one worker)",
                    self.path.len()
                )
            })?;
            ensure(!self.kernel_sources, "path", || {
                "several paths are not for kernel-sources (the kernel forwards the sources)".into()
            })?;
        }
        Ok(())
    }

    /// The paths, one per segment list; without `path`, the single path of the route.
    pub fn paths_or_default(&self) -> Vec<Srv6PathConfig> {
        if self.path.is_empty() {
            vec![Srv6PathConfig::default()]
        } else {
            self.path.clone()
        }
    }

    /// The encoder SID.
    pub fn enc_sid(&self) -> Result<Ipv6Addr, ConfigError> {
        self.enc_sid
            .ok_or_else(|| ConfigError::new("enc-sid", "required"))
    }

    /// The decoder SID.
    pub fn dec_sid(&self) -> Result<Ipv6Addr, ConfigError> {
        self.dec_sid
            .ok_or_else(|| ConfigError::new("dec-sid", "required"))
    }

    /// The FEC mode (`rs` over `fec`).
    pub fn fec_mode(&self) -> Result<FecMode, ConfigError> {
        fec_mode(&self.fec, self.rs.as_deref(), self.window)
    }

    /// The TLV type values.
    pub fn tlv(&self) -> Result<TlvTypes, ConfigError> {
        let Some(t) = &self.tlv_types else {
            return Ok(TlvTypes::default());
        };
        let bad = || {
            ConfigError::new(
                "tlv-types",
                format!("`{t}`: want source,repair,feedback,auth (four numbers 0-255)"),
            )
        };
        let v: Vec<u8> = t
            .split(',')
            .map(|x| x.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [source, repair, feedback, auth] = v[..] else {
            return Err(bad());
        };
        Ok(TlvTypes {
            source,
            repair,
            feedback,
            auth,
        })
    }

    /// The authentication key, if any.
    pub fn auth(&self) -> Result<Option<AuthKey>, ConfigError> {
        let from_file = match (&self.hmac_key, &self.hmac_key_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "hmac-key-file",
                    "give hmac-key or hmac-key-file, not both",
                ))
            }
            (None, Some(f)) => Some(
                crate::udp::keys::read_secret_file(f)
                    .map_err(|e| ConfigError::new("hmac-key-file", e.to_string()))?,
            ),
            _ => None,
        };
        let (key, name) = match (&from_file, &self.hmac_key) {
            (Some(text), _) => (text.lines().next().map(str::trim), "hmac-key-file"),
            (None, k) => (k.as_deref(), "hmac-key"),
        };
        match key {
            Some(k) => Ok(Some(AuthKey {
                key_id: self.key_id,
                key: parse_key(k).map_err(|e| ConfigError::new(name, e))?,
                rfc8754: self.rfc8754_hmac,
                sources: self.auth_sources,
            })),
            None => {
                ensure(!self.auth_sources, "auth-sources", || {
                    "needs hmac-key".into()
                })?;
                Ok(None)
            }
        }
    }

    /// Repair timers, overload control, in-order release, recovery deadline and repair lag.
    pub fn coder(&self) -> Result<CoderSettings, ConfigError> {
        let mut c = CoderSettings::new(
            self.overload_threshold,
            self.repair_delay_ms,
            self.repair_retries,
            self.repair_retry_gap_ms,
            self.in_order_ms,
        )?
        .with_deadline(self.deadline.as_deref())?
        .with_in_order_scope(self.in_order_scope.as_deref())?
        .with_aqm(self.aqm_target_ms)?;
        let default = if self.kernel_sources {
            KERNEL_SOURCES_REPAIR_LAG
        } else if self.receives_over_paths() {
            MULTIPATH_REPAIR_LAG
        } else {
            0
        };
        c.repair_lag = repair_lag(self.repair_lag, default)?;
        // A decoder SID cannot see the segment lists its peer sends repairs over: it learns
        // how far they trail their sources, up to what a multi-path node keeps from the start.
        c.repair_lag_limit = c.repair_lag.max(MULTIPATH_REPAIR_LAG);
        Ok(c)
    }

    /// Whether this node's decoder is taken to receive over several paths: it sends over two
    /// or more segment lists itself, as the two ends of a tunnel do alike. A decoder SID
    /// cannot see its peer's segment lists, so a decoder-only node behind an encoder with
    /// several paths starts without the lag and grows it (`CoderSettings::repair_lag_limit`).
    pub fn receives_over_paths(&self) -> bool {
        self.path.len() >= 2
    }
}

keyword_enum!(
    /// Which end of a UDP tunnel.
    UdpRole {
        /// Listens; learns the client's address.
        Server = "server",
        /// Connects to a fixed server address.
        Client = "client",
    }
);

/// `hirt udp`: one end of a FEC tunnel over UDP. Field docs give the default;
/// `examples/hirt-udp.toml` explains each key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct UdpConfig {
    /// Server or client (required; flags `-s` / `-c`).
    pub role: Option<UdpRole>,
    /// Server: address to listen on (0.0.0.0:4096); client: local address to bind (any).
    pub listen: Option<String>,
    /// Client: the server's address (required).
    pub remote: Option<String>,
    /// File with our private key (base64, `hirt genkey`; mode 0600), else the environment
    /// variable `HIRT_PRIVATE_KEY`.
    pub private_key_file: Option<PathBuf>,
    /// The peer's public key (base64, `hirt pubkey`).
    pub peer_public_key: Option<String>,
    /// File with a pre-shared key mixed into the handshake (base64, mode 0600), else the
    /// environment variable `HIRT_PRESHARED_KEY`; none by default.
    pub preshared_key_file: Option<PathBuf>,
    /// File whose first line is a passphrase both ends share (mode 0600), else the environment
    /// variable `HIRT_PASSPHRASE`: both key pairs and the pre-shared key derive from it
    /// (Argon2id), instead of the three keys above.
    pub passphrase_file: Option<PathBuf>,
    /// Start a new session (fresh keys) after this many seconds (120).
    pub rekey_after_s: f64,
    /// Start a new session after this many datagrams from one worker (2^32).
    pub rekey_after_packets: u64,
    /// Authenticate only, do not encrypt.
    pub no_encrypt: bool,
    /// Run with publicly known keys (anyone can inject packets).
    pub insecure: bool,
    /// FEC mode (ours).
    pub fec: String,
    /// A pinned Reed-Solomon block code `k:m`, overriding `fec`.
    pub rs: Option<String>,
    /// Sliding window when `fec` gives none (200).
    pub window: u16,
    /// TUN device name (hirt-udp).
    pub dev: String,
    /// Our end of the tunnel, `address/prefix` (10.77.0.1/24 server, 10.77.0.2/24 client).
    pub tun_addr: Option<String>,
    /// Extra IPv6 address of our end, `address/prefix`.
    pub tun_addr6: Option<String>,
    /// TUN MTU (1400).
    pub mtu: u32,
    /// Do not clamp the TCP MSS of SYNs crossing the tunnel.
    pub no_mss_clamp: bool,
    /// Do not use TUN segmentation offloads.
    pub no_tun_offload: bool,
    /// Keepalive interval in ms (1000).
    pub keepalive_ms: u64,
    /// Worker threads (1).
    pub threads: usize,
    /// DSCP of repair, feedback and keepalive datagrams (0).
    pub repair_dscp: u8,
    /// Mark recovered packets ECN-CE (if ECN-capable).
    pub ecn_ce: bool,
    /// Serve Prometheus metrics on this address.
    pub metrics: Option<SocketAddr>,
    /// Control socket for `hirt status` (`/run/hirt-<dev>.sock`).
    pub control: Option<PathBuf>,
    /// Time-driven repair delay in ms (5; 0 = off).
    pub repair_delay_ms: f64,
    /// Re-sends of a time-driven repair (1).
    pub repair_retries: u8,
    /// Gap between those re-sends in ms (the repair delay).
    pub repair_retry_gap_ms: Option<f64>,
    /// Worker load above which repairs and solving are randomly skipped (0.9; 1 = off).
    pub overload_threshold: f64,
    /// In-order release hold at the decoder in ms (0 = off).
    pub in_order_ms: f64,
    /// What a hole holds back under in-order release: `flow` (default: the flows suspected of
    /// a packet in it) or `stream` (every later packet).
    pub in_order_scope: Option<String>,
    /// Queue management for the path in ms (off by default): CoDel's target queueing delay,
    /// measured in the RTT; while the path's queue stays above it for 100 ms (or the base RTT),
    /// sources are dropped before coding, one at a time, so the flows carried slow down before
    /// the bottleneck's buffer overflows (`hirt_core::AqmConfig`; 5 is CoDel's target).
    pub aqm_target_ms: Option<f64>,
    /// Recovery deadline (`30ms`, `0.5s`, `2rtt`, `auto` = two RTTs and at least 10 ms, `off`;
    /// `auto` by default): the `ours` controller sizes its window and repairs from it, and the
    /// decoder reports losses so the encoder repairs them on demand. Set it alike at both ends.
    pub deadline: Option<String>,
    /// Extra sources a repair may trail the newest by (0 on one path; 1024 where the decoder
    /// can receive over several paths: a server, or a client with two or more).
    pub repair_lag: Option<u32>,
    /// Seed for the core's randomness (from the clock).
    pub seed: Option<u64>,
    /// Client: the tunnel's paths, one `[[path]]` table each (`--path`); empty: one path
    /// from `listen` and `remote`. Path ids are list positions.
    pub path: Vec<UdpPathConfig>,
    /// How the paths are used: policy, probes, repair path (`[paths]`, docs/paths.md). A
    /// server uses it for the paths it learns from the client.
    pub paths: hirt_core::path::PathManagerConfig,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            role: None,
            listen: None,
            remote: None,
            private_key_file: None,
            peer_public_key: None,
            preshared_key_file: None,
            passphrase_file: None,
            rekey_after_s: 120.0,
            rekey_after_packets: 1 << 32,
            no_encrypt: false,
            insecure: false,
            fec: default_fec(),
            rs: None,
            window: default_window(),
            dev: "hirt-udp".into(),
            tun_addr: None,
            tun_addr6: None,
            mtu: 1400,
            no_mss_clamp: false,
            no_tun_offload: false,
            keepalive_ms: 1000,
            threads: default_threads(),
            repair_dscp: 0,
            ecn_ce: false,
            metrics: None,
            control: None,
            repair_delay_ms: default_repair_delay_ms(),
            repair_retries: default_repair_retries(),
            repair_retry_gap_ms: None,
            overload_threshold: default_overload_threshold(),
            in_order_ms: 0.0,
            in_order_scope: None,
            aqm_target_ms: None,
            deadline: default_deadline(),
            seed: None,
            repair_lag: None,
            path: Vec::new(),
            paths: hirt_core::path::PathManagerConfig::default(),
        }
    }
}

/// Parses `address/prefix`.
pub fn parse_cidr(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (a, p) = s.split_once('/').ok_or("address needs /prefix")?;
    let addr: std::net::IpAddr = a.parse().map_err(|e| format!("`{a}`: {e}"))?;
    let prefix: u8 = p.parse().map_err(|e| format!("prefix `{p}`: {e}"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(format!("prefix {prefix} is longer than {max}"));
    }
    Ok((addr, prefix))
}

impl UdpConfig {
    /// Reads a TOML file (not yet validated).
    pub fn from_file(path: &Path) -> anyhow::Result<UdpConfig> {
        load_toml(path)
    }

    /// Checks every value; the error names the key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let role = self.role()?;
        self.check_keys()?;
        if role == UdpRole::Client {
            let every_path_has_one =
                !self.path.is_empty() && self.path.iter().all(|p| p.remote.is_some());
            ensure(
                self.remote.is_some() || every_path_has_one,
                "remote",
                || "required on a client (-r SERVER:PORT, or remote= in every --path)".into(),
            )?;
        }
        self.fec_mode()?;
        check_threads(self.threads)?;
        check_dscp(self.repair_dscp)?;
        ensure(!self.dev.is_empty() && self.dev.len() < 16, "dev", || {
            format!("`{}`: a device name has 1 to 15 bytes", self.dev)
        })?;
        ensure((576..=65535).contains(&self.mtu), "mtu", || {
            format!("{}: must be within 576..=65535", self.mtu)
        })?;
        ensure(self.keepalive_ms >= 1, "keepalive-ms", || {
            "must be at least 1".into()
        })?;
        self.tun_addr(role)?;
        if let Some(a) = &self.tun_addr6 {
            parse_cidr(a).map_err(|e| ConfigError::new("tun-addr6", e))?;
        }
        self.coder()?;
        self.paths
            .validate()
            .map_err(|e| ConfigError::new("paths", e.to_string()))?;
        match role {
            UdpRole::Server => ensure(self.path.is_empty(), "path", || {
                "a server learns its paths from the client's datagrams; give paths on the client"
                    .into()
            })?,
            UdpRole::Client => {
                udp_paths::check_paths(&self.path, self.remote.as_deref())?;
                ensure(self.path.len() <= 1 || self.threads == 1, "path", || {
                    format!(
                        "{} paths need --threads 1 (path probes are counted per sending worker)",
                        self.path.len()
                    )
                })?;
            }
        }
        Ok(())
    }

    /// The client's paths, resolved: the `path` list, or one path from `listen` and `remote`.
    pub fn client_paths(&self) -> Result<Vec<ResolvedPath>, ConfigError> {
        if self.path.is_empty() {
            let implicit = UdpPathConfig {
                local: self.listen.clone(),
                dev: None,
                remote: None,
            };
            let r = implicit
                .resolve(self.remote.as_deref())
                .map_err(|e| ConfigError::new("remote", e))?;
            return Ok(vec![r]);
        }
        self.path
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.resolve(self.remote.as_deref())
                    .map_err(|e| ConfigError::new("path", format!("path {i}: {e}")))
            })
            .collect()
    }

    /// Server or client.
    pub fn role(&self) -> Result<UdpRole, ConfigError> {
        self.role
            .ok_or_else(|| ConfigError::new("role", "required: server (-s) or client (-c)"))
    }

    /// Our tunnel address (the role's default when unset).
    pub fn tun_addr(&self, role: UdpRole) -> Result<(std::net::IpAddr, u8), ConfigError> {
        let default = match role {
            UdpRole::Server => "10.77.0.1/24",
            UdpRole::Client => "10.77.0.2/24",
        };
        parse_cidr(self.tun_addr.as_deref().unwrap_or(default))
            .map_err(|e| ConfigError::new("tun-addr", e))
    }

    /// The FEC mode (`rs` over `fec`).
    pub fn fec_mode(&self) -> Result<FecMode, ConfigError> {
        fec_mode(&self.fec, self.rs.as_deref(), self.window)
    }

    /// Whether this end's decoder can receive over several paths: a server (it takes the
    /// paths its client brings) or a client with two or more.
    pub fn receives_over_paths(&self) -> bool {
        self.role == Some(UdpRole::Server) || self.path.len() >= 2
    }

    /// Repair timers, overload control, in-order release, recovery deadline and repair lag.
    pub fn coder(&self) -> Result<CoderSettings, ConfigError> {
        let mut c = CoderSettings::new(
            self.overload_threshold,
            self.repair_delay_ms,
            self.repair_retries,
            self.repair_retry_gap_ms,
            self.in_order_ms,
        )?
        .with_deadline(self.deadline.as_deref())?
        .with_in_order_scope(self.in_order_scope.as_deref())?
        .with_aqm(self.aqm_target_ms)?;
        let default = if self.receives_over_paths() {
            MULTIPATH_REPAIR_LAG
        } else {
            0
        };
        c.repair_lag = repair_lag(self.repair_lag, default)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srv6() -> Srv6Config {
        Srv6Config {
            enc_sid: Some("fc00::1".parse().unwrap()),
            dec_sid: Some("fc00::2".parse().unwrap()),
            ..Default::default()
        }
    }

    fn udp() -> UdpConfig {
        UdpConfig {
            role: Some(UdpRole::Client),
            remote: Some("192.0.2.1:4096".into()),
            insecure: true,
            ..Default::default()
        }
    }

    #[test]
    fn udp_mode_recovers_on_a_deadline_by_default_and_srv6_mode_does_not() {
        let c = udp().coder().unwrap();
        assert_eq!(c.deadline, Some(hirt_core::Deadline::Auto));
        assert!(srv6().coder().unwrap().deadline.is_none());
        let off = UdpConfig {
            deadline: Some("off".into()),
            ..udp()
        };
        assert!(off.coder().unwrap().deadline.is_none());
    }

    #[test]
    fn decoders_that_receive_over_several_paths_keep_a_repair_lag() {
        assert_eq!(
            udp().coder().unwrap().repair_lag,
            0,
            "a client with one path"
        );
        let two = UdpConfig {
            path: vec![
                "remote=192.0.2.1:4096".parse().unwrap(),
                "remote=192.0.2.2:4096".parse().unwrap(),
            ],
            ..udp()
        };
        assert_eq!(two.coder().unwrap().repair_lag, MULTIPATH_REPAIR_LAG);
        let server = UdpConfig {
            role: Some(UdpRole::Server),
            remote: None,
            ..udp()
        };
        assert_eq!(server.coder().unwrap().repair_lag, MULTIPATH_REPAIR_LAG);
        let set = UdpConfig {
            repair_lag: Some(7),
            ..server
        };
        assert_eq!(set.coder().unwrap().repair_lag, 7);
        let too_much = UdpConfig {
            repair_lag: Some(hirt_fec::rlc::MAX_REPAIR_LAG + 1),
            ..udp()
        };
        assert!(err(too_much.validate()).contains("repair-lag"));

        let one = srv6().coder().unwrap();
        assert_eq!(one.repair_lag, 0, "one segment list");
        assert_eq!(
            one.repair_lag_limit, MULTIPATH_REPAIR_LAG,
            "but it may learn one"
        );
        assert_eq!(
            udp().coder().unwrap().repair_lag_limit,
            0,
            "UDP peers know their paths"
        );
        let two = Srv6Config {
            path: vec!["direct".parse().unwrap(), "sids=fc00:7::1".parse().unwrap()],
            ..srv6()
        };
        assert_eq!(two.coder().unwrap().repair_lag, MULTIPATH_REPAIR_LAG);
        let set = Srv6Config {
            repair_lag: Some(0),
            ..two
        };
        assert_eq!(set.coder().unwrap().repair_lag, 0);
    }

    fn err(r: Result<(), ConfigError>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn good_configs_pass() {
        srv6().validate().unwrap();
        udp().validate().unwrap();
        let s = Srv6Config {
            role: Srv6Role::Encoder,
            fec: "fixed:w=32,step=4".into(),
            hmac_key: Some("0x0aff".into()),
            auth_sources: true,
            tlv_types: Some("1, 2,3,4".into()),
            ..srv6()
        };
        s.validate().unwrap();
        assert_eq!(s.auth().unwrap().unwrap().key, vec![0x0a, 0xff]);
        assert_eq!(s.tlv().unwrap().repair, 2);
        let k = Srv6Config {
            role: Srv6Role::Decoder,
            xdp: vec!["eth0".into()],
            kernel_sources: true,
            ..srv6()
        };
        k.validate().unwrap();
        assert_eq!(k.coder().unwrap().repair_lag, KERNEL_SOURCES_REPAIR_LAG);
        let u = UdpConfig {
            role: Some(UdpRole::Server),
            remote: None,
            insecure: true,
            rs: Some("20:10".into()),
            tun_addr6: Some("fd77::1/64".into()),
            ..udp()
        };
        u.validate().unwrap();
        assert_eq!(u.tun_addr(UdpRole::Server).unwrap().1, 24);
        assert_eq!(
            u.fec_mode().unwrap(),
            FecMode::parse_with_window("rs:20:10", 200).unwrap()
        );
    }

    #[test]
    fn bad_srv6_values_name_the_key() {
        let cases: Vec<(Srv6Config, &str)> = vec![
            (
                Srv6Config {
                    enc_sid: None,
                    ..srv6()
                },
                "enc-sid: required",
            ),
            (
                Srv6Config {
                    dec_sid: None,
                    ..srv6()
                },
                "dec-sid: required",
            ),
            (
                Srv6Config {
                    fec: "bogus".into(),
                    ..srv6()
                },
                "fec: `bogus`",
            ),
            (
                Srv6Config {
                    rs: Some("0:0".into()),
                    ..srv6()
                },
                "rs: `rs:0:0`",
            ),
            (
                Srv6Config {
                    threads: 0,
                    ..srv6()
                },
                "threads: 0: must be within 1..=64",
            ),
            (
                Srv6Config {
                    threads: 65,
                    ..srv6()
                },
                "threads: 65",
            ),
            (
                Srv6Config {
                    repair_dscp: 64,
                    ..srv6()
                },
                "repair-dscp: 64: a DSCP is within 0..=63",
            ),
            (
                Srv6Config {
                    dev: "a-very-long-device".into(),
                    ..srv6()
                },
                "dev: `a-very-long-device`",
            ),
            (
                Srv6Config {
                    tlv_types: Some("1,2,3".into()),
                    ..srv6()
                },
                "tlv-types: `1,2,3`",
            ),
            (
                Srv6Config {
                    tlv_types: Some("1,2,3,999".into()),
                    ..srv6()
                },
                "tlv-types",
            ),
            (
                Srv6Config {
                    hmac_key: Some("0xabc".into()),
                    ..srv6()
                },
                "hmac-key: odd-length hex key",
            ),
            (
                Srv6Config {
                    auth_sources: true,
                    ..srv6()
                },
                "auth-sources: needs hmac-key",
            ),
            (
                Srv6Config {
                    overload_threshold: 1.5,
                    ..srv6()
                },
                "overload-threshold: 1.5",
            ),
            (
                Srv6Config {
                    repair_delay_ms: -1.0,
                    ..srv6()
                },
                "repair-delay-ms: -1",
            ),
            (
                Srv6Config {
                    repair_retry_gap_ms: Some(0.0),
                    ..srv6()
                },
                "repair-retry-gap-ms: must be above 0",
            ),
            (
                Srv6Config {
                    in_order_ms: f64::NAN,
                    ..srv6()
                },
                "in-order-ms",
            ),
            (
                Srv6Config {
                    repair_lag: Some(1 << 20),
                    ..srv6()
                },
                "repair-lag: 1048576: at most",
            ),
            (
                Srv6Config {
                    kernel_sources: true,
                    ..srv6()
                },
                "kernel-sources: is for an encoder or a decoder",
            ),
            (
                Srv6Config {
                    kernel_sources: true,
                    role: Srv6Role::Encoder,
                    ..srv6()
                },
                "kernel-sources: needs xdp devices",
            ),
            (
                Srv6Config {
                    kernel_sources: true,
                    role: Srv6Role::Encoder,
                    xdp: vec!["e".into()],
                    in_order_ms: 30.0,
                    ..srv6()
                },
                "kernel-sources: forwards sources before hirt sees them",
            ),
        ];
        for (c, want) in cases {
            let e = err(c.validate());
            assert!(e.starts_with(want), "got `{e}`, want `{want}...`");
        }
    }

    #[test]
    fn bad_udp_values_name_the_key() {
        let cases: Vec<(UdpConfig, &str)> = vec![
            (
                UdpConfig {
                    role: None,
                    ..udp()
                },
                "role: required",
            ),
            (
                UdpConfig {
                    insecure: false,
                    ..udp()
                },
                "private-key-file: required",
            ),
            (
                UdpConfig {
                    remote: None,
                    ..udp()
                },
                "remote: required on a client",
            ),
            (UdpConfig { window: 0, ..udp() }, "window: must be above 0"),
            (UdpConfig { mtu: 100, ..udp() }, "mtu: 100"),
            (
                UdpConfig {
                    keepalive_ms: 0,
                    ..udp()
                },
                "keepalive-ms: must be at least 1",
            ),
            (
                UdpConfig {
                    tun_addr: Some("10.0.0.1".into()),
                    ..udp()
                },
                "tun-addr: address needs /prefix",
            ),
            (
                UdpConfig {
                    tun_addr: Some("10.0.0.1/40".into()),
                    ..udp()
                },
                "tun-addr: prefix 40",
            ),
            (
                UdpConfig {
                    tun_addr6: Some("zz/64".into()),
                    ..udp()
                },
                "tun-addr6: `zz`",
            ),
            (
                UdpConfig {
                    repair_dscp: 99,
                    ..udp()
                },
                "repair-dscp: 99",
            ),
            (
                UdpConfig {
                    threads: 0,
                    ..udp()
                },
                "threads: 0",
            ),
            (
                UdpConfig {
                    role: Some(UdpRole::Server),
                    path: vec!["dev=eth1".parse().unwrap()],
                    ..udp()
                },
                "path: a server learns its paths",
            ),
            (
                UdpConfig {
                    role: Some(UdpRole::Client),
                    remote: Some("192.0.2.1:4096".into()),
                    path: vec!["dev=a".parse().unwrap(), "local=::1".parse().unwrap()],
                    ..udp()
                },
                "path: path 1: local [::1]:0 and remote 192.0.2.1:4096",
            ),
            (
                UdpConfig {
                    role: Some(UdpRole::Client),
                    remote: Some("192.0.2.1:4096".into()),
                    path: vec!["dev=a".parse().unwrap(), "dev=b".parse().unwrap()],
                    threads: 2,
                    ..udp()
                },
                "path: 2 paths need --threads 1",
            ),
            (
                UdpConfig {
                    paths: hirt_core::path::PathManagerConfig {
                        silence_intervals: 0.1,
                        ..Default::default()
                    },
                    ..udp()
                },
                "paths: `silence-intervals` = 0.1",
            ),
        ];
        for (c, want) in cases {
            let e = err(c.validate());
            assert!(e.starts_with(want), "got `{e}`, want `{want}...`");
        }
    }

    #[test]
    fn toml_keys_are_the_flag_names_and_unknown_keys_are_refused() {
        let c: Srv6Config = toml::from_str(
            "role = \"encoder\"\nenc-sid = \"fc00::1\"\ndec-sid = \"fc00::2\"\nfec = \"hirt\"\n\
             ecn-ce = true\nthreads = 2\nrepair-lag = 512\nbehavior = \"dx6:fc00::9\"\n\
             rfc8754-hmac = true\nxdp = [\"eth0\"]\nxdp-mode = \"generic\"\n",
        )
        .unwrap();
        assert_eq!(c.role, Srv6Role::Encoder);
        assert_eq!(c.behavior, Behavior::Dx6("fc00::9".parse().unwrap()));
        assert_eq!((c.threads, c.repair_lag, c.ecn_ce), (2, Some(512), true));
        assert!(c.rfc8754_hmac);
        assert_eq!(c.xdp_mode, XdpMode::Generic);
        c.validate().unwrap();
        assert!(toml::from_str::<Srv6Config>("bogus = 1").is_err());
        let e = toml::from_str::<Srv6Config>("behavior = \"dx7\"").unwrap_err();
        assert!(e.to_string().contains("unknown behavior"), "{e}");
        let mut p: Srv6Config = toml::from_str(
            "enc-sid = \"fc00::1\"\ndec-sid = \"fc00::2\"\n\
             [[path]]\nsids = [\"fc00:b::1\"]\n[[path]]\nsids = [\"fc00:c::1\", \"fc00:c::2\"]\n\
             [paths]\nrepair-path = \"diverse\"\n[paths.policy]\nkind = \"lowest-delay\"\n",
        )
        .unwrap();
        p.validate().unwrap();
        assert_eq!(p.paths_or_default().len(), 2);
        assert_eq!(p.path[1].sids.len(), 2);
        assert_eq!(p.paths.repair_path, hirt_core::path::RepairPath::Diverse);
        p.threads = 2;
        assert!(err(p.validate()).contains("2 paths need threads = 1"));
        p.threads = 1;
        p.path[0].sids.push("fc00::2".parse().unwrap());
        assert!(err(p.validate()).contains("not middle SIDs"));
        assert!(toml::from_str::<Srv6Config>("[[path]]\nvia = \"x\"").is_err());
        assert_eq!(Srv6Config::default().paths_or_default().len(), 1);
        let u: UdpConfig =
            toml::from_str("role = \"server\"\ninsecure = true\nkeepalive-ms = 200\n").unwrap();
        assert_eq!((u.role, u.keepalive_ms), (Some(UdpRole::Server), 200));
        assert!(toml::from_str::<UdpConfig>("role = \"peer\"").is_err());
        let e = toml::from_str::<UdpConfig>("key = \"secret on a command line\"").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let u: UdpConfig = toml::from_str(
            "role = \"client\"\ninsecure = true\n\
             [[path]]\nlocal = \"10.1.0.2\"\nremote = \"10.1.0.1:4096\"\n\
             [[path]]\ndev = \"wwan0\"\nremote = \"10.2.0.1:4096\"\n\
             [paths]\nrepair-path = \"diverse\"\n[paths.policy]\nkind = \"lowest-delay\"\n",
        )
        .unwrap();
        u.validate().unwrap();
        let p = u.client_paths().unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].dev.as_deref(), Some("wwan0"));
        assert_eq!(p[1].remote, "10.2.0.1:4096".parse().unwrap());
        assert_eq!(
            u.paths.policy.kind,
            hirt_core::path::PolicyKind::LowestDelay
        );
        assert!(toml::from_str::<UdpConfig>("[[path]]\nvia = \"x\"").is_err());
    }

    /// The documented example files parse and validate.
    #[test]
    fn example_files_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let s = Srv6Config::from_file(&dir.join("hirt-srv6.toml")).unwrap();
        s.validate().unwrap();
        let u = UdpConfig::from_file(&dir.join("hirt-udp.toml")).unwrap();
        u.validate().unwrap();
    }

    #[test]
    fn hmac_keys_come_from_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("hirt-hmac-{}", std::process::id()));
        crate::udp::keys::write_secret_file(&path, "0x0aff\n").unwrap();
        let s = Srv6Config {
            hmac_key_file: Some(path.clone()),
            ..srv6()
        };
        s.validate().unwrap();
        assert_eq!(s.auth().unwrap().unwrap().key, vec![0x0a, 0xff]);
        let both = Srv6Config {
            hmac_key: Some("k".into()),
            ..s.clone()
        };
        assert!(err(both.validate()).contains("not both"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(err(s.validate()).contains("chmod 600"));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn keys() {
        assert_eq!(parse_key("0x0aff").unwrap(), vec![0x0a, 0xff]);
        assert_eq!(parse_key("ab").unwrap(), b"ab".to_vec());
        assert!(parse_key("0xabc").is_err());
        assert!(parse_key("0xzz").is_err());
    }
}
