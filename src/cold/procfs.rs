//! Readings of the process from /proc and the clock that `report`, `trim`, `memlog` and
//! `textfile` share. Off the hot path (they read files and allocate).

/// Resident and virtual size from /proc/self/statm, in bytes.
pub fn statm() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let vsz = it.next().unwrap_or(0) * page;
    let rss = it.next().unwrap_or(0) * page;
    (rss, vsz)
}

/// Wall-clock time, ms since the epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
