//! Issue 37, item 1: a recording never corrupts or replaces another. Black box, with
//! tests/c/record_calls.c under `MALLOCSHIM_RECORD`: wrappers preloaded with the same variable
//! (`timeout`, which forks the program; `sh -c` that forks it (and ends with `_exit`) or execs it; `mysqld_safe
//! --malloc-lib`, which starts mariadbd through `nohup`), one program after another into one
//! path, and a program killed mid-window. Every trace left reads whole (or, cut short, up to its
//! last whole block, which `mallocshim replay` replays and names), and no `.part` is left by a
//! process that ended normally. On the old shim two processes wrote into one file (replay:
//! "trace corrupt: compressed data") and a second run replaced the first.

mod common;

use common::*;
use mallocshim_format::trace::{self, EndReason};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn prog() -> PathBuf {
    cc("record_calls.c", "record_calls", &[])
}

/// A fresh directory for one case's traces.
fn dir(name: &str) -> PathBuf {
    let d = work_dir().join(format!("recpaths.{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The files in `d`, sorted.
fn files(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// Every file in `d` is a whole trace (none is a `.part`): (path, header pid, events).
fn whole_traces(d: &Path, what: &str) -> Vec<(PathBuf, u32, usize)> {
    files(d)
        .into_iter()
        .map(|p| {
            assert!(!p.to_string_lossy().ends_with(".part"), "{what}: {} left behind", p.display());
            let (h, _, ev, f) =
                trace::read_file(&p).unwrap_or_else(|e| panic!("{what}: {}: {e}", p.display()));
            assert_ne!(f.ended, EndReason::Error, "{what}: {}", p.display());
            (p, h.pid, ev.len())
        })
        .collect()
}

/// A wrapper preloaded with the shim and `MALLOCSHIM_RECORD`, around the program: `timeout`
/// that forks it leaves two whole traces (its own at PATH, the program's at PATH.<pid>, named in
/// one line); `sh -c 'PROG; true'` the program's at PATH.<pid> and its own cut short at
/// PATH.part (dash ends with `_exit`, which runs no exit handler: the shim cannot close that
/// trace, and it still reads up to its last whole block); `sh -c 'exec PROG'` one trace at PATH
/// (the same pid's `.part` is reused). Every backend, profiling on and every call timed.
#[test]
fn wrappers_under_ld_preload_every_backend() {
    let p = prog().display().to_string();
    // (name, argv, whole traces, a cut-short .part left)
    let cases: [(&str, Vec<String>, usize, bool); 3] = [
        ("timeout", vec!["timeout".into(), "60".into(), p.clone(), "busy".into(), "300".into()], 2, false),
        ("sh-fork", vec!["sh".into(), "-c".into(), format!("{p} busy 300; true")], 1, true),
        ("sh-exec", vec!["sh".into(), "-c".into(), format!("exec {p} busy 300")], 1, false),
    ];
    for b in BACKENDS {
        for (sname, env) in [("default", &[][..]), ("SAMPLE=1", &[("MALLOCSHIM_SAMPLE", "1")][..])] {
            for (name, argv, n, part) in &cases {
                let what = format!("{b}, {sname}, {name}");
                let d = dir(&format!("{name}.{b}.{sname}"));
                let file = d.join("t.mst");
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]).env("LD_PRELOAD", shim()).env("MALLOCSHIM_BACKEND", b);
                c.envs(env.iter().copied()).env("MALLOCSHIM_RECORD", &file).stdin(Stdio::null());
                let o = c.output().unwrap();
                assert!(o.status.success(), "{what}: {}", describe(&o));
                let part_file = d.join("t.mst.part");
                if *part {
                    let r = trace::TraceReader::new(std::fs::File::open(&part_file).unwrap());
                    assert!(r.is_ok(), "{what}: the wrapper's cut-short trace has no header");
                    std::fs::remove_file(&part_file).unwrap();
                }
                let t = whole_traces(&d, &what);
                assert_eq!(t.len(), *n, "{what}: {t:?}\n{}", describe(&o));
                // The program's trace (its busy threads: thousands of calls) is one of them.
                assert!(t.iter().any(|(_, _, ev)| *ev > 1000), "{what}: {t:?}");
                let taken: Vec<String> =
                    shim_lines(&o).into_iter().filter(|l| l.contains("is taken")).collect();
                let alts: Vec<_> = t.iter().filter(|(f, _, _)| f != &file).collect();
                assert_eq!(taken.len(), alts.len(), "{what}: {}", describe(&o));
                for (alt, pid, _) in alts {
                    assert_eq!(alt, &PathBuf::from(format!("{}.{pid}", file.display())), "{what}");
                    assert!(
                        taken.iter().any(|l| l.contains(&alt.display().to_string())),
                        "{what}: {taken:?}"
                    );
                }
                if !*part {
                    assert_eq!(t[0].0, file, "{what}: no trace at the path asked for");
                }
            }
        }
    }
}

/// One program after another into one path: the first trace stays as it was, the second goes
/// to PATH.<pid>, said in one line.
#[test]
fn a_second_run_does_not_replace_the_first() {
    let d = dir("twice");
    let file = d.join("t.mst");
    let run = || {
        let mut c = preloaded(prog(), "glibc");
        c.env("MALLOCSHIM_RECORD", &file).args(["busy", "200"]);
        c.spawn().unwrap().wait_with_output().unwrap();
        let mut c = preloaded(prog(), "glibc");
        c.env("MALLOCSHIM_RECORD", &file).args(["busy", "200"]).stderr(Stdio::piped());
        let child = c.spawn().unwrap();
        let pid = child.id();
        (child.wait_with_output().unwrap(), pid)
    };
    let (o, pid) = run();
    assert!(o.status.success(), "{}", describe(&o));
    let t = whole_traces(&d, "twice");
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!(t[1].0, PathBuf::from(format!("{}.{pid}", file.display())));
    assert_ne!(t[0].1, pid, "the first trace was replaced by the second run's");
    let lines = shim_lines(&o);
    assert!(lines.len() == 1 && lines[0].contains("is taken (an existing file)"), "{lines:?}");
}

/// A program killed (SIGKILL) mid-window leaves `PATH.part`, which replays up to its last
/// whole block, saying where it ends; the next recording into the path does not touch it.
#[test]
fn killed_mid_window_replays_up_to_its_last_block() {
    let d = dir("killed");
    let file = d.join("t.mst");
    let mut c = preloaded(prog(), "glibc");
    c.env("MALLOCSHIM_RECORD", &file).args(["busy", "20000"]).stdout(Stdio::null());
    let mut child = c.spawn().unwrap();
    // The trace is flushed (a whole zstd block) every second.
    std::thread::sleep(Duration::from_millis(2600));
    child.kill().unwrap();
    child.wait().unwrap();
    let part = d.join("t.mst.part");
    assert_eq!(files(&d), vec![part.clone()], "a killed recording leaves only its .part");
    let o = Command::new(cli_bin()).args(["replay", "--backends", "glibc"]).arg(&part).output().unwrap();
    assert!(o.status.success(), "replay of a cut trace: {}", describe(&o));
    let err = stderr(&o);
    assert!(err.contains("cut short after ") && err.contains("replaying up to there"), "{}", describe(&o));
    let before = std::fs::read(&part).unwrap();
    // The next recording: the path is taken by the cut-short trace of another process.
    let mut c = preloaded(prog(), "glibc");
    c.env("MALLOCSHIM_RECORD", &file).args(["busy", "100"]);
    let o = run_ok(c, "after the kill");
    let lines = shim_lines(&o);
    assert!(lines.len() == 1 && lines[0].contains("a recording cut short"), "{}", describe(&o));
    assert_eq!(std::fs::read(&part).unwrap(), before, "the cut-short trace was changed");
    assert_eq!(files(&d).len(), 2, "{:?}", files(&d));
}

/// `mysqld_safe --malloc-lib=<the shim>` with `MALLOCSHIM_RECORD`: every process it preloads
/// records (nohup execs mariadbd: one pid, one trace); the traces are whole, mariadbd's holds
/// the server's calls, and mariadbd shuts down cleanly.
#[test]
fn mysqld_safe_with_a_recording() {
    use mallocshim_mariadb::{clean_env, Instance, Options};
    let safe = require("mysqld_safe");
    let inst = Instance::create(Options::default()).expect("a throwaway datadir");
    let d = dir("mysqld_safe");
    let file = d.join("m.mst");
    let mut c = Command::new(&safe);
    clean_env(&mut c);
    c.arg("--no-defaults")
        .arg(format!("--malloc-lib={}", shim().display()))
        .args(inst.mariadbd_opts().iter().filter(|o| *o != "--no-defaults"))
        .arg(format!("--log-error={}", inst.dir().join("safe.err").display()))
        .arg(format!("--pid-file={}", inst.dir().join("mysqld.pid").display()))
        .env("MALLOCSHIM_RECORD", &file)
        .env("MALLOCSHIM_RECORD_SECONDS", "3")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let admin = |what: &str| {
        let mut a = Command::new(&inst.tools.admin);
        clean_env(&mut a);
        a.args(["--no-defaults", "--user=root", "--connect-timeout=5"])
            .arg(format!("--socket={}", inst.socket.display()))
            .arg(what)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let t0 = std::time::Instant::now();
    while !admin("ping") {
        if t0.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("mariadbd under mysqld_safe did not answer ping");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // The 3 s window ends while the server runs: its trace is renamed then.
    std::thread::sleep(Duration::from_secs(5));
    let pid: u32 = std::fs::read_to_string(inst.dir().join("mysqld.pid")).unwrap().trim().parse().unwrap();
    assert!(admin("shutdown"), "mariadb-admin shutdown failed");
    let st = child.wait().unwrap();
    assert!(st.success(), "mysqld_safe: {st:?}");
    let t = whole_traces(&d, "mysqld_safe");
    let server =
        t.iter().find(|(_, p, _)| *p == pid).unwrap_or_else(|| panic!("no trace of mariadbd {pid}: {t:?}"));
    assert!(server.2 > 1000, "mariadbd's trace holds {} calls: {t:?}", server.2);
}
