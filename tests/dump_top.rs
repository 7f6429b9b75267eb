//! `mallocshim dump PID`, `mallocshim diff` of two dumps of one process (the interval view) and
//! `mallocshim top PID`, black-box: tests/c/busy.c runs under the shim (every backend), the
//! command signals exactly that pid, and what it prints is checked against the dump files and
//! their exact counts. Also its one-line errors: no such process, a process not under the
//! shim (left unsignalled), and no new dump within --timeout (with its reason when the process
//! has no shim thread: a single-threaded `sleep`).

mod common;

use common::{cc, cli_bin, describe, matrix, plain, preloaded, stderr, stdout, work_dir, BACKENDS};
use mallocshim_format::Dump;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("dumptop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

fn cli(args: &[&str]) -> Output {
    Command::new(cli_bin()).args(args).output().expect("run mallocshim")
}

/// busy.c under the shim with its dumps in `dir`; returns the child, its stdin (drop to end
/// it) and its pid once its worker runs.
fn start_busy(backend: &str, env: &[(&str, &str)], dir: &Path) -> (Child, ChildStdin, u32) {
    let prog = cc("busy.c", "busy", &[]);
    let mut cmd = preloaded(prog, backend);
    cmd.envs(env.iter().copied())
        .env("MALLOCSHIM_DUMP_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("start busy under the shim");
    let stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).expect("read ready line");
    assert!(line.starts_with("ready pid="), "busy printed {line:?}");
    let pid = child.id();
    (child, stdin, pid)
}

fn finish(mut child: Child, stdin: ChildStdin) {
    drop(stdin);
    let st = child.wait().expect("wait for busy");
    assert!(st.success(), "busy under the shim: {st:?}");
}

/// `mallocshim dump PID`: exit 0, the new files' paths; returns them.
fn dump_ok(pid: u32) -> Vec<PathBuf> {
    let o = cli(&["dump", &pid.to_string()]);
    assert!(o.status.success(), "mallocshim dump {pid}: {:?}\n{}", o.status, stderr(&o));
    stdout(&o).lines().map(PathBuf::from).collect()
}

fn seq_ext(p: &Path) -> (u32, u64, String) {
    let n = p.file_name().unwrap().to_str().unwrap();
    let v: Vec<&str> = n.split('.').collect();
    assert_eq!((v.len(), v[0]), (4, "mallocshim"), "{n}");
    (v[1].parse().unwrap(), v[2].parse().unwrap(), v[3].to_string())
}

fn cells<'a>(out: &'a str, op: &str, size: &str) -> Vec<&'a str> {
    cells_n(out, op, size, 7)
}

/// A row of `n` cells starting with `op` and `size` (top's size-class rows have 6: op, size,
/// calls/s, sampled, p50, p99).
fn cells_n<'a>(out: &'a str, op: &str, size: &str, n: usize) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.len() == n && c[0] == op && c[1] == size)
        .unwrap_or_else(|| panic!("no {op} {size} row in:\n{out}"))
}

/// With every format of the format table asked for (`pprof` included, whose files end in
/// `.pb.gz`), `mallocshim dump` waits for and prints one file of each, json first.
#[test]
fn dump_prints_a_file_of_every_format_in_the_table() {
    let every: Vec<&str> = mallocshim_format::DUMP_FORMATS.iter().map(|f| f.name).collect();
    let every = every.join(",");
    for backend in BACKENDS {
        let dir = scratch(&format!("formats-{backend}"));
        let (child, stdin, pid) = start_busy(backend, &[("MALLOCSHIM_DUMP_FORMATS", &every)], &dir);
        let files = dump_ok(pid);
        finish(child, stdin);
        let names: Vec<String> =
            files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
        let seq = seq_ext(&files[0]).1;
        let mut want: Vec<String> = mallocshim_format::DUMP_FORMATS
            .iter()
            .map(|f| mallocshim_format::dump_file_name(pid, seq, f.ext))
            .collect();
        want[1..].sort();
        assert_eq!(names, want, "{backend}: every format's file, json first");
        assert!(files.iter().all(|p| p.starts_with(&dir) && p.is_file()), "{backend}: {files:?}");
    }
}

#[test]
fn dump_then_interval_diff_under_every_backend() {
    for backend in BACKENDS {
        let dir = scratch(&format!("dump-{backend}"));
        // History every 10 ms: the rows `diagnose` reads from the second dump below.
        let (child, stdin, pid) = start_busy(backend, &[("MALLOCSHIM_HISTORY_MS", "10")], &dir);
        // The directory comes from the process's own environment (no --dir).
        let first = dump_ok(pid);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let second = dump_ok(pid);
        finish(child, stdin);

        for files in [&first, &second] {
            let exts: Vec<String> = files.iter().map(|p| seq_ext(p).2).collect();
            assert_eq!(exts, ["json", "prom"], "{backend}: {files:?}");
            for p in files.iter() {
                assert!(p.starts_with(&dir) && p.is_file(), "{backend}: {}", p.display());
                assert_eq!(seq_ext(p).0, pid, "{backend}: {}", p.display());
            }
        }
        assert!(seq_ext(&second[0]).1 > seq_ext(&first[0]).1, "{backend}: {first:?} then {second:?}");

        // diff of the two: the interval, from the exact counts of the two dumps.
        let (a, b) = (Dump::read(&first[0]).unwrap(), Dump::read(&second[0]).unwrap());
        let o = cli(&["diff", first[0].to_str().unwrap(), second[0].to_str().unwrap()]);
        assert!(o.status.success(), "{backend}: diff: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(&format!("mallocshim interval: process {pid} ({backend})")), "{out}");
        let elapsed = (b.unix_time_ms - a.unix_time_ms) as f64 / 1000.0;
        assert!(out.contains(&format!("{elapsed:.3}s")), "{backend}: elapsed {elapsed}:\n{out}");
        let row = |d: &Dump| {
            d.size_classes.iter().find(|r| r.op == "malloc" && r.max_bytes == Some(64)).unwrap().count
        };
        let calls = row(&b) - row(&a);
        assert!(calls > 0, "{backend}: busy made no malloc(48) between the dumps");
        let c = cells(&out, "malloc", "<=64");
        assert_eq!(c[2], calls.to_string(), "{backend}:\n{out}");
        let rate: f64 = c[3].parse().unwrap();
        assert!((rate - calls as f64 / elapsed).abs() <= 1.0, "{backend}: {rate} calls/s:\n{out}");
        // Profiling is on: the interval has samples and percentiles from the subtracted buckets.
        assert!(c[4].parse::<u64>().unwrap() > 0, "{backend}: {c:?}");
        let (p50, p99): (u64, u64) = (c[5].parse().unwrap(), c[6].parse().unwrap());
        assert!(p50 > 0 && p50 <= p99, "{backend}: {c:?}");
        assert!(b.latency_buckets.bucket_ns.contains(&p50), "{backend}: p50 {p50} is no bucket value");
        // The worker thread has its row.
        assert!(
            out.lines().any(|l| l.contains("malloc")
                && l.split_whitespace().next() != Some("malloc")
                && l.split_whitespace().next().is_some_and(|t| t.parse::<u32>().is_ok_and(|t| t != pid))),
            "{backend}: no thread row:\n{out}"
        );
        // The same two in reverse order are the same interval.
        let o = cli(&["diff", second[0].to_str().unwrap(), first[0].to_str().unwrap()]);
        assert_eq!(cells(&stdout(&o), "malloc", "<=64")[2], calls.to_string());
        // diagnose on the two names their times on the wall clock, and how far apart, never in
        // epoch milliseconds.
        let o = cli(&["diagnose", first[0].to_str().unwrap(), second[0].to_str().unwrap()]);
        let out = stdout(&o);
        let line =
            out.lines().find(|l| l.starts_with("dumps: pid ")).unwrap_or_else(|| panic!("{}", describe(&o)));
        let apart = format!("({:.1} s apart)", elapsed);
        assert!(line.matches(" UTC").count() == 2 && line.ends_with(&apart), "{backend}: {apart}: {line}");
        assert!(!line.contains(&a.unix_time_ms.to_string()), "{backend}: {line}");
    }
}

#[test]
fn dump_errors_are_one_line_and_signal_nothing_else() {
    // No such process: a pid above pid_max never exists.
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let o = cli(&["dump", &(max + 1).to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim(), format!("mallocshim dump: no such process: {}", max + 1));

    // Not under the shim: refused, and not signalled (SIGUSR1 would kill sleep).
    let mut sleep = plain("sleep").arg("30").spawn().expect("start sleep");
    let o = cli(&["dump", &sleep.id().to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.starts_with("mallocshim dump: process ") && e.contains("not running under the shim"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(sleep.try_wait().unwrap().is_none(), "sleep was signalled");
    sleep.kill().unwrap();
    let _ = sleep.wait();

    // No new dump where we look: a timeout, exit 1.
    let dir = scratch("timeout");
    let empty = scratch("elsewhere");
    let (child, stdin, pid) = start_busy("glibc", &[], &dir);
    let o = cli(&["dump", &pid.to_string(), "--dir", empty.to_str().unwrap(), "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no new dump of process") && stderr(&o).contains("within 1s"),
        "{}",
        stderr(&o)
    );
    // busy.c has the shim's thread: the timeout gives no reason it cannot know.
    assert!(!stderr(&o).contains("no mallocshim thread"), "{}", stderr(&o));
    // A single-threaded program asleep (sleep(1) under the shim) has no shim thread: nothing
    // writes the dump until its next malloc-family call, and the message says so.
    let mut lone = preloaded("sleep", "glibc").arg("30").env("MALLOCSHIM_DUMP_DIR", &dir).spawn().unwrap();
    let lone_pid = lone.id().to_string();
    let t0 = std::time::Instant::now();
    // Until the shim has caught the dump signal (SIGUSR1), it would end sleep.
    while !common::storm::catches_usr1(lone.id() as i32) {
        assert!(t0.elapsed().as_secs() < 10, "sleep never caught SIGUSR1 under the shim");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = cli(&["dump", &lone_pid, "--timeout", "1"]);
    let _ = lone.kill();
    let _ = lone.wait();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.starts_with(&format!("mallocshim dump: no new dump of process {lone_pid} in "))
            && e.contains("within 1s: it has no mallocshim thread (it never started a thread)")
            && e.contains("at one of its next malloc-family calls or at its exit"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    // Bad arguments: exit 2.
    let o = cli(&["dump", &pid.to_string(), "--timeout", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = cli(&["dump", "notapid"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    finish(child, stdin);
}

/// Under every backend and profiling setting; with profiling off nothing is counted, and the
/// view says so above its memory rows.
#[test]
fn top_shows_intervals_by_op_class_and_thread() {
    for (backend, setting, env) in matrix() {
        let dir = scratch(&format!("top-{backend}-{}", setting.replace([' ', '='], "_")));
        let (child, stdin, pid) = start_busy(backend, env, &dir);
        let o = cli(&["top", &pid.to_string(), "--interval", "0.5", "--count", "2"]);
        finish(child, stdin);
        let what = format!("top under {backend}, {setting}");
        assert!(o.status.success(), "{what}: {:?}\n{}", o.status, stderr(&o));
        let out = stdout(&o);
        // Two views, plain text (stdout is a pipe: no screen clearing).
        assert_eq!(out.matches("by op and size class, busiest first").count(), 2, "{what}:\n{out}");
        assert!(!out.contains('\x1b'), "{what}: escape codes on a pipe:\n{out}");
        assert!(out.contains(&format!("backend {backend} pid {pid}")), "{what}:\n{out}");
        assert!(out.contains("by live thread"), "{what}:\n{out}");
        assert!(out.contains("RSS "), "{what}: no memory line:\n{out}");
        assert!(out.lines().all(|l| l.chars().count() <= 80), "{what}: wider than 80 columns:\n{out}");
        if setting == "MALLOCSHIM_PROFILE=off" {
            // Nothing is counted: the view says so instead of showing empty tables unexplained.
            assert_eq!(out.matches("profiling off (MALLOCSHIM_PROFILE=off)").count(), 2, "{what}:\n{out}");
            assert!(!out.lines().any(|l| l.starts_with("malloc ")), "{what}:\n{out}");
        } else {
            let c = cells_n(&out, "malloc", "<=64", 6);
            assert!(c[2].parse::<u64>().unwrap() > 0, "{what}: {c:?}");
            assert!(c[4].parse::<u64>().unwrap() > 0 && c[5].parse::<u64>().unwrap() > 0, "{what}: {c:?}");
            let c = cells_n(&out, "calloc", "<=4K", 6);
            assert!(c[2].parse::<u64>().unwrap() > 0, "{what}: {c:?}");
        }
        // top read the dumps over the control channel: no file in the process's directory.
        let jsons = mallocshim_format::dumps_of(&dir, pid, "json").unwrap();
        assert!(jsons.is_empty(), "{what}: top left {jsons:?}");
    }
    let o = cli(&["top", "1", "--count", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
