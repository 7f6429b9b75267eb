//! Why a process cannot be asked, in words a user can act on (issue 38 item 5, issue 37 item 5):
//! a caller without permission is told which rule stops it (the process's uid against the
//! caller's, the process not dumpable so that its /proc files are root's, the channel directory's
//! owner and mode) and what to run instead; a zombie is named a zombie; a process whose
//! LD_PRELOAD names a shim that is not mapped is told that the loader did not load it, and why
//! where /proc says; a process without the shim's thread is told why no dump came. Reads /proc
//! and /etc/passwd only; callers decide when to ask.

use mallocshim_proc::environ_var;
use std::os::unix::fs::MetadataExt;

/// The user name of `uid` from /etc/passwd, else the number.
pub fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2].parse() == Ok(uid)).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

/// `field`'s fields on /proc/PID/status (e.g. `Uid:`: real, effective, saved, fs).
fn status_field(pid: u32, field: &str) -> Option<Vec<String>> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    st.lines().find_map(|l| l.strip_prefix(field)).map(|v| v.split_whitespace().map(str::to_string).collect())
}

/// The process's effective uid.
pub fn euid(pid: u32) -> Option<u32> {
    status_field(pid, "Uid:")?.get(1)?.parse().ok()
}

/// Whether the process is a zombie (`State: Z`).
pub fn is_zombie(pid: u32) -> bool {
    status_field(pid, "State:").is_some_and(|s| s.first().is_some_and(|c| c == "Z"))
}

/// `who (uid N)`.
fn who(uid: u32) -> String {
    format!("{} (uid {uid})", user_name(uid))
}

/// The command line to suggest instead: the same command as the process's user, or as root.
fn instead(pid: u32, uid: u32) -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = format!("mallocshim {}", args.join(" "));
    let _ = pid;
    if uid == 0 {
        format!("run it as root: `sudo {cmd}`")
    } else {
        format!("run it as root or as the process's user: `sudo {cmd}` or `sudo -u {} {cmd}`", user_name(uid))
    }
}

/// Why reading /proc/PID/`file` was refused (EACCES/EPERM), with what to run instead.
pub fn proc_refused(pid: u32, file: &str) -> String {
    let me = unsafe_geteuid();
    let Some(uid) = euid(pid) else {
        return format!("cannot read /proc/{pid}/{file}: permission denied");
    };
    let owner = std::fs::metadata(format!("/proc/{pid}/{file}")).map(|m| m.uid()).ok();
    if uid == me && owner.is_some_and(|o| o != uid) {
        // Same user, yet the files are root's: the process changed its user at start
        // (mysqld --user=mysql) and the kernel made it non-dumpable.
        return format!(
            "cannot read /proc/{pid}/{file}: process {pid} runs as you, {}, but is not dumpable (it changed its user at start, \
             as mysqld --user=mysql does, so the kernel gives its /proc files to root): {} (mariadbd started with --core-file \
             stays dumpable)",
            who(uid),
            instead(pid, 0)
        );
    }
    format!(
        "cannot read /proc/{pid}/{file}: process {pid} runs as {}, you are {}; only root or its own user may read it: {}",
        who(uid),
        who(me),
        instead(pid, uid)
    )
}

/// Why a connection to the channel socket in `dir` was refused.
pub fn channel_refused(pid: u32, dir: &str, err: &std::io::Error) -> String {
    let me = unsafe_geteuid();
    let uid = euid(pid).unwrap_or(u32::MAX);
    let mode = std::fs::metadata(dir)
        .map(|m| format!("owned by {}, mode {:04o}", who(m.uid()), m.mode() & 0o7777))
        .unwrap_or_else(|e| format!("not readable: {e}"));
    format!(
        "cannot reach the control channel of process {pid} in {dir} ({err}): the directory is {mode}; the process runs as {}, you \
         are {}; only root and the process's own user may connect: {}",
        who(uid),
        who(me),
        instead(pid, uid)
    )
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A process with no shim mapped and none named in its LD_PRELOAD.
pub fn not_under_shim(pid: u32) -> String {
    format!("process {pid} is not running under the shim (no libmallocshim in /proc/{pid}/maps)")
}

/// For a process that shows no shim in its maps: the zombie, the shim that did not load, or
/// None (not under the shim at all).
pub fn no_shim(pid: u32, maps: &str) -> Option<String> {
    if is_zombie(pid) {
        let parent = status_field(pid, "PPid:").and_then(|v| v.first().cloned()).unwrap_or_default();
        return Some(format!(
            "process {pid} is a zombie: it has exited and its parent (pid {parent}) has not reaped it; there is nothing left to ask"
        ));
    }
    let preload = environ_var(pid, "LD_PRELOAD")?;
    let named = preload.split([' ', ':']).find(|p| p.contains("libmallocshim"))?.to_string();
    // ld.so maps the preloads before the program's own libraries: with libc mapped, the
    // loading is over.
    if !maps.lines().any(|l| l.contains("/libc.so") || l.contains("/libc-")) {
        return None;
    }
    let seen = if named.contains('/') { format!("/proc/{pid}/root{named}") } else { named.clone() };
    let why = match std::fs::metadata(&seen) {
        Err(e) if named.contains('/') => format!("{named}: {e}"),
        Err(_) => format!("{named} is a bare name: the loader looks for it in its library path only"),
        Ok(_) if secure(pid) => "a setuid or setgid program: the loader ignores LD_PRELOAD paths with a slash there".into(),
        Ok(_) => "the loader refused the file (a wrong architecture, or its own error, on the process's stderr at start)".into(),
    };
    Some(format!(
        "process {pid} names the shim in its LD_PRELOAD ({named}) but did not load it (no libmallocshim in /proc/{pid}/maps): {why}"
    ))
}

/// /proc/PID/maps; a refusal says which rule refused it and what to run instead.
pub fn read_maps(pid: u32) -> Result<String, crate::dump_cmd::Fail> {
    let fail = |msg| crate::dump_cmd::Fail { code: 1, msg };
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(m) => Ok(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(fail(format!("no such process: {pid}"))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(fail(proc_refused(pid, "maps"))),
        Err(e) => Err(fail(format!("cannot read /proc/{pid}/maps: {e}"))),
    }
}

/// Whether the process runs with differing real and effective ids (secure execution).
fn secure(pid: u32) -> bool {
    let differs = |f: &str| status_field(pid, f).is_some_and(|v| v.first() != v.get(1));
    differs("Uid:") || differs("Gid:")
}

/// Why a live process under the shim wrote no dump, when it can be told: a process that never
/// started a thread has no shim thread (its `comm` is `mallocshim`, /proc/PID/task/*/comm) to
/// write one, and the process writes it itself at one of its next malloc-family calls or at
/// exit (`mallocshim dump --help`). Empty otherwise.
pub fn why_no_dump(pid: u32) -> &'static str {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return "" };
    let shim_thread = tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == "mallocshim"));
    if shim_thread {
        return "";
    }
    ": it has no mallocshim thread (it never started a thread), so the process writes the dump \
     itself at one of its next malloc-family calls or at its exit, and it made none meanwhile"
}
