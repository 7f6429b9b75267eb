//! The README's main job (run by scripts/main-job.sh after the build): one throwaway datadir
//! (sysbench's 4 x 10,000 rows, prepared by a mariadbd without the shim), then for each backend a
//! mariadbd under `LD_PRELOAD=<shim> MALLOCSHIM_BACKEND=<b> MALLOCSHIM_VERBOSE=1`, sysbench
//! oltp_read_only for MAIN_SECONDS (8) at MAIN_THREADS (4), `kill -USR1` half-way (a JSON and a
//! text dump), a clean shutdown. Prints a short screen (at most ~40 lines with four backends):
//! one table, per backend qps, errors, p95, mariadbd's exit status, the backend the shim's
//! summary named, the RSS account of the dump and `mallocshim diagnose`'s verdict; the files it
//! wrote; what failed; and last one recommendation line. Everything else (the shim's error-log
//! lines, each dump's tables and text dump, diagnose's whole output) goes to
//! `<out>/details.txt`, and each backend's dumps, memlog and error log to `<out>/<backend>/`;
//! `<out>` is MAIN_OUT, else `target/main-job` (beside the `release/` this program is in).
//!
//! Usage: `mallocshim-main-job --shim /abs/libmallocshim.so`. Environment: MAIN_BACKENDS
//! ("glibc jemalloc tcmalloc mimalloc"), MAIN_SECONDS, MAIN_THREADS, MAIN_OUT,
//! MALLOCSHIM_ALLOW_NO_SUMMARY=1 (a missing summary line only warns), MDB_KEEP=1 (keep the
//! instance directory).
//! Exit status 1 when anything went wrong: mariadbd start or exit status, a crash report, sysbench
//! errors, no dump, the shim not mapped, a missing summary line, a summary naming another
//! backend than requested (a silent fallback to glibc), or the files not written; 2 on bad usage
//! or setup.

#[path = "mallocshim-main-job/screen.rs"]
mod screen;

use mallocshim_format::Memory;
use mallocshim_mariadb::{procfs, DumpWaiter, Error, ErrorLog, Instance, Launch, Options, Sysbench};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Row {
    qps: Option<f64>,
    errors: String,
    p95: String,
    exit: String,
    /// The backend the shim's summary line named.
    seen: String,
    /// The mid-load dump (in the kept files) and how long after the signal it came.
    dump: Option<(PathBuf, Duration)>,
    /// Its RSS account, and diagnose's verdict on the run.
    memory: Option<Memory>,
    verdict: String,
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
    let out = out_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
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
    let mut details = String::new();
    let job = Job { inst: &inst, so: &so, secs, threads, allow_no_summary };
    for b in &backends {
        eprintln!("mallocshim-main-job: backend {b}: mariadbd under the shim, sysbench {secs} s");
        let mut problem = |p: String| problems.push(format!("{b}: {p}"));
        let row = one_backend(&job, b, &out.join(b), &mut details, &mut problem)?;
        rows.push((b.clone(), row));
    }
    for (b, row) in rows.iter_mut() {
        if let Some((json, took)) = row.dump.clone() {
            screen::detail_dump(b, &json, took, row, &mut details);
        }
    }
    let details_file = out.join("details.txt");
    if let Err(e) = std::fs::write(&details_file, &details) {
        problems.push(format!("cannot write {}: {e}", details_file.display()));
    }

    screen::print_table(&job, &rows);
    println!(
        "details: {} (the shim's error-log lines, each dump's tables, the text dump, diagnose's whole verdict); files: {}/<backend>/ (JSON and text dumps, memlog.csv, mariadbd.err)",
        details_file.display(),
        out.display()
    );
    println!("took {} s", t_start.elapsed().as_secs());
    let ok = problems.is_empty();
    if !ok {
        println!("FAILED:");
        for p in &problems {
            println!("  {p}");
        }
    }
    println!("{}", screen::recommendation(&rows, ok, secs));
    Ok(ok)
}

/// Where the details and the kept files go: MAIN_OUT, else `main-job/` beside the target
/// directory's `release/` (target/main-job).
fn out_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MAIN_OUT") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent().and_then(Path::parent).map(|t| t.join("main-job")).unwrap_or_else(|| "main-job".into())
}

/// What every backend's run shares.
struct Job<'a> {
    inst: &'a Instance,
    so: &'a Path,
    secs: u64,
    threads: u32,
    allow_no_summary: bool,
}

/// One backend: mariadbd under the shim, sysbench `oltp_read_only` for `secs` seconds with
/// `threads` threads, a dump asked for half-way, then shutdown and the error log's reading. The
/// dumps, memlog and error log are copied into `keep` (the instance is removed at the end).
/// Returns its row; every problem goes to `problem`.
fn one_backend(
    job: &Job,
    b: &str,
    keep: &Path,
    details: &mut String,
    problem: &mut dyn FnMut(String),
) -> Result<Row, Error> {
    let mut row = Row::default();
    let dumpdir = job.inst.subdir(&format!("dumps-{b}"))?;
    let launch = Launch::shim(job.so, b)
        .var("MALLOCSHIM_VERBOSE", "1")
        .var("MALLOCSHIM_DUMP_DIR", dumpdir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json,text")
        .var("MALLOCSHIM_MEMLOG", dumpdir.join("memlog.csv").display().to_string())
        .var("MALLOCSHIM_MEMLOG_INTERVAL_MS", "500");
    let srv = match job.inst.start(&launch) {
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
        Duration::from_secs(job.secs.div_ceil(2)),
        Duration::from_secs(10),
    );
    match srv.sysbench(&Sysbench::new("oltp_read_only", job.threads).time(job.secs)) {
        Ok(r) => {
            if r.exit != 0 {
                problem(format!("sysbench exit status {}", r.exit));
            }
            if r.errors != 0 {
                problem(format!("sysbench errors {}", r.errors));
            }
            row.qps = r.qps;
            row.errors = r.errors.to_string();
            row.p95 = r.p95_ms.map(|p| p.to_string()).unwrap_or_else(|| "n/a".into());
        }
        Err(e) => problem(e.to_string()),
    }
    let dump = waiter.wait();
    if let Err(e) = &dump {
        problem(e.to_string());
    }
    let st = srv.shutdown();
    let kept = copy_files(&dumpdir, keep, st.as_ref().ok().map(|s| s.errlog.as_path()));
    if let Err(e) = &kept {
        problem(format!("cannot keep the run's files in {}: {e}", keep.display()));
    }
    if let (Ok((json, took)), Ok(())) = (dump, kept) {
        row.dump = Some((keep.join(json.file_name().unwrap_or_default()), took));
    }
    let st = match st {
        Ok(st) => st,
        Err(e) => {
            problem(e.to_string());
            return Ok(row);
        }
    };
    row.exit = st.status.to_string();
    if st.status != 0 {
        problem(format!("mariadbd exit status {} (its log: {}/mariadbd.err)", st.status, keep.display()));
    }
    read_errlog(&st.errlog, job, b, &mut row, details, problem);
    Ok(row)
}

/// Copies the files of `from` (dumps, memlog) and the error log into `to`, emptied first.
fn copy_files(from: &Path, to: &Path, errlog: Option<&Path>) -> std::io::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let p = e?.path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap_or_default()))?;
        }
    }
    if let Some(log) = errlog {
        std::fs::copy(log, to.join("mariadbd.err"))?;
    }
    Ok(())
}

/// The server's error log after shutdown: crash reports, a failed preload, the shim's lines
/// (into the details) and its exit summary (into `row`, checked against the backend asked for).
fn read_errlog(
    errlog: &Path,
    job: &Job,
    b: &str,
    row: &mut Row,
    details: &mut String,
    problem: &mut dyn FnMut(String),
) {
    let log = ErrorLog::read(errlog);
    let _ = writeln!(details, "=== {b}: the shim's lines in mariadbd's error log ===");
    let crash = log.crash_lines();
    if !crash.is_empty() {
        problem("crash report in the error log (in the details)".into());
        let _ = writeln!(details, "{}", crash.join("\n"));
    }
    if log.preload_failed() {
        problem(format!("ld.so could not preload {}", job.so.display()));
    }
    for l in log.shim_lines() {
        let _ = writeln!(details, "{l}");
    }
    details.push('\n');
    match log.summary() {
        Some(s) => {
            row.seen = s.backend().unwrap_or("?").to_string();
            if row.seen != b {
                problem(format!("the shim ran backend {} instead (a fallback: see the details)", row.seen));
            }
        }
        None if job.allow_no_summary => eprintln!(
            "mallocshim-main-job: WARNING: no 'mallocshim: summary' line in {} (tolerated: MALLOCSHIM_ALLOW_NO_SUMMARY=1)",
            errlog.display()
        ),
        None => problem("no 'mallocshim: summary' line in the error log".into()),
    }
}
