//! The path manager on untrusted observations: what the far end reports about each path (RTT
//! echoes, loss, bytes, intervals; unknown path ids) arrives in authenticated but otherwise
//! arbitrary feedback, interleaved with sends, flows, repairs, timers and live policy changes.
//! Nothing may panic, every path handed out must be one of the manager's, the policy's
//! probabilities stay a distribution, and a repair is never held longer than a round trip.
#![no_main]

use std::time::{Duration, Instant};

use hirt_core::path::{
    Exp3Feedback, PathManager, PathManagerConfig, PathObservation, PolicyConfig, PolicyKind,
    RepairPath,
};
use libfuzzer_sys::fuzz_target;

const PATHS: [u8; 3] = [0, 1, 2];

fn policy(b: u8) -> PolicyConfig {
    let kind = match b % 5 {
        0 => PolicyKind::Failover,
        1 => PolicyKind::LowestDelay,
        2 => PolicyKind::Greedy,
        3 => PolicyKind::Random,
        _ => PolicyKind::Bond,
    };
    let mut p = PolicyConfig::of(kind);
    if b & 0x80 != 0 {
        p.feedback = Exp3Feedback::EveryPath;
    }
    p
}

/// The next `n` bytes (zero-padded past the end).
fn take<'a>(data: &mut &'a [u8], n: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    let k = n.min(data.len());
    out[..k].copy_from_slice(&data[..k]);
    *data = &data[k..];
    out
}

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    let Some(&first) = data.first() else {
        return;
    };
    data = &data[1..];
    let cfg = PathManagerConfig {
        policy: policy(first),
        repair_path: if first & 0x40 != 0 {
            RepairPath::Diverse
        } else {
            RepairPath::Same
        },
        ..Default::default()
    };
    let mut m = PathManager::new(cfg, &PATHS, u64::from(first)).unwrap();
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let mut now = t0;
    let mut sent_at: Vec<Instant> = vec![t0];
    while let Some(&op) = data.first() {
        data = &data[1..];
        let b = take(&mut data, 8);
        let path = b[0] % 4; // 3 is not a path of the manager
        match op % 8 {
            0 => {
                now += Duration::from_micros(u64::from(u16::from_le_bytes([b[0], b[1]])) * 50);
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                }
            }
            1 => {
                let back = usize::from(b[1]) % sent_at.len();
                let obs = PathObservation {
                    path,
                    echo_sent_at: (b[2] & 1 == 1).then(|| sent_at[sent_at.len() - 1 - back]),
                    echo_held: Duration::from_micros(u64::from(b[3]) * 1000),
                    received: u32::from(b[4]) * 7,
                    lost: u32::from(b[5]),
                    bytes: u64::from(u16::from_le_bytes([b[6], b[7]])) * 64,
                    interval: Duration::from_millis(u64::from(b[2] >> 1)),
                };
                m.handle_observation(&obs, now);
            }
            2 => {
                let hash = u64::from_le_bytes(b);
                let p = m.path_for_flow(hash, usize::from(b[1]) * 8, now);
                assert!(PATHS.contains(&p), "flow on {p}");
                sent_at.push(now);
            }
            3 => {
                let p = m.path_for_repair(path, usize::from(b[1]) * 8, now);
                assert!(PATHS.contains(&p), "repair on {p}");
                let hold = m.repair_hold(path, p);
                let slowest = PATHS
                    .iter()
                    .filter_map(|&q| m.srtt(q))
                    .max()
                    .unwrap_or(Duration::ZERO);
                assert!(
                    hold <= slowest + Duration::from_secs(1),
                    "hold {hold:?}, slowest SRTT {slowest:?}"
                );
            }
            4 => {
                m.on_sent(path, usize::from(b[1]) * 8, now);
                sent_at.push(now);
            }
            5 => {
                let _ = m.set_policy(policy(b[1]), now);
            }
            6 => m.set_repair_path(if b[1] & 1 == 1 {
                RepairPath::Diverse
            } else {
                RepairPath::Same
            }),
            _ => {
                while m.poll_probe().is_some() {}
                while m.poll_event().is_some() {}
            }
        }
        if sent_at.len() > 64 {
            sent_at.drain(..32);
        }
        let total: f64 = PATHS.iter().map(|&p| m.probability(p)).sum();
        assert!(
            PATHS
                .iter()
                .all(|&p| (0.0..=1.0 + 1e-9).contains(&m.probability(p))),
            "probabilities out of range: {:?}",
            PATHS.map(|p| m.probability(p))
        );
        assert!(
            total == 0.0 || (total - 1.0).abs() < 1e-6,
            "probabilities sum to {total}"
        );
        for &p in &PATHS {
            let w = m.exp3_weight_share(p);
            assert!((0.0..=1.0 + 1e-9).contains(&w), "weight share {w}");
        }
        if let Some(p) = m.preferred() {
            assert!(PATHS.contains(&p));
        }
    }
});
