//! `mallocshim diagnose`, black-box: tests/c/diagnose.c creates each situation on purpose under
//! the shim (every backend, memlog every 100 ms, periodic trims off) and the command must print
//! that verdict with its numbers and exit 0; bad input exits 2 with one line. What differs per
//! backend is said where it is asserted (docs/memory-account.md, "The verdict per backend").

mod common;

use std::path::PathBuf;
use std::process::Command;

/// Runs the program in `mode` under `backend`, writing the memlog `<name>.memlog.csv`: tests
/// that share a mode run in parallel, so each names its own file.
fn memlog_env(mode: &str, backend: &str, name: &str, env: &[(&str, &PathBuf)]) -> PathBuf {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let dir = common::work_dir().join("diagnose");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join(format!("{name}.memlog.csv"));
    let _ = std::fs::remove_file(&log);
    let mut c = common::preloaded(&prog, backend);
    c.arg(mode)
        .env("MALLOCSHIM_MEMLOG", &log)
        .env("MALLOCSHIM_MEMLOG_INTERVAL_MS", "100")
        .env("MALLOCSHIM_TRIM_INTERVAL_MS", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = common::run_ok(c, &format!("{mode} under {backend}"));
    assert!(common::stdout(&o).contains(&format!("done {mode}")), "{}", common::describe(&o));
    log
}

fn diagnose(log: &PathBuf) -> (String, std::process::Output) {
    let o = Command::new(common::cli_bin()).arg("diagnose").arg(log).output().unwrap();
    (common::stdout(&o), o)
}

/// Runs `mode` under `backend` and diagnoses its memlog: (output, memlog text).
fn run_mode(mode: &str, backend: &str) -> (String, String) {
    let log = memlog_env(mode, backend, &format!("{mode}-{backend}"), &[]);
    let (out, o) = diagnose(&log);
    let memlog = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(o.status.success(), "{backend}: {}\n--- memlog\n{memlog}", common::describe(&o));
    assert!(out.contains("thresholds: growth = fitted rise >"), "{out}");
    eprintln!("{mode} under {backend}:\n{out}");
    (out, memlog)
}

/// `mode` under every backend must give `verdict`. A run whose verdict differs is run once
/// more, and the second must give it: the verdicts read the shape of a few seconds of memlog,
/// and on a loaded 2-core machine the program itself can stall for seconds (CI: the outside
/// mode's main thread stopped 2 s between two of its 4 MiB steps under jemalloc, so the window
/// ended flat and read "steady"). Both outputs are printed when both differ.
fn check(mode: &str, verdict: &str) -> Vec<(&'static str, String)> {
    let want = format!("verdict: {verdict}");
    common::BACKENDS
        .into_iter()
        .map(|b| {
            let (out, memlog) = run_mode(mode, b);
            if out.lines().next() == Some(want.as_str()) {
                return (b, out);
            }
            eprintln!("{mode} under {b}: not \"{want}\" at the first run, running it again");
            let (again, memlog2) = run_mode(mode, b);
            let first = again.lines().next().unwrap_or("");
            assert_eq!(
                first, want,
                "{b}, twice: {again}\n--- memlog\n{memlog2}\n--- the first run: {out}\n--- its memlog\n{memlog}"
            );
            (b, again)
        })
        .collect()
}

/// 90% of 200 MiB of 1 KiB blocks freed, every 10th kept: every backend keeps the memory
/// (glibc in its arenas; jemalloc, tcmalloc and mimalloc in slabs, spans and pages that each
/// still hold a live block, which none of them can give back).
#[test]
fn retained_by_the_allocator() {
    for (b, out) in check("retained", "retained by the allocator") {
        let line = out.lines().find(|l| l.starts_with("a trim would return now:")).expect(&out);
        let mib: f64 = line.split_whitespace().nth(5).unwrap().parse().unwrap();
        assert!(mib >= 100.0, "{b}: ~180 MiB freed but kept, yet: {line}");
        assert!(
            out.contains("actions now, live, no restart:")
                && out.contains("  mallocshim trim PID")
                && out.contains("  mallocshim set PID TRIM_ABOVE_RSS="),
            "{b}: {out}"
        );
    }
}

#[test]
fn live_heap_growth() {
    for (b, out) in check("growth", "live heap growth") {
        assert!(out.contains("why: live bytes grow at"), "{b}: {out}");
    }
}

/// With the first and last of the dumps written every second, the [2049, 4096] B class is
/// named; with the first and last heap profiles, the call site `hold_more`.
#[test]
fn live_heap_growth_names_the_size_class_and_call_site() {
    let dir = common::work_dir().join("diagnose-dumps");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let one = PathBuf::from("1");
    let formats = PathBuf::from("json,pprof");
    let log = memlog_env(
        "growth",
        "glibc",
        "growth-with-dumps",
        &[
            ("MALLOCSHIM_DUMP_DIR", &dir),
            ("MALLOCSHIM_DUMP_INTERVAL_S", &one),
            ("MALLOCSHIM_DUMP_FORMATS", &formats),
        ],
    );
    let of = |want: &str| -> Vec<PathBuf> {
        let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.ok()?.path();
                let name = p.file_name()?.to_str()?.strip_suffix(want)?.to_string();
                // mallocshim.<pid>.<seq>.<ext>
                let seq = name.trim_end_matches('.').rsplit('.').next()?.parse::<u64>().ok()?;
                Some((seq, p))
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, p)| p).collect()
    };
    let (dumps, profiles) = (of(".json"), of(".pb.gz"));
    assert!(dumps.len() >= 2 && profiles.len() >= 2, "fewer than two dumps in {}", dir.display());
    let o = Command::new(common::cli_bin())
        .arg("diagnose")
        .arg(&log)
        .arg(&dumps[0])
        .arg(&dumps[dumps.len() - 1])
        .arg(&profiles[0])
        .arg(&profiles[profiles.len() - 1])
        .output()
        .unwrap();
    let out = common::stdout(&o);
    assert!(o.status.success(), "{}", common::describe(&o));
    assert_eq!(out.lines().next(), Some("verdict: live heap growth"), "{out}");
    let grew = out.lines().skip_while(|l| !l.contains("size classes whose held bytes grew")).nth(1);
    assert!(grew.is_some_and(|l| l.trim_start().starts_with("[2049, 4096] B:")), "{out}");
    let site = out.lines().skip_while(|l| !l.contains("call sites whose in-use bytes grew")).nth(1);
    assert!(site.is_some_and(|l| l.trim_start().starts_with("hold_more: ")), "{out}");
    eprintln!("{out}");
    // The last dump's live bytes per size class (heap-profile estimate): the 4 KiB blocks' class
    // holds the most, at least 64 MiB of the 4 MiB added every 50 ms; `report` prints them.
    let last = mallocshim_format::Dump::read(&dumps[dumps.len() - 1]).unwrap();
    let top = last.live_by_class.iter().max_by_key(|c| c.live_bytes).expect("live_by_class");
    assert_eq!((top.min_bytes, top.max_bytes), (2049, Some(4096)), "{:?}", last.live_by_class);
    assert!(top.live_bytes >= 64 << 20, "{:?}", last.live_by_class);
    let r = Command::new(common::cli_bin()).arg("report").arg(&dumps[dumps.len() - 1]).output().unwrap();
    let rep = common::stdout(&r);
    let row =
        rep.lines().skip_while(|l| !l.contains("live bytes by size class")).find(|l| l.contains("<=4K"));
    assert!(row.is_some(), "{rep}");
}

#[test]
fn outside_malloc() {
    for (b, out) in check("outside", "outside malloc") {
        assert!(out.contains("why: non-heap RSS grows"), "{b}: {out}");
    }
}

#[test]
fn steady() {
    check("steady", "steady");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = common::work_dir().join("diagnose");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "not,a,memlog\n1,2\n").unwrap();
    for p in [bad, dir.join("missing.csv")] {
        let (_, o) = diagnose(&p);
        assert_eq!(o.status.code(), Some(2), "{}", common::describe(&o));
        let err = common::stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("mallocshim diagnose:"), "{err}");
    }
}

/// A real mariadbd under glibc with trimming off: the harness's FULLTEXT load (300,000
/// documents, 4 phrase searches for 20 s, 10 s idle) with a memlog; the verdict must be
/// *retained by the allocator* (glibc keeps what the searches freed).
#[test]
fn mariadb_fulltext_trim_off_is_retained() {
    use mallocshim_mariadb::fulltext::{self, RunConfig, Settings};
    let dir = common::work_dir().join("diagnose-mariadb");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut settings = Settings::new(common::shim());
    settings.memlog_dir = Some(dir.clone());
    let configs = vec![RunConfig::parse("off", settings.trim_ms).unwrap()];
    let res = fulltext::run(&settings, &configs).unwrap_or_else(|e| panic!("{e}"));
    assert!(res.ok, "the FULLTEXT load reported a failed check\n{res:#?}");
    let log = dir.join("off.csv");
    let (out, o) = diagnose(&log);
    let memlog = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(o.status.success(), "{}\n--- memlog\n{memlog}", common::describe(&o));
    assert_eq!(out.lines().next(), Some("verdict: retained by the allocator"), "{out}\n--- memlog\n{memlog}");
    eprintln!("mariadbd FULLTEXT, glibc, trim off:\n{out}");
}

/// A real mariadbd with performance_schema on: `report --mysql-socket` joins its threads with
/// performance_schema.threads, so the busiest (a sysbench connection) is named by its routine
/// and as `thread/sql/one_connection`, and InnoDB's and the tpool's threads by their P_S names;
/// `diagnose` with two dumps names thread roles by P_S name. Any thread the dump has that P_S
/// knows must carry the same name in both views.
#[test]
fn mariadb_threads_named_by_performance_schema() {
    use mallocshim_mariadb::{DumpWaiter, Instance, Launch, Options, Sysbench};
    use std::time::Duration;
    let opts = Options { extra_opts: vec!["--performance-schema=ON".into()], ..Options::default() };
    let inst = Instance::create(opts).unwrap_or_else(|e| panic!("{e}"));
    let dumpdir = inst.subdir("dumps").unwrap();
    let memlog = dumpdir.join("memlog.csv");
    let launch = Launch::shim(common::shim(), "glibc")
        .var("MALLOCSHIM_DUMP_DIR", dumpdir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json")
        .var("MALLOCSHIM_MEMLOG", memlog.display().to_string())
        .var("MALLOCSHIM_MEMLOG_INTERVAL_MS", "200");
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd under the shim: {e}"));
    srv.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
    let dump = |what: &str| {
        DumpWaiter::after(srv.pid(), &dumpdir, Duration::ZERO, Duration::from_secs(10))
            .wait()
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .0
    };
    let first = dump("first dump");
    // The dump and the joins run while sysbench's 4 connections are open: a connection that
    // has ended is no longer in performance_schema.threads.
    let sock = inst.socket.clone();
    let cli = move |args: &[&str], files: &[&PathBuf]| {
        let mut c = Command::new(common::cli_bin());
        c.args(args).args(["--mysql-user", "root", "--mysql-socket"]).arg(&sock).args(files);
        c.output().unwrap()
    };
    // 4 s into the 8 s sysbench run: the second dump, then the joins.
    let waiter = DumpWaiter::after(srv.pid(), &dumpdir, Duration::from_secs(4), Duration::from_secs(10));
    let joins = std::thread::spawn(move || {
        let last = waiter.wait().unwrap_or_else(|e| panic!("second dump: {e}")).0;
        let report = cli(&["report", "--top", "1000"], &[&last]);
        let kv = cli(&["report", "--format", "kv"], &[&last]);
        let diag = cli(&["diagnose"], &[&memlog, &first, &last]);
        (report, kv, diag)
    });
    let sb = srv.sysbench(&Sysbench::new("oltp_read_only", 4).time(8)).unwrap_or_else(|e| panic!("{e}"));
    let (report, kv, diag) = joins.join().expect("the joins");
    let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((sb.exit, sb.errors, stopped.status), (0, 0, 0), "sysbench {sb:?}");
    let out = common::stdout(&report);
    assert!(report.status.success(), "{}", common::describe(&report));
    let head = out.lines().find(|l| l.contains(" routine ") && l.contains("performance_schema")).expect(&out);
    assert!(head.trim_start().starts_with("tid"), "{out}");
    let rows: Vec<&str> =
        out.lines().skip_while(|l| *l != head).skip(1).take_while(|l| !l.trim().is_empty()).collect();
    // The busiest thread is a sysbench connection: a routine and its P_S name.
    let busiest = rows.iter().find(|l| l.contains(" live ")).expect(&out);
    assert!(busiest.contains("thread/sql/one_connection"), "busiest thread not a connection:\n{out}");
    assert!(busiest.contains("mariadbd+0x"), "connection thread without its routine:\n{out}");
    let conns = rows.iter().filter(|l| l.contains("thread/sql/one_connection")).count();
    assert!(conns >= 4, "the 4 sysbench connections by P_S name: {conns}\n{out}");
    assert!(rows.iter().any(|l| l.contains("thread/innodb/")), "no InnoDB thread named\n{out}");
    assert!(
        rows.iter().any(|l| l.contains("libstdc++.so.6") && l.contains("+0x") && l.contains("thread/")),
        "no tpool (std::thread) thread named by P_S\n{out}"
    );
    let joined = common::kv(&common::stdout(&kv), "ps_threads_joined").expect("ps_threads_joined");
    assert!(joined >= 8, "{}", common::stdout(&kv));
    let d = common::stdout(&diag);
    assert!(diag.status.success(), "{}", common::describe(&diag));
    assert!(d.contains("thread roles (performance_schema names)"), "{d}");
    // Non-heap memory set against the buffer pool, read through the same client (issue 38 item 2).
    let pool = d.lines().find(|l| l.starts_with("InnoDB buffer pool: ")).expect(&d);
    assert!(pool.contains("of data pages in use") && pool.contains("of innodb_buffer_pool_size"), "{pool}");
    // ... and against the other buffers mmap()ed at start (MariaDB's defaults: log 2 x 16 MiB,
    // key cache 128 MiB, Aria 128 MiB).
    let other = d.lines().find(|l| l.starts_with("other server buffers outside malloc")).expect(&d);
    assert!(
        other.contains("InnoDB log buffer 32.0 MiB") && other.contains("Aria page cache 128.0 MiB"),
        "{other}"
    );
    eprintln!("{out}\n{d}");
}

/// A client that cannot connect: one line, prefixed `mallocshim <command>:`, exit 2, for a
/// valid dump and memlog (so the client is what fails).
#[test]
fn performance_schema_join_fails_in_one_line() {
    common::require("mariadb");
    let dir = common::work_dir().join("diagnose-ps");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = memlog_env(
        "steady",
        "glibc",
        "steady-ps",
        &[("MALLOCSHIM_DUMP_DIR", &dir), ("MALLOCSHIM_DUMP_AT_EXIT", &PathBuf::from("1"))],
    );
    let dump = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a dump at exit");
    for cmd in ["report", "diagnose"] {
        let mut c = Command::new(common::cli_bin());
        c.arg(cmd).args(["--mysql-socket", "/nonexistent/mysqld.sock"]);
        if cmd == "diagnose" {
            c.arg(&log);
        }
        let o = c.arg(&dump).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", common::describe(&o));
        let err = common::stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("mallocshim {cmd}: the client mariadb failed")), "{err}");
        assert!(err.contains("/nonexistent/mysqld.sock"), "{err}");
    }
}
