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

/// The account, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Account {
    /// Resident set size (/proc/self/status `VmRSS`).
    pub rss_bytes: u64,
    /// Anonymous resident pages (`RssAnon`).
    pub rss_anon_bytes: u64,
    /// File-backed resident pages: the program's code, libraries, mapped files (`RssFile`).
    pub rss_file_bytes: u64,
    /// Shared memory resident pages (`RssShmem`).
    pub rss_shmem_bytes: u64,
    /// Bytes in blocks the program holds: glibc mallinfo2 `uordblks + hblkhd`, jemalloc
    /// `stats.allocated`, tcmalloc `generic.current_allocated_bytes`; mimalloc, which counts
    /// no live bytes, the heap profile's estimate (the weighted live samples, pprof's
    /// inuse_space, capped at its resident bytes; with sampling off, its committed bytes, an
    /// upper bound).
    pub live_bytes: u64,
    /// Resident bytes the allocator keeps that hold no live block:
    /// `allocator_resident - live - metadata`, 0 when negative.
    pub allocator_free_bytes: u64,
    /// The allocator's own bookkeeping, where the backend reports it (jemalloc `stats.metadata`;
    /// tcmalloc `generic.total_physical_bytes - (generic.heap_size -
    /// tcmalloc.pageheap_unmapped_bytes)`); None under glibc (inside its arenas).
    pub allocator_metadata_bytes: Option<u64>,
    /// Resident bytes of the allocator's memory, at most `rss_anon_bytes`: glibc, pages of the
    /// main heap and arena heaps found resident by mincore(2), plus mallinfo2 `hblkhd`;
    /// jemalloc `stats.resident`; tcmalloc `generic.total_physical_bytes`; mimalloc, pages of
    /// its segments found resident by mincore(2) (else `mi_process_info` current_commit).
    pub allocator_resident_bytes: u64,
    /// `rss_anon - allocator_resident`: anonymous memory outside the allocator.
    pub non_heap_bytes: u64,
}

/// RSS and its split from /proc/self/status, in bytes: (rss, anon, file, shmem).
pub fn status_rss() -> (u64, u64, u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("RssAnon:"), kb("RssFile:"), kb("RssShmem:"))
}

/// Measures the account now, with the backend's own figures read for it (one read: glibc's
/// mallinfo2 walks every free chunk). Backend figures first (each backend's sources are in its
/// own file: `backend::<name>::account`), then residency, then /proc/self/status last, so that
/// RSS is read closest to the residency.
pub fn measure() -> (Account, MemStats) {
    let f = backend::account_figures();
    // A backend that counts no live bytes (mimalloc): the heap profile's estimate when
    // sampling is on, off by about sqrt(sample mean / live) either way, so capped at what the
    // allocator holds resident (its error never pushes the account past RSS); else none, and
    // everything resident counts as live.
    let live = f.live.or_else(|| crate::heapprof::live_estimate().map(|l| l.min(f.resident)));
    let (rss, anon, file, shmem) = status_rss();
    (compose(live, f.resident, f.metadata, rss, anon, file, shmem), f.stats)
}

/// Builds the account from raw figures (pure). `live` None: the backend has no live figure,
/// and everything resident it holds counts as live (an upper bound; nothing counts as free).
fn compose(
    live: Option<u64>,
    resident: u64,
    metadata: Option<u64>,
    rss: u64,
    anon: u64,
    file: u64,
    shmem: u64,
) -> Account {
    let resident = resident.min(anon);
    let live = live.unwrap_or(resident);
    Account {
        rss_bytes: rss,
        rss_anon_bytes: anon,
        rss_file_bytes: file,
        rss_shmem_bytes: shmem,
        live_bytes: live,
        allocator_free_bytes: resident.saturating_sub(live).saturating_sub(metadata.unwrap_or(0)),
        allocator_metadata_bytes: metadata,
        allocator_resident_bytes: resident,
        non_heap_bytes: anon - resident,
    }
}
