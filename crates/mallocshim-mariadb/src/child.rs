//! A client program run to its end: cleaned environment, its own process group, output into a
//! log file, a time limit and the caller's stop flag. Ending it ends its whole group (sysbench's
//! threads, a shell's children): SIGTERM, then SIGKILL 5 s later.

use crate::error::{fail, tail};
use crate::{Error, Result};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` (cleaned: [`crate::clean_env`]) in its own process group with `stdin` (closed when
/// None) and both streams into `log` (created anew), and waits for it. Past `timeout` its group
/// is ended and the call is [`Error::Failed`] with the log's tail; when `stop()` holds (checked
/// every 20 ms) it is ended and the call is [`Error::Interrupted`].
pub fn run_logged(
    mut cmd: Command,
    log: &Path,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
    stdin: Option<File>,
) -> Result<ExitStatus> {
    let f = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    crate::clean_env(&mut cmd);
    cmd.stdin(stdin.map(Stdio::from).unwrap_or_else(Stdio::null)).stdout(f).stderr(f2).process_group(0);
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {prog}: {e}"))?;
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("wait for {prog}: {e}"))? {
            return Ok(st);
        }
        let late = t0.elapsed() > timeout;
        if late || stop() {
            let group = -(child.id() as i32);
            // SAFETY: kill(2) on the process group of our unreaped child (its leader).
            unsafe { libc::kill(group, libc::SIGTERM) };
            let t1 = Instant::now();
            while child.try_wait().ok().flatten().is_none() && t1.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            // SAFETY: as above; what is left of the group (the leader may be reaped by now, but
            // its group id is not reused while members of the group live).
            unsafe { libc::kill(group, libc::SIGKILL) };
            let _ = child.wait();
            if !late {
                return Err(Error::Interrupted);
            }
            fail!("{prog} did not finish within {} s\n{}", timeout.as_secs(), tail(log, 20));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    fn alive(pid: &str) -> bool {
        // A zombie is not alive: it is waiting for a parent that is not us.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z')))
    }

    #[test]
    fn status_output_and_stdin() {
        let d = tempfile::tempdir().unwrap();
        let (input, log) = (d.path().join("in"), d.path().join("log"));
        std::fs::write(&input, "from stdin\n").unwrap();
        let st = run_logged(
            sh("cat; echo to-stderr >&2; exit 3"),
            &log,
            Duration::from_secs(10),
            &|| false,
            Some(File::open(&input).unwrap()),
        )
        .unwrap();
        assert_eq!(st.code(), Some(3));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("from stdin") && text.contains("to-stderr"), "{text}");
    }

    #[test]
    fn timeout_ends_the_whole_group() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        let t0 = Instant::now();
        // The shell's background child prints its pid: it must be gone too.
        let e = run_logged(sh("sleep 60 & echo $!; wait"), &log, Duration::from_millis(300), &|| false, None)
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(8), "took {:?}", t0.elapsed());
        assert!(matches!(&e, Error::Failed(m) if m.contains("did not finish within")), "{e}");
        let pid = std::fs::read_to_string(&log).unwrap().trim().to_string();
        // SIGKILL is delivered asynchronously: the process may take a moment to become a zombie.
        let gone = (0..200).any(|_| {
            let a = alive(&pid);
            if a {
                std::thread::sleep(Duration::from_millis(10));
            }
            !a
        });
        assert!(!pid.is_empty() && gone, "the group's sleep {pid} survived 2 s after the kill");
    }

    #[test]
    fn stop_flag_interrupts() {
        static STOP: AtomicBool = AtomicBool::new(false);
        let d = tempfile::tempdir().unwrap();
        let t = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            STOP.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let e = run_logged(
            sh("sleep 60"),
            &d.path().join("log"),
            Duration::from_secs(120),
            &|| STOP.load(Ordering::SeqCst),
            None,
        )
        .unwrap_err();
        t.join().unwrap();
        assert!(matches!(e, Error::Interrupted), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(8), "took {:?}", t0.elapsed());
    }
}
