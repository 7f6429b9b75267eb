//! The fork canaries of issue 6 (`tests/c/fork_stdio.c`: fork while threads use stdio;
//! `tests/c/fork_signal.c`: fork from a signal handler that interrupted malloc). Asserts what the
//! issue requires: both pass under plain glibc and under the shim with the glibc backend in every
//! setting of `common::SETTINGS` (profiling on, off, `MALLOCSHIM_SAMPLE=1`). Runs them too under
//! every other backend preloaded directly and under the shim over every cell of
//! `common::matrix()`, and only
//! reports those outcomes (printed, and written to target/fork-canaries.md). A hang under an
//! asserted configuration comes with gdb backtraces of every thread of the stuck process.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

const CANARIES: [&str; 2] = ["fork_stdio", "fork_signal"];

fn canary(name: &str) -> PathBuf {
    static P: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (a, b) = P
        .get_or_init(|| {
            (
                common::cc("fork_stdio.c", "fork_stdio", &[]),
                common::cc("fork_signal.c", "fork_signal", &["-Wl,-z,now"]),
            )
        })
        .clone();
    if name == "fork_stdio" {
        a
    } else {
        b
    }
}

/// A fresh dump directory per run (the shim's forked-child probe writes there); removed after.
fn dump_dir(name: &str, config: &str) -> PathBuf {
    let tag: String = config.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let d = common::work_dir().join(format!("fork-dumps-{}-{name}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).expect("create dump dir");
    d
}

/// How to run a canary in one configuration.
fn command(name: &str, config: &str) -> Command {
    let prog = canary(name);
    let mut c = match config {
        "glibc" => common::plain(&prog),
        direct if direct.starts_with("LD_PRELOAD ") => {
            let b = &direct["LD_PRELOAD ".len()..];
            let lib = common::direct_lib(b).unwrap_or_else(|| panic!("no library to preload for {b}"));
            let mut c = common::plain(&prog);
            c.env("LD_PRELOAD", common::require_file(lib));
            c
        }
        "shim->glibc DUMP_SIGNAL=none" => {
            let mut c = common::preloaded(&prog, "glibc");
            c.env("MALLOCSHIM_PROFILE", "1").env("MALLOCSHIM_DUMP_SIGNAL", "none");
            c
        }
        // `shim-><backend> <setting>`: one cell of `common::matrix()`.
        shim if shim.starts_with("shim->") => {
            let (b, _, env) = common::matrix()
                .find(|(b, s, _)| shim == format!("shim->{b} {s}"))
                .unwrap_or_else(|| panic!("unknown configuration {shim}"));
            let mut c = common::preloaded(&prog, b);
            c.envs(env.iter().copied());
            c
        }
        other => panic!("unknown configuration {other}"),
    };
    c.env("MALLOCSHIM_DUMP_DIR", dump_dir(name, config));
    c
}

/// Runs one canary; returns (result, the verdict line, the whole output).
fn run(name: &str, config: &str, gdb: bool) -> (String, String, Output) {
    let mut c = command(name, config);
    if gdb {
        common::require("gdb");
        c.env("FORK_CANARY_GDB", "1");
    }
    let o = c.output().unwrap_or_else(|e| panic!("{name} under {config}: cannot start: {e}"));
    let _ = std::fs::remove_dir_all(dump_dir(name, config));
    let out = common::stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("canary={name} ")))
        .unwrap_or_else(|| panic!("{name} under {config}: no verdict line\n{}", common::describe(&o)))
        .to_string();
    let result = common::kv_str(&line, "result").unwrap_or("?").to_string();
    // The exit status agrees with the verdict.
    assert_eq!(
        o.status.success(),
        result == "pass",
        "{name} under {config}: exit status vs verdict\n{}",
        common::describe(&o)
    );
    (result, line, o)
}

fn assert_passes(name: &str, config: &str) {
    let (result, line, o) = run(name, config, true);
    let detail = line.split_once(" detail=").map(|x| x.1).unwrap_or("");
    eprintln!("{name} under {config}: {line}");
    for l in common::stdout(&o).lines().filter(|l| l.starts_with("probe ")) {
        eprintln!("{name} under {config}: {l}");
    }
    assert_eq!(result, "pass", "{name} under {config}: {detail}\n{}", common::describe(&o));
    // Enough work happened for the pass to mean something.
    let forks = common::kv(detail, "ok").unwrap_or(0);
    assert!(forks >= 50, "{name} under {config}: only {forks} children\n{line}");
    if name == "fork_signal" {
        let in_alloc = common::kv(detail, "in_alloc").unwrap_or(0);
        assert!(
            in_alloc * 2 >= forks,
            "{name} under {config}: only {in_alloc} of {forks} forks interrupted the allocator\n{line}"
        );
    }
}

#[test]
fn fork_stdio_plain_glibc() {
    assert_passes("fork_stdio", "glibc");
}

#[test]
fn fork_signal_plain_glibc() {
    assert_passes("fork_signal", "glibc");
}

#[test]
fn fork_stdio_shim_glibc_profiled() {
    for (setting, _) in common::SETTINGS {
        assert_passes("fork_stdio", &format!("shim->glibc {setting}"));
    }
}

#[test]
fn fork_signal_shim_glibc_profiled() {
    for (setting, _) in common::SETTINGS {
        assert_passes("fork_signal", &format!("shim->glibc {setting}"));
    }
}

/// Report only: every canary under every configuration, in parallel (a hang costs the canary's
/// 15 s stall watchdog, not CPU). Asserts only that each run produced a verdict.
#[test]
fn fork_canaries_report() {
    // glibc, each other backend's library preloaded directly, then the shim over each backend.
    let mut configs: Vec<&'static str> = vec!["glibc"];
    for b in common::BACKENDS.into_iter().filter(|b| common::direct_lib(b).is_some()) {
        configs.push(String::leak(format!("LD_PRELOAD {b}")));
    }
    configs.push("shim->glibc DUMP_SIGNAL=none");
    for (b, setting, _) in common::matrix() {
        configs.push(String::leak(format!("shim->{b} {setting}")));
    }
    let mut handles = Vec::new();
    for name in CANARIES {
        canary(name);
        for &config in &configs {
            handles.push(std::thread::spawn(move || {
                let (result, line, o) = run(name, config, false);
                let probe =
                    common::stdout(&o).lines().find(|l| l.starts_with("probe ")).unwrap_or("").to_string();
                (name, config, result, line, probe)
            }));
        }
    }
    let rows: Vec<_> = handles.into_iter().map(|h| h.join().expect("canary thread")).collect();
    let mut md = String::from("| configuration | fork_stdio | fork_signal |\n|---|---|---|\n");
    for &config in &configs {
        let cell = |n: &str| {
            let r = rows.iter().find(|r| r.0 == n && r.1 == config).unwrap();
            if r.2 == "pass" {
                "pass".to_string()
            } else {
                format!("**{}**", r.2)
            }
        };
        md.push_str(&format!("| {config} | {} | {} |\n", cell("fork_stdio"), cell("fork_signal")));
    }
    md.push_str("\nVerdict lines:\n\n");
    for r in &rows {
        md.push_str(&format!("- {}: `{}`\n", r.1, r.3));
        if !r.4.is_empty() {
            md.push_str(&format!("  - forked child of the shim: `{}`\n", r.4));
        }
    }
    let path = common::target_dir().join("fork-canaries.md");
    std::fs::write(&path, &md).expect("write target/fork-canaries.md");
    println!("{md}\n(written to {})", path.display());
}

/// What a fork copies of the shim (issue 21 part 2, `tests/c/fork_footprint.c`): under every
/// backend and setting (and with heap profiles sampling every byte), the shim's thread's stack and
/// the memory-history ring are wipe-on-fork, as one mapping (they sit side by side in the shim's
/// one reservation, `base::region`: before it, 2 mappings); under the glibc backend no thread
/// gets a glibc arena: not the idle thread (before, the `pthread_create` trampoline's free gave
/// it one), nor the worker, which allocates from its own heap (`base::worker_heap`; before, its
/// arena was the one non-main arena), and the shim adds at most 8 mappings to the program's
/// (each one a descriptor every fork copies: the library's 5 and the reservation's 3 — guard
/// page, wipe-on-fork range, the rest; 14 before the reservation, 10 before the worker's heap; 9
/// when sampling every byte); the shim's `.bss` pages lie in at
/// most two 2 MiB ranges, not three (backends but jemalloc); the shim's walks leave at most
/// [`MOST_ZERO_PAGES`] zero-page mappings (memory read, never written: each an entry every fork
/// copies; 103-122 when the walks read every slot of a chunk and every exited-thread aggregate,
/// 12-27 since); and a forked child that starts threads (its worker reuses the wiped stack) and
/// allocates exits 0.
/// Zero-page mappings the shim may add in `fork_footprint` (its line's `zero=`; 0 alone): the
/// heap profile's free filter (16 pages, read at hashed bits by every free), the unused pages of
/// the exited-thread aggregate and the latency table, which the walks read whole.
const MOST_ZERO_PAGES: u64 = 48;

#[test]
fn fork_copies_no_shim_stack_ring_or_idle_arena() {
    let prog = common::cc("fork_footprint.c", "fork_footprint", &["-pthread"]);
    let extra: &[(&str, &str)] = &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")];
    let cells =
        common::matrix().chain(common::BACKENDS.into_iter().map(|b| (b, "PROF_SAMPLE_BYTES=1", extra)));
    let mut c = common::plain(&prog);
    c.arg("300");
    let alone = common::stdout(&common::run_ok(c, "fork_footprint alone"));
    let maps_alone = common::kv(&alone, "maps").unwrap_or_else(|| panic!("no maps= in {alone}"));
    let zero_alone = common::kv(&alone, "zero").unwrap_or_else(|| panic!("no zero= in {alone}"));
    for (backend, setting, env) in cells {
        let mut c = common::preloaded(&prog, backend);
        c.envs(env.iter().copied()).env("MALLOCSHIM_HISTORY_MS", "50").arg("300");
        let out = common::stdout(&common::run_ok(c, "fork_footprint"));
        let v = |k: &str| common::kv(&out, k).unwrap_or_else(|| panic!("no {k}= in {out}"));
        let what = format!("{backend}, {setting}: {}", out.trim());
        assert_eq!(v("child"), 0, "{what}: the forked child failed");
        assert_eq!(
            v("wipe"),
            1,
            "{what}: the worker's stack and the history ring are not one wipe-on-fork mapping"
        );
        let history =
            (mallocshim_format::history::CAPACITY * mallocshim_format::history::COLUMNS.len() * 8) as u64;
        let (stack, ring) = (2048, history / 1024);
        assert!(
            v("wipe_kb") >= stack + ring,
            "{what}: the wipe-on-fork mapping is not the stack and the ring"
        );
        // The statics every process writes lie in one or two 2 MiB ranges (two when the library
        // is not loaded on a 2 MiB boundary), each a page-table page every fork copies: the
        // bootstrap pool and jemalloc's radix-tree root sit after them (`.lbss`). Under jemalloc
        // its root's pages are touched too, as when jemalloc is preloaded directly. Three before.
        if backend != "jemalloc" {
            assert!(v("bss_ranges") <= 2, "{what}: the shim's .bss spreads over more than two 2 MiB ranges");
        }
        assert!(
            v("zero") <= zero_alone + MOST_ZERO_PAGES,
            "{what}: more than {MOST_ZERO_PAGES} zero-page mappings over the program's {zero_alone} \
             (memory read, never written: a walk over the slots no thread claimed?)"
        );
        if backend == "glibc" {
            assert_eq!(
                v("arenas"),
                0,
                "{what}: a glibc arena (the worker's, which allocates from its own heap, or the idle thread's?)"
            );
            // Sampling every byte, the profiler's own blocks (its unwind memo: two of 192 KiB,
            // glibc mmaps them) may be one more mapping: seen in 5 of 25 runs.
            let most = if setting == "PROF_SAMPLE_BYTES=1" { 9 } else { 8 };
            assert!(
                v("maps") <= maps_alone + most,
                "{what}: the shim adds more than {most} mappings to the program's {maps_alone}"
            );
        }
    }
}

/// The statics the shim's child fork handlers write sit on one page (`.data.mallocshim_fork`),
/// so a forked child copies one page of the shim's, not one per module (issue 21 part 2). Read
/// from the built library's symbol table: a linker that split the section would fail here.
#[test]
fn child_handlers_write_one_page() {
    let so = common::shim();
    let out = Command::new(common::require("nm")).arg(&so).output().expect("run nm");
    assert!(out.status.success(), "nm {}", so.display());
    let text = String::from_utf8_lossy(&out.stdout);
    // (module path, static) as mangled by rustc: `..<len>module<len>NAME17h<hash>E`.
    let wanted = ["4fold3GEN", "6worker7WAKE_RD", "7history4HEAD", "4dump3SEQ", "6atfork11CHILD_STATE"];
    let pages: Vec<(&str, u64)> = wanted
        .iter()
        .map(|w| {
            let line = text
                .lines()
                .find(|l| l.contains(w) && l.contains("mallocshim"))
                .unwrap_or_else(|| panic!("no symbol like {w} in {}", so.display()));
            let addr =
                u64::from_str_radix(line.split_whitespace().next().unwrap_or(""), 16).expect("address");
            (*w, addr / 4096)
        })
        .collect();
    assert!(pages.iter().all(|p| p.1 == pages[0].1), "the fork-written statics span pages: {pages:?}");
}
