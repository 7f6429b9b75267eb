//! glibc's C semantics for the malloc family, shared by every backend (the snmalloc
//! `override/` pattern): errno values, size overflow, alignment rules, realloc edge cases, the
//! 16-byte minimum alignment and bootstrap-pool pointers. Generic over [`Raw`]: each backend gets
//! its own copy, with the checks its `Raw` facts make unnecessary compiled out. Backends below
//! get only validated arguments; the exported symbols above are one-line forwards. Must not
//! allocate or lock.

use crate::backend::Raw;
use crate::base::sys::{errno_slot, set_errno};
use crate::hot::bootstrap;
use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Minimum alignment of every block, as glibc guarantees on x86-64.
pub const MIN_ALIGN: usize = 16;
/// Largest request any allocation accepts (glibc refuses sizes above PTRDIFF_MAX).
const MAX_REQUEST: usize = isize::MAX as usize;

static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// Records the system page size (initialisation).
pub fn set_page_size(p: usize) {
    if p.is_power_of_two() {
        PAGE.store(p, Ordering::Relaxed);
    }
}

fn page() -> usize {
    PAGE.load(Ordering::Relaxed)
}

#[cold]
fn enomem() -> *mut c_void {
    set_errno(libc::ENOMEM);
    ptr::null_mut()
}

/// Rounds tiny requests up so that every backend returns 16-byte aligned blocks (jemalloc and
/// tcmalloc serve 1..8 bytes from an 8-byte class).
#[inline(always)]
fn min16(size: usize) -> usize {
    if size < MIN_ALIGN {
        MIN_ALIGN
    } else {
        size
    }
}

/// `malloc`: a unique block for 0; NULL + ENOMEM on failure or a size above PTRDIFF_MAX. A
/// backend that does all this itself is tail-called.
#[inline(always)]
pub unsafe fn malloc<B: Raw>(size: usize) -> *mut c_void {
    let size = if B::SMALL_8 { min16(size) } else { size };
    if B::MALLOC_SETS_ENOMEM {
        // SAFETY: the backend handles every size itself (MALLOC_SETS_ENOMEM).
        return unsafe { B::malloc(size) };
    }
    if size > MAX_REQUEST {
        return enomem();
    }
    // SAFETY: 16 <= size <= isize::MAX.
    let p = unsafe { B::malloc(size) };
    if p.is_null() {
        return enomem();
    }
    p
}

/// `calloc`: NULL + ENOMEM when `n * size` overflows.
#[inline(always)]
pub unsafe fn calloc<B: Raw>(n: usize, size: usize) -> *mut c_void {
    let total = match n.checked_mul(size) {
        Some(t) if t <= MAX_REQUEST => t,
        _ => return enomem(),
    };
    // SAFETY: the product fits and is at least 16.
    let p = unsafe {
        if total < MIN_ALIGN {
            B::calloc(1, MIN_ALIGN)
        } else {
            B::calloc(n, size)
        }
    };
    if p.is_null() {
        return enomem();
    }
    p
}

/// `free`: NULL and bootstrap-pool blocks are ignored; errno is kept.
#[inline(always)]
pub unsafe fn free<B: Raw>(p: *mut c_void) {
    // The semantics-floor measurement build (Cargo.toml) leaves the pool test out.
    if !cfg!(feature = "semantics-floor") && bootstrap::contains(p) {
        return;
    }
    // SAFETY: NULL or a block handed out by the backend (the program's contract); every
    // backend's free accepts NULL.
    unsafe { keep_errno::<B>(|| B::free(p)) }
}

/// Frees the live backend block `p` (not NULL, not a pool block) whose usable size `usable`
/// was just read with the backend's `usable_size`; errno is kept.
#[inline(always)]
pub unsafe fn free_live<B: Raw>(p: *mut c_void, usable: usize) {
    // SAFETY: a live backend block and its usable size (caller's contract).
    unsafe { keep_errno::<B>(|| B::free_usable(p, usable)) }
}

/// Frees the live backend block `p` (not NULL, not a pool block); errno is kept.
#[inline(always)]
pub unsafe fn free_live_unsized<B: Raw>(p: *mut c_void) {
    // SAFETY: a live backend block (caller's contract).
    unsafe { keep_errno::<B>(|| B::free(p)) }
}

/// Runs a backend free, restoring errno if the backend may have changed it.
#[inline(always)]
fn keep_errno<B: Raw>(f: impl FnOnce()) {
    if B::FREE_KEEPS_ERRNO {
        return f();
    }
    // SAFETY: this thread's errno slot.
    let e = unsafe { *errno_slot() };
    f();
    // The slot's address is computed again rather than kept across the call: one saved
    // register instead of three.
    let ep = errno_slot();
    // SAFETY: as above; written only when the free changed it.
    unsafe {
        if *ep != e {
            *ep = e;
        }
    }
}

/// `realloc`: NULL acts as malloc; size 0 frees and returns NULL (glibc); a failure leaves the
/// block intact and sets ENOMEM; pool blocks move to the backend.
#[inline(always)]
pub unsafe fn realloc<B: Raw>(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: forwarded.
        return unsafe { malloc::<B>(size) };
    }
    if size == 0 {
        // SAFETY: forwarded.
        unsafe { free::<B>(p) };
        return ptr::null_mut();
    }
    if size > MAX_REQUEST {
        return enomem();
    }
    if bootstrap::contains(p) {
        // SAFETY: `p` is a pool block; the copy stays within both blocks.
        return unsafe {
            let q = malloc::<B>(size);
            if !q.is_null() {
                ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, bootstrap::usable_size(p).min(size));
            }
            q
        };
    }
    // SAFETY: a live backend block, 16 <= size <= isize::MAX.
    let q = unsafe { B::realloc(p, min16(size)) };
    if q.is_null() {
        return enomem();
    }
    q
}

/// `reallocarray`: NULL + ENOMEM (old block intact) when `n * size` overflows.
pub unsafe fn reallocarray<B: Raw>(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded.
        Some(t) => unsafe { realloc::<B>(p, t) },
        None => enomem(),
    }
}

/// The aligned family's common core; `align` is a power of two.
#[inline]
unsafe fn aligned<B: Raw>(align: usize, size: usize) -> *mut c_void {
    if align <= MIN_ALIGN {
        // SAFETY: forwarded.
        return unsafe { malloc::<B>(size) };
    }
    if size > MAX_REQUEST - align {
        return enomem();
    }
    // SAFETY: power-of-two align above 16, size + align does not overflow.
    let p = unsafe { B::memalign(align, min16(size)) };
    if p.is_null() {
        return enomem();
    }
    p
}

/// posix_memalign's rule: a power of two multiple of `sizeof(void *)`.
pub fn posix_align_ok(align: usize) -> bool {
    align.is_power_of_two() && align.is_multiple_of(core::mem::size_of::<usize>())
}

/// `posix_memalign`: EINVAL (errno untouched) unless `align` is a power of two multiple of
/// `sizeof(void *)`; ENOMEM on failure (errno set too, as glibc does).
pub unsafe fn posix_memalign<B: Raw>(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !posix_align_ok(align) {
        return libc::EINVAL;
    }
    // SAFETY: forwarded.
    let p = unsafe { aligned::<B>(align, size) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: `out` is the caller's out-pointer.
    unsafe { *out = p };
    0
}

/// `aligned_alloc` with glibc 2.38's rule: NULL + EINVAL unless `align` is a power of two.
pub unsafe fn aligned_alloc<B: Raw>(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { aligned::<B>(align, size) }
}

/// `memalign`: EINVAL above SIZE_MAX/2+1; other alignments round up to a power of two.
pub unsafe fn memalign<B: Raw>(align: usize, size: usize) -> *mut c_void {
    if align > usize::MAX / 2 + 1 {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: forwarded; next_power_of_two cannot overflow below 2^63.
    unsafe { aligned::<B>(align.max(1).next_power_of_two(), size) }
}

/// `valloc`: page-aligned.
pub unsafe fn valloc<B: Raw>(size: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { aligned::<B>(page(), size) }
}

/// `pvalloc`: page-aligned and rounded up to whole pages; ENOMEM when rounding overflows.
pub unsafe fn pvalloc<B: Raw>(size: usize) -> *mut c_void {
    let pg = page();
    match size.checked_add(pg - 1) {
        // SAFETY: forwarded.
        Some(r) => unsafe { aligned::<B>(pg, (r & !(pg - 1)).max(pg)) },
        None => enomem(),
    }
}

/// `malloc_usable_size`: 0 for NULL; the pool's recorded size for pool blocks.
#[inline(always)]
pub unsafe fn usable_size<B: Raw>(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    if bootstrap::contains(p) {
        // SAFETY: a pool block.
        return unsafe { bootstrap::usable_size(p) };
    }
    // SAFETY: a live backend block (the program's contract).
    unsafe { B::usable_size(p) }
}
