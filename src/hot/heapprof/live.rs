//! The heap profile's live set (sampled blocks not yet freed: address, size, weight, record;
//! linear probing with backward-shift deletion, so churn leaves no tombstones) and the address
//! filter that lets an unsampled free skip it: a bit per hash bucket (static, 64 KiB, read
//! lock-free on every free), cleared when the last live sample of its bucket goes. The records
//! live in [`records`].
//!
//! Memory: a shard's table starts at one page of slots and doubles when it is half full, up to
//! [`SHARD_SLOTS`]; each size has its own range of the shard's reservation (capacity c at slots
//! c..2c), so growing copies the entries once (under the shard's lock: at most 4,096 entries at
//! the last doubling, tens of µs on a sampled allocation) and never moves them back, and the pages touched
//! follow the live samples, not the churn. A table of the full size from the start was touched
//! all over by samples coming and going (linear probing at hashed slots): 2.7 MiB of the 4 MiB
//! resident in mariadbd at 64 connections with 42 samples live, and 0.75 MiB more of a count per
//! filter bucket, which is gone (the samples of one bucket share their home slot, so the probe
//! run from it tells whether another one is live).
//!
//! Locking (issue 21 part 5: one global spin-then-yield lock had 3 of 7 mstress threads in
//! `sched_yield` behind a preempted holder): the live set is split by address hash into
//! [`SHARDS`] shards, each a table of its own with its own futex [`Lock`] (waiters sleep, see
//! `lock`); the top bits of an address's hash pick its shard, its filter bucket lies in that
//! shard, so a bucket's bit is only set or cleared under its shard's lock. A sampled allocation takes
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
/// A shard's largest table, slots.
const SHARD_SLOTS: usize = LIVE_SLOTS / SHARDS;
const SHARD_MAX: usize = SHARD_SLOTS / 4 * 3;
/// Slots per 4 KiB page, and a table's first size; a table's pages fit the bits of
/// `Table::written`.
const PAGE_SLOTS: usize = 4096 / core::mem::size_of::<Live>();
const _: () = assert!(SHARD_SLOTS / PAGE_SLOTS <= 64);
/// A shard's reservation: its table of capacity c at slots c..2c, c = PAGE_SLOTS..=SHARD_SLOTS.
const SHARD_RESERVE: usize = 2 * SHARD_SLOTS;

const FILTER_BITS_LOG2: u32 = 19;
// The samples of one filter bucket share their home slot at every table size: the bucket is
// the hash's top bits, the shard and the home slot fewer of them.
const _: () = assert!(SHARD_BITS + SHARD_SLOTS.trailing_zeros() <= FILTER_BITS_LOG2);
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
    /// The shard's reservation ([`SHARD_RESERVE`] slots); the table is at `live + cap`.
    live: *mut Live,
    /// The table's slots: a power of two from PAGE_SLOTS to SHARD_SLOTS (0 until mapped).
    cap: usize,
    nlive: usize,
    /// Bit p set once a sample was written into page p of the table: the walks skip the pages
    /// never written (all zeros), whose reading would map the zero page, one more page-table
    /// entry every later fork copies.
    written: u64,
    /// Estimated bytes in this shard's live blocks, the sum of `scale * size` kept as samples
    /// come and go, per size class of the requested size (`classes::class_of`).
    by_class: [f64; CLASSES],
}

static S: [Shard<Table>; SHARDS] = [const {
    Shard::new(Table { live: core::ptr::null_mut(), cap: 0, nlive: 0, written: 0, by_class: [0.0; CLASSES] })
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
    let live = map(SHARDS * SHARD_RESERVE * core::mem::size_of::<Live>());
    if live.is_null() || !records::map_tables(map) {
        STATE.store(3, Release);
        crate::base::diag::warn!("cannot map the heap profile's tables: heap profiles off");
        return false;
    }
    for (i, s) in S.iter().enumerate() {
        let _l = s.lock.lock();
        // SAFETY: under the lock; each shard gets its own SHARD_RESERVE of the live mapping.
        let t = unsafe { &mut *s.t.get() };
        // SAFETY: (i + 1) * SHARD_RESERVE <= SHARDS * SHARD_RESERVE, the mapping's length.
        t.live = unsafe { live.cast::<Live>().add(i * SHARD_RESERVE) };
        t.cap = PAGE_SLOTS;
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
    /// The table: `cap` slots (the caller holds the shard's lock; the tables are mapped).
    fn table(&self) -> *mut Live {
        // SAFETY: cap <= SHARD_SLOTS, so cap..2cap lies in the shard's reservation.
        unsafe { self.live.add(self.cap) }
    }

    /// The home slot of `addr` in a table of `cap` slots: the hash's bits after the shard's.
    fn slot_of(addr: u64, cap: usize) -> usize {
        let bits = cap.trailing_zeros();
        (hash(addr as usize) >> (64 - SHARD_BITS - bits)) as usize & (cap - 1)
    }

    /// Adds (`sign` 1) or takes away (-1) a live sample's estimated bytes.
    fn account(&mut self, e: &Live, sign: f64) {
        let v = sign * e.scale * e.size as f64;
        // SAFETY: class_of is below CLASSES.
        *unsafe { self.by_class.get_unchecked_mut(class_of(e.size as usize)) } += v;
    }

    /// This shard's live samples (the caller holds its lock), pages never written skipped.
    fn samples(&self) -> impl Iterator<Item = Live> + '_ {
        let t = self.table();
        (0..self.cap)
            .filter(|i| self.written & (1 << (i / PAGE_SLOTS)) != 0)
            // SAFETY: i < cap, within the table.
            .map(move |i| unsafe { *t.add(i) })
            .filter(|e| e.addr != 0)
    }

    /// Puts `e` at the first empty slot from its home in a table of `cap` slots at `t` that
    /// does not hold it; returns the slot.
    ///
    /// # Safety
    /// `t` holds `cap` slots with at least one empty.
    unsafe fn place(t: *mut Live, cap: usize, e: Live) -> usize {
        let mut i = Self::slot_of(e.addr, cap);
        // SAFETY: the caller's; i is masked below cap.
        unsafe {
            while (*t.add(i)).addr != 0 {
                i = (i + 1) & (cap - 1);
            }
            *t.add(i) = e;
        }
        i
    }

    /// Doubles the table (half full): its entries into the next range of the reservation,
    /// untouched so far (zeros). The old range is left as it is, never read again.
    fn grow(&mut self) {
        let (old, cap) = (self.table(), self.cap * 2);
        // SAFETY: cap <= SHARD_SLOTS: the new table lies in the reservation.
        let new = unsafe { self.live.add(cap) };
        let mut written = 0u64;
        for i in (0..self.cap).filter(|i| self.written & (1 << (i / PAGE_SLOTS)) != 0) {
            // SAFETY: i < the old cap; the new table has cap > nlive empty slots.
            unsafe {
                let e = *old.add(i);
                if e.addr != 0 {
                    written |= 1 << (Self::place(new, cap, e) / PAGE_SLOTS);
                }
            }
        }
        (self.cap, self.written) = (cap, written);
    }

    fn insert_live(&mut self, e: Live) -> bool {
        if (self.nlive + 1) * 2 > self.cap && self.cap < SHARD_SLOTS {
            self.grow();
        }
        let (t, cap) = (self.table(), self.cap);
        let mut i = Self::slot_of(e.addr, cap);
        // SAFETY: i < cap (masked); the table is at most 3/4 full, so a free slot is found
        // within cap probes.
        unsafe {
            for _ in 0..cap {
                let s = &mut *t.add(i);
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
                    filter_set(e.addr as usize);
                    self.account(&e, 1.0);
                    *s = e;
                    self.written |= 1 << (i / PAGE_SLOTS);
                    return true;
                }
                i = (i + 1) & (cap - 1);
            }
        }
        false
    }

    fn remove_live(&mut self, addr: u64) -> Option<Live> {
        let (t, cap) = (self.table(), self.cap);
        let mut i = Self::slot_of(addr, cap);
        // SAFETY: indices masked to cap; probes bounded by the table's size.
        unsafe {
            let mut n = 0;
            loop {
                let s = *t.add(i);
                if s.addr == 0 || n == cap {
                    return None;
                }
                if s.addr == addr {
                    break;
                }
                i = (i + 1) & (cap - 1);
                n += 1;
            }
            let out = *t.add(i);
            // Backward-shift deletion: move later entries of the run into the hole when their
            // home slot does not lie cyclically in (hole, j].
            let mut hole = i;
            let mut j = i;
            for _ in 0..cap {
                j = (j + 1) & (cap - 1);
                let s = *t.add(j);
                if s.addr == 0 {
                    break;
                }
                let home = Self::slot_of(s.addr, cap);
                let between = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
                if !between {
                    *t.add(hole) = s;
                    hole = j;
                }
            }
            *t.add(hole) = Live::default();
            self.nlive -= 1;
            NLIVE.fetch_sub(1, Relaxed);
            self.account(&out, -1.0);
            if !self.bucket_held(addr as usize) {
                filter_clear(addr as usize);
            }
            Some(out)
        }
    }

    /// Whether a live sample other than `addr`'s (taken out) shares its filter bucket: those
    /// share its home slot, so they lie in the run of full slots from it.
    fn bucket_held(&self, addr: usize) -> bool {
        let (t, cap, b) = (self.table(), self.cap, bucket(addr));
        let mut i = Self::slot_of(addr as u64, cap);
        for _ in 0..cap {
            // SAFETY: i < cap (masked).
            let a = unsafe { (*t.add(i)).addr };
            if a == 0 {
                return false;
            }
            if bucket(a as usize) == b {
                return true;
            }
            i = (i + 1) & (cap - 1);
        }
        false
    }
}

/// Sets `addr`'s filter bit (under its shard's lock).
fn filter_set(addr: usize) {
    let b = bucket(addr);
    FILTER[b >> 6].fetch_or(1 << (b & 63), Release);
}

/// Clears `addr`'s filter bit (under its shard's lock, no live sample left in its bucket).
fn filter_clear(addr: usize) {
    let b = bucket(addr);
    FILTER[b >> 6].fetch_and(!(1 << (b & 63)), Release);
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

/// Records a sampled block whose stack is `stack` (its id in `super::stacks`; None: the stacks
/// were full).
pub fn insert(addr: usize, size: u64, scale: f64, stack: Option<u32>, tid: u32, role: usize) {
    if !ready() {
        return;
    }
    SAMPLES.fetch_add(1, Relaxed);
    let Some(rec) = stack.and_then(|st| records::sample(st, tid, role, scale, size)) else {
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
    let (nrecs, _, nframes) = records::counts();
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

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
