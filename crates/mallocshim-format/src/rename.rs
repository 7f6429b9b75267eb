//! Giving a finished file its name without replacing another: the one rename both writers use,
//! the shim's trace recorder (`src/cold/record/file.rs`) and the `mallocshim` command's own files
//! (`secure_write`). Pure but for the two system calls; no global state.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Renames `from` to `to` unless `to` exists: `Ok(true)` when renamed, `Ok(false)` when `to`
/// exists (nothing changed). renameat2(2) with `RENAME_NOREPLACE`; on a file system without the
/// flag (`EINVAL`, `ENOSYS`), link(2), which never replaces either, then unlink(2) of `from` (a
/// failed unlink leaves `from` as a second name: the file has its name all the same). Errors:
/// the call's errno as `std::io::Error` (`InvalidInput` for a path holding a NUL byte).
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<bool> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths, relative to the working directory.
    let r = unsafe {
        libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::RENAME_NOREPLACE)
    };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => Ok(false),
        Some(libc::EINVAL) | Some(libc::ENOSYS) => match std::fs::hard_link(from, to) {
            Ok(()) => {
                let _ = std::fs::remove_file(from);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        },
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::rename_noreplace;

    #[test]
    fn renames_once_and_never_replaces() {
        let d = std::env::temp_dir().join(format!("mallocshim-rename-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        std::fs::write(&a, "first").unwrap();
        std::fs::write(&c, "second").unwrap();
        assert!(rename_noreplace(&a, &b).unwrap(), "an absent name is taken");
        assert!(!a.exists());
        assert!(!rename_noreplace(&c, &b).unwrap(), "a taken name is not replaced");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "first");
        assert_eq!(std::fs::read_to_string(&c).unwrap(), "second");
        assert!(rename_noreplace(&d.join("missing"), &d.join("x")).is_err(), "ENOENT is an error");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
