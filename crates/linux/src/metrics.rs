//! Counters of a running instance, per stream, exported as Prometheus text (`--metrics ADDR`)
//! and as JSON through the control socket (`hirt status`).
//!
//! Workers own their streams, so every counter has a single writer: relaxed atomic adds are
//! enough and cost no more than a plain increment on x86.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name { $($(#[$fm])* pub $f: AtomicU64,)* }

        impl $name {
            /// A plain copy of every counter.
            pub fn snapshot(&self) -> std::collections::BTreeMap<&'static str, u64> {
                let mut m = std::collections::BTreeMap::new();
                $(m.insert(stringify!($f), self.$f.load(Ordering::Relaxed));)*
                m
            }
        }
    };
}

counters!(
    /// Counters of one stream (one encoder/decoder pair, HIRT Fig. 3).
    StreamCounters {
        /// Source packets taken in by the encoder.
        enc_packets_in,
        /// Source packets the encoder forwarded (tagged).
        enc_packets_out,
        /// Repair packets sent.
        repairs_sent,
        /// Of those, repairs sent by the time-driven timer (sources left unprotected for the
        /// repair delay) rather than by the rate controller or the code (gauge of the
        /// encoder's count).
        repairs_timer,
        /// Repair bytes sent (payload).
        repair_bytes_sent,
        /// Source bytes sent (tagged packets).
        source_bytes_sent,
        /// Feedback packets taken by the encoder.
        feedback_in,
        /// Source packets received by the decoder.
        dec_packets_in,
        /// Packets the decoder delivered (received + recovered).
        dec_packets_out,
        /// Of the sources received, those the kernel delivered itself while the decoder only
        /// took a copy (SRv6 `--kernel-sources`).
        delivered_by_kernel,
        /// Repair packets received by the decoder.
        repairs_received,
        /// Repair packets that led to at least one recovery.
        repairs_used,
        /// Packets recovered.
        recovered,
        /// Losses the decoder detected (ESI gaps).
        losses,
        /// Losses that were never recovered.
        unrecoverable,
        /// Duplicates suppressed.
        duplicates,
        /// Received sources held back by in-order release (behind a missing one).
        held,
        /// Missing sources that in-order release stopped waiting for.
        order_skipped,
        /// Times the decoder followed a restarted encoder (its ESIs began again).
        decoder_restarts,
        /// Feedback packets sent by the decoder.
        feedback_sent,
        /// Packets this host dropped before the decoder read them (SID device queue in SRv6
        /// mode, the socket's receive buffer in UDP mode), reported in feedback so the encoder
        /// does not answer them with more repairs.
        local_drops,
        /// Repairs or recoveries skipped because of overload.
        overload_skips,
        /// Current repair ratio x 1e6 (controller state).
        controller_ratio_ppm,
        /// Repair/feedback/tunnel packets dropped for failed authentication or replay.
        auth_failures,
        /// Load of the worker owning this stream (SRv6: worker i owns stream i), x 1e6: the
        /// fraction of the last ~10 ms it was not blocked waiting for packets (gauge; drives
        /// overload control).
        worker_load_ppm,
    }
);

counters!(
    /// Counters not tied to a stream.
    GlobalCounters {
        /// Packets that could not be parsed and were dropped.
        malformed,
        /// Packets on the SID device not addressed to one of our SIDs (the kernel's own
        /// link-local traffic, e.g. MLD reports), dropped.
        not_ours,
        /// Packets forwarded without protection (not for our SIDs' segment lists).
        unprotected,
        /// Packets dropped because of authentication failure (before a stream is known).
        auth_failures,
        /// Packets dropped because a send failed.
        send_errors,
        /// Keepalives sent.
        keepalives_sent,
        /// Times the UDP server switched to a new peer address.
        peer_address_changes,
        /// Packets handed to another worker (decoder steering by stream id).
        steered,
        /// TSO packets read from the TUN device and cut into segments (UDP mode offloads).
        tun_segmented,
        /// Writes to the TUN device that carried a coalesced run of segments (UDP mode
        /// offloads).
        tun_coalesced,
        /// Packets taken from AF_XDP sockets (SRv6 `--xdp`).
        xdp_received,
        /// Packets hirt transmitted itself on an AF_XDP socket (SRv6 `--xdp`).
        xdp_sent,
        /// Sources for the encoder SID that the `--kernel-sources` XDP program passed to the
        /// kernel's End untagged, so unprotected: they came in on a receive queue other than 0,
        /// were longer than it copies (2040 bytes), or found its ring buffer full.
        kernel_untagged,
        /// Packets of an `--xdp` instance that went through the kernel's forwarding instead:
        /// next hop not (yet) resolved or not on an `--xdp` device, too big for its MTU, hop
        /// limit expiring, or the socket's transmit ring full.
        xdp_to_kernel,
    }
);

/// All counters of an instance.
#[derive(Debug)]
pub struct Metrics {
    /// Per stream, indexed by stream id.
    pub streams: Vec<StreamCounters>,
    /// Instance-wide.
    pub global: GlobalCounters,
    /// `srv6` or `udp`, and the role, for the status output.
    pub mode: String,
}

/// A serialisable snapshot (what `hirt status` prints).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// Instance mode.
    pub mode: String,
    /// Instance-wide counters.
    pub global: std::collections::BTreeMap<String, u64>,
    /// Per-stream counters.
    pub streams: Vec<std::collections::BTreeMap<String, u64>>,
}

impl Metrics {
    /// Counters for `streams` streams.
    pub fn new(streams: usize, mode: &str) -> Arc<Metrics> {
        Arc::new(Metrics {
            streams: (0..streams.max(1))
                .map(|_| StreamCounters::default())
                .collect(),
            global: GlobalCounters::default(),
            mode: mode.to_string(),
        })
    }

    /// The counters of stream `s` (stream ids beyond the configured count share the last slot).
    #[inline]
    pub fn stream(&self, s: u16) -> &StreamCounters {
        let i = (s as usize).min(self.streams.len() - 1);
        &self.streams[i]
    }

    /// A copy of everything.
    pub fn snapshot(&self) -> Snapshot {
        let conv = |m: std::collections::BTreeMap<&'static str, u64>| {
            m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
        };
        Snapshot {
            mode: self.mode.clone(),
            global: conv(self.global.snapshot()),
            streams: self.streams.iter().map(|s| conv(s.snapshot())).collect(),
        }
    }

    /// Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        for (k, v) in self.global.snapshot() {
            let _ = writeln!(out, "# TYPE hirt_{k} counter\nhirt_{k} {v}");
        }
        let snaps: Vec<_> = self.streams.iter().map(|s| s.snapshot()).collect();
        if let Some(first) = snaps.first() {
            for k in first.keys() {
                let ty = if matches!(*k, "controller_ratio_ppm" | "worker_load_ppm") {
                    "gauge"
                } else {
                    "counter"
                };
                let _ = writeln!(out, "# TYPE hirt_stream_{k} {ty}");
                for (i, s) in snaps.iter().enumerate() {
                    let _ = writeln!(out, "hirt_stream_{k}{{stream=\"{i}\"}} {}", s[k]);
                }
            }
        }
        out
    }
}

/// Adds `n` to a counter.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Serves `GET /metrics` (any path) on `addr` from a background thread. Returns the bound address.
pub fn serve_prometheus(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new().name("hirt-metrics".into()).spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut req = [0u8; 1024];
            let _ = conn.read(&mut req);
            let body = metrics.prometheus();
            let _ = write!(
                conn,
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{}",
                body.len(),
                body
            );
        }
    })?;
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_per_stream_series() {
        let m = Metrics::new(2, "srv6");
        add(&m.stream(1).recovered, 7);
        add(&m.global.malformed, 3);
        let t = m.prometheus();
        assert!(t.contains("hirt_stream_recovered{stream=\"1\"} 7"), "{t}");
        assert!(t.contains("hirt_stream_recovered{stream=\"0\"} 0"));
        assert!(t.contains("hirt_malformed 3"));
        let s = m.snapshot();
        assert_eq!(s.streams[1]["recovered"], 7);
        // Served over HTTP.
        let addr = serve_prometheus("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
        assert!(body.contains("hirt_stream_recovered{stream=\"1\"} 7"));
        // Out-of-range stream ids do not panic.
        add(&m.stream(900).losses, 1);
        assert_eq!(m.snapshot().streams[1]["losses"], 1);
    }
}
