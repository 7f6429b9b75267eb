//! Prometheus textfile output for a fleet: with `MALLOCSHIM_PROM_TEXTFILE_DIR=DIR` the shim's own
//! thread writes one file per process, `DIR/mallocshim_<instance>.prom`, every
//! `MALLOCSHIM_PROM_INTERVAL_S`, for node_exporter's textfile collector. The name is stable (the
//! instance, `MALLOCSHIM_INSTANCE`, defaults to the pid), so a collector sees one series per
//! process, never one per dump; every series carries `instance` and `backend` labels.
//! Publishing is atomic: the text goes to a new temporary file in DIR (O_CREAT|O_EXCL|O_NOFOLLOW,
//! `MALLOCSHIM_PROM_FILE_MODE`, default 0644 so node_exporter's user can read it, applied with
//! fchmod past the umask), which is renamed over the final name; a planted symlink is replaced,
//! never followed. At a clean exit the file is removed (after any write in progress finishes), so
//! a stopped server leaves no stale series — only when the file still names this process (its first
//! line, `# mallocshim pid N`); a forked child writes none (it would share the
//! parent's instance name). An instance name whose file another live process writes is made
//! unique (`<name>-<pid>`, one `mallocshim:` line) at the first write.
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
#[link_section = ".data.mallocshim_fork"]
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set at exit and in a forked child: no more writes.
#[link_section = ".data.mallocshim_fork"]
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Pid of the process that owns the file (set by its first write).
static OWNER: AtomicU32 = AtomicU32::new(0);
/// A failed write was reported (once).
static WARNED: AtomicBool = AtomicBool::new(false);
/// The file this process last published: removed when `set` turns the textfile off or moves
/// it ([`retarget`]), and at exit.
static WRITTEN: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// True when a textfile directory is configured.
pub fn active() -> bool {
    // The first byte only: no scan of the whole buffer (this runs in every forked child, where
    // the scan's constant mask alone is one more page fault).
    config::current().prom_textfile_dir[0] != 0
}

/// The instance this process writes as, chosen at its first write ([`claim`]).
static CHOSEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The instance label: `MALLOCSHIM_INSTANCE`, else the pid; `<name>-<pid>` when another live
/// process already writes `<name>` (see [`claim`]).
pub fn instance() -> String {
    CHOSEN.get().cloned().unwrap_or_else(configured)
}

fn configured() -> String {
    match config::cstr_bytes(&config::get().instance) {
        b"" => std::process::id().to_string(),
        v => String::from_utf8_lossy(v).into_owned(),
    }
}

/// The first line of every textfile: who wrote it (a Prometheus comment, ignored by readers).
const OWNER_LINE: &str = "# mallocshim pid ";

/// The pid named by the textfile at `p`, if it is one of ours.
fn owner_of(p: &std::path::Path) -> Option<u32> {
    let mut buf = [0u8; 64];
    let n = std::fs::File::open(p).and_then(|mut f| std::io::Read::read(&mut f, &mut buf)).ok()?;
    let line = core::str::from_utf8(&buf[..n]).ok()?.lines().next()?;
    line.strip_prefix(OWNER_LINE)?.trim().parse().ok()
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid != 0
        && (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Chooses the instance name once, before the first write: the configured one, unless its file
/// names another live process, then `<name>-<pid>` with one `mallocshim:` line (two servers
/// with one `MALLOCSHIM_INSTANCE` overwrote one file, and the first to stop deleted the other's).
fn claim() {
    if CHOSEN.get().is_some() {
        return;
    }
    let me = std::process::id();
    let name = configured();
    let (dst, _) = paths_of(&name);
    let chosen = match owner_of(&dst) {
        Some(p) if p != me && alive(p) => {
            let unique = format!("{name}-{me}");
            crate::base::diag::warn!(
                "MALLOCSHIM_INSTANCE={name}: {} is written by live process {p}; this process writes as instance {unique}",
                dst.display()
            );
            unique
        }
        _ => name,
    };
    let _ = CHOSEN.set(chosen);
}

fn paths() -> (PathBuf, PathBuf) {
    paths_of(&instance())
}

fn paths_of(instance: &str) -> (PathBuf, PathBuf) {
    let dir =
        PathBuf::from(std::ffi::OsStr::from_bytes(config::cstr_bytes(&config::current().prom_textfile_dir)));
    let name = format!("mallocshim_{instance}.prom");
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
        claim();
        OWNER.store(std::process::id(), Relaxed);
        let body = format!("{OWNER_LINE}{}\n{}", std::process::id(), render());
        let (dst, tmp) = paths();
        let r = publish(&dst, &tmp, body.as_bytes());
        if r.is_ok() {
            if let Ok(mut w) = WRITTEN.lock() {
                *w = Some(dst.clone());
            }
        }
        if let Err(e) = r {
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
    let mut o = with_label(
        &crate::cold::report::prom::render_with(&snap, crate::hot::config::current().prom_histograms),
        "instance",
        &inst,
    );
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

/// After `set MALLOCSHIM_PROM_TEXTFILE_DIR=...` (the control channel, on the shim's thread):
/// removes the file this process last wrote when it is no longer where the textfile goes (turned
/// off, or another directory), so a collector stops seeing its series there. Only a file that
/// still names this process (its owner line). A moved file is written at once in its new place.
pub fn retarget() {
    let _g = Reentry::enter();
    if CLOSED.load(Acquire) || BUSY.swap(true, AcqRel) {
        return;
    }
    let want = active().then(|| paths().0);
    let mut moved = false;
    if let Ok(mut w) = WRITTEN.lock() {
        if let Some(old) = w.take() {
            if Some(&old) == want.as_ref() {
                *w = Some(old);
            } else {
                moved = true;
                if owner_of(&old) == Some(std::process::id()) {
                    let _ = std::fs::remove_file(&old);
                }
            }
        }
    }
    BUSY.store(false, Release);
    if moved && want.is_some() {
        write();
    }
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
    let (mut dst, tmp) = paths();
    let _ = std::fs::remove_file(&tmp);
    // The file last written (the directory may have changed since), without waiting on a lock.
    if let Some(w) = WRITTEN.try_lock().ok().and_then(|w| w.clone()) {
        dst = w;
    }
    // Only a file this process wrote last: never another live process's.
    if owner_of(&dst) == Some(std::process::id()) {
        let _ = std::fs::remove_file(&dst);
    }
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
