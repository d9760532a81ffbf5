//! How busy a worker is, for overload control (HIRT §V "Overloading detection").
//!
//! A worker alternates between waiting in `poll` for its TUN queue and working (reading,
//! coding, writing). Once per period (~10 ms) [`LoadMeter`] reports its load:
//!
//! - 1.0 if the kernel dropped packets at the device's queue during the period (its
//!   `tx_dropped` counter rose): the worker cannot keep up, packets are being lost before hirt
//!   sees them;
//! - otherwise the CPU time the thread used over the period's wall time.
//!
//! Why queue drops and not "the queue never drained": a worker that runs at its capacity
//! always finds packets waiting, yet loses none; counting that as saturation makes the core
//! skip most repairs at 0.85x of the no-FEC capacity and recover a quarter of the losses there
//! (docs/results/2026-dataplane-srv6.md). Overload is the state in which packets are dropped,
//! and that is what the device counts.
//!
//! Why CPU time and not "wall time not spent in `poll`": on a machine where the workers share
//! cores with other threads (a 2-core machine running the bench's sender, receiver, two hirt
//! nodes and the kernel's forwarding), a runnable worker is often descheduled, and counting
//! that as busy makes overload control fire at a third of the capacity and skip most repairs
//! at 3% loss (docs/results/2026-dataplane-srv6.md). Time descheduled is not work the worker
//! can shed by skipping repairs; a queue that overflows is, and counts as 1.0.
//!
//! The reported load is an exponentially weighted average of the per-period values (weight
//! [`LOAD_EWMA`] for the newest): one period of 10 ms in which the worker happens to run flat
//! out (a backlog after being descheduled, a burst of decoding) must not make the core skip
//! repairs, which are not sent again; about 70 ms of saturation from a load of 0.2 takes it
//! past 0.9.
//!
//! Time and CPU time are passed in, so the meter is tested without clocks.

use std::time::{Duration, Instant};

/// Default measurement period.
pub const LOAD_PERIOD: Duration = Duration::from_millis(10);

/// Weight of the newest period in the reported (smoothed) load.
pub const LOAD_EWMA: f64 = 0.25;

/// Load accounting of one worker thread.
#[derive(Clone, Debug)]
pub struct LoadMeter {
    period: Duration,
    start: Instant,
    start_cpu: Duration,
    dropped: bool,
    load: f64,
}

impl LoadMeter {
    /// A meter whose first period starts at `now`, when the thread had used `cpu`.
    pub fn new(now: Instant, cpu: Duration, period: Duration) -> LoadMeter {
        LoadMeter {
            period: period.max(Duration::from_micros(1)),
            start: now,
            start_cpu: cpu,
            dropped: false,
            load: 0.0,
        }
    }

    /// Records that the device's queue dropped packets in this period.
    pub fn queue_dropped(&mut self) {
        self.dropped = true;
    }

    /// Whether the period is over (then call [`Self::close`]).
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.start) >= self.period
    }

    /// Closes the period at `now`, when the thread had used `cpu` in all, and starts the next.
    /// Returns the smoothed load (0.0..=1.0).
    pub fn close(&mut self, now: Instant, cpu: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.start);
        let used = cpu.saturating_sub(self.start_cpu);
        let period = if self.dropped {
            Some(1.0)
        } else if elapsed.is_zero() {
            None
        } else {
            Some((used.as_secs_f64() / elapsed.as_secs_f64()).clamp(0.0, 1.0))
        };
        if let Some(p) = period {
            self.load += LOAD_EWMA * (p - self.load);
        }
        self.start = now;
        self.start_cpu = cpu;
        self.dropped = false;
        self.load
    }

    /// The smoothed load as of the last complete period (0 before the first).
    pub fn load(&self) -> f64 {
        self.load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A meter without smoothing memory: feeds the same period value until it converges.
    fn settle(m: &mut LoadMeter, t: &mut Instant, cpu: &mut Duration, busy_ms: u64) -> f64 {
        let mut l = 0.0;
        for _ in 0..200 {
            *t += ms(10);
            *cpu += ms(busy_ms);
            l = m.close(*t, *cpu);
        }
        l
    }

    #[test]
    fn load_is_cpu_over_wall_smoothed() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(100), ms(10));
        assert!(!m.due(t0 + ms(9)));
        assert!(m.due(t0 + ms(10)));
        // One period: 3 ms of CPU in 10 ms -> a quarter of the way from 0 to 0.3.
        let l = m.close(t0 + ms(10), ms(103));
        assert!((l - LOAD_EWMA * 0.3).abs() < 1e-9, "{l}");
        assert_eq!(l, m.load());
        let (mut t, mut cpu) = (t0 + ms(10), ms(103));
        let l = settle(&mut m, &mut t, &mut cpu, 3);
        assert!((l - 0.3).abs() < 1e-6, "{l}");
        let l = settle(&mut m, &mut t, &mut cpu, 9);
        assert!((l - 0.9).abs() < 1e-6, "{l}");
    }

    #[test]
    fn queue_drops_are_saturation_but_one_spike_is_not() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, Duration::ZERO, ms(10));
        let (mut t, mut cpu) = (t0, Duration::ZERO);
        assert!(settle(&mut m, &mut t, &mut cpu, 2) < 0.21);
        // One period with queue drops (even with little CPU: descheduled): counts as 1.0,
        // but a single one stays well below a 0.9 threshold.
        t += ms(10);
        cpu += ms(1);
        m.queue_dropped();
        let l = m.close(t, cpu);
        assert!((l - (0.2 + LOAD_EWMA * 0.8)).abs() < 1e-6, "{l}");
        assert!(l < 0.5);
        // Sustained: past 0.9 within ~70 ms.
        let mut n = 1;
        let mut l = l;
        while l <= 0.9 {
            t += ms(10);
            m.queue_dropped();
            l = m.close(t, cpu);
            n += 1;
        }
        assert!((6..=9).contains(&n), "{n} periods");
    }

    /// A socket whose small receive buffer overflows counts its own drops; another socket of
    /// the namespace does not see them.
    #[test]
    fn socket_drops_are_per_socket() {
        use std::os::fd::AsRawFd;
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let small: libc::c_int = 4096;
        // SAFETY: setsockopt with a c_int on our socket.
        unsafe {
            libc::setsockopt(
                rx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&small as *const libc::c_int).cast(),
                4,
            );
        }
        assert_eq!(socket_drops(rx.as_raw_fd()), Some(0));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            tx.send_to(&[7u8; 1000], rx.local_addr().unwrap()).unwrap();
        }
        let d = socket_drops(rx.as_raw_fd()).unwrap();
        assert!(d >= 150, "{d} drops");
        assert_eq!(socket_drops(other.as_raw_fd()), Some(0));
    }

    #[test]
    fn odd_clocks_stay_in_range() {
        let t0 = Instant::now();
        let mut m = LoadMeter::new(t0, ms(50), ms(10));
        // CPU clock behind or ahead of wall time: clamped to 0..=1.
        for k in 1..50 {
            let l = m.close(t0 + ms(10 * k), ms(40));
            assert!((0.0..=1.0).contains(&l));
        }
        assert_eq!(m.load(), 0.0);
        let l = m.close(t0 + ms(600), ms(10_000));
        assert!((l - LOAD_EWMA).abs() < 1e-9, "{l}");
        // A zero-length period changes nothing.
        assert_eq!(m.close(t0 + ms(600), ms(10_001)), l);
    }
}

/// The drop counters that signal overload to a [`LoadMeter`]: the transmit-queue drops of the
/// device a worker reads (packets it did not take in time) and, for a UDP worker, the
/// namespace's UDP receive-buffer drops (datagrams it did not take in time).
///
/// The counters live in procfs, and reading them costs 15-30 µs on average and up to a
/// millisecond when the reader is preempted: done by a worker every period, packets waited
/// behind it. So a small sampler thread (in the worker's network namespace, which it
/// inherits) reads them every period and publishes the sum; the worker only compares two
/// numbers. The sampler ends when its `DropWatch` is dropped.
#[derive(Debug)]
pub struct DropWatch {
    sample: std::sync::Arc<DropSample>,
    last: Option<u64>,
}

#[derive(Debug, Default)]
struct DropSample {
    /// Sum of the counters, `u64::MAX` while they cannot be read.
    total: std::sync::atomic::AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

impl DropWatch {
    /// Watches `dev` (and UDP receive buffers if `udp`), starting from the current counts,
    /// sampled every `period`.
    pub fn new(dev: &str, udp: bool, period: Duration) -> DropWatch {
        use std::sync::atomic::Ordering;
        let sample = std::sync::Arc::new(DropSample::default());
        let mut counters = Counters {
            dev: dev.to_string(),
            udp,
            buf: String::with_capacity(4096),
        };
        let first = counters.total().unwrap_or(u64::MAX);
        sample.total.store(first, Ordering::Relaxed);
        let s = sample.clone();
        let spawned = std::thread::Builder::new()
            .name("hirt-drops".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    let t = counters.total().unwrap_or(u64::MAX);
                    s.total.store(t, Ordering::Relaxed);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("drop sampler thread: {e}; overload is measured by CPU time only");
        }
        DropWatch {
            sample,
            last: (first != u64::MAX).then_some(first),
        }
    }

    /// Packets dropped since the last call (0 if a counter cannot be read).
    pub fn new_drops(&mut self) -> u64 {
        let t = self.sample.total.load(std::sync::atomic::Ordering::Relaxed);
        let now = (t != u64::MAX).then_some(t);
        let new = match (now, self.last) {
            (Some(n), Some(b)) => n.saturating_sub(b),
            _ => 0,
        };
        self.last = now;
        new
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        self.sample
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a [`DropWatch`] sampler reads.
struct Counters {
    dev: String,
    udp: bool,
    buf: String,
}

impl Counters {
    fn total(&mut self) -> Option<u64> {
        let tun = tx_dropped(&self.dev, &mut self.buf)?;
        let udp = if self.udp {
            udp_rcvbuf_errors(&mut self.buf)?
        } else {
            0
        };
        Some(tun + udp)
    }
}

/// Datagrams the kernel dropped at socket `fd` so far (its receive buffer was full): the
/// socket's own `sk_drops` from `SO_MEMINFO`, so other sockets of the namespace do not count.
pub fn socket_drops(fd: std::os::fd::RawFd) -> Option<u64> {
    /// `SK_MEMINFO_VARS` and the index of `SK_MEMINFO_DROPS` (linux/sock_diag.h).
    const VARS: usize = 9;
    const DROPS: usize = 8;
    const SO_MEMINFO: libc::c_int = 55;
    let mut v = [0u32; VARS];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, which is that long.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize > DROPS * 4).then(|| u64::from(v[DROPS]))
}

/// Packets the kernel dropped at network device `dev`'s transmit queue so far (for a TUN device:
/// packets routed to it that its reader did not take in time), from `/proc/thread-self/net/dev`
/// (the calling thread's network namespace). `buf` is reused between calls. `None` if the file
/// or the device cannot be read.
pub fn tx_dropped(dev: &str, buf: &mut String) -> Option<u64> {
    use std::io::Read;
    buf.clear();
    std::fs::File::open("/proc/thread-self/net/dev")
        .ok()?
        .read_to_string(buf)
        .ok()?;
    parse_tx_dropped(buf, dev)
}

/// UDP datagrams dropped so far because a socket's receive buffer was full (IPv4 and IPv6
/// together: `RcvbufErrors` of `/proc/thread-self/net/snmp` and `Udp6RcvbufErrors` of
/// `snmp6`). `buf` is reused.
pub fn udp_rcvbuf_errors(buf: &mut String) -> Option<u64> {
    use std::io::Read;
    buf.clear();
    std::fs::File::open("/proc/thread-self/net/snmp")
        .ok()?
        .read_to_string(buf)
        .ok()?;
    let v4 = parse_snmp_udp_rcvbuf_errors(buf)?;
    buf.clear();
    let v6 = std::fs::File::open("/proc/thread-self/net/snmp6")
        .ok()
        .and_then(|mut f| f.read_to_string(buf).ok())
        .and_then(|_| {
            buf.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next()? == "Udp6RcvbufErrors").then(|| it.next()?.parse::<u64>().ok())?
            })
        })
        .unwrap_or(0);
    Some(v4 + v6)
}

/// `RcvbufErrors` of the two `Udp:` lines (names, then values) of `/proc/net/snmp`.
fn parse_snmp_udp_rcvbuf_errors(text: &str) -> Option<u64> {
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = udp.next()?;
    let values = udp.next()?;
    let col = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(col)?.parse().ok()
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`), for the load meter.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The `tx drop` column of `dev`'s line in the text of `/proc/net/dev`.
fn parse_tx_dropped(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, counters) = line.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop
        counters.split_whitespace().nth(11)?.parse().ok()
    })
}

#[cfg(test)]
mod proc_tests {
    use super::*;

    #[test]
    fn tx_drop_column_of_the_named_device() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     789    0    0    0     0          0         0   123456     789    0    0    0     0       0          0
 hirt0: 9999999   88888    1    2    3     4          5         6  7777777   66666    7  4242    9    10      11         12
hirt0x:       0       0    0    0    0     0          0         0        0       0    0    17    0     0       0          0
";
        assert_eq!(parse_tx_dropped(text, "hirt0"), Some(4242));
        assert_eq!(parse_tx_dropped(text, "hirt0x"), Some(17));
        assert_eq!(parse_tx_dropped(text, "lo"), Some(0));
        assert_eq!(parse_tx_dropped(text, "eth9"), None);
        assert_eq!(parse_tx_dropped("garbage\nhirt0: 1 2", "hirt0"), None);
        // this thread's namespace has a loopback device
        assert!(tx_dropped("lo", &mut String::new()).is_some());
    }

    #[test]
    fn udp_receive_buffer_errors() {
        let text = "Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 2 3 400 37 5 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 99 0 0 0 0
";
        assert_eq!(parse_snmp_udp_rcvbuf_errors(text), Some(37));
        assert_eq!(parse_snmp_udp_rcvbuf_errors("Udp: RcvbufErrors"), None);
        assert!(udp_rcvbuf_errors(&mut String::new()).is_some());
    }
}
