//! A program whose main thread ends with `pthread_exit` (after joining its threads, with
//! detached ones still running) ends when its last thread does, as under glibc alone: exit status
//! 0, its `atexit` handler run, within seconds — also in a forked child. Before the fix the shim's
//! own thread, counted by glibc as a live thread and blocking every signal, kept such a process
//! alive for ever (killable only by SIGKILL): `src/cold/last_thread.rs`. Every backend × every
//! setting of `common::SETTINGS` plus `MALLOCSHIM_PROF_SAMPLE_BYTES=1`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` and returns (exit code, stdout), or fails after `limit` (the process is killed).
fn run_within(mut cmd: Command, limit: Duration, what: &str) -> (i32, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            let mut out = String::new();
            use std::io::Read;
            child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read");
            return (st.code().unwrap_or(-1), out);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?} (killed): the shim kept the process alive");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn main_thread_pthread_exit_ends_the_process() {
    let prog = common::cc("main_pthread_exit.c", "main_pthread_exit", &[]);
    // glibc alone: the reference behaviour.
    let (code, out) = run_within(common::plain(&prog), Duration::from_secs(10), "glibc alone");
    assert_eq!(code, 0, "glibc alone: {out}");
    assert!(out.contains("atexit ran"), "glibc alone: {out}");
    let mut settings: Vec<(&str, &[(&str, &str)])> = common::SETTINGS.to_vec();
    settings.push(("MALLOCSHIM_PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]));
    for backend in common::BACKENDS {
        for (name, env) in &settings {
            for mode in ["", "fork"] {
                let what =
                    format!("{backend}, {name}, {}", if mode.is_empty() { "main" } else { "forked child" });
                let mut cmd = common::preloaded(&prog, backend);
                cmd.envs(env.iter().copied());
                if !mode.is_empty() {
                    cmd.arg(mode);
                }
                // The worker looks once a second; 10 s leaves room for a loaded machine.
                let (code, out) = run_within(cmd, Duration::from_secs(10), &what);
                assert_eq!(code, 0, "{what}: exit {code}, output: {out}");
                assert!(
                    out.contains("atexit ran"),
                    "{what}: the program's atexit handler did not run: {out}"
                );
                if !mode.is_empty() {
                    assert!(out.contains("child status 0"), "{what}: {out}");
                }
            }
        }
    }
}
