//! The heap profile's tables, in memory mapped once (MAP_NORESERVE: pages are touched as they
//! fill): the live set (sampled blocks not yet freed: address, size, weight, record; linear
//! probing with backward-shift deletion, so churn leaves no tombstones), the records (one per
//! distinct stack and thread, with the weighted allocation totals; append-only), their frames,
//! and the address filter that lets an unsampled free skip the live set: a bit per hash bucket
//! (static, 64 KiB, read lock-free on every free) backed by a count per bucket (updated under
//! the lock, so a bucket's bit clears when its last sample goes).
//! Every update happens under one spin lock, held for the table update alone (no call that
//! could block or allocate); a forked child resets it. Never allocates.

use crate::base::classes::{class_of, CLASSES};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};

/// Most sampled blocks alive at once (half the live table: probes stay short).
pub const MAX_LIVE: usize = 1 << 16;
const LIVE_SLOTS: usize = MAX_LIVE * 2;
/// Most distinct (stack, thread) records.
pub const MAX_RECORDS: usize = 1 << 15;
const REC_BUCKETS: usize = 1 << 16;
const FRAMES_CAP: usize = MAX_RECORDS * super::unwind::MAX_FRAMES;

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
    /// Index of its record.
    pub rec: u32,
    _pad: u32,
}

/// One (stack, thread) pair: where its frames are and what was allocated there.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Record {
    pub hash: u64,
    pub frames_at: u32,
    pub nframes: u32,
    pub tid: u32,
    /// Next record in the same hash bucket (+1; 0 = none).
    next: u32,
    /// The thread's start routine (0 = unknown).
    pub role: usize,
    /// Weighted objects and bytes ever sampled here.
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
}

/// Bit filter read by every free: a set bit means some live sample hashes to it.
static FILTER: [AtomicU64; FILTER_WORDS] = [const { AtomicU64::new(0) }; FILTER_WORDS];

/// What could not be kept.
pub static DROPPED_LIVE: AtomicU64 = AtomicU64::new(0);
pub static DROPPED_RECORDS: AtomicU64 = AtomicU64::new(0);
/// Samples taken since start.
pub static SAMPLES: AtomicU64 = AtomicU64::new(0);

struct Tables {
    live: *mut Live,
    nlive: usize,
    recs: *mut Record,
    nrecs: usize,
    heads: *mut u32,
    frames: *mut usize,
    nframes: usize,
    counts: *mut u16,
    /// Estimated bytes in live blocks: the sum of `scale * size` over the live set, kept as
    /// samples come and go (pprof's inuse_space of the whole profile).
    inuse: f64,
    /// The same per size class of the requested size (`classes::class_of`).
    by_class: [f64; CLASSES],
}

struct Shared(core::cell::UnsafeCell<Tables>);
// SAFETY: every access to the tables goes through `lock()`.
unsafe impl Sync for Shared {}

static T: Shared = Shared(core::cell::UnsafeCell::new(Tables {
    live: core::ptr::null_mut(),
    nlive: 0,
    recs: core::ptr::null_mut(),
    nrecs: 0,
    heads: core::ptr::null_mut(),
    frames: core::ptr::null_mut(),
    nframes: 0,
    counts: core::ptr::null_mut(),
    inuse: 0.0,
    by_class: [0.0; CLASSES],
}));

static LOCK: AtomicBool = AtomicBool::new(false);
/// 0 unmapped, 1 mapping, 2 ready, 3 failed.
static STATE: AtomicU8 = AtomicU8::new(0);

struct Held;

impl Drop for Held {
    fn drop(&mut self) {
        LOCK.store(false, Release);
    }
}

fn lock() -> Held {
    let mut spins = 0u32;
    while LOCK.swap(true, Acquire) {
        spins += 1;
        if spins < 128 {
            core::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    Held
}

/// In a forked child: the thread that held the lock does not exist here.
pub fn after_fork_child() {
    LOCK.store(false, Release);
}

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

/// True when some live sample hashes to `addr`'s filter bit.
#[inline(always)]
pub fn filter_hit(addr: usize) -> bool {
    let b = bucket(addr);
    // SAFETY: b >> 6 < FILTER_WORDS by construction of `bucket`.
    let w = unsafe { FILTER.get_unchecked(b >> 6) };
    w.load(Relaxed) & (1u64 << (b & 63)) != 0
}

fn map(bytes: usize) -> *mut u8 {
    // Zero-filled and never unmapped.
    crate::base::sys::map_anon(bytes, true).cast()
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
    let live = map(LIVE_SLOTS * core::mem::size_of::<Live>());
    let recs = map(MAX_RECORDS * core::mem::size_of::<Record>());
    let heads = map(REC_BUCKETS * 4);
    let frames = map(FRAMES_CAP * core::mem::size_of::<usize>());
    let counts = map((1 << FILTER_BITS_LOG2) * 2);
    if [live, recs, heads, frames, counts].iter().any(|p| p.is_null()) {
        STATE.store(3, Release);
        crate::base::diag::warn!("cannot map the heap profile's tables: heap profiles off");
        return false;
    }
    {
        let _l = lock();
        // SAFETY: under the lock; the mappings are ours for the life of the process.
        let t = unsafe { &mut *T.0.get() };
        t.live = live.cast();
        t.recs = recs.cast();
        t.heads = heads.cast();
        t.frames = frames.cast();
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

fn stack_hash(frames: &[usize], tid: u32) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ tid as u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

impl Tables {
    /// The record of (frames, tid), created when new; None when the records are full.
    fn record(&mut self, frames: &[usize], tid: u32, role: usize) -> Option<usize> {
        let h = stack_hash(frames, tid);
        let b = (h as usize) & (REC_BUCKETS - 1);
        // SAFETY: heads has REC_BUCKETS entries, recs MAX_RECORDS, frames FRAMES_CAP; every
        // index is checked against those bounds.
        unsafe {
            let mut i = *self.heads.add(b);
            let mut guard = 0;
            while i != 0 && guard < MAX_RECORDS {
                let r = &*self.recs.add(i as usize - 1);
                if r.hash == h && r.tid == tid && r.nframes as usize == frames.len() {
                    let f = core::slice::from_raw_parts(self.frames.add(r.frames_at as usize), frames.len());
                    if f == frames {
                        return Some(i as usize - 1);
                    }
                }
                i = r.next;
                guard += 1;
            }
            if self.nrecs >= MAX_RECORDS || self.nframes + frames.len() > FRAMES_CAP {
                return None;
            }
            let at = self.nframes;
            core::ptr::copy_nonoverlapping(frames.as_ptr(), self.frames.add(at), frames.len());
            self.nframes += frames.len();
            let idx = self.nrecs;
            *self.recs.add(idx) = Record {
                hash: h,
                frames_at: at as u32,
                nframes: frames.len() as u32,
                tid,
                next: *self.heads.add(b),
                role,
                alloc_objects: 0.0,
                alloc_bytes: 0.0,
            };
            *self.heads.add(b) = idx as u32 + 1;
            self.nrecs += 1;
            Some(idx)
        }
    }

    fn slot_of(addr: u64) -> usize {
        (hash(addr as usize) >> (64 - (LIVE_SLOTS.trailing_zeros()))) as usize
    }

    /// Adds (`sign` 1) or takes away (-1) a live sample's estimated bytes.
    fn account(&mut self, e: &Live, sign: f64) {
        let v = sign * e.scale * e.size as f64;
        self.inuse += v;
        // SAFETY: class_of is below CLASSES.
        *unsafe { self.by_class.get_unchecked_mut(class_of(e.size as usize)) } += v;
    }

    fn insert_live(&mut self, e: Live) -> bool {
        if self.nlive >= MAX_LIVE {
            return false;
        }
        let mut i = Self::slot_of(e.addr);
        // SAFETY: i < LIVE_SLOTS (masked); the table is half empty at worst, so a free slot
        // is found within LIVE_SLOTS probes.
        unsafe {
            for _ in 0..LIVE_SLOTS {
                let s = &mut *self.live.add(i);
                if s.addr == 0 || s.addr == e.addr {
                    if s.addr == 0 {
                        self.nlive += 1;
                        self.filter_add(e.addr as usize);
                    } else {
                        let old = *s;
                        self.account(&old, -1.0);
                    }
                    self.account(&e, 1.0);
                    *s = e;
                    return true;
                }
                i = (i + 1) & (LIVE_SLOTS - 1);
            }
        }
        false
    }

    fn remove_live(&mut self, addr: u64) -> Option<Live> {
        let mut i = Self::slot_of(addr);
        // SAFETY: indices masked to LIVE_SLOTS; probes bounded by the table size.
        unsafe {
            let mut n = 0;
            loop {
                let s = *self.live.add(i);
                if s.addr == 0 || n == LIVE_SLOTS {
                    return None;
                }
                if s.addr == addr {
                    break;
                }
                i = (i + 1) & (LIVE_SLOTS - 1);
                n += 1;
            }
            let out = *self.live.add(i);
            // Backward-shift deletion: move later entries of the run into the hole when their
            // home slot does not lie cyclically in (hole, j].
            let mut hole = i;
            let mut j = i;
            for _ in 0..LIVE_SLOTS {
                j = (j + 1) & (LIVE_SLOTS - 1);
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
            self.account(&out, -1.0);
            self.filter_remove(addr as usize);
            Some(out)
        }
    }

    fn filter_add(&mut self, addr: usize) {
        let b = bucket(addr);
        // SAFETY: b < 2^FILTER_BITS_LOG2, the size of `counts`.
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

/// Records a sampled block.
pub fn insert(addr: usize, size: u64, scale: f64, frames: &[usize], tid: u32, role: usize) {
    if !ready() {
        return;
    }
    SAMPLES.fetch_add(1, Relaxed);
    let _l = lock();
    // SAFETY: under the lock.
    let t = unsafe { &mut *T.0.get() };
    let Some(rec) = t.record(frames, tid, role) else {
        DROPPED_RECORDS.fetch_add(1, Relaxed);
        return;
    };
    // SAFETY: rec < nrecs.
    let r = unsafe { &mut *t.recs.add(rec) };
    r.alloc_objects += scale;
    r.alloc_bytes += scale * size as f64;
    let e = Live { addr: addr as u64, size, scale, rec: rec as u32, _pad: 0 };
    if !t.insert_live(e) {
        DROPPED_LIVE.fetch_add(1, Relaxed);
    }
}

/// Takes `addr` out of the live set (None when it holds no sample).
pub fn remove(addr: usize) -> Option<Live> {
    if !ready() {
        return None;
    }
    let _l = lock();
    // SAFETY: under the lock.
    unsafe { &mut *T.0.get() }.remove_live(addr as u64)
}

/// Puts back an entry that [`remove`] took.
pub fn reinsert(e: Live) {
    if !ready() {
        return;
    }
    let _l = lock();
    // SAFETY: under the lock.
    if !unsafe { &mut *T.0.get() }.insert_live(e) {
        DROPPED_LIVE.fetch_add(1, Relaxed);
    }
}

/// The estimated bytes in live blocks (the weighted sum over the live set, as pprof's
/// inuse_space): None until the tables exist. Takes the lock for one read.
pub fn inuse_bytes() -> Option<u64> {
    if !ready() {
        return None;
    }
    let _l = lock();
    // SAFETY: under the lock.
    Some(unsafe { &*T.0.get() }.inuse.max(0.0) as u64)
}

/// The estimated bytes in live blocks per size class of the requested size; None until the
/// tables exist. Takes the lock for one copy of CLASSES numbers.
pub fn inuse_by_class() -> Option<[u64; CLASSES]> {
    if !ready() {
        return None;
    }
    let c = {
        let _l = lock();
        // SAFETY: under the lock.
        unsafe { &*T.0.get() }.by_class
    };
    Some(c.map(|v| v.max(0.0) as u64))
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
/// taking the lock). The buffers are sized from the tables' counts plus a margin for what
/// arrives meanwhile, and allocated fallibly: a dump asked for when memory has run out gets
/// an empty or partial copy marked [`Copy::left_out`], never an abort. Under the lock nothing
/// allocates: every push stays within the capacity reserved.
pub fn copy() -> Copy {
    let mut c = Copy::default();
    if !ready() {
        return c;
    }
    let (nrecs, nframes, nlive) = {
        let _l = lock();
        // SAFETY: under the lock.
        let t = unsafe { &*T.0.get() };
        (t.nrecs, t.nframes, t.nlive)
    };
    let margin = |n: usize, cap: usize| (n + n / 8 + 64).min(cap);
    if c.records.try_reserve_exact(margin(nrecs, MAX_RECORDS)).is_err()
        || c.frames.try_reserve_exact(margin(nframes, FRAMES_CAP)).is_err()
        || c.live.try_reserve_exact(margin(nlive, MAX_LIVE)).is_err()
    {
        return Copy { left_out: true, ..Copy::default() };
    }
    let _l = lock();
    // SAFETY: under the lock; reads within the counts the tables hold; every copy stays within
    // the capacity reserved above (records and frames are append-only, so a prefix is whole).
    unsafe {
        let t = &*T.0.get();
        let nr = t.nrecs.min(c.records.capacity());
        let nf = t.nframes.min(c.frames.capacity());
        c.left_out = nr < t.nrecs || nf < t.nframes;
        c.records.extend_from_slice(core::slice::from_raw_parts(t.recs, nr));
        c.frames.extend_from_slice(core::slice::from_raw_parts(t.frames, nf));
        for i in 0..LIVE_SLOTS {
            let e = *t.live.add(i);
            if e.addr != 0 {
                if c.live.len() == c.live.capacity() {
                    c.left_out = true;
                    break;
                }
                c.live.push(e);
            }
        }
    }
    c
}
