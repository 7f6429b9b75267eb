//! fork+wait latency under the shim against the same program without it (issue 21, part 2).
//! Run with `cargo bench --bench fork` (a `harness = false` bench: a plain `main`).
//!
//! `tests/c/fork_wait.c N THREADS`: N forks of a child that `_exit(0)`s at once, each reaped
//! before the next; THREADS 0 (single-threaded) and 1 (a sleeping thread: the parent has the
//! shim's worker, which the old shim restarted in every child). Per backend, per round (rounds
//! interleaved, `MALLOCSHIM_BENCH_ROUNDS`, default 7; `MALLOCSHIM_BENCH_FORKS`, default 300):
//! glibc alone (no preload), the backend preloaded directly (glibc alone again for glibc), the
//! shim over the backend (default settings), and glibc alone with an empty object preloaded
//! (`tests/c/empty_preload.c`: what any preload costs a fork). Reported: the median over rounds
//! of wall ns and CPU ns (process and children) per fork+wait, and the median over rounds of each round's
//! ratio shim / glibc alone and shim / direct, and the median minor page faults (process and
//! children) per fork+wait of each. Backends: `MALLOCSHIM_BENCH_BACKENDS` (default
//! all four). Output: Markdown on stdout and in `target/bench/fork.md`.

#[path = "../tests/common/mod.rs"]
mod common;
use common::{env_u64, words};
use mallocshim_format::stats::median_or_nan as median;
use std::fmt::Write as _;
use std::process::Command;

/// (wall ns, CPU ns, page faults) per fork+wait of glibc alone, the backend preloaded directly,
/// the shim, and glibc alone with an empty object preloaded.
type Round = [(f64, f64, f64); 4];

/// (wall ns, CPU ns, minor page faults of the process and its children) per fork+wait of one run.
fn run(mut c: Command, n: u64, threads: u32) -> (f64, f64, f64) {
    c.arg(n.to_string()).arg(threads.to_string());
    let o = common::run_ok(c, "fork_wait");
    let out = common::stdout(&o);
    let v = |k: &str| common::kv(&out, k).unwrap_or_else(|| panic!("no {k}= in {out}")) as f64;
    let faults = out.split_whitespace().find_map(|w| w.strip_prefix("faults_per_fork="));
    let faults = faults.and_then(|f| f.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (v("ns_per_fork"), v("cpu_ns_per_fork"), faults)
}

fn main() {
    let prog = common::cc("fork_wait.c", "fork_wait", &[]);
    // What any preload costs a fork: an empty object (tests/c/empty_preload.c).
    let empty = common::cc("empty_preload.c", "libempty_preload.so", &["-shared", "-fPIC"]);
    common::shim();
    let rounds = env_u64("MALLOCSHIM_BENCH_ROUNDS", 7);
    let n = env_u64("MALLOCSHIM_BENCH_FORKS", 300);
    let backends = words("MALLOCSHIM_BENCH_BACKENDS", "glibc jemalloc tcmalloc mimalloc");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut md = String::new();
    let _ = writeln!(md, "# fork+wait under the shim\n");
    let _ = writeln!(md, "{n} forks per run, {rounds} rounds, load average at start: {}\n", load.trim());
    let _ = writeln!(
        md,
        "| backend | threads | glibc alone wall µs | direct wall µs | shim wall µs | shim/alone wall | shim/direct wall | alone CPU µs | direct CPU µs | shim CPU µs | shim/alone CPU | shim/direct CPU | empty preload/alone CPU | alone faults | direct faults | shim faults |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for b in &backends {
        for threads in [0u32, 1] {
            let mut rows: Vec<Round> = Vec::new();
            for _ in 0..rounds {
                let alone = run(common::plain(&prog), n, threads);
                let direct = match common::direct_lib(b) {
                    Some(lib) => {
                        let mut c = common::plain(&prog);
                        c.env("LD_PRELOAD", common::require_file(lib));
                        run(c, n, threads)
                    }
                    None => alone,
                };
                let shim = run(common::preloaded(&prog, b), n, threads);
                let mut c = common::plain(&prog);
                c.env("LD_PRELOAD", &empty);
                let empty = run(c, n, threads);
                rows.push([alone, direct, shim, empty]);
            }
            let med = |f: &dyn Fn(&Round) -> f64| median(rows.iter().map(f).collect::<Vec<f64>>());
            let us = |x: f64| x / 1000.0;
            let _ = writeln!(
                md,
                "| {b} | {threads} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} |",
                us(med(&|r| r[0].0)),
                us(med(&|r| r[1].0)),
                us(med(&|r| r[2].0)),
                med(&|r| r[2].0 / r[0].0),
                med(&|r| r[2].0 / r[1].0),
                us(med(&|r| r[0].1)),
                us(med(&|r| r[1].1)),
                us(med(&|r| r[2].1)),
                med(&|r| r[2].1 / r[0].1),
                med(&|r| r[2].1 / r[1].1),
                med(&|r| r[3].1 / r[0].1),
                med(&|r| r[0].2),
                med(&|r| r[1].2),
                med(&|r| r[2].2),
            );
        }
    }
    print!("{md}");
    let dir = common::target_dir().join("bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("fork.md"), &md);
}
