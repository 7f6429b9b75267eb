//! Leaf helpers over libc shared by several rooms: errno (read and set, and its fixed offset
//! from the thread pointer, which lets the hot path keep errno around a backend's free without a
//! call) and glibc's definition of an interposed symbol (`dlsym(RTLD_NEXT)`, looked up once and
//! cached). Depends on `tls` alone. `next` runs under the reentrancy guard (dlsym may allocate)
//! and is never called on the hot path; the errno functions never allocate, lock or fail. Also
//! the anonymous mapping behind the shim's own tables (slots, heap-profile tables, reserve).

use crate::hot::tls::Reentry;
use core::ffi::{c_int, CStr};
use core::sync::atomic::{AtomicUsize, Ordering, Ordering::Relaxed};

#[inline(always)]
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[inline(always)]
pub fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// Offset of glibc's `errno` from the thread pointer. libc's TLS block is in the static TLS
/// area, at the same offset from the thread pointer in every thread (what initial-exec TLS relies
/// on), so one reading at start-up gives every thread's errno without a call.
#[cfg(target_arch = "x86_64")]
static ERRNO_TPOFF: core::sync::atomic::AtomicIsize = core::sync::atomic::AtomicIsize::new(0);

/// Records errno's offset from the thread pointer (initialisation, before any backend runs).
pub fn init_errno() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: __errno_location returns this thread's errno slot.
        let e = unsafe { libc::__errno_location() } as isize;
        ERRNO_TPOFF.store(e.wrapping_sub(crate::hot::tls::thread_pointer() as isize), Ordering::Relaxed);
    }
}

/// This thread's errno slot, without a call (x86-64; `__errno_location` elsewhere).
#[inline(always)]
pub fn errno_slot() -> *mut c_int {
    #[cfg(target_arch = "x86_64")]
    {
        (crate::hot::tls::thread_pointer() as isize).wrapping_add(ERRNO_TPOFF.load(Ordering::Relaxed))
            as *mut c_int
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe {
        libc::__errno_location()
    }
}

/// glibc's definition of `name`, looked up once with dlsym(RTLD_NEXT) under the guard.
pub(crate) fn next(cache: &AtomicUsize, name: &CStr) -> usize {
    let v = cache.load(Relaxed);
    if v != 0 {
        return v;
    }
    let _g = Reentry::enter();
    // SAFETY: dlsym with a valid NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(p, Relaxed);
    p
}

/// A fresh anonymous private read-write mapping of `bytes` (zero-filled), or null when mmap
/// fails. `noreserve` adds `MAP_NORESERVE` (no swap reserved: address space that is touched as it
/// fills). Never calls an allocator.
pub fn map_anon(bytes: usize, noreserve: bool) -> *mut core::ffi::c_void {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if noreserve { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: an anonymous mapping with no address hint; the result is checked for MAP_FAILED.
    let m =
        unsafe { libc::mmap(core::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if m == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        m
    }
}
