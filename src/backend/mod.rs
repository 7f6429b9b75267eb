//! The backends and the dispatch between them. Each backend module exposes the same raw
//! operations (`malloc`, `calloc`, `realloc`, `memalign`, `free`, `usable_size`) plus its memory
//! figures and its release call; this module picks the active one with a predictable branch.
//! Backend calls here take already-validated arguments: C semantics (errno, overflow, alignment,
//! realloc edge cases) live in `csem`, never here.

pub mod boot;
pub mod glibc;
pub mod jemalloc;
pub mod tcmalloc;

use core::ffi::c_void;
use core::sync::atomic::{AtomicU8, Ordering};

/// An allocator the shim can route to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Backend {
    /// glibc's ptmalloc through its exported `__libc_*` entry points.
    Glibc = 0,
    /// jemalloc statically linked from tikv-jemalloc-sys (`_rjem_` prefix).
    Jemalloc = 1,
    /// gperftools' tcmalloc, dlopen()ed RTLD_LOCAL and called through `tc_*`.
    Tcmalloc = 2,
    /// Before initialisation: the first call initialises the shim; calls made while a backend
    /// loads are served from the static bootstrap pool.
    Bootstrap = 3,
}

impl Backend {
    pub fn from_name(v: &[u8]) -> Option<Backend> {
        match v {
            b"glibc" => Some(Backend::Glibc),
            b"jemalloc" => Some(Backend::Jemalloc),
            b"tcmalloc" => Some(Backend::Tcmalloc),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Glibc => "glibc",
            Backend::Jemalloc => "jemalloc",
            Backend::Tcmalloc => "tcmalloc",
            Backend::Bootstrap => "bootstrap",
        }
    }

    /// NUL-terminated name for the C API.
    pub fn c_name(self) -> &'static core::ffi::CStr {
        match self {
            Backend::Glibc => c"glibc",
            Backend::Jemalloc => c"jemalloc",
            Backend::Tcmalloc => c"tcmalloc",
            Backend::Bootstrap => c"bootstrap",
        }
    }
}

static ACTIVE: AtomicU8 = AtomicU8::new(Backend::Bootstrap as u8);

/// The backend serving calls: `Bootstrap` until initialisation publishes the chosen one.
#[inline(always)]
pub fn active() -> Backend {
    match ACTIVE.load(Ordering::Acquire) {
        0 => Backend::Glibc,
        1 => Backend::Jemalloc,
        2 => Backend::Tcmalloc,
        _ => Backend::Bootstrap,
    }
}

/// Makes `b` the backend of every later call (the last step of initialisation).
pub fn publish(b: Backend) {
    ACTIVE.store(b as u8, Ordering::Release);
}

/// Loads `want`; on failure prints one `mallocshim:` line and falls back to glibc. Returns the
/// backend to publish. Runs once, under the reentrancy guard, during initialisation.
///
/// # Safety
/// Must be called only by the initialising thread, before the shim is published as ready.
pub unsafe fn load(want: Backend, tcmalloc_lib: &core::ffi::CStr) -> Backend {
    let mut why = crate::diag::LineBuf::new();
    // SAFETY: initialisation-time calls, single thread (caller's contract).
    let ok = unsafe {
        glibc::load()
            && match want {
                Backend::Glibc | Backend::Bootstrap => true,
                Backend::Jemalloc => jemalloc::load(),
                Backend::Tcmalloc => tcmalloc::load(tcmalloc_lib, &mut why),
            }
    };
    if ok {
        return want;
    }
    crate::shim_warn!(
        "backend {} could not be loaded ({}); continuing with glibc",
        want.name(),
        crate::config::Lossy(why.as_bytes())
    );
    Backend::Glibc
}

macro_rules! dispatch {
    ($f:ident($($a:expr),*)) => {
        match active() {
            Backend::Glibc => glibc::$f($($a),*),
            Backend::Jemalloc => jemalloc::$f($($a),*),
            Backend::Tcmalloc => tcmalloc::$f($($a),*),
            Backend::Bootstrap => boot::$f($($a),*),
        }
    };
}

/// # Safety
/// `size` must be at least 16 and at most `isize::MAX`.
#[inline(always)]
pub unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(malloc(size)) }
}

/// # Safety
/// `n * size` must not overflow and be at least 16.
#[inline(always)]
pub unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(calloc(n, size)) }
}

/// # Safety
/// `p` is a live block of the active backend; `size` at least 16.
#[inline(always)]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(realloc(p, size)) }
}

/// # Safety
/// `align` is a power of two above 16; `size` at least 16 and `size + align` does not overflow.
#[inline(always)]
pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(memalign(align, size)) }
}

/// Frees a block; errno is left as it was.
///
/// # Safety
/// `p` is a non-null live block of the active backend.
#[inline(always)]
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(free(p)) }
}

/// # Safety
/// `p` is a non-null live block of the active backend.
#[inline(always)]
pub unsafe fn usable_size(p: *mut c_void) -> usize {
    // SAFETY: forwarded contract.
    unsafe { dispatch!(usable_size(p)) }
}

/// The active backend's own memory figures, in bytes. `None` fields could not be read.
#[derive(Clone, Copy, Default, Debug)]
pub struct MemStats {
    /// Bytes in live blocks (glibc: mallinfo2 uordblks + hblkhd; jemalloc: stats.allocated;
    /// tcmalloc: generic.current_allocated_bytes).
    pub allocated: u64,
    /// Bytes the backend holds in memory (glibc: mallinfo2 arena + hblkhd; jemalloc:
    /// stats.resident; tcmalloc: generic.heap_size - tcmalloc.pageheap_unmapped_bytes).
    pub resident: u64,
    /// Free bytes the backend could give back (glibc: mallinfo2 fordblks; jemalloc: resident -
    /// allocated; tcmalloc: tcmalloc.pageheap_free_bytes).
    pub free: u64,
}

/// Reads the active backend's memory figures. May allocate inside the backend: call under the
/// reentrancy guard.
pub fn mem_stats() -> MemStats {
    // SAFETY: the backend is loaded (called only once the shim is ready).
    unsafe { dispatch!(mem_stats()) }
}

/// Gives free memory back to the OS through the backend's own call (glibc `malloc_trim(pad)`,
/// jemalloc `arena.<all>.purge`, tcmalloc `MallocExtension_ReleaseFreeMemory`). Returns true
/// when the call ran (glibc: when it released memory).
pub fn release(pad: usize) -> bool {
    // SAFETY: the backend is loaded (called only once the shim is ready).
    unsafe { dispatch!(release(pad)) }
}

/// The backend's name and version, e.g. `glibc 2.36`, `jemalloc 5.3.0-...`, `tcmalloc gperftools 2.10`.
pub fn version(out: &mut crate::diag::LineBuf) {
    // SAFETY: the backend is loaded (called only once the shim is ready).
    unsafe { dispatch!(version(out)) }
}
