//! `hirt udp`: flags of a UDP tunnel peer, mapped onto [`UdpConfig`].

use std::path::PathBuf;

use hirt_linux::config::{UdpConfig, UdpRole};

use super::apply_flags;
use super::coder::{apply_shared_flags, CoderArgs, OpsArgs};

/// `hirt udp`: a FEC tunnel between two peers over UDP (tinyfecVPN-like). Every flag may also
/// come from `--config FILE` (TOML, keys = long flag names and `role = "server"|"client"`, see
/// `examples/hirt-udp.toml`); flags on the command line win.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct UdpArgs {
    /// TOML file with any of these flags (long names as keys).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub coder: CoderArgs,
    #[command(flatten)]
    pub ops: OpsArgs,
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
    /// File with our private key (base64, from `hirt genkey`; mode 0600). Without it the
    /// environment variable HIRT_PRIVATE_KEY is read. Keys are never taken from the command
    /// line.
    #[arg(long, value_name = "FILE")]
    pub private_key_file: Option<PathBuf>,
    /// The other end's public key (base64, from `hirt pubkey`; not a secret).
    #[arg(long, value_name = "BASE64")]
    pub peer_public_key: Option<String>,
    /// File with an optional pre-shared key (base64, `hirt genkey`; mode 0600), the same on
    /// both ends; else the environment variable HIRT_PRESHARED_KEY.
    #[arg(long, value_name = "FILE")]
    pub preshared_key_file: Option<PathBuf>,
    /// File whose first line is a passphrase both ends share (mode 0600), else the environment
    /// variable HIRT_PASSPHRASE: both key pairs derive from it (Argon2id), instead of
    /// --private-key-file and --peer-public-key.
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
    /// New session keys after this many seconds (default 120).
    #[arg(long)]
    pub rekey_after_s: Option<f64>,
    /// New session keys after this many datagrams from one worker (default 2^32).
    #[arg(long)]
    pub rekey_after_packets: Option<u64>,
    /// Authenticate only, do not encrypt (for traffic that is already encrypted).
    #[arg(long)]
    pub no_encrypt: bool,
    /// Run with publicly known keys (anyone can inject packets): must be explicit.
    #[arg(long)]
    pub insecure: bool,
    /// TUN device name (default hirt-udp).
    #[arg(long)]
    pub dev: Option<String>,
    /// Address of our end of the tunnel (default 10.77.0.1/24 server, 10.77.0.2/24 client).
    #[arg(long)]
    pub tun_addr: Option<String>,
    /// Extra IPv6 address of our end (e.g. fd77::1/64).
    #[arg(long)]
    pub tun_addr6: Option<String>,
    /// How many sources a repair may arrive behind the newest source the decoder has seen,
    /// beyond what the window allows anyway: the decoder keeps that many more sources. Default
    /// 1024 on a server and on a client with several paths (repairs on another path than their
    /// sources trail them by the paths' delay difference), else 0.
    #[arg(long)]
    pub repair_lag: Option<u32>,
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
    /// Worker threads (default 1, at most 64; the decoder steers by stream id).
    #[arg(long)]
    pub threads: Option<usize>,
    /// DSCP for repair packets (0-63).
    #[arg(long)]
    pub repair_dscp: Option<u8>,
    /// Client: one path of the tunnel, repeated for each (path ids 0, 1, ... in order):
    /// `dev=IF,local=IP[:PORT],remote=HOST:PORT`, every key optional. `dev` binds the path's
    /// socket to an interface (SO_BINDTODEVICE), `local` to a source address, `remote` is the
    /// server's address on this path (default: -r). E.g. `--path dev=eth1,remote=1.2.3.4:4096
    /// --path dev=wwan0,remote=1.2.3.4:4096`. Without --path: one path from -l and -r. The
    /// server learns every path from the client's datagrams. See docs/paths.md.
    #[arg(long = "path", value_name = "SPEC")]
    pub path: Vec<String>,
    #[command(flatten)]
    pub path_policy: super::path_flags::PathPolicyArgs,
}

impl UdpArgs {
    /// The configuration: `--config` (or the defaults), then the flags given.
    pub fn into_config(self) -> anyhow::Result<UdpConfig> {
        let a = self;
        let mut c = match &a.config {
            Some(path) => UdpConfig::from_file(path)?,
            None => UdpConfig::default(),
        };
        match (a.server, a.client) {
            (true, true) => anyhow::bail!("give exactly one of -s (server) or -c (client)"),
            (true, false) => c.role = Some(UdpRole::Server),
            (false, true) => c.role = Some(UdpRole::Client),
            (false, false) => {}
        }
        apply_shared_flags!(c, a.coder, a.ops);
        apply_flags!(c, a;
            set: dev, mtu, keepalive_ms, threads, repair_dscp, rekey_after_s, rekey_after_packets;
            some: listen, remote, private_key_file, peer_public_key, preshared_key_file,
                passphrase_file, tun_addr, tun_addr6, repair_lag;
            flag: no_encrypt, insecure, no_mss_clamp, no_tun_offload);
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

/// Runs `hirt udp`.
pub fn run(args: UdpArgs) -> anyhow::Result<()> {
    hirt_linux::udp::run(args.into_config()?)
}

/// `hirt genkey`: prints a new private key (base64), like `wg genkey`. Store it with
/// `umask 077; hirt genkey > FILE`.
pub fn genkey() -> anyhow::Result<()> {
    let k = hirt_linux::udp::keys::generate_private();
    println!("{}", hirt_linux::udp::keys::encode(&k));
    Ok(())
}

/// `hirt pubkey`: reads a private key (base64) on standard input and prints its public key.
pub fn pubkey() -> anyhow::Result<()> {
    use std::io::Read;
    let mut text = zeroize::Zeroizing::new(String::new());
    std::io::stdin().read_to_string(&mut text)?;
    let k = hirt_linux::udp::keys::decode(&text, "standard input")?;
    println!(
        "{}",
        hirt_linux::udp::keys::encode(&hirt_linux::udp::keys::public_key(&k))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_file_make_the_config() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: UdpArgs,
        }
        let path = std::env::temp_dir().join(format!("hirt-udp-cfg-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "role = \"server\"\ninsecure = true\nthreads = 4\nmtu = 1300\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let c = Cli::parse_from(["hirt", "--config", p, "--mtu", "1200", "--no-tun-offload"])
            .a
            .into_config()
            .unwrap();
        assert_eq!(c.role, Some(UdpRole::Server));
        assert_eq!((c.threads, c.mtu, c.no_tun_offload), (4, 1200, true));
        c.validate().unwrap();
        let c = Cli::parse_from(["hirt", "--config", p, "-c", "-r", "192.0.2.1:1"])
            .a
            .into_config()
            .unwrap();
        assert_eq!(c.role, Some(UdpRole::Client), "the flag wins");
        let both = Cli::parse_from(["hirt", "-s", "-c"]).a.into_config();
        assert!(both.unwrap_err().to_string().contains("exactly one"));
        // No key on the command line: the short and long forms are gone.
        assert!(Cli::try_parse_from(["hirt", "-k", "secret"]).is_err());
        assert!(Cli::try_parse_from(["hirt", "--key", "secret"]).is_err());
        let c = Cli::parse_from([
            "hirt",
            "-s",
            "--private-key-file",
            "/etc/hirt/k",
            "--peer-public-key",
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066Spjqqbbmo=",
            "--rekey-after-s",
            "30",
        ])
        .a
        .into_config()
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.rekey_after_s, 30.0);
        let c = Cli::parse_from([
            "hirt",
            "-c",
            "--insecure",
            "-r",
            "192.0.2.1:4096",
            "--path",
            "local=127.0.0.1",
            "--path",
            "dev=lo,remote=192.0.2.2:4096",
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
        assert_eq!(c.path[1].dev.as_deref(), Some("lo"));
        assert_eq!(
            c.paths.policy.kind,
            hirt_core::path::PolicyKind::LowestDelay
        );
        assert_eq!(c.paths.repair_path, hirt_core::path::RepairPath::Diverse);
        assert_eq!(c.paths.probe_interval_ms, 20.0);
        let bad = Cli::parse_from(["hirt", "-c", "--path", "via=eth0"])
            .a
            .into_config();
        assert!(bad.unwrap_err().to_string().contains("unknown path key"));
        let bad = Cli::parse_from(["hirt", "-c", "--path-policy", "fastest"])
            .a
            .into_config();
        assert!(bad.unwrap_err().to_string().contains("--path-policy"));
        let _ = std::fs::remove_file(&path);
    }
}
