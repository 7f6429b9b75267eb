//! The backends. Each backend module exposes the same raw operations (`malloc`, `calloc`,
//! `realloc`, `memalign`, `free`, `usable_size`) through the [`Raw`] trait, which `csem` and
//! `front` are generic over, plus its memory figures, release call and version, which this
//! module dispatches to the active backend (off the hot path).
//! Backend calls take already-validated arguments: C semantics (errno, overflow, alignment,
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
                Backend::Jemalloc => crate::atfork::loading_backend(|| jemalloc::load()),
                Backend::Tcmalloc => {
                    crate::atfork::loading_backend(|| tcmalloc::load(tcmalloc_lib, &mut why))
                }
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

/// One backend's raw operations, with the facts about them that [`crate::csem`] needs to give
/// glibc's semantics at the lowest cost. [`crate::route`] builds one entry table per backend
/// from these, so the hot path never branches on which backend is active.
/// Arguments are already validated by `csem`; no implementation sets errno on purpose.
pub trait Raw {
    /// Serves 1..8-byte requests from an 8-byte class: `csem` rounds requests below 16 B up to
    /// 16 B so that every block is 16-byte aligned (jemalloc, tcmalloc).
    const SMALL_8: bool;
    /// `malloc` itself returns NULL with errno ENOMEM on every failure, sizes above PTRDIFF_MAX
    /// included, so `csem` may tail-call it without checks.
    const MALLOC_SETS_ENOMEM: bool;
    /// `free` never changes errno, so `csem` need not save and restore it (glibc since 2.33).
    const FREE_KEEPS_ERRNO: bool;
    /// The backend counts the bytes each thread frees, adding the block's usable size on every
    /// free (jemalloc's `thread.deallocated`): the recorder reads the counter around a free
    /// (see [`Raw::thread_freed_counter`]) instead of looking the usable size up first.
    const COUNTS_FREED_BYTES: bool = false;

    /// # Safety
    /// `size` is at most `isize::MAX` unless `MALLOC_SETS_ENOMEM`; at least 16 if `SMALL_8`.
    unsafe fn malloc(size: usize) -> *mut c_void;
    /// # Safety
    /// `n * size` does not overflow and is at least 16.
    unsafe fn calloc(n: usize, size: usize) -> *mut c_void;
    /// # Safety
    /// `p` is a live block of this backend; `size` at least 16.
    unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void;
    /// # Safety
    /// `align` is a power of two above 16; `size` at least 16 and `size + align` does not overflow.
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void;
    /// # Safety
    /// `p` is NULL or a live block of this backend.
    unsafe fn free(p: *mut c_void);
    /// # Safety
    /// `p` is a non-null live block of this backend.
    unsafe fn usable_size(p: *mut c_void) -> usize;
    /// The calling thread's counter of bytes freed when [`Raw::COUNTS_FREED_BYTES`], or null.
    /// Called only after the backend served an allocation on this thread (its per-thread state
    /// exists), under the reentrancy guard.
    fn thread_freed_counter() -> *mut u64 {
        core::ptr::null_mut()
    }
    /// Frees a block whose usable size the caller has just read: jemalloc's `sdallocx` then
    /// skips the lookup that `free` would repeat.
    ///
    /// # Safety
    /// `p` is a non-null live block of this backend and `usable` its usable size.
    #[inline(always)]
    unsafe fn free_usable(p: *mut c_void, _usable: usize) {
        // SAFETY: forwarded contract.
        unsafe { Self::free(p) }
    }
}

/// Implements [`Raw`]'s operations as forwards to the backend module's functions of the same names.
macro_rules! raw_forwards {
    () => {
        #[inline(always)]
        unsafe fn malloc(size: usize) -> *mut c_void {
            // SAFETY: forwarded contract.
            unsafe { malloc(size) }
        }
        #[inline(always)]
        unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
            // SAFETY: forwarded contract.
            unsafe { calloc(n, size) }
        }
        #[inline(always)]
        unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
            // SAFETY: forwarded contract.
            unsafe { realloc(p, size) }
        }
        #[inline(always)]
        unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
            // SAFETY: forwarded contract.
            unsafe { memalign(align, size) }
        }
        #[inline(always)]
        unsafe fn free(p: *mut c_void) {
            // SAFETY: forwarded contract.
            unsafe { free(p) }
        }
        #[inline(always)]
        unsafe fn usable_size(p: *mut c_void) -> usize {
            // SAFETY: forwarded contract.
            unsafe { usable_size(p) }
        }
    };
}
pub(crate) use raw_forwards;

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
