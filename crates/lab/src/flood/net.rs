//! The flood's plumbing: the flooder's namespace wired to the server's, the recorder of the
//! session's datagrams, the flooder itself, and the kernel's and the process's counters.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::netns::{self, ip};
use crate::sys::{Batch, PacketSocket, Received};

/// The flooder's device and address (in its own namespace).
const FLOOD_DEV: &str = "f0";
const FLOOD_ADDR: &str = "10.97.0.1";
/// The server's device towards the flooder, and its address there.
pub const SERVER_FLOOD_DEV: &str = "bf0";
const SERVER_FLOOD_ADDR: &str = "10.97.0.2";
/// Datagrams per `sendmmsg`.
const SEND_BATCH: usize = 64;

/// Creates the flooder's namespace with a veth straight into the server's namespace (not
/// through the link emulator: junk arrives at the server's host at the rate it is sent) and a
/// route to `target`'s address. Returns the namespace.
pub fn wire_flooder(server_ns: &str, target: SocketAddr) -> anyhow::Result<String> {
    let ns = netns::ns_name("fld");
    netns::create(&ns)?;
    ip(
        server_ns,
        &[
            "link",
            "add",
            SERVER_FLOOD_DEV,
            "type",
            "veth",
            "peer",
            "name",
            FLOOD_DEV,
            "netns",
            &ns,
        ],
    )?;
    ip(
        server_ns,
        &[
            "addr",
            "add",
            &format!("{SERVER_FLOOD_ADDR}/24"),
            "dev",
            SERVER_FLOOD_DEV,
        ],
    )?;
    ip(
        &ns,
        &["addr", "add", &format!("{FLOOD_ADDR}/24"), "dev", FLOOD_DEV],
    )?;
    ip(server_ns, &["link", "set", SERVER_FLOOD_DEV, "up"])?;
    ip(&ns, &["link", "set", FLOOD_DEV, "up"])?;
    ip(
        &ns,
        &[
            "route",
            "replace",
            &format!("{}/32", target.ip()),
            "via",
            SERVER_FLOOD_ADDR,
        ],
    )?;
    Ok(ns)
}

/// Records up to `max` UDP payloads sent to `port` that arrive on `dev` of `ns` within `for_`
/// (IPv4 only: the lab's UDP tunnel runs over IPv4).
pub fn record(
    ns: &str,
    dev: &str,
    port: u16,
    max: usize,
    for_: Duration,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let dev = dev.to_string();
    netns::join(netns::in_ns(ns, move || {
        let sock =
            PacketSocket::open(&dev, true).with_context(|| format!("packet socket on {dev}"))?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        let mut batch = Batch::new(1);
        let mut got = [Received {
            len: 0,
            truncated: false,
        }];
        let end = Instant::now() + for_;
        while Instant::now() < end && out.len() < max {
            batch.set(0, &mut buf);
            if batch.recv(sock.raw(), 1, &mut got)? == 0 {
                crate::sys::wait_readable(sock.raw(), Duration::from_millis(10));
                continue;
            }
            if let Some(p) = udp_payload(&buf[..got[0].len], port) {
                out.push(p.to_vec());
            }
        }
        Ok(out)
    }))
}

/// The UDP payload of an Ethernet/IPv4/UDP frame to `port`.
fn udp_payload(frame: &[u8], port: u16) -> Option<&[u8]> {
    if frame.len() < 14 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip.first()? >> 4 != 4 || ip.get(9) != Some(&17) || ip.len() < ihl + 8 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    let udp = ip.get(ihl..total)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != port {
        return None;
    }
    udp.get(8..)
}

/// What the flooder did.
#[derive(Debug, Default)]
pub struct FloodCounts {
    /// Datagrams the kernel took.
    pub sent: AtomicU64,
    /// `sendmmsg` calls that failed.
    pub errors: AtomicU64,
}

/// Sends `pool` round and round to `target` from namespace `ns` at `pps` datagrams per second
/// (batches of 64 through `sendmmsg`) until `stop`.
pub fn flood(
    ns: &str,
    target: SocketAddr,
    mut pool: Vec<Vec<u8>>,
    pps: u64,
    counts: Arc<FloodCounts>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    netns::in_ns(ns, move || {
        anyhow::ensure!(!pool.is_empty(), "nothing to flood with");
        let sock = UdpSocket::bind(SocketAddr::new(FLOOD_ADDR.parse()?, 0))?;
        sock.connect(target)?;
        let fd = sock.as_raw_fd();
        let mut batch = Batch::new(SEND_BATCH);
        let start = Instant::now();
        let mut next = 0usize;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * pps as f64) as u64;
            let n = due.saturating_sub(sent).min(SEND_BATCH as u64) as usize;
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            for i in 0..n {
                let k = (next + i) % pool.len();
                batch.set(i, &mut pool[k]);
            }
            match batch.send(fd, 0, n) {
                Ok(k) => {
                    sent += k as u64;
                    next = (next + k) % pool.len();
                    counts.sent.fetch_add(k as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    // A full queue: count it and let the time catch up.
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    sent += n as u64;
                }
            }
        }
        Ok(())
    })
}

/// Packets and drops the kernel counted on device `dev` of `ns` (received side).
#[derive(Debug, Clone, Copy, Default)]
pub struct DevCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped on receipt.
    pub rx_dropped: u64,
}

/// `ip -s -j link show DEV` in `ns`.
pub fn dev_counters(ns: &str, dev: &str) -> anyhow::Result<DevCounters> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", dev])
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("counters of {dev} in {ns}"))?;
    let rx = &v[0]["stats64"]["rx"];
    Ok(DevCounters {
        rx_packets: rx["packets"].as_u64().unwrap_or(0),
        rx_dropped: rx["dropped"].as_u64().unwrap_or(0),
    })
}

/// UDP counters of namespace `ns` (`/proc/net/snmp`): datagrams delivered to sockets, and
/// dropped for a full receive buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpCounters {
    /// `InDatagrams`.
    pub in_datagrams: u64,
    /// `RcvbufErrors`.
    pub rcvbuf_errors: u64,
}

/// Reads [`UdpCounters`] inside `ns`.
pub fn udp_counters(ns: &str) -> anyhow::Result<UdpCounters> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
        .output()?;
    parse_snmp_udp(&String::from_utf8_lossy(&out.stdout)).context("no Udp line in /proc/net/snmp")
}

fn parse_snmp_udp(text: &str) -> Option<UdpCounters> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |k: &str| {
        names
            .iter()
            .position(|n| *n == k)
            .and_then(|i| values.get(i)?.parse().ok())
    };
    Some(UdpCounters {
        in_datagrams: get("InDatagrams")?,
        rcvbuf_errors: get("RcvbufErrors")?,
    })
}

/// CPU time (user + system, all threads) of process `pid`, in seconds, and its resident set
/// in kB.
pub fn process_usage(pid: u32) -> anyhow::Result<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat
        .rsplit_once(") ")
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> u64 { f.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
    // utime and stime are fields 14 and 15 (1-based), in USER_HZ ticks (100 per second on
    // Linux, whatever the kernel's HZ).
    let cpu = (ticks(11) + ticks(12)) as f64 / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok((cpu, rss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_payload_of_a_frame_to_the_port() {
        let mut f = vec![0u8; 14 + 20 + 8 + 3];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&31u16.to_be_bytes());
        f[23] = 17;
        f[36..38].copy_from_slice(&4096u16.to_be_bytes());
        f[42..].copy_from_slice(b"abc");
        assert_eq!(udp_payload(&f, 4096), Some(&b"abc"[..]));
        assert_eq!(udp_payload(&f, 53), None);
        f[23] = 6;
        assert_eq!(udp_payload(&f, 4096), None);
    }

    #[test]
    fn snmp_udp_counters() {
        let t = "Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts InErrors OutDatagrams \
                 RcvbufErrors SndbufErrors\nUdp: 10 2 3 4 5 6\nUdpLite: InDatagrams\nUdpLite: 0\n";
        let c = parse_snmp_udp(t).unwrap();
        assert_eq!((c.in_datagrams, c.rcvbuf_errors), (10, 5));
    }

    #[test]
    fn usage_of_this_process() {
        let (cpu, rss) = process_usage(std::process::id()).unwrap();
        assert!(cpu >= 0.0 && rss > 0);
    }
}
