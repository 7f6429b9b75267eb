//! The shim's own address space: one anonymous `MAP_NORESERVE` reservation of [`BYTES`], mapped
//! at the first request, that holds the memory the shim maps for itself — the worker's stack and
//! its guard page, the memory-history ring, and (from a lock-free bump area) the own heap's
//! reserve, the heap profile's tables and heap, the thread-slot chunks and the worker's heap — so that it
//! is a few mappings (VMAs) in the process, not one per table.
//!
//! Why one reservation: every `fork()` duplicates each VMA of the process, and on the machines
//! measured (docs/results/fork.md) each VMA costs about 3 µs of fork+exit, about 7 µs when it
//! also has its own page-table page. The shim used to add 9 anonymous mappings; adjacent ones
//! with the same flags are merged by the kernel, so laid out here they are at most three:
//! the guard (`PROT_NONE`), the worker's stack and the ring (`MADV_WIPEONFORK`, marked together
//! by whichever of [`worker_stack`] and [`ring`] comes first) and everything else. Marked
//! together, not each by its caller: two ranges split off while the reservation had no memory
//! yet can get distinct anonymous-memory roots when first touched, and the kernel does not merge
//! those back (2 wipe-on-fork mappings, seen in 1 run of 40 under mimalloc).
//!
//! The reservation is `MADV_NOHUGEPAGE`: the shim's memory is sparse, and under THP `always` a
//! few touched pages would otherwise be a 2 MiB page each.
//!
//! Layout, from the lowest address: [`GUARD_BYTES`] | [`WORKER_STACK_BYTES`] | [`RING_MAX_BYTES`]
//! | the bump area. Untouched pages cost no memory. When the reservation cannot be mapped (an
//! address-space limit) or the bump area is full, each request gets its own mapping, as before.
//!
//! Never unmapped; ranges are never returned (a range a caller no longer wants is left untouched:
//! no memory). Must not allocate or lock: [`take`] runs on the hot path's first call of a thread
//! (a slot chunk), where its syscalls are the reservation's mmap and madvise, once per process
//! (in practice at initialisation, where the own heap takes its reserve first).

use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering::*};

/// The inaccessible page below the worker's stack.
pub const GUARD_BYTES: usize = 4096;
/// The worker's stack, bytes (std's default for its threads).
pub const WORKER_STACK_BYTES: usize = 2 << 20;
/// Room for the memory-history ring, bytes (the ring asserts it fits).
pub const RING_MAX_BYTES: usize = 1 << 20;
/// The bump area: the own heap's reserve (32 MiB), the heap profile's tables (about 44.5 MiB),
/// slot chunks (820 KiB per 64 threads: room for 8, 512 threads), the per-class latency
/// histograms' stripes (4.1 MiB, `hot::class_latency`), the worker's heap
/// ([`WORKER_HEAP_BYTES`], taken at the worker's first start) and the heap profiler's heap
/// ([`TABLES_HEAP_BYTES`], at its first sample); later requests get their own mapping. Address
/// space only: `MAP_NORESERVE`, untouched pages cost no memory.
const BUMP_BYTES: usize = (83 << 20) + CLASS_LATENCY_BYTES + WORKER_HEAP_BYTES + TABLES_HEAP_BYTES;
/// Room for the per-class latency histograms' stripes, bytes (`hot::class_latency`, which
/// takes about 4.1 MiB at initialisation).
const CLASS_LATENCY_BYTES: usize = 5 << 20;
/// The worker's heap (`worker_heap`), bytes of the bump area.
pub const WORKER_HEAP_BYTES: usize = 32 << 20;
/// The heap profiler's heap (`tables_heap`: unwind caches, memos, `.eh_frame` copies), bytes.
pub const TABLES_HEAP_BYTES: usize = 64 << 20;
/// The whole reservation, bytes.
pub const BYTES: usize = GUARD_BYTES + WORKER_STACK_BYTES + RING_MAX_BYTES + BUMP_BYTES;
const BUMP_OFFSET: usize = GUARD_BYTES + WORKER_STACK_BYTES + RING_MAX_BYTES;
const PAGE: usize = 4096;

/// Base of the reservation; 0 until mapped, 1 when mapping it failed (never tried again).
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Bytes of the bump area handed out.
static USED: AtomicUsize = AtomicUsize::new(0);

/// The reservation's base, mapping it at the first call (None when it cannot be mapped).
fn base() -> Option<usize> {
    match BASE.load(Acquire) {
        0 => {}
        1 => return None,
        b => return Some(b),
    }
    let m = crate::base::sys::map_anon(BYTES, true);
    if !m.is_null() {
        // No transparent huge pages: under THP `always` each 2 MiB range the shim touches a few
        // pages of (a slot chunk, a hash-indexed profile table) would become 2 MiB of RSS. The
        // answer does not matter (EINVAL without THP in the kernel): small pages either way.
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(m, BYTES, libc::MADV_NOHUGEPAGE) };
    }
    let mine = if m.is_null() { 1 } else { m as usize };
    match BASE.compare_exchange(0, mine, AcqRel, Acquire) {
        Ok(_) => (mine != 1).then_some(mine),
        Err(theirs) => {
            if mine != 1 {
                // SAFETY: the mapping made just above, which lost the race and is unused.
                unsafe { libc::munmap(m, BYTES) };
            }
            (theirs != 1).then_some(theirs)
        }
    }
}

/// `bytes` of zeroed read-write memory, page-aligned, for the life of the process: from the bump
/// area, or its own `MAP_NORESERVE` mapping when the area is full or the reservation failed. Null
/// when neither can be had. Lock-free.
pub fn take(bytes: usize) -> *mut c_void {
    let len = bytes.div_ceil(PAGE) * PAGE;
    if let Some(b) = base() {
        let mut used = USED.load(Relaxed);
        while used + len <= BUMP_BYTES {
            match USED.compare_exchange_weak(used, used + len, Relaxed, Relaxed) {
                Ok(_) => return (b + BUMP_OFFSET + used) as *mut c_void,
                Err(u) => used = u,
            }
        }
    }
    crate::base::sys::map_anon(bytes, true)
}

/// Gives back a range from [`take`] that was never used (a lost race): its own mapping is
/// unmapped; a range of the reservation is left as it is (untouched, so no memory).
pub fn give_back(p: *mut c_void, bytes: usize) {
    if !contains(p) {
        // SAFETY: a mapping `take` made for this caller alone, never published.
        unsafe { libc::munmap(p, bytes) };
    }
}

/// True when `p` lies in the reservation.
pub fn contains(p: *const c_void) -> bool {
    match BASE.load(Acquire) {
        0 | 1 => false,
        b => (p as usize).wrapping_sub(b) < BYTES,
    }
}

/// Marks the worker's stack and the ring above it wipe-on-fork in one call (idempotent), before
/// either is used: one mapping, whose pages a child sees zeroed and a fork does not copy.
fn mark_wipe(b: usize) {
    let stack = (b + GUARD_BYTES) as *mut c_void;
    crate::base::sys::wipe_on_fork(stack, WORKER_STACK_BYTES + RING_MAX_BYTES);
}

/// The worker's stack (its lowest usable byte, [`WORKER_STACK_BYTES`] long), wipe-on-fork, with
/// an inaccessible guard page below it: in the reservation (marked with the ring), or a mapping
/// of its own (guard first) without it. Null when neither can be had.
pub fn worker_stack() -> *mut c_void {
    let m = match base() {
        Some(b) => {
            mark_wipe(b);
            b as *mut c_void
        }
        None => crate::base::sys::map_anon(GUARD_BYTES + WORKER_STACK_BYTES, true),
    };
    if m.is_null() {
        return m;
    }
    // SAFETY: the first page of the range just found, reserved for this guard; the rest is the
    // stack. A guard that cannot be set leaves the stack usable, unguarded.
    let stack = unsafe {
        libc::mprotect(m, GUARD_BYTES, libc::PROT_NONE);
        m.cast::<u8>().add(GUARD_BYTES).cast::<c_void>()
    };
    if !contains(m) {
        crate::base::sys::wipe_on_fork(stack, WORKER_STACK_BYTES);
    }
    stack
}

/// Room for `bytes` (at most [`RING_MAX_BYTES`]) of the memory-history ring: just above the
/// worker's stack in the reservation (wipe-on-fork with it), or a mapping of its own without
/// it (wipe-on-fork too). Null when neither can be had.
pub fn ring(bytes: usize) -> *mut c_void {
    match base() {
        Some(b) if bytes <= RING_MAX_BYTES => {
            mark_wipe(b);
            (b + GUARD_BYTES + WORKER_STACK_BYTES) as *mut c_void
        }
        _ => {
            let m = crate::base::sys::map_anon(bytes, false);
            if !m.is_null() {
                crate::base::sys::wipe_on_fork(m, bytes);
            }
            m
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_are_page_aligned_disjoint_and_inside() {
        let a = take(100) as usize;
        let b = take(PAGE + 1) as usize;
        let c = take(PAGE) as usize;
        assert!(contains(a as *const c_void) && contains(c as *const c_void));
        assert_eq!(a % PAGE, 0);
        assert!(b >= a + PAGE && c >= b + 2 * PAGE, "{a:x} {b:x} {c:x}");
        let r = ring(RING_MAX_BYTES) as usize;
        let s = worker_stack() as usize;
        assert_eq!(r, s + WORKER_STACK_BYTES);
        assert!(a >= r + RING_MAX_BYTES);
        // Writable and zeroed.
        // SAFETY: a page of the reservation just taken.
        unsafe {
            assert_eq!(*(c as *const u64), 0);
            *(c as *mut u64) = 7;
        }
    }

    #[test]
    fn a_request_larger_than_the_area_gets_its_own_mapping() {
        let p = take(BUMP_BYTES + PAGE);
        assert!(!p.is_null() && !contains(p));
        give_back(p, BUMP_BYTES + PAGE);
    }
}
