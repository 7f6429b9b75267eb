//! What a backend measures for the RSS account (`crate::cold::account`): the [`AccountFigures`] each
//! backend file's `account()` returns, and the residency probes they share (mincore(2) over a
//! range, one word read through process_vm_readv(2)). Each backend's own sources live in its
//! file; this module holds no backend knowledge. Worker or dump only, under the reentrancy
//! guard; never on the hot path, never from a signal handler. Makes syscalls, never allocates.

use super::MemStats;

/// A backend's figures for the account, read at one instant, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct AccountFigures {
    /// The backend's own figures (as `mem_stats` gives them, from the same reading).
    pub stats: MemStats,
    /// Bytes in live blocks; None when the backend counts none (the account then takes the
    /// shim's count of usable bytes, else counts everything resident as live).
    pub live: Option<u64>,
    /// Resident bytes of the allocator's memory (capped at anonymous RSS by the account).
    pub resident: u64,
    /// The allocator's own bookkeeping, where the backend reports it.
    pub metadata: Option<u64>,
    /// What a release call can give back and what it keeps, where the backend says (glibc:
    /// `malloc_info`, see `glibc_info`); None elsewhere.
    pub trim: Option<super::glibc_info::TrimEstimate>,
}

/// One word of this process's memory through process_vm_readv(2): None when unreadable.
pub(super) fn read_word(addr: u64) -> Option<u64> {
    let mut w = 0u64;
    let local = libc::iovec { iov_base: (&mut w as *mut u64).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 8 };
    // SAFETY: reads 8 bytes of our own address space into `w`; the kernel checks `addr`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == 8).then_some(w)
}

/// Resident bytes of `[start, start + len)` by mincore(2), in chunks (no allocation).
pub(super) fn resident(start: u64, len: u64) -> u64 {
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

/// A line of /proc/self/maps split into (start, end, perms, inode, path); None when malformed.
pub(super) fn maps_line(line: &str) -> Option<(u64, u64, &str, &str, &str)> {
    let mut f = line.split_whitespace();
    let (range, perms) = (f.next()?, f.next()?);
    let (_off, _dev, inode) = (f.next(), f.next(), f.next()?);
    let path = f.next().unwrap_or("");
    let (a, b) = range.split_once('-')?;
    Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?, perms, inode, path))
}
