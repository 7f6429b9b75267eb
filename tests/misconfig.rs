//! Misconfiguration that used to pass silently: the allocator options users set for a
//! jemalloc-linked mysqld (`MALLOC_CONF`) take effect under the jemalloc backend, and
//! `_RJEM_MALLOC_CONF` (the built-in jemalloc's own variable) still wins over it.

mod common;
use common::*;

fn narenas(env: &[(&str, &str)]) -> String {
    let bin = cc("je_narenas.c", "je_narenas", &[]);
    let mut c = preloaded(&bin, "jemalloc");
    c.env_remove("MALLOC_CONF").env_remove("_RJEM_MALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run_ok(c, &format!("je_narenas with {env:?}"));
    assert!(shim_lines(&o).is_empty(), "no shim line expected: {}", describe(&o));
    stdout(&o)
}

#[test]
fn malloc_conf_is_honoured_under_jemalloc() {
    let default = narenas(&[]);
    assert!(default.contains("rc=0 narenas="), "{default}");
    assert!(!default.contains("narenas=3\n"), "the default must differ from the value set: {default}");
    let out = narenas(&[("MALLOC_CONF", "narenas:3")]);
    assert!(out.contains("rc=0 narenas=3\n"), "MALLOC_CONF=narenas:3 not in effect: {out}");
}

/// Percona's and jemalloc's advice for heap profiles, `MALLOC_CONF=prof:true,...`, under the
/// jemalloc backend: one `mallocshim:` line pointing to the shim's own heap profiles, no
/// "Invalid conf pair" line from the built-in jemalloc (built without profiling), and the
/// other keys still in effect.
#[test]
fn malloc_conf_prof_keys_give_one_line() {
    let bin = cc("je_narenas.c", "je_narenas", &[]);
    let mut c = preloaded(&bin, "jemalloc");
    c.env_remove("_RJEM_MALLOC_CONF")
        .env("MALLOC_CONF", "prof:true,prof_active:true,lg_prof_sample:19,narenas:3,prof_prefix:/tmp/jeprof");
    let o = run_ok(c, "je_narenas with MALLOC_CONF=prof:true,...");
    let err = stderr(&o);
    assert!(!err.contains("Invalid conf"), "{err}");
    let lines = shim_lines(&o);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("MALLOC_CONF") && lines[0].contains("MALLOCSHIM_DUMP_FORMATS=pprof"), "{err}");
    assert!(stdout(&o).contains("rc=0 narenas=3\n"), "{}", describe(&o));
}

#[test]
fn rjem_malloc_conf_wins_over_malloc_conf() {
    let out = narenas(&[("MALLOC_CONF", "narenas:3"), ("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
    let out = narenas(&[("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
}

/// Files named after this process's pid left in the dump directory (by an earlier process with
/// the same pid) are skipped, never overwritten, and do not cost the dump: the exit dump takes
/// the next free sequence number. Under every backend and setting.
#[test]
fn stale_dump_files_with_our_pid_do_not_cost_a_dump() {
    use std::io::{BufRead, BufReader};
    let bin = cc("wait_stdin.c", "wait_stdin", &[]);
    for (backend, setting, env) in matrix() {
        let backend = &format!("{backend} ({setting})")[..];
        let (name, _) = backend.split_once(' ').unwrap();
        let dir = work_dir().join(format!("stale-{name}-{}", setting.replace([' ', '='], "_")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = preloaded(&bin, name);
        c.envs(env.iter().copied());
        c.env("MALLOCSHIM_DUMP_DIR", &dir).env("MALLOCSHIM_DUMP_AT_EXIT", "1");
        c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        c.stderr(std::process::Stdio::piped());
        let mut child = c.spawn().expect("start wait_stdin");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let pid: u32 = line.trim().strip_prefix("pid=").and_then(|p| p.parse().ok()).expect(&line);
        // Sequence 0 and 1 fully taken, 2 taken for the second format only.
        let planted = [
            format!("{pid}.0.json"),
            format!("{pid}.0.prom"),
            format!("{pid}.1.json"),
            format!("{pid}.2.prom"),
        ];
        for p in &planted {
            std::fs::write(dir.join(format!("mallocshim.{p}")), "stale\n").unwrap();
        }
        drop(child.stdin.take());
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{backend}: {}", describe(&o));
        assert!(shim_lines(&o).is_empty(), "{backend}: no shim line expected: {}", describe(&o));
        for p in &planted {
            let body = std::fs::read_to_string(dir.join(format!("mallocshim.{p}"))).unwrap();
            assert_eq!(body, "stale\n", "{backend}: planted {p} overwritten");
        }
        for ext in ["json", "prom"] {
            let p = dir.join(format!("mallocshim.{pid}.3.{ext}"));
            let body =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{backend}: {}: {e}", p.display()));
            assert!(body.len() > 100 && body != "stale\n", "{backend}: {ext} dump empty");
        }
        let json = std::fs::read_to_string(dir.join(format!("mallocshim.{pid}.3.json"))).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).expect("the dump parses as JSON");
        assert_eq!(v["pid"].as_u64(), Some(pid as u64), "{backend}: {json:.200}");
    }
}

/// mariadbd reopens stderr onto its error log (`--log-error`, freopen on fd 2) after the shim
/// has started, so a start-up line such as the backend fallback first goes to the old stderr
/// (here /dev/null, set by a static wrapper the shim does not load into). The shim's worker
/// notices fd 2 is another file and writes its start-up lines again, once: the fallback line is
/// in the error log, exactly once.
#[test]
fn fallback_line_reaches_mariadbd_error_log() {
    use mallocshim_mariadb::{ErrorLog, Instance, Launch, Options};
    let wrapper = cc("stderr_null_exec.c", "stderr_null_exec", &["-static"]);
    let so = shim();
    let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let launch = Launch::shim(&so, "tcmalloc")
        .var("MALLOCSHIM_TCMALLOC_LIB", "/nonexistent.so")
        .wrapper([wrapper.as_os_str().to_owned()]);
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd did not start: {e}"));
    let errlog = srv.errlog().to_path_buf();
    // The worker looks at fd 2 once a second; wait (bounded) for the line before shutting down.
    let want = "continuing with glibc";
    for _ in 0..300 {
        if std::fs::read_to_string(&errlog).unwrap_or_default().contains(want) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let log = ErrorLog::read(&stopped.errlog);
    let lines: Vec<&str> = log.text.lines().filter(|l| l.contains(want)).collect();
    assert_eq!(lines.len(), 1, "the fallback line once in the error log:\n{}", log.text);
    assert!(
        lines[0].starts_with("mallocshim: backend tcmalloc could not be loaded")
            && lines[0].contains("/nonexistent.so"),
        "{}",
        lines[0]
    );
    assert!(log.text.contains("before stderr was reopened"), "{}", log.text);
    assert_eq!(stopped.status, 0, "mariadbd exit status\n{}", log.text);
}

/// Removes a file when dropped, so a test's system-wide copy goes even when the test fails.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The secure-execution rule: a setuid-root program run by `nobody` (AT_SECURE) under the shim
/// writes no dump on SIGUSR1 (nor at exit) when no dump directory was configured by the
/// owner's environment; `MALLOCSHIM_DUMP_DIR` and `TMPDIR` from the caller are ignored, and the
/// verbose table says dumps are off. ld.so preloads a library for a setuid program only by a
/// name without a slash, from a system directory, and only when the library is itself setuid:
/// the test installs a copy so (removed afterwards, even on failure). Under every backend and
/// setting.
#[test]
fn secure_execution_writes_no_dump() {
    use std::os::unix::fs::PermissionsExt;
    let setpriv = require("setpriv");
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test installs a setuid library: run it as root");
    let name = format!("libmallocshim-securetest-{}.so", std::process::id());
    let lib = std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu").join(&name);
    let _lib_guard = RemoveOnDrop(lib.clone());
    std::fs::copy(shim(), &lib).expect("copy the shim into /usr/lib/x86_64-linux-gnu");
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o4755)).unwrap();

    let built = cc("secure_dump.c", "secure_dump", &[]);
    let dir = std::path::PathBuf::from(format!("/tmp/mallocshim-secure.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("dumps")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("dumps"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("secure_dump");
    std::fs::copy(&built, &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();

    for (backend, setting, env) in matrix() {
        let mut c = std::process::Command::new(&setpriv);
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&prog);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("MALLOCSHIM_") {
                c.env_remove(k);
            }
        }
        c.envs(env.iter().copied());
        c.env("LD_PRELOAD", &name)
            .env("MALLOCSHIM_BACKEND", backend)
            .env("MALLOCSHIM_VERBOSE", "1")
            .env("MALLOCSHIM_DUMP_AT_EXIT", "1")
            .env("MALLOCSHIM_DUMP_DIR", dir.join("dumps"))
            .env("TMPDIR", dir.join("dumps"))
            .stdin(std::process::Stdio::null());
        let o = c.output().expect("run setpriv");
        let what = format!("setuid secure_dump under {backend}, {setting}: {}", describe(&o));
        assert!(o.status.success(), "{what}");
        let out = stdout(&o);
        assert!(out.contains("ok"), "{what}");
        let pid: u32 =
            out.lines().find_map(|l| l.strip_prefix("pid=")).and_then(|p| p.parse().ok()).expect(&what);
        let lines = shim_lines(&o);
        // The shim was loaded, knew it was in secure execution, and said so.
        assert!(lines.iter().any(|l| l.contains("dumps are off")), "{what}");
        assert!(
            lines.iter().any(|l| l.contains("MALLOCSHIM_DUMP_DIR ignored in a secure-execution")),
            "{what}"
        );
        let summary = lines.iter().find(|l| l.starts_with("mallocshim: summary ")).expect(&what);
        assert!(summary.contains(&format!("backend={backend} ")), "{what}");
        let prefix = format!("mallocshim.{pid}.");
        for d in [std::path::PathBuf::from("/tmp"), dir.join("dumps")] {
            let found: Vec<String> = std::fs::read_dir(&d)
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&prefix))
                .collect();
            assert!(found.is_empty(), "{backend}: dump files in {}: {found:?}\n{what}", d.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A relative `MALLOCSHIM_DUMP_DIR` (it would follow the working directory: mariadbd's is its
/// datadir) and a dump directory inside the datadir (the working directory, when it holds
/// `mysql/` and `aria_log_control`) are passed over: one `mallocshim:` line, and the exit dump
/// goes to `TMPDIR`. The old shim wrote both into the datadir. Under every backend.
#[test]
fn relative_or_datadir_dump_dir_is_refused() {
    let bin = cc("wait_stdin.c", "wait_stdin", &[]);
    for backend in BACKENDS {
        let base = work_dir().join(format!("dumpdir-{backend}"));
        let _ = std::fs::remove_dir_all(&base);
        let (data, tmp) = (base.join("data"), base.join("tmp"));
        for d in [data.join("mysql"), data.join("rel"), data.join("dumps"), tmp.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(data.join("aria_log_control"), b"").unwrap();
        for (dump_dir, said) in [
            ("rel".to_string(), "is relative"),
            (data.join("dumps").display().to_string(), "inside the datadir"),
        ] {
            let mut c = preloaded(&bin, backend);
            c.current_dir(&data)
                .env("MALLOCSHIM_DUMP_DIR", &dump_dir)
                .env("TMPDIR", &tmp)
                .env("MALLOCSHIM_DUMP_AT_EXIT", "1");
            let o = run_ok(c, &format!("{backend}: MALLOCSHIM_DUMP_DIR={dump_dir}"));
            let lines = shim_lines(&o);
            assert_eq!(lines.len(), 1, "{backend} {dump_dir}: {}", describe(&o));
            assert!(
                lines[0].contains(said) && lines[0].contains(&tmp.display().to_string()),
                "{backend}: {lines:?}"
            );
            let out = stdout(&o);
            let pid = out.lines().next().and_then(|l| l.strip_prefix("pid=")).expect(&out).to_string();
            let json = tmp.join(format!("mallocshim.{pid}.0.json"));
            assert!(json.exists(), "{backend} {dump_dir}: no exit dump {}", json.display());
            for d in [data.join("rel"), data.join("dumps"), data.clone()] {
                let n = std::fs::read_dir(&d)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("mallocshim."))
                    .count();
                assert_eq!(n, 0, "{backend} {dump_dir}: a dump was written in {}", d.display());
            }
        }
    }
}
