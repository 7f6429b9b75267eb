//! The cost of one sampled stack: `tests/c/sampled_stack.c` (built `-O2 -fno-omit-frame-pointer`,
//! so both unwinders see the whole stack) makes malloc(64)/free pairs below a recursion of D
//! frames (D = 2 and 30; the program's own frames, main and libc's start add 5), under the shim
//! (glibc backend, profiling at its defaults: heap profiles need it) with heap profiles off
//! (`MALLOCSHIM_PROF_SAMPLE_BYTES=0`) and with every allocation sampled (`=1`), unwound from the
//! CFI (the default) and by frame pointers (`MALLOCSHIM_PROF_UNWIND=fp`).
//! - instructions per pair under callgrind (deterministic on a shared machine): the difference of
//!   two runs (30,000 and 10,000 pairs) over 20,000; one sample = sampled - off (unwinding, the
//!   live set's insert and remove, the gap drawn), and the CFI's extra per frame;
//! - ns per pair: median of `MALLOCSHIM_BENCH_ROUNDS` (default 7) interleaved rounds of
//!   `MALLOCSHIM_BENCH_ITERS` (default 1,000,000) pairs (noisy when the machine is shared).
//!
//! Run with `cargo bench --bench sampled_stack`; valgrind missing is a failure.

#[path = "../tests/common/mod.rs"]
mod common;
use common::env_u64;
use mallocshim_format::stats::median_or_nan as median;
use std::path::Path;

const CONFIGS: [(&str, &str, &str); 3] =
    [("off", "0", "cfi"), ("sampled, CFI", "1", "cfi"), ("sampled, fp", "1", "fp")];

fn cmd(
    prog: &Path,
    depth: u32,
    c: (&str, &str, &str),
    iters: u64,
    callgrind: Option<&Path>,
) -> std::process::Command {
    let mut cmd = match callgrind {
        Some(out) => {
            let mut v = common::preloaded(common::require("valgrind"), "glibc");
            v.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", out.display())).arg(prog);
            v
        }
        None => common::preloaded(prog, "glibc"),
    };
    cmd.args([depth.to_string(), iters.to_string()])
        .env("MALLOCSHIM_PROF_SAMPLE_BYTES", c.1)
        .env("MALLOCSHIM_PROF_UNWIND", c.2);
    cmd
}

fn ns(prog: &Path, depth: u32, c: (&str, &str, &str), iters: u64) -> f64 {
    let o = common::run_ok(cmd(prog, depth, c, iters, None), &format!("sampled_stack {depth} {c:?}"));
    common::stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("ns_per_pair=").and_then(|v| v.trim().parse().ok()))
        .expect("ns_per_pair line")
}

fn instructions(prog: &Path, depth: u32, c: (&str, &str, &str), iters: u64) -> f64 {
    let out = common::work_dir().join(format!("sampled_stack.{depth}.{}.{}.{iters}.cg", c.1, c.2));
    common::run_ok(cmd(prog, depth, c, iters, Some(&out)), &format!("callgrind sampled_stack {depth} {c:?}"));
    let text = std::fs::read_to_string(&out).expect("callgrind output");
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|v| v.trim().parse().ok())
        .expect("callgrind summary")
}

fn main() {
    let _ = common::shim();
    let prog = common::cc("sampled_stack.c", "sampled_stack", &["-O2", "-fno-omit-frame-pointer"]);
    let rounds = env_u64("MALLOCSHIM_BENCH_ROUNDS", 7);
    let iters = env_u64("MALLOCSHIM_BENCH_ITERS", 1_000_000);
    let depths = [2u32, 30];
    let mut ins = Vec::new();
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); depths.len() * CONFIGS.len()];
    for &d in &depths {
        for c in CONFIGS {
            let per = (instructions(&prog, d, c, 30_000) - instructions(&prog, d, c, 10_000)) / 20_000.0;
            ins.push(per);
        }
    }
    for r in 0..rounds as usize {
        for k in 0..t.len() {
            let i = (k + r) % t.len();
            t[i].push(ns(&prog, depths[i / CONFIGS.len()], CONFIGS[i % CONFIGS.len()], iters));
        }
    }
    let m: Vec<f64> = t.into_iter().map(median).collect();
    println!("| depth | configuration | instructions/pair | ns/pair (median of {rounds}) | one sample: instructions, ns |");
    println!("|---|---|---|---|---|");
    for (di, d) in depths.iter().enumerate() {
        for (ci, c) in CONFIGS.iter().enumerate() {
            let i = di * CONFIGS.len() + ci;
            let o = di * CONFIGS.len();
            let extra =
                if ci == 0 { "-".to_string() } else { format!("{:.0}, {:.0}", ins[i] - ins[o], m[i] - m[o]) };
            println!("| {d} | {} | {:.0} | {:.1} | {extra} |", c.0, ins[i], m[i]);
        }
    }
    let per_frame = |ci: usize| ((ins[CONFIGS.len() + ci] - ins[CONFIGS.len()]) - (ins[ci] - ins[0])) / 28.0;
    println!(
        "\none more frame: {:.0} instructions from the CFI, {:.0} by frame pointers; {iters} pairs per timed run",
        per_frame(1),
        per_frame(2)
    );
}
