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
/// `generic.current_allocated_bytes`; mimalloc, which counts none, the heap profile's estimate
/// capped at its resident bytes, or with sampling off its committed bytes, an upper bound);
/// `allocator_resident_bytes`, at most `rss_anon_bytes` (glibc, mincore over its heaps plus
/// `hblkhd`; jemalloc `stats.resident`; tcmalloc `generic.total_physical_bytes`; mimalloc,
/// mincore over its segments, else its committed bytes); `allocator_metadata_bytes` where the
/// backend reports it (jemalloc `stats.metadata`; tcmalloc `total_physical_bytes -
/// (heap_size - pageheap_unmapped_bytes)`; None under glibc and mimalloc).
pub use mallocshim_format::Memory;

/// The shim's best figure of the bytes the program holds, for a backend that counts none
/// (mimalloc), capped at `cap` (what the backend holds): the shim's own per-op counts (bytes
/// allocated minus bytes freed, [`counted_live`]) while the heap profile's estimate confirms
/// them (within four of its standard errors, `sqrt(mean * live)`), else the estimate; either
/// one alone when the other is off (`MALLOCSHIM_PROF_SAMPLE_BYTES=0`: the counts; profiling
/// off: neither, None). The counts are exact per call, so they answer a small or short-lived
/// heap exactly (glibc's tst-mallinfo2: 30 KB held, which a 512 KiB sampling mean cannot see),
/// but they drift with throughput (an allocation counts its requested size, a free its usable
/// size; a moving realloc's old block is never subtracted); the estimate is unbiased and takes
/// over once they drift apart. Not on the hot path (walks the slots).
pub fn shim_live(cap: u64) -> Option<u64> {
    let est = crate::hot::heapprof::live_estimate();
    let counted = crate::hot::config::get().profile.then(counted_live);
    let live = match (est, counted) {
        (Some(e), Some(c)) => {
            let d = e.abs_diff(c) as f64;
            let var = crate::hot::heapprof::rate() as f64 * e.max(c) as f64;
            if d * d <= 16.0 * var {
                c
            } else {
                e
            }
        }
        (e, c) => c.or(e)?,
    };
    Some(live.min(cap))
}

/// The lowest balance [`counted_live`] has read (0 or negative).
static BALANCE_FLOOR: core::sync::atomic::AtomicI64 = core::sync::atomic::AtomicI64::new(0);

/// Bytes allocated (malloc, calloc, realloc, the aligned family: as requested) minus bytes
/// freed (usable sizes) over every slot, live and exited, less the lowest such balance read so
/// far when that was negative: a free counts the usable size, so allocate/free pairs drive the
/// balance below the bytes held, and a balance below 0 is that bias, seen and taken out.
fn counted_live() -> u64 {
    use crate::base::classes::Op;
    use core::sync::atomic::Ordering::Relaxed;
    let (mut alloc, mut freed) = (0u128, 0u128);
    crate::hot::slots::for_each(|s, _| {
        for (o, cls) in s.tally.iter().enumerate() {
            let b: u128 = cls.iter().map(|t| t.bytes.load(Relaxed) as u128).sum();
            if o == Op::Free as usize {
                freed += b;
            } else {
                alloc += b;
            }
        }
    });
    let balance = (alloc as i128 - freed as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    let floor = BALANCE_FLOOR.fetch_min(balance, Relaxed).min(balance).min(0);
    (balance as i128 - floor as i128) as u64
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
    // A backend that counts no live bytes (mimalloc): the shim's figure (its counts or the heap
    // profile's estimate, see `shim_live`), capped at what the allocator holds resident so its
    // error never pushes the account past RSS; with neither, everything resident counts as live.
    let live = f.live.or_else(|| shim_live(f.resident));
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
