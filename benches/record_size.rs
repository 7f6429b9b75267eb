//! Recording a live mariadbd (issue 24): its cost in qps, the trace's size, and how fast the
//! trace replays. A throwaway server under the shim (`REC_BACKEND`, default glibc) runs sysbench
//! `REC_WORKLOAD` (oltp_read_only) at `REC_THREADS` (4) for `REC_SECONDS` + 6 s per run, after a
//! warm-up run of the same length; `REC_ROUNDS` (3) rounds, each one run without a window and
//! one with a window of `REC_SECONDS` (30) opened 3 s in through the control channel
//! (`mallocshim record PID --seconds`), their order alternating from round to round (the
//! interleaving spreads the machine's load over both). Prints per round the trace's calls,
//! threads, bytes, bytes per call (the goal: at most 4), drops, reordered calls and end
//! reason, and both qps, over the whole runs and over the seconds wholly inside the window
//! (`--report-interval=1`: the window is 20 of a run's 26 s, so a whole-run ratio dilutes its
//! cost), the server's CPU (its drain thread's apart) and its CPU per query; then the median
//! qps ratio recording / not (goal at least 0.95).
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

/// What one run measured: qps over the whole run and over the seconds wholly inside the window
/// (5 to `secs + 2`: the window opens about 3.1 s in and closes `secs` later), and the CPU
/// seconds of the server and of its `mallocshim` thread (the drain) over the run.
#[derive(Clone, Copy)]
struct Run {
    qps: f64,
    qps_window: f64,
    cpu_s: f64,
    shim_cpu_s: f64,
}

/// CPU seconds (user + system) in a /proc stat line.
fn stat_cpu(path: &str) -> f64 {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let f: Vec<&str> = s.rsplit_once(')').map_or("", |x| x.1).split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// The server's CPU seconds so far, and its `mallocshim` thread's.
fn cpu(pid: u32) -> (f64, f64) {
    let mut shim = 0.0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let d = t.path();
        if std::fs::read_to_string(d.join("comm")).unwrap_or_default().trim() == "mallocshim" {
            shim += stat_cpu(&d.join("stat").to_string_lossy());
        }
    }
    (stat_cpu(&format!("/proc/{pid}/stat")), shim)
}

/// The mean of sysbench's per-second qps (`--report-interval=1` lines `[ 7s ] ... qps: N`) over
/// seconds `from..=to`.
fn interval_qps(out: &Path, from: u64, to: u64) -> f64 {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let v: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let t: u64 = l.trim_start().strip_prefix('[')?.split('s').next()?.trim().parse().ok()?;
            let q: f64 = l.split("qps:").nth(1)?.split_whitespace().next()?.parse().ok()?;
            (from..=to).contains(&t).then_some(q)
        })
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One sysbench run of `secs + 6` s; with `trace`, a window of `secs` opened 3 s in.
fn run(srv: &Server, c: &Cfg, cli: &Path, trace: Option<&Path>) -> Run {
    let pid = srv.pid();
    let cpu0 = cpu(pid);
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
    let sb = Sysbench::new(c.workload.as_str(), c.threads).time(c.secs + 6).arg("--report-interval=1");
    let r = srv.sysbench(&sb).expect("sysbench");
    assert!(r.ok(), "sysbench failed: {r:?}");
    let cpu1 = cpu(pid);
    if let Some(h) = rec {
        let o = h.join().unwrap();
        assert!(o.status.success(), "mallocshim record: {}", common::describe(&o));
    }
    Run {
        qps: r.qps.expect("qps"),
        qps_window: interval_qps(&r.output, 5, c.secs + 2),
        cpu_s: cpu1.0 - cpu0.0,
        shim_cpu_s: cpu1.1 - cpu0.1,
    }
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

/// The rounds' qps table and the medians (with their ranges) of the three ratios.
fn summary(rounds: u64, qps_lines: &[String], ratios: &[f64], wratios: &[f64], cpqs: &[f64]) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\n| round | qps without (run) | qps recording (run) | ratio | qps without (window s) | qps recording (window s) | ratio | server CPU without / recording | server CPU per query, ratio | drain thread CPU in the window | load 1 min |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for l in qps_lines {
        println!("{l}");
    }
    let range = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}-{hi:.3}")
    };
    println!(
        "\nmedian qps ratio recording / not over {rounds} interleaved rounds: {:.3} ({}) over the seconds inside the window, {:.3} ({}) over whole runs (goal at least 0.95); server CPU per query recording / not: {:.3} ({}); load average at the end: {}",
        common::median_or_nan(wratios),
        range(wratios),
        common::median_or_nan(ratios),
        range(ratios),
        common::median_or_nan(cpqs),
        range(cpqs),
        load.trim()
    );
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
    let (mut ratios, mut wratios, mut cpqs, mut last) = (Vec::new(), Vec::new(), Vec::new(), None);
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
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let (ratio, wratio) = (rec.qps / base.qps, rec.qps_window / base.qps_window);
        let per_s = (c.secs + 6) as f64;
        // The server's CPU per query (all its threads, the drain's included), recording over
        // not: what a server-bound machine pays in qps, less sensitive to other jobs' load.
        let cpq = (rec.cpu_s / rec.qps) / (base.cpu_s / base.qps);
        cpqs.push(cpq);
        qps_lines.push(format!(
            "| {k} | {:.1} | {:.1} | {ratio:.3} | {:.1} | {:.1} | {wratio:.3} | {:.0}% / {:.0}% | {cpq:.3} | {:.1}% | {} |",
            base.qps,
            rec.qps,
            base.qps_window,
            rec.qps_window,
            100.0 * base.cpu_s / per_s,
            100.0 * rec.cpu_s / per_s,
            100.0 * rec.shim_cpu_s / c.secs as f64,
            load.split_whitespace().next().unwrap_or("?"),
        ));
        ratios.push(ratio);
        wratios.push(wratio);
        last = Some(out);
    }
    summary(rounds, &qps_lines, &ratios, &wratios, &cpqs);
    srv.shutdown().expect("shutdown");
    if common::env_u64("REC_REPLAY", 1) == 1 {
        if let Some(t) = last {
            replay(&cli, &t, &dir);
        }
    }
}
