//! Writing dumps: one snapshot rendered in every configured format to
//! `MALLOCSHIM_DUMP_DIR/mallocshim.<pid>.<seq>.<ext>`. Each file is written under a temporary
//! name created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW, then renamed with RENAME_NOREPLACE, so a
//! planted symlink or another user's file is never followed or overwritten. Failures give one
//! `mallocshim:` line and are otherwise ignored. Runs under the reentrancy guard; dumps are
//! serialised by an atomic flag (never taken on the hot path) that a forked child resets, so a
//! dump in progress in the parent at fork time can never leave the child's dumps locked.

use crate::config::{self, FMT_HDR, FMT_JSON, FMT_PPROF, FMT_PROM, FMT_TEXT, FORMATS};
use crate::report;
use crate::tls::Reentry;
use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static SEQ: AtomicU64 = AtomicU64::new(0);
static BUSY: AtomicBool = AtomicBool::new(false);

/// Holds the dump flag; released on drop.
struct Serial;

impl Serial {
    fn take() -> Serial {
        while BUSY.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Serial
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// In a forked child: the thread that was dumping in the parent does not exist here.
pub fn after_fork_child() {
    BUSY.store(false, Ordering::Release);
}

/// The dump directory: the variable, else `$TMPDIR` (not in secure-execution), else `/tmp`.
pub fn dir() -> PathBuf {
    let d = config::cstr_bytes(&config::get().dump_dir);
    if !d.is_empty() {
        return PathBuf::from(OsString::from_vec(d.to_vec()));
    }
    // SAFETY: getauxval has no preconditions.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    match std::env::var_os("TMPDIR") {
        Some(t) if !secure && !t.is_empty() => PathBuf::from(t),
        _ => PathBuf::from("/tmp"),
    }
}

/// Writes one dump in every configured format; returns the paths written.
pub fn write_all() -> Result<Vec<PathBuf>, String> {
    let _g = Reentry::enter();
    let _l = Serial::take();
    // This dump answers any request still waiting for a thread to write it.
    crate::worker::clear_pending();
    let formats = config::get().dump_formats;
    let snap = report::snapshot();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = dir();
    let mut written = Vec::new();
    for (ext, bit) in FORMATS {
        if formats & bit == 0 {
            continue;
        }
        let body = match bit {
            FMT_JSON => report::json::render(&snap).into_bytes(),
            FMT_PROM => report::prom::render(&snap).into_bytes(),
            FMT_HDR => report::hdr::render(&snap),
            FMT_TEXT => report::text::render(&snap).into_bytes(),
            FMT_PPROF => crate::heapprof::pprof::render(),
            _ => continue,
        };
        let ext = if bit == FMT_PPROF { "pb.gz" } else { ext };
        let name = format!("mallocshim.{}.{}.{}", snap.pid, seq, ext);
        match publish(&dir, &name, &body) {
            Ok(p) => written.push(p),
            Err(e) => {
                let msg = format!("cannot write dump {}/{}: {}", dir.display(), name, e);
                crate::shim_warn!("{}", msg);
                return Err(msg);
            }
        }
    }
    Ok(written)
}

fn publish(dir: &std::path::Path, name: &str, body: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let dst = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let r = f.write_all(body).and_then(|_| f.flush());
    drop(f);
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let (t, d) = (CString::new(tmp.as_os_str().as_bytes())?, CString::new(dst.as_os_str().as_bytes())?);
    // SAFETY: valid NUL-terminated paths; RENAME_NOREPLACE refuses an existing destination.
    let rc = unsafe {
        libc::renameat2(libc::AT_FDCWD, t.as_ptr(), libc::AT_FDCWD, d.as_ptr(), libc::RENAME_NOREPLACE)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(dst)
}
