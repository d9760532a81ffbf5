//! An authenticated peer that misbehaves: sources whose ESIs jump far forward, backwards and
//! across the wrap, repairs for windows far from anything sent, floods of repairs, symbols of
//! the largest and of oversized lengths, sources and repairs on every stream id. It holds
//! valid keys, so every datagram passes authentication and reaches the decoder.
//!
//! What the server may hold is bounded by its decoder configuration (see [`memory_bound`]);
//! the tests count the heap this thread allocates and frees (a counting global allocator, per
//! thread, so tests running beside them do not disturb the count), check the growth against
//! the bound, check that a second round of the same abuse adds next to nothing (memory stays
//! flat), and check that legitimate traffic still decodes afterwards.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hirt_fec::{RepairInfo, SchemeId};

use super::*;

/// The system allocator, counting this thread's live heap bytes.
struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

fn note(delta: i64) {
    // `try_with`: the allocator also runs while a thread's locals are torn down.
    let _ = LIVE.try_with(|c| c.set(c.get() + delta));
}

// SAFETY: every call is forwarded to `System` unchanged; the counting touches only a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            note(l.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            note(l.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `System` with layout `l` (every allocation goes there).
        unsafe { System.dealloc(p, l) };
        note(-(l.size() as i64));
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new` is the caller's valid new size.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            note(new as i64 - l.size() as i64);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes this thread holds (allocated minus freed here).
fn live() -> i64 {
    LIVE.with(Cell::get)
}

const SERVER: &str = "192.0.2.1:4096";
const CLIENT: &str = "198.51.100.7:5555";

fn cfg(role: Role) -> PeerConfig {
    PeerConfig {
        role,
        keys: keys::StaticKeys::well_known(b"abuse", role == Role::Server),
        handshake: handshake::HandshakeConfig::default(),
        encrypt: true,
        fec: FecMode::parse_with_window("fixed:w=16,step=4", 16).expect("a valid mode"),
        stream: 0,
        mss_mtu: None,
        ecn_ce: false,
        repair_dscp: 0,
        keepalive: Duration::from_millis(500),
        remote: (role == Role::Client).then(|| SERVER.parse().expect("an address")),
        seed: 7,
        coder: CoderSettings {
            overload_threshold: 1.0,
            ..CoderSettings::default()
        },
    }
}

/// A client and a server with a session, and what the server delivered.
struct Pair {
    client: UdpPeer,
    server: UdpPeer,
    now: Instant,
    delivered: Vec<Vec<u8>>,
    /// Packets the server delivered from the abuse.
    abuse_delivered: u64,
    /// Scratch datagram buffer (room for oversized frames).
    buf: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        let now = Instant::now();
        let m = Metrics::new(2, "t");
        let mut p = Pair {
            client: UdpPeer::new(cfg(Role::Client), m.clone(), now),
            server: UdpPeer::new(cfg(Role::Server), Metrics::new(2, "t"), now),
            now,
            delivered: Vec::new(),
            abuse_delivered: 0,
            buf: vec![0u8; 70_000],
        };
        // The handshake: initiation, response, the client's confirming keepalive.
        let mut to_server: Vec<Vec<u8>> = Vec::new();
        p.client.handle_timeout(
            now,
            &mut |t: Transmit<'_, SocketAddr>| to_server.push(t.bytes.to_vec()),
            &mut |_| {},
        );
        for _ in 0..2 {
            let mut to_client: Vec<Vec<u8>> = Vec::new();
            for mut d in to_server.drain(..) {
                let _ = p.server.handle_udp(
                    &mut d,
                    CLIENT.parse().expect("an address"),
                    0,
                    now,
                    &mut |t: Transmit<'_, SocketAddr>| to_client.push(t.bytes.to_vec()),
                    &mut |_| {},
                );
            }
            for mut d in to_client {
                let _ = p.client.handle_udp(
                    &mut d,
                    SERVER.parse().expect("an address"),
                    0,
                    now,
                    &mut |t: Transmit<'_, SocketAddr>| to_server.push(t.bytes.to_vec()),
                    &mut |_| {},
                );
            }
        }
        assert!(
            p.server.sessions().with(|hs| hs.sending().is_some()),
            "no session"
        );
        p
    }

    /// Seals `repr` with the client's session keys and hands it to the server, as the
    /// authenticated client would send it.
    fn inject(&mut self, repr: UdpRepr<'_>) -> Result<(), UdpDrop> {
        let end = self.buf.len() - crypto::TAG_LEN;
        let flen = repr
            .emit(&mut self.buf[HEADER_LEN..end])
            .expect("the frame fits");
        let n = self
            .client
            .machine_mut()
            .seal(&mut self.buf, flen)
            .expect("a session");
        // Counted, not kept: the test's own memory must not grow with the abuse.
        let delivered = &mut self.abuse_delivered;
        self.server.handle_udp(
            &mut self.buf[..n],
            CLIENT.parse().expect("an address"),
            0,
            self.now,
            &mut |_: Transmit<'_, SocketAddr>| {},
            &mut |_| *delivered += 1,
        )
    }

    fn source(&mut self, stream: StreamId, esi: u32, len: usize) -> Result<(), UdpDrop> {
        let payload = vec![(esi % 251) as u8; len];
        self.inject(UdpRepr::Source {
            stream,
            esi,
            payload: &payload,
        })
    }

    fn repair(&mut self, stream: StreamId, first_esi: u32, nss: u16, key: u16, len: usize) {
        let payload = vec![key as u8; len];
        let info = RepairInfo {
            scheme: SchemeId::Rlc,
            first_esi,
            nss,
            stride: 1,
            repair_key: key,
            dt: 15,
        };
        let _ = self.inject(UdpRepr::Repair {
            stream,
            info,
            timestamp: 0,
            payload: &payload,
        });
    }

    /// Legitimate traffic: `count` packets from the client's TUN device, one datagram in seven
    /// lost on the way (sources and repairs alike), then the client's timers (time-driven
    /// repairs for the last sources). Returns how many of the packets the server delivered,
    /// checking that none came twice.
    fn legitimate(&mut self, first: u32, count: u32) -> usize {
        self.delivered.clear();
        let mut buf = vec![0u8; BUF_LEN];
        let mut k = 0u32;
        for i in first..first + count + 3 {
            let mut wire: Vec<Vec<u8>> = Vec::new();
            let mut out = |t: Transmit<'_, SocketAddr>| wire.push(t.bytes.to_vec());
            if i < first + count {
                let p = ip_packet(i);
                buf[TUN_OFFSET..TUN_OFFSET + p.len()].copy_from_slice(&p);
                self.client
                    .handle_tun(&mut buf, p.len(), self.now, &mut out);
                self.now += Duration::from_micros(100);
            } else {
                self.now += Duration::from_millis(100);
                self.client.handle_timeout(self.now, &mut out, &mut |_| {});
            }
            for mut d in wire {
                k += 1;
                if k % 7 == 3 && i < first + count {
                    continue;
                }
                let delivered = &mut self.delivered;
                let _ = self.server.handle_udp(
                    &mut d,
                    CLIENT.parse().expect("an address"),
                    0,
                    self.now,
                    &mut |_: Transmit<'_, SocketAddr>| {},
                    &mut |p| delivered.push(p.to_vec()),
                );
            }
        }
        let mut seen = std::collections::BTreeMap::new();
        for d in &self.delivered {
            if d.len() >= 24 {
                let i = u32::from_be_bytes([d[20], d[21], d[22], d[23]]);
                assert_eq!(*d, ip_packet(i), "bit-exact");
                *seen.entry(i).or_insert(0u32) += 1;
            }
        }
        assert!(seen.values().all(|&n| n == 1), "a packet delivered twice");
        seen.keys()
            .filter(|&&i| (first..first + count).contains(&i))
            .count()
    }

    /// Runs every kind of abuse once.
    fn abuse(&mut self, round: u32) {
        self.abuse_parts(round, 0xff);
    }

    fn abuse_parts(&mut self, round: u32, parts: u8) {
        let big = MAX_PACKET;
        // ESI jumps on the client's own stream: far forward, backwards, across the wrap.
        if parts & 1 != 0 {
            for (base, n) in [
                (1u32 << 31, 200u32),
                (1 << 30, 200),
                (u32::MAX - 100, 200),
                (round * 7_919, 200),
                (1 << 31, 200),
            ] {
                for k in 0..n {
                    let _ = self.source(0, base.wrapping_add(k * 3), 1200);
                }
            }
        }
        if parts & 2 != 0 {
            // Repairs for windows far ahead of, far behind and across the wrap from the sources,
            // with the widest window the wire allows.
            for (first, nss) in [
                (1u32 << 20, 16u16),
                (u32::MAX - 5, 16),
                (5, hirt_fec::rlc::MAX_WINDOW),
                ((1 << 31) + 1_000_000, hirt_fec::rlc::MAX_WINDOW),
            ] {
                for key in 0..300 {
                    self.repair(0, first.wrapping_add(u32::from(key)), nss, key, 1200);
                }
            }
        }
        if parts & 4 != 0 {
            // A repair flood: thousands of repairs for each source of a stream.
            for esi in 0..8u32 {
                let _ = self.source(1, (1 << 29) + esi * 2, 1000);
                for key in 0..2_000 {
                    self.repair(1, (1 << 29) + esi.saturating_sub(8), 16, key, 1000);
                }
            }
        }
        if parts & 8 != 0 {
            // Symbols of the largest length the decoder takes, and beyond it.
            for esi in 0..400u32 {
                let _ = self.source(2, esi.wrapping_add(round << 20), big);
                if esi % 2 == 0 {
                    self.repair(2, esi.wrapping_add(round << 20), 16, esi as u16, big + 2);
                }
            }
            for len in [big + 1, big + 3, 20_000, 65_000] {
                let _ = self.source(3, round * 10 + len as u32, len);
                self.repair(3, round * 10, 16, 1, len);
            }
        }
        if parts & 16 != 0 {
            // Every stream id: sources with the largest symbols and repairs with gaps, so the
            // streams that are tracked fill their code's columns and equations.
            for stream in 0..=u16::MAX {
                let esi = round.wrapping_mul(1 << 24);
                let _ = self.source(stream, esi, if stream < 128 { big } else { 64 });
                if stream < 128 {
                    for k in 1..40u32 {
                        let _ = self.source(stream, esi + 2 * k, big);
                        self.repair(stream, esi + 2 * k - 15, 16, k as u16, big + 2);
                    }
                }
            }
        }
    }
}

/// An IPv4/UDP packet numbered `i` (bytes 20..24), with a valid header checksum.
fn ip_packet(i: u32) -> Vec<u8> {
    let len = 28 + (i as usize * 13) % 500;
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    for (k, b) in p[20..].iter_mut().enumerate() {
        *b = (i as usize * 7 + k) as u8;
    }
    p[20..24].copy_from_slice(&i.to_be_bytes());
    let mut sum = 0u32;
    for w in p[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p
}

/// The most heap bytes a UDP-mode server's receive side can hold for one peer, whatever the
/// peer sends, as a formula of the decoder's configuration (see docs/security.md):
///
/// ```text
/// slots x ( 256 KiB                      stream-id table (2^16 x 4 bytes)
///         + 512 x P                      recycled output buffers
///         + streams x ( S x P            the code's columns (known symbols)
///                     + 2S x (P + S)     equations: payload and coefficients
///                     + H                delivery history, one byte per ESI
///                     + I x P ) )        in-order release (I = 0 when off)
/// ```
///
/// P = 9218 bytes (the largest protected symbol: 9216 + a 2-byte length; longer symbols are
/// not stored), S = the code's span (the power of two >= 2W + the most repair lag it may grow
/// to, at least 64), H = the history, `streams` = `max_streams` per decoder, I =
/// `in_order_max` with in-order release.
fn memory_bound(dec: &hirt_core::DecoderConfig, slots: usize) -> u64 {
    let p = hirt_fec::MAX_SYMBOL_LEN as u64 + 2;
    let window = match dec.scheme {
        hirt_core::SchemeConfig::Rlc { window, .. } | hirt_core::SchemeConfig::Xor { window } => {
            window
        }
        _ => hirt_core::config::MAX_WINDOW,
    };
    let s = u64::from(hirt_fec::RlcDecoder::span_with_repair_lag(
        window,
        dec.repair_lag.max(dec.repair_lag_limit),
    ));
    let h = u64::from(dec.history).next_power_of_two();
    let i = if dec.in_order.is_some() {
        dec.in_order_max as u64
    } else {
        0
    };
    let per_stream = s * p + 2 * s * (p + s) + h + i * p;
    slots as u64 * ((1 << 18) + 512 * p + dec.max_streams as u64 * per_stream)
}

#[test]
fn an_authenticated_peer_cannot_grow_the_server_beyond_its_bound() {
    let mut p = Pair::new();
    assert_eq!(p.legitimate(0, 200), 200, "before the abuse");
    let dec_cfg = p
        .server
        .coder()
        .slots()
        .dec(0)
        .expect("a decoder")
        .config()
        .clone();
    let bound = memory_bound(&dec_cfg, 1);
    let base = live();
    p.abuse(0);
    let first = live() - base;
    for round in 1..5 {
        p.abuse(round);
    }
    let later = live() - base - first;
    eprintln!(
        "server heap growth: first round {first} B, four more rounds {later} B, bound {bound} B \
         (max_streams {}, history {}, window scheme {:?})",
        dec_cfg.max_streams, dec_cfg.history, dec_cfg.scheme
    );
    assert!(
        first > 0,
        "the abuse allocated nothing: the count is broken"
    );
    assert!(
        (first.max(0) as u64) < bound,
        "growth {first} B beyond the bound {bound} B"
    );
    // Flat: later rounds of the same abuse (at other ESIs) reuse what the first one allocated.
    assert!(
        later < first / 10,
        "memory keeps growing: {first} B, then {later} B more"
    );
    // The peer behaves again: its stream restarts (its ESIs went backwards from what the
    // decoder saw last), after which every packet decodes, losses recovered.
    let got = p.legitimate(1_000, 600);
    let then = p.legitimate(5_000, 300);
    eprintln!("legitimate traffic after the abuse: {got} of 600, then {then} of 300");
    assert!(got >= 600 - 64, "after the abuse: {got} of 600 delivered");
    assert_eq!(then, 300, "after the restart");
    let stats = p.server.coder().slots().dec(0).expect("a decoder").stats(0);
    assert!(stats.is_some_and(|s| s.recovered > 0), "{stats:?}");
}

#[test]
fn oversized_symbols_are_refused_without_allocation() {
    let mut p = Pair::new();
    assert_eq!(p.legitimate(0, 50), 50);
    let base = live();
    for k in 0..200u32 {
        let _ = p.source(9, k, MAX_PACKET + 1 + k as usize);
        p.repair(9, k, 16, k as u16, 20_000);
    }
    let grown = live() - base;
    eprintln!("oversized symbols: {grown} B");
    // One stream's state at most (a 9-byte-header source frame is not refused by the wire,
    // so the stream exists), no symbol stored.
    assert!(grown < 1 << 20, "{grown} B for refused symbols");
    assert_eq!(p.legitimate(100, 100), 100);
}
