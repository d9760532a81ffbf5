//! The hirt tunnel between the two end namespaces, run as child processes of the `hirt` binary
//! (`hirt udp` / `hirt srv6`, see `crates/linux` and `docs/dataplane.md`). The binary is the one
//! running (`std::env::current_exe()`), or `$HIRT_BIN`.
//!
//! Both ends encode and decode: requests (client -> server) and responses (server -> client) are
//! protected, each direction with its own encoder/decoder pair.
//!
//! - UDP mode: `hirt udp -s` in the server namespace, `hirt udp -c` in the client namespace, TUN
//!   devices `hirt0` with 10.98.0.1 (server) and 10.98.0.2 (client); application routes point into
//!   the TUN.
//! - SRv6 mode: each end runs `hirt srv6 --role encoder` with its encoder SID (`fd00:a::e` client
//!   side, `fd00:b::e` server side) towards the peer's decoder SID, and `hirt srv6 --role decoder`
//!   with its decoder SID (`fd00:a::d`, `fd00:b::d`, behaviour End.DT6). The ingress is the
//!   kernel: the route to the peer's application address is
//!   `encap seg6 mode encap segs <own ENC_SID>,<peer DEC_SID>` (H.Encaps).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::netns::{self, ip};
use crate::report::FecStats;
use crate::topo::{self, Topology};

/// Tunnel mode of the FEC run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunnelMode {
    /// SRv6: kernel H.Encaps at the ingress, hirt encoder and decoder SIDs (IPv6 workloads).
    Srv6,
    /// UDP tunnel between two TUN interfaces (IPv4 workloads).
    Udp,
}

impl TunnelMode {
    /// Whether workloads use IPv6 application addresses in this mode.
    pub fn v6(self) -> bool {
        self == TunnelMode::Srv6
    }

    /// The mode's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            TunnelMode::Srv6 => "srv6",
            TunnelMode::Udp => "udp",
        }
    }
}

const TUN_SERVER: &str = "10.98.0.1";
const TUN_CLIENT: &str = "10.98.0.2";
pub(crate) const ENC_A: &str = "fd00:a::e";
pub(crate) const DEC_A: &str = "fd00:a::d";
pub(crate) const ENC_B: &str = "fd00:b::e";
pub(crate) const DEC_B: &str = "fd00:b::d";

/// The `hirt` binary to start the dataplane with.
pub fn hirt_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("HIRT_BIN") {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe().context("locating the running hirt binary")
}

/// One end of the tunnel: the client or the server namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The client namespace (A).
    Client,
    /// The server namespace (B).
    Server,
}

/// A running tunnel; stopped (children killed) on drop. Routes are put back by the caller
/// (`Topology::route_plain`).
pub struct Tunnel {
    topo: Topology,
    mode: TunnelMode,
    bin: String,
    pids: Vec<u32>,
    controls: Vec<PathBuf>,
    logs: Vec<PathBuf>,
    /// Private key files written for the ends, removed with the tunnel.
    key_files: Vec<PathBuf>,
    /// Per instance: its side and its arguments (to start it again after a crash).
    instances: Vec<(Side, Vec<String>)>,
}

impl Tunnel {
    /// Starts both ends and routes application traffic into the tunnel. `extra` is passed to
    /// both ends (e.g. `--fec hirt`); `seed` seeds their cores.
    pub fn start(
        topo: &Topology,
        mode: TunnelMode,
        extra: Option<&str>,
        seed: u64,
    ) -> anyhow::Result<Tunnel> {
        let bin = hirt_binary()?;
        let bin = bin
            .to_str()
            .context("binary path is not UTF-8")?
            .to_string();
        let extra: Vec<String> = extra
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut t = Tunnel {
            topo: topo.clone(),
            mode,
            bin: bin.clone(),
            pids: Vec::new(),
            controls: Vec::new(),
            logs: Vec::new(),
            instances: Vec::new(),
            key_files: Vec::new(),
        };
        let tmp = std::env::temp_dir();
        let s = |v: &str| v.to_string();
        match mode {
            TunnelMode::Udp => {
                let pid = std::process::id();
                let server_key = tmp.join(format!("hirt-lab-{pid}-server.key"));
                let client_key = tmp.join(format!("hirt-lab-{pid}-client.key"));
                let server_pub = hirt_linux::udp::keys::write_new_private_key(&server_key)?;
                let client_pub = hirt_linux::udp::keys::write_new_private_key(&client_key)?;
                t.key_files.extend([server_key.clone(), client_key.clone()]);
                for (ns, role) in [(&topo.server, "server"), (&topo.client, "client")] {
                    let control = PathBuf::from(format!("/run/hirt-{ns}.sock"));
                    let mut args = vec![s("udp")];
                    if role == "server" {
                        args.extend([s("-s"), s("-l"), format!("{}:4096", topo::UNDER_B4)]);
                        args.extend([s("--tun-addr"), format!("{TUN_SERVER}/24")]);
                    } else {
                        args.extend([s("-c"), s("-r"), format!("{}:4096", topo::UNDER_B4)]);
                        args.extend([s("--tun-addr"), format!("{TUN_CLIENT}/24")]);
                    }
                    let (key, peer) = if role == "server" {
                        (&server_key, &client_pub)
                    } else {
                        (&client_key, &server_pub)
                    };
                    args.extend([s("--private-key-file"), key.display().to_string()]);
                    args.extend([s("--peer-public-key"), peer.clone()]);
                    args.extend([s("--dev"), s("hirt0")]);
                    args.extend([s("--control"), control.display().to_string()]);
                    args.extend([s("--seed"), seed.to_string()]);
                    args.extend(extra.iter().cloned());
                    let log = tmp.join(format!("{ns}-hirt.log"));
                    let pid = netns::spawn(ns, &bin, &args, &log)?;
                    t.pids.push(pid);
                    t.controls.push(control);
                    t.logs.push(log);
                    let side = if role == "server" {
                        Side::Server
                    } else {
                        Side::Client
                    };
                    t.instances.push((side, args));
                }
                t.wait_ready()?;
                t.route_udp(Side::Client)?;
                t.route_udp(Side::Server)?;
            }
            TunnelMode::Srv6 => {
                // Per side, one encoder instance (for traffic leaving) and one decoder instance
                // (for traffic arriving): `--role both` is one tunnel's two ends in one process.
                for (ns, side, enc, dec, peer_enc, peer_dec, peer_prefix, peer_under) in [
                    (
                        &topo.client,
                        "a",
                        ENC_A,
                        DEC_A,
                        ENC_B,
                        DEC_B,
                        "fd00:b::/64",
                        topo::UNDER_B6,
                    ),
                    (
                        &topo.server,
                        "b",
                        ENC_B,
                        DEC_B,
                        ENC_A,
                        DEC_A,
                        "fd00:a::/64",
                        topo::UNDER_A6,
                    ),
                ] {
                    // The peer's SIDs are reached over the underlay.
                    ip(
                        ns,
                        &["-6", "route", "replace", peer_prefix, "via", peer_under],
                    )?;
                    for role in ["encoder", "decoder"] {
                        let (enc_sid, dec_sid, dev) = if role == "encoder" {
                            (enc, peer_dec, format!("hse{side}"))
                        } else {
                            (peer_enc, dec, format!("hsd{side}"))
                        };
                        let control = PathBuf::from(format!("/run/hirt-{ns}-{role}.sock"));
                        let mut args = vec![s("srv6"), s("--role"), s(role)];
                        args.extend([s("--enc-sid"), s(enc_sid), s("--dec-sid"), s(dec_sid)]);
                        args.extend([s("--behavior"), s("dt6"), s("--dev"), dev]);
                        args.extend([s("--control"), control.display().to_string()]);
                        args.extend([s("--seed"), seed.to_string()]);
                        args.extend(extra.iter().cloned());
                        let log = tmp.join(format!("{ns}-hirt-{role}.log"));
                        let pid = netns::spawn(ns, &bin, &args, &log)?;
                        t.pids.push(pid);
                        t.controls.push(control);
                        t.logs.push(log);
                        let side = if side == "a" {
                            Side::Client
                        } else {
                            Side::Server
                        };
                        t.instances.push((side, args));
                    }
                }
                t.wait_ready()?;
                // Kernel H.Encaps at the ingress of each side.
                ip(
                    &topo.client,
                    &[
                        "-6",
                        "route",
                        "replace",
                        topo::APP_B6,
                        "encap",
                        "seg6",
                        "mode",
                        "encap",
                        "segs",
                        &format!("{ENC_A},{DEC_B}"),
                        "dev",
                        "a0",
                        "mtu",
                        topo::APP_MTU,
                    ],
                )
                .context("H.Encaps route")?;
                ip(
                    &topo.server,
                    &[
                        "-6",
                        "route",
                        "replace",
                        topo::APP_A6,
                        "encap",
                        "seg6",
                        "mode",
                        "encap",
                        "segs",
                        &format!("{ENC_B},{DEC_A}"),
                        "dev",
                        "b0",
                        "mtu",
                        topo::APP_MTU,
                    ],
                )
                .context("H.Encaps route")?;
            }
        }
        Ok(t)
    }

    /// Routes application traffic of `side` into the UDP tunnel's TUN device (which goes away
    /// with its process, and its routes with it).
    fn route_udp(&self, side: Side) -> anyhow::Result<()> {
        let (ns, peer_app, peer_tun, own_app) = match side {
            Side::Client => (&self.topo.client, topo::APP_B4, TUN_SERVER, topo::APP_A4),
            Side::Server => (&self.topo.server, topo::APP_A4, TUN_CLIENT, topo::APP_B4),
        };
        wait_dev(ns, "hirt0")?;
        ip(
            ns,
            &[
                "route",
                "replace",
                peer_app,
                "via",
                peer_tun,
                "dev",
                "hirt0",
                "src",
                own_app,
                "mtu",
                topo::APP_MTU,
            ],
        )
        .context("routing into the UDP tunnel")
    }

    /// The process ids of the instances of `side` (sampled by the soak for memory and
    /// descriptors).
    pub fn pids(&self, side: Side) -> Vec<u32> {
        self.instances
            .iter()
            .zip(&self.pids)
            .filter(|((s, _), _)| *s == side)
            .map(|(_, p)| *p)
            .collect()
    }

    /// Bytes instance `pid` holds on its heap (its `hirt status`), when it answers.
    pub fn heap_live_bytes(&self, pid: u32) -> Option<u64> {
        let i = self.pids.iter().position(|&p| p == pid)?;
        // A sample is worth less than the soak's schedule: a slow answer is skipped.
        let answer =
            request_within(&self.controls[i], "status", Duration::from_millis(300)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&answer).ok()?;
        v["status"]["global"]["heap_live_bytes"].as_u64()
    }

    /// Kills every instance of `side` with SIGKILL, as a crash or `kill -9` would (no clean-up
    /// of devices, routes or peer state).
    pub fn kill(&mut self, side: Side) {
        for (i, (s, _)) in self.instances.iter().enumerate() {
            if *s == side {
                netns::kill_now(self.pids[i]);
            }
        }
    }

    /// Starts the instances of `side` again with their arguments, waits until they answer and
    /// routes traffic into them again.
    pub fn start_again(&mut self, side: Side) -> anyhow::Result<()> {
        for i in 0..self.instances.len() {
            let (s, args) = &self.instances[i];
            if *s != side {
                continue;
            }
            let ns = match side {
                Side::Client => &self.topo.client,
                Side::Server => &self.topo.server,
            };
            let _ = std::fs::remove_file(&self.controls[i]);
            self.pids[i] = netns::spawn(ns, &self.bin, args, &self.logs[i])?;
        }
        self.wait_ready()?;
        if self.mode == TunnelMode::Udp {
            self.route_udp(side)?;
        }
        Ok(())
    }

    /// Waits until both control sockets answer (the instances are up), or fails with their logs.
    fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for (i, c) in self.controls.iter().enumerate() {
            loop {
                if request(c, "status").is_ok() {
                    break;
                }
                if !netns::child_running(self.pids[i]) || Instant::now() > deadline {
                    let log = std::fs::read_to_string(&self.logs[i]).unwrap_or_default();
                    bail!(
                        "hirt dataplane did not start ({}):\n{}",
                        c.display(),
                        log.trim()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The raw `status` answer of every instance (saved with the results).
    pub fn raw_status(&self) -> Vec<(String, String)> {
        self.controls
            .iter()
            .map(|c| {
                (
                    c.display().to_string(),
                    request(c, "status").unwrap_or_else(|e| format!("error: {e}")),
                )
            })
            .collect()
    }

    /// FEC counters of both ends, summed over streams (both directions of the tunnel).
    pub fn stats(&self) -> FecStats {
        let mut f = FecStats {
            source: "hirt status (control socket), both ends".into(),
            ..Default::default()
        };
        for c in &self.controls {
            let Ok(r) = request(c, "status") else {
                f.source = format!("{} unreachable", c.display());
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&r) else {
                continue;
            };
            let Some(streams) = v["status"]["streams"].as_array() else {
                continue;
            };
            for st in streams {
                let g = |k: &str| st[k].as_u64().unwrap_or(0);
                f.sources += g("enc_packets_in");
                f.repairs += g("repairs_sent");
                f.recovered += g("recovered");
                f.recovered_late += g("recovered_late");
                let ms = |k: &str| g(k) as f64 / 1e3;
                f.recovery_delay_p99_ms = f.recovery_delay_p99_ms.max(ms("recovery_delay_p99_us"));
                f.recovery_delay_max_ms = f.recovery_delay_max_ms.max(ms("recovery_delay_max_us"));
                f.unrecoverable += g("unrecoverable");
                f.duplicates += g("duplicates");
                f.held += g("held");
                f.order_skipped += g("order_skipped");
                f.order_passed += g("order_passed");
                f.aqm_drops += g("aqm_drops");
                f.aqm_marks += g("aqm_marks");
                f.source_bytes += g("source_bytes_sent");
                f.repair_bytes += g("repair_bytes_sent");
            }
        }
        f.overhead = if f.sources > 0 {
            f.repairs as f64 / f.sources as f64
        } else {
            0.0
        };
        f
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        for p in &self.pids {
            netns::stop(*p);
        }
        for f in self.controls.iter().chain(&self.key_files) {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn wait_dev(ns: &str, dev: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while ip(ns, &["link", "show", dev]).is_err() {
        if Instant::now() > deadline {
            bail!("device {dev} did not appear in {ns}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// One request on a hirt control socket (a line in, a line of JSON out).
fn request(path: &std::path::Path, line: &str) -> std::io::Result<String> {
    request_within(path, line, Duration::from_secs(2))
}

fn request_within(
    path: &std::path::Path,
    line: &str,
    timeout: Duration,
) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(timeout))?;
    writeln!(s, "{line}")?;
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out)?;
    Ok(out.trim_end().to_string())
}
