//! Sampled heap profiles by call site (`MALLOCSHIM_PROF_SAMPLE_BYTES`), as jemalloc and Go take
//! them: each thread counts the bytes it allocates down from a gap drawn from an exponential
//! distribution with the configured mean; the allocation that exhausts the gap is sampled — its
//! stack captured by [`unwind`] and kept in the live set of [`live`] with the unbiased weight
//! `1 / (1 - exp(-size / mean))` (pprof's and Go's) — and a fresh gap is drawn.
//!
//! Owns the per-thread sampler state ([`ThreadProf`], held in the thread's slot: TLS stays a
//! pointer and two counters), the rate (changeable at run time through the C API), and the
//! hooks the front calls. Costs and exceptions to the hot-path rules (in the entry table with
//! heap profiles; a process started with them off runs one without, and pays none of this until
//! `mallocshim_heap_profile_set` turns them on, see `route`):
//! - an unsampled allocation pays one load, compare and store of the slot's byte countdown;
//! - an unsampled free pays one test of a 64 KiB bit filter of the blocks holding samples
//!   ([`live::filter_hit`]); only a hit (a sampled block, or a rare false positive) looks in
//!   the live set;
//! - a sampled allocation, and the free of a sampled block, are out of line: they take the
//!   lock of one shard of each table they update (16 stack shards by frames hash, taken only
//!   for a stack no kept walk names yet ([`stacks`]); 16 record shards by (stack id, tid); 16
//!   live-set shards by address hash), one after the other: each lock held for a table update
//!   only, never across a call that could block, never two at once. The locks are futex
//!   mutexes ([`lock`]): a waiter spins about 100 pauses, then sleeps in FUTEX_WAIT, and a
//!   release that finds a sleeper makes a FUTEX_WAKE. These two syscalls are the exception to "no syscall but the clock": they
//!   happen only on sampled calls (1 per 512 KiB allocated by default) that meet contention,
//!   and sleeping is what keeps a preempted holder from turning its waiters into a
//!   `sched_yield` storm on an oversubscribed machine (the spin-then-yield lock it replaced:
//!   issue 21, part 5). Drawing a gap calls the `libm` crate's `log` (pure Rust: no libm.so); a
//!   thread's first draw seeds from `gettid`, and a forked child's first sample on the forking
//!   thread adopts its slot with one `getpid` (`slots::adopt_if_survivor`). Nothing here
//!   allocates outside the guard.
//!
//! Bounds and failure: the live set holds at most [`live::MAX_LIVE`] sampled blocks and
//! [`live::MAX_RECORDS`] distinct (stack, thread) records in memory taken once from the shim's
//! reservation (`base::region`); beyond them a sample is dropped and counted, never an error.
//! Threads without a slot (exiting, or after the pool is exhausted) and the shim's own calls
//! (guard) are not sampled. A forked child keeps the parent's samples (it keeps its heap) and
//! resets every shard's lock.

pub mod cfi;
mod ehframe;
pub mod live;
mod lock;
mod memo;
mod records;
mod stacks;
pub mod unwind;
mod walks;

use crate::hot::slots::Slot;
use crate::hot::tls::Reentry;
use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The mean gap between samples, in bytes; 0 = off.
static MEAN: AtomicU64 = AtomicU64::new(0);
/// The last non-zero mean (the period of a profile written while sampling is off).
static LAST: AtomicU64 = AtomicU64::new(0);

/// Gap given to threads while profiles are off: they look at the rate again after this many
/// bytes, so turning profiles on reaches every thread without touching its slot.
const RECHECK_BYTES: u64 = 64 << 20;

/// One thread's sampler state, in its slot (the owner writes it with plain relaxed stores).
#[repr(C)]
pub struct ThreadProf {
    /// Bytes left before the next sample; 0 in a fresh slot (the first allocation draws).
    pub left: AtomicU64,
    /// The mean the current gap was drawn with (0: off or not drawn yet).
    armed: AtomicU64,
    /// xorshift64* state for the gaps (0: not seeded).
    rng: AtomicU64,
    /// The owner's stack bounds, recorded when it started (0: unknown).
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    /// For a thread the shim started, the stack pointer of the trampoline's call of its start
    /// routine, where its stacks end ([`thread_started`]); 0 otherwise.
    stack_stop: AtomicUsize,
}

impl ThreadProf {
    pub const fn new() -> ThreadProf {
        ThreadProf {
            left: AtomicU64::new(0),
            armed: AtomicU64::new(0),
            rng: AtomicU64::new(0),
            stack_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
            stack_stop: AtomicUsize::new(0),
        }
    }

    /// Forgets the owner (slot released or folded): the next owner draws and reads its own.
    pub fn reset(&self) {
        for a in [&self.left, &self.armed, &self.rng] {
            a.store(0, Relaxed);
        }
        self.stack_lo.store(0, Relaxed);
        self.stack_hi.store(0, Relaxed);
        self.stack_stop.store(0, Relaxed);
    }
}

impl Default for ThreadProf {
    fn default() -> Self {
        Self::new()
    }
}

/// Initialisation (under the guard): the configured rate, the shim's text range, the tables.
pub fn init(sample_bytes: u64, profile: bool) {
    unwind::init();
    cfi::init();
    if profile && sample_bytes != 0 {
        let _ = set_rate(sample_bytes);
    }
}

/// Maps the tables for a unit test of the stacks or the records (`live::ensure`).
#[cfg(test)]
pub(crate) fn tables_for_tests() -> bool {
    live::ensure()
}

/// The current mean gap in bytes (0 = off).
pub fn rate() -> u64 {
    MEAN.load(Relaxed)
}

/// The heap profile's estimate of live bytes per size class of the requested size, while
/// sampling is on (None when off: the estimate would decay as old samples are freed and no new
/// ones come).
pub fn live_by_class() -> Option<[u64; crate::base::classes::CLASSES]> {
    if rate() == 0 {
        return None;
    }
    live::inuse_by_class()
}

/// One allocating thread's share of the live samples: (tid, start routine, estimated bytes).
pub type ThreadLive = (u32, usize, u64);

/// Bytes held by live sampled blocks per allocating thread, estimated as `live_by_class` is,
/// one entry per (tid, routine): the charge stays with the allocating thread whichever thread
/// frees. None while sampling is off. For the dump (cold: allocates, under the reentrancy
/// guard); samples the walk could not hold (no memory for its buffer) are left out.
pub fn live_by_thread() -> Option<Vec<ThreadLive>> {
    if rate() == 0 {
        return None;
    }
    let (mut v, _left_out) = live::inuse_by_record();
    v.sort_unstable_by_key(|e| e.0);
    let ids: Vec<u32> = v.iter().map(|e| e.0).collect();
    let mut owners = vec![(0u32, 0usize); ids.len()];
    records::owners(&ids, &mut owners);
    let mut sum: std::collections::BTreeMap<(u32, usize), f64> = Default::default();
    for ((_, b), o) in v.iter().zip(owners) {
        *sum.entry(o).or_default() += b;
    }
    Some(sum.into_iter().map(|((t, r), b)| (t, r, b.round() as u64)).collect())
}

/// Sets the mean gap (0 turns sampling off; samples already taken stay until their blocks are
/// freed). Err(ENOMEM) when the tables cannot be mapped.
pub fn set_rate(sample_bytes: u64) -> Result<(), i32> {
    if sample_bytes != 0 && !live::ensure() {
        return Err(libc::ENOMEM);
    }
    if sample_bytes != 0 {
        LAST.store(sample_bytes, Relaxed);
    }
    MEAN.store(sample_bytes, Relaxed);
    Ok(())
}

/// The last non-zero mean gap (0 when sampling never ran).
pub fn last_rate() -> u64 {
    LAST.load(Relaxed)
}

/// Whether frees are tracked: the entry table in force tests every free against the live set
/// (heap profiles on at start, or turned on since). Said in the pprof profile's comments.
pub fn frees_tracked() -> bool {
    crate::hot::route::heap_table()
}

/// The hot path's test, for an allocation of `n` bytes by the slot's owner: true when this
/// allocation exhausts the gap (then the caller makes the call and hands the block to
/// [`sampled`]); otherwise the gap shrinks by `n`.
#[inline(always)]
pub fn countdown(s: &Slot, n: usize) -> bool {
    let left = s.prof.left.load(Relaxed);
    if n as u64 >= left {
        return true;
    }
    s.prof.left.store(left - n as u64, Relaxed);
    false
}

/// A sampled allocation of `n` bytes that returned `p` (null: failed): draws the next gap and,
/// when the gap just ended was drawn at the current rate, records the block with its stack.
#[cold]
#[inline(never)]
pub fn sampled(s: &Slot, p: *mut c_void, n: usize) {
    let _g = Reentry::enter();
    let tp = &s.prof;
    let mean = MEAN.load(Relaxed);
    if mean == 0 {
        tp.armed.store(0, Relaxed);
        tp.left.store(RECHECK_BYTES, Relaxed);
        return;
    }
    if tp.armed.load(Relaxed) != mean {
        // The gap that ended was not drawn at this rate (a fresh slot, or the rate changed):
        // draw one now and let it decide this allocation (gaps are memoryless).
        tp.armed.store(mean, Relaxed);
        let g = draw(tp, mean);
        if (n as u64) < g {
            tp.left.store(g - n as u64, Relaxed);
            return;
        }
    }
    tp.left.store(draw(tp, mean), Relaxed);
    if p.is_null() || n == 0 {
        return;
    }
    let (lo, hi) = stack_bounds(tp);
    let mut frames = [0usize; unwind::MAX_FRAMES];
    // With the stack's id known, the frames are not needed (nor written).
    let (k, stack) = unwind::capture(lo, hi, tp.stack_stop.load(Relaxed), &mut frames);
    let stack = stack.or_else(|| stacks::intern(&frames[..k]));
    let scale = weight(n as f64 / mean as f64);
    // In a forked child, the survivor's slot gets the child's tid before its first record.
    crate::hot::slots::adopt_if_survivor(s);
    live::insert(p as usize, n as u64, scale, stack, s.tid.load(Relaxed), thread_role(s));
}

/// A sample's weight, the blocks it stands for: `1 / (1 - exp(-x))` for a block of `x` mean
/// gaps. Below x = 1/8 (a block under 64 KiB at the default 512 KiB) from its Laurent series
/// `1/x + 1/2 + x/12 - x^3/720` (the next term, x^5/30240, is below 1.2e-9 of the sum there:
/// under a double's rounding of a weight summed over thousands of samples); above, from `libm`.
#[inline]
fn weight(x: f64) -> f64 {
    if x < 0.125 {
        1.0 / x + 0.5 + x * (1.0 / 12.0) - x * x * x * (1.0 / 720.0)
    } else {
        1.0 / (1.0 - libm::exp(-x))
    }
}

/// The thread's start routine (the address the shim's `pthread_create` recorded in its slot),
/// carried by every record as the `start_routine` label; 0 = unknown (the main thread).
#[inline]
fn thread_role(s: &Slot) -> usize {
    s.start_routine.load(Relaxed)
}

/// A gap drawn as 1 + floor(Exp(mean)) bytes.
fn draw(tp: &ThreadProf, mean: u64) -> u64 {
    let mut x = tp.rng.load(Relaxed);
    if x == 0 {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u64;
        x = (crate::base::clock::ticks() ^ tid.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    tp.rng.store(x, Relaxed);
    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
    // u in (0, 1]: never log(0).
    let u = ((r >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
    let g = -libm::log(u) * mean as f64;
    if g >= u64::MAX as f64 / 2.0 {
        u64::MAX / 2
    } else {
        // 1 + floor(Exp): the allocation that crosses the gap's last byte is sampled (`n >=
        // left`); max(1, floor) over-weighted 1-4 byte blocks (60,000 x malloc(1) read 78 KB).
        1 + g as u64
    }
}

/// The owner's stack bounds, as recorded when the thread started (never looked up here: a
/// sampled allocation can be made inside glibc's `pthread_getattr_np`, which holds the thread's
/// lock while it allocates, and looking the bounds up from there deadlocked mariadbd, whose
/// connection threads call it). Unknown bounds give an empty range: the sample is kept, without
/// frames.
fn stack_bounds(tp: &ThreadProf) -> (usize, usize) {
    let hi = tp.stack_hi.load(Relaxed);
    if hi != 0 {
        return (tp.stack_lo.load(Relaxed), hi);
    }
    // The main thread is the one running on the main stack. Told by the stack pointer, not the
    // tid: in a forked child the main thread's stack is the forking thread's, under a new tid
    // (a child of the main thread had "[stack not walked]" samples when this compared tids).
    let here = core::hint::black_box(0u8);
    let sp = &here as *const u8 as usize;
    let (lo, hi) = (MAIN_LO.load(Relaxed), MAIN_HI.load(Relaxed));
    if hi != 0 && sp >= lo && sp < hi {
        return (lo, hi);
    }
    (1, 1)
}

/// The main thread's stack, read by the library constructor.
static MAIN_LO: AtomicUsize = AtomicUsize::new(0);
static MAIN_HI: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's stack (pthread_getattr_np), or None. Only where the thread holds no
/// glibc lock: the library constructor, for the main thread. Under the reentrancy guard (it
/// allocates).
fn own_stack() -> Option<(usize, usize)> {
    let _g = crate::hot::tls::Reentry::enter();
    // SAFETY: a zeroed attr filled by pthread_getattr_np for the calling thread and destroyed
    // after use; the out-pointers are locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = core::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && size > 0).then(|| (addr as usize, addr as usize + size))
    }
}

/// At thread start (the `pthread_create` trampoline): records the new thread's stack `bounds`
/// (worked out by the trampoline without allocating: `cold::thread_start`) in its slot,
/// and `stop`, the trampoline's stack pointer at its call of the start routine: a walk from below
/// it ends at the start routine (above it: the trampoline, glibc's `start_thread` and `clone3`,
/// which say nothing and cost about a tenth of a mariadbd stack's unwinding).
pub fn thread_started(s: &Slot, stop: usize, bounds: Option<(usize, usize)>) {
    if let Some((lo, hi)) = bounds {
        s.prof.stack_lo.store(lo, Relaxed);
        s.prof.stack_hi.store(hi, Relaxed);
        s.prof.stack_stop.store(if stop > lo && stop < hi { stop } else { 0 }, Relaxed);
    }
}

/// From the library constructor, on the main thread: records its stack.
pub fn main_started() {
    if let Some((lo, hi)) = own_stack() {
        MAIN_LO.store(lo, Relaxed);
        MAIN_HI.store(hi, Relaxed);
    }
}

/// The hot path's test on free (and on realloc's old block): true when `p` may hold a sample.
#[inline(always)]
pub fn maybe_sampled(p: *mut c_void) -> bool {
    live::filter_hit(p as usize)
}

/// Takes `p` out of the live set before the backend frees it (so a racing allocation of the
/// same address can never be confused with it). Returns the entry, for realloc to put back.
#[cold]
#[inline(never)]
pub fn forget(p: *mut c_void) -> Option<live::Live> {
    live::remove(p as usize)
}

/// Puts back an entry that [`forget`] took (a realloc that failed and kept the block).
#[cold]
#[inline(never)]
pub fn put_back(e: live::Live) {
    live::reinsert(e);
}

/// Asks every live thread to look at the rate at its next allocation (best effort: a thread
/// that races with it sees the new rate at its next gap's end).
pub fn nudge_threads() {
    crate::hot::slots::for_each(|s, live| {
        if live {
            s.prof.left.store(0, Relaxed);
        }
    });
}
