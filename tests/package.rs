//! The Debian package, installed and used (root only; fails, never skips, otherwise):
//! `bash scripts/package.sh` builds `target/debian/mallocshim_<version>_amd64.deb`; `dpkg -i`
//! installs it; the files are where docs/install.md says (the shim and the command stripped, man
//! pages gzipped, completions, header, doc and examples); the control file's Depends names libc6
//! and libgcc-s1. Then a throwaway mariadbd (the harness crate) runs under the installed shim
//! twice: with plain `LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmallocshim.so`, and through
//! `mysqld_safe --malloc-lib=/usr/lib/x86_64-linux-gnu/libmallocshim.so` (the shim mapped in the
//! mariadbd child, per /proc/PID/maps). On each: a dump on SIGUSR1, `/usr/bin/mallocshim report`
//! on it (exit 0, the malloc row), and a clean shutdown (exit 0, no crash report).
//! Last, `dpkg -r` then `dpkg -P`: every file `dpkg -L` listed is gone, every directory it listed
//! is gone unless it existed before the install, and dpkg no longer knows the package.
//! A guard purges the package if the test fails half-way.

mod common;

use mallocshim_mariadb::{clean_env, procfs, read_dump, DumpSummary, ErrorLog, Instance, Launch, Options};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIB: &str = "/usr/lib/x86_64-linux-gnu/libmallocshim.so";
const BIN: &str = "/usr/bin/mallocshim";

/// Purges the package when dropped (the test's failure path; the normal path purges itself).
struct Installed(bool);

impl Drop for Installed {
    fn drop(&mut self) {
        if self.0 {
            let _ = Command::new("dpkg").args(["-P", "mallocshim"]).status();
        }
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed ({})\n{text}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when `readelf -S` finds no .symtab (the file is stripped).
fn stripped(path: &str) -> bool {
    !run(Command::new("readelf").args(["-S", "-W", path])).contains(".symtab")
}

/// `mallocshim report` (the installed one) on a dump: the tables (exit 0, a malloc row), and
/// `--format kv` with calls_malloc > 0.
fn report(dump: &Path, what: &str) {
    let text = run(Command::new(BIN).arg("report").arg(dump));
    assert!(text.contains("malloc"), "{what}: `mallocshim report` printed no malloc row\n{text}");
    let kv = run(Command::new(BIN).args(["report", "--format", "kv"]).arg(dump));
    let calls = kv
        .lines()
        .find_map(|l| l.strip_prefix("calls_malloc="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{what}: no calls_malloc= in `mallocshim report --format kv`\n{kv}"));
    assert!(calls > 0, "{what}: calls_malloc={calls}\n{kv}");
    eprintln!("{what}: mallocshim report {}: calls_malloc={calls}", dump.display());
}

/// A dump of `pid` in `dir`: SIGUSR1, then the new JSON file (its path), checked for malloc calls.
/// `mallocshim dump PID` with the installed command: its new JSON dump, which counts mallocs.
fn dump(pid: u32, dir: &Path, what: &str) -> PathBuf {
    let o = Command::new("/usr/bin/mallocshim")
        .args(["dump", &pid.to_string(), "--timeout", "20", "--dir"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run /usr/bin/mallocshim dump: {e}"));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{what}: mallocshim dump {pid}: {o:?}");
    let path = out
        .lines()
        .find(|l| l.ends_with(".json"))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{what}: mallocshim dump printed no JSON dump: {out}"));
    let d = DumpSummary::of(&read_dump(&path).unwrap_or_else(|e| panic!("{e}")));
    assert!(d.count("malloc") > 0, "{what}: the dump counts no malloc: {d:?}");
    path
}

fn check_files(deb: &Path) {
    let info = run(Command::new("dpkg-deb").arg("-f").arg(deb).arg("Depends"));
    assert!(info.contains("libc6 (>=") && info.contains("libgcc-s1"), "Depends: {info}");
    for f in [
        LIB,
        BIN,
        "/usr/include/mallocshim.h",
        "/usr/share/man/man1/mallocshim.1.gz",
        "/usr/share/man/man1/mallocshim-report.1.gz",
        "/usr/share/man/man7/mallocshim.7.gz",
        "/usr/share/doc/mallocshim/docs/control.md.gz",
        "/usr/share/doc/mallocshim/docs/memory-account.md.gz",
        "/usr/share/bash-completion/completions/mallocshim",
        "/usr/share/zsh/vendor-completions/_mallocshim",
        "/usr/share/fish/vendor_completions.d/mallocshim.fish",
        "/usr/share/doc/mallocshim/copyright",
        "/usr/share/doc/mallocshim/changelog.Debian.gz",
        "/usr/share/doc/mallocshim/README.md.gz",
        "/usr/share/doc/mallocshim/examples/mallocshim.conf",
        "/usr/share/doc/mallocshim/examples/mallocshim-dashboard.json",
    ] {
        assert!(Path::new(f).is_file(), "{f} is not installed");
    }
    assert!(stripped(LIB), "{LIB} is not stripped");
    assert!(stripped(BIN), "{BIN} is not stripped");
    let man = run(Command::new("gzip").args(["-dc", "/usr/share/man/man1/mallocshim.1.gz"]));
    assert!(man.starts_with(".ie") || man.contains(".TH"), "the man page is not roff: {man:.200}");
    let man7 = run(Command::new("gzip").args(["-dc", "/usr/share/man/man7/mallocshim.7.gz"]));
    assert!(man7.contains("MALLOCSHIM_DUMP_DIR"), "mallocshim(7) does not list the variables: {man7:.200}");
    // The installed README's links to the docs resolve on the installed system (.md.gz beside it).
    let readme = run(Command::new("gzip").args(["-dc", "/usr/share/doc/mallocshim/README.md.gz"]));
    let links: Vec<&str> = readme
        .split("](")
        .skip(1)
        .filter_map(|r| r.split([')', '#']).next())
        .filter(|l| l.ends_with(".md.gz"))
        .collect();
    assert!(!links.is_empty(), "the installed README links to no .md.gz");
    for l in links {
        let p = Path::new("/usr/share/doc/mallocshim").join(l);
        assert!(p.is_file(), "the installed README links to {l}, not installed");
    }
    let v = run(Command::new(BIN).arg("--version"));
    assert!(v.starts_with("mallocshim "), "mallocshim --version: {v}");
    // The dashboard is JSON, the drop-in preloads the installed shim.
    let dash = std::fs::read("/usr/share/doc/mallocshim/examples/mallocshim-dashboard.json").unwrap();
    serde_json::from_slice::<serde_json::Value>(&dash).expect("the dashboard is not JSON");
    let dropin = std::fs::read_to_string("/usr/share/doc/mallocshim/examples/mallocshim.conf").unwrap();
    assert!(dropin.contains(&format!("LD_PRELOAD={LIB}")), "the drop-in does not preload {LIB}");
}

/// mariadbd under plain `LD_PRELOAD` of the installed shim, through the harness.
fn plain_preload(inst: &Instance) {
    let dumps = inst.subdir("dumps-preload").unwrap();
    let launch = Launch::preload(LIB)
        .var("MALLOCSHIM_DUMP_DIR", dumps.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json");
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd under LD_PRELOAD={LIB}: {e}"));
    let pid = srv.pid();
    assert_eq!(procfs::maps_contains(pid, LIB), Some(true), "{LIB} is not mapped in mariadbd {pid}");
    srv.sql(
        "CREATE DATABASE pkgtest; CREATE TABLE pkgtest.t (a INT, b TEXT); \
             INSERT INTO pkgtest.t VALUES (1, REPEAT('x', 5000)); SELECT COUNT(*) FROM pkgtest.t",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = dump(pid, &dumps, "LD_PRELOAD");
    report(&path, "LD_PRELOAD");
    let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let log = ErrorLog::read(&stopped.errlog);
    assert_eq!(stopped.status, 0, "mariadbd's exit status under LD_PRELOAD\n{}", log.text);
    assert!(log.crash_lines().is_empty(), "crash report: {:?}", log.crash_lines());
    assert!(!log.preload_failed(), "ld.so did not preload {LIB}\n{}", log.text);
}

/// An option file holding the harness's mariadbd options (`--x=y` as `x=y` under [mysqld]).
fn defaults_file(inst: &Instance, errlog: &Path) -> PathBuf {
    let mut text = String::from("[mysqld]\n");
    for o in inst.mariadbd_opts().iter().filter(|o| *o != "--no-defaults") {
        text.push_str(o.trim_start_matches("--"));
        text.push('\n');
    }
    text.push_str(&format!("log-error={}\n", errlog.display()));
    let p = inst.dir().join("mysqld_safe.cnf");
    std::fs::write(&p, text).unwrap();
    p
}

fn admin(inst: &Instance, what: &str) -> Command {
    let mut c = Command::new(&inst.tools.admin);
    clean_env(&mut c);
    c.args(["--no-defaults", "--user=root", "--connect-timeout=5"])
        .arg(format!("--socket={}", inst.socket.display()))
        .arg(what)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// The pid in the instance's pid file once mariadbd answers ping (None at the deadline).
fn wait_ready(inst: &Instance, deadline: Duration) -> Option<u32> {
    let t0 = Instant::now();
    while t0.elapsed() < deadline {
        if admin(inst, "ping").status().is_ok_and(|s| s.success()) {
            let pid = std::fs::read_to_string(inst.dir().join("mysqld.pid")).ok()?;
            return pid.trim().parse().ok();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    None
}

/// mariadbd started by `mysqld_safe --malloc-lib=<installed shim>`.
fn mysqld_safe(inst: &Instance) {
    let safe = common::require("mysqld_safe");
    let dumps = inst.subdir("dumps-safe").unwrap();
    let errlog = inst.dir().join("mysqld_safe.err");
    let cnf = defaults_file(inst, &errlog);
    let mut c = Command::new(&safe);
    clean_env(&mut c);
    c.arg(format!("--defaults-file={}", cnf.display()))
        .arg(format!("--malloc-lib={LIB}"))
        .arg(format!("--datadir={}", inst.datadir.display()))
        .arg(format!("--socket={}", inst.socket.display()))
        .arg(format!("--port={}", inst.port))
        .arg(format!("--pid-file={}", inst.dir().join("mysqld.pid").display()))
        .arg("--user=root")
        .env("MALLOCSHIM_DUMP_DIR", &dumps)
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", safe.display()));
    let Some(pid) = wait_ready(inst, Duration::from_secs(90)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("mariadbd under mysqld_safe did not answer ping\n{}", ErrorLog::read(&errlog).text);
    };
    // From here on, a failure must not leave mariadbd running: shut it down first.
    let outcome = std::panic::catch_unwind(|| {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        assert!(exe.ends_with("mariadbd"), "pid {pid} from the pid file is {}", exe.display());
        assert_eq!(procfs::maps_contains(pid, LIB), Some(true), "{LIB} is not mapped in mariadbd {pid}");
        let path = dump(pid, &dumps, "mysqld_safe");
        report(&path, "mysqld_safe");
    });
    let shut = admin(inst, "shutdown").status();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            // SAFETY: kill(2) on the mariadbd pid mysqld_safe started (still running).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
    let log = ErrorLog::read(&errlog);
    assert!(shut.is_ok_and(|s| s.success()), "mariadb-admin shutdown failed\n{}", log.text);
    let status = status.unwrap_or_else(|| panic!("mysqld_safe did not end after shutdown\n{}", log.text));
    assert!(status.success(), "mysqld_safe's exit status {status}\n{}", log.text);
    assert!(log.crash_lines().is_empty(), "crash report: {:?}", log.crash_lines());
    assert!(log.text.contains("Shutdown complete"), "no clean shutdown in the error log\n{}", log.text);
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "mariadbd {pid} still runs");
}

/// Every path of the filesystem's directories the package lists that exists now.
fn existing(paths: &[String]) -> BTreeSet<String> {
    paths.iter().filter(|p| Path::new(p).symlink_metadata().is_ok()).cloned().collect()
}

#[test]
fn deb_installs_runs_under_mariadbd_and_removes_cleanly() {
    // SAFETY: geteuid(2) has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test installs a package: run it as root");
    for t in ["dpkg", "dpkg-deb", "readelf", "gzip"] {
        common::require(t);
    }
    let state = Command::new("dpkg-query").args(["-W", "-f=${db:Status-Status}", "mallocshim"]).output();
    let state = state.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    assert!(
        state.is_empty() || state == "not-installed",
        "the mallocshim package is already installed ({state}); remove it first (dpkg -P mallocshim)"
    );
    assert!(!Path::new(LIB).exists(), "{LIB} exists outside the package; remove it first");

    let out = run(Command::new("bash").arg(common::root().join("scripts/package.sh")));
    let deb = PathBuf::from(out.trim().lines().last().unwrap_or(""));
    let version = env!("CARGO_PKG_VERSION");
    assert!(deb.ends_with(format!("mallocshim_{version}_amd64.deb")), "package.sh printed {out}");
    assert!(deb.is_file(), "{} is missing", deb.display());

    // The directories the package will list, as they are before the install.
    let contents = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let listed: Vec<String> = contents
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let before = existing(&listed);

    let mut guard = Installed(true);
    run(Command::new("dpkg").arg("-i").arg(&deb));
    check_files(&deb);
    let dpkg_l: Vec<String> =
        run(Command::new("dpkg").args(["-L", "mallocshim"])).lines().map(str::to_string).collect();
    assert!(dpkg_l.iter().any(|p| p == LIB), "dpkg -L does not list {LIB}");

    {
        let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
        plain_preload(&inst);
        mysqld_safe(&inst);
    }

    run(Command::new("dpkg").args(["-r", "mallocshim"]));
    let left: Vec<&String> = dpkg_l
        .iter()
        .filter(|p| p.as_str() != "/." && Path::new(p).symlink_metadata().is_ok())
        .filter(|p| !(Path::new(p).is_dir() && before.contains(*p)))
        .collect();
    assert!(left.is_empty(), "dpkg -r left these behind: {left:?}");
    run(Command::new("dpkg").args(["-P", "mallocshim"]));
    guard.0 = false;
    let state = Command::new("dpkg-query").args(["-W", "-f=${db:Status-Status}", "mallocshim"]).output();
    let state = state.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    assert!(state.is_empty() || state == "not-installed", "after dpkg -P, dpkg says {state}");
    let info: Vec<_> = std::fs::read_dir("/var/lib/dpkg/info")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("mallocshim."))
        .map(|e| e.path())
        .collect();
    assert!(info.is_empty(), "dpkg -P left {info:?}");
    eprintln!("package: {} installed, used under mariadbd twice, removed and purged", deb.display());
}
