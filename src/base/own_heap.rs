//! The shim's own heap: Rust's global allocator inside the .so. An allocation made on the shim's
//! own thread comes from its heap (`worker_heap`), so that the thread is no client of the
//! backend; one made inside the heap profiler's scope (its tables kept for the life of the
//! process) from the profiler's heap (`tables_heap`); every other allocation of the shim's cold path (a dump written by a program's
//! thread, the C API) and one the worker's heap cannot serve goes to std's `System` allocator,
//! that is the interposed malloc family and so, under the thread's reentrancy guard, to the backend.
//! When that returns NULL (an exhausted `RLIMIT_AS`, `vm.overcommit_memory=2`), the block comes
//! from a reserve of [`RESERVE_BYTES`] mapped at start-up instead: Rust aborts the process on a
//! failed infallible allocation, and the shim must never abort its host, least of all when a
//! DBA asks for a dump because memory ran out. Fallible requests (`try_reserve`: the heap
//! profile's copy of its tables) get NULL when the reserve cannot hold them either. Nothing kept
//! for the life of the process may come from here (caches check [`counts`] around their fills):
//! one such block would keep the reserve from ever starting over.
//!
//! The reserve is a lock-free bump region with a count of live blocks: it is reused from its
//! start once every block in it is freed. It is `MAP_NORESERVE` address space, touched only
//! when used. Never used by the hot path (which does not allocate); must not call an allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::alloc::System;

use crate::base::{tables_heap, worker_heap};

/// Size of the reserve, bytes.
pub const RESERVE_BYTES: usize = 32 << 20;
const OFFSET_MASK: u64 = 0xffff_ffff;

/// Base address of the mapped reserve (0 until mapped).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Live blocks (high 32 bits) and the bump offset (low 32 bits), updated together.
static STATE: AtomicU64 = AtomicU64::new(0);
/// Allocations served from the reserve since start, and those it could not hold.
static SERVED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Maps the reserve (idempotent). Called at initialisation, while memory is to be had; tried
/// again at the first fallback if that failed.
pub fn map() {
    if BASE.load(Acquire) != 0 {
        return;
    }
    let p = crate::base::region::take(RESERVE_BYTES);
    if p.is_null() {
        return;
    }
    if BASE.compare_exchange(0, p as usize, AcqRel, Acquire).is_err() {
        // The range taken just above, which lost the race and is unused.
        crate::base::region::give_back(p, RESERVE_BYTES);
    }
}

/// (allocations served from the reserve, allocations it could not hold) since start.
pub fn counts() -> (u64, u64) {
    (SERVED.load(Relaxed), REFUSED.load(Relaxed))
}

/// True when `p` is a block of the reserve (the shim's own allocator found no other memory).
pub fn in_reserve(p: *mut u8) -> bool {
    contains(p)
}

fn contains(p: *mut u8) -> bool {
    let base = BASE.load(Acquire);
    base != 0 && (p as usize).wrapping_sub(base) < RESERVE_BYTES
}

fn take(l: Layout) -> *mut u8 {
    map();
    let base = BASE.load(Acquire);
    if base == 0 {
        REFUSED.fetch_add(1, Relaxed);
        return core::ptr::null_mut();
    }
    let mut cur = STATE.load(Relaxed);
    loop {
        let off = (cur & OFFSET_MASK) as usize;
        let start = (base + off).next_multiple_of(l.align()) - base;
        let end = match start.checked_add(l.size().max(1)) {
            Some(e) if e <= RESERVE_BYTES => e,
            _ => {
                REFUSED.fetch_add(1, Relaxed);
                return core::ptr::null_mut();
            }
        };
        let next = (((cur >> 32) + 1) << 32) | end as u64;
        match STATE.compare_exchange_weak(cur, next, AcqRel, Relaxed) {
            Ok(_) => {
                SERVED.fetch_add(1, Relaxed);
                return (base + start) as *mut u8;
            }
            Err(now) => cur = now,
        }
    }
}

fn give_back() {
    let mut cur = STATE.load(Relaxed);
    loop {
        let live = (cur >> 32).saturating_sub(1);
        // The last live block gone: the whole region is free again.
        let next = if live == 0 { 0 } else { (live << 32) | (cur & OFFSET_MASK) };
        match STATE.compare_exchange_weak(cur, next, AcqRel, Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// The global allocator of the .so (see the module doc).
pub struct ShimHeap;

// SAFETY: every block comes from `System` (and goes back to it) or from the reserve (and goes
// back to it, recognised by address); sizes and alignments are those of the layouts given.
unsafe impl GlobalAlloc for ShimHeap {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if worker_heap::on_worker() {
            let p = worker_heap::alloc(l);
            if !p.is_null() {
                return p;
            }
        } else if tables_heap::mine() {
            let p = tables_heap::alloc(l);
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: forwarded GlobalAlloc contract.
        let p = unsafe { System.alloc(l) };
        if p.is_null() {
            take(l)
        } else {
            p
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if worker_heap::on_worker() {
            let p = worker_heap::alloc(l);
            if !p.is_null() {
                // SAFETY: `alloc` returned `l.size()` writable bytes (reused ones are not zero).
                unsafe { core::ptr::write_bytes(p, 0, l.size()) };
                return p;
            }
        } else if tables_heap::mine() {
            let p = tables_heap::alloc(l);
            if !p.is_null() {
                // SAFETY: as above.
                unsafe { core::ptr::write_bytes(p, 0, l.size()) };
                return p;
            }
        }
        // SAFETY: forwarded GlobalAlloc contract.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            return p;
        }
        let p = take(l);
        if !p.is_null() {
            // SAFETY: `take` returned `l.size()` writable bytes (reused reserve bytes are not zero).
            unsafe { core::ptr::write_bytes(p, 0, l.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if worker_heap::contains(p) {
            // SAFETY: `p` came from the worker's heap with layout `l`.
            unsafe { worker_heap::free(p, l) }
        } else if tables_heap::contains(p) {
            // SAFETY: `p` came from the profiler's heap with layout `l`.
            unsafe { tables_heap::free(p, l) }
        } else if contains(p) {
            give_back();
        } else {
            // SAFETY: `p` came from `System` with layout `l`.
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let worker = worker_heap::contains(p);
        let tables = tables_heap::contains(p);
        // A block of the backend stays there, but inside the profiler's scope, where it moves
        // to the profiler's heap.
        let scoped = tables_heap::mine();
        let mine = worker || tables;
        if worker && worker_heap::on_worker() {
            // SAFETY: `p` came from the worker's heap with layout `l`.
            let q = unsafe { worker_heap::realloc(p, l, new_size) };
            if !q.is_null() {
                return q;
            }
        } else if tables && scoped {
            // SAFETY: `p` came from the profiler's heap with layout `l`.
            let q = unsafe { tables_heap::realloc(p, l, new_size) };
            if !q.is_null() {
                return q;
            }
        } else if !mine && !contains(p) && !scoped {
            // SAFETY: `p` came from `System` with layout `l`; forwarded contract.
            let q = unsafe { System.realloc(p, l, new_size) };
            if !q.is_null() {
                return q;
            }
        }
        // Moved: a block of the worker's or the profiler's heap (off its owner, or the heap
        // full), of the reserve, or of `System` inside the profiler's scope, to a new one from
        // `alloc`; a block `System` could not grow, to the reserve.
        // SAFETY: `new_size` with `l`'s alignment is a valid layout (the caller's contract).
        let nl = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        let q = if mine || contains(p) || scoped {
            // SAFETY: forwarded contract; the worker's heap or System first, the reserve after.
            unsafe { self.alloc(nl) }
        } else {
            take(nl)
        };
        if !q.is_null() {
            // SAFETY: both blocks hold at least the smaller size; they are distinct blocks.
            unsafe {
                core::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                self.dealloc(p, l);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_serves_aligned_blocks_and_resets_when_empty() {
        map();
        let a = take(Layout::from_size_align(100, 8).unwrap());
        let b = take(Layout::from_size_align(64, 4096).unwrap());
        assert!(contains(a) && contains(b));
        assert_eq!(b as usize % 4096, 0);
        assert!(take(Layout::from_size_align(RESERVE_BYTES, 8).unwrap()).is_null());
        give_back();
        give_back();
        assert_eq!(STATE.load(Relaxed), 0, "empty reserve starts over");
        let c = take(Layout::from_size_align(16, 16).unwrap());
        assert_eq!(c as usize, BASE.load(Relaxed));
        give_back();
    }
}
