//! The entry table: which function serves each exported malloc-family symbol. One table per
//! backend and profiling setting, each filled with `front`'s functions monomorphised for that
//! pair, plus the bootstrap table in force until initialisation publishes the chosen one. An
//! exported symbol is one load and one indirect jump, with no branch on the backend or on
//! profiling. Owns nothing else; must not allocate or lock.

use crate::backend::glibc::Glibc;
use crate::backend::jemalloc::Jemalloc;
use crate::backend::tcmalloc::Tcmalloc;
use crate::backend::{Backend, Raw};
use crate::{bootstrap, csem, front, init};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The functions serving the malloc family, one per exported symbol (same C signatures).
pub struct Table {
    pub malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    pub reallocarray: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    pub posix_memalign: unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
    pub aligned_alloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub valloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub pvalloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub malloc_usable_size: unsafe extern "C" fn(*mut c_void) -> usize,
    pub free_sized: unsafe extern "C" fn(*mut c_void, usize),
    pub free_aligned_sized: unsafe extern "C" fn(*mut c_void, usize, usize),
}

const fn table<B: Raw, const P: bool>() -> Table {
    Table {
        malloc: front::malloc::<B, P>,
        free: front::free::<B, P>,
        calloc: front::calloc::<B, P>,
        realloc: front::realloc::<B, P>,
        reallocarray: front::reallocarray::<B, P>,
        posix_memalign: front::posix_memalign::<B, P>,
        aligned_alloc: front::aligned_alloc::<B, P>,
        memalign: front::memalign::<B, P>,
        valloc: front::valloc::<B, P>,
        pvalloc: front::pvalloc::<B, P>,
        malloc_usable_size: front::malloc_usable_size::<B, P>,
        free_sized: front::free_sized::<B, P>,
        free_aligned_sized: front::free_aligned_sized::<B, P>,
    }
}

static GLIBC: Table = table::<Glibc, false>();
static GLIBC_PROFILED: Table = table::<Glibc, true>();
static JEMALLOC: Table = table::<Jemalloc, false>();
static JEMALLOC_PROFILED: Table = table::<Jemalloc, true>();
static TCMALLOC: Table = table::<Tcmalloc, false>();
static TCMALLOC_PROFILED: Table = table::<Tcmalloc, true>();

static ACTIVE: AtomicPtr<Table> = AtomicPtr::new(&BOOT as *const Table as *mut Table);

/// The table serving calls now.
#[inline(always)]
pub fn get() -> &'static Table {
    // SAFETY: ACTIVE always points to one of the static tables above.
    unsafe { &*ACTIVE.load(Ordering::Acquire) }
}

/// Makes backend `b`'s table, with or without recording, serve every later call (the last
/// step of initialisation).
pub fn publish(b: Backend, profile: bool) {
    let t: &'static Table = match (b, profile) {
        (Backend::Glibc, false) => &GLIBC,
        (Backend::Glibc, true) => &GLIBC_PROFILED,
        (Backend::Jemalloc, false) => &JEMALLOC,
        (Backend::Jemalloc, true) => &JEMALLOC_PROFILED,
        (Backend::Tcmalloc, false) => &TCMALLOC,
        (Backend::Tcmalloc, true) => &TCMALLOC_PROFILED,
        (Backend::Bootstrap, _) => &BOOT,
    };
    ACTIVE.store(t as *const Table as *mut Table, Ordering::Release);
}

/// Before initialisation: the first call initialises the shim and re-enters through the
/// published table; calls made while initialisation runs (by the initialising thread, under its
/// guard, or by any other thread) are served from the static bootstrap pool, so nothing ever
/// waits on a lock that dlopen might hold. Pool blocks are never freed.
static BOOT: Table = Table {
    malloc: boot_malloc,
    free: boot_free,
    calloc: boot_calloc,
    realloc: boot_realloc,
    reallocarray: boot_reallocarray,
    posix_memalign: boot_posix_memalign,
    aligned_alloc: boot_aligned_alloc,
    memalign: boot_memalign,
    valloc: boot_valloc,
    pvalloc: boot_pvalloc,
    malloc_usable_size: boot_usable_size,
    free_sized: boot_free_sized,
    free_aligned_sized: boot_free_aligned_sized,
};

/// True when the shim is ready: the caller re-enters through [`get`].
#[cold]
fn ready() -> bool {
    init::ensure()
}

unsafe extern "C" fn boot_malloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().malloc)(size) };
    }
    bootstrap::alloc(size, csem::MIN_ALIGN)
}

unsafe extern "C" fn boot_calloc(n: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().calloc)(n, size) };
    }
    // Pool memory starts zeroed and is never reused.
    match n.checked_mul(size) {
        Some(t) => bootstrap::alloc(t, csem::MIN_ALIGN),
        None => {
            csem::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn boot_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().realloc)(p, size) };
    }
    if !p.is_null() && !bootstrap::contains(p) {
        // Not a block of the shim's: leave it intact.
        csem::set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    }
    if size == 0 {
        return core::ptr::null_mut();
    }
    let q = bootstrap::alloc(size, csem::MIN_ALIGN);
    if !q.is_null() && !p.is_null() {
        // SAFETY: `p` is a pool block; the copy stays within both blocks.
        unsafe {
            core::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, bootstrap::usable_size(p).min(size))
        };
    }
    q
}

unsafe extern "C" fn boot_reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().reallocarray)(p, n, size) };
    }
    match n.checked_mul(size) {
        // SAFETY: forwarded C contract.
        Some(t) => unsafe { boot_realloc(p, t) },
        None => {
            csem::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn boot_posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().posix_memalign)(out, align, size) };
    }
    if !csem::posix_align_ok(align) {
        return libc::EINVAL;
    }
    let p = bootstrap::alloc(size, align);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: `out` is the caller's out-pointer.
    unsafe { *out = p };
    0
}

/// The aligned family in the pool: a power-of-two alignment (rounded up), at most 4 KiB apart.
fn boot_aligned(align: usize, size: usize) -> *mut c_void {
    bootstrap::alloc(size, align.max(1).checked_next_power_of_two().unwrap_or(usize::MAX).min(4096))
}

unsafe extern "C" fn boot_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().aligned_alloc)(align, size) };
    }
    boot_aligned(align, size)
}

unsafe extern "C" fn boot_memalign(align: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().memalign)(align, size) };
    }
    boot_aligned(align, size)
}

unsafe extern "C" fn boot_valloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().valloc)(size) };
    }
    boot_aligned(4096, size)
}

unsafe extern "C" fn boot_pvalloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().pvalloc)(size) };
    }
    boot_aligned(4096, size.saturating_add(4095) & !4095)
}

/// A pointer that no allocator of the shim handed out yet is left alone.
unsafe extern "C" fn boot_free(p: *mut c_void) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (get().free)(p) }
    }
}

unsafe extern "C" fn boot_free_sized(p: *mut c_void, size: usize) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (get().free_sized)(p, size) }
    }
}

unsafe extern "C" fn boot_free_aligned_sized(p: *mut c_void, align: usize, size: usize) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (get().free_aligned_sized)(p, align, size) }
    }
}

unsafe extern "C" fn boot_usable_size(p: *mut c_void) -> usize {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (get().malloc_usable_size)(p) };
    }
    if bootstrap::contains(p) {
        // SAFETY: a pool block.
        return unsafe { bootstrap::usable_size(p) };
    }
    0
}
