//! `mallocshim diagnose PID` ends in actions (issue 38 items 1 and 2), black-box on a planted
//! case of glibc arena retention (tests/c/diagnose.c `arenas`: six arenas whose top chunks keep
//! ~32 MiB each, which malloc_trim never reaches, and ~42 MiB of free pages inside the main
//! arena's free chunks, which it returns), under the glibc backend with periodic trims off:
//! the verdict names the arenas and what stays, prints `mallocshim trim PID` with the bytes it
//! is expected to return, `mallocshim set PID TRIM_ABOVE_RSS=...` and the restart-time
//! `glibc.malloc.arena_max` and jemalloc remedies; `mallocshim trim PID` then returns that
//! figure (±25%); diagnosed again, no trim is suggested (it would return nothing), and once
//! `TRIM_ABOVE_RSS` is set it is shown as in effect, not suggested. The arenas' tops get
//! `mallocshim set PID GLIBC_TRIM_THRESHOLD=1M` (glibc's M_TRIM_THRESHOLD fixed live) with the
//! bytes it returns as their threads free at their tops; set as printed, it is in effect and no
//! longer suggested, and once a thread frees in each arena (the program's "touch") RSS drops by
//! at least 150 MiB and by at most the figure said (+10%); `=off` afterwards is refused (glibc
//! cannot go back to its dynamic threshold), and so is the option under jemalloc.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn cli(args: &[&str]) -> String {
    let o = Command::new(common::cli_bin()).args(args).output().unwrap();
    assert!(o.status.success(), "mallocshim {args:?}: {}", common::describe(&o));
    common::stdout(&o)
}

/// The MiB figure after `key` in `line` ("returns about 41.4 MiB").
fn mib_after(line: &str, key: &str) -> f64 {
    let at = line.find(key).unwrap_or_else(|| panic!("no `{key}` in {line}")) + key.len();
    line[at..].split_whitespace().next().unwrap().parse().unwrap()
}

/// The planted program under `backend`, holding what it made until its stdin closes, and its
/// output after "done arenas".
fn start(backend: &str) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let dir = common::work_dir().join(format!("diagnose-actions/{backend}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = common::preloaded(&prog, backend);
    c.arg("arenas")
        .env("DIAGNOSE_WAIT", "1")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_HISTORY_MS", "100")
        .env("MALLOCSHIM_TRIM_INTERVAL_MS", "0")
        .env_remove("MALLOCSHIM_MEMLOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done arenas", "{backend}");
    (child, out)
}

/// VmRSS of `pid` in MiB.
fn rss_mib(pid: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb / 1024.0
}

/// Under jemalloc the same program gets no glibc remedy, and the trim figure is an upper bound.
#[test]
fn other_backends_get_no_glibc_remedy() {
    let (mut child, _) = start("jemalloc");
    let pid = child.id().to_string();
    let out = cli(&["diagnose", &pid]);
    // glibc's trim threshold: refused with the reason, nothing changed.
    let o = Command::new(common::cli_bin()).args(["set", &pid, "GLIBC_TRIM_THRESHOLD=1M"]).output().unwrap();
    let err = common::stderr(&o);
    assert!(!o.status.success() && err.contains("only the glibc backend has a trim threshold"), "{err}");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    eprintln!("{out}");
    assert!(!out.contains("arena_max") && !out.contains("MALLOCSHIM_BACKEND="), "{out}");
    assert!(!out.contains("arenas: ") && !out.contains("GLIBC_TRIM_THRESHOLD"), "{out}");
    if out.contains(&format!("mallocshim trim {pid}")) {
        assert!(out.contains("an upper bound: pages that still hold a live block stay"), "{out}");
    }
}

#[test]
fn arena_retention_ends_in_live_actions_with_expected_bytes() {
    let (mut child, mut progout) = start("glibc");
    let pid = child.id().to_string();

    let out = cli(&["diagnose", &pid]);
    eprintln!("{out}");
    assert_eq!(out.lines().next(), Some("verdict: retained by the allocator"), "{out}");
    let arenas = out.lines().find(|l| l.starts_with("arenas: ")).expect(&out);
    let heaps: u64 = arenas.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(heaps >= 6, "six threads, six arenas: {arenas}");
    // Exact, from malloc_info in the dump: the main arena and at least the six threads' own.
    let exact = out.lines().find(|l| l.starts_with("glibc arenas: ")).expect(&out);
    let n: u64 = exact.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(n >= 7, "the main arena and six others: {exact}");
    assert!(mib_after(exact, "others); ") >= 150.0, "6 x 32 MiB free in the other arenas' tops: {exact}");
    let stays = out.lines().find(|l| l.starts_with("what a trim cannot return: ")).expect(&out);
    assert!(mib_after(stays, "cannot return: ") >= 150.0, "6 x 32 MiB in arena tops: {stays}");
    let lines: Vec<&str> = out.lines().collect();
    let at = lines.iter().position(|l| l.trim() == format!("mallocshim trim {pid}")).expect(&out);
    let expect = mib_after(lines[at + 1], "returns about ");
    assert!((30.0..=60.0).contains(&expect), "~42 MiB of free pages in the main arena: {}", lines[at + 1]);
    assert!(out.contains(&format!("mallocshim set {pid} TRIM_ABOVE_RSS=")), "{out}");
    // The arenas' tops: the trim threshold, live, with what it returns as their threads free.
    let at = lines
        .iter()
        .position(|l| l.trim() == format!("mallocshim set {pid} GLIBC_TRIM_THRESHOLD=1M"))
        .expect(&out);
    let up_to = mib_after(lines[at + 1], "returns up to ");
    assert!(
        (150.0..=200.0).contains(&up_to),
        "6 arenas' tops of ~32 MiB, less ~1.1 MiB each: {}",
        lines[at + 1]
    );
    let arena_max =
        lines.iter().position(|l| l.contains("GLIBC_TUNABLES=glibc.malloc.arena_max=")).expect(&out);
    assert!(lines[arena_max].contains("(restart)"), "{out}");
    assert!(mib_after(lines[arena_max + 1], "saves up to ") >= 150.0, "{out}");
    assert!(out.contains("MALLOCSHIM_BACKEND=jemalloc (restart)"), "{out}");
    assert!(!out.contains("already in effect"), "periodic trim off, no ceiling: {out}");

    // The figure is what the trim returns.
    let t = cli(&["trim", &pid]);
    let released = mib_after(&t, "released ");
    eprintln!("expected {expect} MiB, released {released} MiB: {t}");
    assert!((released - expect).abs() <= expect / 4.0, "expected {expect} MiB, {t}");

    // Again: nothing left for a trim to return, so no trim; the arenas' remedy stays.
    let again = cli(&["diagnose", &pid]);
    assert!(!again.contains(&format!("mallocshim trim {pid}")), "{again}");
    assert!(again.contains(&format!("mallocshim set {pid} GLIBC_TRIM_THRESHOLD=1M")), "{again}");
    assert!(again.contains("glibc.malloc.arena_max="), "{again}");

    // A setting in effect is named as such, never suggested; the trim threshold still is.
    cli(&["set", &pid, "TRIM_ABOVE_RSS=1G"]);
    cli(&["set", &pid, "TRIM_INTERVAL_MS=10000"]);
    let set = cli(&["diagnose", &pid]);
    assert!(set.contains("already in effect: TRIM_ABOVE_RSS=1073741824"), "{set}");
    assert!(set.contains("already in effect: TRIM_INTERVAL_MS=10000"), "{set}");
    let sets: Vec<&str> = set.lines().map(str::trim).filter(|l| l.starts_with("mallocshim set")).collect();
    assert_eq!(sets, [format!("mallocshim set {pid} GLIBC_TRIM_THRESHOLD=1M")], "{set}");

    threshold_set_as_printed(&pid, sets[0], up_to, &mut child, &mut progout);

    let _ = child.stdin.take().unwrap().write_all(b"");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// `mallocshim set PID GLIBC_TRIM_THRESHOLD=1M` run as diagnose printed it (`line`), whose
/// "returns up to" said `up_to` MiB: in effect, no longer suggested; nothing is returned until a
/// thread frees at an arena's top, then those tops come back; `=off` is refused afterwards.
fn threshold_set_as_printed(
    pid: &str,
    line: &str,
    up_to: f64,
    child: &mut std::process::Child,
    progout: &mut BufReader<std::process::ChildStdout>,
) {
    let said = cli(&line.split_whitespace().skip(1).collect::<Vec<_>>());
    assert_eq!(said.trim(), "MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1048576 (was off)");
    let in_effect = cli(&["diagnose", pid]);
    assert!(in_effect.contains("already in effect: GLIBC_TRIM_THRESHOLD=1048576"), "{in_effect}");
    assert!(
        !in_effect.contains("mallocshim set") && in_effect.contains("none that would return"),
        "{in_effect}"
    );
    let before = rss_mib(pid);
    child.stdin.as_mut().unwrap().write_all(b"touch\n").unwrap();
    let mut touched = String::new();
    progout.read_line(&mut touched).unwrap();
    assert_eq!(touched.trim(), "touched");
    let after = rss_mib(pid);
    eprintln!("GLIBC_TRIM_THRESHOLD=1M: up to {up_to} MiB said, RSS {before:.1} -> {after:.1} MiB after a free in each arena");
    assert!(
        before - after >= 150.0 && before - after <= up_to * 1.1,
        "RSS {before:.1} -> {after:.1} MiB; up to {up_to} MiB said"
    );
    // glibc cannot go back to its dynamic threshold: refused, one line.
    let o = Command::new(common::cli_bin()).args(["set", pid, "GLIBC_TRIM_THRESHOLD=off"]).output().unwrap();
    let err = common::stderr(&o);
    assert!(!o.status.success() && err.contains("cannot go back to its own dynamic threshold"), "{err}");
}
