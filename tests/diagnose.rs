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

/// `mode` under every backend must give `verdict`.
fn check(mode: &str, verdict: &str) -> Vec<(&'static str, String)> {
    common::BACKENDS
        .into_iter()
        .map(|b| {
            let (out, memlog) = run_mode(mode, b);
            let first = out.lines().next().unwrap_or("");
            assert_eq!(first, format!("verdict: {verdict}"), "{b}: {out}\n--- memlog\n{memlog}");
            (b, out)
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
            out.contains("MALLOCSHIM_TRIM_INTERVAL_MS=") && out.contains("MALLOCSHIM_TRIM_ABOVE_RSS="),
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

/// With the first and last of the dumps written every second, the [2049, 4096] B class is named.
#[test]
fn live_heap_growth_names_the_size_class_from_two_dumps() {
    let dir = common::work_dir().join("diagnose-dumps");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let one = PathBuf::from("1");
    let json = PathBuf::from("json");
    let log = memlog_env(
        "growth",
        "glibc",
        "growth-with-dumps",
        &[
            ("MALLOCSHIM_DUMP_DIR", &dir),
            ("MALLOCSHIM_DUMP_INTERVAL_S", &one),
            ("MALLOCSHIM_DUMP_FORMATS", &json),
        ],
    );
    let mut dumps: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_str()?.to_string();
            let (_, seq, ext) = mallocshim_format::dump::parse_dump_file_name(&name)?;
            (ext == "json").then_some((seq, p))
        })
        .collect();
    dumps.sort();
    assert!(dumps.len() >= 2, "fewer than two dumps in {}", dir.display());
    let o = Command::new(common::cli_bin())
        .arg("diagnose")
        .arg(&log)
        .arg(&dumps[0].1)
        .arg(&dumps[dumps.len() - 1].1)
        .output()
        .unwrap();
    let out = common::stdout(&o);
    assert!(o.status.success(), "{}", common::describe(&o));
    assert_eq!(out.lines().next(), Some("verdict: live heap growth"), "{out}");
    let grew = out.lines().skip_while(|l| !l.contains("size classes whose held bytes grew")).nth(1);
    assert!(grew.is_some_and(|l| l.trim_start().starts_with("[2049, 4096] B:")), "{out}");
    eprintln!("{out}");
}

/// Under mimalloc the allocator's resident figure is its committed bytes, which count the
/// segment it commits eagerly before touching it (~32 MiB): in this small process that reads as
/// allocator-free memory above the retained threshold, so the verdict is *retained* with
/// *outside malloc* beside it. Every other backend's verdict is *outside malloc*.
#[test]
fn outside_malloc() {
    for b in common::BACKENDS {
        let (out, memlog) = run_mode("outside", b);
        let mut lines = out.lines();
        if b == "mimalloc" {
            assert!(
                out.lines().any(|l| l == "verdict: outside malloc" || l == "also: outside malloc"),
                "{b}: {out}\n--- memlog\n{memlog}"
            );
        } else {
            assert_eq!(lines.next(), Some("verdict: outside malloc"), "{b}: {out}\n--- memlog\n{memlog}");
        }
        assert!(out.contains("why: non-heap RSS grows") || b == "mimalloc", "{b}: {out}");
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
