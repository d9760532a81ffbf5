//! The mode-neutral dataplane engine that SRv6 and UDP mode plug into.
//!
//! A running instance has N workers; worker `i` owns encoder stream `i`. What every mode needs
//! lives here, once:
//!
//! - [`CoderSlots`]: the encoders and decoders of an instance, one slot per worker (stream `s`
//!   lives in slot `s % N`, each behind its own mutex). A worker codes its own stream in its
//!   own slot (an uncontended lock); a repair, source or feedback of stream `s` that the kernel
//!   queued to another worker is handled in slot `s % N`: this is how the decoder, and the
//!   encoder's feedback path, steer by stream id.
//! - [`StreamCoder`]: one worker's view of the slots, with what the driver calls on it besides
//!   packets: timers ([`StreamCoder::poll_timeout`]), the load meter ([`StreamCoder::set_cpu_load`],
//!   see [`load`]), local drops, live controller changes and stats publication.
//! - [`Housekeeping`]: the per-round work of a worker loop that is not packets: the control
//!   socket's controller changes, the load meter's periods, stats publication.
//! - [`Operations`]: the control socket (`hirt status`) and Prometheus endpoint of an instance;
//!   [`Workers`]: its threads, stopped and joined as one.
//! - [`Transmit`]: what a mode's state machine hands its driver to send: bytes, where they go
//!   and the outer DSCP/ECN. The driver batches them ([`TransmitSink`]).
//! - [`Transport`] and [`Node`]: a mode is a transport, one state machine per worker that holds
//!   no locks; [`Node`] wraps it with the worker's [`StreamCoder`] and the instance's
//!   [`Shared`] state, and runs the per-packet flow once for both modes.
//!
//! # A packet's way through a worker
//!
//! 1. The mode's entry point (e.g. `Srv6Node::handle_packet`, `UdpPeer::handle_udp`) has its
//!    transport parse and authenticate the packet, touching no shared state, into a
//!    [`Classified`]: what the shared transport state must admit, the slot it [`Need`]s, and
//!    a transport-specific step. A packet with nothing to code (an unprotected End, a
//!    malformed one) ends here.
//! 2. [`Node::process`] locks the instance's transport state ([`Shared`], one lock held for
//!    one packet) only when there is something to admit ([`Transport::admit`]: the replay
//!    window test-and-set after authentication, so a replay raced to two workers is accepted
//!    once; peer-address learning), and works out the route under the same lock
//!    ([`Transport::route`]; without admission it locks only when the transport says the
//!    route needs the shared state).
//! 3. It locks the slot of the stream the packet names (slot `s % N`) and hands it to
//!    [`Transport::handle`] as `&mut`: the core call, then the repairs, recovered packets and
//!    feedback it produced, into the driver's [`TransmitSink`].
//!
//! Timers take the same way ([`Node::on_timeout`]): each of the worker's own slots in turn
//! ([`Transport::timeout`]), then the transport's own ([`Transport::own_timeout`], e.g.
//! keepalives). [`Node`] is generic over the transport: monomorphized, no dynamic dispatch
//! per packet.
//!
//! What a transport holds is what differs between modes: how a packet is classified and
//! authenticated, how a source is tagged (an SRv6 TLV or a UDP frame header), what a repair or
//! feedback packet looks like, where it goes ([`Transmit::dest`]: an SRv6 egress, a UDP peer
//! address or the TUN device). How packets are read and written in batches (TUN, AF_XDP, UDP
//! sockets) is in the modes' drivers, [`crate::srv6_run`] and [`crate::udp`].

pub(crate) mod held;
pub mod load;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hirt_core::{ControllerConfig, Decoder, Encoder, FecMode, StreamId, Verdict};
use hirt_fec::RepairInfo;

use crate::config::CoderSettings;
use crate::control::{self, Control, ControlServer};
use crate::metrics::{add, Metrics};
use crate::runtime::StopFlag;
use load::{LoadMeter, LOAD_PERIOD};

/// Transmit queue length of the TUN devices of both modes (the kernel default is 500): a long
/// queue absorbs bursts while a worker is busy.
pub const TUN_TXQLEN: u32 = 8192;

/// One datagram or packet to send: the bytes, where they go (`D`: the transport's destination,
/// e.g. an SRv6 egress device or a UDP peer address) and the outer header's DSCP << 2 | ECN.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a, D> {
    /// The packet.
    pub bytes: &'a [u8],
    /// Where it goes.
    pub dest: D,
    /// Outer traffic class (TOS): DSCP << 2 | ECN.
    pub tos: u8,
}

/// Where a state machine puts what it has to send; the driver's batch. Implemented for
/// closures, so tests can collect into a `Vec`.
pub trait TransmitSink<D> {
    /// Queues `t` (the bytes are copied into the batch or written at once).
    fn transmit(&mut self, t: Transmit<'_, D>);
}

impl<D, F: FnMut(Transmit<'_, D>)> TransmitSink<D> for F {
    #[inline]
    fn transmit(&mut self, t: Transmit<'_, D>) {
        self(t)
    }
}

/// Which coder slot a packet needs, once its transport has parsed and authenticated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The encoder slot of this stream (a source to code, feedback about the stream).
    Encoder(StreamId),
    /// The decoder slot of this stream (a source or repair of the stream).
    Decoder(StreamId),
}

/// A coder slot, locked by the engine for one call into a [`Transport`].
#[derive(Debug)]
pub enum Slot<'a, X> {
    /// An encoder.
    Encoder(&'a mut Encoder),
    /// A decoder and the transport's state beside it.
    Decoder(&'a mut DecoderSlot<X>),
}

/// What a transport learned from a packet in its first step ([`Node::process`] does the rest).
#[derive(Debug)]
pub struct Classified<A, S> {
    /// What the instance's shared transport state must accept first (a replay-window entry,
    /// a peer address), if anything.
    pub admit: Option<A>,
    /// The slot the packet is coded in (`None`: nothing beyond admission, e.g. a keepalive).
    pub need: Option<Need>,
    /// What the transport needs in its second step (offsets, stream, kind of packet).
    pub step: S,
}

/// The route of a worker is not known without the instance's shared transport state (see
/// [`Transport::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsState;

/// What differs between modes: how packets are parsed, authenticated, tagged and built, and
/// where they go. A transport is one worker's state machine: it holds no locks and takes the
/// state it works on as `&mut` from the engine ([`Node`]).
///
/// A packet is handled in steps: the mode's entry point parses and authenticates it (no shared
/// state) into a [`Classified`]; [`Node::process`] then has the shared transport state accept
/// it ([`Transport::admit`], under the instance's state lock), works out the route
/// ([`Transport::route`]), locks the slot the packet [`Need`]s and hands it to
/// [`Transport::handle`], which runs the core and drains repairs, recovered packets and
/// feedback into the driver's [`TransmitSink`].
pub trait Transport {
    /// The transport's state beside each decoder slot.
    type Extra;
    /// State all workers of an instance share, behind one lock held for one packet (replay
    /// windows of authenticated packets, learned peer addresses).
    type State;
    /// State the workers share without a lock (atomics: a sequence number space, an epoch).
    type Common;
    /// Where a [`Transmit`] goes.
    type Dest;
    /// Where this worker's repairs and feedback go at the moment (see [`Transport::route`]).
    type Route: Copy;
    /// What [`Transport::admit`] checks against the shared state.
    type Admit;
    /// What the first step hands the second.
    type Step;
    /// Why a packet was dropped.
    type Drop;

    /// Accepts an authenticated packet into the shared state (test-and-set of a replay window:
    /// a replay raced to two workers is accepted once) or refuses it (counted).
    fn admit(
        &mut self,
        state: &mut Self::State,
        admit: Self::Admit,
        now: Instant,
    ) -> Result<(), Self::Drop>;

    /// Where this worker sends now; with `state: None`, `Err(NeedsState)` when that depends on
    /// the shared state (the engine then asks again with it).
    fn route(&self, state: Option<&Self::State>, now: Instant) -> Result<Self::Route, NeedsState>;

    /// The second step of a packet, with its slot locked: the core call, then the repairs,
    /// recovered packets and feedback it produced, into `tx`.
    fn handle(
        &mut self,
        step: Self::Step,
        slot: Slot<'_, Self::Extra>,
        route: Self::Route,
        buf: &mut [u8],
        now: Instant,
        tx: &mut impl TransmitSink<Self::Dest>,
    ) -> Result<(), Self::Drop>;

    /// The timers of one of this worker's own slots (time-driven repairs, feedback).
    fn timeout(
        &mut self,
        slot: Slot<'_, Self::Extra>,
        route: Self::Route,
        now: Instant,
        tx: &mut impl TransmitSink<Self::Dest>,
    );

    /// A packet needs a slot the instance does not have (it does not encode or decode):
    /// counted, and the reason.
    fn no_slot(&mut self) -> Self::Drop;

    /// The transport's own timers (keepalives), besides the slots'.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Runs the transport's own timers; called after the slots' on every timeout.
    fn own_timeout(
        &mut self,
        _route: Self::Route,
        _now: Instant,
        _tx: &mut impl TransmitSink<Self::Dest>,
    ) {
    }
}

/// What the workers of an instance share: the coder slots and the transport's state, each
/// behind the engine's locks, and what the transport shares without a lock.
pub struct Shared<T: Transport> {
    slots: Arc<CoderSlots<T::Extra>>,
    state: Mutex<T::State>,
    /// Lock-free state of the transport's workers, handed to each worker's transport.
    pub common: Arc<T::Common>,
}

impl<T: Transport> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Shared<T> {
    /// The shared state of an instance with these slots.
    pub fn with_slots(
        slots: Arc<CoderSlots<T::Extra>>,
        state: T::State,
        common: T::Common,
    ) -> Arc<Self> {
        Arc::new(Shared {
            slots,
            state: Mutex::new(state),
            common: Arc::new(common),
        })
    }

    /// The coder slots.
    pub fn slots(&self) -> &Arc<CoderSlots<T::Extra>> {
        &self.slots
    }

    /// The transport's shared state, locked (for inspection; packets go through [`Node`]).
    pub fn state(&self) -> MutexGuard<'_, T::State> {
        lock(&self.state)
    }
}

/// One worker: its transport (state machine) and the engine's side of it. All locking of the
/// per-packet path is here.
pub struct Node<T: Transport> {
    machine: T,
    coder: StreamCoder<T::Extra>,
    shared: Arc<Shared<T>>,
}

impl<T: Transport + std::fmt::Debug> std::fmt::Debug for Node<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("machine", &self.machine)
            .field("stream", &self.coder.stream)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Node<T> {
    /// Worker `stream` of the instance whose shared state is `shared`.
    pub fn with_machine(
        machine: T,
        shared: Arc<Shared<T>>,
        stream: StreamId,
        metrics: Arc<Metrics>,
    ) -> Self {
        Node {
            machine,
            coder: StreamCoder::new(shared.slots.clone(), stream, metrics),
            shared,
        }
    }

    /// The transport.
    #[inline]
    pub fn machine(&self) -> &T {
        &self.machine
    }

    /// The transport, for a mode's first step.
    #[inline]
    pub fn machine_mut(&mut self) -> &mut T {
        &mut self.machine
    }

    /// The engine's side of this worker: timers, load, controller, stats.
    #[inline]
    pub fn coder(&self) -> &StreamCoder<T::Extra> {
        &self.coder
    }

    /// Where this worker sends now (the shared state locked only if the transport needs it).
    pub fn route(&self, now: Instant) -> T::Route {
        match self.machine.route(None, now) {
            Ok(r) => r,
            Err(NeedsState) => {
                let st = lock(&self.shared.state);
                self.machine
                    .route(Some(&st), now)
                    .expect("a transport routes with its shared state")
            }
        }
    }

    /// The rest of a packet after the transport's first step (`None`: it was done with it):
    /// admission under the state lock (with the route worked out under the same lock), then
    /// its slot.
    #[inline]
    pub fn process(
        &mut self,
        c: Option<Classified<T::Admit, T::Step>>,
        buf: &mut [u8],
        now: Instant,
        tx: &mut impl TransmitSink<T::Dest>,
    ) -> Result<(), T::Drop> {
        let Some(c) = c else {
            return Ok(());
        };
        let route = match c.admit {
            Some(a) => {
                let mut st = lock(&self.shared.state);
                self.machine.admit(&mut st, a, now)?;
                self.machine
                    .route(Some(&st), now)
                    .expect("a transport routes with its shared state")
            }
            None => self.route(now),
        };
        let slots = &self.shared.slots;
        match c.need {
            None => Ok(()),
            Some(Need::Encoder(s)) => match slots.enc(s) {
                Some(mut e) => {
                    self.machine
                        .handle(c.step, Slot::Encoder(&mut e), route, buf, now, tx)
                }
                None => Err(self.machine.no_slot()),
            },
            Some(Need::Decoder(s)) => match slots.dec(s) {
                Some(mut d) => {
                    self.machine
                        .handle(c.step, Slot::Decoder(&mut d), route, buf, now, tx)
                }
                None => Err(self.machine.no_slot()),
            },
        }
    }

    /// When [`Self::on_timeout`] should run next (this worker's slots and the transport).
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.coder.poll_timeout(), self.machine.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Time-driven work of this worker's slots (each locked in turn), then the transport's.
    pub fn on_timeout(&mut self, now: Instant, tx: &mut impl TransmitSink<T::Dest>) {
        let route = self.route(now);
        let (slots, s) = (&self.shared.slots, self.coder.stream);
        // The queue the peer's packets meet on their way here is in every RTT sample of this
        // side's encoder (its feedback comes back the same way): the decoder beside it
        // measures that queue, and the encoder's queue management leaves it out.
        let back = slots.dec(s).and_then(|d| d.dec.arrival_queue(s, now));
        if let Some(mut e) = slots.enc(s) {
            e.set_return_queue(s, back);
            self.machine.timeout(Slot::Encoder(&mut e), route, now, tx);
        }
        if let Some(mut d) = slots.dec(s) {
            self.machine.timeout(Slot::Decoder(&mut d), route, now, tx);
        }
        self.machine.own_timeout(route, now, tx);
    }
}

/// Hands a repair of `stream` to the decoder and counts it (received, and used when it
/// recovered something). A refused repair (wrong scheme, out of range) is counted by the core.
pub fn decode_repair(
    dec: &mut Decoder,
    m: &Metrics,
    stream: StreamId,
    info: &RepairInfo,
    timestamp: u32,
    payload: &[u8],
    now: Instant,
) {
    let c = m.stream(stream);
    add(&c.repairs_received, 1);
    let recovered = |d: &Decoder| d.stats(stream).map_or(0, |s| s.recovered);
    let before = recovered(dec);
    let _ = dec.handle_repair(stream, info, timestamp, payload, now);
    if recovered(dec) > before {
        add(&c.repairs_used, 1);
    }
}

/// Counts the decoder's verdict on a source of `stream`; true when it is to be delivered now.
pub fn count_verdict(m: &Metrics, stream: StreamId, v: Verdict) -> Result<bool, Duplicate> {
    let c = m.stream(stream);
    match v {
        Verdict::Deliver => Ok(true),
        Verdict::Hold => {
            add(&c.held, 1);
            Ok(false)
        }
        Verdict::Duplicate => {
            add(&c.duplicates, 1);
            Err(Duplicate)
        }
    }
}

/// The decoder had this source already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duplicate;

/// Locks, ignoring poisoning (a panicking worker must not stop the others).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A decoder and the per-slot state a transport keeps beside it (`X`; e.g. the last hop limit
/// per stream in SRv6 mode).
#[derive(Debug)]
pub struct DecoderSlot<X> {
    /// The decoder.
    pub dec: Decoder,
    /// The transport's state of this slot.
    pub extra: X,
}

impl<X> std::ops::Deref for DecoderSlot<X> {
    type Target = Decoder;

    fn deref(&self) -> &Decoder {
        &self.dec
    }
}

impl<X> std::ops::DerefMut for DecoderSlot<X> {
    fn deref_mut(&mut self) -> &mut Decoder {
        &mut self.dec
    }
}

/// The encoders and decoders of an instance, one slot per worker (see the module docs).
pub struct CoderSlots<X = ()> {
    encs: Vec<Mutex<Encoder>>,
    decs: Vec<Mutex<DecoderSlot<X>>>,
}

impl<X> std::fmt::Debug for CoderSlots<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoderSlots")
            .field("encoders", &self.encs.len())
            .field("decoders", &self.decs.len())
            .finish()
    }
}

/// What [`CoderSlots::new`] builds.
#[derive(Debug, Clone)]
pub struct SlotsConfig<'a> {
    /// FEC mode of the encoders (the decoders take its scheme).
    pub fec: &'a FecMode,
    /// Timers, overload control, in-order release.
    pub coder: &'a CoderSettings,
    /// Number of slots (workers).
    pub slots: usize,
    /// Whether the instance encodes / decodes.
    pub encode: bool,
    /// See `encode`.
    pub decode: bool,
    /// Seed of encoder slot 0 (slot `i` gets `+ i`).
    pub enc_seed: u64,
    /// Seed of decoder slot 0 (slot `i` gets `+ i`).
    pub dec_seed: u64,
}

impl<X> CoderSlots<X> {
    /// The slots of `cfg`, each decoder slot with `extra()` beside it.
    pub fn new(cfg: &SlotsConfig<'_>, extra: impl Fn() -> X) -> Arc<CoderSlots<X>> {
        let n = cfg.slots.max(1);
        let encs = match cfg.encode {
            true => (0..n)
                .map(|i| {
                    let c = cfg.coder.encoder(cfg.fec.clone());
                    Mutex::new(Encoder::new(c, cfg.enc_seed.wrapping_add(i as u64)))
                })
                .collect(),
            false => Vec::new(),
        };
        let decs = match cfg.decode {
            true => (0..n)
                .map(|i| {
                    let c = cfg.coder.decoder(cfg.fec.scheme.clone());
                    Mutex::new(DecoderSlot {
                        dec: Decoder::new(c, cfg.dec_seed.wrapping_add(i as u64)),
                        extra: extra(),
                    })
                })
                .collect(),
            false => Vec::new(),
        };
        Arc::new(CoderSlots { encs, decs })
    }

    /// The encoder slot of `stream` (locked), if the instance encodes.
    #[inline]
    pub fn enc(&self, stream: StreamId) -> Option<MutexGuard<'_, Encoder>> {
        let n = self.encs.len();
        (n > 0).then(|| lock(&self.encs[stream as usize % n]))
    }

    /// The decoder slot of `stream` (locked), if the instance decodes.
    #[inline]
    pub fn dec(&self, stream: StreamId) -> Option<MutexGuard<'_, DecoderSlot<X>>> {
        let n = self.decs.len();
        (n > 0).then(|| lock(&self.decs[stream as usize % n]))
    }

    /// Whether the instance encodes.
    pub fn encodes(&self) -> bool {
        !self.encs.is_empty()
    }
}

/// One worker's view of the [`CoderSlots`]: its own stream, and the instance's metrics.
pub struct StreamCoder<X = ()> {
    slots: Arc<CoderSlots<X>>,
    stream: StreamId,
    metrics: Arc<Metrics>,
}

impl<X> std::fmt::Debug for StreamCoder<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamCoder")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl<X> StreamCoder<X> {
    /// Worker `stream` of the instance whose slots are `slots`.
    pub fn new(slots: Arc<CoderSlots<X>>, stream: StreamId, metrics: Arc<Metrics>) -> Self {
        StreamCoder {
            slots,
            stream,
            metrics,
        }
    }

    /// The instance's slots.
    #[inline]
    pub fn slots(&self) -> &Arc<CoderSlots<X>> {
        &self.slots
    }

    /// The stream this worker encodes.
    #[inline]
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The instance's counters.
    #[inline]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Switches this worker's encoder to controller `c` (live change from the control socket).
    pub fn set_controller(&self, c: &ControllerConfig) {
        if let Some(mut e) = self.slots.enc(self.stream) {
            e.set_controller(c);
        }
    }

    /// Tells the core how busy this worker is: `load` is the worker's load over the last
    /// measurement period (~10 ms), 0.0..=1.0, as [`load::LoadMeter`] measures it. Applied to
    /// the encoder and decoder slot this worker owns; above the overload threshold they skip
    /// repair generation / repair solving with probability `(load - threshold) / (1 -
    /// threshold)` (HIRT §V), so FEC stops adding work when the worker is already saturated.
    /// Also published as the stream's `worker_load_ppm`.
    pub fn set_cpu_load(&self, load: f64) {
        let load = if load.is_finite() {
            load.clamp(0.0, 1.0)
        } else {
            1.0
        };
        if let Some(mut e) = self.slots.enc(self.stream) {
            e.set_cpu_load(load);
        }
        if let Some(mut d) = self.slots.dec(self.stream) {
            d.dec.set_cpu_load(load);
        }
        self.metrics
            .stream(self.stream)
            .worker_load_ppm
            .store((load * 1e6) as u64, Ordering::Relaxed);
    }

    /// Reports `n` packets this host dropped before the decoder read them: passed on in
    /// feedback (`local_drops`) so the encoder does not answer them with more repairs. The
    /// transport only reports drops of what was bound for the decoder.
    pub fn add_local_drops(&self, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(mut d) = self.slots.dec(self.stream) {
            d.dec.add_local_drops(n.min(u64::from(u32::MAX)) as u32);
            add(&self.metrics.stream(self.stream).local_drops, n);
        }
    }

    /// When the timers of this worker's slots are due next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let a = self.slots.enc(self.stream).and_then(|e| e.poll_timeout());
        let b = self
            .slots
            .dec(self.stream)
            .and_then(|d| d.dec.poll_timeout());
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Copies the core's view of this worker's slots (losses, residual, controller rate,
    /// overload skips) into the metrics. Called periodically, not per packet.
    pub fn publish_stats(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(e) = self.slots.enc(self.stream) {
            for s in e.streams() {
                if let Some(st) = e.stats(s) {
                    let c = self.metrics.stream(s);
                    c.controller_ratio_ppm
                        .store((st.rate * 1e6) as u64, Relaxed);
                    c.overload_skips.store(st.overload_skips, Relaxed);
                    c.repairs_timer.store(st.repairs_timer, Relaxed);
                    c.repairs_report.store(st.repairs_report, Relaxed);
                    c.congestion_signals
                        .store(st.queue_signals + st.ce_signals, Relaxed);
                    c.queue_skips.store(st.queue_skips, Relaxed);
                    c.aqm_drops.store(st.aqm_drops, Relaxed);
                    c.aqm_marks.store(st.aqm_marks, Relaxed);
                    let wanted = u64::from(st.deadline_window_wanted);
                    let max = u64::from(st.window_max);
                    let before = c.deadline_window_wanted.swap(wanted, Relaxed);
                    if wanted > max && before <= max {
                        tracing::warn!(
                            stream = s,
                            wanted,
                            window = max,
                            "the deadline needs a window of {wanted} sources at this stream's rate, \
                             the code keeps {max}: losses leave the window before their loss \
                             reports are answered (raise --window, shorten --deadline, or spread \
                             the traffic over more streams)"
                        );
                    }
                }
            }
        }
        let no_enc = !self.slots.encodes();
        // The encoder of the opposite direction measures the path's RTT; the decoder's late
        // count resolves an RTT-relative deadline with it.
        let rtts: Vec<(StreamId, Duration)> = match self.slots.enc(self.stream) {
            Some(e) => e
                .streams()
                .filter_map(|s| Some((s, e.stats(s)?.rtt?)))
                .collect(),
            None => Vec::new(),
        };
        if let Some(mut d) = self.slots.dec(self.stream) {
            for &(s, rtt) in &rtts {
                d.dec.set_rtt(s, rtt);
            }
            self.metrics
                .stream(self.stream)
                .dec_output_bytes
                .store(d.dec.output_bytes() as u64, Relaxed);
            for s in d.dec.streams() {
                if let Some(b) = d.dec.buffer_bytes(s) {
                    let c = self.metrics.stream(s);
                    c.dec_columns_bytes.store(b.columns as u64, Relaxed);
                    c.dec_rows_bytes.store(b.rows as u64, Relaxed);
                    c.dec_held_bytes.store(b.held as u64, Relaxed);
                }
                if let Some(st) = d.dec.stats(s) {
                    let c = self.metrics.stream(s);
                    c.losses.store(st.lost, Relaxed);
                    c.unrecoverable.store(st.residual, Relaxed);
                    c.order_skipped.store(st.order_skipped, Relaxed);
                    c.order_passed.store(st.order_passed, Relaxed);
                    c.decoder_restarts.store(st.restarts, Relaxed);
                    c.repairs_behind.store(st.repairs_behind, Relaxed);
                    c.repair_lag_grown.store(st.repair_lag, Relaxed);
                    c.loss_reports.store(st.loss_reports, Relaxed);
                    c.ce_marks.store(st.ce_marks, Relaxed);
                    c.recovered_late.store(st.recovered_late, Relaxed);
                    let us = |q: f64| {
                        st.recovery_delays
                            .quantile(q)
                            .map_or(0, |d| d.as_micros() as u64)
                    };
                    c.recovery_delay_p50_us.store(us(0.5), Relaxed);
                    c.recovery_delay_p99_us.store(us(0.99), Relaxed);
                    c.recovery_delay_max_us
                        .store(st.recovery_delays.max.as_micros() as u64, Relaxed);
                    if no_enc {
                        c.overload_skips.store(st.overload_skips, Relaxed);
                    }
                }
            }
        }
    }
}

/// What a worker loop does between packets: apply controller changes from the control socket,
/// close load-meter periods, publish stats. One per worker thread.
#[derive(Debug)]
pub struct Housekeeping {
    ctl: Arc<Control>,
    generation: u64,
    meter: LoadMeter,
    last_publish: Instant,
    last_release: Instant,
}

/// How often a worker copies the core's counters into the metrics.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// How often a worker hands the allocator's free pages back to the kernel, so the resident
/// set follows what is held rather than the largest backlog ever buffered.
const RELEASE_MEMORY_EVERY: Duration = Duration::from_secs(10);

impl Housekeeping {
    /// Housekeeping of a worker starting at `now` on the calling thread (its CPU time is
    /// what the load meter reads).
    pub fn new(ctl: Arc<Control>, now: Instant) -> Housekeeping {
        Housekeeping {
            generation: ctl.generation(),
            ctl,
            meter: LoadMeter::new(now, load::thread_cpu_time(), LOAD_PERIOD),
            last_publish: now,
            last_release: now,
        }
    }

    /// Once per round, after the packets: `local_drops` (called once per load period) says
    /// whether the worker's queues dropped packets (the period counts as saturated) and how
    /// many of those were bound for the decoder. Returns true when stats were published.
    pub fn tick<X>(
        &mut self,
        now: Instant,
        coder: &StreamCoder<X>,
        local_drops: impl FnOnce() -> QueueDrops,
    ) -> bool {
        let g = self.ctl.generation();
        if g != self.generation {
            self.generation = g;
            if let Ok(c) = self.ctl.controller().parse::<ControllerConfig>() {
                coder.set_controller(&c);
            }
        }
        if self.meter.due(now) {
            let d = local_drops();
            if d.queue_dropped {
                self.meter.queue_dropped();
            }
            coder.add_local_drops(d.for_decoder);
            coder.set_cpu_load(self.meter.close(now, load::thread_cpu_time()));
        }
        if now.duration_since(self.last_release) > RELEASE_MEMORY_EVERY {
            hirt_os::heap::release_free_memory();
            self.last_release = now;
        }
        if now.duration_since(self.last_publish) > PUBLISH_EVERY {
            let global = &coder.metrics().global;
            if let (Some(live), Some(peak)) =
                (hirt_os::heap::live_bytes(), hirt_os::heap::peak_bytes())
            {
                global.heap_live_bytes.store(live, Ordering::Relaxed);
                global.heap_peak_bytes.store(peak, Ordering::Relaxed);
            }
            coder.publish_stats();
            self.last_publish = now;
            return true;
        }
        false
    }
}

/// Drops at a worker's queues during one load period.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueDrops {
    /// The worker's queues dropped packets: it cannot keep up.
    pub queue_dropped: bool,
    /// Of those, packets bound for the decoder (reported in feedback).
    pub for_decoder: u64,
}

/// The control socket and Prometheus endpoint of an instance.
#[derive(Debug)]
pub struct Operations {
    /// Shared with the workers (controller changes).
    pub ctl: Arc<Control>,
    _server: Option<ControlServer>,
}

impl Operations {
    /// Serves `hirt status` on `path` and, when asked, Prometheus on `metrics_addr`.
    pub fn start(
        metrics: &Arc<Metrics>,
        fec: &FecMode,
        path: &std::path::Path,
        metrics_addr: Option<std::net::SocketAddr>,
    ) -> std::io::Result<Operations> {
        let ctl = Control::new(metrics.clone(), &fec.controller.to_string());
        let server = control::start_operations(path, &ctl, metrics_addr, metrics)?;
        Ok(Operations {
            ctl,
            _server: server,
        })
    }
}

/// The worker threads of an instance and their stop flag.
#[derive(Debug, Default)]
pub struct Workers {
    stop: Arc<StopFlag>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// Starts worker `name-{index}` running `body(stop)`.
    pub fn spawn(
        &mut self,
        name: String,
        body: impl FnOnce(Arc<StopFlag>) + Send + 'static,
    ) -> std::io::Result<()> {
        let stop = self.stop.clone();
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(stop))?;
        self.threads.push(t);
        Ok(())
    }

    /// Whether a stop was asked for (by [`Self::stop`] or a signal).
    pub fn stopped(&self) -> bool {
        self.stop.stopped()
    }

    /// Stops the workers and waits for them.
    pub fn stop(&mut self) {
        self.stop.stop();
        for w in self.threads.drain(..) {
            let _ = w.join();
        }
    }

    /// Waits until a signal (or [`Self::stop`]) asks the workers to stop.
    pub fn wait_for_stop(&self) {
        while !self.stop.stopped() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(n: usize, encode: bool) -> Arc<CoderSlots<u32>> {
        let fec: FecMode = "fixed:w=16,step=4".parse().unwrap();
        CoderSlots::new(
            &SlotsConfig {
                fec: &fec,
                coder: &CoderSettings::default(),
                slots: n,
                encode,
                decode: true,
                enc_seed: 1,
                dec_seed: 2,
            },
            || 7,
        )
    }

    #[test]
    fn streams_share_slots_modulo_the_worker_count() {
        let s = slots(2, true);
        let now = Instant::now();
        // Stream 3 is coded in slot 1: worker 1 sees its sources.
        s.enc(3).unwrap().handle_source(3, &[1u8; 100], now);
        assert!(s.enc(1).unwrap().streams().any(|x| x == 3));
        assert!(!s.enc(0).unwrap().streams().any(|x| x == 3));
        assert_eq!(s.dec(5).unwrap().extra, 7);
        assert!(s.encodes());
        let d = slots(1, false);
        assert!(d.enc(0).is_none() && !d.encodes());
    }

    #[test]
    fn a_worker_publishes_its_load_drops_and_stats() {
        let m = Metrics::new(2, "test");
        let c = StreamCoder::new(slots(2, true), 1, m.clone());
        c.set_cpu_load(0.25);
        assert_eq!(m.stream(1).worker_load_ppm.load(Ordering::Relaxed), 250_000);
        c.set_cpu_load(f64::NAN);
        assert_eq!(
            m.stream(1).worker_load_ppm.load(Ordering::Relaxed),
            1_000_000
        );
        c.add_local_drops(3);
        c.add_local_drops(0);
        assert_eq!(m.stream(1).local_drops.load(Ordering::Relaxed), 3);
        // A source leaves its protection due to the repair timer.
        let now = Instant::now();
        c.slots().enc(1).unwrap().handle_source(1, &[0u8; 64], now);
        assert!(c.poll_timeout().is_some_and(|t| t > now));
        c.set_controller(&"fixed:step=2".parse().unwrap());
        c.publish_stats();
        assert_eq!(
            m.stream(1).controller_ratio_ppm.load(Ordering::Relaxed),
            500_000
        );
    }

    /// A transport that records what the engine hands it: admission is "not seen before",
    /// the route is the number of admitted packets (known only with the shared state).
    #[derive(Debug, Default)]
    struct Probe {
        handled: Vec<(u8, bool, usize)>,
        timeouts: usize,
    }

    impl Transport for Probe {
        type Extra = u32;
        type State = Vec<u64>;
        type Common = ();
        type Dest = ();
        type Route = usize;
        type Admit = u64;
        type Step = u8;
        type Drop = &'static str;

        fn admit(&mut self, seen: &mut Vec<u64>, a: u64, _: Instant) -> Result<(), &'static str> {
            if seen.contains(&a) {
                return Err("replay");
            }
            seen.push(a);
            Ok(())
        }

        fn route(&self, seen: Option<&Vec<u64>>, _: Instant) -> Result<usize, NeedsState> {
            seen.map(Vec::len).ok_or(NeedsState)
        }

        fn handle(
            &mut self,
            step: u8,
            slot: Slot<'_, u32>,
            route: usize,
            _: &mut [u8],
            _: Instant,
            tx: &mut impl TransmitSink<()>,
        ) -> Result<(), &'static str> {
            let encoder = matches!(slot, Slot::Encoder(_));
            if let Slot::Decoder(d) = slot {
                assert_eq!(d.extra, 7);
            }
            self.handled.push((step, encoder, route));
            tx.transmit(Transmit {
                bytes: &[step],
                dest: (),
                tos: 0,
            });
            Ok(())
        }

        fn timeout(
            &mut self,
            _: Slot<'_, u32>,
            _: usize,
            _: Instant,
            _: &mut impl TransmitSink<()>,
        ) {
            self.timeouts += 1;
        }

        fn no_slot(&mut self) -> &'static str {
            "no slot"
        }
    }

    #[test]
    fn a_node_admits_locks_the_slot_a_packet_needs_and_routes() {
        let shared = Shared::<Probe>::with_slots(slots(2, false), Vec::new(), ());
        let mut node =
            Node::with_machine(Probe::default(), shared.clone(), 1, Metrics::new(2, "t"));
        let now = Instant::now();
        let mut sent = Vec::new();
        let mut tx = |t: Transmit<'_, ()>| sent.push(t.bytes[0]);
        let packet = |admit, need, step| Some(Classified { admit, need, step });
        let mut buf = [0u8; 4];
        assert_eq!(
            node.process(
                packet(Some(9), Some(Need::Decoder(3)), 1),
                &mut buf,
                now,
                &mut tx
            ),
            Ok(())
        );
        // A replay is refused before any slot is locked.
        assert_eq!(
            node.process(
                packet(Some(9), Some(Need::Decoder(3)), 2),
                &mut buf,
                now,
                &mut tx
            ),
            Err("replay")
        );
        // Decode-only: no encoder slot.
        assert_eq!(
            node.process(
                packet(None, Some(Need::Encoder(1)), 3),
                &mut buf,
                now,
                &mut tx
            ),
            Err("no slot")
        );
        // Admitted, nothing to code; then a packet without admission, routed with the state.
        assert_eq!(
            node.process(packet(Some(10), None, 4), &mut buf, now, &mut tx),
            Ok(())
        );
        assert_eq!(
            node.process(
                packet(None, Some(Need::Decoder(0)), 5),
                &mut buf,
                now,
                &mut tx
            ),
            Ok(())
        );
        assert_eq!(node.process(None, &mut buf, now, &mut tx), Ok(()));
        node.on_timeout(now, &mut tx);
        assert_eq!(sent, [1, 5]);
        assert_eq!(node.machine().handled, [(1, false, 1), (5, false, 2)]);
        assert_eq!(node.machine().timeouts, 1, "a decoder slot, no encoder");
        assert_eq!(*shared.state(), [9, 10]);
        assert_eq!(node.route(now), 2);
    }

    #[test]
    fn workers_stop_and_join() {
        let mut w = Workers::default();
        let ran = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for i in 0..3 {
            let ran = ran.clone();
            w.spawn(format!("test-{i}"), move |stop| {
                while !stop.stopped() {
                    std::thread::yield_now();
                }
                ran.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        assert!(!w.stopped());
        w.stop();
        assert!(w.stopped());
        assert_eq!(ran.load(Ordering::Relaxed), 3);
    }
}
