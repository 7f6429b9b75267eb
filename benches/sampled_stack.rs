//! The cost of one sampled stack: `tests/c/sampled_stack.c` (built `-O2 -fomit-frame-pointer`)
//! times malloc(64)/free pairs below a recursion of D frames, under the shim (glibc backend,
//! profiling off so only the heap profile differs) with every allocation sampled
//! (`MALLOCSHIM_PROF_SAMPLE_BYTES=1`) and with heap profiles off (`=0`), D = 2 and D = 30.
//! Rounds interleave the four configurations; the table gives the median ns per pair and:
//! - one sample at depth D = sampled(D) - off(D) (the stack unwound from the CFI, the live set's
//!   insert and remove, the gap drawn);
//! - one frame = (sampled(30) - sampled(2) - (off(30) - off(2))) / 28.
//!
//! Run with `cargo bench --bench sampled_stack`. Knobs: `MALLOCSHIM_BENCH_ROUNDS` (default 7),
//! `MALLOCSHIM_BENCH_ITERS` (default 200000 pairs per run).

#[path = "../tests/common/mod.rs"]
mod common;
use common::{env_u64, median};

fn run(prog: &std::path::Path, depth: u32, bytes: &str, iters: u64) -> f64 {
    let mut c = common::preloaded(prog, "glibc");
    c.args([depth.to_string(), iters.to_string()])
        .env("MALLOCSHIM_PROFILE", "off")
        .env("MALLOCSHIM_PROF_SAMPLE_BYTES", bytes);
    let o = common::run_ok(c, &format!("sampled_stack depth {depth} bytes {bytes}"));
    common::stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("ns_per_pair=").and_then(|v| v.trim().parse().ok()))
        .expect("ns_per_pair line")
}

fn main() {
    let _ = common::shim();
    let prog = common::cc("sampled_stack.c", "sampled_stack", &["-O2", "-fomit-frame-pointer"]);
    let rounds = env_u64("MALLOCSHIM_BENCH_ROUNDS", 7);
    let iters = env_u64("MALLOCSHIM_BENCH_ITERS", 200_000);
    let configs = [(2, "0"), (2, "1"), (30, "0"), (30, "1")];
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for r in 0..rounds as usize {
        for k in 0..configs.len() {
            let i = (k + r) % configs.len();
            t[i].push(run(&prog, configs[i].0, configs[i].1, iters));
        }
    }
    let m: Vec<f64> = t.into_iter().map(median).collect();
    println!("| depth | heap profiles off ns/pair | every pair sampled ns/pair | one sample ns |");
    println!("|---|---|---|---|");
    for (d, (off, on)) in [(2, (m[0], m[1])), (30, (m[2], m[3]))] {
        println!("| {d} | {off:.1} | {on:.1} | {:.1} |", on - off);
    }
    println!(
        "\nmedian of {rounds} rounds, {iters} pairs per run; one more frame: {:.1} ns",
        ((m[3] - m[1]) - (m[2] - m[0])) / 28.0
    );
}
