//! The machine-wide MariaDB lock (`/tmp/mallocshim-mariadb.lock`, or `$MDB_LOCK`): one throwaway
//! server at a time across the tests, benches, the main job and the comparison runner (2 cores).
//! flock(2) locks belong to an open file description, so two instances in one process also wait
//! for each other.

use crate::Result;
use std::fs::File;
use std::os::fd::AsRawFd;

pub const DEFAULT_LOCK: &str = "/tmp/mallocshim-mariadb.lock";

/// The lock file (`$MDB_LOCK` or [`DEFAULT_LOCK`]), opened for flock(2); never truncated.
fn open() -> Result<(String, File)> {
    let path = std::env::var("MDB_LOCK").unwrap_or_else(|_| DEFAULT_LOCK.to_string());
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    Ok((path, f))
}

/// Takes the lock, blocking (says so on stderr when it has to wait); held until the file is dropped.
pub fn take() -> Result<File> {
    let (path, f) = open()?;
    // SAFETY: flock on our own open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(f);
    }
    eprintln!("mallocshim-mariadb: waiting for {path} (another MariaDB run holds it)");
    loop {
        // SAFETY: as above; blocking, queued like flock(1).
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("flock {path}: {e}").into());
        }
    }
}

/// Takes the lock like [`take`], but gives up waiting once `stop()` holds (checked every 100 ms;
/// the comparison runner's Ctrl-C): `Ok(None)`. The blocking flock waits on its own thread, so it
/// keeps its place among flock(1) waiters (polling with LOCK_NB would lose every hand-over to
/// them); a wait given up leaks the file, and with it a lock granted later, until the process exits.
pub fn take_unless(stop: impl Fn() -> bool) -> Result<Option<File>> {
    let (path, f) = open()?;
    let fd = f.as_raw_fd();
    // SAFETY: flock on our own open descriptor.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(f));
    }
    eprintln!("mallocshim-mariadb: waiting for {path} (another MariaDB run holds it)");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        // SAFETY: flock on a descriptor that stays open (the file is leaked if the wait is given up).
        if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
            let _ = tx.send(Ok(()));
            return;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            let _ = tx.send(Err(e));
            return;
        }
    });
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(Ok(())) => return Ok(Some(f)),
            Ok(Err(e)) => return Err(format!("flock {path}: {e}").into()),
            Err(RecvTimeoutError::Timeout) if stop() => {
                std::mem::forget(f);
                return Ok(None);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err(format!("flock {path} failed").into()),
        }
    }
}
