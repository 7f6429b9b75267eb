//! The control channel never disturbs the process it serves (issue 37, item 4), black box: a
//! program whose threads sit in sleep, nanosleep, poll, select, read and pause, and whose main
//! thread sleeps (tests/c/blocking_calls.c), under the shim for every backend and profiling
//! setting, while `mallocshim get`, `trim`, `set`, `dump`, `diagnose`, `top` and `record` act on
//! it. The shim's thread listens from its start, so none of them sends the process a signal:
//! every blocking call must run its whole time. Before, each command's attach signal made the
//! main thread's sleep return early. Also: the next client removes the socket a killed process
//! left behind, and a socket's name appears only once it listens (with listen made slow).

mod common;

use common::*;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the program's calls block, s: longer than every command below takes together on a
/// loaded 2-core machine.
const SECONDS: &str = "30";

/// A scratch directory of this test, removed first.
fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("ctlq-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts blocking_calls under the shim with its channel and dumps in `dir`; returns the child
/// (stdout still to read) and its pid once it printed "ready".
fn start(
    backend: &str,
    env: &[(&str, &str)],
    dir: &Path,
) -> (Child, BufReader<std::process::ChildStdout>, u32) {
    let prog = cc("blocking_calls.c", "blocking_calls", &[]);
    let mut c = preloaded(prog, backend);
    c.arg(SECONDS).envs(env.iter().copied());
    c.env("MALLOCSHIM_CTL_DIR", dir.join("ctl")).env("MALLOCSHIM_DUMP_DIR", dir);
    // History rows every 100 ms: `diagnose PID` wants at least 3.
    c.env("MALLOCSHIM_HISTORY_MS", "100");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("start blocking_calls");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let pid = ready_pid(&mut out, "blocking_calls");
    (child, out, pid)
}

/// Waits (at most 5 s) for the process's socket: the shim's thread listens from its start.
fn wait_socket(sock: &Path) {
    let until = Instant::now() + Duration::from_secs(5);
    while !sock.exists() {
        assert!(
            Instant::now() < until,
            "no socket {} 5 s after start: the channel is not open",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs every channel command on `pid`; panics with the command's output when one fails.
fn every_command(pid: u32, dir: &Path, what: &str) {
    let p = pid.to_string();
    let trace = dir.join("w.mst").display().to_string();
    let cmds: [&[&str]; 7] = [
        &["get", &p],
        &["trim", &p],
        &["set", &p, "TRIM_INTERVAL_MS=5000"],
        &["dump", &p],
        &["top", &p, "--count", "1", "--interval", "0.2"],
        &["record", &p, "--seconds", "1", "--out", &trace],
        &["diagnose", &p],
    ];
    for args in cmds {
        let o = Command::new(cli_bin()).args(args).stdin(Stdio::null()).output().expect("run mallocshim");
        assert!(o.status.success(), "{what}: mallocshim {}: {}", args.join(" "), describe(&o));
    }
}

/// (backend, setting name, its environment).
type Setting = (&'static str, &'static str, &'static [(&'static str, &'static str)]);

/// Every command against the program, every backend and profiling setting (and every
/// allocation sampled): no blocking call of the program returns early.
#[test]
fn commands_interrupt_no_blocking_call() {
    cli_bin();
    let mut settings: Vec<Setting> = matrix().collect();
    for b in BACKENDS {
        settings.push((b, "MALLOCSHIM_PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]));
    }
    // All at once: each program idles; the commands are what takes the machine.
    let runs: Vec<_> = settings
        .into_iter()
        .enumerate()
        .map(|(i, (backend, name, env))| {
            let what = format!("{backend}, {name}");
            let dir = scratch(&format!("{backend}-{i}"));
            std::thread::spawn(move || {
                let (mut child, mut out, pid) = start(backend, env, &dir);
                wait_socket(&dir.join("ctl").join(format!("{pid}.sock")));
                let t0 = Instant::now();
                every_command(pid, &dir, &what);
                let took = t0.elapsed();
                let mut rest = String::new();
                out.read_to_string(&mut rest).unwrap();
                let st = child.wait().unwrap();
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(st.success() && rest.contains("done"), "{what}: {st:?}\n{rest}\n{err}");
                assert!(
                    took < Duration::from_secs(SECONDS.parse().unwrap()),
                    "{what}: the commands took {took:?}, longer than the program blocks: nothing was tested"
                );
                let early: Vec<&str> = rest.lines().filter(|l| l.ends_with(" interrupted")).collect();
                assert!(
                    early.is_empty(),
                    "{what}: a command interrupted the program's calls: {early:?}\n{err}"
                );
                assert_eq!(rest.lines().filter(|l| l.ends_with(" ok")).count(), 7, "{what}: {rest}");
            })
        })
        .collect();
    let failed = runs.into_iter().map(|r| r.join()).filter(Result::is_err).count();
    assert_eq!(failed, 0, "{failed} runs failed (their panics are above)");
}

/// The test fails when it should: a plain dump signal (`kill -USR1`, which still dumps) does cut
/// the main thread's sleep short, as signal(7) says of a caught signal.
#[test]
fn a_plain_dump_signal_does_interrupt() {
    let dir = scratch("signal");
    let (mut child, mut out, pid) = start("glibc", &[], &dir);
    wait_socket(&dir.join("ctl").join(format!("{pid}.sock")));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill of our own child with SIGUSR1, which it catches (the shim's dump signal).
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGUSR1) }, 0);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("main-sleep interrupted"), "the dump signal did not reach the main thread: {rest}");
}

/// A socket left by a killed process (SIGKILL: the shim removes its socket only at exit) is
/// removed by the next client that looks in the directory; the live process's stays.
#[test]
fn next_client_removes_a_dead_process_socket() {
    let dir = scratch("stale");
    let (mut child, _out, pid) = start("glibc", &[], &dir);
    let ctl = dir.join("ctl");
    wait_socket(&ctl.join(format!("{pid}.sock")));
    // A dead pid: a child that has exited and been reaped.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let stale = ctl.join(format!("{dead_pid}.sock"));
    // And the name a process killed while it bound left (the shim listens, then renames).
    let binding = ctl.join(format!("{dead_pid}.sock.new"));
    for s in [&stale, &binding] {
        drop(std::os::unix::net::UnixListener::bind(s).expect("bind a stale socket"));
        assert!(s.exists());
    }
    let o = Command::new(cli_bin()).args(["get", &pid.to_string()]).output().unwrap();
    assert!(o.status.success(), "get: {}", describe(&o));
    for s in [&stale, &binding] {
        assert!(!s.exists(), "the dead process's socket {} is still there", s.display());
    }
    assert!(ctl.join(format!("{pid}.sock")).exists(), "the live process's socket was removed");
    let _ = child.kill();
    let _ = child.wait();
}

/// The socket's name appears only once it listens: with every listen(2) made 300 ms slow
/// (tests/c/slow_listen_lib.c, preloaded ahead of the shim), a client that connects the moment
/// the name appears is never refused. A refused connect is what made a client fall back to the
/// attach signal and cut the main thread's sleep short (CI, commands_interrupt_no_blocking_call)
/// when the shim bound the name, then listened.
#[test]
fn a_socket_listens_once_it_has_its_name() {
    let prog = cc("blocking_calls.c", "blocking_calls", &[]);
    let slow = cc("slow_listen_lib.c", "libslow_listen.so", &["-shared", "-fPIC", "-ldl"]);
    let runs: Vec<_> = BACKENDS
        .into_iter()
        .enumerate()
        .map(|(i, backend)| {
            let dir = scratch(&format!("name-{i}"));
            let mut c = preloaded(&prog, backend);
            c.env("LD_PRELOAD", format!("{}:{}", slow.display(), shim().display()));
            c.arg("2").env("MALLOCSHIM_CTL_DIR", dir.join("ctl")).env("MALLOCSHIM_DUMP_DIR", &dir);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            let child = c.spawn().expect("start blocking_calls");
            let sock = dir.join("ctl").join(format!("{}.sock", child.id()));
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(10);
                let mut refused = 0u32;
                let connected = loop {
                    match std::os::unix::net::UnixStream::connect(&sock) {
                        Ok(_) => break true,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(_) => refused += 1,
                    }
                    if Instant::now() > until {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                (backend, connected, refused)
            })
        })
        .collect();
    let got: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(got.iter().all(|g| g.1), "a socket never accepted a connection in 10 s: {got:?}");
    assert!(
        got.iter().all(|g| g.2 == 0),
        "connects refused by a socket that did not listen yet: (backend, connected, refused) {got:?}"
    );
}
