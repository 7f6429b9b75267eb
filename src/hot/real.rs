//! glibc's definition of a symbol the shim interposes (`sigaction`, `signal`, `pthread_create`):
//! `dlsym(RTLD_NEXT)`, looked up once and cached by the caller. It runs under the reentrancy
//! guard (dlsym may allocate), which is why it lives above `tls` and not in the `base` leaf; never
//! called on the hot path.

use crate::hot::tls::Reentry;
use core::ffi::CStr;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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
