//! The README's main job (run by scripts/main-job.sh after the build): one throwaway datadir
//! (sysbench's 4 x 10,000 rows, prepared by a mariadbd without the shim), then for each backend a
//! mariadbd under `LD_PRELOAD=<shim> MALLOCSHIM_BACKEND=<b> MALLOCSHIM_VERBOSE=1`, sysbench
//! oltp_read_only for MAIN_SECONDS (8) at MAIN_THREADS (4), `kill -USR1` half-way (a JSON and a
//! text dump), a clean shutdown. Prints per backend qps, errors, p95, mariadbd's exit status and
//! CPU time, the shim's summary line, and a summary of the dump with its latency table.
//!
//! Usage: `mallocshim-main-job --shim /abs/libmallocshim.so`. Environment: MAIN_BACKENDS
//! ("glibc jemalloc tcmalloc mimalloc"), MAIN_SECONDS, MAIN_THREADS, MALLOCSHIM_ALLOW_NO_SUMMARY=1 (a
//! missing summary line only warns), MDB_KEEP=1 (keep the instance directory).
//! Exit status 1 when anything went wrong: mariadbd start or exit status, a crash report, sysbench
//! errors, no dump, the shim not mapped, a missing summary line, or a summary naming another
//! backend than requested (a silent fallback to glibc); 2 on bad usage or setup.

use mallocshim_format::Memory;
use mallocshim_mariadb::{
    procfs, read_dump, DumpSummary, DumpWaiter, Error, ErrorLog, Instance, Launch, Options, Sysbench,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Row {
    qps: String,
    errors: String,
    p95: String,
    exit: String,
    cpu_s: String,
    seen: String,
    calls: String,
    malloc: String,
    free: String,
    alloc: String,
    rss: String,
    dump: Option<(PathBuf, Duration)>,
}

fn env_num(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| usage(&format!("{key}={v} is not a number"))),
        Err(_) => default,
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("mallocshim-main-job: {msg}\nusage: mallocshim-main-job --shim /abs/libmallocshim.so");
    std::process::exit(2)
}

fn main() {
    // Exits only after `run` returned: its instance and servers are dropped (directory removed).
    let code = match run() {
        Ok(ok) => i32::from(!ok),
        Err(e) => {
            eprintln!("mallocshim-main-job: {e}");
            if matches!(e, Error::MissingTool(_)) {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code)
}

/// The whole job; Ok(false) when a check failed.
fn run() -> Result<bool, Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let so = match args.as_slice() {
        [flag, path] if flag == "--shim" => PathBuf::from(path),
        _ => usage("bad arguments"),
    };
    let so = so.canonicalize().unwrap_or_else(|e| usage(&format!("{}: {e}", so.display())));
    let backends: Vec<String> = std::env::var("MAIN_BACKENDS")
        .unwrap_or_else(|_| "glibc jemalloc tcmalloc mimalloc".into())
        .split_whitespace()
        .map(String::from)
        .collect();
    let secs = env_num("MAIN_SECONDS", 8);
    let threads = env_num("MAIN_THREADS", 4) as u32;
    let allow_no_summary = std::env::var("MALLOCSHIM_ALLOW_NO_SUMMARY").is_ok_and(|v| v == "1");
    let t_start = Instant::now();

    mallocshim_mariadb::on_interrupt()?;
    let inst = Instance::create(Options::default())?;
    // The dataset is prepared once, by a mariadbd without the shim, and reused by every backend.
    let plain = inst.start(&Launch::plain())?;
    plain.sysbench_prepare()?;
    let st = plain.shutdown()?;
    if st.status != 0 {
        return Err(format!("the unpreloaded mariadbd (prepare run) exited with status {}", st.status).into());
    }

    let mut problems: Vec<String> = Vec::new();
    let mut rows: Vec<(String, Row)> = Vec::new();
    for b in &backends {
        eprintln!("mallocshim-main-job: === backend {b} ===");
        let mut problem = |p: String| problems.push(format!("{b}: {p}"));
        let row = one_backend(&inst, &so, b, (secs, threads), allow_no_summary, &mut problem)?;
        rows.push((b.clone(), row));
    }

    print_table(&inst, &so, secs, threads, &rows);
    for (b, row) in &rows {
        if let Some((json, took)) = &row.dump {
            print_dump(b, json, *took);
        }
    }
    println!("mallocshim-main-job: took {} s", t_start.elapsed().as_secs());
    if !problems.is_empty() {
        eprintln!("mallocshim-main-job: FAILED:");
        for p in &problems {
            eprintln!("  {p}");
        }
        return Ok(false);
    }
    println!("mallocshim-main-job: ok");
    Ok(true)
}

/// One backend: mariadbd under the shim, sysbench `oltp_read_only` for `secs` seconds with
/// `threads` threads, a dump asked for half-way, then shutdown and the error log's reading.
/// Returns its row; every problem goes to `problem`.
fn one_backend(
    inst: &Instance,
    so: &Path,
    b: &str,
    (secs, threads): (u64, u32),
    allow_no_summary: bool,
    problem: &mut dyn FnMut(String),
) -> Result<Row, Error> {
    let mut row = Row::default();
    let dumpdir = inst.subdir(&format!("dumps-{b}"))?;
    let launch = Launch::shim(so, b)
        .var("MALLOCSHIM_VERBOSE", "1")
        .var("MALLOCSHIM_DUMP_DIR", dumpdir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json,text")
        .var("MALLOCSHIM_MEMLOG", dumpdir.join("memlog.csv").display().to_string())
        .var("MALLOCSHIM_MEMLOG_INTERVAL_MS", "500");
    let srv = match inst.start(&launch) {
        Ok(s) => s,
        Err(e) => {
            problem(format!("mariadbd did not start under the shim: {e}"));
            return Ok(row);
        }
    };
    if procfs::maps_contains(srv.pid(), "libmallocshim") != Some(true) {
        problem("the shim is not mapped in mariadbd (/proc/PID/maps)".into());
    }
    // Half-way through the load, ask the running server for a dump, as a DBA would.
    let waiter = DumpWaiter::after(
        srv.pid(),
        &dumpdir,
        Duration::from_secs(secs.div_ceil(2)),
        Duration::from_secs(10),
    );
    match srv.sysbench(&Sysbench::new("oltp_read_only", threads).time(secs)) {
        Ok(r) => {
            if r.exit != 0 {
                problem(format!("sysbench exit status {}", r.exit));
            }
            if r.errors != 0 {
                problem(format!("sysbench errors {}", r.errors));
            }
            row.qps = r.qps_text();
            row.errors = r.errors.to_string();
            row.p95 = r.p95_ms.map(|p| p.to_string()).unwrap_or_else(|| "n/a".into());
        }
        Err(e) => problem(e.to_string()),
    }
    match waiter.wait() {
        Ok(d) => row.dump = Some(d),
        Err(e) => problem(e.to_string()),
    }
    row.cpu_s = procfs::cpu_seconds(srv.pid()).map(|c| format!("{c:.1}")).unwrap_or_else(|| "n/a".into());
    let st = match srv.shutdown() {
        Ok(st) => st,
        Err(e) => {
            problem(e.to_string());
            return Ok(row);
        }
    };
    row.exit = st.status.to_string();
    if st.status != 0 {
        problem(format!("mariadbd exit status {}", st.status));
    }
    read_errlog(&st.errlog, so, b, allow_no_summary, &mut row, problem);
    Ok(row)
}

/// The server's error log after shutdown: crash reports, a failed preload, the shim's lines
/// (printed) and its exit summary (into `row`, checked against the backend asked for).
fn read_errlog(
    errlog: &Path,
    so: &Path,
    b: &str,
    allow_no_summary: bool,
    row: &mut Row,
    problem: &mut dyn FnMut(String),
) {
    let log = ErrorLog::read(errlog);
    let crash = log.crash_lines();
    if !crash.is_empty() {
        problem("crash report in the error log".into());
        eprintln!("{}", crash.join("\n"));
    }
    if log.preload_failed() {
        problem(format!("ld.so could not preload {}", so.display()));
    }
    for l in log.shim_lines().iter().filter(|l| !l.starts_with("mallocshim: summary ")) {
        eprintln!("mallocshim-main-job:   {l}");
    }
    match log.summary() {
        Some(s) => {
            row.seen = s.backend().unwrap_or("?").to_string();
            row.calls = s.total_calls().to_string();
            let g = |k: &str| s.get(k).unwrap_or("n/a").to_string();
            (row.malloc, row.free, row.alloc, row.rss) =
                (g("malloc"), g("free"), g("allocated_bytes"), g("resident_bytes"));
            if row.seen != b {
                eprintln!(
                    "mallocshim-main-job: WARNING: requested backend {b} but the shim's summary says backend={} (fallback)",
                    row.seen
                );
                problem(format!("the shim ran backend {} instead", row.seen));
            }
        }
        None if allow_no_summary => eprintln!(
            "mallocshim-main-job: WARNING: no 'mallocshim: summary' line in {} (tolerated: MALLOCSHIM_ALLOW_NO_SUMMARY=1)",
            errlog.display()
        ),
        None => problem("no 'mallocshim: summary' line in the error log".into()),
    }
}

fn or_na(s: &str) -> &str {
    if s.is_empty() {
        "n/a"
    } else {
        s
    }
}

fn print_table(inst: &Instance, so: &Path, secs: u64, threads: u32, rows: &[(String, Row)]) {
    let version = std::process::Command::new(&inst.tools.mariadbd)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(2).unwrap_or("?").to_string())
        .unwrap_or_else(|_| "?".into());
    println!(
        "\nmariadbd {version} under {}: sysbench oltp_read_only, {threads} threads, {secs} s, {} x {} rows",
        so.display(),
        inst.options.sb_tables,
        inst.options.sb_rows
    );
    println!(
        "{:<9} {:>11} {:>6} {:>8} {:>5} {:>6} {:<9} {:>13} {:>12} {:>12} {:>16} {:>16}",
        "backend",
        "qps",
        "errors",
        "p95_ms",
        "exit",
        "cpu_s",
        "summary",
        "total_calls",
        "malloc",
        "free",
        "allocated_bytes",
        "resident_bytes"
    );
    for (b, r) in rows {
        println!(
            "{:<9} {:>11} {:>6} {:>8} {:>5} {:>6} {:<9} {:>13} {:>12} {:>12} {:>16} {:>16}",
            b,
            or_na(&r.qps),
            or_na(&r.errors),
            or_na(&r.p95),
            or_na(&r.exit),
            or_na(&r.cpu_s),
            or_na(&r.seen),
            or_na(&r.calls),
            or_na(&r.malloc),
            or_na(&r.free),
            or_na(&r.alloc),
            or_na(&r.rss)
        );
    }
    println!(
        "(exit = mariadbd's exit status; cpu_s = its CPU time from /proc/PID/stat before shutdown; summary = the backend named by the shim's summary line)"
    );
}

fn print_dump(b: &str, json: &Path, took: Duration) {
    println!(
        "\n=== {b}: the dump taken with kill -USR1 during the load ({} ms after the signal) ===",
        took.as_millis()
    );
    match read_dump(json) {
        Ok(d) => {
            let s = DumpSummary::of(&d);
            println!(
                "backend {}; threads {} ({} live, {} live with calls); backend allocated {} bytes, RSS {} bytes",
                s.backend,
                s.threads,
                s.live_threads,
                s.live_threads_with_calls,
                s.allocated_bytes,
                s.rss_bytes
            );
            let totals: Vec<String> = s.totals.iter().map(|(op, n, _)| format!("{op}={n}")).collect();
            println!("calls: {}", totals.join(" "));
            println!("busiest size classes: op, size, calls, p50 ns, p99 ns");
            for (op, label, n, p50, p99) in &s.busiest {
                println!("  {op:<8} {label:<18} {n:>12} {p50:>8} {p99:>8}");
            }
            print_account(&d.memory);
        }
        Err(e) => println!("(cannot read: {e})"),
    }
    let text = json.with_extension("text");
    match std::fs::read_to_string(&text) {
        Ok(t) => print!("\n{t}"),
        Err(e) => println!("(no text dump {}: {e})", text.display()),
    }
    print_verdict(b, json);
}

/// The memory verdict of the run: `mallocshim diagnose` (built beside this program) on the
/// server's memlog and the dump.
fn print_verdict(b: &str, json: &Path) {
    let memlog = json.with_file_name("memlog.csv");
    let cli = std::env::current_exe().map(|p| p.with_file_name("mallocshim")).unwrap_or_default();
    println!(
        "\n=== {b}: the memory verdict (mallocshim diagnose {} {}) ===",
        memlog.display(),
        json.display()
    );
    match std::process::Command::new(&cli).arg("diagnose").arg(&memlog).arg(json).output() {
        Ok(o) => {
            print!("{}", String::from_utf8_lossy(&o.stdout));
            if !o.status.success() {
                println!("(diagnose exited {}: {})", o.status, String::from_utf8_lossy(&o.stderr).trim());
            }
        }
        Err(e) => println!(
            "(cannot run {}: {e}; build it with cargo build --release -p mallocshim-cli)",
            cli.display()
        ),
    }
}

/// The RSS account of the dump (docs/memory-account.md): its parts, in MiB, and their sum
/// against RSS.
fn print_account(m: &Memory) {
    let mib = |v: u64| format!("{:.1}", v as f64 / 1048576.0);
    let parts = [
        ("live", Some(m.live_bytes)),
        ("allocator free", Some(m.allocator_free_bytes)),
        ("allocator metadata", m.allocator_metadata_bytes),
        ("outside malloc", Some(m.non_heap_bytes)),
        ("file-backed", Some(m.rss_file_bytes)),
        ("shared memory", Some(m.rss_shmem_bytes)),
    ];
    if m.rss_bytes == 0 {
        println!("RSS account: (not in this dump)");
        return;
    }
    let sum: u64 = parts.iter().filter_map(|(_, v)| *v).sum();
    let shown: Vec<String> = parts
        .iter()
        .map(|(n, v)| format!("{n} {} MiB", v.map(mib).unwrap_or_else(|| "n/a".into())))
        .collect();
    println!(
        "RSS account: RSS {} MiB = {} (parts sum to {:.1}% of RSS)",
        mib(m.rss_bytes),
        shown.join(" + "),
        100.0 * sum as f64 / m.rss_bytes as f64
    );
}
