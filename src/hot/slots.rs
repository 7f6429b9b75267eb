//! Per-thread recording slots: a pool of cache-line-aligned slots in chunks taken from the
//! shim's reservation (`base::region`), claimed lock-free on a thread's first recorded call and
//! released by a pthread_key destructor that folds the counts into the `EXITED` aggregate, so
//! thread churn loses no count and grows no memory.
//! Calls made after a thread's slot is gone (other libraries' TSD destructors) count in `EXITED`.
//! Owns the `Entry` list. The owner thread writes its slot with relaxed load+store (no lock
//! prefix); readers sum with relaxed loads. Must not allocate except under the guard.
//! A fold (thread exit) and a reader's walk exclude each other (two counters, Dekker style), so a
//! thread exiting during a snapshot is counted exactly once: never in both its slot and
//! `EXITED`, never in neither. Neither side is on the hot path. An exiting thread never waits
//! for a walk: when one is running it leaves its slot on a retired list that the walk's end
//! folds (module `fold`, which holds the protocol and the choice). A walk may therefore call
//! anything (allocate, read files) without holding up a thread's exit, but by the shim's rule it
//! still calls nothing in the loader (dladdr, dlsym, dl_iterate_phdr). In a forked child the
//! survivor keeps its slot; the slots of the threads the child does not have are folded by its
//! first walk or thread exit, not by the fork handler (`fold`).
//! Claiming makes no backend call: a thread may claim inside glibc's thread teardown
//! (`__libc_thread_freeres` frees after every key destructor has run) or where the backend cannot
//! create its per-thread state (an exhausted RLIMIT_AS), and jemalloc's `thread.deallocatedp`
//! would create a thread cache there (linked into an arena's list and never unlinked: the next
//! thread on that TLS corrupted the list). The counter is adopted by `front` after the thread's
//! first successful allocation, when the backend's per-thread state exists.
//! A thread without a slot whose call frees nothing (free(NULL), a pool block) counts in `EXITED`
//! and claims nothing: that is the only call a thread makes after its slot is released or
//! after the key destructors have run, when a claimed slot would never be released.
//! Exited threads fold per start routine (recorded by the `pthread_create` interposition): the
//! first [`ROUTINE_SINKS`] routines seen get an aggregate slot each (claimed lock-free, kept for
//! the process's life); threads of other routines, or of none known, fold into `EXITED`.
//! Long because: the slot's layout, its pool and its walk are one unit (the fold protocol is
//! already in `fold`).

use crate::base::classes::{Op, BUCKETS, CLASSES, OPS};
use crate::hot::tls::{self, Reentry};
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

mod fold;

/// In a forked child, the heap profile's sample adopts the forking thread's slot before it
/// records the slot's tid (`fold`).
pub(crate) use fold::adopt_if_survivor;

/// The exported entry points whose calls are counted, in C API order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub enum Entry {
    Malloc,
    Free,
    Calloc,
    Realloc,
    Reallocarray,
    PosixMemalign,
    AlignedAlloc,
    Memalign,
    Valloc,
    Pvalloc,
    MallocUsableSize,
    FreeSized,
    FreeAlignedSized,
}

/// Number of [`Entry`] values.
pub const ENTRIES: usize = mallocshim_format::classes::ENTRIES;

/// Names of the entry points, indexed by [`Entry`].
pub use mallocshim_format::ENTRY_NAMES;

/// One thread's recording: about 13 KiB.
#[repr(C, align(64))]
pub struct Slot {
    /// The backend's count of bytes this thread has freed, read around each free in place of a
    /// usable-size lookup (jemalloc's `thread.deallocatedp`); null when the backend keeps none.
    /// Set by the owner when it claims the slot.
    pub freed_counter: AtomicPtr<u64>,
    /// The owner's heap-profile sampler (byte countdown, stack bounds): `heapprof`.
    pub prof: crate::hot::heapprof::ThreadProf,
    /// Calls per entry point, for the entry points that share an op with another
    /// (reallocarray, free_sized, free_aligned_sized, the aligned family) and for
    /// malloc_usable_size. malloc, calloc, realloc and free are derived from `tally` by
    /// [`Slot::entry_calls`], which saves the hot path one counter.
    pub calls: [AtomicU64; ENTRIES],
    /// Calls and bytes per op and size class (exact; bytes requested, free: usable size), both
    /// in one 16-byte cell so that a call touches one cache line.
    pub tally: [[Tally; CLASSES]; OPS],
    /// Failed requests above 64 MiB per op (the open class: every overflowing or impossible
    /// request), counted here instead of in `tally` so that no byte count takes a size no
    /// allocator served (`front::recorded_big`).
    pub failed: [AtomicU64; OPS],
    /// Usable bytes served less given up, wrapping (`Raw::LIVE_BY_USABLE`: `account::shim_live`).
    pub live: AtomicU64,
    /// Sampled latencies per op, in clock ticks, by [`crate::base::classes::bucket_of`].
    pub hist: [[AtomicU64; BUCKETS]; OPS],
    /// Largest sampled latency per op, in ticks.
    pub max: [AtomicU64; OPS],
    /// Kernel thread id of the owner (0 when free).
    pub tid: AtomicU32,
    /// The copy of the per-class latency histograms this slot's timed calls write
    /// (`class_latency`; set at claim, 0 in the shared sinks).
    pub stripe: AtomicU32,
    /// The owner's start routine address (0: unknown, e.g. the main thread); in an exited
    /// aggregate, the routine it gathers.
    pub start_routine: AtomicUsize,
    /// Kernel thread id of the thread that created the owner (0: unknown).
    pub creator_tid: AtomicU32,
    /// When the owner started, ms since the epoch (0: unknown).
    pub start_unix_ms: AtomicU64,
    /// In an exited aggregate: the number of threads folded into it.
    pub folded_threads: AtomicU64,
    /// 0 when free; else the process generation of its claim plus 1 (`fold`: a slot claimed
    /// before the last fork belongs to a thread the child does not have).
    in_use: AtomicU32,
    /// Next slot on the retired list (`fold`), while this one is on it.
    retired_next: AtomicPtr<Slot>,
    /// The owner's trace ring while a window records (`tracebuf`); handed back at its exit.
    pub trace: AtomicPtr<crate::hot::tracebuf::Buf>,
}

/// Calls and bytes of one op and size class.
#[repr(C, align(16))]
pub struct Tally {
    pub count: AtomicU64,
    pub bytes: AtomicU64,
}

// Initialisers of the statics below, never shared: each use of a const is a fresh value, which is
// the point here, so clippy's warnings against interior-mutable and large consts do not apply.
#[allow(clippy::declare_interior_mutable_const)]
const Z: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZT: [Tally; CLASSES] = [const { Tally { count: Z, bytes: Z } }; CLASSES];
#[allow(clippy::declare_interior_mutable_const)]
const ZB: [AtomicU64; BUCKETS] = [Z; BUCKETS];

impl Slot {
    const fn new() -> Slot {
        Slot {
            freed_counter: AtomicPtr::new(ptr::null_mut()),
            prof: crate::hot::heapprof::ThreadProf::new(),
            calls: [Z; ENTRIES],
            tally: [ZT; OPS],
            failed: [Z; OPS],
            live: Z,
            hist: [ZB; OPS],
            max: [Z; OPS],
            tid: AtomicU32::new(0),
            stripe: AtomicU32::new(0),
            start_routine: AtomicUsize::new(0),
            creator_tid: AtomicU32::new(0),
            start_unix_ms: AtomicU64::new(0),
            folded_threads: AtomicU64::new(0),
            in_use: AtomicU32::new(0),
            trace: AtomicPtr::new(ptr::null_mut()),
            retired_next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Calls per entry point: the `calls` counters, with malloc, calloc, realloc and free
    /// derived from the op totals minus the other entry points of the same op.
    pub fn entry_calls(&self) -> [u64; ENTRIES] {
        let mut t: [u64; ENTRIES] = core::array::from_fn(|e| self.calls[e].load(Relaxed));
        // Failed calls are calls of their entry point too (they are in no size class).
        let op = |o: Op| -> u64 {
            self.tally[o as usize].iter().map(|c| c.count.load(Relaxed)).sum::<u64>()
                + self.failed[o as usize].load(Relaxed)
        };
        t[Entry::Malloc as usize] = op(Op::Malloc);
        t[Entry::Calloc as usize] = op(Op::Calloc);
        t[Entry::Realloc as usize] = op(Op::Realloc).saturating_sub(t[Entry::Reallocarray as usize]);
        t[Entry::Free as usize] =
            op(Op::Free).saturating_sub(t[Entry::FreeSized as usize] + t[Entry::FreeAlignedSized as usize]);
        t
    }

    /// Every counter of the slot, for folding and zeroing (max excluded).
    fn counters(&self) -> impl Iterator<Item = &AtomicU64> {
        self.calls
            .iter()
            .chain(self.tally.iter().flatten().flat_map(|t| [&t.count, &t.bytes]))
            .chain(self.failed.iter())
            .chain(core::iter::once(&self.live))
            .chain(self.hist.iter().flatten())
    }
}

const CHUNK_SLOTS: usize = 64;
const MAX_CHUNKS: usize = 256;

static CHUNKS: [AtomicPtr<Slot>; MAX_CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS];
/// Per chunk, the highest slot index a claim tried, plus 1: walks read no slot above it. Each
/// slot's `in_use` is on a page of its own, and reading a page never written maps the zero
/// page, which every fork copies (docs/results/fork.md, "Session 19": 60 such pages a walk).
static CLAIMED: [AtomicUsize; MAX_CHUNKS] = [const { AtomicUsize::new(0) }; MAX_CHUNKS];

/// Counts of exited threads, and of calls made by threads without a slot.
pub static EXITED: Slot = Slot::new();

static KEY: AtomicU32 = AtomicU32::new(u32::MAX);

/// Creates the pthread key whose destructor releases a thread's slot (initialisation).
pub fn init() {
    let mut k: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and an extern "C" destructor.
    if unsafe { libc::pthread_key_create(&mut k, Some(release)) } == 0 {
        KEY.store(k, Relaxed);
    } else {
        crate::base::diag::warn!(
            "pthread_key_create failed: counts of exiting threads go to the shared aggregate"
        );
    }
    fold::settle_page();
    crate::backend::atfork::register_child(fold::after_fork_child);
}

/// The shared sink: calls of threads without a slot are added here with `fetch_add`.
#[inline(always)]
pub fn exited_ptr() -> *mut Slot {
    ptr::addr_of!(EXITED) as *mut Slot
}

/// Claims a free slot for the calling thread (its first recorded call). Falls back to EXITED.
#[cold]
#[inline(never)]
pub fn claim(st: *mut tls::ThreadState) -> *mut Slot {
    let _g = Reentry::enter();
    let mut got = exited_ptr();
    let mark = fold::claim_mark();
    'outer: for (n, (c, claimed)) in CHUNKS.iter().zip(CLAIMED.iter()).enumerate() {
        let mut chunk = c.load(Acquire);
        if chunk.is_null() {
            chunk = new_chunk(c);
            if chunk.is_null() {
                break;
            }
        }
        for i in 0..CHUNK_SLOTS {
            // SAFETY: `chunk` holds CHUNK_SLOTS initialised slots for the process's lifetime.
            let s = unsafe { &*chunk.add(i) };
            if s.in_use.load(Relaxed) != 0 {
                continue;
            }
            // Raised before the claim, so a walk (or a forked child) that sees the slot in use
            // reads up to it.
            claimed.fetch_max(i + 1, SeqCst);
            if s.in_use.compare_exchange(0, mark, Acquire, Relaxed).is_ok() {
                // SAFETY: gettid has no preconditions.
                s.tid.store(unsafe { libc::gettid() } as u32, Relaxed);
                s.stripe.store(crate::hot::class_latency::stripe_for(n * CHUNK_SLOTS + i), Relaxed);
                // No backend call here: the counter is adopted later (`front`), see the module doc.
                s.freed_counter.store(ptr::null_mut(), Relaxed);
                got = s as *const Slot as *mut Slot;
                break 'outer;
            }
        }
    }
    let key = KEY.load(Relaxed);
    if got != exited_ptr() && key != u32::MAX {
        // SAFETY: a key created by `init`; may allocate, which the guard routes unrecorded.
        unsafe { libc::pthread_setspecific(key, got as *const c_void) };
    }
    // SAFETY: this thread's TLS block.
    unsafe { (*st).slot = got };
    got
}

/// Maps a chunk of zeroed slots and publishes it in `cell` (or adopts a racing thread's).
fn new_chunk(cell: &AtomicPtr<Slot>) -> *mut Slot {
    let bytes = CHUNK_SLOTS * core::mem::size_of::<Slot>();
    // Zeroed memory is a valid array of free slots.
    let m = crate::base::region::take(bytes);
    if m.is_null() {
        return ptr::null_mut();
    }
    match cell.compare_exchange(ptr::null_mut(), m.cast(), AcqRel, Acquire) {
        Ok(_) => m.cast(),
        Err(theirs) => {
            // Our range was never published.
            crate::base::region::give_back(m, bytes);
            theirs
        }
    }
}

/// Adds a slot's counts into its routine's exited aggregate (or EXITED), zeroes it and returns
/// it to the pool. Only on the folding side of `fold`'s exclusion (or single-threaded).
fn fold_and_free(s: &Slot) {
    let sink = routine_sink(s.start_routine.swap(0, Relaxed));
    for (c, e) in s.counters().zip(sink.counters()) {
        e.fetch_add(c.swap(0, Relaxed), Relaxed);
    }
    for (m, e) in s.max.iter().zip(sink.max.iter()) {
        e.fetch_max(m.swap(0, Relaxed), Relaxed);
    }
    sink.folded_threads.fetch_add(1, Relaxed);
    s.creator_tid.store(0, Relaxed);
    s.start_unix_ms.store(0, Relaxed);
    s.prof.reset();
    s.tid.store(0, Relaxed);
    s.in_use.store(0, Release);
}

/// pthread_key destructor: folds the exiting thread's counts into its routine's aggregate and
/// frees its slot, or, while a walk runs, leaves it for the walk's end. Never waits.
unsafe extern "C" fn release(p: *mut c_void) {
    // A forked child's owed backend fork handler runs before the backend's own thread-exit
    // destructors (registered earlier, they may have run already: see `backend::atfork`).
    crate::backend::atfork::settle();
    let s = p as *mut Slot;
    if s.is_null() || s == exited_ptr() {
        return;
    }
    // SAFETY: `p` is the slot this thread claimed (set by `claim`).
    let slot = unsafe { &*s };
    crate::hot::tracebuf::detach(slot);
    // SAFETY: this thread's TLS block: later calls count in EXITED, out of line (countdown 0).
    unsafe {
        (*tls::state()).slot = exited_ptr();
        (*tls::state()).countdown = 0;
    }
    fold::retire(slot);
}

/// Exited aggregates per start routine, besides `EXITED` (the "other" row).
pub const ROUTINE_SINKS: usize = 31;
static SINKS: [Slot; ROUTINE_SINKS] = [const { Slot::new() }; ROUTINE_SINKS];
/// The aggregates ever claimed: the highest index a claim tried, plus 1 (as [`CLAIMED`]: the
/// walk reads none above it, so the pages of unused aggregates are never mapped).
static SINKS_CLAIMED: AtomicUsize = AtomicUsize::new(0);

/// The aggregate an exiting thread of routine `r` folds into: the routine's own (claimed by
/// CAS on first use), or `EXITED` when `r` is 0 or the table is full.
fn routine_sink(r: usize) -> &'static Slot {
    if r == 0 {
        return &EXITED;
    }
    for (i, s) in SINKS.iter().enumerate() {
        match s.start_routine.load(Relaxed) {
            v if v == r => return s,
            0 => {}
            _ => continue,
        }
        SINKS_CLAIMED.fetch_max(i + 1, SeqCst);
        match s.start_routine.compare_exchange(0, r, Relaxed, Relaxed) {
            Ok(_) => return s,
            Err(v) if v == r => return s,
            Err(_) => {}
        }
    }
    &EXITED
}

/// Calls `f` with every slot in use (live threads), then with EXITED and each routine's
/// aggregate (`live` false; an aggregate's `start_routine` names its routine). No slot is
/// folded during the walk: a thread exiting meanwhile stays in its slot, counted as live, and is
/// folded when the walk ends (`fold`). Waits only for folds in progress (bounded: a fold is a
/// few thousand atomic adds), never for a thread.
pub fn for_each(f: impl FnMut(&Slot, bool)) {
    fold::enter_walk();
    walk(f);
    fold::leave_walk();
}

/// Calls `f` with every slot in use and its `in_use` mark. Reads no slot above a chunk's
/// [`CLAIMED`] mark.
fn each_in_use(mut f: impl FnMut(&Slot, u32)) {
    for (c, claimed) in CHUNKS.iter().zip(CLAIMED.iter()) {
        let chunk = c.load(Acquire);
        if chunk.is_null() {
            break;
        }
        for i in 0..claimed.load(SeqCst).min(CHUNK_SLOTS) {
            // SAFETY: published chunks hold CHUNK_SLOTS initialised slots forever.
            let s = unsafe { &*chunk.add(i) };
            let mark = s.in_use.load(Acquire);
            if mark != 0 {
                f(s, mark);
            }
        }
    }
}

fn walk(mut f: impl FnMut(&Slot, bool)) {
    each_in_use(|s, _| f(s, true));
    f(&EXITED, false);
    for s in SINKS.iter().take(SINKS_CLAIMED.load(SeqCst)) {
        if s.start_routine.load(Relaxed) != 0 {
            f(s, false);
        }
    }
}

/// Calls per entry point over all threads, live and exited.
pub fn totals() -> [u64; ENTRIES] {
    let mut t = [0u64; ENTRIES];
    for_each(|s, _| {
        for (a, c) in t.iter_mut().zip(s.entry_calls()) {
            *a += c;
        }
    });
    t
}
