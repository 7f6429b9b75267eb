//! `mallocshim compare`: the allocator comparison runner. For each round and each configuration
//! (a backend under the shim, or preloaded directly with --direct) it starts a throwaway
//! mariadbd/mysqld, runs every sysbench workload at every thread count, and records one CSV line
//! per cell as it ends; then writes the Markdown report and the plots. Modules: cli (flags and
//! checks), server (processes, datadir, lock), measure (sysbench, /proc, dumps, RSS sampler),
//! results (CSV, report, plots); beside them in the crate, plot (charts, shared with
//! `mallocshim plot`) and secure_write (every file it writes: new, 0600, never through a
//! symlink). It never links the shim: the shim is a cdylib exporting malloc.

pub mod cli;
mod measure;
mod results;
mod server;
mod spread;

use crate::secure_write;
use cli::{Config, Plan, Workload};
use results::{Cell, RunInfo, ServerRun};
use server::{Error, Instance, Res, INTERRUPTED};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn say(msg: &str) {
    eprintln!("mallocshim compare: {msg}");
}

/// Rounded to 3 decimals, as written to cells.csv, so the report computes from the CSV's values.
fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Everything measured so far (kept when the run stops early).
struct State {
    cells: Vec<Cell>,
    runs: Vec<ServerRun>,
    csv: results::CsvWriter,
    notes: Vec<String>,
    started: Instant,
    /// When the first cell began (the ETA leaves out the datadir and dataset preparation).
    first_cell: Option<Instant>,
    done: usize,
    total: usize,
}

fn sysbench_base(plan: &Plan, inst: &Instance) -> Vec<String> {
    let a = &plan.args;
    vec![
        "--db-driver=mysql".into(),
        format!("--mysql-socket={}", inst.socket.display()),
        "--mysql-user=root".into(),
        "--mysql-password=".into(),
        "--mysql-db=sbtest".into(),
        format!("--tables={}", a.tables),
        format!("--table-size={}", a.table_size),
    ]
}

/// The lua script sysbench runs for a workload (generated for an SQL file).
fn workload_script(w: &Workload, out: &Path) -> Result<String, String> {
    Ok(match w {
        Workload::Builtin(s) => s.clone(),
        Workload::Lua(p) => p.to_string_lossy().into_owned(),
        Workload::Sql(p) => {
            let sql = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            let lua = results::sql_to_lua(&sql).map_err(|e| format!("{}: {e}", p.display()))?;
            let dst = out.join("logs").join(format!("{}.lua", w.name()));
            secure_write::write(&dst, lua.as_bytes()).map_err(|e| e.to_string())?;
            dst.to_string_lossy().into_owned()
        }
    })
}

fn prepare(plan: &Plan, inst: &mut Instance, out: &Path) -> Res<()> {
    let t0 = Instant::now();
    let mut srv = inst.start(&[], "prepare")?;
    inst.sql("", Some("CREATE DATABASE IF NOT EXISTS sbtest"), None, &out.join("logs/create-db.log"))?;
    let mut c = Command::new("sysbench");
    mallocshim_mariadb::clean_env(&mut c);
    c.arg("oltp_read_only")
        .args(sysbench_base(plan, inst))
        .arg(format!("--threads={}", plan.args.tables.min(4)))
        .arg("prepare");
    let log = out.join("logs/sysbench-prepare.log");
    let st = server::run_logged(c, &log, "sysbench prepare", Duration::from_secs(24 * 3600))?;
    if !st.success() {
        return Err(Error::Failed(format!("sysbench prepare failed ({st}):\n{}", server::tail(&log, 20))));
    }
    if let Some(f) = &plan.args.prepare_sql {
        inst.sql("sbtest", None, Some(f), &out.join("logs/prepare-sql.log"))?;
    }
    srv.stop(Duration::from_secs(300)).map_err(Error::Failed)?;
    say(&format!(
        "dataset prepared ({} tables x {} rows) in {:.1} s",
        plan.args.tables,
        plan.args.table_size,
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn server_env(plan: &Plan, cfg: &Config, dumpdir: &Path, memlog: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    if cfg.direct {
        if let Some((lib, _)) = cli::backend_lib(&cfg.backend) {
            env.push(("LD_PRELOAD".into(), lib.into()));
        }
    } else {
        env.push(("LD_PRELOAD".into(), plan.shim.to_string_lossy().into_owned()));
        env.push(("MALLOCSHIM_BACKEND".into(), cfg.backend.clone()));
        env.push(("MALLOCSHIM_DUMP_DIR".into(), dumpdir.to_string_lossy().into_owned()));
        env.push(("MALLOCSHIM_DUMP_FORMATS".into(), "json".into()));
        env.push(("MALLOCSHIM_MEMLOG".into(), memlog.to_string_lossy().into_owned()));
        env.push(("MALLOCSHIM_MEMLOG_INTERVAL_MS".into(), plan.args.memlog_interval_ms.to_string()));
    }
    env.extend(plan.envs.iter().cloned());
    env
}

/// One server run: start, every workload x thread count, stop.
fn server_run(
    plan: &Plan,
    inst: &mut Instance,
    out: &Path,
    st: &mut State,
    round: u32,
    cfg: &Config,
    scripts: &[String],
) -> Res<()> {
    let a = &plan.args;
    let stem = format!("r{round}-{}", cfg.name());
    let dumpdir = inst.dir.join(format!("dumps-{stem}"));
    std::fs::create_dir_all(&dumpdir).map_err(|e| format!("cannot create {}: {e}", dumpdir.display()))?;
    let memlog = out.join("memlog").join(format!("{stem}.csv"));
    let proc_memlog = out.join("memlog").join(format!("{stem}.proc.csv"));
    let env = server_env(plan, cfg, &dumpdir, &memlog);
    let mut srv = inst.start(&env, &stem)?;
    let sampler = measure::Sampler::start(
        srv.pid,
        if cfg.direct { memlog.clone() } else { proc_memlog.clone() },
        Duration::from_millis(a.memlog_interval_ms),
    )?;
    let mut run = ServerRun {
        round,
        config: cfg.name(),
        memlog: memlog.clone(),
        memlog_source: String::new(),
        last_dump: None,
        exit: String::new(),
    };
    let mut prev = if cfg.direct {
        None
    } else {
        Some(measure::take_dump(srv.pid, &dumpdir, &out.join("dumps").join(format!("{stem}-start.json")))?)
    };
    let mut base = sysbench_base(plan, inst);
    base.extend(a.sysbench_opts.iter().cloned());
    for (wi, w) in plan.workloads.iter().enumerate() {
        for &t in &a.threads {
            let cellname = format!("{stem}-{}-t{t}", w.name());
            let elapsed = st.started.elapsed();
            let first = *st.first_cell.get_or_insert_with(Instant::now);
            let eta = if st.done > 0 {
                first.elapsed().mul_f64((st.total - st.done) as f64 / st.done as f64)
            } else {
                Duration::ZERO
            };
            say(&format!(
                "cell {}/{}: round {round} {} {} threads {t} (elapsed {}, eta {})",
                st.done + 1,
                st.total,
                cfg.name(),
                w.name(),
                hms(elapsed),
                if st.done > 0 { hms(eta) } else { "?".into() }
            ));
            let sb = |secs: u32, log: &Path| -> Res<std::process::ExitStatus> {
                let mut c = Command::new("sysbench");
                mallocshim_mariadb::clean_env(&mut c);
                c.arg(&scripts[wi]).args(&base).args([
                    format!("--threads={t}"),
                    format!("--time={secs}"),
                    "--events=0".into(),
                    "--report-interval=0".into(),
                    "--histogram=off".into(),
                    "--percentile=95".into(),
                    "run".into(),
                ]);
                server::run_logged(c, log, "sysbench", Duration::from_secs(secs as u64 * 3 + 120))
            };
            if a.warmup > 0 {
                sb(a.warmup, &out.join("logs").join(format!("{cellname}.warmup.txt")))?;
            }
            let log = out.join("logs").join(format!("{cellname}.sysbench.txt"));
            let cpu0 = mallocshim_mariadb::procfs::cpu_seconds(srv.pid)
                .ok_or_else(|| format!("cannot read /proc/{}/stat", srv.pid))?;
            let status = sb(a.time, &log)?;
            let cpu1 = mallocshim_mariadb::procfs::cpu_seconds(srv.pid).ok_or_else(|| {
                format!("server pid {} is gone after the cell (log {})", srv.pid, srv.errlog.display())
            })?;
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let mut r = measure::parse_sysbench(&text).map_err(|e| {
                format!("{cellname}: {e} ({status}); {}:\n{}", log.display(), server::tail(&log, 15))
            })?;
            if !status.success() {
                r.errors = r.errors.max(1);
            }
            let (rss, _) = mallocshim_mariadb::procfs::statm(srv.pid).unwrap_or((0, 0));
            let mut cell = Cell {
                round,
                config: cfg.name(),
                backend: cfg.backend.clone(),
                mode: cfg.mode().into(),
                workload: w.name(),
                threads: t,
                seconds: a.time,
                qps: r.qps,
                tps: r.tps,
                p95_ms: r.p95_ms,
                errors: r.errors,
                queries: r.queries,
                cpu_s: r3(cpu1 - cpu0),
                cpu_us_per_query: if r.queries > 0 {
                    r3((cpu1 - cpu0) * 1e6 / r.queries as f64)
                } else {
                    0.0
                },
                allocs_per_query: None,
                frees_per_query: None,
                rss_bytes: rss,
                backend_allocated_bytes: None,
                dump: String::new(),
            };
            if let Some(p) = prev.as_ref() {
                let rel = format!("dumps/{cellname}.json");
                let d = measure::take_dump(srv.pid, &dumpdir, &out.join(&rel))?;
                if r.queries > 0 {
                    cell.allocs_per_query =
                        Some(r3(d.allocs().saturating_sub(p.allocs()) as f64 / r.queries as f64));
                    cell.frees_per_query =
                        Some(r3(d.count("free").saturating_sub(p.count("free")) as f64 / r.queries as f64));
                }
                cell.backend_allocated_bytes = Some(d.memory.backend_allocated_bytes);
                if d.backend != cfg.backend {
                    st.notes.push(format!(
                        "{cellname}: the shim ran backend {} instead of {} (fallback)",
                        d.backend, cfg.backend
                    ));
                }
                cell.dump = rel.clone();
                run.last_dump = Some(out.join(&rel));
                prev = Some(d);
            }
            st.csv.append(&cell).map_err(Error::Failed)?;
            st.done += 1;
            say(&format!(
                "cell {}/{} done: qps {:.1} tps {:.1} p95 {:.2} ms errors {} cpu/query {:.1} us",
                st.done, st.total, cell.qps, cell.tps, cell.p95_ms, cell.errors, cell.cpu_us_per_query
            ));
            st.cells.push(cell);
        }
    }
    drop(sampler);
    run.exit = match srv.stop(Duration::from_secs(300)) {
        Ok(s) => s,
        Err(e) => {
            st.notes.push(format!("{stem}: {e}"));
            e
        }
    };
    // The shim's memlog when it wrote one; otherwise the runner's /proc sampling.
    if cfg.direct {
        run.memlog_source = "runner (/proc/PID/statm)".into();
    } else if mallocshim_format::memlog::read(&memlog).map(|r| !r.is_empty()).unwrap_or(false) {
        run.memlog_source = "shim (MALLOCSHIM_MEMLOG)".into();
        let _ = std::fs::remove_file(&proc_memlog);
    } else {
        run.memlog_source = "runner (/proc/PID/statm; the shim wrote no memlog)".into();
        if let Err(e) = secure_write::move_into(&proc_memlog, &memlog) {
            st.notes.push(format!("{stem}: memlog: {e}"));
        }
    }
    st.runs.push(run);
    Ok(())
}

fn run(plan: &Plan, tools: server::Tools, out: &Path, workdir: &Path, st: &mut State) -> Res<()> {
    let _lock = server::take_lock()?;
    let maxc = plan.args.threads.iter().copied().max().unwrap_or(1) + 50;
    let mut inst = Instance::create(
        workdir.to_path_buf(),
        tools,
        &plan.args.buffer_pool,
        maxc.max(200),
        &plan.args.mysqld_opts,
    )?;
    prepare(plan, &mut inst, out)?;
    let scripts: Vec<String> =
        plan.workloads.iter().map(|w| workload_script(w, out)).collect::<Result<_, _>>()?;
    let n = plan.configs.len();
    for round in 1..=plan.args.rounds {
        let off = (round as usize - 1) % n;
        for i in 0..n {
            let cfg = &plan.configs[(i + off) % n];
            server_run(plan, &mut inst, out, st, round, cfg, &scripts)?;
        }
    }
    Ok(())
}

/// Creates `dir` (its parents as usual) as a new directory of mode 0700; an existing one (that
/// could not be removed, e.g. another user's) is an error.
fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "work directory {} exists and could not be removed (not ours?): choose another --workdir",
                dir.display()
            )
        } else {
            format!("cannot create {}: {e}", dir.display())
        }
    })
}

/// Runs `mallocshim compare` with its parsed arguments; the exit status as documented in --help.
pub fn main(args: cli::Args) -> ExitCode {
    let cmdline: Vec<String> = std::env::args().collect();
    let plan = match cli::check(args) {
        Ok(p) => p,
        Err(e) => {
            say(&e);
            return ExitCode::from(2);
        }
    };
    let tools = match server::tools(&plan.mysqld) {
        Ok(t) => t,
        Err(e) => {
            say(&e);
            return ExitCode::from(2);
        }
    };
    if let Err(e) = ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::SeqCst);
        eprintln!(
            "mallocshim compare: interrupted: stopping sysbench and the server, keeping the finished cells"
        );
    }) {
        say(&format!("cannot install the Ctrl-C handler: {e}"));
        return ExitCode::from(1);
    }
    let out = plan.args.out.clone();
    for d in ["", "memlog", "dumps", "logs"] {
        if let Err(e) = std::fs::create_dir_all(out.join(d)) {
            say(&format!("cannot create {}: {e}", out.join(d).display()));
            return ExitCode::from(1);
        }
    }
    let out = out.canonicalize().unwrap_or(out);
    let workdir: PathBuf = match &plan.args.workdir {
        Some(w) => w.clone(),
        None => PathBuf::from(format!("/tmp/mallocshim-compare.{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&workdir);
    // The work directory (a predictable name in /tmp by default) is created new, mode 0700: its
    // server logs, datadir and dumps are then ours alone.
    if let Err(e) = create_private_dir(&workdir) {
        say(&e);
        return ExitCode::from(1);
    }
    let csv = match results::CsvWriter::create(&out.join("cells.csv")) {
        Ok(c) => c,
        Err(e) => {
            say(&e);
            return ExitCode::from(1);
        }
    };
    let total =
        plan.args.rounds as usize * plan.configs.len() * plan.workloads.len() * plan.args.threads.len();
    let info = RunInfo::collect(&plan, &tools.version, &cmdline);
    let mut st = State {
        cells: Vec::new(),
        runs: Vec::new(),
        csv,
        notes: Vec::new(),
        started: Instant::now(),
        first_cell: None,
        done: 0,
        total,
    };
    say(&format!("{total} cells of {} s; output in {}", plan.args.time, out.display()));
    let res = run(&plan, tools, &out, &workdir, &mut st);
    let status = match &res {
        Ok(()) => "complete".to_string(),
        Err(Error::Interrupted) => format!("interrupted after {} of {} cells", st.done, st.total),
        Err(Error::Failed(e)) => format!("failed after {} of {} cells: {e}", st.done, st.total),
    };
    if !plan.args.keep_workdir {
        let _ = std::fs::remove_dir_all(&workdir);
    } else {
        say(&format!("work directory kept: {}", workdir.display()));
    }
    let rep = results::write_report(
        &out,
        &plan,
        &info,
        &st.cells,
        &st.runs,
        &st.notes,
        &status,
        st.started.elapsed(),
    );
    if let Err(e) = &rep {
        say(&format!("report: {e}"));
    }
    match res {
        Ok(()) => {
            say(&format!("done in {}: {}", hms(st.started.elapsed()), out.join("report.md").display()));
            if rep.is_err() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(Error::Interrupted) => {
            say(&format!("{status}; cells in {}", out.join("cells.csv").display()));
            ExitCode::from(130)
        }
        Err(Error::Failed(e)) => {
            say(&e);
            ExitCode::from(1)
        }
    }
}
