//! File I/O as an NFS-like RPC load over TCP (this kernel has no NFS server; nfs-ganesha and
//! libnfs are not installed): 4 kB block READ/WRITE requests on an in-memory file, N clients in
//! closed loop like `fio` with a 4 kB block size, random offsets, 50% reads. Each client owns a
//! region of the file and keeps a shadow copy, so every byte read back is verified.
//!
//! Request: op (1 = read, 2 = write, 3 = reset a 1 MiB-aligned region to its initial content,
//! used once by each client before its run, so runs do not see each other's writes), 3 zero bytes, length u32 BE, offset u64 BE, then the data
//! for a write. Response: status (0 ok), 3 zero bytes, length u32 BE, then the data for a read.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{expected, Samples};
use crate::workload::http::{tcp_connect, tcp_listen};

/// Port of the RPC server.
pub const PORT: u16 = 2049;
/// Block size.
pub const BLOCK: usize = 4096;
/// Blocks per client region (1 MiB).
const REGION_BLOCKS: usize = 256;
/// Clients supported (the file is REGION x MAX_CLIENTS).
const MAX_CLIENTS: usize = 64;
const FILE_LEN: usize = BLOCK * REGION_BLOCKS * MAX_CLIENTS;
/// Bytes of a client region.
const REGION: usize = BLOCK * REGION_BLOCKS;

/// Runs the server on `addr` until `stop`; the file starts as the pattern.
pub fn serve(addr: SocketAddr, cc: &str, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let l = tcp_listen(addr, cc).with_context(|| format!("listening on {addr}"))?;
    l.set_nonblocking(true)?;
    let file = Arc::new(Mutex::new(initial_file()));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((s, _)) => {
                    let (file, stop) = (file.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let _ = handle(s, &file, &stop);
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Ok(())
}

fn initial_file() -> Vec<u8> {
    let mut f = vec![0u8; FILE_LEN];
    for (i, c) in f.chunks_mut(REGION).enumerate() {
        let n = c.len();
        c.copy_from_slice(expected(i as u64, n));
    }
    f
}

fn handle(mut s: TcpStream, file: &Mutex<Vec<u8>>, stop: &AtomicBool) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut hdr = [0u8; 16];
    let mut buf = vec![0u8; BLOCK];
    while !stop.load(Ordering::Relaxed) {
        s.read_exact(&mut hdr)?;
        let len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
        let off = u64::from_be_bytes(hdr[8..16].try_into().expect("8 bytes")) as usize;
        let ok = len <= BLOCK && off.checked_add(len).is_some_and(|e| e <= FILE_LEN);
        match (hdr[0], ok) {
            (1, true) => {
                buf[..len].copy_from_slice(
                    &file.lock().map_err(|_| std::io::ErrorKind::Other)?[off..off + len],
                );
                let mut resp = [0u8; 8];
                resp[4..8].copy_from_slice(&(len as u32).to_be_bytes());
                s.write_all(&resp)?;
                s.write_all(&buf[..len])?;
            }
            (2, true) => {
                s.read_exact(&mut buf[..len])?;
                file.lock().map_err(|_| std::io::ErrorKind::Other)?[off..off + len]
                    .copy_from_slice(&buf[..len]);
                s.write_all(&[0u8; 8])?;
            }
            (3, _) if off.is_multiple_of(REGION) && len == REGION && off + REGION <= FILE_LEN => {
                file.lock().map_err(|_| std::io::ErrorKind::Other)?[off..off + REGION]
                    .copy_from_slice(expected((off / REGION) as u64, REGION));
                s.write_all(&[0u8; 8])?;
            }
            _ => {
                s.write_all(&[1u8, 0, 0, 0, 0, 0, 0, 0])?;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Client parameters.
#[derive(Debug, Clone)]
pub struct RpcClient {
    /// Server address.
    pub server: SocketAddr,
    /// Local address.
    pub bind: IpAddr,
    /// Parallel clients (each its own connection and region; at most 64).
    pub clients: usize,
    /// Run time.
    pub duration: Duration,
    /// Congestion control.
    pub cc: String,
    /// Seed of the offsets and written data.
    pub seed: u64,
}

/// Runs the clients; one completion time per 4 kB operation.
pub fn run(c: &RpcClient, progress: &(dyn Fn(u64) + Sync)) -> Samples {
    let start = Instant::now();
    let deadline = start + c.duration;
    let init = initial_file();
    let parts: Vec<Samples> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..c.clients.min(MAX_CLIENTS))
            .map(|k| {
                let region = &init[k * REGION_BLOCKS * BLOCK..(k + 1) * REGION_BLOCKS * BLOCK];
                scope.spawn(move || client(c, k, region, deadline, progress))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut s = Samples::merge(parts);
    s.elapsed = start.elapsed();
    s.note = Some("file I/O: NFS-like 4 kB block RPC over TCP (no NFS in this kernel)".into());
    s
}

fn client(
    c: &RpcClient,
    k: usize,
    region: &[u8],
    deadline: Instant,
    progress: &(dyn Fn(u64) + Sync),
) -> Samples {
    let mut s = Samples::default();
    let mut shadow = region.to_vec();
    let base = k * REGION_BLOCKS * BLOCK;
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed ^ (k as u64) << 32);
    let Ok(mut conn) = tcp_connect(c.bind, c.server, &c.cc) else {
        s.errors += 1;
        return s;
    };
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut data = vec![0u8; BLOCK];
    let mut resp = [0u8; 8];
    let mut reset = [0u8; 16];
    reset[0] = 3;
    reset[4..8].copy_from_slice(&(REGION as u32).to_be_bytes());
    reset[8..16].copy_from_slice(&(base as u64).to_be_bytes());
    if conn
        .write_all(&reset)
        .and_then(|_| conn.read_exact(&mut resp))
        .is_err()
        || resp != [0u8; 8]
    {
        s.errors += 1;
        return s;
    }
    while Instant::now() < deadline {
        let blk = rng.gen_range(0..REGION_BLOCKS);
        let off = blk * BLOCK;
        let write = rng.gen_bool(0.5);
        let mut hdr = [0u8; 16];
        hdr[0] = if write { 2 } else { 1 };
        hdr[4..8].copy_from_slice(&(BLOCK as u32).to_be_bytes());
        hdr[8..16].copy_from_slice(&((base + off) as u64).to_be_bytes());
        if write {
            rng.fill(&mut data[..]);
        }
        let t0 = Instant::now();
        let r = (|| -> std::io::Result<bool> {
            if write {
                let mut msg = Vec::with_capacity(16 + BLOCK);
                msg.extend_from_slice(&hdr);
                msg.extend_from_slice(&data);
                conn.write_all(&msg)?;
                conn.read_exact(&mut resp)?;
                Ok(resp == [0u8; 8])
            } else {
                conn.write_all(&hdr)?;
                conn.read_exact(&mut resp)?;
                conn.read_exact(&mut data)?;
                Ok(resp[0] == 0 && data == shadow[off..off + BLOCK])
            }
        })();
        match r {
            Ok(true) => {
                if write {
                    shadow[off..off + BLOCK].copy_from_slice(&data);
                }
                s.latencies_us.push(t0.elapsed().as_micros() as u64);
                s.bytes += BLOCK as u64;
                progress(1);
            }
            Ok(false) => {
                s.errors += 1;
                s.corrupt += 1;
                break;
            }
            Err(_) => {
                s.errors += 1;
                break;
            }
        }
    }
    s
}
