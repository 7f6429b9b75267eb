//! `mallocshim diagnose PID` and `diagnose DUMP.json`, black-box, with no memlog: tests/c/diagnose.c
//! makes each of the four situations of tests/diagnose.rs under the shim (every backend, history
//! every 100 ms, periodic trims off) and then waits; `diagnose PID` asks it for a dump and must
//! name the verdict from the dump's memory history alone, and `diagnose` of that dump file must
//! say the same. Also under `MALLOCSHIM_PROFILE=off` (no per-op counts: the history's carried
//! rows cannot follow live bytes) and `MALLOCSHIM_SAMPLE=1 MALLOCSHIM_PROF_SAMPLE_BYTES=1`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Runs `mode` under `backend` with `env`, then `diagnose PID` and `diagnose DUMP.json`: (the
/// PID verdict's output, the dump's output, the dump).
fn run(
    mode: &str,
    backend: &str,
    tag: &str,
    env: &[(&str, &str)],
) -> (String, String, mallocshim_format::Dump) {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let dir = common::work_dir().join(format!("diagnose-history/{mode}-{backend}-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = common::preloaded(&prog, backend);
    c.arg(mode)
        .env("DIAGNOSE_WAIT", "1")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_HISTORY_MS", "100")
        .env("MALLOCSHIM_TRIM_INTERVAL_MS", "0")
        .env_remove("MALLOCSHIM_MEMLOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("done {mode}"), "{mode} under {backend} {tag}");
    let o = Command::new(common::cli_bin()).arg("diagnose").arg(child.id().to_string()).output().unwrap();
    let _ = child.stdin.take().unwrap().write_all(b"");
    let status = child.wait().unwrap();
    assert!(o.status.success(), "{mode} under {backend} {tag}: {}", common::describe(&o));
    assert!(status.success(), "{mode} under {backend} {tag}: the program exited with {status}");
    let by_pid = common::stdout(&o);
    let from = by_pid.lines().find_map(|l| l.strip_prefix("from: memory history of ")).expect(&by_pid);
    let json = PathBuf::from(from.split(" (pid").next().unwrap());
    let o = Command::new(common::cli_bin()).arg("diagnose").arg(&json).output().unwrap();
    assert!(o.status.success(), "{}", common::describe(&o));
    let dump = mallocshim_format::Dump::read(&json).unwrap();
    (by_pid, common::stdout(&o), dump)
}

/// `mode` under every backend (and each setting in `matrix`) names `verdict` by pid and by dump.
fn check(mode: &str, verdict: &str, matrix: &[(&str, &[(&str, &str)])]) {
    check_on(&common::BACKENDS, mode, verdict, matrix);
}

fn check_on(backends: &[&'static str], mode: &str, verdict: &str, matrix: &[(&str, &[(&str, &str)])]) {
    std::thread::scope(|s| {
        let mut runs = Vec::new();
        for &b in backends {
            for (tag, env) in matrix {
                runs.push((b, *tag, s.spawn(move || run(mode, b, tag, env))));
            }
        }
        for (b, tag, h) in runs {
            let (by_pid, by_dump, dump) = h.join().unwrap();
            let want = format!("verdict: {verdict}");
            assert_eq!(by_pid.lines().next(), Some(want.as_str()), "{mode} {b} {tag} by pid:\n{by_pid}");
            assert_eq!(by_dump.lines().next(), Some(want.as_str()), "{mode} {b} {tag} by dump:\n{by_dump}");
            let h = &dump.history;
            assert_eq!((h.period_ms, h.capacity, h.ring_bytes), (100, 3600, 748_800), "{mode} {b} {tag}");
            assert!(h.rows.len() >= 20, "{mode} {b} {tag}: {} rows", h.rows.len());
            eprintln!("{mode} under {b} ({tag}), {} history rows:\n{by_pid}", h.rows.len());
        }
    });
}

const DEFAULTS: (&str, &[(&str, &str)]) = ("defaults", &[]);
const PROFILE_OFF: (&str, &[(&str, &str)]) = ("profile-off", &[("MALLOCSHIM_PROFILE", "off")]);
const SAMPLE_ALL: (&str, &[(&str, &str)]) =
    ("sample-1", &[("MALLOCSHIM_SAMPLE", "1"), ("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]);

#[test]
fn retained_by_the_allocator_from_the_history() {
    check("retained", "retained by the allocator", &[DEFAULTS]);
    check_on(&["glibc", "jemalloc", "tcmalloc"], "retained", "retained by the allocator", &[PROFILE_OFF]);
}

/// mimalloc counts no live bytes, and with profiling off the shim counts none either: the account
/// counts everything mimalloc holds resident as live (docs/memory-account.md), so no verdict can
/// see memory retained; the history says so, row by row (live = allocator resident, free 0).
#[test]
fn mimalloc_without_profiling_has_no_live_figure() {
    let (_, _, dump) = run("retained", "mimalloc", "profile-off", PROFILE_OFF.1);
    let last = dump.history.mem_rows().pop().unwrap();
    assert_eq!(last.live_bytes, last.allocator_resident_bytes, "{last:?}");
    assert_eq!(last.allocator_free_bytes, Some(0), "{last:?}");
}

#[test]
fn live_heap_growth_from_the_history() {
    check("growth", "live heap growth", &[DEFAULTS, SAMPLE_ALL]);
}

#[test]
fn outside_malloc_from_the_history() {
    check("outside", "outside malloc", &[DEFAULTS, PROFILE_OFF]);
}

#[test]
fn steady_from_the_history() {
    check("steady", "steady", &[DEFAULTS]);
}

/// A dump of a process with the history off has none, and `diagnose` of it says so in one line
/// (exit 2).
#[test]
fn no_history_is_one_line() {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let dir = common::work_dir().join("diagnose-history/off");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = common::preloaded(&prog, "glibc");
    c.arg("steady")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_HISTORY_MS", "0")
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1");
    common::run_ok(c, "steady, history off");
    let json = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a dump at exit");
    assert!(mallocshim_format::Dump::read(&json).unwrap().history.is_empty());
    let o = Command::new(common::cli_bin()).arg("diagnose").arg(&json).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", common::describe(&o));
    let err = common::stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no memory history"), "{err}");
}
