//! `mallocshim report` and `mallocshim diff` (crates/mallocshim-cli): hand-made dumps in the
//! format of the format crate, printed alone and side by side, the errors for files that are not
//! a version-1 dump, and real dumps written by the shim at exit — one holding every size class,
//! allocations above 64 MiB included (the open class, `max_bytes` null).

mod common;

use common::{cc, cli_bin, preloaded, require, stderr, stdout, work_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn report(args: &[&str]) -> Output {
    Command::new(cli_bin()).arg("report").args(args).output().expect("run mallocshim report")
}

fn diff(args: &[&str]) -> Output {
    Command::new(cli_bin()).arg("diff").args(args).output().expect("run mallocshim diff")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// Dump A: glibc, sampling 1 in 64. malloc 33..64 bytes has p50 10 ns, p99 40 ns; a memalign row
/// only A has; a malloc row without samples.
const DUMP_A: &str = r#"{
  "format": "mallocshim-dump", "version": 1, "pid": 4242, "backend": "glibc",
  "unix_time_ms": 1767225600000, "uptime_s": 12.5, "sample_every": 64,
  "totals": {
    "malloc":   {"count": 121300, "bytes": 6960000},
    "calloc":   {"count": 0, "bytes": 0},
    "realloc":  {"count": 0, "bytes": 0},
    "free":     {"count": 120000, "bytes": 6600000},
    "memalign": {"count": 12, "bytes": 98304}
  },
  "size_classes": [
    {"op": "malloc", "min_bytes": 33, "max_bytes": 64, "count": 120000, "bytes": 5400000, "sampled": 1875,
     "p50_ns": 10, "p90_ns": 14, "p99_ns": 40, "p999_ns": 120, "max_ns": 2300},
    {"op": "malloc", "min_bytes": 1025, "max_bytes": 2048, "count": 1300, "bytes": 1560000, "sampled": 0,
     "p50_ns": 0, "p90_ns": 0, "p99_ns": 0, "p999_ns": 0, "max_ns": 0},
    {"op": "free", "min_bytes": 33, "max_bytes": 64, "count": 120000, "bytes": 6600000, "sampled": 1870,
     "p50_ns": 12, "p90_ns": 18, "p99_ns": 50, "p999_ns": 200, "max_ns": 4100},
    {"op": "memalign", "min_bytes": 4097, "max_bytes": 8192, "count": 12, "bytes": 98304, "sampled": 1,
     "p50_ns": 300, "p90_ns": 300, "p99_ns": 300, "p999_ns": 300, "max_ns": 310}
  ],
  "threads": [
    {"tid": 4243, "name": "worker-1", "state": "live", "ops": {
      "malloc": {"count": 20000, "bytes": 900000, "sampled": 312, "p50_ns": 11, "p99_ns": 45, "max_ns": 900},
      "free":   {"count": 20000, "bytes": 1100000, "sampled": 311, "p50_ns": 13, "p99_ns": 52, "max_ns": 700}}},
    {"tid": 4242, "name": "main", "state": "live", "ops": {
      "malloc": {"count": 100000, "bytes": 4500000, "sampled": 1563, "p50_ns": 10, "p99_ns": 39, "max_ns": 2300},
      "free":   {"count": 99000, "bytes": 5445000, "sampled": 1545, "p50_ns": 12, "p99_ns": 49, "max_ns": 4100}}},
    {"tid": 0, "name": "exited threads", "state": "exited", "ops": {
      "malloc": {"count": 1300, "bytes": 1560000, "sampled": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0},
      "free":   {"count": 1000, "bytes": 55000, "sampled": 14, "p50_ns": 12, "p99_ns": 30, "max_ns": 31}}}
  ],
  "memory": {"rss_bytes": 52428800, "vsz_bytes": 314572800, "backend_allocated_bytes": 10485760,
             "backend_resident_bytes": 20971520, "backend_free_bytes": 5242880}
}
"#;

/// Dump B: jemalloc. The same malloc row at p50 20 ns, p99 60 ns (ratios 2.00 and 1.50); a
/// calloc row only B has; no memalign; an extra field a later format might add.
const DUMP_B: &str = r#"{
  "format": "mallocshim-dump", "version": 1, "pid": 4343, "backend": "jemalloc",
  "unix_time_ms": 1767225700000, "uptime_s": 11.0, "sample_every": 64, "some_future_field": [1, 2],
  "totals": {
    "malloc":   {"count": 118000, "bytes": 5310000},
    "calloc":   {"count": 50, "bytes": 40000},
    "realloc":  {"count": 0, "bytes": 0},
    "free":     {"count": 118000, "bytes": 5900000},
    "memalign": {"count": 0, "bytes": 0}
  },
  "size_classes": [
    {"op": "malloc", "min_bytes": 33, "max_bytes": 64, "count": 118000, "bytes": 5310000, "sampled": 1843,
     "p50_ns": 20, "p90_ns": 30, "p99_ns": 60, "p999_ns": 150, "max_ns": 5000},
    {"op": "calloc", "min_bytes": 513, "max_bytes": 1024, "count": 50, "bytes": 40000, "sampled": 1,
     "p50_ns": 700, "p90_ns": 700, "p99_ns": 700, "p999_ns": 700, "max_ns": 720},
    {"op": "free", "min_bytes": 33, "max_bytes": 64, "count": 118000, "bytes": 5900000, "sampled": 1850,
     "p50_ns": 6, "p90_ns": 9, "p99_ns": 25, "p999_ns": 80, "max_ns": 1500}
  ],
  "threads": [
    {"tid": 4343, "name": "main", "state": "live", "ops": {
      "malloc": {"count": 118000, "bytes": 5310000, "sampled": 1843, "p50_ns": 20, "p99_ns": 60, "max_ns": 5000},
      "calloc": {"count": 50, "bytes": 40000, "sampled": 1, "p50_ns": 700, "p99_ns": 700, "max_ns": 720},
      "free":   {"count": 118000, "bytes": 5900000, "sampled": 1850, "p50_ns": 6, "p99_ns": 25, "max_ns": 1500}}}
  ],
  "memory": {"rss_bytes": 62914560, "vsz_bytes": 419430400, "backend_allocated_bytes": 10485760,
             "backend_resident_bytes": 31457280, "backend_free_bytes": 12582912}
}
"#;

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write dump");
    p.to_str().expect("utf-8 path").to_string()
}

/// The whitespace-separated cells of the first text-table line whose first two cells are
/// `op` and `size`.
fn row(out: &str, op: &str, size: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|c| c.len() >= 2 && c[0] == op && c[1] == size)
        .unwrap_or_else(|| panic!("no row {op} {size} in:\n{out}"))
}

/// The cells of the first Markdown table line whose first two cells are `op` and `size`.
fn md_row(out: &str, op: &str, size: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>())
        .find(|c| c.len() >= 2 && c[0] == op && c[1] == size)
        .unwrap_or_else(|| panic!("no markdown row {op} {size} in:\n{out}"))
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

#[test]
fn one_dump_table_threads_and_memory() {
    let d = scratch("one");
    let a = write(&d, "a.json", DUMP_A);
    let out = ok(report(&["--full", &a]), "report --full a.json");
    assert!(out.contains("backend glibc pid 4242"), "{out}");
    // op, size, calls, bytes, sampled, p50, p99, max
    assert_eq!(
        row(&out, "malloc", "<=64"),
        ["malloc", "<=64", "120000", "5400000", "1875", "10", "40", "2300"]
    );
    assert_eq!(row(&out, "memalign", "<=8K")[5], "300");
    // A row without samples shows no percentiles rather than 0 ns.
    assert_eq!(row(&out, "malloc", "<=2K")[5..], ["-", "-", "-"]);
    // Threads, busiest first: main (199000 calls) before worker-1 (40000) before the exited ones.
    let main = out.lines().position(|l| l.contains(" main ")).expect("main thread row");
    let worker = out.lines().position(|l| l.contains("worker-1")).expect("worker thread row");
    let exited = out.lines().position(|l| l.contains("exited threads")).expect("exited threads row");
    assert!(main < worker && worker < exited, "{out}");
    let m: Vec<&str> = out.lines().nth(main).unwrap().split_whitespace().collect();
    // tid name routine state calls malloc-p50 malloc-p99 free-p50 free-p99 (no start routine
    // recorded for the main thread: "-")
    assert_eq!(m, ["4242", "main", "-", "live", "199000", "10", "39", "12", "49"]);
    // Memory in MiB.
    assert!(out.lines().any(|l| l.split_whitespace().eq(["rss", "50.0"])), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().eq(["glibc", "resident", "20.0"])), "{out}");

    // --top 1 keeps only the busiest thread.
    let out = ok(report(&["--top", "1", &a]), "report --top 1");
    assert!(out.contains(" main ") && !out.contains("worker-1"), "{out}");

    // Markdown: the same row as a pipe table.
    let out = ok(report(&["--full", "--format", "markdown", &a]), "report --format markdown");
    assert_eq!(
        md_row(&out, "malloc", "<=64"),
        ["malloc", "<=64", "120000", "5400000", "1875", "10", "40", "2300"]
    );
}

#[test]
fn two_dumps_side_by_side_with_ratios() {
    let d = scratch("two");
    let a = write(&d, "a.json", DUMP_A);
    let b = write(&d, "b.json", DUMP_B);
    let out = ok(diff(&[&a, &b]), "diff a.json b.json");
    // Each side named by backend and pid.
    assert!(out.contains("glibc:4242") && out.contains("jemalloc:4343"), "{out}");
    assert!(out.contains("calls glibc:4242") && out.contains("p50 jemalloc:4343"), "{out}");
    // op size callsA callsB p50A p50B p50B/A p99A p99B p99B/A; ratios are B/A: 20/10, 60/40.
    assert_eq!(
        row(&out, "malloc", "<=64"),
        ["malloc", "<=64", "120000", "118000", "10", "20", "2.00", "40", "60", "1.50"]
    );
    // Ratios beyond one latency bucket from well-sampled rows carry no mark; the legend says
    // what the mark means.
    assert!(out.contains("a latency ratio marked ~ cannot be told apart"), "{out}");
    // B faster: 6/12, 25/50.
    assert_eq!(row(&out, "free", "<=64")[6], "0.50");
    assert_eq!(row(&out, "free", "<=64")[9], "0.50");
    // Present in A only, in B only.
    assert_eq!(
        row(&out, "memalign", "<=8K"),
        ["memalign", "<=8K", "12", "-", "300", "-", "-", "300", "-", "-"]
    );
    assert_eq!(row(&out, "calloc", "<=1K"), ["calloc", "<=1K", "-", "50", "-", "700", "-", "-", "700", "-"]);
    // A row without samples on one side has no ratio.
    assert_eq!(row(&out, "malloc", "<=2K")[4..], ["-", "-", "-", "-", "-", "-"]);

    // --labels renames the columns; markdown carries the same numbers.
    let out = ok(diff(&["--format", "markdown", "--labels", "before,after", &a, &b]), "diff --labels");
    assert!(out.contains("calls before") && out.contains("p99 after"), "{out}");
    assert!(!out.contains("calls glibc:4242"), "{out}");
    assert_eq!(
        md_row(&out, "malloc", "<=64"),
        ["malloc", "<=64", "120000", "118000", "10", "20", "2.00", "40", "60", "1.50"]
    );

    // Reversed, the ratio inverts.
    let out = ok(diff(&[&b, &a]), "diff b.json a.json");
    assert_eq!(row(&out, "malloc", "<=64")[6], "0.50");
}

#[test]
fn rejects_what_is_not_a_version_1_dump() {
    let d = scratch("bad");
    let cases = [
        (
            "other-format.json",
            DUMP_A.replace("\"mallocshim-dump\"", "\"jemalloc-stats\""),
            "not a mallocshim dump",
        ),
        ("no-format.json", r#"{"version": 1, "pid": 1}"#.to_string(), "not a mallocshim dump"),
        ("array.json", "[1, 2, 3]".to_string(), "not a mallocshim dump"),
        ("version-2.json", DUMP_A.replace("\"version\": 1", "\"version\": 2"), "version 2"),
        ("truncated.json", DUMP_A[..DUMP_A.len() / 2].to_string(), "not a valid mallocshim dump"),
        (
            "missing-field.json",
            r#"{"format": "mallocshim-dump", "version": 1, "pid": 1}"#.to_string(),
            "missing field",
        ),
    ];
    for (name, body, msg) in cases {
        let p = write(&d, name, &body);
        let o = report(&[&p]);
        assert_eq!(o.status.code(), Some(2), "{name}: exit {:?}, stderr {}", o.status, stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("mallocshim report: "), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: one line: {err}");
        assert!(err.contains(msg) && err.contains(name), "{name}: {err}");
        assert!(stdout(&o).is_empty(), "{name}: printed {}", stdout(&o));
    }
    // A bad second file fails the comparison too.
    let good = write(&d, "good.json", DUMP_A);
    let bad = d.join("other-format.json");
    let o = diff(&[&good, bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("mallocshim diff: "), "{}", stderr(&o));
    // A missing file, malformed --labels, --labels with one dump, one dump to diff, --pid
    // without a dump of that process.
    for (cmd, args) in [
        ("report", vec![d.join("nope.json").to_str().unwrap().to_string()]),
        ("diff", vec!["--labels".into(), "x".into(), good.clone(), good.clone()]),
        ("report", vec!["--labels".into(), "x,y".into(), good.clone()]),
        ("diff", vec![good.clone()]),
        ("report", vec!["--pid".into(), "1".into(), "--dir".into(), d.to_str().unwrap().into()]),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = if cmd == "report" { report(&args) } else { diff(&args) };
        assert_eq!(o.status.code(), Some(2), "{cmd} {args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with(&format!("mallocshim {cmd}: ")), "{cmd} {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{cmd} {args:?}: one line: {err}");
    }
}

#[test]
fn help_explains_every_flag() {
    let out = ok(report(&["--help"]), "report --help");
    for flag in ["--format", "--top", "--pid", "--dir", "markdown", "kv", "Exit status"] {
        assert!(out.contains(flag), "report --help lacks {flag}:\n{out}");
    }
    let out = ok(diff(&["--help"]), "diff --help");
    for flag in ["--format", "--labels", "markdown", "B/A", "Exit status"] {
        assert!(out.contains(flag), "diff --help lacks {flag}:\n{out}");
    }
    let o = Command::new(cli_bin()).arg("--version").output().expect("run mallocshim --version");
    let v = ok(o, "mallocshim --version");
    assert_eq!(v.trim(), format!("mallocshim {}", env!("CARGO_PKG_VERSION")));
    // Man pages (one per subcommand) and completions, from the hidden generator.
    let g = scratch("generate");
    let o = Command::new(cli_bin()).arg("generate").arg(&g).output().expect("run mallocshim generate");
    ok(o, "mallocshim generate");
    for page in
        ["mallocshim", "mallocshim-report", "mallocshim-diff", "mallocshim-plot", "mallocshim-compare"]
    {
        let text = std::fs::read_to_string(g.join(format!("man1/{page}.1")))
            .unwrap_or_else(|e| panic!("man page {page}.1: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}.1 is not roff:\n{text}");
    }
    let bash = std::fs::read_to_string(g.join("completions/mallocshim.bash")).expect("bash completion");
    assert!(bash.contains("report") && bash.contains("--labels"), "{bash}");
    for f in ["completions/_mallocshim", "completions/mallocshim.fish"] {
        assert!(g.join(f).is_file(), "{f} missing");
    }
}

/// A dump the shim really wrote at exit, read alone and against itself.
#[test]
fn reads_a_real_dump() {
    require("python3");
    let d = scratch("real");
    let mut cmd = preloaded("python3", "glibc");
    cmd.args(["-c", "x=[bytearray(100) for _ in range(10000)]"])
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .env("MALLOCSHIM_DUMP_DIR", &d)
        .env("MALLOCSHIM_DUMP_FORMATS", "json");
    let child = cmd.spawn().expect("start python3 under the shim");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait for python3");
    assert!(o.status.success(), "python3 under the shim: {:?}\n{}", o.status, stderr(&o));
    // python3 may be a wrapper (pyenv) whose helper processes write dumps too; python itself
    // keeps the pid of the wrapper that exec'd it. Failing that, python's is the largest dump.
    let mut dumps: Vec<(u64, String)> = std::fs::read_dir(&d)
        .expect("read dump dir")
        .map(|e| e.expect("dir entry"))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| (e.metadata().map(|m| m.len()).unwrap_or(0), e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(
        !dumps.is_empty(),
        "python3 under the shim with MALLOCSHIM_DUMP_AT_EXIT=1 wrote no JSON dump in {}",
        d.display()
    );
    dumps.sort();
    let dump = dumps
        .iter()
        .find(|(_, n)| n.starts_with(&format!("mallocshim.{pid}.")))
        .unwrap_or_else(|| dumps.last().expect("a dump"))
        .1
        .clone();
    let dump = d.join(dump);
    let dump = dump.to_str().unwrap();

    let out = ok(report(&[dump]), "report on a real dump");
    assert!(out.contains("backend glibc"), "{out}");
    let malloc_calls: u64 = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() == 8 && c[0] == "malloc")
        .map(|c| c[2].parse::<u64>().expect("calls column"))
        .sum();
    assert!(malloc_calls > 0, "no malloc row with calls:\n{out}");
    assert!(out.lines().any(|l| l.starts_with("rss ")), "{out}");
    // Against itself: every ratio is 1.00, marked as noise (or "-" without samples).
    let out = ok(diff(&["--format", "markdown", dump, dump]), "diff dump dump");
    let rows: Vec<Vec<String>> = out
        .lines()
        .filter(|l| l.starts_with("| malloc") || l.starts_with("| free"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    assert!(!rows.is_empty(), "{out}");
    for r in rows {
        assert!(r[6] == "1.00~" || r[6] == "-", "{r:?}");
        assert!(r[9] == "1.00~" || r[9] == "-", "{r:?}");
    }
}

/// A real dump holding every size class, allocations above 64 MiB included (`max_bytes` null):
/// `report` prints the open class as `>64M`, `--pid` finds the newest dump of the process, and
/// `--format kv` gives the scalar facts scripts read.
#[test]
fn reads_a_real_dump_with_every_size_class() {
    let bin = cc("malloc_edges.c", "malloc_edges", &[]);
    let d = scratch("edges");
    let mut cmd = preloaded(&bin, "glibc");
    cmd.env("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .env("MALLOCSHIM_DUMP_DIR", &d)
        .env("MALLOCSHIM_DUMP_FORMATS", "json");
    let child = cmd.stdout(std::process::Stdio::null()).spawn().expect("start malloc_edges");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait for malloc_edges");
    assert!(o.status.success(), "malloc_edges under the shim: {:?}\n{}", o.status, stderr(&o));
    let dir = d.to_str().unwrap();
    let pid_s = pid.to_string();
    let out = ok(report(&["--full", "--dir", dir, "--pid", &pid_s]), "report --full --pid");
    assert!(out.contains(&format!("pid {pid}")), "{out}");
    for size in ["<=16", "<=1K", "<=1M", "<=64M", ">64M"] {
        let r = row(&out, "malloc", size);
        assert!(r[2].parse::<u64>().unwrap() > 0, "malloc {size}: {r:?}");
    }
    // 40 malloc(64 MiB + 1): the calls and bytes of the open class.
    assert_eq!(row(&out, "malloc", ">64M")[2..4], ["40".to_string(), (40 * ((64u64 << 20) + 1)).to_string()]);
    let kv = ok(report(&["--format", "kv", "--dir", dir, "--pid", &pid_s]), "report --format kv");
    assert!(kv.lines().any(|l| l == format!("pid={pid}")), "{kv}");
    assert!(kv.lines().any(|l| l == "backend=glibc"), "{kv}");
    let calls: u64 =
        kv.lines().find_map(|l| l.strip_prefix("calls_malloc=")).expect("calls_malloc").parse().unwrap();
    assert!(calls >= 170_000, "{kv}");
    let folded = ok(report(&["--dir", dir, "--pid", &pid_s]), "report --pid, folded: the 5 busiest classes");
    let classes = folded.lines().filter(|l| l.split_whitespace().count() == 8 && l.contains("<=")).count();
    assert!(classes <= 5 && folded.contains("busiest of") && folded.contains("--full lists all"), "{folded}");
    assert!(!folded.contains("vsz") && !out.contains("vsz") && folded.lines().count() <= 40, "{folded}");
    // --format json is the dump again, on one line, readable by the schema.
    let path = mallocshim_format::newest_dump(&d, pid, "json").expect("read dir").expect("a dump");
    let js = ok(report(&["--format", "json", path.to_str().unwrap()]), "report --format json");
    assert_eq!(js.lines().count(), 1, "{js}");
    let back = mallocshim_format::Dump::parse(&js).expect("the one-line JSON reads");
    assert_eq!(back, mallocshim_format::Dump::read(&path).expect("the dump reads"));
}
