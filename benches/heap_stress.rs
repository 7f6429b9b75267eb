//! Heap profiles under mimalloc-bench's stress programs (issue 21 part 5): wall time of
//! `tests/c/mstress.c` and `tests/c/test_stress.c` at 8 and 32 threads with heap profiles at the
//! default mean (512 KiB), at `PROF_SAMPLE_BYTES=4096` and at 1 (every allocation sampled: the
//! locked path at its busiest), against heap profiles off
//! (`PROF_SAMPLE_BYTES=0`: the entry table without heap profiles, everything else as on; not
//! `PROFILE=off`, which also turns the histograms off), same shim, same run. Goal: within 1.5x
//! of off at every thread count.
//!
//! Run with `cargo bench --bench heap_stress` (a plain `main`). It builds the release shim and
//! the two programs (into `target/bench/`), then runs rounds: round r runs every configuration
//! once, in an order rotated by r; the table gives the median seconds over the rounds and the
//! ratio of the medians to the same shim's off row, in wall seconds and in CPU seconds (the
//! children's user + system time: on a shared machine wall time follows the other load, CPU
//! time shows what spinning and yielding burn).
//!
//! Knobs: `MALLOCSHIM_BENCH_ROUNDS` (default 7); `MALLOCSHIM_BENCH_BACKENDS` (default
//! `jemalloc`, where the issue saw 3 of 7 threads in `sched_yield`); `MALLOCSHIM_BENCH_BEFORE_SO`:
//! another build of the shim (say main's, for a before/after comparison) measured in the same
//! rounds under the label `before`; `MALLOCSHIM_BENCH_SCALE` (default 10) and
//! `MALLOCSHIM_BENCH_ITER` (default 3; at 32 threads a quarter of the work per thread rounds
//! up: ITER stays, SCALE/4) set the programs' work. Output: the Markdown table on stdout, also
//! in `target/bench/heap_stress.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "../tests/common/mod.rs"]
mod common;

const PROGRAMS: [(&str, &str); 2] = [("mstress.c", "mstress"), ("test_stress.c", "test_stress")];
const THREADS: [u32; 2] = [8, 32];
/// (label, PROF_SAMPLE_BYTES); the first is the baseline.
const MODES: [(&str, &str); 4] = [("off", "0"), ("default", "524288"), ("4096", "4096"), ("1", "1")];

struct Run {
    so_label: String,
    so: PathBuf,
    backend: String,
    prog: usize,
    threads: u32,
    mode: usize,
    secs: Vec<f64>,
    /// CPU seconds (user + system) of the run.
    cpu: Vec<f64>,
}

/// CPU seconds (user + system) used by the waited-for children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn build_prog(src: &str, out: &Path) -> PathBuf {
    let dst = out.join(src.trim_end_matches(".c"));
    let o = Command::new(common::require("gcc"))
        .args(["-O2", "-g", "-Wall", "-pthread", "-fno-omit-frame-pointer", "-o"])
        .arg(&dst)
        .arg(common::root().join("tests/c").join(src))
        .output()
        .expect("run gcc");
    assert!(o.status.success(), "gcc {src}: {}", String::from_utf8_lossy(&o.stderr));
    dst
}

/// Wall and CPU seconds of one run.
fn once(r: &Run, bins: &[PathBuf], scale: u64, iter: u64) -> (f64, f64) {
    let mut c = common::plain(&bins[r.prog]);
    let sc = if r.threads > 8 { scale.div_ceil(4) } else { scale };
    c.args([r.threads.to_string(), sc.to_string(), iter.to_string()]);
    c.env("LD_PRELOAD", &r.so).env("MALLOCSHIM_BACKEND", &r.backend);
    c.env("MALLOCSHIM_PROF_SAMPLE_BYTES", MODES[r.mode].1);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (t0, c0) = (Instant::now(), children_cpu());
    let o = c.output().expect("run stress program");
    let s = (t0.elapsed().as_secs_f64(), children_cpu() - c0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(": ok "),
        "{} {} threads {} {}: {}",
        r.so_label,
        PROGRAMS[r.prog].1,
        r.threads,
        MODES[r.mode].0,
        common::describe(&o)
    );
    s
}

// Long because: one bench run read top to bottom: settings, rounds of interleaved configurations,
// then the table.
fn main() {
    let rounds = common::env_u64("MALLOCSHIM_BENCH_ROUNDS", 7).max(1) as usize;
    let scale = common::env_u64("MALLOCSHIM_BENCH_SCALE", 10);
    let iter = common::env_u64("MALLOCSHIM_BENCH_ITER", 3).max(1);
    let backends = common::words("MALLOCSHIM_BENCH_BACKENDS", "jemalloc");
    let out_dir = common::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let bins: Vec<PathBuf> = PROGRAMS.iter().map(|(s, _)| build_prog(s, &out_dir)).collect();
    let mut sos = vec![("after".to_string(), common::shim())];
    if let Ok(b) = std::env::var("MALLOCSHIM_BENCH_BEFORE_SO") {
        sos.insert(0, ("before".to_string(), common::require_file(&b)));
    }
    let mut runs = Vec::new();
    for (label, so) in &sos {
        for b in &backends {
            for prog in 0..PROGRAMS.len() {
                for threads in THREADS {
                    for mode in 0..MODES.len() {
                        let (so_label, so, backend) = (label.clone(), so.clone(), b.clone());
                        runs.push(Run {
                            so_label,
                            so,
                            backend,
                            prog,
                            threads,
                            mode,
                            secs: vec![],
                            cpu: vec![],
                        });
                    }
                }
            }
        }
    }
    for round in 0..rounds {
        let n = runs.len();
        for k in 0..n {
            let i = (k + round * 5) % n;
            let (s, c) = once(&runs[i], &bins, scale, iter);
            runs[i].secs.push(s);
            runs[i].cpu.push(c);
        }
        eprintln!("heap_stress bench: round {}/{rounds} done", round + 1);
    }
    let mut md = String::new();
    writeln!(
        md,
        "mstress / test-stress, median of {rounds} interleaved rounds (SCALE={scale} at 8 threads, {} at 32; ITER={iter}); each cell: median seconds, and in brackets the ratio to the median of the same shim's heap-profiles-off row (PROF_SAMPLE_BYTES=0)\n",
        scale.div_ceil(4)
    )
    .unwrap();
    for (title, pick) in [("wall", 0), ("CPU (user + system)", 1)] {
        let med: Vec<f64> = runs
            .iter()
            .map(|r| {
                mallocshim_format::stats::median_or_nan(if pick == 0 {
                    r.secs.clone()
                } else {
                    r.cpu.clone()
                })
            })
            .collect();
        writeln!(md, "\n{title} seconds:\n").unwrap();
        writeln!(md, "| shim | backend | program | threads | off | default | 4096 | 1 (every allocation) |")
            .unwrap();
        writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|").unwrap();
        for (i, r) in runs.iter().enumerate().filter(|(_, r)| r.mode == 0) {
            let cell = |k: usize| format!("{:.3} ({:.2})", med[i + k], med[i + k] / med[i]);
            writeln!(
                md,
                "| {} | {} | {} | {} | {:.3} | {} | {} | {} |",
                r.so_label,
                r.backend,
                PROGRAMS[r.prog].1,
                r.threads,
                med[i],
                cell(1),
                cell(2),
                cell(3)
            )
            .unwrap();
        }
    }
    print!("{md}");
    std::fs::write(out_dir.join("heap_stress.md"), &md).unwrap();
}
