//! `mallocshim compare`: the allocator comparison runner. For each round and each configuration
//! (a backend under the shim, or preloaded directly with --direct) it starts a throwaway
//! mariadbd/mysqld, runs every sysbench workload at every thread count, and records one CSV line
//! per cell as it ends; then writes the Markdown report and the plots. The server, its datadir,
//! the machine-wide lock, sysbench and the dumps are the MariaDB harness's
//! (`mallocshim_mariadb`: any mariadbd or MySQL mysqld, the work directory given here, every wait
//! ended by Ctrl-C through [`INTERRUPTED`]). After each round the stop rule of `rounds` decides
//! whether another runs (`rounds`: `--rounds N`, `--rounds auto`, `--budget-s`). Modules: cli (flags and
//! checks), measure (sysbench's figures, dumps, RSS sampler), results (CSV, report, plots), charts
//! (the qps chart), spread (ratio intervals), answer (headline lines), rounds (the stop rule), live
//! (`--live` variants set on a running server); beside
//! them, from mallocshim-cli's library, plot (charts, shared with `mallocshim plot`) and secure_write (every file
//! it writes: new, 0600, never through a symlink). It never links the shim: the shim is a cdylib
//! exporting malloc.
//!
//! Long because: the comparison runner's phases (prepare, cells, stop, memlogs) share its run
//! state; `results` and `cli` are already apart.

mod answer;
mod charts;
pub mod cli;
mod config;
mod live;
mod measure;
mod results;
mod rounds;
mod spread;

use crate::secure_write;
use cli::{Config, Plan, Workload};
use mallocshim_mariadb::{Error, Instance, Launch, Options, Server, Sysbench, Tools};
use results::{Cell, RunInfo, ServerRun};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by the Ctrl-C / SIGTERM handler; the harness's stop flag.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

type Res<T> = Result<T, Error>;

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
    /// Why the run stopped adding rounds (set when it did).
    stop: Option<String>,
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

fn prepare(plan: &Plan, inst: &Instance, out: &Path) -> Res<()> {
    let t0 = Instant::now();
    let srv = inst.start(&Launch::plain().label("prepare"))?;
    say(&format!("server pid {} datadir {} (prepare)", srv.pid(), inst.datadir.display()));
    srv.sysbench_prepare()?;
    if let Some(f) = &plan.args.prepare_sql {
        srv.sql_file("sbtest", f, &out.join("logs/prepare-sql.log"))?;
    }
    let stopped = srv.shutdown()?;
    if stopped.status != 0 {
        return Err(Error::Failed(format!(
            "the server of the dataset's preparation exited with status {}; log {}",
            stopped.status,
            stopped.errlog.display()
        )));
    }
    say(&format!(
        "dataset prepared ({} tables x {} rows) in {:.1} s",
        plan.args.tables,
        plan.args.table_size,
        t0.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// How a config's server starts: the allocator preloaded directly (or nothing, for glibc), or
/// the shim writing its dumps and memlog where the runner reads them; then `--env` in order,
/// then the config's `--variant` variables.
fn server_launch(plan: &Plan, cfg: &Config, dumpdir: &Path, memlog: &Path) -> Launch {
    let mut l = if cfg.direct {
        match cli::backend_lib(&cfg.backend) {
            Some((lib, _)) => Launch::preload(lib),
            None => Launch::plain(),
        }
    } else {
        Launch::shim(&plan.shim, &cfg.backend)
            .var("MALLOCSHIM_DUMP_DIR", dumpdir.to_string_lossy())
            .var("MALLOCSHIM_DUMP_FORMATS", "json")
            .var("MALLOCSHIM_MEMLOG", memlog.to_string_lossy())
            .var("MALLOCSHIM_MEMLOG_INTERVAL_MS", plan.args.memlog_interval_ms.to_string())
    };
    let variant = cfg.variant.iter().flat_map(|v| v.envs.iter());
    for (k, v) in plan.envs.iter().chain(variant) {
        l = l.var(k, v);
    }
    l
}

/// One server run: start, every workload x thread count, stop.
fn server_run(
    plan: &Plan,
    inst: &Instance,
    out: &Path,
    st: &mut State,
    round: u32,
    cfg: &Config,
    scripts: &[String],
) -> Res<()> {
    let a = &plan.args;
    let stem = format!("r{round}-{}", cfg.name());
    let dumpdir = inst.subdir(&format!("dumps-{stem}"))?;
    let memlog = out.join("memlog").join(format!("{stem}.csv"));
    let proc_memlog = out.join("memlog").join(format!("{stem}.proc.csv"));
    let srv = inst.start(&server_launch(plan, cfg, &dumpdir, &memlog).label(stem.clone()))?;
    say(&format!("server pid {} datadir {} ({stem})", srv.pid(), inst.datadir.display()));
    let sampler = measure::Sampler::start(
        srv.pid(),
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
        peak_rss: None,
    };
    let mut prev = if cfg.direct {
        None
    } else {
        Some(measure::take_dump(&srv, &dumpdir, &out.join("dumps").join(format!("{stem}-start.json")))?)
    };
    // The `--live` variants of this backend run on this server, beside each of its cells.
    let lives: Vec<&Config> = if cfg.direct || cfg.variant.is_some() {
        Vec::new()
    } else {
        plan.configs.iter().filter(|c| c.backend == cfg.backend && c.is_live()).collect()
    };
    let prog = if lives.is_empty() { None } else { Some(live::command().map_err(Error::Failed)?) };
    for (wi, w) in plan.workloads.iter().enumerate() {
        for &t in &a.threads {
            // The backend's own cell first in odd rounds, last in even ones: a drift within the
            // server run falls on both sides alike.
            let mut order: Vec<&Config> = std::iter::once(cfg).chain(lives.iter().copied()).collect();
            if round.is_multiple_of(2) {
                order.reverse();
            }
            for c in order {
                let applied = match (&prog, c.variant.as_ref().filter(|v| v.live)) {
                    (Some(p), Some(v)) => Some(live::apply(p, srv.pid(), v).map_err(Error::Failed)?),
                    _ => None,
                };
                let cell = ServerCell { plan, srv: &srv, out, round, cfg: c, w, t, script: &scripts[wi] };
                let res = cell.run(st, &dumpdir, &mut prev, &mut run);
                if let Some(a) = applied {
                    a.restore().map_err(Error::Failed)?;
                }
                res?;
            }
        }
    }
    drop(sampler);
    run.exit = stop_server(srv, st, &stem);
    run.memlog_source = settle_memlog(st, cfg, &stem, &memlog, &proc_memlog);
    run.peak_rss =
        mallocshim_format::memlog::read(&memlog).ok().and_then(|r| r.iter().map(|x| x.rss_bytes).max());
    st.runs.push(run);
    Ok(())
}

/// One cell of a server run: the configuration it is recorded as (the server's own, or a
/// `--live` variant set on it), its workload and thread count.
struct ServerCell<'a, 's> {
    plan: &'a Plan,
    srv: &'a Server<'s>,
    out: &'a Path,
    round: u32,
    cfg: &'a Config,
    w: &'a Workload,
    t: u32,
    script: &'a str,
}

impl ServerCell<'_, '_> {
    /// Runs the cell, takes the shim's dump after it (allocations per query against the dump
    /// before, `prev`), appends its CSV line and counts it done.
    fn run(
        &self,
        st: &mut State,
        dumpdir: &Path,
        prev: &mut Option<mallocshim_format::dump::Dump>,
        run: &mut ServerRun,
    ) -> Res<()> {
        let (round, cfg, w, t, out) = (self.round, self.cfg, self.w, self.t, self.out);
        let cellname = format!("r{round}-{}-{}-t{t}", cfg.name(), w.name());
        announce_cell(st, round, cfg, w, t);
        let mut cell = measure_cell(self.plan, self.srv, out, round, cfg, w, t, self.script, &cellname)?;
        if let Some(p) = prev.as_ref() {
            let rel = format!("dumps/{cellname}.json");
            let d = measure::take_dump(self.srv, dumpdir, &out.join(&rel))?;
            if cell.queries > 0 {
                let per_query = |n: u64| Some(r3(n as f64 / cell.queries as f64));
                cell.allocs_per_query = per_query(d.allocs().saturating_sub(p.allocs()));
                cell.frees_per_query = per_query(d.count("free").saturating_sub(p.count("free")));
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
            *prev = Some(d);
        }
        st.csv.append(&cell).map_err(Error::Failed)?;
        st.done += 1;
        say(&format!(
            "cell {}/{} done: qps {:.1} tps {:.1} p95 {:.2} ms errors {} cpu/query {:.1} us",
            st.done, st.total, cell.qps, cell.tps, cell.p95_ms, cell.errors, cell.cpu_us_per_query
        ));
        st.cells.push(cell);
        Ok(())
    }
}

/// One line: the cell about to run, with the elapsed time and the estimate of what is left.
fn announce_cell(st: &mut State, round: u32, cfg: &Config, w: &Workload, t: u32) {
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
}

/// Runs one cell's sysbench (after its warm-up) on the running server and returns its figures:
/// throughput, latency, the server's CPU time over the run and its RSS after it (the dump's
/// figures are the caller's).
#[allow(clippy::too_many_arguments)]
fn measure_cell(
    plan: &Plan,
    srv: &Server,
    out: &Path,
    round: u32,
    cfg: &Config,
    w: &Workload,
    t: u32,
    script: &str,
    cellname: &str,
) -> Res<Cell> {
    let a = &plan.args;
    // The harness gives every run its time limit (3 x --time + 2 min) and Ctrl-C.
    let sb = |secs: u32, log: PathBuf| {
        let mut s = Sysbench::new(script.to_string(), t).time(secs as u64).log(log);
        s.extra = a.sysbench_opts.clone();
        srv.sysbench(&s)
    };
    if a.warmup > 0 {
        sb(a.warmup, out.join("logs").join(format!("{cellname}.warmup.txt")))?;
    }
    let log = out.join("logs").join(format!("{cellname}.sysbench.txt"));
    let cpu0 = mallocshim_proc::cpu_seconds(srv.pid())
        .ok_or_else(|| format!("cannot read /proc/{}/stat", srv.pid()))?;
    let report = sb(a.time, log.clone())?;
    let cpu1 = mallocshim_proc::cpu_seconds(srv.pid()).ok_or_else(|| {
        format!("server pid {} is gone after the cell (log {})", srv.pid(), srv.errlog().display())
    })?;
    let r = measure::figures(&report).map_err(|e| format!("{cellname}: {e}; {}", log.display()))?;
    let (rss, _) = mallocshim_proc::statm(srv.pid()).unwrap_or((0, 0));
    Ok(Cell {
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
        cpu_us_per_query: if r.queries > 0 { r3((cpu1 - cpu0) * 1e6 / r.queries as f64) } else { 0.0 },
        allocs_per_query: None,
        frees_per_query: None,
        rss_bytes: rss,
        backend_allocated_bytes: None,
        dump: String::new(),
    })
}

/// Shuts the server down; returns the run's exit line (a non-zero status or an error is noted).
fn stop_server(srv: Server, st: &mut State, stem: &str) -> String {
    match srv.shutdown() {
        Ok(s) => {
            if s.status != 0 {
                st.notes.push(format!(
                    "{stem}: server exited with status {}; log {}",
                    s.status,
                    s.errlog.display()
                ));
            }
            format!("exit status: {}", s.status)
        }
        Err(e) => {
            st.notes.push(format!("{stem}: {e}"));
            e.to_string()
        }
    }
}

/// Keeps the shim's memlog when it wrote one, otherwise the runner's /proc sampling (moved to
/// the memlog's name); returns which it is.
fn settle_memlog(st: &mut State, cfg: &Config, stem: &str, memlog: &Path, proc_memlog: &Path) -> String {
    if cfg.direct {
        return "runner (/proc/PID/statm)".into();
    }
    if mallocshim_format::memlog::read(memlog).map(|r| !r.is_empty()).unwrap_or(false) {
        let _ = std::fs::remove_file(proc_memlog);
        return "shim (MALLOCSHIM_MEMLOG)".into();
    }
    if let Err(e) = secure_write::move_into(proc_memlog, memlog) {
        st.notes.push(format!("{stem}: memlog: {e}"));
    }
    "runner (/proc/PID/statm; the shim wrote no memlog)".into()
}

fn run(plan: &Plan, out: &Path, workdir: &Path, st: &mut State) -> Res<()> {
    let a = &plan.args;
    let maxc = a.threads.iter().copied().max().unwrap_or(1) + 50;
    let inst = Instance::create(Options {
        buffer_pool: a.buffer_pool.clone(),
        sb_tables: a.tables,
        sb_rows: a.table_size,
        start_timeout: Duration::from_secs(120),
        stop_timeout: Duration::from_secs(300),
        extra_opts: a.mysqld_opts.clone(),
        keep: false,
        server: Some(plan.mysqld.clone()),
        dir: Some(workdir.to_path_buf()),
        max_connections: maxc.max(200),
        stop: Some(&INTERRUPTED),
        run_timeout: Duration::from_secs(24 * 3600),
    })?;
    prepare(plan, &inst, out)?;
    let scripts: Vec<String> =
        plan.workloads.iter().map(|w| workload_script(w, out)).collect::<Result<_, _>>()?;
    // A `--live` variant has no server of its own: it runs inside its backend's.
    let starts: Vec<&Config> = plan.configs.iter().filter(|c| !c.is_live()).collect();
    let n = starts.len();
    let (policy, rounds_start) = (a.policy(), Instant::now());
    for round in 1.. {
        let off = (round as usize - 1) % n;
        for i in 0..n {
            let cfg = starts[(i + off) % n];
            server_run(plan, &inst, out, st, round, cfg, &scripts)?;
        }
        let heads = answer::headlines(&plan.backends(), &plan.variant_names(), a.direct, &st.cells, &st.runs);
        // The widest headline half-width; None while one is unknown; 0 with nothing to compare.
        let widest = heads.iter().try_fold(0f64, |w, h| h.widest_pct().map(|x| w.max(x)));
        let elapsed = st.started.elapsed().as_secs_f64();
        let stop = rounds::stop_after(&policy, round, elapsed, rounds_start.elapsed().as_secs_f64(), widest);
        if let Some(stop) = stop {
            st.stop = Some(format!("stopped after {round} round(s): {}", stop.render(&policy)));
            break;
        }
        if policy.fixed.is_none() {
            let w = widest.map(|w| format!("±{w:.1}%")).unwrap_or_else(|| "unknown".into());
            say(&format!(
                "round {round} done: widest headline interval {w}, target ±{:.1}%",
                policy.target_pct
            ));
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
    let tools = match Tools::for_server(&plan.mysqld) {
        Ok(t) => t,
        Err(e) => {
            say(&e.to_string());
            return ExitCode::from(2);
        }
    };
    let (out, workdir, csv) = match install_interrupt_handler().and_then(|()| create_outputs(&plan)) {
        Ok(x) => x,
        Err(e) => {
            say(&e);
            return ExitCode::from(1);
        }
    };
    // With --rounds auto, the cap's count (the estimate shrinks when it stops earlier).
    let total =
        plan.args.max_rounds() as usize * plan.configs.len() * plan.workloads.len() * plan.args.threads.len();
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
        stop: None,
    };
    say(&format!("{total} cells of {} s; output in {}", plan.args.time, out.display()));
    let res = run(&plan, &out, &workdir, &mut st);
    finish(&plan, &info, &out, &workdir, &st, res)
}

/// Ctrl-C and SIGTERM set [`INTERRUPTED`] (the harness's stop flag), with one line.
fn install_interrupt_handler() -> Result<(), String> {
    ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::SeqCst);
        eprintln!(
            "mallocshim compare: interrupted: stopping sysbench and the server, keeping the finished cells"
        );
    })
    .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))
}

/// Creates --out and its subdirectories, the private work directory and cells.csv; returns
/// the output directory (canonical), the work directory and the CSV writer.
fn create_outputs(plan: &Plan) -> Result<(PathBuf, PathBuf, results::CsvWriter), String> {
    let out = plan.args.out.clone();
    for d in ["", "memlog", "dumps", "logs"] {
        std::fs::create_dir_all(out.join(d))
            .map_err(|e| format!("cannot create {}: {e}", out.join(d).display()))?;
    }
    let out = out.canonicalize().unwrap_or(out);
    let workdir: PathBuf = match &plan.args.workdir {
        Some(w) => w.clone(),
        None => PathBuf::from(format!("/tmp/mallocshim-compare.{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&workdir);
    // The work directory (a predictable name in /tmp by default) is created new, mode 0700: its
    // server logs, datadir and dumps are then ours alone.
    create_private_dir(&workdir)?;
    let csv = results::CsvWriter::create(&out.join("cells.csv"))?;
    Ok((out, workdir, csv))
}

/// After the run (complete, interrupted or failed): removes or keeps the work directory, writes
/// the report from the cells measured, and returns the exit status (0, 1, or 130 interrupted).
fn finish(plan: &Plan, info: &RunInfo, out: &Path, workdir: &Path, st: &State, res: Res<()>) -> ExitCode {
    let status = match &res {
        Ok(()) => format!("complete ({})", st.stop.as_deref().unwrap_or("")),
        Err(Error::Interrupted) => format!("interrupted after {} of {} cells", st.done, st.total),
        Err(e) => format!("failed after {} of {} cells: {e}", st.done, st.total),
    };
    if !plan.args.keep_workdir {
        let _ = std::fs::remove_dir_all(workdir);
    } else {
        say(&format!("work directory kept: {}", workdir.display()));
    }
    let rep =
        results::write_report(out, plan, info, &st.cells, &st.runs, &st.notes, &status, st.started.elapsed());
    if let Err(e) = &rep {
        say(&format!("report: {e}"));
    }
    let heads =
        answer::headlines(&plan.backends(), &plan.variant_names(), plan.args.direct, &st.cells, &st.runs);
    if let Some(s) = &st.stop {
        say(s);
    }
    for h in &heads {
        say(&format!("answer: {}", h.render(plan.args.target_pct)));
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
        Err(e) => {
            say(&e.to_string());
            ExitCode::from(1)
        }
    }
}
