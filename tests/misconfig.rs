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

#[test]
fn rjem_malloc_conf_wins_over_malloc_conf() {
    let out = narenas(&[("MALLOC_CONF", "narenas:3"), ("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
    let out = narenas(&[("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
}

/// Files named after this process's pid left in the dump directory (by an earlier process with
/// the same pid) are skipped, never overwritten, and do not cost the dump: the exit dump takes
/// the next free sequence number. Under every backend.
#[test]
fn stale_dump_files_with_our_pid_do_not_cost_a_dump() {
    use std::io::{BufRead, BufReader};
    let bin = cc("wait_stdin.c", "wait_stdin", &[]);
    for backend in BACKENDS {
        let dir = work_dir().join(format!("stale-{backend}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = preloaded(&bin, backend);
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
