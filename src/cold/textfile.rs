//! Prometheus textfile output for a fleet: with `MALLOCSHIM_PROM_TEXTFILE_DIR=DIR` the shim's own
//! thread writes one file per process, `DIR/mallocshim_<instance>.prom`, every
//! `MALLOCSHIM_PROM_INTERVAL_S`, for node_exporter's textfile collector. The name is stable (the
//! instance, `MALLOCSHIM_INSTANCE`, defaults to the pid), so a collector sees one series per
//! process, never one per dump; every series carries `instance` and `backend` labels.
//! Publishing is atomic: the text goes to a new temporary file in DIR (O_CREAT|O_EXCL|O_NOFOLLOW,
//! `MALLOCSHIM_PROM_FILE_MODE`, default 0644 so node_exporter's user can read it, applied with
//! fchmod past the umask), which is renamed over the final name; a planted symlink is replaced,
//! never followed. At a clean exit the file is removed (after any write in progress finishes), so
//! a stopped server leaves no stale series; a forked child writes none (it would share the
//! parent's instance name).
//! Runs on the shim's thread (or at exit) under the reentrancy guard; never on the hot path.

use crate::hot::config;
use crate::hot::tls::Reentry;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

/// Set while a file is being written; exit waits for it.
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set at exit and in a forked child: no more writes.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Pid of the process that owns the file (set by its first write).
static OWNER: AtomicU32 = AtomicU32::new(0);
/// A failed write was reported (once).
static WARNED: AtomicBool = AtomicBool::new(false);

/// True when a textfile directory is configured.
pub fn active() -> bool {
    !config::cstr_bytes(&config::current().prom_textfile_dir).is_empty()
}

/// The instance label: `MALLOCSHIM_INSTANCE`, else the pid.
pub fn instance() -> String {
    match config::cstr_bytes(&config::get().instance) {
        b"" => std::process::id().to_string(),
        v => String::from_utf8_lossy(v).into_owned(),
    }
}

fn paths() -> (PathBuf, PathBuf) {
    let dir =
        PathBuf::from(std::ffi::OsStr::from_bytes(config::cstr_bytes(&config::current().prom_textfile_dir)));
    let name = format!("mallocshim_{}.prom", instance());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    (dir.join(name), tmp)
}

/// Writes the file once (the worker calls this every interval). Failures give one `mallocshim:`
/// line for the life of the process, then are counted silently.
pub fn write() {
    if !active() || CLOSED.load(Acquire) {
        return;
    }
    let _g = Reentry::enter();
    if BUSY.swap(true, AcqRel) {
        return;
    }
    // Re-checked under BUSY: exit sets CLOSED, then waits for BUSY to clear.
    if !CLOSED.load(Acquire) {
        OWNER.store(std::process::id(), Relaxed);
        let body = render();
        let (dst, tmp) = paths();
        if let Err(e) = publish(&dst, &tmp, body.as_bytes()) {
            if !WARNED.swap(true, Relaxed) {
                crate::base::diag::warn!(
                    "cannot write the Prometheus textfile {}: {} (reported once; retried every interval)",
                    dst.display(),
                    e
                );
            }
        }
    }
    BUSY.store(false, Release);
}

/// The exposition text: the dump's Prometheus families with an `instance` label on every series,
/// plus build information and the process start time.
fn render() -> String {
    let snap = crate::cold::report::snapshot();
    let inst = instance();
    let mut o = with_label(&crate::cold::report::prom::render(&snap), "instance", &inst);
    let b = snap.backend;
    let ver = env!("CARGO_PKG_VERSION");
    let mut bv = crate::base::diag::LineBuf::new();
    crate::backend::version(&mut bv);
    let bver = String::from_utf8_lossy(bv.as_bytes()).into_owned();
    o.push_str("# HELP mallocshim_build_info mallocshim version and the backend serving calls (value 1).\n");
    o.push_str("# TYPE mallocshim_build_info gauge\n");
    o.push_str(&format!(
        "mallocshim_build_info{{instance=\"{}\",backend=\"{b}\",version=\"{ver}\",backend_version=\"{}\"}} 1\n",
        escape(&inst),
        escape(&bver)
    ));
    if let Some(t) = process_start_time() {
        o.push_str("# HELP mallocshim_process_start_time_seconds Start time of the process since the Unix epoch (/proc/self/stat starttime, /proc/stat btime).\n");
        o.push_str("# TYPE mallocshim_process_start_time_seconds gauge\n");
        o.push_str(&format!(
            "mallocshim_process_start_time_seconds{{instance=\"{}\",backend=\"{b}\"}} {t}\n",
            escape(&inst)
        ));
    }
    o
}

/// Adds `name="value"` as the first label of every sample line of an exposition text.
pub fn with_label(text: &str, name: &str, value: &str) -> String {
    let label = format!("{name}=\"{}\"", escape(value));
    let mut o = String::with_capacity(text.len() + text.lines().count() * (label.len() + 2));
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            o.push_str(line);
        } else {
            let name_end = line.find([' ', '{']).unwrap_or(line.len());
            let (metric, rest) = line.split_at(name_end);
            o.push_str(metric);
            match rest.strip_prefix('{') {
                Some(r) if r.starts_with('}') => o.push_str(&format!("{{{label}{r}")),
                Some(r) => o.push_str(&format!("{{{label},{r}")),
                None => o.push_str(&format!("{{{label}}}{rest}")),
            }
        }
        o.push('\n');
    }
    o
}

/// Escapes a label value (backslash, double quote, newline), as the exposition format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Seconds since the epoch at which this process started: starttime (field 22 of
/// /proc/self/stat, in clock ticks since boot) plus btime from /proc/stat.
fn process_start_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| btime + ticks / hz as f64)
}

fn publish(dst: &std::path::Path, tmp: &std::path::Path, body: &[u8]) -> std::io::Result<()> {
    let mode = config::get().prom_file_mode;
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)
    };
    let mut f = match open() {
        // A temporary file left by an earlier process with our pid: remove it (unlink never
        // follows a symlink) and try once more.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()?
        }
        r => r?,
    };
    let r = f
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|_| f.write_all(body))
        .and_then(|_| f.flush());
    drop(f);
    if let Err(e) = r {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    let (t, d) = (CString::new(tmp.as_os_str().as_bytes())?, CString::new(dst.as_os_str().as_bytes())?);
    // SAFETY: valid NUL-terminated paths; rename replaces the destination entry atomically and
    // never follows a symlink there.
    if unsafe { libc::rename(t.as_ptr(), d.as_ptr()) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    Ok(())
}

/// At a clean exit: stop writing, wait (at most 2 s) for a write in progress, then remove this
/// process's file and any temporary file it left.
pub fn remove_at_exit() {
    if !active() || CLOSED.swap(true, AcqRel) {
        return;
    }
    let _g = Reentry::enter();
    for _ in 0..2000 {
        if !BUSY.load(Acquire) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    if OWNER.load(Relaxed) != std::process::id() {
        return;
    }
    let (dst, tmp) = paths();
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_file(&dst);
}

/// In a forked child: the parent owns the file; the child writes none. Writes nothing when
/// there is no textfile (a write costs a forked child a page copy).
pub fn after_fork_child() {
    if !active() {
        return;
    }
    CLOSED.store(true, Release);
    BUSY.store(false, Release);
}
