//! Readings of a running process from /proc/PID, and finding programs in PATH: what the
//! `mallocshim` command (`dump`, `top`, `compare`) and the MariaDB harness (tests, benches)
//! share, so that the command does not depend on the harness for them. Which libraries are
//! mapped (`maps`, to verify which allocator is loaded), CPU time (`stat`: utime + stime),
//! resident memory (`status`: VmRSS; `statm`: RSS and VSZ), one environment variable
//! (`environ`) and the working directory (`cwd`).
//!
//! Owns reading only: never signals, never starts a process, no global state; every reading
//! returns `None` once the process is gone (or is not readable). Depends on libc alone.

use std::path::{Path, PathBuf};

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

/// One variable of a process's environment (`/proc/PID/environ`); None when unset or empty.
pub fn environ_var(pid: u32, key: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        let (k, v) = kv.split_once('=')?;
        (k == key && !v.is_empty()).then(|| v.to_string())
    })
}

/// The process's working directory (`/proc/PID/cwd`).
pub fn cwd(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// The absolute path of `prog` found in PATH (the first directory holding an executable file of
/// that name).
pub fn find_in_path(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| is_exec(p))
}

/// Whether `p` is a regular file with an execute bit.
pub fn is_exec(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
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
        assert!(super::environ_var(me, "PATH").is_some());
        assert_eq!(super::environ_var(me, "MALLOCSHIM_NO_SUCH_VARIABLE"), None);
        assert_eq!(super::cwd(me), std::env::current_dir().ok());
        assert!(super::find_in_path("sh").is_some_and(|p| p.is_absolute()));
        assert!(super::find_in_path("mallocshim-no-such-program").is_none());
        assert!(super::vm_rss(u32::MAX).is_none());
    }
}
