//! The hot path's front: what every exported entry point does around the C semantics — count
//! the call per op and size class (and per entry point where several share an op) for the
//! calling thread, and on 1 call in `MALLOCSHIM_SAMPLE` time it with the cheap clock into the
//! thread's and the size class's latency buckets. Skipped when the shim itself is calling (guard).
//! Every function here is generic over the backend `B`, over `P` (profiling on) and over `H`
//! (heap profiles on; meaningful with `P` only): `route` puts one monomorphised set per backend
//! and setting in its entry tables, so routing only (`P = false`) compiles to the C semantics
//! alone, usually a tail call. With `H`, allocations also count their bytes down to the next
//! heap-profile sample (`heapprof`: about 4 instructions) and frees test the heap profile's
//! address filter (about 9); a sampled allocation and the free of a sampled block go out of line
//! to `heapprof`, whose module doc gives their exceptions. Without `H` (heap profiles off at
//! start, `MALLOCSHIM_PROF_SAMPLE_BYTES=0`) neither is compiled in.
//! A call in the open size class (above 64 MiB) goes out of line (`recorded_big`) and is
//! counted after the call: a refused one in its op's `failed` counter only, never with its size
//! (issue 21: impossible sizes wrapped the byte counts).
//! The inline path never allocates, locks, panics or makes a syscall other than the clock. The
//! out-of-line path has three exceptions, each rare and each under the reentrancy guard: a
//! thread's first recorded call claims a slot (`slots::claim`: an mmap when the pool grows); under
//! jemalloc, the thread's first served allocation reads its freed-bytes counter (a mallctl); and
//! in a process without the shim's thread (single-threaded so far), a pending dump request is
//! written by the next sampled call (through `mailbox::write_pending`, the writer the cold path
//! registered: a whole dump, which allocates and writes files), because no other thread exists
//! to write it.
//!
//! Long because: the recording step of every entry (fast path, slow path, big and failed calls, the
//! heap sample) is one monomorphised family that the compiler must see whole to inline.

use crate::backend::Raw;
use crate::base::classes::{bucket_of, class_of, Op, CLASSES};
use crate::base::clock;
use crate::hot::slots::{self, Entry, Slot};
use crate::hot::{c_contract, class_latency, heapprof, mailbox, tls};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

static SAMPLE_EVERY: AtomicU32 = AtomicU32::new(64);

/// Sets the sampling period (initialisation; profiling itself is chosen by `route`).
pub fn set_sample_every(sample_every: u32) {
    SAMPLE_EVERY.store(sample_every.max(1), Relaxed);
}

/// Entry points whose calls are derived from their op's count (see [`Slot::entry_calls`]).
#[inline(always)]
const fn derived(e: Entry) -> bool {
    matches!(e, Entry::Malloc | Entry::Calloc | Entry::Realloc | Entry::Free)
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

/// Adds one call of `size` bytes to the slot's op and size class.
#[inline(always)]
fn tally(s: &Slot, shared: bool, op: Op, size: usize) {
    tally_in(s, shared, op, class_of(size), size)
}

/// [`tally`] with the size class `c` (< CLASSES) already known.
#[inline(always)]
fn tally_in(s: &Slot, shared: bool, op: Op, c: usize, size: usize) {
    // SAFETY: `op` < OPS by construction; `c` < CLASSES (the caller's contract).
    let t = unsafe { s.tally.get_unchecked(op as usize).get_unchecked(c) };
    bump(&t.count, 1, shared);
    bump(&t.bytes, size as u64, shared);
}

/// Records one call: `size()` gives the bytes to record (free: the block's usable size, read
/// before the call and outside the timing), `run(size)` makes the call, `plain()` makes it
/// unrecorded (the shim's own calls, under the guard). The common case — a non-zero countdown,
/// which implies an own slot and no guard (see [`tls::ThreadState::countdown`]) — is inline;
/// the guard, claiming a slot, the shared EXITED sink and sampled calls are out of line.
/// `block(&result)` gives the allocated block (for a heap-profile sample and the live count;
/// null for free). `gives_up(n)` gives the usable size of the block the call gives up when it
/// succeeds (free: `n` itself; realloc: the old block's; 0 otherwise): read before the call,
/// and only under a backend whose live bytes the shim counts ([`Raw::LIVE_BY_USABLE`]).
#[inline(always)]
fn recorded<B: Raw, R: Outcome, const H: bool>(
    e: Entry,
    op: Op,
    size: impl FnOnce() -> usize,
    gives_up: impl FnOnce(usize) -> usize,
    run: impl FnOnce(usize) -> R,
    plain: impl FnOnce() -> R,
    block: impl Fn(&R) -> *mut c_void + Copy,
) -> R {
    let st = tls::state();
    // SAFETY: `st` is this thread's TLS block; with a non-zero countdown its slot is claimed
    // by this thread and lives for the life of the process; `e` indexes within ENTRIES.
    unsafe {
        // Decremented before the test (one `sub` and a branch on its borrow); the out-of-line
        // path writes it again.
        let cd = (*st).countdown;
        (*st).countdown = cd.wrapping_sub(1);
        if cd == 0 {
            return recorded_slow::<B, R, H>(st, e, op, size, gives_up, run, plain, block);
        }
        let s = (*st).slot;
        if !derived(e) {
            bump((*s).calls.get_unchecked(e as usize), 1, false);
        }
        let n = size();
        // The open class (above 64 MiB: rare, and where every impossible request lands) is
        // counted after the call, out of line; the branch replaces `class_of`'s clamp.
        let c = class_unclamped(n);
        if c >= CLASSES - 1 {
            return recorded_big::<B, R, H>(&*s, op, n, gives_up, run, block);
        }
        // Counted before the call, so the call itself is a tail call.
        tally_in(&*s, false, op, c, n);
        if !B::LIVE_BY_USABLE {
            if H && op != Op::Free && heapprof::countdown(&*s, n) {
                return heap_sampled(&*s, n, run, block);
            }
            return run(n);
        }
        let old = gives_up(n);
        let out = if H && op != Op::Free && heapprof::countdown(&*s, n) {
            heap_sampled(&*s, n, run, block)
        } else {
            run(n)
        };
        live_after::<B, R>(&*s, false, op, n, old, &out, block);
        out
    }
}

/// The live count's one rule, after a call of `op` for `n` bytes that returned `out`, under a
/// backend whose live bytes the shim counts ([`Raw::LIVE_BY_USABLE`]): a block served adds its
/// usable size; the block given up (usable size `old`, read before the call) is subtracted when
/// the call gave it up: a free, a realloc that served a block (moved or in place: its new
/// usable size replaces the old), a realloc to size 0 (freed). A failed call keeps the block
/// and changes nothing. Allocations and frees count the same figure, so an allocate/free pair
/// nets 0 whatever the alignment, page rounding or move.
#[inline(always)]
fn live_after<B: Raw, R: Outcome>(
    s: &Slot,
    shared: bool,
    op: Op,
    n: usize,
    old: usize,
    out: &R,
    block: impl Fn(&R) -> *mut c_void,
) {
    let p = if op == Op::Free { core::ptr::null_mut() } else { block(out) };
    // SAFETY: `p`, when not null, is the block the backend just served to this call.
    let add = if p.is_null() { 0 } else { unsafe { B::usable_size(p) } };
    let gone = op == Op::Free || !p.is_null() || (op == Op::Realloc && n == 0);
    let sub = if gone { old } else { 0 };
    if add != sub {
        bump(&s.live, (add as u64).wrapping_sub(sub as u64), shared);
    }
}

/// The size class of `n` before `class_of`'s clamp to the open class: at least `CLASSES - 1`
/// for every request above 64 MiB.
#[inline(always)]
fn class_unclamped(n: usize) -> usize {
    let x = (n.saturating_sub(1) | 15) as u64;
    (63 - x.leading_zeros() as usize) - 3
}

/// Whether a call of `op` for `n` bytes that returned `out` is counted as a failure: a request
/// in the open class (above 64 MiB) that the allocator refused. Failures of smaller requests
/// are counted with their size (before the call, on the inline path).
#[inline(always)]
fn failed_big<R: Outcome>(op: Op, n: usize, out: &R) -> bool {
    op != Op::Free && class_unclamped(n) >= CLASSES - 1 && !out.ok()
}

/// Counts one failed request of `op` (no size class, no bytes).
#[cold]
#[inline(never)]
fn count_failed(s: &Slot, shared: bool, op: Op) {
    // SAFETY: `op` < OPS by construction.
    bump(unsafe { s.failed.get_unchecked(op as usize) }, 1, shared);
}

/// A call in the open class (above 64 MiB) on the inline path's own slot: made first, then
/// counted with its size when it succeeded, as a failure (no bytes) when it did not — a
/// failed `malloc(SIZE_MAX - 4096)` or an overflowing `calloc` counted with its size wrapped
/// the byte totals (issue 21).
#[cold]
#[inline(never)]
fn recorded_big<B: Raw, R: Outcome, const H: bool>(
    s: &Slot,
    op: Op,
    n: usize,
    gives_up: impl FnOnce(usize) -> usize,
    run: impl FnOnce(usize) -> R,
    block: impl Fn(&R) -> *mut c_void + Copy,
) -> R {
    let old = if B::LIVE_BY_USABLE { gives_up(n) } else { 0 };
    let out = run(n);
    if failed_big(op, n, &out) {
        count_failed(s, false, op);
        return out;
    }
    if B::LIVE_BY_USABLE {
        live_after::<B, R>(s, false, op, n, old, &out, block);
    }
    tally(s, false, op, n);
    if H && op != Op::Free && heapprof::countdown(s, n) {
        heapprof::sampled(s, block(&out), n);
    }
    out
}

/// An allocation that ends the thread's heap-profile gap: made, then handed to `heapprof`.
#[cold]
#[inline(never)]
fn heap_sampled<R>(s: &Slot, n: usize, run: impl FnOnce(usize) -> R, block: impl Fn(&R) -> *mut c_void) -> R {
    let out = run(n);
    heapprof::sampled(s, block(&out), n);
    out
}

/// The rest of [`recorded`]: the guard, a thread's first call (claims its slot), sampled calls
/// (timed; the countdown is drawn again) and calls counted in the shared EXITED sink (atomic
/// adds; the countdown stays 0, and 1 call in N is timed, chosen by the clock's low bits).
// Eight arguments: `recorded`'s, passed on whole (the closures are its call's parts).
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn recorded_slow<B: Raw, R: Outcome, const H: bool>(
    st: *mut tls::ThreadState,
    e: Entry,
    op: Op,
    size: impl FnOnce() -> usize,
    gives_up: impl FnOnce(usize) -> usize,
    run: impl FnOnce(usize) -> R,
    plain: impl FnOnce() -> R,
    block: impl Fn(&R) -> *mut c_void + Copy,
) -> R {
    // SAFETY: `st` is this thread's TLS block. The inline path wrapped the countdown below 0:
    // it stays 0 (guard, EXITED sink) unless a sampled call draws a new one below.
    unsafe { (*st).countdown = 0 };
    let Some((s, shared)) = entered(st, e) else {
        return plain();
    };
    // SAFETY: as in `recorded`; the slot is this thread's or EXITED.
    unsafe {
        if mailbox::pending() {
            mailbox::write_pending();
        }
        let n = size();
        // Threads without a slot of their own (EXITED) are not heap-sampled.
        let heap = H && !shared && op != Op::Free && heapprof::countdown(&*s, n);
        let t0 = clock::ticks();
        let every = SAMPLE_EVERY.load(Relaxed);
        // The next period is drawn from [N/2, 3N/2) with the clock's low bits (mean N), so a
        // strictly alternating pattern (malloc, free, malloc...) samples every op.
        let draw = (t0 >> 4) as u32 % every;
        let timed = if shared {
            draw == 0
        } else {
            (*st).countdown = if every > 1 { every / 2 + draw } else { 0 };
            true
        };
        let old = if B::LIVE_BY_USABLE { gives_up(n) } else { 0 };
        let out = run(n);
        let d = clock::ticks().wrapping_sub(t0);
        if B::COUNTS_FREED_BYTES
            && !shared
            && op != Op::Free
            && out.ok()
            && (*s).freed_counter.load(Relaxed).is_null()
        {
            adopt_counter::<B>(&*s);
        }
        if failed_big(op, n, &out) {
            count_failed(&*s, shared, op);
        } else {
            tally(&*s, shared, op, n);
            if B::LIVE_BY_USABLE {
                live_after::<B, R>(&*s, shared, op, n, old, &out, block);
            }
        }
        if timed {
            sample(&*s, shared, op as usize, class_of(n), d);
        }
        if heap {
            heapprof::sampled(&*s, block(&out), n);
        }
        out
    }
}

/// Whether a call's result is a success (an allocation that the backend served).
pub trait Outcome {
    fn ok(&self) -> bool;
}

impl Outcome for *mut c_void {
    fn ok(&self) -> bool {
        !self.is_null()
    }
}

impl Outcome for c_int {
    fn ok(&self) -> bool {
        *self == 0
    }
}

impl Outcome for () {
    fn ok(&self) -> bool {
        false
    }
}

/// Adopts the backend's count of bytes this thread frees into its slot, after an allocation the
/// backend served on this thread: its per-thread state exists then, so reading the counter's
/// address creates nothing (never at claim time, see `slots`). A null answer keeps the
/// usable-size lookup.
#[cold]
#[inline(never)]
fn adopt_counter<B: Raw>(s: &Slot) {
    let _g = tls::Reentry::enter();
    s.freed_counter.store(B::thread_freed_counter(), Relaxed);
}

/// The out-of-line start of a recorded call: None under the guard; otherwise the calling
/// thread's slot (claimed on its first call; the shared EXITED sink, `true`, when it has none)
/// with the call of `e` counted unless its count is derived from its op.
fn entered(st: *mut tls::ThreadState, e: Entry) -> Option<(*mut Slot, bool)> {
    // SAFETY: `st` is this thread's TLS block; the slot is this thread's or EXITED, both live
    // for the life of the process; `e` indexes within ENTRIES.
    unsafe {
        if (*st).guard != 0 {
            return None;
        }
        let mut s = (*st).slot;
        if s.is_null() {
            s = slots::claim(st);
        }
        let shared = s == slots::exited_ptr();
        if !derived(e) {
            bump((*s).calls.get_unchecked(e as usize), 1, shared);
        }
        Some((s, shared))
    }
}

/// Adds a timed call of `d` ticks to the thread's and the size class's histograms (the stripe
/// of the CPU the thread runs on, else the slot's: `class_latency`).
fn sample(s: &Slot, shared: bool, o: usize, c: usize, d: u64) {
    let b = bucket_of(d);
    // SAFETY: `o` < OPS, `c` < CLASSES, `b` < BUCKETS by construction of `Op`, `class_of` and
    // `bucket_of`.
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
    }
    let stripe = crate::base::sys::cpu_hint().unwrap_or_else(|| s.stripe.load(Relaxed));
    class_latency::add(stripe, o, c, b, d);
}

/// An entry point recorded as `e`/`op` with `size` bytes when profiling is on (`P`).
/// The allocated block is the result itself unless `$block` says otherwise.
macro_rules! entry {
    ($P:ident, $H:ident, $e:expr, $op:expr, $size:expr, $call:expr) => {
        entry!($P, $H, $e, $op, $size, $call, |r: &*mut c_void| *r)
    };
    ($P:ident, $H:ident, $e:expr, $op:expr, $size:expr, $call:expr, $block:expr) => {
        entry!($P, $H, $e, $op, $size, $call, $block, |_| 0)
    };
    ($P:ident, $H:ident, $e:expr, $op:expr, $size:expr, $call:expr, $block:expr, $gives_up:expr) => {
        if $P {
            // `move`: the closures hold copies of the arguments, not references to them, so
            // the out-of-line paths get them in registers (no spill on the inline path).
            recorded::<B, _, $H>($e, $op, move || $size, $gives_up, move |_| $call, move || $call, $block)
        } else {
            $call
        }
    };
}

pub unsafe extern "C" fn malloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::Malloc, Op::Malloc, size, unsafe { c_contract::malloc::<B>(size) })
}

pub unsafe extern "C" fn calloc<B: Raw, const P: bool, const H: bool>(n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::Calloc, Op::Calloc, n.saturating_mul(size), unsafe {
        c_contract::calloc::<B>(n, size)
    })
}

pub unsafe extern "C" fn realloc<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    size: usize,
) -> *mut c_void {
    if P && H && heapprof::maybe_sampled(p) {
        // SAFETY: forwarded C contract.
        return realloc_sampled(p, size, || unsafe {
            entry!(
                P,
                H,
                Entry::Realloc,
                Op::Realloc,
                size,
                c_contract::realloc::<B>(p, size),
                |r: &*mut c_void| *r,
                move |_| old_usable::<B>(p)
            )
        });
    }
    entry!(
        P,
        H,
        Entry::Realloc,
        Op::Realloc,
        size,
        // SAFETY: forwarded C contract.
        unsafe { c_contract::realloc::<B>(p, size) },
        |r: &*mut c_void| *r,
        move |_| old_usable::<B>(p)
    )
}

/// The usable size of realloc's old block, as the live count knows it: 0 for NULL and for a
/// bootstrap-pool block (neither was counted when served).
#[inline(always)]
fn old_usable<B: Raw>(p: *mut c_void) -> usize {
    if p.is_null() || crate::hot::bootstrap::contains(p) {
        return 0;
    }
    // SAFETY: a live backend block (the program's contract for realloc).
    unsafe { B::usable_size(p) }
}

pub unsafe extern "C" fn reallocarray<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    n: usize,
    size: usize,
) -> *mut c_void {
    let total = n.saturating_mul(size);
    if P && H && heapprof::maybe_sampled(p) {
        // SAFETY: forwarded C contract.
        return realloc_sampled(p, total, || unsafe {
            entry!(
                P,
                H,
                Entry::Reallocarray,
                Op::Realloc,
                total,
                c_contract::reallocarray::<B>(p, n, size),
                |r: &*mut c_void| *r,
                move |_| old_usable::<B>(p)
            )
        });
    }
    entry!(
        P,
        H,
        Entry::Reallocarray,
        Op::Realloc,
        total,
        // SAFETY: forwarded C contract.
        unsafe { c_contract::reallocarray::<B>(p, n, size) },
        |r: &*mut c_void| *r,
        move |_| old_usable::<B>(p)
    )
}

/// Realloc of a block that may hold a heap-profile sample: the sample leaves the live set
/// before the call (the old block may be freed by it) and comes back when the call failed and
/// kept the block (NULL for a non-zero size).
#[cold]
#[inline(never)]
fn realloc_sampled(p: *mut c_void, size: usize, call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    let taken = heapprof::forget(p);
    let q = call();
    if q.is_null() && size != 0 {
        if let Some(e) = taken {
            heapprof::put_back(e);
        }
    }
    q
}

/// Free and its sized variants: the size class is the block's usable size, read before the
/// free (and handed to the backend, which may then skip its own lookup).
#[inline(always)]
unsafe fn free_as<B: Raw, const P: bool, const H: bool>(e: Entry, p: *mut c_void) {
    if !P {
        // SAFETY: forwarded C contract.
        return unsafe { c_contract::free::<B>(p) };
    }
    if H && heapprof::maybe_sampled(p) {
        // SAFETY: forwarded C contract.
        return unsafe { free_sampled::<B>(e, p) };
    }
    // SAFETY: forwarded C contract.
    unsafe { free_recorded::<B, H>(e, p) }
}

/// A recorded free of a block that may hold a heap-profile sample: out of line, so that the
/// inline path keeps no stack space for `heapprof::forget`'s answer (and saves no register
/// around its call).
///
/// # Safety
/// `p` is NULL or a live block (of `B` or the bootstrap pool).
#[cold]
#[inline(never)]
unsafe fn free_sampled<B: Raw>(e: Entry, p: *mut c_void) {
    // Out of the live set before the backend can hand the address out again.
    let _ = heapprof::forget(p);
    // SAFETY: forwarded contract.
    unsafe { free_recorded::<B, true>(e, p) }
}

/// The rest of a recorded free, once the block is out of the heap profile's live set.
///
/// # Safety
/// `p` is NULL or a live block (of `B` or the bootstrap pool).
#[inline(always)]
unsafe fn free_recorded<B: Raw, const H: bool>(e: Entry, p: *mut c_void) {
    if p.is_null() || crate::hot::bootstrap::contains(p) {
        return free_unowned::<B, H>(e, p);
    }
    if B::COUNTS_FREED_BYTES {
        // SAFETY: `p` is a live backend block (the program's contract).
        if unsafe { free_counted::<B>(e, p) } {
            return;
        }
        // SAFETY: as above.
        return unsafe { free_looked_up_cold::<B, H>(e, p) };
    }
    // SAFETY: as above.
    unsafe { free_looked_up::<B, H>(e, p) }
}

/// A recorded free of NULL or of a bootstrap-pool block: nothing for the backend to free;
/// recorded with size 0 (NULL) or the pool block's size.
#[cold]
#[inline(never)]
fn free_unowned<B: Raw, const H: bool>(e: Entry, p: *mut c_void) {
    // SAFETY: a pool block's size is recorded in front of it.
    let n = if p.is_null() { 0 } else { unsafe { crate::hot::bootstrap::usable_size(p) } };
    let st = tls::state();
    // SAFETY: this thread's TLS block; EXITED lives for the life of the process.
    unsafe {
        if (*st).slot.is_null() && (*st).guard == 0 {
            // A thread without a slot claims none for a call that frees nothing (see `slots`).
            let s = &*slots::exited_ptr();
            if !derived(e) {
                bump(s.calls.get_unchecked(e as usize), 1, true);
            }
            tally(s, true, Op::Free, n);
            // Timed as the shared sink times its calls (1 in N by the clock's low bits), so
            // MALLOCSHIM_SAMPLE=1 still times every call.
            let t0 = clock::ticks();
            if ((t0 >> 4) as u32).is_multiple_of(SAMPLE_EVERY.load(Relaxed)) {
                sample(s, true, Op::Free as usize, class_of(n), clock::ticks().wrapping_sub(t0));
            }
            return;
        }
    }
    // A pool block was never counted live: it gives up nothing.
    recorded::<B, (), H>(e, Op::Free, || n, |_| 0, |_| (), || (), |_| core::ptr::null_mut())
}

/// A recorded free that reads the block's usable size from the backend first.
///
/// # Safety
/// `p` is a live block of `B`, not a pool block.
#[inline(always)]
unsafe fn free_looked_up<B: Raw, const H: bool>(e: Entry, p: *mut c_void) {
    recorded::<B, (), H>(
        e,
        Op::Free,
        // SAFETY: `p` is a live backend block (the caller's contract).
        move || unsafe { B::usable_size(p) },
        |n| n,
        // SAFETY: as above; `u` is its usable size, read just before.
        move |u| unsafe { c_contract::free_live::<B>(p, u) },
        // SAFETY: as above.
        move || unsafe { c_contract::free::<B>(p) },
        |_| core::ptr::null_mut(),
    )
}

/// [`free_looked_up`] out of line: the fallback of [`free_counted`], kept off its inline path.
///
/// # Safety
/// As [`free_looked_up`].
#[cold]
#[inline(never)]
unsafe fn free_looked_up_cold<B: Raw, const H: bool>(e: Entry, p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { free_looked_up::<B, H>(e, p) }
}

/// The inline path of a recorded free for a backend that counts the bytes each thread frees
/// ([`Raw::COUNTS_FREED_BYTES`]): the block's usable size is the counter's growth across the
/// free, so no lookup precedes it. Returns false, having done nothing, when the call belongs
/// to the out-of-line path (countdown 0: guard, first call, EXITED sink, sampled call) or the
/// thread's slot has no counter.
///
/// # Safety
/// `p` is a live block of `B`, not a pool block.
#[inline(always)]
unsafe fn free_counted<B: Raw>(e: Entry, p: *mut c_void) -> bool {
    let st = tls::state();
    // SAFETY: as in `recorded`; the counter, when set, is this thread's own, in the backend's
    // thread-local data, and only this thread's frees change it.
    unsafe {
        let cd = (*st).countdown;
        if cd == 0 {
            return false;
        }
        let s = (*st).slot;
        let counter = (*s).freed_counter.load(Relaxed);
        if counter.is_null() {
            return false;
        }
        (*st).countdown = cd - 1;
        if !derived(e) {
            bump((*s).calls.get_unchecked(e as usize), 1, false);
        }
        let before = counter.read_volatile();
        c_contract::free_live_unsized::<B>(p);
        let n = counter.read_volatile().wrapping_sub(before) as usize;
        tally(&*s, false, Op::Free, n);
        true
    }
}

pub unsafe extern "C" fn free<B: Raw, const P: bool, const H: bool>(p: *mut c_void) {
    // SAFETY: forwarded C contract.
    unsafe { free_as::<B, P, H>(Entry::Free, p) }
}

pub unsafe extern "C" fn free_sized<B: Raw, const P: bool, const H: bool>(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded C contract.
    unsafe { free_as::<B, P, H>(Entry::FreeSized, p) }
}

pub unsafe extern "C" fn free_aligned_sized<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    _align: usize,
    _size: usize,
) {
    // SAFETY: forwarded C contract.
    unsafe { free_as::<B, P, H>(Entry::FreeAlignedSized, p) }
}

pub unsafe extern "C" fn posix_memalign<B: Raw, const P: bool, const H: bool>(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    entry!(
        P,
        H,
        Entry::PosixMemalign,
        Op::Memalign,
        size,
        // SAFETY: forwarded C contract.
        unsafe { c_contract::posix_memalign::<B>(out, align, size) },
        // SAFETY: on success the block is in the caller's out-pointer.
        |r: &c_int| if *r == 0 { unsafe { *out } } else { core::ptr::null_mut() }
    )
}

pub unsafe extern "C" fn aligned_alloc<B: Raw, const P: bool, const H: bool>(
    align: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::AlignedAlloc, Op::Memalign, size, unsafe {
        c_contract::aligned_alloc::<B>(align, size)
    })
}

pub unsafe extern "C" fn memalign<B: Raw, const P: bool, const H: bool>(
    align: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::Memalign, Op::Memalign, size, unsafe { c_contract::memalign::<B>(align, size) })
}

pub unsafe extern "C" fn valloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::Valloc, Op::Memalign, size, unsafe { c_contract::valloc::<B>(size) })
}

pub unsafe extern "C" fn pvalloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded C contract.
    entry!(P, H, Entry::Pvalloc, Op::Memalign, size, unsafe { c_contract::pvalloc::<B>(size) })
}

/// Counted per entry point only (it is not an allocation op).
pub unsafe extern "C" fn malloc_usable_size<B: Raw, const P: bool, const H: bool>(p: *mut c_void) -> usize {
    if P {
        count_entry(Entry::MallocUsableSize);
    }
    // SAFETY: forwarded C contract.
    unsafe { c_contract::usable_size::<B>(p) }
}

/// Counts a call of `e` alone (no op, no size class, never sampled).
#[inline(never)]
fn count_entry(e: Entry) {
    let _ = entered(tls::state(), e);
}
