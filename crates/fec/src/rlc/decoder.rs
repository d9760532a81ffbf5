//! The sliding-window decoder: incremental Gauss-Jordan elimination over the unknown source
//! symbols of a bounded ESI span.
//!
//! # State
//! - *Columns*: one per ESI of the tracked span `[head - S, head)` (S = a power of two >= 2W), in
//!   a ring indexed by `esi & (S - 1)`. A column is *known* (received or recovered: its protected
//!   bytes are stored) or *unknown*.
//! - *Rows*: the stored equations, each a payload plus a coefficient vector over unknown columns,
//!   stored from the row's first column up to its last non-zero one (not over the whole span: a
//!   row covers about a repair's window, and the span may be many windows long). They are kept in **reduced row-echelon form** with leading pivots:
//!   every row's pivot is its lowest non-zero column, its coefficient there is 1, and no other row
//!   has a non-zero in a pivot column. Hence at most S rows are pivoted inside the span.
//!
//! # Why rank-optimal
//! For a matrix in reduced row-echelon form, a unit vector `e_x` lies in the row space iff some
//! row *equals* `e_x`. So an unknown symbol is determined by everything received iff its pivot
//! row has no other non-zero; the decoder checks exactly the rows it touched after each arrival
//! and delivers such symbols immediately. Recovering a pivot column touches no other row (no other
//! row has it), so there is no cascade to chase.
//!
//! # Cost per arrival
//! - Source: one row operation per stored row that involves it (plus, if it was a pivot, one
//!   re-pivot: one row operation per row involving the new pivot).
//! - Repair: one multiply-add per known source in its window, one row operation per pivot it
//!   involves, one per row involving its new pivot. A repair whose window holds no unknown is
//!   dropped before any of this.
//!
//! # Forgetting
//! Columns leave from the low end as `head` advances. If the leaving column is a row's pivot,
//! the row is *detached*: its pivot coefficient (1) becomes implicit, it keeps taking part in
//! elimination, and once its in-span unknowns are solved it yields the departed symbol (late).
//! Otherwise only detached rows can involve the column (pivots are leading); they can never be
//! solved and are dropped, which loses no decodable symbol (see `docs/fec.md`). Detached rows
//! whose pivot falls more than S behind the span are dropped for the memory bound: at most S
//! in-span and S detached rows exist.

use super::RlcConfig;
use crate::coefficients::generate_coding_coefficients;
use crate::symbol::{decode_len, encode_into, LEN_FIELD, MAX_PROTECTED_LEN};
use crate::{DecodeError, Esi, FecDecoder, RepairInfo, SourceOutcome, MAX_SYMBOL_LEN};

const NONE: u32 = u32::MAX;

/// Counters, for tests, the simulator's cost report and debugging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Source symbols recovered and delivered.
    pub recovered: u64,
    /// Repairs dropped without work because their window held no unknown symbol.
    pub repairs_skipped: u64,
    /// Repairs that reduced to nothing (linearly dependent on what was already held).
    pub repairs_redundant: u64,
    /// Equations dropped because they involve a symbol that left the tracked span and can never
    /// be solved (no loss of decodability, see the module docs).
    pub rows_evicted: u64,
    /// Detached equations dropped for age (pivot more than 2S behind the newest ESI): the only
    /// place where the memory bound may cost a symbol the equations would eventually determine.
    pub rows_aged_out: u64,
    /// Solved equations whose protected length was inconsistent (corrupted input): dropped.
    pub bad_recoveries: u64,
    /// Of `recovered`, symbols solved after they had left the tracked span (through a detached
    /// equation, see the module docs): delivered late.
    pub recovered_late: u64,
    /// Repairs refused because the pending equations hold `COEF_BUDGET` bytes of coefficients.
    pub repairs_refused: u64,
}

#[derive(Debug, Default)]
struct Column {
    known: bool,
    /// Row pivoted on this column, or NONE.
    pivot: u32,
    /// Protected form `[len][data]` while known; capacity kept when it leaves, and never
    /// handed a smaller buffer (see the recovery in `solve_touched`).
    data: Vec<u8>,
}

#[derive(Debug)]
struct Row {
    payload: Vec<u8>,
    /// Coefficients of columns `start, start + 1, ...`; zero outside `[lo, hi]` and past the
    /// end (whose length is at least `hi - start + 1`).
    coef: Vec<u8>,
    /// Column of `coef[0]`: at or before the pivot, which only moves up.
    start: Esi,
    /// Pivot (lowest non-zero column) once installed.
    lo: Esi,
    /// Upper bound of the non-zero columns (inclusive).
    hi: Esi,
    /// The pivot column has left the span (its coefficient, 1, is implicit).
    detached: bool,
}

impl Row {
    /// Coefficient of column `e`.
    #[inline]
    fn at(&self, e: Esi) -> u8 {
        self.coef
            .get(e.wrapping_sub(self.start) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Sets the coefficient of a column the row covers (see [`Row::extend_to`]); a zero may be
    /// set anywhere.
    #[inline]
    fn set(&mut self, e: Esi, c: u8) {
        match self.coef.get_mut(e.wrapping_sub(self.start) as usize) {
            Some(x) => *x = c,
            None => debug_assert_eq!(c, 0),
        }
    }

    /// Makes the coefficients cover column `e` (at or after `start`); the bytes added.
    #[inline]
    fn extend_to(&mut self, e: Esi) -> usize {
        let n = e.wrapping_sub(self.start) as usize + 1;
        debug_assert!(n <= 1 << 20, "a column before the row's start");
        let added = n.saturating_sub(self.coef.len());
        if added > 0 {
            self.coef.resize(n, 0);
        }
        added
    }
}

/// Most coefficient bytes the pending equations may hold before further repairs are refused
/// (`DecoderStats::repairs_refused`). A row covers its repair's window and grows only as far as
/// the rows it is reduced by reach, so the steady state holds a few windows per pending
/// equation; the bound is for pile-ups (long outages, floods of repairs over a long span).
const COEF_BUDGET: usize = 256 << 20;

/// Free rows that keep their buffers for reuse; more free rows give them back.
const KEPT_FREE_ROWS: usize = 64;

/// Buffer memory of an [`RlcDecoder`] ([`RlcDecoder::buffer_bytes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferBytes {
    /// Source symbol columns.
    pub columns: usize,
    /// Equation rows.
    pub rows: usize,
}

/// RFC 8681 sliding-window decoder (see the module docs for the algorithm).
#[derive(Debug)]
pub struct RlcDecoder {
    cfg: RlcConfig,
    /// Tracked span S (power of two) and S - 1.
    span: u32,
    mask: u32,
    started: bool,
    /// One past the highest tracked ESI.
    head: Esi,
    cols: Vec<Column>,
    rows: Vec<Row>,
    free_rows: Vec<u32>,
    active: Vec<u32>,
    /// Number of detached rows among `active`.
    detached: usize,
    /// Coefficient bytes of the active rows.
    coef_bytes: usize,
    /// After [`Self::grow_repair_lag`], the old span's base until the span's base passes it:
    /// the sources before it were forgotten, so repairs over them stay refused.
    floor: Option<Esi>,
    coefs: Vec<u8>,
    /// Largest NSS accepted: the window, or more after [`Self::accept_repairs_up_to`].
    max_nss: u16,
    /// (column, coefficient) of the known sources a repair subtracts; reused.
    terms: Vec<(u32, u8)>,
    /// Protected form of a stale source ([`Self::use_stale`]).
    stale_buf: Vec<u8>,
    scratch: Vec<u32>,
    ops: u64,
    stats: DecoderStats,
}

/// The largest repair lag [`RlcDecoder::with_repair_lag`] takes into account: the span stays
/// within 2^18 ESIs (its columns hold a source each: ~380 MiB at 1500 bytes, as much as a
/// sender keeps of a 1.2 Gbit/s path with a 2.4 s round trip). The pending equations'
/// coefficients are bounded apart from the span (`COEF_BUDGET`).
pub const MAX_REPAIR_LAG: u32 = 1 << 17;

impl RlcDecoder {
    /// A decoder for `cfg` (window clamped to 1..=4095). It tracks S = the power of two >= 2W
    /// (at least 64) ESIs behind the newest one, so repairs may arrive up to ~W symbols late.
    pub fn new(cfg: RlcConfig) -> Self {
        Self::with_repair_lag(cfg, 0)
    }

    /// A decoder whose repairs may trail the newest source it has seen by up to `lag` more
    /// ESIs than [`Self::new`] allows: it tracks S = the power of two >= 2W + `lag` (at most
    /// [`MAX_REPAIR_LAG`] counts). For dataplanes where sources and repairs reach the decoder
    /// by different paths or at different times.
    pub fn with_repair_lag(cfg: RlcConfig, lag: u32) -> Self {
        let cfg = cfg.sanitized();
        let span = Self::span_with_repair_lag(cfg.window, lag);
        RlcDecoder {
            cfg,
            span,
            mask: span - 1,
            started: false,
            head: 0,
            cols: (0..span)
                .map(|_| Column {
                    pivot: NONE,
                    ..Default::default()
                })
                .collect(),
            rows: Vec::new(),
            free_rows: Vec::new(),
            active: Vec::new(),
            detached: 0,
            coef_bytes: 0,
            floor: None,
            coefs: vec![0; cfg.window as usize],
            max_nss: cfg.window,
            terms: Vec::with_capacity(cfg.window as usize),
            stale_buf: Vec::new(),
            scratch: Vec::new(),
            ops: 0,
            stats: DecoderStats::default(),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &RlcConfig {
        &self.cfg
    }

    /// Number of ESIs tracked behind the newest (S).
    pub fn span(&self) -> u32 {
        self.span
    }

    /// Accepts repairs over up to `nss` sources (at least the window, at most 4095), as an
    /// encoder with [`crate::rlc::RlcEncoder::allow_wide_repairs`] sends them. Allocates once.
    pub fn accept_repairs_up_to(&mut self, nss: u16) {
        self.max_nss = nss.clamp(self.cfg.window, super::MAX_WINDOW);
        if self.coefs.len() < usize::from(self.max_nss) {
            self.coefs.resize(usize::from(self.max_nss), 0);
        }
    }

    /// How far behind the newest ESI `esi` lies, when it does: the repair lag a repair whose
    /// window begins there needs ([`Self::grow_repair_lag`]).
    pub fn behind(&self, esi: Esi) -> Option<u32> {
        (self.started && !self.is_future(esi)).then(|| self.head.wrapping_sub(esi))
    }

    /// Grows the tracked span to that of [`Self::with_repair_lag`]`(lag)`, keeping the known
    /// sources and the pending equations; false if the span is that long already. For a
    /// decoder that finds its repairs trail their sources by more than it expected (they come
    /// by a slower path): it learns the lag instead of being told. Sources that had left the
    /// old span are gone, so repairs over them stay refused until the span's base passes the
    /// old one; detached equations are dropped (`rows_evicted`). Allocates the new span.
    pub fn grow_repair_lag(&mut self, lag: u32) -> bool {
        let span = Self::span_with_repair_lag(self.cfg.window, lag);
        if span <= self.span {
            return false;
        }
        let mut a = 0;
        while a < self.active.len() {
            let r = self.active[a];
            if self.rows[r as usize].detached {
                self.stats.rows_evicted += 1;
                self.free_row(r); // swap_remove: `a` now holds another row
                continue;
            }
            a += 1;
        }
        let (old_base, old_span, old_mask) = (self.base(), self.span, self.mask);
        let mask = span - 1;
        let mut cols: Vec<Column> = (0..span)
            .map(|_| Column {
                pivot: NONE,
                ..Default::default()
            })
            .collect();
        for k in 0..old_span {
            let e = old_base.wrapping_add(k);
            cols[(e & mask) as usize] = std::mem::take(&mut self.cols[(e & old_mask) as usize]);
        }
        self.cols = cols;
        self.span = span;
        self.mask = mask;
        if self.started {
            self.floor = Some(old_base);
        }
        true
    }

    /// True when `esi` lies before the forgotten part of a grown span (`floor`).
    #[inline]
    fn below_floor(&self, esi: Esi) -> bool {
        self.floor.is_some_and(|f| (esi.wrapping_sub(f) as i32) < 0)
    }

    /// The tracked span S for a configured window: the power of two >= 2W, at least 64.
    pub fn span_for(window: u16) -> u32 {
        Self::span_with_repair_lag(window, 0)
    }

    /// The tracked span S of [`Self::with_repair_lag`]: the power of two >= 2W + `lag`, at
    /// least 64.
    pub fn span_with_repair_lag(window: u16, lag: u32) -> u32 {
        (2 * u32::from(window.clamp(1, super::MAX_WINDOW)) + lag.min(MAX_REPAIR_LAG))
            .next_power_of_two()
            .max(64)
    }

    /// How far behind the newest ESI a source can still be recovered with this window: 2S.
    /// Sources older than S are forgotten, but an equation pivoted on one is kept (detached)
    /// for another S and may still deliver it late; beyond 2S a loss is final.
    pub fn recovery_horizon(window: u16) -> u32 {
        Self::recovery_horizon_with_repair_lag(window, 0)
    }

    /// [`Self::recovery_horizon`] of a decoder made by [`Self::with_repair_lag`].
    pub fn recovery_horizon_with_repair_lag(window: u16, lag: u32) -> u32 {
        2 * Self::span_with_repair_lag(window, lag)
    }

    /// Counters.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// Equations currently stored (each pivoted on a distinct unknown symbol; <= 2S).
    pub fn pending_equations(&self) -> usize {
        self.active.len()
    }

    /// Unknown source symbols in the tracked span (lost, or not arrived yet).
    pub fn unknown_symbols(&self) -> usize {
        if !self.started {
            return 0;
        }
        self.cols.iter().filter(|c| !c.known).count()
    }

    /// Bytes of the buffers this decoder holds: the symbol columns (each keeps the capacity of
    /// the largest symbol it held) and the equation rows (payload and coefficients, live and
    /// kept free for reuse).
    pub fn buffer_bytes(&self) -> BufferBytes {
        BufferBytes {
            columns: self.cols.iter().map(|c| c.data.capacity()).sum(),
            rows: self
                .rows
                .iter()
                .map(|r| r.payload.capacity() + r.coef.capacity())
                .sum(),
        }
    }

    /// Forgets everything (e.g. when the peer restarts its ESI numbering).
    pub fn reset(&mut self) {
        self.started = false;
        self.clear_all();
    }

    #[inline]
    fn idx(&self, esi: Esi) -> usize {
        (esi & self.mask) as usize
    }

    #[inline]
    fn base(&self) -> Esi {
        self.head.wrapping_sub(self.span)
    }

    /// Offset of `esi` above the base of the span (only meaningful inside it).
    #[inline]
    fn off(&self, esi: Esi) -> u32 {
        esi.wrapping_sub(self.base())
    }

    #[inline]
    fn in_span(&self, esi: Esi) -> bool {
        self.off(esi) < self.span
    }

    /// True when `esi` is at or past `head` (within half the ESI space).
    #[inline]
    fn is_future(&self, esi: Esi) -> bool {
        (esi.wrapping_sub(self.head) as i32) >= 0
    }

    fn clear_all(&mut self) {
        self.floor = None;
        for c in &mut self.cols {
            c.known = false;
            c.pivot = NONE;
        }
        while let Some(&r) = self.active.last() {
            self.free_row(r);
        }
    }

    /// Moves the head to `new_head` (a future ESI), forgetting what falls off the span.
    fn advance_to(&mut self, new_head: Esi) {
        let d = new_head.wrapping_sub(self.head);
        if d >= self.span {
            self.stats.rows_evicted += self.active.len() as u64;
            self.clear_all();
        } else {
            let base = self.base();
            for k in 0..d {
                let c = base.wrapping_add(k);
                let i = self.idx(c);
                if self.detached > 0 {
                    // Detached rows involving `c` (then a non-pivot column: pivots are zero in
                    // every other row) can never be solved; nor are rows kept whose pivot is
                    // more than S behind the span (the memory bound).
                    let mut a = 0;
                    while a < self.active.len() {
                        let r = self.active[a];
                        let row = &self.rows[r as usize];
                        if row.detached && row.at(c) != 0 {
                            self.stats.rows_evicted += 1;
                            self.free_row(r); // swap_remove: `a` now holds another row
                            continue;
                        }
                        if row.detached && c.wrapping_sub(row.lo) >= self.span {
                            self.stats.rows_aged_out += 1;
                            self.free_row(r);
                            continue;
                        }
                        a += 1;
                    }
                }
                let p = self.cols[i].pivot;
                if p != NONE {
                    // Keep the equation: once its other unknowns are solved it yields `c`.
                    self.rows[p as usize].set(c, 0);
                    self.rows[p as usize].detached = true;
                    self.detached += 1;
                    self.cols[i].pivot = NONE;
                }
                self.cols[i].known = false;
            }
        }
        self.head = new_head;
        if self.floor.is_some() && !self.below_floor(self.base()) {
            self.floor = None;
        }
    }

    fn alloc_row(&mut self) -> u32 {
        let r = match self.free_rows.pop() {
            Some(r) => r,
            None => {
                self.rows.push(Row {
                    payload: Vec::new(),
                    coef: Vec::new(),
                    start: 0,
                    lo: 0,
                    hi: 0,
                    detached: false,
                });
                (self.rows.len() - 1) as u32
            }
        };
        debug_assert!(self.rows.len() <= 2 * self.span as usize + 1);
        self.active.push(r);
        r
    }

    /// Returns a row to the pool: drops its coefficients, unlinks its pivot.
    fn free_row(&mut self, r: u32) {
        let lo = self.rows[r as usize].lo;
        let row = &mut self.rows[r as usize];
        self.coef_bytes -= row.coef.len();
        row.coef.clear();
        if row.detached {
            row.detached = false;
            self.detached -= 1;
        }
        row.payload.clear();
        let li = self.idx(lo);
        if self.cols[li].pivot == r {
            self.cols[li].pivot = NONE;
        }
        if let Some(pos) = self.active.iter().position(|&a| a == r) {
            self.active.swap_remove(pos);
        }
        if self.free_rows.len() >= KEPT_FREE_ROWS {
            // Past the rows a steady stream reuses, a free row gives its buffers back: after an
            // outage the pending equations pile up (up to 2S rows), and their memory would
            // otherwise stay with the process as a high-water mark.
            let row = &mut self.rows[r as usize];
            row.coef = Vec::new();
            row.payload = Vec::new();
        }
        self.free_rows.push(r);
    }

    /// `rows[dst] += a * rows[src]` (payload and coefficients).
    fn row_op(&mut self, dst: u32, src: u32, a: u8) {
        debug_assert_ne!(dst, src);
        let (d, s) = pair(&mut self.rows, dst as usize, src as usize);
        if d.payload.len() < s.payload.len() {
            d.payload.resize(s.payload.len(), 0);
        }
        mul_add_any(&mut d.payload, &s.payload, a);
        // `dst` involves the pivot of `src` (its lowest column), so it starts no later.
        let from = s.lo.wrapping_sub(s.start) as usize;
        let to = s.hi.wrapping_sub(s.start) as usize + 1;
        self.coef_bytes += d.extend_to(s.hi);
        let at = s.lo.wrapping_sub(d.start) as usize;
        mul_add_any(&mut d.coef[at..at + to - from], &s.coef[from..to], a);
        let base = self.head.wrapping_sub(self.span);
        let dh = d.hi.wrapping_sub(base);
        // (A detached row's bound may lie below the span: any in-span bound is higher.)
        if dh >= self.span || s.hi.wrapping_sub(base) > dh {
            d.hi = s.hi;
        }
        self.ops += 1;
    }

    /// Lowers `hi` past trailing zero coefficients; true if the row is now a singleton (only
    /// its pivot left, in the span or detached).
    fn trim(&mut self, r: u32) -> bool {
        let (span, base) = (self.span, self.base());
        let row = &mut self.rows[r as usize];
        if row.detached {
            // Non-zeros can only be in [base, hi].
            let mut off = row.hi.wrapping_sub(base);
            if off >= span {
                return true;
            }
            loop {
                if row.at(base.wrapping_add(off)) != 0 {
                    row.hi = base.wrapping_add(off);
                    return false;
                }
                if off == 0 {
                    return true;
                }
                off -= 1;
            }
        }
        while row.hi != row.lo && row.at(row.hi) == 0 {
            row.hi = row.hi.wrapping_sub(1);
        }
        row.hi == row.lo
    }

    /// First non-zero coefficient of row `r` in `[from, hi]`.
    fn leading(&self, r: u32, from: Esi) -> Option<Esi> {
        let row = &self.rows[r as usize];
        let n = row.hi.wrapping_sub(from).wrapping_add(1);
        if n > self.span {
            return None; // from > hi
        }
        (0..n)
            .map(|k| from.wrapping_add(k))
            .find(|&e| row.at(e) != 0)
    }

    /// Makes `q` (row `r`'s lowest non-zero column, unknown and unpivoted) the pivot of `r`:
    /// scales `r` so its coefficient there is 1 and eliminates `q` from every other row. Rows
    /// that may have become singletons are appended to `touched`.
    fn install_pivot(&mut self, r: u32, q: Esi, touched: &mut Vec<u32>) {
        let qi = self.idx(q);
        let c = self.rows[r as usize].at(q);
        debug_assert!(c != 0);
        {
            let row = &mut self.rows[r as usize];
            row.lo = q;
            if c != 1 {
                let ic = hirt_gf::inv(c);
                hirt_gf::scale(&mut row.payload, ic);
                let from = q.wrapping_sub(row.start) as usize;
                let to = row.hi.wrapping_sub(row.start) as usize + 1;
                hirt_gf::scale(&mut row.coef[from..to], ic);
                self.ops += 1;
            }
        }
        self.cols[qi].pivot = r;
        touched.push(r);
        for k in 0..self.active.len() {
            let o = self.active[k];
            if o == r {
                continue;
            }
            let a = self.rows[o as usize].at(q);
            if a != 0 {
                self.row_op(o, r, a);
                touched.push(o);
            }
        }
    }

    /// Delivers every row of `touched` that has become a singleton.
    fn solve_touched(&mut self, touched: &mut Vec<u32>, recovered: &mut dyn FnMut(Esi, &[u8])) {
        for &r in touched.iter() {
            // A row may be listed twice, or freed meanwhile (only by recovery, which unlinks it).
            if !self.active.contains(&r) || !self.trim(r) {
                continue;
            }
            let esi = self.rows[r as usize].lo;
            if self.rows[r as usize].detached {
                // Its column has left the span: deliver straight from the row.
                let payload = &self.rows[r as usize].payload;
                match decode_len(payload) {
                    Some(len) if payload[LEN_FIELD + len..].iter().all(|&b| b == 0) => {
                        self.stats.recovered += 1;
                        self.stats.recovered_late += 1;
                        recovered(esi, &payload[LEN_FIELD..LEN_FIELD + len]);
                    }
                    _ => self.stats.bad_recoveries += 1,
                }
                self.free_row(r);
                continue;
            }
            let ci = self.idx(esi);
            debug_assert_eq!(self.cols[ci].pivot, r);
            let payload = &self.rows[r as usize].payload;
            match decode_len(payload) {
                Some(len) if payload[LEN_FIELD + len..].iter().all(|&b| b == 0) => {
                    let row = &mut self.rows[r as usize];
                    let col = &mut self.cols[ci];
                    if row.payload.capacity() >= col.data.capacity() {
                        std::mem::swap(&mut row.payload, &mut col.data);
                        col.data.truncate(LEN_FIELD + len);
                    } else {
                        // The column keeps its larger buffer: a column only grows, so its
                        // memory is the largest symbol its slot held, whatever the recoveries,
                        // and a large source landing in it later needs no reallocation.
                        col.data.clear();
                        col.data.extend_from_slice(&row.payload[..LEN_FIELD + len]);
                    }
                    col.known = true;
                    self.stats.recovered += 1;
                    self.free_row(r);
                    recovered(esi, &self.cols[ci].data[LEN_FIELD..]);
                }
                _ => {
                    self.stats.bad_recoveries += 1;
                    self.free_row(r);
                }
            }
        }
        touched.clear();
    }

    /// A source that arrives after its column left the span may still be the pivot of a
    /// detached equation: substituting it turns that equation into one over in-span unknowns,
    /// which is re-pivoted like any other (and may solve some).
    fn use_stale(&mut self, esi: Esi, data: &[u8], recovered: &mut dyn FnMut(Esi, &[u8])) {
        let Some(&r) = self
            .active
            .iter()
            .find(|&&r| self.rows[r as usize].detached && self.rows[r as usize].lo == esi)
        else {
            return;
        };
        let mut src = std::mem::take(&mut self.stale_buf);
        encode_into(&mut src, data);
        {
            let row = &mut self.rows[r as usize];
            if row.payload.len() < src.len() {
                row.payload.resize(src.len(), 0); // only with inconsistent input
            }
            hirt_gf::xor(&mut row.payload, &src);
            row.detached = false;
        }
        self.stale_buf = src;
        self.detached -= 1;
        self.ops += 1;
        let mut touched = std::mem::take(&mut self.scratch);
        match self.leading(r, self.base()) {
            Some(q) => {
                self.install_pivot(r, q, &mut touched);
                self.solve_touched(&mut touched, recovered);
            }
            None => {
                // Its other unknowns were all solved already (it would have delivered `esi`).
                self.rows[r as usize].lo = self.base();
                self.free_row(r);
            }
        }
        self.scratch = touched;
    }

    /// Checks and, if needed, moves the span for a repair covering `[first, first + nss)`.
    /// Returns without touching any state on error.
    fn check_repair(&self, info: &RepairInfo, payload_len: usize) -> Result<(), DecodeError> {
        if info.scheme != self.cfg.scheme() {
            return Err(DecodeError::WrongScheme);
        }
        if info.dt > 15 || info.stride != 1 {
            return Err(DecodeError::InvalidParameters);
        }
        if info.nss == 0 || info.nss > self.max_nss {
            return Err(DecodeError::InvalidNss);
        }
        if payload_len > MAX_PROTECTED_LEN {
            return Err(DecodeError::SymbolTooLong);
        }
        if payload_len < LEN_FIELD {
            return Err(DecodeError::BadLength);
        }
        if !self.started {
            return Ok(());
        }
        let last = info.first_esi.wrapping_add(info.nss as u32 - 1);
        if self.is_future(last) {
            // May move the head forward by at most S: farther is not a lost burst we could use
            // anyway, and would let one bogus header wipe the state.
            if last.wrapping_sub(self.head) >= self.span {
                return Err(DecodeError::OutOfRange);
            }
            // After moving, `first` must still be inside the span.
            let new_base = last.wrapping_add(1).wrapping_sub(self.span);
            if info.first_esi.wrapping_sub(new_base) >= self.span {
                return Err(DecodeError::OutOfRange);
            }
        } else if !self.in_span(info.first_esi) {
            return Err(DecodeError::OutOfRange);
        }
        if self.below_floor(info.first_esi) {
            return Err(DecodeError::OutOfRange);
        }
        // Known sources must fit in the repair (a correct encoder pads to the longest).
        for j in 0..info.nss as u32 {
            let e = info.first_esi.wrapping_add(j);
            if self.in_span(e) && !self.is_future(e) {
                let c = &self.cols[self.idx(e)];
                if c.known && c.data.len() > payload_len {
                    return Err(DecodeError::BadLength);
                }
            }
        }
        Ok(())
    }
}

impl FecDecoder for RlcDecoder {
    fn on_source(
        &mut self,
        esi: Esi,
        data: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<SourceOutcome, DecodeError> {
        if data.len() > MAX_SYMBOL_LEN {
            return Err(DecodeError::SymbolTooLong);
        }
        if !self.started {
            self.started = true;
            self.head = esi.wrapping_add(1);
        } else if self.is_future(esi) {
            self.advance_to(esi.wrapping_add(1));
        } else if !self.in_span(esi) {
            if self.detached > 0 {
                self.use_stale(esi, data, recovered);
            }
            return Ok(SourceOutcome::Stale);
        } else if self.below_floor(esi) {
            return Ok(SourceOutcome::Stale);
        }
        let ci = self.idx(esi);
        if self.cols[ci].known {
            return Ok(SourceOutcome::Duplicate);
        }
        encode_into(&mut self.cols[ci].data, data);
        self.cols[ci].known = true;
        if self.active.is_empty() {
            return Ok(SourceOutcome::New);
        }

        let mut touched = std::mem::take(&mut self.scratch);
        let p = self.cols[ci].pivot;
        // Remove the now-known column from every row that involves it.
        for k in 0..self.active.len() {
            let r = self.active[k];
            let a = self.rows[r as usize].at(esi);
            if a == 0 {
                continue;
            }
            let row = &mut self.rows[r as usize];
            let src = &self.cols[ci].data;
            if row.payload.len() < src.len() {
                row.payload.resize(src.len(), 0); // only with inconsistent input
            }
            mul_add_any(&mut row.payload, src, a);
            row.set(esi, 0);
            self.ops += 1;
            if r != p {
                touched.push(r);
            }
        }
        if p != NONE {
            // Its pivot row lost its pivot: re-pivot on its next non-zero column, if any.
            self.cols[ci].pivot = NONE;
            match self.leading(p, esi.wrapping_add(1)) {
                Some(q) => self.install_pivot(p, q, &mut touched),
                None => {
                    self.rows[p as usize].lo = esi;
                    self.free_row(p);
                }
            }
        }
        self.solve_touched(&mut touched, recovered);
        self.scratch = touched;
        Ok(SourceOutcome::New)
    }

    fn on_repair(
        &mut self,
        info: &RepairInfo,
        payload: &[u8],
        recovered: &mut dyn FnMut(Esi, &[u8]),
    ) -> Result<(), DecodeError> {
        self.check_repair(info, payload.len())?;
        if self.coef_bytes > COEF_BUDGET {
            self.stats.repairs_refused += 1;
            return Ok(());
        }
        let nss = info.nss as u32;
        let first = info.first_esi;
        let last = first.wrapping_add(nss - 1);
        if !self.started {
            self.started = true;
            self.head = last.wrapping_add(1);
        } else if self.is_future(last) {
            self.advance_to(last.wrapping_add(1));
        }
        // Skip repairs that cannot teach us anything.
        if (0..nss).all(|j| self.cols[self.idx(first.wrapping_add(j))].known) {
            self.stats.repairs_skipped += 1;
            return Ok(());
        }
        let coefs = &mut self.coefs[..nss as usize];
        if generate_coding_coefficients(info.repair_key, coefs, info.dt, self.cfg.field.m())
            .is_err()
        {
            return Err(DecodeError::InvalidParameters); // unreachable: checked above
        }

        let r = self.alloc_row();
        {
            let row = &mut self.rows[r as usize];
            row.payload.clear();
            row.payload.extend_from_slice(payload);
        }
        // Subtract the known sources; keep the unknown ones as coefficients.
        // Subtract the known sources in one pass over the payload (`mul_add_terms`); keep the
        // unknown ones as coefficients.
        let mut lo = None;
        let mut hi = first;
        let mut terms = std::mem::take(&mut self.terms);
        terms.clear();
        for j in 0..nss {
            let c = self.coefs[j as usize];
            let e = first.wrapping_add(j);
            let ci = self.idx(e);
            if c == 0 {
                continue;
            }
            if self.cols[ci].known {
                terms.push((ci as u32, c));
            } else {
                let row = &mut self.rows[r as usize];
                if lo.is_none() {
                    row.start = e;
                }
                self.coef_bytes += row.extend_to(e);
                row.set(e, c);
                lo.get_or_insert(e);
                hi = e;
            }
        }
        if !terms.is_empty() {
            let cols = &self.cols;
            hirt_gf::active().mul_add_terms(&mut self.rows[r as usize].payload, terms.len(), |j| {
                let (ci, c) = terms[j];
                (&cols[ci as usize].data[..], c)
            });
            self.ops += terms.len() as u64;
        }
        self.terms = terms;
        let Some(lo) = lo else {
            // Only zero coefficients on the unknowns (sparse code).
            self.rows[r as usize].lo = first;
            self.rows[r as usize].hi = first;
            self.stats.repairs_redundant += 1;
            self.free_row(r);
            return Ok(());
        };
        self.rows[r as usize].lo = lo;
        self.rows[r as usize].hi = hi;

        // Reduce against the pivots it involves. Pivot rows are zero on every other pivot column,
        // so the order does not matter and one pass over the original span suffices.
        let n = hi.wrapping_sub(lo) + 1;
        for k in 0..n {
            let e = lo.wrapping_add(k);
            let ci = self.idx(e);
            let a = self.rows[r as usize].at(e);
            let p = self.cols[ci].pivot;
            if a != 0 && p != NONE {
                self.row_op(r, p, a);
            }
        }
        let mut touched = std::mem::take(&mut self.scratch);
        match self.leading(r, lo) {
            Some(q) => {
                self.install_pivot(r, q, &mut touched);
                self.solve_touched(&mut touched, recovered);
            }
            None => {
                self.stats.repairs_redundant += 1;
                self.free_row(r);
            }
        }
        self.scratch = touched;
        Ok(())
    }

    fn symbol_ops(&self) -> u64 {
        self.ops
    }
}

/// `dst ^= a * src` for any `a` (XOR when 1, nothing when 0).
#[inline]
fn mul_add_any(dst: &mut [u8], src: &[u8], a: u8) {
    match a {
        0 => {}
        1 => hirt_gf::xor(dst, src),
        a => hirt_gf::mul_add(dst, src, a),
    }
}

/// Mutable `a` and shared `b` from one slice (`a != b`).
#[inline]
fn pair<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &T) {
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &x[b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rlc::RlcEncoder;
    use crate::FecEncoder;

    fn sym(esi: u32) -> Vec<u8> {
        (0..(esi % 7) as u8 + 1).map(|b| b ^ esi as u8).collect()
    }

    /// Hands `rep` to `dec` (it must be accepted), collecting what it recovers in `got`.
    fn repair_into(
        dec: &mut RlcDecoder,
        rep: &(RepairInfo, Vec<u8>),
        got: &mut Vec<(Esi, Vec<u8>)>,
    ) {
        dec.on_repair(&rep.0, &rep.1, &mut |e, d| got.push((e, d.to_vec())))
            .unwrap();
    }

    /// Encoder over ESIs 10..10+n, then `k` repairs over the whole window.
    fn stream(cfg: RlcConfig, n: u32, k: usize) -> Vec<(RepairInfo, Vec<u8>)> {
        let mut enc = RlcEncoder::new(cfg);
        for e in 10..10 + n {
            enc.push_source(e, &sym(e), &mut |_, _| {});
        }
        let mut reps = Vec::new();
        for _ in 0..k {
            enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        }
        reps
    }

    #[test]
    fn a_recovery_into_a_larger_column_keeps_the_column_buffer() {
        // Window 64 over a ring of 64 columns: ESI e and e + 64 share a column. Large
        // sources fill the ring first; then small sources, one lost per 8 and recovered from a
        // repair over a window of small ones (fresh rows with small buffers). The columns' buffers stay those of the large
        // sources: recovering a small symbol does not hand a column a smaller buffer, so a
        // large source landing there later needs no reallocation and the memory does not
        // follow the recovery history.
        let cfg = RlcConfig::rlc(64);
        let big = |e: u32| vec![e as u8; 1400];
        // Losses start once the encoder's window holds small sources only.
        let lost = |e: u32| e >= 192 && e % 8 == 3;
        let mut enc = RlcEncoder::new(cfg);
        let mut dec = RlcDecoder::new(cfg);
        for e in 0..64 {
            enc.push_source(e, &big(e), &mut |_, _| {});
            dec.on_source(e, &big(e), &mut |_, _| {}).unwrap();
        }
        let full = dec.buffer_bytes().columns;
        assert!(full >= 64 * 1400, "{full}");
        let mut recovered = 0;
        for e in 64..640 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
            if !lost(e) {
                dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
            }
            if e >= 192 && e % 8 == 7 {
                let mut reps = Vec::new();
                enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
                for (i, p) in &reps {
                    dec.on_repair(i, p, &mut |_, _| recovered += 1).unwrap();
                }
            }
            assert!(
                dec.buffer_bytes().columns >= full,
                "column memory shrank at {e}"
            );
        }
        assert_eq!(recovered, 56);
    }

    #[test]
    fn rows_freed_after_a_pile_up_give_their_memory_back() {
        // An outage's aftermath: 150 repairs over 10..210 arrive with none of their sources,
        // so 150 equations wait; then every source arrives, every equation is solved or
        // dropped, and the rows return to the pool. Past `KEPT_FREE_ROWS`, a free row keeps
        // no buffers.
        let cfg = RlcConfig::rlc(256);
        let reps = stream(cfg, 200, 150);
        let mut dec = RlcDecoder::new(cfg);
        for (i, p) in &reps {
            dec.on_repair(i, p, &mut |_, _| {}).unwrap();
        }
        assert!(
            dec.pending_equations() > KEPT_FREE_ROWS,
            "{}",
            dec.pending_equations()
        );
        for e in 10..210 {
            let _ = dec.on_source(e, &sym(e), &mut |_, _| {});
        }
        assert_eq!(dec.pending_equations(), 0);
        let holding = dec.rows.iter().filter(|r| r.coef.capacity() > 0).count();
        assert!(holding <= KEPT_FREE_ROWS, "{holding} rows keep buffers");
        // A reused row gets its buffers again: the same pile-up decodes as before.
        let reps = {
            let mut enc = RlcEncoder::new(cfg);
            let mut v = Vec::new();
            for e in 210..410 {
                enc.push_source(e, &sym(e), &mut |_, _| {});
            }
            for _ in 0..100 {
                enc.repair_now(&mut |i, p| v.push((i, p.to_vec())));
            }
            v
        };
        let mut got = Vec::new();
        for e in (210..410).filter(|e| e % 3 != 0) {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        for (i, p) in &reps {
            let _ = dec.on_repair(i, p, &mut |e, d| got.push((e, d.to_vec())));
        }
        got.sort();
        let want: Vec<_> = (210..410)
            .filter(|e| e % 3 == 0)
            .map(|e| (e, sym(e)))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn repairs_first_then_sources_repivot() {
        // Two repairs over 10..14 arrive before any source: two equations, four unknowns,
        // pivots 10 and 11. Sources 10 and 13 then arrive: 10 is a pivot (re-pivot path), 13 a
        // plain column; afterwards 11 and 12 are determined and come out exactly.
        let cfg = RlcConfig::rlc(8);
        let reps = stream(cfg, 4, 2);
        let mut dec = RlcDecoder::new(cfg);
        let mut got = Vec::new();
        for (i, p) in &reps {
            dec.on_repair(i, p, &mut |e, d| got.push((e, d.to_vec())))
                .unwrap();
        }
        assert_eq!(dec.pending_equations(), 2);
        assert!(got.is_empty());
        dec.on_source(10, &sym(10), &mut |e, d| got.push((e, d.to_vec())))
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(dec.pending_equations(), 2);
        dec.on_source(13, &sym(13), &mut |e, d| got.push((e, d.to_vec())))
            .unwrap();
        got.sort();
        assert_eq!(got, vec![(11, sym(11)), (12, sym(12))]);
        assert_eq!(dec.pending_equations(), 0);
        assert_eq!(dec.stats().recovered, 2);
        // Late copies are duplicates.
        assert_eq!(
            dec.on_source(12, &sym(12), &mut |_, _| {}),
            Ok(SourceOutcome::Duplicate)
        );
    }

    #[test]
    fn repair_lag_keeps_a_late_repair_useful() {
        // Sources 10..42 with 20 lost, then the decoder sees sources up to `head` before the
        // repair over 10..42 arrives. The default span forgets the window's sources first; a
        // decoder made with enough repair lag still solves it.
        let cfg = RlcConfig::rlc(32);
        let reps = stream(cfg, 32, 1);
        let run = |mut dec: RlcDecoder, head: u32| {
            let mut got = Vec::new();
            for e in (10..42).filter(|&e| e != 20).chain(42..head) {
                dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
            }
            let _ = dec.on_repair(&reps[0].0, &reps[0].1, &mut |e, d| {
                got.push((e, d.to_vec()))
            });
            got
        };
        let span = RlcDecoder::span_for(32);
        assert_eq!(span, 64);
        let head = 42 + span;
        assert!(
            run(RlcDecoder::new(cfg), head).is_empty(),
            "too late for S = 64"
        );
        let lagged = RlcDecoder::with_repair_lag(cfg, 100);
        assert_eq!(lagged.span(), 256, "2W + lag = 164, rounded up");
        assert_eq!(
            RlcDecoder::recovery_horizon_with_repair_lag(32, 100),
            2 * lagged.span()
        );
        assert_eq!(run(lagged, head), vec![(20, sym(20))]);
        assert_eq!(RlcDecoder::with_repair_lag(cfg, 0).span(), span);
    }

    #[test]
    fn a_repair_a_hundred_thousand_sources_late_solves_with_rows_of_its_window() {
        // Answers to loss reports on a long fast path trail their sources by a round trip of
        // them. Two losses, two repairs over 10..42 that arrive ~110000 sources later: the span
        // holds them, and the pending equation's coefficients cover its window, not the span.
        let cfg = RlcConfig::rlc(32);
        let reps = stream(cfg, 32, 2);
        let mut dec = RlcDecoder::with_repair_lag(cfg, MAX_REPAIR_LAG);
        assert_eq!(dec.span(), 1 << 18);
        let head = 110_000;
        for e in (10..42).filter(|&e| e != 20 && e != 33).chain(42..head) {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        let mut got = Vec::new();
        repair_into(&mut dec, &reps[0], &mut got);
        assert!(got.is_empty());
        assert_eq!(dec.pending_equations(), 1);
        assert!(
            dec.buffer_bytes().rows < 4096,
            "{:?}: an equation over 20..33 holds 14 coefficients",
            dec.buffer_bytes()
        );
        repair_into(&mut dec, &reps[1], &mut got);
        got.sort();
        assert_eq!(got, vec![(20, sym(20)), (33, sym(33))]);
        assert_eq!(dec.pending_equations(), 0);
    }

    #[test]
    fn a_repair_wider_than_the_window_is_taken_only_where_allowed() {
        // Window 16; losses at 15, 60 and 100 of 10..110, one answer each lost: spares over
        // the whole 100 sources (an encoder allowed repairs that wide) back them all up.
        let cfg = RlcConfig::rlc(16);
        let mut enc = RlcEncoder::new(cfg);
        enc.set_history(128);
        enc.allow_wide_repairs(100);
        for e in 10..110 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
        }
        let mut reps = Vec::new();
        for _ in 0..3 {
            assert!(enc.repair_between(10, 110, &mut |i, p| reps.push((i, p.to_vec()))));
        }
        assert_eq!((reps[0].0.first_esi, reps[0].0.nss), (10, 100));
        // Without that, the same bounds give a repair over the window only.
        let mut narrow = RlcEncoder::new(cfg);
        narrow.set_history(128);
        for e in 10..110 {
            narrow.push_source(e, &sym(e), &mut |_, _| {});
        }
        narrow.repair_between(10, 110, &mut |i, _| {
            assert_eq!((i.first_esi, i.nss), (94, 16))
        });

        let lost = [15, 60, 100];
        let fill = |dec: &mut RlcDecoder| {
            for e in (10..110).filter(|e| !lost.contains(e)) {
                dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
            }
        };
        let mut dec = RlcDecoder::with_repair_lag(cfg, 200);
        fill(&mut dec);
        let refused = dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| {});
        assert_eq!(refused, Err(DecodeError::InvalidNss));

        let mut dec = RlcDecoder::with_repair_lag(cfg, 200);
        dec.accept_repairs_up_to(100);
        fill(&mut dec);
        let mut got = Vec::new();
        for r in &reps {
            repair_into(&mut dec, r, &mut got);
        }
        got.sort();
        assert_eq!(got, lost.iter().map(|&e| (e, sym(e))).collect::<Vec<_>>());
    }

    #[test]
    fn a_grown_span_keeps_pending_equations_and_takes_later_repairs() {
        // Sources 10..42 with 20 and 21 lost; one repair arrives before the span grows, the
        // second after: the equation held across the growth still counts.
        let cfg = RlcConfig::rlc(32);
        let reps = stream(cfg, 32, 2);
        let mut dec = RlcDecoder::new(cfg);
        for e in (10..42).filter(|&e| e != 20 && e != 21) {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        let mut got = Vec::new();
        repair_into(&mut dec, &reps[0], &mut got);
        assert!(got.is_empty());
        assert_eq!(dec.behind(10), Some(32));
        assert!(dec.grow_repair_lag(100));
        assert!(!dec.grow_repair_lag(100), "already that long");
        assert_eq!(dec.span(), 256);
        for e in 42..120 {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        // 110 behind the newest source: past the old span of 64, inside the new one.
        assert_eq!(dec.behind(10), Some(110));
        repair_into(&mut dec, &reps[1], &mut got);
        got.sort();
        assert_eq!(got, vec![(20, sym(20)), (21, sym(21))]);
        assert_eq!(dec.pending_equations(), 0);
    }

    #[test]
    fn a_grown_span_refuses_repairs_over_sources_it_had_forgotten() {
        // Sources 0..200, then the span grows: those before 200 - 64 had been forgotten, and a
        // repair over them would take them for lost. Once the newest source is a new span
        // past them, repairs that far back are taken again.
        let cfg = RlcConfig::rlc(8);
        let mut enc = RlcEncoder::new(cfg);
        let mut dec = RlcDecoder::new(cfg);
        let mut old = Vec::new();
        let mut late = Vec::new();
        for e in 0..600u32 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
            if e == 107 {
                enc.repair_now(&mut |i, p| old.push((i, p.to_vec())));
            }
            if e == 407 {
                enc.repair_now(&mut |i, p| late.push((i, p.to_vec())));
            }
            if e == 200 {
                assert!(dec.grow_repair_lag(300));
                assert_eq!(dec.span(), 512);
            }
            if e != 403 {
                dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
            }
        }
        assert_eq!(
            dec.on_source(120, &sym(120), &mut |_, _| {}),
            Ok(SourceOutcome::Stale),
            "a source that had been forgotten stays stale"
        );
        let mut got = Vec::new();
        assert_eq!(
            dec.on_repair(&old[0].0, &old[0].1, &mut |e, d| got.push((e, d.to_vec()))),
            Err(DecodeError::OutOfRange)
        );
        // 400..408, 193 behind the newest source: only the grown span still holds them.
        dec.on_repair(&late[0].0, &late[0].1, &mut |e, d| {
            got.push((e, d.to_vec()))
        })
        .unwrap();
        assert_eq!(got, vec![(403, sym(403))]);
    }

    #[test]
    fn xor_single_loss_and_skip() {
        let cfg = RlcConfig::xor(4);
        let reps = stream(cfg, 4, 2);
        let mut dec = RlcDecoder::new(cfg);
        let mut got = Vec::new();
        for e in [10, 11, 13] {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        repair_into(&mut dec, &reps[0], &mut got);
        assert_eq!(got, vec![(12, sym(12))]);
        let ops = dec.symbol_ops();
        dec.on_repair(&reps[1].0, &reps[1].1, &mut |_, _| panic!("nothing left"))
            .unwrap();
        assert_eq!(dec.stats().repairs_skipped, 1);
        assert_eq!(
            dec.symbol_ops(),
            ops,
            "a repair with no unknown costs no row operation"
        );
    }

    #[test]
    fn dependent_repair_is_dropped() {
        // The same repair twice adds no rank.
        let cfg = RlcConfig::rlc(8);
        let reps = stream(cfg, 5, 1);
        let mut dec = RlcDecoder::new(cfg);
        for e in [10, 12, 14] {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        for _ in 0..2 {
            dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| panic!("rank 1 < 2"))
                .unwrap();
        }
        assert_eq!(dec.pending_equations(), 1);
        assert_eq!(dec.stats().repairs_redundant, 1);
    }

    #[test]
    fn eviction_drops_rows_and_bounds_state() {
        let cfg = RlcConfig::rlc(4);
        let reps = stream(cfg, 4, 1);
        let mut dec = RlcDecoder::new(cfg);
        dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| {})
            .unwrap();
        assert_eq!(dec.pending_equations(), 1);
        // Move the head one span ahead: the equation's pivot leaves, the row goes with it.
        let far = 14 + dec.span();
        dec.on_source(far, &[1], &mut |_, _| {}).unwrap();
        assert_eq!(dec.pending_equations(), 0);
        assert_eq!(dec.stats().rows_evicted, 1);
        assert_eq!(
            dec.on_source(12, &[1], &mut |_, _| {}),
            Ok(SourceOutcome::Stale)
        );
    }

    #[test]
    fn jumbo_and_empty_symbols_round_trip() {
        let cfg = RlcConfig::rlc(3);
        let mut enc = RlcEncoder::new(cfg);
        let jumbo: Vec<u8> = (0..MAX_SYMBOL_LEN).map(|i| (i * 31 % 251) as u8).collect();
        let syms = [jumbo.clone(), Vec::new(), vec![7u8; 3]];
        for (e, d) in syms.iter().enumerate() {
            enc.push_source(e as u32, d, &mut |_, _| {});
        }
        let mut reps = Vec::new();
        for _ in 0..2 {
            enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        }
        assert_eq!(reps[0].1.len(), MAX_PROTECTED_LEN);
        let mut dec = RlcDecoder::new(cfg);
        dec.on_source(2, &syms[2], &mut |_, _| {}).unwrap();
        let mut got = Vec::new();
        for (i, p) in &reps {
            dec.on_repair(i, p, &mut |e, d| got.push((e, d.to_vec())))
                .unwrap();
        }
        got.sort();
        assert_eq!(got, vec![(0, jumbo), (1, Vec::new())]);
    }

    #[test]
    fn detached_equation_delivers_late() {
        // 10 and 11 are lost. R1 (10..13) arrives in time; R2 (11..14) only after column 10 has
        // left the span. R1 is then detached (pivot 10 outside the span) but kept: when R2
        // solves 11, R1 yields 10, late.
        let cfg = RlcConfig::rlc(4);
        let mut enc = RlcEncoder::new(cfg);
        let mut reps = Vec::new();
        for e in 10..14 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
        }
        enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        enc.push_source(14, &sym(14), &mut |_, _| {});
        enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        assert_eq!((reps[1].0.first_esi, reps[1].0.nss), (11, 4));

        let mut dec = RlcDecoder::new(cfg);
        let mut got = Vec::new();
        for e in 12..15 {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| panic!("rank 1 < 2"))
            .unwrap();
        // Advance until 10 leaves the span but 11 is still in it.
        let last = 10 + dec.span();
        for e in 15..=last {
            dec.on_source(e, &[0], &mut |_, _| {}).unwrap();
        }
        assert_eq!(dec.pending_equations(), 1, "R1 kept, detached");
        repair_into(&mut dec, &reps[1], &mut got);
        got.sort();
        assert_eq!(got, vec![(10, sym(10)), (11, sym(11))]);
        assert_eq!(dec.stats().recovered_late, 1);
        assert_eq!(dec.pending_equations(), 0);
        // One more step evicts 11 with nothing left to drop.
        dec.on_source(last + 1, &[0], &mut |_, _| {}).unwrap();
        assert_eq!(dec.stats().rows_evicted, 0);
    }

    #[test]
    fn detached_equation_dropped_when_its_other_unknown_leaves() {
        let cfg = RlcConfig::rlc(4);
        let mut enc = RlcEncoder::new(cfg);
        let mut reps = Vec::new();
        for e in 10..14 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
        }
        enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        let mut dec = RlcDecoder::new(cfg);
        for e in 12..14 {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| {})
            .unwrap();
        for e in 14..=(11 + dec.span()) {
            dec.on_source(e, &[0], &mut |_, _| panic!("nothing decodable"))
                .unwrap();
        }
        assert_eq!(dec.pending_equations(), 0);
        assert_eq!(dec.stats().rows_evicted, 1);
    }

    #[test]
    fn stale_source_reactivates_detached_equation() {
        // As `detached_equation_delivers_late`, but instead of a second repair the lost source 10
        // itself shows up, very late: substituted into R1 it solves 11.
        let cfg = RlcConfig::rlc(4);
        let mut enc = RlcEncoder::new(cfg);
        let mut reps = Vec::new();
        for e in 10..14 {
            enc.push_source(e, &sym(e), &mut |_, _| {});
        }
        enc.repair_now(&mut |i, p| reps.push((i, p.to_vec())));
        let mut dec = RlcDecoder::new(cfg);
        for e in 12..14 {
            dec.on_source(e, &sym(e), &mut |_, _| {}).unwrap();
        }
        dec.on_repair(&reps[0].0, &reps[0].1, &mut |_, _| {})
            .unwrap();
        let last = 10 + dec.span();
        for e in 14..=last {
            dec.on_source(e, &[0], &mut |_, _| {}).unwrap();
        }
        assert_eq!(dec.pending_equations(), 1);
        let mut got = Vec::new();
        let out = dec
            .on_source(10, &sym(10), &mut |e, d| got.push((e, d.to_vec())))
            .unwrap();
        assert_eq!(out, SourceOutcome::Stale);
        assert_eq!(got, vec![(11, sym(11))]);
        assert_eq!(dec.pending_equations(), 0);
    }
}
