//! Shared helpers for the black-box tests: build the release `libmallocshim.so`, compile the C
//! programs under `tests/c/`, and run programs with the shim preloaded. Nothing here links the
//! shim into the test binary; every check goes through `LD_PRELOAD` and what a program prints.
//! A missing tool (gcc, mariadbd, sysbench, tcmalloc) is a failure, never a skip.
#![allow(dead_code)]

pub mod mariadb;
pub mod storm;
pub mod top_view;
pub mod trace;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

/// The backends, in the order the tests and the README use (the format crate's list).
#[allow(unused_imports)] // not every test binary uses it
pub use mallocshim_format::BACKENDS;

/// The profiling settings every change is tested under, as (name, environment): profiling on
/// (the default), off, and every call timed. With [`BACKENDS`], the test matrix.
pub const SETTINGS: [(&str, &[(&str, &str)]); 3] = [
    ("profiling on", &[]),
    ("MALLOCSHIM_PROFILE=off", &[("MALLOCSHIM_PROFILE", "off")]),
    ("MALLOCSHIM_SAMPLE=1", &[("MALLOCSHIM_SAMPLE", "1")]),
];

/// Every (backend, setting name, setting environment) of the matrix.
pub fn matrix() -> impl Iterator<Item = (&'static str, &'static str, &'static [(&'static str, &'static str)])>
{
    BACKENDS.into_iter().flat_map(|b| SETTINGS.into_iter().map(move |(n, e)| (b, n, e)))
}

/// Debian's gperftools library, needed by the tcmalloc backend and the direct-preload baselines
/// (the backend table's path, `mallocshim_format::backends`).
pub const TCMALLOC_LIB: &str = mallocshim_format::backends::lib("tcmalloc");
/// Debian's mimalloc (libmimalloc2.0), needed by the mimalloc backend and its direct preload.
pub const MIMALLOC_LIB: &str = mallocshim_format::backends::lib("mimalloc");
/// Debian's jemalloc (libjemalloc2), the jemalloc direct-preload baseline.
pub const JEMALLOC_LIB: &str = mallocshim_format::backends::lib("jemalloc");

/// Backends that count no live bytes: their allocated-bytes figure is the committed bytes (an
/// upper bound that moves by whole segments), so tests check it as a bound, not as growth
/// (the backend table's `coarse_figures`).
pub fn is_coarse(backend: &str) -> bool {
    mallocshim_format::backends::by_name(backend).is_some_and(|b| b.coarse_figures)
}

/// The library a backend's direct-preload baseline loads (`LD_PRELOAD=<it>`, no shim); None
/// for glibc, which needs no preload.
#[allow(unused_imports)] // not every test binary uses it
pub use mallocshim_format::backends::direct_lib;

/// The median (the workspace's one, `mallocshim_format::stats`), NaN for no values.
#[allow(unused_imports)]
pub use mallocshim_format::stats::median_or_nan;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Scratch directory for compiled C programs and test output.
pub fn work_dir() -> PathBuf {
    let d = target_dir().join("ctest");
    std::fs::create_dir_all(&d).expect("create target/ctest");
    d
}

/// Reads a test program's output up to its `ready pid=N` line (ctl_target.c, blocking_calls.c)
/// and returns N; fails when the program ends first (`what` names it).
pub fn ready_pid(out: &mut impl std::io::BufRead, what: &str) -> u32 {
    let mut line = String::new();
    while !line.starts_with("ready pid=") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "{what} ended before ready");
    }
    line.trim().strip_prefix("ready pid=").unwrap().parse().unwrap()
}

/// Builds the release cdylib once per test binary and returns its absolute path.
pub fn shim() -> PathBuf {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--release", "--lib", "--quiet"])
            .current_dir(root())
            .status()
            .expect("run cargo build --release");
        assert!(st.success(), "cargo build --release failed");
        let so = target_dir().join("release/libmallocshim.so");
        assert!(so.exists(), "{} missing after build", so.display());
        so
    })
    .clone()
}

/// Panics (fails the test) when a required program is not installed.
pub fn require(cmd: &str) -> PathBuf {
    let out = Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).output().expect("sh");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !p.is_empty(),
        "required program `{cmd}` is not installed: run scripts/install-deps.sh (the README's test command does)"
    );
    PathBuf::from(p)
}

/// Fails when a required file (a library) is missing.
pub fn require_file(path: &str) -> PathBuf {
    assert!(Path::new(path).exists(), "required file {path} is missing: run scripts/install-deps.sh");
    PathBuf::from(path)
}

/// Compiles `tests/c/<src>` (plus `extra` gcc arguments) into `target/ctest/<out>` and returns its
/// path. Compiled once per test binary and output name; written to a temporary name and renamed,
/// so tests running in parallel never exec a half-written file.
pub fn cc(src: &str, out: &str, extra: &[&str]) -> PathBuf {
    static DONE: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let dst = work_dir().join(out);
    if done.iter().any(|d| d == out) {
        return dst;
    }
    require("gcc");
    let tmp = work_dir().join(format!(".{out}.{}.tmp", std::process::id()));
    let srcp = root().join("tests/c").join(src);
    let cxx = src.ends_with(".cc");
    let compiler = if cxx { "g++" } else { "gcc" };
    require(compiler);
    let mut cmd = Command::new(compiler);
    cmd.args(["-O1", "-g", "-Wall", "-pthread", "-I"]).arg(root().join("shim/include"));
    cmd.arg("-o").arg(&tmp).arg(&srcp).args(extra).args(["-ldl", "-lpthread"]);
    let o = cmd.output().expect("run gcc");
    assert!(o.status.success(), "{compiler} {src} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    std::fs::rename(&tmp, &dst).expect("rename compiled program");
    done.push(out.to_string());
    dst
}

/// A command that will run `prog` without the shim: the caller's `LD_PRELOAD` and `MALLOCSHIM_*`
/// variables removed, stdin closed (the no-shim baselines).
pub fn plain(prog: impl AsRef<Path>) -> Command {
    let mut c = Command::new(prog.as_ref());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MALLOCSHIM_") || k == "LD_PRELOAD" {
            c.env_remove(k);
        }
    }
    c.stdin(Stdio::null());
    c
}

/// A command that will run `prog` with the shim preloaded and `MALLOCSHIM_BACKEND=backend`.
/// The caller's environment is kept except for other `MALLOCSHIM_*` variables.
pub fn preloaded(prog: impl AsRef<Path>, backend: &str) -> Command {
    let mut c = plain(prog);
    c.env("LD_PRELOAD", shim()).env("MALLOCSHIM_BACKEND", backend);
    if backend == "tcmalloc" || backend == "mimalloc" {
        require_file(direct_lib(backend).unwrap_or_default());
    }
    c.stdin(Stdio::null());
    c
}

/// Runs a command, returning its output; fails the test with both streams if it did not exit 0.
pub fn run_ok(mut cmd: Command, what: &str) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(o.status.success(), "{what}: {}", describe(&o));
    o
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Lines of stderr that the shim wrote (prefixed `mallocshim:`).
pub fn shim_lines(o: &Output) -> Vec<String> {
    stderr(o).lines().filter(|l| l.starts_with("mallocshim:")).map(String::from).collect()
}

/// The value of `key=` in a whitespace-separated line such as the shim's exit summary.
pub fn kv_str<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The numeric value of `key=` in such a line.
pub fn kv(line: &str, key: &str) -> Option<u64> {
    kv_str(line, key).and_then(|v| v.parse().ok())
}

/// A program's exit status and both streams, for failure messages.
pub fn describe(o: &Output) -> String {
    format!("status {:?}\n--- stdout\n{}\n--- stderr\n{}", o.status, stdout(o), stderr(o))
}

/// Builds the `mallocshim` command (crates/mallocshim-cli) once per test binary and returns its
/// path (target/release/mallocshim, beside the shim it finds there).
pub fn cli_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            // mallocshim-compare too: `mallocshim compare` execs it from beside `mallocshim`.
            .args(["build", "--release", "-p", "mallocshim-cli", "-p", "mallocshim-compare", "--quiet"])
            .current_dir(root())
            .status()
            .expect("run cargo build --release -p mallocshim-cli -p mallocshim-compare");
        assert!(st.success(), "cargo build --release -p mallocshim-cli -p mallocshim-compare failed");
        let bin = target_dir().join("release/mallocshim");
        assert!(bin.exists(), "{} missing after build", bin.display());
        bin
    })
    .clone()
}

/// An unsigned number from the environment (bench knobs), or `default`; panics on garbage.
pub fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a number")))
        .unwrap_or(default)
}

/// A string from the environment (bench knobs), or `default`.
pub fn env_str(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// A whitespace-separated list from the environment (bench knobs), or `default`'s words.
pub fn words(key: &str, default: &str) -> Vec<String> {
    env_str(key, default).split_whitespace().map(str::to_string).collect()
}

/// The pprof heap profiles (`.pb.gz`) in `dir`, sorted by name.
pub fn profiles(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    v.sort();
    v
}

/// `go tool pprof ARGS PROFILE`: its output (fails when pprof cannot read the profile).
pub fn pprof(profile: &Path, args: &[&str]) -> String {
    let o = Command::new(require("go"))
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", work_dir())
        .output()
        .expect("run go tool pprof");
    assert!(o.status.success(), "go tool pprof cannot read {}: {}", profile.display(), describe(&o));
    stdout(&o)
}

/// Runs a heap-profile test program (tests/c/heap_chains.cc: it dumps once through the C API and
/// prints `api_rc=0`) under the shim and `backend` with `env`, killed after 120 s, and returns the
/// one profile it wrote (in a fresh directory named after `name`). `lib`: its one argument.
pub fn profile_of(
    bin: &Path,
    lib: Option<&Path>,
    backend: &str,
    env: &[(&str, &str)],
    name: &str,
) -> PathBuf {
    let dir = work_dir().join(format!("heap-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut t = Command::new(require("timeout"));
    t.args(["-s", "KILL", "120"]).arg(bin);
    if let Some(l) = lib {
        t.arg(l);
    }
    let mut cmd = preloaded(bin, backend);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            t.env(k, v);
        }
    }
    cmd = t;
    cmd.env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run heap_chains");
    assert!(o.status.success(), "{name} (137: killed after 120 s): {}", describe(&o));
    assert!(stdout(&o).contains("api_rc=0"), "{name}: {}", describe(&o));
    let p: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    assert_eq!(p.len(), 1, "{name}: one profile expected, found {p:?}");
    p[0].clone()
}
