//! MariaDB end to end: for each backend, a throwaway mariadbd (Debian's mariadb-server 10.11) runs
//! under `LD_PRELOAD=libmallocshim.so MALLOCSHIM_BACKEND=<b> MALLOCSHIM_VERBOSE=1`, sysbench
//! prepares its dataset and runs oltp_read_only at 8 threads for 10 s, then mariadb-admin shuts the
//! server down. The test asserts: the shim is mapped in mariadbd (/proc/PID/maps), sysbench exit 0
//! with no errors, qps > 0, mariadbd's exit status 0, no crash report and no failed preload in the
//! error log, and the shim's `mallocshim: summary` line names the requested backend with
//! malloc > 0; `kill -USR1` half-way through the load gives a JSON dump within 2 s naming the
//! backend, counting malloc calls, with counts from at least 8 live threads;
//! `@@version_malloc_library` names mallocshim and the backend. The main job
//! (`main_job_prints_one_short_screen`) prints at most 40 lines ending in one recommendation,
//! keeps one options line per server in the error log, and exits 1 when a backend fell back.
//!
//! The MariaDB logic is the harness crate's (crates/mallocshim-mariadb); it holds the machine-wide
//! lock, so one mariadbd runs at a time (2 cores). A missing mariadbd, sysbench or tcmalloc is a
//! failure, never a skip.

mod common;

use mallocshim_mariadb::{
    procfs, read_dump, DumpSummary, DumpWaiter, ErrorLog, Instance, Launch, Options, Sysbench,
};
use std::time::Duration;

const SECONDS: u64 = 10;
const THREADS: u32 = 8;

fn check(backend: &str) {
    if let Some(lib) = common::direct_lib(backend).filter(|_| backend != "jemalloc") {
        common::require_file(lib);
    }
    let so = common::shim();
    let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let dumpdir = inst.subdir("dumps").unwrap();
    let launch = Launch::shim(&so, backend)
        .var("MALLOCSHIM_VERBOSE", "1")
        .var("MALLOCSHIM_DUMP_DIR", dumpdir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json");
    let srv = inst
        .start(&launch)
        .unwrap_or_else(|e| panic!("mariadbd did not start under the shim ({backend}): {e}"));
    let pid = srv.pid();
    let mapped = procfs::maps_contains(pid, "libmallocshim.so");
    srv.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
    // Half-way through the load: kill -USR1, then the time until the dump's JSON file is there.
    let waiter =
        DumpWaiter::after(pid, &dumpdir, Duration::from_secs(SECONDS.div_ceil(2)), Duration::from_secs(10));
    let sb = srv
        .sysbench(&Sysbench::new("oltp_read_only", THREADS).time(SECONDS))
        .unwrap_or_else(|e| panic!("{e}"));
    let dump = waiter.wait();
    let vml = srv.sql_value("SELECT @@version_malloc_library").unwrap_or_else(|e| panic!("{e}"));
    let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let log = ErrorLog::read(&stopped.errlog);
    let report = format!(
        "mariadb {backend}: sysbench {sb:?}\nmariadbd exit {}\ndump {dump:?}\n--- shim lines\n{}\n--- error log tail\n{}",
        stopped.status,
        log.shim_lines().join("\n"),
        log.text.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    );

    assert_eq!(mapped, Some(true), "the shim is not mapped in mariadbd\n{report}");
    assert_eq!(sb.exit, 0, "sysbench failed\n{report}");
    assert_eq!(sb.errors, 0, "sysbench reported errors\n{report}");
    let qps = sb.qps.unwrap_or(0.0);
    assert!(qps > 0.0, "qps is not > 0\n{report}");
    assert_eq!(stopped.status, 0, "mariadbd's exit status after mariadb-admin shutdown\n{report}");
    let crash = log.crash_lines();
    assert!(crash.is_empty(), "crash report in mariadbd's error log: {crash:?}\n{report}");
    assert!(!log.preload_failed(), "ld.so did not preload the shim\n{report}");
    let summary = log
        .summary()
        .unwrap_or_else(|| panic!("no `mallocshim: summary` line in mariadbd's error log\n{report}"));
    assert_eq!(
        summary.backend(),
        Some(backend),
        "the shim's summary names another backend (fallback?)\n{report}"
    );
    assert!(summary.line.starts_with("mallocshim: summary "), "{report}");
    let malloc = summary.num("malloc").unwrap_or_else(|| panic!("no malloc= in the summary\n{report}"));
    assert!(malloc > 0, "summary malloc={malloc}\n{report}");
    // kill -USR1 under load: a complete dump within 2 s, holding at least 8 live threads.
    let (path, took) = dump.unwrap_or_else(|e| panic!("{e}\n{report}"));
    let dump_ms = took.as_millis();
    assert!(dump_ms <= 2000, "the dump took {dump_ms} ms after kill -USR1 (goal: 2 s)\n{report}");
    let d = DumpSummary::of(&read_dump(&path).unwrap_or_else(|e| panic!("{e}\n{report}")));
    assert!(
        d.live_threads_with_calls >= 8,
        "fewer than 8 live threads with counts in the dump: {d:?}\n{report}"
    );
    assert!(d.count("malloc") > 0, "the dump counts no malloc: {d:?}\n{report}");
    assert_eq!(d.backend, backend, "{report}");
    // MariaDB asks for jemalloc's mallctl("version"): the shim answers with the truth.
    assert!(
        vml.contains("mallocshim") && vml.contains(&format!("({backend}")),
        "@@version_malloc_library = {vml}\n{report}"
    );
    eprintln!(
        "mariadb {backend}: qps={qps} p95_ms={:?} malloc={malloc} total_calls={} allocated_bytes={} resident_bytes={} dump_ms={dump_ms} dump_threads_with_calls={} version_malloc_library={vml}",
        sb.p95_ms,
        summary.total_calls(),
        summary.get("allocated_bytes").unwrap_or("n/a"),
        summary.get("resident_bytes").unwrap_or("n/a"),
        d.live_threads_with_calls
    );
}

/// A server per backend of `common::BACKENDS`, one after the other (`MARIADB_BACKEND=NAME`
/// runs one).
#[test]
fn mariadb_sysbench_every_backend() {
    let only = std::env::var("MARIADB_BACKEND").ok();
    for b in common::BACKENDS.into_iter().filter(|b| only.as_deref().is_none_or(|o| o == *b)) {
        check(b);
    }
}

/// Runs the README's main job (crates/mallocshim-mariadb/src/bin/mallocshim-main-job.rs) on two
/// backends and one that does not exist, with `MAIN_OUT` in a scratch directory.
fn main_job(backends: &str, out: &std::path::Path) -> std::process::Output {
    let cli = common::cli_bin();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "mallocshim-mariadb", "--bin", "mallocshim-main-job", "--quiet"])
        .current_dir(common::root())
        .status()
        .expect("build mallocshim-main-job");
    assert!(st.success(), "cargo build -p mallocshim-mariadb --bin mallocshim-main-job failed");
    let _ = std::fs::remove_dir_all(out);
    std::process::Command::new(cli.with_file_name("mallocshim-main-job"))
        .arg("--shim")
        .arg(common::shim())
        .env("MAIN_BACKENDS", backends)
        .env("MAIN_SECONDS", "4")
        .env("MAIN_OUT", out)
        .output()
        .expect("run mallocshim-main-job")
}

/// The main job's first screen: at most 40 lines in all (stdout and stderr), the table's row per
/// backend, the details file and the kept files it names exist, and the last line is the one
/// recommendation; the error log holds one options line per server. A backend that does not
/// exist (the shim falls back to glibc) fails the job: exit 1, the failure named, and the
/// recommendation says none.
#[test]
fn main_job_prints_one_short_screen() {
    let out = common::work_dir().join("main-job");
    let o = main_job("glibc jemalloc", &out);
    let all = format!("{}{}", common::stdout(&o), common::stderr(&o));
    assert!(o.status.success(), "{}", common::describe(&o));
    assert!(all.lines().count() <= 40, "{} lines:\n{all}", all.lines().count());
    let stdout = common::stdout(&o);
    let last = stdout.lines().last().unwrap_or("");
    assert!(last.starts_with("recommendation: "), "{stdout}");
    assert_eq!(stdout.matches("recommendation").count(), 1, "{stdout}");
    for b in ["glibc", "jemalloc"] {
        let row =
            stdout.lines().find(|l| l.starts_with(&format!("{b} "))).unwrap_or_else(|| panic!("{stdout}"));
        assert!(row.split_whitespace().nth(5) == Some(b), "summary column: {row}");
        let log = std::fs::read_to_string(out.join(b).join("mariadbd.err")).expect("kept error log");
        assert_eq!(log.matches("options in effect").count(), 1, "{b}: one options line\n{log}");
        assert!(!log.contains("[default; default"), "{b}: no options table at VERBOSE=1\n{log}");
    }
    let details = std::fs::read_to_string(out.join("details.txt")).expect("details.txt");
    assert!(
        details.contains("=== jemalloc: the memory verdict") && details.contains("RSS account: RSS "),
        "{details}"
    );
    assert!(stdout.contains(&out.join("details.txt").display().to_string()), "{stdout}");

    let o = main_job("glibc nosuch", &out);
    assert_eq!(o.status.code(), Some(1), "{}", common::describe(&o));
    let stdout = common::stdout(&o);
    assert!(stdout.contains("nosuch: the shim ran backend glibc instead"), "{stdout}");
    assert!(stdout.lines().last().unwrap_or("").starts_with("recommendation: none"), "{stdout}");
}
