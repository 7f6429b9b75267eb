//! Errors that say which rule stops the caller and what to run instead (issue 38 item 5, issue
//! 37 item 5), black-box: `mallocshim get/dump/record PID` run as `nobody` (setpriv) on a process
//! of root's, and on one that changed its user to nobody at start (non-dumpable: its /proc files
//! are root's), name the uids, the non-dumpable state and the command to run instead; a zombie
//! that ran under the shim is named a zombie; a process whose LD_PRELOAD names a shim the
//! loader could not load is told so, with the loader's reason, not "did not catch its dump
//! signal". Needs root (to run as nobody) and setpriv: fails loudly without them.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

const NOBODY: &str = "65534";

fn start(mut c: Command) -> Child {
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready") || line.starts_with("pid="), "{line}");
    child
}

fn as_nobody(args: &[&str]) -> Output {
    // SAFETY: geteuid(2) has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test runs the command as nobody: it needs root");
    let setpriv = common::require("setpriv");
    let u = format!("--reuid={NOBODY}");
    let g = format!("--regid={NOBODY}");
    let mut c = Command::new(setpriv);
    c.args([u.as_str(), g.as_str(), "--clear-groups"]).arg(common::cli_bin()).args(args);
    c.output().unwrap()
}

fn stop(mut child: Child) {
    drop(child.stdin.take());
    let _ = child.wait();
}

#[test]
fn another_users_process_names_both_uids_and_what_to_run() {
    let prog = common::cc("drop_user.c", "drop_user", &["-pthread"]);
    let child = start(common::preloaded(&prog, "glibc"));
    let pid = child.id().to_string();
    for cmd in ["get", "dump", "trim"] {
        let o = as_nobody(&[cmd, &pid]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", common::describe(&o));
        assert!(err.contains("runs as root (uid 0), you are nobody (uid 65534)"), "{cmd}: {err}");
        assert!(err.contains(&format!("`sudo mallocshim {cmd} {pid}`")), "{cmd}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    stop(child);
}

#[test]
fn a_process_that_changed_its_user_is_named_not_dumpable() {
    let prog = common::cc("drop_user.c", "drop_user", &["-pthread"]);
    let mut c = common::preloaded(&prog, "glibc");
    c.arg(NOBODY);
    let child = start(c);
    let pid = child.id().to_string();
    let o = as_nobody(&["get", &pid]);
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{}", common::describe(&o));
    assert!(err.contains("runs as you, nobody (uid 65534), but is not dumpable"), "{err}");
    assert!(err.contains(&format!("`sudo mallocshim get {pid}`")) && err.contains("--core-file"), "{err}");
    stop(child);
}

#[test]
fn a_zombie_is_named_a_zombie() {
    let prog = common::cc("wait_stdin.c", "wait_stdin", &[]);
    let mut child = start(common::preloaded(&prog, "glibc"));
    let pid = child.id();
    drop(child.stdin.take());
    // Not reaped: it stays a zombie until child.wait() below.
    let t = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap().contains("State:\tZ") {
        assert!(t.elapsed().as_secs() < 10, "process {pid} did not exit");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for cmd in ["get", "dump"] {
        let o = Command::new(common::cli_bin()).args([cmd, &pid.to_string()]).output().unwrap();
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{}", common::describe(&o));
        assert!(err.contains(&format!("process {pid} is a zombie")), "{cmd}: {err}");
        assert!(!err.contains("not running under the shim"), "{err}");
    }
    let _ = child.wait();
}

#[test]
fn a_shim_that_did_not_load_is_said_so() {
    let prog = common::cc("wait_stdin.c", "wait_stdin", &[]);
    let mut c = common::plain(&prog);
    c.env("LD_PRELOAD", "/nonexistent/libmallocshim.so");
    let child = start(c);
    let pid = child.id().to_string();
    for cmd in ["get", "dump"] {
        let o = Command::new(common::cli_bin()).args([cmd, &pid, "--timeout", "2"]).output().unwrap();
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{}", common::describe(&o));
        assert!(
            err.contains(
                "names the shim in its LD_PRELOAD (/nonexistent/libmallocshim.so) but did not load it"
            ),
            "{err}"
        );
        assert!(err.contains("No such file"), "{err}");
        assert!(!err.contains("did not catch its dump signal"), "{err}");
    }
    stop(child);
}
