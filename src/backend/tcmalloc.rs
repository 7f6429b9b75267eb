//! The tcmalloc backend: gperftools' `libtcmalloc_minimal.so.4`, dlopen()ed with RTLD_LOCAL (it
//! exports `malloc`, `__libc_malloc` and `mmap` itself, which must not capture anyone's calls),
//! and called through its `tc_*` entry points, found once with dlsym. The dlopen runs under the
//! reentrancy guard: the allocations it makes come from the bootstrap pool.

use super::MemStats;
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_void, CStr};

type Fmalloc = unsafe extern "C" fn(usize) -> *mut c_void;
type Fcalloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type Frealloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type Fmemalign = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type Ffree = unsafe extern "C" fn(*mut c_void);
type Fsize = unsafe extern "C" fn(*mut c_void) -> usize;
type Fprop = unsafe extern "C" fn(*const c_char, *mut usize) -> c_int;
type Frelease = unsafe extern "C" fn();
type Fversion = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut *const c_char) -> *const c_char;

/// The tcmalloc entry points the shim uses.
#[derive(Clone, Copy)]
struct Tc {
    malloc: Fmalloc,
    calloc: Fcalloc,
    realloc: Frealloc,
    memalign: Fmemalign,
    free: Ffree,
    usable_size: Fsize,
    get_property: Option<Fprop>,
    release: Option<Frelease>,
    version: Option<Fversion>,
}

unsafe extern "C" fn none_malloc(_: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_calloc(_: usize, _: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_realloc(_: *mut c_void, _: usize) -> *mut c_void {
    core::ptr::null_mut()
}
unsafe extern "C" fn none_free(_: *mut c_void) {}
unsafe extern "C" fn none_size(_: *mut c_void) -> usize {
    0
}

struct Cell(UnsafeCell<Tc>);
// SAFETY: written once by the initialising thread before the shim is published; read-only after.
unsafe impl Sync for Cell {}

static TC: Cell = Cell(UnsafeCell::new(Tc {
    malloc: none_malloc,
    calloc: none_calloc,
    realloc: none_realloc,
    memalign: none_calloc,
    free: none_free,
    usable_size: none_size,
    get_property: None,
    release: None,
    version: None,
}));

#[inline(always)]
fn tc() -> &'static Tc {
    // SAFETY: see `Cell`.
    unsafe { &*TC.0.get() }
}

/// dlopen()s `path` RTLD_LOCAL and resolves the `tc_*` entry points. On failure writes the reason
/// (dlerror's text, or the missing symbol) into `why` and returns false.
///
/// # Safety
/// Initialisation only, under the reentrancy guard.
pub(super) unsafe fn load(path: &CStr, why: &mut crate::base::diag::LineBuf) -> bool {
    let need = [c"tc_malloc", c"tc_calloc", c"tc_realloc", c"tc_memalign", c"tc_free", c"tc_malloc_size"];
    // SAFETY: forwarded contract (initialisation, under the reentrancy guard).
    let Some((l, p)) = (unsafe { super::dl::open(path, need, why) }) else {
        return false;
    };
    // SAFETY: each symbol is transmuted to the signature gperftools' tcmalloc.h /
    // malloc_extension_c.h declares for it; `TC` is written by the initialising thread alone,
    // before the shim is published.
    unsafe {
        let t = &mut *TC.0.get();
        t.malloc = core::mem::transmute::<*mut c_void, Fmalloc>(p[0]);
        t.calloc = core::mem::transmute::<*mut c_void, Fcalloc>(p[1]);
        t.realloc = core::mem::transmute::<*mut c_void, Frealloc>(p[2]);
        t.memalign = core::mem::transmute::<*mut c_void, Fmemalign>(p[3]);
        t.free = core::mem::transmute::<*mut c_void, Ffree>(p[4]);
        t.usable_size = core::mem::transmute::<*mut c_void, Fsize>(p[5]);
        t.get_property =
            core::mem::transmute::<*mut c_void, Option<Fprop>>(l.sym(c"MallocExtension_GetNumericProperty"));
        t.release = core::mem::transmute::<*mut c_void, Option<Frelease>>(
            l.sym(c"MallocExtension_ReleaseFreeMemory"),
        );
        t.version = core::mem::transmute::<*mut c_void, Option<Fversion>>(l.sym(c"tc_version"));
    }
    true
}

#[inline(always)]
pub(super) unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: a loaded tc_malloc.
    unsafe { (tc().malloc)(size) }
}

#[inline(always)]
pub(super) unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: a loaded tc_calloc.
    unsafe { (tc().calloc)(n, size) }
}

#[inline(always)]
pub(super) unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: a loaded tc_realloc; `p` is a tcmalloc block.
    unsafe { (tc().realloc)(p, size) }
}

#[inline(always)]
pub(super) unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: a loaded tc_memalign; `align` is a power of two.
    unsafe { (tc().memalign)(align, size) }
}

/// tcmalloc may return pages to the OS inside free and so touch errno: `csem` keeps the caller's.
#[inline(always)]
pub(super) unsafe fn free(p: *mut c_void) {
    // SAFETY: a loaded tc_free; `p` is NULL or a tcmalloc block.
    unsafe { (tc().free)(p) }
}

#[inline(always)]
pub(super) unsafe fn usable_size(p: *mut c_void) -> usize {
    // SAFETY: a loaded tc_malloc_size; `p` is a tcmalloc block.
    unsafe { (tc().usable_size)(p) }
}

/// gperftools' tcmalloc as a [`super::Raw`] backend.
pub struct Tcmalloc;

impl super::Raw for Tcmalloc {
    const SMALL_8: bool = !cfg!(feature = "semantics-floor");
    /// tc_malloc's failure path (`handle_oom`) sets ENOMEM; huge sizes fail the same way.
    const MALLOC_SETS_ENOMEM: bool = true;
    const FREE_KEEPS_ERRNO: bool = cfg!(feature = "semantics-floor");
    super::raw_forwards!();
}

/// One `MallocExtension_GetNumericProperty` value, 0 when unknown.
pub fn property(name: &CStr) -> u64 {
    let mut v = 0usize;
    match tc().get_property {
        // SAFETY: a valid property name and out-pointer.
        Some(f) if unsafe { f(name.as_ptr(), &mut v) } != 0 => v as u64,
        _ => 0,
    }
}

pub(super) unsafe fn mem_stats() -> MemStats {
    let heap = property(c"generic.heap_size");
    let unmapped = property(c"tcmalloc.pageheap_unmapped_bytes");
    MemStats {
        allocated: property(c"generic.current_allocated_bytes"),
        resident: heap.saturating_sub(unmapped),
        free: property(c"tcmalloc.pageheap_free_bytes"),
    }
}

/// The account's figures (see `crate::cold::account`): live `generic.current_allocated_bytes`;
/// resident `generic.total_physical_bytes` (at least the mapped heap); metadata what is
/// physical beyond the mapped heap, `generic.total_physical_bytes - (generic.heap_size -
/// tcmalloc.pageheap_unmapped_bytes)`.
pub(super) fn account() -> super::AccountFigures {
    // SAFETY: the backend is loaded (the account is measured only once the shim is ready).
    let stats = unsafe { mem_stats() };
    let phys = property(c"generic.total_physical_bytes");
    super::AccountFigures {
        stats,
        live: Some(stats.allocated),
        resident: phys.max(stats.resident),
        metadata: Some(phys.saturating_sub(stats.resident)),
        trim: None,
    }
}

/// `MallocExtension_ReleaseFreeMemory()` (one release call: `_mode` is unused).
pub(super) unsafe fn release(_pad: usize, _mode: super::Release) -> bool {
    match tc().release {
        Some(f) => {
            // SAFETY: a loaded MallocExtension_ReleaseFreeMemory.
            unsafe { f() };
            true
        }
        None => false,
    }
}

pub(super) unsafe fn version(out: &mut crate::base::diag::LineBuf) {
    match tc().version {
        Some(f) => {
            // SAFETY: tc_version accepts NULL out-pointers and returns a static string.
            let s = unsafe { f(core::ptr::null_mut(), core::ptr::null_mut(), core::ptr::null_mut()) };
            out.put(b"tcmalloc ");
            if !s.is_null() {
                // SAFETY: a static NUL-terminated string.
                out.put(unsafe { CStr::from_ptr(s) }.to_bytes());
            }
        }
        None => out.put(b"tcmalloc"),
    }
}
