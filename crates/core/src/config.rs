//! Configuration of the encoder and decoder: which code ([`SchemeConfig`]), which repair-rate
//! controller ([`ControllerConfig`]), and the two together as a [`FecMode`] parsed from the strings
//! `hirt sim --scheme` and the dataplane take (`ours`, `hirt`, `rquic`, `fixed:w=4,step=2`,
//! `maelstrom:r=20,i=1-20-40`, `rs:20:10`, `xor:w=16,step=4`, `none`, ...).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use hirt_fec::block_xor::MAX_BLOCK;
use hirt_fec::layered::{MAX_INTERLEAVE, MAX_R};
use thiserror::Error;

pub use crate::controller::hirt::HirtParams;
pub use crate::controller::ours::OursParams;
pub use crate::controller::rquic::RquicParams;
use crate::PathId;

/// Sliding window used when a mode string does not give one (HIRT §VI uses w = 200).
pub const DEFAULT_WINDOW: u16 = 200;

/// Largest sliding window / block: RFC 8681's NSS field limit.
pub const MAX_WINDOW: u16 = 4095;

/// Block XOR decoders accept blocks of at least this many sources (rQUIC's default r_max).
pub(crate) const BLOCK_XOR_MIN_MAX: u16 = 255;

/// Largest Reed-Solomon k and m (`hirt_fec::rs`).
const MAX_RS: u16 = 128;

/// Why a configuration string or value was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// The scheme / controller name is not known.
    #[error("unknown scheme or controller `{0}`")]
    UnknownName(String),
    /// A `key=value` parameter is not known for this scheme / controller.
    #[error("unknown parameter `{0}`")]
    UnknownParameter(String),
    /// A parameter value did not parse or is out of range.
    #[error("invalid value for `{key}`: `{value}`")]
    InvalidValue {
        /// The parameter.
        key: String,
        /// What was given.
        value: String,
    },
    /// A required parameter is missing.
    #[error("missing parameter `{0}`")]
    Missing(&'static str),
}

fn invalid(key: &str, value: &str) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
    }
}

/// Parses `value` as a number in `min..=max`.
pub(crate) fn parse_num<T>(key: &str, value: &str, min: T, max: T) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd,
{
    match value.trim().parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(invalid(key, value)),
    }
}

/// Splits `a=1,b=2` into pairs; an item without `=` is returned with an empty value.
pub(crate) fn kv_pairs(s: &str) -> impl Iterator<Item = (&str, &str)> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (p.trim(), ""),
        })
}

/// Which erasure code protects a stream. Both ends must be configured with the same scheme
/// (the decoder refuses repairs of another scheme).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemeConfig {
    /// RFC 8681 RLC over GF(2^8), sliding window of at most `window` sources, density `dt`.
    Rlc {
        /// Largest window (the controller may shrink it); <= 4095.
        window: u16,
        /// RFC 8681 density threshold, 0..=15 (15 = dense).
        dt: u8,
    },
    /// RLC over GF(2) with DT = 15: XOR of the whole window (SRv6-FEC / HIRT XOR mode).
    Xor {
        /// Largest window.
        window: u16,
    },
    /// rQUIC block XOR: one repair per block of `r` sources (the controller may change `r`).
    BlockXor {
        /// Initial block size; also the largest block the decoder accepts is `MAX_WINDOW`.
        r: u16,
    },
    /// Maelstrom layered interleaving: per interleave `i`, XOR of `r` sources spaced `i` apart.
    Layered {
        /// Sources per repair.
        r: u16,
        /// Interleaves, e.g. `[1, 20, 40]`.
        interleaves: Vec<u16>,
    },
    /// Systematic Reed-Solomon: `m` repairs per block of `k` sources.
    Rs {
        /// Sources per block.
        k: u16,
        /// Repairs per block.
        m: u16,
    },
    /// No code: sources are only tagged and forwarded.
    None,
}

impl SchemeConfig {
    /// The sliding window / block span of this scheme, in sources: how far back a repair can
    /// reach. Used to size the decoder's loss-detection history and HIRT's loss window.
    pub fn span(&self) -> u32 {
        match self {
            SchemeConfig::Rlc { window, .. } | SchemeConfig::Xor { window } => u32::from(*window),
            SchemeConfig::BlockXor { r } => u32::from(*r),
            SchemeConfig::Layered { r, interleaves } => {
                u32::from(*r) * u32::from(interleaves.iter().copied().max().unwrap_or(1))
            }
            SchemeConfig::Rs { k, .. } => u32::from(*k),
            SchemeConfig::None => 0,
        }
    }

    /// Largest window (sliding codes) or block (block XOR) a controller may set: what the
    /// decoder built from this scheme accepts. Block XOR decoders accept blocks up to
    /// max(r, 255) so rQUIC's controller can grow the block to its default r_max.
    pub fn max_window(&self) -> u16 {
        match self {
            SchemeConfig::Rlc { window, .. } | SchemeConfig::Xor { window } => *window,
            SchemeConfig::BlockXor { r } => (*r).clamp(BLOCK_XOR_MIN_MAX, MAX_BLOCK),
            other => other.span().min(u32::from(u16::MAX)) as u16,
        }
    }

    /// How far behind the newest source an answer to a loss report may reach (its window's
    /// first source): the span a decoder with repair lag `lag` keeps, within what an encoder
    /// keeps (`hirt_fec::rlc::MAX_HISTORY`). Block codes: their largest block.
    pub fn answer_reach(&self, lag: u32) -> u32 {
        match self {
            SchemeConfig::Rlc { window, .. } | SchemeConfig::Xor { window } => {
                hirt_fec::RlcDecoder::span_with_repair_lag(*window, lag)
                    .min(hirt_fec::rlc::MAX_HISTORY as u32)
            }
            other => u32::from(other.max_window()),
        }
    }

    /// How far behind the newest ESI the scheme's decoder may still recover a source (its
    /// memory, from `hirt_fec`'s documented bounds). A loss older than this (plus the reorder
    /// tolerance) is final: it counts as residual loss.
    pub fn recovery_horizon(&self) -> u32 {
        self.recovery_horizon_with_repair_lag(0)
    }

    /// [`Self::recovery_horizon`] of a decoder whose repairs may trail its newest source by
    /// `lag` more ESIs ([`DecoderConfig::repair_lag`]; sliding-window codes only).
    pub fn recovery_horizon_with_repair_lag(&self, lag: u32) -> u32 {
        match self {
            // RlcDecoder tracks S = the power of two >= 2W (at least 64) and may still deliver a
            // source late through an equation kept for another S: 2S (hirt_fec's bound).
            SchemeConfig::Rlc { window, .. } | SchemeConfig::Xor { window } => {
                hirt_fec::RlcDecoder::recovery_horizon_with_repair_lag(*window, lag)
            }
            // A block-XOR loss is final once its block's repair was processed: two blocks. The
            // block size changes under rQUIC, so the decoder follows the NSS of the repairs it
            // receives (this is the bound before the first one: rQUIC's r_max).
            SchemeConfig::BlockXor { r } => 2 * u32::from((*r).max(255)),
            // A layered repair goes out at most (r - 1) * I after the sources it covers; peeling
            // may use it a while later: twice the span.
            SchemeConfig::Layered { .. } => 2 * self.span(),
            // All of a block's repairs follow its last source: two blocks.
            SchemeConfig::Rs { k, .. } => (2 * u32::from(*k)).max(32),
            SchemeConfig::None => 0,
        }
    }

    /// Repairs per source a block code sends by itself (RS m/k, block XOR 1/r, layered one per
    /// r sources per interleave layer); `None` for sliding codes and no code.
    pub fn block_rate(&self) -> Option<f64> {
        match self {
            SchemeConfig::Rs { k, m } => Some(f64::from(*m) / f64::from((*k).max(1))),
            SchemeConfig::BlockXor { r } => Some(1.0 / f64::from((*r).max(1))),
            SchemeConfig::Layered { r, interleaves } => {
                Some(interleaves.len() as f64 / f64::from((*r).max(1)))
            }
            _ => None,
        }
    }

    /// Whether the code is a sliding window (repairs are made on demand by the controller),
    /// as opposed to a block code that emits its repairs itself.
    pub fn is_sliding(&self) -> bool {
        matches!(self, SchemeConfig::Rlc { .. } | SchemeConfig::Xor { .. })
    }

    fn with_window(self, w: u16) -> Self {
        match self {
            SchemeConfig::Rlc { dt, .. } => SchemeConfig::Rlc { window: w, dt },
            SchemeConfig::Xor { .. } => SchemeConfig::Xor { window: w },
            other => other,
        }
    }
}

impl fmt::Display for SchemeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemeConfig::Rlc { window, dt } => write!(f, "rlc:w={window},dt={dt}"),
            SchemeConfig::Xor { window } => write!(f, "xor:w={window}"),
            SchemeConfig::BlockXor { r } => write!(f, "blockxor:r={r}"),
            SchemeConfig::Layered { r, interleaves } => {
                write!(f, "maelstrom:r={r},i=")?;
                for (n, i) in interleaves.iter().enumerate() {
                    if n > 0 {
                        f.write_str("-")?;
                    }
                    write!(f, "{i}")?;
                }
                Ok(())
            }
            SchemeConfig::Rs { k, m } => write!(f, "rs:{k}:{m}"),
            SchemeConfig::None => f.write_str("none"),
        }
    }
}

/// Parses `rlc[:w=200,dt=15]`, `xor[:w=..]`, `blockxor[:r=..]`, `maelstrom:r=20,i=1-20-40`
/// (alias `layered`), `rs:20:10` (or `rs:k=20,m=10`), `none`.
impl FromStr for SchemeConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, rest) = s.trim().split_once(':').unwrap_or((s.trim(), ""));
        match name {
            "rlc" => {
                let (mut window, mut dt) = (DEFAULT_WINDOW, 15);
                for (k, v) in kv_pairs(rest) {
                    match k {
                        "w" | "window" => window = parse_num(k, v, 1, MAX_WINDOW)?,
                        "dt" => dt = parse_num(k, v, 0, 15)?,
                        _ => return Err(ConfigError::UnknownParameter(k.into())),
                    }
                }
                Ok(SchemeConfig::Rlc { window, dt })
            }
            "xor" => {
                let mut window = DEFAULT_WINDOW;
                for (k, v) in kv_pairs(rest) {
                    match k {
                        "w" | "window" => window = parse_num(k, v, 1, MAX_WINDOW)?,
                        _ => return Err(ConfigError::UnknownParameter(k.into())),
                    }
                }
                Ok(SchemeConfig::Xor { window })
            }
            "blockxor" | "block" => {
                let mut r = 10;
                for (k, v) in kv_pairs(rest) {
                    match k {
                        "r" => r = parse_num(k, v, 1, MAX_BLOCK)?,
                        _ => return Err(ConfigError::UnknownParameter(k.into())),
                    }
                }
                Ok(SchemeConfig::BlockXor { r })
            }
            "maelstrom" | "layered" => {
                let mut r = None;
                let mut interleaves = None;
                for (k, v) in kv_pairs(rest) {
                    match k {
                        "r" => r = Some(parse_num(k, v, 1, MAX_R)?),
                        "i" => {
                            let list: Result<Vec<u16>, _> = v
                                .split('-')
                                .map(|x| parse_num(k, x, 1, MAX_INTERLEAVE))
                                .collect();
                            let list = list?;
                            if list.is_empty() || list.len() > 16 {
                                return Err(invalid(k, v));
                            }
                            interleaves = Some(list);
                        }
                        _ => return Err(ConfigError::UnknownParameter(k.into())),
                    }
                }
                Ok(SchemeConfig::Layered {
                    r: r.ok_or(ConfigError::Missing("r"))?,
                    interleaves: interleaves.ok_or(ConfigError::Missing("i"))?,
                })
            }
            "rs" => {
                let (mut k_, mut m_) = (None, None);
                if let Some((a, b)) = rest.split_once(':') {
                    k_ = Some(parse_num("k", a, 1, MAX_RS)?);
                    m_ = Some(parse_num("m", b, 1, MAX_RS)?);
                } else {
                    for (k, v) in kv_pairs(rest) {
                        match k {
                            "k" => k_ = Some(parse_num(k, v, 1, MAX_RS)?),
                            "m" => m_ = Some(parse_num(k, v, 1, MAX_RS)?),
                            _ => return Err(ConfigError::UnknownParameter(k.into())),
                        }
                    }
                }
                let (k, m) = (
                    k_.ok_or(ConfigError::Missing("k"))?,
                    m_.ok_or(ConfigError::Missing("m"))?,
                );
                Ok(SchemeConfig::Rs { k, m })
            }
            "none" if rest.is_empty() => Ok(SchemeConfig::None),
            _ => Err(ConfigError::UnknownName(s.to_string())),
        }
    }
}

/// Which repair-rate controller drives a stream's encoder (see `docs/core.md`).
#[derive(Clone, Debug, PartialEq)]
pub enum ControllerConfig {
    /// Our controller (`controller/ours.rs`).
    Ours(OursParams),
    /// HIRT as published (§IV-B): EWMA of losses per window, step = ceil(W / (mu + k*sigma)).
    Hirt(HirtParams),
    /// rQUIC Algorithm 1: block ratio steered by residual loss around a target.
    Rquic(RquicParams),
    /// One repair every `step` sources (SRv6-FEC's RLC_W_STEP).
    Fixed {
        /// Sources between two repairs.
        step: u16,
    },
    /// No controller-driven repairs: block codes emit their own, sliding codes only time-driven.
    None,
}

impl fmt::Display for ControllerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControllerConfig::Ours(_) => f.write_str("ours"),
            ControllerConfig::Hirt(_) => f.write_str("hirt"),
            ControllerConfig::Rquic(_) => f.write_str("rquic"),
            ControllerConfig::Fixed { step } => write!(f, "fixed:step={step}"),
            ControllerConfig::None => f.write_str("none"),
        }
    }
}

/// Parses `ours[:..]`, `hirt[:alpha=..,beta=..,k=..]`, `rquic[:n=3,delta=0.33,gamma=0.01,r=10]`,
/// `fixed:step=N`, `none`.
impl FromStr for ControllerConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, rest) = s.trim().split_once(':').unwrap_or((s.trim(), ""));
        match name {
            "ours" => Ok(ControllerConfig::Ours(rest.parse()?)),
            "hirt" => Ok(ControllerConfig::Hirt(rest.parse()?)),
            "rquic" => Ok(ControllerConfig::Rquic(rest.parse()?)),
            "fixed" => {
                let mut step = None;
                for (k, v) in kv_pairs(rest) {
                    match k {
                        "step" | "s" => step = Some(parse_num(k, v, 1, u16::MAX)?),
                        _ => return Err(ConfigError::UnknownParameter(k.into())),
                    }
                }
                Ok(ControllerConfig::Fixed {
                    step: step.ok_or(ConfigError::Missing("step"))?,
                })
            }
            "none" if rest.is_empty() => Ok(ControllerConfig::None),
            _ => Err(ConfigError::UnknownName(s.to_string())),
        }
    }
}

/// A code and its controller, as one user-facing string.
///
/// | string                       | scheme                      | controller        |
/// |------------------------------|-----------------------------|-------------------|
/// | `ours[:w=..,...]`            | RLC, window W               | ours              |
/// | `hirt[:w=..,alpha=..,...]`   | RLC, window W               | HIRT              |
/// | `rquic[:r=10,...]`           | block XOR, initial r        | rQUIC Algorithm 1 |
/// | `fixed:w=4,step=2`           | RLC, window w               | one repair / step |
/// | `xor:w=4,step=2`             | XOR (RLC m=1), window w     | one repair / step |
/// | `blockxor:r=10`              | block XOR, r                | none (fixed)      |
/// | `maelstrom:r=20,i=1-20-40`   | layered interleaving        | none (fixed)      |
/// | `rs:20:10`                   | Reed-Solomon k=20, m=10     | none (fixed)      |
/// | `none`                       | none                        | none              |
///
/// W defaults to the window given to [`FecMode::parse_with_window`] ([`DEFAULT_WINDOW`] for
/// `FromStr`); a `w=` in the string wins.
#[derive(Clone, Debug, PartialEq)]
pub struct FecMode {
    /// The code.
    pub scheme: SchemeConfig,
    /// The controller.
    pub controller: ControllerConfig,
}

impl FecMode {
    /// Parses a mode string; `window` is used for sliding codes whose string gives no `w=`.
    pub fn parse_with_window(s: &str, window: u16) -> Result<Self, ConfigError> {
        if window == 0 || window > MAX_WINDOW {
            return Err(invalid("window", &window.to_string()));
        }
        let s = s.trim();
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        // Pull the scheme keys (w, dt) out; the rest goes to the controller.
        let split = |rest: &str| -> Result<(Option<u16>, Option<u8>, String), ConfigError> {
            let (mut w, mut dt, mut ctl) = (None, None, Vec::new());
            for (k, v) in kv_pairs(rest) {
                match k {
                    "w" | "window" => w = Some(parse_num(k, v, 1, MAX_WINDOW)?),
                    "dt" => dt = Some(parse_num(k, v, 0, 15)?),
                    _ if v.is_empty() => ctl.push(k.to_string()),
                    _ => ctl.push(format!("{k}={v}")),
                }
            }
            Ok((w, dt, ctl.join(",")))
        };
        match name {
            "ours" | "hirt" | "fixed" => {
                let (w, dt, ctl) = split(rest)?;
                let scheme = SchemeConfig::Rlc {
                    window: w.unwrap_or(window),
                    dt: dt.unwrap_or(15),
                };
                let controller = format!("{name}:{ctl}").parse()?;
                Ok(FecMode { scheme, controller })
            }
            "xor" => {
                let (w, dt, ctl) = split(rest)?;
                if dt.is_some() {
                    return Err(ConfigError::UnknownParameter("dt".into()));
                }
                let scheme = SchemeConfig::Xor {
                    window: w.unwrap_or(window),
                };
                let controller = if ctl.is_empty() {
                    ControllerConfig::None
                } else {
                    format!("fixed:{ctl}").parse()?
                };
                Ok(FecMode { scheme, controller })
            }
            "rlc" => {
                let (w, dt, ctl) = split(rest)?;
                let scheme = SchemeConfig::Rlc {
                    window: w.unwrap_or(window),
                    dt: dt.unwrap_or(15),
                };
                let controller = if ctl.is_empty() {
                    ControllerConfig::None
                } else {
                    format!("fixed:{ctl}").parse()?
                };
                Ok(FecMode { scheme, controller })
            }
            "rquic" => {
                let params: RquicParams = rest.parse()?;
                let r = params.r_init.round().clamp(1.0, f64::from(MAX_WINDOW)) as u16;
                Ok(FecMode {
                    scheme: SchemeConfig::BlockXor { r },
                    controller: ControllerConfig::Rquic(params),
                })
            }
            "blockxor" | "block" | "maelstrom" | "layered" | "rs" | "none" => Ok(FecMode {
                scheme: s.parse()?,
                controller: ControllerConfig::None,
            }),
            _ => Err(ConfigError::UnknownName(s.to_string())),
        }
    }

    /// Sets the sliding window of an RLC/XOR scheme (no effect on block codes).
    pub fn with_window(mut self, window: u16) -> Self {
        self.scheme = self.scheme.with_window(window.clamp(1, MAX_WINDOW));
        self
    }
}

impl FromStr for FecMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FecMode::parse_with_window(s, DEFAULT_WINDOW)
    }
}

impl fmt::Display for FecMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.scheme, self.controller)
    }
}

/// What a hole in the sequence holds back under in-order release ([`DecoderConfig::in_order`]).
/// Parsed from `flow` / `stream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HoldScope {
    /// The sources of the flows suspected of a packet in the hole (the flow of the source that
    /// showed it and of the few before it); other flows pass. Sources with no flow named are
    /// held like [`HoldScope::Stream`].
    #[default]
    Flow,
    /// Every later source of the stream.
    Stream,
}

impl std::str::FromStr for HoldScope {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "flow" => Ok(HoldScope::Flow),
            "stream" => Ok(HoldScope::Stream),
            _ => Err(invalid("in-order scope (flow or stream)", s)),
        }
    }
}

/// A recovery deadline: how late after its original would have arrived a recovered source is
/// still worth delivering. A transport recovers a loss itself after about one RTT (QUIC: 9/8 RTT,
/// TCP: RTT + at least 200 ms), so a later recovery only adds a duplicate.
///
/// Parsed from `30ms` / `0.5s` / `800us` (fixed), `2rtt` / `0.5rtt` (multiple of the measured
/// RTT) or `auto` (two RTTs, at least [`AUTO_DEADLINE_FLOOR`]). The encoder derives its window
/// and its repair strategy from it (see `docs/core.md`, "Recovery deadline").
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Deadline {
    /// A fixed time.
    Fixed(Duration),
    /// A multiple of the stream's smoothed RTT.
    Rtt(f64),
    /// Two RTTs, at least [`AUTO_DEADLINE_FLOOR`]: UDP mode's default.
    Auto,
}

/// The shortest deadline `auto` gives. A loss report needs a round trip plus the time to be
/// sure of a gap (three later sources and the 1 ms report spacing, [`DEFAULT_LOSS_REPORT_GAP`]);
/// below that the encoder must repair blind, at many times the loss rate (157% overhead for 3%
/// loss at a 0.1 ms RTT and 2,000 pps with one RTT). On such short paths the transports' own
/// timers (TCP's 200 ms minimum RTO, QUIC's 1 ms granularity) leave room for 10 ms.
pub const AUTO_DEADLINE_FLOOR: Duration = Duration::from_millis(10);

/// RTT assumed before the first measurement, for RTT-relative deadlines (RFC 9002's initial
/// RTT is 333 ms; a tunnel's paths are usually shorter, and the first feedback corrects it).
pub const INITIAL_RTT: Duration = Duration::from_millis(100);

impl Deadline {
    /// The deadline for a stream whose smoothed RTT is `rtt` ([`INITIAL_RTT`] before the first
    /// measurement).
    pub fn resolve(&self, rtt: Option<Duration>) -> Duration {
        let rtt = rtt.unwrap_or(INITIAL_RTT);
        match *self {
            Deadline::Fixed(d) => d,
            Deadline::Rtt(k) => rtt.mul_f64(k),
            Deadline::Auto => (rtt * 2).max(AUTO_DEADLINE_FLOOR),
        }
    }

    /// Whether the deadline leaves a loss report its round trip whatever the path's RTT (a
    /// multiple of at least [`ROUND_TRIP_MULTIPLE`], or `auto`), so it is known to before
    /// any feedback measured the path.
    pub fn leaves_round_trip(&self) -> bool {
        match *self {
            Deadline::Fixed(_) => false,
            Deadline::Rtt(k) => k >= ROUND_TRIP_MULTIPLE,
            Deadline::Auto => true,
        }
    }
}

/// Smallest multiple of the RTT taken to leave a loss report its round trip on any path before
/// the path is measured (the report needs a round trip plus a few sources and milliseconds to
/// be sure of the gap; the first feedback decides with the measured RTT and rate).
pub const ROUND_TRIP_MULTIPLE: f64 = 1.5;

impl FromStr for Deadline {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        if t == "auto" {
            return Ok(Deadline::Auto);
        }
        if let Some(k) = t.strip_suffix("rtt") {
            let k: f64 = parse_num("deadline", k.trim(), 0.01, 100.0)?;
            return Ok(Deadline::Rtt(k));
        }
        let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
            Some(i) => t.split_at(i),
            None => (t.as_str(), "ms"),
        };
        let scale = match unit {
            "ms" => 1e-3,
            "s" => 1.0,
            "us" => 1e-6,
            _ => return Err(invalid("deadline", s)),
        };
        let secs = parse_num::<f64>("deadline", num.trim(), 0.0, 1e6)? * scale;
        if !(1e-4..=60.0).contains(&secs) {
            return Err(invalid("deadline", s));
        }
        Ok(Deadline::Fixed(Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deadline::Fixed(d) => write!(f, "{}ms", d.as_secs_f64() * 1e3),
            Deadline::Rtt(k) => write!(f, "{k}rtt"),
            Deadline::Auto => f.write_str("auto"),
        }
    }
}

/// Default time-driven repair delay ([`EncoderConfig::repair_delay`]).
pub const DEFAULT_REPAIR_DELAY: Duration = Duration::from_millis(5);
/// Default time-driven re-sends ([`EncoderConfig::repair_retries`]).
pub const DEFAULT_REPAIR_RETRIES: u8 = 1;

/// Default CPU load above which optional FEC work is skipped (HIRT §V).
pub const DEFAULT_OVERLOAD_THRESHOLD: f64 = 0.9;

/// Encoder configuration. Build with [`EncoderConfig::new`] and adjust the public fields.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    /// Code and controller of every stream.
    pub mode: FecMode,
    /// Time-driven repair: when sources are unprotected for this long, one repair is sent so
    /// recovery delay stays bounded with sparse traffic. `None` disables it.
    pub repair_delay: Option<Duration>,
    /// Time-driven re-sends: after a time-driven repair, the timer is re-armed this many more
    /// times, each `repair_delay` after the previous timer repair, while no other repair went
    /// out. Each re-send is a new repair over the same sliding window, so a lost timer repair no
    /// longer leaves a lost source waiting for the next source (sparse traffic: recovery at most
    /// `(1 + repair_retries) x repair_delay` after the send, plus the one-way delay, unless every
    /// timer repair is lost).
    /// Sliding codes only: a block code closes its block with the first repair. `0` = one timer
    /// repair per idle period.
    pub repair_retries: u8,
    /// Time between the re-sends of a time-driven repair. `None` (default): `repair_delay`. A
    /// shorter gap recovers a burst of k losses after the timer in k x gap instead of
    /// k x `repair_delay`, at the same number of repairs.
    pub repair_retry_gap: Option<Duration>,
    /// Overload control: symbol operations a stream may do per `budget_period` before repair
    /// generation is randomly skipped. `None` (default) = unlimited.
    pub work_budget: Option<u64>,
    /// Length of the overload accounting period.
    pub budget_period: Duration,
    /// CPU load (busy fraction, injected with [`crate::Encoder::set_cpu_load`]) above which
    /// repair generation is skipped at random, with probability
    /// `(load - threshold) / (1 - threshold)` (HIRT §V). `1.0` disables it.
    pub overload_threshold: f64,
    /// Recovery deadline (`None`: the window and rate come from the mode alone). With a
    /// deadline the `ours` controller sizes the window to the sources sent in one deadline,
    /// answers the decoder's loss reports when a repair can still arrive in time (deadline
    /// longer than a round trip), and otherwise sizes proactive repairs for that window; the
    /// time-driven repair then protects only the tail of a burst of sources (it fires when
    /// no source came for `repair_delay`, at most a third of the deadline). The scheme's window
    /// is the largest the controller may use.
    pub deadline: Option<Deadline>,
    /// The repair lag of the peer's decoder ([`DecoderConfig::repair_lag`]): answers to its
    /// loss reports may reach as far behind the newest source as it keeps sources
    /// ([`SchemeConfig::answer_reach`]). 0 (default): the span of the window alone;
    /// [`answer_reach_lag`] with a decoder made by [`DecoderConfig::with_answer_reach`], or the
    /// most a decoder grows to ([`DecoderConfig::repair_lag_limit`], with
    /// [`Self::answer_reach_grows`]).
    pub answer_reach_lag: u32,
    /// The peer's decoder keeps the window's span at first and grows it to
    /// [`Self::answer_reach_lag`] when an answer reaches past it (for a tunnel that cannot know
    /// its path before measuring its rate and round trip). The encoder then keeps
    /// sources for the answers only as its controller asks, not the whole reach from the
    /// stream's first source. Default false: the decoder keeps the reach from the start.
    pub answer_reach_grows: bool,
    /// Queue management for the path (`None`, default: off): CoDel on the queueing delay
    /// measured in the RTT, which drops sources before they are coded, or marks them CE when
    /// ECN-capable ([`crate::Encoder::admit_source`]), so the transports carried see congestion early
    /// and one packet at a time instead of a drop-tail overflow (see [`crate::AqmConfig`]).
    pub aqm: Option<crate::AqmConfig>,
}

/// The most a learned answer reach grows to ([`EncoderConfig::learning_answer_reach`],
/// [`DecoderConfig::learning_answer_reach`]): a stream pays the memory of its own path only
/// (100 kpps over 600 ms needs ~110000 sources, [`answer_reach_lag`]).
pub const LEARNED_ANSWER_REACH_LIMIT: u32 = hirt_fec::rlc::MAX_REPAIR_LAG;

impl EncoderConfig {
    /// This configuration answering loss reports as far back as a decoder made with
    /// [`DecoderConfig::learning_answer_reach`] grows to, keeping sources only as its
    /// controller asks ([`Self::answer_reach_grows`]).
    pub fn learning_answer_reach(mut self) -> Self {
        self.answer_reach_lag = LEARNED_ANSWER_REACH_LIMIT;
        self.answer_reach_grows = true;
        self
    }

    /// Defaults: `repair_delay` 5 ms with 1 re-send, no work budget (period 1 ms). Encoder
    /// streams are created on first use: their ids come from the local caller, not from the
    /// network.
    pub fn new(mode: FecMode) -> Self {
        EncoderConfig {
            mode,
            repair_delay: Some(DEFAULT_REPAIR_DELAY),
            repair_retries: DEFAULT_REPAIR_RETRIES,
            repair_retry_gap: None,
            work_budget: None,
            budget_period: Duration::from_millis(1),
            overload_threshold: DEFAULT_OVERLOAD_THRESHOLD,
            deadline: None,
            answer_reach_lag: 0,
            answer_reach_grows: false,
            aqm: None,
        }
    }
}

/// Decoder configuration. Build with [`DecoderConfig::new`] and adjust the public fields.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// The code (must match the encoder's).
    pub scheme: SchemeConfig,
    /// HIRT's n_f: sources per loss window (losses per window, their squares). Default: the
    /// scheme's span (W), at least 1.
    pub loss_window: u32,
    /// Sources between two feedbacks of a stream. Default: `loss_window` (HIRT: every n_f).
    pub feedback_period: u32,
    /// With sparse traffic, a feedback goes out at the latest this long after the first
    /// observation it reports. `None`: only every `feedback_period` sources.
    pub feedback_interval: Option<Duration>,
    /// A missing ESI is declared lost once this many later ESIs were seen (or a repair sent after
    /// it arrived); absorbs reordering (HIRT §V cites a mean out-of-order length of 8).
    pub reorder_tolerance: u32,
    /// A lost source is final (residual) once this many later ESIs exist: the decoder can no
    /// longer recover it. Default: [`SchemeConfig::recovery_horizon`].
    pub horizon: u32,
    /// ESIs whose delivery state is remembered per stream (duplicate suppression after the code
    /// forgot them; residual-loss accounting). Rounded up to a power of two; at least
    /// `horizon + reorder_tolerance + 2`.
    pub history: u32,
    /// ESIs by which a repair may trail the newest source the decoder has seen, beyond what
    /// the code's window allows anyway: the sliding-window decoder keeps that many more
    /// sources (and the horizon grows with it). For dataplanes where sources and repairs
    /// reach the decoder at different times (sources delivered by the kernel and read from a
    /// ring, repairs on another path). Set with [`DecoderConfig::with_repair_lag`]; default 0.
    pub repair_lag: u32,
    /// The repair lag a stream's decoder may grow to by itself: a repair that arrives behind
    /// its span (it came by a slower path than its sources) is refused, but the span grows so
    /// that the next ones like it are taken (sliding-window codes; the horizon grows with it).
    /// A node need not be told how its peer spreads repairs over paths. Bounds the memory
    /// per stream like `repair_lag` does: a peer (or a forger, without authentication) can
    /// make it grow up to this. Default 0: the span stays that of `repair_lag`.
    pub repair_lag_limit: u32,
    /// Most sources a repair may cover (sliding-window codes): 0 takes the window. Spares that
    /// back up answers to loss reports spread over more than a window cover all of them
    /// (`EncoderConfig::answer_reach_lag`); set with the answer reach, up to 4095.
    pub max_repair_nss: u16,
    /// Path id written into feedback.
    pub path: PathId,
    /// Overload control, as in [`EncoderConfig::work_budget`] (decoder work = row operations).
    pub work_budget: Option<u64>,
    /// Length of the overload accounting period.
    pub budget_period: Duration,
    /// As [`EncoderConfig::overload_threshold`], for solving with repairs (load injected with
    /// [`crate::Decoder::set_cpu_load`]).
    pub overload_threshold: f64,
    /// Most streams tracked; sources of further streams are delivered unprotected.
    pub max_streams: usize,
    /// In-order release: sources behind a missing one are held (copied) until it arrives or is
    /// recovered, the code can no longer recover it, or they waited this long. `None` (the
    /// default): every source is delivered at once and recovered ones arrive out of order.
    pub in_order: Option<Duration>,
    /// Most sources held per stream for in-order release; beyond, the first hole is given up.
    pub in_order_max: usize,
    /// What a hole holds back: the flows suspected of a packet in it (the default; sources
    /// whose flow the caller names, see [`crate::Decoder::handle_source_in_flow`]) or every
    /// later source of the stream.
    pub in_order_scope: HoldScope,
    /// Loss reports (loss-triggered repair): as soon as sources are declared lost, a feedback
    /// naming the ones still missing goes out, at most one per this gap per stream; while some
    /// stay missing, the report is repeated after twice the measured answer delay, at most
    /// every `loss_report_gap` and at least every `loss_report_repeat`. `None` (default): off.
    pub loss_report_gap: Option<Duration>,
    /// Longest repeat interval of a loss report while sources it named stay missing (the
    /// encoder answers each missing source at most once per RTT, so repeats only replace lost
    /// reports and lost repairs).
    pub loss_report_repeat: Duration,
    /// The recovery deadline the decoder's stats count late recoveries against
    /// ([`crate::DecoderStats::recovered_late`]), resolved with the RTT its driver gives
    /// ([`crate::Decoder::set_rtt`]) or, lacking one, the measured answer delay of its loss
    /// reports. `None` (default): none is late.
    pub recovery_deadline: Option<Deadline>,
}

/// Default [`DecoderConfig::loss_report_gap`] when loss reports are on.
pub const DEFAULT_LOSS_REPORT_GAP: Duration = Duration::from_millis(1);

/// Least repair lag of a decoder whose loss reports are answered from far back
/// ([`DecoderConfig::with_answer_reach`], [`answer_reach_lag`]): the decoder keeps 16384
/// sources (a window of 4095), which a 600 ms round trip at 10 kpps still fits.
pub const LOSS_REPORT_REPAIR_LAG: u32 = 1 << 13;

/// The repair lag that lets answers to loss reports reach back as far as a stream at `pps`
/// sources per second, round trip `rtt` and recovery deadline `deadline` needs: an answer
/// covers a loss a round trip (plus detection) old and the window before it, and its spares
/// come up to half the remaining slack later, so the decoder must still hold the sources of
/// `pps x (RTT + detection + (D - RTT)/2)` (with a fifth of headroom for the rate's and the
/// round trip's variation) behind its newest. At least [`LOSS_REPORT_REPAIR_LAG`], at most
/// `hirt_fec::rlc::MAX_REPAIR_LAG` (100 kpps at a 600 ms round trip and a 2 RTT deadline needs
/// about 110000). The encoder's [`EncoderConfig::answer_reach_lag`] must match.
pub fn answer_reach_lag(pps: f64, rtt: Duration, deadline: Duration) -> u32 {
    let pps = pps.max(0.0);
    let round = rtt.as_secs_f64() + 4.0 / pps.max(1.0) + 0.001;
    let d = deadline.as_secs_f64().max(round);
    let behind = (1.2 * pps * (round + (d - round) / 2.0)).ceil();
    let max = hirt_fec::rlc::MAX_REPAIR_LAG;
    (behind.min(f64::from(max)) as u32).clamp(LOSS_REPORT_REPAIR_LAG, max)
}

impl DecoderConfig {
    /// Defaults derived from the scheme. Loss window (HIRT's n_f) and feedback period: the
    /// window W for sliding codes, as in HIRT (n_f = w), but at least 32 sources so feedback
    /// stays a small fraction of the traffic; block codes: [`DEFAULT_WINDOW`] sources. Feedback
    /// at least every 50 ms when something happened, reorder tolerance 3, horizon from
    /// [`SchemeConfig::recovery_horizon`], history 8192 ESIs.
    pub fn new(scheme: SchemeConfig) -> Self {
        let span = if scheme.is_sliding() {
            scheme.span().max(32)
        } else {
            u32::from(DEFAULT_WINDOW)
        };
        let horizon = scheme.recovery_horizon();
        DecoderConfig {
            scheme,
            loss_window: span,
            feedback_period: span,
            feedback_interval: Some(Duration::from_millis(50)),
            reorder_tolerance: 3,
            horizon,
            history: 8192,
            repair_lag: 0,
            repair_lag_limit: 0,
            max_repair_nss: 0,
            path: 0,
            work_budget: None,
            budget_period: Duration::from_millis(1),
            overload_threshold: DEFAULT_OVERLOAD_THRESHOLD,
            max_streams: 64,
            in_order: None,
            in_order_max: 1024,
            in_order_scope: HoldScope::Flow,
            loss_report_gap: None,
            loss_report_repeat: Duration::from_millis(10),
            recovery_deadline: None,
        }
    }

    /// This configuration with [`Self::repair_lag`] = `lag` and the horizon that goes with it.
    pub fn with_repair_lag(mut self, lag: u32) -> Self {
        self.repair_lag = lag;
        self.horizon = self.scheme.recovery_horizon_with_repair_lag(lag);
        self
    }

    /// This configuration with a repair lag of at least `lag` ([`answer_reach_lag`]): answers
    /// to loss reports may then reach that many sources beyond the window (the encoder's
    /// [`EncoderConfig::answer_reach_lag`] must match). The decoder keeps the power of two
    /// above twice the window plus `lag` sources per stream (16384 with
    /// [`LOSS_REPORT_REPAIR_LAG`] and a window of 4095, where a window of 4095 alone keeps 8192).
    pub fn with_answer_reach(mut self, lag: u32) -> Self {
        let lag = self.repair_lag.max(lag);
        self.max_repair_nss = hirt_fec::rlc::MAX_WINDOW;
        self.with_repair_lag(lag)
    }

    /// This configuration starting with its own span and growing it, up to
    /// [`LEARNED_ANSWER_REACH_LIMIT`], when an answer to its loss reports reaches past it (the
    /// encoder: [`EncoderConfig::learning_answer_reach`]): for a tunnel that cannot know its
    /// path before it measures it.
    pub fn learning_answer_reach(mut self) -> Self {
        self.repair_lag_limit = self.repair_lag_limit.max(LEARNED_ANSWER_REACH_LIMIT);
        self.max_repair_nss = hirt_fec::rlc::MAX_WINDOW;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_deadlines() {
        let ms = |x: u64| Deadline::Fixed(Duration::from_millis(x));
        assert_eq!("30ms".parse::<Deadline>().unwrap(), ms(30));
        assert_eq!("30".parse::<Deadline>().unwrap(), ms(30));
        assert_eq!("0.5s".parse::<Deadline>().unwrap(), ms(500));
        assert_eq!("2rtt".parse::<Deadline>().unwrap(), Deadline::Rtt(2.0));
        assert_eq!(" 0.5RTT ".parse::<Deadline>().unwrap(), Deadline::Rtt(0.5));
        assert_eq!("auto".parse::<Deadline>().unwrap(), Deadline::Auto);
        for bad in [
            "", "fast", "-1ms", "0ms", "2 hours", "1000rtt", "0rtt", "nanrtt", "61s",
        ] {
            assert!(bad.parse::<Deadline>().is_err(), "{bad}");
        }
        for d in ["30ms", "2rtt", "auto", "0.25rtt"] {
            let v: Deadline = d.parse().unwrap();
            assert_eq!(v.to_string().parse::<Deadline>().unwrap(), v);
        }
        let rtt = Some(Duration::from_millis(40));
        assert_eq!(Deadline::Rtt(2.0).resolve(rtt), Duration::from_millis(80));
        assert_eq!(Deadline::Auto.resolve(rtt), Duration::from_millis(80));
        assert_eq!(
            Deadline::Auto.resolve(Some(Duration::from_micros(100))),
            AUTO_DEADLINE_FLOOR
        );
        assert_eq!(ms(7).resolve(rtt), Duration::from_millis(7));
        assert_eq!(Deadline::Rtt(0.5).resolve(None), INITIAL_RTT / 2);
        assert!(Deadline::Auto.leaves_round_trip() && Deadline::Rtt(2.0).leaves_round_trip());
        assert!(!Deadline::Rtt(1.0).leaves_round_trip());
        assert!(!Deadline::Fixed(Duration::from_secs(1)).leaves_round_trip());
    }

    #[test]
    fn the_answer_reach_follows_a_round_trip_of_sources() {
        let ms = Duration::from_millis;
        // 10 kpps, 50 ms RTT, 2 RTT: 1.2 x 10000 x (0.0514 + 0.0243) ~ 909: the least lag.
        assert_eq!(
            answer_reach_lag(10_000.0, ms(50), ms(100)),
            LOSS_REPORT_REPAIR_LAG
        );
        // 100 kpps, 600 ms RTT, 2 RTT: 1.2 x 100000 x (0.60104 + 0.29948) = 108062.4.
        assert_eq!(answer_reach_lag(100_000.0, ms(600), ms(1200)), 108_063);
        // Beyond what the decoder allows, or with no rate measured: the bounds.
        let max = hirt_fec::rlc::MAX_REPAIR_LAG;
        assert_eq!(answer_reach_lag(1e6, ms(600), ms(1200)), max);
        assert_eq!(
            answer_reach_lag(0.0, ms(600), ms(1200)),
            LOSS_REPORT_REPAIR_LAG
        );
        // A deadline shorter than the round trip asks for no more than the round trip.
        assert_eq!(
            answer_reach_lag(100_000.0, ms(600), ms(300)),
            answer_reach_lag(100_000.0, ms(600), ms(601))
        );
    }

    #[test]
    fn parses_sim_strings() {
        let m: FecMode = "fixed:w=4,step=2".parse().unwrap();
        assert_eq!(m.scheme, SchemeConfig::Rlc { window: 4, dt: 15 });
        assert_eq!(m.controller, ControllerConfig::Fixed { step: 2 });

        let m: FecMode = "maelstrom:r=20,i=1-20-40".parse().unwrap();
        assert_eq!(
            m.scheme,
            SchemeConfig::Layered {
                r: 20,
                interleaves: vec![1, 20, 40]
            }
        );
        assert_eq!(m.controller, ControllerConfig::None);

        let m: FecMode = "rs:20:10".parse().unwrap();
        assert_eq!(m.scheme, SchemeConfig::Rs { k: 20, m: 10 });

        let m = FecMode::parse_with_window("hirt", 100).unwrap();
        assert_eq!(
            m.scheme,
            SchemeConfig::Rlc {
                window: 100,
                dt: 15
            }
        );
        assert!(matches!(m.controller, ControllerConfig::Hirt(_)));

        let m = FecMode::parse_with_window("ours", 300).unwrap();
        assert_eq!(m.scheme.span(), 300);
        assert!(matches!(m.controller, ControllerConfig::Ours(_)));

        let m: FecMode = "rquic".parse().unwrap();
        assert_eq!(m.scheme, SchemeConfig::BlockXor { r: 10 });

        let m: FecMode = "xor:w=8,step=4".parse().unwrap();
        assert_eq!(m.scheme, SchemeConfig::Xor { window: 8 });
        assert_eq!(m.controller, ControllerConfig::Fixed { step: 4 });

        let m: FecMode = "none".parse().unwrap();
        assert_eq!(
            (m.scheme, m.controller),
            (SchemeConfig::None, ControllerConfig::None)
        );
    }

    #[test]
    fn rejects_bad_strings() {
        for s in [
            "",
            "foo",
            "fixed",
            "fixed:w=0,step=2",
            "fixed:w=4096,step=1",
            "rs:0:1",
            "rs:200:100",
            "rs:100:129",
            "blockxor:r=1025",
            "maelstrom:r=256,i=1",
            "maelstrom:r=20",
            "maelstrom:i=1-2",
            "xor:w=4,dt=3",
            "none:x",
            "hirt:zzz=1",
            "rlc:dt=16",
        ] {
            assert!(s.parse::<FecMode>().is_err(), "{s} accepted");
        }
    }

    #[test]
    fn scheme_display_round_trips() {
        for s in [
            "rlc:w=200,dt=15",
            "xor:w=8",
            "blockxor:r=7",
            "maelstrom:r=20,i=1-20-40",
            "rs:20:10",
            "none",
        ] {
            let c: SchemeConfig = s.parse().unwrap();
            assert_eq!(c.to_string(), s);
            assert_eq!(c.to_string().parse::<SchemeConfig>().unwrap(), c);
        }
    }
}
