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

use crate::backend::{self, Backend, MemStats};

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
/// mallinfo2 walks every free chunk). Backend figures first, then residency, then
/// /proc/self/status last, so that RSS is read closest to the residency.
pub fn measure() -> (Account, MemStats) {
    let (m, live, resident, metadata) = match backend::active() {
        Backend::Jemalloc => {
            let m = backend::mem_stats();
            // stats.metadata as of the `epoch` refresh that mem_stats just made.
            let md = tikv_jemalloc_ctl::stats::metadata::read().map(|v| v as u64).unwrap_or(0);
            (m, Some(m.allocated), m.resident, Some(md))
        }
        Backend::Tcmalloc => {
            let m = backend::mem_stats();
            let phys = backend::tcmalloc::property(c"generic.total_physical_bytes");
            (m, Some(m.allocated), phys.max(m.resident), Some(phys.saturating_sub(m.resident)))
        }
        Backend::Mimalloc => {
            // mimalloc counts no live bytes: the heap profile's estimate when sampling is on,
            // else its committed bytes as the upper bound (nothing then counts as free).
            let m = backend::mem_stats();
            // Committed bytes when no segment can be recognised (or read: process_vm_readv
            // refused by a seccomp filter).
            let resident = match backend::mimalloc::segment_cookie() {
                Some((at, key)) => Some(mimalloc_resident(at, key)).filter(|&r| r > 0),
                None => None,
            };
            let resident = resident.unwrap_or(m.resident);
            // An estimate, off by about sqrt(sample mean / live) either way: capped at what the
            // allocator holds resident, so its error never pushes the account past RSS.
            (m, crate::hot::heapprof::live_estimate().map(|l| l.min(resident)), resident, None)
        }
        _ => {
            let mi = backend::glibc::mallinfo2();
            let hblkhd = mi.hblkhd as u64;
            // As backend::glibc::mem_stats computes them, from the same mallinfo2.
            let m = MemStats {
                allocated: mi.uordblks as u64 + hblkhd,
                resident: mi.arena as u64 + hblkhd,
                free: mi.fordblks as u64,
            };
            (m, Some(m.allocated), glibc_heap_resident() + hblkhd, None)
        }
    };
    let (rss, anon, file, shmem) = status_rss();
    (compose(live, resident, metadata, rss, anon, file, shmem), m)
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

/// glibc's `HEAP_MAX_SIZE` on 64-bit: every non-main arena heap is a mapping aligned to it.
const HEAP_MAX: u64 = 64 << 20;

/// Resident bytes of glibc's main heap (`[heap]`, the brk area) and of its arena heaps. An arena
/// heap is recognised as an anonymous read-write private mapping aligned to `HEAP_MAX`, no
/// longer, whose `heap_info` header (first words: arena pointer, previous heap, size,
/// mprotect_size) says `mprotect_size` = the mapping's length.
fn glibc_heap_resident() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut total = 0;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let (_off, _dev, inode) = (f.next(), f.next(), f.next());
        let path = f.next().unwrap_or("");
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        let len = end.saturating_sub(start);
        if path == "[heap]" {
            total += resident(start, len);
        } else if perms == "rw-p"
            && inode == Some("0")
            && path.is_empty()
            && start % HEAP_MAX == 0
            && len <= HEAP_MAX
        {
            // SAFETY: the mapping is readable and writable (rw-p) and at least a page long.
            let hdr = unsafe { core::ptr::read_volatile(start as *const [u64; 4]) };
            if hdr[0] != 0 && hdr[3] == len && hdr[2] <= len {
                total += resident(start, len);
            }
        }
    }
    total
}

/// Most 32 MiB-aligned addresses probed for a mimalloc segment per measurement.
const MAX_PROBES: usize = 1 << 16;

/// Resident bytes of mimalloc's segments: every 32 MiB-aligned address inside an anonymous
/// read-write mapping whose header word `at` holds `address ^ key` (the segment cookie, read
/// with process_vm_readv so an address unmapped meanwhile is an error, never a fault) starts
/// a segment, whose pages (its first 32 MiB: a huge block's beyond that is not seen) are
/// counted by mincore(2).
fn mimalloc_resident(at: usize, key: u64) -> u64 {
    let seg = backend::mimalloc::SEGMENT as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let (mut total, mut probes) = (0, 0);
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let (_off, _dev, inode) = (f.next(), f.next(), f.next());
        if perms != "rw-p" || inode != Some("0") || f.next().is_some() {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        let mut s = start.next_multiple_of(seg);
        while s < end && probes < MAX_PROBES {
            probes += 1;
            if read_word(s + at as u64 * 8) == Some(s ^ key) {
                total += resident(s, end.min(s + seg) - s);
            }
            s += seg;
        }
    }
    total
}

/// One word of this process's memory through process_vm_readv(2): None when unreadable.
fn read_word(addr: u64) -> Option<u64> {
    let mut w = 0u64;
    let local = libc::iovec { iov_base: (&mut w as *mut u64).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: reads 8 bytes of our own address space into `w`; the kernel checks `addr`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(w)
}

/// Resident bytes of `[start, start + len)` by mincore(2), in chunks (no allocation).
fn resident(start: u64, len: u64) -> u64 {
    const CHUNK: usize = 4096;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let mut vec = [0u8; CHUNK];
    let mut n = 0;
    let mut at = start;
    let end = start + len;
    while at < end {
        let pages = ((end - at) / page).min(CHUNK as u64) as usize;
        if pages == 0 {
            break;
        }
        // SAFETY: `at` is page-aligned inside a mapping; `vec` holds `pages` bytes.
        if unsafe { libc::mincore(at as *mut libc::c_void, pages * page as usize, vec.as_mut_ptr()) } != 0 {
            break;
        }
        n += vec[..pages].iter().filter(|&&v| v & 1 != 0).count() as u64;
        at += pages as u64 * page;
    }
    n * page
}
