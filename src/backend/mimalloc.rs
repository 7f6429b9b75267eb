//! The mimalloc backend: Debian's `libmimalloc.so.2` (package libmimalloc2.0, mimalloc 2.0.9),
//! dlopen()ed with RTLD_LOCAL (it exports `malloc`, `__libc_malloc` and `operator new` itself,
//! which must not capture anyone's calls) and called through its `mi_*` entry points, found once
//! with dlsym. The dlopen runs under the reentrancy guard: what it allocates comes from the
//! bootstrap pool.
//!
//! Why Debian's library and not the `libmimalloc-sys` crate linked statically: a static mimalloc
//! puts its constructor (process init, an `atexit` hook, a pthread key for thread exit) and its
//! initial-exec TLS into `libmallocshim.so` for every user, whatever backend they choose — the
//! cost the built-in jemalloc is being rid of. Loaded on demand, mimalloc's hooks exist only in
//! processes that chose it, the .so stays free of them, and it is loaded the way tcmalloc is.
//! mimalloc's TLS (9 bytes, `DF_STATIC_TLS`: initial-exec) is placed by dlopen in glibc's static
//! TLS surplus; if that were exhausted dlopen fails and the shim falls back to glibc with one
//! line. Its own options come from `MIMALLOC_*` variables.
//!
//! mimalloc's behaviour against glibc's contract, which `csem` completes (see [`Mimalloc`]):
//! `mi_malloc(0)` returns a unique 8-byte block; 1..8-byte blocks are 8-byte aligned, larger
//! ones 16; a size above PTRDIFF_MAX gives NULL with errno untouched (only an mmap failure
//! leaves ENOMEM); `mi_realloc(p, 0)` keeps a block instead of freeing; `mi_free` may decommit
//! and so touch errno; `mi_usable_size` is the block's size class.
//!
//! Figures: mimalloc's release build counts no live bytes; it counts the bytes it has committed
//! from the OS (`mi_process_info`'s `current_commit`; on Linux its `current_rss` is the same
//! number). That one figure answers `resident`; `allocated` is the shim's own count of usable
//! bytes (`Raw::LIVE_BY_USABLE`, kept by the recorder), with profiling off the committed bytes
//! (upper bound of `allocated` and `free`). It moves by whole segments (32 MiB) and, with threads, lags (see [`committed`]):
//! a coarse figure, not a live-byte count.
//!
//! Trims are `mi_collect(true)`: from the calling thread it frees that thread's empty pages,
//! decommits the expired parts of abandoned segments and empties the segment cache; other
//! threads' heaps purge on their own (`MIMALLOC_DECOMMIT_DELAY`, 25 ms) when they next allocate
//! or free. mimalloc returns only whole free pages: a live block pins its page.

use super::{MemStats, Release};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed as LiveOrder};

type Fmalloc = unsafe extern "C" fn(usize) -> *mut c_void;
type Fcalloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type Frealloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type Faligned = unsafe extern "C" fn(usize, usize, usize) -> *mut c_void;
type Ffree = unsafe extern "C" fn(*mut c_void);
type Fsize = unsafe extern "C" fn(*const c_void) -> usize;
type Fcollect = unsafe extern "C" fn(bool);
type Fversion = unsafe extern "C" fn() -> c_int;
/// `mi_process_info(elapsed_msecs, user_msecs, system_msecs, current_rss, peak_rss,
/// current_commit, peak_commit, page_faults)`; every out-pointer may be NULL.
type Finfo = unsafe extern "C" fn(
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
    *mut usize,
);

/// The mimalloc entry points the shim uses.
#[derive(Clone, Copy)]
struct Mi {
    malloc: Fmalloc,
    calloc: Fcalloc,
    realloc: Frealloc,
    /// `mi_malloc_aligned_at(size, alignment, offset)`.
    aligned: Faligned,
    free: Ffree,
    usable_size: Fsize,
    collect: Option<Fcollect>,
    process_info: Option<Finfo>,
    version: Option<Fversion>,
}

unsafe extern "C" fn none_malloc(_: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_calloc(_: usize, _: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_aligned(_: usize, _: usize, _: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_realloc(_: *mut c_void, _: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_free(_: *mut c_void) {}
unsafe extern "C" fn none_size(_: *const c_void) -> usize {
    0
}

struct Cell(UnsafeCell<Mi>);
// SAFETY: written once by the initialising thread before the shim is published; read-only after.
unsafe impl Sync for Cell {}

static MI: Cell = Cell(UnsafeCell::new(Mi {
    malloc: none_malloc,
    calloc: none_calloc,
    realloc: none_realloc,
    aligned: none_aligned,
    free: none_free,
    usable_size: none_size,
    collect: None,
    process_info: None,
    version: None,
}));

#[inline(always)]
fn mi() -> &'static Mi {
    // SAFETY: see `Cell`.
    unsafe { &*MI.0.get() }
}

/// dlopen()s `lib` RTLD_LOCAL (running mimalloc's constructor) and resolves the `mi_*` entry
/// points. On failure writes the reason (dlerror's text, or the missing symbol) into `why`.
///
/// # Safety
/// Initialisation only, under the reentrancy guard.
pub(super) unsafe fn load(lib: &CStr, why: &mut crate::base::diag::LineBuf) -> bool {
    let need =
        [c"mi_malloc", c"mi_calloc", c"mi_realloc", c"mi_malloc_aligned_at", c"mi_free", c"mi_usable_size"];
    // SAFETY: forwarded contract (initialisation, under the reentrancy guard).
    let Some((l, p)) = (unsafe { super::dl::open(lib, need, why) }) else {
        return false;
    };
    // SAFETY: each symbol is transmuted to the signature mimalloc.h (2.0) declares for it;
    // `MI` is written by the initialising thread alone, before the shim is published; the first
    // allocation calls the mi_malloc and mi_free just loaded.
    unsafe {
        let m = &mut *MI.0.get();
        m.malloc = core::mem::transmute::<*mut c_void, Fmalloc>(p[0]);
        m.calloc = core::mem::transmute::<*mut c_void, Fcalloc>(p[1]);
        m.realloc = core::mem::transmute::<*mut c_void, Frealloc>(p[2]);
        m.aligned = core::mem::transmute::<*mut c_void, Faligned>(p[3]);
        m.free = core::mem::transmute::<*mut c_void, Ffree>(p[4]);
        m.usable_size = core::mem::transmute::<*mut c_void, Fsize>(p[5]);
        m.collect = core::mem::transmute::<*mut c_void, Option<Fcollect>>(l.sym(c"mi_collect"));
        m.process_info = core::mem::transmute::<*mut c_void, Option<Finfo>>(l.sym(c"mi_process_info"));
        m.version = core::mem::transmute::<*mut c_void, Option<Fversion>>(l.sym(c"mi_version"));
        // The first allocation sets mimalloc up (its first segment, the NUMA node count probed
        // in /sys, which leaves errno ENOENT): done here, where `init` keeps the caller's errno.
        let p = (m.malloc)(16);
        if p.is_null() {
            why.put(b"mimalloc could not allocate 16 bytes");
            return false;
        }
        (m.free)(p);
    }
    true
}

#[inline(always)]
unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: a loaded mi_malloc.
    unsafe { (mi().malloc)(size) }
}

#[inline(always)]
unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: a loaded mi_calloc.
    unsafe { (mi().calloc)(n, size) }
}

#[inline(always)]
unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: a loaded mi_realloc; `p` is a mimalloc block.
    unsafe { (mi().realloc)(p, size) }
}

/// `mi_malloc_aligned_at(size, align, 0)`. Not `mi_malloc_aligned`: in 2.0.9 that one serves a
/// power-of-two size of 256..1024 bytes with plain `mi_malloc`, assuming such blocks are
/// naturally aligned, but those pages start 384 bytes in, so `aligned_alloc(256, 256)` can be
/// only 128-aligned (mimalloc issue #700, fixed in 2.0.10/2.1.1). `mi_malloc_aligned_at` skips
/// that shortcut: its own fast path checks the block's alignment.
#[inline(always)]
unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: a loaded mi_malloc_aligned_at; `align` is a power of two.
    unsafe { (mi().aligned)(size, align, 0) }
}

/// mimalloc may decommit pages inside free and so touch errno: `csem` keeps the caller's.
#[inline(always)]
unsafe fn free(p: *mut c_void) {
    // SAFETY: a loaded mi_free; `p` is NULL or a mimalloc block.
    unsafe { (mi().free)(p) }
}

#[inline(always)]
unsafe fn usable_size(p: *mut c_void) -> usize {
    // SAFETY: a loaded mi_usable_size; `p` is a mimalloc block.
    unsafe { (mi().usable_size)(p) }
}

/// mimalloc (Debian's libmimalloc.so.2) as a [`super::Raw`] backend.
pub struct Mimalloc;

impl super::Raw for Mimalloc {
    /// 1..8-byte requests get an 8-byte block, 8-byte aligned.
    const SMALL_8: bool = !cfg!(feature = "semantics-floor");
    /// A size above PTRDIFF_MAX fails with errno untouched: `csem` refuses it and sets ENOMEM.
    const MALLOC_SETS_ENOMEM: bool = false;
    const FREE_KEEPS_ERRNO: bool = cfg!(feature = "semantics-floor");
    /// mimalloc's release build counts no live bytes: the shim counts usable sizes.
    const LIVE_BY_USABLE: bool = true;
    super::raw_forwards!();
}

/// mimalloc's committed bytes (`mi_process_info` current_commit), 0 when unknown. mimalloc
/// 2.0.9 keeps part of its commit counts per thread until the thread exits, so with threads
/// the global count can lag and even read negative: negative reads as 0.
fn committed() -> u64 {
    let mut commit = 0usize;
    if let Some(f) = mi().process_info {
        let n = core::ptr::null_mut();
        // SAFETY: a loaded mi_process_info; NULL out-pointers are skipped.
        unsafe { f(n, n, n, n, n, &mut commit, n, n) };
    }
    (commit as i64).max(0) as u64
}

/// mimalloc's segment size and alignment (2.0: 32 MiB, `MI_SEGMENT_SIZE`).
pub const SEGMENT: usize = 32 << 20;
/// Words of a segment header searched for its cookie.
const HEADER_WORDS: usize = 64;

/// (word offset, key) of the segment cookie once learned; KEY 0: not yet, 1: failed.
static COOKIE_AT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
static COOKIE_KEY: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// How to recognise a mimalloc segment: every segment header holds a cookie, `segment address ^
/// key`, with one random key per process (`_mi_ptr_cookie`). Learned once from two segments the
/// shim makes: a small block's and a 32 MiB block's (a huge block gets a segment of its own),
/// both read while allocated, then freed; the cookie is the header word at which both give the
/// same key, and the key must look random (at least 2^40: a word pointing into its own segment
/// would give a small constant). Returns (word offset, key); None when not found (another
/// mimalloc version). Worker only, under the reentrancy guard (allocates in mimalloc).
pub fn segment_cookie() -> Option<(usize, u64)> {
    use core::sync::atomic::Ordering::Relaxed;
    match COOKIE_KEY.load(Relaxed) {
        0 => {}
        1 => return None,
        k => return Some((COOKIE_AT.load(Relaxed), k)),
    }
    let m = mi();
    // SAFETY: loaded mi_malloc/mi_free; the two headers are read while their blocks are live,
    // so their segments are mapped, and a segment header is at least HEADER_WORDS words.
    let found = unsafe {
        let a = (m.malloc)(64);
        let b = (m.malloc)(SEGMENT);
        let mut found = None;
        if !a.is_null() && !b.is_null() {
            let sa = (a as usize) & !(SEGMENT - 1);
            let sb = (b as usize) & !(SEGMENT - 1);
            for o in 0..HEADER_WORDS {
                let ka = core::ptr::read_volatile((sa as *const u64).add(o)) ^ sa as u64;
                let kb = core::ptr::read_volatile((sb as *const u64).add(o)) ^ sb as u64;
                if sa != sb && ka == kb && ka >= 1 << 40 {
                    found = Some((o, ka));
                    break;
                }
            }
        }
        (m.free)(a);
        (m.free)(b);
        found
    };
    match found {
        Some((o, k)) => {
            COOKIE_AT.store(o, Relaxed);
            COOKIE_KEY.store(k, Relaxed);
        }
        None => COOKIE_KEY.store(1, Relaxed),
    }
    found
}

/// The shim's count of live bytes (`cold::account::shim_live`, a `fn() -> Option<u64>`),
/// registered by the library constructor so that this backend, below the cold path, never
/// imports it; null until then.
static LIVE_SOURCE: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Registers the shim's live-bytes count (see [`LIVE_SOURCE`]).
pub fn register_live_source(f: fn() -> Option<u64>) {
    LIVE_SOURCE.store(f as *mut (), LiveOrder);
}

fn shim_live() -> Option<u64> {
    let p = LIVE_SOURCE.load(LiveOrder);
    if p.is_null() {
        return None;
    }
    // SAFETY: the only non-null value stored is a `fn() -> Option<u64>` (`register_live_source`),
    // which has the size and representation of a data pointer on the targets Rust supports here.
    let f = unsafe { core::mem::transmute::<*mut (), fn() -> Option<u64>>(p) };
    f()
}

/// `resident` = committed bytes; `allocated` = the shim's count of live bytes (usable sizes,
/// `account::shim_live`: the release build keeps none), never capped (the committed count lags
/// with threads), `free` = the committed bytes beyond it; with profiling off (no count) both are
/// the committed bytes, their upper bound. (They read 32 MiB = committed whatever the program
/// held: issue 21; a count of requested bytes less usable sizes freed lost track: issue 37.)
pub(super) unsafe fn mem_stats() -> MemStats {
    let c = committed();
    match shim_live() {
        Some(live) => MemStats { allocated: live, resident: c, free: c.saturating_sub(live) },
        None => MemStats { allocated: c, resident: c, free: c },
    }
}

/// The account's figures (see `crate::cold::account`): no live figure (mimalloc counts none: the
/// account takes the shim's count, else counts its resident bytes as live);
/// resident, the pages of its segments found resident by mincore(2), else (segments cannot be
/// recognised: no cookie learned, another mimalloc version; or process_vm_readv refused by a
/// seccomp filter) its committed bytes; no metadata figure. A scan that can recognise segments
/// and finds none resident says 0, not the committed bytes: those count the segment cache
/// (committed, not resident: at least the 32 MiB of the cookie's probe), and taken for resident
/// they made a program that holds nothing in mimalloc look like 36 MiB retained (seen when no
/// thread of the program had allocated yet and the shim's thread allocates from its own heap).
pub(super) fn account() -> super::AccountFigures {
    // SAFETY: the backend is loaded (the account is measured only once the shim is ready).
    let stats = unsafe { mem_stats() };
    let reads = super::figures::read_word(core::ptr::addr_of!(COOKIE_KEY) as u64).is_some();
    let resident = segment_cookie().filter(|_| reads).map(|(at, key)| segments_resident(at, key));
    super::AccountFigures {
        stats,
        live: None,
        resident: resident.unwrap_or(stats.resident),
        metadata: None,
        trim: None,
    }
}

/// Most 32 MiB-aligned addresses probed for a segment per measurement.
const MAX_PROBES: usize = 1 << 16;

/// Resident bytes of mimalloc's segments: every 32 MiB-aligned address inside an anonymous
/// read-write mapping whose header word `at` holds `address ^ key` (the segment cookie, read
/// with process_vm_readv so an address unmapped meanwhile is an error, never a fault) starts
/// a segment, whose pages (its first 32 MiB: a huge block's beyond that is not seen) are
/// counted by mincore(2).
fn segments_resident(at: usize, key: u64) -> u64 {
    use super::figures::{maps_line, read_word, resident};
    let seg = SEGMENT as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let (mut total, mut probes) = (0, 0);
    for (start, end, perms, inode, path) in maps.lines().filter_map(maps_line) {
        if perms != "rw-p" || inode != "0" || !path.is_empty() {
            continue;
        }
        let mut s = start.next_multiple_of(seg);
        while s < end && probes < MAX_PROBES {
            probes += 1;
            if read_word(s + at as u64 * 8) == Some(s ^ key) {
                total += resident(s, end.min(s + seg) - s);
            }
            s += seg;
        }
    }
    total
}

/// `mi_collect(true)` (one release call: `_mode` is unused).
pub(super) unsafe fn release(_pad: usize, _mode: Release) -> bool {
    match mi().collect {
        Some(f) => {
            // SAFETY: a loaded mi_collect.
            unsafe { f(true) };
            true
        }
        None => false,
    }
}

/// `mimalloc <major>.<minor>.<patch>` from `mi_version()` (e.g. 209 is 2.0.9).
pub(super) unsafe fn version(out: &mut crate::base::diag::LineBuf) {
    use core::fmt::Write;
    match mi().version {
        Some(f) => {
            // SAFETY: a loaded mi_version.
            let v = unsafe { f() };
            let _ = write!(out, "mimalloc {}.{}.{}", v / 100, v / 10 % 10, v % 10);
        }
        None => out.put(b"mimalloc"),
    }
}
