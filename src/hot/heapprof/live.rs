//! The heap profile's live set (sampled blocks not yet freed: address, size, weight, record;
//! linear probing with backward-shift deletion, so churn leaves no tombstones) and the address
//! filter that lets an unsampled free skip it: a bit per hash bucket (static, 64 KiB, read
//! lock-free on every free) backed by a count per bucket. The records live in [`records`].
//!
//! Locking (issue 21 part 5: one global spin-then-yield lock had 3 of 7 mstress threads in
//! `sched_yield` behind a preempted holder): the live set is split by address hash into
//! [`SHARDS`] shards, each a table of its own with its own futex [`Lock`] (waiters sleep, see
//! `lock`); the top bits of an address's hash pick its shard, its filter bucket lies in that
//! shard, so a bucket's count is only touched under its shard's lock. A sampled allocation takes
//! one record shard's lock then one live shard's, never both at once; a sampled free takes one
//! live shard's. Each lock is held for a table update alone (no call that could block or
//! allocate); a forked child resets every one. The bound is global and exact ([`MAX_LIVE`], one
//! atomic count); a shard refuses past 3/4 of its slots (beyond four times its fair share at the
//! bound: never seen with a uniform hash), counted as dropped like the bound. Never allocates
//! but in [`copy`] and [`inuse_by_record`] (the dump's), outside every lock.
//! Long because: the live set's sharded table with its insert, remove, fork reset and walk, which must agree on one layout.

use super::lock::Shard;
use super::records::{self, SHARDS as REC_SHARDS, SHARD_CAP as REC_CAP};
pub use super::records::{Record, MAX_RECORDS};
use crate::base::classes::{class_of, CLASSES};
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

/// Most sampled blocks alive at once, all shards together (half the slots: probes stay short).
pub const MAX_LIVE: usize = 1 << 16;
/// Live-set shards (a power of two).
pub const SHARDS: usize = 16;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();
const LIVE_SLOTS: usize = MAX_LIVE * 2;
const SHARD_SLOTS: usize = LIVE_SLOTS / SHARDS;
const SHARD_SLOT_BITS: u32 = SHARD_SLOTS.trailing_zeros();
const SHARD_MAX: usize = SHARD_SLOTS / 4 * 3;
/// Slots per 4 KiB page of a shard; a shard's pages fit the bits of `Table::written`.
const PAGE_SLOTS: usize = 4096 / core::mem::size_of::<Live>();
const _: () = assert!(SHARD_SLOTS / PAGE_SLOTS <= 64);

const FILTER_BITS_LOG2: u32 = 19;
const FILTER_WORDS: usize = (1 << FILTER_BITS_LOG2) / 64;

/// One sampled block.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Live {
    /// Block address; 0 = empty slot.
    pub addr: u64,
    /// Bytes requested.
    pub size: u64,
    /// Weight: blocks this sample stands for (`1 / (1 - exp(-size/mean))`).
    pub scale: f64,
    /// Its record: in the tables `shard * records::SHARD_CAP + index`; in a [`Copy`] the index
    /// in `records` (u32::MAX when its record was left out).
    pub rec: u32,
    _pad: u32,
}

/// Bit filter read by every free: a set bit means some live sample hashes to it.
static FILTER: [AtomicU64; FILTER_WORDS] = [const { AtomicU64::new(0) }; FILTER_WORDS];

/// What could not be kept.
pub static DROPPED_LIVE: AtomicU64 = AtomicU64::new(0);
pub static DROPPED_RECORDS: AtomicU64 = AtomicU64::new(0);
/// Samples taken since start.
pub static SAMPLES: AtomicU64 = AtomicU64::new(0);
/// Sampled blocks held, all shards together (the exact bound).
static NLIVE: AtomicUsize = AtomicUsize::new(0);

struct Table {
    live: *mut Live,
    nlive: usize,
    /// Bit p set once a sample was written into page p of this shard's slots: the walks skip
    /// the pages never written (all zeros), whose reading would map the zero page, one more
    /// page-table entry every later fork copies.
    written: u64,
    /// The filter's count per bucket (all buckets; this shard touches only its own).
    counts: *mut u16,
    /// Estimated bytes in this shard's live blocks, the sum of `scale * size` kept as samples
    /// come and go, per size class of the requested size (`classes::class_of`).
    by_class: [f64; CLASSES],
}

static S: [Shard<Table>; SHARDS] = [const {
    Shard::new(Table {
        live: core::ptr::null_mut(),
        nlive: 0,
        written: 0,
        counts: core::ptr::null_mut(),
        by_class: [0.0; CLASSES],
    })
}; SHARDS];

/// 0 unmapped, 1 mapping, 2 ready, 3 failed.
static STATE: AtomicU8 = AtomicU8::new(0);

/// In a forked child: the threads that held the locks do not exist here.
pub fn after_fork_child() {
    for s in &S {
        s.lock.reset();
    }
    records::after_fork_child();
}

#[link_section = ".text.mallocshim_fork"]
extern "C" fn atfork_child() {
    after_fork_child();
}

#[inline(always)]
fn hash(addr: usize) -> u64 {
    (addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline(always)]
fn bucket(addr: usize) -> usize {
    (hash(addr) >> (64 - FILTER_BITS_LOG2)) as usize
}

/// The shard of `addr`: the top bits of its hash (so of its filter bucket too).
#[inline]
fn shard_of(addr: u64) -> &'static Shard<Table> {
    &S[(hash(addr as usize) >> (64 - SHARD_BITS)) as usize]
}

/// True when some live sample hashes to `addr`'s filter bit.
#[inline(always)]
pub fn filter_hit(addr: usize) -> bool {
    let b = bucket(addr);
    // SAFETY: b >> 6 < FILTER_WORDS by construction of `bucket`.
    let w = unsafe { FILTER.get_unchecked(b >> 6) };
    w.load(Relaxed) & (1u64 << (b & 63)) != 0
}

fn map(bytes: usize) -> *mut u8 {
    // Zero-filled and never unmapped (the shim's reservation, `base::region`).
    crate::base::region::take(bytes).cast()
}

/// Maps the tables once (under the guard). False when they cannot be.
pub fn ensure() -> bool {
    loop {
        match STATE.compare_exchange(0, 1, AcqRel, Acquire) {
            Ok(_) => break,
            Err(2) => return true,
            Err(3) => return false,
            Err(_) => core::hint::spin_loop(),
        }
    }
    let [rb, hb, fb] = records::sizes();
    let live = map(LIVE_SLOTS * core::mem::size_of::<Live>());
    let (recs, heads, frames) = (map(rb), map(hb), map(fb));
    let counts = map((1 << FILTER_BITS_LOG2) * 2);
    if [live, recs, heads, frames, counts].iter().any(|p| p.is_null()) {
        STATE.store(3, Release);
        crate::base::diag::warn!("cannot map the heap profile's tables: heap profiles off");
        return false;
    }
    records::attach(recs, heads, frames);
    for (i, s) in S.iter().enumerate() {
        let _l = s.lock.lock();
        // SAFETY: under the lock; each shard gets its own SHARD_SLOTS of the live mapping.
        let t = unsafe { &mut *s.t.get() };
        // SAFETY: i * SHARD_SLOTS + SHARD_SLOTS <= LIVE_SLOTS, the mapping's length.
        t.live = unsafe { live.cast::<Live>().add(i * SHARD_SLOTS) };
        t.counts = counts.cast();
    }
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
    STATE.store(2, Release);
    true
}

fn ready() -> bool {
    STATE.load(Acquire) == 2
}

impl Table {
    fn slot_of(addr: u64) -> usize {
        (hash(addr as usize) >> (64 - SHARD_BITS - SHARD_SLOT_BITS)) as usize & (SHARD_SLOTS - 1)
    }

    /// Adds (`sign` 1) or takes away (-1) a live sample's estimated bytes.
    fn account(&mut self, e: &Live, sign: f64) {
        let v = sign * e.scale * e.size as f64;
        // SAFETY: class_of is below CLASSES.
        *unsafe { self.by_class.get_unchecked_mut(class_of(e.size as usize)) } += v;
    }

    /// This shard's live samples (the caller holds its lock), pages never written skipped.
    fn samples(&self) -> impl Iterator<Item = Live> + '_ {
        (0..SHARD_SLOTS)
            .filter(|i| self.written & (1 << (i / PAGE_SLOTS)) != 0)
            // SAFETY: i < SHARD_SLOTS, within the shard's part of the live mapping.
            .map(|i| unsafe { *self.live.add(i) })
            .filter(|e| e.addr != 0)
    }

    fn insert_live(&mut self, e: Live) -> bool {
        let mut i = Self::slot_of(e.addr);
        // SAFETY: i < SHARD_SLOTS (masked); the shard is at most 3/4 full, so a free slot is
        // found within SHARD_SLOTS probes.
        unsafe {
            for _ in 0..SHARD_SLOTS {
                let s = &mut *self.live.add(i);
                if s.addr == e.addr {
                    let old = *s;
                    self.account(&old, -1.0);
                    self.account(&e, 1.0);
                    *s = e;
                    return true;
                }
                if s.addr == 0 {
                    if self.nlive >= SHARD_MAX
                        || NLIVE.fetch_update(Relaxed, Relaxed, |n| (n < MAX_LIVE).then_some(n + 1)).is_err()
                    {
                        return false;
                    }
                    self.nlive += 1;
                    self.filter_add(e.addr as usize);
                    self.account(&e, 1.0);
                    *s = e;
                    self.written |= 1 << (i / PAGE_SLOTS);
                    return true;
                }
                i = (i + 1) & (SHARD_SLOTS - 1);
            }
        }
        false
    }

    fn remove_live(&mut self, addr: u64) -> Option<Live> {
        let mut i = Self::slot_of(addr);
        // SAFETY: indices masked to SHARD_SLOTS; probes bounded by the shard's size.
        unsafe {
            let mut n = 0;
            loop {
                let s = *self.live.add(i);
                if s.addr == 0 || n == SHARD_SLOTS {
                    return None;
                }
                if s.addr == addr {
                    break;
                }
                i = (i + 1) & (SHARD_SLOTS - 1);
                n += 1;
            }
            let out = *self.live.add(i);
            // Backward-shift deletion: move later entries of the run into the hole when their
            // home slot does not lie cyclically in (hole, j].
            let mut hole = i;
            let mut j = i;
            for _ in 0..SHARD_SLOTS {
                j = (j + 1) & (SHARD_SLOTS - 1);
                let s = *self.live.add(j);
                if s.addr == 0 {
                    break;
                }
                let home = Self::slot_of(s.addr);
                let between = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
                if !between {
                    *self.live.add(hole) = s;
                    hole = j;
                }
            }
            *self.live.add(hole) = Live::default();
            self.nlive -= 1;
            NLIVE.fetch_sub(1, Relaxed);
            self.account(&out, -1.0);
            self.filter_remove(addr as usize);
            Some(out)
        }
    }

    fn filter_add(&mut self, addr: usize) {
        let b = bucket(addr);
        // SAFETY: b < 2^FILTER_BITS_LOG2, the size of `counts`; bucket b lies in this shard.
        let c = unsafe { &mut *self.counts.add(b) };
        *c = c.saturating_add(1);
        FILTER[b >> 6].fetch_or(1 << (b & 63), Release);
    }

    fn filter_remove(&mut self, addr: usize) {
        let b = bucket(addr);
        // SAFETY: as in `filter_add`.
        let c = unsafe { &mut *self.counts.add(b) };
        // A saturated count stays set (a false positive forever, never a miss).
        if *c != u16::MAX {
            *c = c.saturating_sub(1);
            if *c == 0 {
                FILTER[b >> 6].fetch_and(!(1 << (b & 63)), Release);
            }
        }
    }
}

/// Puts `e` in its shard's table; counts it as dropped when it cannot be.
fn put(e: Live) {
    let s = shard_of(e.addr);
    let ok = {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        unsafe { &mut *s.t.get() }.insert_live(e)
    };
    if !ok {
        DROPPED_LIVE.fetch_add(1, Relaxed);
    }
}

/// Records a sampled block.
pub fn insert(addr: usize, size: u64, scale: f64, frames: &[usize], tid: u32, role: usize) {
    if !ready() {
        return;
    }
    SAMPLES.fetch_add(1, Relaxed);
    let Some(rec) = records::sample(frames, tid, role, scale, size) else {
        DROPPED_RECORDS.fetch_add(1, Relaxed);
        return;
    };
    put(Live { addr: addr as u64, size, scale, rec, _pad: 0 });
}

/// Takes `addr` out of the live set (None when it holds no sample).
pub fn remove(addr: usize) -> Option<Live> {
    if !ready() {
        return None;
    }
    let s = shard_of(addr as u64);
    let _l = s.lock.lock();
    // SAFETY: under the shard's lock.
    unsafe { &mut *s.t.get() }.remove_live(addr as u64)
}

/// Puts back an entry that [`remove`] took.
pub fn reinsert(e: Live) {
    if ready() {
        put(e);
    }
}

/// The estimated bytes in live blocks per size class of the requested size; None until the
/// tables exist. Takes each shard's lock for one copy of CLASSES numbers.
pub fn inuse_by_class() -> Option<[u64; CLASSES]> {
    if !ready() {
        return None;
    }
    let mut c = [0f64; CLASSES];
    for s in &S {
        let b = {
            let _l = s.lock.lock();
            // SAFETY: under the shard's lock.
            unsafe { &*s.t.get() }.by_class
        };
        c.iter_mut().zip(b).for_each(|(x, y)| *x += y);
    }
    Some(c.map(|v| v.max(0.0) as u64))
}

/// Each live sample's record id and estimated bytes (`scale * size`), for a sum per thread.
/// The caller runs under the reentrancy guard: the buffer is allocated (fallibly) before any
/// lock is taken and never grown under one; the bool is true when samples were left out (no
/// memory, or more arrived during the walk than the margin holds).
pub fn inuse_by_record() -> (Vec<(u32, f64)>, bool) {
    let mut v: Vec<(u32, f64)> = Vec::new();
    if !ready() {
        return (v, false);
    }
    let n = NLIVE.load(Relaxed);
    if v.try_reserve_exact((n + n / 8 + 64).min(MAX_LIVE)).is_err() {
        return (v, true);
    }
    for s in &S {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        let t = unsafe { &*s.t.get() };
        for e in t.samples() {
            if v.len() == v.capacity() {
                return (v, true);
            }
            v.push((e.rec, e.scale * e.size as f64));
        }
    }
    (v, false)
}

/// A copy of the tables for a dump: records with their frames, and the live blocks.
#[derive(Default)]
pub struct Copy {
    pub records: Vec<Record>,
    pub frames: Vec<usize>,
    pub live: Vec<Live>,
    /// Memory ran out for the copy (its buffers could not be allocated, or the tables grew past
    /// them between the two looks): what is here is a consistent prefix, the rest left out.
    pub left_out: bool,
}

/// Copies the tables (the caller runs under the reentrancy guard: this allocates, before
/// taking any lock). The buffers are sized from the tables' counts plus a margin for what
/// arrives meanwhile, and allocated fallibly: a dump asked for when memory has run out gets
/// an empty or partial copy marked [`Copy::left_out`], never an abort. Under a lock nothing
/// allocates: every push stays within the capacity reserved. Shards are copied one after the
/// other (each consistent; together, as of a moment during the copy): the live set first, then
/// the records, so that every live block copied finds its record (records are append-only).
pub fn copy() -> Copy {
    let mut c = Copy::default();
    if !ready() {
        return c;
    }
    let (nrecs, nframes) = records::counts();
    let nlive = NLIVE.load(Relaxed);
    let margin = |n: usize, cap: usize| (n + n / 8 + 64).min(cap);
    if c.records.try_reserve_exact(margin(nrecs, MAX_RECORDS)).is_err()
        || c.frames.try_reserve_exact(margin(nframes, MAX_RECORDS * super::unwind::MAX_FRAMES)).is_err()
        || c.live.try_reserve_exact(margin(nlive, MAX_LIVE)).is_err()
    {
        return Copy { left_out: true, ..Copy::default() };
    }
    'shards: for s in &S {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        let t = unsafe { &*s.t.get() };
        for e in t.samples() {
            if c.live.len() == c.live.capacity() {
                c.left_out = true;
                break 'shards;
            }
            c.live.push(e);
        }
    }
    let (mut first, mut n) = ([0u32; REC_SHARDS], [0u32; REC_SHARDS]);
    c.left_out |= records::copy_into(&mut c.records, &mut c.frames, &mut first, &mut n);
    for e in &mut c.live {
        let (k, i) = (e.rec as usize / REC_CAP, (e.rec as usize % REC_CAP) as u32);
        e.rec = if i < n[k] { first[k] + i } else { u32::MAX };
    }
    c
}
