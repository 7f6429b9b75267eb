//! MariaDB's own test suite under the shim: `scripts/mtr.sh` runs mariadb-test-run (Debian package
//! mariadb-test) on main.fulltext, main.select, main.subselect, main.partition, main.sp and the
//! whole innodb_fts suite, first without the shim (baseline), then once per backend with the shim
//! given to the servers only (`--mysqld-env=LD_PRELOAD=...`, `MALLOCSHIM_BACKEND`,
//! `MALLOCSHIM_PROFILE=1`, exit summary and exit dump on).
//!
//! Asserted: the baseline has no failure and no shim anywhere; under each backend, zero failures
//! and the same result as the baseline for every test (the same passes; a test may be skipped only
//! if the baseline skipped it too); every mariadbd of the run (seen in /proc) had the shim mapped
//! with that backend and no other preload; every server start wrote the shim's options table for
//! that backend; the exit summaries and exit dumps name that backend; no fallback to glibc, no
//! crash report. Missing mtr, mariadbd or tcmalloc fails the test. The whole thing is one test
//! (0.5-2.5 min per configuration on 2 shared cores), printing a table of counts and wall times.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;

/// One configuration's run: the script's `key=value` lines and its per-test results.
struct Run {
    config: String,
    kv: HashMap<String, String>,
    /// test name (`suite.test[,combination]`) -> result (pass, fail, skipped, disabled...)
    results: BTreeMap<String, String>,
    /// test name -> mtr's reason for a skip (from results.txt)
    reasons: BTreeMap<String, String>,
    report: String,
}

impl Run {
    fn get(&self, k: &str) -> &str {
        self.kv
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{}: no `{k}=` in the output\n{}", self.config, self.report))
    }
    fn num(&self, k: &str) -> u64 {
        let v = self.get(k);
        v.parse().unwrap_or_else(|_| panic!("{}: `{k}={v}` is not a number\n{}", self.config, self.report))
    }
    fn with(&self, result: &str) -> Vec<&str> {
        self.results.iter().filter(|(_, r)| r.as_str() == result).map(|(n, _)| n.as_str()).collect()
    }
}

fn run(config: &str) -> Run {
    let so = common::shim();
    let script = common::root().join("scripts/mtr.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(config)
        .env("MALLOCSHIM_SO", &so)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = common::stdout(&out);
    let stderr = common::stderr(&out);
    let dir = common::target_dir().join("mtr").join(config);
    let report = format!(
        "scripts/mtr.sh {config}: {:?}\n--- stderr\n{stderr}--- stdout (key=value lines)\n{}\n(mtr's log: {}/mtr.log; vardir {}/var)",
        out.status,
        stdout.lines().filter(|l| !l.starts_with("result ")).collect::<Vec<_>>().join("\n"),
        dir.display(),
        dir.display()
    );
    assert_ne!(out.status.code(), Some(2), "mtr.sh could not run (missing tool?)\n{report}");
    let mut kv = HashMap::new();
    let mut results = BTreeMap::new();
    for l in stdout.lines() {
        if let Some(r) = l.strip_prefix("result ") {
            let mut w = r.split_whitespace();
            let (name, res) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
            let prev = results.insert(name.to_string(), res.to_string());
            assert!(prev.is_none(), "{config}: {name} reported twice ({prev:?}, {res}) (a retry?)\n{report}");
        } else if let Some((k, v)) = l.split_once('=') {
            kv.insert(k.to_string(), v.to_string());
        }
    }
    let mut reasons = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("results.txt")) {
        for l in text.lines() {
            let mut w = l.splitn(3, ' ');
            if let (Some(n), Some(_), Some(why)) = (w.next(), w.next(), w.next()) {
                reasons.insert(n.to_string(), why.trim().to_string());
            }
        }
    }
    let r = Run { config: config.to_string(), kv, results, reasons, report };
    let failed: Vec<_> =
        r.results.iter().filter(|(_, v)| v.contains("fail")).map(|(n, v)| format!("{n} [{v}]")).collect();
    eprintln!(
        "mtr {config}: {} s, {} results: {} pass, {} fail, {} skipped, {} disabled; mtr exit {}{}",
        r.get("wall_s"),
        r.num("tests"),
        r.num("pass"),
        r.num("fail"),
        r.num("skipped"),
        r.num("disabled"),
        r.get("mtr_exit"),
        if failed.is_empty() { String::new() } else { format!("; failed: {}", failed.join(", ")) }
    );
    r
}

/// Checks that hold for every configuration: the subset was collected whole and nothing failed.
fn check_common(r: &Run, fts_tests: &[String]) {
    let rep = &r.report;
    let c = &r.config;
    assert_eq!(r.num("fail"), 0, "{c}: failed tests: {:?}\n{rep}", r.with("fail"));
    assert!(
        r.results.values().all(|v| ["pass", "skipped", "disabled"].contains(&v.as_str())),
        "{c}: unexpected results {:?}\n{rep}",
        r.results
            .iter()
            .filter(|(_, v)| !["pass", "skipped", "disabled"].contains(&v.as_str()))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.get("mtr_exit"), "0", "{c}: mtr's exit status\n{rep}");
    for t in ["main.fulltext", "main.select", "main.subselect", "main.partition", "main.sp"] {
        let mine: Vec<_> =
            r.results.iter().filter(|(n, _)| *n == t || n.starts_with(&format!("{t},"))).collect();
        assert!(!mine.is_empty(), "{c}: {t} has no result\n{rep}");
        assert!(mine.iter().all(|(_, v)| v.as_str() == "pass"), "{c}: {t}: {mine:?}\n{rep}");
    }
    for t in fts_tests {
        assert!(
            r.results.keys().any(|n| n == t || n.starts_with(&format!("{t},"))),
            "{c}: {t} (a test of the innodb_fts suite) has no result\n{rep}"
        );
    }
    assert_eq!(r.num("crash_reports"), 0, "{c}: crash report in a server's error log\n{rep}");
    assert_eq!(r.num("preload_errors"), 0, "{c}: ld.so could not preload the shim\n{rep}");
    assert!(r.num("procs_seen") > 0, "{c}: no mariadbd of this run seen in /proc\n{rep}");
}

// Long because: one mysql-test-run per backend and the comparison of their results, in the order
// they run.
#[test]
fn mtr_subset_same_results_under_each_backend() {
    for prog in ["bash", "perl", "python3", "flock", "mariadbd"] {
        common::require(prog);
    }
    for b in common::BACKENDS {
        if let Some(lib) = common::direct_lib(b).filter(|_| b != "jemalloc") {
            common::require_file(lib);
        }
    }
    let base = run("baseline");
    let mtrdir = std::path::PathBuf::from(base.get("mtrdir"));
    let mut fts_tests: Vec<String> = std::fs::read_dir(mtrdir.join("suite/innodb_fts/t"))
        .unwrap_or_else(|e| panic!("{}/suite/innodb_fts/t: {e}", mtrdir.display()))
        .filter_map(|e| {
            e.ok()?.file_name().to_str()?.strip_suffix(".test").map(|n| format!("innodb_fts.{n}"))
        })
        .collect();
    fts_tests.sort();
    assert!(fts_tests.len() > 20, "innodb_fts has only {} tests?", fts_tests.len());

    check_common(&base, &fts_tests);
    assert!(base.num("pass") >= 40, "baseline: only {} passes\n{}", base.num("pass"), base.report);
    assert_eq!(base.num("procs_shim_mapped"), 0, "baseline: a server had the shim mapped\n{}", base.report);
    assert_eq!(base.num("procs_other_preload"), 0, "baseline: a server had LD_PRELOAD set\n{}", base.report);
    assert_eq!(
        base.num("shim_tables") + base.num("summaries"),
        0,
        "baseline: shim lines in the logs\n{}",
        base.report
    );
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in base.with("skipped") {
        by_reason.entry(base.reasons.get(n).map(String::as_str).unwrap_or("?")).or_default().push(n);
    }
    eprintln!("mtr baseline: skipped tests, by mtr's reason:");
    for (why, names) in &by_reason {
        eprintln!("  {} x `{why}`: {}", names.len(), names.join(" "));
    }

    let mut rows = vec![format!(
        "| baseline (no shim) | {} | {} | {} | {} | {} |",
        base.num("tests"),
        base.num("pass"),
        base.num("skipped"),
        base.num("fail"),
        base.get("wall_s")
    )];
    for backend in common::BACKENDS {
        let r = run(backend);
        let rep = &r.report;
        check_common(&r, &fts_tests);
        // Test by test, the same result as without the shim.
        let mut diffs = Vec::new();
        for (n, v) in &base.results {
            match r.results.get(n) {
                Some(w) if w == v => {}
                other => diffs.push(format!("{n}: baseline {v}, {backend} {other:?}")),
            }
        }
        for (n, w) in &r.results {
            if !base.results.contains_key(n) {
                diffs.push(format!("{n}: not in the baseline, {backend} {w}"));
            }
        }
        assert!(
            diffs.is_empty(),
            "{backend}: results differ from the baseline:\n  {}\n{rep}",
            diffs.join("\n  ")
        );
        assert_eq!(r.with("pass"), base.with("pass"), "{backend}: passes\n{rep}");

        // The shim was in every server of the run, with this backend.
        let seen = r.num("procs_seen");
        assert_eq!(
            r.num("procs_shim_mapped"),
            seen,
            "{backend}: servers without libmallocshim.so mapped\n{rep}"
        );
        assert_eq!(r.num("procs_other_preload"), 0, "{backend}: a server had another LD_PRELOAD\n{rep}");
        let starts = r.num("server_starts");
        assert!(starts > 0, "{backend}: no server start in the error logs\n{rep}");
        assert_eq!(
            r.num("shim_tables"),
            r.num("shim_tables_backend"),
            "{backend}: options table of another backend\n{rep}"
        );
        assert!(
            r.num("shim_tables_backend") >= starts,
            "{backend}: {starts} server starts but only {} options tables for {backend}\n{rep}",
            r.num("shim_tables_backend")
        );
        assert_eq!(
            r.num("shim_profile_env"),
            r.num("shim_tables"),
            "{backend}: MALLOCSHIM_PROFILE=1 did not reach every server (options table says otherwise)\n{rep}"
        );
        assert!(r.num("summaries") > 0, "{backend}: no `mallocshim: summary` line in the error logs\n{rep}");
        assert_eq!(
            r.num("summaries"),
            r.num("summaries_backend"),
            "{backend}: a summary names another backend\n{rep}"
        );
        assert_eq!(r.num("fallback_lines"), 0, "{backend}: the shim fell back to glibc\n{rep}");
        assert!(r.num("dumps") > 0, "{backend}: no exit dump\n{rep}");
        assert_eq!(
            r.num("dumps"),
            r.num("dumps_backend"),
            "{backend}: an exit dump names another backend\n{rep}"
        );
        assert_eq!(
            r.num("dumps"),
            r.num("summaries"),
            "{backend}: every clean exit writes a summary and a dump\n{rep}"
        );
        eprintln!(
            "mtr {backend}: {seen} servers seen in /proc all with the shim mapped; {starts} starts, {} options tables, {} summaries, {} dumps naming {backend}",
            r.num("shim_tables_backend"),
            r.num("summaries_backend"),
            r.num("dumps_backend")
        );
        rows.push(format!(
            "| shim, {backend} | {} | {} | {} | {} | {} |",
            r.num("tests"),
            r.num("pass"),
            r.num("skipped"),
            r.num("fail"),
            r.get("wall_s")
        ));
    }
    eprintln!("| configuration | results | pass | skipped | fail | wall s |\n|---|---:|---:|---:|---:|---:|");
    for row in rows {
        eprintln!("{row}");
    }
}
