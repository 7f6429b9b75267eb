//! The exported C symbols: forwards to the `route` table (the malloc family: naked, one load and
//! one indirect jump, see [`super::route_forward`]), `introspect`, `thread_start` (`pthread_create`) and
//! `signals` (the dump signal's interposers); C++'s new and delete families are exported by
//! [`super::cxx`].
//! No logic lives here. `__libc_*` names are deliberately not exported.

#![allow(non_snake_case)]

use crate::backend::atfork;
use crate::backend::glibc::{Mallinfo, Mallinfo2};
use crate::boundary::signals;
use crate::cold::{introspect, thread_start};
use core::ffi::{c_char, c_int, c_void};

// The malloc family (its signatures: `route::malloc_family`). Each is called by C code with the
// C contract of the function of the same name, which the table's function keeps.
crate::hot::route::malloc_family!(route_forward);

// SAFETY (for every function below): each is called by C code with the C contract of the
// function of the same name; the forwards keep that contract.

#[no_mangle]
pub extern "C" fn mallinfo2() -> Mallinfo2 {
    introspect::mallinfo2()
}

#[no_mangle]
pub extern "C" fn mallinfo() -> Mallinfo {
    introspect::mallinfo()
}

#[no_mangle]
pub extern "C" fn malloc_trim(pad: usize) -> c_int {
    introspect::malloc_trim(pad)
}

#[no_mangle]
pub extern "C" fn malloc_stats() {
    introspect::malloc_stats()
}

#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { introspect::malloc_info(options, fp) }
}

#[no_mangle]
pub unsafe extern "C" fn mallctl(
    name: *const c_char,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *mut c_void,
    newlen: usize,
) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { introspect::mallctl(name, oldp, oldlenp, newp, newlen) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { thread_start::pthread_create(t, attr, start, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { signals::sigaction(sig, act, old) }
}

#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { signals::signal(sig, handler) }
}

#[no_mangle]
pub unsafe extern "C" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { signals::sigtimedwait(set, info, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn sigwaitinfo(set: *const libc::sigset_t, info: *mut libc::siginfo_t) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { signals::sigwaitinfo(set, info) }
}

#[no_mangle]
pub unsafe extern "C" fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { signals::sigwait(set, sig) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_atfork(
    prepare: atfork::Handler,
    parent: atfork::Handler,
    child: atfork::Handler,
) -> c_int {
    // SAFETY: forwarded pthread_atfork contract (handlers are plain C functions or NULL).
    unsafe { atfork::pthread_atfork(prepare, parent, child) }
}
