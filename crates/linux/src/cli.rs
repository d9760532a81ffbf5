//! `hirt srv6`, `hirt udp`, `hirt status`: flags, TOML config files, dispatch.
//!
//! Every flag may also come from `--config FILE` (TOML, keys = long flag names, e.g.
//! `enc-sid = "fc00:1::1"`); flags on the command line win. See docs/dataplane.md.

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

macro_rules! merge_fields {
    ($dst:ident, $src:ident; opt: $($o:ident),*; flag: $($f:ident),*) => {
        $( if $dst.$o.is_none() { $dst.$o = $src.$o; } )*
        $( $dst.$f = $dst.$f || $src.$f; )*
    };
}

/// `hirt srv6`: run the encoder and/or decoder SID of an SRv6 FEC tunnel.
#[derive(Debug, Default, Clone, clap::Args, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Srv6Args {
    /// TOML file with any of these flags (long names as keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// encoder, decoder or both.
    #[arg(long)]
    pub role: Option<String>,
    /// The encoder SID (owned when role is encoder/both; feedback goes there otherwise).
    #[arg(long)]
    pub enc_sid: Option<std::net::Ipv6Addr>,
    /// The decoder SID (owned when role is decoder/both; repairs go there otherwise).
    #[arg(long)]
    pub dec_sid: Option<std::net::Ipv6Addr>,
    /// Decoder behaviour after recovery: dt6 (decapsulate, route), dx6:NEXTHOP, end.
    #[arg(long)]
    pub behavior: Option<String>,
    /// Routing table for dt6 (default main, 254) / the table hirt fills for dx6 (default 4869).
    #[arg(long)]
    pub table: Option<u32>,
    /// TUN device the SIDs are routed to.
    #[arg(long)]
    pub dev: Option<String>,
    /// FEC mode: ours (adaptive RLC, default), hirt, fixed:w=200,step=10, rs:k:m, none, ...
    #[arg(long)]
    pub fec: Option<String>,
    /// Pin a Reed-Solomon block code k:m (tinyfecVPN style), overrides --fec.
    #[arg(short = 'f', long = "rs")]
    pub rs: Option<String>,
    /// Sliding window when --fec does not give one (default 200).
    #[arg(long)]
    pub window: Option<u16>,
    /// Worker threads / TUN queues / encoder streams (default 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Key for the auth TLV on repair and feedback packets (hex with 0x prefix, else the bytes).
    #[arg(long)]
    pub hmac_key: Option<String>,
    /// Key id carried in the auth TLV (default 1).
    #[arg(long)]
    pub key_id: Option<u32>,
    /// Also add a real RFC 8754 HMAC TLV to repair/feedback packets.
    #[arg(long)]
    #[serde(rename = "rfc8754-hmac")]
    pub rfc8754_hmac: bool,
    /// Authenticate source packets too (needs --hmac-key): the decoder drops and counts
    /// unauthenticated or replayed sources.
    #[arg(long)]
    pub auth_sources: bool,
    /// Time-driven repair: a repair goes out when sources have been unprotected this long, in
    /// ms (sparse traffic; default 5, 0 = off).
    #[arg(long)]
    pub repair_delay_ms: Option<f64>,
    /// Re-sends of a time-driven repair, each one repair delay after the previous (default 1).
    #[arg(long)]
    pub repair_retries: Option<u8>,
    /// Gap between the re-sends of a time-driven repair, in ms (default: the repair delay).
    #[arg(long)]
    pub repair_retry_gap_ms: Option<f64>,
    /// Worker load (busy fraction, 0..1) above which repair generation and solving are
    /// randomly skipped (HIRT overload control; default 0.9, 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// In-order release at the decoder: sources behind a missing one wait until it is
    /// recovered, or at most this many ms, so transports see a recovered loss as a short delay
    /// instead of reordering (which makes QUIC and TCP cut their window). Pays off when repairs
    /// come soon after a loss (e.g. with `--repair-delay-ms 1`); 30 is a good hold. Default off
    /// (0): every packet is delivered at once, recovered ones out of order.
    #[arg(long)]
    pub in_order_ms: Option<f64>,
    /// How many sources a repair may arrive behind the newest source the decoder has seen,
    /// beyond what the window allows anyway: the decoder keeps that many more sources. Raise it
    /// where repairs take a slower path than the sources. Default 0; 2048 with
    /// --kernel-sources, whose repairs trail the sources the kernel delivers.
    #[arg(long)]
    pub repair_lag: Option<u32>,
    /// Do not install routes for the SIDs (the operator routes them to --dev).
    #[arg(long)]
    pub no_routes: bool,
    /// Mark recovered packets ECN-CE (if ECN-capable).
    #[arg(long)]
    pub ecn_ce: bool,
    /// DSCP for repair and feedback packets (0-63).
    #[arg(long)]
    pub repair_dscp: Option<u8>,
    /// TLV type values source,repair,feedback,auth (default 124,125,126,252).
    #[arg(long)]
    pub tlv_types: Option<String>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9469).
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Control socket for `hirt status` (default /run/hirt-<dev>.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// MTU of the TUN device (default 9000: hirt only adds 8-32 bytes of TLVs to what it gets).
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Seed for the core's randomness (default from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// AF_XDP fast path on these devices (comma-separated): an XDP program hands packets to our
    /// SIDs straight to hirt, which sends what it forwards out of these devices itself (next
    /// hop from the kernel's route and neighbour tables), skipping the kernel's forwarding and
    /// the TUN device. Everything else, and what hirt cannot resolve, still uses --dev.
    #[arg(long, value_delimiter = ',')]
    pub xdp: Option<Vec<String>>,
    /// With --xdp: sources never cross user space. On an encoder the XDP program does the End,
    /// numbers the source and inserts its TLV, and the kernel forwards it (the encoder SID
    /// becomes a `seg6local End` route for what the program leaves alone); on a decoder
    /// (End.DT6) the kernel's own End.DT6 delivers it (a `seg6local End.DT6` route). hirt
    /// codes repairs and recovers from copies the programs put in a BPF ring buffer; repairs
    /// and feedback still go through AF_XDP. All of the tunnel's packets must arrive on the
    /// --xdp devices, on receive queue 0; needs --role encoder or decoder and --threads 1;
    /// not with --auth-sources or --in-order-ms.
    #[arg(long)]
    pub kernel_sources: bool,
    /// How the XDP program is attached: `auto` (native, generic if the driver refuses),
    /// `native` or `generic`. On veth, native XDP turns each socket buffer into an XDP frame
    /// and back with a copy; for what the program passes on (--kernel-sources) generic is
    /// cheaper there.
    #[arg(long)]
    pub xdp_mode: Option<String>,
}

impl Srv6Args {
    /// Fills unset flags from `--config`.
    pub fn resolve(mut self) -> anyhow::Result<Self> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path:?}"))?;
        let file: Srv6Args = toml::from_str(&text).with_context(|| format!("parsing {path:?}"))?;
        let s = &mut self;
        merge_fields!(s, file;
            opt: role, enc_sid, dec_sid, behavior, table, dev, fec, rs, window, threads, hmac_key,
                 key_id, repair_dscp, tlv_types, metrics, control, mtu, seed, overload_threshold,
                 repair_delay_ms, repair_retries, repair_retry_gap_ms, in_order_ms, repair_lag,
                 xdp, xdp_mode;
            flag: rfc8754_hmac, no_routes, ecn_ce, auth_sources, kernel_sources);
        Ok(self)
    }
}

/// `hirt udp`: a FEC tunnel between two peers over UDP (tinyfecVPN-like).
#[derive(Debug, Default, Clone, clap::Args, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct UdpArgs {
    /// TOML file with any of these flags (long names as keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run as the server (listens, learns the client's address).
    #[arg(short = 's', long)]
    pub server: bool,
    /// Run as the client.
    #[arg(short = 'c', long)]
    pub client: bool,
    /// Server: address to listen on, e.g. 0.0.0.0:4096 or [::]:4096.
    #[arg(short = 'l', long)]
    pub listen: Option<String>,
    /// Client: the server's address.
    #[arg(short = 'r', long)]
    pub remote: Option<String>,
    /// Shared secret (any string; both peers must use the same).
    #[arg(short = 'k', long)]
    pub key: Option<String>,
    /// Authenticate only, do not encrypt (for traffic that is already encrypted).
    #[arg(long)]
    pub no_encrypt: bool,
    /// Run with no key at all (anyone can inject packets): must be explicit.
    #[arg(long)]
    pub insecure: bool,
    /// FEC mode: ours (adaptive RLC, default), hirt, fixed:w=..,step=.., none, ...
    #[arg(long)]
    pub fec: Option<String>,
    /// Pin a Reed-Solomon block code k:m (like tinyfecVPN -f 20:10), overrides --fec.
    #[arg(short = 'f', long = "rs")]
    pub rs: Option<String>,
    /// Sliding window when --fec does not give one (default 200).
    #[arg(long)]
    pub window: Option<u16>,
    /// TUN device name (default hirt-udp).
    #[arg(long)]
    pub dev: Option<String>,
    /// Address of our end of the tunnel (default 10.77.0.1/24 server, 10.77.0.2/24 client).
    #[arg(long)]
    pub tun_addr: Option<String>,
    /// Extra IPv6 address of our end (e.g. fd77::1/64).
    #[arg(long)]
    pub tun_addr6: Option<String>,
    /// TUN MTU (default 1400; see docs for the arithmetic).
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Do not clamp the TCP MSS of SYNs crossing the tunnel.
    #[arg(long)]
    pub no_mss_clamp: bool,
    /// Do not use TUN segmentation offloads (by default the kernel hands hirt TCP packets of
    /// up to 64 KiB, which hirt cuts into segments, and takes runs of segments back in one
    /// write; see docs/dataplane.md).
    #[arg(long)]
    pub no_tun_offload: bool,
    /// Keepalive interval in ms (default 1000).
    #[arg(long)]
    pub keepalive_ms: Option<u64>,
    /// Worker threads (default 1; the decoder steers by stream id).
    #[arg(long)]
    pub threads: Option<usize>,
    /// DSCP for repair packets (0-63).
    #[arg(long)]
    pub repair_dscp: Option<u8>,
    /// Mark recovered packets ECN-CE (if ECN-capable).
    #[arg(long)]
    pub ecn_ce: bool,
    /// Serve Prometheus metrics on this address.
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Control socket for `hirt status` (default /run/hirt-<dev>.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Time-driven repair: a repair goes out when sources have been unprotected this long, in
    /// ms (sparse traffic; default 5, 0 = off).
    #[arg(long)]
    pub repair_delay_ms: Option<f64>,
    /// Re-sends of a time-driven repair, each one repair delay after the previous (default 1).
    #[arg(long)]
    pub repair_retries: Option<u8>,
    /// Gap between the re-sends of a time-driven repair, in ms (default: the repair delay).
    #[arg(long)]
    pub repair_retry_gap_ms: Option<f64>,
    /// Worker load (busy fraction, 0..1) above which repair generation and solving are
    /// randomly skipped (HIRT overload control; default 0.9, 1 = off).
    #[arg(long)]
    pub overload_threshold: Option<f64>,
    /// In-order release at the decoder: sources behind a missing one wait until it is
    /// recovered, or at most this many ms, so transports see a recovered loss as a short delay
    /// instead of reordering (which makes QUIC and TCP cut their window). Pays off when repairs
    /// come soon after a loss (e.g. with `--repair-delay-ms 1`); 30 is a good hold. Default off
    /// (0): every packet is delivered at once, recovered ones out of order.
    #[arg(long)]
    pub in_order_ms: Option<f64>,
    /// Seed for the core's randomness (default from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl UdpArgs {
    /// Fills unset flags from `--config`.
    pub fn resolve(mut self) -> anyhow::Result<Self> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path:?}"))?;
        let file: UdpArgs = toml::from_str(&text).with_context(|| format!("parsing {path:?}"))?;
        let s = &mut self;
        merge_fields!(s, file;
            opt: listen, remote, key, fec, rs, window, dev, tun_addr, tun_addr6, mtu,
                 keepalive_ms, threads, repair_dscp, metrics, control, seed, repair_delay_ms,
                 repair_retries, repair_retry_gap_ms, overload_threshold, in_order_ms;
            flag: server, client, no_encrypt, insecure, no_mss_clamp, no_tun_offload, ecn_ce);
        Ok(self)
    }
}

/// `hirt status`: print the counters of a running instance.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The instance's control socket (default: the only /run/hirt-*.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Change the encoder's controller live (e.g. `fixed:step=10`, `ours`, `hirt`).
    #[arg(long)]
    pub set_controller: Option<String>,
}

/// Runs `hirt srv6`.
pub fn run_srv6(args: Srv6Args) -> anyhow::Result<()> {
    crate::srv6_run::run(args.resolve()?)
}

/// Runs `hirt udp`.
pub fn run_udp(args: UdpArgs) -> anyhow::Result<()> {
    crate::udp::run(args.resolve()?)
}

/// Runs `hirt status`.
pub fn run_status(args: StatusArgs) -> anyhow::Result<()> {
    let path = match args.control {
        Some(p) => p,
        None => {
            let mut found: Vec<PathBuf> = std::fs::read_dir("/run")?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    n.starts_with("hirt-") && n.ends_with(".sock")
                })
                .collect();
            match found.len() {
                1 => found.remove(0),
                0 => anyhow::bail!("no /run/hirt-*.sock found: pass --control"),
                _ => anyhow::bail!("several instances ({found:?}): pass --control"),
            }
        }
    };
    use std::fmt::Write as _;
    let mut out = String::new();
    if let Some(c) = args.set_controller {
        let r = crate::control::request(&path, &format!("set controller {c}"))?;
        let _ = writeln!(out, "{r}");
        return print_out(&out);
    }
    let r = crate::control::request(&path, "status")?;
    if args.json {
        let _ = writeln!(out, "{r}");
        return print_out(&out);
    }
    let v: serde_json::Value = serde_json::from_str(&r)?;
    let st = &v["status"];
    let _ = writeln!(
        out,
        "mode: {}   controller: {}",
        st["mode"].as_str().unwrap_or("?"),
        v["controller"]
    );
    if let Some(g) = st["global"].as_object() {
        for (k, val) in g {
            let _ = writeln!(out, "  {k:<24} {val}");
        }
    }
    if let Some(streams) = st["streams"].as_array() {
        for (i, s) in streams.iter().enumerate() {
            let _ = writeln!(out, "stream {i}:");
            if let Some(o) = s.as_object() {
                for (k, val) in o {
                    let _ = writeln!(out, "  {k:<24} {val}");
                }
            }
        }
    }
    print_out(&out)
}

/// Writes `s` to stdout. A closed pipe (`hirt status | head`) is not an error: the reader has
/// what it wanted, and `println!` would panic on EPIPE (Rust ignores SIGPIPE).
fn print_out(s: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    match o.write_all(s.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Parses a key given as `0x<hex>` or as plain bytes.
pub fn parse_key(s: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(h) = s.strip_prefix("0x") {
        anyhow::ensure!(h.len() % 2 == 0, "odd-length hex key");
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).context("bad hex key"))
            .collect()
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

/// The FEC mode string from `--fec` / `-f k:m`.
pub fn fec_string(fec: Option<&str>, rs: Option<&str>) -> String {
    match rs {
        Some(km) => format!("rs:{km}"),
        None => fec.unwrap_or("ours").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_fills_unset_flags_only() {
        let dir = std::env::temp_dir().join(format!("hirt-cfg-{}.toml", std::process::id()));
        std::fs::write(
            &dir,
            "role = \"encoder\"\nenc-sid = \"fc00::1\"\nfec = \"hirt\"\necn-ce = true\nthreads = 2\n\
             repair-lag = 512\n",
        )
        .unwrap();
        let a = Srv6Args {
            config: Some(dir.clone()),
            fec: Some("none".into()),
            ..Default::default()
        };
        let r = a.resolve().unwrap();
        assert_eq!(r.role.as_deref(), Some("encoder"));
        assert_eq!(r.enc_sid, Some("fc00::1".parse().unwrap()));
        assert_eq!(r.fec.as_deref(), Some("none"), "flag wins");
        assert!(r.ecn_ce);
        assert_eq!(r.threads, Some(2));
        assert_eq!(r.repair_lag, Some(512));
        std::fs::write(&dir, "bogus = 1\n").unwrap();
        let a = Srv6Args {
            config: Some(dir.clone()),
            ..Default::default()
        };
        assert!(a.resolve().is_err(), "unknown keys are refused");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn keys_and_fec_strings() {
        assert_eq!(parse_key("0x0aff").unwrap(), vec![0x0a, 0xff]);
        assert_eq!(parse_key("ab").unwrap(), b"ab".to_vec());
        assert!(parse_key("0xabc").is_err());
        assert_eq!(fec_string(None, Some("20:10")), "rs:20:10");
        assert_eq!(fec_string(None, None), "ours");
    }
}
