//! Dump-cost benchmark: how long does a dump take with 1,000 live threads, and do allocating
//! threads notice? Run with `cargo bench --bench dump` (a `harness = false` bench).
//!
//! For each backend it runs `tests/c/dump_threads.c` under the shim: 1,000 threads that each made
//! 64 malloc/free pairs (so each holds a slot) and wait, one thread doing malloc(64)/free pairs
//! throughout, and the main thread calling `mallocshim_dump()` (json+prom, the defaults) several
//! times. Reported per backend, medians over the rounds: the dump's wall time and its thread CPU
//! time (the CPU time is what a loaded machine does not inflate), and the allocating thread's
//! pairs per second and worst pair while dumps run against an equally long quiet span right after
//! them (the ratio is the stall, if any: the dump takes no lock the hot path takes).
//! Goal (issue 3): under 100 ms per dump of 1,000 live threads.
//!
//! Knobs: `MALLOCSHIM_BENCH_ROUNDS` (default 3), `MALLOCSHIM_BENCH_THREADS` (default 1000),
//! `MALLOCSHIM_BENCH_DUMPS` (dumps per round, default 5). Output: Markdown on stdout and in
//! `target/bench/dump.md`.

#[path = "../tests/common/mod.rs"]
mod common;
use common::{env_u64, median_or_nan};

use std::collections::HashMap;
use std::fmt::Write as _;

fn main() {
    let rounds = env_u64("MALLOCSHIM_BENCH_ROUNDS", 3).max(1);
    let threads = env_u64("MALLOCSHIM_BENCH_THREADS", 1000).max(1);
    let dumps = env_u64("MALLOCSHIM_BENCH_DUMPS", 5).clamp(1, 64);
    let prog = common::cc("dump_threads.c", "dump_threads", &[]);
    let out_dir = common::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir).expect("create target/bench");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Dump of {threads} live threads (json+prom), {dumps} dumps per round, median of {rounds} rounds (load average at start: {}):\n",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let _ = writeln!(md, "| backend | dump wall ms | dump CPU ms | live threads in dump | pairs/s while dumping / quiet | worst pair us dumping / quiet |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
    for b in common::BACKENDS {
        let mut cols: HashMap<&str, Vec<f64>> = HashMap::new();
        let mut live = 0;
        for r in 0..rounds {
            let dir = out_dir.join(format!("dump-{b}-{r}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create dump dir");
            let mut c = common::preloaded(&prog, b);
            c.arg(threads.to_string()).arg(dumps.to_string()).env("MALLOCSHIM_DUMP_DIR", &dir);
            let child = c
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start dump_threads");
            let pid = child.id();
            let o = child.wait_with_output().expect("wait for dump_threads");
            assert!(o.status.success(), "dump_threads under {b}: {}", common::describe(&o));
            let s = common::stdout(&o);
            let get = |k: &str| -> f64 {
                s.lines()
                    .find_map(|l| l.strip_prefix(&format!("{k}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {k}= in\n{s}"))
            };
            // The quiet span is as long as the dumping span: pairs per span compare directly.
            cols.entry("wall").or_default().push(get("dump_ms_mean"));
            cols.entry("cpu").or_default().push(get("dump_cpu_ms_mean"));
            cols.entry("rate").or_default().push(get("pairs_dumping") / get("pairs_quiet").max(1.0));
            cols.entry("maxd").or_default().push(get("max_pair_us_dumping"));
            cols.entry("maxq").or_default().push(get("max_pair_us_quiet"));
            let last = mallocshim_format::newest_dump(&dir, pid, "json")
                .expect("read dump dir")
                .expect("a JSON dump");
            let d = mallocshim_format::Dump::read(&last).unwrap_or_else(|e| panic!("{e}"));
            live = d.live_threads().count();
        }
        let mut m = |k: &str| median_or_nan(cols.remove(k).unwrap_or_default());
        let _ = writeln!(
            md,
            "| {b} | {:.1} | {:.1} | {live} | {:.2} | {:.0} / {:.0} |",
            m("wall"),
            m("cpu"),
            m("rate"),
            m("maxd"),
            m("maxq")
        );
    }
    print!("{md}");
    std::fs::write(out_dir.join("dump.md"), &md).expect("write target/bench/dump.md");
}
