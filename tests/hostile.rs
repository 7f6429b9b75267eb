//! Hostile patterns (docs/testing-hostile.md): C and C++ programs that stress what a preloaded
//! allocator meets in real processes — thread churn and teardown, TSD and thread_local
//! destructors, fork in every awkward place, dlopen/dlclose, an exhausted address space — run
//! under every backend × setting of `common::matrix()`, each several times, with SIGUSR1 (the
//! dump signal) sent to the process every 3 ms throughout. Each run must exit 0 (or, for the
//! RLIMIT_AS program, exactly as it does without the shim), within a deadline: a hang kills the
//! process group and fails with the configuration named. Where the program counts its own
//! calls, the exit dump's counts must cover them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// Runs per matrix cell.
const REPEATS: usize = 2;
/// A run still going after this long is a hang.
const DEADLINE: Duration = Duration::from_secs(60);

fn dump_dir(tag: &str) -> PathBuf {
    let d = common::work_dir().join(format!("hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create dump dir");
    d
}

/// Runs `cmd` in its own process group with SIGUSR1 sent every 3 ms (when `storm`); kills the
/// group and fails on the deadline (`common::storm`).
fn run_stormed(cmd: Command, what: &str, storm: bool) -> Output {
    common::storm::run_stormed(cmd, what, storm, DEADLINE).0
}

/// Runs `prog args` under every backend and setting, REPEATS times each, and returns, for the
/// checks of the caller, every (configuration, output, dump dir).
fn each_config(prog: &Path, args: &[&str], check: impl Fn(&str, &Output, &Path)) {
    each_config_with(prog, args, &[], true, check)
}

/// [`each_config`] with `extra` environment for every run, and the SIGUSR1 storm only when
/// `storm`.
fn each_config_with(
    prog: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
    storm: bool,
    check: impl Fn(&str, &Output, &Path),
) {
    for (backend, setting, env) in common::matrix() {
        for rep in 0..REPEATS {
            let what = format!(
                "{} {} under {backend}, {setting} (run {}{})",
                prog.file_name().unwrap().to_string_lossy(),
                args.join(" "),
                rep + 1,
                if storm { "" } else { ", no storm" }
            );
            let tag: String = what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            let dir = dump_dir(&tag);
            let mut c = common::preloaded(prog, backend);
            c.args(args).envs(env.iter().copied()).envs(extra.iter().copied());
            c.env("MALLOCSHIM_DUMP_DIR", &dir).env("MALLOCSHIM_DUMP_AT_EXIT", "1");
            let o = run_stormed(c, &what, storm);
            assert!(o.status.success(), "{what}: {}", common::describe(&o));
            let stray: Vec<_> = file_names(&dir).into_iter().filter(|n| n.ends_with(".tmp")).collect();
            assert!(stray.is_empty(), "{what}: temporary dump files left behind: {stray:?}");
            check(&what, &o, &dir);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// [`each_config`], then once more per backend with heap profiles sampling every byte; every run
/// must print `want`.
fn each_config_and_every_byte(prog: &Path, args: &[&str], want: &str) {
    let check = |what: &str, o: &Output, _: &Path| {
        assert!(common::stdout(o).contains(want), "{what}: no {want:?}: {}", common::describe(o));
    };
    each_config(prog, args, check);
    each_config_with(prog, args, &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")], true, check);
}

/// The names of the files in `dir`.
fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The exit dump: the JSON file of the run's main process with the highest sequence number.
fn exit_dump(dir: &Path, pid_hint: &str) -> serde_json::Value {
    let mut best: Option<(u32, u64, PathBuf)> = None;
    for e in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = n.strip_prefix("mallocshim.").and_then(|r| r.strip_suffix(".json")) else {
            continue;
        };
        let mut it = rest.split('.');
        let (Some(pid), Some(seq)) =
            (it.next().and_then(|p| p.parse().ok()), it.next().and_then(|s| s.parse().ok()))
        else {
            continue;
        };
        // The lowest pid is the program (children it forked have higher pids), its last dump
        // the exit dump.
        let key = (pid, u64::MAX - seq);
        if best.as_ref().is_none_or(|b| key < (b.0, u64::MAX - b.1)) {
            best = Some((pid, seq, e.path()));
        }
    }
    let p = best.unwrap_or_else(|| panic!("{pid_hint}: no JSON dump in {}", dir.display())).2;
    let s = std::fs::read_to_string(&p).expect("read dump");
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()))
}

fn total(v: &serde_json::Value, op: &str) -> u64 {
    v.pointer(&format!("/totals/{op}/count"))
        .and_then(|x| x.as_u64())
        .unwrap_or_else(|| panic!("no totals/{op}"))
}

#[test]
fn thread_churn_keys_and_teardown() {
    let prog = common::cc("hostile_threads.c", "hostile_threads", &[]);
    each_config(&prog, &["churn", "120"], |what, o, dir| {
        let out = common::stdout(o);
        let line =
            out.lines().find(|l| l.starts_with("calls ")).unwrap_or_else(|| panic!("{what}: no calls line"));
        let (m, f) = (common::kv(line, "malloc").unwrap(), common::kv(line, "free").unwrap());
        let threads = common::kv(line, "threads").unwrap();
        assert!(threads >= 1900, "{what}: {line}");
        if what.contains("PROFILE=off") {
            return;
        }
        let d = exit_dump(dir, what);
        let (dm, df) = (total(&d, "malloc"), total(&d, "free"));
        // The dump covers every call the program counted, plus glibc's own (thread teardown
        // frees a dozen pointers, most NULL, per thread) and those of the detached threads
        // after the count was printed.
        let slack = 20_000 + 50 * threads;
        assert!(dm >= m && dm <= m + slack, "{what}: dump malloc count {dm}, program made {m}");
        assert!(df >= f && df <= f + slack, "{what}: dump free count {df}, program made {f}");
    });
}

/// Bursts of detached threads, half of which never allocate (`thread_burst.c`), also with every
/// allocation sampled: each thread accounted for, exit 0. Under jemalloc with profiling on, the
/// pooled start records (no free at a thread's start) died of SIGSEGV in 3 of 3 runs.
#[test]
fn thread_bursts_of_idle_detached_threads() {
    let prog = common::cc("thread_burst.c", "thread_burst", &[]);
    each_config_and_every_byte(&prog, &["4", "500"], "done=2000");
}

#[test]
fn cxx_thread_local_destructors() {
    let prog = common::cc("hostile_tls.cc", "hostile_tls", &[]);
    each_config(&prog, &["60"], |what, o, _| {
        assert!(common::stdout(o).contains("threads=960"), "{what}: {}", common::describe(o));
    });
}

#[test]
fn fork_with_and_without_exec() {
    let prog = common::cc("hostile_fork.c", "hostile_fork", &[]);
    each_config(&prog, &["exec", "24"], |_, _, _| {});
}

/// Forks from a thread that is not the main one while three threads churn; the children start
/// threads, dump, and fork again from a new thread while the survivor `pthread_exit`s, before
/// anything settled the survivor's slot (its adoption by the child's first drain or sample,
/// `slots::fold`, racing the survivor's own exit and the new threads' claims). Every backend
/// and setting, and with heap profiles sampling every byte.
#[test]
fn fork_from_a_thread_whose_children_start_threads() {
    let prog = common::cc("hostile_fork.c", "hostile_fork", &[]);
    each_config_and_every_byte(&prog, &["threads", "24"], "forks=24 bad=0");
}

#[test]
fn fork_from_signal_handler() {
    let prog = common::cc("hostile_fork.c", "hostile_fork", &[]);
    each_config(&prog, &["signal", "150"], |what, o, _| {
        let out = common::stdout(o);
        let hf = common::kv(out.lines().next().unwrap_or(""), "handler_forks").unwrap_or(0);
        assert!(hf >= 10, "{what}: only {hf} forks from the handler\n{out}");
    });
}

#[test]
fn fork_while_stdio_flushes() {
    let prog = common::cc("hostile_fork.c", "hostile_fork", &[]);
    each_config(&prog, &["stdio", "60"], |_, _, _| {});
}

/// The fork_stdio canary (tests/fork.rs) under the shim over jemalloc and tcmalloc, where the
/// backend's fork handler used to lock before glibc's stdio list lock.
#[test]
fn fork_stdio_canary_every_backend() {
    let prog = common::cc("fork_stdio.c", "fork_stdio", &[]);
    for (backend, setting, env) in common::matrix() {
        let what = format!("fork_stdio canary under {backend}, {setting}");
        let dir = dump_dir("fork_stdio");
        let mut c = common::preloaded(&prog, backend);
        c.envs(env.iter().copied()).env("MALLOCSHIM_DUMP_DIR", &dir).env("FORK_STDIO_FORKS", "60");
        let o = run_stormed(c, &what, false);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(o.status.success(), "{what}: {}", common::describe(&o));
    }
}

#[test]
fn dlopen_dlclose_under_churn() {
    let lib = common::cc("hostile_dlopen_lib.c", "libhostile_dlopen.so", &["-shared", "-fPIC"]);
    let prog = common::cc("hostile_dlopen.c", "hostile_dlopen", &[]);
    let lib_s = lib.to_string_lossy().into_owned();
    each_config(&prog, &[&lib_s, "100"], |_, _, _| {});
}

/// Children forked one after the other by each hostile_rlimit run.
const RLIMIT_CHILDREN: &str = "50";

#[test]
fn rlimit_as_runs_out() {
    let prog = common::cc("hostile_rlimit.c", "hostile_rlimit", &[]);
    // 50 children per run: each starts the shim's worker afresh against its own thread racing to
    // the limit (a race the worker once lost in about 1 child of 100 under jemalloc).
    let mut plain = common::plain(&prog);
    plain.arg(RLIMIT_CHILDREN);
    let base = run_stormed(plain, "hostile_rlimit without the shim", false);
    let base_line =
        common::stdout(&base).lines().find(|l| l.starts_with("child_status")).unwrap_or("").to_string();
    assert!(base.status.success(), "hostile_rlimit without the shim: {}", common::describe(&base));
    each_config(&prog, &[RLIMIT_CHILDREN], |what, o, _| {
        let line =
            common::stdout(o).lines().find(|l| l.starts_with("child_status")).unwrap_or("").to_string();
        assert_eq!(line, base_line, "{what}: differs from glibc alone");
    });
}

/// Children forked by each hostile_thread_fail run (alternating: threads started before the
/// exhaustion, and after).
const THREAD_FAIL_CHILDREN: &str = "10";

/// Issue 37 item 7: threads whose first allocations come once the address space has run out
/// get a block or ENOMEM under every backend and setting (and with every allocation sampled for
/// the heap profile), under the SIGUSR1 storm. Debian's jemalloc preloaded directly
/// dies of SIGSEGV in every child (the crash the shim's per-thread caches avoid: see
/// src/backend/jemalloc_tcache.rs), which shows the program reaches the case.
#[test]
fn first_allocations_of_threads_once_memory_has_run_out() {
    let prog = common::cc("hostile_thread_fail.c", "hostile_thread_fail", &[]);
    let mut plain = common::plain(&prog);
    plain.arg(THREAD_FAIL_CHILDREN);
    let base = run_stormed(plain, "hostile_thread_fail without the shim", false);
    assert!(base.status.success(), "hostile_thread_fail without the shim: {}", common::describe(&base));
    let mut direct = common::plain(&prog);
    direct.arg("2").env("LD_PRELOAD", common::JEMALLOC_LIB);
    let d = run_stormed(direct, "hostile_thread_fail under jemalloc preloaded directly", false);
    assert!(
        common::stdout(&d).contains("bad=2 of 2"),
        "jemalloc preloaded directly no longer dies here: the program does not reach the case: {}",
        common::describe(&d)
    );
    let check = |what: &str, o: &Output, _: &Path| {
        assert!(common::stdout(o).contains("bad=0 of"), "{what}: {}", common::describe(o));
    };
    each_config(&prog, &[THREAD_FAIL_CHILDREN], check);
    each_config_with(&prog, &[THREAD_FAIL_CHILDREN], &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")], true, check);
}

#[test]
fn dump_asked_for_when_memory_has_run_out() {
    let prog = common::cc("hostile_oom_dump.c", "hostile_oom_dump", &[]);
    // Heap profiles too: the pprof writer copies the profile's tables and maps symbol files.
    let extra = [("MALLOCSHIM_DUMP_FORMATS", "json,pprof"), ("MALLOCSHIM_PROF_SAMPLE_BYTES", "4096")];
    let check = |what: &str, o: &Output, dir: &Path| {
        let out = common::stdout(o);
        assert!(
            out.contains("exhausted blocks=") && out.contains("freed"),
            "{what}: {}",
            common::describe(o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("memory allocation of"), "{what}: an allocation of the shim failed: {err}");
        let json = file_names(dir).iter().filter(|n| n.ends_with(".json")).count();
        assert!(json >= 1, "{what}: no dump written once memory was free again\n{err}");
    };
    // With the storm, dumps come before, during and after the exhaustion; without it, the first
    // dumps are asked for while memory is exhausted (before the symbol cache is filled).
    each_config_with(&prog, &[], &extra, true, check);
    each_config_with(&prog, &[], &extra, false, check);

    // glibc with one arena, exhausted by the program: the shim's thread allocates from its own
    // heap (`base::worker_heap`), not from the arena, so the dumps asked for while the blocks are
    // held are written (none skipped) and show them live, and the one after the free is written
    // too. (Before the worker's heap, both were skipped with the line: its thread shared the
    // exhausted arena.) No rate limit here: the program asks within a second.
    let dir = dump_dir("oom-one-arena");
    let mut c = common::preloaded(&prog, "glibc");
    c.envs(extra)
        .env("MALLOC_ARENA_MAX", "1")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "0");
    let o = run_stormed(c, "hostile_oom_dump, glibc, MALLOC_ARENA_MAX=1", false);
    assert!(o.status.success(), "one arena: {}", common::describe(&o));
    let err = common::stderr(&o);
    assert!(!err.contains("dump skipped"), "one arena: a dump was skipped: {err}");
    // The bytes asked for: 64 KiB blocks, then 1 KiB ones until even those fail.
    let held = common::kv(&common::stdout(&o), "bytes").expect("exhausted blocks=N bytes=B");
    let mut written = file_names(&dir);
    written.sort_by_key(|n| n.split('.').nth(2).and_then(|q| q.parse::<u64>().ok()));
    let live: Vec<u64> = written
        .iter()
        .filter(|n| n.ends_with(".json"))
        .map(|n| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(n)).expect("read dump"))
                    .expect("JSON");
            v["memory"]["live_bytes"].as_u64().expect("memory.live_bytes")
        })
        .collect();
    let pprof = written.iter().filter(|n| n.ends_with(".pb.gz")).count();
    assert!(
        live.len() >= 2 && pprof == live.len(),
        "one arena: a dump while memory ran out and one after, JSON and pprof each: {written:?}\n{err}"
    );
    assert!(
        live[0] >= held && *live.last().unwrap() < held / 4,
        "one arena: live bytes {live:?}, the program held {held} B while memory ran out\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
