//! The shim's thread must never keep a process alive. glibc ends a process when its last thread
//! exits (`exit(0)` from the last of `__nptl_nthreads`), and it counts the shim's thread too: a
//! program whose main thread calls `pthread_exit` after the others ended (or a forked child doing
//! so) would wait for the shim's thread forever, and, that thread blocking every signal, could
//! then be stopped only by SIGKILL. So the worker checks, once per [`CHECK_MS`], whether it is
//! the last live thread, and if so does what glibc would have done: `exit(0)`, which runs the
//! program's `atexit` handlers and the shim's own exit path (exit dump, textfile removal).
//!
//! "Last" is read from `/proc/self/stat`: the thread-group leader's state (field 3) and the
//! thread count (field 20). A leader that called `pthread_exit` stays a zombie (`Z`) counted in
//! the thread count until the group ends, so the worker is alone when the leader is `Z` (or `X`)
//! and the count is at most 2. Worker only (reads a file, may allocate, under its guard); never on
//! the hot path. Cost: a wake-up and one read of a ~300-byte file per second: 165 µs of CPU per
//! second on this VM (0.0165% of one core, docs/history.md).

/// How often the worker looks (ms): the longest a process whose threads have all ended waits.
pub const CHECK_MS: u64 = 1000;

/// True when every thread but the caller has ended and the leader is a zombie.
pub fn only_worker_left() -> bool {
    std::fs::read("/proc/self/stat").map(|s| alone(&s)).unwrap_or(false)
}

/// The test on the text of `/proc/self/stat` (pure).
fn alone(stat: &[u8]) -> bool {
    // The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else { return false };
    let rest = String::from_utf8_lossy(&stat[close + 1..]);
    let mut f = rest.split_ascii_whitespace();
    let state = f.next();
    // Fields 4..=19 (16 of them), then num_threads (field 20).
    let threads = f.nth(16).and_then(|t| t.parse::<u64>().ok());
    matches!(state, Some("Z") | Some("X")) && matches!(threads, Some(1 | 2))
}

/// glibc's end of a process whose last thread exited.
pub fn exit_as_glibc_would() -> ! {
    // SAFETY: exit is what glibc's last exiting thread calls; the worker holds no lock here
    // (called between its jobs), so the exit path (the shim's `at_exit`) can take what it needs.
    unsafe { libc::exit(0) }
}

#[cfg(test)]
mod tests {
    use super::alone;

    const LIVE: &[u8] = b"30038 (pexit) S 1 30038 1 0 -1 4194560 130 0 0 0 0 0 0 0 20 0 2 0 1 10 1 0";
    const ZOMBIE: &[u8] = b"30038 (a (b) c) Z 1 30038 1 0 -1 4194560 130 0 0 0 0 0 0 0 20 0 2 0 1 10 1 0";
    const ZOMBIE_BUSY: &[u8] = b"30038 (pexit) Z 1 30038 1 0 -1 4194560 130 0 0 0 0 0 0 0 20 0 5 0 1 10 1 0";

    #[test]
    fn alone_only_when_the_leader_is_a_zombie_and_two_threads_are_left() {
        assert!(!alone(LIVE));
        assert!(alone(ZOMBIE));
        assert!(!alone(ZOMBIE_BUSY));
        assert!(!alone(b"garbage"));
        assert!(!alone(b""));
    }
}
