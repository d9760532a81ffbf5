//! Workloads driven by external tools when they are installed: `wrk` and `h2load` (HTTP/1.1
//! against the built-in HTTP server) and `iperf3` (TCP bulk goodput). They run in the client
//! namespace as child processes (a child inherits the namespace of the thread that starts it).
//! h2load logs every request's time, so its results are ordinary samples; wrk and iperf3 expose
//! no per-request times, so theirs come as [`ToolStats`] or goodput only, without a CDF.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use super::{Samples, ToolStats};

/// The iperf3 server's port (the built-in bulk server has 5201).
pub const IPERF3_PORT: u16 = 5202;

/// The first of `names` found in the usual binary directories.
fn find(names: &[&str]) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin"]
        .iter()
        .flat_map(|d| names.iter().map(move |n| Path::new(d).join(n)))
        .find(|p| p.exists())
}

/// An HTTP/1.1 load generator run against the built-in HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpTool {
    /// `wrk`.
    Wrk,
    /// `h2load --h1` (nghttp2-client).
    H2load,
}

impl HttpTool {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            HttpTool::Wrk => "wrk",
            HttpTool::H2load => "h2load",
        }
    }

    /// The Debian package that has it.
    pub fn package(self) -> &'static str {
        match self {
            HttpTool::Wrk => "wrk",
            HttpTool::H2load => "nghttp2-client",
        }
    }

    /// Its binary, if installed.
    pub fn find(self) -> Option<PathBuf> {
        find(&[self.name()])
    }

    /// Runs it (see [`run_wrk`] and [`run_h2load`]).
    pub fn run(
        self,
        bin: &Path,
        server: SocketAddr,
        connections: usize,
        size: usize,
        duration: Duration,
        dir: &Path,
    ) -> anyhow::Result<Samples> {
        match self {
            HttpTool::Wrk => run_wrk(bin, server, connections, size, duration, dir),
            HttpTool::H2load => run_h2load(bin, server, connections, size, duration, dir),
        }
    }
}

/// Parses an h2load `--log-file` (tab-separated: start time µs since the epoch, HTTP status
/// (-1: failed), µs until the end of the response) into completion times and failures.
pub fn parse_h2load_log(log: &str) -> (Vec<u64>, u64) {
    let (mut times, mut errors) = (Vec::new(), 0);
    for line in log.lines() {
        let mut f = line.split('\t');
        let (_, Some(status), Some(us)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match (status.trim().parse::<i32>(), us.trim().parse::<u64>()) {
            (Ok(200), Ok(us)) => times.push(us),
            _ => errors += 1,
        }
    }
    (times, errors)
}

/// The total bytes of h2load's `traffic: 10.50MB (11010048) total, ...` line.
pub fn parse_h2load_traffic(out: &str) -> Option<u64> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("traffic:"))?;
    let open = line.find('(')?;
    let close = line[open..].find(')')? + open;
    line[open + 1..close].trim().parse().ok()
}

/// Runs `h2load --h1` for `duration` with `connections` connections, requesting responses of
/// `size` bytes from the built-in HTTP server at `server`; per-request times from its log file
/// in `dir`.
pub fn run_h2load(
    bin: &Path,
    server: SocketAddr,
    connections: usize,
    size: usize,
    duration: Duration,
    dir: &Path,
) -> anyhow::Result<Samples> {
    let log = dir.join("hirt-h2load.log");
    let _ = std::fs::remove_file(&log);
    let out = Command::new(bin)
        .arg("--h1")
        .arg("-c")
        .arg(connections.max(1).to_string())
        .arg("-D")
        .arg(duration.as_secs().max(1).to_string())
        .arg(format!("--log-file={}", log.display()))
        .arg(format!("http://{server}/{size}/1"))
        .output()
        .context("running h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let logged = std::fs::read_to_string(&log).with_context(|| {
        format!(
            "h2load wrote no log (status {}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let (latencies_us, errors) = parse_h2load_log(&logged);
    Ok(Samples {
        bytes: parse_h2load_traffic(&text).unwrap_or(0),
        elapsed: duration,
        errors,
        latencies_us,
        note: Some("h2load --h1: HTTP/1.1 against the built-in server; per-request times from its log (no byte check)".into()),
        ..Samples::default()
    })
}

/// `iperf3`, if installed.
pub fn iperf3() -> Option<PathBuf> {
    find(&["iperf3"])
}

/// wrk's Lua hook: one machine-readable line with its own latency statistics (µs).
const WRK_SCRIPT: &str = r#"done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("hirt-wrk %d %d %d %d %d %d %d %d %.1f %d\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout, summary.bytes,
    summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max))
end
"#;

/// Parses the `hirt-wrk` line of [`WRK_SCRIPT`].
pub fn parse_wrk(out: &str) -> Option<Samples> {
    let line = out.lines().find_map(|l| l.strip_prefix("hirt-wrk "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [requests, errors, bytes, duration_us, p50, p90, p99, p999, mean, max] = v[..] else {
        return None;
    };
    let ms = |us: f64| us / 1000.0;
    Some(Samples {
        bytes: bytes as u64,
        elapsed: Duration::from_micros(duration_us as u64),
        errors: errors as u64,
        tool: Some(ToolStats {
            requests: requests as u64,
            p50_ms: ms(p50),
            p90_ms: ms(p90),
            p99_ms: ms(p99),
            p999_ms: ms(p999),
            mean_ms: ms(mean),
            max_ms: ms(max),
        }),
        note: Some("wrk: HTTP/1.1 against the built-in server; latency percentiles are wrk's own (no per-request times, no byte check)".into()),
        ..Samples::default()
    })
}

/// Runs `wrk` for `duration` with `connections` keep-alive connections, requesting responses of
/// `size` bytes from the built-in HTTP server at `server`. `dir` holds the Lua hook.
pub fn run_wrk(
    bin: &Path,
    server: SocketAddr,
    connections: usize,
    size: usize,
    duration: Duration,
    dir: &Path,
) -> anyhow::Result<Samples> {
    let script = dir.join("hirt-wrk.lua");
    std::fs::write(&script, WRK_SCRIPT).context("writing the wrk script")?;
    let out = Command::new(bin)
        .arg("-t1")
        .arg(format!("-c{}", connections.max(1)))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--timeout")
        .arg("10s")
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{server}/{size}/1"))
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_wrk(&text).with_context(|| {
        format!(
            "wrk printed no result (status {}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Parses `iperf3 -J` output of a receive (`-R`) run: bytes and seconds received.
pub fn parse_iperf3(json: &str) -> Option<Samples> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let recv = v.get("end")?.get("sum_received")?;
    let bytes = recv.get("bytes")?.as_f64()?;
    let secs = recv.get("seconds")?.as_f64()?;
    let cc = v["end"]["sender_tcp_congestion"].as_str().unwrap_or("?");
    Some(Samples {
        bytes: bytes as u64,
        elapsed: Duration::from_secs_f64(secs),
        note: Some(format!(
            "iperf3 -R: goodput only (no per-request times; TCP retransmissions are on the hosts lines); sender {cc}"
        )),
        ..Samples::default()
    })
}

/// Runs `iperf3 -c server -R` (the server sends, as in the built-in bulk workload) for
/// `duration` with congestion control `cc`.
pub fn run_iperf3(
    bin: &Path,
    server: SocketAddr,
    cc: &str,
    duration: Duration,
) -> anyhow::Result<Samples> {
    let out = Command::new(bin)
        .arg("-c")
        .arg(server.ip().to_string())
        .arg("-p")
        .arg(server.port().to_string())
        .arg("-t")
        .arg(duration.as_secs().max(1).to_string())
        .arg("-R")
        .arg("-J")
        .arg("-C")
        .arg(cc)
        .output()
        .context("running iperf3")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_iperf3(&text).with_context(|| {
        format!(
            "iperf3 printed no result (status {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_line_is_parsed_in_milliseconds() {
        let out = "Running 5s test @ http://[fd00::2]:8080/10240/1\n\
                   hirt-wrk 1200 3 12345678 5000000 52400 53200 112000 185000 56123.4 190000\n";
        let s = parse_wrk(out).unwrap();
        let t = s.tool.unwrap();
        assert_eq!(t.requests, 1200);
        assert_eq!(s.errors, 3);
        assert_eq!(s.bytes, 12_345_678);
        assert_eq!(s.elapsed, Duration::from_secs(5));
        assert_eq!(t.p50_ms, 52.4);
        assert_eq!(t.p99_ms, 112.0);
        assert_eq!(t.p999_ms, 185.0);
        assert!((t.mean_ms - 56.1234).abs() < 1e-9);
        assert_eq!(t.max_ms, 190.0);
        assert!(parse_wrk("no line").is_none());
        assert!(parse_wrk("hirt-wrk 1 2 3").is_none());
    }

    #[test]
    fn h2load_log_and_traffic_are_parsed() {
        let log = "1700000000000000\t200\t52400\n1700000000100000\t-1\t3000\n\
                   1700000000200000\t200\t112000\nbad line\n";
        assert_eq!(parse_h2load_log(log), (vec![52_400, 112_000], 1));
        let out = "finished in 5.00s, 240.00 req/s, 2.41MB/s\n\
                   traffic: 12.03MB (12615990) total, 9.15KB (9369) headers (space savings 0.00%)";
        assert_eq!(parse_h2load_traffic(out), Some(12_615_990));
        assert_eq!(parse_h2load_traffic("nothing"), None);
    }

    #[test]
    fn iperf3_json_is_parsed() {
        let json = r#"{"end":{"sum_sent":{"bytes":100,"retransmits":17},
            "sum_received":{"bytes":125000000,"seconds":10.0},
            "sender_tcp_congestion":"cubic"}}"#;
        let s = parse_iperf3(json).unwrap();
        assert_eq!(s.bytes, 125_000_000);
        assert_eq!(s.elapsed, Duration::from_secs(10));
        assert!(s.note.unwrap().contains("sender cubic"));
        assert!(s.tool.is_none());
        assert!(parse_iperf3("{}").is_none());
    }
}
