//! Heap profiles per allocating thread, black-box: `tests/c/heap_threads.c` under the shim,
//! thread A (`heap_alloc_a`) allocates N MiB in 64 KiB blocks, thread B (`heap_free_b`) frees
//! every other block and allocates nothing; one dump (pprof) while both are alive. Per backend
//! (glibc, jemalloc, tcmalloc, mimalloc):
//! - exact sampling (`MALLOCSHIM_PROF_SAMPLE_BYTES=1`, N = 64): `mallocshim heap --by thread`
//!   gives A inuse 32 MiB and alloc 64 MiB (within 4 KiB), under A's thread name, and B inuse 0
//!   and alloc under 4 KiB (the freed half left A's figure and never counted in B's);
//!   `go tool pprof -tags` lists the `tid` label with A's tid and the `thread` label with both
//!   names, and `-tagfocus=tid=A -sample_index=inuse_space` shows 32 MiB;
//! - the default mean (512 KiB, N = 256): A inuse within 4 standard errors of 128 MiB (± 8 MiB),
//!   the ± printed beside it is sqrt(inuse x 524288) (within 1%), B inuse 0.
//!
//! The dump's JSON written with the profile carries the same charge per live thread
//! (`threads[].live_bytes`, what `top --by connection` reads through the control channel): A's
//! within 4 KiB of 32 MiB with exact sampling and within 4 standard errors of 128 MiB at the
//! default mean, B's 0 in both, the dump's `prof_sample_bytes` the mean in force.
//!
//! On the command before `--by` (main at a74b66e), `mallocshim heap --by thread` is an unknown
//! argument: every case fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One row of `heap --by`: inuse, ± of inuse, alloc, ± of alloc (bytes), tid, who.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    inuse: f64,
    inuse_err: f64,
    alloc: f64,
    tid: u32,
    who: String,
}

fn unit(v: &str, u: &str) -> f64 {
    let x: f64 = v.parse().unwrap_or_else(|_| panic!("not a number: {v}"));
    x * match u {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        _ => panic!("unit {u}"),
    }
}

/// The rows of `mallocshim heap --by` output.
fn rows(out: &str) -> Vec<Row> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("inuse bytes"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            assert!(t.len() >= 9, "short row {l:?} in\n{out}");
            Row {
                inuse: unit(t[0], t[1]),
                inuse_err: unit(t[2], t[3]),
                alloc: unit(t[4], t[5]),
                tid: t[8].parse().unwrap_or_else(|_| panic!("tid in {l:?}")),
                who: t[9..].join(" "),
            }
        })
        .collect()
}

/// `mallocshim heap ARGS PROFILE`: stdout (fails on a non-zero exit).
fn heap(args: &[&str], profile: &Path) -> String {
    let o = Command::new(common::cli_bin()).arg("heap").args(args).arg(profile).output().expect("run heap");
    assert!(o.status.success(), "mallocshim heap {args:?}: {}", common::describe(&o));
    common::stdout(&o)
}

/// Runs heap_threads under `backend` with `mib` and `env`; (profile, its JSON dump, tid A, tid B).
fn run(
    backend: &str,
    mib: &str,
    env: &[(&str, &str)],
    name: &str,
) -> (PathBuf, mallocshim_format::Dump, u32, u32) {
    let bin = common::cc("heap_threads.c", "heap_threads", &[]);
    let dir = common::work_dir().join(format!("heap-by-thread-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = common::preloaded(&bin, backend);
    cmd.arg(mib).env("MALLOCSHIM_DUMP_DIR", &dir).env("MALLOCSHIM_DUMP_FORMATS", "pprof,json");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = common::run_ok(cmd, name);
    let out = common::stdout(&o);
    let line = out.lines().find(|l| l.starts_with("tid_a=")).unwrap_or_else(|| panic!("{name}: {out}"));
    assert_eq!(common::kv(line, "rc"), Some(0), "{name}: the dump failed: {}", common::describe(&o));
    let (a, b) = (common::kv(line, "tid_a").unwrap() as u32, common::kv(line, "tid_b").unwrap() as u32);
    let p = common::profiles(&dir);
    assert_eq!(p.len(), 1, "{name}: one profile expected, found {p:?}");
    let j: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| f.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(j.len(), 1, "{name}: one JSON dump expected, found {j:?}");
    let d = mallocshim_format::Dump::read(&j[0]).unwrap_or_else(|e| panic!("{name}: {e}"));
    (p[0].clone(), d, a, b)
}

/// The dump's `live_bytes` of live thread `tid` (0 when it has no row: it never allocated).
fn live_bytes(d: &mallocshim_format::Dump, tid: u32, name: &str) -> f64 {
    match d.threads.iter().find(|t| t.tid == tid && t.state == "live") {
        Some(t) => t.live_bytes.unwrap_or_else(|| panic!("{name}: thread {tid} has no live_bytes")) as f64,
        None => 0.0,
    }
}

fn row(rows: &[Row], tid: u32) -> Option<&Row> {
    rows.iter().find(|r| r.tid == tid)
}

#[test]
fn a_block_freed_by_another_thread_leaves_its_allocators_figure_exact_sampling() {
    common::require("go");
    for backend in common::BACKENDS {
        let name = format!("exact-{backend}");
        let (p, d, a, b) = run(backend, "64", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")], &name);
        assert_eq!(d.prof_sample_bytes, 1, "{name}");
        let (ja, jb) = (live_bytes(&d, a, &name), live_bytes(&d, b, &name));
        assert!((ja - 32.0 * 1048576.0).abs() <= 4096.0, "{name}: the JSON's A live_bytes {ja}");
        assert_eq!(jb, 0.0, "{name}: the JSON charges B");
        let out = heap(&["--by", "thread", "--top", "1000"], &p);
        let r = rows(&out);
        let ra = row(&r, a).unwrap_or_else(|| panic!("{name}: no row for A ({a})\n{out}"));
        assert!((ra.inuse - 32.0 * 1048576.0).abs() <= 4096.0, "{name}: A inuse {}\n{out}", ra.inuse);
        assert!((ra.alloc - 64.0 * 1048576.0).abs() <= 4096.0, "{name}: A alloc {}\n{out}", ra.alloc);
        assert_eq!(ra.who, "heap_alloc_a", "{name}\n{out}");
        let (bi, ba) = row(&r, b).map(|x| (x.inuse, x.alloc)).unwrap_or((0.0, 0.0));
        assert!(bi == 0.0 && ba <= 4096.0, "{name}: B inuse {bi}, alloc {ba}\n{out}");
        assert_eq!(r.first().map(|x| x.tid), Some(a), "{name}: A is not first\n{out}");

        let tags = common::pprof(&p, &["-tags"]);
        assert!(tags.contains("tid:") && tags.contains(&a.to_string()), "{name}: -tags\n{tags}");
        assert!(tags.contains("heap_alloc_a"), "{name}: -tags has no thread name\n{tags}");
        let focus = common::pprof(&p, &[&format!("-tagfocus=tid={a}"), "-sample_index=inuse_space", "-top"]);
        assert!(focus.contains("accounting for 32MB"), "{name}: -tagfocus=tid={a}\n{focus}");
        eprintln!("{name}:\n{out}");
    }
}

#[test]
fn a_block_freed_by_another_thread_leaves_its_allocators_figure_default_rate() {
    for backend in common::BACKENDS {
        let name = format!("default-{backend}");
        let (p, d, a, b) = run(backend, "256", &[], &name);
        assert_eq!(d.prof_sample_bytes, 524_288, "{name}");
        let (ja, jb) = (live_bytes(&d, a, &name), live_bytes(&d, b, &name));
        assert!((ja - 128.0 * 1048576.0).abs() <= 32.0 * 1048576.0, "{name}: the JSON's A live_bytes {ja}");
        assert_eq!(jb, 0.0, "{name}: the JSON charges B");
        let out = heap(&["--by", "thread", "--top", "1000"], &p);
        let r = rows(&out);
        let ra = row(&r, a).unwrap_or_else(|| panic!("{name}: no row for A ({a})\n{out}"));
        let (want, se) = (128.0 * 1048576.0, 8.0 * 1048576.0);
        assert!(
            (ra.inuse - want).abs() <= 4.0 * se,
            "{name}: A inuse {} not 128 MiB ± 4 x 8 MiB\n{out}",
            ra.inuse
        );
        let printed = (ra.inuse * 524288.0).sqrt();
        assert!(
            (ra.inuse_err - printed).abs() <= 0.01 * printed,
            "{name}: ± {} not sqrt(S x R) {printed}\n{out}",
            ra.inuse_err
        );
        let bi = row(&r, b).map(|x| x.inuse).unwrap_or(0.0);
        assert_eq!(bi, 0.0, "{name}: B holds {bi}\n{out}");
        eprintln!("{name}:\n{out}");
    }
}
