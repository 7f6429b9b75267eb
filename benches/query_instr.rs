//! Instructions per query of mariadbd under sysbench, shim against direct preload (issue 3's
//! mariadbd goal, measured deterministically). Run with `cargo bench --bench query_instr`
//! (a `harness = false` bench: a plain `main`).
//!
//! It runs `mallocshim_mariadb::query_instr` (crates/mallocshim-mariadb), which starts mariadbd under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='do_command(THD*, bool)'`, so
//! that only the instructions executed inside the server's command processing are counted
//! (parsing, execution, the result, and every malloc/free made meanwhile through the shim or the
//! preloaded allocator), for each backend and mode:
//! - `direct`: glibc with no preload; `LD_PRELOAD=libjemalloc.so.2`; `LD_PRELOAD=libtcmalloc_minimal.so.4`;
//! - `shim`: `LD_PRELOAD=libmallocshim.so MALLOCSHIM_BACKEND=<backend>`, profiling on at defaults;
//! - `routing`: the same with `MALLOCSHIM_PROFILE=off`;
//! - `shim-heapprof` / `shim-noheapprof`: the shim at defaults with `MALLOCSHIM_PROF_SAMPLE_BYTES`
//!   524288 (heap profiles at the default mean) / 0 (off); with both, a table of their ratio
//!   (the goal: at most 1.005); `shim-heapprof-fp`: 524288 with `MALLOCSHIM_PROF_UNWIND=fp`
//!   (frame pointers only), its own table against off; `shim-heapprof-1m`, `shim-heapprof-2m`:
//!   a mean of 1 and 2 MiB, each its own table against off (the harness clears `MALLOCSHIM_*`
//!   from the bench's own environment: a mean set there would not reach the server);
//! - `shim-recording`: the shim at defaults with a recording window open from start to exit
//!   (`MALLOCSHIM_RECORD`, issue 24); with `shim`, a table of their ratio (the goal: at most 1.10).
//!   Only the server's threads inside `do_command` are counted: the traced entry points and the
//!   ring writes, not the shim's own thread that drains and compresses;
//! - `jeprof` (jemalloc only), `heaptrack` (glibc only): see benches/heap_profilers.rs.
//!
//! For each workload and sysbench thread count it runs N and 2N events (after a warm-up of N/4)
//! and reports instructions per query = (Ir(2N run) - Ir(N run)) / (queries(2N) - queries(N)), so
//! connecting, preparing statements and quitting cancel out. Valgrind runs one guest thread at a
//! time, so the counts do not depend on the machine's load (wall-clock qps on 2 shared vCPUs
//! varies by 10-25% between rounds; these counts by about 0.1%).
//!
//! Knobs (environment):
//! - `QI_BACKENDS` (default every backend of the table, `mallocshim_format::BACKENDS`), `QI_MODES` (`direct shim routing`),
//!   `QI_WORKLOADS` (`oltp_point_select oltp_read_only`), `QI_THREADS` (`2 8`);
//! - `QI_ROUNDS` (default 1): every config once per round, order rotated; the table shows medians
//!   and, with 2 or more rounds, the spread of each config's counts;
//! - `QI_PS_EVENTS` (default 8000) N for oltp_point_select, `QI_RO_EVENTS` (default 500) N for
//!   oltp_read_only (16 queries per event);
//! - `QI_OUT` (default `target/query-instr`): callgrind files, sysbench reports, error logs;
//! - `QI_SHIM` (default: this tree's release build): the `libmallocshim.so` to measure, e.g. the
//!   parent commit's copied aside, for a before/after pair of runs.
//!
//! Output: Markdown on stdout and in `target/bench/query-instr.md`, every measurement in
//! `target/bench/query-instr.csv`. Fails (non-zero exit, one clear message) when valgrind,
//! callgrind_control, mariadbd, sysbench, jemalloc or tcmalloc is missing, when any sysbench run
//! has errors, a server does not have the expected allocator (`@@version_malloc_library` and
//! /proc/PID/maps), or a mariadbd does not stop cleanly. The default run (9 configs x 4 cells)
//! takes about 10-15 minutes.

#[path = "../tests/common/mod.rs"]
mod common;
use common::{env_str, median_or_nan, words};

use mallocshim_mariadb::query_instr::{self, Config};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

fn fail(msg: &str) -> ! {
    eprintln!("query_instr bench FAILED: {msg}");
    std::process::exit(1)
}

// Long because: one bench run: parse the environment, run each (backend, mode, workload) under callgrind, then the tables; each step is a call.
fn main() {
    // `QI_SHIM=PATH`: measure that build of the shim (e.g. the parent commit's, copied aside)
    // instead of building this tree's.
    let so = std::env::var_os("QI_SHIM").map(PathBuf::from).unwrap_or_else(common::shim);
    let out_dir = common::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir).expect("create target/bench");

    let backends = words("QI_BACKENDS", &common::BACKENDS.join(" "));
    let modes = words("QI_MODES", "direct shim routing");
    let workloads = words("QI_WORKLOADS", "oltp_point_select oltp_read_only");
    let threads: Vec<u32> =
        words("QI_THREADS", "2 8").iter().map(|t| t.parse().expect("QI_THREADS: numbers")).collect();
    for b in &backends {
        if !mallocshim_mariadb::BACKENDS.contains(&b.as_str()) {
            fail(&format!("unknown backend {b} in QI_BACKENDS"));
        }
    }
    for m in &modes {
        if !mallocshim_mariadb::profilers::MODES.contains(&m.as_str()) {
            fail(&format!(
                "unknown mode {m} in QI_MODES ({})",
                mallocshim_mariadb::profilers::MODES.join(", ")
            ));
        }
    }
    let num = |k: &str, d: u64| -> u64 {
        let n = common::env_u64(k, d);
        if n == 0 {
            fail(&format!("{k} must be at least 1"));
        }
        n
    };
    let cfg = Config {
        shim: so.canonicalize().expect("the shim's path"),
        backends: backends.clone(),
        modes: modes.clone(),
        workloads: workloads.clone(),
        threads: threads.clone(),
        rounds: num("QI_ROUNDS", 1) as u32,
        ps_events: num("QI_PS_EVENTS", 8000),
        ro_events: num("QI_RO_EVENTS", 500),
        out: std::env::var_os("QI_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| common::target_dir().join("query-instr")),
    };

    let t0 = std::time::Instant::now();
    // Fails loudly, before anything starts, when a tool or library is missing.
    let res = query_instr::run(&cfg).unwrap_or_else(|e| fail(&e.to_string()));
    let (cells, servers) = (&res.cells, &res.servers);
    let secs = t0.elapsed().as_secs_f64();

    // Raw numbers.
    let mut csv = String::from(
        "round,backend,mode,workload,threads,n,queries_n,ir_n,queries_2n,ir_2n,ir_per_query,errors\n",
    );
    for c in cells {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{:.1},{}",
            c.round,
            c.backend,
            c.mode,
            c.workload,
            c.threads,
            c.n,
            c.q1,
            c.ir1,
            c.q2,
            c.ir2,
            c.per_query,
            c.errors
        );
    }
    std::fs::write(out_dir.join("query-instr.csv"), &csv).expect("write target/bench/query-instr.csv");

    // (backend, mode, workload, threads) -> per-round instructions per query.
    let mut by: BTreeMap<(String, String, String, u32), Vec<f64>> = BTreeMap::new();
    for c in cells {
        by.entry((c.backend.clone(), c.mode.clone(), c.workload.clone(), c.threads))
            .or_default()
            .push(c.per_query);
    }
    let get = |b: &str, m: &str, w: &str, t: u32| {
        by.get(&(b.to_string(), m.to_string(), w.to_string(), t)).cloned()
    };
    let rounds = cells.iter().map(|c| c.round + 1).max().unwrap_or(0);

    let mut md = String::new();
    let _ =
        writeln!(md, "# mariadbd instructions per query: shim vs direct preload (benches/query_instr.rs)\n");
    let _ = writeln!(
        md,
        "`mallocshim_mariadb::query_instr` with QI_BACKENDS=\"{}\" QI_MODES=\"{}\" QI_WORKLOADS=\"{}\" QI_THREADS=\"{}\" QI_ROUNDS={} QI_PS_EVENTS={} QI_RO_EVENTS={}; {rounds} round(s), {:.0} s. \
         mariadbd under `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='do_command(THD*, bool)'`: \
         instructions executed inside command processing by the query threads, per query, from the difference of a 2N-event and an N-event sysbench run. Median over rounds.\n",
        backends.join(" "),
        modes.join(" "),
        workloads.join(" "),
        threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" "),
        env_str("QI_ROUNDS", "1"),
        env_str("QI_PS_EVENTS", "8000"),
        env_str("QI_RO_EVENTS", "500"),
        secs
    );
    let mut worst: Option<(f64, String)> = None;
    if modes.iter().any(|m| m == "shim" || m == "routing") {
        let has_routing = modes.iter().any(|m| m == "routing");
        let _ = write!(md, "| workload | threads | backend | direct instr/query | shim instr/query | shim/direct | added by shim /query |");
        if has_routing {
            let _ = write!(md, " routing instr/query | routing/direct | added by routing /query |");
        }
        let _ = writeln!(
            md,
            "{}",
            if has_routing {
                "\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
            } else {
                "\n|---|---:|---|---:|---:|---:|---:|"
            }
        );
        for w in &workloads {
            for &t in &threads {
                for b in &backends {
                    let d = get(b, "direct", w, t).map(median_or_nan);
                    let cell = |m: &str| -> (String, String, String, Option<f64>) {
                        match (d, get(b, m, w, t).map(median_or_nan)) {
                            (Some(d), Some(s)) => (
                                format!("{s:.0}"),
                                format!("{:.4}", s / d),
                                format!("{:+.0}", s - d),
                                Some(s / d),
                            ),
                            (None, Some(s)) => (format!("{s:.0}"), "-".into(), "-".into(), None),
                            _ => ("-".into(), "-".into(), "-".into(), None),
                        }
                    };
                    let (s, sr, sa, ratio) = cell("shim");
                    if let Some(r) = ratio {
                        if worst.as_ref().is_none_or(|(x, _)| r > *x) {
                            worst = Some((r, format!("{w} {t} threads {b}")));
                        }
                    }
                    let _ = write!(
                        md,
                        "| {w} | {t} | {b} | {} | {s} | {sr} | {sa} |",
                        d.map(|d| format!("{d:.0}")).unwrap_or("-".into())
                    );
                    if has_routing {
                        let (r, rr, ra, _) = cell("routing");
                        let _ = write!(md, " {r} | {rr} | {ra} |");
                    }
                    let _ = writeln!(md);
                }
            }
        }
        if let Some((r, where_)) = &worst {
            let _ = writeln!(
                md,
                "\nLargest shim/direct ratio: {r:.4} ({where_}); the goal is at most 1.03: {}.",
                if *r <= 1.03 { "met in every cell" } else { "NOT met" }
            );
        }
    }
    // Heap profiles on (CFI unwinding, the default; and frame pointers only) against off; a
    // recording window open against the shim at defaults (issue 24). Each: (on, off, what, goal).
    let pairs = [
        ("shim-heapprof", "shim-noheapprof", "heap profiles at the default mean (MALLOCSHIM_PROF_SAMPLE_BYTES=524288), stacks from the CFI, against off (0)", 1.005),
        ("shim-heapprof-fp", "shim-noheapprof", "heap profiles at the default mean, MALLOCSHIM_PROF_UNWIND=fp, against off (0)", 1.005),
        ("shim-heapprof-1m", "shim-noheapprof", "heap profiles at a mean of 1 MiB (MALLOCSHIM_PROF_SAMPLE_BYTES=1048576) against off (0)", 1.005),
        ("shim-heapprof-2m", "shim-noheapprof", "heap profiles at a mean of 2 MiB (MALLOCSHIM_PROF_SAMPLE_BYTES=2097152) against off (0)", 1.005),
        ("shim-recording", "shim", "a recording window open from start to exit (MALLOCSHIM_RECORD) against the shim at defaults", 1.10),
    ];
    for (on_mode, off_mode, how, goal) in pairs {
        if modes.iter().any(|m| m == on_mode) && modes.iter().any(|m| m == off_mode) {
            let _ = writeln!(md, "\n{on_mode}: {how}, same run, median over rounds:\n");
            let _ = writeln!(
                md,
                "| workload | threads | backend | {off_mode} instr/query | {on_mode} instr/query | ratio | added /query |"
            );
            let _ = writeln!(md, "|---|---:|---|---:|---:|---:|---:|");
            let mut worst: Option<(f64, String)> = None;
            for w in &workloads {
                for &t in &threads {
                    for b in &backends {
                        if let (Some(off), Some(on)) = (
                            get(b, off_mode, w, t).map(median_or_nan),
                            get(b, on_mode, w, t).map(median_or_nan),
                        ) {
                            let r = on / off;
                            if worst.as_ref().is_none_or(|(x, _)| r > *x) {
                                worst = Some((r, format!("{w} {t} threads {b}")));
                            }
                            let _ = writeln!(
                                md,
                                "| {w} | {t} | {b} | {off:.0} | {on:.0} | {r:.4} | {:+.0} |",
                                on - off
                            );
                        }
                    }
                }
            }
            if let Some((r, where_)) = &worst {
                let _ = writeln!(
                    md,
                    "\nLargest {on_mode}/{off_mode} ratio: {r:.4} ({where_}); the goal is at most {goal}: {}.",
                    if *r <= goal { "met in every cell" } else { "NOT met" }
                );
            }
        }
    }
    if rounds >= 2 {
        let _ = writeln!(
            md,
            "\nRepeatability: each config's instructions per query over the {rounds} rounds (each round a fresh mariadbd); spread = (max - min) / median.\n"
        );
        let _ = writeln!(md, "| workload | threads | backend | mode | min | median | max | spread |");
        let _ = writeln!(md, "|---|---:|---|---|---:|---:|---:|---:|");
        for ((b, m, w, t), v) in &by {
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let med = median_or_nan(v.clone());
            let _ = writeln!(
                md,
                "| {w} | {t} | {b} | {m} | {lo:.0} | {med:.0} | {hi:.0} | {:.3}% |",
                100.0 * (hi - lo) / med
            );
        }
    }

    let _ = writeln!(md, "\nServers (one per config and round): allocator seen by mariadbd, exit status.\n");
    let _ = writeln!(md, "| round | backend | mode | @@version_malloc_library | allocator mapped | start s | mariadbd exit | crash report |");
    let _ = writeln!(md, "|---:|---|---|---|---|---:|---:|---|");
    for v in servers {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            v.round,
            v.backend,
            v.mode,
            v.malloc_lib,
            if v.loaded { "yes" } else { "no" },
            v.start_s,
            v.exit.map(|e| e.to_string()).unwrap_or_else(|| "start failed".into()),
            if v.crash { "YES" } else { "none" }
        );
    }
    let errors: u64 = cells.iter().map(|c| c.errors).sum();
    let _ = writeln!(md, "\nsysbench errors over all runs: {errors}.");

    print!("{md}");
    std::fs::write(out_dir.join("query-instr.md"), &md).expect("write target/bench/query-instr.md");

    let expected =
        rounds.max(1) as usize * query_instr::configs(&cfg).len() * workloads.len() * threads.len();
    let mut fail = Vec::new();
    if !res.ok {
        fail.push("a check failed (see above: sysbench errors, a callgrind dump, the allocator of a server, or mariadbd's exit)".into());
    }
    if cells.len() != expected {
        fail.push(format!("{} cells measured, {expected} expected", cells.len()));
    }
    if errors != 0 {
        fail.push(format!("{errors} errors in sysbench runs or callgrind dumps"));
    }
    if cells.iter().any(|c| !c.per_query.is_finite()) {
        fail.push("a cell has no instructions-per-query figure".into());
    }
    if !fail.is_empty() {
        eprintln!("query_instr bench FAILED: {}", fail.join("; "));
        std::process::exit(1);
    }
}
