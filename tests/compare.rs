//! The comparison runner `mallocshim compare` (crates/mallocshim-compare/src/compare/): a short real run
//! (two backends, one workload, two thread counts, two rounds, 3 s cells) whose CSV, report (its
//! 95% intervals and one-line answer recomputed here) and PNGs are parsed back and checked against
//! each other; `--rounds auto` stopped by `--budget-s`; Ctrl-C in the middle (no server left,
//! finished cells kept); `--variant` (a backend again with its variables, and its answer line);
//! bad flags (one-line error, exit 2, nothing started); --help.
//! Needs mariadbd and sysbench: fails when they are missing.
//!
//! Long because: one test binary per feature: its cases share the tool checks and the scratch runs
//! above them.

mod common;
use common::median_or_nan;

use common::{describe, require, shim, stderr, work_dir};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `mallocshim compare`, without `--shim`.
fn compare() -> Command {
    let mut c = common::plain(common::cli_bin());
    c.arg("compare");
    c
}

fn runner() -> Command {
    let mut c = compare();
    c.arg("--shim").arg(shim());
    c
}

fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("cmp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// cells.csv as a list of column -> value maps; checks the header.
fn read_csv(path: &Path) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut lines = text.lines();
    let head: Vec<String> = lines.next().expect("CSV header").split(',').map(String::from).collect();
    for col in [
        "round",
        "config",
        "backend",
        "mode",
        "workload",
        "threads",
        "qps",
        "tps",
        "p95_ms",
        "errors",
        "queries",
        "cpu_us_per_query",
        "allocs_per_query",
        "dump",
    ] {
        assert!(head.iter().any(|h| h == col), "cells.csv has no column {col}: {head:?}");
    }
    lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            assert_eq!(v.len(), head.len(), "CSV line with a wrong field count: {l}");
            head.iter().cloned().zip(v.into_iter().map(String::from)).collect()
        })
        .collect()
}

fn f(row: &BTreeMap<String, String>, k: &str) -> f64 {
    row[k].parse().unwrap_or_else(|_| panic!("column {k} is not a number: {row:?}"))
}

/// The rows of the Markdown table under `## <heading>`: header cells and data rows.
fn md_table(md: &str, heading: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let start = md
        .find(&format!("## {heading}\n"))
        .unwrap_or_else(|| panic!("report has no section {heading:?}:\n{md}"));
    let lines: Vec<&str> = md[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(lines.len() >= 3, "section {heading:?} has no table");
    let cells =
        |l: &str| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>();
    (cells(lines[0]), lines[2..].iter().map(|l| cells(l)).collect())
}

/// Decodes a PNG completely (signature, chunks, CRCs, zlib) and returns its size.
fn check_png(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut r = dec.read_info().unwrap_or_else(|e| panic!("{}: bad PNG: {e}", path.display()));
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).unwrap_or_else(|e| panic!("{}: bad PNG data: {e}", path.display()));
    assert!(
        info.width >= 400 && info.height >= 300,
        "{}: tiny image {}x{}",
        path.display(),
        info.width,
        info.height
    );
    // not a blank canvas: more than one colour
    assert!(buf.iter().any(|&b| b != buf[0]), "{}: the image is one flat colour", path.display());
    (info.width, info.height)
}

/// The geometric mean of per-round ratios and its 95% t-interval (as docs/compare.md gives it),
/// computed here independently: (lo, ratio, hi).
fn t_interval(ratios: &[f64]) -> (f64, f64, f64) {
    const T975: [f64; 4] = [12.706, 4.303, 3.182, 2.776];
    let n = ratios.len();
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let m = logs.iter().sum::<f64>() / n as f64;
    let sd = (logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let h = T975[n - 2] * sd / (n as f64).sqrt();
    ((m - h).exp(), m.exp(), (m + h).exp())
}

/// Processes whose command line mentions `needle` (the run's work directory).
fn procs_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Ok(c) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                v.push((pid, c));
            }
        }
    }
    v
}

fn require_tools() {
    for t in ["mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "sysbench"] {
        require(t);
    }
}

// Long because: one `mallocshim compare` run (minutes of mariadbd) checked from every output it
// writes, CSV, report.md and plots against each other; split, each check would rerun or pass the
// run around.
#[test]
fn short_run_csv_report_and_plots_agree() {
    require_tools();
    let out = scratch("short");
    let workdir = scratch("short-wd");
    let o = runner()
        .args([
            "--backends",
            "glibc,jemalloc",
            "--workloads",
            "oltp_point_select",
            "--threads",
            "1,2",
            "--time",
            "3",
        ])
        .args(["--rounds", "2", "--tables", "1", "--table-size", "1000", "--memlog-interval-ms", "250"])
        .arg("--out")
        .arg(&out)
        .arg("--workdir")
        .arg(&workdir)
        .output()
        .expect("run mallocshim compare");
    assert!(o.status.success(), "runner failed: {}", describe(&o));
    let err = stderr(&o);
    assert!(err.contains("cell 8/8 done"), "no progress lines: {err}");
    assert!(err.contains("eta"), "no eta in the progress: {err}");

    // every cell present once, measured, without errors
    let rows = read_csv(&out.join("cells.csv"));
    assert_eq!(rows.len(), 8, "2 rounds x 2 backends x 2 thread counts: {rows:?}");
    for round in ["1", "2"] {
        for cfg in ["glibc", "jemalloc"] {
            for t in ["1", "2"] {
                let n = rows
                    .iter()
                    .filter(|r| r["round"] == round && r["config"] == cfg && r["threads"] == t)
                    .count();
                assert_eq!(n, 1, "cell round {round} {cfg} threads {t} appears {n} times");
            }
        }
    }
    for r in &rows {
        assert_eq!(r["workload"], "oltp_point_select");
        assert_eq!(r["mode"], "shim");
        assert!(f(r, "qps") > 0.0 && f(r, "tps") > 0.0 && f(r, "queries") > 0.0, "no throughput: {r:?}");
        assert_eq!(r["errors"], "0", "sysbench errors: {r:?}");
        assert!(f(r, "cpu_us_per_query") > 0.0, "no CPU time: {r:?}");
        // point_select: about one statement per transaction, a few allocations each
        let apq = f(r, "allocs_per_query");
        assert!(apq > 0.0 && apq < 1000.0, "allocations per query {apq}: {r:?}");
        let dump = mallocshim_format::Dump::read(&out.join(&r["dump"])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dump.backend, r["backend"], "the shim ran another backend: {r:?}");
    }
    // rounds alternate: round 2 starts with the backend round 1 ended with
    let order: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("mallocshim compare: server pid "))
        .filter_map(|l| l.rsplit('(').next())
        .collect();
    assert_eq!(
        order,
        ["prepare)", "r1-glibc)", "r1-jemalloc)", "r2-jemalloc)", "r2-glibc)"],
        "server starts: {err}"
    );

    // the report's medians and ratios are the CSV's
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(
        md.contains(
            "Run complete (stopped after 2 round(s): the 2 round(s) asked for (--rounds 2)), 8 cells"
        ),
        "{md}"
    );
    let med = |cfg: &str, t: &str, col: &str| {
        median_or_nan(
            rows.iter()
                .filter(|r| r["config"] == cfg && r["threads"] == t)
                .map(|r| f(r, col))
                .collect::<Vec<f64>>(),
        )
    };
    for (section, col, dec) in
        [("oltp_point_select: qps", "qps", 1usize), ("oltp_point_select: CPU/query", "cpu_us_per_query", 2)]
    {
        let (head, body) = md_table(&md, section);
        assert_eq!(head, ["threads", "glibc", "jemalloc", "jemalloc/glibc"], "{section}");
        assert_eq!(body.len(), 2, "{section}: one row per thread count");
        for row in &body {
            let t = row[0].as_str();
            let (g, j) = (med("glibc", t, col), med("jemalloc", t, col));
            let num =
                |s: &str| s.parse::<f64>().unwrap_or_else(|_| panic!("{section}: {s:?} is not a number"));
            let tol = 0.51 * 10f64.powi(-(dec as i32));
            assert!(
                (num(&row[1]) - g).abs() <= tol,
                "{section} threads {t}: glibc {} but CSV median {g}",
                row[1]
            );
            assert!(
                (num(&row[2]) - j).abs() <= tol,
                "{section} threads {t}: jemalloc {} but CSV median {j}",
                row[2]
            );
            // `ratio (lo–hi) mark`: the geometric mean of the per-round ratios (round against
            // round), its 95% t-interval (2 rounds: t = 12.706), `~` when it includes 1.
            let cell: Vec<&str> = row[3].split_whitespace().collect();
            let per_round: Vec<f64> = ["1", "2"]
                .iter()
                .map(|r| {
                    let v = |cfg: &str| {
                        rows.iter()
                            .find(|x| x["config"] == cfg && x["threads"] == t && x["round"] == *r)
                            .map(|x| f(x, col))
                            .unwrap()
                    };
                    v("jemalloc") / v("glibc")
                })
                .collect();
            let (lo, gm, hi) = t_interval(&per_round);
            assert!(
                (num(cell[0]) - gm).abs() <= 0.0006,
                "{section} threads {t}: ratio {} but CSV gives {gm:.4}",
                row[3]
            );
            let range =
                cell.get(1).unwrap_or_else(|| panic!("{section} threads {t}: no interval in {:?}", row[3]));
            let (rlo, rhi) = range.trim_matches(['(', ')']).split_once('–').expect("lo–hi");
            assert!(
                (num(rlo) - lo).abs() <= 0.0011 && (num(rhi) - hi).abs() <= 0.0011,
                "{section} threads {t}: interval {range} but CSV gives ({lo:.3}–{hi:.3}) from {per_round:?}"
            );
            assert_eq!(
                cell.get(2) == Some(&"~"),
                lo <= 1.0 && hi >= 1.0,
                "{section} threads {t}: {:?}",
                row[3]
            );
        }
    }
    assert!(md.contains("Ratios read `ratio (95% interval) mark`"), "no legend:\n{md}");
    // the answer: one line pooling both thread counts, on stderr and at the top of the report
    let pooled: Vec<f64> = ["1", "2"]
        .iter()
        .map(|r| {
            let l = |t: &str| {
                let v = |cfg: &str| {
                    rows.iter()
                        .find(|x| x["config"] == cfg && x["threads"] == t && x["round"] == *r)
                        .map(|x| f(x, "qps"))
                        .unwrap()
                };
                (v("jemalloc") / v("glibc")).ln()
            };
            ((l("1") + l("2")) / 2.0).exp()
        })
        .collect();
    let (_, gm, _) = t_interval(&pooled);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("mallocshim compare: answer: "))
        .unwrap_or_else(|| panic!("no answer line on stderr: {err}"));
    assert!(
        md.contains(&format!("## Answer\n\n- {line}\n")),
        "the report's answer is not stderr's {line:?}:\n{md}"
    );
    assert!(line.starts_with("jemalloc vs glibc: ") && line.ends_with("; 2 rounds"), "{line}");
    if !line.contains("same qps") {
        let pct: f64 = line["jemalloc vs glibc: qps ".len()..]
            .split('%')
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no qps change in {line:?}"));
        assert!((pct - (gm - 1.0) * 100.0).abs() <= 0.15, "{line}: CSV gives {:+.2}%", (gm - 1.0) * 100.0);
    }
    assert!(line.contains("CPU/query") && line.contains("peak RSS"), "{line}");
    assert!(md.contains("cannot be told from noise with 2 rounds"), "{md}");
    for s in ["## Memory", "## malloc and free latency per size class", "### malloc", "### free"] {
        assert!(md.contains(s), "report has no {s:?}:\n{md}");
    }
    let (mhead, mrows) = md_table(&md, "Memory (RSS over each server run)");
    assert_eq!(mhead[..4], ["configuration", "peak RSS MiB", "peak / glibc", "final RSS MiB"]);
    for r in &mrows {
        let peak: f64 = r[1].parse().unwrap_or_else(|_| panic!("peak RSS {:?}", r[1]));
        let fin: f64 = r[3].parse().unwrap_or_else(|_| panic!("final RSS {:?}", r[3]));
        // against glibc: its 95% interval over the 2 paired runs, `ratio (lo–hi)`
        let iv = r[2].split_whitespace().collect::<Vec<_>>();
        match r[0].as_str() {
            "glibc" => assert_eq!(r[2], "-"),
            _ => assert!(
                iv.len() >= 2 && iv[1].starts_with('(') && iv[1].contains('–'),
                "peak / glibc {:?}",
                r[2]
            ),
        }
        assert!(peak >= fin && fin > 10.0, "RSS of a mariadbd in MiB: peak {peak} final {fin}");
    }

    // memlogs: one per server run, header and rows
    for stem in ["r1-glibc", "r1-jemalloc", "r2-glibc", "r2-jemalloc"] {
        let t = std::fs::read_to_string(out.join(format!("memlog/{stem}.csv"))).expect("memlog");
        let mut l = t.lines();
        // The schema's header (the runner's sampler and the shim both write it).
        assert_eq!(l.next(), Some(mallocshim_format::memlog::HEADER));
        assert!(l.count() >= 3, "{stem}: fewer than 3 samples at 250 ms over > 6 s");
    }

    // plots: valid PNGs referenced by the report
    for p in ["qps_oltp_point_select.png", "rss.png", "latency.png"] {
        check_png(&out.join(p));
        assert!(md.contains(&format!("]({p})")), "report does not show {p}");
    }
    assert!(!workdir.exists(), "work directory {} left behind", workdir.display());
    assert!(procs_mentioning(&workdir.to_string_lossy()).is_empty(), "a process of the run survives");
}

// Long because: one interrupted run, its SIGINT timed against the cells it has finished, then what
// is left on disk and in /proc; the order is the test.
#[test]
fn ctrl_c_stops_the_server_and_keeps_finished_cells() {
    require_tools();
    let out = scratch("sigint");
    let workdir = scratch("sigint-wd");
    let mut child = runner()
        .args([
            "--backends",
            "glibc,jemalloc",
            "--workloads",
            "oltp_point_select",
            "--threads",
            "1,2",
            "--time",
            "3",
        ])
        .args(["--rounds", "3", "--tables", "1", "--table-size", "1000"])
        .arg("--out")
        .arg(&out)
        .arg("--workdir")
        .arg(&workdir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mallocshim compare");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let mut servers = Vec::new();
    // interrupt while the third cell runs (on the second server)
    let t0 = Instant::now();
    loop {
        let l = rx
            .recv_timeout(Duration::from_secs(600))
            .unwrap_or_else(|_| panic!("runner stalled or ended early:\n{}", log.join("\n")));
        if let Some(rest) = l.strip_prefix("mallocshim compare: server pid ") {
            servers.push(rest.split_whitespace().next().unwrap().parse::<u32>().unwrap());
        }
        let hit = l.contains("cell 3/12:");
        log.push(l);
        if hit {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(900), "no third cell:\n{}", log.join("\n"));
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t1.elapsed() < Duration::from_secs(120), "runner still running 120 s after SIGINT");
        std::thread::sleep(Duration::from_millis(100));
    };
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
        log.push(l);
    }
    let log = log.join("\n");
    assert_eq!(status.code(), Some(130), "exit status after SIGINT: {status:?}\n{log}");
    assert!(servers.len() >= 2, "prepare server and the first measuring one: {log}");
    for p in &servers {
        let alive = std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&*workdir.to_string_lossy()))
            .unwrap_or(false);
        assert!(!alive, "server pid {p} of the run is still running");
    }
    assert!(
        procs_mentioning(&workdir.to_string_lossy()).is_empty(),
        "a process of the run survives: {:?}",
        procs_mentioning(&workdir.to_string_lossy())
    );
    assert!(!workdir.exists(), "work directory left behind");
    let rows = read_csv(&out.join("cells.csv"));
    assert_eq!(rows.len(), 2, "the two cells finished before SIGINT, and only they: {rows:?}\n{log}");
    for r in &rows {
        assert!(f(r, "qps") > 0.0 && r["errors"] == "0", "{r:?}");
        assert_eq!(r["round"], "1");
    }
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md of the finished cells");
    assert!(md.contains("interrupted after 2 of 12 cells"), "{md}");
    assert!(md.contains("One round: the ratios have no spread and none can be told from noise"), "{md}");
}

/// `--rounds auto` ended by `--budget-s` after its first round (the first always runs), with one
/// thread count: the run says what stopped it, answers in one line that one round cannot tell
/// noise from a difference, and draws the qps chart (bars on an axis from zero: the unit test in
/// charts.rs checks the geometry; here that it is drawn and shown).
#[test]
fn auto_rounds_stop_on_the_budget_and_answer_in_one_line() {
    require_tools();
    let out = scratch("auto");
    let workdir = scratch("auto-wd");
    let o = runner()
        .args(["--backends", "glibc,jemalloc", "--workloads", "oltp_point_select", "--threads", "2"])
        .args(["--time", "2", "--rounds", "auto", "--budget-s", "1", "--tables", "1", "--table-size", "1000"])
        .arg("--out")
        .arg(&out)
        .arg("--workdir")
        .arg(&workdir)
        .output()
        .expect("run mallocshim compare");
    assert!(o.status.success(), "runner failed: {}", describe(&o));
    let err = stderr(&o);
    let rows = read_csv(&out.join("cells.csv"));
    assert_eq!(rows.len(), 2, "one round of 2 configurations: {rows:?}");
    let stop = "stopped after 1 round(s): the time budget (--budget-s 1): another round";
    assert!(err.contains(&format!("mallocshim compare: {stop}")), "{err}");
    let answers: Vec<&str> =
        err.lines().filter_map(|l| l.strip_prefix("mallocshim compare: answer: ")).collect();
    assert_eq!(answers.len(), 1, "one comparison, one line: {err}");
    let a = answers[0];
    assert!(a.starts_with("jemalloc vs glibc: qps "), "{a}");
    assert!(a.contains("not distinguishable from noise in 1 round"), "{a}");
    let q = |cfg: &str| rows.iter().find(|r| r["config"] == cfg).map(|r| f(r, "qps")).unwrap();
    assert!(a.contains(&format!("qps {:+.1}%", (q("jemalloc") / q("glibc") - 1.0) * 100.0)), "{a}: {rows:?}");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains(stop) && md.contains(&format!("- {a}\n")), "{md}");
    assert!(md.contains("rounds: auto (3 to 20, until every headline interval is within ±1.0%)"), "{md}");
    check_png(&out.join("qps_oltp_point_select.png"));
    assert!(md.contains("](qps_oltp_point_select.png)"), "{md}");
}

/// Runs the runner with bad arguments: exit 2 within seconds, one line naming the problem, no
/// output directory, no server.
fn bad(args: &[&str], expect: &str) {
    let out = scratch("bad");
    let mut cmd = runner(); // builds the command first: the build is not the runner's time
    let t0 = Instant::now();
    let o = cmd.args(args).arg("--out").arg(&out).output().expect("run mallocshim compare");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", describe(&o));
    assert!(t0.elapsed() < Duration::from_secs(10), "{args:?}: took {:?}", t0.elapsed());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: want one line, got:\n{err}");
    assert!(lines[0].starts_with("mallocshim compare: ") && lines[0].contains(expect), "{args:?}: {err}");
    assert!(!out.exists(), "{args:?}: output directory created");
    assert!(o.stdout.is_empty(), "{args:?}: printed on stdout");
}

#[test]
fn bad_flags_fail_fast_with_one_line() {
    bad(&["--backends", "glibc,hoard"], "unknown backend \"hoard\"");
    bad(&["--mysqld", "/nonexistent/mysqld"], "--mysqld /nonexistent/mysqld: no such file");
    bad(&["--threads", "0"], "'0'");
    bad(&["--threads", "1,0,4"], "'0'");
    bad(&["--threads", "two"], "'two'");
    bad(&["--workloads", "oltp_nothing"], "unknown workload \"oltp_nothing\"");
    bad(&["--workloads", "/nonexistent/w.lua"], "no such file");
    bad(&["--time", "0"], "--time");
    bad(&["--rounds", "0"], "want a number of rounds (1 or more) or `auto`");
    bad(&["--rounds", "sometimes"], "'sometimes'");
    bad(&["--rounds", "auto", "--target-pct", "0"], "want a percentage above 0");
    bad(&["--rounds", "auto", "--max-rounds", "2"], "--max-rounds");
    bad(&["--frobnicate"], "--frobnicate");
    bad(&["--variant", "threshold"], "want NAME:K=V");
    bad(&["--variant", "thr:MALLOCSHIM_BACKEND=jemalloc"], "which the runner sets");
    bad(&["--live", "heap"], "--live \"heap\": want NAME:K=V");
    bad(&["--live", "x:K=1", "--variant", "x:K=2"], "a --variant has that name");
    let o = compare()
        .args(["--shim", "/nonexistent/libmallocshim.so", "--out"])
        .arg(scratch("noshim"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("shim library /nonexistent/libmallocshim.so not found"), "{}", describe(&o));
}

#[test]
fn help_explains_every_flag() {
    let o = compare().arg("--help").output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let h = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--out",
        "--backends",
        "--workloads",
        "--threads",
        "--time",
        "--warmup",
        "--rounds",
        "--target-pct",
        "--max-rounds",
        "--budget-s",
        "--direct",
        "--shim",
        "--mysqld",
        "--mysqld-opt",
        "--buffer-pool",
        "--tables",
        "--table-size",
        "--prepare-sql",
        "--sysbench-opt",
        "--memlog-interval-ms",
        "--env",
        "--variant",
        "--workdir",
        "--keep-workdir",
    ] {
        let listed = h.lines().any(|l| {
            let t = l.trim_start();
            t == flag || t.starts_with(&format!("{flag} "))
        });
        assert!(listed, "--help does not list {flag}:\n{h}");
    }
    assert!(
        h.contains("[default: glibc,jemalloc,tcmalloc]") && h.contains("[default: 1,2,4,8,16,32,64]"),
        "{h}"
    );
}

#[test]
fn custom_sql_and_lua_workloads_and_direct_preload() {
    require_tools();
    let out = scratch("custom");
    let workdir = scratch("custom-wd");
    let src = scratch("custom-src");
    std::fs::create_dir_all(&src).unwrap();
    let sql = src.join("two_selects.sql");
    std::fs::write(&sql, "-- two statements, one event\nSELECT c FROM sbtest1 WHERE id = 10;\nSELECT COUNT(*)\n  FROM sbtest1 WHERE id BETWEEN 1 AND 100;\n").unwrap();
    let lua = src.join("sum_k.lua");
    std::fs::write(
        &lua,
        "function thread_init() drv = sysbench.sql.driver(); con = drv:connect() end\n\
         function thread_done() con:disconnect() end\n\
         function event() con:query(\"SELECT SUM(k) FROM sbtest1 WHERE id < 50\") end\n",
    )
    .unwrap();
    let wl = format!("{},{}", sql.display(), lua.display());
    let o = runner()
        .args([
            "--backends",
            "glibc",
            "--direct",
            "--workloads",
            &wl,
            "--threads",
            "1",
            "--time",
            "2",
            "--rounds",
            "1",
        ])
        .args(["--tables", "1", "--table-size", "1000", "--memlog-interval-ms", "200"])
        .arg("--out")
        .arg(&out)
        .arg("--workdir")
        .arg(&workdir)
        .output()
        .expect("run mallocshim compare");
    assert!(o.status.success(), "runner failed: {}", describe(&o));
    let rows = read_csv(&out.join("cells.csv"));
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        assert!(f(r, "qps") > 0.0 && r["errors"] == "0", "{r:?}");
        assert!(["two_selects", "sum_k"].contains(&r["workload"].as_str()), "{r:?}");
        if r["config"] == "glibc-direct" {
            assert_eq!(
                (r["mode"].as_str(), r["dump"].as_str(), r["allocs_per_query"].as_str()),
                ("direct", "", ""),
                "{r:?}"
            );
        } else {
            assert_eq!(r["mode"], "shim");
            assert!(!r["dump"].is_empty());
        }
        if r["workload"] == "two_selects" {
            // one event = the file's two statements
            assert!((f(r, "qps") / f(r, "tps") - 2.0).abs() < 0.01, "qps/tps of the SQL workload: {r:?}");
        }
    }
    let direct_memlog = std::fs::read_to_string(out.join("memlog/r1-glibc-direct.csv")).unwrap();
    let line = direct_memlog.lines().nth(1).expect("a sample");
    assert!(line.ends_with(",,,,,") && line.split(',').nth(1).unwrap().parse::<u64>().unwrap() > 0, "{line}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let (head, body) = md_table(&md, "two_selects: shim overhead");
    assert_eq!(head[1], "glibc qps shim/direct");
    let q = |cfg: &str| {
        rows.iter()
            .find(|r| r["config"] == cfg && r["workload"] == "two_selects")
            .map(|r| f(r, "qps"))
            .unwrap()
    };
    assert_eq!(body[0][1], format!("{:.3}", q("glibc") / q("glibc-direct")));
}

/// A short run on a small dataset (1 table of 1,000 rows) with `args`, into a scratch folder
/// named `name`: the folder and what the runner printed.
fn small_run(name: &str, args: &[&str]) -> (PathBuf, std::process::Output) {
    let out = scratch(name);
    let o = runner()
        .args(args)
        .args(["--tables", "1", "--table-size", "1000"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run mallocshim compare");
    (out, o)
}

/// `--variant thr:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M`: glibc runs twice a round, as `glibc` and
/// as `glibc+thr`; only the variant's server had the threshold (its dump says what the shim set,
/// from mallopt), and the answer sets the variant against glibc.
#[test]
fn a_variant_runs_its_backend_again_with_its_variables() {
    require_tools();
    let (out, o) = small_run(
        "variant",
        &[
            "--backends",
            "glibc",
            "--variant",
            "thr:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M",
            "--workloads",
            "oltp_point_select",
            "--threads",
            "1",
            "--time",
            "2",
            "--rounds",
            "2",
        ],
    );
    assert!(o.status.success(), "runner failed: {}", describe(&o));
    let rows = read_csv(&out.join("cells.csv"));
    let configs: Vec<&str> = rows.iter().map(|r| r["config"].as_str()).collect();
    assert_eq!(configs.iter().filter(|c| **c == "glibc").count(), 2, "{configs:?}");
    assert_eq!(configs.iter().filter(|c| **c == "glibc+thr").count(), 2, "{configs:?}");
    for r in &rows {
        assert!(f(r, "qps") > 0.0 && r["errors"] == "0" && r["mode"] == "shim", "{r:?}");
        let dump = mallocshim_format::Dump::read(&out.join(&r["dump"])).unwrap_or_else(|e| panic!("{e}"));
        let want = if r["config"] == "glibc+thr" { 1 << 20 } else { 0 };
        assert_eq!(dump.trim.glibc_trim_threshold_bytes, want, "{r:?}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let answer: Vec<&str> = md.lines().filter(|l| l.starts_with("- glibc+thr vs glibc: ")).collect();
    assert_eq!(answer.len(), 1, "{md}");
    assert!(answer[0].contains("qps") && answer[0].ends_with("; 2 rounds"), "{}", answer[0]);
    assert!(stderr(&o).contains("glibc+thr vs glibc: "), "the answer on stderr: {}", describe(&o));
}

/// `--live` (issue 36, items 4 and 5): the variant's cells run on the backend's own server, each
/// beside the backend's cell, with the setting made through the control channel and undone after:
/// one server per round, the live cells' dumps taken with heap profiles off and the backend's
/// with them on (so the setting was made, and undone), and the answer pairs the two. A setting the
/// shim refuses at run time fails the run with one line naming it.
#[test]
fn a_live_variant_is_set_on_the_backends_own_server_and_undone() {
    require_tools();
    let (out, o) = small_run(
        "live",
        &[
            "--backends",
            "glibc",
            "--live",
            "heap:MALLOCSHIM_PROF_SAMPLE_BYTES=0",
            "--workloads",
            "oltp_point_select",
            "--threads",
            "1,2",
            "--time",
            "1",
            "--rounds",
            "2",
        ],
    );
    assert!(o.status.success(), "runner failed: {}", describe(&o));
    let err = stderr(&o);
    let runs = err.lines().filter(|l| l.contains("server pid ") && !l.ends_with("(prepare)")).count();
    assert_eq!(runs, 2, "one server per round, not per configuration: {err}");
    let rows = read_csv(&out.join("cells.csv"));
    let configs: Vec<&str> = rows.iter().map(|r| r["config"].as_str()).collect();
    assert_eq!(configs.iter().filter(|c| **c == "glibc").count(), 4, "{configs:?}");
    assert_eq!(configs.iter().filter(|c| **c == "glibc+heap").count(), 4, "{configs:?}");
    // Round 1: the backend's cell first; round 2: the live one first.
    assert_eq!(&configs[..2], ["glibc", "glibc+heap"], "{configs:?}");
    assert_eq!(&configs[4..6], ["glibc+heap", "glibc"], "{configs:?}");
    for r in &rows {
        assert!(f(r, "qps") > 0.0 && r["errors"] == "0" && r["mode"] == "shim", "{r:?}");
        let dump = mallocshim_format::Dump::read(&out.join(&r["dump"])).unwrap_or_else(|e| panic!("{e}"));
        let want = if r["config"] == "glibc+heap" { 0 } else { 524288 };
        assert_eq!(dump.prof_sample_bytes, want, "{r:?}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let answer: Vec<&str> = md.lines().filter(|l| l.starts_with("- glibc+heap vs glibc: ")).collect();
    assert_eq!(answer.len(), 1, "{md}");
    assert!(answer[0].contains("CPU/query") && !answer[0].contains("peak RSS"), "{}", answer[0]);
    assert!(md.contains("A --live variant"), "{md}");

    let (_, o) = small_run(
        "live-refused",
        &[
            "--backends",
            "glibc",
            "--live",
            "off:MALLOCSHIM_PROFILE=off",
            "--workloads",
            "oltp_point_select",
            "--threads",
            "1",
            "--time",
            "1",
            "--rounds",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let err = stderr(&o);
    assert!(err.contains("mallocshim set ") && err.contains("MALLOCSHIM_PROFILE=off"), "{err}");
}
