//! The link profiles of the lab (delay, jitter, rate, queue, loss model per direction) and the
//! overrides a configuration applies to them.

use std::time::Duration;

use crate::config::{LabConfig, Profile};
use crate::emu::core::{DirectionConfig, QueueLimit};

/// The link parameters of a profile, (uplink client->server, downlink server->client).
pub fn profile_links(p: Profile, seed: u64) -> (DirectionConfig, DirectionConfig) {
    let ms = Duration::from_millis;
    let mk = |delay, jitter, rate: u64, loss: &str, queue| DirectionConfig {
        delay,
        jitter,
        rate_bps: Some(rate),
        queue: QueueLimit::Packets(queue),
        loss: loss.into(),
        seed,
        ..Default::default()
    };
    let (up, down) = match p {
        Profile::Starlink | Profile::Dual => {
            let ge = "ge:p=0.00151,r=0.333";
            (
                mk(ms(25), ms(1), 100_000_000, ge, 1000),
                mk(ms(25), ms(1), 100_000_000, ge, 1000),
            )
        }
        Profile::Lte => {
            let ge = "ge:p=0.005,r=0.5";
            (
                mk(ms(20), ms(5), 20_000_000, ge, 500),
                mk(ms(20), ms(5), 50_000_000, ge, 1000),
            )
        }
        Profile::Wan => (
            mk(ms(50), ms(0), 100_000_000, "uniform:0.001", 2000),
            mk(ms(50), ms(0), 100_000_000, "uniform:0.001", 2000),
        ),
        Profile::Wan1 => (
            mk(ms(50), ms(0), 100_000_000, "uniform:0.01", 2000),
            mk(ms(50), ms(0), 100_000_000, "uniform:0.01", 2000),
        ),
        Profile::Iot => {
            let ge = "ge:p=0.01,r=0.4";
            (
                mk(ms(10), ms(1), 10_000_000, ge, 100),
                mk(ms(10), ms(1), 10_000_000, ge, 100),
            )
        }
        Profile::Clean => (
            mk(ms(0), ms(0), 0, "none", 1000),
            mk(ms(0), ms(0), 0, "none", 1000),
        ),
    };
    // Different seeds per direction, both derived from the lab seed.
    (
        DirectionConfig {
            seed: seed.wrapping_mul(2),
            ..up
        },
        DirectionConfig {
            seed: seed.wrapping_mul(2) + 1,
            ..down
        },
    )
}

/// The links of a configuration: its profile's, with the configured overrides.
pub fn links(args: &LabConfig) -> (DirectionConfig, DirectionConfig) {
    let (mut up, mut down) = profile_links(args.profile, args.seed);
    for d in [&mut up, &mut down] {
        if let Some(l) = &args.loss {
            d.loss = l.clone();
        }
        if let Some(v) = args.delay {
            d.delay = v;
        }
        if let Some(v) = args.jitter {
            d.jitter = v;
        }
        if let Some(v) = args.rate {
            d.rate_bps = (v > 0).then_some(v);
        }
        if let Some(v) = args.queue {
            d.queue = v;
        }
        if let Some(v) = args.reorder {
            d.reorder = v;
        }
        if args.ecn_mark_above.is_some() {
            d.ecn_mark_above = args.ecn_mark_above;
        }
    }
    (up, down)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_starlink_matches_the_paper() {
        for p in Profile::ALL {
            let (u, d) = profile_links(p, 1);
            u.link_config().unwrap();
            d.link_config().unwrap();
            assert_ne!(u.seed, d.seed);
        }
        let (u, d) = profile_links(Profile::Starlink, 1);
        assert_eq!(u.delay + d.delay, Duration::from_millis(50));
        let spec: hirt_channel::LossSpec = u.loss.parse().unwrap();
        let loss = spec.expected_loss().unwrap();
        assert!((0.004..0.006).contains(&loss), "{loss}");
    }
}
