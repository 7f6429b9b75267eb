//! MariaDB end to end: for each backend, a throwaway mariadbd (Debian's mariadb-server 10.11) runs
//! under `LD_PRELOAD=libmallocshim.so MALLOCSHIM_BACKEND=<b> MALLOCSHIM_VERBOSE=1`, sysbench
//! prepares its dataset and runs oltp_read_only at 8 threads for 10 s, then mariadb-admin shuts the
//! server down. The test asserts: no sysbench errors, qps > 0, mariadbd's exit status 0, no crash
//! report in the error log, and the shim's `mallocshim: summary` line names the requested backend
//! with malloc > 0; `kill -USR1` half-way through the load gives a JSON dump within 2 s with
//! counts from at least 8 live threads; `@@version_malloc_library` names mallocshim and the backend.
//!
//! All MariaDB logic lives in `scripts/mariadb.sh`; this test only runs
//! `scripts/mariadb-check.sh BACKEND SECONDS THREADS` and checks the `key=value` lines it prints.
//! The three tests take a shared lock: one mariadbd at a time (2 cores). Missing mariadbd or
//! sysbench is a failure, never a skip.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;

/// Serializes the tests of this binary (the script also takes a flock against other processes).
static ONE_MARIADBD: Mutex<()> = Mutex::new(());

const SECONDS: &str = "10";
const THREADS: &str = "8";

fn check(backend: &str) {
    let _guard = ONE_MARIADBD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for prog in ["bash", "flock", "mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "sysbench"] {
        common::require(prog);
    }
    if let Some(lib) = common::direct_lib(backend).filter(|_| backend != "jemalloc") {
        common::require_file(lib);
    }
    let so = common::shim();
    let script = common::root().join("scripts/mariadb-check.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .args([backend, SECONDS, THREADS])
        .env("MALLOCSHIM_SO", &so)
        .env("MALLOCSHIM_CLI", common::cli_bin())
        .env_remove("LD_PRELOAD");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = common::stdout(&out);
    let stderr = common::stderr(&out);
    let report = format!(
        "scripts/mariadb-check.sh {backend} {SECONDS} {THREADS}: {:?}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status
    );
    let kv: HashMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| -> &str {
        kv.get(k).copied().unwrap_or_else(|| panic!("no `{k}=` in the output\n{report}"))
    };
    let num = |k: &str| -> f64 {
        let v = get(k);
        v.parse().unwrap_or_else(|_| panic!("`{k}={v}` is not a number\n{report}"))
    };

    assert_eq!(get("backend"), backend, "{report}");
    assert_eq!(get("sysbench_exit"), "0", "sysbench failed\n{report}");
    assert_eq!(num("errors"), 0.0, "sysbench reported errors\n{report}");
    assert!(num("qps") > 0.0, "qps is not > 0\n{report}");
    assert_eq!(get("mariadbd_exit"), "0", "mariadbd's exit status after mariadb-admin shutdown\n{report}");
    assert_eq!(get("crash"), "0", "crash report in mariadbd's error log\n{report}");
    assert_eq!(get("preload_failed"), "0", "ld.so did not preload the shim\n{report}");
    assert_eq!(get("summary"), "1", "no `mallocshim: summary` line in mariadbd's error log\n{report}");
    assert_eq!(
        get("summary_backend"),
        backend,
        "the shim's summary names another backend (fallback?)\n{report}"
    );
    let summary = get("summary_line");
    assert!(summary.starts_with("mallocshim: summary "), "{report}");
    let malloc =
        common::kv(summary, "malloc").unwrap_or_else(|| panic!("no malloc= in the summary\n{report}"));
    assert!(malloc > 0, "summary malloc={malloc}\n{report}");
    // kill -USR1 under load: a complete dump within 2 s, holding at least 8 live threads.
    let dump_ms = num("dump_ms");
    assert!(dump_ms <= 2000.0, "the dump took {dump_ms} ms after kill -USR1 (goal: 2 s)\n{report}");
    assert!(
        num("dump_threads_with_calls") >= 8.0,
        "fewer than 8 live threads with counts in the dump\n{report}"
    );
    assert!(num("dump_malloc") > 0.0, "the dump counts no malloc\n{report}");
    assert_eq!(get("dump_backend"), backend, "{report}");
    // MariaDB asks for jemalloc's mallctl("version"): the shim answers with the truth.
    let vml = get("version_malloc_library");
    assert!(
        vml.contains("mallocshim") && vml.contains(&format!("({backend}")),
        "@@version_malloc_library = {vml}\n{report}"
    );
    assert!(out.status.success(), "the script reported a failed check\n{report}");
    eprintln!(
        "mariadb {backend}: qps={} p95_ms={} malloc={malloc} total_calls={} allocated_bytes={} resident_bytes={} dump_ms={dump_ms} dump_threads_with_calls={} version_malloc_library={vml}",
        get("qps"),
        get("p95_ms"),
        get("total_calls"),
        get("allocated_bytes"),
        get("resident_bytes"),
        get("dump_threads_with_calls")
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
