//! The pseudo-backend active before initialisation. Its first call initialises the shim and then
//! re-dispatches to the chosen backend; calls made while initialisation runs (by the initialising
//! thread, under its guard, or by any other thread) are served from the static bootstrap pool, so
//! nothing ever waits on a lock that dlopen might hold. Pool blocks are never freed.

use super::MemStats;
use crate::{bootstrap, init};
use core::ffi::c_void;

#[cold]
pub unsafe fn malloc(size: usize) -> *mut c_void {
    if init::ensure() {
        // SAFETY: the shim is ready; forwarded contract.
        return unsafe { super::malloc(size) };
    }
    bootstrap::alloc(size, crate::csem::MIN_ALIGN)
}

#[cold]
pub unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    if init::ensure() {
        // SAFETY: as above.
        return unsafe { super::calloc(n, size) };
    }
    // Pool memory starts zeroed and is never reused.
    bootstrap::alloc(n * size, crate::csem::MIN_ALIGN)
}

/// Only reached for a pointer that is not a pool block.
#[cold]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if init::ensure() {
        // SAFETY: as above.
        return unsafe { super::realloc(p, size) };
    }
    core::ptr::null_mut()
}

#[cold]
pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    if init::ensure() {
        // SAFETY: as above.
        return unsafe { super::memalign(align, size) };
    }
    bootstrap::alloc(size, align)
}

/// A pointer that no allocator of the shim handed out yet is left alone.
#[cold]
pub unsafe fn free(p: *mut c_void) {
    if init::ensure() {
        // SAFETY: as above.
        unsafe { super::free(p) }
    }
}

#[cold]
pub unsafe fn usable_size(p: *mut c_void) -> usize {
    if init::ensure() {
        // SAFETY: as above.
        return unsafe { super::usable_size(p) };
    }
    0
}

pub unsafe fn mem_stats() -> MemStats {
    MemStats::default()
}

pub unsafe fn release(_pad: usize) -> bool {
    false
}

pub unsafe fn version(out: &mut crate::diag::LineBuf) {
    out.put(b"bootstrap pool");
}

