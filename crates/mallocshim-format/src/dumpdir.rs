//! Where a process's dumps go, decided the same way by the shim (`src/cold/dump.rs`, which
//! writes them) and the `mallocshim` command (which looks for them): `MALLOCSHIM_DUMP_DIR`, else
//! `TMPDIR`, else `/tmp`, skipping a candidate that is relative (it would follow the process's
//! working directory, which for mariadbd/mysqld is its datadir) or that lies inside the process's
//! datadir (its working directory, when that holds a `mysql` directory and `ibdata1` or
//! `aria_log_control`): dump files there would be taken for tables by backups and `mysql_upgrade`,
//! and fill the data volume. Pure but for the `stat`s of [`is_datadir`]; no global state.

use std::path::{Path, PathBuf};

/// Why a configured directory was passed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Relative,
    InDatadir,
}

/// The safe default: `/tmp` (a private one under systemd's `PrivateTmp`).
pub const FALLBACK: &str = "/tmp";

/// True when `cwd` looks like a MariaDB or MySQL datadir.
pub fn is_datadir(cwd: &Path) -> bool {
    cwd.join("mysql").is_dir() && (cwd.join("ibdata1").exists() || cwd.join("aria_log_control").exists())
}

/// True when absolute `dir` is `datadir` or below it (compared after resolving symlinks where
/// the path exists, else as written).
fn inside(dir: &Path, datadir: &Path) -> bool {
    let d = resolved(dir).unwrap_or_else(|| dir.to_path_buf());
    let root = resolved(datadir).unwrap_or_else(|| datadir.to_path_buf());
    d.starts_with(&root)
}

/// `path` with its symlinks resolved, by realpath(3) into a buffer of ours; None when it does
/// not exist. Not `std::fs::canonicalize`, whose realpath(path, NULL) has glibc allocate the
/// answer: in the shim, that would be its thread's one allocation in glibc, and it would give
/// the thread an arena (src/base/worker_heap.rs).
fn resolved(path: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a NUL-terminated path and a buffer of PATH_MAX bytes, as realpath(3) requires.
    let r = unsafe { libc::realpath(c.as_ptr(), buf.as_mut_ptr().cast()) };
    if r.is_null() {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0)?;
    buf.truncate(n);
    Some(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// The dump directory from the candidates in order (`MALLOCSHIM_DUMP_DIR`, `TMPDIR`; None or
/// empty: not set), the process's working directory `cwd` (None: unknown, no datadir check),
/// and the first candidate refused with why (for one `mallocshim:` line), if any.
pub fn choose(candidates: [Option<&Path>; 2], cwd: Option<&Path>) -> (PathBuf, Option<(PathBuf, Refused)>) {
    let datadir = cwd.filter(|c| is_datadir(c));
    let mut refused = None;
    for c in candidates.into_iter().flatten().filter(|c| !c.as_os_str().is_empty()) {
        let why = if c.is_relative() {
            Some(Refused::Relative)
        } else if datadir.is_some_and(|d| inside(c, d)) {
            Some(Refused::InDatadir)
        } else {
            None
        };
        match why {
            None => return (c.to_path_buf(), refused),
            Some(w) => {
                refused.get_or_insert((c.to_path_buf(), w));
            }
        }
    }
    (PathBuf::from(FALLBACK), refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_datadir_are_passed_over() {
        let base = std::env::temp_dir().join(format!("msdd-{}", std::process::id()));
        let dd = base.join("data");
        std::fs::create_dir_all(dd.join("mysql")).unwrap();
        std::fs::write(dd.join("aria_log_control"), b"").unwrap();
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            choose([Some(Path::new("dumps")), None], Some(&dd)),
            (p(FALLBACK), Some((p("dumps"), Refused::Relative)))
        );
        let inner = dd.join("x");
        let (d, r) = choose([Some(&inner), Some(&base)], Some(&dd));
        assert_eq!((d, r), (base.clone(), Some((inner.clone(), Refused::InDatadir))));
        // Not a datadir: the same directory is fine.
        assert_eq!(choose([Some(&inner), None], Some(&base)).0, inner);
        assert_eq!(choose([None, None], None), (p(FALLBACK), None));
        // A symlink into the datadir is inside it; a path that does not exist is compared as
        // written.
        let link = base.join("link");
        std::os::unix::fs::symlink(&dd, &link).unwrap();
        assert_eq!(resolved(&link.join("mysql")), Some(dd.join("mysql")));
        assert_eq!(choose([Some(&link), Some(&base)], Some(&dd)).0, base);
        assert_eq!(resolved(&base.join("nothing")), None);
        let _ = std::fs::remove_dir_all(&base);
    }
}
