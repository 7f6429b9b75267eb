//! The static bootstrap pool: serves allocations made while the backend is being chosen and loaded
//! (dlopen, dlsym, libstdc++'s emergency pool), by any thread. A lock-free bump allocator over a
//! 1 MiB static array; blocks are never reused. Owns the address-range test that keeps pool
//! pointers away from every backend. Must not call any allocator.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Size of the pool in bytes (libstdc++'s emergency pool alone takes 72 KiB).
pub const POOL_BYTES: usize = 1 << 20;
const HEADER: usize = 16;

#[repr(C, align(4096))]
struct Pool(UnsafeCell<[u8; POOL_BYTES]>);

// SAFETY: disjoint ranges of the pool are handed out by an atomic bump pointer; each range is
// written only by the thread that received it.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new([0; POOL_BYTES]));
static NEXT: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
fn base() -> usize {
    POOL.0.get() as usize
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
                crate::csem::set_errno(libc::ENOMEM);
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
