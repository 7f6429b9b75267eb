//! The hot path's front: what every exported entry point does before the C semantics run —
//! count the call for the calling thread (unless profiling is off or the shim itself is calling).
//! Never allocates, locks, panics or makes a syscall.

use crate::csem;
use crate::slots::{self, Entry};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

static PROFILE: AtomicBool = AtomicBool::new(false);

/// Turns recording on or off (initialisation).
pub fn set_profile(on: bool) {
    PROFILE.store(on, Ordering::Relaxed);
}

#[inline(always)]
fn record(e: Entry) {
    if PROFILE.load(Ordering::Relaxed) {
        slots::count(e);
    }
}

#[inline(always)]
pub unsafe fn malloc(size: usize) -> *mut c_void {
    record(Entry::Malloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::malloc(size) }
}

#[inline(always)]
pub unsafe fn free(p: *mut c_void) {
    record(Entry::Free);
    // SAFETY: forwarded C contract.
    unsafe { csem::free(p) }
}

#[inline(always)]
pub unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    record(Entry::Calloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::calloc(n, size) }
}

#[inline(always)]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    record(Entry::Realloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::realloc(p, size) }
}

pub unsafe fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    record(Entry::Reallocarray);
    // SAFETY: forwarded C contract.
    unsafe { csem::reallocarray(p, n, size) }
}

pub unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    record(Entry::PosixMemalign);
    // SAFETY: forwarded C contract.
    unsafe { csem::posix_memalign(out, align, size) }
}

pub unsafe fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    record(Entry::AlignedAlloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::aligned_alloc(align, size) }
}

pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    record(Entry::Memalign);
    // SAFETY: forwarded C contract.
    unsafe { csem::memalign(align, size) }
}

pub unsafe fn valloc(size: usize) -> *mut c_void {
    record(Entry::Valloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::valloc(size) }
}

pub unsafe fn pvalloc(size: usize) -> *mut c_void {
    record(Entry::Pvalloc);
    // SAFETY: forwarded C contract.
    unsafe { csem::pvalloc(size) }
}

pub unsafe fn malloc_usable_size(p: *mut c_void) -> usize {
    record(Entry::MallocUsableSize);
    // SAFETY: forwarded C contract.
    unsafe { csem::usable_size(p) }
}

pub unsafe fn free_sized(p: *mut c_void, _size: usize) {
    record(Entry::FreeSized);
    // SAFETY: forwarded C contract.
    unsafe { csem::free(p) }
}

pub unsafe fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    record(Entry::FreeAlignedSized);
    // SAFETY: forwarded C contract.
    unsafe { csem::free(p) }
}
