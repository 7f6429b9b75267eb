//! The backends, listed once in [`backend_list`]: one file per backend and one row. Each
//! backend module exposes the same raw operations (`malloc`, `calloc`, `realloc`, `memalign`,
//! `free`, `usable_size`) through the [`Raw`] trait, which `csem` and `front` are generic over,
//! plus `load`, its memory figures, release call and version, which this module dispatches to
//! the active backend (off the hot path). Backends receive what they need from the
//! configuration as arguments (library path, [`Release`] mode); they never read it.
//! Backend calls take already-validated arguments: C semantics (errno, overflow, alignment,
//! realloc edge cases) live in `csem`, never here.
//!
//! Long because: the backend table's macro (`backend_list!`), the dispatch it generates and the
//! `Raw` trait are one unit; the per-backend code is already in its own files.

pub mod atfork;
mod dl;
mod figures;
pub mod glibc;
pub mod glibc_info;
pub mod jemalloc;
mod jemalloc_tcache;
mod jemalloc_tsd;
pub mod mimalloc;
pub mod tcmalloc;

use core::ffi::{c_void, CStr};
use core::sync::atomic::{AtomicU8, Ordering};
use mallocshim_format::backends::TABLE;

pub use figures::AccountFigures;

/// The backends, one row each: `Variant, module, Raw type (in the module)`, in the order of
/// `mallocshim_format::backends::TABLE`, the workspace's backend table, which gives each
/// its name, default library (dlopen()ed backends) and the rest; a compile-time assertion below
/// fails when the rows and the table disagree (count, or a module not named as its row).
/// [`define_backends`] turns the list into [`Backend`], its names, [`active`] and the dispatch
/// of the cold-path calls; `route` turns it into the entry tables. Adding a backend is one file
/// in this directory (with its `mod` line above), one row here and one row in the table.
macro_rules! backend_list {
    ($then:ident) => {
        $then! {
            /// glibc's ptmalloc through its exported `__libc_*` entry points.
            Glibc, glibc, Glibc;
            /// jemalloc statically linked from tikv-jemalloc-sys (`_rjem_` prefix).
            Jemalloc, jemalloc, Jemalloc;
            /// gperftools' tcmalloc, dlopen()ed RTLD_LOCAL and called through `tc_*`.
            Tcmalloc, tcmalloc, Tcmalloc;
            /// mimalloc (Debian's libmimalloc.so.2), dlopen()ed RTLD_LOCAL, called through `mi_*`.
            Mimalloc, mimalloc, Mimalloc;
        }
    };
}
pub(crate) use backend_list;

/// Generates [`Backend`], its names, [`active`] and the dispatch of the cold-path calls from
/// [`backend_list`]'s rows. Each backend module provides `load(lib, why)`, `mem_stats()`,
/// `release(pad, mode)` and `version(out)`.
macro_rules! define_backends {
    ($($(#[$doc:meta])* $variant:ident, $module:ident, $raw:ident;)*) => {
        /// An allocator the shim can route to.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(u8)]
        pub enum Backend {
            $($(#[$doc])* $variant,)*
        }

        /// Every backend, in row order. "Not initialised yet" is not one: it is
        /// [`published`]'s `None` (readiness itself is `hot::init`'s state).
        pub const ALL: &[Backend] = &[$(Backend::$variant),*];

        impl Backend {
            /// NUL-terminated lower-case name (also for the C API), from the backend table.
            pub const fn c_name(self) -> &'static CStr {
                TABLE[self as usize].c_name
            }

            /// The library dlopen()ed by default for a backend loaded that way (`""` otherwise),
            /// from the backend table.
            pub const fn default_lib(self) -> &'static CStr {
                if TABLE[self as usize].dlopen {
                    TABLE[self as usize].file_name()
                } else {
                    c""
                }
            }

            #[inline(always)]
            fn from_u8(v: u8) -> Option<Backend> {
                match v {
                    $(x if x == Backend::$variant as u8 => Some(Backend::$variant),)*
                    _ => None,
                }
            }
        }

        // The rows and the workspace's backend table agree: as many, and each row's module
        // named as its table row (so a swapped or missing row fails to compile).
        const _: () = {
            assert!(ALL.len() == TABLE.len(), "backend_list! and mallocshim_format::backends::TABLE differ in length");
            $(assert!(
                bytes_eq(stringify!($module).as_bytes(), TABLE[Backend::$variant as usize].c_name.to_bytes()),
                concat!("backend_list!'s row ", stringify!($variant), " is not its mallocshim_format::backends::TABLE row")
            );)*
        };

        /// Loads or initialises `want` (`lib`: the library to dlopen, for a backend loaded that
        /// way). On failure writes the reason into `why`.
        ///
        /// # Safety
        /// Initialisation only, under the reentrancy guard.
        unsafe fn load_one(want: Backend, lib: &CStr, why: &mut crate::base::diag::LineBuf) -> bool {
            // SAFETY: forwarded contract.
            unsafe {
                match want {
                    $(Backend::$variant => $module::load(lib, why),)*
                }
            }
        }

        /// Reads the active backend's memory figures (all 0 before one is published: calls
        /// are served from the bootstrap pool then). May allocate inside the backend: call under
        /// the reentrancy guard.
        pub fn mem_stats() -> MemStats {
            atfork::settle();
            // SAFETY: a published backend is loaded.
            unsafe {
                match published() {
                    $(Some(Backend::$variant) => $module::mem_stats(),)*
                    None => MemStats::default(),
                }
            }
        }

        /// Reads the active backend's figures for the RSS account (`crate::cold::account`): each
        /// backend says in its own file where they come from. Reads /proc and probes residency:
        /// worker or dump only, under the reentrancy guard.
        pub fn account_figures() -> AccountFigures {
            atfork::settle();
            // Before publication (not reached: the account is measured once the shim is
            // ready), glibc's, as `active` says.
            match active() {
                $(Backend::$variant => $module::account(),)*
            }
        }

        /// Gives free memory back to the OS through the backend's own call (glibc
        /// `malloc_trim(pad)`, jemalloc `arena.<all>.purge` or `.decay` per `mode`, tcmalloc
        /// `MallocExtension_ReleaseFreeMemory`, mimalloc `mi_collect(true)`). Returns true when
        /// the call ran (glibc: when it released memory). False before a backend is published
        /// (the bootstrap pool gives nothing back).
        pub fn release(pad: usize, mode: Release) -> bool {
            atfork::settle();
            // SAFETY: a published backend is loaded.
            unsafe {
                match published() {
                    $(Some(Backend::$variant) => $module::release(pad, mode),)*
                    None => false,
                }
            }
        }

        /// The backend's name and version, e.g. `glibc 2.36`, `jemalloc 5.3.0-...`,
        /// `tcmalloc gperftools 2.10`, `mimalloc 2.0.9` (`bootstrap pool` before a backend is
        /// published).
        pub fn version(out: &mut crate::base::diag::LineBuf) {
            atfork::settle();
            // SAFETY: a published backend is loaded.
            unsafe {
                match published() {
                    $(Some(Backend::$variant) => $module::version(out),)*
                    None => out.put(b"bootstrap pool"),
                }
            }
        }
    };
}
backend_list!(define_backends);

impl Backend {
    /// Whether every thread must meet the backend once, through a free, before it exits: jemalloc
    /// sets up a thread's state fully (a thread cache linked into an arena) when the shim asks
    /// it the usable size of a block, and only minimally on a free. glibc frees a dead thread's
    /// TLS (`_dl_deallocate_tls`) after every TSD destructor ran; if that free is the thread's
    /// first contact and the shim looks the size up, the thread cache stays linked into the arena
    /// from a stack glibc then unmaps, and the next thread to join the arena faults (SIGSEGV in
    /// `tcache_arena_associate`: tests/hostile.rs `thread_bursts_of_idle_detached_threads`). A
    /// free at the thread's start makes its state minimal, and jemalloc's own destructor then
    /// parks it (`purgatory`), so a late lookup gets the safe `reincarnated` state.
    pub fn thread_needs_a_first_free(self) -> bool {
        matches!(self, Backend::Jemalloc)
    }

    /// What a thread started by the interposed `pthread_create` does with the backend in its
    /// first frame (under the reentrancy guard): under jemalloc it turns its thread cache on when
    /// memory allows (`jemalloc_tcache`: jemalloc 5.3 crashes when a thread cache cannot be set
    /// up); nothing under the others.
    pub fn thread_started(self) {
        if self == Backend::Jemalloc {
            jemalloc_tcache::thread_start();
        }
    }

    /// Whether the shim's thread meets the backend once as it starts (a malloc/free pair), so
    /// that the backend sets up its state for the thread while the program still has memory
    /// (jemalloc 5.3 dereferences NULL when a new thread's arena cannot be created; mimalloc
    /// and tcmalloc set up a thread heap or cache the thread's figure calls then find). Not
    /// glibc: the worker's allocations come from its own heap (`base::worker_heap`), glibc's
    /// figure and trim calls need no state of the thread's, and the set-up itself would be a
    /// new arena, a heap mapping every fork copies.
    pub fn worker_meets_at_start(self) -> bool {
        !matches!(self, Backend::Glibc)
    }

    /// Prepares, on the thread that starts the shim's worker (under the reentrancy guard), what
    /// the worker would otherwise allocate through the backend: glibc's kept `malloc_info`
    /// stream (`glibc_info::prepare`).
    pub fn prepare_for_worker(self) {
        if self == Backend::Glibc {
            glibc_info::prepare();
        }
    }

    /// `MALLOCSHIM_GLIBC_TRIM_THRESHOLD`: glibc's `M_TRIM_THRESHOLD` fixed at `bytes`
    /// (`glibc::set_trim_threshold`); the other backends have no such threshold. Err says why
    /// nothing changed.
    pub fn set_trim_threshold(self, bytes: u64) -> Result<(), &'static str> {
        match self {
            Backend::Glibc if glibc::set_trim_threshold(bytes) => Ok(()),
            Backend::Glibc => Err("glibc's mallopt(M_TRIM_THRESHOLD) refused it"),
            _ => Err("only the glibc backend has a trim threshold"),
        }
    }

    /// [`Backend::default_lib`] as `&str`, for the option table's defaults.
    pub const fn default_lib_str(self) -> &'static str {
        match self.default_lib().to_str() {
            Ok(s) => s,
            Err(_) => "",
        }
    }

    /// The backend of a name, ignoring ASCII case (`JeMalloc` is jemalloc).
    pub fn from_name(v: &[u8]) -> Option<Backend> {
        ALL.iter().copied().find(|b| b.c_name().to_bytes().eq_ignore_ascii_case(v))
    }

    /// The backend's lower-case name.
    pub fn name(self) -> &'static str {
        self.c_name().to_str().unwrap_or("?")
    }
}

/// How a trim asks the backend to give memory back (`MALLOCSHIM_JEMALLOC_RELEASE`); a backend
/// with a single release call ignores it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Release {
    /// Everything unused now (jemalloc `arena.<all>.purge`).
    #[default]
    Purge,
    /// Only what the backend's decay schedule says is due (jemalloc `arena.<all>.decay`).
    Decay,
}

/// Byte-wise equality, at compile time.
const fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `prefix` then the backends' names joined with `sep`, in a fixed buffer, at compile time.
const fn join_names(prefix: &[u8], sep: &[u8]) -> ([u8; 160], usize) {
    let mut out = [0u8; 160];
    let mut n = 0;
    while n < prefix.len() {
        out[n] = prefix[n];
        n += 1;
    }
    let mut i = 0;
    while i < ALL.len() {
        if i > 0 {
            let mut k = 0;
            while k < sep.len() {
                out[n] = sep[k];
                n += 1;
                k += 1;
            }
        }
        let name = ALL[i].c_name().to_bytes();
        let mut k = 0;
        while k < name.len() {
            out[n] = name[k];
            n += 1;
            k += 1;
        }
        i += 1;
    }
    (out, n)
}

const NAMES_BUF: ([u8; 160], usize) = join_names(b"", b", ");
const DOC_BUF: ([u8; 160], usize) = join_names(b"allocator that serves every call (any case): ", b", ");

/// Every backend's name, comma-separated (`glibc, jemalloc, tcmalloc, mimalloc`), for messages.
pub const NAMES: &str = match core::str::from_utf8(NAMES_BUF.0.split_at(NAMES_BUF.1).0) {
    Ok(s) => s,
    Err(_) => "?",
};

/// The documentation of `MALLOCSHIM_BACKEND`, naming every backend.
pub const OPTION_DOC: &str = match core::str::from_utf8(DOC_BUF.0.split_at(DOC_BUF.1).0) {
    Ok(s) => s,
    Err(_) => "?",
};

/// The published backend's number; [`UNPUBLISHED`] until initialisation publishes one.
static ACTIVE: AtomicU8 = AtomicU8::new(UNPUBLISHED);
const UNPUBLISHED: u8 = u8::MAX;

/// The backend serving calls, once initialisation has published it (None before: calls are
/// then served from the bootstrap pool, `hot::bootstrap`).
#[inline(always)]
pub fn published() -> Option<Backend> {
    Backend::from_u8(ACTIVE.load(Ordering::Acquire))
}

/// The backend serving calls, for names and figures: the published one, or glibc before
/// publication (the backend every start loads first, and the fallback of a failed load).
#[inline(always)]
pub fn active() -> Backend {
    published().unwrap_or(Backend::Glibc)
}

/// Makes `b` the backend of every later call (the last step of initialisation).
pub fn publish(b: Backend) {
    ACTIVE.store(b as u8, Ordering::Release);
}

/// Loads `want` (dlopen()ing `lib`, or its default library when `lib` is empty); on failure
/// prints one `mallocshim:` line and falls back to glibc. Returns the backend to publish. Runs
/// once, under the reentrancy guard, during initialisation.
///
/// # Safety
/// Must be called only by the initialising thread, before the shim is published as ready.
pub unsafe fn load(want: Backend, lib: &CStr) -> Backend {
    let lib = if lib.is_empty() { want.default_lib() } else { lib };
    let mut why = crate::base::diag::LineBuf::new();
    // SAFETY: initialisation-time calls, single thread (caller's contract).
    let ok = unsafe {
        glibc::load(c"", &mut why)
            && crate::backend::atfork::loading_backend(|| load_one(want, lib, &mut why))
    };
    if ok {
        return want;
    }
    crate::base::diag::warn!(
        "backend {} could not be loaded ({}); continuing with glibc",
        want.name(),
        crate::base::diag::Lossy(why.as_bytes())
    );
    Backend::Glibc
}

/// One backend's raw operations, with the facts about them that [`crate::hot::c_contract`] needs to give
/// glibc's semantics at the lowest cost. [`crate::hot::route`] builds one entry table per backend
/// from these, so the hot path never branches on which backend is active.
/// Arguments are already validated by `csem`; no implementation sets errno on purpose.
pub trait Raw {
    /// Serves 1..8-byte requests from an 8-byte class: `csem` rounds requests below 16 B up to
    /// 16 B so that every block is 16-byte aligned (jemalloc, tcmalloc, mimalloc).
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
    /// The backend counts no live bytes (mimalloc's release build): the recorder keeps the
    /// count itself, by one rule (`hot::record`'s `live_after`): a served block adds its usable
    /// size, a block given up (freed, or moved or freed by realloc) subtracts its usable size.
    const LIVE_BY_USABLE: bool = false;

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

/// The active backend's own memory figures, in bytes; 0 when a figure could not be read.
#[derive(Clone, Copy, Default, Debug)]
pub struct MemStats {
    /// Bytes in live blocks (glibc: mallinfo2 uordblks + hblkhd; jemalloc: stats.allocated;
    /// tcmalloc: generic.current_allocated_bytes; mimalloc, which counts no live bytes in its
    /// release build: the shim's figure, `account::shim_live`; with profiling off its committed
    /// bytes, an upper bound).
    pub allocated: u64,
    /// Bytes the backend holds in memory (glibc: mallinfo2 arena + hblkhd; jemalloc:
    /// stats.resident; tcmalloc: generic.heap_size - tcmalloc.pageheap_unmapped_bytes;
    /// mimalloc: `mi_process_info` current_commit).
    pub resident: u64,
    /// Free bytes the backend could give back (glibc: mallinfo2 fordblks; jemalloc: resident -
    /// allocated - metadata, as the RSS account counts it; tcmalloc: tcmalloc.pageheap_free_bytes; mimalloc: its committed bytes less
    /// `allocated`; with profiling off the committed bytes, an upper bound).
    pub free: u64,
}
