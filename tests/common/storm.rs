//! The SIGUSR1 storm of the hostile tests, shared: run a program in its own process group while
//! SIGUSR1 (the dump signal) is sent to it every 3 ms from the moment its handler is installed,
//! and kill the group and fail on a deadline (a hang). tests/hostile.rs, tests/loader_fork.rs
//! and the other hostile suites all run through it.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `cmd` in its own process group, SIGUSR1 every 3 ms when `storm`; kills the group and
/// fails with `HANG` past `deadline`. Returns the output and the wall time.
pub fn run_stormed(cmd: Command, what: &str, storm: bool, deadline: Duration) -> (Output, Duration) {
    let (o, took, hung) = try_stormed(cmd, what, storm, deadline);
    assert!(!hung, "{what}: HANG: still running after {deadline:?}, killed\n{}", super::describe(&o));
    (o, took)
}

/// [`run_stormed`] without the verdict: also returns whether the deadline killed it.
pub fn try_stormed(
    mut cmd: Command,
    what: &str,
    storm: bool,
    deadline: Duration,
) -> (Output, Duration, bool) {
    cmd.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped());
    let t0 = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let sender = std::thread::spawn(move || {
        let mut sent = 0u64;
        while !d2.load(Ordering::Relaxed) {
            if t0.elapsed() > deadline {
                // SAFETY: signalling the process group this test created.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                return (sent, true);
            }
            if storm && (sent > 0 || catches_usr1(pid)) {
                // SAFETY: signalling the child this test started (not yet reaped: `done` is set
                // only after wait_with_output returns).
                unsafe { libc::kill(pid, libc::SIGUSR1) };
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        (sent, false)
    });
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{what}: wait: {e}"));
    let took = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let (sent, hung) = sender.join().expect("signal sender");
    // Children left behind in the group (a hung fork child) go too.
    // SAFETY: as above; the group may be empty.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if storm && !hung {
        assert!(sent > 0, "{what}: no SIGUSR1 was sent");
    }
    (o, took, hung)
}

/// True once the process has a SIGUSR1 handler (the shim installed its dump signal): before
/// that, SIGUSR1's default action would kill it.
pub fn catches_usr1(pid: i32) -> bool {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGUSR1 - 1)) != 0)
}

/// The settings of the issue-21 tests: `SETTINGS` and heap profiles sampling every byte.
pub fn settings() -> Vec<(&'static str, &'static [(&'static str, &'static str)])> {
    let mut v: Vec<_> = super::SETTINGS.to_vec();
    if !v.iter().any(|(n, _)| n.contains("PROF_SAMPLE_BYTES")) {
        v.push(("MALLOCSHIM_PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]));
    }
    v
}
