//! `hirt fec ...`: diagnostics for interop with other RFC 8681 implementations.

use clap::Subcommand;
use hirt_fec::coefficients::generate_coding_coefficients;

#[derive(Debug, Subcommand)]
pub enum FecCommand {
    /// Print the RFC 8681 §3.6 coding coefficients for a Repair_Key as JSON.
    ///
    /// Example: `hirt fec coefficients --key 1 --count 10 --dt 15 --m 8`.
    Coefficients {
        /// Repair_Key (the TinyMT32 seed), 0..=65535.
        #[arg(long)]
        key: u16,
        /// Number of coefficients (the window size NSS), 0..=4095.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(0..=4095))]
        count: u16,
        /// Density threshold DT, 0..=15 (15: no zero coefficients).
        #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u8).range(0..=15))]
        dt: u8,
        /// Field size m: 8 (GF(2^8), RLC) or 1 (GF(2), XOR family).
        #[arg(long, default_value = "8", value_parser = parse_m)]
        m: u8,
    },
}

pub fn run(cmd: FecCommand) -> anyhow::Result<()> {
    match cmd {
        FecCommand::Coefficients { key, count, dt, m } => {
            let json = coefficients_json(key, count, dt, m)?;
            println!("{json}");
            Ok(())
        }
    }
}

/// `--m`: only the two field sizes RFC 8681 defines.
fn parse_m(s: &str) -> Result<u8, String> {
    match s {
        "1" => Ok(1),
        "8" => Ok(8),
        _ => Err("m must be 1 (GF(2)) or 8 (GF(2^8))".into()),
    }
}

/// The JSON object printed by `hirt fec coefficients`.
fn coefficients_json(key: u16, count: u16, dt: u8, m: u8) -> anyhow::Result<serde_json::Value> {
    let mut cc = vec![0u8; count as usize];
    generate_coding_coefficients(key, &mut cc, dt, m)?;
    Ok(serde_json::json!({
        "repair_key": key,
        "count": count,
        "dt": dt,
        "m": m,
        "coefficients": cc,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_and_values() {
        let v = coefficients_json(1, 5, 15, 8).unwrap();
        // RFC 8681 Appendix A (rand256, seed 1) begins 37, 225, 177, 176, 21.
        assert_eq!(
            v["coefficients"],
            serde_json::json!([37, 225, 177, 176, 21])
        );
        assert_eq!(v["m"], 8);
        assert!(coefficients_json(1, 5, 15, 3).is_err());
    }
}
