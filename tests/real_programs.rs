//! Real programs under the shim, every backend: a CPython JSON round trip (all of Python's
//! allocations forced through malloc) and a git session (init, add, commit, log, fsck, gc).
//! Each is compared with the same run without the shim, and the shim's exit summary must
//! name the requested backend and count routed mallocs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A command for `prog`: preloaded with the shim (verbose) for `Some(backend)`, plain otherwise.
fn command(prog: &Path, backend: Option<&str>) -> Command {
    match backend {
        Some(b) => {
            let mut c = common::preloaded(prog, b);
            c.env("MALLOCSHIM_VERBOSE", "1");
            c
        }
        None => common::plain(prog),
    }
}

/// Checks the shim's exit summaries of a run: at least one, all naming `backend`, and the
/// last one (the top process, which waited for its children) counting routed mallocs.
fn assert_summaries(o: &Output, backend: &str, what: &str) {
    let lines = common::shim_lines(o);
    let sums: Vec<&String> = lines.iter().filter(|l| l.starts_with("mallocshim: summary")).collect();
    assert!(!sums.is_empty(), "{what}: no `mallocshim: summary` line\n{}", common::describe(o));
    for s in &sums {
        assert!(
            s.split_whitespace().any(|w| w == format!("backend={backend}")),
            "{what}: summary does not say backend={backend}: {s}\n{}",
            common::describe(o)
        );
    }
    let last = sums.last().unwrap();
    let m = common::kv(last, "malloc").unwrap_or_else(|| panic!("{what}: no malloc= in {last}"));
    assert!(m > 0, "{what}: malloc count is 0: {last}");
    let f = common::kv(last, "free").unwrap_or_else(|| panic!("{what}: no free= in {last}"));
    assert!(f > 0, "{what}: free count is 0: {last}");
}

// ------------------------------------------------------------------------------- python

const PY_JSON: &str = r#"
import hashlib, json
def build(n):
    items = []
    for i in range(n):
        items.append({
            "id": i,
            "name": "item-%d-%s" % (i, "x" * (i % 13)),
            "tags": ["t%d" % (i % 17), "u%d" % (i % 5)],
            "vals": [i * 0.5, -i, i % 3 == 0, None],
            "child": {"k": str(i) * 3, "depth": [[i], {"x": i, "y": [i, i + 1]}]},
        })
    return {"items": items, "meta": {"count": n, "unicode": "h\u00e9llo \u2603"}}
def count(o):
    if isinstance(o, dict):
        return 1 + sum(count(v) for v in o.values())
    if isinstance(o, list):
        return 1 + sum(count(v) for v in o)
    return 1
obj = build(5000)
text = json.dumps(obj, sort_keys=True)
back = json.loads(text)
assert back == obj, "round trip differs"
again = json.dumps(back, sort_keys=True, indent=1)
assert json.loads(again) == obj
print("elements=%d" % count(obj))
print("bytes=%d" % len(text))
print("sha256=%s" % hashlib.sha256(text.encode()).hexdigest())
print("roundtrip=ok")
"#;

/// The real CPython binary (pyenv's `python3` is a shell-script shim; run the interpreter).
fn python() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let py = common::require("python3");
        let mut c = common::plain(py);
        c.args(["-c", "import sys; print(sys.executable)"]);
        let o = common::run_ok(c, "python3 sys.executable");
        let exe = PathBuf::from(common::stdout(&o).trim());
        assert!(exe.is_file(), "python executable {} not found", exe.display());
        exe
    })
    .clone()
}

fn run_python(backend: Option<&str>) -> Output {
    let mut c = command(&python(), backend);
    // All object allocations through malloc/realloc/free, not pymalloc's private arenas.
    c.env("PYTHONMALLOC", "malloc").env("PYTHONHASHSEED", "0").env("PYTHONDONTWRITEBYTECODE", "1");
    c.args(["-c", PY_JSON]);
    common::run_ok(c, &format!("python JSON round trip ({})", backend.unwrap_or("no shim")))
}

fn python_expected() -> String {
    static E: OnceLock<String> = OnceLock::new();
    E.get_or_init(|| {
        let o = run_python(None);
        let out = common::stdout(&o);
        assert!(out.contains("roundtrip=ok"), "baseline python run: {}", common::describe(&o));
        let elements: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("elements="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no elements= line: {out}"));
        assert!(elements >= 90_000, "only {elements} JSON elements");
        out
    })
    .clone()
}

fn python_under(backend: &str) {
    let expected = python_expected();
    let o = run_python(Some(backend));
    let what = format!("python JSON under the shim, backend={backend}");
    assert_eq!(
        common::stdout(&o),
        expected,
        "{what}: output differs from the no-shim run\n{}",
        common::describe(&o)
    );
    assert_summaries(&o, backend, &what);
    let last = common::shim_lines(&o).into_iter().rfind(|l| l.starts_with("mallocshim: summary")).unwrap();
    // ~100k objects built, serialized and parsed twice with PYTHONMALLOC=malloc.
    let m = common::kv(&last, "malloc").unwrap_or(0);
    assert!(m >= 100_000, "{what}: only {m} mallocs routed: {last}");
}

/// Every backend of `common::BACKENDS`, one after the other.
#[test]
fn python_json_every_backend() {
    for b in common::BACKENDS {
        python_under(b);
    }
}

// ------------------------------------------------------------------------------- git

/// Runs one git command in `repo` with a fixed identity and dates (so commit ids are
/// reproducible), no system/global config, under the shim for `Some(backend)`.
fn git(repo: &Path, backend: Option<&str>, args: &[&str]) -> Output {
    let g = common::require("git");
    let mut c = command(&g, backend);
    c.current_dir(repo)
        .env("HOME", repo.parent().unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05+00:00")
        .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05+00:00")
        .env("LC_ALL", "C")
        .args([
            "-c",
            "user.name=Shim Tester",
            "-c",
            "user.email=shim@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.autocrlf=false",
        ])
        .args(args);
    let what = format!("git {} ({})", args.join(" "), backend.unwrap_or("no shim"));
    let o = common::run_ok(c, &what);
    if let Some(b) = backend {
        assert_summaries(&o, b, &what);
    }
    o
}

/// Deterministic file contents, one of them large enough to compress and delta.
fn write_files(repo: &Path, round: u32) {
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    std::fs::write(repo.join("README"), format!("mallocshim git test, round {round}\n")).unwrap();
    let mut big = String::new();
    for i in 0..20_000u32 {
        big.push_str(&format!(
            "line {i} {}\n",
            i.wrapping_mul(2_654_435_761).wrapping_add(round) % 1_000_003
        ));
    }
    std::fs::write(repo.join("src/big.txt"), big).unwrap();
    std::fs::write(repo.join("src/deep/small.c"), format!("int round(void) {{ return {round}; }}\n"))
        .unwrap();
}

/// The observable results of the session: log, head, tree listing, object counts.
fn git_session(name: &str, backend: Option<&str>) -> String {
    let base = common::work_dir().join(name);
    let _ = std::fs::remove_dir_all(&base);
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo).unwrap();

    git(&repo, backend, &["init", "-q"]);
    write_files(&repo, 1);
    git(&repo, backend, &["add", "-A"]);
    git(&repo, backend, &["commit", "-q", "-m", "first commit"]);
    write_files(&repo, 2);
    std::fs::write(repo.join("NEWFILE"), "new\n").unwrap();
    git(&repo, backend, &["add", "-A"]);
    git(&repo, backend, &["commit", "-q", "-m", "second commit"]);

    let mut result = String::new();
    let log = common::stdout(&git(&repo, backend, &["log", "--oneline"]));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "git log --oneline: {log}");
    assert!(lines[0].ends_with(" second commit") && lines[1].ends_with(" first commit"), "git log: {log}");
    result += &format!("log:\n{log}");
    result += &format!("head:{}", common::stdout(&git(&repo, backend, &["rev-parse", "HEAD"])));
    let tree = common::stdout(&git(&repo, backend, &["ls-tree", "-r", "HEAD"]));
    assert_eq!(tree.lines().count(), 4, "ls-tree: {tree}");
    result += &format!("tree:\n{tree}");
    let small = common::stdout(&git(&repo, backend, &["show", "HEAD~1:src/deep/small.c"]));
    assert_eq!(small, "int round(void) { return 1; }\n");
    let diff = common::stdout(&git(&repo, backend, &["diff", "--stat", "HEAD~1", "HEAD"]));
    assert!(diff.contains("4 files changed"), "diff --stat: {diff}");
    result += &format!("diff:\n{diff}");

    for phase in ["before gc", "after gc"] {
        let f = git(&repo, backend, &["fsck", "--full", "--strict"]);
        let all = format!("{}{}", common::stdout(&f), common::stderr(&f));
        let bad = all.lines().filter(|l| !l.starts_with("mallocshim:")).any(|l| {
            l.contains("error") || l.contains("missing") || l.contains("broken") || l.contains("dangling")
        });
        assert!(!bad, "git fsck {phase} ({}): {all}", backend.unwrap_or("no shim"));
        if phase == "before gc" {
            git(&repo, backend, &["gc", "--quiet", "--prune=now"]);
        }
    }
    let counts = common::stdout(&git(&repo, backend, &["count-objects", "-v"]));
    let keep: Vec<&str> =
        counts.lines().filter(|l| l.starts_with("count:") || l.starts_with("in-pack:")).collect();
    assert_eq!(keep.first(), Some(&"count: 0"), "loose objects left after gc: {counts}");
    result += &format!("objects:\n{}\n", keep.join("\n"));
    let status = common::stdout(&git(&repo, backend, &["status", "--porcelain"]));
    assert_eq!(status, "", "working tree not clean");
    result
}

fn git_expected() -> String {
    static E: OnceLock<String> = OnceLock::new();
    E.get_or_init(|| git_session("git-noshim", None)).clone()
}

fn git_under(backend: &str) {
    let expected = git_expected();
    let got = git_session(&format!("git-{backend}"), Some(backend));
    assert_eq!(got, expected, "git session under backend={backend} differs from the no-shim session");
}

/// Every backend of `common::BACKENDS`, one after the other.
#[test]
fn git_every_backend() {
    for b in common::BACKENDS {
        git_under(b);
    }
}
