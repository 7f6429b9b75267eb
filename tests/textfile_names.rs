//! The Prometheus textfile's name and content switches, black-box (tests/c/diagnose.c `steady`,
//! held until stdin closes), every backend: a second live process with the same
//! `MALLOCSHIM_INSTANCE` gets one `mallocshim:` line and writes as `<name>-<pid>`, and its clean
//! stop removes only its own file, never the first one's; `MALLOCSHIM_PROM_HISTOGRAMS=off` drops
//! the latency histogram series.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(backend: &str, dir: &Path, env: &[(&str, &str)]) -> Child {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let mut c: Command = common::preloaded(&prog, backend);
    c.arg("steady")
        .env("DIAGNOSE_WAIT", "1")
        .env("MALLOCSHIM_PROM_TEXTFILE_DIR", dir)
        .env("MALLOCSHIM_PROM_INTERVAL_S", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done steady");
    child
}

/// Closes stdin (a clean exit) and returns stderr.
fn stop(mut c: Child) -> String {
    drop(c.stdin.take());
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(c.wait().unwrap().success(), "{err}");
    err
}

fn wait_file(p: &Path) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(t) = std::fs::read_to_string(p) {
            return t;
        }
        assert!(Instant::now() < end, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fresh(name: &str) -> PathBuf {
    let dir = common::work_dir().join("textfile-names").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_taken_instance_name_gets_a_unique_one_and_stops_cleanly() {
    for b in common::BACKENDS {
        let dir = fresh(&format!("dup-{b}"));
        let first = start(b, &dir, &[("MALLOCSHIM_INSTANCE", "db")]);
        let shared = dir.join("mallocshim_db.prom");
        wait_file(&shared);
        let second = start(b, &dir, &[("MALLOCSHIM_INSTANCE", "db")]);
        let own = dir.join(format!("mallocshim_db-{}.prom", second.id()));
        let text = wait_file(&own);
        assert!(text.contains(&format!("instance=\"db-{}\"", second.id())), "{b}: {text}");
        assert!(std::fs::read_to_string(&shared)
            .unwrap()
            .contains(&format!("# mallocshim pid {}", first.id())));
        let err = stop(second);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("mallocshim:")).collect();
        assert_eq!(lines.len(), 1, "{b}: {err}");
        assert!(lines[0].contains("MALLOCSHIM_INSTANCE=db") && lines[0].contains("db-"), "{b}: {err}");
        assert!(!own.exists(), "{b}: the second process's own file stays after its clean stop");
        assert!(shared.exists(), "{b}: the second process's stop removed the first one's file");
        let err = stop(first);
        assert!(!err.contains("mallocshim:"), "{b}: {err}");
        assert!(!shared.exists(), "{b}: the first process's file stays after its clean stop");
    }
}

/// Series (non-comment lines) of the textfile with the histograms on and off.
#[test]
fn prom_histograms_off_drops_the_latency_histograms() {
    for b in common::BACKENDS {
        let mut counts = Vec::new();
        for setting in ["on", "off"] {
            let dir = fresh(&format!("hist-{setting}-{b}"));
            let c = start(b, &dir, &[("MALLOCSHIM_PROM_HISTOGRAMS", setting)]);
            let text = wait_file(&dir.join(format!("mallocshim_{}.prom", c.id())));
            stop(c);
            let series = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
            let hist = text.lines().filter(|l| l.starts_with("mallocshim_call_latency_seconds")).count();
            assert!(
                text.contains("mallocshim_rss_bytes") || text.contains("mallocshim_memory"),
                "{b}: {text}"
            );
            counts.push((series, hist));
        }
        eprintln!("{b}: series with histograms on {:?}, off {:?}", counts[0], counts[1]);
        assert!(counts[0].1 > 0, "{b}: no latency histogram with the default");
        assert_eq!(counts[1].1, 0, "{b}: latency histogram with MALLOCSHIM_PROM_HISTOGRAMS=off");
        assert!(counts[1].0 < counts[0].0, "{b}: off must have fewer series: {counts:?}");
    }
}
