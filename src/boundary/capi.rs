//! The shim's own C API, exported from `libmallocshim.so` and declared in
//! `shim/include/mallocshim.h` (generated from this file by cbindgen). Reached with dlsym or by
//! linking `-lmallocshim`. Every function here may be called before or after the first malloc and
//! from any thread; none is async-signal-safe.

use crate::backend;
use crate::hot::slots::{self, ENTRIES};
use crate::hot::tls::Reentry;
use core::ffi::{c_char, c_int};

/// Calls the shim routed, per exported entry point, since the process started (all threads,
/// live and exited). Counted only while `MALLOCSHIM_PROFILE` is on; calls the shim makes itself
/// are not counted.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct MallocshimCalls {
    pub malloc: u64,
    pub free: u64,
    pub calloc: u64,
    pub realloc: u64,
    pub reallocarray: u64,
    pub posix_memalign: u64,
    pub aligned_alloc: u64,
    pub memalign: u64,
    pub valloc: u64,
    pub pvalloc: u64,
    pub malloc_usable_size: u64,
    pub free_sized: u64,
    pub free_aligned_sized: u64,
}

/// A snapshot of the shim's figures, filled by `mallocshim_get_stats`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct MallocshimStats {
    /// Calls per entry point.
    pub calls: MallocshimCalls,
    /// Bytes in live blocks, from the backend: glibc mallinfo2 `uordblks + hblkhd`; jemalloc
    /// `stats.allocated` (after an `epoch` refresh); tcmalloc `generic.current_allocated_bytes`;
    /// mimalloc, which counts no live bytes: its committed bytes (`mi_process_info`), an upper bound.
    pub backend_allocated_bytes: u64,
    /// Bytes the backend holds in memory: glibc mallinfo2 `arena + hblkhd`; jemalloc
    /// `stats.resident`; tcmalloc `generic.heap_size - tcmalloc.pageheap_unmapped_bytes`;
    /// mimalloc its committed bytes (`mi_process_info` current_commit).
    pub backend_resident_bytes: u64,
    /// Free bytes the backend could return to the OS: glibc mallinfo2 `fordblks`; jemalloc
    /// `stats.resident - stats.allocated`; tcmalloc `tcmalloc.pageheap_free_bytes`; mimalloc its
    /// committed bytes, an upper bound.
    pub backend_free_bytes: u64,
    /// Bytes served from the static bootstrap pool while the backend loaded (never freed).
    pub bootstrap_bytes: u64,
}

impl MallocshimCalls {
    fn from_array(a: [u64; ENTRIES]) -> Self {
        let [malloc, free, calloc, realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size, free_sized, free_aligned_sized] =
            a;
        MallocshimCalls {
            malloc,
            free,
            calloc,
            realloc,
            reallocarray,
            posix_memalign,
            aligned_alloc,
            memalign,
            valloc,
            pvalloc,
            malloc_usable_size,
            free_sized,
            free_aligned_sized,
        }
    }
}

/// Takes a snapshot (used by the C API and the exit summary).
pub fn snapshot() -> MallocshimStats {
    snapshot_with(slots::totals())
}

/// A snapshot around call totals already summed by the caller.
fn snapshot_with(calls: [u64; ENTRIES]) -> MallocshimStats {
    let _g = Reentry::enter();
    crate::hot::init::ensure();
    let m = backend::mem_stats();
    MallocshimStats {
        calls: MallocshimCalls::from_array(calls),
        backend_allocated_bytes: m.allocated,
        backend_resident_bytes: m.resident,
        backend_free_bytes: m.free,
        bootstrap_bytes: crate::hot::bootstrap::used() as u64,
    }
}

/// Name of the active backend: `"glibc"`, `"jemalloc"`, `"tcmalloc"` or `"mimalloc"` (a static string; never
/// NULL). After a failed backend load this is `"glibc"`, the fallback actually serving calls.
#[no_mangle]
pub extern "C" fn mallocshim_backend_name() -> *const c_char {
    crate::hot::init::ensure();
    backend::active().c_name().as_ptr()
}

/// Fills `*out` with the current figures. Returns 0, or `EINVAL` when `out` is NULL.
/// Reading the backend's statistics takes its own locks (for jemalloc an `epoch` refresh), so
/// this costs microseconds: do not call it per allocation.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `struct mallocshim_stats`.
#[no_mangle]
pub unsafe extern "C" fn mallocshim_get_stats(out: *mut MallocshimStats) -> c_int {
    if out.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `out` is valid for a write (caller's contract).
    unsafe { out.write(snapshot()) };
    0
}

/// Writes one dump now, on the calling thread, in every format of `MALLOCSHIM_DUMP_FORMATS`, to
/// `MALLOCSHIM_DUMP_DIR` (files `mallocshim.<pid>.<seq>.<ext>`). Returns 0, or `EIO` when a file
/// could not be written (the reason is on stderr, prefixed `mallocshim:`).
#[no_mangle]
pub extern "C" fn mallocshim_dump() -> c_int {
    let _g = Reentry::enter();
    crate::hot::init::ensure();
    match crate::cold::dump::write_all() {
        Ok(_) => 0,
        Err(_) => libc::EIO,
    }
}

/// What one `mallocshim_trim` call did.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct MallocshimTrimResult {
    /// Resident set size before the release call, in bytes (/proc/self/statm).
    pub rss_before_bytes: u64,
    /// Resident set size after it, in bytes.
    pub rss_after_bytes: u64,
    /// `rss_before_bytes - rss_after_bytes`, or 0 when RSS did not fall.
    pub released_bytes: u64,
    /// Wall time of the backend's release call, in ns.
    pub duration_ns: u64,
}

/// Gives free memory back to the OS now, through the active backend's own call (glibc
/// `malloc_trim(0)`; jemalloc `mallctl("arena.4096.purge")`, or `.decay` under
/// `MALLOCSHIM_JEMALLOC_RELEASE=decay`; tcmalloc `MallocExtension_ReleaseFreeMemory()`; mimalloc
/// `mi_collect(true)`), whatever
/// `MALLOCSHIM_TRIM_MIN_BYTES` says. The trim is counted in the dumps like a periodic one.
/// Costs milliseconds (glibc locks each arena in turn) and later page faults. `out` may be NULL.
/// Returns 0, or `EAGAIN` when called while the shim is still initialising (nothing was done).
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `struct mallocshim_trim_result`.
#[no_mangle]
pub unsafe extern "C" fn mallocshim_trim(out: *mut MallocshimTrimResult) -> c_int {
    let _g = Reentry::enter();
    if !crate::hot::init::ensure() || !crate::hot::init::ready() {
        return libc::EAGAIN;
    }
    let o = crate::cold::trim::run(crate::cold::trim::Reason::Api);
    if !out.is_null() {
        let r = MallocshimTrimResult {
            rss_before_bytes: o.rss_before,
            rss_after_bytes: o.rss_after,
            released_bytes: o.released,
            duration_ns: o.duration_ns,
        };
        // SAFETY: `out` is valid for a write (caller's contract).
        unsafe { out.write(r) };
    }
    0
}

/// Sets the heap profile's mean sampling gap at run time: one allocation is sampled per
/// `sample_bytes` bytes allocated, on average (exponentially distributed gaps per thread), as
/// `MALLOCSHIM_PROF_SAMPLE_BYTES` does at start; 0 turns sampling off (blocks already sampled
/// stay in the profile until they are freed). Threads see the new rate at their next allocation.
/// A process started with heap profiles off (`MALLOCSHIM_PROF_SAMPLE_BYTES=0`) runs the entry
/// table without them (its calls pay nothing for heap profiles); the first non-zero rate moves it
/// to the table with them, where it stays when sampling is turned off again (the frees of blocks
/// sampled so far must still leave the profile).
/// Returns 0; `ENOTSUP` when `MALLOCSHIM_PROFILE=off` (routing only: nothing is recorded);
/// `ENOMEM` when the profile's tables could not be mapped (sampling stays as it was).
#[no_mangle]
pub extern "C" fn mallocshim_heap_profile_set(sample_bytes: u64) -> c_int {
    let _g = Reentry::enter();
    crate::hot::init::ensure();
    if !crate::hot::config::get().profile {
        return libc::ENOTSUP;
    }
    match crate::hot::heapprof::set_rate(sample_bytes) {
        Ok(()) => {
            if sample_bytes != 0 {
                // From the table without heap profiles, if the process started with them off
                // (the fence pairs with initialisation's: a rate set while it runs is seen).
                core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
                crate::hot::route::heap_profiles_on();
            }
            crate::hot::heapprof::nudge_threads();
            0
        }
        Err(e) => e,
    }
}

/// The heap profile's mean sampling gap in bytes now; 0 when sampling is off.
#[no_mangle]
pub extern "C" fn mallocshim_heap_profile_rate() -> u64 {
    crate::hot::init::ensure();
    crate::hot::heapprof::rate()
}

/// Writes the exit summary line (`MALLOCSHIM_VERBOSE=1`).
pub fn print_summary() {
    let t = slots::totals();
    let s = snapshot_with(t);
    let mut o = crate::base::diag::LineBuf::new();
    use core::fmt::Write;
    let _ = write!(o, "summary backend={}", backend::active().name());
    for (n, v) in slots::ENTRY_NAMES.iter().zip(t.iter()) {
        let _ = write!(o, " {n}={v}");
    }
    let _ = write!(
        o,
        " allocated_bytes={} resident_bytes={} free_bytes={} bootstrap_bytes={}",
        s.backend_allocated_bytes, s.backend_resident_bytes, s.backend_free_bytes, s.bootstrap_bytes
    );
    crate::base::diag::line(format_args!("{}", crate::hot::config::Lossy(o.as_bytes())));
}
