//! The userspace link emulator: a bump in the wire between two interfaces of the "link"
//! namespace. Frames are read with AF_PACKET raw sockets (batched `recvmmsg`), pass through a
//! [`core::Pipeline`] per direction (loss, rate/queue, delay/jitter, reordering: the
//! `hirt-channel` elements) and leave, untouched, on the other interface (batched `sendmmsg`,
//! qdisc bypassed). One thread per direction; buffers are preallocated slots, so the hot path
//! does not allocate.
//!
//! Why userspace: the kernel here has no netem, and many users' kernels lack it too. Why AF_PACKET
//! rather than a TUN or a bridge: the emulator must be transparent (Ethernet in, Ethernet out, any
//! protocol, SRv6 included) and must see each MTU-sized packet once; offloads are switched off on
//! every veth of the topology for that reason.

pub mod core;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use self::core::{Counters, DirectionConfig, Pipeline};
use crate::sys::{self, Batch, PacketSocket, Received};

/// Frame buffer size (MTU 1500 + Ethernet header fits; larger frames are counted and dropped).
const SLOT: usize = 2048;
/// Frames held at once per direction: 16384 x 1280 B = 167 ms at 1 Gbit/s.
const SLOTS: usize = 16384;
/// Frames per system call.
const BATCH: usize = 64;

/// Counters of one direction, readable while the emulator runs.
#[derive(Debug, Default)]
pub struct SharedCounters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    lost: AtomicU64,
    queue_drops: AtomicU64,
    ce_marked: AtomicU64,
    released: AtomicU64,
    released_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_errors: AtomicU64,
    truncated: AtomicU64,
    overflow: AtomicU64,
    socket_drops: AtomicU64,
    cpu_ns: AtomicU64,
}

/// A snapshot of one direction's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectionStats {
    /// Frames that arrived.
    pub rx_packets: u64,
    /// Bytes that arrived.
    pub rx_bytes: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped by the drop-tail queue.
    pub queue_drops: u64,
    /// Marked CE by the queue (`ecn_mark_above`; ECN-capable packets only are rewritten).
    pub ce_marked: u64,
    /// Released by the pipeline.
    pub released: u64,
    /// Bytes released by the pipeline.
    pub released_bytes: u64,
    /// Frames actually transmitted.
    pub tx_packets: u64,
    /// Frames the kernel refused to transmit (emulator's own losses).
    pub tx_errors: u64,
    /// Frames larger than a slot (emulator's own losses).
    pub truncated: u64,
    /// Loop iterations that found every slot busy (frames then wait in the socket buffer).
    pub overflow: u64,
    /// Frames the kernel dropped because the emulator did not read them in time (its receive
    /// buffer was full): the emulator's own losses.
    pub socket_drops: u64,
    /// CPU time the direction's thread used, nanoseconds (its cost per packet).
    pub cpu_ns: u64,
}

impl DirectionStats {
    /// Frames the emulator itself lost (not the model): should be zero.
    pub fn own_losses(&self) -> u64 {
        self.tx_errors + self.truncated + self.socket_drops
    }
}

impl SharedCounters {
    fn publish(&self, c: &Counters) {
        self.rx_packets.store(c.rx_packets, Ordering::Relaxed);
        self.rx_bytes.store(c.rx_bytes, Ordering::Relaxed);
        self.lost.store(c.lost, Ordering::Relaxed);
        self.queue_drops.store(c.queue_drops, Ordering::Relaxed);
        self.ce_marked.store(c.ce_marked, Ordering::Relaxed);
        self.released.store(c.released, Ordering::Relaxed);
        self.released_bytes
            .store(c.released_bytes, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> DirectionStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectionStats {
            rx_packets: l(&self.rx_packets),
            rx_bytes: l(&self.rx_bytes),
            lost: l(&self.lost),
            queue_drops: l(&self.queue_drops),
            ce_marked: l(&self.ce_marked),
            released: l(&self.released),
            released_bytes: l(&self.released_bytes),
            tx_packets: l(&self.tx_packets),
            tx_errors: l(&self.tx_errors),
            truncated: l(&self.truncated),
            overflow: l(&self.overflow),
            socket_drops: l(&self.socket_drops),
            cpu_ns: l(&self.cpu_ns),
        }
    }
}

/// A running emulator (two forwarding threads). Stops on drop.
pub struct Emulator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Counters of the a->b direction.
    pub ab: Arc<SharedCounters>,
    /// Counters of the b->a direction.
    pub ba: Arc<SharedCounters>,
    /// One-way delay of each direction (a->b, b->a) in ns, changeable while running.
    delays: [Arc<AtomicU64>; 2],
}

impl Emulator {
    /// Starts forwarding between `if_a` and `if_b` of namespace `netns` (`None`: the caller's),
    /// applying `ab` to frames from a to b and `ba` to frames from b to a.
    pub fn start(
        netns: Option<&str>,
        if_a: &str,
        if_b: &str,
        ab: &DirectionConfig,
        ba: &DirectionConfig,
    ) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let c_ab = Arc::new(SharedCounters::default());
        let c_ba = Arc::new(SharedCounters::default());
        let delay_ns = |c: &DirectionConfig| Arc::new(AtomicU64::new(c.delay.as_nanos() as u64));
        let delays = [delay_ns(ab), delay_ns(ba)];
        let mut emu = Emulator {
            stop: stop.clone(),
            threads: Vec::new(),
            ab: c_ab.clone(),
            ba: c_ba.clone(),
            delays: delays.clone(),
        };
        let [d_ab, d_ba] = delays;
        for (rx_if, tx_if, cfg, ctr, delay) in
            [(if_a, if_b, ab, c_ab, d_ab), (if_b, if_a, ba, c_ba, d_ba)]
        {
            let (rx_if, tx_if, cfg) = (rx_if.to_string(), tx_if.to_string(), cfg.clone());
            let ns = netns.map(str::to_string);
            let stop = stop.clone();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name(format!("emu-{rx_if}"))
                .spawn(move || -> anyhow::Result<()> {
                    let setup = (|| -> anyhow::Result<_> {
                        if let Some(ns) = &ns {
                            hirt_os::netns::enter_named(ns)
                                .with_context(|| format!("entering netns {ns}"))?;
                        }
                        sys::set_timer_slack_min();
                        if std::env::var_os("HIRT_EMU_NO_RT").is_none() {
                            sys::set_realtime(20);
                        }
                        let rx = PacketSocket::open(&rx_if, true)
                            .with_context(|| format!("packet socket on {rx_if}"))?;
                        let tx = PacketSocket::open(&tx_if, false)
                            .with_context(|| format!("packet socket on {tx_if}"))?;
                        let pipe = Pipeline::<u32>::new(&cfg, SLOTS)?;
                        Ok((rx, tx, pipe))
                    })();
                    match setup {
                        Ok((rx, tx, pipe)) => {
                            let _ = ready_tx.send(Ok(()));
                            forward(&rx, &tx, pipe, &stop, &ctr, &delay);
                            Ok(())
                        }
                        Err(e) => {
                            let msg = format!("{e:#}");
                            let _ = ready_tx.send(Err(e));
                            anyhow::bail!(msg)
                        }
                    }
                })?;
            threads.push(t);
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    emu.threads = threads;
                    return Err(e);
                }
                Err(_) => anyhow::bail!("emulator thread died during setup"),
            }
        }
        emu.threads = threads;
        Ok(emu)
    }

    /// Changes the one-way delay of each direction (a->b, b->a) for frames that arrive from
    /// now on; frames inside keep theirs, and neither direction reorders.
    pub fn set_delays(&self, ab: Duration, ba: Duration) {
        self.delays[0].store(ab.as_nanos() as u64, Ordering::Relaxed);
        self.delays[1].store(ba.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Counters of both directions (a->b, b->a).
    pub fn stats(&self) -> (DirectionStats, DirectionStats) {
        (self.ab.snapshot(), self.ba.snapshot())
    }

    /// Stops the threads and returns the final counters.
    pub fn stop(mut self) -> (DirectionStats, DirectionStats) {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The forwarding loop of one direction.
fn forward(
    rx: &PacketSocket,
    tx: &PacketSocket,
    mut pipe: Pipeline<u32>,
    stop: &AtomicBool,
    ctr: &SharedCounters,
    delay_ns: &AtomicU64,
) {
    let mut delay = delay_ns.load(Ordering::Relaxed);
    let mut mem = vec![0u8; SLOT * SLOTS];
    let mut free: Vec<u32> = (0..SLOTS as u32).rev().collect();
    let mut rx_batch = Batch::new(BATCH);
    let mut tx_batch = Batch::new(BATCH);
    let mut rx_slots = [0u32; BATCH];
    let mut tx_slots = [0u32; BATCH];
    let mut got = [Received {
        len: 0,
        truncated: false,
    }; BATCH];
    let (mut tx_packets, mut tx_errors, mut truncated, mut overflow) = (0u64, 0u64, 0u64, 0u64);
    let mut iter = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let wanted = delay_ns.load(Ordering::Relaxed);
        if wanted != delay {
            delay = wanted;
            pipe.set_delay(Duration::from_nanos(delay));
        }
        // Receive what is pending.
        let k = BATCH.min(free.len());
        let mut n = 0;
        if k == 0 {
            overflow += 1;
        } else {
            for (i, slot) in rx_slots.iter_mut().enumerate().take(k) {
                *slot = free.pop().unwrap_or_default();
                let off = *slot as usize * SLOT;
                rx_batch.set(i, &mut mem[off..off + SLOT]);
            }
            n = rx_batch.recv(rx.raw(), k, &mut got).unwrap_or(0);
            let now = Instant::now();
            for i in 0..n {
                let slot = rx_slots[i];
                if got[i].truncated {
                    truncated += 1;
                    free.push(slot);
                    continue;
                }
                match pipe.push(now, got[i].len, slot) {
                    Ok(true) => {
                        let off = slot as usize * SLOT;
                        self::core::mark_ce(&mut mem[off..off + got[i].len]);
                    }
                    Ok(false) => {}
                    Err((slot, _)) => free.push(slot),
                }
            }
            for slot in &rx_slots[n..k] {
                free.push(*slot);
            }
        }
        // Transmit what is due.
        let now = Instant::now();
        loop {
            let mut m = 0;
            while m < BATCH {
                let Some((slot, len)) = pipe.pop_due(now) else {
                    break;
                };
                tx_slots[m] = slot;
                let off = slot as usize * SLOT;
                tx_batch.set(m, &mut mem[off..off + len]);
                m += 1;
            }
            if m == 0 {
                break;
            }
            let mut sent = 0;
            let mut retries = 0;
            while sent < m {
                match tx_batch.send(tx.raw(), sent, m) {
                    Ok(s) => sent += s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && retries < 1000 => {
                        retries += 1;
                        std::thread::yield_now();
                    }
                    Err(_) => {
                        // The kernel refused this frame: count it and move past it.
                        tx_errors += 1;
                        sent += 1;
                    }
                }
            }
            tx_packets += m as u64;
            for slot in &tx_slots[..m] {
                free.push(*slot);
            }
            if m < BATCH {
                break;
            }
        }
        iter = iter.wrapping_add(1);
        if n < k || iter.is_multiple_of(64) {
            ctr.socket_drops
                .fetch_add(rx.take_drops(), Ordering::Relaxed);
            pipe_publish(&pipe, ctr, tx_packets, tx_errors, truncated, overflow);
        }
        if n == k && k > 0 {
            continue; // more may be pending
        }
        let now = Instant::now();
        let wait = pipe
            .next_release()
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or(Duration::from_millis(20))
            .min(Duration::from_millis(20));
        if !wait.is_zero() {
            sys::wait_readable(rx.raw(), wait);
        }
    }
    ctr.socket_drops
        .fetch_add(rx.take_drops(), Ordering::Relaxed);
    ctr.cpu_ns
        .store(sys::thread_cpu_time().as_nanos() as u64, Ordering::Relaxed);
    pipe_publish(&pipe, ctr, tx_packets, tx_errors, truncated, overflow);
}

fn pipe_publish(
    pipe: &Pipeline<u32>,
    ctr: &SharedCounters,
    tx: u64,
    err: u64,
    trunc: u64,
    over: u64,
) {
    ctr.publish(&pipe.counters());
    ctr.tx_packets.store(tx - err, Ordering::Relaxed);
    ctr.tx_errors.store(err, Ordering::Relaxed);
    ctr.truncated.store(trunc, Ordering::Relaxed);
    ctr.overflow.store(over, Ordering::Relaxed);
}
