//! The glibc backend: ptmalloc through glibc's exported `__libc_*` entry points (no dlsym needed on
//! the hot path; usable size read from the chunk header), plus the real `mallinfo2`, `mallinfo`,
//! `malloc_trim`, `malloc_stats` and `malloc_info`, found once with `dlsym(RTLD_NEXT)` because the
//! shim exports those names too.
//! These are loaded whatever the active backend, for the introspection calls.

use super::MemStats;
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_void};

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

/// glibc's `struct mallinfo2` (all fields in bytes, except the counts).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Mallinfo2 {
    pub arena: usize,
    pub ordblks: usize,
    pub smblks: usize,
    pub hblks: usize,
    pub hblkhd: usize,
    pub usmblks: usize,
    pub fsmblks: usize,
    pub uordblks: usize,
    pub fordblks: usize,
    pub keepcost: usize,
}

/// glibc's legacy `struct mallinfo` (int fields, which wrap above 2 GiB).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

/// glibc's own introspection functions.
#[derive(Clone, Copy)]
pub struct Real {
    pub mallinfo2: Option<unsafe extern "C" fn() -> Mallinfo2>,
    pub mallinfo: Option<unsafe extern "C" fn() -> Mallinfo>,
    pub malloc_trim: Option<unsafe extern "C" fn(usize) -> c_int>,
    pub malloc_stats: Option<unsafe extern "C" fn()>,
    pub malloc_info: Option<unsafe extern "C" fn(c_int, *mut libc::FILE) -> c_int>,
    pub mallopt: Option<unsafe extern "C" fn(c_int, c_int) -> c_int>,
}

struct Cell(UnsafeCell<Real>);
// SAFETY: written once by the initialising thread before the shim is published; read-only after.
unsafe impl Sync for Cell {}

static REAL: Cell = Cell(UnsafeCell::new(Real {
    mallinfo2: None,
    mallinfo: None,
    malloc_trim: None,
    malloc_stats: None,
    malloc_info: None,
    mallopt: None,
}));

/// glibc's own functions (valid once the shim is ready).
#[inline(always)]
pub fn real() -> &'static Real {
    // SAFETY: see `Cell`.
    unsafe { &*REAL.0.get() }
}

unsafe fn next(name: &core::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid NUL-terminated name; RTLD_NEXT skips the shim's own exports.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) }
}

/// Finds glibc's introspection functions; each is optional (a missing one answers zeros).
/// Nothing is dlopen()ed (`_lib` is unused) and nothing fails.
///
/// # Safety
/// Initialisation only (single writer before publication).
pub(super) unsafe fn load(_lib: &core::ffi::CStr, _why: &mut crate::base::diag::LineBuf) -> bool {
    // SAFETY: single writer (caller's contract); each pointer is transmuted to the C signature
    // glibc documents for that symbol.
    unsafe {
        let r = &mut *REAL.0.get();
        r.mallinfo2 = core::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn() -> Mallinfo2>>(next(
            c"mallinfo2",
        ));
        r.mallinfo = core::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn() -> Mallinfo>>(next(
            c"mallinfo",
        ));
        r.malloc_trim = core::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn(usize) -> c_int>>(
            next(c"malloc_trim"),
        );
        r.malloc_stats =
            core::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn()>>(next(c"malloc_stats"));
        r.malloc_info = core::mem::transmute::<
            *mut c_void,
            Option<unsafe extern "C" fn(c_int, *mut libc::FILE) -> c_int>,
        >(next(c"malloc_info"));
        r.mallopt = core::mem::transmute::<*mut c_void, Option<unsafe extern "C" fn(c_int, c_int) -> c_int>>(
            next(c"mallopt"),
        );
    }
    true
}

#[inline(always)]
pub(super) unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator accepts any size.
    unsafe { __libc_malloc(size) }
}

#[inline(always)]
pub(super) unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: as above.
    unsafe { __libc_calloc(n, size) }
}

#[inline(always)]
pub(super) unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: `p` is a glibc block (caller's contract).
    unsafe { __libc_realloc(p, size) }
}

#[inline(always)]
pub(super) unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: `align` is a power of two (caller's contract).
    unsafe { __libc_memalign(align, size) }
}

/// glibc's free keeps errno itself (since 2.33), so no save/restore here.
#[inline(always)]
pub(super) unsafe fn free(p: *mut c_void) {
    // SAFETY: `p` is a glibc block (caller's contract).
    unsafe { __libc_free(p) }
}

/// glibc's `malloc_usable_size` for an in-use chunk, read inline from the chunk header (the
/// size word before the block: low bits are flags, IS_MMAPPED = 2), as glibc's `musable` does
/// without memory tagging: mmapped chunks lose two words of overhead, others one.
#[inline(always)]
pub(super) unsafe fn usable_size(p: *mut c_void) -> usize {
    // SAFETY: `p` is a live glibc block (caller's contract): its size word precedes it.
    let head = unsafe { *(p as *const usize).sub(1) };
    let size = head & !7;
    if head & 2 != 0 {
        size - 16
    } else {
        size - 8
    }
}

/// glibc's ptmalloc as a [`super::Raw`] backend.
pub struct Glibc;

impl super::Raw for Glibc {
    const SMALL_8: bool = false;
    const MALLOC_SETS_ENOMEM: bool = true;
    const FREE_KEEPS_ERRNO: bool = true;
    super::raw_forwards!();
}

/// glibc's real `mallinfo2`, or zeros when it is missing.
pub fn mallinfo2() -> Mallinfo2 {
    // SAFETY: the pointer came from dlsym for this exact signature.
    real().mallinfo2.map(|f| unsafe { f() }).unwrap_or_default()
}

pub(super) unsafe fn mem_stats() -> MemStats {
    let m = mallinfo2();
    MemStats {
        allocated: (m.uordblks + m.hblkhd) as u64,
        resident: (m.arena + m.hblkhd) as u64,
        free: m.fordblks as u64,
    }
}

/// `malloc_trim(pad)` (one release call: `_mode` is unused).
pub(super) unsafe fn release(pad: usize, _mode: super::Release) -> bool {
    // SAFETY: the pointer came from dlsym for this exact signature.
    real().malloc_trim.map(|f| unsafe { f(pad) } != 0).unwrap_or(false)
}

/// glibc's `M_TRIM_THRESHOLD` (malloc.h).
const M_TRIM_THRESHOLD: c_int = -1;

/// `mallopt(M_TRIM_THRESHOLD, bytes)`: from now on a `free()` that leaves a top chunk above
/// `bytes` at an arena's end shrinks it (the main arena's by `systrim`, another's by
/// `heap_trim`), and glibc stops raising the threshold with its dynamic mmap threshold
/// (`no_dyn_threshold`). False when glibc's mallopt is missing or refuses (`bytes` above
/// `INT_MAX`). Takes the main arena's lock: control channel or worker only.
pub(super) fn set_trim_threshold(bytes: u64) -> bool {
    let Ok(v) = c_int::try_from(bytes) else { return false };
    // SAFETY: glibc's own mallopt, with an option and value its manual documents.
    real().mallopt.is_some_and(|f| unsafe { f(M_TRIM_THRESHOLD, v) } == 1)
}

pub(super) unsafe fn version(out: &mut crate::base::diag::LineBuf) {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { core::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    out.put(b"glibc ");
    out.put(v.to_bytes());
}

/// The page size (bytes).
fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64
}

/// The account's figures (see `crate::cold::account`): live bytes mallinfo2 `uordblks + hblkhd`;
/// resident, the pages of the main heap and the arena heaps found resident by mincore(2), plus
/// the mmapped chunks (`hblkhd`: mapped on demand, so resident); no metadata figure (inside the
/// arenas). One mallinfo2 (it walks every free chunk) gives `stats` too, as [`mem_stats`] does.
/// What `malloc_trim(0)` can give back: `malloc_info`'s free chunks (`glibc_info`).
pub(super) fn account() -> super::AccountFigures {
    let mi = mallinfo2();
    let hblkhd = mi.hblkhd as u64;
    let stats = MemStats {
        allocated: mi.uordblks as u64 + hblkhd,
        resident: mi.arena as u64 + hblkhd,
        free: mi.fordblks as u64,
    };
    super::AccountFigures {
        stats,
        live: Some(stats.allocated),
        resident: heap_resident() + hblkhd,
        metadata: None,
        trim: super::glibc_info::read(page_size(), real().malloc_info),
    }
}

/// glibc's `HEAP_MAX_SIZE` on 64-bit: every non-main arena heap is a mapping aligned to it.
const HEAP_MAX: u64 = 64 << 20;

/// Resident bytes of glibc's main heap (`[heap]`, the brk area) and of its arena heaps. An arena
/// heap is recognised as an anonymous read-write private mapping aligned to `HEAP_MAX`, no
/// longer, whose `heap_info` header (first words: arena pointer, previous heap, size,
/// mprotect_size) says `mprotect_size` = the mapping's length. The header is read with
/// process_vm_readv (a mapping gone meanwhile is skipped, never a fault).
fn heap_resident() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut total = 0;
    for (start, end, perms, inode, path) in maps.lines().filter_map(super::figures::maps_line) {
        let len = end.saturating_sub(start);
        if path == "[heap]" {
            total += super::figures::resident(start, len);
        } else if perms == "rw-p"
            && inode == "0"
            && path.is_empty()
            && start % HEAP_MAX == 0
            && len <= HEAP_MAX
        {
            // Read with process_vm_readv, never dereferenced: another thread's free may have
            // unmapped this heap since /proc/self/maps was read (glibc's `delete_heap`), and a
            // load from it would end the process (seen: SIGSEGV of a program freeing an arena's
            // last blocks while the memlog measured, 2 of 32 runs at load).
            let word = |i: u64| super::figures::read_word(start + 8 * i);
            let (Some(arena), Some(size), Some(mprotect_size)) = (word(0), word(2), word(3)) else {
                continue;
            };
            if arena != 0 && mprotect_size == len && size <= len {
                total += super::figures::resident(start, len);
            }
        }
    }
    total
}
