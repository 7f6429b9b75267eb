//! The worker's heap: the memory of the Rust allocations the shim's own thread makes (dumps,
//! /proc readings, history rows, the control channel), from a TLSF allocator (`rlsf`) over
//! [`BYTES`] of the shim's reservation (`region`: no mapping of its own).
//!
//! Why: the shim's allocations were the host's. Under glibc the worker's first call created an
//! arena of its own (a 64 MiB-aligned heap mapping: two more mappings and a page-table range for
//! each fork to copy, about one page fault a fork, docs/results/fork.md "Session 20"); what it
//! held and freed counted as the host's live and allocator-free bytes; and a dump asked for when
//! the host had exhausted its memory could not be written. From its own heap, mapped at its
//! start, the worker writes that dump (with the host's figures of that moment).
//!
//! Ownership: only the worker allocates here, and only in the process that loaded the shim
//! ([`adopt`], from the worker's start; "on the worker" is "on the worker's stack", so no TLS).
//! A block freed by another thread is pushed on a lock-free list that the worker empties at its
//! next allocation. A forked child's handler [`disown`]s the heap: the parent's worker may have
//! been inside the allocator when the fork copied it, so a child's worker uses the backend and
//! blocks of the parent's heap are never freed in the child (their pages stay shared).
//! A freed block of [`DISCARD_FROM`] bytes or more gives its whole pages back (MADV_DONTNEED):
//! a dump's tables do not stay resident. When the heap cannot serve a request, the caller
//! (`own_heap`) goes to the backend as before.
//!
//! Never on the hot path. Must not call an allocator; takes no lock (the worker alone touches
//! the allocator's state).

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

/// Address space of the heap, bytes (untouched pages cost nothing).
pub const BYTES: usize = crate::base::region::WORKER_HEAP_BYTES;
/// Freed blocks at least this large give their whole pages back to the kernel.
pub const DISCARD_FROM: usize = 64 << 10;
const PAGE: usize = 4096;
/// The smallest block: room for a remote free's node ([`Node`]).
const MIN_BYTES: usize = core::mem::size_of::<Node>();

/// Granularity 32 bytes; blocks up to 32 << 24 bytes; 32 second-level classes per power of two.
type Heap = rlsf::Tlsf<'static, u32, u32, 24, 32>;

struct HeapCell(UnsafeCell<Heap>);
// SAFETY: only the worker thread reaches the cell (`alloc`, `realloc`, `free_local` and `drain`
// run on it: `on_worker`), so there is never a second reference.
unsafe impl Sync for HeapCell {}
static HEAP: HeapCell = HeapCell(UnsafeCell::new(Heap::new()));

/// Base of the heap's range (0: not mapped yet or not to be had).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// The worker's stack: its lowest byte and length (0: no worker on a known stack).
static STACK_LO: AtomicUsize = AtomicUsize::new(0);
static STACK_LEN: AtomicUsize = AtomicUsize::new(0);
/// Set by [`adopt`], cleared in a forked child by [`disown`]. In the fork handler's section, the
/// one page of the shim's data a child writes.
#[link_section = ".data.mallocshim_fork"]
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Head of the list of blocks freed by other threads (a [`Node`] address; 0 when empty).
static REMOTE: AtomicUsize = AtomicUsize::new(0);

/// What a block freed by another thread holds until the worker frees it.
#[repr(C)]
struct Node {
    next: usize,
    size: usize,
    align: usize,
}

/// From the worker's start, in the process that loaded the shim: maps the heap (once) and makes
/// the thread running on `stack_lo..stack_lo + stack_len` its owner. Nothing changes when the
/// caller does not run on that stack (glibc gave it one of its own) or there is no range for the
/// heap (the reservation full or missing): the worker uses the backend.
pub fn adopt(stack_lo: usize, stack_len: usize) {
    if !on_stack(stack_lo, stack_len) {
        return;
    }
    if BASE.load(Acquire) == 0 {
        let m = crate::base::region::take(BYTES);
        if m.is_null() {
            return;
        }
        let Some(block) = NonNull::new(core::ptr::slice_from_raw_parts_mut(m.cast::<u8>(), BYTES)) else {
            return;
        };
        // SAFETY: `block` is memory of our own, for the life of the process, given to the heap
        // once; the worker (this thread) is the only user of the cell.
        if unsafe { (*HEAP.0.get()).insert_free_block_ptr(block) }.is_none() {
            return;
        }
        BASE.store(m as usize, Release);
    }
    STACK_LO.store(stack_lo, Relaxed);
    STACK_LEN.store(stack_len, Relaxed);
    ENABLED.store(true, Release);
}

/// Fork child handler (async-signal-safe: one load, at most one store): the heap is the parent's.
#[inline(always)]
pub fn disown() {
    if ENABLED.load(Relaxed) {
        ENABLED.store(false, Relaxed);
    }
}

/// True when the caller runs on the worker's stack and the heap is this process's.
#[inline]
pub fn on_worker() -> bool {
    ENABLED.load(Acquire) && on_stack(STACK_LO.load(Relaxed), STACK_LEN.load(Relaxed))
}

/// True when the caller's frame lies in `lo..lo + len`.
#[inline(always)]
fn on_stack(lo: usize, len: usize) -> bool {
    let here = 0u8;
    (core::ptr::addr_of!(here) as usize).wrapping_sub(lo) < len
}

/// True when `p` points into the heap's range.
#[inline]
pub fn contains(p: *const u8) -> bool {
    let b = BASE.load(Acquire);
    b != 0 && (p as usize).wrapping_sub(b) < BYTES
}

fn fitted(l: Layout) -> Option<Layout> {
    Layout::from_size_align(l.size().max(MIN_BYTES), l.align().max(core::mem::align_of::<Node>())).ok()
}

/// A block for `l`, or null when the heap cannot serve it. Only on the worker (`on_worker`).
pub fn alloc(l: Layout) -> *mut u8 {
    let Some(l) = fitted(l) else {
        return core::ptr::null_mut();
    };
    drain();
    // SAFETY: the worker is the cell's only user (see `HeapCell`).
    let heap = unsafe { &mut *HEAP.0.get() };
    heap.allocate(l).map_or(core::ptr::null_mut(), |p| p.as_ptr())
}

/// `p` (a block of this heap allocated with `l`) resized to `new_size`, or null (then `p` is
/// untouched). Only on the worker.
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
    drain();
    // SAFETY: `p` is a live block allocated with `new`'s alignment (`fitted` of the same align);
    // the worker is the cell's only user.
    unsafe { (*HEAP.0.get()).reallocate(p, new) }.map_or(core::ptr::null_mut(), |q| q.as_ptr())
}

/// Frees `p` (a block of this heap allocated with `l`): at once on the worker, through the remote
/// list from another thread; never in a forked child (the block is the parent's heap's).
///
/// # Safety
/// `p` is a live block of this heap, allocated with layout `l`.
pub unsafe fn free(p: *mut u8, l: Layout) {
    if !ENABLED.load(Acquire) {
        return;
    }
    let Some(l) = fitted(l) else { return };
    if on_worker() {
        // SAFETY: forwarded contract.
        return unsafe { free_local(p, l) };
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

/// Frees the blocks other threads handed back (on the worker).
fn drain() {
    let mut n = REMOTE.swap(0, Acquire);
    while n != 0 {
        // SAFETY: every node on the list is a freed block of this heap written by `free`.
        unsafe {
            let node = n as *mut Node;
            let (next, size, align) = ((*node).next, (*node).size, (*node).align);
            free_local(node.cast(), Layout::from_size_align_unchecked(size, align));
            n = next;
        }
    }
}

/// # Safety
/// On the worker; `p` is a live block of this heap allocated with the fitted layout `l`.
unsafe fn free_local(p: *mut u8, l: Layout) {
    if l.size() >= DISCARD_FROM {
        // The whole pages inside the block, past the first 64 bytes (where the allocator writes
        // its free-block header): nothing of the allocator's lives there.
        let lo = (p as usize + 64).next_multiple_of(PAGE);
        let hi = (p as usize + l.size()) & !(PAGE - 1);
        if hi > lo {
            // SAFETY: pages of a block the caller no longer uses; they read as zeros afterwards.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
        }
    }
    // SAFETY: forwarded contract; the worker is the cell's only user.
    unsafe { (*HEAP.0.get()).deallocate(NonNull::new_unchecked(p), l.align()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_reuses_and_takes_remote_frees() {
        // The test thread plays the worker: its stack is "the worker's stack".
        let here = 0u8;
        let sp = core::ptr::addr_of!(here) as usize;
        adopt(sp - (256 << 10), (256 << 10) + 256);
        assert!(on_worker());
        let l = Layout::from_size_align(100, 8).unwrap();
        let a = alloc(l);
        assert!(contains(a));
        let big = Layout::from_size_align(1 << 20, 4096).unwrap();
        let b = alloc(big);
        assert!(contains(b) && (b as usize).is_multiple_of(4096));
        // SAFETY: blocks just allocated with these layouts.
        unsafe {
            b.write_bytes(7, 1 << 20);
            let c = realloc(a, l, 5000);
            assert!(contains(c));
            free(c, Layout::from_size_align(5000, 8).unwrap());
            free(b, big);
        }
        // A remote free: pushed, then freed by the next allocation.
        let d = alloc(l) as usize;
        std::thread::scope(|s| {
            // SAFETY: the block is live and handed to the other thread whole.
            s.spawn(move || unsafe { free(d as *mut u8, l) });
        });
        assert_ne!(REMOTE.load(Relaxed), 0);
        let e = alloc(big);
        assert_eq!(REMOTE.load(Relaxed), 0);
        assert!(contains(e));
        // SAFETY: as above.
        unsafe { free(e, big) };
        disown();
        assert!(!on_worker());
    }
}
