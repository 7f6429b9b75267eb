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
//! With `SS_BASE_SHIM=PATH` (another build of the shim, e.g. the parent commit's copied aside)
//! the off and CFI rows are also run with that build, in the same run, for a before/after pair.
//!
//! Run with `cargo bench --bench sampled_stack`; valgrind missing is a failure.

#[path = "../tests/common/mod.rs"]
mod common;
use common::env_u64;
use mallocshim_format::stats::median_or_nan as median;
use std::path::{Path, PathBuf};

/// (label, MALLOCSHIM_PROF_SAMPLE_BYTES, MALLOCSHIM_PROF_UNWIND, the shim if not this tree's).
type Config = (&'static str, &'static str, &'static str, Option<PathBuf>);

fn configs() -> Vec<Config> {
    let mut v: Vec<Config> =
        vec![("off", "0", "cfi", None), ("sampled, CFI", "1", "cfi", None), ("sampled, fp", "1", "fp", None)];
    if let Some(base) = std::env::var_os("SS_BASE_SHIM").map(PathBuf::from) {
        assert!(base.exists(), "SS_BASE_SHIM={} does not exist", base.display());
        v.push(("off (base)", "0", "cfi", Some(base.clone())));
        v.push(("sampled, CFI (base)", "1", "cfi", Some(base)));
    }
    v
}

fn cmd(prog: &Path, depth: u32, c: &Config, iters: u64, callgrind: Option<&Path>) -> std::process::Command {
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
    if let Some(so) = &c.3 {
        cmd.env("LD_PRELOAD", so);
    }
    cmd
}

fn ns(prog: &Path, depth: u32, c: &Config, iters: u64) -> f64 {
    let o = common::run_ok(cmd(prog, depth, c, iters, None), &format!("sampled_stack {depth} {}", c.0));
    common::stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("ns_per_pair=").and_then(|v| v.trim().parse().ok()))
        .expect("ns_per_pair line")
}

fn instructions(prog: &Path, depth: u32, c: &Config, iters: u64) -> f64 {
    let base = if c.3.is_some() { ".base" } else { "" };
    let out = common::work_dir().join(format!("sampled_stack.{depth}.{}.{}{base}.{iters}.cg", c.1, c.2));
    common::run_ok(
        cmd(prog, depth, c, iters, Some(&out)),
        &format!("callgrind sampled_stack {depth} {}", c.0),
    );
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
    let configs = configs();
    let nc = configs.len();
    let mut ins = Vec::new();
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); depths.len() * nc];
    for &d in &depths {
        for c in &configs {
            let per = (instructions(&prog, d, c, 30_000) - instructions(&prog, d, c, 10_000)) / 20_000.0;
            ins.push(per);
        }
    }
    for r in 0..rounds as usize {
        for k in 0..t.len() {
            let i = (k + r) % t.len();
            t[i].push(ns(&prog, depths[i / nc], &configs[i % nc], iters));
        }
    }
    let m: Vec<f64> = t.into_iter().map(median).collect();
    println!("| depth | configuration | instructions/pair | ns/pair (median of {rounds}) | one sample: instructions, ns |");
    println!("|---|---|---|---|---|");
    for (di, d) in depths.iter().enumerate() {
        for (ci, c) in configs.iter().enumerate() {
            let i = di * nc + ci;
            // One sample is measured against the off row of the same build.
            let o = di * nc + if c.3.is_some() { 3 } else { 0 };
            let extra = if c.1 == "0" {
                "-".to_string()
            } else {
                format!("{:.0}, {:.0}", ins[i] - ins[o], m[i] - m[o])
            };
            println!("| {d} | {} | {:.0} | {:.1} | {extra} |", c.0, ins[i], m[i]);
        }
    }
    let per_frame = |ci: usize, off: usize| ((ins[nc + ci] - ins[nc + off]) - (ins[ci] - ins[off])) / 28.0;
    println!(
        "\none more frame: {:.0} instructions from the CFI, {:.0} by frame pointers; {iters} pairs per timed run",
        per_frame(1, 0),
        per_frame(2, 0)
    );
    if nc > 3 {
        println!(
            "one more frame with SS_BASE_SHIM's build: {:.0} instructions from the CFI",
            per_frame(4, 3)
        );
    }
}
