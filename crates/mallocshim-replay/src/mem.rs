//! The replayer's own memory: arrays of plain `Copy` values taken from anonymous mmap, never
//! from malloc, so that what the replay measures in the allocator is
//! the replayed calls' alone, and the replayer's bytes can be stated ([`mapped_bytes`]).
//!
//! Must not call malloc; owns no trace knowledge.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes currently mapped by every [`MmapVec`] of the process.
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// Bytes the replayer holds in its own mappings now (decoded steps, block table, counters).
pub fn mapped_bytes() -> u64 {
    MAPPED.load(Ordering::Relaxed)
}

const PAGE: usize = 4096;

/// An array of `T` in its own anonymous mapping. `T` must be valid when all-zero (fresh pages
/// are zero: [`MmapVec::zeroed`] relies on it).
pub struct MmapVec<T: Copy> {
    ptr: *mut T,
    len: usize,
    map_bytes: usize,
}

// SAFETY: the mapping is owned by the vector alone; sharing it is sharing a `[T]`.
unsafe impl<T: Copy + Send> Send for MmapVec<T> {}
// SAFETY: as above; `&MmapVec<T>` gives out `&[T]` only.
unsafe impl<T: Copy + Sync> Sync for MmapVec<T> {}

fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE).max(1) * PAGE
}

impl<T: Copy> MmapVec<T> {
    fn with_capacity(cap: usize) -> Result<Self, String> {
        let bytes = round_up(cap.max(1).saturating_mul(size_of::<T>()));
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {bytes} bytes for the replay: {}",
                std::io::Error::last_os_error()
            ));
        }
        MAPPED.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(MmapVec { ptr: p.cast(), len: 0, map_bytes: bytes })
    }

    /// `len` zero values (fresh pages are zero), every page written once so that the mapping is
    /// resident before the replay starts (the baseline RSS then holds it).
    pub fn zeroed(len: usize) -> Result<Self, String> {
        let mut v = Self::with_capacity(len)?;
        v.len = len;
        v.prefault();
        Ok(v)
    }

    /// Writes one byte per page (to zero: the values stay zero) so the pages are resident now.
    pub fn prefault(&mut self) {
        let base = self.ptr.cast::<u8>();
        for off in (0..self.map_bytes).step_by(PAGE) {
            // SAFETY: `off` is inside the mapping; a volatile write of the value already there.
            unsafe { base.add(off).write_volatile(base.add(off).read_volatile()) };
        }
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised values at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl MmapVec<u64> {
    /// Element `i` as an atomic (the block table and counters the replay threads share).
    pub fn atomic(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: in bounds, 8-aligned (page-aligned mapping of u64s), and every access to
        // these elements while shared goes through this atomic view.
        unsafe { AtomicU64::from_ptr(self.ptr.add(i)) }
    }
}

impl<T: Copy> Drop for MmapVec<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping is this vector's and nothing borrows it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.map_bytes) };
        MAPPED.fetch_sub(self.map_bytes as u64, Ordering::Relaxed);
    }
}

impl<T: Copy> std::ops::Deref for MmapVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy> std::ops::DerefMut for MmapVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}
