//! The RSS account: where the process's resident memory is, measured at one instant, for the
//! dumps and the memlog. RSS and its anonymous/file/shmem split come from /proc/self/status;
//! live bytes from the backend's exact figure; the allocator's resident bytes are measured where
//! the backend's own figure can count pages already given back (glibc: mincore over the main
//! heap and the arena heaps found in /proc/self/maps, plus mmapped chunks), and never exceed
//! anonymous RSS; the allocator's free bytes are what stays of that after live bytes and
//! metadata; non-heap bytes are the anonymous RSS no allocator figure explains (mmaps such as
//! InnoDB's buffer pool, thread stacks). So that
//! `live + allocator_free + allocator_metadata + non_heap + rss_file + rss_shmem = rss`
//! whenever the backend's live figure fits in what is measured resident.
//! Worker or dump only, under the reentrancy guard (reads files, may allocate); never on the hot
//! path and never from a signal handler.

use crate::backend::{self, MemStats};

/// The account is the dump's [`Memory`] (its fields, units and sources: docs/dump-format.md and
/// docs/memory-account.md), filled here but for `vsz_bytes` (the snapshot's). Where the figures
/// come from: RSS and its split, /proc/self/status; `live_bytes`, the backend's exact figure
/// (glibc mallinfo2 `uordblks + hblkhd`, jemalloc `stats.allocated`, tcmalloc
/// `generic.current_allocated_bytes`; mimalloc, which counts none, the shim's count of usable
/// bytes ([`shim_live`]) capped at its resident bytes, or with profiling off its resident bytes);
/// `allocator_resident_bytes`, at most `rss_anon_bytes` (glibc, mincore over its heaps plus
/// `hblkhd`; jemalloc `stats.resident`; tcmalloc `generic.total_physical_bytes`; mimalloc,
/// mincore over its segments, else its committed bytes); `allocator_metadata_bytes` where the
/// backend reports it (jemalloc `stats.metadata`; tcmalloc `total_physical_bytes -
/// (heap_size - pageheap_unmapped_bytes)`; None under glibc and mimalloc).
pub use mallocshim_format::Memory;

/// The bytes the program holds under a backend that counts none (mimalloc), by the shim's
/// own count: the usable size of every block its calls were served, less the usable size of
/// every block they gave up (freed, or replaced by realloc), summed over every slot, live and
/// exited (`hot::record`'s `live_after` keeps it; a thread freeing another's blocks makes its
/// own slot's share negative, so the sum is taken wrapping and read signed, below 0 as 0).
/// One rule at both ends, so an allocate/free pair nets exactly 0 whatever the block's
/// alignment, page rounding or moves, and the count never drifts nor saturates. None with
/// profiling off (nothing is counted). Not on the hot path (walks the slots).
pub fn shim_live() -> Option<u64> {
    use core::sync::atomic::Ordering::Relaxed;
    if !crate::hot::config::get().profile {
        return None;
    }
    let mut sum = 0u64;
    crate::hot::slots::for_each(|s, _| sum = sum.wrapping_add(s.live.load(Relaxed)));
    Some((sum as i64).max(0) as u64)
}

/// RSS and its split from /proc/self/status, in bytes: (rss, anon, file, shmem).
pub fn status_rss() -> (u64, u64, u64, u64) {
    let (rss, anon, file, shmem, _) = status();
    (rss, anon, file, shmem)
}

/// RSS, its split and VmSize from one read of /proc/self/status, in bytes: (rss, anon, file,
/// shmem, vsz).
pub fn status() -> (u64, u64, u64, u64, u64) {
    // One read(2) into a page-sized buffer: the kernel builds the whole file at every read, and
    // read_to_string's growing reads (32, 32, 64, ... bytes) built it eight times (~200 µs).
    let mut buf = [0u8; 8192];
    let n = std::fs::File::open("/proc/self/status").and_then(|mut f| std::io::Read::read(&mut f, &mut buf));
    let s = core::str::from_utf8(&buf[..n.unwrap_or(0)]).unwrap_or("");
    let kb = |key: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("RssAnon:"), kb("RssFile:"), kb("RssShmem:"), kb("VmSize:"))
}

/// Measures the account now (all of [`Memory`] but `vsz_bytes`), with the backend's own figures
/// (`backend_*_bytes`) read for it (one read: glibc's mallinfo2 walks every free chunk). Backend
/// figures first (each backend's sources are in its own file: `backend::<name>::account`), then
/// residency, then /proc/self/status last, so that RSS is read closest to the residency.
pub fn measure() -> Memory {
    measure_with_trim().0
}

/// [`measure`], with the backend's estimate of what a trim gives back and keeps (glibc only).
pub fn measure_with_trim() -> (Memory, Option<backend::glibc_info::TrimEstimate>) {
    let f = backend::account_figures();
    // A backend that counts no live bytes (mimalloc): the shim's count (`shim_live`), capped at
    // what the allocator holds resident so the account never passes RSS (a block's untouched
    // pages are live but not resident); without it, everything resident counts as live.
    let live = f.live.or_else(|| shim_live().map(|l| l.min(f.resident)));
    let (rss, anon, file, shmem) = status_rss();
    let m: MemStats = f.stats;
    let a = compose(live, f.resident, f.metadata, rss, anon, file, shmem);
    let m = Memory {
        backend_allocated_bytes: m.allocated,
        backend_resident_bytes: m.resident,
        backend_free_bytes: m.free,
        // What the free bytes less those a trim keeps (resident: they share pages with live
        // blocks) leave, at most the whole pages the free chunks hold.
        allocator_trimmable_bytes: f
            .trim
            .map(|t| t.releasable.min(a.allocator_free_bytes.saturating_sub(t.kept))),
        allocator_arenas: f.trim.map(|t| t.arenas),
        // malloc_info counts free chunks whose pages a trim already gave back: at most the
        // resident free bytes.
        allocator_other_arenas_free_bytes: f.trim.map(|t| t.other_free.min(a.allocator_free_bytes)),
        allocator_other_arenas_top_bytes: f.trim.map(|t| t.arena_tops.min(a.allocator_free_bytes)),
        ..a
    };
    (m, f.trim)
}

/// Builds the account from raw figures (pure). `live` None: the backend has no live figure,
/// and everything resident it holds counts as live (an upper bound; nothing counts as free).
pub(crate) fn compose(
    live: Option<u64>,
    resident: u64,
    metadata: Option<u64>,
    rss: u64,
    anon: u64,
    file: u64,
    shmem: u64,
) -> Memory {
    let resident = resident.min(anon);
    let live = live.unwrap_or(resident);
    Memory {
        rss_bytes: rss,
        rss_anon_bytes: anon,
        rss_file_bytes: file,
        rss_shmem_bytes: shmem,
        live_bytes: live,
        allocator_free_bytes: resident.saturating_sub(live).saturating_sub(metadata.unwrap_or(0)),
        allocator_metadata_bytes: metadata,
        allocator_resident_bytes: resident,
        non_heap_bytes: anon - resident,
        ..Memory::default()
    }
}
