//! Recording a live mariadbd (issue 24): its cost in qps, the trace's size, and how fast the
//! trace replays. A throwaway server under the shim (`REC_BACKEND`, default glibc) runs sysbench
//! `REC_WORKLOAD` (oltp_read_only) at `REC_THREADS` (4) for `REC_SECONDS` + 6 s per run, after a
//! warm-up run of the same length; `REC_ROUNDS` (3) rounds, each one run without a window and
//! one with a window of `REC_SECONDS` (30) opened 3 s in through the control channel
//! (`mallocshim record PID --seconds`), their order alternating from round to round (the
//! interleaving spreads the machine's load over both). Prints per round the trace's calls,
//! threads, bytes, bytes per call (the goal: at most 4), drops, reordered calls and end
//! reason, and both qps; then the median qps ratio recording / not (goal at least 0.95).
//! Last, with `REC_REPLAY=1` (default), `mallocshim replay` of the last round's trace in fast
//! pace under every backend: the recorded window's length over each replay's wall time (goal at
//! least 5x). Run with `cargo bench --bench record_size` (needs the release shim and CLI:
//! `cargo build --release -p mallocshim -p mallocshim-cli`). A plain `main` (`harness = false`).

#[path = "../tests/common/mod.rs"]
mod common;

use mallocshim_format::trace;
use mallocshim_mariadb::{Instance, Launch, Options, Server, Sysbench};
use mallocshim_replay::answer::Answer;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

struct Cfg {
    workload: String,
    threads: u32,
    secs: u64,
}

/// One sysbench run of `secs + 6` s; with `trace`, a window of `secs` opened 3 s in. Returns
/// the qps.
fn run(srv: &Server, c: &Cfg, cli: &Path, trace: Option<&Path>) -> f64 {
    let pid = srv.pid();
    let rec = trace.map(|out| {
        let (cli, out, secs) = (cli.to_path_buf(), out.to_path_buf(), c.secs);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            Command::new(&cli)
                .args(["record", &pid.to_string(), "--seconds", &secs.to_string(), "--out"])
                .arg(&out)
                .output()
                .expect("run mallocshim record")
        })
    });
    let r = srv.sysbench(&Sysbench::new(c.workload.as_str(), c.threads).time(c.secs + 6)).expect("sysbench");
    assert!(r.ok(), "sysbench failed: {r:?}");
    if let Some(h) = rec {
        let o = h.join().unwrap();
        assert!(o.status.success(), "mallocshim record: {}", common::describe(&o));
    }
    r.qps.expect("qps")
}

/// Prints what a trace holds; returns its window in seconds.
fn describe_trace(path: &Path, c: &Cfg, backend: &str) -> f64 {
    let (h, th, ev, f) = trace::read_file(path).expect("read the trace");
    let bytes = std::fs::metadata(path).unwrap().len();
    println!(
        "| {backend} | {} x{} | {} s | {} calls | {} threads | {bytes} bytes | {:.2} bytes/call | {} dropped | {} reordered | {} classes pre-window | ended {} |",
        c.workload,
        c.threads,
        c.secs,
        ev.len(),
        th.len(),
        bytes as f64 / ev.len().max(1) as f64,
        f.dropped,
        f.reordered,
        h.preexisting.len(),
        f.ended.name(),
    );
    f.window_ns as f64 / 1e9
}

fn replay(cli: &Path, trace: &Path, dir: &Path) {
    let json = dir.join("answer.json");
    let o = Command::new(cli).arg("replay").arg(trace).arg("--json").arg(&json).output().expect("replay");
    print!("{}", common::stdout(&o));
    let a: Answer = serde_json::from_slice(&std::fs::read(&json).expect("the answer")).expect("answer JSON");
    println!("\n| backend | window s | replay wall s | faster than the window | errors |\n|---|---:|---:|---:|---:|");
    for b in &a.backends {
        println!(
            "| {} | {:.1} | {:.2} | {:.1}x | {} |",
            b.engine.backend,
            b.engine.window_s,
            b.engine.wall_s,
            b.speedup,
            b.engine.errors.total()
        );
    }
}

fn main() {
    let so = common::shim();
    let cli = common::cli_bin();
    let backend = common::env_str("REC_BACKEND", "glibc");
    let c = Cfg {
        workload: common::env_str("REC_WORKLOAD", "oltp_read_only"),
        threads: common::env_u64("REC_THREADS", 4) as u32,
        secs: common::env_u64("REC_SECONDS", 30),
    };
    let rounds = common::env_u64("REC_ROUNDS", 3);
    mallocshim_mariadb::on_interrupt().unwrap();
    let inst = Instance::create(Options::default()).expect("instance");
    let plain = inst.start(&Launch::plain()).expect("plain mariadbd");
    plain.sysbench_prepare().expect("prepare");
    plain.shutdown().expect("shutdown");
    let srv = inst.start(&Launch::shim(&so, &backend)).expect("mariadbd under the shim");
    run(&srv, &c, &cli, None); // warm-up: the buffer pool
    let dir: PathBuf = inst.subdir("trace").unwrap();
    let (mut ratios, mut last) = (Vec::new(), None);
    println!("| backend | workload | window | calls | threads | bytes | bytes/call | dropped | reordered | pre-window | end |\n|---|---|---|---|---|---|---|---|---|---|---|");
    let mut qps_lines = Vec::new();
    for k in 0..rounds {
        let out = dir.join(format!("mariadbd.{k}.mst"));
        let (base, rec) = if k % 2 == 0 {
            let b = run(&srv, &c, &cli, None);
            (b, run(&srv, &c, &cli, Some(&out)))
        } else {
            let r = run(&srv, &c, &cli, Some(&out));
            (run(&srv, &c, &cli, None), r)
        };
        describe_trace(&out, &c, &backend);
        qps_lines.push(format!("| {k} | {base:.1} | {rec:.1} | {:.3} |", rec / base));
        ratios.push(rec / base);
        last = Some(out);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\n| round | qps without a window | qps recording | ratio |\n|---|---:|---:|---:|");
    for l in &qps_lines {
        println!("{l}");
    }
    println!(
        "\nmedian qps ratio recording / not over {rounds} interleaved rounds: {:.3} (goal at least 0.95); load average at the end: {}",
        common::median_or_nan(ratios),
        load.trim()
    );
    srv.shutdown().expect("shutdown");
    if common::env_u64("REC_REPLAY", 1) == 1 {
        if let Some(t) = last {
            replay(&cli, &t, &dir);
        }
    }
}
