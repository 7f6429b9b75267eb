//! Readings of a running server from /proc/PID: which libraries are mapped (`maps`, to verify
//! which allocator is loaded), CPU time (`stat`: utime + stime) and resident memory (`status`:
//! VmRSS; `statm`: RSS and VSZ).
//! Each returns `None` once the process is gone.

/// Whether a mapping of `/proc/PID/maps` names a file containing `needle`.
pub fn maps_contains(pid: u32, needle: &str) -> Option<bool> {
    let m = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    Some(m.lines().any(|l| l.split_whitespace().nth(5).is_some_and(|f| f.contains(needle))))
}

/// utime + stime of the process in seconds (`/proc/PID/stat` fields 14 and 15, in clock ticks).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
    // after "pid (comm) ": state is field 3, so utime (14) and stime (15) are at 11 and 12
    let ut: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((ut + st) as f64 / hz)
}

/// VmRSS in bytes (`/proc/PID/status`, in kB there).
pub fn vm_rss(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 =
        s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// RSS and VSZ in bytes (`/proc/PID/statm` fields 2 and 1, in pages there).
pub fn statm(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let mut it = s.split_whitespace();
    let size: u64 = it.next()?.parse().ok()?;
    let res: u64 = it.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    Some((res * page, size * page))
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_process() {
        let me = std::process::id();
        assert!(super::vm_rss(me).unwrap() > 0);
        let (rss, vsz) = super::statm(me).unwrap();
        assert!(rss > 0 && vsz >= rss);
        assert!(super::cpu_seconds(me).unwrap() >= 0.0);
        assert_eq!(super::maps_contains(me, "libc.so"), Some(true));
        assert_eq!(super::maps_contains(me, "libmallocshim"), Some(false));
    }
}
