//! Issue 21, parts 1, 2 and 7 (docs/testing-hostile.md): the loader and fork.
//!
//! - `dlclose_joining_destructor_during_dumps`: dlopen/dlclose, 200 times, of a library whose
//!   constructor starts two allocating threads and whose destructor joins them (under the
//!   loader's lock), while dumps run on SIGUSR1 (every 3 ms), every second
//!   (`MALLOCSHIM_DUMP_INTERVAL_S=1`) and the Prometheus textfile is rewritten every second.
//!   The old shim deadlocked here: the dump's walk over the thread slots called dladdr, the
//!   exiting thread waited for the walk, dlclose for the thread.
//! - `fork_from_fast_alarm_handler`: a single-threaded program forks 2,000 times while a 1,000 µs
//!   SIGALRM handler forks too (interrupting fork itself); it must finish within 30 s, or 8 times
//!   glibc alone's time run just before when that is longer, under every backend and setting
//!   (jemalloc and tcmalloc preloaded directly never do); its time against glibc alone is
//!   printed, not asserted: the 2x is not met everywhere (docs/results/fork.md). At the 300 µs no preload finishes on this machine
//!   ([`ALARM_US`]).
//! - `forked_child_numbers_its_dumps_from_zero`: a child's first dump is its own seq 0.
//! - `fork_child_faults_near_glibc_alone`: a single-threaded program's fork+exit takes at most
//!   [`EXTRA_FAULTS`] more minor page faults (process and children, per fork) than the same
//!   program alone, timed just before: the backend's child handler runs lazily, at the child's
//!   first allocation (`hot::postfork`), and the shim's handlers write only what changes. The
//!   code before took 33 (jemalloc) and 43 (tcmalloc) more.
//!
//! Every backend × `common::storm::settings()` (profiling on, off, `MALLOCSHIM_SAMPLE=1`,
//! `MALLOCSHIM_PROF_SAMPLE_BYTES=1`); a run past its deadline is killed and fails with `HANG`.

mod common;

use common::storm::{run_stormed, settings, try_stormed};
use std::path::PathBuf;
use std::time::Duration;

fn scratch(tag: &str) -> PathBuf {
    let tag: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let d = common::work_dir().join(format!("loader-fork-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

fn names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn dlclose_joining_destructor_during_dumps() {
    let lib = common::cc("loader_dlclose_lib.c", "libloader_dlclose.so", &["-shared", "-fPIC"]);
    let prog = common::cc("loader_dlclose.c", "loader_dlclose", &[]);
    for b in common::BACKENDS {
        for (setting, env) in settings() {
            let what = format!("loader_dlclose under {b}, {setting}");
            let dir = scratch(&what);
            let mut c = common::preloaded(&prog, b);
            c.arg(&lib).arg("200").envs(env.iter().copied());
            c.env("MALLOCSHIM_DUMP_DIR", &dir)
                .env("MALLOCSHIM_DUMP_INTERVAL_S", "1")
                .env("MALLOCSHIM_PROM_TEXTFILE_DIR", &dir)
                .env("MALLOCSHIM_PROM_INTERVAL_S", "1");
            let (o, took) = run_stormed(c, &what, true, Duration::from_secs(60));
            assert!(o.status.success(), "{what}: {}", common::describe(&o));
            assert!(common::stdout(&o).contains("loads=200 bad=0"), "{what}: {}", common::describe(&o));
            let files = names(&dir);
            let json = files.iter().filter(|n| n.ends_with(".json")).count();
            assert!(json >= 1, "{what}: no dump written during the run: {files:?}");
            eprintln!("{what}: {took:.1?}, {json} dumps");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// glibc alone past this has not finished the alarm program (it takes 2 to 6 s at load 30 on
/// this 2-core machine).
const ALARM_DEADLINE: Duration = Duration::from_secs(120);

/// The SIGALRM period, µs. The 300 µs is below what this machine sustains with any
/// preload: there fork+wait alone takes ~400 µs, so glibc alone finishes 2,000 iterations in 3 to
/// 4 s only because its fork is just short enough, while the same program with nothing but
/// libm and libgcc_s preloaded (the shim's dependencies until issue 21 part 2 dropped them) takes 10 s, and with jemalloc
/// preloaded directly, or the shim with profiling, heap profiles, dumps and trims all off, it
/// does not finish in 30 s (docs/testing-hostile.md). At 1,000 µs the handler still interrupts
/// fork() itself (and its own fork+wait takes 40% of each period), and the bound holds.
const ALARM_US: &str = "1000";

/// Runs `fork_wait 2000 0 ALARM_US` (2,000 forks, single-threaded, a SIGALRM handler that
/// forks); returns its wall time, None when killed at `deadline`.
fn alarm_run(mut c: std::process::Command, what: &str, storm: bool, deadline: Duration) -> Option<Duration> {
    c.args(["2000", "0", ALARM_US, "0"]);
    let (o, took, hung) = try_stormed(c, what, storm, deadline);
    if hung {
        return None;
    }
    assert!(o.status.success(), "{what}: {}", common::describe(&o));
    assert!(common::stdout(&o).contains("forks=2000 bad=0"), "{what}: {}", common::describe(&o));
    Some(took)
}

/// A shim run of the alarm program past this, and past [`ALARM_SHIM_RATIO`] times glibc alone's
/// time in the same cell, has livelocked (the backends preloaded directly, jemalloc's and
/// tcmalloc's, do not finish in it: their fork handlers lock even in a single-threaded process,
/// which the shim's wrapper skips).
const ALARM_SHIM_DEADLINE: Duration = Duration::from_secs(30);

/// The deadline's same-run part: the alarm program's time grows steeply with the load (its
/// handler forks once per period, and the main loop runs in what is left), so at load 10–14 the
/// tcmalloc cells took 17 s and more while glibc alone took several seconds; a slow machine
/// must not read as a livelock.
const ALARM_SHIM_RATIO: u32 = 8;

#[test]
fn fork_from_fast_alarm_handler() {
    let prog = common::cc("fork_wait.c", "fork_wait", &[]);
    let mut failed = Vec::new();
    for b in common::BACKENDS {
        for (setting, env) in settings() {
            let what = format!("fork_wait alarm under {b}, {setting}");
            // glibc alone, just before: the reference of this cell, in the same load.
            let alone =
                alarm_run(common::plain(&prog), "fork_wait alarm without the shim", false, ALARM_DEADLINE)
                    .expect("glibc alone finishes the alarm program");
            let dir = scratch(&what);
            let mut c = common::preloaded(&prog, b);
            c.envs(env.iter().copied()).env("MALLOCSHIM_DUMP_DIR", &dir);
            let deadline = ALARM_SHIM_DEADLINE.max(alone * ALARM_SHIM_RATIO);
            let t = alarm_run(c, &what, false, deadline);
            let _ = std::fs::remove_dir_all(&dir);
            match t {
                Some(t) => eprintln!(
                    "{what}: {:.2} s, {:.2}x glibc alone ({:.2} s)",
                    t.as_secs_f64(),
                    t.as_secs_f64() / alone.as_secs_f64(),
                    alone.as_secs_f64()
                ),
                None => failed.push(format!("{what}: not finished in {deadline:?} (glibc alone {alone:?})")),
            }
        }
    }
    assert!(failed.is_empty(), "the alarm program livelocked: {failed:#?}");
}

/// A forked child's dumps (`tests/c/fork_dump_seq.c`, every backend, heap profiles sampling
/// every byte and off, under the SIGUSR1 storm): numbered from 0 as a new process's; the forking thread
/// is the child's one live thread, under the child's pid (the fork handler leaves its slot to
/// the child's first drain, which adopts it: `slots::fold`), the parent's helper thread is
/// folded; and the child's own block (777,777 bytes) is in its heap profile under the child's
/// tid, with its stack walked (the main thread is told by its stack, not its tid, which a child
/// changes: such samples were "[stack not walked]" before).
#[test]
fn forked_child_numbers_its_dumps_from_zero() {
    let prog = common::cc("fork_dump_seq.c", "fork_dump_seq", &["-pthread"]);
    for (b, prof) in common::BACKENDS.into_iter().flat_map(|b| [(b, true), (b, false)]) {
        // Profiles off: the survivor is adopted by the dump's walk; on: by its first sample.
        let what =
            format!("fork_dump_seq under {b}, heap profiles {}", if prof { "every byte" } else { "off" });
        let dir = scratch(&what);
        let mut c = common::preloaded(&prog, b);
        c.env("MALLOCSHIM_DUMP_DIR", &dir)
            .env("MALLOCSHIM_DUMP_FORMATS", if prof { "json,pprof" } else { "json" })
            .env("MALLOCSHIM_PROF_SAMPLE_BYTES", if prof { "1" } else { "0" });
        let (o, _) = run_stormed(c, &what, false, Duration::from_secs(60));
        assert!(o.status.success(), "{what}: {}", common::describe(&o));
        let out = common::stdout(&o);
        let key = |k: &str| common::kv(&out, k).unwrap_or_else(|| panic!("{what}: no {k}= in {out}"));
        let (parent, child, helper) = (key("parent"), key("child"), key("helper"));
        let mut files = names(&dir);
        files.sort();
        let mut want: Vec<String> = [(parent, 0), (parent, 1), (parent, 2), (child, 0)]
            .iter()
            .flat_map(|&(p, s)| ["json", "pb.gz"].map(|e| format!("mallocshim.{p}.{s}.{e}")))
            .filter(|n| prof || n.ends_with("json"))
            .collect();
        want.sort();
        assert_eq!(files, want, "{what}: the child's first dump is its seq 0");
        let d = mallocshim_format::Dump::read(&dir.join(format!("mallocshim.{child}.0.json")))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let live: Vec<u32> = d
            .threads
            .iter()
            .filter(|t| t.state == mallocshim_format::dump::STATE_LIVE)
            .map(|t| t.tid)
            .collect();
        assert_eq!(
            live,
            [child as u32],
            "{what}: the child's live threads (parent {parent}, helper {helper})"
        );
        if !prof {
            let _ = std::fs::remove_dir_all(&dir);
            continue;
        }
        let raw = common::pprof(&dir.join(format!("mallocshim.{child}.0.pb.gz")), &["-raw"]);
        let lines: Vec<&str> = raw.lines().collect();
        let i = lines
            .iter()
            .position(|l| l.split_whitespace().nth(1) == Some("777777"))
            .unwrap_or_else(|| panic!("{what}: no sample of the child's 777777-byte block\n{raw}"));
        let labels = lines[i + 1..].iter().take(2).copied().collect::<Vec<_>>().join(" ");
        assert!(
            labels.contains(&format!("tid:[{child}]")),
            "{what}: the child's block under {labels}\n{raw}"
        );
        let frames = lines[i].rsplit(':').next().unwrap_or("").split_whitespace().count();
        assert!(frames >= 2, "{what}: the child's block has {frames} frame(s): stack not walked\n{raw}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Minor page faults per fork+exit the shim may add to a single-threaded program's (the shim's
/// own: its handlers' code page, the table pointer's page, the slot generation's, the lookup of
/// the child's `_exit` through the shim's symbols, the owed-handler flag; measured +3 to +9).
const EXTRA_FAULTS: f64 = 12.0;

#[test]
fn fork_child_faults_near_glibc_alone() {
    let prog = common::cc("fork_wait.c", "fork_wait", &[]);
    let faults = |mut c: std::process::Command, what: &str| {
        c.args(["300", "0"]);
        let o = common::run_ok(c, what);
        let out = common::stdout(&o);
        let f = out.split_whitespace().find_map(|w| w.strip_prefix("faults_per_fork="));
        f.and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{what}: no faults_per_fork= in {out}"))
    };
    let mut failed = Vec::new();
    for b in common::BACKENDS {
        for (setting, env) in settings() {
            let what = format!("fork_wait under {b}, {setting}");
            let alone = faults(common::plain(&prog), "fork_wait alone");
            let mut c = common::preloaded(&prog, b);
            c.envs(env.iter().copied());
            let shim = faults(c, &what);
            eprintln!("{what}: {shim:.1} faults per fork+exit, glibc alone {alone:.1}");
            if shim > alone + EXTRA_FAULTS {
                failed.push(format!("{what}: {shim:.1} faults per fork+exit, glibc alone {alone:.1}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "more than {EXTRA_FAULTS} page faults per fork above glibc alone: {failed:#?}"
    );
}
