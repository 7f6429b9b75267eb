//! The exported C symbols: one-line forwards to the `route` table (the malloc family: one load
//! and one indirect jump), `introspect` and
//! `signals` (the dump signal's interposers), and C++'s delete family (`heapprof::cxx`; the new
//! family is exported there, as naked stubs that can tail-jump into libstdc++).
//! No logic lives here. `__libc_*` names are deliberately not exported.

#![allow(non_snake_case)]

use crate::backend::glibc::{Mallinfo, Mallinfo2};
use crate::heapprof::cxx;
use crate::{atfork, introspect, route, signals, worker};
use core::ffi::{c_char, c_int, c_void};

// SAFETY (for every function below): each is called by C code with the C contract of the
// function of the same name; the forwards keep that contract.

#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().malloc)(size) }
}

#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().free)(p) }
}

#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().calloc)(n, size) }
}

#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().realloc)(p, size) }
}

#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().reallocarray)(p, n, size) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().posix_memalign)(out, align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().aligned_alloc)(align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().memalign)(align, size) }
}

#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().valloc)(size) }
}

#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().pvalloc)(size) }
}

#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().malloc_usable_size)(p) }
}

#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, size: usize) {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().free_sized)(p, size) }
}

#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, align: usize, size: usize) {
    // SAFETY: forwarded under the caller's C contract (see above).
    unsafe { (route::get().free_aligned_sized)(p, align, size) }
}

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
    unsafe { worker::pthread_create(t, attr, start, arg) }
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

// C++ operator delete, every form (plain, array, sized, nothrow, aligned).

#[no_mangle]
pub unsafe extern "C" fn _ZdlPv(p: *mut c_void) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPv(p: *mut c_void) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdlPvm(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPvm(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdlPvRKSt9nothrow_t(p: *mut c_void, _nt: *const c_void) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPvRKSt9nothrow_t(p: *mut c_void, _nt: *const c_void) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdlPvSt11align_val_t(p: *mut c_void, _align: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPvSt11align_val_t(p: *mut c_void, _align: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdlPvmSt11align_val_t(p: *mut c_void, _size: usize, _align: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPvmSt11align_val_t(p: *mut c_void, _size: usize, _align: usize) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdlPvSt11align_val_tRKSt9nothrow_t(
    p: *mut c_void,
    _align: usize,
    _nt: *const c_void,
) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}

#[no_mangle]
pub unsafe extern "C" fn _ZdaPvSt11align_val_tRKSt9nothrow_t(
    p: *mut c_void,
    _align: usize,
    _nt: *const c_void,
) {
    // SAFETY: forwarded C++ operator delete contract (`p` is NULL or from operator new).
    unsafe { cxx::delete(p) }
}
