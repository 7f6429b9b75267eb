//! jemalloc's per-thread data (`tsd_t`), read and written where no mallctl can: whether the
//! calling thread's cache was really set up, and turning a cache whose set-up failed off again.
//!
//! jemalloc 5.3's `thread.tcache.enabled = true` ignores the failure of the cache's set-up
//! (`tsd_tcache_data_init` gets no block for the bin stacks): the thread is left with its cache
//! on and its bin stacks unset, and its next allocation dereferences NULL (`cache_bin_alloc`), as
//! does its exit (`tcache_destroy`). jemalloc's later fix (facebook/jemalloc#81) turns such a
//! cache off; this module does the same from outside. The probes of
//! [`jemalloc_tcache`](super::jemalloc_tcache) make a failure rare but cannot rule it out: another
//! thread can take the probed memory between the probe's free and the set-up.
//!
//! What it relies on, all of jemalloc 5.3's `tsd.h`, checked once at load on the loading thread
//! ([`check_layout`]); when the check fails nothing here is used again:
//! - `thread.allocatedp` points at `thread_allocated`, the first of `TSD_DATA_FAST`'s four
//!   `uint64_t`, which the embedded `tcache_t` follows; that starts with its `tcache_slow`
//!   pointer, NULL until the set-up succeeded (`tcache_init`), then an address inside the tsd;
//! - the tsd is the thread-local `tsd_tls`, whose first field is the `tcache_enabled` bool;
//! - `tsd_slow_update` recomputes the tsd's state after that bool changed (as
//!   `tcache_enabled_set` does).
//!
//! Must not run on the hot path: called at load and from a new thread's first frame, after
//! `thread.tcache.enabled` was written.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
use tikv_jemalloc_ctl::raw;

extern "C" {
    /// jemalloc's `tsd_slow_update` (prefixed; hidden, linked into the shim): recomputes the
    /// tsd's state from its fields (fast, or slow when the cache is off).
    #[link_name = "_rjem_je_tsd_slow_update"]
    fn tsd_slow_update(tsd: *mut u8);
}

/// The most a tsd can span, bytes (jemalloc 5.3's is 2,632 here): the bound of the check that
/// the cache's `tcache_slow` points inside it.
const TSD_MAX: usize = 16 << 10;

/// Whether [`check_layout`] found the layout this module relies on.
static LAYOUT_OK: AtomicBool = AtomicBool::new(false);

/// The calling thread's tsd (`&tsd_tls`), an initial-exec TLS address (the shim already has
/// static TLS: its `DF_STATIC_TLS`).
#[cfg(target_arch = "x86_64")]
fn tsd() -> Option<*mut u8> {
    Some(crate::base::sys::tls_address!("_rjem_je_tsd_tls"))
}

#[cfg(not(target_arch = "x86_64"))]
fn tsd() -> Option<*mut u8> {
    None
}

/// The calling thread's cache's `tcache_slow` pointer (NULL: not set up), from
/// `thread.allocatedp`; None when mallctl refuses.
pub(super) fn tcache_slow() -> Option<*const u8> {
    // SAFETY: `thread.allocatedp` is a read-only pointer to the calling thread's tsd.
    let a = unsafe { raw::read::<*mut u64>(b"thread.allocatedp\0") }.ok()?;
    if a.is_null() {
        return None;
    }
    // SAFETY: `a` points at the first of the four u64 of TSD_DATA_FAST, inside the calling
    // thread's live tsd; the tcache_t (its first word the tcache_slow pointer) follows them.
    Some(unsafe { a.add(4).cast::<*const u8>().read() })
}

/// At load, on the loading thread, around its own cache's turning on: `before` is the
/// `tcache_enabled` byte read before (see [`enabled_byte`]). The layout holds when the byte went
/// from 0 to 1 and the cache's `tcache_slow` now points inside the tsd.
pub(super) fn check_layout(before: Option<u8>) {
    let (Some(t), Some(slow), Some(0)) = (tsd(), tcache_slow(), before) else { return };
    let inside = (slow as usize).wrapping_sub(t as usize) < TSD_MAX;
    if inside && enabled_byte() == Some(1) {
        LAYOUT_OK.store(true, Relaxed);
    }
}

/// The calling thread's `tcache_enabled` byte.
pub(super) fn enabled_byte() -> Option<u8> {
    // SAFETY: the first byte of the calling thread's tsd (jemalloc initialised it: the caller
    // allocated through jemalloc on this thread before).
    tsd().map(|t| unsafe { t.read() })
}

/// After `thread.tcache.enabled = true` on the calling thread: when the cache's set-up failed,
/// turns the cache off again (the thread then allocates from its arena, as one whose probes
/// failed). True when the cache is usable or was turned off; false when the layout was not
/// confirmed at load (nothing checked).
pub(super) fn undo_failed_setup() -> bool {
    if !LAYOUT_OK.load(Relaxed) {
        return false;
    }
    let (Some(t), Some(slow)) = (tsd(), tcache_slow()) else { return false };
    if !slow.is_null() {
        return true;
    }
    // SAFETY: the layout was confirmed at load: `t` is this thread's tsd and its first byte the
    // `tcache_enabled` bool; with the bin stacks unset the cache holds nothing, so turning it off
    // needs no flush (tcache_cleanup would find nothing to do). Then the state is recomputed, as
    // jemalloc's `tcache_enabled_set` does.
    unsafe {
        t.write(0);
        tsd_slow_update(t);
    }
    true
}

/// Turns the calling thread's cache on in the state a failed set-up leaves: `tcache_enabled`
/// set, the bin stacks unset (for the test of [`undo_failed_setup`]).
#[cfg(test)]
pub(super) fn fake_failed_setup() {
    let t = tsd().expect("x86_64");
    // SAFETY: as in undo_failed_setup, the other way round.
    unsafe {
        t.write(1);
        tsd_slow_update(t);
    }
}

#[cfg(test)]
pub(super) fn layout_ok() -> bool {
    LAYOUT_OK.load(Relaxed)
}
