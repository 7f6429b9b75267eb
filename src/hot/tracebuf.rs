//! The recording's hot half (issue 24): the trace entry table's functions, which wrap the
//! table in force before the window opened, and the per-thread buffers they append to. A
//! window is open while [`WINDOW`] is non-zero and `route` serves the trace table; outside a
//! window nothing here runs (the ordinary tables do not know it), so recording costs nothing
//! then.
//! Each thread appends to its own single-producer ring ([`Buf`], [`CAP`] entries of 32 bytes)
//! with plain stores and one release store of its head; the shim's thread (`cold::record`)
//! reads entries up to the head and releases them with a store of the tail. The append marks
//! its ring busy while it writes: a signal handler's allocator call that lands inside it is
//! dropped and counted (before, it wrote the same entry and one of the two was lost unseen). No lock, no
//! allocation, no syscall but the clock on the append while the ring has room. A full ring
//! waits for the drain, out of line ([`waited`]): the thread wakes the shim's thread (one
//! write(2) to its pipe) and sleeps 50 µs at a time (nanosleep) until the drain has made room,
//! for at most `MALLOCSHIM_RECORD_WAIT_MS` (20 ms; 0 = never); a wait that runs out is not
//! begun again until the drain has read that ring, so a stalled drain costs each thread one
//! wait. These two syscalls are this module's exception: a FULLTEXT burst on 2 cores dropped
//! 6-10% of its calls while the drain, fast enough on average, was off the CPU (docs/record.md).
//! A call that finds the ring still full is counted in the buffer's `dropped` (the footer says
//! how many) and not recorded — or, in a process without the shim's thread, the ring is
//! drained on the spot through the hook the cold path registered ([`set_inline_drain`]), under
//! the guard (the mailbox's exception, for the same reason: no other thread exists to do it).
//! Exception, out of line and under the reentrancy guard: a thread's first call in a window
//! claims a buffer from a pool of mmap()ed buffers (mapped once, then reused), and its slot
//! (`slots::claim`) when it has none. A thread's buffer is handed back at its exit by the slot's
//! release (`slots`), marked ended; the drain frees it once read. Calls made after that (other
//! libraries' TSD destructors) are counted in [`NO_BUFFER`], not recorded.
//! Times: a free's before the backend is called, an allocation's after it returned, so a block
//! freed by one thread and reused by another orders free first. Must not import `cold`.
//! Long because: the traced twin of every entry point (one short forward each, generated per table) sits beside the ring it writes, so the hot path's recording is read in one file.

use crate::backend::Raw;
use crate::base::{clock, sys};
use crate::hot::{c_contract, mailbox, record, slots, tls};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// Entries per buffer (512 KiB): at mariadbd's busiest threads (~100,000 calls/s) over 160 ms,
/// far more than the 10 ms between drains.
pub const CAP: usize = 1 << 14;
/// Most buffers at once (threads recording in one window; 2 GiB of address space at most).
pub const MAX_BUFS: usize = 4096;

/// One call, as the drain reads it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Entry {
    /// Ticks since the window opened << 8 | log2(alignment) << 3 | op.
    pub w0: u64,
    /// The block returned (0: NULL); for free, 0.
    pub addr: u64,
    /// The block given (free, realloc; 0: NULL).
    pub old: u64,
    /// Bytes requested; for free, the block's usable size.
    pub size: u64,
}

/// Buffer states.
pub const FREE: u32 = 0;
pub const OWNED: u32 = 1;
pub const ENDED: u32 = 2;

/// One thread's ring, in its own mapping.
#[repr(C, align(64))]
pub struct Buf {
    /// Entries written (the owner's; release-stored after each entry).
    pub head: AtomicU64,
    /// 1 while the owner writes an entry (the owner's; a signal handler's call then drops).
    busy: AtomicU64,
    /// The tail + 1 when the owner's last wait for the drain ran out (0: none since the drain
    /// last read): a full ring with that tail drops its call at once (the owner's).
    gave_up: AtomicU64,
    _pad: [u64; 5],
    /// Entries read (the drain's).
    pub tail: AtomicU64,
    /// FREE, OWNED, ENDED.
    pub state: AtomicU32,
    /// Kernel thread id of the owner.
    pub tid: AtomicU32,
    /// The window it was claimed in.
    pub window: AtomicU64,
    /// Claim number (unique per claim in the process: the drain's thread key).
    pub claim: AtomicU64,
    /// Calls not recorded because the ring was full.
    pub dropped: AtomicU64,
    entries: [UnsafeCell<Entry>; CAP],
}

impl Buf {
    /// Entry `i` (mod CAP).
    ///
    /// # Safety
    /// Only the owner writes an entry between tail and head+1, only the drain reads one below head.
    pub unsafe fn entry(&self, i: u64) -> *mut Entry {
        self.entries[(i as usize) & (CAP - 1)].get()
    }
}

/// The open window's number (0: no window).
pub static WINDOW: AtomicU64 = AtomicU64::new(0);
/// Ticks when the open window opened.
pub static T0: AtomicU64 = AtomicU64::new(0);
/// Calls in a window made by a thread that had no buffer (after its slot was released, or
/// when the pool was exhausted).
pub static NO_BUFFER: AtomicU64 = AtomicU64::new(0);
static BUFS: [AtomicPtr<Buf>; MAX_BUFS] = [const { AtomicPtr::new(ptr::null_mut()) }; MAX_BUFS];
static CLAIMS: AtomicU64 = AtomicU64::new(0);
/// The cold path's drain for a process without the shim's thread (a `fn()`); 0 = none.
static INLINE_DRAIN: AtomicUsize = AtomicUsize::new(0);
/// Sleep between looks at a full ring, ns.
const WAIT_STEP_NS: u64 = 50_000;
/// How long a full ring waits for the drain before its call is dropped, ns
/// (`MALLOCSHIM_RECORD_WAIT_MS`; 0 = never).
static WAIT_NS: AtomicU64 = AtomicU64::new(20_000_000);

/// Sets how long a full ring waits for the drain (`MALLOCSHIM_RECORD_WAIT_MS`; 0 = never).
pub fn set_wait_ms(ms: u64) {
    WAIT_NS.store(ms.saturating_mul(1_000_000), Relaxed);
}

/// Every buffer mapped so far (null entries past the last).
pub fn buffers() -> impl Iterator<Item = &'static Buf> {
    // SAFETY: a published buffer stays mapped for the process's life.
    BUFS.iter().map(|b| b.load(Acquire)).take_while(|p| !p.is_null()).map(|p| unsafe { &*p })
}

/// Registers (or, with None, removes) the drain a full ring calls in a process without the
/// shim's thread.
pub fn set_inline_drain(f: Option<fn()>) {
    INLINE_DRAIN.store(f.map_or(0, |f| f as usize), Release);
}

/// Hands a thread's buffer back (slot release at thread exit): the drain reads what is left
/// and frees it.
pub fn detach(s: &slots::Slot) {
    let b = s.trace.swap(ptr::null_mut(), AcqRel);
    if !b.is_null() {
        // SAFETY: a published buffer stays mapped.
        unsafe { (*b).state.store(ENDED, Release) };
    }
}

/// In a forked child: no window, whatever the parent had (its buffers are the parent's copy,
/// never drained here).
/// Writes only what changes (two pages every child copied before).
pub fn after_fork_child() {
    if WINDOW.load(Relaxed) != 0 {
        WINDOW.store(0, Relaxed);
    }
    if INLINE_DRAIN.load(Relaxed) != 0 {
        INLINE_DRAIN.store(0, Relaxed);
    }
}

/// Appends one call to the calling thread's ring (nothing outside a window or under the guard).
#[inline(always)]
fn append(op: u8, align: usize, addr: usize, old: usize, size: usize, t: u64) {
    let st = tls::state();
    // SAFETY: this thread's TLS block; its slot lives for the process's life; the ring is
    // this thread's (claimed for this window) and stays mapped.
    unsafe {
        if (*st).guard != 0 {
            return;
        }
        let w = WINDOW.load(Relaxed);
        if w == 0 {
            return;
        }
        let s = (*st).slot;
        let mut b = if s.is_null() { ptr::null_mut() } else { (*s).trace.load(Relaxed) };
        if b.is_null() || (*b).window.load(Relaxed) != w {
            b = claim(st, w);
            if b.is_null() {
                NO_BUFFER.fetch_add(1, Relaxed);
                return;
            }
        }
        let b = &*b;
        if b.head.load(Relaxed).wrapping_sub(b.tail.load(Acquire)) >= CAP as u64
            && !drained_inline(b, b.head.load(Relaxed))
            && !waited(b)
        {
            return drop_call(b, op);
        }
        // The append proper, marked busy: a signal handler's call that lands inside it would
        // write the same entry, so it is dropped (and counted) instead. One landing between the
        // test and the mark runs whole first, leaving the mark as it found it.
        if b.busy.load(Relaxed) != 0 {
            return drop_call(b, op);
        }
        b.busy.store(1, Relaxed);
        // Read after the mark: a handler's call may have appended (or filled the ring) since.
        let h = b.head.load(Relaxed);
        if h.wrapping_sub(b.tail.load(Acquire)) < CAP as u64 {
            let lg = if align > 1 { (usize::BITS - 1 - align.leading_zeros()).min(31) as u64 } else { 0 };
            let rel = t.wrapping_sub(T0.load(Relaxed)) & ((1 << 56) - 1);
            b.entry(h).write(Entry {
                w0: rel << 8 | lg << 3 | op as u64,
                addr: addr as u64,
                old: old as u64,
                size: size as u64,
            });
            b.head.store(h + 1, Release);
            b.busy.store(0, Relaxed);
        } else {
            b.busy.store(0, Relaxed);
            drop_call(b, op);
        }
    }
}

/// Counts a call the ring could not take (an [`OLD_SIZE`] marker is not a call).
#[cold]
#[inline(never)]
fn drop_call(b: &Buf, op: u8) {
    if op != OLD_SIZE {
        b.dropped.store(b.dropped.load(Relaxed) + 1, Relaxed);
    }
}

/// A full ring in a process without the shim's thread: the registered drain empties it.
#[cold]
#[inline(never)]
fn drained_inline(b: &Buf, h: u64) -> bool {
    let f = INLINE_DRAIN.load(Acquire);
    if f == 0 {
        return false;
    }
    {
        let _g = tls::Reentry::enter();
        // SAFETY: a `fn()` stored by `set_inline_drain`.
        let f: fn() = unsafe { core::mem::transmute::<usize, fn()>(f) };
        f();
    }
    h.wrapping_sub(b.tail.load(Acquire)) < CAP as u64
}

/// A full ring while the shim's thread drains: wakes it and sleeps until the drain has made
/// room (true), for at most [`WAIT_NS`] by CLOCK_MONOTONIC (vDSO; a sleep of 50 µs lasts 100-180
/// µs on a busy machine, so the looks are counted by the clock, not by number); a wait that
/// runs out (false) marks the ring so that its next calls drop at once until the drain has
/// read it.
#[cold]
#[inline(never)]
fn waited(b: &Buf) -> bool {
    let wait = WAIT_NS.load(Relaxed);
    let tail = b.tail.load(Acquire);
    if wait == 0 || b.gave_up.load(Relaxed) == tail.wrapping_add(1) || !mailbox::wake_drain() {
        return false;
    }
    let step = libc::timespec { tv_sec: 0, tv_nsec: WAIT_STEP_NS as i64 };
    let end = clock::mono_ns().saturating_add(wait);
    loop {
        // SAFETY: a valid timespec and no remainder wanted; a sleep cut short by a signal only
        // looks sooner.
        unsafe { libc::nanosleep(&step, ptr::null_mut()) };
        if b.head.load(Relaxed).wrapping_sub(b.tail.load(Acquire)) < CAP as u64 {
            return true;
        }
        if clock::mono_ns() >= end {
            break;
        }
    }
    b.gave_up.store(b.tail.load(Acquire).wrapping_add(1), Relaxed);
    false
}

/// The calling thread's first call in window `w`: its slot if it has none, then a free buffer
/// (mapped when the pool has none). Null when the thread has no slot of its own (it is
/// exiting) or the pool is exhausted.
#[cold]
#[inline(never)]
fn claim(st: *mut tls::ThreadState, w: u64) -> *mut Buf {
    let _g = tls::Reentry::enter();
    // SAFETY: this thread's TLS block; slots live for the process's life.
    let s = unsafe {
        let mut s = (*st).slot;
        if s.is_null() {
            s = slots::claim(st);
        }
        if s == slots::exited_ptr() {
            return ptr::null_mut();
        }
        &*s
    };
    let old = s.trace.load(Relaxed);
    if !old.is_null() {
        // A buffer of an earlier window, read to its end by that window's drain: free again.
        // SAFETY: mapped for the process's life.
        unsafe { (*old).state.store(FREE, Release) };
    }
    let b = take_free();
    if b.is_null() {
        s.trace.store(ptr::null_mut(), Relaxed);
        return b;
    }
    // SAFETY: `b` is ours now (state OWNED), mapped for the process's life.
    unsafe {
        let r = &*b;
        // SAFETY: gettid has no preconditions.
        r.tid.store(libc::gettid() as u32, Relaxed);
        r.dropped.store(0, Relaxed);
        r.claim.store(CLAIMS.fetch_add(1, Relaxed) + 1, Relaxed);
        let h = r.head.load(Relaxed);
        r.busy.store(0, Relaxed);
        r.tail.store(h, Relaxed);
        r.window.store(w, Release);
    }
    s.trace.store(b, Release);
    b
}

/// A FREE buffer of the pool, marked OWNED; a new mapping when none is free; null when the
/// pool is full or mmap fails.
fn take_free() -> *mut Buf {
    for cell in BUFS.iter() {
        let mut b = cell.load(Acquire);
        if b.is_null() {
            let m = sys::map_anon(core::mem::size_of::<Buf>(), true).cast::<Buf>();
            if m.is_null() {
                return m;
            }
            // Zeroed memory is a FREE buffer; mark it ours before publishing.
            // SAFETY: a fresh mapping of a whole Buf.
            unsafe { (*m).state.store(OWNED, Relaxed) };
            match cell.compare_exchange(ptr::null_mut(), m, AcqRel, Acquire) {
                Ok(_) => return m,
                Err(theirs) => {
                    // SAFETY: our mapping was never published.
                    unsafe { libc::munmap(m.cast(), core::mem::size_of::<Buf>()) };
                    b = theirs;
                }
            }
        }
        // SAFETY: published buffers stay mapped.
        let r = unsafe { &*b };
        if r.state.load(Relaxed) == FREE && r.state.compare_exchange(FREE, OWNED, Acquire, Relaxed).is_ok() {
            return b;
        }
    }
    ptr::null_mut()
}

// The trace table's functions: the call through the setting's ordinary function, recorded
// around it. Op numbers as in `base::classes::Op`.
const MALLOC: u8 = 0;
const CALLOC: u8 = 1;
const REALLOC: u8 = 2;
const FREE_OP: u8 = 3;
const MEMALIGN: u8 = 4;
/// Not a call: the usable size of the block the thread's next realloc takes (the drain's).
pub const OLD_SIZE: u8 = 7;

pub unsafe extern "C" fn malloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::malloc::<B, P, H>(size) };
    append(MALLOC, 0, p as usize, 0, size, clock::ticks());
    p
}

pub unsafe extern "C" fn calloc<B: Raw, const P: bool, const H: bool>(n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::calloc::<B, P, H>(n, size) };
    append(CALLOC, 0, p as usize, 0, n.saturating_mul(size), clock::ticks());
    p
}

pub unsafe extern "C" fn realloc<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: `p` is null or a live block (the caller's contract for realloc).
    unsafe { old_size_traced::<B>(p) };
    // SAFETY: forwarded contract.
    let q = unsafe { record::realloc::<B, P, H>(p, size) };
    append(REALLOC, 0, q as usize, p as usize, size, clock::ticks());
    q
}

pub unsafe extern "C" fn reallocarray<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    n: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: `p` is null or a live block (the caller's contract for reallocarray).
    unsafe { old_size_traced::<B>(p) };
    // SAFETY: forwarded contract.
    let q = unsafe { record::reallocarray::<B, P, H>(p, n, size) };
    append(REALLOC, 0, q as usize, p as usize, n.saturating_mul(size), clock::ticks());
    q
}

/// A realloc's block: its usable size, in an entry of its own ([`OLD_SIZE`]) before the call,
/// so that the drain can give a block the window did not see allocated its size (the
/// realloc's entry has no room for it). Only in a window, outside the guard, for a non-null
/// block; a dropped marker leaves the realloc without it (old size 0), as before.
///
/// # Safety
/// `p` is null or a live block of this backend.
#[inline(always)]
unsafe fn old_size_traced<B: Raw>(p: *mut c_void) {
    if !p.is_null() && !tls::guarded() && WINDOW.load(Relaxed) != 0 {
        // SAFETY: `p` is a live block (the caller's contract).
        let u = unsafe { c_contract::usable_size::<B>(p) };
        append(OLD_SIZE, 0, 0, p as usize, u, clock::ticks());
    }
}

/// A free: recorded (with the block's usable size, for a block the window did not see
/// allocated) before the backend is called.
#[inline(always)]
unsafe fn free_traced<B: Raw>(p: *mut c_void) {
    if !p.is_null() && !tls::guarded() && WINDOW.load(Relaxed) != 0 {
        // SAFETY: `p` is a live block (the caller's contract for free).
        let u = unsafe { c_contract::usable_size::<B>(p) };
        append(FREE_OP, 0, 0, p as usize, u, clock::ticks());
    } else {
        append(FREE_OP, 0, 0, p as usize, 0, clock::ticks());
    }
}

pub unsafe extern "C" fn free<B: Raw, const P: bool, const H: bool>(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe {
        free_traced::<B>(p);
        record::free::<B, P, H>(p)
    }
}

pub unsafe extern "C" fn free_sized<B: Raw, const P: bool, const H: bool>(p: *mut c_void, size: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        free_traced::<B>(p);
        record::free_sized::<B, P, H>(p, size)
    }
}

pub unsafe extern "C" fn free_aligned_sized<B: Raw, const P: bool, const H: bool>(
    p: *mut c_void,
    align: usize,
    size: usize,
) {
    // SAFETY: forwarded contract.
    unsafe {
        free_traced::<B>(p);
        record::free_aligned_sized::<B, P, H>(p, align, size)
    }
}

pub unsafe extern "C" fn posix_memalign<B: Raw, const P: bool, const H: bool>(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    // SAFETY: forwarded contract; `out` is written when the call returns 0.
    unsafe {
        let r = record::posix_memalign::<B, P, H>(out, align, size);
        let p = if r == 0 { *out as usize } else { 0 };
        append(MEMALIGN, align, p, 0, size, clock::ticks());
        r
    }
}

pub unsafe extern "C" fn aligned_alloc<B: Raw, const P: bool, const H: bool>(
    align: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::aligned_alloc::<B, P, H>(align, size) };
    append(MEMALIGN, align, p as usize, 0, size, clock::ticks());
    p
}

pub unsafe extern "C" fn memalign<B: Raw, const P: bool, const H: bool>(
    align: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::memalign::<B, P, H>(align, size) };
    append(MEMALIGN, align, p as usize, 0, size, clock::ticks());
    p
}

pub unsafe extern "C" fn valloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::valloc::<B, P, H>(size) };
    append(MEMALIGN, 4096, p as usize, 0, size, clock::ticks());
    p
}

pub unsafe extern "C" fn pvalloc<B: Raw, const P: bool, const H: bool>(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { record::pvalloc::<B, P, H>(size) };
    append(MEMALIGN, 4096, p as usize, 0, size, clock::ticks());
    p
}
