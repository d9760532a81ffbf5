//! `hirt srv6`: flags of an SRv6 instance, mapped onto [`Srv6Config`].

use std::path::PathBuf;

use hirt_linux::config::{Srv6Config, Srv6Role, XdpMode};
use hirt_linux::srv6::Behavior;

use super::apply_flags;
use super::coder::{apply_shared_flags, CoderArgs, OpsArgs};
use super::path_flags::PathPolicyArgs;

/// `hirt srv6`: run the encoder and/or decoder SID of an SRv6 FEC tunnel. Every flag may also
/// come from `--config FILE` (TOML, keys = long flag names, see `examples/hirt-srv6.toml`);
/// flags on the command line win.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Srv6Args {
    /// TOML file with any of these flags (long names as keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub coder: CoderArgs,
    #[command(flatten)]
    pub ops: OpsArgs,
    /// encoder, decoder or both (default both).
    #[arg(long)]
    pub role: Option<Srv6Role>,
    /// The encoder SID (owned when role is encoder/both; feedback goes there otherwise).
    #[arg(long)]
    pub enc_sid: Option<std::net::Ipv6Addr>,
    /// The decoder SID (owned when role is decoder/both; repairs go there otherwise).
    #[arg(long)]
    pub dec_sid: Option<std::net::Ipv6Addr>,
    /// Decoder behaviour after recovery: dt6 (decapsulate, route), dx6:NEXTHOP, end.
    #[arg(long)]
    pub behavior: Option<Behavior>,
    /// Routing table for dt6 (default main, 254) / the table hirt fills for dx6 (default 4869).
    #[arg(long)]
    pub table: Option<u32>,
    /// TUN device the SIDs are routed to (default hirt0).
    #[arg(long)]
    pub dev: Option<String>,
    /// Worker threads / TUN queues / encoder streams (default 1, at most 64).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Key for the auth TLV on repair and feedback packets (hex with 0x prefix, else the bytes).
    /// Other local users can read it in the process's arguments: prefer --hmac-key-file.
    #[arg(long)]
    pub hmac_key: Option<String>,
    /// File whose first line is the --hmac-key (mode 0600; refused if others may read it).
    #[arg(long, value_name = "FILE")]
    pub hmac_key_file: Option<std::path::PathBuf>,
    /// Key id carried in the auth TLV (default 1).
    #[arg(long)]
    pub key_id: Option<u32>,
    /// Also add a real RFC 8754 HMAC TLV to repair/feedback packets.
    #[arg(long)]
    pub rfc8754_hmac: bool,
    /// Authenticate source packets too (needs --hmac-key): the decoder drops and counts
    /// unauthenticated or replayed sources.
    #[arg(long)]
    pub auth_sources: bool,
    /// How many sources a repair may arrive behind the newest source the decoder has seen,
    /// beyond what the window allows anyway: the decoder keeps that many more sources from the
    /// start. Default 0; 1024 with two or more --path (the peer is taken to use several too);
    /// 2048 with --kernel-sources, whose repairs trail the sources the kernel delivers. Where
    /// repairs come later than that (a slower path than their sources), the decoder grows it by
    /// itself up to this or 1024, whichever is more: the first late repairs are lost.
    #[arg(long)]
    pub repair_lag: Option<u32>,
    /// Do not install routes for the SIDs (the operator routes them to --dev).
    #[arg(long)]
    pub no_routes: bool,
    /// On SIGINT/SIGTERM, go on forwarding this long after closing the --metrics endpoint (its
    /// `hirt health` watches end and its probes are refused, so the ingress moves the flows
    /// away first), then stop. Default 100 with --metrics, 0 without.
    #[arg(long)]
    pub drain_ms: Option<u64>,
    /// DSCP for repair and feedback packets (0-63).
    #[arg(long)]
    pub repair_dscp: Option<u8>,
    /// TLV type values source,repair,feedback,auth (default 124,125,126,252).
    #[arg(long)]
    pub tlv_types: Option<String>,
    /// MTU of the TUN device (default 9000: hirt only adds 8-32 bytes of TLVs to what it gets).
    #[arg(long)]
    pub mtu: Option<u32>,
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
    pub xdp_mode: Option<XdpMode>,
    /// Encoder: one path to the decoder SID, repeated for each (path ids 0, 1, ... in order):
    /// `sids=SID[+SID...]`, the SIDs the path visits between the encoder SID and the decoder
    /// SID, in order (End SIDs of the path's routers), or `direct` (the route as it is). E.g.
    /// `--path sids=fc00:b::1 --path sids=fc00:c::1`. The encoder inserts the flow's path into
    /// each source's segment list and sends repairs and probes over it; the decoder answers
    /// probes back through the same SIDs. Without --path: one path. See docs/paths.md.
    #[arg(long = "path", value_name = "SPEC")]
    pub path: Vec<String>,
    #[command(flatten)]
    pub path_policy: PathPolicyArgs,
}

impl Srv6Args {
    /// The configuration: `--config` (or the defaults), then the flags given.
    pub fn into_config(self) -> anyhow::Result<Srv6Config> {
        let a = self;
        let mut c = match &a.config {
            Some(path) => Srv6Config::from_file(path)?,
            None => Srv6Config::default(),
        };
        apply_shared_flags!(c, a.coder, a.ops);
        apply_flags!(c, a;
            set: role, behavior, dev, threads, key_id, repair_dscp, mtu, xdp, xdp_mode;
            some: enc_sid, dec_sid, table, hmac_key, hmac_key_file, repair_lag, tlv_types, drain_ms;
            flag: rfc8754_hmac, auth_sources, no_routes, kernel_sources);
        if !a.path.is_empty() {
            c.path = a
                .path
                .iter()
                .map(|p| p.parse().map_err(|e| anyhow::anyhow!("--path `{p}`: {e}")))
                .collect::<anyhow::Result<_>>()?;
        }
        a.path_policy.apply(&mut c.paths)?;
        Ok(c)
    }
}

/// Runs `hirt srv6`.
pub fn run(args: Srv6Args) -> anyhow::Result<()> {
    if args.hmac_key.is_some() {
        tracing::warn!(
            "--hmac-key puts the key in the process's arguments, readable by every local user: \
             use --hmac-key-file"
        );
    }
    hirt_linux::srv6_run::run(args.into_config()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_fills_what_the_flags_leave_unset() {
        let path = std::env::temp_dir().join(format!("hirt-cfg-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "role = \"encoder\"\nenc-sid = \"fc00::1\"\nfec = \"hirt\"\necn-ce = true\nthreads = 2\n\
             repair-lag = 512\n",
        )
        .unwrap();
        let a = Srv6Args {
            config: Some(path.clone()),
            coder: CoderArgs {
                fec: Some("none".into()),
                ..Default::default()
            },
            dec_sid: Some("fc00::2".parse().unwrap()),
            ..Default::default()
        };
        let c = a.into_config().unwrap();
        assert_eq!(c.role, Srv6Role::Encoder);
        assert_eq!(c.enc_sid, Some("fc00::1".parse().unwrap()));
        assert_eq!(c.dec_sid, Some("fc00::2".parse().unwrap()));
        assert_eq!(c.fec, "none", "flag wins");
        assert!(c.ecn_ce);
        assert_eq!(c.threads, 2);
        assert_eq!(c.repair_lag, Some(512));
        assert_eq!(c.dev, "hirt0", "default");
        c.validate().unwrap();
        std::fs::write(&path, "bogus = 1\n").unwrap();
        let a = Srv6Args {
            config: Some(path.clone()),
            ..Default::default()
        };
        assert!(a.into_config().is_err(), "unknown keys are refused");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn flags_parse_onto_the_config() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: Srv6Args,
        }
        let cli = Cli::parse_from([
            "hirt",
            "--role",
            "decoder",
            "--behavior",
            "dx6:fc00::9",
            "--xdp",
            "a,b",
            "--xdp-mode",
            "generic",
            "-f",
            "20:10",
            "--rfc8754-hmac",
        ]);
        let c = cli.a.into_config().unwrap();
        assert_eq!(c.role, Srv6Role::Decoder);
        assert_eq!(c.behavior, Behavior::Dx6("fc00::9".parse().unwrap()));
        assert_eq!(c.xdp, vec!["a".to_string(), "b".into()]);
        assert_eq!(c.xdp_mode, XdpMode::Generic);
        assert_eq!(c.rs.as_deref(), Some("20:10"));
        assert!(c.rfc8754_hmac);
        assert!(Cli::try_parse_from(["hirt", "--role", "middle"]).is_err());
        let c = Cli::parse_from([
            "hirt",
            "--enc-sid",
            "fc00::1",
            "--dec-sid",
            "fc00::2",
            "--path",
            "sids=fc00:b::1",
            "--path",
            "sids=fc00:c::1+fc00:c::2",
            "--path-policy",
            "lowest-delay",
            "--repair-path",
            "diverse",
            "--path-probe-interval-ms",
            "20",
        ])
        .a
        .into_config()
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.path.len(), 2);
        assert_eq!(c.path[1].sids.len(), 2);
        assert_eq!(
            c.paths.policy.kind,
            hirt_core::path::PolicyKind::LowestDelay
        );
        assert_eq!(c.paths.repair_path, hirt_core::path::RepairPath::Diverse);
        assert_eq!(c.paths.probe_interval_ms, 20.0);
        let bad = Cli::parse_from(["hirt", "--path", "via=x"]).a.into_config();
        assert!(bad.unwrap_err().to_string().contains("expected sids="));
    }
}
