//! Heap profiles, black-box: programs with known allocation sites run under the shim with
//! `MALLOCSHIM_DUMP_FORMATS=pprof`, and `go tool pprof` (Debian's golang-go; missing = failure)
//! reads every profile they write.
//! - sites (`tests/c/heap_sites.cpp`, also built as C): site A holds 48 MiB in 1 KiB blocks
//!   (malloc), site B 16 MiB in 64 KiB blocks (`new[]` in C++), site C allocates and frees 1 GiB.
//!   Per backend, at `MALLOCSHIM_SAMPLE` 64 and 1: inuse_space gives A 75% ±10% and B 25% ±10%
//!   by their own function names (not malloc, not operator new), C absent; alloc_space is led
//!   by C. Sampled at a mean of 64 KiB, so the ±10% holds by many standard deviations.
//! - `mallocshim heap` (crates/mallocshim-cli) on the same profiles, glibc: site_a leads by
//!   inuse_space, site_c by alloc_space; between the two dumps of `heap_sites grow` (site_a and
//!   site_c, dump, site_b, dump) the growth against the first names site_b alone, about 16 MiB.
//! - toggle: sampling off at start, turned on by `mallocshim_heap_profile_set`: A absent, B in;
//!   the profile's comments name the entry table in force: without the heap-profile tests before
//!   the call, with them after (and with them when on from the start).
//! - cycle: on, off, on through `mallocshim_heap_profile_set`, from 0 at start (off, on, off, on)
//!   and from 65536 (on, off, on), per backend: the blocks sampled before sampling was turned off
//!   and freed while it was off leave the profile (the entry table with the heap-profile tests is
//!   kept when they are turned off: with the one without, they would stay), nothing is sampled
//!   while off, sampling resumes when turned on again; both dumps name the table with them.
//! - profiling off (`MALLOCSHIM_PROFILE=off`): the set call answers ENOTSUP, the profile parses
//!   and holds no sample.
//! - C++ semantics of the interposed operator new (bad_alloc, nothrow NULL, new_handler,
//!   aligned forms) per backend.
//! - hostile (`tests/c/heap_hostile.c`): every allocation sampled while 4,000 threads come and
//!   go, a thread dlopens and dlcloses a library that allocates in its constructor, the program
//!   forks and SIGUSR1 asks for dumps: exit 0 within the time limit, every dump parses, and the
//!   counts are exact (4,000 live blocks at the keeping site, 200,000 allocations at the
//!   churning one).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn go() -> PathBuf {
    common::require("go")
}

/// A fresh dump directory for one run.
fn dump_dir(name: &str) -> PathBuf {
    let d = common::work_dir().join(format!("heap-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd` under `timeout` (killed after `secs`): a hang fails the test.
fn run_limited(cmd: Command, secs: u32, what: &str) -> Output {
    let mut t = Command::new(common::require("timeout"));
    t.args(["-s", "KILL", &secs.to_string()]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    t.stdin(std::process::Stdio::null());
    let o = t.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(o.status.success(), "{what} (killed after {secs} s if status 137): {}", common::describe(&o));
    o
}

/// `go tool pprof -top -sample_index=<index>`: its output (fails when pprof cannot read it).
fn top(profile: &Path, index: &str) -> String {
    common::pprof(profile, &["-top", &format!("-sample_index={index}")])
}

/// `go tool pprof -comments`: the profile's comments.
fn comments(profile: &Path) -> String {
    let o = Command::new(go())
        .args(["tool", "pprof", "-comments"])
        .arg(profile)
        .env("HOME", common::work_dir())
        .output()
        .expect("run go tool pprof");
    assert!(o.status.success(), "go tool pprof cannot read {}: {}", profile.display(), common::describe(&o));
    common::stdout(&o)
}

const WITH_HEAP: &str = "entry table: with heap profiles";
const WITHOUT_HEAP: &str = "entry table: without heap profiles";

/// flat% and flat value of function `name` in a `-top` listing (None when absent).
fn flat(top: &str, name: &str) -> Option<(f64, String)> {
    top.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 6 && f[5..].join(" ") == name)
            .then(|| (f[1].trim_end_matches('%').parse().unwrap_or(f64::NAN), f[0].to_string()))
    })
}

/// The first function listed (highest flat).
fn leader(top: &str) -> String {
    let mut lines = top.lines().skip_while(|l| !l.trim_start().starts_with("flat"));
    lines.next();
    lines.next().map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

fn sites_bin(cxx: bool) -> PathBuf {
    if cxx {
        common::cc("heap_sites.cpp", "heap_sites_cxx", &["-fno-omit-frame-pointer", "-lstdc++"])
    } else {
        common::cc("heap_sites.c", "heap_sites_c", &["-fno-omit-frame-pointer"])
    }
}

fn check_sites(backend: &str, cxx: bool, sample: &str) {
    let what =
        format!("heap_sites {} under {backend}, MALLOCSHIM_SAMPLE={sample}", if cxx { "C++" } else { "C" });
    let dir = dump_dir(&format!("sites-{backend}-{cxx}-{sample}"));
    let mut cmd = common::preloaded(sites_bin(cxx), backend);
    cmd.env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
        .env("MALLOCSHIM_PROF_SAMPLE_BYTES", "65536")
        .env("MALLOCSHIM_SAMPLE", sample);
    let o = run_limited(cmd, 120, &what);
    assert!(common::stdout(&o).contains("api_rc=0"), "{what}: {}", common::describe(&o));
    let p = common::profiles(&dir);
    assert_eq!(p.len(), 1, "{what}: one profile expected, found {p:?}");
    let inuse = top(&p[0], "inuse_space");
    let (a, _) = flat(&inuse, "site_a").unwrap_or_else(|| panic!("{what}: no site_a in\n{inuse}"));
    let (b, _) = flat(&inuse, "site_b").unwrap_or_else(|| panic!("{what}: no site_b in\n{inuse}"));
    assert!((65.0..=85.0).contains(&a), "{what}: site_a holds {a}% of inuse_space (75 ± 10)\n{inuse}");
    assert!((15.0..=35.0).contains(&b), "{what}: site_b holds {b}% of inuse_space (25 ± 10)\n{inuse}");
    assert!(flat(&inuse, "site_c").is_none_or(|(c, _)| c < 1.0), "{what}: site_c holds memory\n{inuse}");
    for wrong in ["malloc", "_Znam", "_Znwm", "operator new[]", "operator new"] {
        assert!(
            flat(&inuse, wrong).is_none_or(|(v, _)| v == 0.0),
            "{what}: {wrong} shows flat memory: the walk did not reach the site\n{inuse}"
        );
    }
    let alloc = top(&p[0], "alloc_space");
    assert_eq!(leader(&alloc), "site_c", "{what}: alloc_space not led by site_c\n{alloc}");
    let c = comments(&p[0]);
    assert!(c.contains(WITH_HEAP), "{what}: comments lack {WITH_HEAP:?}\n{c}");
}

#[test]
fn sites_by_backend() {
    for backend in common::BACKENDS {
        for cxx in [false, true] {
            for sample in ["64", "1"] {
                check_sites(backend, cxx, sample);
            }
        }
    }
}

/// `mallocshim heap ARGS...`: its stdout (fails on a non-zero exit).
fn heap_cmd(args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(common::cli_bin()).arg("heap").args(args).output().expect("run mallocshim heap");
    assert!(o.status.success(), "mallocshim heap {args:?}: {}", common::describe(&o));
    common::stdout(&o)
}

/// The call site on the first row of the table headed `by INDEX` (or `growth by`).
fn heap_leader(out: &str, head: &str) -> String {
    let mut lines = out.lines().skip_while(|l| !l.starts_with(head));
    lines.next();
    lines.next();
    lines
        .next()
        .and_then(|l| l.split("  ").map(str::trim).filter(|x| !x.is_empty()).last())
        .unwrap_or("")
        .to_string()
}

#[test]
fn heap_command_names_sites_and_growth() {
    for cxx in [false, true] {
        let what = format!("mallocshim heap on heap_sites {}", if cxx { "C++" } else { "C" });
        let dir = dump_dir(&format!("cli-{cxx}"));
        let mut cmd = common::preloaded(sites_bin(cxx), "glibc");
        cmd.arg("grow")
            .env("MALLOCSHIM_DUMP_DIR", &dir)
            .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
            .env("MALLOCSHIM_PROF_SAMPLE_BYTES", "65536");
        let o = run_limited(cmd, 120, &what);
        assert_eq!(common::stdout(&o).matches("api_rc=0").count(), 2, "{what}: {}", common::describe(&o));
        let mut p = common::profiles(&dir);
        p.sort_by_key(|f| f.to_string_lossy().rsplit('.').nth(2).and_then(|s| s.parse::<u32>().ok()));
        assert_eq!(p.len(), 2, "{what}: two profiles expected, found {p:?}");
        let late = heap_cmd(&[p[1].as_os_str()]);
        assert_eq!(heap_leader(&late, "by inuse_space"), "site_a", "{what}\n{late}");
        assert_eq!(heap_leader(&late, "by alloc_space"), "site_c", "{what}\n{late}");
        let objects = heap_cmd(&[p[1].as_os_str(), "--sample-index".as_ref(), "alloc_objects".as_ref()]);
        assert!(
            objects.contains("by alloc_objects") && !objects.contains("by inuse_space"),
            "{what}\n{objects}"
        );
        let grow = heap_cmd(&[p[1].as_os_str(), p[0].as_os_str(), "--top".as_ref(), "3".as_ref()]);
        assert_eq!(heap_leader(&grow, "growth by inuse_space"), "site_b", "{what}\n{grow}");
        let first = grow.lines().skip_while(|l| !l.starts_with("growth by")).nth(2).unwrap_or("");
        let mib: f64 = first.split_whitespace().next().and_then(|x| x.parse().ok()).unwrap_or(0.0);
        assert!(first.contains("MiB") && (12.0..=20.0).contains(&mib), "{what}: site_b grew {first}\n{grow}");
        assert!(!grow.contains("site_a") && !grow.contains("site_c"), "{what}: only site_b changed\n{grow}");
    }
}

#[test]
fn toggled_at_run_time() {
    for backend in common::BACKENDS {
        let what = format!("heap_sites toggle under {backend}");
        let dir = dump_dir(&format!("toggle-{backend}"));
        let mut cmd = common::preloaded(sites_bin(true), backend);
        cmd.arg("toggle")
            .env("MALLOCSHIM_DUMP_DIR", &dir)
            .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
            .env("MALLOCSHIM_PROF_SAMPLE_BYTES", "0");
        let o = run_limited(cmd, 120, &what);
        let out = common::stdout(&o);
        assert!(out.contains("set_rc=0") && out.contains("api_rc=0"), "{what}: {}", common::describe(&o));
        let p = common::profiles(&dir);
        assert_eq!(p.len(), 2, "{what}: {p:?}");
        // Off at start: the entry table without the heap-profile tests; turned on: the other.
        let c = comments(&p[0]);
        assert!(c.contains(WITHOUT_HEAP), "{what}: first dump's comments lack {WITHOUT_HEAP:?}\n{c}");
        let c = comments(&p[1]);
        assert!(c.contains(WITH_HEAP), "{what}: second dump's comments lack {WITH_HEAP:?}\n{c}");
        let inuse = top(&p[1], "inuse_space");
        assert!(flat(&inuse, "site_a").is_none(), "{what}: site_a sampled while off\n{inuse}");
        let (b, _) = flat(&inuse, "site_b").unwrap_or_else(|| panic!("{what}: no site_b\n{inuse}"));
        assert!(b > 90.0, "{what}: site_b {b}%\n{inuse}");
    }
}

#[test]
fn toggled_on_off_on() {
    for backend in common::BACKENDS {
        for start in ["0", "65536"] {
            let what =
                format!("heap_sites cycle under {backend}, MALLOCSHIM_PROF_SAMPLE_BYTES={start} at start");
            let dir = dump_dir(&format!("cycle-{backend}-{start}"));
            let mut cmd = common::preloaded(sites_bin(true), backend);
            cmd.arg("cycle")
                .env("MALLOCSHIM_DUMP_DIR", &dir)
                .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
                .env("MALLOCSHIM_PROF_SAMPLE_BYTES", start);
            let o = run_limited(cmd, 120, &what);
            let out = common::stdout(&o);
            assert!(
                out.matches("set_rc=0").count() == 3 && out.matches("api_rc=0").count() == 2,
                "{what}: {}",
                common::describe(&o)
            );
            let p = common::profiles(&dir);
            assert_eq!(p.len(), 2, "{what}: {p:?}");
            for (i, f) in p.iter().enumerate() {
                let c = comments(f);
                assert!(c.contains(WITH_HEAP), "{what}: dump {i}'s comments lack {WITH_HEAP:?}\n{c}");
            }
            // Dump 0: site_b's blocks, sampled while on, were freed while off; site_a ran while off.
            let inuse = top(&p[0], "inuse_space");
            assert!(
                flat(&inuse, "site_b").is_none(),
                "{what}: blocks freed while sampling was off stayed in the profile\n{inuse}"
            );
            assert!(flat(&inuse, "site_a").is_none(), "{what}: site_a sampled while off\n{inuse}");
            // Dump 1: on again, site_b sampled anew.
            let inuse = top(&p[1], "inuse_space");
            assert!(flat(&inuse, "site_a").is_none(), "{what}: site_a sampled while off\n{inuse}");
            let (b, _) = flat(&inuse, "site_b").unwrap_or_else(|| panic!("{what}: no site_b\n{inuse}"));
            assert!(b > 90.0, "{what}: site_b {b}%\n{inuse}");
        }
    }
}

#[test]
fn profiling_off_gives_an_empty_profile() {
    for backend in common::BACKENDS {
        let what = format!("heap_sites toggle under {backend}, MALLOCSHIM_PROFILE=off");
        let dir = dump_dir(&format!("off-{backend}"));
        let mut cmd = common::preloaded(sites_bin(true), backend);
        cmd.arg("toggle")
            .env("MALLOCSHIM_DUMP_DIR", &dir)
            .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
            .env("MALLOCSHIM_PROFILE", "off");
        let o = run_limited(cmd, 120, &what);
        let out = common::stdout(&o);
        assert!(
            out.contains(&format!("set_rc={}", libc_enotsup())) && out.contains("api_rc=0"),
            "{what}: {}",
            common::describe(&o)
        );
        let p = common::profiles(&dir);
        assert_eq!(p.len(), 2, "{what}: {p:?}");
        let inuse = top(&p[1], "inuse_space");
        assert!(inuse.contains("0 of 0 total") || inuse.contains("of 0 total"), "{what}: samples\n{inuse}");
    }
}

fn libc_enotsup() -> i32 {
    95
}

#[test]
fn operator_new_keeps_cxx_semantics() {
    for backend in common::BACKENDS {
        for sample in ["64", "1"] {
            let what = format!("heap_sites cxx under {backend}, MALLOCSHIM_SAMPLE={sample}");
            let mut cmd = common::preloaded(sites_bin(true), backend);
            cmd.arg("cxx").env("MALLOCSHIM_SAMPLE", sample).env("MALLOCSHIM_PROF_SAMPLE_BYTES", "1");
            let o = run_limited(cmd, 60, &what);
            let out = common::stdout(&o);
            for ok in [
                "ok bad_alloc",
                "ok nothrow_null",
                "ok new_handler",
                "ok aligned",
                "ok aligned_nothrow_array",
                "ok zero",
            ] {
                assert!(out.contains(ok), "{what}: no `{ok}`: {}", common::describe(&o));
            }
        }
    }
}

#[test]
fn hostile_every_allocation_sampled() {
    let lib = common::cc("ctor_lib.c", "libheap_ctor_lib.so", &["-shared", "-fPIC"]);
    let bin = common::cc("heap_hostile.c", "heap_hostile", &["-fno-omit-frame-pointer"]);
    for backend in common::BACKENDS {
        for (profile, sample) in [("on", "64"), ("on", "1"), ("off", "64")] {
            let what = format!(
                "heap_hostile under {backend}, MALLOCSHIM_PROFILE={profile} MALLOCSHIM_SAMPLE={sample}"
            );
            let dir = dump_dir(&format!("hostile-{backend}-{profile}-{sample}"));
            let mut cmd = common::preloaded(&bin, backend);
            cmd.arg(&lib)
                .env("MALLOCSHIM_DUMP_DIR", &dir)
                .env("MALLOCSHIM_DUMP_FORMATS", "pprof")
                .env("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")
                .env("MALLOCSHIM_PROFILE", profile)
                .env("MALLOCSHIM_SAMPLE", sample)
                // No rate limit: a signal's request deferred to the end of the interval would be
                // answered by an exit dump written after the program's own last one.
                .env("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "0");
            let o = run_limited(cmd, 300, &what);
            let out = common::stdout(&o);
            assert!(
                out.contains("keep=4000") && out.contains("forks=10") && out.contains("api_rc=0"),
                "{what}: {}",
                common::describe(&o)
            );
            let p = common::profiles(&dir);
            assert!(p.len() >= 2, "{what}: the signal's dumps and the final one expected, found {p:?}");
            for f in &p {
                let _ = top(f, "inuse_space");
            }
            if profile == "off" {
                continue;
            }
            // The final dump is the one written by mallocshim_dump() after every thread joined.
            let last = p.iter().max_by_key(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).unwrap();
            let inuse = top(last, "inuse_objects");
            let (_, keep) =
                flat(&inuse, "keep_site").unwrap_or_else(|| panic!("{what}: no keep_site\n{inuse}"));
            assert_eq!(keep, "4000", "{what}: live blocks at keep_site\n{inuse}");
            let alloc = top(last, "alloc_objects");
            let (_, churn) =
                flat(&alloc, "churn_site").unwrap_or_else(|| panic!("{what}: no churn_site\n{alloc}"));
            assert_eq!(churn, "200000", "{what}: allocations at churn_site\n{alloc}");
            assert!(
                alloc.contains("dropped 0 (live set full") && alloc.contains("and 0 (records full"),
                "{what}: drops\n{alloc}"
            );
        }
    }
}
