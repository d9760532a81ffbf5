//! MQTT publish latency against mosquitto (started in the server namespace when installed):
//! N clients (MQTT 3.1.1 over TCP, written here: CONNECT, SUBSCRIBE, PUBLISH QoS 1) each publish
//! 100-byte messages one at a time; the message time is PUBLISH to PUBACK, like mqtt-benchmark in
//! the SRv6-FEC paper. Each client subscribes to its own topic, so the broker echoes every message
//! back and its bytes are verified.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::Samples;
use crate::workload::http::tcp_connect;

/// Port of the broker.
pub const PORT: u16 = 1883;
/// Payload size.
pub const PAYLOAD: usize = 100;

/// Path of mosquitto if installed.
pub fn mosquitto() -> Option<&'static str> {
    [
        "/usr/sbin/mosquitto",
        "/usr/bin/mosquitto",
        "/usr/local/sbin/mosquitto",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

/// Client parameters.
#[derive(Debug, Clone)]
pub struct MqttClient {
    /// Broker address.
    pub server: SocketAddr,
    /// Local address.
    pub bind: IpAddr,
    /// Clients.
    pub clients: usize,
    /// Run time.
    pub duration: Duration,
    /// Pause between a client's messages.
    pub interval: Duration,
    /// Congestion control.
    pub cc: String,
    /// Distinguishes runs (topic names).
    pub run: u64,
}

fn remaining_len(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            break;
        }
    }
}

fn packet(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![kind];
    remaining_len(body.len(), &mut p);
    p.extend_from_slice(body);
    p
}

fn str16(s: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s);
}

/// Reads one MQTT packet: (first byte, body).
fn read_packet(s: &mut TcpStream, body: &mut Vec<u8>) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    let kind = b[0];
    let (mut len, mut mul) = (0usize, 1usize);
    for _ in 0..4 {
        s.read_exact(&mut b)?;
        len += (b[0] & 0x7f) as usize * mul;
        mul *= 128;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    if len > 1 << 20 {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    body.resize(len, 0);
    s.read_exact(body)?;
    Ok(kind)
}

/// Runs the clients.
pub fn run(c: &MqttClient, progress: &(dyn Fn(u64) + Sync)) -> Samples {
    let start = Instant::now();
    let deadline = start + c.duration;
    let parts: Vec<Samples> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..c.clients)
            .map(|k| scope.spawn(move || client(c, k, deadline, progress)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut s = Samples::merge(parts);
    s.elapsed = start.elapsed();
    s.note = Some("MQTT: mosquitto broker, QoS 1 publish-to-PUBACK time, 100-byte messages".into());
    s
}

fn client(c: &MqttClient, k: usize, deadline: Instant, progress: &(dyn Fn(u64) + Sync)) -> Samples {
    let mut s = Samples::default();
    let r = (|| -> std::io::Result<()> {
        let mut conn = tcp_connect(c.bind, c.server, &c.cc)?;
        conn.set_nodelay(true)?;
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        let id = format!("hirt-lab-{}-{k}", c.run);
        let topic = format!("hirt/lab/{}/{k}", c.run);
        let mut body = Vec::new();
        body.extend_from_slice(&[0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60]);
        str16(id.as_bytes(), &mut body);
        conn.write_all(&packet(0x10, &body))?;
        let mut buf = Vec::new();
        if read_packet(&mut conn, &mut buf)? != 0x20 || buf.get(1) != Some(&0) {
            return Err(std::io::ErrorKind::ConnectionRefused.into());
        }
        // SUBSCRIBE (packet id 1) to our own topic, QoS 0.
        let mut sub = vec![0, 1];
        str16(topic.as_bytes(), &mut sub);
        sub.push(0);
        conn.write_all(&packet(0x82, &sub))?;
        if read_packet(&mut conn, &mut buf)? != 0x90 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        let mut pid: u16 = 1;
        let mut payload = [0u8; PAYLOAD];
        while Instant::now() < deadline {
            pid = pid.wrapping_add(1).max(2);
            for (i, b) in payload.iter_mut().enumerate() {
                *b = (pid as usize * 31 + i * 7 + k) as u8;
            }
            let mut p = Vec::with_capacity(PAYLOAD + 64);
            str16(topic.as_bytes(), &mut p);
            p.extend_from_slice(&pid.to_be_bytes());
            p.extend_from_slice(&payload);
            let t0 = Instant::now();
            conn.write_all(&packet(0x32, &p))?;
            let (mut acked, mut echoed) = (false, false);
            while !(acked && echoed) {
                let kind = read_packet(&mut conn, &mut buf)?;
                match kind & 0xf0 {
                    0x40 if buf.as_slice() == pid.to_be_bytes() => {
                        acked = true;
                        s.latencies_us.push(t0.elapsed().as_micros() as u64);
                        progress(1);
                    }
                    0x30 => {
                        // Echo of our message (QoS 0): topic, then payload.
                        let tl = match buf.get(..2) {
                            Some(b) => u16::from_be_bytes([b[0], b[1]]) as usize,
                            None => usize::MAX - 2,
                        };
                        let body = buf.get(2 + tl..).unwrap_or(&[]);
                        if body != payload {
                            s.corrupt += 1;
                            s.errors += 1;
                        } else {
                            s.bytes += PAYLOAD as u64;
                        }
                        echoed = true;
                    }
                    _ => {}
                }
            }
            std::thread::sleep(c.interval);
        }
        conn.write_all(&[0xe0, 0])?;
        Ok(())
    })();
    if r.is_err() {
        s.errors += 1;
    }
    s
}
