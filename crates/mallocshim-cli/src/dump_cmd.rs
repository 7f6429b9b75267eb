//! `mallocshim dump PID`: signals exactly that process (kill(2) on the pid) with its dump signal
//! (`MALLOCSHIM_DUMP_SIGNAL` from /proc/PID/environ, SIGUSR1 by default), only once the process
//! catches it (`SigCgt` in /proc/PID/status: before that the signal would kill it), and waits
//! for its new dump files (a sequence number above every one it had, every configured format,
//! the `.pb.gz` heap profile included), printing their paths. It owns finding a process's dump
//! directory and signal (/proc/PID/environ) and telling a process not under the shim (no
//! libmallocshim in /proc/PID/maps nor in its LD_PRELOAD); it never signals by name.

use mallocshim_format::dump::parse_dump_file_name;
use mallocshim_format::formats;
use mallocshim_proc::environ_var;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    about = "Signal one process under the shim with its dump signal and print the paths of its new dump files",
    long_about = "Send the process's dump signal (its MALLOCSHIM_DUMP_SIGNAL, read from \
                  /proc/PID/environ; SIGUSR1 by default) to exactly process PID (kill(2) on that \
                  pid, never by name), wait for its new dump files mallocshim.<pid>.<seq>.<ext> \
                  (files that were not there, or were written again, since the command began: \
                  a file left by an earlier process with the same pid does not count) and print their paths, one a line, \
                  JSON first: every format of its MALLOCSHIM_DUMP_FORMATS (default json,prom), \
                  the pprof heap profile (.pb.gz) included. The signal is sent only once the \
                  process catches it (SigCgt in /proc/PID/status): a process that has just been \
                  started is waited for (within --timeout) instead of being killed by the \
                  signal's default action, and only once the same image has caught it for \
                  20 ms (a wrapper under the shim that execs the server would lose its handler \
                  in the exec), and never while the signal is still pending for it (ShdPnd in \
                  /proc/PID/status: a signal sent then would be merged into the pending one and \
                  lost). The dump is asked for through the control channel \
                  (a `dump` request on the socket the shim's thread listens on: no signal, so no \
                  blocking call of the process is cut short; docs/control.md), else through an \
                  attach (the signal queued with the attach value) when the process opens one \
                  within a second, else (and always with --dir) by the plain signal. The directory is --dir, else the process's \
                  MALLOCSHIM_DUMP_DIR, else its TMPDIR, else /tmp. The shim answers at most one \
                  signal per MALLOCSHIM_DUMP_MIN_INTERVAL_MS (default 1000 ms): a dump asked for \
                  sooner comes at the end of that interval.\n\n\
                  Exit status: 0 dumped; 1 the process could not be dumped (no such process, not \
                  under the shim: no libmallocshim in /proc/PID/maps nor in its LD_PRELOAD, \
                  MALLOCSHIM_DUMP_SIGNAL=none, the signal not caught or no new dump within \
                  --timeout, not permitted; a process that never started a thread has no shim \
                  thread and writes its dump itself at its next malloc-family calls or at exit, \
                  which the message then says); 2 bad arguments or an unreadable directory. One line \
                  on stderr, prefixed \"mallocshim dump:\". With --mysql-socket the heap profile \
                  gets labels connection, user, host from PROCESSLIST (heap --by connection and \
                  pprof -tagfocus read them later; 2 when they cannot be written).",
    after_help = "Examples:\n  mallocshim dump $(pgrep -o -x mariadbd)\n  mallocshim dump PID --mysql-socket SOCK"
)]
pub struct Args {
    /// The process to dump.
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Where the process writes its dumps (default: from its environment).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Seconds to wait for the process to catch its dump signal and for the new dump files.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

/// Why a dump failed, with its exit status (1: the process, 2: arguments or files).
#[derive(Debug)]
pub struct Fail {
    pub code: u8,
    pub msg: String,
}

fn fail(code: u8, msg: String) -> Fail {
    Fail { code, msg }
}

/// The process's dump directory, as the shim chooses it (`mallocshim_format::dumpdir`: a
/// relative directory or one inside the process's datadir, its cwd, is passed over).
pub fn dump_dir(pid: u32) -> PathBuf {
    let (dd, tmp) = (environ_var(pid, "MALLOCSHIM_DUMP_DIR"), environ_var(pid, "TMPDIR"));
    let cwd = mallocshim_proc::cwd(pid);
    let (dd, tmp) = (dd.map(PathBuf::from), tmp.map(PathBuf::from));
    mallocshim_format::dumpdir::choose([dd.as_deref(), tmp.as_deref()], cwd.as_deref()).0
}

/// Checks that `pid` exists and is under the shim: libmallocshim mapped, or (a process still
/// being loaded) named in its LD_PRELOAD. A process in the middle of an exec shows neither for
/// a moment (its new maps are not filled yet), so the answer "not under the shim" is given only
/// after [`NOT_UNDER_SHIM`] of looking.
pub fn check_process(pid: u32) -> Result<(), Fail> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(fail(2, format!("{pid} is not a process id")));
    }
    let until = Instant::now() + NOT_UNDER_SHIM;
    loop {
        let maps = crate::procstate::read_maps(pid)?;
        if maps.contains("libmallocshim") {
            return Ok(());
        }
        // Named in LD_PRELOAD and still being loaded: wait; a failed load, a zombie: said so.
        let why = crate::procstate::no_shim(pid, &maps);
        if why.is_none() && environ_var(pid, "LD_PRELOAD").is_some_and(|v| v.contains("libmallocshim")) {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(fail(1, why.unwrap_or_else(|| crate::procstate::not_under_shim(pid))));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long a process that shows no shim is looked at before it is said not to be under it.
const NOT_UNDER_SHIM: Duration = Duration::from_millis(500);

/// Whether libmallocshim is in the process's maps.
fn mapped(pid: u32) -> Result<bool, Fail> {
    Ok(shim_mapping(pid)?.is_some())
}

/// The start address of the process's first libmallocshim mapping (None: not mapped). An
/// exec maps the library anew, at another address (ASLR): the address names the image.
fn shim_mapping(pid: u32) -> Result<Option<u64>, Fail> {
    Ok(crate::procstate::read_maps(pid)?
        .lines()
        .find(|l| l.contains("libmallocshim"))
        .map(|l| l.split('-').next().and_then(|a| u64::from_str_radix(a, 16).ok()).unwrap_or(0)))
}

/// The process's dump signal, as the shim reads `MALLOCSHIM_DUMP_SIGNAL` (its default, SIGUSR1,
/// for a value it would refuse); None for `none`.
pub fn dump_signal(pid: u32) -> Option<i32> {
    let Some(v) = environ_var(pid, "MALLOCSHIM_DUMP_SIGNAL") else { return Some(libc::SIGUSR1) };
    match v.as_str() {
        "none" => None,
        "SIGUSR1" | "USR1" => Some(libc::SIGUSR1),
        "SIGUSR2" | "USR2" => Some(libc::SIGUSR2),
        n => match n.parse::<i32>() {
            Ok(s)
                if (1..=64).contains(&s)
                    && s != libc::SIGKILL
                    && s != libc::SIGSTOP
                    && n.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Some(s)
            }
            _ => Some(libc::SIGUSR1),
        },
    }
}

/// Whether the process catches `sig` (its bit in /proc/PID/status `SigCgt`).
fn catches(pid: u32, sig: i32) -> Result<bool, Fail> {
    status_bit(pid, "SigCgt:", sig)
}

/// Whether a process-directed `sig` is pending, sent but not yet taken by any thread (its bit
/// in /proc/PID/status `ShdPnd`).
fn pending(pid: u32, sig: i32) -> Result<bool, Fail> {
    status_bit(pid, "ShdPnd:", sig)
}

/// `sig`'s bit in the signal mask on /proc/PID/status line `field`.
fn status_bit(pid: u32, field: &str, sig: i32) -> Result<bool, Fail> {
    let st = match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(1, format!("no such process: {pid}")))
        }
        Err(e) => return Err(fail(1, format!("cannot read /proc/{pid}/status: {e}"))),
    };
    let mask = st
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    Ok(mask >> (sig - 1) & 1 == 1)
}

/// Waits until the process has the shim mapped and catches `sig`, until `deadline`.
pub fn wait_caught(pid: u32, sig: i32, deadline: Instant, timeout: f64) -> Result<(), Fail> {
    loop {
        if mapped(pid)? && catches(pid, sig)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(fail(
                1,
                format!(
                    "process {pid} did not catch its dump signal {} within {timeout}s (SigCgt in /proc/{pid}/status): not sent",
                    signal_name(sig)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGUSR2 => "SIGUSR2".into(),
        n => format!("{n}"),
    }
}

/// The dump files of `pid` in `dir` by name, with their modification times: what was there
/// before a dump was asked for.
pub type Listing = std::collections::BTreeMap<String, std::time::SystemTime>;

/// The dump files of `pid` in `dir`.
fn listing(dir: &Path, pid: u32) -> Result<Listing, Fail> {
    let rd = std::fs::read_dir(dir).map_err(|e| fail(2, format!("cannot read {}: {e}", dir.display())))?;
    let mut v = Listing::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if parse_dump_file_name(name).is_some_and(|(p, _, _)| p == pid) {
            let t = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
            v.insert(name.to_string(), t);
        }
    }
    Ok(v)
}

/// The dump files of `pid` in `dir` that are not in `before` or were written again since (a
/// file of an earlier process with the same pid, e.g. a server restarted after a reboot, may
/// hold any sequence number, and the new process's dump of that number replaces it), as
/// (seq, ext, path), in sequence order.
fn files_after(dir: &Path, pid: u32, before: &Listing) -> Result<Vec<(u64, String, PathBuf)>, Fail> {
    let mut v = Vec::new();
    for (name, t) in listing(dir, pid)? {
        if before.get(&name) == Some(&t) {
            continue;
        }
        if let Some((_, seq, ext)) = parse_dump_file_name(&name) {
            v.push((seq, ext.to_string(), dir.join(&name)));
        }
    }
    v.sort();
    Ok(v)
}

/// Signals `pid` and waits for its next dump; returns the new files (json first if any).
pub fn dump(pid: u32, dir: Option<&Path>, timeout: f64) -> Result<Vec<PathBuf>, Fail> {
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(fail(2, format!("--timeout wants seconds above 0, got {timeout}")));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(timeout);
    check_process(pid)?;
    let Some(sig) = dump_signal(pid) else {
        return Err(fail(1, format!("process {pid} dumps on no signal (MALLOCSHIM_DUMP_SIGNAL=none)")));
    };
    let explicit_dir = dir.is_some();
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| dump_dir(pid));
    let formats = environ_var(pid, "MALLOCSHIM_DUMP_FORMATS").unwrap_or_else(|| formats::DEFAULT.into());
    // The file extensions the process writes, from the format table (`pprof` is `.pb.gz`).
    let want: Vec<&str> = formats::parse_list(&formats).into_iter().map(|f| f.row().ext).collect();
    let before = listing(&dir, pid)?;
    wait_caught(pid, sig, deadline, timeout)?;
    if explicit_dir {
        // --dir: the files are looked for there, so the plain signal asks for them.
        send(pid, sig, None, deadline, timeout)?;
        return wait_files(pid, &dir, &before, &want, deadline, timeout);
    }
    match crate::ctl_client::dump_through_channel(pid, sig, deadline, timeout, &|| {
        Ok(!files_after(&dir, pid, &before)?.is_empty())
    })? {
        Channel::Files(f) => return Ok(json_first(f)),
        Channel::Answered => {}
        Channel::None => send(pid, sig, None, deadline, timeout)?,
    }
    wait_files(pid, &dir, &before, &want, deadline, timeout)
}

/// What the control channel did for a dump (`ctl_client::dump_through_channel`).
pub enum Channel {
    /// The channel wrote the dump: its files.
    Files(Vec<PathBuf>),
    /// No channel, but the attach signal was answered with a dump (an older shim).
    Answered,
    /// Neither: send the plain signal.
    None,
}

/// JSON first, then the other files in name order.
fn json_first(files: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut paths: Vec<(bool, PathBuf)> =
        files.into_iter().map(|p| (p.extension().is_none_or(|e| e != "json"), p)).collect();
    paths.sort();
    paths.into_iter().map(|p| p.1).collect()
}

/// How long the image that catches the signal must stay the same before the signal is sent.
const SETTLE: Duration = Duration::from_millis(20);

/// Sends `sig` to `pid` (queued with `value` when given) once the process has caught it in the
/// same image for [`SETTLE`], looking at the image once more right before the send. A process
/// under the shim that execs another program (a wrapper such as `numactl`, `nohup` or `setsid`
/// started with the shim preloaded) catches the signal until the exec; from the exec until the
/// new image's shim installs its handler the signal would take its default action and end the
/// process, so a signal is never sent to an image that has just changed. What is left is the
/// time between the last look and the send (microseconds), in which an exec can still happen.
///
/// Nor is a signal sent while the same signal is still pending for the process (`ShdPnd`): a
/// standard signal sent then is merged into the pending one and lost, value and all. The kernel
/// gives a process-directed signal to the main thread first, and a starting mariadbd's main
/// thread can stay in one system call for hundreds of ms (seen: 470 ms at load 3); an attach
/// signal pending there swallowed the plain signal sent after it, so the channel opened and no
/// dump came (1 start in 1,500 here). A plain signal waits until the pending one is taken; an
/// attach is not sent again (the pending one opens the channel when it is taken).
pub fn send(pid: u32, sig: i32, value: Option<usize>, deadline: Instant, timeout: f64) -> Result<(), Fail> {
    loop {
        wait_caught(pid, sig, deadline, timeout)?;
        let first = shim_mapping(pid)?;
        std::thread::sleep(SETTLE);
        let settled = first.is_some() && catches(pid, sig)? && shim_mapping(pid)? == first;
        let waiting = settled && pending(pid, sig)?;
        if settled && !waiting {
            return raw_send(pid, sig, value);
        }
        if waiting && value.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(fail(
                1,
                if waiting {
                    format!(
                        "process {pid} did not take its pending {} within {timeout}s: not sent again",
                        signal_name(sig)
                    )
                } else {
                    format!("process {pid} kept changing its program (exec) for {timeout}s: not signalled")
                },
            ));
        }
    }
}

fn raw_send(pid: u32, sig: i32, value: Option<usize>) -> Result<(), Fail> {
    // SAFETY: kill(2) or sigqueue(3) on one pid with a valid signal number and a plain value;
    // no memory is passed.
    let r = unsafe {
        match value {
            None => libc::kill(pid as libc::pid_t, sig),
            Some(v) => {
                libc::sigqueue(pid as libc::pid_t, sig, libc::sigval { sival_ptr: v as *mut libc::c_void })
            }
        }
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        let msg = match e.raw_os_error() {
            Some(libc::ESRCH) => format!("no such process: {pid}"),
            Some(libc::EPERM) => {
                format!("cannot signal process {pid}: {}", crate::procstate::proc_refused(pid, "maps"))
            }
            _ => format!("cannot signal process {pid}: {e}"),
        };
        return Err(fail(1, msg));
    }
    Ok(())
}

/// Waits for the new dump's files (every wanted format, or what is there at the deadline).
fn wait_files(
    pid: u32,
    dir: &Path,
    before: &Listing,
    want: &[&str],
    deadline: Instant,
    timeout: f64,
) -> Result<Vec<PathBuf>, Fail> {
    loop {
        let new = files_after(dir, pid, before)?;
        if let Some(seq) = new.first().map(|f| f.0) {
            let this: Vec<_> = new.into_iter().filter(|f| f.0 == seq).collect();
            let complete = want.iter().all(|w| this.iter().any(|f| f.1 == *w));
            if complete || Instant::now() >= deadline {
                let mut paths: Vec<(bool, PathBuf)> =
                    this.into_iter().map(|f| (f.1 != "json", f.2)).collect();
                paths.sort();
                return Ok(paths.into_iter().map(|p| p.1).collect());
            }
        } else if Instant::now() >= deadline {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(fail(1, format!("process {pid} exited before it dumped")));
            }
            let (d, why) = (dir.display(), crate::procstate::why_no_dump(pid));
            return Err(fail(1, format!("no new dump of process {pid} in {d} within {timeout}s{why}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: &Args) -> Result<String, Fail> {
    let files = dump(args.pid, args.dir.as_deref(), args.timeout)?;
    let labelled = crate::dump_label::label(args.pid, &files, &args.conn).map_err(|m| fail(2, m))?;
    Ok(files.iter().map(|p| format!("{}\n", p.display())).collect::<String>() + &labelled)
}
