//! mimalloc-bench's stress programs with heap profiles on (issue 21 part 5: the sampled path
//! took one global spin-then-yield lock; it now takes one of the sharded futex locks of
//! `src/heapprof/live.rs` and `records.rs`). `tests/c/mstress.c` and `tests/c/test_stress.c`
//! (rewritten from memory, see their headers) run at 8 and 32 threads on this 2-core machine
//! (oversubscribed: the worst case for a lock whose holder can be preempted), under every
//! backend, with heap profiles at the default mean (512 KiB), at `PROF_SAMPLE_BYTES=4096`, at
//! 4096 with every call timed (`MALLOCSHIM_SAMPLE=1`), at `PROF_SAMPLE_BYTES=1` (every
//! allocation sampled: every free of the programs takes a shard lock) and with
//! `MALLOCSHIM_PROFILE=off`, and an exit dump in pprof.
//!
//! Asserted per run: it finishes within the time limit (killed otherwise: a hang or livelock
//! fails), exit 0, the program's `ok` line (every object's pattern checked at its free, as many
//! frees as allocations), no `CORRUPTION`; and with heap profiles on, the exit dump's profile
//! parses (format crate) with its comment line, and the live set after the programs freed
//! everything holds at most a handful of blocks (libc's own: a sampled block whose free missed
//! its shard would stay). At `PROF_SAMPLE_BYTES=1` every allocation is a sample of weight ~1:
//! the records' alloc_objects total at least the program's allocation count and at most 1%
//! more (libc's and the programs' own arrays), so no sample is lost between the shards.
//! Time against profiles off is the bench's business (`benches/heap_stress.rs`), not a test's.

mod common;

use mallocshim_format::pprof::Profile;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PROGRAMS: [(&str, &str); 2] = [("mstress.c", "mstress"), ("test_stress.c", "test_stress")];
const THREADS: [u32; 2] = [8, 32];

/// (name, environment) of the heap-profile settings.
const RATES: [(&str, &[(&str, &str)]); 5] = [
    ("default rate", &[]),
    ("PROF_SAMPLE_BYTES=4096", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "4096")]),
    ("4096 and SAMPLE=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "4096"), ("MALLOCSHIM_SAMPLE", "1")]),
    ("PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]),
    ("PROFILE=off", &[("MALLOCSHIM_PROFILE", "off")]),
];

fn bin(src: &str, out: &str) -> PathBuf {
    common::cc(src, out, &["-fno-omit-frame-pointer"])
}

fn dump_dir(name: &str) -> PathBuf {
    let d = common::work_dir().join(format!("heapstress-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd`, killed after `secs` (a hang fails). Not under `timeout`: the preload would
/// reach `timeout` too, and its exit dump would land beside the program's.
fn run_limited(mut cmd: Command, secs: u64, what: &str) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let t0 = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let o = child.wait_with_output().expect("wait");
            panic!("{what}: still running after {secs} s, killed: {}", common::describe(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{what}: {}", common::describe(&o));
    o
}

/// The number after `word` in `s` ("... 12 live" -> 12 for "live").
fn before_word(s: &str, word: &str) -> Option<u64> {
    let ws: Vec<&str> = s.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    ws.windows(2).find(|w| w[1] == word).and_then(|w| w[0].parse().ok())
}

fn check(src: &str, out: &str, backend: &str, threads: u32, rate: &str, env: &[(&str, &str)]) {
    let what = format!("{out} at {threads} threads under {backend}, {rate}");
    let dir =
        dump_dir(&format!("{out}-{backend}-{threads}-{}", rate.replace(|c: char| !c.is_alphanumeric(), "_")));
    let mut cmd = common::preloaded(bin(src, out), backend);
    // Scale 2, 2 rounds: 1,000..16,000 allocations a thread a round (a few seconds on 2 cores).
    cmd.args([threads.to_string(), "2".into(), "2".into()]);
    cmd.env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_limited(cmd, 300, &what);
    let so = common::stdout(&o);
    let tag = if out == "mstress" { "mstress: ok" } else { "test-stress: ok" };
    let line = so
        .lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("{what}: no `{tag}` line: {}", common::describe(&o)));
    assert!(!common::stderr(&o).contains("CORRUPTION"), "{what}: {}", common::describe(&o));
    let allocated =
        common::kv(line, "allocated").unwrap_or_else(|| panic!("{what}: no allocated= in {line}"));
    assert_eq!(common::kv(line, "freed"), Some(allocated), "{what}: {line}");
    let p = common::profiles(&dir);
    if env.contains(&("MALLOCSHIM_PROFILE", "off")) {
        return;
    }
    assert_eq!(p.len(), 1, "{what}: one exit profile expected, found {p:?}");
    let prof =
        Profile::read(&p[0]).unwrap_or_else(|e| panic!("{what}: {} does not parse: {e}", p[0].display()));
    let comment = prof
        .comment
        .iter()
        .map(|&i| prof.str(i))
        .find(|c| c.starts_with("mallocshim heap profile:"))
        .unwrap_or_else(|| panic!("{what}: no heap profile comment"))
        .to_string();
    let taken = before_word(&comment, "samples").unwrap_or_else(|| panic!("{what}: {comment}"));
    let live = before_word(&comment, "live").unwrap_or_else(|| panic!("{what}: {comment}"));
    assert!(live <= 64, "{what}: {live} blocks still live after the program freed everything: {comment}");
    if env.contains(&("MALLOCSHIM_PROF_SAMPLE_BYTES", "4096")) {
        assert!(taken > 100, "{what}: only {taken} samples at 4096: {comment}");
    }
    if env.contains(&("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")) {
        let k = prof.sample_index("alloc_objects").expect("alloc_objects");
        let objects: i64 = prof.sample.iter().map(|s| s.value[k]).sum();
        assert!(
            objects as u64 >= allocated && (objects as u64) <= allocated + allocated / 100,
            "{what}: alloc_objects {objects} at rate 1, the program allocated {allocated} ({comment})"
        );
    }
}

fn run_program(idx: usize) {
    let (src, out) = PROGRAMS[idx];
    for backend in common::BACKENDS {
        for threads in THREADS {
            for (rate, env) in RATES {
                check(src, out, backend, threads, rate, env);
            }
        }
    }
}

#[test]
fn mstress_with_heap_profiles() {
    run_program(0);
}

#[test]
fn test_stress_with_heap_profiles() {
    run_program(1);
}
