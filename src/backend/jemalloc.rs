//! The jemalloc backend: jemalloc 5 statically linked from tikv-jemalloc-sys with its `_rjem_`
//! prefix, so it never captures `malloc` or `__libc_*` for anyone else. Its run-time options come
//! from `_RJEM_MALLOC_CONF`, or, when that is unset, from `MALLOC_CONF` (passed to jemalloc as its
//! `malloc_conf` global before it initialises, after the shim's `tcache:false`: see [`load`];
//! thread caches are turned on per thread by [`super::jemalloc_tcache`]). Statistics go through tikv-jemalloc-ctl's typed
//! mallctl wrappers; the one name those refuse to write (`arena.<all>.purge`) is called raw.

use super::{MemStats, Release};
use core::ffi::c_void;
use tikv_jemalloc_sys as je;

/// `arena.<MALLCTL_ARENAS_ALL>.purge`: purge every unused dirty and muzzy page of every arena.
const PURGE_ALL: &core::ffi::CStr = c"arena.4096.purge";
/// `arena.<MALLCTL_ARENAS_ALL>.decay`: purge only what the decay schedule (dirty_decay_ms,
/// muzzy_decay_ms) says is due.
const DECAY_ALL: &core::ffi::CStr = c"arena.4096.decay";

extern "C" {
    /// jemalloc's `malloc_conf` global (prefixed): an options string read once, when jemalloc
    /// initialises, before `/etc/malloc.conf` and `_RJEM_MALLOC_CONF` (which override it).
    #[link_name = "_rjem_malloc_conf"]
    static mut RJEM_MALLOC_CONF: *const core::ffi::c_char;
}

/// Initialises jemalloc now (one allocation) so that a failure shows at start (statically
/// linked: `_lib` is unused). jemalloc's `malloc_conf` global, read before `/etc/malloc.conf`
/// and `_RJEM_MALLOC_CONF`, which override it, is set first (jemalloc has no load-time
/// constructor here, see build.rs, so this runs before it reads its options): the shim's default
/// `tcache:false` ([`jemalloc_tcache`](super::jemalloc_tcache): caches are turned on per thread)
/// unless the user's options name `tcache`, then, when only `MALLOC_CONF` is set (the variable
/// users set for a jemalloc-linked mysqld; the prefixed jemalloc reads `_RJEM_MALLOC_CONF`), its
/// value.
///
/// # Safety
/// Initialisation only.
pub(super) unsafe fn load(_lib: &core::ffi::CStr, why: &mut crate::base::diag::LineBuf) -> bool {
    let rjem = crate::base::sys::env_raw(b"_RJEM_MALLOC_CONF");
    let plain = if rjem.is_none() { crate::base::sys::env_raw(b"MALLOC_CONF") } else { None };
    // SAFETY: both point into `environ`, NUL-terminated, alive as long as the process.
    let bytes =
        |c: Option<*const core::ffi::c_char>| c.map(|c| unsafe { core::ffi::CStr::from_ptr(c) }.to_bytes());
    let user_named = bytes(rjem).is_some_and(super::jemalloc_tcache::names_tcache)
        || bytes(plain).is_some_and(super::jemalloc_tcache::names_tcache);
    // SAFETY: `plain` is NUL-terminated and outlives the process; load runs once, single-threaded.
    let conf = unsafe { compose(if user_named { b"" } else { super::jemalloc_tcache::DEFAULT_CONF }, plain) };
    if !conf.is_null() {
        // SAFETY: jemalloc has not initialised (this is the only path that first calls it) and
        // `conf` lives as long as the process (`environ` or `CONF`).
        unsafe { core::ptr::addr_of_mut!(RJEM_MALLOC_CONF).write(conf) };
    }
    // SAFETY: plain jemalloc calls with valid arguments.
    unsafe {
        let p = je::malloc(16);
        if p.is_null() {
            why.put(b"jemalloc could not allocate 16 bytes");
            return false;
        }
        je::free(p);
        super::jemalloc_tcache::at_load(user_named);
    }
    true
}

/// Longest options string the shim composes; a longer `MALLOC_CONF` goes to jemalloc whole.
const CONF_MAX: usize = 1024;
/// The composed options (written once, at initialisation, single-threaded).
static mut CONF: [u8; CONF_MAX] = [0; CONF_MAX];

/// jemalloc's `malloc_conf`: `default` (the shim's options), then `MALLOC_CONF` without its
/// heap-profiling keys (`prof*`, `lg_prof*`: Percona's and jemalloc's advice, `prof:true,...`),
/// which this jemalloc, built without profiling, would refuse with one "Invalid conf pair" line
/// each; when any is there, one `mallocshim:` line points to the shim's own heap profiles
/// instead. Null when there is nothing to set. No allocation (runs before any backend exists).
///
/// # Safety
/// `conf` is NUL-terminated and outlives the process; called once, single-threaded, at load.
unsafe fn compose(default: &[u8], conf: Option<*const core::ffi::c_char>) -> *const core::ffi::c_char {
    // SAFETY: the caller's contract.
    let all = conf.map(|c| unsafe { core::ffi::CStr::from_ptr(c) }.to_bytes()).unwrap_or(b"");
    if default.len() + all.len() + 2 > CONF_MAX {
        return conf.unwrap_or(core::ptr::null());
    }
    if default.is_empty() && all.is_empty() {
        return core::ptr::null();
    }
    // SAFETY: written only here, once, before any other thread can run shim code.
    let out = unsafe { &mut *core::ptr::addr_of_mut!(CONF) };
    out[..default.len()].copy_from_slice(default);
    let (mut n, mut dropped) = (default.len(), 0);
    for pair in all.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        let key = pair.split(|&b| b == b':').next().unwrap_or(b"");
        if key.starts_with(b"prof") || key.starts_with(b"lg_prof") {
            dropped += 1;
            continue;
        }
        if n > 0 {
            out[n] = b',';
            n += 1;
        }
        out[n..n + pair.len()].copy_from_slice(pair);
        n += pair.len();
    }
    out[n] = 0;
    if dropped > 0 {
        crate::base::diag::warn!(
            "MALLOC_CONF: {dropped} heap-profiling key(s) (prof:..., lg_prof_sample:...) left out: the shim's jemalloc has no profiling; the shim writes its own heap profiles (MALLOCSHIM_DUMP_FORMATS=pprof, MALLOCSHIM_PROF_SAMPLE_BYTES; docs/heap-profiles.md)"
        );
    }
    out.as_ptr().cast()
}

#[inline(always)]
pub(super) unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: size is non-zero (caller's contract).
    unsafe { je::malloc(size) }
}

#[inline(always)]
pub(super) unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: the product does not overflow (caller's contract).
    unsafe { je::calloc(n, size) }
}

#[inline(always)]
pub(super) unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: `p` is a jemalloc block, size non-zero (caller's contract).
    unsafe { je::realloc(p, size) }
}

#[inline(always)]
pub(super) unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: `align` is a power of two, size non-zero (caller's contract).
    unsafe { je::aligned_alloc(align, size) }
}

/// jemalloc's free may purge (madvise) and so touch errno: `csem` keeps the caller's.
#[inline(always)]
pub(super) unsafe fn free(p: *mut c_void) {
    // SAFETY: `p` is NULL or a jemalloc block (caller's contract).
    unsafe { je::free(p) }
}

#[inline(always)]
pub(super) unsafe fn usable_size(p: *mut c_void) -> usize {
    // SAFETY: `p` is a jemalloc block (caller's contract).
    unsafe { je::malloc_usable_size(p) }
}

/// jemalloc (tikv-jemalloc-sys) as a [`super::Raw`] backend.
pub struct Jemalloc;

impl super::Raw for Jemalloc {
    const SMALL_8: bool = !cfg!(feature = "semantics-floor");
    /// jemalloc's `malloc` sets ENOMEM on every failure (its `set_errno_on_error` path).
    const MALLOC_SETS_ENOMEM: bool = true;
    const FREE_KEEPS_ERRNO: bool = cfg!(feature = "semantics-floor");
    /// Every free, fast path or not, adds the block's usable size to `thread.deallocated`.
    const COUNTS_FREED_BYTES: bool = true;
    super::raw_forwards!();

    fn thread_freed_counter() -> *mut u64 {
        thread_freed_counter()
    }

    /// `sdallocx(p, usable, 0)`: a size in [request, usable size] is valid, and with it jemalloc
    /// takes the size class from the size instead of a second radix-tree lookup.
    #[inline(always)]
    unsafe fn free_usable(p: *mut c_void, usable: usize) {
        // SAFETY: `p` is a live jemalloc block and `usable` its usable size (caller's contract).
        unsafe { je::sdallocx(p, usable, 0) }
    }
}

/// `thread.deallocatedp`: the address of the calling thread's count of bytes freed (jemalloc
/// adds the usable size of every block the thread frees); null when mallctl refuses it. mallctl
/// creates the thread's jemalloc state (thread cache, arena) if it does not exist: call it only
/// after jemalloc served an allocation on this thread (`front` does).
pub fn thread_freed_counter() -> *mut u64 {
    // SAFETY: `thread.deallocatedp` is a read-only mallctl whose value is a `uint64_t *`.
    unsafe { tikv_jemalloc_ctl::raw::read::<*mut u64>(b"thread.deallocatedp\0") }
        .unwrap_or(core::ptr::null_mut())
}

/// stats.allocated / stats.resident after an `epoch` refresh.
pub(super) unsafe fn mem_stats() -> MemStats {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let allocated = stats::allocated::read().unwrap_or(0) as u64;
    let resident = stats::resident::read().unwrap_or(0) as u64;
    // Free: what is resident beyond the live blocks and jemalloc's own metadata, as the RSS
    // account counts it (resident - allocated alone counted the metadata as free: a report read
    // "jemalloc free 6.2 MiB" beside the account's 0.5 MiB).
    let metadata = stats::metadata::read().unwrap_or(0) as u64;
    MemStats { allocated, resident, free: resident.saturating_sub(allocated).saturating_sub(metadata) }
}

/// The account's figures (see `crate::cold::account`): live `stats.allocated`, resident
/// `stats.resident`, metadata `stats.metadata`, all as of one `epoch` refresh.
pub(super) fn account() -> super::AccountFigures {
    // SAFETY: the backend is loaded (the account is measured only once the shim is ready).
    let stats = unsafe { mem_stats() };
    // stats.metadata as of the `epoch` refresh that mem_stats just made.
    let md = tikv_jemalloc_ctl::stats::metadata::read().map(|v| v as u64).unwrap_or(0);
    super::AccountFigures {
        stats,
        live: Some(stats.allocated),
        resident: stats.resident,
        metadata: Some(md),
        trim: None,
    }
}

/// `mallctl("arena.4096.purge", NULL, NULL, NULL, 0)`, or `.decay` for [`Release::Decay`]
/// (`MALLOCSHIM_JEMALLOC_RELEASE=decay`). True when mallctl returned 0.
pub(super) unsafe fn release(_pad: usize, mode: Release) -> bool {
    let name = if mode == Release::Decay { DECAY_ALL } else { PURGE_ALL };
    // SAFETY: a void mallctl: no old or new value pointers.
    unsafe {
        je::mallctl(name.as_ptr(), core::ptr::null_mut(), core::ptr::null_mut(), core::ptr::null_mut(), 0)
            == 0
    }
}

/// jemalloc's own `mallctl`, for programs that call it through the shim (jemalloc backend only).
///
/// # Safety
/// The caller passes mallctl's arguments as jemalloc documents them.
pub unsafe fn mallctl(
    name: *const core::ffi::c_char,
    oldp: *mut c_void,
    oldlenp: *mut usize,
    newp: *mut c_void,
    newlen: usize,
) -> core::ffi::c_int {
    super::atfork::settle();
    // SAFETY: forwarded as given (caller's contract).
    unsafe { je::mallctl(name, oldp, oldlenp, newp, newlen) }
}

pub(super) unsafe fn version(out: &mut crate::base::diag::LineBuf) {
    out.put(b"jemalloc ");
    // The crate's string keeps jemalloc's trailing NUL.
    out.put(tikv_jemalloc_ctl::version::read().unwrap_or("?").trim_end_matches('\0').as_bytes());
}

#[cfg(test)]
#[path = "jemalloc_tsd_tests.rs"]
mod tsd_tests;
