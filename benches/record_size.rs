//! Trace size and drops of a recording of a live mariadbd (issue 24): a throwaway server under
//! the shim (`REC_BACKEND`, default glibc) runs sysbench `REC_WORKLOAD` (oltp_read_write) at
//! `REC_THREADS` (4) for `REC_SECONDS` + 6 s; 3 s in, `mallocshim record PID --seconds
//! REC_SECONDS` (30) records a window through the control channel. Prints the trace's calls,
//! threads, bytes, bytes per call (the goal: at most 4), drops and end reason, and the
//! qps of the run against a run of the same length without a window on the same server before it. Run with `cargo bench --bench record_size` (needs the release CLI:
//! `cargo build --release -p mallocshim-cli`). A plain `main` (`harness = false`).

use mallocshim_format::trace;
use mallocshim_mariadb::{Instance, Launch, Options, Sysbench};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn env_or(k: &str, d: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| d.into())
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let so = target.join("release/libmallocshim.so");
    let cli = target.join("release/mallocshim");
    assert!(so.exists() && cli.exists(), "build the release shim and CLI first");
    let backend = env_or("REC_BACKEND", "glibc");
    let workload = env_or("REC_WORKLOAD", "oltp_read_write");
    let threads: u32 = env_or("REC_THREADS", "4").parse().unwrap();
    let secs: u64 = env_or("REC_SECONDS", "30").parse().unwrap();
    mallocshim_mariadb::on_interrupt().unwrap();
    let inst = Instance::create(Options::default()).expect("instance");
    let plain = inst.start(&Launch::plain()).expect("plain mariadbd");
    plain.sysbench_prepare().expect("prepare");
    plain.shutdown().expect("shutdown");
    let srv = inst.start(&Launch::shim(&so, &backend)).expect("mariadbd under the shim");
    let pid = srv.pid();
    // The same server and load without a window first (warms the buffer pool): the qps baseline.
    let base = srv.sysbench(&Sysbench::new(workload.as_str(), threads).time(secs + 6)).expect("sysbench");
    let out = inst.subdir("trace").unwrap().join("mariadbd.mst");
    let out2 = out.clone();
    let rec = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        Command::new(&cli)
            .args(["record", &pid.to_string(), "--seconds", &secs.to_string(), "--out"])
            .arg(&out2)
            .output()
            .expect("run mallocshim record")
    });
    let r = srv.sysbench(&Sysbench::new(workload.as_str(), threads).time(secs + 6)).expect("sysbench");
    let o = rec.join().unwrap();
    print!("{}", String::from_utf8_lossy(&o.stdout));
    eprint!("{}", String::from_utf8_lossy(&o.stderr));
    let (h, th, ev, f) = trace::read_file(&out).expect("read the trace");
    let bytes = std::fs::metadata(&out).unwrap().len();
    let pre = ev.iter().filter(|e| e.old_id & trace::PRE_WINDOW != 0).count();
    println!(
        "| {backend} | {workload} x{threads} | {secs} s | {} calls | {} threads | {bytes} bytes | {:.2} bytes/call | {} dropped | {} reordered | {pre} pre-window frees | {} classes pre-window | ended {} | qps {} (without a window, same server, run before: {}) |",
        ev.len(),
        th.len(),
        bytes as f64 / ev.len().max(1) as f64,
        f.dropped,
        f.reordered,
        h.preexisting.len(),
        f.ended.name(),
        r.qps_text(),
        base.qps_text()
    );
    srv.shutdown().expect("shutdown");
}
