//! The control channel's client (docs/control.md): finds a process's socket
//! (`<dir>/<pid>.sock`, the directory by `mallocshim_format::ctl::dir` from the process's
//! effective uid and its `MALLOCSHIM_CTL_DIR`; the shim's thread listens there from its start),
//! asks the process to open it only when nothing listens (its dump signal queued with the attach
//! value, only once the signal is caught), removes the sockets of dead processes it finds there,
//! sends one request line and reads the reply. Also the `trim`, `get` and `set` subcommands. Owns no
//! server state: each request is one connection.

use crate::dump_cmd::{check_process, dump_signal, wait_caught, Fail};
use mallocshim_format::ctl as proto;
use mallocshim_proc::environ_var;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn fail(code: u8, msg: String) -> Fail {
    Fail { code, msg }
}

/// The process's effective uid (/proc/PID/status `Uid:`, second field).
fn euid(pid: u32) -> Result<u32, Fail> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| fail(1, format!("cannot read /proc/{pid}/status: {e}")))?;
    st.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| fail(1, format!("no Uid line in /proc/{pid}/status")))
}

/// Where the process's socket is: through /proc/PID/root first (the process's own mount
/// namespace: a private /tmp), then the path as this process sees it.
fn socket_paths(pid: u32) -> Result<Vec<PathBuf>, Fail> {
    let dir = proto::dir(euid(pid)?, environ_var(pid, "MALLOCSHIM_CTL_DIR").as_deref());
    let p = format!("{dir}/{}", proto::socket_name(pid));
    remove_stale(std::path::Path::new(&dir));
    Ok(vec![PathBuf::from(format!("/proc/{pid}/root{p}")), PathBuf::from(p)])
}

/// Removes the sockets of dead processes from a channel directory (a process killed with
/// SIGKILL leaves its socket: the shim removes it at exit only). A socket is stale when
/// `kill(pid, 0)` says no such process; one of a live process, or a pid reused by another
/// program, stays (a shim that starts under a reused pid binds anew). Best effort: a directory
/// this user cannot read is left alone.
fn remove_stale(dir: &std::path::Path) {
    use std::os::unix::fs::FileTypeExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(proto::socket_pid).and_then(|p| i32::try_from(p).ok()) else {
            continue;
        };
        if !e.file_type().is_ok_and(|t| t.is_socket()) {
            continue;
        }
        // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn connect_now(paths: &[PathBuf]) -> Option<UnixStream> {
    paths.iter().find_map(|p| UnixStream::connect(p).ok())
}

/// How often the attach signal is sent again while no socket appears: the dump signal is a
/// standard signal, so one sent while another is pending (a `kill -USR1` storm, a dump
/// request) is merged into it and its attach value lost.
const RESEND: Duration = Duration::from_millis(250);

/// Asks `pid` to open its channel (its dump signal queued with the attach value), once the
/// process catches it in a settled image (`dump_cmd::send`).
fn attach(pid: u32, sig: i32, deadline: Instant, timeout: f64) -> Result<(), Fail> {
    crate::dump_cmd::send(pid, sig, Some(proto::ATTACH_MAGIC), deadline, timeout)
}

/// A connection to `pid`'s channel: the open socket, else an attach and a wait (at most
/// `wait`) for it. `Ok(None)`: the process did not open one (a single-threaded process, an
/// older shim, a refused directory: see its stderr).
pub fn connect(pid: u32, wait: Duration) -> Result<Option<UnixStream>, Fail> {
    check_process(pid)?;
    let paths = socket_paths(pid)?;
    if let Some(s) = connect_now(&paths) {
        return Ok(Some(s));
    }
    let Some(sig) = dump_signal(pid) else {
        return Err(fail(
            1,
            format!("process {pid} has no dump signal (MALLOCSHIM_DUMP_SIGNAL=none): no channel"),
        ));
    };
    let deadline = Instant::now() + wait;
    wait_caught(pid, sig, deadline, wait.as_secs_f64())?;
    let limit = (deadline, wait.as_secs_f64());
    Ok(match attach_wait(pid, sig, &paths, deadline, limit, &|| Ok(false))? {
        Attached::Socket(s) => Some(s),
        Attached::Answered | Attached::Timeout => None,
    })
}

/// How an attach ended: the socket opened, `answered` said the process answered another way,
/// or the wait ran out.
enum Attached {
    Socket(UnixStream),
    Answered,
    Timeout,
}

/// Sends the attach signal every [`RESEND`] until one of `paths` accepts a connection,
/// `answered()` is true (checked after each connect attempt), or `until` passes.
fn attach_wait(
    pid: u32,
    sig: i32,
    paths: &[PathBuf],
    until: Instant,
    (deadline, timeout): (Instant, f64),
    answered: &dyn Fn() -> Result<bool, Fail>,
) -> Result<Attached, Fail> {
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            attach(pid, sig, deadline, timeout)?;
            next += RESEND;
        }
        if let Some(s) = connect_now(paths) {
            return Ok(Attached::Socket(s));
        }
        if answered()? {
            return Ok(Attached::Answered);
        }
        if Instant::now() >= until {
            return Ok(Attached::Timeout);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `mallocshim dump` through the channel: the open socket, else an attach and a wait of at most
/// `ATTACH_WAIT_MS` (before `deadline`) for the socket or for new dump files (`answered`: an
/// older shim answers the queued signal with a dump).
pub fn dump_through_channel(
    pid: u32,
    sig: i32,
    deadline: Instant,
    timeout: f64,
    answered: &dyn Fn() -> Result<bool, Fail>,
) -> Result<crate::dump_cmd::Channel, Fail> {
    use crate::dump_cmd::Channel;
    let paths = socket_paths(pid)?;
    let t = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
    let files = |s: UnixStream| -> Result<Channel, Fail> {
        let body = request_on(s, pid, "dump", t)?;
        Ok(Channel::Files(body.lines().map(PathBuf::from).collect()))
    };
    if let Some(s) = connect_now(&paths) {
        return files(s);
    }
    let until = deadline.min(Instant::now() + Duration::from_millis(ATTACH_WAIT_MS));
    match attach_wait(pid, sig, &paths, until, (deadline, timeout), answered)? {
        Attached::Socket(s) => files(s),
        Attached::Answered => Ok(Channel::Answered),
        Attached::Timeout => Ok(Channel::None),
    }
}

/// How long `dump` waits for a channel before it sends the plain signal (a process without the
/// shim's thread yet: single-threaded, or still starting), ms.
const ATTACH_WAIT_MS: u64 = 1000;

/// Sends one request on `s` and returns the reply's body, or its error line as a failure.
pub fn request_on(mut s: UnixStream, pid: u32, line: &str, timeout: Duration) -> Result<String, Fail> {
    let io = |e: std::io::Error| fail(1, format!("control channel of process {pid}: {e}"));
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    s.write_all(format!("{line}\n").as_bytes()).map_err(io)?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(io)?;
    if let Some(body) = reply.strip_prefix(&format!("{}\n", proto::OK)) {
        return Ok(body.to_string());
    }
    let msg = reply.strip_prefix(proto::ERR).unwrap_or(&reply).trim_end();
    Err(fail(
        1,
        if msg.is_empty() { format!("process {pid} closed the control channel") } else { msg.into() },
    ))
}

/// One request to `pid` on its channel if it is open now; None when nothing listens (the
/// process is gone, or has no channel): never sends the attach signal.
pub fn request_if_open(pid: u32, line: &str, timeout: Duration) -> Option<Result<String, Fail>> {
    let paths = socket_paths(pid).ok()?;
    connect_now(&paths).map(|s| request_on(s, pid, line, timeout))
}

/// Why the process's socket, which exists, refuses this caller (EACCES, EPERM); None otherwise.
fn refused(pid: u32) -> Option<String> {
    let dir = proto::dir(euid(pid).ok()?, environ_var(pid, "MALLOCSHIM_CTL_DIR").as_deref());
    let path = format!("{dir}/{}", proto::socket_name(pid));
    match UnixStream::connect(&path) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::PermissionDenied) => {
            Some(crate::procstate::channel_refused(pid, &dir, &e))
        }
        _ => None,
    }
}

/// One request to `pid`, attaching when needed.
pub fn request(pid: u32, line: &str, timeout: f64) -> Result<String, Fail> {
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(fail(2, format!("--timeout wants seconds above 0, got {timeout}")));
    }
    let t = Duration::from_secs_f64(timeout);
    match connect(pid, t)? {
        Some(s) => request_on(s, pid, line, t),
        None if refused(pid).is_some() => Err(fail(1, refused(pid).unwrap_or_default())),
        None => Err(fail(
            1,
            format!(
                "process {pid} opened no control channel within {timeout}s (the shim's thread starts with the \
                 program's second thread; a refused channel directory is named on the process's stderr)"
            ),
        )),
    }
}

/// `mallocshim trim PID`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Give a running process's free memory back to the OS now (the backend's release call)",
    long_about = "Through the control channel (docs/control.md), run the backend's release call in \
                  process PID now (glibc malloc_trim(0), jemalloc arena purge, tcmalloc \
                  ReleaseFreeMemory, mimalloc mi_collect) and print its RSS before and after, \
                  the bytes released (RSS from /proc/PID/statm, in the process) and the bytes \
                  free in the allocator before it (resident: the RSS account's allocator free, \
                  docs/memory-account.md); under glibc also how much of that a trim could \
                  return and how much stays. --raw also gives the backend's own free count \
                  (under mimalloc its committed bytes less live bytes, which may not be \
                  resident).\n\n\
                  Exit status: 0 done; 1 no channel (see mallocshim get); 2 bad arguments.",
    after_help = "Example:\n  mallocshim trim $(pgrep -o -x mariadbd)"
)]
pub struct TrimArgs {
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Seconds to wait for the channel and for the reply.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
    /// Print the reply's key=value lines as they are.
    #[arg(long)]
    pub raw: bool,
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

pub fn trim(a: &TrimArgs) -> Result<String, Fail> {
    let body = request(a.pid, "trim", a.timeout)?;
    if a.raw {
        return Ok(body);
    }
    let kv = |k: &str| -> u64 {
        body.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')?.parse().ok()).unwrap_or(0)
    };
    // One free figure: the RSS account's allocator free (resident); what a trim could return
    // and what stays are parts of it (the backend's own count, which under mimalloc need not be
    // resident, is in --raw).
    let free = kv("allocator_free_before_bytes");
    let mut o = format!(
        "RSS {} -> {}: released {} in {} ms; {} was free in the allocator before it (resident)\n",
        mib(kv("rss_before_bytes")),
        mib(kv("rss_after_bytes")),
        mib(kv("released_bytes")),
        kv("duration_us") / 1000,
        mib(free)
    );
    if body.lines().any(|l| l.starts_with("trimmable_before_bytes=")) {
        let could = kv("trimmable_before_bytes").min(free);
        o += &format!(
            "of that, a trim could return {} (whole pages inside free chunks); the other {} stays \
             (free space sharing pages with live blocks, small chunks, other arenas' top chunks, \
             which malloc_trim never shrinks)\n",
            mib(could),
            mib(free - could)
        );
    }
    Ok(o)
}

/// `mallocshim get PID`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Print the options in effect in a running process: value, source, settable at run time",
    long_about = "Through the control channel (docs/control.md), print every MALLOCSHIM_* option of \
                  process PID: its value now, where it comes from (env: the environment at start; \
                  default; set: changed by mallocshim set) and whether it can change at run time.\n\n\
                  Exit status: 0 done; 1 no channel; 2 bad arguments.",
    after_help = "Example:\n  mallocshim get $(pgrep -o -x mariadbd)"
)]
pub struct GetArgs {
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Seconds to wait for the channel and for the reply.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
    /// The table as a JSON array of {name, value, source, settable}.
    #[arg(long)]
    pub json: bool,
}

pub fn get(a: &GetArgs) -> Result<String, Fail> {
    if a.json {
        return request(a.pid, "get json", a.timeout);
    }
    let body = request(a.pid, "get", a.timeout)?;
    let rows: Vec<Vec<&str>> = body.lines().map(|l| l.split('\t').collect()).collect();
    let w0 = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.get(1).map_or(0, |v| v.len())).max().unwrap_or(0).min(40);
    let mut o = format!("{:<w0$}  {:<w1$}  {:<7}  {}\n", "option", "value", "source", "settable");
    for r in rows.iter().filter(|r| r.len() == 4) {
        o.push_str(&format!("{:<w0$}  {:<w1$}  {:<7}  {}\n", r[0], r[1], r[2], r[3]));
    }
    Ok(o)
}

/// `mallocshim set PID NAME=VALUE`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Change a run-time option in a running process (trim interval, RSS ceiling, sampling, ...)",
    long_about = "Through the control channel (docs/control.md), change option NAME of process PID to \
                  VALUE, as if it had been in its environment at start; NAME with or without the \
                  MALLOCSHIM_ prefix. Only options `mallocshim get` shows as settable: the trim \
                  interval, minimum, RSS ceiling and pressure trims, glibc's trim threshold \
                  (GLIBC_TRIM_THRESHOLD), the heap-profile rate, latency \
                  sampling, dump formats, interval, keep and rate limit, the memlog and the textfile. \
                  Sizes take a K, M or G suffix as in the environment (TRIM_MIN_BYTES=16M). A bad \
                  value changes nothing. Prints NAME=VALUE (was OLD).\n\n\
                  Exit status: 0 set; 1 refused (its reason on stderr) or no channel; 2 bad arguments.",
    after_help = "Examples:\n  mallocshim set $(pgrep -o -x mariadbd) TRIM_INTERVAL_MS=1000\n  \
                  mallocshim set $(pgrep -o -x mariadbd) TRIM_ABOVE_RSS=2G"
)]
pub struct SetArgs {
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// NAME=VALUE.
    #[arg(value_name = "NAME=VALUE")]
    pub setting: String,
    /// Seconds to wait for the channel and for the reply.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
}

pub fn set(a: &SetArgs) -> Result<String, Fail> {
    if !a.setting.contains('=') || a.setting.contains('\n') {
        return Err(fail(2, format!("expected NAME=VALUE, got `{}`", a.setting.escape_default())));
    }
    request(a.pid, &format!("set {}", a.setting), a.timeout)
}
