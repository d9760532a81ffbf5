//! Traffic sources: when the next source packet is emitted, and how large it is.
//!
//! Sources are deterministic given their seed. Inter-departure times are in nanoseconds of
//! virtual time.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Shape of the arrival process.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// Constant bit rate: one packet every `1/rate`.
    Cbr,
    /// Poisson arrivals with mean rate `rate` (exponential gaps).
    Poisson,
    /// Alternating `on` (CBR at `rate`) and `off` (silent) periods.
    OnOff {
        /// Length of a talk spurt.
        on: Duration,
        /// Length of a silence.
        off: Duration,
    },
}

impl FromStr for Pattern {
    type Err = String;

    /// `cbr`, `poisson`, `onoff:on=100ms,off=400ms`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, rest) = s.trim().split_once(':').unwrap_or((s.trim(), ""));
        match name {
            "cbr" | "constant" => Ok(Pattern::Cbr),
            "poisson" => Ok(Pattern::Poisson),
            "onoff" => {
                let (mut on, mut off) = (None, None);
                for kv in rest.split(',').filter(|x| !x.is_empty()) {
                    let (k, v) = kv.split_once('=').ok_or_else(|| format!("bad `{kv}`"))?;
                    let d = parse_duration(v)?;
                    match k.trim() {
                        "on" => on = Some(d),
                        "off" => off = Some(d),
                        k => return Err(format!("unknown on/off parameter `{k}`")),
                    }
                }
                let on = on.ok_or("onoff needs on=")?;
                if on.is_zero() {
                    return Err("onoff: on must be > 0".into());
                }
                Ok(Pattern::OnOff {
                    on,
                    off: off.ok_or("onoff needs off=")?,
                })
            }
            _ => Err(format!(
                "unknown traffic pattern `{s}` (cbr | poisson | onoff:on=..,off=..)"
            )),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Cbr => f.write_str("cbr"),
            Pattern::Poisson => f.write_str("poisson"),
            Pattern::OnOff { on, off } => {
                write!(f, "onoff:on={}us,off={}us", on.as_micros(), off.as_micros())
            }
        }
    }
}

/// Packet sizes: one size, or a weighted mix (e.g. IMIX).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeMix {
    /// (size in bytes, weight).
    pub entries: Vec<(usize, u32)>,
}

impl SizeMix {
    /// The classic simple IMIX: 7 x 40 B, 4 x 576 B, 1 x 1500 B.
    pub fn imix() -> Self {
        SizeMix {
            entries: vec![(40, 7), (576, 4), (1500, 1)],
        }
    }

    /// Largest size in the mix.
    pub fn max(&self) -> usize {
        self.entries.iter().map(|e| e.0).max().unwrap_or(0)
    }
}

impl FromStr for SizeMix {
    type Err = String;

    /// `64`, `imix`, or `40x7,576x4,1500x1` (size x weight).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "imix" {
            return Ok(SizeMix::imix());
        }
        let mut entries = Vec::new();
        for item in s.split(',') {
            let (size, w) = item.split_once('x').unwrap_or((item, "1"));
            let size: usize = size
                .trim()
                .parse()
                .map_err(|_| format!("bad size `{item}`"))?;
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("bad weight `{item}`"))?;
            if !(1..=9000).contains(&size) || w == 0 {
                return Err(format!("size must be 1..=9000 and weight > 0: `{item}`"));
            }
            entries.push((size, w));
        }
        Ok(SizeMix { entries })
    }
}

impl fmt::Display for SizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.len() == 1 && self.entries[0].1 == 1 {
            return write!(f, "{}", self.entries[0].0);
        }
        for (n, (s, w)) in self.entries.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}x{w}")?;
        }
        Ok(())
    }
}

/// Parses `25ms`, `500us`, `1s`, `2.5ms`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "ms"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration `{s}`"))?;
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return Err(format!("bad duration unit in `{s}` (s, ms, us, ns)")),
    };
    if !v.is_finite() || v < 0.0 || v * scale > 1e15 {
        return Err(format!("duration out of range `{s}`"));
    }
    Ok(Duration::from_nanos((v * scale).round() as u64))
}

/// Parses a packet rate: `10000pps`, `10kpps`, `10000`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches("pps");
    let (t, mult) = match t.strip_suffix('k') {
        Some(t) => (t, 1e3),
        None => match t.strip_suffix('M') {
            Some(t) => (t, 1e6),
            None => (t, 1.0),
        },
    };
    match t.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * mult <= 1e9 => Ok(v * mult),
        _ => Err(format!("bad packet rate `{s}` (e.g. 10000pps)")),
    }
}

/// A seeded source of packets: gaps and sizes.
pub struct Source {
    pattern: Pattern,
    gap_ns: f64,
    sizes: SizeMix,
    total_weight: u32,
    /// Virtual time (ns) of the next emission.
    next_ns: f64,
    /// For on/off: end of the current on period.
    on_until_ns: f64,
    rng: ChaCha8Rng,
}

impl Source {
    /// A source of `rate` packets per second (mean, and during on periods).
    pub fn new(pattern: Pattern, rate: f64, sizes: SizeMix, seed: u64) -> Self {
        use rand::SeedableRng;
        let total_weight = sizes.entries.iter().map(|e| e.1).sum();
        let on_until_ns = match &pattern {
            Pattern::OnOff { on, .. } => on.as_nanos() as f64,
            _ => f64::INFINITY,
        };
        Source {
            pattern,
            gap_ns: 1e9 / rate,
            sizes,
            total_weight,
            next_ns: 0.0,
            on_until_ns,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_0F50_07CE),
        }
    }

    /// Emits the next packet: its virtual time (ns) and size. Times are non-decreasing.
    pub fn next_packet(&mut self) -> (u64, usize) {
        let t = self.next_ns;
        let size = self.size();
        let gap = match self.pattern {
            Pattern::Poisson => {
                let u: f64 = self.rng.gen::<f64>();
                -(1.0 - u).ln() * self.gap_ns
            }
            _ => self.gap_ns,
        };
        self.next_ns += gap;
        if let Pattern::OnOff { on, off } = self.pattern {
            if self.next_ns >= self.on_until_ns {
                // Skip the silence; the next spurt starts right after it.
                let next_on = self.on_until_ns + off.as_nanos() as f64;
                self.next_ns = next_on;
                self.on_until_ns = next_on + on.as_nanos() as f64;
            }
        }
        (t as u64, size)
    }

    fn size(&mut self) -> usize {
        if self.sizes.entries.len() == 1 {
            return self.sizes.entries[0].0;
        }
        let mut x = self.rng.gen_range(0..self.total_weight);
        for &(s, w) in &self.sizes.entries {
            if x < w {
                return s;
            }
            x -= w;
        }
        self.sizes.entries[0].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_duration("25ms").unwrap(), Duration::from_millis(25));
        assert_eq!(
            parse_duration("2.5ms").unwrap(),
            Duration::from_micros(2500)
        );
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert!(parse_duration("-1ms").is_err());
        assert_eq!(parse_rate("10000pps").unwrap(), 10000.0);
        assert_eq!(parse_rate("10kpps").unwrap(), 10000.0);
        assert!(parse_rate("0pps").is_err());
        assert_eq!("imix".parse::<SizeMix>().unwrap(), SizeMix::imix());
        assert_eq!(
            "40x7,576x4,1500x1".parse::<SizeMix>().unwrap(),
            SizeMix::imix()
        );
        assert_eq!("64".parse::<SizeMix>().unwrap().to_string(), "64");
        let p: Pattern = "onoff:on=100ms,off=400ms".parse().unwrap();
        assert_eq!(p.to_string().parse::<Pattern>().unwrap(), p);
    }

    #[test]
    fn cbr_and_poisson_rates() {
        let mut s = Source::new(Pattern::Cbr, 1000.0, "64".parse().unwrap(), 1);
        assert_eq!(s.next_packet(), (0, 64));
        assert_eq!(s.next_packet(), (1_000_000, 64));
        let mut s = Source::new(Pattern::Poisson, 100.0, SizeMix::imix(), 1);
        let mut last = 0;
        let mut bytes = 0;
        for _ in 0..100_000 {
            let (t, size) = s.next_packet();
            assert!(t >= last);
            last = t;
            bytes += size;
        }
        // 100k packets at 100 pps: ~1000 s.
        assert!((last as f64 / 1e9 - 1000.0).abs() < 20.0, "{last}");
        let mean = bytes as f64 / 1e5;
        let expect = (40.0 * 7.0 + 576.0 * 4.0 + 1500.0) / 12.0;
        assert!((mean - expect).abs() / expect < 0.03, "{mean} vs {expect}");
    }

    #[test]
    fn on_off_is_silent_when_off() {
        let p = Pattern::OnOff {
            on: Duration::from_millis(10),
            off: Duration::from_millis(30),
        };
        let mut s = Source::new(p, 1000.0, "64".parse().unwrap(), 1);
        for _ in 0..1000 {
            let (t, _) = s.next_packet();
            assert!(t % 40_000_000 < 10_000_000, "packet during silence at {t}");
        }
    }
}
