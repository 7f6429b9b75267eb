//! The bootstrap pseudo-backend, in one room: the static pool that serves allocations made while
//! the backend is being chosen and loaded (dlopen, dlsym, libstdc++'s emergency pool), by any
//! thread; the entry table in force until initialisation publishes a backend's (its functions
//! start initialisation, then re-enter through the published table or serve the pool). It is not
//! a `Backend`: before publication `backend::published()` is None, and the backend module
//! answers figures (0), release (nothing) and version (`bootstrap pool`) itself. The pool is a lock-free bump allocator over 1 MiB of
//! zero-initialised static memory placed after `.bss` (below); blocks are never reused. Owns the address-range test that keeps pool pointers
//! away from every backend. Must not call any allocator. With `init` and `route` it forms the
//! one cycle that lazy start-up needs (the first call initialises, then re-enters).

use crate::hot::c_contract;
use crate::hot::route::{self, Table};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Size of the pool in bytes (libstdc++'s emergency pool alone takes 72 KiB).
pub const POOL_BYTES: usize = 1 << 20;
const HEADER: usize = 16;

// The pool's bytes: a NOBITS section flagged SHF_X86_64_LARGE ("awl"), which the linker places
// after every ordinary `.bss` section, beside jemalloc's 2 MiB radix-tree root (moved there by
// build.rs). A static array would sit in the middle of `.bss` and spread the small statics every
// process writes over three 2 MiB page-table ranges, and every fork copies one page-table page
// per range (docs/results/fork.md "Session 17"). Assembly, because rustc emits a static with
// `#[link_section = ".lbss..."]` as PROGBITS: 1 MiB of zeros in the file and one more mapping.
// Hidden: the cdylib does not export it.
core::arch::global_asm!(
    ".pushsection .lbss.mallocshim_bootstrap_pool,\"awl\",@nobits",
    ".p2align 12",
    ".globl mallocshim_bootstrap_pool",
    ".hidden mallocshim_bootstrap_pool",
    "mallocshim_bootstrap_pool:",
    ".zero {bytes}",
    ".size mallocshim_bootstrap_pool, {bytes}",
    ".popsection",
    bytes = const POOL_BYTES,
);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The pool's address: one `lea`, as for a Rust static (an `extern` static would be read from
/// the GOT: one more load on every `free`).
#[inline(always)]
fn base() -> usize {
    let p: usize;
    // SAFETY: computes the address of the hidden symbol defined above; reads no memory.
    unsafe {
        core::arch::asm!(
            "lea {}, [rip + mallocshim_bootstrap_pool]",
            out(reg) p,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    p
}

/// True when `p` points into the pool.
#[inline(always)]
pub fn contains(p: *const libc::c_void) -> bool {
    (p as usize).wrapping_sub(base()) < POOL_BYTES
}

/// A zeroed block of `size` bytes aligned to `align` (a power of two, at least 16), or null with
/// `ENOMEM` when the pool is exhausted.
pub fn alloc(size: usize, align: usize) -> *mut libc::c_void {
    let align = align.max(HEADER);
    let mut cur = NEXT.load(Ordering::Relaxed);
    loop {
        let start = (base() + cur + HEADER + align - 1) & !(align - 1);
        let end = match start.checked_add(size.max(1)) {
            Some(e) if e - base() <= POOL_BYTES => e - base(),
            _ => {
                crate::base::sys::set_errno(libc::ENOMEM);
                return core::ptr::null_mut();
            }
        };
        let end = (end + HEADER - 1) & !(HEADER - 1);
        match NEXT.compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: [start - HEADER, end) lies inside the pool and is now owned by us.
                unsafe { *((start - HEADER) as *mut usize) = size };
                return start as *mut libc::c_void;
            }
            Err(now) => cur = now,
        }
    }
}

/// The size recorded for a pool block (what `malloc_usable_size` reports).
///
/// # Safety
/// `p` must be a pointer returned by [`alloc`].
pub unsafe fn usable_size(p: *const libc::c_void) -> usize {
    // SAFETY: `alloc` wrote the size in the header just below every block it returned.
    unsafe { *((p as usize - HEADER) as *const usize) }
}

/// Bytes of the pool handed out so far.
pub fn used() -> usize {
    NEXT.load(Ordering::Relaxed)
}

/// Before initialisation: the first call initialises the shim and re-enters through the
/// published table; calls made while initialisation runs (by the initialising thread, under its
/// guard, or by any other thread) are served from the static bootstrap pool, so nothing ever
/// waits on a lock that dlopen might hold. Pool blocks are never freed.
pub static TABLE: Table = Table {
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
    crate::hot::init::ensure()
}

unsafe extern "C" fn boot_malloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().malloc)(size) };
    }
    alloc(size, c_contract::MIN_ALIGN)
}

unsafe extern "C" fn boot_calloc(n: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().calloc)(n, size) };
    }
    // Pool memory starts zeroed and is never reused.
    match n.checked_mul(size) {
        Some(t) => alloc(t, c_contract::MIN_ALIGN),
        None => {
            crate::base::sys::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn boot_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().realloc)(p, size) };
    }
    if !p.is_null() && !contains(p) {
        // Not a block of the shim's: leave it intact.
        crate::base::sys::set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    }
    if size == 0 {
        return core::ptr::null_mut();
    }
    let q = alloc(size, c_contract::MIN_ALIGN);
    if !q.is_null() && !p.is_null() {
        // SAFETY: `p` is a pool block; the copy stays within both blocks.
        unsafe { core::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, usable_size(p).min(size)) };
    }
    q
}

unsafe extern "C" fn boot_reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().reallocarray)(p, n, size) };
    }
    match n.checked_mul(size) {
        // SAFETY: forwarded C contract.
        Some(t) => unsafe { boot_realloc(p, t) },
        None => {
            crate::base::sys::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn boot_posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().posix_memalign)(out, align, size) };
    }
    if !c_contract::posix_align_ok(align) {
        return libc::EINVAL;
    }
    let p = alloc(size, align);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: `out` is the caller's out-pointer.
    unsafe { *out = p };
    0
}

/// The aligned family in the pool: a power-of-two alignment (rounded up), at most 4 KiB apart.
fn boot_aligned(align: usize, size: usize) -> *mut c_void {
    alloc(size, align.max(1).checked_next_power_of_two().unwrap_or(usize::MAX).min(4096))
}

unsafe extern "C" fn boot_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().aligned_alloc)(align, size) };
    }
    boot_aligned(align, size)
}

unsafe extern "C" fn boot_memalign(align: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().memalign)(align, size) };
    }
    boot_aligned(align, size)
}

unsafe extern "C" fn boot_valloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().valloc)(size) };
    }
    boot_aligned(4096, size)
}

unsafe extern "C" fn boot_pvalloc(size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().pvalloc)(size) };
    }
    boot_aligned(4096, size.saturating_add(4095) & !4095)
}

/// A pointer that no allocator of the shim handed out yet is left alone.
unsafe extern "C" fn boot_free(p: *mut c_void) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (route::get().free)(p) }
    }
}

unsafe extern "C" fn boot_free_sized(p: *mut c_void, size: usize) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (route::get().free_sized)(p, size) }
    }
}

unsafe extern "C" fn boot_free_aligned_sized(p: *mut c_void, align: usize, size: usize) {
    if ready() {
        // SAFETY: forwarded C contract.
        unsafe { (route::get().free_aligned_sized)(p, align, size) }
    }
}

unsafe extern "C" fn boot_usable_size(p: *mut c_void) -> usize {
    if ready() {
        // SAFETY: forwarded C contract.
        return unsafe { (route::get().malloc_usable_size)(p) };
    }
    if contains(p) {
        // SAFETY: a pool block.
        return unsafe { usable_size(p) };
    }
    0
}
