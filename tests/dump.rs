//! Dumps, black-box: C programs under `tests/c/` run with the shim preloaded, ask for dumps the
//! way a DBA or a server would (kill -USR1 to the process, `mallocshim_dump()`), and the files the
//! shim writes are parsed and checked — the JSON dump (read through the format crate's schema,
//! `mallocshim_format::Dump`, and checked on the wire as raw JSON), the Prometheus
//! text, the HdrHistogram log and the text table — together with the signal semantics servers rely
//! on (MariaDB's own SIGUSR1 handler, MySQL 8's sigwaitinfo thread, SIG_IGN, a program that never
//! touches the signal), bursts, thread churn, unusable dump directories and planted symlinks.
//! Every test runs under each backend. Parses with `serde_json` and `hdrhistogram`, which are the
//! package's own [dependencies] (integration tests may use them; keep them in [dev-dependencies]
//! if they ever leave [dependencies]).
//!
//! Long because: one test binary per feature: its eight numbered parts share the programs and the
//! format checkers.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SIGUSR1: i32 = 10;

/// Compiles `tests/c/<name>.c` (with `tests/c/dump_util.h`) once per test binary.
fn prog(name: &str) -> PathBuf {
    cc(&format!("{name}.c"), &format!("dump_{name}"), &[])
}

/// A fresh, empty dump directory for one test and backend.
fn fresh_dir(tag: &str, backend: &str) -> PathBuf {
    let d = work_dir().join("dumps").join(format!("{tag}-{backend}"));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("create dump dir");
    d
}

/// `prog` under `backend` with `MALLOCSHIM_DUMP_DIR=dir`.
fn cmd(prog: &Path, backend: &str, dir: &Path) -> Command {
    let mut c = preloaded(prog, backend);
    c.env("MALLOCSHIM_DUMP_DIR", dir);
    c
}

/// Runs `c` to completion; returns its output and pid. Fails the test unless it exits 0.
fn run(mut c: Command, what: &str) -> (Output, u32) {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id();
    let o = child.wait_with_output().expect("wait");
    if !o.status.success() {
        panic!("{what}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}", o.status, stdout(&o), stderr(&o));
    }
    (o, pid)
}

/// Dump files `mallocshim.<pid>.<seq>.<ext>` in `dir`, sorted by seq.
fn dumps(dir: &Path, pid: u32, ext: &str) -> Vec<PathBuf> {
    mallocshim_format::dumps_of(dir, pid, ext).expect("read dump dir")
}

/// Every directory entry's name, for failure messages.
fn listing(dir: &Path) -> String {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v.join(" ")
}

fn only_json(dir: &Path, pid: u32, what: &str) -> Value {
    let j = dumps(dir, pid, "json");
    assert_eq!(j.len(), 1, "{what}: expected exactly one JSON dump for pid {pid}; dir has: {}", listing(dir));
    load(&j[0])
}

/// A JSON dump, raw: every dump must also read through the schema every reader uses.
fn load(p: &Path) -> Value {
    let s = fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    mallocshim_format::Dump::parse(&s).unwrap_or_else(|e| panic!("{}: {e}\n{s}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{} is not JSON: {e}\n{s}", p.display()))
}

/// The u64 at JSON pointer `ptr`; fails the test with the document's context when missing.
fn u(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or_else(|| panic!("no unsigned number at {ptr} in {v}"))
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a Vec<Value> {
    v.pointer(ptr).and_then(Value::as_array).unwrap_or_else(|| panic!("no array at {ptr}"))
}

/// The size-class row for `op` and the class whose upper bound is `max_bytes`.
fn class<'a>(d: &'a Value, op: &str, max_bytes: u64) -> &'a Value {
    arr(d, "/size_classes")
        .iter()
        .find(|c| c["op"] == op && c["max_bytes"].as_u64() == Some(max_bytes))
        .unwrap_or_else(|| panic!("no size class {op} <= {max_bytes} in {}", d["size_classes"]))
}

/// Thread entries' count for `op` (0 when the thread has no such op).
fn thread_count(t: &Value, op: &str) -> u64 {
    t.pointer(&format!("/ops/{op}/count")).and_then(Value::as_u64).unwrap_or(0)
}

/// The invariants every JSON dump keeps, whatever the program did.
fn check_invariants(d: &Value, pid: u32, backend: &str, what: &str) {
    assert_eq!(d["format"], "mallocshim-dump", "{what}");
    assert_eq!(d["version"], 1, "{what}");
    assert_eq!(u(d, "/pid"), pid as u64, "{what}: pid");
    assert_eq!(d["backend"], backend, "{what}: backend");
    assert!(u(d, "/memory/rss_bytes") > 0, "{what}: memory.rss_bytes must be > 0: {}", d["memory"]);
    for f in ["vsz_bytes", "backend_allocated_bytes", "backend_resident_bytes", "backend_free_bytes"] {
        u(d, &format!("/memory/{f}"));
    }
    let totals = d["totals"].as_object().expect("totals object");
    for op in ["malloc", "calloc", "realloc", "free", "memalign"] {
        assert!(totals.contains_key(op), "{what}: totals lacks {op}: {}", d["totals"]);
    }
    // Per thread, per op: counts add up to the totals exactly.
    let threads = arr(d, "/threads");
    for (op, t) in totals {
        let sum: u64 = threads.iter().map(|th| thread_count(th, op)).sum();
        assert_eq!(
            sum,
            t["count"].as_u64().unwrap(),
            "{what}: sum over threads of {op} counts != totals.{op}.count"
        );
        // The size classes add up to the totals too.
        let by_class: u64 = arr(d, "/size_classes")
            .iter()
            .filter(|c| c["op"] == op.as_str())
            .map(|c| c["count"].as_u64().unwrap())
            .sum();
        assert_eq!(by_class, t["count"].as_u64().unwrap(), "{what}: sum over size classes of {op} != totals");
    }
    // Percentiles are ordered wherever there are samples.
    for c in arr(d, "/size_classes") {
        if u(c, "/sampled") == 0 {
            continue;
        }
        let p: Vec<u64> = ["p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"]
            .iter()
            .map(|k| u(c, &format!("/{k}")))
            .collect();
        assert!(
            p.windows(2).all(|w| w[0] <= w[1]),
            "{what}: size class percentiles out of order (p50,p90,p99,p999,max = {p:?}): {c}"
        );
        assert!(u(c, "/sampled") <= u(c, "/count"), "{what}: more samples than calls: {c}");
    }
    let mut exited = Vec::new();
    for t in threads {
        let state = t["state"].as_str().expect("state");
        assert!(state == "live" || state == "exited", "{what}: state {state}");
        if state == "exited" {
            exited.push(t["start_routine"].to_string());
            assert_eq!(u(t, "/tid"), 0, "{what}: the exited aggregate has tid 0: {t}");
        }
        for (op, r) in t["ops"].as_object().expect("ops object") {
            if u(r, "/sampled") == 0 {
                continue;
            }
            let p: Vec<u64> = ["p50_ns", "p99_ns", "max_ns"].iter().map(|k| u(r, &format!("/{k}"))).collect();
            assert!(
                p.windows(2).all(|w| w[0] <= w[1]),
                "{what}: thread {} op {op} percentiles out of order (p50,p99,max = {p:?})",
                t["tid"]
            );
        }
    }
    // Exited threads fold into one row per start routine (null: unknown routines and overflow).
    let n = exited.len();
    exited.sort();
    exited.dedup();
    assert_eq!(exited.len(), n, "{what}: exited threads fold into one row per start routine: {exited:?}");
}

// ---------------------------------------------------------------------------------------------
// 1. Named threads: exact counts, per-thread rows, size classes, percentiles.

/// Profiling on at the default sampling or at `sample`: the settings of `SETTINGS` whose dumps
/// hold per-class and per-thread figures (`MALLOCSHIM_PROFILE=off` records none to check).
fn named_threads_dump(backend: &str, sample: Option<&str>) -> (Value, u32) {
    let bin = prog("named_threads");
    let tag = if sample.is_some() { "named1" } else { "named" };
    let dir = fresh_dir(tag, backend);
    let mut c = cmd(&bin, backend, &dir);
    if let Some(s) = sample {
        c.env("MALLOCSHIM_SAMPLE", s);
    }
    let (o, pid) = run(c, &format!("named_threads under {backend}"));
    assert!(stdout(&o).contains("dumps=1"), "{backend}: {}", stdout(&o));
    let d = only_json(&dir, pid, &format!("named_threads under {backend}"));
    check_invariants(&d, pid, backend, &format!("named_threads under {backend}"));
    (d, pid)
}

#[test]
fn named_threads_counts_classes_and_percentiles() {
    for b in BACKENDS {
        let (d, _) = named_threads_dump(b, None);
        let w = format!("named_threads under {b}");
        assert_eq!(u(&d, "/sample_every"), 64, "{w}");
        assert!(
            u(&d, "/totals/malloc/count") >= 404_000,
            "{w}: totals.malloc.count = {}",
            d["totals"]["malloc"]
        );
        assert!(u(&d, "/totals/free/count") >= 404_000, "{w}: totals.free.count = {}", d["totals"]["free"]);
        let m64 = class(&d, "malloc", 64);
        assert_eq!(u(m64, "/min_bytes"), 33, "{w}: {m64}");
        assert!(u(m64, "/count") >= 400_000, "{w}: malloc 33-64 count: {m64}");
        assert!(u(m64, "/bytes") >= 400_000 * 48, "{w}: malloc 33-64 bytes: {m64}");
        // Sampled about 1 in 64 (period jittered, shared with free): loose bounds.
        let (n, s) = (u(m64, "/count"), u(m64, "/sampled"));
        assert!(s >= n / 256 && s <= n / 16, "{w}: malloc 33-64 sampled {s} of {n}, not about 1 in 64");
        // 1 MiB requests are in (512K, 1M].
        let m1m = class(&d, "malloc", 1 << 20);
        assert_eq!(u(m1m, "/min_bytes"), (1 << 19) + 1, "{w}");
        assert!(u(m1m, "/count") >= 4_000, "{w}: malloc (512K,1M]: {m1m}");
        // free is classed by usable size: a 48-byte block's is 48..64 under every backend.
        assert!(u(class(&d, "free", 64), "/count") >= 400_000, "{w}: free 33-64: {}", class(&d, "free", 64));
        let workers: Vec<&Value> = arr(&d, "/threads")
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
            .collect();
        assert_eq!(workers.len(), 4, "{w}: threads named worker-N: {}", d["threads"]);
        for i in 0..4 {
            let name = format!("worker-{i}");
            let t = workers
                .iter()
                .find(|t| t["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{w}: no thread {name}"));
            assert_eq!(t["state"], "live", "{w}: {t}");
            assert!(u(t, "/tid") > 0, "{w}: {t}");
            assert!(thread_count(t, "malloc") >= 101_000, "{w}: {name} malloc count: {t}");
            assert!(thread_count(t, "free") >= 101_000, "{w}: {name} free count: {t}");
        }
    }
}

#[test]
fn named_threads_sample_every_call() {
    for b in BACKENDS {
        let (d, _) = named_threads_dump(b, Some("1"));
        let w = format!("named_threads MALLOCSHIM_SAMPLE=1 under {b}");
        assert_eq!(u(&d, "/sample_every"), 1, "{w}");
        let m64 = class(&d, "malloc", 64);
        assert!(u(m64, "/count") >= 400_000, "{w}: {m64}");
        assert_eq!(u(m64, "/sampled"), u(m64, "/count"), "{w}: sampled != count for malloc 33-64: {m64}");
        for t in arr(&d, "/threads")
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
        {
            let r = &t["ops"]["malloc"];
            assert_eq!(u(r, "/sampled"), u(r, "/count"), "{w}: thread {} malloc sampled != count", t["name"]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 2. MariaDB: its own SIGUSR1 handler, 1,000 thread-directed signals, one kill -USR1.

#[test]
fn mariadb_pattern_handler_chained_and_only_process_signal_dumps() {
    let bin = prog("mariadb_pattern");
    let handles: Vec<_> = BACKENDS
        .iter()
        .map(|&b| {
            let bin = bin.clone();
            let _ = shim();
            std::thread::spawn(move || {
                let dir = fresh_dir("mariadb", b);
                let (o, pid) = run(cmd(&bin, b, &dir), &format!("mariadb_pattern under {b}"));
                (b, o, pid, dir)
            })
        })
        .collect();
    for h in handles {
        let (b, o, pid, dir) = h.join().expect("runner thread");
        let out = stdout(&o);
        let line =
            out.lines().find(|l| l.starts_with("handler_calls=")).unwrap_or_else(|| panic!("{b}: {out}"));
        assert_eq!(
            kv(line, "old_is_ours"),
            Some(1),
            "{b}: sigaction must report the application's handler: {line}"
        );
        assert_eq!(
            kv(line, "lost"),
            Some(0),
            "{b}: a pthread_kill never reached the application's handler: {line}"
        );
        assert_eq!(
            kv(line, "handler_calls"),
            Some(1001),
            "{b}: the application's handler must run for every signal: {line}"
        );
        let j = dumps(&dir, pid, "json");
        assert_eq!(
            j.len(),
            1,
            "{b}: exactly one dump (only kill(getpid()) asks for one), dir has: {}",
            listing(&dir)
        );
        check_invariants(&load(&j[0]), pid, b, &format!("mariadb_pattern under {b}"));
    }
}

// ---------------------------------------------------------------------------------------------
// 3. MySQL 8: SIGUSR1 blocked everywhere, taken by a signal thread with sigwaitinfo.

fn mysql8(mode: &str, tkill: bool, backend: &str) -> (String, u32, PathBuf) {
    let bin = prog("mysql8_pattern");
    let dir = fresh_dir(&format!("mysql8-{mode}{}", if tkill { "-tkill" } else { "" }), backend);
    let mut c = cmd(&bin, backend, &dir);
    c.arg(mode);
    if tkill {
        c.arg("tkill");
    }
    let (o, pid) = run(c, &format!("mysql8_pattern {mode} under {backend}"));
    (stdout(&o), pid, dir)
}

#[test]
fn mysql8_pattern_sigwaitinfo_receives_and_dumps() {
    for b in BACKENDS {
        for mode in ["sigwaitinfo", "sigtimedwait", "sigwait"] {
            let (out, pid, dir) = mysql8(mode, false, b);
            let want = if mode == "sigwait" { "got=10 rc=0" } else { "got=10 code=0" };
            assert!(
                out.lines().any(|l| l == want),
                "{b} {mode}: the application must still receive SIGUSR1 ({want}):\n{out}"
            );
            assert_eq!(
                dumps(&dir, pid, "json").len(),
                1,
                "{b} {mode}: one dump; program said:\n{out}dir: {}",
                listing(&dir)
            );
            assert!(out.contains("dumps=1"), "{b} {mode}: {out}");
        }
    }
}

/// pthread_kill(signal_thread, SIGUSR1) taken with sigwaitinfo is thread-directed (SI_TKILL):
/// like the MariaDB case, it must not dump. glibc's sigtimedwait folds SI_TKILL into SI_USER
/// for its caller, so the shim has to look at the kernel's si_code (raw rt_sigtimedwait).
#[test]
fn mysql8_pattern_thread_directed_signal_does_not_dump() {
    for b in BACKENDS {
        for mode in ["sigwaitinfo", "sigwait"] {
            let (out, pid, dir) = mysql8(mode, true, b);
            let got = out.lines().filter(|l| l.starts_with("got=10 ")).count();
            assert_eq!(got, 2, "{b} {mode}: the application must receive both signals:\n{out}");
            let after = out
                .lines()
                .find_map(|l| kv(l, "dumps_after_tkill"))
                .unwrap_or_else(|| panic!("{b} {mode}: {out}"));
            assert_eq!(after, 0, "{b} {mode}: pthread_kill(SIGUSR1) taken by {mode} wrote a dump:\n{out}");
            assert_eq!(
                dumps(&dir, pid, "json").len(),
                1,
                "{b} {mode}: exactly one dump (from kill(getpid())):\n{out}dir: {}",
                listing(&dir)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. SIG_IGN stays ignored and dumps; a program that never touches the signal dumps, not dies.

#[test]
fn sig_ign_and_untouched_signal_dump_without_dying() {
    let bin = prog("dump_misc");
    // Without the shim the untouched program dies of SIGUSR1: the check below is real.
    let mut plain = Command::new(&bin);
    plain.arg("untouched").stdin(Stdio::null()).env_remove("LD_PRELOAD");
    let o = plain.output().expect("run dump_misc untouched");
    assert_eq!(
        o.status.signal(),
        Some(SIGUSR1),
        "without the shim the program must die of SIGUSR1: {:?}",
        o.status
    );
    for b in BACKENDS {
        for mode in ["ign", "untouched"] {
            let dir = fresh_dir(&format!("sig-{mode}"), b);
            let mut c = cmd(&bin, b, &dir);
            c.arg(mode);
            let (o, pid) = run(c, &format!("dump_misc {mode} under {b}"));
            let out = stdout(&o);
            if mode == "ign" {
                assert!(out.contains("ign_kept=1"), "{b}: sigaction must still report SIG_IGN:\n{out}");
            }
            assert!(out.contains("dumps=1"), "{b} {mode}:\n{out}");
            let d = only_json(&dir, pid, &format!("{mode} under {b}"));
            check_invariants(&d, pid, b, &format!("{mode} under {b}"));
            assert!(u(&d, "/totals/malloc/count") >= 10_000, "{b} {mode}: {}", d["totals"]);
            assert_eq!(
                dumps(&dir, pid, "prom").len(),
                1,
                "{b} {mode}: default formats are json,prom: {}",
                listing(&dir)
            );
        }
        // No MALLOCSHIM_DUMP_DIR: $TMPDIR is the default directory.
        let dir = fresh_dir("tmpdir-default", b);
        let mut c = preloaded(&bin, b);
        c.arg("untouched").env("TMPDIR", &dir);
        let (o, pid) = run(c, &format!("dump_misc untouched with TMPDIR under {b}"));
        assert!(stdout(&o).contains("dumps=1"), "{b}: {}", stdout(&o));
        assert_eq!(
            dumps(&dir, pid, "json").len(),
            1,
            "{b}: the dump goes to $TMPDIR by default: {}",
            listing(&dir)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5. A burst of 200 signals is a few dumps, not 200.

#[test]
fn signal_burst_coalesces() {
    let bin = prog("dump_misc");
    for b in BACKENDS {
        let dir = fresh_dir("burst", b);
        let mut c = cmd(&bin, b, &dir);
        c.arg("burst");
        let (o, pid) = run(c, &format!("dump_misc burst under {b}"));
        let n = dumps(&dir, pid, "json").len();
        assert!(
            (1..=5).contains(&n),
            "{b}: 200 signals in a burst gave {n} dumps (want 1..=5); program: {}",
            stdout(&o)
        );
        for p in dumps(&dir, pid, "json") {
            check_invariants(&load(&p), pid, b, &format!("burst under {b}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Thread churn: 10,000 short threads of one start routine fold into one "exited" entry
// (besides the routine-less row, which gathers calls made after a thread's slot is gone).

#[test]
fn thread_churn_folds_into_exited() {
    let bin = prog("dump_misc");
    for b in BACKENDS {
        let dir = fresh_dir("churn", b);
        let mut c = cmd(&bin, b, &dir);
        c.arg("churn");
        let (o, pid) = run(c, &format!("dump_misc churn under {b}"));
        let out = stdout(&o);
        let line = out.lines().find(|l| l.starts_with("threads=")).unwrap_or_else(|| panic!("{b}: {out}"));
        assert_eq!(kv(line, "threads"), Some(10_000), "{b}: {line}");
        assert_eq!(
            kv(line, "api_rc"),
            Some(0),
            "{b}: mallocshim_dump() must return 0: {line}\n{}",
            stderr(&o)
        );
        let hwm_kb = kv(line, "vmhwm_kb").unwrap_or_else(|| panic!("{b}: {line}"));
        eprintln!("thread churn under {b}: peak RSS (VmHWM) {hwm_kb} kB");
        assert!(hwm_kb < 200 * 1024, "{b}: peak RSS {hwm_kb} kB >= 200 MiB after thread churn");
        let d = only_json(&dir, pid, &format!("churn under {b}"));
        check_invariants(&d, pid, b, &format!("churn under {b}"));
        let total = u(&d, "/totals/malloc/count");
        assert!(total >= 110_000, "{b}: totals.malloc.count {total} < 10,000 warm-up + 10,000 threads x 10");
        let threads = arr(&d, "/threads");
        assert!(threads.len() < 50, "{b}: {} thread entries after churn (want < 50)", threads.len());
        let ex: Vec<&Value> =
            threads.iter().filter(|t| t["state"] == "exited" && !t["start_routine"].is_null()).collect();
        assert_eq!(ex.len(), 1, "{b}: one exited entry for the churn's routine: {}", d["threads"]);
        assert_eq!(u(ex[0], "/exited_threads"), 10_000, "{b}: {}", ex[0]);
        let exm = thread_count(ex[0], "malloc");
        assert!(
            exm >= 100_000,
            "{b}: the exited entry holds {exm} mallocs (want >= 100,000 = 10,000 threads x 10)"
        );
        assert!(
            exm * 2 > total - 10_000,
            "{b}: the exited entry ({exm}) must hold most of the threads' mallocs ({total})"
        );
        assert!(thread_count(ex[0], "free") >= 100_000, "{b}: exited frees: {}", ex[0]);
    }
}

// ---------------------------------------------------------------------------------------------
// 7. An unusable dump directory: one `mallocshim:` line naming it (at start, or at the first
// failed dump), however many dumps fail; the program carries on.

#[test]
fn unusable_dump_dir_warns_and_carries_on() {
    let bin = prog("dump_misc");
    let file = work_dir().join("dumps").join("not-a-dir");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, b"plain file\n").unwrap();
    let file = file.to_string_lossy().into_owned();
    for b in BACKENDS {
        for dir in ["/nonexistent/dir", "/proc", file.as_str()] {
            let mut c = preloaded(&bin, b);
            c.arg("sigfail").env("MALLOCSHIM_DUMP_DIR", dir);
            let (o, _pid) = run(c, &format!("dump_misc sigfail with MALLOCSHIM_DUMP_DIR={dir} under {b}"));
            let lines = shim_lines(&o);
            let naming: Vec<&String> = lines.iter().filter(|l| l.contains(dir)).collect();
            // Two failed dumps (the signal's, mallocshim_dump()), reported once.
            assert_eq!(
                naming.len(),
                1,
                "{b} dir={dir}: want exactly one `mallocshim:` line naming the dir; stderr:\n{}",
                stderr(&o)
            );
            assert_eq!(
                kv(&stdout(&o), "api_rc"),
                Some(libc_eio()),
                "{b} dir={dir}: mallocshim_dump() must return EIO: {}",
                stdout(&o)
            );
        }
    }
}

fn libc_eio() -> u64 {
    5
}

// ---------------------------------------------------------------------------------------------
// 8. Planted symlinks are neither followed nor replaced; dumps are 0600.

// Long because: one planted directory per backend, each kind of planted link next to the assertion
// that it was not followed.
#[test]
fn planted_symlinks_not_followed_files_0600() {
    let bin = prog("dump_misc");
    for b in BACKENDS {
        let dir = fresh_dir("symlink", b);
        let victims = dir.join("victims");
        fs::create_dir_all(&victims).unwrap();
        let v0 = victims.join("v0");
        let v1 = victims.join("v1");
        fs::write(&v0, b"victim 0\n").unwrap();
        fs::write(&v1, b"victim 1\n").unwrap();
        fs::set_permissions(&v0, fs::Permissions::from_mode(0o644)).unwrap();
        let dangling = victims.join("created-by-following");

        let mut c = cmd(&bin, b, &dir);
        c.arg("symlink").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn dump_misc symlink");
        let mut rd = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        rd.read_line(&mut first).unwrap();
        let pid = kv(first.trim(), "pid").unwrap_or_else(|| panic!("{b}: no pid line: {first:?}")) as u32;
        assert_eq!(pid, child.id());
        // seq 0 (the signal's dump): temp name -> existing file; seq 1: final name -> existing
        // file; seq 2: temp name -> a path that does not exist; seq 3: prom's final name ->
        // the same missing path; seq 4 and later: nothing planted.
        let plant = [
            (format!(".mallocshim.{pid}.0.json.tmp"), &v0),
            (format!("mallocshim.{pid}.1.json"), &v1),
            (format!(".mallocshim.{pid}.2.json.tmp"), &dangling),
            (format!("mallocshim.{pid}.3.prom"), &dangling),
        ];
        for (name, target) in &plant {
            symlink(target, dir.join(name)).unwrap();
        }
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        rd.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let st = child.wait().unwrap();
        assert!(st.success(), "{b}: exit {st:?}\n{rest}\n{err}");
        let w = format!("{b}: stdout:\n{rest}stderr:\n{err}dir: {}", listing(&dir));

        assert_eq!(fs::read(&v0).unwrap(), b"victim 0\n", "{w}\nthe temp-name symlink was followed");
        assert_eq!(fs::read(&v1).unwrap(), b"victim 1\n", "{w}\nthe final-name symlink was overwritten");
        assert_eq!(fs::metadata(&v0).unwrap().mode() & 0o777, 0o644, "{w}: victim's mode changed");
        assert!(!dangling.exists(), "{w}\na dangling symlink was followed: {} exists", dangling.display());
        for (name, target) in &plant {
            let p = dir.join(name);
            let m = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{w}\n{name} is gone: {e}"));
            assert!(m.file_type().is_symlink(), "{w}\n{name} was replaced");
            assert_eq!(&fs::read_link(&p).unwrap(), *target, "{w}");
        }
        // Dumps are written to an unnamed O_TMPFILE file linked into place, so the planted
        // temporary names (seq 0, 2) are never opened; a planted final name (seq 1, 3) is
        // skipped like any file already named after this pid: the dump moves to the next free
        // sequence number and succeeds (signal: 0; api calls: 2, 4, 5, 6), with no line.
        assert_eq!(err.lines().filter(|l| l.starts_with("mallocshim:")).count(), 0, "{w}\nno line wanted");
        for i in 1..=4 {
            assert_eq!(kv(&rest.replace('\n', " "), &format!("api_rc{i}")), Some(0), "{w}\napi_rc{i}");
        }
        let good: Vec<PathBuf> = [0, 2, 4, 5, 6]
            .iter()
            .flat_map(|seq| ["json", "prom"].map(|e| dir.join(format!("mallocshim.{pid}.{seq}.{e}"))))
            .collect();
        for p in &good {
            let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{w}\n{}: {e}", p.display()));
            assert!(m.file_type().is_file(), "{w}\n{} is not a regular file", p.display());
            // The program runs with umask 0: 0600 is the shim's own choice.
            assert_eq!(m.mode() & 0o7777, 0o600, "{w}\n{} has mode {:o}", p.display(), m.mode() & 0o7777);
            assert_eq!(m.nlink(), 1, "{w}");
        }
        check_invariants(&load(&good[8]), pid, b, &format!("symlink run under {b}"));
        // No temp files left behind other than the planted ones.
        for e in fs::read_dir(&dir).unwrap() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            if n.ends_with(".tmp") {
                assert!(plant.iter().any(|(p, _)| *p == n), "{w}\nleft-over temp file {n}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 9. All four formats.

/// Checks Prometheus text exposition: every sample line parses, belongs to a declared family,
/// and each histogram's buckets are cumulative with `+Inf` equal to `_count`. Returns the
/// number of histogram series.
// Long because: one pass over the exposition text, the parser and its checks (families, labels,
// cumulative buckets) sharing the same maps.
fn check_prom(text: &str, what: &str) -> usize {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    // (family, labels without le) -> [(le, value)], count, sum present
    let mut buckets: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut sums: BTreeMap<(String, String), f64> = BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(r) = line.strip_prefix("# TYPE ") {
            let mut it = r.split_whitespace();
            let (n, t) =
                (it.next().unwrap(), it.next().unwrap_or_else(|| panic!("{what}: bad TYPE line {line}")));
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&t), "{what}: {line}");
            types.insert(n.to_string(), t.to_string());
            continue;
        }
        if line.starts_with('#') {
            assert!(line.starts_with("# HELP "), "{what}: unexpected comment {line}");
            continue;
        }
        let (series, value) =
            line.rsplit_once(' ').unwrap_or_else(|| panic!("{what}: bad sample line {line}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("{what}: bad value in {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                (n, l.strip_suffix('}').unwrap_or_else(|| panic!("{what}: unclosed labels: {line}")))
            }
            None => (series, ""),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{what}: bad metric name in {line}"
        );
        let mut le = None;
        let mut rest = Vec::new();
        if !labels.is_empty() {
            for kvp in labels.split(',') {
                let (k, val) =
                    kvp.split_once('=').unwrap_or_else(|| panic!("{what}: bad label {kvp} in {line}"));
                assert!(
                    val.len() >= 2 && val.starts_with('"') && val.ends_with('"'),
                    "{what}: unquoted label in {line}"
                );
                if k == "le" {
                    let s = &val[1..val.len() - 1];
                    le = Some(if s == "+Inf" {
                        f64::INFINITY
                    } else {
                        s.parse::<f64>().unwrap_or_else(|_| panic!("{what}: bad le in {line}"))
                    });
                } else {
                    rest.push(kvp.to_string());
                }
            }
        }
        let key_labels = rest.join(",");
        if let Some(f) =
            name.strip_suffix("_bucket").filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
        {
            let le = le.unwrap_or_else(|| panic!("{what}: bucket without le: {line}"));
            buckets.entry((f.to_string(), key_labels)).or_default().push((le, v));
        } else if let Some(f) =
            name.strip_suffix("_count").filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
        {
            counts.insert((f.to_string(), key_labels), v);
        } else if let Some(f) =
            name.strip_suffix("_sum").filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
        {
            sums.insert((f.to_string(), key_labels), v);
        } else {
            assert!(types.contains_key(name), "{what}: sample of an undeclared family: {line}");
        }
    }
    assert!(!buckets.is_empty(), "{what}: no histogram series");
    for (k, bs) in &buckets {
        assert!(bs.windows(2).all(|w| w[0].0 < w[1].0), "{what}: {k:?}: le not increasing: {bs:?}");
        assert!(bs.windows(2).all(|w| w[0].1 <= w[1].1), "{what}: {k:?}: buckets not cumulative: {bs:?}");
        let last = bs.last().unwrap();
        assert!(last.0.is_infinite(), "{what}: {k:?}: no le=\"+Inf\" bucket");
        let c = counts.get(k).unwrap_or_else(|| panic!("{what}: {k:?}: no _count"));
        assert_eq!(last.1, *c, "{what}: {k:?}: +Inf bucket != _count");
        assert!(sums.contains_key(k), "{what}: {k:?}: no _sum");
    }
    assert_eq!(counts.len(), buckets.len(), "{what}: _count series without buckets");
    let trim = buckets.keys().filter(|(f, _)| f == "mallocshim_trim_duration_seconds").count();
    assert_eq!(trim, 1, "{what}: one mallocshim_trim_duration_seconds histogram");
    buckets.keys().filter(|(f, _)| f == "mallocshim_call_latency_seconds").count()
}

/// Checks the HdrHistogram interval log: `#[StartTime:` (after `#` comment lines only) before
/// any histogram, a `Tag=malloc_64,` line, and every tagged histogram decodes (V2+DEFLATE) to as
/// many samples as the JSON's size class reports.
fn check_hdr(hdr: &str, d: &Value, what: &str) {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let start = hdr
        .lines()
        .position(|l| l.starts_with("#[StartTime:"))
        .unwrap_or_else(|| panic!("{what}: no #[StartTime: line:\n{hdr}"));
    assert!(
        hdr.lines().take(start).all(|l| l.starts_with('#')),
        "{what}: only comments may precede #[StartTime:\n{hdr}"
    );
    assert!(hdr.lines().any(|l| l.starts_with("Tag=malloc_64,")), "{what}: no Tag=malloc_64, line:\n{hdr}");
    let mut de = Deserializer::new();
    let mut seen = 0;
    let mut start_time = None;
    for e in IntervalLogIterator::new(hdr.as_bytes()) {
        match e.unwrap_or_else(|e| panic!("{what}: interval log does not parse: {e:?}\n{hdr}")) {
            LogEntry::StartTime(t) => start_time = Some(t),
            LogEntry::BaseTime(_) => {}
            LogEntry::Interval(iv) => {
                assert!(start_time.is_some(), "{what}: histogram before #[StartTime:");
                let tag = iv
                    .tag()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_else(|| panic!("{what}: untagged histogram"));
                let bytes = base64_decode(iv.encoded_histogram());
                let h: hdrhistogram::Histogram<u64> = de
                    .deserialize(&mut bytes.as_slice())
                    .unwrap_or_else(|e| panic!("{what}: {tag}: histogram does not decode: {e:?}"));
                let (op, label) = tag.split_once('_').unwrap_or_else(|| panic!("{what}: tag {tag}"));
                let c = arr(d, "/size_classes")
                    .iter()
                    .find(|c| c["op"] == op && label_of(c["max_bytes"].as_u64().unwrap_or(u64::MAX)) == label)
                    .unwrap_or_else(|| panic!("{what}: tag {tag} has no JSON size class"));
                assert_eq!(h.len(), u(c, "/sampled"), "{what}: {tag}: histogram count vs JSON sampled");
                seen += 1;
            }
        }
    }
    let sampled = arr(d, "/size_classes").iter().filter(|c| u(c, "/sampled") > 0).count();
    assert_eq!(seen, sampled, "{what}: one tagged histogram per sampled size class");
}

/// The shim's size-class label (`16`, `64`, `8K`, `1M`, `inf`) for an upper bound (the last
/// class's `max_bytes` is null in the JSON: pass u64::MAX).
fn label_of(hi: u64) -> String {
    match hi {
        u64::MAX => "inf".into(),
        h if h >= 1 << 20 => format!("{}M", h >> 20),
        h if h >= 1 << 10 => format!("{}K", h >> 10),
        h => h.to_string(),
    }
}

/// Standard base64 (with padding), as the interval log encodes histograms.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let b: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(b.len() * 3 / 4);
    for ch in b.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in ch.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        let n = ch.len() * 6 / 8;
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}

#[test]
fn all_four_formats() {
    let bin = prog("dump_misc");
    for b in BACKENDS {
        let dir = fresh_dir("formats", b);
        let mut c = cmd(&bin, b, &dir);
        c.arg("untouched").env("MALLOCSHIM_DUMP_FORMATS", "json,prom,hdr,text");
        let (o, pid) = run(c, &format!("dump_misc formats under {b}"));
        assert!(stdout(&o).contains("dumps=1"), "{b}: {}", stdout(&o));
        let w = format!("{b}: dir {}", listing(&dir));
        for ext in ["json", "prom", "hdr", "text"] {
            assert_eq!(dumps(&dir, pid, ext).len(), 1, "{w}: want one .{ext}");
        }
        let d = load(&dir.join(format!("mallocshim.{pid}.0.json")));
        check_invariants(&d, pid, b, &w);

        let prom = fs::read_to_string(dir.join(format!("mallocshim.{pid}.0.prom"))).unwrap();
        let series = check_prom(&prom, &format!("{b} .prom"));
        let sampled_classes = arr(&d, "/size_classes").iter().filter(|c| u(c, "/sampled") > 0).count();
        assert_eq!(series, sampled_classes, "{b}: one latency histogram per sampled size class");
        let calls = format!("mallocshim_calls_total{{backend=\"{b}\",op=\"malloc\",size_class=\"64\"}} ");
        let line = prom
            .lines()
            .find(|l| l.starts_with(&calls))
            .unwrap_or_else(|| panic!("{b}: no {calls}in\n{prom}"));
        let n: u64 = line[calls.len()..].parse().unwrap();
        assert_eq!(n, u(class(&d, "malloc", 64), "/count"), "{b}: prom calls_total vs JSON (same snapshot)");
        assert!(prom.contains(&format!("mallocshim_rss_bytes{{backend=\"{b}\"}} ")), "{b}: no rss gauge");

        let hdr = fs::read_to_string(dir.join(format!("mallocshim.{pid}.0.hdr"))).unwrap();
        check_hdr(&hdr, &d, &format!("{b} .hdr"));

        let text = fs::read_to_string(dir.join(format!("mallocshim.{pid}.0.text"))).unwrap();
        assert!(
            text.lines().any(|l| l.contains("p50_ns") && l.contains("p99_ns")),
            "{b}: .text has no header with p50_ns:\n{text}"
        );
        assert!(text.contains(&format!("backend {b}")), "{b}: .text names the backend:\n{text}");
    }
}
