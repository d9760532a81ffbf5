//! Per-packet loss models and their textual specification.
//!
//! A model is asked once per packet, in order, whether that packet is lost
//! ([`LossModel::lose`]). The textual form ([`LossSpec`], parsed with `FromStr`) is shared by
//! `hirt sim --loss` and the lab's link emulator:
//!
//! ```text
//! none
//! uniform:0.03                      (also uniform:p=0.03)
//! ge:p=0.00151,r=0.333[,k=1,h=0]    Gilbert-Elliott; loss prob 1-k in Good, 1-h in Bad
//! burst:len=20,every=2000           B consecutive losses every N packets (Maelstrom Fig. 17)
//! trace:FILE                        '1' lost, '0' delivered, whitespace ignored, '#' lines skipped
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

/// A per-packet loss process. Called once per packet, in transmission order.
pub trait LossModel: Send {
    /// Whether the next packet is lost.
    fn lose(&mut self) -> bool;
}

impl<T: LossModel + ?Sized> LossModel for Box<T> {
    fn lose(&mut self) -> bool {
        (**self).lose()
    }
}

/// Never loses anything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLoss;

impl LossModel for NoLoss {
    fn lose(&mut self) -> bool {
        false
    }
}

/// Independent losses with probability `p` (Bernoulli).
#[derive(Clone, Debug)]
pub struct Uniform {
    p: f64,
    rng: ChaCha8Rng,
}

impl Uniform {
    /// `p` is clamped to [0, 1].
    pub fn new(p: f64, seed: u64) -> Self {
        Self {
            p: p.clamp(0.0, 1.0),
            rng: crate::rng(seed, 1),
        }
    }
}

impl LossModel for Uniform {
    fn lose(&mut self) -> bool {
        self.p > 0.0 && self.rng.gen::<f64>() < self.p
    }
}

/// Two-state Gilbert-Elliott model. In state Good a packet is lost with probability `1 - k`, in
/// state Bad with `1 - h`; after each packet the chain moves Good -> Bad with probability `p` and
/// Bad -> Good with `r`. With the defaults `k = 1, h = 0` this is the classic Gilbert model of the
/// HIRT paper §VIII: loss rate `p / (p + r)`, mean burst length `1 / r`.
#[derive(Clone, Debug)]
pub struct GilbertElliott {
    p: f64,
    r: f64,
    k: f64,
    h: f64,
    bad: bool,
    rng: ChaCha8Rng,
}

impl GilbertElliott {
    /// Starts in state Good. Probabilities are clamped to [0, 1].
    pub fn new(p: f64, r: f64, k: f64, h: f64, seed: u64) -> Self {
        let c = |x: f64| x.clamp(0.0, 1.0);
        Self {
            p: c(p),
            r: c(r),
            k: c(k),
            h: c(h),
            bad: false,
            rng: crate::rng(seed, 2),
        }
    }

    /// Stationary loss probability.
    pub fn expected_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            return 1.0 - self.k;
        }
        let pi_bad = self.p / (self.p + self.r);
        pi_bad * (1.0 - self.h) + (1.0 - pi_bad) * (1.0 - self.k)
    }
}

impl LossModel for GilbertElliott {
    fn lose(&mut self) -> bool {
        let keep = if self.bad { self.h } else { self.k };
        // Skip the draw when the outcome is certain: the classic model (k=1, h=0) then costs one
        // draw per packet, for the transition.
        let lost = if keep >= 1.0 {
            false
        } else if keep <= 0.0 {
            true
        } else {
            self.rng.gen::<f64>() >= keep
        };
        let flip = if self.bad { self.r } else { self.p };
        if flip > 0.0 && self.rng.gen::<f64>() < flip {
            self.bad = !self.bad;
        }
        lost
    }
}

/// `len` consecutive losses every `every` packets: packets `every - len .. every` of each period
/// are lost, so each run starts with `every - len` deliveries.
#[derive(Clone, Debug)]
pub struct Burst {
    len: u64,
    every: u64,
    pos: u64,
}

impl Burst {
    /// `len` is capped at `every`; `every = 0` means no loss.
    pub fn new(len: u64, every: u64) -> Self {
        Self {
            len: len.min(every),
            every,
            pos: 0,
        }
    }
}

impl LossModel for Burst {
    fn lose(&mut self) -> bool {
        if self.every == 0 {
            return false;
        }
        let lost = self.pos >= self.every - self.len;
        self.pos += 1;
        if self.pos == self.every {
            self.pos = 0;
        }
        lost
    }
}

/// Replays a recorded loss pattern, looping when the run is longer than the trace.
#[derive(Clone, Debug)]
pub struct TraceLoss {
    lost: Vec<bool>,
    pos: usize,
}

impl TraceLoss {
    /// Parses the trace text: one character per packet, `1` lost, `0` delivered, whitespace
    /// ignored, lines whose first non-blank character is `#` skipped.
    pub fn parse(text: &str) -> Result<Self, ParseLossError> {
        let mut lost = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            for c in line.chars() {
                match c {
                    '0' => lost.push(false),
                    '1' => lost.push(true),
                    c if c.is_whitespace() => {}
                    c => return Err(ParseLossError::TraceChar { line: n + 1, c }),
                }
            }
        }
        if lost.is_empty() {
            return Err(ParseLossError::EmptyTrace);
        }
        Ok(Self { lost, pos: 0 })
    }

    /// Number of packets in one pass of the trace.
    pub fn len(&self) -> usize {
        self.lost.len()
    }

    /// Always false: an empty trace is refused by [`TraceLoss::parse`].
    pub fn is_empty(&self) -> bool {
        self.lost.is_empty()
    }
}

impl LossModel for TraceLoss {
    fn lose(&mut self) -> bool {
        let l = self.lost[self.pos];
        self.pos += 1;
        if self.pos == self.lost.len() {
            self.pos = 0;
        }
        l
    }
}

/// Why a loss specification was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ParseLossError {
    /// The model name before ':' is not one we know.
    #[error("unknown loss model `{0}` (none | uniform:P | ge:p=..,r=..[,k=..,h=..] | burst:len=B,every=N | trace:FILE)")]
    UnknownModel(String),
    /// A required parameter is missing.
    #[error("missing parameter `{0}`")]
    Missing(&'static str),
    /// A parameter this model does not take.
    #[error("unknown parameter `{0}`")]
    UnknownParam(String),
    /// A value that does not parse or lies out of range.
    #[error("bad value for `{name}`: `{value}`")]
    BadValue {
        /// The parameter.
        name: &'static str,
        /// What was given.
        value: String,
    },
    /// A trace file holds a character other than 0, 1 or whitespace outside comments.
    #[error("trace line {line}: unexpected character {c:?}")]
    TraceChar {
        /// 1-based line number.
        line: usize,
        /// The offending character.
        c: char,
    },
    /// A trace file with no packet in it.
    #[error("trace holds no packet")]
    EmptyTrace,
    /// The trace file could not be read.
    #[error("cannot read trace `{path}`: {msg}")]
    Io {
        /// The path given.
        path: String,
        /// The OS error.
        msg: String,
    },
}

/// A loss model as written on the command line; [`LossSpec::build`] instantiates it with a seed.
#[derive(Clone, Debug, PartialEq)]
pub enum LossSpec {
    /// No loss.
    None,
    /// Independent losses with probability `p`.
    Uniform {
        /// Loss probability.
        p: f64,
    },
    /// Gilbert-Elliott, see [`GilbertElliott`].
    GilbertElliott {
        /// P(Good -> Bad).
        p: f64,
        /// P(Bad -> Good).
        r: f64,
        /// P(delivery | Good).
        k: f64,
        /// P(delivery | Bad).
        h: f64,
    },
    /// `len` losses every `every` packets.
    Burst {
        /// Burst length B.
        len: u64,
        /// Period N.
        every: u64,
    },
    /// Replay of a trace file (read at build time).
    Trace(PathBuf),
}

impl LossSpec {
    /// Instantiates the model. Only `trace:` touches the file system (to read the trace).
    pub fn build(&self, seed: u64) -> Result<Box<dyn LossModel>, ParseLossError> {
        Ok(match *self {
            LossSpec::None => Box::new(NoLoss),
            LossSpec::Uniform { p } => Box::new(Uniform::new(p, seed)),
            LossSpec::GilbertElliott { p, r, k, h } => {
                Box::new(GilbertElliott::new(p, r, k, h, seed))
            }
            LossSpec::Burst { len, every } => Box::new(Burst::new(len, every)),
            LossSpec::Trace(ref path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ParseLossError::Io {
                    path: path.display().to_string(),
                    msg: e.to_string(),
                })?;
                Box::new(TraceLoss::parse(&text)?)
            }
        })
    }

    /// Long-run loss probability of the model, when known without reading a file.
    pub fn expected_loss(&self) -> Option<f64> {
        match *self {
            LossSpec::None => Some(0.0),
            LossSpec::Uniform { p } => Some(p),
            LossSpec::GilbertElliott { p, r, k, h } => {
                Some(GilbertElliott::new(p, r, k, h, 0).expected_loss())
            }
            LossSpec::Burst { len, every } => Some(if every == 0 {
                0.0
            } else {
                len.min(every) as f64 / every as f64
            }),
            LossSpec::Trace(_) => None,
        }
    }
}

fn prob(name: &'static str, v: &str) -> Result<f64, ParseLossError> {
    match v.trim().parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(ParseLossError::BadValue {
            name,
            value: v.to_string(),
        }),
    }
}

fn count(name: &'static str, v: &str) -> Result<u64, ParseLossError> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| ParseLossError::BadValue {
            name,
            value: v.to_string(),
        })
}

/// Splits `a=1,b=2` into pairs; a bare value (no '=') gets the name `""`.
fn params(s: &str) -> impl Iterator<Item = (&str, &str)> {
    s.split(',')
        .filter(|kv| !kv.trim().is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.trim(), v),
            None => ("", kv),
        })
}

impl FromStr for LossSpec {
    type Err = ParseLossError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        match name.trim() {
            "none" if rest.trim().is_empty() => Ok(LossSpec::None),
            "uniform" => {
                let mut p = None;
                for (k, v) in params(rest) {
                    match k {
                        "" | "p" => p = Some(prob("p", v)?),
                        k => return Err(ParseLossError::UnknownParam(k.to_string())),
                    }
                }
                Ok(LossSpec::Uniform {
                    p: p.ok_or(ParseLossError::Missing("p"))?,
                })
            }
            "ge" | "gilbert" => {
                let (mut p, mut r, mut k, mut h) = (None, None, 1.0, 0.0);
                for (key, v) in params(rest) {
                    match key {
                        "p" => p = Some(prob("p", v)?),
                        "r" => r = Some(prob("r", v)?),
                        "k" => k = prob("k", v)?,
                        "h" => h = prob("h", v)?,
                        key => return Err(ParseLossError::UnknownParam(key.to_string())),
                    }
                }
                Ok(LossSpec::GilbertElliott {
                    p: p.ok_or(ParseLossError::Missing("p"))?,
                    r: r.ok_or(ParseLossError::Missing("r"))?,
                    k,
                    h,
                })
            }
            "burst" => {
                let (mut len, mut every) = (None, None);
                for (key, v) in params(rest) {
                    match key {
                        "len" => len = Some(count("len", v)?),
                        "every" => every = Some(count("every", v)?),
                        key => return Err(ParseLossError::UnknownParam(key.to_string())),
                    }
                }
                let len = len.ok_or(ParseLossError::Missing("len"))?;
                let every = every.ok_or(ParseLossError::Missing("every"))?;
                if every == 0 || len > every {
                    return Err(ParseLossError::BadValue {
                        name: "len",
                        value: len.to_string(),
                    });
                }
                Ok(LossSpec::Burst { len, every })
            }
            "trace" if !rest.trim().is_empty() => Ok(LossSpec::Trace(PathBuf::from(rest.trim()))),
            "trace" => Err(ParseLossError::Missing("FILE")),
            other => Err(ParseLossError::UnknownModel(other.to_string())),
        }
    }
}

impl fmt::Display for LossSpec {
    /// The canonical form, which parses back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossSpec::None => write!(f, "none"),
            LossSpec::Uniform { p } => write!(f, "uniform:{p}"),
            LossSpec::GilbertElliott { p, r, k, h } => {
                write!(f, "ge:p={p},r={r}")?;
                if *k != 1.0 || *h != 0.0 {
                    write!(f, ",k={k},h={h}")?;
                }
                Ok(())
            }
            LossSpec::Burst { len, every } => write!(f, "burst:len={len},every={every}"),
            LossSpec::Trace(p) => write!(f, "trace:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 1_000_000;

    /// Loss rate and mean burst length measured over `N` packets.
    fn measure(m: &mut dyn LossModel) -> (f64, f64) {
        let (mut lost, mut bursts, mut prev) = (0usize, 0usize, false);
        for _ in 0..N {
            let l = m.lose();
            lost += l as usize;
            bursts += (l && !prev) as usize;
            prev = l;
        }
        (
            lost as f64 / N as f64,
            if bursts == 0 {
                0.0
            } else {
                lost as f64 / bursts as f64
            },
        )
    }

    #[test]
    fn uniform_rate_and_bursts() {
        let (rate, burst) = measure(&mut Uniform::new(0.03, 7));
        assert!((rate - 0.03).abs() < 0.001, "rate {rate}");
        // Geometric run length 1 / (1 - p).
        assert!((burst - 1.0 / 0.97).abs() < 0.01, "burst {burst}");
    }

    #[test]
    fn gilbert_classic_rate_and_bursts() {
        let (p, r) = (0.00151, 1.0 / 3.0);
        let (rate, burst) = measure(&mut GilbertElliott::new(p, r, 1.0, 0.0, 3));
        let expect = p / (p + r);
        assert!(
            (rate - expect).abs() / expect < 0.08,
            "rate {rate} vs {expect}"
        );
        assert!((burst - 3.0).abs() < 0.15, "burst {burst}");
    }

    #[test]
    fn gilbert_elliott_with_k_h() {
        let m = GilbertElliott::new(0.01, 0.1, 0.99, 0.3, 5);
        let expect = m.expected_loss();
        let (rate, _) = measure(&mut m.clone());
        assert!(
            (rate - expect).abs() / expect < 0.05,
            "rate {rate} vs {expect}"
        );
    }

    #[test]
    fn burst_pattern_is_exact() {
        let (rate, burst) = measure(&mut Burst::new(20, 2000));
        assert_eq!(rate, 0.01);
        assert_eq!(burst, 20.0);
        let mut b = Burst::new(2, 5);
        let got: Vec<bool> = (0..10).map(|_| b.lose()).collect();
        assert_eq!(
            got,
            [false, false, false, true, true, false, false, false, true, true]
        );
    }

    #[test]
    fn trace_parses_skips_and_loops() {
        let mut t = TraceLoss::parse("# comment 111\n 0 1\n\n  # also comment\n10\n").unwrap();
        assert_eq!(t.len(), 4);
        let got: Vec<bool> = (0..8).map(|_| t.lose()).collect();
        assert_eq!(got, [false, true, true, false, false, true, true, false]);
        assert_eq!(
            TraceLoss::parse("# only\n").unwrap_err(),
            ParseLossError::EmptyTrace
        );
        assert!(matches!(
            TraceLoss::parse("01x"),
            Err(ParseLossError::TraceChar { line: 1, c: 'x' })
        ));
    }

    #[test]
    fn trace_spec_builds_from_file() {
        let path = std::env::temp_dir().join(format!("hirt-trace-{}.txt", std::process::id()));
        std::fs::write(&path, "0001\n").unwrap();
        let spec: LossSpec = format!("trace:{}", path.display()).parse().unwrap();
        let mut m = spec.build(0).unwrap();
        let got: Vec<bool> = (0..4).map(|_| m.lose()).collect();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(got, [false, false, false, true]);
    }

    #[test]
    fn spec_round_trips() {
        for s in [
            "none",
            "uniform:0.03",
            "ge:p=0.00151,r=0.333",
            "ge:p=0.01,r=0.1,k=0.99,h=0.3",
            "burst:len=20,every=2000",
            "trace:/tmp/x.txt",
        ] {
            let spec: LossSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(spec.to_string().parse::<LossSpec>().unwrap(), spec);
        }
        assert_eq!(
            "uniform:p=0.5".parse::<LossSpec>().unwrap(),
            LossSpec::Uniform { p: 0.5 }
        );
    }

    #[test]
    fn spec_rejects_garbage() {
        for s in [
            "",
            "uniform",
            "uniform:1.5",
            "uniform:-0.1",
            "uniform:NaN",
            "ge:p=0.1",
            "ge:p=0.1,r=0.2,z=1",
            "burst:len=30,every=20",
            "burst:len=1,every=0",
            "trace:",
            "none:3",
            "wat:1",
        ] {
            assert!(s.parse::<LossSpec>().is_err(), "{s} accepted");
        }
    }

    #[test]
    fn same_seed_same_pattern() {
        let spec: LossSpec = "ge:p=0.01,r=0.3".parse().unwrap();
        let a: Vec<bool> = {
            let mut m = spec.build(42).unwrap();
            (0..10_000).map(|_| m.lose()).collect()
        };
        let mut m = spec.build(42).unwrap();
        assert!(a.iter().all(|&x| x == m.lose()));
        let mut other = spec.build(43).unwrap();
        assert!(a.iter().any(|&x| x != other.lose()));
    }
}
