//! jemalloc's thread caches, turned on per thread by the shim instead of by jemalloc. jemalloc
//! 5.3 sets a thread's cache up at the thread's first allocation and ignores a failure: out of
//! address space, `tsd_tcache_data_init` gets no block for the cache's bin stacks and the thread
//! goes on with them unset, so its next allocation dereferences NULL (`cache_bin_alloc`); when
//! the thread's arena cannot be created, the set-up links the cache to a NULL arena
//! (`tcache_arena_associate`). Both kill the process with SIGSEGV where glibc returns ENOMEM.
//!
//! So jemalloc starts with `tcache:false` (the shim's `malloc_conf` default; a `tcache` key in
//! `MALLOC_CONF`/`_RJEM_MALLOC_CONF` wins, and then the shim leaves caches to jemalloc), and each
//! thread the interposed `pthread_create` starts turns its cache on (`thread.tcache.enabled`) in
//! its first frame once two probes got memory: a block from the thread's own arena (jemalloc
//! binds or creates the arena now, or returns NULL), then a block of the bin stacks' size from
//! arena 0, where jemalloc takes them, freed just before. A thread whose probes fail runs
//! without a cache: its allocations go to its arena and fail with ENOMEM when that has nothing.
//! The probes cannot make the set-up certain (another thread can take the probed memory between
//! the probe's free and the set-up), so each turning on is followed by a check of the set-up,
//! and a failed one is turned off again ([`jemalloc_tsd`](super::jemalloc_tsd)).
//! The loading thread (the main thread) turns its cache on at load, which measures the bin
//! stacks' size (`stats.arenas.0.internal` before and after).
//!
//! Owns that choice and the measured size. Must not run on the hot path: it is called at load
//! and from a new thread's first frame, under the reentrancy guard, and it allocates.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use tikv_jemalloc_ctl::raw;
use tikv_jemalloc_sys as je;

/// The shim's default for jemalloc's options, before the user's (`malloc_conf` global).
pub(super) const DEFAULT_CONF: &[u8] = b"tcache:false";

/// Whether the shim turns thread caches on per thread (jemalloc runs with `tcache:false` because
/// the shim said so, not the user).
static MANAGED: AtomicBool = AtomicBool::new(false);
/// Usable size of a thread cache's bin stacks (jemalloc's `tcache_bin_alloc_size` rounded to its
/// size class), measured at load; 0 when it could not be measured (the second probe is skipped).
static STACKS: AtomicUsize = AtomicUsize::new(0);

/// Whether a jemalloc options string names the `tcache` key itself (`tcache:true|false`; not
/// `tcache_max` and the like).
pub(super) fn names_tcache(conf: &[u8]) -> bool {
    conf.split(|&b| b == b',').any(|pair| pair.split(|&b| b == b':').next() == Some(b"tcache"))
}

/// At load, on the loading thread, after jemalloc's first allocation: when jemalloc runs with
/// `tcache:false` and the user did not ask for it (`user_named`), the shim manages the caches:
/// this thread's cache is turned on and the bin stacks' size measured.
///
/// # Safety
/// Initialisation only, before any other thread can allocate through the shim.
pub(super) unsafe fn at_load(user_named: bool) {
    // SAFETY: `opt.tcache` is a read-only bool.
    let on = unsafe { raw::read::<bool>(b"opt.tcache\0") }.unwrap_or(true);
    if on || user_named {
        return;
    }
    MANAGED.store(true, Relaxed);
    let before = internal_bytes();
    let byte = super::jemalloc_tsd::enabled_byte();
    let enabled = enable();
    if enabled {
        super::jemalloc_tsd::check_layout(byte);
    }
    let after = internal_bytes();
    if let (true, Some(b), Some(a)) = (enabled, before, after) {
        let d = a.saturating_sub(b);
        // A bin stacks block is a small size class, cache-line aligned; anything else is not one.
        if d > 0 && d <= 64 << 10 && d % 64 == 0 {
            STACKS.store(d, Relaxed);
        }
    }
}

/// In a new thread's first frame (the interposed `pthread_create`'s trampoline): turns its
/// cache on if the shim manages caches and the probes get memory.
pub(super) fn thread_start() {
    if !MANAGED.load(Relaxed) {
        return;
    }
    let stacks = STACKS.load(Relaxed);
    // SAFETY: plain jemalloc calls; each block is freed with the flags it was allocated with.
    let got = unsafe {
        probe(1, je::MALLOCX_TCACHE_NONE)
            && (stacks == 0
                || probe(stacks, je::MALLOCX_ALIGN(64) | je::MALLOCX_ARENA(0) | je::MALLOCX_TCACHE_NONE))
    };
    if got && enable() {
        super::jemalloc_tsd::undo_failed_setup();
    }
}

/// Whether jemalloc has `size` bytes under `flags`; the block is freed at once.
///
/// # Safety
/// `flags` are valid `mallocx` flags without an explicit thread cache.
unsafe fn probe(size: usize, flags: core::ffi::c_int) -> bool {
    // SAFETY: the caller's contract; the block is freed with the same flags.
    unsafe {
        let p = je::mallocx(size, flags);
        if p.is_null() {
            return false;
        }
        je::dallocx(p, flags);
    }
    true
}

/// `thread.tcache.enabled = true` for the calling thread; true when mallctl returned 0.
fn enable() -> bool {
    // SAFETY: `thread.tcache.enabled` is a read-write bool.
    unsafe { raw::write(b"thread.tcache.enabled\0", true) }.is_ok()
}

/// `stats.arenas.0.internal` after an `epoch` refresh: bytes of jemalloc's internal blocks in
/// arena 0.
fn internal_bytes() -> Option<usize> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    // SAFETY: a read-only size_t statistic.
    unsafe { raw::read::<usize>(b"stats.arenas.0.internal\0") }.ok()
}

#[cfg(test)]
mod tests {
    use super::names_tcache;

    #[test]
    fn the_tcache_key_alone() {
        assert!(names_tcache(b"tcache:false"));
        assert!(names_tcache(b"narenas:4,tcache:true"));
        assert!(!names_tcache(b"tcache_max:4096,lg_tcache_nslots_mul:1"));
        assert!(!names_tcache(b""));
    }
}
