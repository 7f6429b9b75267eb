//! The heap profiler's own heap: the memory of the tables the sampler builds and keeps for the
//! life of the process (the unwind caches and their memos, the published unwind state with its
//! copies of each module's `.eh_frame`), from a TLSF allocator (`rlsf`) over [`BYTES`] of the
//! shim's reservation (`region`), never from the backend.
//!
//! Why: these tables were Rust allocations made under the reentrancy guard, so the backend's:
//! the first sample added 1.1–1.4 MB to the program's `mallinfo2()` and the account's live bytes
//! that never went away, and glibc's tst-malloc-tcache-leak failed under the glibc, jemalloc and
//! tcmalloc backends (issue 37).
//!
//! Ownership: a thread allocates here only inside a [`Scope`], which one thread holds at a time
//! (the sampler's registrations already run one at a time: `heapprof::cfi`'s writer flag); the
//! global allocator (`own_heap`) sends a scope holder's allocations here and every block of this
//! range back here. A block freed outside a scope (by another thread) is pushed on a lock-free
//! list that the next scope holder empties. A forked child whose parent had a thread inside a
//! scope at the fork disowns the heap (its state may be half-updated): the child allocates from
//! the backend and never frees a block of this range. When the heap cannot serve a request, the
//! caller goes to the backend. Never on the hot path. Must not call an allocator.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

/// Address space of the heap, bytes (untouched pages cost nothing).
pub const BYTES: usize = crate::base::region::TABLES_HEAP_BYTES;
const MIN_BYTES: usize = core::mem::size_of::<Node>();

/// Granularity 32 bytes; blocks up to 32 << 24 bytes; 32 second-level classes per power of two.
type Heap = rlsf::Tlsf<'static, u32, u32, 24, 32>;

struct HeapCell(UnsafeCell<Heap>);
// SAFETY: only the holder of the scope (`OWNER`, one thread at a time, handed over with
// Acquire/Release) reaches the cell.
unsafe impl Sync for HeapCell {}
static HEAP: HeapCell = HeapCell(UnsafeCell::new(Heap::new()));

/// Base of the heap's range (0: not mapped yet; 1: not to be had).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// `pthread_self()` of the thread inside a scope; 0 when none.
static OWNER: AtomicUsize = AtomicUsize::new(0);
/// Set in a forked child whose parent was inside a scope at the fork: never used again.
static DISOWNED: AtomicBool = AtomicBool::new(false);
/// Head of the list of blocks freed outside a scope (a [`Node`] address; 0 when empty).
static REMOTE: AtomicUsize = AtomicUsize::new(0);

/// What a block freed outside a scope holds until the next scope holder frees it.
#[repr(C)]
struct Node {
    next: usize,
    size: usize,
    align: usize,
}

fn me() -> usize {
    // SAFETY: pthread_self has no preconditions (a read of the thread pointer).
    unsafe { libc::pthread_self() as usize }
}

/// While alive, the calling thread's Rust allocations come from this heap (when it has room).
/// Held by one thread at a time: a second thread's scope (or one taken while the heap cannot be
/// had) is inactive, and its allocations go to the backend as before.
pub struct Scope(bool);

/// Enters a scope (see [`Scope`]); maps the heap at the first one.
pub fn enter() -> Scope {
    if DISOWNED.load(Relaxed) || OWNER.compare_exchange(0, me(), Acquire, Relaxed).is_err() {
        return Scope(false);
    }
    if BASE.load(Relaxed) == 0 {
        BASE.store(map().unwrap_or(1), Relaxed);
    }
    if BASE.load(Relaxed) == 1 {
        OWNER.store(0, Release);
        return Scope(false);
    }
    drain();
    Scope(true)
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.0 {
            OWNER.store(0, Release);
        }
    }
}

/// Takes the heap's range from the reservation and gives it to the allocator (scope holder).
fn map() -> Option<usize> {
    let m = crate::base::region::take(BYTES);
    let block = NonNull::new(core::ptr::slice_from_raw_parts_mut(m.cast::<u8>(), BYTES))?;
    // SAFETY: memory of our own for the life of the process, given to the heap once; the scope
    // holder is the cell's only user.
    unsafe { (*HEAP.0.get()).insert_free_block_ptr(block) }?;
    Some(m as usize)
}

/// True when the caller holds an active scope.
#[inline]
pub fn mine() -> bool {
    let o = OWNER.load(Relaxed);
    o != 0 && o == me()
}

/// True when `p` points into the heap's range.
#[inline]
pub fn contains(p: *const u8) -> bool {
    let b = BASE.load(Relaxed);
    b > 1 && (p as usize).wrapping_sub(b) < BYTES
}

fn fitted(l: Layout) -> Option<Layout> {
    Layout::from_size_align(l.size().max(MIN_BYTES), l.align().max(core::mem::align_of::<Node>())).ok()
}

/// A block for `l`, or null when the heap cannot serve it. Only inside a scope ([`mine`]).
pub fn alloc(l: Layout) -> *mut u8 {
    let Some(l) = fitted(l) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the scope holder is the cell's only user (see `HeapCell`).
    let heap = unsafe { &mut *HEAP.0.get() };
    heap.allocate(l).map_or(core::ptr::null_mut(), |p| p.as_ptr())
}

/// `p` resized to `new_size`, or null (then `p` is untouched). Only inside a scope.
///
/// # Safety
/// `p` is a live block of this heap, allocated with layout `l`.
pub unsafe fn realloc(p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
    let Ok(new) = Layout::from_size_align(new_size, l.align()) else {
        return core::ptr::null_mut();
    };
    let (Some(new), Some(p)) = (fitted(new), NonNull::new(p)) else {
        return core::ptr::null_mut();
    };
    // SAFETY: `p` is a live block allocated with `new`'s alignment (`fitted` of the same align);
    // the scope holder is the cell's only user.
    unsafe { (*HEAP.0.get()).reallocate(p, new) }.map_or(core::ptr::null_mut(), |q| q.as_ptr())
}

/// Frees `p` (a block of this heap allocated with `l`): at once inside a scope, else through the
/// list the next scope holder empties; never in a child that disowned the heap.
///
/// # Safety
/// `p` is a live block of this heap, allocated with layout `l`.
pub unsafe fn free(p: *mut u8, l: Layout) {
    if DISOWNED.load(Relaxed) {
        return;
    }
    let Some(l) = fitted(l) else { return };
    if mine() {
        // SAFETY: forwarded contract; the scope holder is the cell's only user.
        return unsafe { (*HEAP.0.get()).deallocate(NonNull::new_unchecked(p), l.align()) };
    }
    let node = p.cast::<Node>();
    // SAFETY: the block is at least a `Node` long and aligned for one (`fitted`), and no longer
    // the caller's.
    unsafe { node.write(Node { next: 0, size: l.size(), align: l.align() }) };
    let mut head = REMOTE.load(Relaxed);
    loop {
        // SAFETY: as above; the node is not published until the exchange succeeds.
        unsafe { (*node).next = head };
        match REMOTE.compare_exchange_weak(head, node as usize, Release, Relaxed) {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

/// Frees the blocks freed outside a scope (the scope holder).
fn drain() {
    let mut n = REMOTE.swap(0, Acquire);
    while n != 0 {
        // SAFETY: every node on the list is a freed block of this heap written by `free`; the
        // scope holder is the cell's only user.
        unsafe {
            let node = n as *mut Node;
            let next = (*node).next;
            (*HEAP.0.get()).deallocate(NonNull::new_unchecked(node.cast()), (*node).align);
            n = next;
        }
    }
}

/// Fork child handler (async-signal-safe; writes only when a thread was inside a scope).
#[inline(always)]
pub fn after_fork_child() {
    if OWNER.load(Relaxed) != 0 {
        DISOWNED.store(true, Relaxed);
        OWNER.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_inside_a_scope_and_takes_frees_from_outside() {
        let l = Layout::from_size_align(100, 8).unwrap();
        let a = {
            let s = enter();
            assert!(s.0 && mine());
            assert!(!enter().0, "one holder at a time");
            let a = alloc(l);
            assert!(contains(a));
            // SAFETY: a block just allocated with `l`.
            let b = unsafe { realloc(a, l, 5000) };
            assert!(contains(b));
            b
        };
        assert!(!mine());
        // SAFETY: a live block of this heap; freed outside a scope: pushed on the list.
        unsafe { free(a, Layout::from_size_align(5000, 8).unwrap()) };
        assert_ne!(REMOTE.load(Relaxed), 0);
        let _s = enter();
        assert_eq!(REMOTE.load(Relaxed), 0, "the next holder frees it");
    }
}
