//! The UDP-mode key exchange: Noise `IKpsk2` (X25519, ChaCha20-Poly1305, BLAKE2s), the pattern
//! WireGuard uses, through the `snow` crate. Sans-IO: [`Handshake`] takes datagrams and the
//! time and returns datagrams; [`Sessions`] shares it between the workers of an instance.
//!
//! The client initiates; the server answers. Each completed handshake yields a **session**: a
//! key per direction derived from fresh ephemeral keys of both ends, so no key (and so no
//! nonce) is ever used by two runs of either end, whatever their clocks say, and recorded
//! traffic stays closed when a static key leaks later (forward secrecy). The data path numbers
//! datagrams per session from 0 ([`crate::crypto`]).
//!
//! ```text
//! initiation (client -> server, 113 bytes)   response (server -> client, 66 bytes)
//! +------+-------------------------+------+  +------+---------------------------+------+
//! | 0x03 | Noise message 1 (96 B)  | mac1 |  | 0x04 | Noise message 2 (50 B)    | mac1 |
//! +------+-------------------------+------+  +------+---------------------------+------+
//!          e, es, s, ss, {empty}                      e, ee, se, psk, {phase}
//! ```
//!
//! - `mac1` (16 bytes) is BLAKE2s-MAC over the type byte and the Noise message, keyed with
//!   BLAKE2s("mac1----" || the receiver's public key), as in WireGuard: a sender that does not
//!   know the receiver's public key is dropped for the price of one BLAKE2s, before any
//!   Diffie-Hellman.
//! - Handshake floods: the server runs the Diffie-Hellmans of an initiation only when a
//!   **per-source token bucket** (by source IP, [`RateLimits`]) and a global one both have a
//!   token; there is no cookie reply (nothing is sent to an unauthenticated source). A replayed
//!   initiation (its ephemeral key seen before) is dropped before any Diffie-Hellman.
//! - The server keeps the new session *pending* and goes on sending under the current one
//!   until the first datagram under the new keys arrives (key confirmation, as in WireGuard),
//!   since the client may not have received the response.
//! - The response carries the **key phase** (0-3) the server gave the session; data datagrams
//!   carry it in their mode byte, so the receiver picks the key without trial decryption.
//! - Rekey: the client starts a new handshake after `rekey_after` (time), after
//!   `rekey_packets` datagrams on any of its workers, when the server asks (a flag in the mode
//!   byte of its authenticated datagrams, set when its own count passes `rekey_packets`), and
//!   when nothing authenticated arrived for `dead_after` (the server restarted and lost its
//!   session). Initiations are retried every `retry` until a response arrives.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blake2::digest::{consts::U16, Mac};
use blake2::{Blake2s256, Blake2sMac, Digest};
use zeroize::Zeroizing;

use super::keys::{Secret, StaticKeys, KEY_LEN};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// Type byte of an initiation.
pub const TYPE_INITIATION: u8 = 0x03;
/// Type byte of a response.
pub const TYPE_RESPONSE: u8 = 0x04;
const MAC_LEN: usize = 16;
/// Noise message 1 with an empty payload: e (32), s (32 + 16), payload tag (16).
const MSG1_LEN: usize = 96;
/// Noise message 2 with the one-byte phase payload: e (32), payload (1 + 16).
const MSG2_LEN: usize = 49;
/// Bytes of an initiation datagram.
pub const INITIATION_LEN: usize = 1 + MSG1_LEN + MAC_LEN;
/// Bytes of a response datagram.
pub const RESPONSE_LEN: usize = 1 + MSG2_LEN + MAC_LEN;
/// Initiation ephemerals remembered to drop replays.
const SEEN_EPHEMERALS: usize = 256;
/// Key phases (2 bits of the mode byte).
pub const PHASES: usize = 4;

/// Whether a datagram's first byte names a handshake message.
#[inline]
pub fn is_handshake(first: u8) -> bool {
    first == TYPE_INITIATION || first == TYPE_RESPONSE
}

/// Token buckets that bound the Diffie-Hellman work of the responder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimits {
    /// Initiations per second per source IP.
    pub per_source: f64,
    /// Burst per source IP.
    pub per_source_burst: f64,
    /// Initiations per second in all.
    pub global: f64,
    /// Burst in all.
    pub global_burst: f64,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            per_source: 5.0,
            per_source_burst: 10.0,
            global: 100.0,
            global_burst: 20.0,
        }
    }
}

/// Timers and limits of the handshake.
#[derive(Clone, Debug, PartialEq)]
pub struct HandshakeConfig {
    /// Start a new session after this long.
    pub rekey_after: Duration,
    /// Start a new session after this many datagrams sent by one worker.
    pub rekey_packets: u64,
    /// Resend an unanswered initiation after this long.
    pub retry: Duration,
    /// Client: start a new handshake when nothing authenticated arrived for this long.
    pub dead_after: Duration,
    /// Responder work limits.
    pub limits: RateLimits,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        HandshakeConfig {
            rekey_after: Duration::from_secs(120),
            rekey_packets: 1 << 32,
            retry: Duration::from_millis(250),
            dead_after: Duration::from_secs(3),
            limits: RateLimits::default(),
        }
    }
}

/// The keys of one session.
pub struct SessionKeys {
    /// Unique within this process.
    pub id: u64,
    /// Key phase carried by its data datagrams.
    pub phase: u8,
    /// Key of what we send.
    pub send: Secret,
    /// Key of what we receive.
    pub recv: Secret,
    /// When it was established.
    pub started: Instant,
    /// Whether the peer has used it (always true on the initiator).
    pub confirmed: bool,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys")
            .field("id", &self.id)
            .field("phase", &self.phase)
            .field("confirmed", &self.confirmed)
            .finish_non_exhaustive()
    }
}

/// Why a handshake datagram was dropped (silently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeDrop {
    /// Wrong length or type for this end.
    #[error("malformed handshake message")]
    Malformed,
    /// mac1 did not verify: the sender does not know our public key.
    #[error("bad mac1")]
    BadMac,
    /// A token bucket was empty.
    #[error("rate limited")]
    RateLimited,
    /// The initiation's ephemeral key was seen before.
    #[error("replayed initiation")]
    Replay,
    /// Noise refused it (wrong keys, forged), or it came from an unknown static key.
    #[error("handshake failed")]
    Failed,
    /// A response with no initiation of ours in flight.
    #[error("unexpected response")]
    Unexpected,
}

/// Counters of the handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandshakeStats {
    /// Initiations sent.
    pub initiations_sent: u64,
    /// Responses sent.
    pub responses_sent: u64,
    /// Sessions established (initiator: response read; responder: confirmed).
    pub sessions: u64,
    /// Handshake datagrams dropped by a token bucket.
    pub rate_limited: u64,
    /// Handshake datagrams dropped for any other reason.
    pub dropped: u64,
}

struct Initiation {
    state: snow::HandshakeState,
    sent: Instant,
}

/// One end's handshake state and sessions (sans-IO).
pub struct Handshake {
    initiator: bool,
    keys: StaticKeys,
    cfg: HandshakeConfig,
    /// mac1 key of datagrams sent to us.
    mac1_ours: [u8; 32],
    /// mac1 key of datagrams we send.
    mac1_peer: [u8; 32],
    next_id: u64,
    /// Bumped whenever the set of keys changes.
    version: u64,
    current: Option<SessionKeys>,
    previous: Option<SessionKeys>,
    pending: Option<SessionKeys>,
    initiation: Option<Initiation>,
    rekey_requested: bool,
    seen: VecDeque<[u8; 32]>,
    limiter: Limiter,
    stats: HandshakeStats,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("initiator", &self.initiator)
            .field("current", &self.current)
            .field("previous", &self.previous)
            .field("pending", &self.pending)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Writes the mac1 of a handshake message (its last 16 bytes) for the receiver whose public key
/// is `receiver`: what a sender that knows that key can do (fuzzing and flood tools use it to
/// reach the Noise layer).
pub fn seal_mac1(msg: &mut [u8], receiver: &[u8; KEY_LEN]) {
    let Some(body) = msg.len().checked_sub(MAC_LEN) else {
        return;
    };
    let tag = mac1(&mac1_key(receiver), &msg[..body]);
    msg[body..].copy_from_slice(&tag);
}

fn mac1_key(public: &[u8; KEY_LEN]) -> [u8; 32] {
    let mut h = Blake2s256::new();
    h.update(b"mac1----");
    h.update(public);
    h.finalize().into()
}

fn mac1(key: &[u8; 32], msg: &[u8]) -> [u8; MAC_LEN] {
    let mut m = <Blake2sMac<U16> as Mac>::new_from_slice(key).expect("a 32-byte BLAKE2s key");
    m.update(msg);
    m.finalize().into_bytes().into()
}

impl Handshake {
    /// The handshake of the client (`initiator`) or the server.
    pub fn new(keys: StaticKeys, initiator: bool, cfg: HandshakeConfig) -> Handshake {
        let limiter = Limiter::new(cfg.limits);
        Handshake {
            initiator,
            mac1_ours: mac1_key(&keys.public()),
            mac1_peer: mac1_key(&keys.peer_public),
            keys,
            cfg,
            next_id: 1,
            version: 0,
            current: None,
            previous: None,
            pending: None,
            initiation: None,
            rekey_requested: false,
            seen: VecDeque::with_capacity(SEEN_EPHEMERALS),
            limiter,
            stats: HandshakeStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HandshakeConfig {
        &self.cfg
    }

    /// Changes with every change of the keys in use.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Counters.
    pub fn stats(&self) -> HandshakeStats {
        self.stats
    }

    /// The session we send under (the server: the newest confirmed one).
    pub fn sending(&self) -> Option<&SessionKeys> {
        self.current.as_ref()
    }

    /// Every session we accept datagrams of.
    pub fn receiving(&self) -> impl Iterator<Item = &SessionKeys> {
        [&self.current, &self.previous, &self.pending]
            .into_iter()
            .flatten()
    }

    /// Asks the initiator for a new session (the peer's request or our packet count).
    pub fn request_rekey(&mut self) {
        self.rekey_requested = true;
    }

    fn builder(&self) -> snow::Builder<'_> {
        snow::Builder::new(NOISE_PARAMS.parse().expect("a valid Noise protocol name"))
    }

    /// Initiator: an initiation to send now, if one is due. `last_rx`: when an authenticated
    /// datagram last arrived.
    pub fn poll_initiation(&mut self, now: Instant, last_rx: Option<Instant>) -> Option<Vec<u8>> {
        if !self.initiator {
            return None;
        }
        if let Some(i) = &self.initiation {
            if now.saturating_duration_since(i.sent) < self.cfg.retry {
                return None;
            }
        } else {
            let due = match &self.current {
                None => true,
                Some(s) => {
                    let heard = last_rx.map_or(s.started, |t| t.max(s.started));
                    self.rekey_requested
                        || now.saturating_duration_since(s.started) >= self.cfg.rekey_after
                        || now.saturating_duration_since(heard) >= self.cfg.dead_after
                }
            };
            if !due {
                return None;
            }
        }
        let mut state = self
            .builder()
            .local_private_key(&*self.keys.private)
            .and_then(|b| b.remote_public_key(&self.keys.peer_public))
            .and_then(|b| b.psk(2, &self.keys.psk))
            .and_then(|b| b.build_initiator())
            .ok()?;
        let mut out = vec![0u8; INITIATION_LEN];
        out[0] = TYPE_INITIATION;
        let n = state.write_message(&[], &mut out[1..1 + MSG1_LEN]).ok()?;
        debug_assert_eq!(n, MSG1_LEN);
        let tag = mac1(&self.mac1_peer, &out[..1 + MSG1_LEN]);
        out[1 + MSG1_LEN..].copy_from_slice(&tag);
        self.initiation = Some(Initiation { state, sent: now });
        self.stats.initiations_sent += 1;
        Some(out)
    }

    /// When [`Handshake::poll_initiation`] may next have something to send (the initiator).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.initiator {
            return None;
        }
        match (&self.initiation, &self.current) {
            (Some(i), _) => Some(i.sent + self.cfg.retry),
            (None, Some(s)) => Some(s.started + self.cfg.rekey_after.min(self.cfg.dead_after)),
            (None, None) => None,
        }
    }

    /// A handshake datagram from `from`. Returns the response to send back to `from`, if any.
    pub fn handle(
        &mut self,
        msg: &[u8],
        from: IpAddr,
        now: Instant,
    ) -> Result<Option<Vec<u8>>, HandshakeDrop> {
        let r = match (msg.first(), self.initiator) {
            (Some(&TYPE_INITIATION), false) => self.handle_initiation(msg, from, now).map(Some),
            (Some(&TYPE_RESPONSE), true) => self.handle_response(msg, now).map(|()| None),
            _ => Err(HandshakeDrop::Malformed),
        };
        match r {
            Err(HandshakeDrop::RateLimited) => self.stats.rate_limited += 1,
            Err(_) => self.stats.dropped += 1,
            Ok(_) => {}
        }
        r
    }

    fn check_mac(&self, msg: &[u8], len: usize) -> Result<(), HandshakeDrop> {
        if msg.len() != len {
            return Err(HandshakeDrop::Malformed);
        }
        let want = mac1(&self.mac1_ours, &msg[..len - MAC_LEN]);
        // Not secret (anyone knowing our public key can compute it): no constant-time compare.
        if want[..] != msg[len - MAC_LEN..] {
            return Err(HandshakeDrop::BadMac);
        }
        Ok(())
    }

    fn handle_initiation(
        &mut self,
        msg: &[u8],
        from: IpAddr,
        now: Instant,
    ) -> Result<Vec<u8>, HandshakeDrop> {
        self.check_mac(msg, INITIATION_LEN)?;
        if !self.limiter.allow(from, now) {
            return Err(HandshakeDrop::RateLimited);
        }
        let mut ephemeral = [0u8; 32];
        ephemeral.copy_from_slice(&msg[1..33]);
        if self.seen.contains(&ephemeral) {
            return Err(HandshakeDrop::Replay);
        }
        let mut state = self
            .builder()
            .local_private_key(&*self.keys.private)
            .and_then(|b| b.psk(2, &self.keys.psk))
            .and_then(|b| b.build_responder())
            .map_err(|_| HandshakeDrop::Failed)?;
        let mut payload = [0u8; 64];
        state
            .read_message(&msg[1..1 + MSG1_LEN], &mut payload)
            .map_err(|_| HandshakeDrop::Failed)?;
        if state.get_remote_static() != Some(&self.keys.peer_public[..]) {
            return Err(HandshakeDrop::Failed);
        }
        if self.seen.len() == SEEN_EPHEMERALS {
            self.seen.pop_front();
        }
        self.seen.push_back(ephemeral);
        let phase = self
            .current
            .as_ref()
            .map_or(0, |s| (s.phase + 1) % PHASES as u8);
        let mut out = vec![0u8; RESPONSE_LEN];
        out[0] = TYPE_RESPONSE;
        let n = state
            .write_message(&[phase], &mut out[1..1 + MSG2_LEN])
            .map_err(|_| HandshakeDrop::Failed)?;
        debug_assert_eq!(n, MSG2_LEN);
        let tag = mac1(&self.mac1_peer, &out[..1 + MSG2_LEN]);
        out[1 + MSG2_LEN..].copy_from_slice(&tag);
        let (i2r, r2i) = state.dangerously_get_raw_split();
        self.pending = Some(self.session(phase, r2i, i2r, now, false));
        self.version += 1;
        self.stats.responses_sent += 1;
        Ok(out)
    }

    fn handle_response(&mut self, msg: &[u8], now: Instant) -> Result<(), HandshakeDrop> {
        self.check_mac(msg, RESPONSE_LEN)?;
        let Some(mut init) = self.initiation.take() else {
            return Err(HandshakeDrop::Unexpected);
        };
        let mut payload = [0u8; 64];
        let n = match init.state.read_message(&msg[1..1 + MSG2_LEN], &mut payload) {
            Ok(n) => n,
            Err(_) => {
                // A failed read leaves the Noise state unusable: the retry timer starts over.
                return Err(HandshakeDrop::Failed);
            }
        };
        if n != 1 || !init.state.is_handshake_finished() {
            return Err(HandshakeDrop::Failed);
        }
        let phase = payload[0] % PHASES as u8;
        let (i2r, r2i) = init.state.dangerously_get_raw_split();
        let s = self.session(phase, i2r, r2i, now, true);
        self.previous = self.current.replace(s);
        self.rekey_requested = false;
        self.version += 1;
        self.stats.sessions += 1;
        Ok(())
    }

    /// Installs a confirmed session with the given keys without a handshake, as the one we send
    /// under: for fuzzing and benchmarks of the data path, which need a session but not the
    /// Diffie-Hellmans. Both ends must install the same keys swapped.
    #[doc(hidden)]
    pub fn install_session(&mut self, phase: u8, send: [u8; 32], recv: [u8; 32], now: Instant) {
        let s = self.session(phase % PHASES as u8, send, recv, now, true);
        self.previous = self.current.replace(s);
        self.version += 1;
    }

    /// Responder: the first authenticated datagram under session `id` arrived; if it is the
    /// pending one it becomes the one we send under.
    pub fn confirm(&mut self, id: u64) {
        if self.pending.as_ref().is_some_and(|p| p.id == id) {
            let mut p = self.pending.take().expect("checked above");
            p.confirmed = true;
            self.previous = self.current.replace(p);
            self.version += 1;
            self.stats.sessions += 1;
        }
    }

    fn session(
        &mut self,
        phase: u8,
        send: [u8; 32],
        recv: [u8; 32],
        now: Instant,
        confirmed: bool,
    ) -> SessionKeys {
        let (send, recv) = (Zeroizing::new(send), Zeroizing::new(recv));
        let id = self.next_id;
        self.next_id += 1;
        SessionKeys {
            id,
            phase,
            send,
            recv,
            started: now,
            confirmed,
        }
    }
}

/// Per-source and global token buckets. Sources hash (with a per-process random key, so an
/// attacker cannot aim at one bucket) into a fixed table: memory stays bounded whatever the
/// number of sources; two sources sharing a bucket share its rate.
struct Limiter {
    limits: RateLimits,
    hasher: RandomState,
    buckets: Vec<Bucket>,
    global: Bucket,
}

const BUCKETS: usize = 1024;

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let elapsed = self.last.map_or(f64::INFINITY, |t| {
            now.saturating_duration_since(t).as_secs_f64()
        });
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Limiter {
    fn new(limits: RateLimits) -> Limiter {
        let empty = Bucket {
            tokens: 0.0,
            last: None,
        };
        Limiter {
            limits,
            hasher: RandomState::new(),
            buckets: vec![empty; BUCKETS],
            global: empty,
        }
    }

    fn allow(&mut self, from: IpAddr, now: Instant) -> bool {
        let l = self.limits;
        let i = (self.hasher.hash_one(from) as usize) % BUCKETS;
        self.buckets[i].take(l.per_source, l.per_source_burst, now)
            && self.global.take(l.global, l.global_burst, now)
    }
}

/// The keys a worker needs, copied out of [`Sessions`] when their version changes.
pub struct KeySnapshot {
    /// [`Handshake::version`] they belong to.
    pub version: u64,
    /// (session id, phase, key) we send under.
    pub send: Option<(u64, u8, Secret)>,
    /// Per phase: (session id, confirmed, key) of what we receive.
    pub recv: [Option<(u64, bool, Secret)>; PHASES],
}

/// The handshake of an instance, shared by its workers: a lock around [`Handshake`], taken
/// for handshake datagrams, timers and key changes only, and an atomic version the workers'
/// data path compares with the keys it holds.
#[derive(Debug)]
pub struct Sessions {
    version: AtomicU64,
    last_rx_us: AtomicU64,
    base: Instant,
    hs: Mutex<Handshake>,
}

impl Sessions {
    /// Shares `hs`; `base`: the origin of the receive clock.
    pub fn new(hs: Handshake, base: Instant) -> Sessions {
        Sessions {
            version: AtomicU64::new(hs.version()),
            last_rx_us: AtomicU64::new(0),
            base,
            hs: Mutex::new(hs),
        }
    }

    /// The version of the keys (compare with [`KeySnapshot::version`]).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Runs `f` on the handshake under the lock, publishing any key change.
    pub fn with<R>(&self, f: impl FnOnce(&mut Handshake) -> R) -> R {
        let mut hs = self.hs.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut hs);
        self.version.store(hs.version(), Ordering::Release);
        r
    }

    /// The keys in use.
    pub fn snapshot(&self) -> KeySnapshot {
        self.with(|hs| {
            let send = hs
                .sending()
                .map(|s| (s.id, s.phase, Zeroizing::new(*s.send)));
            let mut recv: [Option<(u64, bool, Secret)>; PHASES] = Default::default();
            // Oldest first, so a newer session wins a phase (it cannot share one with a live
            // older session: phases are handed out in turn).
            for s in [&hs.previous, &hs.current, &hs.pending]
                .into_iter()
                .flatten()
            {
                recv[s.phase as usize % PHASES] =
                    Some((s.id, s.confirmed, Zeroizing::new(*s.recv)));
            }
            KeySnapshot {
                version: hs.version(),
                send,
                recv,
            }
        })
    }

    /// Notes that an authenticated datagram arrived.
    #[inline]
    pub fn note_rx(&self, now: Instant) {
        let us = now.saturating_duration_since(self.base).as_micros() as u64 + 1;
        self.last_rx_us.store(us, Ordering::Relaxed);
    }

    /// When an authenticated datagram last arrived.
    pub fn last_rx(&self) -> Option<Instant> {
        match self.last_rx_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(self.base + Duration::from_micros(us - 1)),
        }
    }

    /// Counters.
    pub fn stats(&self) -> HandshakeStats {
        self.with(|hs| hs.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cfg: HandshakeConfig) -> (Handshake, Handshake) {
        let c = Handshake::new(StaticKeys::well_known(b"t", false), true, cfg.clone());
        let s = Handshake::new(StaticKeys::well_known(b"t", true), false, cfg);
        (c, s)
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7));

    fn complete(c: &mut Handshake, s: &mut Handshake, now: Instant) -> (u64, u64) {
        let init = c.poll_initiation(now, None).expect("an initiation is due");
        assert_eq!(init.len(), INITIATION_LEN);
        let resp = s.handle(&init, IP, now).unwrap().expect("a response");
        assert_eq!(resp.len(), RESPONSE_LEN);
        c.handle(&resp, IP, now).unwrap();
        let cs = c.sending().unwrap();
        let sp = s.pending.as_ref().unwrap();
        assert_eq!(*cs.send, *sp.recv);
        assert_eq!(*cs.recv, *sp.send);
        assert_eq!(cs.phase, sp.phase);
        (cs.id, sp.id)
    }

    #[test]
    fn handshake_gives_fresh_keys_and_the_server_waits_for_confirmation() {
        let now = Instant::now();
        let (mut c, mut s) = pair(HandshakeConfig::default());
        let (_, sid) = complete(&mut c, &mut s, now);
        assert!(s.sending().is_none(), "not before confirmation");
        s.confirm(sid);
        let first = *s.sending().unwrap().send;
        // A restarted client (new state, same static keys): a new session, other keys.
        let (mut c2, _) = pair(HandshakeConfig::default());
        let (_, sid2) = complete(&mut c2, &mut s, now);
        assert_eq!(
            *s.sending().unwrap().send,
            first,
            "old session until confirmed"
        );
        s.confirm(sid2);
        assert_ne!(*s.sending().unwrap().send, first);
        assert_eq!(s.sending().unwrap().phase, 1);
        assert_eq!(s.receiving().count(), 2);
        assert_eq!(s.stats().sessions, 2);
    }

    #[test]
    fn replays_forgeries_and_strangers_are_dropped() {
        let now = Instant::now();
        let (mut c, mut s) = pair(HandshakeConfig::default());
        let init = c.poll_initiation(now, None).unwrap();
        s.handle(&init, IP, now).unwrap();
        assert_eq!(s.handle(&init, IP, now), Err(HandshakeDrop::Replay));
        let mut bad = init.clone();
        bad[40] ^= 1;
        assert_eq!(s.handle(&bad, IP, now), Err(HandshakeDrop::BadMac));
        assert_eq!(
            s.handle(&init[..50], IP, now),
            Err(HandshakeDrop::Malformed)
        );
        // Knows the server's public key (valid mac1) but not a key the server accepts.
        let stranger_keys = StaticKeys {
            peer_public: s.keys.public(),
            ..StaticKeys::well_known(b"other", false)
        };
        let mut stranger = Handshake::new(stranger_keys, true, HandshakeConfig::default());
        let i = stranger.poll_initiation(now, None).unwrap();
        assert_eq!(s.handle(&i, IP, now), Err(HandshakeDrop::Failed));
        // A response nobody asked for.
        assert_eq!(
            c.handle(&[TYPE_RESPONSE; RESPONSE_LEN], IP, now),
            Err(HandshakeDrop::BadMac)
        );
        assert_eq!(s.handle(&[0u8; 3], IP, now), Err(HandshakeDrop::Malformed));
    }

    #[test]
    fn initiations_are_rate_limited_per_source() {
        let now = Instant::now();
        let limits = RateLimits {
            per_source: 1.0,
            per_source_burst: 2.0,
            global: 100.0,
            global_burst: 100.0,
        };
        let cfg = HandshakeConfig {
            limits,
            retry: Duration::ZERO,
            ..Default::default()
        };
        let (mut c, mut s) = pair(cfg);
        let mut ok = 0;
        let mut limited = 0;
        for _ in 0..10 {
            let init = c.poll_initiation(now, None).unwrap();
            match s.handle(&init, IP, now) {
                Ok(_) => ok += 1,
                Err(HandshakeDrop::RateLimited) => limited += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((ok, limited), (2, 8));
        let other: IpAddr = "203.0.113.9".parse().unwrap();
        let init = c.poll_initiation(now, None).unwrap();
        assert!(
            s.handle(&init, other, now).is_ok(),
            "another source has its own bucket"
        );
        let later = now + Duration::from_secs(1);
        let init = c.poll_initiation(later, None).unwrap();
        assert!(s.handle(&init, IP, later).is_ok(), "refilled");
    }

    #[test]
    fn the_initiator_rekeys_on_time_request_and_silence() {
        let t0 = Instant::now();
        let cfg = HandshakeConfig {
            rekey_after: Duration::from_secs(10),
            dead_after: Duration::from_secs(2),
            ..Default::default()
        };
        let (mut c, mut s) = pair(cfg);
        complete(&mut c, &mut s, t0);
        let t1 = t0 + Duration::from_secs(1);
        assert!(c.poll_initiation(t1, Some(t1)).is_none(), "fresh and alive");
        c.request_rekey();
        let id = c.sending().unwrap().id;
        complete(&mut c, &mut s, t1);
        assert_ne!(c.sending().unwrap().id, id, "requested");
        let t2 = t1 + Duration::from_secs(3);
        assert!(c.poll_initiation(t2, Some(t1)).is_some(), "silent for 3 s");
        let (mut c, mut s) = pair(HandshakeConfig {
            rekey_after: Duration::from_secs(10),
            ..Default::default()
        });
        complete(&mut c, &mut s, t0);
        let t10 = t0 + Duration::from_secs(10);
        assert!(
            c.poll_initiation(t10, Some(t10)).is_some(),
            "after rekey_after"
        );
        // Unanswered: resent after `retry` only.
        assert!(c.poll_initiation(t10, Some(t10)).is_none());
        let t11 = t10 + Duration::from_millis(250);
        assert!(c.poll_initiation(t11, Some(t10)).is_some());
    }
}
