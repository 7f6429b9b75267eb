//! The trace file's names and life (issue 37): a recording never corrupts or replaces another.
//! A window claims its path PATH by holding an exclusive `flock` on `PATH.part`, where it
//! writes; when the trace is whole (footer written) `PATH.part` is renamed to PATH without
//! replacing anything (`renameat2(RENAME_NOREPLACE)`). PATH is taken when it exists, or when
//! `PATH.part` is locked (a live recording: a wrapper such as `timeout`, `sh` or `mysqld_safe`
//! preloaded with the same `MALLOCSHIM_RECORD`) or was left by another process (one killed
//! mid-window: its trace replays up to its last whole block). A taken PATH makes the window
//! record to `PATH.<pid>` instead, with one line saying so. A `PATH.part` left unlocked by an
//! earlier image of this same pid (a wrapper that exec'd the program: the exec closed its
//! descriptor) is this process's to reuse. Cold path only (the recorder's lock held, under the
//! reentrancy guard); owns no state.

use mallocshim_format::rename::rename_noreplace;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A claimed trace file: the open `.part` (locked), where it is, and the name it gets when whole.
pub struct Claimed {
    pub file: File,
    pub part: PathBuf,
    pub target: PathBuf,
    /// Why the requested path was not used (one line for the caller to print), if it was not.
    pub note: Option<String>,
}

/// `PATH` with `suffix` appended to its file name.
fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The name a window writes under until its trace is whole.
pub fn part_of(target: &Path) -> PathBuf {
    with_suffix(target, ".part")
}

/// The name used when `target` is taken.
fn alternative(target: &Path, pid: u32) -> PathBuf {
    with_suffix(target, &format!(".{pid}"))
}

/// Why a path cannot be claimed now (it is taken), or the claimed file.
enum Try {
    Mine(File),
    Taken(&'static str),
}

/// The pid in the header of a trace at `p`, if it has a readable one.
fn header_pid(p: &Path) -> Option<u32> {
    let f = File::open(p).ok()?;
    let r = mallocshim_format::trace::TraceReader::new(std::io::BufReader::new(f)).ok()?;
    Some(r.header().pid)
}

fn try_claim(target: &Path, pid: u32) -> Result<Try, String> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(Try::Taken("an existing file"));
    }
    let part = part_of(target);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&part)
        .map_err(|e| format!("{}: {e}", part.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(Try::Taken("a recording in progress"));
    }
    // Still the file at that name (not one renamed away by its finished writer meanwhile).
    let (Ok(open), Ok(named)) = (f.metadata(), std::fs::symlink_metadata(&part)) else {
        return Ok(Try::Taken("a recording that just ended"));
    };
    if open.ino() != named.ino() || open.dev() != named.dev() || !named.file_type().is_file() {
        return Ok(Try::Taken("a recording that just ended"));
    }
    if open.len() > 0 && header_pid(&part).is_some_and(|p| p != pid) {
        return Ok(Try::Taken("a recording cut short (its .part file)"));
    }
    f.set_len(0).map_err(|e| format!("{}: {e}", part.display()))?;
    Ok(Try::Mine(f))
}

/// Claims `path` for this process's window, else `PATH.<pid>`; an error when both are taken
/// or the directory refuses the file.
pub fn claim(path: &Path, pid: u32) -> Result<Claimed, String> {
    let first = match try_claim(path, pid)? {
        Try::Mine(file) => return Ok(Claimed { file, part: part_of(path), target: path.into(), note: None }),
        Try::Taken(why) => why,
    };
    let alt = alternative(path, pid);
    match try_claim(&alt, pid)? {
        Try::Mine(file) => Ok(Claimed {
            file,
            part: part_of(&alt),
            note: Some(format!(
                "{} is taken ({first}); recording to {} instead",
                path.display(),
                alt.display()
            )),
            target: alt,
        }),
        Try::Taken(why) => {
            Err(format!("{} is taken ({first}) and so is {} ({why})", path.display(), alt.display()))
        }
    }
}

/// Gives a whole trace its name: `target`, else (taken meanwhile) `target.<pid>`. Returns the
/// name, and a line to print when it is not `target`; on failure the trace stays at `part`.
pub fn publish(part: &Path, target: &Path, pid: u32) -> Result<(PathBuf, Option<String>), String> {
    let failed = |e: std::io::Error| format!("cannot rename {} to {}: {e}", part.display(), target.display());
    if rename_noreplace(part, target).map_err(failed)? {
        return Ok((target.into(), None));
    }
    let alt = alternative(target, pid);
    if !target.as_os_str().as_bytes().ends_with(format!(".{pid}").as_bytes())
        && rename_noreplace(part, &alt).map_err(failed)?
    {
        let why =
            format!("{} appeared during the recording; the trace is {}", target.display(), alt.display());
        return Ok((alt, Some(why)));
    }
    Err(format!("{} exists; the trace stays in {}", target.display(), part.display()))
}
