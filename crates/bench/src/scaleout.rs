//! `hirt bench scaleout` (root): two hirt encoder/decoder pairs behind the ingress's kernel
//! ECMP, kept by `hirt health`; encoders killed with SIGKILL one after the other, and how long
//! their flows take to reach the receiver through the other pair (docs/scale-out.md).
//!
//! ```text
//!              .-- e1 [hirt encoder fc00:e1::1] -- d1 [hirt decoder fc00:d1::1, DX6] --.
//!  in [sender, |                                                                        | out
//!  hirt health]'-- e2 [hirt encoder fc00:e2::1] -- d2 [hirt decoder fc00:d2::1, DX6] --' [receiver]
//! ```
//!
//! The ingress `in` holds the multipath route `2001:db8:9::/64` (one next hop per pair, each
//! `encap seg6 segs ENC,DEC`, flows hashed on their ports), which `hirt health` keeps to the
//! pairs whose metrics endpoints answer. `flows` UDP flows (one source port each) send a
//! sequence-numbered datagram every `period_ms`; the receiver has one socket per link from a
//! decoder (`SO_BINDTODEVICE`), so every datagram says which pair carried it, and checks every
//! byte against what the sender wrote. Each event: both pairs carry flows; the encoder of one is
//! killed (SIGKILL: no clean-up, its TUN device and SID route vanish with it); the time from
//! the kill to the first datagram of one of its flows through the other pair (`first_moved`)
//! and to the last of its flows to arrive there (`all_moved`); the encoder is started again
//! and the health check puts it back after `rise` answered rounds.
//!
//! Every hirt process is `program` (the `hirt` binary), so the kill ends a real process.

use std::collections::HashSet;
use std::fs::File;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hirt_linux::netns::{self, veth, NetNs};
use serde::Serialize;

use crate::os::{force_receive_buffer, mono_ns, sleep_until_mono, terminate, tight_timer_slack};

/// What to run.
#[derive(Clone, Debug)]
pub struct ScaleoutConfig {
    /// The `hirt` binary: the encoders, decoders and the health check are its children.
    pub program: PathBuf,
    /// Encoder kills (alternating between the two pairs).
    pub events: usize,
    /// UDP flows.
    pub flows: usize,
    /// Time between two datagrams of a flow, in ms (every flow sends at each tick).
    pub period_ms: f64,
    /// `hirt health --interval-ms`.
    pub interval_ms: f64,
    /// `hirt health --timeout-ms`.
    pub timeout_ms: f64,
    /// `hirt health --fall`.
    pub fall: u32,
    /// `hirt health --rise`.
    pub rise: u32,
    /// How long both pairs carry flows before the next kill, in ms.
    pub settle_ms: u64,
    /// `hirt srv6 --fec` of the pairs.
    pub fec: String,
    /// Where the children's logs go (a temporary directory if `None`).
    pub log_dir: Option<PathBuf>,
    /// How an encoder is stopped.
    pub stop: StopBy,
    /// TCP connections through the tunnel beside the UDP flows (each writes 1000 bytes every
    /// `period_ms`).
    pub tcp: usize,
}

/// How the bench stops an encoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopBy {
    /// SIGKILL: the process cleans nothing up.
    #[default]
    Kill,
    /// SIGTERM: hirt removes its routes and exits.
    Term,
}

impl Default for ScaleoutConfig {
    fn default() -> Self {
        ScaleoutConfig {
            program: PathBuf::from("hirt"),
            events: 50,
            flows: 32,
            period_ms: 2.0,
            interval_ms: 50.0,
            timeout_ms: 25.0,
            fall: 3,
            rise: 3,
            settle_ms: 300,
            fec: "ours".into(),
            log_dir: None,
            stop: StopBy::Kill,
            tcp: 4,
        }
    }
}

/// One kill.
#[derive(Clone, Debug, Serialize)]
pub struct KillEvent {
    /// The pair whose encoder was killed (0 or 1).
    pub node: usize,
    /// Flows it carried at the kill.
    pub flows_on_node: usize,
    /// From the kill to the first datagram of one of those flows through the other pair.
    pub first_moved_ms: Option<f64>,
    /// From the kill to the first datagram through the other pair of the last of those flows.
    pub all_moved_ms: Option<f64>,
    /// Datagrams of those flows lost between the kill and their move.
    pub lost: u64,
    /// From the restart of the encoder to the first datagram through its pair again.
    pub rejoin_ms: Option<f64>,
}

/// Min, median, p99, max of a set of times (ms).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// Values.
    pub n: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        if v.is_empty() {
            return Stats::default();
        }
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Stats {
            n: v.len(),
            min: v[0],
            p50: rank(0.5),
            p99: rank(0.99),
            max: v[v.len() - 1],
        }
    }
}

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleoutReport {
    /// Settings.
    pub stop: StopBy,
    /// Settings.
    pub flows: usize,
    /// Settings.
    pub period_ms: f64,
    /// Settings.
    pub interval_ms: f64,
    /// Settings.
    pub timeout_ms: f64,
    /// Settings.
    pub fall: u32,
    /// Settings.
    pub rise: u32,
    /// Flows each pair carried before the first kill.
    pub flows_per_node: [usize; 2],
    /// Datagrams delivered through each pair over the run.
    pub delivered_per_node: [u64; 2],
    /// Every kill.
    pub events: Vec<KillEvent>,
    /// Datagrams sent once both pairs carried flows (what came before is warm-up).
    pub sent: u64,
    /// Of these, datagrams received (each at most once: see `duplicates`).
    pub received: u64,
    /// Payload bytes received and equal to what was sent.
    pub verified_bytes: u64,
    /// Datagrams whose bytes differ from what was sent.
    pub corrupt: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// Lost datagrams of the killed pairs' flows between a kill and their move.
    pub lost_in_switch: u64,
    /// Lost datagrams of a restarted encoder's flows between its restart and 50 ms after their
    /// first delivery through it. Its decoder restarts the stream at the restarted encoder's
    /// first source (ESI 0 again, docs/core.md), so none are expected; if that source is lost,
    /// the decoder refuses sources until 32 in a row tell it.
    pub lost_at_rejoin: u64,
    /// Lost datagrams outside every switch and rejoin window.
    pub lost_elsewhere: u64,
    /// Each of those, against the nearest kill (for a failing run's report).
    pub elsewhere: Vec<String>,
    /// Summary: `first_moved_ms`, `all_moved_ms` over the events.
    pub first_moved_ms: Stats,
    /// See `first_moved_ms`.
    pub all_moved_ms: Stats,
    /// Events whose flows all moved.
    pub moved_events: usize,
    /// Every TCP connection.
    pub tcp: Vec<TcpResult>,
    /// TCP connections that delivered every byte written, in order and intact, and ended
    /// cleanly.
    pub tcp_complete: usize,
}

/// One TCP connection across the stops.
#[derive(Clone, Debug, Serialize)]
pub struct TcpResult {
    /// Its index (source port - 21000).
    pub conn: u16,
    /// Bytes written by the sender.
    pub sent: u64,
    /// Bytes the receiver read, each compared with what was written at that offset.
    pub received: u64,
    /// Offset of the first byte that differs, if any.
    pub corrupt_at: Option<u64>,
    /// The sender's or receiver's error (a reset connection), if any.
    pub error: Option<String>,
}

const TCP_PORT: u16 = 6000;
const FIRST_TCP_SRC_PORT: u16 = 21_000;
const TCP_CHUNK: u64 = 1000;

/// Byte `at` of TCP connection `conn`'s stream.
pub fn tcp_byte(conn: u16, at: u64) -> u8 {
    let x = at.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ u64::from(conn).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x >> 29) as u8
}

/// Writes `TCP_CHUNK` bytes of connection `conn`'s stream every `period` until `stop`, then
/// closes its side; returns the bytes written and the error that ended it early, if any.
fn tcp_source(
    conn: u16,
    period: Duration,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(u64, Option<String>)> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::io::Write;
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&SocketAddr::V6(SocketAddrV6::new(SRC, FIRST_TCP_SRC_PORT + conn, 0, 0)).into())?;
    s.connect_timeout(
        &SocketAddr::V6(SocketAddrV6::new(DST, TCP_PORT, 0, 0)).into(),
        Duration::from_secs(5),
    )?;
    let mut c: std::net::TcpStream = s.into();
    let mut sent = 0u64;
    let mut chunk = vec![0u8; TCP_CHUNK as usize];
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = tcp_byte(conn, sent + i as u64);
        }
        if let Err(e) = c.write_all(&chunk) {
            return Ok((sent, Some(e.to_string())));
        }
        sent += TCP_CHUNK;
        next += period;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let err = c.shutdown(std::net::Shutdown::Write).err();
    Ok((sent, err.map(|e| e.to_string())))
}

/// What the receiver read from one TCP connection.
struct TcpRead {
    conn: u16,
    received: u64,
    corrupt_at: Option<u64>,
    error: Option<String>,
}

/// Accepts `conns` connections and reads each to its end, comparing every byte with what its
/// sender wrote. Gives up waiting for connections once `stop` is set.
fn tcp_sink(conns: usize, stop: Arc<AtomicBool>) -> std::io::Result<Vec<TcpRead>> {
    use std::io::Read;
    let l = std::net::TcpListener::bind(SocketAddrV6::new(DST, TCP_PORT, 0, 0))?;
    l.set_nonblocking(true)?;
    let mut readers = Vec::new();
    while readers.len() < conns && !stop.load(Ordering::Relaxed) {
        let (mut c, peer) = match l.accept() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        c.set_nonblocking(false)?;
        let conn = peer.port().wrapping_sub(FIRST_TCP_SRC_PORT);
        readers.push(std::thread::spawn(move || {
            let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
            let (mut got, mut corrupt_at, mut err) = (0u64, None, None);
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if corrupt_at.is_none() {
                            corrupt_at = (0..n)
                                .find(|&i| buf[i] != tcp_byte(conn, got + i as u64))
                                .map(|i| got + i as u64);
                        }
                        got += n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        err = Some(e.to_string());
                        break;
                    }
                }
            }
            TcpRead {
                conn,
                received: got,
                corrupt_at,
                error: err,
            }
        }));
    }
    Ok(readers.into_iter().filter_map(|r| r.join().ok()).collect())
}

const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 2);
const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const PORT: u16 = 5000;
const FIRST_SRC_PORT: u16 = 20_000;
const PAYLOAD: usize = 200;
const METRICS_PORT: u16 = 9469;
/// A lost datagram sent this long before a kill still counts as the kill's: it was inside the
/// killed encoder (its TUN queue) when it died. How long it sat there is how long the encoder
/// went without CPU: on a loaded 2-vCPU machine datagrams sent 20.3 ms before a kill were lost
/// with it, in a run where the health check also took 23.6 ms instead of ~3 to move the flows.
const BEFORE_KILL_NS: u64 = 50_000_000;

/// Losses of a flow up to this long after its first datagram through a restarted encoder are
/// the rejoin's: should its decoder miss the restarted encoder's first source, it refuses the
/// next ones until 32 in a row tell it the encoder restarted (docs/core.md), and a few of them
/// may arrive among the first delivered.
const AFTER_REJOIN_NS: u64 = 50_000_000;

/// The datagram `seq` of flow `flow`: flow, sequence number, then bytes that depend on both.
pub fn payload(flow: u16, seq: u32) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    p[..2].copy_from_slice(&flow.to_be_bytes());
    p[2..6].copy_from_slice(&seq.to_be_bytes());
    let mut x = (u64::from(flow) << 32 | u64::from(seq)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut p[6..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    p
}

/// The namespaces and links.
struct Topo {
    base: String,
    ingress: NetNs,
    enc: [NetNs; 2],
    dec: [NetNs; 2],
    egress: NetNs,
}

impl Topo {
    fn build() -> anyhow::Result<Topo> {
        let base = netns::unique_name("hso");
        let mk = |r: &str| NetNs::new(&format!("{base}{r}"));
        let ingress = mk("i")?;
        let enc = [mk("e1")?, mk("e2")?];
        let dec = [mk("d1")?, mk("d2")?];
        let egress = mk("o")?;
        let r = |ns: &NetNs, args: &str| -> anyhow::Result<()> {
            let a: Vec<&str> = args.split_whitespace().collect();
            ns.ip(&a).with_context(|| format!("ip {args}"))?;
            Ok(())
        };
        ingress.sysctl("net.ipv6.fib_multipath_hash_policy", "1")?;
        r(&ingress, &format!("-6 addr add {SRC}/128 dev lo"))?;
        r(&ingress, &format!("sr tunsrc set {SRC}"))?;
        r(&egress, &format!("-6 addr add {DST}/128 dev lo"))?;
        for k in 0..2 {
            let n = k + 1;
            let (ie, ei) = (format!("{base}i{n}"), format!("{base}e{n}"));
            let (ed, de) = (format!("{base}f{n}"), format!("{base}d{n}"));
            let (dout, outd) = (format!("{base}g{n}"), format!("{base}o{n}"));
            veth(&ingress, &ie, &enc[k], &ei)?;
            veth(&enc[k], &ed, &dec[k], &de)?;
            veth(&dec[k], &dout, &egress, &outd)?;
            r(
                &ingress,
                &format!("-6 addr add 2001:db8:1{n}::1/64 dev {ie} nodad"),
            )?;
            r(
                &enc[k],
                &format!("-6 addr add 2001:db8:1{n}::2/64 dev {ei} nodad"),
            )?;
            r(
                &enc[k],
                &format!("-6 addr add 2001:db8:2{n}::1/64 dev {ed} nodad"),
            )?;
            r(
                &dec[k],
                &format!("-6 addr add 2001:db8:2{n}::2/64 dev {de} nodad"),
            )?;
            r(
                &dec[k],
                &format!("-6 addr add 2001:db8:3{n}::1/64 dev {dout} nodad"),
            )?;
            r(
                &egress,
                &format!("-6 addr add 2001:db8:3{n}::2/64 dev {outd} nodad"),
            )?;
            for dev in [&ei, &ed] {
                r(&enc[k], &format!("link set {dev} mtu 1600"))?;
            }
            r(&dec[k], &format!("link set {de} mtu 1600"))?;
            for ns in [&enc[k], &dec[k]] {
                ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
            }
            // The ingress reaches the encoder SID and both nodes' metrics endpoints.
            r(
                &ingress,
                &format!("-6 route add fc00:e{n}::/64 via 2001:db8:1{n}::2"),
            )?;
            r(
                &ingress,
                &format!("-6 route add 2001:db8:2{n}::/64 via 2001:db8:1{n}::2"),
            )?;
            r(
                &enc[k],
                &format!("-6 route add fc00:d{n}::/64 via 2001:db8:2{n}::2"),
            )?;
            r(
                &enc[k],
                &format!("-6 route add default via 2001:db8:1{n}::1"),
            )?;
            r(
                &dec[k],
                &format!("-6 route add fc00:e{n}::/64 via 2001:db8:2{n}::1"),
            )?;
            r(
                &dec[k],
                &format!("-6 route add default via 2001:db8:2{n}::1"),
            )?;
        }
        // TCP's acknowledgements go back outside the tunnel, by plain forwarding through pair 1's
        // nodes (their kernels forward whether hirt runs or not).
        r(
            &egress,
            &format!("-6 route add {SRC}/128 via 2001:db8:31::1"),
        )?;
        Ok(Topo {
            base,
            ingress,
            enc,
            dec,
            egress,
        })
    }

    /// The receiver's device on the link from decoder `k`.
    fn egress_dev(&self, k: usize) -> String {
        format!("{}o{}", self.base, k + 1)
    }

    /// The health check's node words for pair `k`.
    fn node_spec(&self, k: usize) -> String {
        let n = k + 1;
        format!(
            "segs fc00:e{n}::1,fc00:d{n}::1 via 2001:db8:1{n}::2 dev {}i{n} \
             probe [2001:db8:1{n}::2]:{METRICS_PORT},[2001:db8:2{n}::2]:{METRICS_PORT}",
            self.base
        )
    }
}

/// The children: started in a namespace with `ip netns exec` (which execs, so the child's pid
/// is hirt's), killed and reaped on drop.
struct Proc {
    child: Option<Child>,
}

impl Proc {
    fn start(
        ns: &NetNs,
        program: &std::path::Path,
        args: &[String],
        log: &std::path::Path,
    ) -> anyhow::Result<Proc> {
        let f = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .arg(program)
            .args(args)
            .env("HIRT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("starting {} in {}", program.display(), ns.name()))?;
        Ok(Proc { child: Some(child) })
    }

    /// SIGTERM, then reap (SIGKILL after 5 s).
    fn terminate(&mut self) {
        if let Some(c) = self.child.as_mut() {
            terminate(c.id());
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.kill();
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the receivers know while the run goes on.
struct Live {
    /// Per flow: the pair of its latest datagram (`NONE` before the first).
    last_node: Vec<AtomicU8>,
    /// Per pair: datagrams delivered through it.
    delivered: [AtomicU64; 2],
}

const NONE: u8 = u8::MAX;

/// One received datagram.
#[derive(Clone, Copy, Debug)]
struct Rec {
    t: u64,
    seq: u32,
    flow: u16,
    node: u8,
}

struct ReceiverOut {
    recs: Vec<Rec>,
    verified_bytes: u64,
    corrupt: u64,
}

fn receiver(
    dev: String,
    node: u8,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<ReceiverOut> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    // One socket per link: the datagram's link names the pair that carried it.
    s.bind_device(Some(dev.as_bytes()))?;
    s.bind(&SocketAddr::V6(SocketAddrV6::new(DST, PORT, 0, 0)).into())?;
    let sock: UdpSocket = s.into();
    force_receive_buffer(sock.as_raw_fd(), 16 << 20);
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut out = ReceiverOut {
        recs: Vec::with_capacity(1 << 20),
        verified_bytes: 0,
        corrupt: 0,
    };
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let t = mono_ns();
        let got = &buf[..n];
        let (Some(flow), Some(seq)) = (
            got.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])),
            got.get(2..6)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        ) else {
            out.corrupt += 1;
            continue;
        };
        if usize::from(flow) >= live.last_node.len() || got != payload(flow, seq) {
            out.corrupt += 1;
            continue;
        }
        out.verified_bytes += n as u64;
        live.last_node[usize::from(flow)].store(node, Ordering::Relaxed);
        live.delivered[usize::from(node)].fetch_add(1, Ordering::Relaxed);
        out.recs.push(Rec { t, seq, flow, node });
    }
    Ok(out)
}

/// Sends a datagram per flow every `period`; returns when each tick was sent (tick = sequence
/// number): the time after its last datagram left, so that a sender held off the CPU in the
/// middle of a tick does not date datagrams that went out after a kill from before it.
fn sender(flows: usize, period: Duration, stop: Arc<AtomicBool>) -> std::io::Result<Vec<u64>> {
    tight_timer_slack();
    let socks = (0..flows)
        .map(|f| UdpSocket::bind(SocketAddrV6::new(SRC, FIRST_SRC_PORT + f as u16, 0, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let dst = SocketAddrV6::new(DST, PORT, 0, 0);
    let period = period.as_nanos() as u64;
    let start = mono_ns();
    let mut ticks = Vec::with_capacity(1 << 16);
    let mut seq: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        sleep_until_mono(start + u64::from(seq) * period);
        for (f, s) in socks.iter().enumerate() {
            // A send refused while a route changes is a datagram lost like any other.
            let _ = s.send_to(&payload(f as u16, seq), dst);
        }
        ticks.push(mono_ns());
        seq += 1;
    }
    Ok(ticks)
}

fn srv6_args(k: usize, role: &str, fec: &str, base: &str) -> Vec<String> {
    let n = k + 1;
    let (metrics, mut extra) = if role == "encoder" {
        (format!("[2001:db8:1{n}::2]:{METRICS_PORT}"), vec![])
    } else {
        (
            format!("[2001:db8:2{n}::2]:{METRICS_PORT}"),
            vec!["--behavior".into(), format!("dx6:2001:db8:3{n}::2")],
        )
    };
    let mut a: Vec<String> = [
        "srv6",
        "--role",
        role,
        "--enc-sid",
        &format!("fc00:e{n}::1"),
        "--dec-sid",
        &format!("fc00:d{n}::1"),
        "--fec",
        fec,
        "--metrics",
        &metrics,
        "--control",
        &std::env::temp_dir()
            .join(format!("{base}-{role}{n}.sock"))
            .to_string_lossy(),
        // Overload control off: on a loaded machine a descheduled worker looks saturated.
        "--overload-threshold",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.append(&mut extra);
    a
}

/// Waits until both pairs deliver datagrams (each count grows within 100 ms).
fn wait_both(live: &Live, limit: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    loop {
        let before = [0, 1].map(|k| live.delivered[k].load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
        let after = [0, 1].map(|k| live.delivered[k].load(Ordering::Relaxed));
        if before[0] < after[0] && before[1] < after[1] {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("both pairs did not carry flows within {limit:?} (delivered {after:?})");
        }
    }
}

/// Runs the scenario.
pub fn run(cfg: &ScaleoutConfig) -> anyhow::Result<ScaleoutReport> {
    anyhow::ensure!(cfg.flows >= 2 && cfg.flows <= 1000, "flows: 2..=1000");
    anyhow::ensure!(cfg.period_ms >= 0.1, "period-ms: at least 0.1");
    let topo = Topo::build()?;
    let log_dir = cfg.log_dir.clone().unwrap_or_else(std::env::temp_dir);
    let log = |what: &str| log_dir.join(format!("{}-{what}.log", topo.base));
    let prog = cfg.program.as_path();
    let mut decoders = Vec::new();
    for k in 0..2 {
        let args = srv6_args(k, "decoder", &cfg.fec, &topo.base);
        decoders.push(Proc::start(
            &topo.dec[k],
            prog,
            &args,
            &log(&format!("d{}", k + 1)),
        )?);
    }
    let start_encoder = |k: usize| {
        let args = srv6_args(k, "encoder", &cfg.fec, &topo.base);
        Proc::start(&topo.enc[k], prog, &args, &log(&format!("e{}", k + 1)))
    };
    let mut encoders = [start_encoder(0)?, start_encoder(1)?];
    let health_args: Vec<String> = [
        "health".to_string(),
        "--prefix".into(),
        "2001:db8:9::/64".into(),
        "--node".into(),
        topo.node_spec(0),
        "--node".into(),
        topo.node_spec(1),
        "--interval-ms".into(),
        cfg.interval_ms.to_string(),
        "--timeout-ms".into(),
        cfg.timeout_ms.to_string(),
        "--fall".into(),
        cfg.fall.to_string(),
        "--rise".into(),
        cfg.rise.to_string(),
    ]
    .into();
    let mut health = Proc::start(&topo.ingress, prog, &health_args, &log("health"))?;

    let live = Arc::new(Live {
        last_node: (0..cfg.flows).map(|_| AtomicU8::new(NONE)).collect(),
        delivered: [AtomicU64::new(0), AtomicU64::new(0)],
    });
    let stop_rx = Arc::new(AtomicBool::new(false));
    let receivers: Vec<_> = (0..2)
        .map(|k| {
            let (dev, live, stop) = (topo.egress_dev(k), live.clone(), stop_rx.clone());
            topo.egress
                .spawn(move || receiver(dev, k as u8, live, stop))
        })
        .collect();
    let stop_tx = Arc::new(AtomicBool::new(false));
    let tx = {
        let (flows, stop) = (cfg.flows, stop_tx.clone());
        let period = Duration::from_secs_f64(cfg.period_ms / 1e3);
        topo.ingress.spawn(move || sender(flows, period, stop))
    };

    let stop_tcp = Arc::new(AtomicBool::new(false));
    let tcp_sink = {
        let (conns, stop) = (cfg.tcp, stop_tcp.clone());
        topo.egress.spawn(move || tcp_sink(conns, stop))
    };
    let mut tcp_sources = Vec::new();

    let mut kills: Vec<(usize, u64, HashSet<u16>, u64)> = Vec::new();
    let mut rejoins: Vec<Option<u64>> = Vec::new();
    let mut flows_per_node = [0usize; 2];
    let mut t_start = u64::MAX;
    let outcome = (|| -> anyhow::Result<()> {
        wait_both(&live, Duration::from_secs(20))?;
        std::thread::sleep(Duration::from_millis(cfg.settle_ms));
        t_start = mono_ns();
        for conn in 0..cfg.tcp as u16 {
            let stop = stop_tcp.clone();
            let period = Duration::from_secs_f64(cfg.period_ms / 1e3);
            tcp_sources.push(topo.ingress.spawn(move || tcp_source(conn, period, stop)));
        }
        flows_per_node = [0u8, 1].map(|k| {
            live.last_node
                .iter()
                .filter(|n| n.load(Ordering::Relaxed) == k)
                .count()
        });
        let mut jitter = mono_ns() | 1;
        for ev in 0..cfg.events {
            let k = ev % 2;
            // As long as at the start: a loaded machine can take more than 10 s to bring the
            // restarted pair back into the route.
            wait_both(&live, Duration::from_secs(20))
                .with_context(|| format!("before kill {ev}"))?;
            // Plus a pseudo-random part of a probe interval, so that kills fall at every phase
            // of the probe rounds (a rejoin happens right after a round).
            jitter ^= jitter << 13;
            jitter ^= jitter >> 7;
            jitter ^= jitter << 17;
            let phase = (jitter % 1000) as f64 / 1000.0 * cfg.interval_ms;
            std::thread::sleep(
                Duration::from_millis(cfg.settle_ms) + Duration::from_secs_f64(phase / 1e3),
            );
            anyhow::ensure!(health.running(), "hirt health exited (see its log)");
            let on_k: HashSet<u16> = (0..cfg.flows)
                .filter(|&f| live.last_node[f].load(Ordering::Relaxed) == k as u8)
                .map(|f| f as u16)
                .collect();
            let t_kill = mono_ns();
            match cfg.stop {
                StopBy::Kill => encoders[k].kill(),
                StopBy::Term => encoders[k].terminate(),
            }
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until
                && on_k
                    .iter()
                    .any(|&f| live.last_node[usize::from(f)].load(Ordering::Relaxed) == k as u8)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Whatever was in flight through the killed pair has arrived by now.
            std::thread::sleep(Duration::from_millis(20));
            let t_restart = mono_ns();
            kills.push((k, t_kill, on_k, t_restart));
            encoders[k] = start_encoder(k)?;
            let before = live.delivered[k].load(Ordering::Relaxed);
            let until = Instant::now() + Duration::from_secs(10);
            let mut back = None;
            while Instant::now() < until {
                if live.delivered[k].load(Ordering::Relaxed) > before {
                    back = Some(mono_ns() - t_restart);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            rejoins.push(back);
        }
        Ok(())
    })();
    std::thread::sleep(Duration::from_millis(200));
    stop_tcp.store(true, Ordering::Relaxed);
    let mut sent_tcp = Vec::new();
    for (conn, h) in tcp_sources.into_iter().enumerate() {
        let r = h
            .join()
            .map_err(|_| anyhow::anyhow!("TCP sender panicked"))?;
        sent_tcp.push(match r {
            Ok(r) => r,
            Err(e) => (0, Some(format!("connection {conn}: {e}"))),
        });
    }
    // The receiver has accepted every connection that was made (the senders connected before
    // writing), and stops waiting for the others.
    let got_tcp = tcp_sink
        .join()
        .map_err(|_| anyhow::anyhow!("TCP receiver panicked"))??;
    let tcp: Vec<TcpResult> = sent_tcp
        .into_iter()
        .enumerate()
        .map(|(conn, (sent, err))| {
            let got = got_tcp.iter().find(|g| usize::from(g.conn) == conn);
            TcpResult {
                conn: conn as u16,
                sent,
                received: got.map_or(0, |g| g.received),
                corrupt_at: got.and_then(|g| g.corrupt_at),
                error: err.or_else(|| got.and_then(|g| g.error.clone())),
            }
        })
        .collect();
    stop_tx.store(true, Ordering::Relaxed);
    let ticks = tx
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    std::thread::sleep(Duration::from_millis(300));
    stop_rx.store(true, Ordering::Relaxed);
    let mut recs = Vec::new();
    let (mut verified_bytes, mut corrupt) = (0, 0);
    for r in receivers {
        let out = r
            .join()
            .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        recs.extend(out.recs);
        verified_bytes += out.verified_bytes;
        corrupt += out.corrupt;
    }
    health.kill();
    drop(encoders);
    drop(decoders);
    outcome?;
    let mut report = analyse(
        cfg,
        t_start,
        &ticks,
        recs,
        &kills,
        &rejoins,
        flows_per_node,
        verified_bytes,
        corrupt,
    );
    report.tcp_complete = tcp
        .iter()
        .filter(|t| t.error.is_none() && t.corrupt_at.is_none() && t.received == t.sent)
        .count();
    report.tcp = tcp;
    Ok(report)
}

/// A lost datagram (flow `f`, sequence `seq`, sent at `t`) against the last kill before it
/// (or the first): when its flow moved away, was restarted and came back, in ms from the kill.
fn describe_loss(
    f: usize,
    seq: usize,
    t: u64,
    kills: &[(usize, u64, HashSet<u16>, u64)],
    moved_at: &[Vec<Option<u64>>],
    back_at: &[Vec<Option<u64>>],
) -> String {
    let j = kills.iter().rposition(|k| k.1 <= t).unwrap_or(0);
    let Some((k, t_kill, on_k, t_restart)) = kills.get(j) else {
        return format!("flow {f} seq {seq}");
    };
    let rel = |x: u64| (x as f64 - *t_kill as f64) / 1e6;
    let opt = |x: Option<u64>| x.map_or("-".to_string(), |x| format!("{:.1}", rel(x)));
    format!(
        "flow {f} seq {seq}: sent {:.1} ms after kill {j} (pair {k}, flow on it: {}); moved {}, restart {:.1}, back {}",
        rel(t),
        on_k.contains(&(f as u16)),
        opt(moved_at[j][f]),
        rel(*t_restart),
        opt(back_at[j][f]),
    )
}

#[allow(clippy::too_many_arguments)]
fn analyse(
    cfg: &ScaleoutConfig,
    t_start: u64,
    ticks: &[u64],
    mut recs: Vec<Rec>,
    kills: &[(usize, u64, HashSet<u16>, u64)],
    rejoins: &[Option<u64>],
    flows_per_node: [usize; 2],
    verified_bytes: u64,
    corrupt: u64,
) -> ScaleoutReport {
    recs.sort_by_key(|r| r.t);
    let mut seen = vec![vec![false; ticks.len()]; cfg.flows];
    let mut duplicates = 0;
    let mut delivered_per_node = [0u64; 2];
    for r in &recs {
        delivered_per_node[usize::from(r.node)] += 1;
        match seen[usize::from(r.flow)].get_mut(r.seq as usize) {
            Some(s) if *s => duplicates += 1,
            Some(s) => *s = true,
            None => {}
        }
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    // Per event and flow: when the flow first arrived through the other pair after the kill.
    let mut moved_at: Vec<Vec<Option<u64>>> = Vec::new();
    let mut events = Vec::new();
    for (j, (k, t_kill, on_k, _)) in kills.iter().enumerate() {
        let mut at = vec![None; cfg.flows];
        let start = recs.partition_point(|r| r.t <= *t_kill);
        for r in &recs[start..] {
            if usize::from(r.node) != *k
                && on_k.contains(&r.flow)
                && at[usize::from(r.flow)].is_none()
            {
                at[usize::from(r.flow)] = Some(r.t);
            }
        }
        let times: Vec<u64> = on_k.iter().filter_map(|&f| at[usize::from(f)]).collect();
        let all = times.len() == on_k.len() && !on_k.is_empty();
        events.push(KillEvent {
            node: *k,
            flows_on_node: on_k.len(),
            first_moved_ms: times.iter().min().map(|&t| ms(t - t_kill)),
            all_moved_ms: all.then(|| ms(times.iter().max().copied().unwrap_or(*t_kill) - t_kill)),
            lost: 0,
            rejoin_ms: rejoins.get(j).copied().flatten().map(ms),
        });
        moved_at.push(at);
    }
    // Datagrams sent before both pairs carried flows (hirt starting, the route not yet
    // installed) are warm-up, not counted.
    let first_tick = ticks.partition_point(|&t| t < t_start);
    // Per event and flow: its first datagram through the killed pair again after the restart
    // (before the next kill).
    let back_at: Vec<Vec<Option<u64>>> = kills
        .iter()
        .enumerate()
        .map(|(j, (k, _, _, t_restart))| {
            let end = kills.get(j + 1).map_or(u64::MAX, |n| n.1);
            let mut at = vec![None; cfg.flows];
            let start = recs.partition_point(|r| r.t <= *t_restart);
            for r in recs[start..].iter().take_while(|r| r.t < end) {
                if usize::from(r.node) == *k && at[usize::from(r.flow)].is_none() {
                    at[usize::from(r.flow)] = Some(r.t);
                }
            }
            at
        })
        .collect();
    let (mut lost_in_switch, mut lost_at_rejoin, mut lost_elsewhere) = (0, 0, 0);
    let mut elsewhere = Vec::new();
    for (f, got) in seen.iter().enumerate() {
        for (seq, &ok) in got.iter().enumerate().skip(first_tick) {
            if ok {
                continue;
            }
            let t = ticks[seq];
            let window = kills
                .iter()
                .enumerate()
                .find(|(j, (_, t_kill, on_k, t_restart))| {
                    let end = moved_at[*j][f].unwrap_or(*t_restart);
                    on_k.contains(&(f as u16)) && t + BEFORE_KILL_NS >= *t_kill && t <= end
                });
            match window {
                Some((j, _)) => {
                    lost_in_switch += 1;
                    events[j].lost += 1;
                }
                None => {
                    // A restarted encoder's flows, back on it, until just after their first
                    // delivery through it (what its decoder refuses before it takes the encoder for
                    // restarted).
                    let rejoin = back_at.iter().zip(kills).any(|(at, (_, _, _, t_restart))| {
                        at[f].is_some_and(|back| t >= *t_restart && t <= back + AFTER_REJOIN_NS)
                    });
                    if rejoin {
                        lost_at_rejoin += 1;
                    } else {
                        lost_elsewhere += 1;
                        elsewhere.push(describe_loss(f, seq, t, kills, &moved_at, &back_at));
                    }
                }
            }
        }
    }
    let first = Stats::of(events.iter().filter_map(|e| e.first_moved_ms).collect());
    let all = Stats::of(events.iter().filter_map(|e| e.all_moved_ms).collect());
    let moved_events = events.iter().filter(|e| e.all_moved_ms.is_some()).count();
    let received = seen
        .iter()
        .map(|got| got.iter().skip(first_tick).filter(|&&ok| ok).count() as u64)
        .sum();
    ScaleoutReport {
        stop: cfg.stop,
        flows: cfg.flows,
        period_ms: cfg.period_ms,
        interval_ms: cfg.interval_ms,
        timeout_ms: cfg.timeout_ms,
        fall: cfg.fall,
        rise: cfg.rise,
        flows_per_node,
        delivered_per_node,
        events,
        sent: ((ticks.len() - first_tick) * cfg.flows) as u64,
        received,
        verified_bytes,
        corrupt,
        duplicates,
        lost_in_switch,
        lost_at_rejoin,
        lost_elsewhere,
        elsewhere,
        first_moved_ms: first,
        all_moved_ms: all,
        moved_events,
        tcp: Vec::new(),
        tcp_complete: 0,
    }
}

/// Prints a report: JSON, or a table.
pub fn print(r: &ScaleoutReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    println!(
        "encoders stopped by {:?}; {} flows, a datagram each every {} ms; hirt health every {} ms \
         (timeout {} ms, fall {}, rise {})",
        r.stop, r.flows, r.period_ms, r.interval_ms, r.timeout_ms, r.fall, r.rise
    );
    println!(
        "flows per pair before the first kill: {:?}; datagrams delivered per pair: {:?}",
        r.flows_per_node, r.delivered_per_node
    );
    println!("event  pair  flows  first_moved_ms  all_moved_ms  lost  rejoin_ms");
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    for (i, e) in r.events.iter().enumerate() {
        println!(
            "{i:>5}  {:>4}  {:>5}  {:>14}  {:>12}  {:>4}  {:>9}",
            e.node + 1,
            e.flows_on_node,
            f(e.first_moved_ms),
            f(e.all_moved_ms),
            e.lost,
            f(e.rejoin_ms)
        );
    }
    for (name, s) in [
        ("first_moved_ms", &r.first_moved_ms),
        ("all_moved_ms", &r.all_moved_ms),
    ] {
        println!(
            "{name}: n {} min {:.1} median {:.1} p99 {:.1} max {:.1}",
            s.n, s.min, s.p50, s.p99, s.max
        );
    }
    println!(
        "sent {} received {} verified bytes {} corrupt {} duplicates {} lost in switch windows {} \
         lost at rejoin {} lost elsewhere {}; events whose flows all moved: {}/{}",
        r.sent,
        r.received,
        r.verified_bytes,
        r.corrupt,
        r.duplicates,
        r.lost_in_switch,
        r.lost_at_rejoin,
        r.lost_elsewhere,
        r.moved_events,
        r.events.len()
    );
    for e in &r.elsewhere {
        println!("lost elsewhere: {e}");
    }
    for t in &r.tcp {
        println!(
            "tcp {}: sent {} received {} corrupt at {:?} error {:?}",
            t.conn, t.sent, t.received, t.corrupt_at, t.error
        );
    }
    println!(
        "TCP connections complete (every byte, in order, clean end): {}/{}",
        r.tcp_complete,
        r.tcp.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_differ_by_flow_and_sequence_number() {
        let a = payload(1, 7);
        assert_eq!(u16::from_be_bytes([a[0], a[1]]), 1);
        assert_eq!(u32::from_be_bytes([a[2], a[3], a[4], a[5]]), 7);
        assert_ne!(a[6..], payload(2, 7)[6..]);
        assert_ne!(a[6..], payload(1, 8)[6..]);
        assert_eq!(a, payload(1, 7));
    }

    #[test]
    fn stats_are_nearest_rank() {
        let s = Stats::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (s.n, s.min, s.p50, s.p99, s.max),
            (100, 1.0, 50.0, 99.0, 100.0)
        );
        assert_eq!(Stats::of(vec![]).n, 0);
    }

    /// Losses of a killed pair's flows between the kill and their move are the switch's; any
    /// other loss is counted apart; a flow's move is its first datagram through the other pair.
    #[test]
    fn losses_are_told_apart_by_window() {
        let cfg = ScaleoutConfig {
            flows: 2,
            ..Default::default()
        };
        let ms = 1_000_000u64;
        let ticks: Vec<u64> = (0..10).map(|i| i * 10 * ms).collect();
        // Flow 0 on pair 0 until the kill at 35 ms, through pair 1 from tick 6 (60 ms); tick 3
        // and 4 and 5 lost. Flow 1 on pair 1 throughout, tick 8 lost.
        let mut recs = Vec::new();
        for seq in 0..10u32 {
            let t = u64::from(seq) * 10 * ms + ms;
            if !(3..=5).contains(&seq) {
                recs.push(Rec {
                    t,
                    seq,
                    flow: 0,
                    node: u8::from(seq >= 6),
                });
            }
            if seq != 8 {
                recs.push(Rec {
                    t,
                    seq,
                    flow: 1,
                    node: 1,
                });
            }
        }
        recs.push(recs[0]);
        let kills = vec![(0, 35 * ms, HashSet::from([0u16]), 70 * ms)];
        let r = analyse(&cfg, 0, &ticks, recs, &kills, &[Some(5 * ms)], [1, 1], 0, 0);
        assert_eq!(r.events[0].first_moved_ms, Some(26.0));
        assert_eq!(r.events[0].all_moved_ms, Some(26.0));
        assert_eq!(
            r.events[0].lost, 3,
            "ticks 3 (20 ms before the kill), 4 and 5"
        );
        assert_eq!(r.lost_elsewhere, 1);
        assert_eq!(r.duplicates, 1);
        assert_eq!(r.received, 16);
        assert_eq!(r.delivered_per_node, [4, 13]);
    }
}
