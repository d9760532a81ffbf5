//! The datagrams of a flood, built before it starts (the flooder only cycles through them, so
//! its rate is not bounded by generating them): random bytes, hirt-looking datagrams, replays
//! of datagrams recorded from the real session, truncations of those.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a flood sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloodKind {
    /// Random bytes, 1-1400 of them.
    Random,
    /// A data mode byte of a key phase the session uses (or, one in eight, a handshake
    /// initiation's type byte and length), then garbage: each one costs the server an AEAD
    /// verification (or a mac1 check).
    HirtLooking,
    /// Datagrams the client sent in the running session, sent again verbatim.
    Replay,
    /// Recorded datagrams cut short at a random length.
    Truncated,
    /// The four kinds in turn (its hirt-looking quarter: data-looking datagrams only).
    Mix,
}

impl FloodKind {
    /// Whether this kind needs recorded datagrams of the session.
    pub fn needs_capture(self) -> bool {
        matches!(
            self,
            FloodKind::Replay | FloodKind::Truncated | FloodKind::Mix
        )
    }
}

/// Largest junk datagram built (fits the lab's 1500-byte underlay).
pub const MAX_JUNK: usize = 1400;
/// Type byte of a hirt handshake initiation.
const INITIATION: u8 = 0x03;
/// Length of a hirt handshake initiation.
const INITIATION_LEN: usize = 113;
/// Mode byte of an encrypted data datagram in key phase 0 (the phase sits in bits 4-5).
const DATA_MODE: u8 = 0x01;

/// `count` datagrams of `kind`, from `recorded` (datagrams the client sent to the server's
/// port) where the kind needs them. Fails when a kind needs recordings and there are none.
pub fn pool(
    kind: FloodKind,
    recorded: &[Vec<u8>],
    count: usize,
    seed: u64,
) -> anyhow::Result<Vec<Vec<u8>>> {
    anyhow::ensure!(
        !kind.needs_capture() || !recorded.is_empty(),
        "no datagram of the session was recorded: nothing to replay"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let phases = data_phases(recorded);
    Ok((0..count)
        .map(|i| {
            let k = match kind {
                FloodKind::Mix => [
                    FloodKind::Random,
                    FloodKind::HirtLooking,
                    FloodKind::Replay,
                    FloodKind::Truncated,
                ][i % 4],
                k => k,
            };
            one(k, recorded, &phases, i, &mut rng)
        })
        .collect())
}

/// The mode bytes of the recorded data datagrams (the key phases in use), or every phase's
/// when none was recorded.
fn data_phases(recorded: &[Vec<u8>]) -> Vec<u8> {
    let mut modes: Vec<u8> = recorded
        .iter()
        .filter_map(|d| d.first().copied())
        .filter(|m| m & 0x0f == DATA_MODE)
        .map(|m| m & 0x3f)
        .collect();
    modes.sort_unstable();
    modes.dedup();
    if modes.is_empty() {
        modes = (0..4).map(|p| DATA_MODE | (p << 4)).collect();
    }
    modes
}

fn one(
    kind: FloodKind,
    recorded: &[Vec<u8>],
    phases: &[u8],
    i: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<u8> {
    match kind {
        FloodKind::Random | FloodKind::Mix => {
            let mut d = vec![0u8; rng.gen_range(1..=MAX_JUNK)];
            rng.fill(&mut d[..]);
            d
        }
        FloodKind::HirtLooking => {
            if i % 8 == 7 {
                let mut d = vec![0u8; INITIATION_LEN];
                rng.fill(&mut d[..]);
                d[0] = INITIATION;
                return d;
            }
            // Header (mode, 8-byte counter), frame, tag: at least a minimal frame.
            let mut d = vec![0u8; rng.gen_range(40..=MAX_JUNK)];
            rng.fill(&mut d[..]);
            d[0] = phases[rng.gen_range(0..phases.len())];
            d
        }
        FloodKind::Replay => recorded[i % recorded.len()].clone(),
        FloodKind::Truncated => {
            let r = &recorded[i % recorded.len()];
            let len = if r.len() > 1 {
                rng.gen_range(1..r.len())
            } else {
                0
            };
            r[..len].to_vec()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Vec<Vec<u8>> {
        vec![vec![0x11; 300], vec![0x11; 80], vec![0x03; 113]]
    }

    #[test]
    fn replays_are_the_recorded_datagrams_and_truncations_are_shorter() {
        let rec = recorded();
        let p = pool(FloodKind::Replay, &rec, 6, 1).unwrap();
        assert!(p.iter().all(|d| rec.contains(d)));
        let t = pool(FloodKind::Truncated, &rec, 30, 1).unwrap();
        for (i, d) in t.iter().enumerate() {
            let r = &rec[i % rec.len()];
            assert!(d.len() < r.len() && r.starts_with(d), "{i}");
        }
    }

    #[test]
    fn hirt_looking_datagrams_use_the_recorded_phase() {
        let p = pool(FloodKind::HirtLooking, &recorded(), 64, 2).unwrap();
        let data = p.iter().filter(|d| d[0] == 0x11).count();
        let init = p
            .iter()
            .filter(|d| d[0] == INITIATION && d.len() == INITIATION_LEN)
            .count();
        assert_eq!((data, init), (56, 8));
        assert!(p.iter().all(|d| d.len() <= MAX_JUNK));
    }

    #[test]
    fn mix_takes_every_kind_in_turn_and_replays_need_recordings() {
        let p = pool(FloodKind::Mix, &recorded(), 8, 3).unwrap();
        assert!(recorded().contains(&p[2]) && recorded().contains(&p[6]));
        assert!(pool(FloodKind::Replay, &[], 4, 1).is_err());
        assert_eq!(pool(FloodKind::Random, &[], 4, 1).unwrap().len(), 4);
    }
}
