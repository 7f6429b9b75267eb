//! The hot path's front: what every exported entry point does around the C semantics — count
//! the call per entry point, op and size class for the calling thread, and on 1 call in
//! `MALLOCSHIM_SAMPLE` time it with the cheap clock into the thread's and the size class's
//! latency buckets. Skipped when profiling is off or the shim itself is calling (guard).
//! Never allocates, locks, panics or makes a syscall other than the clock.

use crate::classes::{bucket_of, class_of, Op};
use crate::slots::{self, Entry, Slot, CLASS_HIST, CLASS_MAX};
use crate::{clock, csem, tls};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

static PROFILE: AtomicBool = AtomicBool::new(false);
static SAMPLE_EVERY: AtomicU32 = AtomicU32::new(64);

/// Turns recording on or off and sets the sampling period (initialisation).
pub fn set_profile(on: bool, sample_every: u32) {
    SAMPLE_EVERY.store(sample_every.max(1), Relaxed);
    PROFILE.store(on, Relaxed);
}

/// One call being recorded.
struct Rec {
    slot: *mut Slot,
    /// The slot is the shared EXITED sink: add atomically.
    shared: bool,
    /// Clock reading before the call, 0 when this call is not sampled.
    t0: u64,
}

#[inline(always)]
fn bump(c: &AtomicU64, v: u64, shared: bool) {
    if shared {
        c.fetch_add(v, Relaxed);
    } else {
        // Only the owning thread writes its slot: a plain load+store, no lock prefix.
        c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
    }
}

#[inline(always)]
fn start(e: Entry) -> Option<Rec> {
    let st = tls::state();
    // SAFETY: `st` is this thread's TLS block; the slot is claimed for this thread or EXITED,
    // both live for the life of the process; `e` indexes within ENTRIES.
    unsafe {
        if (*st).guard != 0 {
            return None;
        }
        let mut s = (*st).slot;
        if s.is_null() {
            s = slots::claim(st);
        }
        let shared = s == slots::exited_ptr();
        bump((*s).calls.get_unchecked(e as usize), 1, shared);
        let cd = (*st).countdown;
        let t0 = if cd == 0 {
            if crate::worker::dump_pending() {
                crate::worker::write_pending();
            }
            let t = clock::ticks() | 1;
            // The next period is drawn from [N/2, 3N/2) with the clock's low bits (mean N), so a
            // strictly alternating pattern (malloc, free, malloc...) samples every op.
            let n = SAMPLE_EVERY.load(Relaxed);
            (*st).countdown = if n > 1 { n / 2 + ((t >> 4) as u32 % n) } else { 0 };
            t
        } else {
            (*st).countdown = cd - 1;
            0
        };
        Some(Rec { slot: s, shared, t0 })
    }
}

#[inline(always)]
fn finish(r: Rec, op: Op, size: usize) {
    let c = class_of(size);
    let o = op as usize;
    // SAFETY: `r.slot` as in `start`; `o` < OPS, `c` < CLASSES and buckets < BUCKETS by
    // construction of `Op`, `class_of` and `bucket_of`.
    unsafe {
        let s = &*r.slot;
        bump(s.count.get_unchecked(o).get_unchecked(c), 1, r.shared);
        bump(s.bytes.get_unchecked(o).get_unchecked(c), size as u64, r.shared);
        if r.t0 != 0 {
            sample(s, r.shared, o, c, clock::ticks().wrapping_sub(r.t0));
        }
    }
}

#[cold]
#[inline(never)]
fn sample(s: &Slot, shared: bool, o: usize, c: usize, d: u64) {
    let b = bucket_of(d);
    // SAFETY: indices in range (see `finish`).
    unsafe {
        bump(s.hist.get_unchecked(o).get_unchecked(b), 1, shared);
        let m = s.max.get_unchecked(o);
        if d > m.load(Relaxed) {
            if shared {
                m.fetch_max(d, Relaxed);
            } else {
                m.store(d, Relaxed);
            }
        }
        CLASS_HIST.get_unchecked(o).get_unchecked(c).get_unchecked(b).fetch_add(1, Relaxed);
        CLASS_MAX.get_unchecked(o).get_unchecked(c).fetch_max(d, Relaxed);
    }
}

/// Records `call` as entry `e`, op `op`, for a size of `size` bytes. The recording path is a
/// separate, non-inlined function so that the unrecorded path (profiling off) stays a flag test
/// and a tail call, without the recording path's register saves.
macro_rules! recorded {
    ($e:expr, $op:expr, $size:expr, $call:expr) => {
        if PROFILE.load(Relaxed) {
            recording($e, $op, $size, || $call)
        } else {
            $call
        }
    };
}

#[inline(never)]
fn recording<R>(e: Entry, op: Op, size: usize, call: impl FnOnce() -> R) -> R {
    match start(e) {
        None => call(),
        Some(r) => {
            let out = call();
            finish(r, op, size);
            out
        }
    }
}

#[inline(always)]
pub unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Malloc, Op::Malloc, size, unsafe { csem::malloc(size) })
}

#[inline(always)]
pub unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Calloc, Op::Calloc, n.saturating_mul(size), unsafe { csem::calloc(n, size) })
}

#[inline(always)]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Realloc, Op::Realloc, size, unsafe { csem::realloc(p, size) })
}

pub unsafe fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Reallocarray, Op::Realloc, n.saturating_mul(size), unsafe { csem::reallocarray(p, n, size) })
}

/// Free and its sized variants: the size class is the block's usable size, read before the free.
#[inline(always)]
unsafe fn free_as(e: Entry, p: *mut c_void) {
    if PROFILE.load(Relaxed) {
        // SAFETY: forwarded C contract.
        unsafe { free_recording(e, p) }
    } else {
        // SAFETY: forwarded C contract.
        unsafe { csem::free(p) }
    }
}

#[inline(never)]
unsafe fn free_recording(e: Entry, p: *mut c_void) {
    match start(e) {
        None => {
            // SAFETY: forwarded C contract.
            unsafe { csem::free(p) }
        }
        Some(mut r) => {
            // SAFETY: `p` is NULL or a live block (the program's contract).
            let size = unsafe { csem::usable_size(p) };
            if r.t0 != 0 {
                r.t0 = clock::ticks() | 1;
            }
            // SAFETY: forwarded C contract.
            unsafe { csem::free(p) };
            finish(r, Op::Free, size);
        }
    }
}

#[inline(always)]
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: forwarded C contract.
    unsafe { free_as(Entry::Free, p) }
}

pub unsafe fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded C contract.
    unsafe { free_as(Entry::FreeSized, p) }
}

pub unsafe fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    // SAFETY: forwarded C contract.
    unsafe { free_as(Entry::FreeAlignedSized, p) }
}

pub unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: forwarded C contract.
    recorded!(Entry::PosixMemalign, Op::Memalign, size, unsafe { csem::posix_memalign(out, align, size) })
}

pub unsafe fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::AlignedAlloc, Op::Memalign, size, unsafe { csem::aligned_alloc(align, size) })
}

pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Memalign, Op::Memalign, size, unsafe { csem::memalign(align, size) })
}

pub unsafe fn valloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Valloc, Op::Memalign, size, unsafe { csem::valloc(size) })
}

pub unsafe fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    recorded!(Entry::Pvalloc, Op::Memalign, size, unsafe { csem::pvalloc(size) })
}

/// Counted per entry point only (it is not an allocation op).
pub unsafe fn malloc_usable_size(p: *mut c_void) -> usize {
    if PROFILE.load(Relaxed) {
        let _ = start(Entry::MallocUsableSize);
    }
    // SAFETY: forwarded C contract.
    unsafe { csem::usable_size(p) }
}
