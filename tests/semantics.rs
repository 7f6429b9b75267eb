//! Runs `tests/c/semantics.c` (C-level malloc semantics, threads, fork, fork+exec, dlopen,
//! constructors) under the shim for every backend, and once without any preload as a
//! baseline proving the program itself is right about plain glibc.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// (semantics binary, ctor_lib.so), compiled once per test binary.
fn programs() -> (PathBuf, PathBuf) {
    static P: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    P.get_or_init(|| {
        let lib = common::cc("ctor_lib.c", "libsem_ctor_lib.so", &["-shared", "-fPIC"]);
        let bin = common::cc("semantics.c", "semantics", &["-fno-builtin"]);
        (bin, lib)
    })
    .clone()
}

/// Asserts the program's own verdict: exit 0, no FAIL line, and `semantics: N checks passed`
/// with a plausible N (the program has a few thousand checks; a gutted run would have few).
fn assert_passed(o: &Output, what: &str) -> u64 {
    let out = common::stdout(o);
    assert!(o.status.success(), "{what}: semantics failed\n{}", common::describe(o));
    assert!(!out.lines().any(|l| l.starts_with("FAIL")), "{what}: FAIL lines\n{}", common::describe(o));
    let n = out
        .lines()
        .find_map(|l| l.strip_prefix("semantics: ").and_then(|r| r.strip_suffix(" checks passed")))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{what}: no `semantics: N checks passed` line\n{}", common::describe(o)));
    assert!(n >= 2000, "{what}: only {n} checks ran\n{}", common::describe(o));
    n
}

fn run_backend(backend: &str) {
    let (bin, lib) = programs();
    let mut cmd = common::preloaded(&bin, backend);
    cmd.arg(&lib).arg("shim").env("MALLOCSHIM_VERBOSE", "1");
    // Coarse figures (common::is_coarse): the mallinfo growth checks are printed, not asserted.
    if common::is_coarse(backend) {
        cmd.env("SEMANTICS_COARSE_FIGURES", "1");
    }
    let o = cmd.output().expect("start semantics");
    let what = format!("semantics under the shim, backend={backend}");
    let n = assert_passed(&o, &what);
    // Under the shim every check runs: the aligned_alloc EINVAL and free_sized checks too.
    let out = common::stdout(&o);
    assert!(
        !out.contains("not applicable") && !out.contains("not available"),
        "{what}: checks skipped\n{}",
        common::describe(&o)
    );

    let lines = common::shim_lines(&o);
    let summaries: Vec<&String> = lines.iter().filter(|l| l.starts_with("mallocshim: summary")).collect();
    assert!(
        !summaries.is_empty(),
        "{what}: no `mallocshim: summary` line on stderr\n{}",
        common::describe(&o)
    );
    assert!(
        lines.len() > summaries.len(),
        "{what}: MALLOCSHIM_VERBOSE=1 but no option table lines before the summary\n{}",
        common::describe(&o)
    );
    // The exec'd children (/bin/true and the program itself) print their own summaries;
    // every one of them must name the requested backend (no silent fallback anywhere).
    for s in &summaries {
        assert_eq!(
            common::kv_str(s, "backend"),
            Some(backend),
            "{what}: summary names another backend: {s}\n{}",
            common::describe(&o)
        );
    }
    // The parent waits for all its children, so the last summary is the parent's own.
    let last = summaries.last().unwrap();
    let count = |k: &str| common::kv(last, k).unwrap_or_else(|| panic!("{what}: no {k}= in `{last}`"));
    // 4000 threads x (16 malloc, 5 calloc, 12 realloc, 24 free) alone, plus everything else.
    assert!(count("malloc") >= 60_000, "{what}: malloc count too low: {last}");
    assert!(count("calloc") >= 20_000, "{what}: calloc count too low: {last}");
    assert!(count("realloc") >= 48_000, "{what}: realloc count too low: {last}");
    assert!(count("free") >= 96_000, "{what}: free count too low: {last}");
    eprintln!("{what}: {n} checks passed; {last}");
}

/// Every backend of `common::BACKENDS`, one after the other (`SEMANTICS_BACKEND=NAME` runs one).
#[test]
fn semantics_every_backend() {
    let only = std::env::var("SEMANTICS_BACKEND").ok();
    for b in common::BACKENDS.into_iter().filter(|b| only.as_deref().is_none_or(|o| o == *b)) {
        run_backend(b);
    }
}

/// The same program against plain glibc, no preload: the test program's expectations are
/// glibc's (apart from the checks glibc 2.36 cannot answer, which it reports as notes).
#[test]
fn semantics_baseline_without_shim() {
    let (bin, lib) = programs();
    let mut cmd = common::plain(&bin);
    cmd.arg(&lib).arg("libc");
    let o = common::run_ok(cmd, "semantics without preload");
    assert_passed(&o, "semantics without preload");
    assert!(common::shim_lines(&o).is_empty(), "shim output without preload?\n{}", common::describe(&o));
}

/// The program must also notice when it is not running on the allocator it was told to
/// expect: told "shim" without the preload, it fails (and says why).
#[test]
fn semantics_detects_missing_shim() {
    let (bin, lib) = programs();
    let mut cmd = Command::new(&bin);
    cmd.env_remove("LD_PRELOAD").arg(&lib).arg("shim");
    let o = cmd.output().expect("start semantics");
    assert_eq!(o.status.code(), Some(1), "expected failure\n{}", common::describe(&o));
    let out = common::stdout(&o);
    assert!(
        out.contains("FAIL: [loaded]") && out.contains("expected libmallocshim.so"),
        "{}",
        common::describe(&o)
    );
}
